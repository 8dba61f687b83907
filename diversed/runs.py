"""A decoding run: a resolved config x a prompt set -> {out}/{run_id}/generations.jsonl + manifest.json.

The run directory is built in a temp folder and renamed into place when complete, with the manifest
as its last file, so a crash never leaves a run that looks finished.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from diversed.engine import VERIFIERS, check_request, speculative_generate, summarize
from diversed.models import DEFAULT_DRAFT_LAYERS, DTYPES, encode_prompt, load_pair
from diversed.tracking import Tracker
from diversed.utils import atomic_dir, config_hash, provenance, read_jsonl, write_json, write_jsonl
from diversed.verifiers import MIXINGS

DETERMINISTIC_STATS = ("new_tokens", "steps", "stop", "draft_acceptance_rate", "mean_acceptance_length",
                       "mean_weight", "bias_tv", "target_logprob", "target_argmax_agreement")


@dataclass
class RunConfig:
    """Everything that determines a run's output (its hash is the run_id)."""

    target: str = "embedded"
    draft: str = "embedded"
    draft_layers: int = DEFAULT_DRAFT_LAYERS
    verifier: str = "strict"
    weight: float | None = None
    head: str | None = None
    mixing: str = "linear"
    K: int = 5
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    chat: bool = True
    task: str | None = None  # prompts and references from a task (diversed.tasks) instead of a file
    split: str = "eval"
    n: int | None = None  # seeded subsample size of the split (None: all)
    data_files: str | None = None  # local JSONL for the task (offline)

    def validate(self) -> None:
        """Checks that need no model: fail before anything is loaded."""
        if self.verifier not in VERIFIERS:
            raise ValueError(f"unknown verifier {self.verifier!r}; allowed: {', '.join(VERIFIERS)}")
        if self.mixing not in MIXINGS:
            raise ValueError(f"unknown mixing {self.mixing!r}; allowed: {', '.join(MIXINGS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; allowed: {', '.join(DTYPES)}")
        if self.verifier != "autoregressive" and self.K < 1:
            raise ValueError(f"draft length K must be >= 1, got {self.K}")
        if self.verifier == "fixed" and self.weight is None:
            raise ValueError("verifier 'fixed' needs --weight w in [0, 1]")
        if self.weight is not None and not 0 <= self.weight <= 1:
            raise ValueError(f"weight w must be in [0, 1], got {self.weight}")
        if self.verifier == "dynamic":
            if not self.head:
                raise ValueError("verifier 'dynamic' needs --head PATH (a trained weight head)")
            if not Path(self.head).is_file():
                raise FileNotFoundError(f"weight head not found: {self.head}")
        if self.task is not None:
            from diversed.tasks import registry

            if self.task not in registry():
                raise ValueError(f"unknown task {self.task!r}; allowed: {', '.join(sorted(registry()))}")
            if self.split not in ("train", "eval"):
                raise ValueError(f"unknown split {self.split!r}; allowed: train, eval")
            if self.n is not None and self.n < 1:
                raise ValueError(f"n (subsample size) must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def task_prompts(cfg: RunConfig) -> list[dict]:
    """Prompt rows (with references) of the configured task split."""
    from diversed.tasks import get_task

    task = get_task(cfg.task, cfg.data_files)
    return [{**ex.row(), "task": cfg.task} for ex in task.examples(cfg.split, cfg.n, seed=0)]


def load_prompts(path: str | Path) -> list[dict]:
    """Prompt rows from JSONL: each needs a non-empty "prompt"; "id" defaults to the line number."""
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"{path} holds no prompts")
    for i, row in enumerate(rows):
        text = row.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}: prompt {i + 1} has no non-empty \"prompt\" field")
        row.setdefault("id", str(i))
    return rows


def prompt_hash(text: str) -> str:
    """Key of a prompt in stored generations (replay scoring matches on it)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_id(cfg: RunConfig, prompts: list[dict]) -> str:
    resolved = dataclasses.asdict(cfg) | {"prompts": [prompt_hash(p["prompt"]) for p in prompts]}
    return config_hash(resolved)


def execute(cfg: RunConfig, prompts: list[dict], out: str | Path = "results/runs", *, progress: bool = True,
            run_dir: str | Path | None = None, labels: dict | None = None) -> Path:
    """Decode every prompt into out/{run_id} (or exactly run_dir); returns the run directory.

    All checks happen before the first decode; one short warm-up decode precedes the timed ones.
    labels (pair name, experiment, ...) are stored in the manifest and do not enter the run_id.
    """
    cfg.validate()
    if not prompts:
        raise ValueError("no prompts to decode")
    for i, row in enumerate(prompts):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(f"prompt {i + 1} is empty")
    rid = run_id(cfg, prompts)
    pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers)
    head = None
    if cfg.verifier == "dynamic":
        from diversed.head import load_head

        head = load_head(cfg.head, pair.target, pair.draft)
    weight = cfg.weight if cfg.verifier == "fixed" else None
    encoded = [encode_prompt(pair.tokenizer, row["prompt"], chat=cfg.chat) for row in prompts]
    for ids in encoded:
        check_request(pair.target, pair.draft, len(ids), verifier=cfg.verifier, K=cfg.K,
                      max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                      weight=weight, head=head, mixing=cfg.mixing, vocab_size=pair.vocab_size)

    def decode(i, ids, max_new_tokens):
        generator = torch.Generator(device=cfg.device).manual_seed(cfg.seed * 1_000_003 + i)
        return speculative_generate(pair.target, pair.draft, ids, verifier=cfg.verifier, K=cfg.K,
                                    max_new_tokens=max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                    weight=weight, head=head, mixing=cfg.mixing, generator=generator,
                                    vocab_size=pair.vocab_size)

    decode(0, encoded[0], min(8, cfg.max_new_tokens))  # warm-up: allocations and kernel choice, not timed
    labels = dict(labels or {})
    tracker = Tracker(name=f"decode-{labels.get('task', cfg.task)}-{cfg.verifier}-{rid}",
                      group=labels.get("experiment", "decode"), job_type="decode",
                      config=dataclasses.asdict(cfg) | {"run_id": rid, **labels})
    rows, gens = [], []
    started = time.time()
    for i, (row, ids) in enumerate(tqdm(list(zip(prompts, encoded, strict=True)), desc=f"decode {rid}",
                                        unit="prompt", disable=not progress)):
        gen = decode(i, ids, cfg.max_new_tokens)
        gens.append(gen)
        rows.append({"id": row["id"], "prompt": row["prompt"], "prompt_hash": prompt_hash(row["prompt"]),
                     **({"task": row["task"], "reference": row["reference"]} if "task" in row else {}),
                     "completion": pair.tokenizer.decode(gen.tokens, skip_special_tokens=True),
                     "tokens": gen.tokens, "prompt_tokens": len(ids), "drafted": gen.drafted,
                     "accepted": gen.accepted, "weights": gen.weights, "bias_tv": gen.bias_tv,
                     "target_logprobs": gen.target_logprob, "target_argmax": gen.target_argmax,
                     # timings live in the manifest only, so generations.jsonl is byte-identical on a rerun
                     **{k: v for k, v in gen.stats().items() if k in DETERMINISTIC_STATS}})
    summary = summarize(gens)
    manifest = {"run_id": rid, "config": dataclasses.asdict(cfg), "labels": labels, "seed": cfg.seed,
                "summary": summary, "started": started, "finished": time.time(), **provenance()}
    tracker.log({k: v for k, v in summary.items() if isinstance(v, (int, float))})
    tracker.table("generations", ["id", "prompt", "completion"],
                  [[r["id"], r["prompt"][:1000], r["completion"][:1000]] for r in rows[:20]])
    tracker.finish()
    run_dir = Path(run_dir) if run_dir is not None else Path(out) / rid
    with atomic_dir(run_dir) as tmp:
        write_jsonl(tmp / "generations.jsonl", rows)
        write_json(tmp / "manifest.json", manifest)  # last: its presence marks a complete run
    return run_dir


def load_run(run_dir: str | Path) -> tuple[dict, list[dict]]:
    """(manifest, generations) of a complete run; a clear error for a missing or broken one."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a complete run (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{manifest_path} is corrupt: {e}") from e
    return manifest, read_jsonl(run_dir / "generations.jsonl")
