# Config validation, wildcard constraints, the run table and input/param helpers; no rules here.
import itertools
import os
import re

from snakemake.utils import validate


from diversed.training.draft import DraftRecipe
from diversed.decoding.engine import VERIFIERS
from diversed.runs.sweep import FAMILIES as SWEPT_FAMILIES, grid, point_name
from diversed.decoding.sources import hub_model, hub_sources, hub_task
from diversed.tasks import registry
from diversed.training.train import DistillConfig, HeadTrainConfig


validate(config, schema="../schemas/config.schema.yaml", set_default=True)
if unknown := sorted(set(config["tasks"]) - set(registry())):
    raise ValueError(f"unknown task(s) {', '.join(unknown)} in the config; allowed: {', '.join(sorted(registry()))}")
if unknown := [m for m in config["methods"] if m not in (*VERIFIERS, "finetuned")]:
    raise ValueError(f"unknown method(s) {', '.join(unknown)} in the config; allowed: "
                     f"{', '.join(VERIFIERS)}, finetuned")
# Training settings the config leaves out take the command line's defaults, which live in the config dataclasses.
config["train_head"] = {k: getattr(HeadTrainConfig, k) for k in ("epochs", "batch_size", "lr", "acceptance_term",
                        "acceptance_weight", "rollout", "temperature", "mixing", "reward", "max_new_tokens")} | config["train_head"]
config["distill"] = {k: getattr(DistillConfig, k) for k in ("epochs", "lr", "max_new_tokens", "finetune")} | config["distill"]

EXPERIMENT = config["experiment"]
# engine.Execution of every decode and training job, as flags (visible in each rule's shell command)
EXECUTION = f"--capture {config['execution']['capture']}" + ("" if config["execution"]["fastpath"] else " --no-fastpath")
PAIRS = config["pairs"]
TASKS = config["tasks"]
SWEEP = config["sweep"]
LAMBDA = config["lambda_sweep"]
if unknown := sorted(set(LAMBDA["tasks"]) - set(config["tasks"])):
    raise ValueError(f"lambda_sweep task(s) {', '.join(unknown)} are not among the config's tasks")
if LAMBDA["tasks"] and not LAMBDA["values"]:
    raise ValueError("lambda_sweep names tasks but no values: give the lambdas to choose among")
LAMBDA_TASKS = LAMBDA["tasks"]  # their heads: the one sweep_lambda chooses on dev; the other tasks' train_head's
BASELINES = ("autoregressive", "draft")  # one model decoding alone: no draft length K
SPECULATIVE = [m for m in config["methods"] if m not in BASELINES]
FAMILIES = [m for m in config["methods"] if m in SWEPT_FAMILIES]  # relaxed verifiers at the knob their sweep chose
CHOSEN = [m for m in SPECULATIVE if m == "fixed" or m in FAMILIES]  # methods whose setting a sweep chooses
if missing := [f for f in FAMILIES if f not in SWEEP["families"]]:
    raise ValueError(f"method(s) {', '.join(missing)} need their knob values in sweep.families (their sweep "
                     "chooses the setting)")
TRANSFER_HEADS = sorted({t["head"] for t in config["transfer"]})  # DIVERSED with another task's head: dynamic@head


def temperature(T):
    """T as it appears in every path and on every command line: 1 and 1.0 are one run."""
    return str(float(T))


NUMBER = r"\d+(\.\d+)?(e-\d+)?"  # a float as str() writes it: 0.1, 1.0, 1e-05


def one_of(names):
    return "|".join(re.escape(n) for n in names) or "(?!)"  # (?!): matches nothing


wildcard_constraints:
    pair=one_of(PAIRS),
    task=one_of(TASKS),
    head=one_of(TRANSFER_HEADS or ["-"]),
    T=NUMBER,
    K=r"\d+",
    lam=NUMBER,
    seed=r"\d+",


RUN = "results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}"
BASELINE_RUN = "results/runs/{pair}/{task}/{baseline}/T{T}-s{seed}"
TIMING_RUN = "results/timing/{pair}/{task}/{method}/T{T}-K{K}"  # batch 1, the first n_timing eval prompts
TIMING_BASELINE = "results/timing/{pair}/{task}/{baseline}/T{T}"
TIMING_SEED = config["seeds"][0]
SWEEP_DIR = "results/sweeps/{pair}/{task}/T{T}-K{K}"
SWEEP_TIMING = "results/sweep_timing/{pair}/{task}/T{T}-K{K}"  # batch 1, a sweep's points on the first n_timing dev prompts
LAMBDA_DIR = "results/lambda/{pair}/{task}"  # a lambda sweep: dev runs, lambda.csv, choice.json
LAMBDA_HEAD = "results/lambda/{pair}/{task}/heads/lambda{lam}"  # beside the sweep's runs, lambda{lam}/


def run_dir(pair, task, method, T, K, seed):
    """A decoding run's folder; the baselines' have no K."""
    if method in BASELINES:
        return BASELINE_RUN.format(pair=pair, task=task, baseline=method, T=temperature(T), seed=seed)
    return RUN.format(pair=pair, task=task, method=method, T=temperature(T), K=K, seed=seed)


def runs():
    """The run table: every method at every (pair, task, T, seed), the speculative ones at every K, plus the
    cross-task transfer runs (DIVERSED with another task's head, at the transfer temperature)."""
    dirs = []
    for pair, task, method, T in itertools.product(PAIRS, TASKS, config["methods"], config["temperatures"]):
        for K, seed in itertools.product([None] if method in BASELINES else config["K"], config["seeds"]):
            dirs.append(run_dir(pair, task, method, T, K, seed))
    for pair, t, K, seed in itertools.product(PAIRS, config["transfer"], config["K"], config["seeds"]):
        dirs.append(run_dir(pair, t["eval"], f"dynamic@{t['head']}", config["transfer_temperature"], K, seed))
    return dirs


def timing_runs():
    """The timing runs: every method at every (pair, task, T), the speculative ones at every K, one seed."""
    return [timing_dir(pair, task, method, T, K)
            for pair, task, method, T in itertools.product(PAIRS, TASKS, config["methods"], config["temperatures"])
            for K in ([None] if method in BASELINES else config["K"])]


def timing_dir(pair, task, method, T, K):
    """A timing run's folder (T: a number, or the {T} wildcard); the baselines' have no K."""
    T = T if T == "{T}" else temperature(T)
    if method in BASELINES:
        return TIMING_BASELINE.format(pair=pair, task=task, baseline=method, T=T)
    return TIMING_RUN.format(pair=pair, task=task, method=method, T=T, K=K)


def timing_outputs(name):
    """A file of every run of time's (pair, task, T)."""
    return [f"{timing_dir('{pair}', '{task}', m, '{T}', K)}/{name}" for m in config["methods"]
            for K in ([None] if m in BASELINES else config["K"])]


def sweeps():
    """The sweeps: the fixed w's and each family's choice per (pair, task, T, K), and the acceptance-vs-w figure's
    sweeps."""
    dirs = set()
    if CHOSEN:
        dirs |= {SWEEP_DIR.format(pair=pair, task=task, T=temperature(T), K=K)
                 for pair, task, T, K in itertools.product(PAIRS, TASKS, config["temperatures"], config["K"])}
    dirs |= {SWEEP_DIR.format(pair=pair, task=task, T=temperature(SWEEP["figure_temperature"]), K=K)
             for pair, task, K in itertools.product(PAIRS, SWEEP["figure_tasks"], SWEEP["figure_K"])}
    return sorted(dirs)


HUB = hub_sources(config)  # the hub models and hub datasets this config reads
SOURCES = "resources/sources.json"  # fetch_sources' record: every HUB source is in the Hugging Face cache


# the fronts' references each sweep decodes beside its points, where methods have them
SWEEP_HEAD, SWEEP_TARGET = "dynamic" in SPECULATIVE, "autoregressive" in config["methods"]


def sweep_points():
    """A sweep's points as (folder name, RunConfig changes): strict, the w grid, each family's knobs of methods, then
    DIVERSED (head: the task's, given by the job) and the target alone where methods have them."""
    points = grid(SWEEP["weights"], SWEEP["mixings"], {f: SWEEP["families"][f] for f in FAMILIES},
                  SWEEP["deferrals"], head="{head}" if SWEEP_HEAD else None, target_only=SWEEP_TARGET)
    return [(point_name(p), p) for p in points]


def timed_sweeps():
    """The sweeps timed at batch 1 (time_sweep): those whose choice the runs read, at every (pair, task, T, K)."""
    if not CHOSEN:
        return []
    return [SWEEP_TIMING.format(pair=pair, task=task, T=temperature(T), K=K)
            for pair, task, T, K in itertools.product(PAIRS, TASKS, config["temperatures"], config["K"])]


def sweep_timing_outputs(name):
    """A file of every run of time_sweep's (pair, task, T, K): one per sweep point."""
    return [f"{SWEEP_TIMING}/{point}/{name}" for point, _ in sweep_points()]


def sweep_timing_runs(wildcards, input, output):
    """time_sweep's --run list: each sweep point's changes at the sweep's K (DIVERSED with the task's head)."""
    specs = []
    for manifest, (_, point) in zip(output.manifests, sweep_points(), strict=True):
        changes = {k: (input.head if v == "{head}" else v) for k, v in point.items()}
        K = None if point["verifier"] in BASELINES else int(wildcards.K)
        specs.append(run_spec(os.path.dirname(manifest), point["verifier"], K, **changes))
    return " ".join(specs)


def sweep_inputs(wildcards):
    """What a sweep (and its timing) reads besides the models: the task's head, for DIVERSED's reference point."""
    inputs = models(wildcards)
    if SWEEP_HEAD:
        inputs["head"] = f"results/heads/{wildcards.pair}/{wildcards.task}/head.safetensors"
    return inputs


def sweep_references(wildcards, input):
    """sweep-weight's reference points: DIVERSED with the task's head, the target alone."""
    return " ".join(([f"--head {input.head}"] if SWEEP_HEAD else []) + (["--target-only"] if SWEEP_TARGET else []))


def models(wildcards):
    """What every job that loads a pair needs: its prepare_models record (a local pair), or the fetched hub
    sources (a hub model or a hub task; ancient: a later fetch of a new source reruns nothing)."""
    pair, task = PAIRS[wildcards.pair], TASKS[wildcards.task]
    inputs = {"models": f"resources/models/{wildcards.pair}.json"} if pair["prepare"] != "none" else {}
    if any(hub_model(pair[role], pair["prepare"]) for role in ("target", "draft")) or \
            hub_task(wildcards.task, task["data_files"]):
        inputs["sources"] = ancient(SOURCES)
    return inputs


def point_outputs(name):
    """A file of every run of decode's (pair, task, T, seed): the baselines, then each speculative method at each K."""
    return [f"{BASELINE_RUN.format(pair='{pair}', task='{task}', baseline=b, T='{T}', seed='{seed}')}/{name}"
            for b in BASELINES if b in config["methods"]] + \
           [f"{RUN.format(pair='{pair}', task='{task}', method=m, T='{T}', K=K, seed='{seed}')}/{name}"
            for m in SPECULATIVE for K in config["K"]]


def transfer_outputs(name):
    """A file of every run of decode_transfer's (pair, task, head, T, seed): one per K."""
    return [f"{RUN.format(pair='{pair}', task='{task}', method='dynamic@{head}', T='{T}', K=K, seed='{seed}')}/{name}"
            for K in config["K"]]


def lambda_head(lam):
    """A lambda sweep's candidate head: its task's head trained at lambda (train_head_lambda)."""
    return os.path.join(LAMBDA_HEAD.format(pair="{pair}", task="{task}", lam=float(lam)), "head.safetensors")


def lambda_sweeps():
    """Each lambda sweep's table: one per (pair, task of lambda_sweep)."""
    return [f"{LAMBDA_DIR.format(pair=pair, task=task)}/lambda.csv"
            for pair, task in itertools.product(PAIRS, LAMBDA_TASKS)]


def decode_inputs(wildcards):
    """What decode's runs read besides the models: the distilled draft, the chosen w per K, the trained head."""
    inputs = models(wildcards)
    if "finetuned" in SPECULATIVE:
        inputs["draft"] = f"resources/drafts/{wildcards.pair}/{wildcards.task}"
    if CHOSEN:
        inputs["weights"] = [f"{sweep_dir(wildcards, K)}/choice.json" for K in config["K"]]
    if "dynamic" in SPECULATIVE:
        inputs["head"] = f"results/heads/{wildcards.pair}/{wildcards.task}/head.safetensors"
    return inputs


def sweep_dir(wildcards, K):
    """The sweep whose choice.json gives the fixed w of (pair, task, T) at K."""
    return SWEEP_DIR.format(pair=wildcards.pair, task=wildcards.task, T=wildcards.T, K=K)


def run_spec(run, method, K, verifier=None, **changes):
    """One --run of `diversed generate`: its folder, then what it changes in the shared flags."""
    items = {"verifier": verifier or method} | ({"K": K} if K is not None else {}) | changes
    return f"--run {run} " + " ".join(f"{k}={v}" for k, v in items.items()) + f" label:method={method}"


def point_runs(wildcards, input, output):
    """decode's (and time's) --run list, in the order of its outputs (target only first); a method a sweep chooses
    (fixed, a family) reads its setting from that sweep's choice.json."""
    specs = []
    for manifest in output.manifests:
        run = os.path.dirname(manifest)
        method = run.split("/")[-2]
        K = None if method in BASELINES else int(re.search(r"-K(\d+)(-s|$)", run).group(1))
        if method == "finetuned":
            specs.append(run_spec(run, method, K, verifier="strict", draft=input.draft))
        elif method in CHOSEN:
            choice = os.path.join(sweep_dir(wildcards, K), "choice.json")
            specs.append(run_spec(run, method, K, weight_file=choice))
        elif method == "dynamic":
            specs.append(run_spec(run, method, K, head=input.head))
        else:
            specs.append(run_spec(run, method, K))
    return " ".join(specs)


def transfer_runs(wildcards, input, output):
    """decode_transfer's --run list: DIVERSED with the head of task `head`, at each K."""
    return " ".join(run_spec(os.path.dirname(m), "dynamic", K, head=input.head) + f" label:head_task={wildcards.head}"
                    for m, K in zip(output.manifests, config["K"], strict=True))


def draft_recipe(wildcards):
    pair = PAIRS[wildcards.pair]
    return DraftRecipe(layers=pair["draft_layers"]).id if pair["prepare"] == "embedded" else "none"


def pair_value(key):
    return lambda wildcards: PAIRS[wildcards.pair][key]


def task_value(key):
    return lambda wildcards: TASKS[wildcards.task][key]


def data_files(wildcards):
    path = TASKS[wildcards.task]["data_files"]
    return f"--data-files {path}" if path else ""


def gpus(wildcards):
    """Decoding and training claim the GPU of a CUDA pair (profiles cap gpu at one per machine)."""
    return 1 if PAIRS[wildcards.pair]["device"].startswith("cuda") else 0


def all_cores(wildcards):
    """Every core of a local run: a timed decode never shares them (nor does the pair's build, which all else
    waits for)."""
    return workflow.cores


def job_threads(wildcards):
    """The threads of an untimed job (quality decodes, sweeps, training): config `job_threads` (at most every
    core), else every core. One thread a job on a small CPU runs two jobs side by side, whose start-up and
    single-threaded work overlap; cluster profiles set each rule's threads with set-threads."""
    return min(config.get("job_threads") or workflow.cores, workflow.cores)


TABLES = [f"results/tables/{name}.{ext}" for name in ("table1", "table2", "table3", "speed", "families", "lambda")
          for ext in ("csv", "md", "tex")]
# Named by `diversed plot` (T as %g there: figures/quality_vs_time_T1.png).
FIGURES = [f"figures/{stem}.{ext}" for stem in
           ["acceptance_vs_weight", "weight_distribution"]
           + [f"{kind}_T{float(T):g}" for kind in ("quality_vs_time", "acceptance_by_position")
              for T in config["temperatures"]]
           for ext in ("png", "pdf")]
