"""The static frontier: decode a task's eval split for w on a grid (both mixings), score every run,
and pick the task's fixed w: the largest acceptance whose quality stays within a tolerance of strict.
This is the paper's `fixed` verifier and the Pareto front it traces."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from diversed.evaluate import read_scores, score_run
from diversed.runs import RunConfig, execute, load_run, task_prompts
from diversed.utils import provenance, write_json, write_text

# Default tolerance per headline metric, in the metric's own units.
TOLERANCE = {"accuracy": 0.02, "pass@1": 0.02, "rouge2": 1.0, "bleu": 1.0, "target_logprob": 0.1}
COLUMNS = ["pair", "task", "temperature", "K", "verifier", "weight", "mixing", "draft_acceptance_rate",
           "mean_acceptance_length", "tokens_per_s", "seconds_per_sample", "bias_tv", "metric", "quality",
           "target_logprob", "run_id"]


def run_row(run_dir: Path) -> dict:
    """One line of a frontier table from a scored run."""
    manifest, _ = load_run(run_dir)
    scores = read_scores(run_dir)
    s, c = manifest["summary"], manifest["config"]
    labels = manifest.get("labels", {})
    return {"pair": labels.get("pair", f"{c['target']}|{c['draft']}"), "task": c["task"],
            "temperature": c["temperature"], "K": c["K"], "verifier": c["verifier"],
            "weight": 1.0 if c["verifier"] == "strict" else c["weight"],
            "mixing": c["mixing"], "draft_acceptance_rate": s["draft_acceptance_rate"],
            "mean_acceptance_length": s["mean_acceptance_length"], "tokens_per_s": s["tokens_per_s"],
            "seconds_per_sample": s["time_total"] / max(s["prompts"], 1), "bias_tv": s["bias_tv"],
            "metric": scores["metric"], "quality": scores["quality"],
            "target_logprob": scores["fidelity"]["target_logprob"], "run_id": manifest["run_id"]}


def choose(rows: list[dict], tolerance: float) -> dict:
    """The fixed verifier: max acceptance among rows with quality >= strict quality - tolerance."""
    strict = next(r for r in rows if r["verifier"] == "strict")
    ok = [r for r in rows if r["verifier"] == "fixed" and not math.isnan(r["quality"])
          and r["quality"] >= strict["quality"] - tolerance]
    best = max(ok, key=lambda r: (r["draft_acceptance_rate"], -r["weight"]), default=None)
    if best is None or best["draft_acceptance_rate"] <= strict["draft_acceptance_rate"]:
        best = strict  # nothing relaxed keeps quality: the fixed verifier degenerates to strict (w = 1)
    return {"weight": best["weight"], "mixing": best["mixing"], "draft_acceptance_rate": best["draft_acceptance_rate"],
            "quality": best["quality"], "strict_quality": strict["quality"],
            "strict_acceptance_rate": strict["draft_acceptance_rate"], "tolerance": tolerance,
            "metric": strict["metric"]}


def sweep_weight(base: RunConfig, out: str | Path, *, weights=(0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9),
                 mixings=("linear", "logit"), tolerance: float | None = None, progress: bool = True,
                 labels: dict | None = None) -> dict:
    """Decode + score base's task for each (w, mixing) and strict; write sweep.csv/.md and choice.json."""
    if base.task is None:
        raise ValueError("sweep-weight needs a task (its eval split is decoded and scored)")
    for w in weights:
        if not 0 <= w <= 1:
            raise ValueError(f"weight w must be in [0, 1], got {w}")
    out = Path(out)
    prompts = task_prompts(base)
    configs = [dataclasses.replace(base, verifier="strict", weight=None, mixing="linear")]
    configs += [dataclasses.replace(base, verifier="fixed", weight=float(w), mixing=m) for m in mixings
                for w in weights]
    rows = []
    for cfg in configs:
        run_dir = execute(cfg, prompts, out / "runs", progress=progress, labels=labels)
        score_run(run_dir)
        rows.append(run_row(run_dir))
    from diversed.tasks import get_task

    metric = get_task(base.task).metric
    choice = choose(rows, TOLERANCE.get(metric, 0.0) if tolerance is None else tolerance)
    write_table(out / "sweep", rows)
    write_json(out / "choice.json", {"task": base.task, **choice, "config": dataclasses.asdict(base),
                                     **provenance()})
    return choice


def write_table(stem: Path, rows: list[dict]) -> None:
    import pandas as pd

    df = pd.DataFrame(rows, columns=COLUMNS)
    write_text(stem.with_suffix(".csv"), df.to_csv(index=False))
    write_text(stem.with_suffix(".md"), df.to_markdown(index=False, floatfmt=".4g") + "\n")
