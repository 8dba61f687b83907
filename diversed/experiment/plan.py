"""The experiment's plan: a workflow config expanded once into a table of jobs (one row per Snakemake job: its
rule, wildcards, inputs, outputs, shell flags, threads and GPU) and of runs (one row per decoding run: its folder,
method, verifier, T, K, seed, split, prompts, tokens and batch size).

The workflow (workflow/rules/) takes its rules' inputs, outputs and flags from here, diversed.experiment.cost prices
the same rows, and the workflow tests assert on them. Imports no torch, transformers, scipy or lm-eval: parsing the
Snakefile (every dry run, every cluster submission) reads the config and this module only.

    python -m diversed.experiment.plan config/paper.yaml     # jobs per rule, runs per method
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

from diversed.decoding.settings import ALONE, FAMILIES, GIVEN, Method
from diversed.experiment.config import JOB_FIELDS, Experiment, experiment, judge_tasks, scored
from diversed.experiment.declared import declared
from diversed.experiment.sources import Sources, hub_model, hub_sources, hub_task, load_config
from diversed.runs.settings import Grid, RunConfig, point_name
from diversed.training.settings import DistillConfig, DraftRecipe, HeadTrainConfig, JudgeConfig, JudgeFit

# Where everything lands: one template per kind of folder (T as temperature() writes it).
RUN = "results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}"
BASELINE_RUN = "results/runs/{pair}/{task}/{method}/T{T}-s{seed}"  # one model alone: no K
TIMING_RUN = "results/timing/{pair}/{task}/{method}/T{T}-K{K}"  # batch 1, the first n_timing eval prompts
TIMING_BASELINE = "results/timing/{pair}/{task}/{method}/T{T}"
SWEEP = "results/sweeps/{pair}/{task}/T{T}-K{K}"  # a sweep's points, sweep.csv and choice.json (dev split)
SWEEP_TIMING = "results/sweep_timing/{pair}/{task}/T{T}-K{K}"  # batch 1, its points on the first dev prompts
LAMBDA = "results/lambda/{pair}/{task}"  # a lambda sweep: dev runs, lambda.csv, choice.json
LAMBDA_HEAD = "results/lambda/{pair}/{task}/heads/lambda{lam}"  # a candidate head
HEAD = "results/heads/{pair}/{task}"  # the task's head: trained at the config's lambda, or the lambda sweep's
DRAFT = "resources/drafts/{pair}/{task}"  # the fine-tuned draft
JUDGE = "results/judges/{pair}/{task}"  # AutoJudge's classifier (judge.safetensors, manifest.json)
JUDGE_LABELS = "results/judges/{pair}/{task}/labels"  # its mined labels (shards/, mismatches.jsonl, manifest.json)
MODELS_RECORD = "resources/models/{pair}.json"  # prepare_models' record of a local pair
SOURCES = "resources/sources.json"  # fetch_sources' record: every hub source is in the Hugging Face cache
KEPT = "results/kept"  # finished quality runs of a failed decode job (generate --keep)
TABLES_DIR = "results/tables"
TABLE_NAMES = ("table1", "table2", "table3", "transfer", "speed", "families", "knobs", "retention", "lambda")
TIDY = ("runs", "prompts", "sweeps", "sweep_prompts", "weights", "trained")  # aggregate's tidy CSVs
FIGURES_DIR = "figures"
REPORT = "results/REPORT.md"
CLAIMS = "results/claims.html"  # the report's claims as a table (what `snakemake --report` shows)
RESULTS_DIR = "results"
AUDIT = "results/audit.txt"  # diversed audit's outcome: timed = scored, accounting
JOBS_DIR = "results/jobs"  # a decoding job's manifest: its runs' folders and ids (generate --job), its one output
NUMBER = r"\d+(\.\d+)?(e-\d+)?"  # a float as str() writes it (0.1, 1.0, 1e-05): the T and lambda wildcards

# every rule's outputs, as templates of its wildcards (what Snakemake matches; a job's are them filled in); plot's
# figures, named by the config's temperatures, are the plan's (Plan.outputs)
OUTPUTS: dict[str, dict[str, str]] = {
    "fetch_sources": {"record": SOURCES}, "prepare_models": {"record": MODELS_RECORD},
    "train_head": {"head": HEAD + "/head.safetensors", "log_csv": HEAD + "/train_log.csv"},
    "train_head_lambda": {"head": LAMBDA_HEAD + "/head.safetensors", "log_csv": LAMBDA_HEAD + "/train_log.csv"},
    "distill_draft": {"draft": DRAFT}, "mine_judge": {"labels": JUDGE_LABELS + "/manifest.json"},
    "train_judge": {"judge": JUDGE + "/judge.safetensors", "manifest": JUDGE + "/manifest.json"},
    "sweep": {"choice": SWEEP + "/choice.json", "table": SWEEP + "/sweep.csv", "markdown": SWEEP + "/sweep.md"},
    "sweep_lambda": {"head": HEAD + "/head.safetensors", "log_csv": HEAD + "/train_log.csv",
                     "choice": LAMBDA + "/choice.json", "table": LAMBDA + "/lambda.csv",
                     "markdown": LAMBDA + "/lambda.md"},
    "decode": {"job": JOBS_DIR + "/decode/{pair}/{task}/T{T}-s{seed}.json"},
    "time": {"job": JOBS_DIR + "/time/{pair}/{task}/T{T}.json"},
    "decode_transfer": {"job": JOBS_DIR + "/decode_transfer/{pair}/{task}/from-{head_task}/T{T}-s{seed}.json"},
    "time_sweep": {"job": JOBS_DIR + "/time_sweep/{pair}/{task}/T{T}-K{K}.json"},
    "aggregate": {name: f"{TABLES_DIR}/{name}.csv" for name in TIDY},
    "audit": {"audit": AUDIT}, "report": {"report": REPORT, "claims": CLAIMS}, "plot": {},
}
RUN_RULES = ("decode", "time", "decode_transfer", "time_sweep")  # the decoding jobs: `diversed generate` --run runs
# the rules that load a pair (and claim the GPU of a CUDA pair)
MODEL_RULES = (*RUN_RULES, "sweep", "sweep_lambda", "train_head", "train_head_lambda", "distill_draft", "mine_judge")
LOCAL_RULES = ("fetch_sources", "aggregate", "audit", "plot", "report")  # on a cluster: the submitting node
WILDCARDS = {rule: tuple(dict.fromkeys(name for t in templates.values() for _, name, _, _ in string.Formatter().parse(t)
                                       if name)) for rule, templates in OUTPUTS.items()}


def shown(path: str) -> tuple[str, str] | None:
    """How `snakemake --report` shows an output: (category, caption: workflow/report/{caption}.rst), None where it
    does not (a figure's PDF copy, the tidy tables, the .md and .tex forms)."""
    folder, _, name = path.rpartition("/")
    stem, _, ext = name.rpartition(".")
    if folder == FIGURES_DIR and ext == "png":
        return "Figures", re.sub(r"_T[\d.e+-]+$", "", stem)  # one caption for every temperature's
    if path == CLAIMS:
        return "Claims", "claims"
    if folder == TABLES_DIR and ext == "csv" and stem in TABLE_NAMES:
        return "Tables", stem
    return None


def temperature(T) -> str:
    """T as every path and command line writes it: 1 and 1.0 are one run."""
    return str(float(T))


@dataclass(frozen=True)
class PlannedRun:
    """One decoding run of a job: its folder, what it decodes and how many tokens."""

    dir: str
    rule: str
    pair: str
    task: str
    method: str  # a verifier, finetuned, or dynamic@{task} / judge@{task} (with another task's head or judge)
    verifier: str
    split: str
    temperature: float
    K: int | None  # None: one model alone
    seed: int
    prompts: int
    max_new_tokens: int
    batch_size: int
    timing: bool = False  # timed at batch 1, interleaved with its job's other runs
    changes: dict = field(default_factory=dict)  # what it changes in its job's flags (generate --run KEY=VALUE)

    def spec(self) -> str:
        """The run as one --run of `diversed generate`: its folder, its changes, its method label."""
        items = {"verifier": self.verifier} | ({"K": self.K} if self.K is not None else {}) | self.changes
        m = Method.parse(self.method)
        return f"--run {self.dir} " + " ".join(f"{k}={v}" for k, v in items.items()) + \
            f" label:method={Method(m.base, m.given).label}" + (
                f" label:head_task={m.head_task}" if m.head_task else "")


@dataclass(frozen=True)
class Job:
    """One job of the workflow: its rule and wildcards, the files it reads and writes, its shell flags (named
    groups, each rule's shell command in workflow/rules/ puts them together), its CPU threads (None: every core,
    so that nothing runs beside it) and GPUs, and its decoding runs or training config."""

    rule: str
    wildcards: dict[str, str]
    inputs: dict[str, str | list[str]]
    outputs: dict[str, str | list[str]]
    flags: dict[str, str]
    threads: int | None
    gpu: int = 0
    runs: tuple[PlannedRun, ...] = ()
    train: HeadTrainConfig | DistillConfig | JudgeConfig | None = None

    @property
    def pair(self) -> str | None:
        return self.wildcards.get("pair")


def flags(cls: type | None = None, **values) -> str:
    """Command-line flags for values: each name's flag as the config dataclass `cls` declares it (the flags of
    diversed's command line are generated from the same fields), else --name-with-dashes; None and False are
    left out, True is a bare flag, a list repeats its values."""
    declared = {f.name: f.metadata.get("flag") for f in dataclasses.fields(cls)} if cls else {}
    out = []
    for name, value in values.items():
        if value is None or value is False or value == []:
            continue
        flag = declared.get(name) or "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out.append(f"{flag} {' '.join(str(v) for v in value)}")
        else:
            out.append(f"{flag} {value}")
    return " ".join(out)


class Setup:
    """What every builder of the plan reads from a validated config: its pairs, tasks and methods in their groups,
    where each job's files lie, and the shell flags a config's keys become."""

    def __init__(self, x: Experiment):
        self.experiment = x
        self.pairs, self.tasks, self.sweep = x.pairs, x.tasks, x.sweep
        self.methods = x.methods
        self.alone = [m for m in ALONE if m in self.methods]
        self.speculative = [m for m in self.methods if m not in ALONE]
        self.families = [m for m in self.methods if m in FAMILIES]  # relaxed verifiers at their sweep's knob
        self.chosen = [m for m in self.speculative if m == "fixed" or m in FAMILIES]  # a sweep chooses their setting
        self.given = {Method(v, k).label: v for v in GIVEN for k in x.given.get(v, [])}  # method: verifier
        self.lambda_tasks = x.lambda_sweep.tasks
        self.judge_tasks = judge_tasks(x)
        self.transfer_head_tasks = sorted({t.head for t in x.transfer})
        # the tasks whose AutoJudge labels are mined: the judge's, and each judge transfer's eval task with references
        # (the judge's AUC out of domain)
        self.label_tasks = [t for t in self.tasks if t in self.judge_tasks or (any(
            u.eval == t and "judge" in self.transferred(u.head) for u in x.transfer) and scored(t))]
        self.sweep_head = "dynamic" in self.speculative  # the fronts' references each sweep decodes
        self.sweep_target = "autoregressive" in self.methods
        self.hub: Sources = hub_sources(x)

    def outputs_at(self, rule: str, w: dict[str, str]) -> dict[str, str | list[str]]:
        """A rule's outputs at a job's wildcards w."""
        out: dict[str, str | list[str]] = {k: t.format(**w) for k, t in OUTPUTS[rule].items()}
        if rule == "aggregate":
            out["tables"] = [f"{TABLES_DIR}/{n}.{ext}" for n in TABLE_NAMES for ext in ("csv", "md", "tex")]
        if rule == "plot":
            out["figures"] = self.figures()
        return out

    def figures(self) -> list[str]:
        """Named by `diversed plot` (T as %g there: figures/quality_vs_time_T1.png)."""
        stems = ["acceptance_vs_weight", "weight_distribution"] + [
            f"{kind}_T{float(T):g}" for kind in ("quality_vs_time", "acceptance_by_position", "acceptance_vs_bias",
                                                 "acceptance_vs_kl")
            for T in self.experiment.temperatures]
        return [f"{FIGURES_DIR}/{stem}.{ext}" for stem in stems for ext in ("png", "pdf")]

    def models(self, pair: str, task: str) -> dict[str, str]:
        """What every job that loads a pair reads: its prepare_models record (a local pair), or the fetched hub
        sources (a hub model or a hub task)."""
        p = self.pairs[pair]
        inputs = {"models": MODELS_RECORD.format(pair=pair)} if p.prepare != "none" else {}
        if hub_model(p.target, p.prepare) or hub_model(p.draft, p.prepare) or \
                hub_task(task, self.tasks[task].data_files):
            inputs["sources"] = SOURCES
        return inputs

    def head(self, pair: str, task: str) -> str:
        return HEAD.format(pair=pair, task=task) + "/head.safetensors"

    def judge(self, pair: str, task: str) -> str | None:
        """The task's AutoJudge classifier, None where the judge does not run on it."""
        return JUDGE.format(pair=pair, task=task) + "/judge.safetensors" if task in self.judge_tasks else None

    def families_of(self, task: str) -> list[str]:
        """The families a task's sweeps and decodes run: judge only on the judge's tasks."""
        return [f for f in self.families if f != "judge" or task in self.judge_tasks]

    def threads(self) -> int | None:
        """An untimed job's threads: config job_threads (None: every core)."""
        return self.experiment.job_threads

    def batch(self, pair: str) -> int:
        """The rows a pair's quality decodes run in lockstep: its own batch_size, else the config's."""
        return self.pairs[pair].batch_size or self.experiment.batch_size

    def gpu(self, pair: str) -> int:
        return 1 if self.pairs[pair].device.startswith("cuda") else 0

    def pair_flags(self, pair: str) -> str:
        p = self.pairs[pair]
        return flags(RunConfig, target=p.target, draft=p.draft, draft_layers=p.draft_layers, dtype=p.dtype,
                     device=p.device)

    def prompt_flags(self, task: str, split: str, n: int, limit: int | None = None) -> str:
        return flags(RunConfig, task=task, data_files=self.tasks[task].data_files,
                     split=None if split == "eval" else split, n=n, limit=limit)

    def decoding_flags(self, task: str, T, seed: int, K: int | None = None) -> str:
        x = self.experiment
        return flags(RunConfig, max_new_tokens=self.tasks[task].max_new_tokens, temperature=temperature(T),
                     sampling=x.sampling, prompt_format=x.prompt_format, scoring=x.scoring, stop=x.stop,
                     K=K, seed=seed)

    def execution(self, timed: bool = False) -> str:
        """The engine's flags; timed: a timing job's (batch 1), whose capture is execution.timed_capture if set."""
        e = self.experiment.execution
        capture = e.timed_capture if timed and e.timed_capture else e.capture
        return flags(capture=capture, no_fastpath=not e.fastpath)

    def labels(self, **labels) -> str:
        return " ".join(f"--label {k}={v}" for k, v in {**labels, "experiment": self.experiment.experiment}.items())

    def job_fields(self, pair: str, task: str, cls: type = HeadTrainConfig) -> dict:
        """The training settings a job takes from its pair, its task and the top-level keys (config.JOB_FIELDS,
        those cls has)."""
        p, t, x = self.pairs[pair], self.tasks[task], self.experiment
        fields = {"target": p.target, "draft": p.draft, "draft_layers": p.draft_layers, "dtype": p.dtype,
                  "device": p.device, "task": task, "data_files": t.data_files, "n_train": t.n_train, "seed": 0,
                  "prompt_format": x.prompt_format, "scoring": x.scoring}
        return {k: v for k, v in fields.items() if k in {f.name for f in dataclasses.fields(cls)}}

    def train_flags(self, cfg: HeadTrainConfig | DistillConfig) -> str:
        """A training job's flags: its task's prompts, then every setting of its config section."""
        names = ["task", "data_files", "n_train", "prompt_format", "seed",
                 *(["scoring"] * isinstance(cfg, HeadTrainConfig)), *(f.name for f in declared(type(cfg), JOB_FIELDS))]
        return flags(type(cfg), **{name: getattr(cfg, name) for name in names})

    def tolerance(self) -> str:
        return flags(tolerance=self.sweep.tolerance, select=self.sweep.select)

    @property
    def head_mixing(self) -> str:
        """The mixing the config's heads are trained with (train_head.mixing), which DIVERSED decodes with."""
        return self.experiment.train_head.mixing

    def head_changes(self, head: str) -> dict:
        """A DIVERSED run's changes: its head, and the mixing the head is trained with where it is not linear."""
        return {"head": head} | ({"mixing": self.head_mixing} if self.head_mixing != "linear" else {})

    def sweep_points(self, head: str | None, task: str, judge: str | None) -> list[dict]:
        s = self.sweep
        families = {f: s.families[f] for f in self.families_of(task)}
        return Grid(s.weights, s.mixings, families, s.deferrals,
                    head=head if self.sweep_head else None, target_only=self.sweep_target,
                    head_mixing=self.head_mixing, judge=judge).points()

    def sweep_settings(self) -> list[tuple[str, str, str, int]]:
        """(pair, task, T, K) of every sweep: each setting whose fixed w or family knob the runs read, and the
        acceptance-vs-w figure's."""
        x, s = self.experiment, self.sweep
        read = set(itertools.product(self.pairs, self.tasks, map(temperature, x.temperatures), x.K)) \
            if self.chosen else set()
        figure = set(itertools.product(self.pairs, s.figure_tasks, [temperature(s.figure_temperature)], s.figure_K))
        judged = set(itertools.product(self.pairs, [t.head for t in x.transfer if "judge" in self.transferred(t.head)],
                                       [temperature(x.transfer_temperature)], x.K))  # AutoJudge's threshold
        return sorted(read | figure | judged)

    def transferred(self, head_task: str) -> list[str]:
        """The learned verifiers a transfer from head_task decodes with: DIVERSED, and AutoJudge where the judge runs
        on head_task."""
        return ["dynamic", *(["judge"] if head_task in self.judge_tasks else [])]

    def head_tasks(self) -> list[str]:
        """The tasks whose head some job reads: every task when DIVERSED runs, and each transfer's head task."""
        return [t for t in self.tasks if "dynamic" in self.speculative or t in self.transfer_head_tasks]


class RunLists:
    """The decoding runs of each job: a quality or timed decode's (every method of one setting), a transfer's, a
    sweep's points."""

    def __init__(self, s: Setup):
        self.s = s

    def run(self, rule: str, dir: str, at: dict, **run) -> PlannedRun:
        """A run of `rule` in `dir` at setting `at` (pair, task, T, K, seed); run: its method, verifier, split, prompts
        and, where they apply, timing and changes. Its token budget is its task's, its batch the pair's (1 when
        timed)."""
        K, task = at.get("K"), at["task"]
        return PlannedRun(dir=dir, rule=rule, pair=at["pair"], task=task, temperature=float(at["T"]),
                          K=None if K is None else int(K), seed=int(at.get("seed", 0)),
                          max_new_tokens=self.s.tasks[task].max_new_tokens,
                          batch_size=1 if run.get("timing") else self.s.batch(at["pair"]), **run)

    def decoding_runs(self, rule: str, w: dict[str, str]) -> list[PlannedRun]:
        """The runs of a decode, time or decode_transfer job at wildcards w: target only (and draft only) first,
        then each speculative method at each K."""
        pair, task, T, K_list = w["pair"], w["task"], w["T"], self.s.experiment.K
        timing = rule == "time"
        seed = w.get("seed", str(self.s.experiment.seeds[0]))
        t = self.s.tasks[task]
        n = min(t.n_timing, t.n_eval) if timing else t.n_eval
        if rule == "decode_transfer":  # each learned verifier with head_task's module and (AutoJudge) threshold
            head_task = w["head_task"]
            return [self.run(rule, RUN.format(pair=pair, task=task, method=method, T=T, K=K, seed=seed), w | {"K": K},
                             method=method, verifier=base, split="eval", prompts=n,
                             changes=self.method_changes(base, pair, head_task, T, K))
                    for base in self.s.transferred(head_task) for K in K_list
                    for method in [Method(base, head_task=head_task).label]]
        runs = []
        methods = [m for m in [*self.s.speculative, *self.s.given]
                   if Method.parse(m).base != "judge" or task in self.s.judge_tasks]
        for method, K in [(b, None) for b in self.s.alone] + [(m, K) for m in methods for K in K_list]:
            if timing:
                template = TIMING_BASELINE if K is None else TIMING_RUN
            else:
                template = BASELINE_RUN if K is None else RUN
            d = template.format(pair=pair, task=task, method=method, T=T, K=K, seed=seed)
            verifier = "strict" if method == "finetuned" else self.s.given.get(method, method)
            runs.append(self.run(rule, d, w | {"K": K, "seed": seed}, method=method, verifier=verifier,
                                  split="eval", prompts=n,
                                  timing=timing, changes=self.method_changes(method, pair, task, T, K)))
        return runs

    def method_changes(self, method: str, pair: str, task: str, T: str, K: int | None) -> dict:
        """What a method's run changes: the fine-tuned draft, the setting its sweep chose or the config gives, the
        task's head or judge (a transfer's: the head task's, with its task's sweep choice)."""
        m = Method.parse(method)
        if m.base == "judge":  # the given setting or the sweep's choice, with the task's judge
            return {"judge": self.s.judge(pair, task)} | (
                {"knob": m.given} if method in self.s.given else
                {"weight_file": SWEEP.format(pair=pair, task=task, T=T, K=K) + "/choice.json"})
        if method in self.s.given:
            return {"weight": m.given, "mixing": "linear"} if m.base == "fixed" else \
                {"knob": m.given} | ({"deferral": self.s.sweep.deferrals[0]} if m.base == "cascade" else {})
        if method == "finetuned":
            return {"draft": DRAFT.format(pair=pair, task=task)}
        if method in self.s.chosen:
            return {"weight_file": SWEEP.format(pair=pair, task=task, T=T, K=K) + "/choice.json"}
        if method == "dynamic":
            return self.s.head_changes(self.s.head(pair, task))
        return {}

    def sweep_timing_runs(self, w: dict[str, str], head: str | None) -> list[PlannedRun]:
        """time_sweep's runs: each point of the sweep at its K (DIVERSED with the task's head), the target alone."""
        t = self.s.tasks[w["task"]]
        n = min(self.s.sweep.n_timing or t.n_timing, t.n_dev)
        return [self.point_run("time_sweep", f"{SWEEP_TIMING.format(**w)}/{point_name(p)}", w, p, n, timing=True)
                for p in self.s.sweep_points(head, w["task"], self.s.judge(w["pair"], w["task"]))]

    def point_run(self, rule: str, dir: str, w: dict[str, str], point: dict, prompts: int,
                   timing: bool = False) -> PlannedRun:
        """A sweep point's run (Grid.points' changes): on the dev split, at the sweep's K (the target alone: none)."""
        v = point["verifier"]
        return self.run(rule, dir, w | {"K": None if v in ALONE else w["K"], "seed": 0}, method=v, verifier=v,
                         split="dev", prompts=prompts, timing=timing,
                         changes={k: x for k, x in point.items() if k != "verifier"})


class TrainingJobs:
    """The jobs before any decode: the hub sources, the local pair, the heads (and the lambda sweeps), the
    fine-tuned drafts and AutoJudge."""

    def __init__(self, s: Setup, runs: RunLists):
        self.s, self.runs = s, runs

    def jobs(self):
        for make in (self.fetch, self.prepare, self.heads, self.drafts, self.judges):
            yield from make()

    def fetch(self):
        if self.s.hub:
            yield Job("fetch_sources", {}, {}, self.s.outputs_at("fetch_sources", {}),
                      {"models": " ".join(f"--model {m}" for m in self.s.hub.models),
                       "tasks": " ".join(f"--task {t}" for t in self.s.hub.tasks)}, threads=1)

    def prepare(self):
        for pair, p in self.s.pairs.items():
            if p.prepare == "none":
                continue
            recipe = DraftRecipe(layers=p.draft_layers).id if p.prepare == "embedded" else "none"
            w = {"pair": pair}
            yield Job("prepare_models", w, {}, self.s.outputs_at("prepare_models", w),
                      {"kind": p.prepare, "draft_layers": str(p.draft_layers), "recipe": recipe}, threads=None)

    def train_job(self, rule: str, pair: str, task: str, **changes) -> Job:
        cfg = dataclasses.replace(self.s.experiment.train_head, **self.s.job_fields(pair, task), **changes)
        w = {"pair": pair, "task": task} | ({"lam": temperature(changes["acceptance_weight"])} if changes else {})
        outputs = self.s.outputs_at(rule, w)
        return Job(rule, w, self.s.models(pair, task), outputs,
                   {"pair": self.s.pair_flags(pair), "config": self.s.train_flags(cfg),
                    "execution": self.s.execution(), "out": _parent(outputs["head"])},
                   threads=self.s.threads(), gpu=self.s.gpu(pair), train=cfg)

    def heads(self):
        lam = self.s.experiment.lambda_sweep
        for pair, task in itertools.product(self.s.pairs, self.s.head_tasks()):
            if task not in self.s.lambda_tasks:
                yield self.train_job("train_head", pair, task)
                continue
            for value in lam.values:
                yield self.train_job("train_head_lambda", pair, task, acceptance_weight=float(value))
            yield self.sweep_lambda(pair, task)

    def sweep_lambda(self, pair: str, task: str) -> Job:
        lam, K, t = self.s.experiment.lambda_sweep, self.s.experiment.K[0], self.s.tasks[task]
        heads = [LAMBDA_HEAD.format(pair=pair, task=task, lam=float(x)) + "/head.safetensors" for x in lam.values]
        w = {"pair": pair, "task": task}
        at = w | {"T": lam.temperature, "K": K}
        runs = [self.runs.run("sweep_lambda", f"{LAMBDA.format(**w)}/{name}", at, method=verifier, verifier=verifier,
                          split="dev", prompts=t.n_dev, changes=changes) for name, verifier, changes in
                [(point_name({"verifier": "strict"}), "strict", {})]
                + [(f"lambda{float(x)}", "dynamic", self.s.head_changes(h))
                   for x, h in zip(lam.values, heads, strict=True)]]
        return Job("sweep_lambda", w, self.s.models(pair, task) | {"heads": heads},
                   self.s.outputs_at("sweep_lambda", w),
                   {"pair": self.s.pair_flags(pair), "prompts": self.s.prompt_flags(task, "dev", t.n_dev),
                    "decoding": self.s.decoding_flags(task, lam.temperature, 0, K),
                    "heads": flags(heads=heads), "tolerance": self.s.tolerance(),
                    "batch": str(self.s.batch(pair)),
                    "execution": self.s.execution(), "labels": self.s.labels(pair=pair), "out": LAMBDA.format(**w),
                    "head_out": HEAD.format(**w)},
                   threads=self.s.threads(), gpu=self.s.gpu(pair), runs=tuple(runs))

    def drafts(self):
        if "finetuned" not in self.s.speculative:
            return
        for pair, task in itertools.product(self.s.pairs, self.s.tasks):
            cfg = dataclasses.replace(self.s.experiment.distill, **self.s.job_fields(pair, task, DistillConfig))
            w = {"pair": pair, "task": task}
            yield Job("distill_draft", w, self.s.models(pair, task), self.s.outputs_at("distill_draft", w),
                      {"pair": self.s.pair_flags(pair), "config": self.s.train_flags(cfg),
                       "execution": self.s.execution()}, threads=self.s.threads(), gpu=self.s.gpu(pair), train=cfg)

    def judges(self):
        """AutoJudge per (pair, judge task): its labels mined on the train prompts, then its classifier (CPU), whose
        AUC is also taken on each of its transfers' eval tasks' labels (mined for that where the judge does not
        run)."""
        fit = {k: getattr(self.s.experiment.judge, k) for k in ("l2", "holdout", "iterations")}
        for pair, task in itertools.product(self.s.pairs, self.s.label_tasks):
            w = {"pair": pair, "task": task}
            cfg = JudgeConfig(**self.s.job_fields(pair, task, JudgeConfig),
                              max_new_tokens=self.s.tasks[task].max_new_tokens, batch_size=self.s.batch(pair))
            names = ("task", "data_files", "n_train", "max_new_tokens", "prompt_format", "scoring", "seed",
                     "batch_size")
            labels = self.s.outputs_at("mine_judge", w)["labels"]
            yield Job("mine_judge", w, self.s.models(pair, task), self.s.outputs_at("mine_judge", w),
                      {"pair": self.s.pair_flags(pair),
                       "config": flags(JudgeConfig, **{n: getattr(cfg, n) for n in names}),
                       "execution": self.s.execution(), "out": _parent(labels)},
                      threads=self.s.threads(), gpu=self.s.gpu(pair), train=cfg)
            if task not in self.s.judge_tasks:
                continue
            others = [JUDGE_LABELS.format(pair=pair, task=t.eval) + "/manifest.json" for t in self.s.experiment.transfer
                      if t.head == task and t.eval in self.s.label_tasks]
            yield Job("train_judge", w, {"labels": labels} | ({"eval_labels": others} if others else {}),
                      self.s.outputs_at("train_judge", w),
                      {"labels": _parent(labels), "fit": flags(JudgeFit, **fit),
                       "eval_labels": flags(eval_labels=[_parent(x) for x in others]), "out": JUDGE.format(**w)},
                      threads=1)


class DecodingJobs:
    """The sweeps on dev and the decodes on eval: quality at batch_size, timing at batch 1, transfers."""

    def __init__(self, s: Setup, runs: RunLists):
        self.s, self.runs = s, runs

    def jobs(self):
        yield from self.sweeps()
        yield from self.decodes()

    def sweeps(self):
        s, read = self.s.sweep, bool(self.s.chosen)
        for pair, task, T, K in self.s.sweep_settings():
            t, w = self.s.tasks[task], {"pair": pair, "task": task, "T": T, "K": str(K)}
            inputs = self.s.models(pair, task) | ({"head": self.s.head(pair, task)} if self.s.sweep_head else {}) | (
                {"judge": judge} if (judge := self.s.judge(pair, task)) else {})
            points = self.s.sweep_points(inputs.get("head"), task, judge)
            runs = [self.runs.point_run("sweep", f"{SWEEP.format(**w)}/{point_name(p)}", w, p, t.n_dev)
                    for p in points]
            grid = " ".join([flags(weights=s.weights, mixings=s.mixings)]
                            + [flags(**{f: s.families[f]}) for f in self.s.families_of(task)]
                            + ([flags(deferrals=s.deferrals)] if "cascade" in self.s.families else [])
                            + [flags(judge_file=judge)])
            yield Job("sweep", w, inputs, self.s.outputs_at("sweep", w),
                      {"pair": self.s.pair_flags(pair), "prompts": self.s.prompt_flags(task, "dev", t.n_dev),
                       "decoding": self.s.decoding_flags(task, T, 0, K), "grid": grid,
                       "references": flags(head=inputs.get("head"), target_only=self.s.sweep_target),
                       "tolerance": self.s.tolerance(), "batch": str(self.s.batch(pair)),
                       "execution": self.s.execution(), "labels": self.s.labels(pair=pair), "out": SWEEP.format(**w)},
                      threads=self.s.threads(), gpu=self.s.gpu(pair), runs=tuple(runs))
            if read and K in self.s.experiment.K and float(T) in map(float, self.s.experiment.temperatures):
                yield self.time_sweep(pair, task, T, K, inputs)

    def time_sweep(self, pair: str, task: str, T: str, K: int, inputs: dict) -> Job:
        w = {"pair": pair, "task": task, "T": T, "K": str(K)}
        runs = self.runs.sweep_timing_runs(w, inputs.get("head"))
        t = self.s.tasks[task]
        return Job("time_sweep", w, inputs, self.s.outputs_at("time_sweep", w),
                   {"pair": self.s.pair_flags(pair),
                    "prompts": self.s.prompt_flags(task, "dev", t.n_dev, runs[0].prompts),
                    "decoding": self.s.decoding_flags(task, T, 0),
                    "labels": self.s.labels(pair=pair, task=task, timing=1), "execution": self.s.execution(timed=True),
                    "runs": " ".join(r.spec() for r in runs)},
                   threads=None, gpu=self.s.gpu(pair), runs=tuple(runs))

    def decode_inputs(self, pair: str, task: str, T: str) -> dict:
        """What decode's and time's runs read besides the models: the fine-tuned draft, each K's sweep choice,
        the task's head."""
        inputs: dict = self.s.models(pair, task)
        if "finetuned" in self.s.speculative:
            inputs["draft"] = DRAFT.format(pair=pair, task=task)
        if self.s.chosen:
            inputs["weights"] = [SWEEP.format(pair=pair, task=task, T=T, K=K) + "/choice.json"
                                 for K in self.s.experiment.K]
        if "dynamic" in self.s.speculative:
            inputs["head"] = self.s.head(pair, task)
        if judge := self.s.judge(pair, task):
            inputs["judge"] = judge
        return inputs

    def transfer_inputs(self, pair: str, head_task: str, T: str) -> dict:
        """What a transfer's runs read besides the models: head_task's head and, where AutoJudge transfers, its
        judge and its sweep's choice at each K."""
        inputs = {"head": self.s.head(pair, head_task)}
        if "judge" in self.s.transferred(head_task):
            inputs |= {"judge": self.s.judge(pair, head_task),
                       "weights": [SWEEP.format(pair=pair, task=head_task, T=T, K=K) + "/choice.json"
                                   for K in self.s.experiment.K]}
        return inputs

    def decodes(self):
        x = self.s.experiment
        for pair, task, T in itertools.product(self.s.pairs, self.s.tasks, map(temperature, x.temperatures)):
            for seed in x.seeds:
                yield self.decode_job("decode", {"pair": pair, "task": task, "T": T, "seed": str(seed)})
            yield self.decode_job("time", {"pair": pair, "task": task, "T": T})
        for pair, t, seed in itertools.product(self.s.pairs, x.transfer, x.seeds):
            yield self.decode_job("decode_transfer", {"pair": pair, "task": t.eval, "head_task": t.head,
                                                       "T": temperature(x.transfer_temperature),
                                                       "seed": str(seed)})

    def decode_job(self, rule: str, w: dict[str, str]) -> Job:
        pair, task, timing = w["pair"], w["task"], rule == "time"
        if rule == "decode_transfer":
            inputs = self.s.models(pair, task) | self.transfer_inputs(pair, w["head_task"], w["T"])
        else:
            inputs = self.decode_inputs(pair, task, w["T"])
        runs = self.runs.decoding_runs(rule, w)
        t = self.s.tasks[task]
        seed = int(w.get("seed", self.s.experiment.seeds[0]))
        job_flags = {"pair": self.s.pair_flags(pair),
                     "prompts": self.s.prompt_flags(task, "eval", t.n_eval, runs[0].prompts if timing else None),
                     "decoding": self.s.decoding_flags(task, w["T"], seed),
                     "labels": self.s.labels(pair=pair, task=task, **({"timing": 1} if timing else {})),
                     "execution": self.s.execution(timed=timing), "runs": " ".join(r.spec() for r in runs)}
        if not timing:
            job_flags["batch"] = str(self.s.batch(pair))
        return Job(rule, w, inputs, self.s.outputs_at(rule, w), job_flags,
                   threads=None if timing else self.s.threads(), gpu=self.s.gpu(pair), runs=tuple(runs))


class Plan:
    """A workflow config expanded into its jobs and runs (`jobs`, `runs`, `job(rule, wildcards)`), and each rule's
    output patterns (`outputs(rule)`, what Snakemake matches wildcards against), each job evaluated once."""

    def __init__(self, config: dict):
        self.s = s = Setup(experiment(config))
        self.experiment, self.pairs, self.tasks, self.hub = s.experiment, s.pairs, s.tasks, s.hub
        self.lambda_tasks, self.judge_tasks = s.lambda_tasks, s.judge_tasks
        self.transfer_head_tasks = s.transfer_head_tasks
        self.jobs: list[Job] = []
        self._index: dict[tuple, Job] = {}
        runs = RunLists(s)
        for make in (TrainingJobs(s, runs).jobs, DecodingJobs(s, runs).jobs, self.report_jobs):
            for job in list(make()):
                self.jobs.append(job)
                self._index[job.rule, tuple(sorted(job.wildcards.items()))] = job

    # --------------------------------------------------------------------------------- the table

    @property
    def runs(self) -> list[PlannedRun]:
        return [run for job in self.jobs for run in job.runs]

    def job(self, rule: str, wildcards) -> Job:
        """The job of `rule` at these wildcards (a Snakemake Wildcards object or a dict)."""
        key = (rule, tuple(sorted(dict(wildcards.items()).items())))
        if key not in self._index:
            raise ValueError(f"the plan has no {rule} job at {dict(key[1])}")
        return self._index[key]

    def of(self, rule: str) -> list[Job]:
        return [j for j in self.jobs if j.rule == rule]

    def counts(self) -> dict[str, int]:
        """Jobs per rule, as Snakemake's job stats count them."""
        out: dict[str, int] = {}
        for job in self.jobs:
            out[job.rule] = out.get(job.rule, 0) + 1
        return out

    def outputs(self, rule: str) -> dict[str, str | list[str]]:
        """The output patterns of a rule (its templates; a rule without wildcards: its one job's outputs)."""
        return OUTPUTS[rule] if WILDCARDS[rule] else self.s.outputs_at(rule, {})

    def rows(self) -> list[dict]:
        """The job table as flat rows (one per job; its runs counted), e.g. for pandas."""
        return [{"rule": j.rule, **j.wildcards, "threads": j.threads, "gpu": j.gpu, "runs": len(j.runs),
                 "inputs": sorted(p for v in j.inputs.values() for p in ([v] if isinstance(v, str) else v)),
                 "outputs": sorted(p for v in j.outputs.values() for p in ([v] if isinstance(v, str) else v))}
                for j in self.jobs]

    # ------------------------------------------------------------ aggregate, plot, audit, report

    def report_jobs(self):
        """aggregate (every scored run and sweep), plot and report (the tables only)."""
        def dirs(*rules):
            return [r.dir for job in self.jobs if job.rule in rules for r in job.runs]

        scored = {"scores": dirs("decode", "decode_transfer"), "timing_scores": dirs("time"),
                  "sweep_timing_scores": dirs("time_sweep")}
        inputs = {"jobs": [job.outputs["job"] for job in self.jobs if job.rule in RUN_RULES],
                  "sweeps": [job.outputs["table"] for job in self.of("sweep")],
                  "lambda_sweeps": [job.outputs["table"] for job in self.of("sweep_lambda")],
                  "judges": [job.outputs["manifest"] for job in self.of("train_judge")]}
        tables = self.s.outputs_at("aggregate", {})
        yield Job("aggregate", {}, inputs, tables, {
            "runs": flags(runs=scored["scores"]), "timing_runs": flags(timing_runs=scored["timing_scores"]),
            "sweeps": flags(sweeps=inputs["sweeps"]), "sweep_timing_runs": flags(
                sweep_timing_runs=scored["sweep_timing_scores"]), "lambda_sweeps": flags(
                lambda_sweeps=inputs["lambda_sweeps"]), "judges": flags(judges=inputs["judges"]),
            "transfer_temperature": temperature(self.s.experiment.transfer_temperature), "out": TABLES_DIR}, threads=1)
        read = {name: tables[name] for name in ("runs", "prompts", "sweeps", "weights")}
        yield Job("plot", {}, read, self.s.outputs_at("plot", {}), {
            "temperatures": " ".join(temperature(T) for T in self.s.experiment.temperatures),
            "figure_temperature": temperature(self.s.sweep.figure_temperature), "tables": TABLES_DIR,
            "out": FIGURES_DIR}, threads=1)
        audit = self.s.outputs_at("audit", {})
        yield Job("audit", {}, inputs, audit, {"results": RESULTS_DIR}, threads=1)
        yield Job("report", {}, {name: tables[name] for name in ("runs", "prompts", "sweeps", "sweep_prompts",
                                                                 "trained", "tables")} | {
            "figures": self.s.figures()} | audit, self.s.outputs_at("report", {}), {"tables": TABLES_DIR,
                                                                                   "figures": FIGURES_DIR}, threads=1)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


def load(*paths: str | Path) -> Plan:
    """The plan of a workflow config given as YAML files (several layer as Snakemake's --configfile)."""
    return Plan(load_config(*paths))


def summary(plan: Plan) -> str:
    """Jobs per rule and runs per method, as text."""
    runs: dict[str, int] = {}
    for r in plan.runs:
        runs[r.method] = runs.get(r.method, 0) + 1
    lines = [f"{rule:20s} {n:5d} jobs" for rule, n in plan.counts().items()]
    lines += [f"{method:20s} {n:5d} runs" for method, n in runs.items()]
    return "\n".join(lines + [f"{'total':20s} {len(plan.jobs):5d} jobs, {len(plan.runs)} runs"])


if __name__ == "__main__":
    from diversed.utils import guarded

    guarded(lambda: print(summary(load(*(sys.argv[1:] or ["config/config.yaml"])))))
