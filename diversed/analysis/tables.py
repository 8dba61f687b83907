"""Tidy tables from scored runs: one row per run (`collect`) and one per (run, prompt) (`prompt_table`, the unit
of every interval), then the paper's tables, a speed table and the lambda table, each cell's 95% interval over
prompts (diversed.statistics: seeds pooled within a prompt, ratios as ratios of totals). CSV for machines,
Markdown and LaTeX for people."""

from __future__ import annotations

import json
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from diversed import statistics
from diversed.decoding.settings import FAMILIES, LEARNED, METHODS, RULES, Method
from diversed.runs.run import Run, trained
from diversed.runs.settings import SELECTIONS
from diversed.runs.sweep import COLUMNS as SWEEP_COLUMNS
from diversed.statistics import NONE, Estimate
from diversed.tasks import metric_spec
from diversed.training.settings import DistillConfig, HeadTrainConfig
from diversed.utils import read_json, write_text

FRONT_METHODS = ("fixed", *FAMILIES)  # each family, at its setting chosen on dev
TABLE1_METHODS = ("strict", "finetuned", "dynamic")
SPEEDUP_KEYS = ["pair", "task", "temperature", "seed", "timing"]  # what a run shares with its target-only baseline

PAPER_NUMBERS = "paper_numbers.csv"  # the paper's Tables 1-3, every cell, in this package (importlib.resources)


def paper_numbers() -> pd.DataFrame:
    """The paper's published cells: table, temperature (Table 3's: none, see the file), target, draft, method,
    head_task ("" for a task's own head), task, acceptance (%), quality (as printed: % for GSM8K and MBPP)."""
    with (files("diversed.analysis") / PAPER_NUMBERS).open() as f:
        return pd.read_csv(f, comment="#", dtype={"head_task": str}).fillna({"head_task": ""})


def paper_cell(paper: pd.DataFrame, metric: str | None, **keys) -> str:
    """'acceptance / quality' of the paper's cell matching keys, on the scale our cells show (fractions in %, as
    the paper prints them); '–' where the paper has none."""
    hit = select(paper, **keys)
    if hit.empty:
        return "–"
    r = hit.iloc[0]
    digits = quality_scale(metric)[1] if metric else 2
    return f"{r['acceptance']:.2f} / {r['quality']:.{digits}f}"


def paper_pair(runs: pd.DataFrame | None, units: pd.DataFrame) -> tuple[str, str] | None:
    """(target, draft) of the units' runs where the paper reports that pair, else None."""
    if runs is None or units.empty:
        return None
    first = runs[runs["run_id"].isin(units["run_id"])]
    if first.empty:
        return None
    pair = (first.iloc[0]["target"], first.iloc[0]["draft"])
    paper = paper_numbers()
    return pair if ((paper["target"] == pair[0]) & (paper["draft"] == pair[1])).any() else None


# what a run's prompt rows carry of its tidy row: the keys every table and claim selects on
UNIT_KEYS = ["pair", "task", "method", "head_task", "temperature", "K", "weight", "mixing", "knob",
             "deferral", "hardware", "device", "capture",
             "metric", "timing", "batch_size"]


def collect(run_dirs: list[str | Path]) -> pd.DataFrame:
    """All runs as a tidy frame (Run.row), with each run's speedup over its target-only baseline."""
    df = pd.DataFrame([Run(d).row() for d in run_dirs])
    df["K"] = df["K"].astype("Int64")  # empty for the baselines
    df["speedup"] = speedup(df)
    return df


# a training config's settings the tables keep, read from its manifest (a setting its manifest predates: the
# dataclass's default, which is what ran)
HEAD_SETTINGS = ("acceptance_term", "acceptance_weight", "lr", "batch_size", "epochs", "mixing", "baseline",
                 "relative_at_zero", "max_prompt_tokens", "prompt_keep", "schedule", "rollout", "scoring")
DRAFT_SETTINGS = ("lr", "epochs", "max_prompt_tokens", "prompt_keep", "finetune")
TRAINED_COLUMNS = ["kind", "path", "task", "target", "draft", "prompts", "steps", *HEAD_SETTINGS, "finetune",
                   "final_mean_w", "reward_varied", "collapsed", "chosen_split", "candidates", "important_share",
                   "held_out_auc", "out_of_domain_auc"]


def trained_table(run_dirs: list[str | Path], judges: list[str | Path] = ()) -> pd.DataFrame:
    """One row per trained artifact behind the runs (runs.run.trained) and per AutoJudge manifest in judges: each
    DIVERSED head (kind "head": its training config, steps, final mean w, the share of steps whose rewards varied,
    its collapse, where its lambda was chosen and among which candidates), each AutoJudge classifier (kind "judge":
    the share of its mined mismatches that were important, its AUC on held-out prompts and, as JSON {task: AUC}, on
    other tasks' labels) and each fine-tuned draft (kind "draft": its objective), once."""
    rows = {}
    given = [read_json(m) | {"kind": "judge", "path": str(Path(m).parent)} for m in judges]
    for t in given + [t for run_dir in run_dirs for t in trained(Run(run_dir))]:
        if t["path"] in rows:
            continue
        c, final, chosen = t["config"], t.get("final", {}), t.get("chosen") or {}
        cls, names = {"head": (HeadTrainConfig, HEAD_SETTINGS), "draft": (DistillConfig, DRAFT_SETTINGS)}.get(
            t["kind"], (None, ()))
        rows[t["path"]] = {
            "kind": t["kind"], "path": t["path"], "task": c["task"], "target": c.get("target"),
            "draft": c.get("draft"), "prompts": t.get("prompts"),
            "steps": t.get("steps"), **{name: c.get(name, getattr(cls, name)) for name in names},
            "final_mean_w": final.get("mean_w"), "reward_varied": final.get("reward_varied"),
            "collapsed": t.get("collapsed") or "no" if t["kind"] == "head" else None,
            "chosen_split": chosen.get("split"),
            "candidates": ", ".join(f"{x['lambda']:g}" for x in chosen.get("candidates", [])) or None,
            "important_share": t.get("important_share"), "held_out_auc": t.get("held_out", {}).get("auc"),
            "out_of_domain_auc": json.dumps({o["task"]: o["auc"] for o in t["out_of_domain"]})
            if "out_of_domain" in t else None}
    return pd.DataFrame(list(rows.values()), columns=TRAINED_COLUMNS)


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
    return statistics.estimate(units, spec.statistic, binary=spec.binary)


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
    """Paper Tables 1 / 2: rows pair x (SD, SD with fine-tuned draft, DIVERSED); columns tasks; beside each row of a
    pair the paper reports, at a temperature it reports, the paper's row (paper_numbers)."""
    d = units[(units["temperature"] == temperature) & units["method"].isin(TABLE1_METHODS)
              & (units["head_task"] == "")]
    tasks = sorted(d["task"].unique())
    paper = paper_numbers()
    rows = []
    for pair in sorted(d["pair"].unique()):
        for method in TABLE1_METHODS:
            g = d[(d["pair"] == pair) & (d["method"] == method)]
            if g.empty:
                continue
            rows.append({"pair": pair, "method": METHODS.get(method, method)}
                        | {t: cell(g[g["task"] == t], runs) for t in tasks})
            if (ids := paper_pair(runs, g)) is not None and temperature in set(paper["temperature"].dropna()):
                rows.append({"pair": pair, "method": METHODS.get(method, method) + " (paper)"}
                            | {t: paper_cell(paper, _metric(g, t), table=1 if temperature == 1.0 else 2,
                                             target=ids[0], draft=ids[1], method=method, head_task="", task=t)
                               for t in tasks})
    return pd.DataFrame(rows, columns=["pair", "method", *tasks])


def _metric(units: pd.DataFrame, task: str) -> str | None:
    m = units.loc[units["task"] == task, "metric"]
    return m.iloc[0] if len(m) else None


def transfer_temperature(df: pd.DataFrame) -> float:
    """The temperature of Table 3: that of the runs decoded with another task's head (else the highest)."""
    cross = df.loc[df["head_task"].notna() & (df["head_task"] != df["task"]), "temperature"].unique()
    if len(cross) > 1:
        raise ValueError(f"cross-task runs at several temperatures {sorted(cross)}; pass the one for Table 3")
    return float(cross[0]) if len(cross) else float(df["temperature"].max())


TABLE3_CAVEAT = ("the paper's Table 3 caption says T = 0.1, but its GSM8K rows repeat Table 1's T = 1.0 numbers; "
                 "its rows are shown beside ours whatever this run's transfer temperature")


def table3(units: pd.DataFrame, temperature: float, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Paper Table 3: SD, then the head trained on task X (rows) evaluated on task Y (columns), DIVERSED, then
    AutoJudge's judge likewise ("X (AutoJudge)"), at one temperature (the diagonal is the task's own, taken from
    the same temperature as the cross-task runs); beside each SD or DIVERSED row of a pair the paper reports, the
    paper's (TABLE3_CAVEAT)."""
    d = units[units["method"].isin(["strict", *LEARNED]) & (units["temperature"] == temperature)].copy()
    d = d[(d["method"] != "strict") | (d["head_task"] == "")]
    d["head_task"] = d["head_task"].where(d["head_task"] != "", d["task"])
    tasks = sorted(set(d["task"]) | set(d.loc[d["method"] != "strict", "head_task"]))
    paper = paper_numbers()
    rows = []
    for pair in sorted(d["pair"].unique()):
        for method, x in [("strict", "SD")] + [(m, x) for m in LEARNED for x in tasks]:
            g = d[(d["pair"] == pair) & (d["method"] == method)]
            g = g if method == "strict" else g[g["head_task"] == x]
            if g.empty:
                continue
            name = x + (" (AutoJudge)" if method == "judge" else "")
            rows.append({"pair": pair, "head trained on": name} | {y: cell(g[g["task"] == y], runs) for y in tasks})
            if method != "judge" and (ids := paper_pair(runs, g)) is not None:
                rows.append({"pair": pair, "head trained on": f"{x} (paper)"} | {
                    y: paper_cell(paper, _metric(g, y), table=3, target=ids[0], draft=ids[1], method=method,
                                  head_task="" if x in ("SD", y) else x, task=y) for y in tasks})
    return pd.DataFrame(rows, columns=["pair", "head trained on", *tasks])


SPEED_COLUMNS = (("tokens_per_s", 1, 1), ("speedup", 1, 2), ("correct_per_s", 1, 3), ("draft_acceptance_rate", 100, 1),
                 ("mean_acceptance_length", 1, 2), ("bias_tv", 1, 3), ("quality", 1, 3), ("target_logprob", 1, 3),
                 ("target_argmax_agreement", 1, 3))


def speed_table(units: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per pair/task/T/method/K, hardware and capture mode (eager, CUDA graphs, compiled), from the timed units
    (timed_units): tokens/s and the speedup over target-only decoding (ratios of totals over the same prompts and
    seeds, timed in the same job on the same hardware), correct answers per second (a 0/1 metric's right answers
    over the decode seconds: what a lossy rule's tokens/s hides), acceptance, tau, bias, quality and its reference-free
    fidelity (target log p per token, target argmax agreement), each with its 95% interval over prompts. Runs
    with another task's head (decoded in jobs without a target-only run) stay out."""
    rows = []
    keys = ["pair", "task", "temperature", "method", "K", "hardware", "capture"]
    timed = timed_units(units)
    timed = timed if "capture" in timed else timed.assign(capture="none")  # a prompt table of before it was kept
    own = timed[timed["head_task"] == ""]
    for key, g in own.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=True))
        row["K_text"] = "–" if pd.isna(row["K"]) else str(int(row["K"]))  # the baselines have no K
        base = select(own, pair=row["pair"], task=row["task"], temperature=row["temperature"],
                      method="autoregressive", hardware=row["hardware"], capture=row["capture"])
        scale_q, digits_q = quality_scale(g["metric"].iloc[0])
        for col, scale, digits in SPEED_COLUMNS:
            if col == "speedup":
                e = statistics.paired(g, base, "tokens_per_s", relative=True)
            elif col == "quality":
                e, scale, digits = quality(g, runs), scale_q, digits_q
            elif col == "correct_per_s":  # right answers of a 0/1 metric per second, beside tokens/s
                binary = metric_spec(g["metric"].iloc[0]).binary
                e = statistics.estimate(g.assign(correct=g["quality"]), col) if binary else NONE
            else:
                e = statistics.estimate(g, col)
            row[col], row[f"{col}_ci95"], row[f"{col}_text"] = e.value, e.half, e.text(scale, digits)
        row["seeds"] = g["seed"].nunique()
        row["prompts"] = g["prompt"].nunique()
        rows.append(row | latency_columns(g))
    return pd.DataFrame(rows)


# MLPerf Inference's Llama-3.1-8B limits at P99 (LoadGen's mlperf.conf: llama3_1-8b.Server and
# llama3_1-8b-interactive.Server, ttft_latency and tpot_latency), in ms
MLPERF_LIMITS = {"server": (2000.0, 100.0), "interactive": (500.0, 30.0)}


def latency_columns(g: pd.DataFrame) -> dict:
    """Percentiles over the timed requests (each (seed, prompt)) of the request latency (prefill + decode, s), the
    time to first token (TTFT = prefill + first token on the host, ms) and the time per output token after it
    (TPOT = (latency - TTFT) / (tokens - 1), MLPerf's, ms), as MLPerf LoadGen's early stopping estimates them
    (99% confidence; '–' where the requests are fewer than it needs, statistics.requests_needed: 11 for p50, 64 for
    p90, 662 for p99); and on a GPU, MLPerf's Llama-3.1-8B server and interactive limits (MLPERF_LIMITS) at P99,
    pass or fail."""
    first, prefill = g.get("first_token_seconds", pd.Series(np.nan, index=g.index)), g.get("prefill_seconds", 0.0)
    series = {"latency": (g["seconds"] + prefill, "s", 1.0), "TTFT": (prefill + first, "ms", 1e3),
              "TPOT": ((g["seconds"] - first) / (g["new_tokens"] - 1).where(g["new_tokens"] > 1), "ms", 1e3)}
    out: dict = {"requests": len(g)}
    for name, (x, unit, scale) in series.items():
        for p in statistics.PERCENTILES:
            key = f"{name}_p{round(100 * p)}_{unit}"
            out[key] = statistics.percentile_estimate(x.to_numpy(dtype=float) * scale, p)
            out[f"{key}_text"] = "–" if np.isnan(out[key]) else f"{out[key]:.3g}"
    for scenario, (ttft, tpot) in MLPERF_LIMITS.items():
        out[f"mlperf_{scenario}"] = mlperf_verdict(g, out["TTFT_p99_ms"], out["TPOT_p99_ms"], ttft, tpot)
    return out


def mlperf_verdict(g: pd.DataFrame, ttft_p99: float, tpot_p99: float, ttft_limit: float, tpot_limit: float) -> str:
    """pass / fail (what exceeds) against one scenario's P99 limits; '–' off a GPU or under the requests P99 needs."""
    if not g.get("device", pd.Series("cpu", index=g.index)).str.startswith("cuda").all():
        return "– (not on a GPU)"
    if np.isnan(ttft_p99) or np.isnan(tpot_p99):
        return f"– ({len(g)} of {statistics.requests_needed(0.99)} requests)"
    over = [f"{name} {x:.3g} ms" for name, x, limit in (("TTFT", ttft_p99, ttft_limit), ("TPOT", tpot_p99, tpot_limit))
            if x > limit]
    return f"fail ({', '.join(over)})" if over else "pass"


def setting_text(units: pd.DataFrame) -> str:
    """A family's setting as its runs record it: w and mixing, or knob (and deferral); "strict" where its sweep
    kept strict."""
    r = units.iloc[0]
    m = Method.parse(r["method"])
    given = ", given" if m.given is not None else ""
    if m.base == "fixed":
        kept = pd.isna(r["weight"]) or r["weight"] == 1.0
        return "strict (w = 1)" if kept and not given else f"w = {r['weight']:g} ({r['mixing']}){given}"
    if pd.isna(r["knob"]):
        return "strict (none kept quality)"
    setting = RULES[m.base].setting(r["knob"])
    return setting + (f" ({r['deferral']})" if isinstance(r["deferral"], str) else "") + given


def given_methods(units: pd.DataFrame) -> tuple[str, ...]:
    """The methods run at a setting the config gives (fixed-0.7, cascade-0.5), in the order of their verifiers."""
    found = {m for m in units["method"].unique() if Method.parse(m).given is not None}
    return tuple(sorted(found, key=lambda m: (FRONT_METHODS.index(Method.parse(m).base), m)))


def versus_target(units: pd.DataFrame, methods: tuple[str, ...]):
    """Each method's own-head eval units at each (pair, task, T, K), in that order, with the target alone's on the
    same (pair, task, T): yields ((pair, task, T, K), method, its units, the target's units)."""
    d = units[units["head_task"] == ""]
    for (pair, task, T, K), g in d[d["K"].notna()].groupby(["pair", "task", "temperature", "K"], sort=True):
        target = select(d, pair=pair, task=task, temperature=T, method="autoregressive")
        for method in methods:
            m = g[g["method"] == method]
            if not m.empty:
                yield (pair, task, T, int(K)), method, m, target


def families_table(units: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each relaxed family at its best setting on dev (the largest acceptance its sweep's rule admits, sweep.select),
    evaluated on the eval prompts beside DIVERSED and the target alone, per pair/task/T/K:
    acceptance %, quality, and quality minus the target's (paired over prompts), each ± its 95% half-width."""
    rows = []
    for (pair, task, T, K), method, m, target in versus_target(units, (*FRONT_METHODS, *given_methods(units),
                                                                       "dynamic")):
        spec, (scale, digits) = metric_spec(m["metric"].iloc[0]), quality_scale(m["metric"].iloc[0])
        vs = statistics.quality_gain(m, target, spec) if len(target) else NONE
        rows.append({"pair": pair, "task": task, "temperature": T, "K": K,
                     "method": Method.parse(method).name, "setting (chosen on dev, or given)": "learned w (head)"
                     if method == "dynamic" else setting_text(m),
                     "acceptance %": statistics.estimate(m, "draft_acceptance_rate").text(100, 1),
                     "quality": quality(m, runs).text(scale, digits),
                     "quality - target": vs.text(scale, digits, sign=True), "prompts": m["prompt"].nunique()})
    return pd.DataFrame(rows)


def _dev_setting(r: pd.Series | None) -> str:
    """A sweep point's setting (w and mixing, or knob and deferral); "strict" for none."""
    if r is None:
        return "strict"
    if r["verifier"] == "fixed":
        return f"w = {r['weight']:g} ({r['mixing']})"
    return RULES[r["verifier"]].setting(r["knob"]) + (f" ({r['deferral']})" if isinstance(r["deferral"], str) else "")


def eval_check(units: pd.DataFrame, family: str, chosen: pd.Series | None, key: dict) -> str:
    """The certified setting's check on the eval prompts: its quality against strict's there, non-inferior within
    the task's tolerance (statistics.noninferior), where the eval runs decoded that setting."""
    if chosen is None:
        return "kept strict: nothing to check"
    m = select(units, **key, method=family)
    if m.empty or _dev_setting(m.iloc[0].rename({"method": "verifier"})) != _dev_setting(chosen):
        return "not decoded on eval (the eval runs took another selection's setting)"
    strict = select(units, **key, method="strict")
    spec = metric_spec(m["metric"].iloc[0])
    scale, digits = quality_scale(spec.name)
    gain = statistics.quality_gain(m, strict, spec)
    test = statistics.noninferior(gain, spec.tolerance)
    return (f"{test.verdict()}: {gain.text(scale, digits, sign=True)} vs strict, margin {spec.tolerance * scale:g}, "
            f"n = {gain.n}" + (f" ({test.why})" if test.why else ""))


def knobs_table(sweeps: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """Per dev sweep (pair, task, T, K) and family: the setting each selection chose (runs.settings.SELECTIONS:
    knob_certified beside knob_estimate and knob_noninferior), how far the fixed sequence certified, the dev
    prompts it would need where it certified nothing, and the certified setting's check on the eval prompts."""
    points = sweeps[sweeps["sequence"].notna()] if "sequence" in sweeps else sweeps.iloc[:0]
    rows = []
    for (pair, task, T, K, family), g in points.groupby(["pair", "task", "temperature", "K", "verifier"], sort=False):
        g = g.sort_values("sequence")
        chosen = {s: next((r for _, r in g.iterrows() if r[f"chosen_{s}"] == 1), None)
                  for s in SELECTIONS}
        need = g["dev_needs"].iloc[0] if not g["certified"].astype(bool).any() else np.nan
        key = {"pair": pair, "task": task, "temperature": T, "K": K}
        rows.append({**key, "family": Method.parse(family).name,
                     **{f"knob_{s}": _dev_setting(r) for s, r in chosen.items()},
                     "certified": f"{int(g['certified'].astype(bool).sum())} of {len(g)}",
                     "dev prompts": int(g["prompts"].iloc[0]),
                     "dev prompts to certify": "–" if pd.isna(need) else f"≈ {int(need)}",
                     "eval check (certified)": eval_check(units, family, chosen["certified"], key)})
    return pd.DataFrame(rows)


Q99, LENGTH_BAND = 0.99, (0.9, 1.1)  # MLPerf Inference's accuracy target and output-length band


def _number(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if np.isfinite(x) else "–"


def retained(units: pd.DataFrame, target: pd.DataFrame, spec) -> Estimate:
    """The quality of units over the target alone's on the same prompts (a ratio; Tango's interval for 0/1 answers)."""
    return statistics.paired(units, target, spec.statistic, relative=True, binary=spec.binary)


def retention_table(units: pd.DataFrame) -> pd.DataFrame:
    """Quality stated as inference benchmarks state it (MLPerf Inference: 99% of the reference's quality, output
    length within 0.9-1.1 of it), per pair/task/T/K and method against the target alone on the same eval prompts:
    retention (quality ratio, point and 95% lower bound); Q-99 (point >= 99% and the paired difference shown
    non-inferior within the task's tolerance); the output-length ratio; the margin the prompts can resolve (80%
    power). Strict speculative decoding is lossless: its row is the noise floor of these prompts. A fidelity or
    corpus metric has no per-prompt ratio to state ("–")."""
    rows = []
    for (pair, task, T, K), method, m, target in versus_target(units, ("strict", *FRONT_METHODS,
                                                                       *given_methods(units), "dynamic")):
        spec = metric_spec(m["metric"].iloc[0])
        if target.empty or spec.fidelity or spec.corpus:
            continue
        scale, digits = quality_scale(spec.name)
        kept = retained(m, target, spec)
        gain = statistics.quality_gain(m, target, spec)
        length = statistics.paired(m, target, "length", relative=True)
        q99 = kept.known and kept.value >= Q99 and statistics.noninferior(gain, spec.tolerance).verdict() == \
            statistics.HOLDS
        rows.append({"pair": pair, "task": task, "temperature": T, "K": K,
                     "method": Method.parse(method).name + (" (lossless: noise floor)" if method == "strict" else ""),
                     "retention %": kept.text(100, 1), "retention lower bound %": _number(100 * kept.low, 1),
                     "Q-99": "yes" if q99 else "no", "quality - target": gain.text(scale, digits, sign=True),
                     "tolerance": f"{spec.tolerance * scale:g}",
                     "resolvable margin": _number(statistics.resolvable_margin(gain) * scale, digits),
                     "length ratio": length.text(1, 2),
                     "length in 0.9-1.1": "yes" if LENGTH_BAND[0] <= length.value <= LENGTH_BAND[1] else "no",
                     "prompts": gain.n})
    return pd.DataFrame(rows)


def transfer_table(units: pd.DataFrame, runs: pd.DataFrame, trained: pd.DataFrame) -> pd.DataFrame:
    """Each learned verifier (DIVERSED's head, AutoJudge's judge) trained on one task and decoding another, per
    pair/T/K: what it decoded with (transfer_setting), acceptance %, quality, retention against the target alone on
    the same eval prompts (as in the retention table: point and 95% lower bound; "–" for a fidelity or corpus
    metric), quality minus the eval task's own module's (paired; "–" where that verifier does not run on it), and
    the judge's AUC on its own task's held-out prompts and out of domain on the eval task's mined labels ("–" and
    why where there is none)."""
    rows = []
    cross = units[units["head_task"] != ""]
    for (pair, task, method, head, T, K), g in cross.groupby(["pair", "task", "method", "head_task", "temperature",
                                                             "K"], sort=True):
        spec = metric_spec(g["metric"].iloc[0])
        scale, digits = quality_scale(spec.name)
        mine = select(units, pair=pair, task=task, temperature=T, K=K, method=method, head_task="")
        target = select(units, pair=pair, task=task, temperature=T, method="autoregressive", head_task="")
        kept = NONE if spec.fidelity or spec.corpus else retained(g, target, spec)
        gain = statistics.quality_gain(g, mine, spec)
        r = runs[runs["run_dir"].isin(g["run_dir"].unique())]  # the transfer's runs
        auc = judge_auc(r, trained, head, task) if method == "judge" else ("–", "–")
        rows.append({"pair": pair, "verifier": METHODS[method], "trained on": head, "evaluated on": task,
                     "setting": transfer_setting(r, head), "temperature": T, "K": int(K),
                     "acceptance %": statistics.estimate(g, "draft_acceptance_rate").text(100, 1),
                     "quality": quality(g, runs).text(scale, digits), "retention %": kept.text(100, 1),
                     "retention lower bound %": _number(100 * kept.low, 1),
                     "quality - own": gain.text(scale, digits, sign=True) if len(mine) else "– (none on this task)",
                     "AUC on trained task (held out)": auc[0], "AUC on evaluated task": auc[1],
                     "prompts": g["prompt"].nunique()})
    return pd.DataFrame(rows)


def transfer_setting(r: pd.DataFrame, head: str) -> str:
    """What a transfer's runs r decoded with: DIVERSED's learned w; the judge's threshold t chosen on the head task's
    dev prompts, or strict where that sweep kept strict."""
    if set(r["verifier"]) == {"dynamic"}:
        return "learned w"
    if set(r["verifier"]) == {"strict"}:
        return f"strict (its sweep on {head} kept strict)"
    return ", ".join(f"t = {t:g} (chosen on {head})" for t in sorted(r["knob"].dropna().unique()))


def judge_auc(r: pd.DataFrame, trained: pd.DataFrame, head: str, task: str) -> tuple[str, str]:
    """The AUC of the judge trained on task head for the pair of the transfer's runs r: held out on head's prompts,
    and on task's mined labels (its manifest's out_of_domain), as text; "–" and why where there is none."""
    pair = r[["target", "draft"]].drop_duplicates()
    j = trained[(trained["kind"] == "judge") & (trained["task"] == head)].merge(pair, on=["target", "draft"])
    if len(j) != 1:
        return "–", "–"
    held, found = j["held_out_auc"].iloc[0], j["out_of_domain_auc"].iloc[0]
    found = json.loads(found) if isinstance(found, str) else {}
    other = f"– (no labels mined on {task})" if task not in found else \
        "– (one class in its labels)" if found[task] is None else _number(found[task], 3)
    return _number(held, 3) if pd.notna(held) else "– (held-out labels of one class or none)", other


def lambda_table(sweeps: pd.DataFrame) -> pd.DataFrame:
    """The lambda sweeps (runs.sweep.sweep_lambda, on dev): per pair and task, strict and the head trained at each
    lambda: acceptance, mean w, quality, quality minus strict's (paired over the dev prompts), the
    non-inferiority verdict, whether the head collapsed and which one was chosen."""
    def cell(r, col, scale=1.0, digits=3, sign=False):
        half = r[f"{col}_ci95"]
        return statistics.Estimate(r[col], r[col] - half, r[col] + half, r["prompts"]).text(scale, digits, sign)

    rows = []
    for r in sweeps.to_dict("records"):
        scale, digits = quality_scale(r["metric"])
        head = r["verifier"] != "strict"
        rows.append({"pair": r["pair"], "task": r["task"], "temperature": r["temperature"], "K": int(r["K"]),
                     "lambda": f"{r['lambda']:g} ({r['acceptance_term']})" if head else "strict",
                     "acceptance %": cell(r, "draft_acceptance_rate", 100, 1),
                     "mean w": f"{r['mean_weight']:.3f}" if head else "1",
                     "quality": cell(r, "quality", scale, digits),
                     "quality - strict": cell(r, "quality_vs_strict", scale, digits, sign=True) if head else "",
                     "non-inferior": r["verdict"] + (f" ({r['why']})" if isinstance(r["why"], str) else "")
                     if head else "",
                     "collapsed": (r["collapsed"] if isinstance(r["collapsed"], str) else "no") if head else "",
                     "chosen": "yes" if r["chosen"] else "", "dev prompts": int(r["prompts"])})
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
    mixing, knob, metric)."""
    keys = ["pair", "task", "temperature", "K", "verifier", "weight", "mixing", "knob", "metric"]
    frames = [pd.DataFrame(Run(r.run_dir).prompt_rows()).assign(**{k: getattr(r, k) for k in keys})
              for r in sweeps.itertuples()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*keys, "run_id", "prompt"])


def sweep_speed(sweeps: pd.DataFrame, timing_dirs: list[str | Path]) -> pd.DataFrame:
    """sweeps with each point's speed at batch 1 from its timing run (workflow rule time_sweep: the sweep's points,
    DIVERSED and the target alone on the first n_timing dev prompts, interleaved in one job): timed_tokens_per_s
    (total new tokens / total seconds), speedup and speedup_ci95 (its tokens/s over the target alone's on the same
    prompts: a ratio of totals, paired over prompts), timed_prompts. A timing run matches the sweep point with its
    pair, task, sweep folder (T{T}-K{K}) and point name; points without one keep nan."""
    timed = {}
    for d in map(Path, timing_dirs):
        run = Run(d)
        timed[(run.row()["pair"], run.config["task"], d.parent.name, d.name)] = pd.DataFrame(run.prompt_rows())
    out = sweeps.reset_index(drop=True).assign(timed_tokens_per_s=np.nan, speedup=np.nan, speedup_ci95=np.nan,
                                               timed_prompts=np.nan)
    for i, r in out.iterrows():
        key = (r["pair"], r["task"], Path(r["run_dir"]).parent.name)
        g, base = timed.get((*key, Path(r["run_dir"]).name)), timed.get((*key, "autoregressive"))
        if g is None:
            continue
        out.loc[i, ["timed_tokens_per_s", "timed_prompts"]] = [statistics.estimate(g, "tokens_per_s").value,
                                                               g["prompt"].nunique()]
        if base is not None:
            e = statistics.paired(g, base, "tokens_per_s", relative=True)
            out.loc[i, ["speedup", "speedup_ci95"]] = [e.value, e.half]
    return out


def write_all(run_dirs: list[str | Path], out: str | Path, sweep_csvs: list[str | Path] = (),
              table3_temperature: float | None = None, lambda_csvs: list[str | Path] = (),
              timing_dirs: list[str | Path] = (), sweep_timing_dirs: list[str | Path] = (),
              judges: list[str | Path] = ()) -> list[Path]:
    """Under out/: runs.csv (one row per run, the timing runs included), prompts.csv (one
    row per (run, prompt): what the claims and figures read), sweeps.csv and sweep_prompts.csv (the static sweeps'
    points and their prompt rows), weights.csv, trained.csv (the heads and fine-tuned drafts behind the quality
    runs), the paper's tables, the speed table and the lambda table.

    table3_temperature: the temperature of Table 3 (default: that of the cross-task runs); lambda_csvs: the lambda
    sweeps' tables (runs.sweep.sweep_lambda's lambda.csv); timing_dirs: the timing runs (label timing=1),
    which only the speed table reads; sweep_timing_dirs: the sweeps' timing runs (sweep_speed); judges: AutoJudge's
    manifests (trained.csv lists each; the transfer table reads their AUCs)."""
    out = Path(out)
    runs = collect([*run_dirs, *timing_dirs])
    units = prompt_table(runs)
    sweeps = sweep_speed(pd.concat([pd.read_csv(p) for p in sweep_csvs], ignore_index=True) if sweep_csvs else
                         pd.DataFrame(columns=SWEEP_COLUMNS), sweep_timing_dirs)
    written = {"runs.csv": runs, "prompts.csv": units, "sweeps.csv": sweeps, "sweep_prompts.csv": sweep_units(sweeps),
               "weights.csv": learned_weights(runs[~is_timing(runs)]), "trained.csv": trained_table(run_dirs, judges)}
    for name, frame in written.items():
        write_text(out / name, frame.to_csv(index=False))
    paths = [out / name for name in written]
    quality = quality_units(units)
    paths += write_table(table1(quality, 1.0, runs), out / "table1", "Table 1 (T = 1.0): acceptance rate % / quality")
    paths += write_table(table1(quality, 0.1, runs), out / "table2", "Table 2 (T = 0.1): acceptance rate % / quality")
    t3 = transfer_temperature(runs) if table3_temperature is None else table3_temperature
    paths += write_table(table3(quality, t3, runs), out / "table3", f"Table 3 (T = {t3:g}): cross-task transfer of "
                         f"the DIVERSED head and of AutoJudge's judge (acceptance % / quality); {TABLE3_CAVEAT}")
    paths += write_table(transfer_table(quality, runs, written["trained.csv"]), out / "transfer", "Transfer: each "
                         "learned verifier trained on one task decoding another, its retention against the target "
                         "alone, its quality against the eval task's own, AutoJudge's AUC in and out of domain")
    paths += write_table(speed_table(units, runs), out / "speed", "Speed (timed at batch 1): tokens/s, speedup over "
                                                                "target-only, correct answers/s (0/1 metrics), "
                                                                "acceptance %, tau, bias TV, quality, fidelity, "
                                                                "latency, TTFT and TPOT percentiles (MLPerf LoadGen's "
                                                                "early stopping, 99% confidence; –: too few requests) "
                                                                "and, on a GPU, MLPerf's Llama-3.1-8B server (P99 TTFT "
                                                                "<= 2 s, TPOT <= 100 ms) and interactive (500 ms, 30 "
                                                                "ms) limits")
    paths += write_table(families_table(quality, runs), out / "families", "Relaxed verifiers, each at the setting "
                         "its dev sweep chose (the largest acceptance its rule admits against strict on dev) and at "
                         "the settings the config gives, on the eval prompts: acceptance %, quality, quality minus "
                         "the target's")
    paths += write_table(knobs_table(sweeps, quality), out / "knobs", "Each relaxed family's setting as each "
                         "selection chose it on dev (certified: Learn-then-Test's fixed sequence from the least "
                         "lenient point, at most a 5% chance that it loses more than the tolerance; estimate: the "
                         "largest acceptance whose estimate is within the tolerance, no guarantee), and the "
                         "certified setting checked on the eval prompts against strict")
    paths += write_table(retention_table(quality), out / "retention", "Quality retention against the target alone "
                         "(MLPerf-style: Q-99 = at least 99% of its quality and the difference shown within the task's "
                         "tolerance; output length within 0.9-1.1); strict SD is lossless: its row is the noise floor")
    lambdas = pd.concat([pd.read_csv(p) for p in lambda_csvs]) if lambda_csvs else pd.DataFrame()
    paths += write_table(lambda_table(lambdas), out / "lambda", "Lambda, chosen on dev: the DIVERSED head trained at "
                         "each lambda (the acceptance term's weight) beside strict on the dev prompts; chosen: the "
                         "largest acceptance the sweep's rule admits against strict among the heads that did not "
                         "collapse, else the smallest lambda")
    return paths
