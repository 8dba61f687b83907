"""Tidy tables from scored runs: one row per run (`collect`) and one per (run, prompt) (`prompt_table`, the unit
of every interval), then the paper's tables, a speed table and the lambda table, each cell's 95% interval over
prompts (diversed.statistics: seeds pooled within a prompt, ratios as ratios of totals). CSV for machines,
Markdown and LaTeX for people."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from diversed import statistics
from diversed.runs.run import Run
from diversed.runs.sweep import COLUMNS as SWEEP_COLUMNS
from diversed.statistics import NONE, Estimate
from diversed.tasks import metric_spec
from diversed.utils import write_text

METHOD_NAMES = {"autoregressive": "Target only", "draft": "Draft only", "strict": "SD",
                "finetuned": "SD with fine-tuned draft", "fixed": "Static ensemble (fixed w)",
                "dynamic": "DIVERSED"}
TABLE1_METHODS = ("strict", "finetuned", "dynamic")
SPEEDUP_KEYS = ["pair", "task", "temperature", "seed", "timing"]  # what a run shares with its target-only baseline

# Published numbers (the DIVERSED paper), T = 1.0, Llama-3.2-1B-Instruct drafting for Llama-3.1-8B-Instruct:
# {(method, task): (acceptance %, quality)}; quality in the task's metric (accuracy/pass@1 as fractions).
PAPER_PAIR = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct")
PAPER = {("strict", "gsm8k"): (44.60, None), ("dynamic", "gsm8k"): (72.61, 0.67),
         ("strict", "mbpp"): (26.30, None), ("dynamic", "mbpp"): (85.03, 0.53),
         ("strict", "xsum"): (20.44, 7.09), ("dynamic", "xsum"): (70.53, 7.23)}


# what a run's prompt rows carry of its record: the keys every table and claim selects on
UNIT_KEYS = ["pair", "task", "method", "head_task", "lambda", "temperature", "K", "weight", "mixing", "hardware",
             "metric", "timing", "batch_size"]


def collect(run_dirs: list[str | Path]) -> pd.DataFrame:
    """All runs as a tidy frame (Run.record), with each run's speedup over its target-only baseline."""
    df = pd.DataFrame([Run(d).record() for d in run_dirs])
    df["K"] = df["K"].astype("Int64")  # empty for the baselines
    df["speedup"] = speedup(df)
    return df


def speedup(df: pd.DataFrame) -> pd.Series:
    """tokens/s of each run over that of the target-only run with the same pair, task, T and seed, of the same
    kind (timing or quality; one per such key: it has no K), timed on the same hardware; nan where there is none,
    where it ran on other hardware (with a warning naming both), and for a batched run (no tokens/s)."""
    target_only = df[df["method"] == "autoregressive"]
    twice = target_only[target_only.duplicated(SPEEDUP_KEYS, keep=False)]
    if len(twice):
        key = ", ".join(f"{k} {twice.iloc[0][k]}" for k in SPEEDUP_KEYS)
        raise ValueError(f"{len(twice)} target-only runs for {key}: the speedup baseline needs exactly one")
    baseline = target_only[[*SPEEDUP_KEYS, "tokens_per_s", "hardware"]].rename(
        columns={"tokens_per_s": "base_tokens_per_s", "hardware": "base_hardware"})
    base = df[[*SPEEDUP_KEYS, "tokens_per_s", "hardware"]].merge(baseline, on=SPEEDUP_KEYS, how="left")
    elsewhere = base["base_hardware"].notna() & (base["base_hardware"] != base["hardware"])
    for (hw, base_hw), g in base[elsewhere].groupby(["hardware", "base_hardware"]):
        first = ", ".join(f"{k} {g.iloc[0][k]}" for k in SPEEDUP_KEYS)
        print(f"warning: no speedup for {len(g)} run(s) timed on {hw}: their target-only baseline ran on {base_hw} "
              f"(first: {first}); time both on one kind of hardware", file=sys.stderr)
    ratio = (base["tokens_per_s"] / base["base_tokens_per_s"]).where(~elsewhere)
    return pd.Series(ratio.to_numpy(), index=df.index)


def prompt_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, prompt) (Run.prompt_rows) with the run's UNIT_KEYS and folder; head_task "" for a task's
    own head. Keyed by folder, not run_id: a fixed run whose sweep kept w = 1 is strict's config, so its run_id."""
    frames = []
    for r in runs.to_dict("records"):
        keys = {k: r[k] for k in UNIT_KEYS} | {"head_task": r["head_task"] or "", "run_dir": r["run_dir"]}
        frames.append(pd.DataFrame(Run(r["run_dir"]).prompt_rows()).assign(**keys))
    units = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*UNIT_KEYS, "run_id", "prompt"])
    return units.fillna({"head_task": ""})


def read_units(path: str | Path) -> pd.DataFrame:
    """A prompt table written by write_all (prompts.csv): head_task "" for a task's own head."""
    return pd.read_csv(path, dtype={"head_task": str}).fillna({"head_task": ""})


def quality_units(units: pd.DataFrame) -> pd.DataFrame:
    """The quality runs' units: every prompt of the eval set, whatever their batch size (not the timing runs)."""
    return units[~is_timing(units)]


def timed_units(units: pd.DataFrame) -> pd.DataFrame:
    """The units whose times a speed table, a speedup or a speed claim may read: the timing runs' where there
    are any (batch 1, methods interleaved in one job), else those of runs decoded at batch 1; never a batched
    run's (its rows share the wall clock)."""
    timing = is_timing(units)
    batch = units["batch_size"] if "batch_size" in units else pd.Series(1, index=units.index)
    return units[timing] if timing.any() else units[batch.fillna(1) == 1]


def is_timing(units: pd.DataFrame) -> pd.Series:
    """Whether each unit is a timing run's (False where the column is absent: runs before timing runs)."""
    return units["timing"].fillna(False).astype(bool) if "timing" in units else pd.Series(False, index=units.index)


def select(units: pd.DataFrame, **keys) -> pd.DataFrame:
    """The rows of units whose columns equal keys (K=None: the baselines, which have no K)."""
    mask = np.ones(len(units), dtype=bool)
    for k, v in keys.items():
        column = units[k].to_numpy()
        mask &= pd.isna(column) if v is None or (isinstance(v, float) and np.isnan(v)) else column == v
    return units[mask]


def quality(units: pd.DataFrame, runs: pd.DataFrame | None = None) -> Estimate:
    """The quality of one method's units over prompts: a task metric's mean, a fidelity metric's ratio of totals;
    a corpus metric (BLEU) has no per-prompt value: its runs' value, without an interval."""
    if units.empty:
        return NONE
    spec = metric_spec(units["metric"].iloc[0])
    if spec.corpus:
        q = runs.loc[runs["run_id"].isin(units["run_id"]), "quality"] if runs is not None else pd.Series([])
        return Estimate(float(q.mean()), float("nan"), float("nan"), units["prompt"].nunique()) if len(q) else NONE
    return statistics.estimate(units, spec.statistic)


def quality_scale(metric: str) -> tuple[float, int]:
    """Fractions are shown in percent with one digit; percentages and log-likelihoods as they are, two digits."""
    return (100.0, 1) if metric_spec(metric).unit == "fraction" else (1.0, 2)


def cell(units: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """'acceptance % / quality', each ± the half-width of its 95% interval over prompts."""
    if units.empty:
        return "–"
    scale, digits = quality_scale(units["metric"].iloc[0])
    acceptance = statistics.estimate(units, "draft_acceptance_rate")
    return f"{acceptance.text(100, 1)} / {quality(units, runs).text(scale, digits)}"


def table1(units: pd.DataFrame, temperature: float, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Paper Tables 1 / 2: rows pair x (SD, SD with fine-tuned draft, DIVERSED); columns tasks."""
    d = units[(units["temperature"] == temperature) & units["method"].isin(TABLE1_METHODS)
              & (units["head_task"] == "") & units["lambda"].isna()]
    tasks = sorted(d["task"].unique())
    rows = []
    for pair in sorted(d["pair"].unique()):
        for method in TABLE1_METHODS:
            g = d[(d["pair"] == pair) & (d["method"] == method)]
            if g.empty:
                continue
            rows.append({"pair": pair, "method": METHOD_NAMES.get(method, method)}
                        | {t: cell(g[g["task"] == t], runs) for t in tasks})
            if runs is not None and temperature == 1.0 and paper_pair(runs, g):
                ref = {"pair": pair, "method": METHOD_NAMES.get(method, method) + " (paper)"}
                for t in tasks:
                    a, q = PAPER.get((method, t), (None, None))
                    scale, digits = quality_scale(g.loc[g["task"] == t, "metric"].iloc[0]) \
                        if (g["task"] == t).any() else (1.0, 2)
                    ref[t] = "–" if a is None else f"{a:.2f} / {'–' if q is None else f'{q * scale:.{digits}f}'}"
                rows.append(ref)
    return pd.DataFrame(rows, columns=["pair", "method", *tasks])


def paper_pair(runs: pd.DataFrame, units: pd.DataFrame) -> bool:
    """Whether the units' runs decoded the pair whose numbers the paper reports (PAPER_PAIR)."""
    first = runs[runs["run_id"].isin(units["run_id"])].iloc[0]
    return (first["target"], first["draft"]) == PAPER_PAIR


def transfer_temperature(df: pd.DataFrame) -> float:
    """The temperature of Table 3: that of the runs decoded with another task's head (else the highest)."""
    cross = df.loc[df["head_task"].notna() & (df["head_task"] != df["task"]), "temperature"].unique()
    if len(cross) > 1:
        raise ValueError(f"cross-task runs at several temperatures {sorted(cross)}; pass the one for Table 3")
    return float(cross[0]) if len(cross) else float(df["temperature"].max())


def table3(units: pd.DataFrame, temperature: float, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Paper Table 3: head trained on task X (rows) evaluated on task Y (columns), DIVERSED, at one temperature
    (the diagonal is the task's own head, taken from the same temperature as the cross-task runs)."""
    d = units[(units["method"] == "dynamic") & (units["temperature"] == temperature) & units["lambda"].isna()].copy()
    d["head_task"] = d["head_task"].where(d["head_task"] != "", d["task"])
    tasks = sorted(set(d["task"]) | set(d["head_task"]))
    rows = []
    for pair in sorted(d["pair"].unique()):
        for x in tasks:
            g = d[(d["pair"] == pair) & (d["head_task"] == x)]
            if g.empty:
                continue
            rows.append({"pair": pair, "head trained on": x} | {y: cell(g[g["task"] == y], runs) for y in tasks})
    return pd.DataFrame(rows, columns=["pair", "head trained on", *tasks])


SPEED_COLUMNS = (("tokens_per_s", 1, 1), ("speedup", 1, 2), ("draft_acceptance_rate", 100, 1),
                 ("mean_acceptance_length", 1, 2), ("bias_tv", 1, 3), ("quality", 1, 3), ("target_logprob", 1, 3),
                 ("target_argmax_agreement", 1, 3))


def speed_table(units: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per pair/task/T/method/K and hardware, from the timed units (timed_units): tokens/s and the speedup over
    target-only decoding (ratios of totals over the same prompts and seeds, timed in the same job on the same
    hardware), acceptance, tau, bias, quality and its reference-free fidelity (target log p per token, target
    argmax agreement), each with its 95% interval over prompts. Runs with another task's head (decoded in jobs
    without a target-only run) stay out."""
    rows = []
    keys = ["pair", "task", "temperature", "method", "K", "hardware"]
    timed = timed_units(units)
    own = timed[(timed["head_task"] == "") & timed["lambda"].isna()]
    for key, g in own.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=True))
        row["K_text"] = "–" if pd.isna(row["K"]) else str(int(row["K"]))  # the baselines have no K
        base = select(own, pair=row["pair"], task=row["task"], temperature=row["temperature"],
                      method="autoregressive", hardware=row["hardware"])
        scale_q, digits_q = quality_scale(g["metric"].iloc[0])
        for col, scale, digits in SPEED_COLUMNS:
            if col == "speedup":
                e = statistics.paired(g, base, "tokens_per_s", relative=True)
            elif col == "quality":
                e, scale, digits = quality(g, runs), scale_q, digits_q
            else:
                e = statistics.estimate(g, col)
            row[col], row[f"{col}_ci95"], row[f"{col}_text"] = e.value, e.half, e.text(scale, digits)
        row["seeds"] = g["seed"].nunique()
        row["prompts"] = g["prompt"].nunique()
        rows.append(row)
    return pd.DataFrame(rows)


def lambda_table(units: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The lambda sweep: acceptance, mean w, quality and fidelity of the heads trained at each lambda, per pair and
    task, each with its 95% interval over prompts."""
    rows = []
    for (pair, task, lam), g in units.dropna(subset=["lambda"]).groupby(["pair", "task", "lambda"], sort=True):
        row = {"pair": pair, "task": task, "lambda": lam, "metric": g["metric"].iloc[0]}
        scale_q, digits_q = quality_scale(row["metric"])
        for col, scale, digits in (("draft_acceptance_rate", 100, 1), ("mean_weight", 1, 3), ("quality", 1, 3),
                                   ("target_logprob", 1, 3), ("target_argmax_agreement", 1, 3)):
            e = quality(g, runs) if col == "quality" else statistics.estimate(g, col)
            if col == "quality":
                scale, digits = scale_q, digits_q
            row[col], row[f"{col}_ci95"], row[f"{col}_text"] = e.value, e.half, e.text(scale, digits)
        row["seeds"] = g["seed"].nunique()
        row["prompts"] = g["prompt"].nunique()
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, stem: Path, caption: str) -> list[Path]:
    """stem.csv, stem.md, stem.tex (atomically)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    text_cols = [c for c in df.columns if not c.endswith(("_ci95",))]
    shown = df[[c for c in text_cols if c + "_text" not in df.columns]]
    shown = shown.rename(columns={c: c.removesuffix("_text") for c in shown.columns})
    write_text(stem.with_suffix(".csv"), df.to_csv(index=False))
    write_text(stem.with_suffix(".md"), f"**{caption}**\n\n" + (shown.to_markdown(index=False) if len(shown) else
                                                                "(no runs)") + "\n")
    latex = shown.to_latex(index=False, escape=True, caption=caption) if len(shown) else f"% {caption}: no runs\n"
    write_text(stem.with_suffix(".tex"), latex)
    return [stem.with_suffix(s) for s in (".csv", ".md", ".tex")]


def learned_weights(runs: pd.DataFrame) -> pd.DataFrame:
    """Every w the dynamic verifier used, one row per draft position, from the runs' generations."""
    rows = []
    for r in runs[runs["method"] == "dynamic"].itertuples():
        rows += [{"pair": r.pair, "task": r.task, "head_task": r.head_task, "temperature": r.temperature,
                  "seed": r.seed, "prompt": g["prompt_hash"], "position": i + 1, "w": w}
                 for g in Run(r.run_dir).generations for step in g["weights"] for i, w in enumerate(step)]
    return pd.DataFrame(rows, columns=["pair", "task", "head_task", "temperature", "seed", "prompt", "position", "w"])


def sweep_units(sweeps: pd.DataFrame) -> pd.DataFrame:
    """The prompt rows of every sweep point, with the point's keys (pair, task, temperature, K, verifier, weight,
    mixing, metric)."""
    keys = ["pair", "task", "temperature", "K", "verifier", "weight", "mixing", "metric"]
    frames = [pd.DataFrame(Run(r.run_dir).prompt_rows()).assign(**{k: getattr(r, k) for k in keys})
              for r in sweeps.itertuples()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*keys, "run_id", "prompt"])


def write_all(run_dirs: list[str | Path], out: str | Path, sweep_csvs: list[str | Path] = (),
              table3_temperature: float | None = None, lambda_dirs: list[str | Path] = (),
              timing_dirs: list[str | Path] = ()) -> list[Path]:
    """Under out/: runs.csv (one row per run, the lambda sweep's and the timing runs included), prompts.csv (one
    row per (run, prompt): what the claims and figures read), sweeps.csv and sweep_prompts.csv (the static sweeps'
    points and their prompt rows), weights.csv, the paper's tables, the speed table and the lambda table.

    table3_temperature: the temperature of Table 3 (default: that of the cross-task runs); lambda_dirs: the lambda
    sweep's scored runs (their manifests carry a `lambda` label); timing_dirs: the timing runs (label timing=1),
    which only the speed table reads."""
    out = Path(out)
    runs = collect([*run_dirs, *lambda_dirs, *timing_dirs])
    units = prompt_table(runs)
    sweeps = pd.concat([pd.read_csv(p) for p in sweep_csvs]) if sweep_csvs else pd.DataFrame(columns=SWEEP_COLUMNS)
    own = units[units["lambda"].isna()]
    written = {"runs.csv": runs, "prompts.csv": units, "sweeps.csv": sweeps, "sweep_prompts.csv": sweep_units(sweeps),
               "weights.csv": learned_weights(runs[runs["lambda"].isna() & ~is_timing(runs)])}
    for name, frame in written.items():
        write_text(out / name, frame.to_csv(index=False))
    paths = [out / name for name in written]
    quality = quality_units(own)
    paths += write_table(table1(quality, 1.0, runs), out / "table1", "Table 1 (T = 1.0): acceptance rate % / quality")
    paths += write_table(table1(quality, 0.1, runs), out / "table2", "Table 2 (T = 0.1): acceptance rate % / quality")
    t3 = transfer_temperature(runs) if table3_temperature is None else table3_temperature
    paths += write_table(table3(quality, t3, runs), out / "table3", f"Table 3 (T = {t3:g}): cross-task transfer of "
                                                                    "the DIVERSED head (acceptance % / quality)")
    paths += write_table(speed_table(own, runs), out / "speed", "Speed (timed at batch 1): tokens/s, speedup over "
                                                                "target-only, acceptance %, tau, bias TV, quality, "
                                                                "fidelity")
    paths += write_table(lambda_table(quality_units(units), runs), out / "lambda", "Lambda sweep: the DIVERSED head "
                         "trained at each lambda (weight of the acceptance term): acceptance %, mean w, quality, "
                         "fidelity")
    return paths
