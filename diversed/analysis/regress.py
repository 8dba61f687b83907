"""The regression gate (`diversed regress`): each rule's tau and quality on the eval prompts against a committed
baseline of the same experiment, at tolerances the noise sets.

A baseline holds, per setting (pair, task, T, method, K) and eval prompt, the totals a decode's counters give
(new tokens, steps) and its quality, its seeds pooled (`baseline`). Current and baseline are paired by prompt (the
same prompts, decoded at other seeds or by other code), so a prompt's difficulty cancels and what is left is the
seed-to-seed spread of each prompt:

    tau:     r = tau_now / tau_base over the prompts both decoded, log r's standard error by the jackknife over
             prompts (statistics.paired, relative); H1: r < 1, a one-sided t-test on log r;
    quality: d = quality_now - quality_base (a fidelity task's: target log p per token), its standard error over
             prompts; H1: d < 0;
    overall: the mean of every setting's log r, its standard error sqrt(sum se_i^2) / m (the settings decode
             independently); H1: below 0. A change that slows every rule a little shows here first.

The gate spends its 5% on two parts: the overall test at 2.5%, and the settings' tests Holm-adjusted at 2.5% over
all of them; so two runs of unchanged code fail it at most 5% of the time whatever the number of settings, and a
small drop of every rule's tau is caught by the overall test without the settings' multiplicity. A setting with too few
prompts for its test (statistics.MIN_PROMPTS) is reported, not tested. tests/analysis/test_regress.py shows the
false-alarm rate and the power by simulation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from diversed import statistics
from diversed.analysis.tables import is_timing, read_units
from diversed.utils import check_writable

KEYS = ["pair", "task", "temperature", "method", "K"]  # a setting
BASELINE_COLUMNS = [*KEYS, "prompt", "seeds", "new_tokens", "steps", "quality", "target_logprob_sum"]
LEVEL = 0.05  # the gate's family-wise false-alarm rate


def baseline(units: pd.DataFrame) -> pd.DataFrame:
    """A baseline from a prompt table (tables.write_all's prompts.csv): the eval quality runs with their own head,
    one row per (setting, prompt), seeds pooled (counts summed, quality averaged)."""
    own = units[~is_timing(units) & (units["head_task"].fillna("") == "")]
    if "split" in own:
        own = own[own["split"].fillna("eval") == "eval"]
    pooled = statistics.pool_seeds(own.assign(K=own["K"].fillna(0).astype(int)), KEYS).rename(columns={"seed": "seeds"})
    return pooled[BASELINE_COLUMNS].sort_values([*KEYS, "prompt"]).reset_index(drop=True)


def _side(frame: pd.DataFrame) -> pd.DataFrame:
    """One side of a paired comparison: seed 0 for every prompt (each side's seeds are pooled already)."""
    return frame.assign(seed=0)


def compare(now: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """One row per test: each setting's tau (where it has a K) and quality, then the overall tau; its estimate,
    95% interval, one-sided p, p_adjusted (the settings': Holm's over them) and verdict ("regression" where
    p_adjusted < LEVEL / 2, "ok", or why it is not tested)."""
    rows, logs = [], []
    current = dict(list(now.groupby(KEYS, sort=False, dropna=False)))
    for key, b in base.groupby(KEYS, sort=True, dropna=False):
        n = current.get(key, now.iloc[:0])
        setting = dict(zip(KEYS, key, strict=True))
        if n.empty:
            rows.append(setting | {"what": "tau", "verdict": "missing: not in the current results", "p": math.nan})
            continue
        if setting["K"]:
            e = statistics.paired(_side(n), _side(b), "mean_acceptance_length", relative=True)
            rows.append(setting | _row("tau", e, e.p_below(1.0)))
            if e.testable:
                logs.append((math.log(e.value), e.se))
        fidelity = b["quality"].isna().all()
        metric = "target_logprob" if fidelity else "quality"
        e = statistics.paired(_side(n), _side(b), metric)
        rows.append(setting | _row(f"quality ({metric})", e, e.p_below(0.0)))
    table = pd.DataFrame(rows)
    tested = table["p"].notna()
    table["p_adjusted"] = math.nan
    table.loc[tested, "p_adjusted"] = statistics.holm(table.loc[tested, "p"].tolist())
    if logs:
        value, se = float(np.mean([x for x, _ in logs])), math.sqrt(sum(s * s for _, s in logs)) / len(logs)
        z = stats.norm.ppf(0.975)
        p = float(stats.norm.cdf(value / se)) if se > 0 else math.nan
        table = pd.concat([table, pd.DataFrame([{
            "what": f"tau, mean over {len(logs)} settings", "estimate": math.exp(value),
            "low": math.exp(value - z * se), "high": math.exp(value + z * se), "prompts": math.nan, "p": p,
            "p_adjusted": p}])], ignore_index=True)
    tested = table["p"].notna()
    table["verdict"] = np.where(~tested, table.get("verdict", pd.Series("", index=table.index)).fillna(""),
                                np.where(table["p_adjusted"] < LEVEL / 2, "regression", "ok"))
    return table


def _row(what: str, e: statistics.Estimate, p: float) -> dict:
    row = {"what": what, "estimate": e.value, "low": e.low, "high": e.high, "prompts": e.n}
    if not e.testable:
        return row | {"p": math.nan, "verdict": f"not tested: {statistics.untestable(e)}"}
    return row | {"p": p}


def _cell(x, fmt: str = "{:.4g}") -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def markdown(table: pd.DataFrame) -> str:
    """The comparison as a table: estimate [95% interval], p (adjusted), verdict."""
    lines = ["| pair | task | T | method | K | what | now vs baseline [95%] | prompts | p (adjusted) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cell = _cell
    for r in table.itertuples():
        interval = f"{cell(r.estimate)} [{cell(r.low)}, {cell(r.high)}]" if not math.isnan(r.estimate) else "–"
        lines.append(f"| {cell(getattr(r, 'pair', ''), '{}')} | {cell(getattr(r, 'task', ''), '{}')} | "
                     f"{cell(getattr(r, 'temperature', math.nan), '{:g}')} | {cell(getattr(r, 'method', ''), '{}')} | "
                     f"{cell(getattr(r, 'K', math.nan), '{:.0f}')} | {r.what} | {interval} | "
                     f"{cell(r.prompts, '{:.0f}')} | {cell(r.p_adjusted, '{:.3g}')} | {r.verdict} |")
    return "\n".join(lines)


def prompt_table(results: str | Path) -> Path:
    """A results folder's prompt table (RESULTS/tables/prompts.csv; a tables folder's prompts.csv)."""
    path = Path(results)
    prompts = path / "tables" / "prompts.csv" if (path / "tables").is_dir() else path / "prompts.csv"
    if not prompts.is_file():
        raise FileNotFoundError(f"{prompts}: no prompt table (run the workflow's aggregate rule first)")
    return prompts


def check_baseline_path(path: str | Path) -> None:
    """A baseline may replace only a baseline: never a user's other file."""
    check_writable(path)
    path = Path(path)
    header = ",".join(BASELINE_COLUMNS)
    if path.exists() and (path.is_dir() or path.read_text(errors="replace").split("\n", 1)[0] != header):
        raise ValueError(f"{path} exists and is not a regress baseline: not overwritten (give another path)")


def gate(results: str | Path, baseline_file: str | Path) -> tuple[pd.DataFrame, bool]:
    """The comparison of a results folder's prompt table (results/tables/prompts.csv) with a baseline file, and
    whether it passes (no regression)."""
    prompts = prompt_table(results)
    if not Path(baseline_file).is_file():
        raise FileNotFoundError(f"{baseline_file}: no baseline (write one with `diversed regress --write FILE`)")
    base = pd.read_csv(baseline_file)
    if missing := sorted(set(BASELINE_COLUMNS) - set(base.columns)):
        raise ValueError(f"{baseline_file}: not a regress baseline (no column {', '.join(missing)})")
    table = compare(baseline(read_units(prompts)), base)
    return table, not (table["verdict"] == "regression").any()
