"""A decoding run's config as plain data (`RunConfig`: everything that determines a run's output; its hash is the
run id; the command line's flags are generated from its fields), how a process decodes its runs (`Launch`) and a
sweep's points as changes of it (`Grid`, `point_name`). No torch is imported here."""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

from diversed.decoding.settings import (
    DEFAULT_DRAFT_LAYERS,
    DEFERRAL,
    DEFERRALS,
    DTYPES,
    FAMILIES,
    MIXINGS,
    RULES,
    TRAINED,
    VERIFIERS,
    Decoding,
    Execution,
    Sampling,
    check_trained_file,
    trained_module,
)
from diversed.tasks import PROMPT_FORMATS, SPLITS, check_scoring, registry
from diversed.utils import finite, option, safetensors_metadata

SAMPLINGS = ("full", "model")  # RunConfig.sampling
STOPS = ("markers", "length")  # RunConfig.stop


PROMPT_FIELDS = ("task", "data_files", "split", "n")  # RunConfig's fields that choose the prompts (one batch's)


@dataclass
class RunConfig:
    """Everything that determines a run's output (its hash is the run_id)."""

    target: str = option("embedded", "target model: local path, hub id, or `embedded`")
    draft: str = option("embedded", "draft model: local path, hub id, `embedded` or `embedded-weak`")
    draft_layers: int = option(DEFAULT_DRAFT_LAYERS, "which embedded draft (its N decoder layers)")
    verifier: str = option("strict", "the verifier (or one model alone)", choices=VERIFIERS)
    weight: float | None = option(None, "w on the target for the fixed verifier, in [0, 1]")
    head: str | None = option(None, "trained weight head (.safetensors) for the dynamic verifier")
    judge: str | None = option(None, "trained AutoJudge classifier (.safetensors, `diversed train-judge`) for the "
                                     "judge verifier")
    mixing: str = option("linear", "linear (w p + (1 - w) q) | logit (softmax of w log p + (1 - w) log q)")
    knob: float | None = option(None, "the setting of " + ", ".join(f"{v} ({RULES[v].knob})" for v in FAMILIES))
    knob2: float | None = option(None, "a second setting: " + ", ".join(
        f"{v} ({r.knob2})" for v, r in RULES.items() if r.knob2) + " (default: topk 0, threshold t_single = t_acc)")
    deferral: str = option(DEFERRAL, "cascade's deferral: " + " | ".join(DEFERRALS))
    K: int = option(5, "draft length", flag="-K")
    temperature: float = option(1.0, "temperature of p and q; 0 = greedy")
    sampling: str = option("full", "full (--top-k / --top-p as given) | model (the top-k and top-p of the target's "
                                   "generation config, as transformers' generate applies them; the authors')")
    top_k: int = option(0, "top-k filter applied to p and q (0: none)")
    top_p: float = option(1.0, "nucleus threshold applied to p and q")
    max_new_tokens: int = option(128, "new tokens per prompt at most")
    seed: int = option(0, "seed of the sampling (each prompt draws from its own stream (seed, prompt))")
    dtype: str = option("float32", "float32 | bfloat16 | float16")
    device: str = option("cpu", "cpu | cuda | cuda:N")
    prompt_format: str = option("chat", "chat (the task's instructions in the tokenizer's chat template) | raw (the "
                                        "task's plain template, no chat template: the authors')")
    scoring: str = option("standard", "standard | authors (cut at the task's stop markers; the authors' answer "
                                      "extraction; ROUGE unstemmed; XSum's first 32 words)")
    stop: str = option("markers", "where a decode scored as the authors stops early: markers (at the task's stop "
                                  "markers, which that scoring cuts at anyway) | length (at max_new_tokens or EOS "
                                  "only, cut when scored: the authors' decode)", choices=STOPS)
    task: str | None = option(None, "prompts and references of a task (diversed.tasks) instead of a prompt file")
    split: str = option("eval", "task split: train | dev | eval")
    n: int | None = option(None, "seeded subsample size of the task split (default: all)", flag="-n")
    data_files: str | None = option(None, "local JSONL for the task (offline use of hub tasks)")

    def decoding(self, generation_config: typing.Any = None) -> Decoding:
        """The engine's settings of this run (settings.Decoding checks them, so each message exists once);
        generation_config: the target's, whose filters `sampling: model` takes."""
        top_k, top_p = self.top_k, self.top_p
        if self.sampling == "model" and generation_config is not None:
            top_k, top_p = model_filters(generation_config)
        return Decoding(self.verifier, K=self.K, max_new_tokens=self.max_new_tokens,
                        sampling=Sampling(self.temperature, top_p, top_k), weight=self.weight, mixing=self.mixing,
                        knob=self.knob, knob2=self.knob2, deferral=self.deferral)

    def validate(self) -> None:
        """Checks that need no model: fail before anything is loaded."""
        for name in ("weight", "knob", "knob2", "temperature", "top_p"):
            finite(name, getattr(self, name))
        self.decoding()
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"unknown sampling {self.sampling!r}; allowed: {', '.join(SAMPLINGS)}")
        if self.sampling == "model" and (self.top_k, self.top_p) != (0, 1.0):
            raise ValueError("sampling 'model' takes top-k and top-p from the target's generation config: give "
                             "--top-k / --top-p only with --sampling full")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"unknown prompt format {self.prompt_format!r}; allowed: {', '.join(PROMPT_FORMATS)}")
        check_scoring(self.scoring)
        if self.stop not in STOPS:
            raise ValueError(f"unknown stop {self.stop!r}; allowed: {', '.join(STOPS)}")
        needs = trained_module(self.verifier)  # the head's or the judge's file
        if needs and not getattr(self, needs):
            raise ValueError(f"verifier {self.verifier!r} needs --{needs}, a trained {TRAINED[needs]} ({needs}= in "
                             "Python)")
        for name, user in (("head", "dynamic"), ("judge", "judge")):
            if getattr(self, name) is not None and self.verifier != user:
                raise ValueError(f"--{name} is only used by the {user!r} verifier, not {self.verifier!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; allowed: {', '.join(DTYPES)}")
        if needs and not Path(getattr(self, needs)).is_file():
            raise FileNotFoundError(f"{TRAINED[needs]} not found: {getattr(self, needs)}")
        if needs:
            check_trained_file(getattr(self, needs), needs)
        if self.verifier == "dynamic" and (trained := trained_mixing(self.head)) not in (None, self.mixing):
            raise ValueError(f"weight head {self.head} was trained with {trained} mixing: decode it with --mixing "
                             f"{trained} (DIVERSED verifies with the ensemble its head learnt)")
        if self.task is not None:
            if self.task not in registry():
                raise ValueError(f"unknown task {self.task!r}; allowed: {', '.join(sorted(registry()))}")
            if self.split not in SPLITS:
                raise ValueError(f"unknown split {self.split!r}; allowed: {', '.join(SPLITS)}")
            if self.n is not None and self.n < 1:
                raise ValueError(f"n (subsample size) must be >= 1, got {self.n}")


def model_filters(generation_config: typing.Any) -> tuple[int, float]:
    """(top_k, top_p) that transformers' generate applies when sampling with this generation config: a value the
    model's file leaves unset takes generate's default (top-k 50, top-p 1)."""
    from transformers import GenerationConfig

    defaults = GenerationConfig._get_default_generation_params()  # what generate fills in for unset fields
    top_k, top_p = (defaults[k] if getattr(generation_config, k) is None else getattr(generation_config, k)
                    for k in ("top_k", "top_p"))
    return int(top_k), float(top_p)


WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)  # the paper's grid of w; strict (w = 1) is always added


@dataclass(frozen=True)
class Grid:
    """A sweep's grid: each w of `weights` with each mixing, each family's knobs (families: {verifier: knobs};
    cascade's at each deferral; judge's with the classifier `judge`), and as references DIVERSED with `head`
    and the target alone (target_only)."""

    weights: tuple[float, ...] = WEIGHT_GRID
    mixings: tuple[str, ...] = MIXINGS
    families: dict | None = None
    deferrals: tuple[str, ...] = (DEFERRAL,)
    head: str | None = None
    target_only: bool = False
    head_mixing: str | None = None  # the head's trained mixing where its file is not there yet (a plan)
    judge: str | None = None  # AutoJudge's classifier, which the judge family's points decode with

    def points(self) -> list[dict]:
        """The points as RunConfig changes: strict (w = 1) first, then every w < 1 with each mixing, then each
        family's knobs, then DIVERSED and the target alone where asked (the references each front is drawn
        against; no choice reads them)."""
        for w in self.weights:
            if not 0 <= w <= 1:
                raise ValueError(f"weight w must be in [0, 1], got {w}")
        points = [{"verifier": "strict"}] + [{"verifier": "fixed", "weight": float(w), "mixing": m}
                                             for m in self.mixings for w in self.weights if w != 1]
        for family, knobs in (self.families or {}).items():
            if family not in FAMILIES:
                raise ValueError(f"unknown family {family!r} to sweep; allowed: {', '.join(FAMILIES)}")
            if family == "judge" and self.judge is None:
                raise ValueError("sweeping the judge family needs its classifier (--judge-file)")
            with_file = {"judge": str(self.judge)} if family == "judge" else {}
            for rule in self.deferrals if family == "cascade" else [None]:
                points += [{"verifier": family, "knob": float(x)} | ({"deferral": rule} if rule else {}) | with_file
                           for x in knobs]
        if self.head is not None:
            points.append(dynamic_point(self.head, self.head_mixing))
        if self.target_only:
            points.append({"verifier": "autoregressive"})
        return points


@dataclass
class Launch:
    """How one process decodes its runs: batch_size prompts at a time in lockstep, under execution (None:
    Execution.here()), with progress bars or not; models: the models and tokenizers its runs share (load_pair's
    cache: each pair loads once)."""

    batch_size: int = 1
    execution: Execution | None = None
    progress: bool = True
    models: dict = field(default_factory=dict)


# which points of a family a dev sweep may choose (statistics.admitted; the largest acceptance among them wins,
# strict when none accepts more)
SELECTIONS = {
    "certified": "certified non-inferior to strict's quality (Learn-then-Test's fixed sequence: the family's points "
                 "tested from the least lenient, each a one-sided non-inferiority test at 5% against -tolerance on "
                 "the same prompts, up to the first that fails; the chance that the chosen point loses more than the "
                 "tolerance is at most 5%)",
    "estimate": "whose dev quality estimate is within the task's tolerance of strict's (point - strict >= "
                "-tolerance, on the same prompts; no guarantee: the most lenient such point is the likeliest to have "
                "been lucky)",
    "noninferior": "each shown non-inferior to strict's quality on its own (the lower bound of point - strict above "
                   "-tolerance, on the same prompts; not adjusted for the points tried)",
}


def trained_mixing(head: str | Path) -> str | None:
    """The ensemble form a head was trained with (its file's metadata; DIVERSED decodes with the same), None where
    the file does not say or is not there (load_head reports a broken one where it is read)."""
    try:
        meta = json.loads(safetensors_metadata(head).get("meta", "{}"))
    except (OSError, ValueError):
        return None
    return (meta.get("config") or {}).get("mixing")


def dynamic_point(head: str | Path, mixing: str | None = None) -> dict:
    """DIVERSED's point: its head, decoded with the mixing the head was trained with (its file's, else `mixing`
    where the file is not there yet, else linear)."""
    return {"verifier": "dynamic", "head": str(head), "mixing": trained_mixing(head) or mixing or "linear"}


def point_name(point: dict) -> str:
    """A point's folder in a sweep: w1.0-linear (strict), w0.5-linear, lenient-0.5, cascade-opt-0.3, dynamic,
    autoregressive."""
    v = point["verifier"]
    if v == "strict":
        return "w1.0-linear"
    if v in ("dynamic", "autoregressive"):
        return v
    if v == "fixed":
        return f"w{float(point['weight'])}-{point['mixing']}"
    return "-".join([v, *([point["deferral"]] if "deferral" in point else []), f"{float(point['knob']):g}"])
