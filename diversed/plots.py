"""One function per figure; each reads tables written by diversed.aggregate and writes PNG + PDF."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from diversed.aggregate import METHOD_NAMES
from diversed.utils import atomic_path

MARKERS = {"autoregressive": "s", "strict": "o", "finetuned": "D", "fixed": "x", "dynamic": "*"}


def _save(fig, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = stem.parent / f"{stem.name}.{ext}"  # not with_suffix: stems like "..._T0.1" hold dots
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def _grid(n: int, width: float = 4.2, height: float = 3.4):
    fig, axes = plt.subplots(1, max(n, 1), figsize=(width * max(n, 1), height), squeeze=False)
    return fig, axes[0]


def _panels(tasks: list[str]):
    """(figure, [(axes, task)]): one panel per task, or a single "no data" panel when there is none."""
    fig, axes = _grid(len(tasks))
    if not tasks:
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
    return fig, list(zip(axes, tasks, strict=False))


def acceptance_vs_weight_lines(sweeps: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """What the acceptance-vs-w figure plots: per (task, K, w), the mean acceptance of the linear-mixing sweeps at
    one temperature (over pairs)."""
    d = sweeps[(sweeps["mixing"] == "linear") & (sweeps["temperature"] == temperature)]
    return (d.groupby(["task", "K", "weight"], as_index=False)["draft_acceptance_rate"].mean()
            .sort_values(["task", "K", "weight"], ignore_index=True))


def acceptance_vs_weight(sweeps: pd.DataFrame, stem: Path, temperature: float) -> list[Path]:
    """Acceptance rate vs static weight w at one temperature, one line per draft length K (linear mixing), one
    panel per task."""
    lines = acceptance_vs_weight_lines(sweeps, temperature)
    fig, panels = _panels(sorted(lines["task"].unique()))
    for ax, task in panels:
        for K, g in lines[lines["task"] == task].groupby("K"):
            ax.plot(g["weight"], 100 * g["draft_acceptance_rate"], marker="o", label=f"K = {K}")
        ax.set(title=f"{task} (T = {temperature:g})", xlabel="static weight w on the target",
               ylabel="acceptance rate (%)", xlim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend()
    return _save(fig, stem)


def pareto_front(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Points not dominated by another with lower x and higher y (lower time, higher quality)."""
    pts = points.sort_values([x, y], ascending=[True, False])
    best, keep = -float("inf"), []
    for i, r in pts.iterrows():
        if r[y] > best:
            keep.append(i)
            best = r[y]
    return pts.loc[keep]


def quality_vs_time(runs: pd.DataFrame, sweeps: pd.DataFrame, stem: Path, temperature: float) -> list[Path]:
    """Quality vs time per sample: target-only, strict, fine-tuned draft, DIVERSED and the static sweep (front)."""
    d = runs[(runs["temperature"] == temperature) & runs["head_task"].isna()]
    fig, panels = _panels(sorted(d["task"].unique()))
    for ax, task in panels:
        s = sweeps[(sweeps["task"] == task) & (sweeps["temperature"] == temperature) & (sweeps["K"] == d["K"].max())]
        if len(s):
            ax.scatter(s["seconds_per_sample"], s["quality"], c="0.6", s=14, label="static sweep")
            front = pareto_front(s, "seconds_per_sample", "quality")
            ax.plot(front["seconds_per_sample"], front["quality"], c="0.4", lw=1, ls="--", label="static front")
        for method in ("autoregressive", "strict", "finetuned", "fixed", "dynamic"):
            g = d[(d["task"] == task) & (d["method"] == method)]
            if len(g):
                ax.scatter(g["seconds_per_sample"].mean(), g["quality"].mean(), marker=MARKERS.get(method, "o"), s=70,
                           label=METHOD_NAMES.get(method, method), zorder=3)
        metric = d[d["task"] == task]["metric"].iloc[0]
        ax.set(title=f"{task} (T = {temperature})", xlabel="seconds per sample", ylabel=metric)
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    return _save(fig, stem)


def acceptance_by_position(runs: pd.DataFrame, stem: Path, temperature: float) -> list[Path]:
    """P(draft token i accepted | 1..i-1 accepted) per position, per method, one panel per task."""
    d = runs[(runs["temperature"] == temperature) & runs["head_task"].isna()
             & runs["method"].isin(["strict", "finetuned", "fixed", "dynamic"])]
    fig, panels = _panels(sorted(d["task"].unique()))
    for ax, task in panels:
        methods = [m for m in ("strict", "finetuned", "fixed", "dynamic") if m in set(d[d["task"] == task]["method"])]
        width = 0.8 / max(len(methods), 1)
        for j, method in enumerate(methods):
            rates = pd.DataFrame([json.loads(x) for x in d[(d["task"] == task) & (d["method"] == method)]
                                  ["acceptance_by_position"]]).mean()
            ax.bar([i + 1 + (j - (len(methods) - 1) / 2) * width for i in range(len(rates))], 100 * rates, width,
                   label=METHOD_NAMES.get(method, method))
        ax.set(title=f"{task} (T = {temperature})", xlabel="draft position i", ylabel="acceptance (%)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    return _save(fig, stem)


def weight_distribution(weights: pd.DataFrame, stem: Path) -> list[Path]:
    """Histogram of the learned w over the held-out (eval) prompts, one panel per task."""
    d = weights[weights["head_task"].isna() | (weights["head_task"] == weights["task"])]
    fig, panels = _panels(sorted(d["task"].unique()))
    for ax, task in panels:
        w = d[d["task"] == task]["w"]
        ax.hist(w, bins=30, range=(0, 1), color="tab:purple", alpha=0.8)
        ax.axvline(w.mean(), c="k", ls="--", lw=1, label=f"mean {w.mean():.2f}")
        ax.set(title=task, xlabel="learned w (weight on the target)", ylabel="draft positions")
        ax.legend()
    return _save(fig, stem)


def write_all(tables: str | Path, out: str | Path, temperatures: list[float],
              sweep_temperature: float = 1.0) -> list[Path]:
    """Every figure from the tables folder written by diversed.aggregate; sweep_temperature is that of the
    acceptance-vs-w figure."""
    tables, out = Path(tables), Path(out)
    runs = pd.read_csv(tables / "runs.csv")
    sweeps = pd.read_csv(tables / "sweeps.csv")
    weights = pd.read_csv(tables / "weights.csv")
    paths = acceptance_vs_weight(sweeps, out / "acceptance_vs_weight", sweep_temperature)
    for t in temperatures:
        paths += quality_vs_time(runs, sweeps, out / f"quality_vs_time_T{t:g}", t)
        paths += acceptance_by_position(runs, out / f"acceptance_by_position_T{t:g}", t)
    paths += weight_distribution(weights, out / "weight_distribution")
    return paths
