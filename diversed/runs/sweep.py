"""The static frontier: decode and score a task split at each point of a grid of w (both mixings; w = 1 is
strict), then pick the task's fixed w: the largest acceptance whose quality is shown non-inferior to strict's
(margin: the task's tolerance) on the same prompts. This is the paper's `fixed` verifier and the Pareto front it
traces. The command line and the workflow sweep the dev split, so that w is never chosen on the eval prompts it
is reported on.

`sweep_point` is one point, `choose_runs` the choice from the scored points, `sweep_weight` the whole sweep in
one process (the pair loaded once, every point timed on the same hardware); a rerun keeps the points already
finished with the same config and prompts, so a killed sweep resumes point by point."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from diversed import statistics
from diversed.decoding.engine import Execution
from diversed.runs.evaluate import score_run
from diversed.runs.run import Run, RunConfig, execute, run_id, task_prompts
from diversed.tasks import get_task, metric_spec
from diversed.utils import provenance, write_json, write_text

COLUMNS = ["pair", "task", "split", "prompts", "temperature", "K", "verifier", "weight", "mixing",
           "draft_acceptance_rate", "mean_acceptance_length", "tokens_per_s", "seconds_per_sample", "bias_tv",
           "metric", "quality", "target_logprob", "run_id", "run_dir"]
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)  # the paper's grid of w; strict (w = 1) is always added
MIXINGS = ("linear", "logit")


def run_row(run: Run) -> dict:
    """One line of a frontier table from a scored run."""
    return {k: v for k, v in run.record().items() if k in COLUMNS}


def choose(rows: list[dict], units: dict[str, pd.DataFrame], tolerance: float) -> dict:
    """The fixed verifier: the highest acceptance among the points whose quality is non-inferior to strict's on
    the same prompts (the lower bound of point - strict above -tolerance, diversed.statistics.noninferior); strict
    (w = 1) when none is, or none accepts more. units: each point's prompt rows, by run_id.

    Returns the choice and, per point, its quality difference from strict and the test's verdict."""
    strict = next((r for r in rows if r["verifier"] == "strict"), None)
    if strict is None:
        raise ValueError("a sweep needs its strict point (w = 1) to choose a fixed w; none among the rows given")
    column = metric_spec(strict["metric"]).statistic
    tested, ok = [], []
    for r in rows:
        if r["verifier"] != "fixed":
            continue
        diff = statistics.paired(units[r["run_id"]], units[strict["run_id"]], column)
        test = statistics.noninferior(diff, tolerance)
        tested.append({"weight": r["weight"], "mixing": r["mixing"], "acceptance": r["draft_acceptance_rate"],
                       "quality_vs_strict": diff.text(digits=4, sign=True), "prompts": diff.n,
                       "verdict": test.verdict(), "why": test.why})
        if test.verdict() == statistics.HOLDS:
            ok.append(r)
    best = max(ok, key=lambda r: (r["draft_acceptance_rate"], -r["weight"]), default=None)
    if best is None or best["draft_acceptance_rate"] <= strict["draft_acceptance_rate"]:
        best = strict  # nothing relaxed is shown to keep quality: the fixed verifier degenerates to strict (w = 1)
    return {"weight": best["weight"], "mixing": best["mixing"], "draft_acceptance_rate": best["draft_acceptance_rate"],
            "quality": best["quality"], "strict_quality": strict["quality"],
            "strict_acceptance_rate": strict["draft_acceptance_rate"], "tolerance": tolerance,
            "metric": strict["metric"], "points": tested}


def grid(weights=WEIGHTS, mixings=MIXINGS) -> list[tuple[float, str]]:
    """The sweep's points (w, mixing): strict (w = 1) first, then every w < 1 of the grid with each mixing."""
    for w in weights:
        if not 0 <= w <= 1:
            raise ValueError(f"weight w must be in [0, 1], got {w}")
    return [(1.0, "linear")] + [(float(w), m) for m in mixings for w in weights if w != 1]


def point_name(weight: float, mixing: str) -> str:
    """A point's folder in a sweep: w0.5-linear (the workflow's layout too)."""
    return f"w{float(weight)}-{mixing}"


def sweep_point(base: RunConfig, weight: float, mixing: str, run_dir: str | Path, *, progress: bool = True,
                labels: dict | None = None, models: dict | None = None, batch_size: int = 1,
                execution: Execution | None = None) -> Path:
    """Decode + score base's task split at one point into run_dir, batch_size prompts at a time: w = 1 is strict,
    w < 1 the fixed verifier. A run_dir that already holds this point's scored run is kept as it is."""
    if base.task is None:
        raise ValueError("a sweep needs a task (a split of it is decoded and scored)")
    if weight == 1:
        cfg = dataclasses.replace(base, verifier="strict", weight=None, mixing="linear")
    else:
        cfg = dataclasses.replace(base, verifier="fixed", weight=float(weight), mixing=mixing)
    prompts = task_prompts(cfg)
    if Run(run_dir).holds(run_id(cfg, prompts)):
        return Path(run_dir)
    run_dir = execute(cfg, prompts, run_dir=run_dir, progress=progress, labels=labels, models=models,
                      batch_size=batch_size, execution=execution)
    score_run(run_dir)
    return run_dir


def choose_runs(run_dirs: list[str | Path], out: str | Path, tolerance: float | None = None) -> dict:
    """The sweep's table (out/sweep.csv, .md) and choice (out/choice.json) from its scored points.

    tolerance: the quality strict may lose, in the metric's units (default: the task metric's own)."""
    out = Path(out)
    runs = [Run(d) for d in run_dirs]
    rows = [run_row(run) for run in runs]
    for key in ("task", "split"):
        if len({r[key] for r in rows}) != 1:
            raise ValueError(f"a sweep covers one {key}; the runs given cover {sorted({str(r[key]) for r in rows})}")
    strict = [run for run, r in zip(runs, rows, strict=True) if r["verifier"] == "strict"]
    if not strict:
        raise ValueError("a sweep needs its strict point (w = 1) to choose a fixed w; none among the runs given")
    config = strict[0].config
    units = {r["run_id"]: pd.DataFrame(run.prompt_rows()) for run, r in zip(runs, rows, strict=True)}
    choice = choose(rows, units, get_task(config["task"]).metric.tolerance if tolerance is None else tolerance)
    write_table(out / "sweep", rows)
    write_json(out / "choice.json", {"task": config["task"], **choice, "config": config, **provenance()})
    return choice


def sweep_weight(base: RunConfig, out: str | Path, *, weights=WEIGHTS, mixings=MIXINGS,
                 tolerance: float | None = None, progress: bool = True, labels: dict | None = None,
                 batch_size: int = 1, execution: Execution | None = None) -> dict:
    """Every point of the grid, then the choice: out/{point}/ runs, out/sweep.csv/.md and out/choice.json."""
    out, models = Path(out), {}
    runs = [sweep_point(base, w, m, out / point_name(w, m), progress=progress, labels=labels, models=models,
                        batch_size=batch_size, execution=execution) for w, m in grid(weights, mixings)]
    return choose_runs(runs, out, tolerance)


def write_table(stem: Path, rows: list[dict]) -> None:
    df = pd.DataFrame(rows, columns=COLUMNS)
    write_text(stem.with_suffix(".csv"), df.to_csv(index=False))
    write_text(stem.with_suffix(".md"), df.to_markdown(index=False, floatfmt=".4g") + "\n")
