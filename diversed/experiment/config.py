"""A workflow config as typed dataclasses, each key declared once (diversed.utils.option: type, default, range,
choices, help). The committed schema (diversed/config.schema.yaml) and the key table (docs/CONFIG.md) are
generated from these declarations (`python -m diversed.experiment`), and `validated` parses a config through them.
The training sections are the training settings objects themselves, less the fields the plan sets per job."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from diversed import protocol
from diversed.decoding.settings import (
    CAPTURES,
    DEFAULT_DRAFT_LAYERS,
    DEFERRAL,
    DEFERRALS,
    DTYPES,
    EMBEDDED_DRAFTS,
    FAMILIES,
    METHODS,
    MIXINGS,
    RULES,
)
from diversed.experiment.declared import build, parse
from diversed.runs.settings import SAMPLINGS, SELECTIONS, STOPS, WEIGHT_GRID
from diversed.tasks import PROMPT_FORMATS, SCORINGS, get_task, registry
from diversed.training.settings import DistillConfig, HeadTrainConfig, JudgeFit
from diversed.utils import option

PREPARES = (*EMBEDDED_DRAFTS, "tiny", "none")  # the local checkpoints diversed prepare-models builds, or none
# the training settings the plan sets per job (from the pair, the task and the top-level keys), never a section's
JOB_FIELDS = ("task", "target", "draft", "draft_layers", "data_files", "n_train", "seed", "dtype", "device",
              "prompt_format", "scoring")


@dataclass
class Pair:
    """A draft/target model pair."""

    target: str = option("", "Target model: a local checkpoint folder, a Hugging Face hub id, or `embedded`.",
                         required=True)
    draft: str = option("", "Draft model, as target, or `embedded-weak` (the embedded target's first layers, "
                            "untrained); must share the target's vocabulary.", required=True)
    draft_layers: int = option(DEFAULT_DRAFT_LAYERS, "Decoder layers of the embedded draft; ignored for other models.",
                               low=1)
    prepare: str = option("none", "Build local checkpoints first (the embedded SmolLM2 pair with its distilled or its "
                                  "weak draft, the tiny random pair) or load from the hub (none).", choices=PREPARES)
    batch_size: int | None = option(None, "Rows this pair's quality decodes run in lockstep, where the config's "
                                          "batch_size does not fit its GPU (null: the config's).", low=1)
    dtype: str = option("float32", "Weight dtype of both models.", choices=DTYPES)
    device: str = option("cpu", "Device of both models; a cuda device makes decoding and training rules claim one "
                                "GPU.", pattern="^(cpu|cuda(:[0-9]+)?)$")


@dataclass
class TaskSetup:
    """How much of one task the experiment decodes, and on which data."""

    data_files: str | None = option(None, "Local JSONL replacing the hub dataset (offline runs), in the hub's row "
                                          "format or flat: one file is divided train:dev:eval = 2:1:2 (seeded), a "
                                          "path with {split} names one file per split (train, dev, eval); null: the "
                                          "task's own source.")
    n_eval: int = option(100, "Eval prompts per decoding run (a fixed, seeded subsample of the eval split).", low=1)
    n_dev: int = option(100, "Dev prompts per sweep point (a seeded subsample of the dev split, disjoint from the "
                             "eval and train splits): every setting is chosen on these, never on the eval prompts "
                             "reported.", low=1)
    n_train: int = option(400, "Training prompts of the head, the fine-tuned draft and the judge (a seeded "
                               "subsample of the train split).", low=1)
    max_new_tokens: int = option(128, "Generation length of the decoding runs (the training lengths: "
                                      "train_head.max_new_tokens, distill.max_new_tokens).", low=1)
    n_timing: int = option(20, "Timed prompts: the first n_timing eval prompts, decoded at batch 1 by every method "
                               "in one job, interleaved prompt by prompt (the speed table and claim read only "
                               "these).", low=1)


@dataclass
class Engine:
    """How the engine runs every decode and training job (never what it computes)."""

    capture: str = option("none", "The fast path's fixed-shape steps: eager, one CUDA graph each (GPU), or "
                                  "torch.compile.", choices=CAPTURES)
    timed_capture: str | None = option(None, "The timed jobs' capture (time, time_sweep: batch 1, where a "
                                             "launch-bound step gains most from CUDA graphs); null: capture.",
                                       choices=CAPTURES)
    fastpath: bool = option(True, "The static-cache fast path for Llama / Qwen3 (false: transformers' modules).")


@dataclass
class Transfer:
    """One cross-task run (Table 3): the learned verifiers trained on task `head` decode task `eval` (DIVERSED's
    head; AutoJudge's judge, at its threshold chosen on `head`, where the judge runs on `head`)."""

    head: str = option("", "Task the head (and AutoJudge's judge) was trained on.", required=True)
    eval: str = option("", "Task it is evaluated on.", required=True)


@dataclass
class LambdaSweep:
    """Lambda (train_head.acceptance_weight) chosen on the dev split, per task."""

    tasks: list[str] = option([], "Tasks whose lambda is chosen on dev: a head trained at each value decodes the dev "
                                  "prompts beside strict at `temperature` and the first K, and the task keeps the "
                                  "largest acceptance non-inferior to strict's quality among the heads that did "
                                  "not collapse (else the smallest lambda); none: no lambda sweep.")
    values: list[float] = option([], "The candidate lambdas (fractions of the reward loss with acceptance_term "
                                     "relative).", low=0)
    temperature: float = option(1.0, "Temperature of the dev decodes that choose.", above=0)


def _knobs(verifier: str, what: str) -> tuple[type, object]:
    """The (type, option) of one family's knob values in a config (sweep.families, given)."""
    rule = RULES[verifier]
    finite = {"low": rule.low} if rule.low != -float("inf") else {}
    finite |= {"high": rule.high} if rule.high != float("inf") else {}
    return list[int] if rule.integer else list[float], option([], f"{what} of {rule.knob}", nonempty=True, **finite)


@dataclass
class Sweep:
    """The fronts on the dev split: the static weights' (verifier fixed) and each family's in methods."""

    families: dict[str, list[float]] = option({}, "Knob values swept for each relaxed family that methods runs; a "
                                                  "family in methods needs its values here.",
                                              keys={f: _knobs(f, "values") for f in FAMILIES})
    deferrals: list[str] = option([DEFERRAL], "Cascade deferrals swept (each at every alpha of families.cascade).",
                                  choices=DEFERRALS, nonempty=True)
    weights: list[float] = option(list(WEIGHT_GRID), "Grid of w (weight on the target); strict (w = 1) is always "
                                                 "added.",
                                  low=0, high=1, nonempty=True)
    mixings: list[str] = option(list(MIXINGS), "Ensemble forms swept.", choices=MIXINGS, nonempty=True)
    tolerance: float | None = option(None, "Allowed quality drop against strict when choosing (null: the metric's "
                                           "default).", low=0)
    select: str = option("certified", "Which dev points may be chosen (the largest acceptance among them; strict "
                                      "when none accepts more): certified, the family's points tested from the least "
                                      "lenient, each a one-sided non-inferiority test at 5% against strict, up to the "
                                      "first that fails (Learn-then-Test's fixed sequence: the chosen point loses "
                                      "more than the tolerance with probability at most 5%); estimate, those whose "
                                      "dev estimate lies within the tolerance (no guarantee); noninferior, each shown "
                                      "non-inferior on its own (not adjusted for the points tried). The fixed w, each "
                                      "family's knob and lambda alike.", choices=SELECTIONS)
    n_timing: int | None = option(None, "Dev prompts on which each point of a sweep the runs read, DIVERSED and the "
                                        "target alone are timed at batch 1 (rule time_sweep); null: the task's "
                                        "n_timing.", low=1)
    figure_K: list[int] = option([3, 5, 7], "Draft lengths of the acceptance-vs-w figure.", low=1)
    figure_tasks: list[str] = option([], "Tasks swept for the acceptance-vs-w figure.")
    figure_temperature: float = option(1.0, "Temperature of the acceptance-vs-w figure.", above=0)


@dataclass
class Judging(JudgeFit):
    """AutoJudge in an experiment: the tasks it runs on, and its classifier's fit (`diversed train-judge`)."""

    tasks: list[str] | None = option(None, "The tasks the judge runs on (each needs references); null: every task "
                                           "with them.")


@dataclass
class Experiment:
    """The whole reproduction: its pairs, tasks, methods and grid, how its settings are chosen, trained and run.
    Runtime concerns (threads per core, GPUs, the cluster) live in workflow/profiles, never here."""

    experiment: str = option("embedded", "Name of this reproduction; groups its runs in W&B and labels every "
                                         "manifest.")
    pairs: dict[str, Pair] = option({}, "Draft/target model pairs, by a short name used in paths and tables.",
                                    required=True, nonempty=True)
    tasks: dict[str, TaskSetup] = option({}, "Tasks to run, by name (any task of diversed.tasks.registry()).",
                                         required=True, nonempty=True)
    job_threads: int | None = option(None, "Threads of each untimed job (quality decodes, sweeps, training), at most "
                                           "every core; null: every core. Timed decodes and the pair's build always "
                                           "take every core, so they never share one.", low=1)
    batch_size: int = option(1, "Prompts decoded together by every quality decode (decode, transfer, lambda and "
                                "sweep jobs); a prompt's random numbers do not depend on it, its tokens only up to "
                                "float rounding. Timed decodes run at batch 1.", low=1)
    sampling: str = option("full", "The filters on p and q when sampling: full (the whole vocabulary) or model (the "
                                   "top-k and top-p of the target's generation config, on p and q alike: the "
                                   "authors').", choices=SAMPLINGS)
    prompt_format: str = option("chat", "How a task's prompt reaches the models: chat (its instructions in the "
                                        "tokenizer's chat template) or raw (the task's plain template: the authors').",
                                choices=PROMPT_FORMATS)
    protocol: str = option("standard", "The defaults of the settings the authors' code decides (docs/AUTHORS.md): "
                                       "standard (each setting's own default) or authors (their values); a key the "
                                       "config sets wins.", choices=protocol.PROTOCOLS)
    scoring: str = option("standard", "How completions are scored: standard (this harness's scorers on the whole "
                                      "completion) or authors (their per-example code: cut at the task's stop marker, "
                                      "GSM8K read as they read it, XSum's first 32 words, ROUGE unstemmed).",
                          choices=SCORINGS)
    stop: str = option("markers", "Where a decode scored as the authors stops early: markers (at the task's stop "
                                  "markers: the same scored text, fewer tokens) or length (at max_new_tokens or EOS "
                                  "only: the authors' decode).", choices=STOPS)
    execution: Engine = option(Engine(), "How the engine runs every decode and training job (recorded in each "
                                         "manifest, never part of a run id): the jobs' --capture and --no-fastpath.")
    methods: list[str] = option(["autoregressive", "strict", "finetuned", "fixed", "dynamic"],
                                "Decoding methods run at every (pair, task, T, K, seed): any verifier "
                                "(autoregressive: target only, draft: draft only, strict: SD, fixed: static ensemble "
                                "at the sweep's w, dynamic: DIVERSED, each relaxed family at the knob its sweep "
                                "chose, judge: AutoJudge on judge.tasks), or finetuned (SD with the distilled draft).",
                                choices=METHODS, nonempty=True, unique=True)
    given: dict[str, list[float]] = option(
        {}, "Settings run on the eval prompts as given, beside the ones each sweep chooses on dev (the authors' "
            "README: the static ensemble at w = 0.7, cascades at 0.5); a run's method is its verifier and value "
            "(fixed-0.7, cascade-0.5). Needs no sweep.",
        keys={"fixed": (list[float], option([], "values of w", low=0, high=1, nonempty=True))}
        | {f: _knobs(f, "given values") for f in FAMILIES})
    temperatures: list[float] = option([0.1, 1.0], "Sampling temperatures (Table 1 is T = 1.0, Table 2 T = 0.1).",
                                       above=0, nonempty=True)
    K: list[int] = option([5], "Draft lengths.", low=1, nonempty=True)
    seeds: list[int] = option([0, 1], "Seeds; each prompt is decoded once per seed.", low=0, nonempty=True)
    transfer: list[Transfer] = option([], "Cross-task runs (Table 3): DIVERSED's head, and AutoJudge's judge where "
                                          "it runs on the head task, decode another task; both tasks must be in tasks. "
                                          "The eval task's AutoJudge labels are mined for the judge's AUC there.")
    transfer_temperature: float = option(1.0, "Temperature of the cross-task runs.", above=0)
    lambda_sweep: LambdaSweep = option(LambdaSweep(), "Lambda chosen on dev per task; the other tasks train at "
                                                      "train_head.acceptance_weight.")
    sweep: Sweep = option(Sweep(), "The fronts on the dev split, where each family's setting is chosen.")
    train_head: HeadTrainConfig = option(HeadTrainConfig(), "DIVERSED's head training (REINFORCE), as `diversed "
                                                            "train head` takes it.", omit=JOB_FIELDS)
    distill: DistillConfig = option(DistillConfig(), "The fine-tuned-draft baseline, as `diversed train draft` takes "
                                                     "it.", omit=JOB_FIELDS)
    judge: Judging = option(Judging(), "AutoJudge (method judge, its threshold swept as sweep.families.judge), per "
                                       "pair and task it runs on: labels mined on the task's n_train train prompts "
                                       "at its max_new_tokens, a classifier fit on them (on the CPU).", omit=("seed",))


def validated(config: dict) -> dict:
    """A copy of a workflow config parsed through Experiment's declarations (the protocol's defaults first, then
    every key's type, range and choices, defaults filled in), and the checks across keys."""
    config = protocol.apply(copy.deepcopy(config))  # the protocol's defaults, where the config sets no value
    try:
        config = parse(Experiment, config)
        check(build(Experiment, config))
    except ValueError as e:
        raise ValueError(f"invalid config: {e}") from None
    return config


def experiment(config: dict) -> Experiment:
    """A workflow config as its typed Experiment, validated."""
    return build(Experiment, validated(config))


def check(x: Experiment) -> None:
    """The checks across keys: known tasks, the lambda sweep's tasks and values, each family's knobs."""
    if unknown := sorted(set(x.tasks) - set(registry())):
        raise ValueError(f"tasks: unknown task(s) {', '.join(unknown)}; allowed: {', '.join(sorted(registry()))}")
    e = x.execution
    on_cpu = sorted(name for name, p in x.pairs.items() if not p.device.startswith("cuda"))
    if on_cpu and "graph" in (e.capture, e.timed_capture):
        raise ValueError(f"execution: capture 'graph' (CUDA graphs) needs a CUDA device; pair(s) {', '.join(on_cpu)} "
                         "run on the CPU: use 'none' or 'compile' (timed_capture: null takes capture)")
    lam = x.lambda_sweep
    if unknown := sorted(set(lam.tasks) - set(x.tasks)):
        raise ValueError(f"lambda_sweep.tasks: {', '.join(unknown)} are not among the config's tasks")
    if lam.tasks and not lam.values:
        raise ValueError("lambda_sweep names tasks but no values: give the lambdas to choose among")
    if missing := [f for f in x.methods if f in FAMILIES and f not in x.sweep.families]:
        raise ValueError(f"methods: {', '.join(missing)} need their knob values in sweep.families (their sweep "
                         "chooses the setting)")
    for t in x.transfer:
        if unknown := sorted({t.head, t.eval} - set(x.tasks)):
            raise ValueError(f"transfer: task(s) {', '.join(unknown)} are not among the config's tasks")
    judged = x.judge.tasks
    if unknown := sorted(set(judged or []) - set(x.tasks)):
        raise ValueError(f"judge.tasks: {', '.join(unknown)} are not among the config's tasks")
    if unscored := [t for t in judged or [] if not scored(t)]:
        raise ValueError(f"judge.tasks: {', '.join(unscored)} have no references: AutoJudge's labels need a task "
                         "whose answers are scored")
    if "judge" in x.methods and not judge_tasks(x):
        raise ValueError("methods: judge runs on the tasks with a checkable answer, and the config has none")
    if unknown := sorted(set(x.sweep.figure_tasks) - set(x.tasks)):
        raise ValueError(f"sweep.figure_tasks: {', '.join(unknown)} are not among the config's tasks")


def judge_tasks(x: Experiment) -> list[str]:
    """The tasks AutoJudge runs on where the config runs it: judge.tasks, by default every task with references."""
    if "judge" not in x.methods:
        return []
    named = x.judge.tasks
    return [t for t in x.tasks if t in named] if named is not None else [t for t in x.tasks if scored(t)]


def scored(task: str) -> bool:
    """Whether a task's answers are scored against references (AutoJudge's labels need it), not by fidelity."""
    return not get_task(task).metric.fidelity
