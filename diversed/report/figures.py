"""One function per figure; each reads tables written by diversed.analysis.tables and writes PNG + PDF.

Every figure keeps the model pairs apart: a row of panels per pair, a column per task. What a figure plots is
the frame its data function returns (one row per point, bar or line vertex, with its pair and task)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from diversed import statistics
from diversed.analysis.tables import quality, quality_units, read_units, timed_units
from diversed.decoding.settings import ALONE, METHODS, RULES, Method
from diversed.utils import atomic_path

MARKERS = {"autoregressive": "s", "draft": "v", "finetuned": "D"} | {v: r.marker for v, r in RULES.items()}
COLORS = {m: f"C{i}" for i, m in enumerate(METHODS)}  # one colour per method in every panel and figure


def _save(fig, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = []
    for ext in ("png", "pdf"):
        path = stem.parent / f"{stem.name}.{ext}"  # not with_suffix: stems like "..._T0.1" hold dots
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


COLUMNS_MAX = 3  # panels per row of a figure: a grid a laptop screen shows whole


def _panels(d: pd.DataFrame, title: str = ""):
    """(figure, [(axes, pair, task, rows of d)]): a panel per (pair, task), COLUMNS_MAX to a row, each pair
    starting a row of its own; a panel without rows (or a figure without any) says "no data"."""
    pairs, tasks = sorted(d["pair"].unique()) or [""], sorted(d["task"].unique()) or [""]
    cols = min(len(tasks), COLUMNS_MAX)
    per_pair = -(-len(tasks) // cols)  # rows of one pair's panels
    fig, axes = plt.subplots(len(pairs) * per_pair, cols, figsize=(4.2 * cols, 3.4 * len(pairs) * per_pair),
                             squeeze=False)
    panels = []
    for (i, pair), (j, task) in itertools.product(enumerate(pairs), enumerate(tasks)):
        ax, g = axes[i * per_pair + j // cols, j % cols], d[(d["pair"] == pair) & (d["task"] == task)]
        ax.set_title(f"{pair}: {task}{title}" if pair else "")
        if g.empty:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        else:
            panels.append((ax, pair, task, g))
    for row in range(len(pairs)):  # a pair's last row, where its tasks do not fill it
        for j in range(len(tasks), per_pair * cols):
            axes[row * per_pair + j // cols, j % cols].set_visible(False)
    return fig, panels


def _legend(fig) -> None:
    """One legend above the panels, each label once."""
    entries = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(entries.values(), entries.keys(), loc="lower center", bbox_to_anchor=(0.5, 1.0),
                   ncol=min(len(entries), 7), frameon=False, fontsize=8)


def acceptance_vs_weight_lines(sweeps: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """What the acceptance-vs-w figure plots: per (pair, task, K, w), the acceptance of the linear-mixing sweeps
    at one temperature."""
    d = sweeps[(sweeps["mixing"] == "linear") & (sweeps["temperature"] == temperature)
               & sweeps["verifier"].isin(["fixed", "strict"])]
    keys = ["pair", "task", "K", "weight"]
    return d.groupby(keys, as_index=False)["draft_acceptance_rate"].mean().sort_values(keys, ignore_index=True)


def acceptance_vs_weight(sweeps: pd.DataFrame, stem: Path, temperature: float) -> list[Path]:
    """Acceptance rate vs static weight w at one temperature, one line per draft length K (linear mixing)."""
    fig, panels = _panels(acceptance_vs_weight_lines(sweeps, temperature), f" (T = {temperature:g})")
    for ax, _, _, g in panels:
        for K, line in g.groupby("K"):
            ax.plot(line["weight"], 100 * line["draft_acceptance_rate"], marker="o", label=f"K = {K}")
        ax.set(xlabel="static weight w on the target", ylabel="acceptance rate (%)", xlim=(-0.02, 1.02),
               ylim=(0, 100))
        ax.grid(alpha=0.3)
    _legend(fig)
    return _save(fig, stem)


BIAS = {"bias_tv": "bias TV(emitted, p) per token", "kl": "KL(emitted || p) per token (nats)"}  # the x axes


def acceptance_vs_bias_points(sweeps: pd.DataFrame, temperature: float, x: str = "bias_tv") -> pd.DataFrame:
    """What the acceptance-vs-bias figure plots: every rule's dev sweep points with a finite bias x (BIAS) at one
    temperature and at the K the families were swept at (the smallest such K; else the smallest K), with the static
    front's points (strict and the linear fixed w) marked front."""
    bias = sweeps[x] if x in sweeps else pd.Series(np.nan, index=sweeps.index)
    d = sweeps[(sweeps["temperature"] == temperature) & (sweeps["verifier"] != "autoregressive")
               & np.isfinite(bias.astype(float))]
    if d.empty:
        return d.assign(front=pd.Series(dtype=bool))
    families = d[~d["verifier"].isin(["strict", "fixed", "dynamic"])]
    K = (families if len(families) else d)["K"].min()
    d = d[d["K"] == K]
    return d.assign(front=(d["verifier"] == "strict") | ((d["verifier"] == "fixed") & (d["mixing"] == "linear")))


def acceptance_vs_bias(sweeps: pd.DataFrame, stem: Path, temperature: float, x: str = "bias_tv") -> list[Path]:
    """Acceptance against the bias x (BIAS: TV(emitted, p), or KL(emitted || p) where finite) of every rule's dev
    sweep points, with the static ensemble's front (strict and the linear fixed w, joined): in TV, a rule above
    the line would beat the static ensemble's trade-off (the report's claim); in KL, mentored decoding's."""
    fig, panels = _panels(acceptance_vs_bias_points(sweeps, temperature, x), f" (T = {temperature:g})")
    for ax, _, _, g in panels:
        front = g[g["front"]].sort_values(x)
        ax.plot(front[x], 100 * front["draft_acceptance_rate"], color="0.5", lw=1, label="static front", zorder=1)
        for verifier, r in g.groupby("verifier"):
            ax.scatter(r[x], 100 * r["draft_acceptance_rate"], marker=MARKERS.get(verifier, "o"),
                       c=COLORS.get(verifier, "k"), s=28, zorder=2,
                       label=RULES[verifier].swept() if verifier in RULES else METHODS.get(verifier, verifier))
        ax.set(xlabel=BIAS[x], ylabel="acceptance rate (%)", ylim=(0, 100))
        ax.grid(alpha=0.3)
    _legend(fig)
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


def quality_vs_time_points(units: pd.DataFrame, runs: pd.DataFrame, sweeps: pd.DataFrame,
                           temperature: float) -> pd.DataFrame:
    """What the quality-vs-time figure plots, per pair at one temperature and the largest K, on three panels per
    task that never mix splits. "{task}: eval" holds each method's seconds per sample, from its timed runs
    (tables.timed_units: batch 1, the methods interleaved in one job, on the same prompts), against its quality
    with its 95% interval over prompts, from its quality runs (every eval prompt, the same for every method).
    "{task}: dev, acceptance" and "{task}: dev, speed" hold the sweep's points (method "sweep"; verifier strict,
    fixed, a family, dynamic for DIVERSED or autoregressive for the target alone), each at its quality over every
    dev prompt, against its acceptance (x_kind "acceptance"; the target alone has none) and against its tokens/s
    over the target alone's, timed at batch 1 on the first dev prompts (x_kind "speedup", tables.sweep_speed)."""
    d = units[(units["temperature"] == temperature) & (units["head_task"] == "")]
    K = d["K"].max()
    d = d[d["K"].isna() | (d["K"] == K)]  # the baselines have no K
    timed, judged = timed_units(d), quality_units(d)
    cols = ["pair", "task", "method", "verifier", "metric", "x", "x_kind", "quality", "quality_low", "quality_high"]
    rows = []
    for (pair, task, method), g in judged.groupby(["pair", "task", "method"]):
        t = timed[(timed["pair"] == pair) & (timed["task"] == task) & (timed["method"] == method)]
        q = quality(g, runs)
        rows.append({"pair": pair, "task": f"{task}: eval", "method": method, "verifier": method,
                     "metric": g["metric"].iloc[0],
                     "x": t["seconds"].sum() / len(t) if len(t) else float("nan"), "x_kind": "seconds",
                     "quality": q.value, "quality_low": q.low, "quality_high": q.high})
    s = sweeps[(sweeps["temperature"] == temperature) & (sweeps["K"] == K)]
    s = s.merge(d[["pair", "task"]].drop_duplicates(), on=["pair", "task"])
    s = s.assign(method="sweep", quality_low=float("nan"), quality_high=float("nan"))
    speed = s["speedup"] if "speedup" in s else pd.Series(float("nan"), index=s.index)
    dev = [s.assign(task=s["task"] + ": dev, acceptance", x=s["draft_acceptance_rate"], x_kind="acceptance"),
           s.assign(task=s["task"] + ": dev, speed", x=speed, x_kind="speedup")]
    return pd.concat([pd.DataFrame(rows, columns=cols), *(f[cols] for f in dev)], ignore_index=True).sort_values(
        ["pair", "task"], ignore_index=True)


def _dev_panel(ax, s: pd.DataFrame) -> None:
    """One dev panel of the quality-vs-time figure: strict, each family's points and front (more x, more quality;
    every front starts at strict), DIVERSED, and the target alone (a point at speedup 1, a line on acceptance)."""
    kind = s["x_kind"].iloc[0]
    strict = s[s["verifier"] == "strict"]
    ax.scatter(strict["x"], strict["quality"], marker=MARKERS["strict"], c=COLORS["strict"], s=30,
               label="SD (dev split)", zorder=3)
    references = ("strict", "dynamic", "autoregressive")
    for family, f in s[~s["verifier"].isin(references)].groupby("verifier"):
        f = pd.concat([strict, f]).dropna(subset=["x"])
        colour = "0.5" if family == "fixed" else COLORS.get(family, "k")
        name = "static (w)" if family == "fixed" else RULES[family].swept() if family in RULES else family
        ax.scatter(f["x"], f["quality"], c=colour, s=14, marker=MARKERS.get(family, "o"),
                   label=f"{name} sweep (dev split)")
        front = pareto_front(f.assign(x=-f["x"]), "x", "quality")
        ax.plot(-front["x"], front["quality"], c=colour, lw=1, ls="--")
    for method in ("dynamic", "autoregressive"):
        r = s[s["verifier"] == method]
        label = f"{METHODS[method]} (dev split)"
        if r.empty:
            continue
        if r["x"].notna().any():
            ax.scatter(r["x"], r["quality"], marker=MARKERS[method], c=COLORS[method], s=70, label=label, zorder=4)
        elif method == "autoregressive":  # no acceptance: its quality as a line
            ax.axhline(r["quality"].iloc[0], c=COLORS[method], lw=1, ls=":", label=label)
    ax.set(xlabel="acceptance rate (dev split)" if kind == "acceptance" else
           "tokens/s × the target alone (batch 1, dev split)", ylabel=s["metric"].iloc[0])


def _legend_order(method: str) -> tuple[int, str]:
    """Methods in the order of METHODS, a given setting (fixed-0.7) after its verifier's chosen one."""
    v = Method.parse(method).base
    return (list(METHODS).index(v) if v in METHODS else len(METHODS), method)


def quality_vs_time(units: pd.DataFrame, runs: pd.DataFrame, sweeps: pd.DataFrame, stem: Path,
                    temperature: float) -> list[Path]:
    """Quality vs time per sample: per task, the methods on the eval prompts (target only, draft only, SD, the
    fine-tuned draft, the fixed w, DIVERSED and each relaxed family at its chosen setting and at the settings the
    config gives (hollow), with 95% intervals)
    and, on two panels of their own, every family's sweep on the dev prompts with its front, beside DIVERSED and
    the target alone on the same prompts: quality against acceptance, and against tokens/s at batch 1."""
    fig, panels = _panels(quality_vs_time_points(units, runs, sweeps, temperature), f" (T = {temperature:g})")
    for ax, _, _, g in panels:
        if (g["method"] == "sweep").any():
            _dev_panel(ax, g)
        for method in sorted(set(g["method"]) - {"sweep"}, key=_legend_order):
            r = g[g["method"] == method]
            err = [(r["quality"] - r["quality_low"]).fillna(0), (r["quality_high"] - r["quality"]).fillna(0)]
            m = Method.parse(method)  # a given setting (fixed-0.7): its verifier's marker, hollow
            ax.errorbar(r["x"], r["quality"], yerr=err, fmt=MARKERS.get(m.base, "o"), ms=8, c=COLORS.get(m.base, "k"),
                        mfc="none" if m.given is not None else None, label=m.name, zorder=3, capsize=3)
            ax.set(xlabel="seconds per sample (timed at batch 1)", ylabel=g["metric"].iloc[0])
        ax.grid(alpha=0.3)
    _legend(fig)
    return _save(fig, stem)


def acceptance_by_position_bars(units: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """What the acceptance-by-position figure plots: per (pair, task, method, position i) at one temperature,
    P(draft token i accepted | 1..i-1 accepted) over the quality runs' prompts (steps accepting i over steps
    reaching i, a ratio of totals, each prompt's seeds pooled), with its 95% interval over prompts (from
    statistics.MIN_PROMPTS["ratio"] prompts)."""
    keys = ["pair", "task", "method", "position"]
    if "position_reached" not in units:  # a prompt table of before per-position counts were kept
        return pd.DataFrame(columns=[*keys, "acceptance", "low", "high"])
    d = quality_units(units)
    d = d[(d["temperature"] == temperature) & (d["head_task"] == "") & ~d["method"].isin(list(ALONE))]
    rows = []
    for (pair, task, method), g in d.groupby(["pair", "task", "method"]):
        hits = np.array([json.loads(x) for x in g["position_accepted"]], dtype=float)  # [units, K]
        reached = np.array([json.loads(x) for x in g["position_reached"]], dtype=float)
        codes, n = pd.factorize(g["prompt"])
        for i in range(hits.shape[1] if hits.ndim == 2 else 0):
            y, x = (np.bincount(codes, weights=v[:, i], minlength=len(n)) for v in (hits, reached))  # [prompts]
            if x.sum() > 0:
                e = statistics.ratio_estimate(y, x)
                shown = len(n) >= statistics.MIN_PROMPTS["ratio"]  # below it, descriptive: no interval
                rows.append((pair, task, method, i + 1, e.value, e.low if shown else np.nan,
                             e.high if shown else np.nan))
    return pd.DataFrame(rows, columns=[*keys, "acceptance", "low", "high"])


def acceptance_by_position(units: pd.DataFrame, stem: Path, temperature: float) -> list[Path]:
    """P(draft token i accepted | 1..i-1 accepted) per position, one bar per method, with its 95% interval."""
    fig, panels = _panels(acceptance_by_position_bars(units, temperature), f" (T = {temperature:g})")
    for ax, _, _, g in panels:
        methods = [m for m in METHODS if m in set(g["method"])]
        width = 0.8 / len(methods)
        for j, method in enumerate(methods):
            b = g[g["method"] == method]
            err = [100 * (b["acceptance"] - b["low"]).fillna(0), 100 * (b["high"] - b["acceptance"]).fillna(0)]
            ax.bar(b["position"] + (j - (len(methods) - 1) / 2) * width, 100 * b["acceptance"], width, yerr=err,
                   color=COLORS[method], label=METHODS.get(method, method), error_kw={"lw": 0.8, "capsize": 1.5})
        ax.set(xlabel="draft position i", ylabel="acceptance (%)", xticks=sorted(set(g["position"])), ylim=(0, 100))
        ax.grid(alpha=0.3, axis="y")
    _legend(fig)
    return _save(fig, stem)


def weight_values(weights: pd.DataFrame) -> pd.DataFrame:
    """What the weight-distribution figure plots: every learned w of the runs decoded with their own task's head,
    with its pair, task and temperature."""
    d = weights[weights["head_task"].isna() | (weights["head_task"] == weights["task"])]
    return d[["pair", "task", "temperature", "w"]].sort_values(["pair", "task", "temperature"], ignore_index=True)


def weight_distribution(weights: pd.DataFrame, stem: Path) -> list[Path]:
    """Histogram of the learned w over the held-out (eval) prompts, one per temperature."""
    fig, panels = _panels(weight_values(weights))
    for ax, _, _, g in panels:
        for T, w in g.groupby("temperature")["w"]:
            ax.hist(w, bins=30, range=(0, 1), histtype="step", lw=1.5, label=f"T = {T:g} (mean {w.mean():.2f})")
        ax.set(xlabel="learned w (weight on the target)", ylabel="draft positions")
        ax.legend(fontsize=7)
    return _save(fig, stem)


def write_all(tables: str | Path, out: str | Path, temperatures: list[float],
              sweep_temperature: float = 1.0) -> list[Path]:
    """Every figure from the tables folder written by diversed.analysis.tables; sweep_temperature is that of the
    acceptance-vs-w figure."""
    tables, out = Path(tables), Path(out)
    runs = pd.read_csv(tables / "runs.csv")
    units = read_units(tables / "prompts.csv")
    sweeps = pd.read_csv(tables / "sweeps.csv")
    weights = pd.read_csv(tables / "weights.csv")
    paths = acceptance_vs_weight(sweeps, out / "acceptance_vs_weight", sweep_temperature)
    for t in temperatures:
        paths += quality_vs_time(units, runs, sweeps, out / f"quality_vs_time_T{t:g}", t)
        paths += acceptance_by_position(units, out / f"acceptance_by_position_T{t:g}", t)
        paths += acceptance_vs_bias(sweeps, out / f"acceptance_vs_bias_T{t:g}", t)
        paths += acceptance_vs_bias(sweeps, out / f"acceptance_vs_kl_T{t:g}", t, "kl")
    paths += weight_distribution(weights, out / "weight_distribution")
    return paths
