"""The experiment's plan: a workflow config expanded once into a table of jobs (one row per Snakemake job: its
rule, wildcards, inputs, outputs, shell flags, threads and GPU) and of runs (one row per decoding run: its folder,
method, verifier, T, K, seed, split, prompts, tokens and batch size).

The workflow (workflow/rules/) takes its rules' inputs, outputs and flags from here, diversed.cost prices the same
rows, and the workflow tests assert on them. Imports no torch, transformers, scipy or lm-eval: parsing the
Snakefile (every dry run, every cluster submission) reads the config and this module only.

    python -m diversed.plan config/paper.yaml            # jobs per rule, runs per method
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

from diversed.decoding.settings import BASELINES, FAMILIES, GIVEN, Method
from diversed.decoding.sources import Sources, hub_model, hub_sources, hub_task, load_config
from diversed.experiment.config import judge_tasks, validated
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
MODELS = "resources/models/{pair}.json"  # prepare_models' record of a local pair
SOURCES = "resources/sources.json"  # fetch_sources' record: every hub source is in the Hugging Face cache
KEPT = "results/kept"  # finished quality runs of a failed decode job (generate --keep)
TABLES = "results/tables"
TABLE_NAMES = ("table1", "table2", "table3", "speed", "families", "knobs", "retention", "lambda")
TIDY = ("runs", "prompts", "sweeps", "sweep_prompts", "weights", "trained")  # aggregate's tidy CSVs
FIGURES = "figures"
REPORT = "results/REPORT.md"
RESULTS = "results"
AUDIT = "results/audit.txt"  # diversed audit's outcome: timed = scored, accounting
NUMBER = r"\d+(\.\d+)?(e-\d+)?"  # a float as str() writes it (0.1, 1.0, 1e-05): the T and lambda wildcards

# the rules that load a pair (and claim the GPU of a CUDA pair)
MODEL_RULES = ("decode", "decode_transfer", "time", "sweep", "time_sweep", "sweep_lambda", "train_head",
               "train_head_lambda", "distill_draft", "mine_judge", "decode_judged", "time_judged", "time_sweep_judged")
# the decoding rules' variants on a task AutoJudge runs on: the same jobs with the judge's runs among their outputs
JUDGED = {"decode_judged": "decode", "time_judged": "time", "time_sweep_judged": "time_sweep"}
LOCAL_RULES = ("fetch_sources", "aggregate", "audit", "plot", "report")  # on a cluster: the submitting node
WILDCARDS = {"fetch_sources": (), "prepare_models": ("pair",), "train_head": ("pair", "task"),
             "train_head_lambda": ("pair", "task", "lam"), "distill_draft": ("pair", "task"),
             "mine_judge": ("pair", "task"), "train_judge": ("pair", "task"),
             "sweep": ("pair", "task", "T", "K"), "time_sweep": ("pair", "task", "T", "K"),
             "sweep_lambda": ("pair", "task"), "decode": ("pair", "task", "T", "seed"), "time": ("pair", "task", "T"),
             "decode_transfer": ("pair", "task", "head", "T", "seed"), "aggregate": (), "audit": (), "plot": (),
             "report": ()}
WILDCARDS |= {variant: WILDCARDS[rule] for variant, rule in JUDGED.items()}


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
    method: str  # a verifier, finetuned, or dynamic@{task} (DIVERSED with another task's head)
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


class Plan:
    """A workflow config expanded into its jobs and runs (`jobs`, `runs`, `job(rule, wildcards)`), and each rule's
    output patterns (`outputs(rule)`, what Snakemake matches wildcards against)."""

    def __init__(self, config: dict):
        self.config = c = validated(config)
        self.pairs, self.tasks, self.sweep = c["pairs"], c["tasks"], c["sweep"]
        self.methods = c["methods"]
        self.baselines = [m for m in BASELINES if m in self.methods]
        self.speculative = [m for m in self.methods if m not in BASELINES]
        self.families = [m for m in self.methods if m in FAMILIES]  # relaxed verifiers at their sweep's knob
        self.chosen = [m for m in self.speculative if m == "fixed" or m in FAMILIES]  # a sweep chooses their setting
        self.given = {Method(v, x).label: v for v in GIVEN for x in c["given"].get(v, [])}  # method: verifier
        self.lambda_tasks = c["lambda_sweep"]["tasks"]
        self.judge_tasks = judge_tasks(c)
        self.transfer_heads = sorted({t["head"] for t in c["transfer"]})
        self.sweep_head = "dynamic" in self.speculative  # the fronts' references each sweep decodes
        self.sweep_target = "autoregressive" in self.methods
        self.hub: Sources = hub_sources(c)
        self.jobs: list[Job] = []
        self._index: dict[tuple, Job] = {}
        for make in (self._fetch, self._prepare, self._heads, self._drafts, self._judges, self._sweeps,
                     self._decodes, self._report):
            for job in make():
                self.jobs.append(job)
                self._index[job.rule, tuple(sorted(job.wildcards.items()))] = job

    # ------------------------------------------------------------------------------------------ the table

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
        """The output patterns of a rule: its jobs' outputs with the wildcards left in."""
        return self._make_outputs(rule, {k: "{" + k + "}" for k in WILDCARDS[rule]})

    def rows(self) -> list[dict]:
        """The job table as flat rows (one per job; its runs counted), e.g. for pandas."""
        return [{"rule": j.rule, **j.wildcards, "threads": j.threads, "gpu": j.gpu, "runs": len(j.runs),
                 "inputs": sorted(p for v in j.inputs.values() for p in ([v] if isinstance(v, str) else v)),
                 "outputs": sorted(p for v in j.outputs.values() for p in ([v] if isinstance(v, str) else v))}
                for j in self.jobs]

    # ------------------------------------------------------------------------------------------ paths

    def _make_outputs(self, rule: str, w: dict[str, str]) -> dict[str, str | list[str]]:
        """A rule's outputs at wildcards w (concrete values, or "{name}" for patterns)."""
        def each(dirs: list[str]) -> dict[str, list[str]]:
            return {k: [f"{d}/{name}" for d in dirs] for k, name in
                    (("manifests", "manifest.json"), ("generations", "generations.jsonl"), ("scores", "scores.json"))}

        if JUDGED.get(rule, rule) in ("decode", "time", "decode_transfer", "time_sweep"):
            return each([r.dir for r in self._run_list(rule, w)])
        return {
            "fetch_sources": lambda: {"record": SOURCES},
            "prepare_models": lambda: {"record": MODELS.format(**w)},
            "train_head": lambda: {"head": HEAD.format(**w) + "/head.safetensors",
                                   "log_csv": HEAD.format(**w) + "/train_log.csv"},
            "train_head_lambda": lambda: {"head": LAMBDA_HEAD.format(**w) + "/head.safetensors",
                                          "log_csv": LAMBDA_HEAD.format(**w) + "/train_log.csv"},
            "distill_draft": lambda: {"draft": DRAFT.format(**w)},
            "mine_judge": lambda: {"labels": JUDGE_LABELS.format(**w) + "/manifest.json"},
            "train_judge": lambda: {"judge": JUDGE.format(**w) + "/judge.safetensors",
                                    "manifest": JUDGE.format(**w) + "/manifest.json"},
            "sweep": lambda: {"choice": SWEEP.format(**w) + "/choice.json", "table": SWEEP.format(**w) + "/sweep.csv",
                              "markdown": SWEEP.format(**w) + "/sweep.md"},
            "sweep_lambda": lambda: {"head": HEAD.format(**w) + "/head.safetensors",
                                     "log_csv": HEAD.format(**w) + "/train_log.csv",
                                     "choice": LAMBDA.format(**w) + "/choice.json",
                                     "table": LAMBDA.format(**w) + "/lambda.csv",
                                     "markdown": LAMBDA.format(**w) + "/lambda.md"},
            "aggregate": lambda: {**{name: f"{TABLES}/{name}.csv" for name in TIDY}, "tables": [
                f"{TABLES}/{n}.{ext}" for n in TABLE_NAMES for ext in ("csv", "md", "tex")]},
            "plot": lambda: {"figures": self._figures()},
            "audit": lambda: {"audit": AUDIT},
            "report": lambda: {"report": REPORT},
        }[rule]()

    def _figures(self) -> list[str]:
        """Named by `diversed plot` (T as %g there: figures/quality_vs_time_T1.png)."""
        stems = ["acceptance_vs_weight", "weight_distribution"] + [
            f"{kind}_T{float(T):g}" for kind in ("quality_vs_time", "acceptance_by_position", "acceptance_vs_bias",
                                                 "acceptance_vs_kl")
            for T in self.config["temperatures"]]
        return [f"{FIGURES}/{stem}.{ext}" for stem in stems for ext in ("png", "pdf")]

    def _models(self, pair: str, task: str) -> dict[str, str]:
        """What every job that loads a pair reads: its prepare_models record (a local pair), or the fetched hub
        sources (a hub model or a hub task)."""
        p = self.pairs[pair]
        inputs = {"models": MODELS.format(pair=pair)} if p["prepare"] != "none" else {}
        if any(hub_model(p[role], p["prepare"]) for role in ("target", "draft")) or \
                hub_task(task, self.tasks[task]["data_files"]):
            inputs["sources"] = SOURCES
        return inputs

    def _head(self, pair: str, task: str) -> str:
        return HEAD.format(pair=pair, task=task) + "/head.safetensors"

    def _judge(self, pair: str, task: str) -> str | None:
        """The task's AutoJudge classifier, None where the judge does not run on it."""
        return JUDGE.format(pair=pair, task=task) + "/judge.safetensors" if task in self.judge_tasks else None

    def _judged(self, task: str, judged: bool = False) -> bool:
        """Whether the judge runs on a task (a "{task}" pattern: as `judged` says)."""
        return task in self.judge_tasks if task in self.tasks else judged

    def _variant(self, rule: str, task: str) -> str:
        """decode, time or time_sweep, or its *_judged variant on a task the judge runs on."""
        return f"{rule}_judged" if task in self.judge_tasks else rule

    def _families(self, task: str, judged: bool = False) -> list[str]:
        """The families a task's sweeps and decodes run: judge only on the judge's tasks."""
        return [f for f in self.families if f != "judge" or self._judged(task, judged)]

    # ------------------------------------------------------------------------------------------ flags

    def _threads(self) -> int | None:
        """An untimed job's threads: config job_threads (None: every core)."""
        return self.config["job_threads"]

    def _batch(self, pair: str) -> int:
        """The rows a pair's quality decodes run in lockstep: its own batch_size, else the config's (also for a
        "{pair}" pattern: the batch is in no path)."""
        return self.pairs.get(pair, {}).get("batch_size") or self.config["batch_size"]

    def _gpu(self, pair: str) -> int:
        return 1 if self.pairs[pair]["device"].startswith("cuda") else 0

    def _pair_flags(self, pair: str) -> str:
        p = self.pairs[pair]
        return flags(RunConfig, target=p["target"], draft=p["draft"], draft_layers=p["draft_layers"],
                     dtype=p["dtype"], device=p["device"])

    def _prompt_flags(self, task: str, split: str, n: int, limit: int | None = None) -> str:
        return flags(RunConfig, task=task, data_files=self.tasks[task]["data_files"],
                     split=None if split == "eval" else split, n=n, limit=limit)

    def _decoding_flags(self, task: str, T, seed: int, K: int | None = None) -> str:
        c = self.config
        return flags(RunConfig, max_new_tokens=self.tasks[task]["max_new_tokens"], temperature=temperature(T),
                     sampling=c["sampling"], prompt_format=c["prompt_format"], scoring=c["scoring"], stop=c["stop"],
                     K=K, seed=seed)

    def _execution(self, timed: bool = False) -> str:
        """The engine's flags; timed: a timing job's (batch 1), whose capture is execution.timed_capture if set."""
        e = self.config["execution"]
        capture = e["timed_capture"] if timed and e["timed_capture"] else e["capture"]
        return flags(capture=capture, no_fastpath=not e["fastpath"])

    def _labels(self, **labels) -> str:
        return " ".join(f"--label {k}={v}" for k, v in {**labels, "experiment": self.config["experiment"]}.items())

    # ------------------------------------------------------------------------------------------ jobs

    def _fetch(self):
        if self.hub:
            yield Job("fetch_sources", {}, {}, self._make_outputs("fetch_sources", {}),
                      {"models": " ".join(f"--model {m}" for m in self.hub.models),
                       "tasks": " ".join(f"--task {t}" for t in self.hub.tasks)}, threads=1)

    def _prepare(self):
        for pair, p in self.pairs.items():
            if p["prepare"] == "none":
                continue
            recipe = DraftRecipe(layers=p["draft_layers"]).id if p["prepare"] == "embedded" else "none"
            w = {"pair": pair}
            yield Job("prepare_models", w, {}, self._make_outputs("prepare_models", w),
                      {"kind": p["prepare"], "draft_layers": str(p["draft_layers"]), "recipe": recipe}, threads=None)

    def _head_tasks(self) -> list[str]:
        """The tasks whose head some job reads: every task when DIVERSED runs, and each transfer's head task."""
        return [t for t in self.tasks if "dynamic" in self.speculative or t in self.transfer_heads]

    def _train_job(self, rule: str, pair: str, task: str, **changes) -> Job:
        p = self.pairs[pair]
        cfg = HeadTrainConfig(**{k: p[k] for k in ("target", "draft", "draft_layers", "dtype", "device")},
                              task=task, data_files=self.tasks[task]["data_files"], n_train=self.tasks[task]["n_train"],
                              prompt_format=self.config["prompt_format"], scoring=self.config["scoring"], seed=0,
                              **self.config["train_head"] | changes)
        w = {"pair": pair, "task": task} | ({"lam": temperature(changes["acceptance_weight"])} if changes else {})
        outputs = self._make_outputs(rule, w)
        return Job(rule, w, self._models(pair, task), outputs,
                   {"pair": self._pair_flags(pair), "config": self._train_flags(cfg, "train_head"),
                    "execution": self._execution(), "out": _parent(outputs["head"])},
                   threads=self._threads(), gpu=self._gpu(pair), train=cfg)

    def _heads(self):
        lam = self.config["lambda_sweep"]
        for pair, task in itertools.product(self.pairs, self._head_tasks()):
            if task not in self.lambda_tasks:
                yield self._train_job("train_head", pair, task)
                continue
            for value in lam["values"]:
                yield self._train_job("train_head_lambda", pair, task, acceptance_weight=float(value))
            yield self._sweep_lambda(pair, task)

    def _sweep_lambda(self, pair: str, task: str) -> Job:
        lam, K, t = self.config["lambda_sweep"], self.config["K"][0], self.tasks[task]
        heads = [LAMBDA_HEAD.format(pair=pair, task=task, lam=float(x)) + "/head.safetensors" for x in lam["values"]]
        w = {"pair": pair, "task": task}
        at = w | {"T": lam["temperature"], "K": K}
        runs = [self._run("sweep_lambda", f"{LAMBDA.format(**w)}/{name}", at, method=verifier, verifier=verifier,
                          split="dev", prompts=t["n_dev"], changes=changes) for name, verifier, changes in
                [(point_name({"verifier": "strict"}), "strict", {})]
                + [(f"lambda{float(x)}", "dynamic", self._head_changes(h))
                   for x, h in zip(lam["values"], heads, strict=True)]]
        return Job("sweep_lambda", w, self._models(pair, task) | {"heads": heads},
                   self._make_outputs("sweep_lambda", w),
                   {"pair": self._pair_flags(pair), "prompts": self._prompt_flags(task, "dev", t["n_dev"]),
                    "decoding": self._decoding_flags(task, lam["temperature"], 0, K),
                    "heads": flags(heads=heads), "tolerance": self._tolerance(),
                    "batch": str(self._batch(pair)),
                    "execution": self._execution(), "labels": self._labels(pair=pair), "out": LAMBDA.format(**w),
                    "head_out": HEAD.format(**w)},
                   threads=self._threads(), gpu=self._gpu(pair), runs=tuple(runs))

    def _drafts(self):
        if "finetuned" not in self.speculative:
            return
        for pair, task in itertools.product(self.pairs, self.tasks):
            p = self.pairs[pair]
            cfg = DistillConfig(**{k: p[k] for k in ("target", "draft", "draft_layers", "dtype", "device")},
                                task=task, data_files=self.tasks[task]["data_files"],
                                n_train=self.tasks[task]["n_train"], prompt_format=self.config["prompt_format"],
                                seed=0, **self.config["distill"])
            w = {"pair": pair, "task": task}
            yield Job("distill_draft", w, self._models(pair, task), self._make_outputs("distill_draft", w),
                      {"pair": self._pair_flags(pair), "config": self._train_flags(cfg, "distill"),
                       "execution": self._execution()}, threads=self._threads(), gpu=self._gpu(pair), train=cfg)

    def _judges(self):
        """AutoJudge per (pair, judge task): its labels mined on the train prompts, then its classifier (CPU)."""
        fit = {k: self.config["judge"][k] for k in ("l2", "holdout", "iterations")}
        for pair, task in itertools.product(self.pairs, self.judge_tasks):
            p, t, w = self.pairs[pair], self.tasks[task], {"pair": pair, "task": task}
            cfg = JudgeConfig(**{k: p[k] for k in ("target", "draft", "draft_layers", "dtype", "device")}, task=task,
                              data_files=t["data_files"], n_train=t["n_train"], max_new_tokens=t["max_new_tokens"],
                              prompt_format=self.config["prompt_format"], scoring=self.config["scoring"], seed=0,
                              batch_size=self._batch(pair))
            names = ("task", "data_files", "n_train", "max_new_tokens", "prompt_format", "scoring", "seed",
                     "batch_size")
            labels = self._make_outputs("mine_judge", w)["labels"]
            yield Job("mine_judge", w, self._models(pair, task), self._make_outputs("mine_judge", w),
                      {"pair": self._pair_flags(pair),
                       "config": flags(JudgeConfig, **{n: getattr(cfg, n) for n in names}),
                       "execution": self._execution(), "out": _parent(labels)},
                      threads=self._threads(), gpu=self._gpu(pair), train=cfg)
            yield Job("train_judge", w, {"labels": labels}, self._make_outputs("train_judge", w),
                      {"labels": _parent(labels), "fit": flags(JudgeFit, **fit), "out": JUDGE.format(**w)}, threads=1)

    def _train_flags(self, cfg: HeadTrainConfig | DistillConfig, key: str) -> str:
        """A training job's flags: its task's prompts, then every setting the config's `key` section holds."""
        names = ["task", "data_files", "n_train", "prompt_format", "seed", *(["scoring"] * (key == "train_head")),
                 *self.config[key]]
        return flags(type(cfg), **{name: getattr(cfg, name) for name in names})

    def _tolerance(self) -> str:
        return flags(tolerance=self.sweep["tolerance"], select=self.sweep["select"])

    def _sweep_points(self, head: str | None, task: str, judge: str | None, judged: bool = False) -> list[dict]:
        s = self.sweep
        families = {f: s["families"][f] for f in self._families(task, judged)}
        return Grid(s["weights"], s["mixings"], families, s["deferrals"],
                    head=head if self.sweep_head else None, target_only=self.sweep_target,
                    head_mixing=self._head_mixing, judge=judge).points()

    def _sweep_settings(self) -> list[tuple[str, str, str, int]]:
        """(pair, task, T, K) of every sweep: each setting whose fixed w or family knob the runs read, and the
        acceptance-vs-w figure's."""
        c, s = self.config, self.sweep
        read = set(itertools.product(self.pairs, self.tasks, map(temperature, c["temperatures"]), c["K"])) \
            if self.chosen else set()
        figure = set(itertools.product(self.pairs, s["figure_tasks"], [temperature(s["figure_temperature"])],
                                       s["figure_K"]))
        return sorted(read | figure)

    def _sweeps(self):
        s, read = self.sweep, bool(self.chosen)
        for pair, task, T, K in self._sweep_settings():
            t, w = self.tasks[task], {"pair": pair, "task": task, "T": T, "K": str(K)}
            inputs = self._models(pair, task) | ({"head": self._head(pair, task)} if self.sweep_head else {}) | (
                {"judge": judge} if (judge := self._judge(pair, task)) else {})
            points = self._sweep_points(inputs.get("head"), task, judge)
            runs = [self._point_run("sweep", f"{SWEEP.format(**w)}/{point_name(p)}", w, p, t["n_dev"]) for p in points]
            grid = " ".join([flags(weights=s["weights"], mixings=s["mixings"])]
                            + [flags(**{f: s["families"][f]}) for f in self._families(task)]
                            + ([flags(deferrals=s["deferrals"])] if "cascade" in self.families else [])
                            + [flags(judge_file=judge)])
            yield Job("sweep", w, inputs, self._make_outputs("sweep", w),
                      {"pair": self._pair_flags(pair), "prompts": self._prompt_flags(task, "dev", t["n_dev"]),
                       "decoding": self._decoding_flags(task, T, 0, K), "grid": grid,
                       "references": flags(head=inputs.get("head"), target_only=self.sweep_target),
                       "tolerance": self._tolerance(), "batch": str(self._batch(pair)),
                       "execution": self._execution(), "labels": self._labels(pair=pair), "out": SWEEP.format(**w)},
                      threads=self._threads(), gpu=self._gpu(pair), runs=tuple(runs))
            if read and K in self.config["K"] and float(T) in map(float, self.config["temperatures"]):
                yield self._time_sweep(pair, task, T, K, inputs)

    def _time_sweep(self, pair: str, task: str, T: str, K: int, inputs: dict) -> Job:
        w = {"pair": pair, "task": task, "T": T, "K": str(K)}
        rule = self._variant("time_sweep", task)
        runs = self._run_list(rule, w, inputs.get("head"))
        t = self.tasks[task]
        return Job(rule, w, inputs, self._make_outputs(rule, w),
                   {"pair": self._pair_flags(pair),
                    "prompts": self._prompt_flags(task, "dev", t["n_dev"], runs[0].prompts),
                    "decoding": self._decoding_flags(task, T, 0),
                    "labels": self._labels(pair=pair, task=task, timing=1), "execution": self._execution(timed=True),
                    "runs": " ".join(r.spec() for r in runs)},
                   threads=None, gpu=self._gpu(pair), runs=tuple(runs))

    def _decode_inputs(self, pair: str, task: str, T: str) -> dict:
        """What decode's and time's runs read besides the models: the fine-tuned draft, each K's sweep choice,
        the task's head."""
        inputs: dict = self._models(pair, task)
        if "finetuned" in self.speculative:
            inputs["draft"] = DRAFT.format(pair=pair, task=task)
        if self.chosen:
            inputs["weights"] = [SWEEP.format(pair=pair, task=task, T=T, K=K) + "/choice.json"
                                 for K in self.config["K"]]
        if "dynamic" in self.speculative:
            inputs["head"] = self._head(pair, task)
        if judge := self._judge(pair, task):
            inputs["judge"] = judge
        return inputs

    def _decodes(self):
        c = self.config
        for pair, task, T in itertools.product(self.pairs, self.tasks, map(temperature, c["temperatures"])):
            for seed in c["seeds"]:
                yield self._decode_job(self._variant("decode", task), {"pair": pair, "task": task, "T": T,
                                                                       "seed": str(seed)})
            yield self._decode_job(self._variant("time", task), {"pair": pair, "task": task, "T": T})
        for pair, t, seed in itertools.product(self.pairs, c["transfer"], c["seeds"]):
            yield self._decode_job("decode_transfer", {"pair": pair, "task": t["eval"], "head": t["head"],
                                                       "T": temperature(c["transfer_temperature"]),
                                                       "seed": str(seed)})

    def _decode_job(self, rule: str, w: dict[str, str]) -> Job:
        pair, task, timing = w["pair"], w["task"], JUDGED.get(rule, rule) == "time"
        if rule == "decode_transfer":
            inputs = self._models(pair, task) | {"head": self._head(pair, w["head"])}
        else:
            inputs = self._decode_inputs(pair, task, w["T"])
        runs = self._run_list(rule, w)
        t = self.tasks[task]
        seed = int(w.get("seed", self.config["seeds"][0]))
        job_flags = {"pair": self._pair_flags(pair),
                     "prompts": self._prompt_flags(task, "eval", t["n_eval"], runs[0].prompts if timing else None),
                     "decoding": self._decoding_flags(task, w["T"], seed),
                     "labels": self._labels(pair=pair, task=task, **({"timing": 1} if timing else {})),
                     "execution": self._execution(timed=timing), "runs": " ".join(r.spec() for r in runs)}
        if not timing:
            job_flags["batch"] = str(self._batch(pair))
        return Job(rule, w, inputs, self._make_outputs(rule, w), job_flags,
                   threads=None if timing else self._threads(), gpu=self._gpu(pair), runs=tuple(runs))

    def _report(self):
        """aggregate (every scored run and sweep), plot and report (the tables only)."""
        def dirs(*rules):
            return [r.dir for job in self.jobs if job.rule in rules for r in job.runs]

        scored = {"scores": dirs("decode", "decode_judged", "decode_transfer"),
                  "timing_scores": dirs("time", "time_judged"), "sweep_timing_scores": dirs("time_sweep",
                                                                                            "time_sweep_judged")}
        inputs = {name: [f"{d}/scores.json" for d in ds] for name, ds in scored.items()} | {
            "sweeps": [job.outputs["table"] for job in self.of("sweep")],
            "lambda_sweeps": [job.outputs["table"] for job in self.of("sweep_lambda")]}
        tables = self._make_outputs("aggregate", {})
        yield Job("aggregate", {}, inputs, tables, {
            "runs": flags(runs=scored["scores"]), "timing_runs": flags(timing_runs=scored["timing_scores"]),
            "sweeps": flags(sweeps=inputs["sweeps"]), "sweep_timing_runs": flags(
                sweep_timing_runs=scored["sweep_timing_scores"]), "lambda_sweeps": flags(
                lambda_sweeps=inputs["lambda_sweeps"]),
            "transfer_temperature": temperature(self.config["transfer_temperature"]), "out": TABLES}, threads=1)
        read = {name: tables[name] for name in ("runs", "prompts", "sweeps", "weights")}
        yield Job("plot", {}, read, self._make_outputs("plot", {}), {
            "temperatures": " ".join(temperature(T) for T in self.config["temperatures"]),
            "figure_temperature": temperature(self.sweep["figure_temperature"]), "tables": TABLES, "out": FIGURES},
            threads=1)
        audit = self._make_outputs("audit", {})
        yield Job("audit", {}, inputs, audit, {"results": RESULTS}, threads=1)
        yield Job("report", {}, {name: tables[name] for name in ("runs", "prompts", "sweeps", "sweep_prompts",
                                                                 "trained", "tables")} | {
            "figures": self._figures()} | audit, self._make_outputs("report", {}), {"tables": TABLES,
                                                                                   "figures": FIGURES}, threads=1)

    # ------------------------------------------------------------------------------------------ runs

    def _run(self, rule: str, dir: str, at: dict, **run) -> PlannedRun:
        """A run of `rule` in `dir` at setting `at` (pair, task, T, K, seed; values or "{name}" patterns); run: its
        method, verifier, split, prompts and, where they apply, timing and changes. Its token budget is its task's,
        its batch the pair's (1 when timed)."""
        K, task = at.get("K"), at["task"]
        return PlannedRun(dir=dir, rule=rule, pair=at["pair"], task=task, temperature=_value(at["T"], float),
                          K=None if K is None else _value(K, int), seed=_value(at.get("seed", 0), int),
                          max_new_tokens=self.tasks[task]["max_new_tokens"] if task in self.tasks else 0,
                          batch_size=1 if run.get("timing") else self._batch(at["pair"]), **run)

    def _run_list(self, rule: str, w: dict[str, str], head: str | None = None) -> list[PlannedRun]:
        """The runs of a decode, time, decode_transfer or time_sweep job at wildcards w (values, or "{name}"
        patterns): target only (and draft only) first, then each speculative method at each K."""
        judged, rule = rule in JUDGED, JUDGED.get(rule, rule)
        if rule == "time_sweep":
            return self._sweep_timing_runs(w, head, judged)
        pair, task, T, K_list = w["pair"], w["task"], w["T"], self.config["K"]
        timing = rule == "time"
        seed = w.get("seed", str(self.config["seeds"][0]))
        t = self.tasks.get(task)
        n = 0 if t is None else min(t["n_timing"], t["n_eval"]) if timing else t["n_eval"]
        if rule == "decode_transfer":
            head = self._head(pair, w["head"])
            method = Method("dynamic", head_task=w["head"]).label
            return [self._run(rule, RUN.format(pair=pair, task=task, method=method, T=T, K=K, seed=seed), w | {"K": K},
                              method=method, verifier="dynamic", split="eval", prompts=n,
                              changes=self._head_changes(head))
                    for K in K_list]
        runs = []
        methods = [m for m in [*self.speculative, *self.given]
                   if Method.parse(m).base != "judge" or self._judged(task, judged)]
        for method, K in [(b, None) for b in self.baselines] + [(m, K) for m in methods for K in K_list]:
            if timing:
                template = TIMING_BASELINE if K is None else TIMING_RUN
            else:
                template = BASELINE_RUN if K is None else RUN
            d = template.format(pair=pair, task=task, method=method, T=T, K=K, seed=seed)
            verifier = "strict" if method == "finetuned" else self.given.get(method, method)
            runs.append(self._run(rule, d, w | {"K": K, "seed": seed}, method=method, verifier=verifier,
                                  split="eval", prompts=n,
                                  timing=timing, changes=self._method_changes(method, pair, task, T, K)))
        return runs

    def _method_changes(self, method: str, pair: str, task: str, T: str, K: int | None) -> dict:
        """What a method's run changes: the fine-tuned draft, the setting its sweep chose or the config gives, the
        task's head."""
        m = Method.parse(method)
        if m.base == "judge":  # the given setting or the sweep's choice, with the task's judge
            return {"judge": self._judge(pair, task)} | (
                {"knob": m.given} if method in self.given else
                {"weight_file": SWEEP.format(pair=pair, task=task, T=T, K=K) + "/choice.json"})
        if method in self.given:
            return {"weight": m.given, "mixing": "linear"} if m.base == "fixed" else \
                {"knob": m.given} | ({"deferral": self.sweep["deferrals"][0]} if m.base == "cascade" else {})
        if method == "finetuned":
            return {"draft": DRAFT.format(pair=pair, task=task)}
        if method in self.chosen:
            return {"weight_file": SWEEP.format(pair=pair, task=task, T=T, K=K) + "/choice.json"}
        if method == "dynamic":
            return self._head_changes(self._head(pair, task))
        return {}

    @property
    def _head_mixing(self) -> str:
        """The mixing the config's heads are trained with (train_head.mixing), which DIVERSED decodes with."""
        return self.config.get("train_head", {}).get("mixing", "linear")

    def _head_changes(self, head: str) -> dict:
        """A DIVERSED run's changes: its head, and the mixing the head is trained with where it is not linear."""
        return {"head": head} | ({"mixing": self._head_mixing} if self._head_mixing != "linear" else {})

    def _sweep_timing_runs(self, w: dict[str, str], head: str | None, judged: bool = False) -> list[PlannedRun]:
        """time_sweep's runs: each point of the sweep at its K (DIVERSED with the task's head), the target alone."""
        pair, task = w["pair"], w["task"]
        t = self.tasks.get(task)
        n = 0 if t is None else min(self.sweep["n_timing"] or t["n_timing"], t["n_dev"])
        head = head or (self._head(pair, task) if self.sweep_head else None)
        judge = self._judge(pair, task) if t is not None else JUDGE.format(**w) + "/judge.safetensors"
        return [self._point_run("time_sweep", f"{SWEEP_TIMING.format(**w)}/{point_name(p)}", w, p, n, timing=True)
                for p in self._sweep_points(head, task, judge, judged)]

    def _point_run(self, rule: str, dir: str, w: dict[str, str], point: dict, prompts: int,
                   timing: bool = False) -> PlannedRun:
        """A sweep point's run (Grid.points' changes): on the dev split, at the sweep's K (the target alone: none)."""
        v = point["verifier"]
        return self._run(rule, dir, w | {"K": None if v in BASELINES else w["K"], "seed": 0}, method=v, verifier=v,
                         split="dev", prompts=prompts, timing=timing,
                         changes={k: x for k, x in point.items() if k != "verifier"})


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _value(x, kind):
    """x as kind, or x itself where it is a "{name}" pattern (a rule's outputs with wildcards left in)."""
    return x if isinstance(x, str) and x.startswith("{") else kind(x)


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
