"""Tidy tables from scored runs: one row per run and one per (run, prompt), then mean ± 95% CI over the (seed,
prompt) units, in the layouts of the paper's tables (CSV for machines, Markdown and LaTeX for people)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from diversed.runs import load_run
from diversed.utils import hardware_label, write_text

METHOD_NAMES = {"autoregressive": "Target only", "draft": "Draft only", "strict": "SD",
                "finetuned": "SD with fine-tuned draft", "fixed": "Static ensemble (fixed w)",
                "dynamic": "DIVERSED"}
TABLE1_METHODS = ("strict", "finetuned", "dynamic")
BASELINES = ("autoregressive", "draft")  # one model decoding alone: no draft length K
SPEEDUP_KEYS = ["pair", "task", "temperature", "seed"]  # what a run shares with its target-only baseline

# Published numbers (the DIVERSED paper), T = 1.0, Llama-3.2-1B-Instruct drafting for Llama-3.1-8B-Instruct:
# {(method, task): (acceptance %, quality)}; quality in the task's metric (accuracy/pass@1 as fractions).
PAPER_PAIR = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct")
PAPER = {("strict", "gsm8k"): (44.60, None), ("dynamic", "gsm8k"): (72.61, 0.67),
         ("strict", "mbpp"): (26.30, None), ("dynamic", "mbpp"): (85.03, 0.53),
         ("strict", "xsum"): (20.44, 7.09), ("dynamic", "xsum"): (70.53, 7.23)}


def run_record(run_dir: str | Path) -> dict:
    """One tidy row: labels, config, speed, acceptance and quality of a scored run."""
    run_dir = Path(run_dir)
    manifest, _ = load_run(run_dir)
    scores_path = run_dir / "scores.json"
    if not scores_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not scored yet (no scores.json): run `diversed score {run_dir}`")
    try:
        scores = json.loads(scores_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{scores_path} is corrupt: {e}") from e
    c, s, labels = manifest["config"], manifest["summary"], manifest.get("labels", {})
    return {
        "pair": labels.get("pair", f"{c['target']}|{c['draft']}"), "task": labels.get("task", c.get("task")),
        "method": labels.get("method", c["verifier"]), "head_task": labels.get("head_task"),
        "temperature": c["temperature"], "K": None if c["verifier"] in BASELINES else c["K"], "seed": c["seed"],
        "target": c["target"], "draft": c["draft"],
        "weight": c.get("weight"), "mixing": c["mixing"], "prompts": s["prompts"],
        "draft_acceptance_rate": s["draft_acceptance_rate"], "mean_acceptance_length": s["mean_acceptance_length"],
        "acceptance_by_position": json.dumps(s["acceptance_by_position"]), "mean_weight": s["mean_weight"],
        "bias_tv": s["bias_tv"], "tokens_per_s": s["tokens_per_s"],
        "hardware": hardware_label(manifest.get("hardware"), c.get("device", "cpu")),
        "seconds_per_sample": s["time_total"] / max(s["prompts"], 1), "metric": scores["metric"],
        "quality": scores["quality"], "target_logprob": scores["fidelity"]["target_logprob"],
        "target_argmax_agreement": scores["fidelity"]["target_argmax_agreement"], "run_id": manifest["run_id"],
        "run_dir": str(run_dir),
    }


def collect(run_dirs: list[str | Path]) -> pd.DataFrame:
    """All runs as a tidy frame, with each run's speedup over its target-only baseline."""
    df = pd.DataFrame([run_record(d) for d in run_dirs])
    df["K"] = df["K"].astype("Int64")  # empty for the baselines
    df["speedup"] = speedup(df)
    return df


def speedup(df: pd.DataFrame) -> pd.Series:
    """tokens/s of each run over that of the target-only run with the same pair, task, T and seed (one per
    such key: it has no K), timed on the same hardware; nan where there is none, and where it ran on other
    hardware (with a warning naming both)."""
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


def ci95(values) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval (0 for a single value; nan for none)."""
    from scipy import stats

    x = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not x:
        return math.nan, math.nan
    mean = sum(x) / len(x)
    if len(x) < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (len(x) - 1))
    return mean, float(stats.t.ppf(0.975, len(x) - 1)) * sd / math.sqrt(len(x))


def _mean(xs) -> float:
    return sum(map(float, xs)) / len(xs) if xs else math.nan


def prompt_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, prompt), the unit of the tables' and the claims' confidence intervals: the run's keys and
    that prompt's acceptance (accepted / drafted), quality, fidelity, bias TV, tokens/s (its new tokens over its
    decode time, manifest `prompt_seconds`) and speedup (over the target-only run's tokens/s on the same seed and
    prompt, timed on the same hardware)."""
    from diversed.tasks import metric_spec

    rows = []
    for r in runs.itertuples():
        manifest, gens = load_run(r.run_dir)
        scores = json.loads((Path(r.run_dir) / "scores.json").read_text())
        quality = {e["prompt_hash"]: e.get(scores["metric"]) for e in scores.get("per_example", [])}
        fidelity = metric_spec(scores["metric"]).fidelity  # the quality is the target's log-likelihood per token
        seconds = manifest.get("prompt_seconds") or [math.nan] * len(gens)
        for g, sec in zip(gens, seconds, strict=True):
            if fidelity:
                quality[g["prompt_hash"]] = _mean(g.get("target_logprobs"))
            rows.append({"run_id": r.run_id, "pair": r.pair, "task": r.task, "method": r.method,
                         "head_task": r.head_task if isinstance(r.head_task, str) else "",
                         "temperature": r.temperature, "K": r.K, "seed": r.seed, "weight": r.weight,
                         "hardware": r.hardware,
                         "prompt": g["prompt_hash"], "accepted": sum(g.get("accepted", [])),
                         "drafted": sum(g.get("drafted", [])), "quality": quality.get(g["prompt_hash"]),
                         "target_logprob": _mean(g.get("target_logprobs")),
                         "target_argmax_agreement": _mean(g.get("target_argmax")),
                         "bias_tv": _mean(g.get("bias_tv_per_token")),
                         "mean_weight": _mean([w for step in g.get("weights") or [] for w in step]),
                         "tokens_per_s": len(g["tokens"]) / sec if sec and sec > 0 else math.nan})
    df = pd.DataFrame(rows, columns=["run_id", "pair", "task", "method", "head_task", "temperature", "K", "seed",
                                     "weight", "hardware", "prompt", "accepted", "drafted", "quality", "target_logprob",
                                     "target_argmax_agreement", "bias_tv", "mean_weight", "tokens_per_s"])
    df["quality"] = pd.to_numeric(df["quality"], errors="coerce")
    df["draft_acceptance_rate"] = df["accepted"] / df["drafted"].where(df["drafted"] > 0)
    keys = [*SPEEDUP_KEYS, "prompt", "hardware"]
    base = df.loc[df["method"] == "autoregressive", [*keys, "tokens_per_s"]].rename(columns={"tokens_per_s": "base"})
    df["speedup"] = (df["tokens_per_s"] / df[keys].merge(base, on=keys, how="left")["base"]).to_numpy()
    return df


def unit_ci(group: pd.DataFrame, units: pd.DataFrame | None, column: str) -> tuple[float, float]:
    """Mean and 95% half-width of column over the (seed, prompt) units of group's runs; over the runs themselves
    (seeds) where the units lack it (a corpus metric such as BLEU, runs without per-prompt timings)."""
    corpus = column == "quality" and len(group) and _corpus_metric(group["metric"].iloc[0])
    if units is not None and column in units and not corpus:
        u = units.loc[units["run_id"].isin(group["run_id"]), column].dropna()
        if len(u):
            return ci95(u.tolist())
    return ci95(group[column])


def _corpus_metric(metric: str) -> bool:
    from diversed.tasks import metric_spec

    return metric_spec(metric).corpus


def fmt(mean: float, half: float, scale: float = 1.0, digits: int = 1) -> str:
    if mean is None or math.isnan(mean):
        return "–"
    text = f"{mean * scale:.{digits}f}"
    return text + (f" ± {half * scale:.{digits}f}" if half and not math.isnan(half) else "")


def _quality_scale(metric: str) -> tuple[float, int]:
    """Fractions are shown in percent with one digit; percentages and log-likelihoods as they are, two digits."""
    from diversed.tasks import metric_spec

    return (100.0, 1) if metric_spec(metric).unit == "fraction" else (1.0, 2)


def cell(group: pd.DataFrame, units: pd.DataFrame | None = None) -> str:
    """'acceptance % / quality', each mean ± 95% CI over the (seed, prompt) units (unit_ci)."""
    if group.empty:
        return "–"
    a = unit_ci(group, units, "draft_acceptance_rate")
    scale, digits = _quality_scale(group["metric"].iloc[0])
    q = unit_ci(group, units, "quality")
    return f"{fmt(*a, scale=100)} / {fmt(*q, scale=scale, digits=digits)}"


def table1(df: pd.DataFrame, temperature: float, units: pd.DataFrame | None = None) -> pd.DataFrame:
    """Paper Tables 1 / 2: rows pair x (SD, SD with fine-tuned draft, DIVERSED); columns tasks."""
    d = df[(df["temperature"] == temperature) & (df["method"].isin(TABLE1_METHODS)) & df["head_task"].isna()]
    tasks = sorted(d["task"].unique())
    rows = []
    for pair in sorted(d["pair"].unique()):
        for method in TABLE1_METHODS:
            g = d[(d["pair"] == pair) & (d["method"] == method)]
            if g.empty:
                continue
            row = {"pair": pair, "method": METHOD_NAMES.get(method, method)}
            row |= {t: cell(g[g["task"] == t], units) for t in tasks}
            rows.append(row)
            first = g.iloc[0]
            if temperature == 1.0 and (first["target"], first["draft"]) == PAPER_PAIR:
                ref = {"pair": pair, "method": METHOD_NAMES.get(method, method) + " (paper)"}
                for t in tasks:
                    a, q = PAPER.get((method, t), (None, None))
                    scale, digits = _quality_scale(g.loc[g["task"] == t, "metric"].iloc[0]) if (g["task"] == t).any() \
                        else (1.0, 2)
                    ref[t] = "–" if a is None else f"{a:.2f} / {'–' if q is None else fmt(q, 0.0, scale, digits)}"
                rows.append(ref)
    return pd.DataFrame(rows, columns=["pair", "method", *tasks])


def transfer_temperature(df: pd.DataFrame) -> float:
    """The temperature of Table 3: that of the runs decoded with another task's head (else the highest)."""
    cross = df.loc[df["head_task"].notna() & (df["head_task"] != df["task"]), "temperature"].unique()
    if len(cross) > 1:
        raise ValueError(f"cross-task runs at several temperatures {sorted(cross)}; pass the one for Table 3")
    return float(cross[0]) if len(cross) else float(df["temperature"].max())


def table3(df: pd.DataFrame, temperature: float, units: pd.DataFrame | None = None) -> pd.DataFrame:
    """Paper Table 3: head trained on task X (rows) evaluated on task Y (columns), DIVERSED, at one temperature
    (the diagonal is the task's own head, taken from the same temperature as the cross-task runs)."""
    d = df[(df["method"] == "dynamic") & (df["temperature"] == temperature)].copy()
    d["head_task"] = d["head_task"].fillna(d["task"])
    tasks = sorted(set(d["task"]) | set(d["head_task"]))
    rows = []
    for pair in sorted(d["pair"].unique()):
        for x in tasks:
            g = d[(d["pair"] == pair) & (d["head_task"] == x)]
            if g.empty:
                continue
            rows.append({"pair": pair, "head trained on": x} | {y: cell(g[g["task"] == y], units) for y in tasks})
    return pd.DataFrame(rows, columns=["pair", "head trained on", *tasks])


def speed_table(df: pd.DataFrame, units: pd.DataFrame | None = None) -> pd.DataFrame:
    """Tokens/s, speedup over target-only, alpha, tau, bias, quality and its reference-free fidelity (target log p
    per token, target argmax agreement), per pair/task/T/method/K and hardware, mean ± 95% CI over the (seed,
    prompt) units (unit_ci; tau over seeds): seeds timed on different hardware are separate rows."""
    rows = []
    keys = ["pair", "task", "temperature", "method", "K", "head_task", "hardware"]
    for key, g in df.fillna({"head_task": ""}).groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=True))
        row["K_text"] = "–" if pd.isna(row["K"]) else str(int(row["K"]))  # the baselines have no K
        for col, scale, digits in (("tokens_per_s", 1, 1), ("speedup", 1, 2), ("draft_acceptance_rate", 100, 1),
                                   ("mean_acceptance_length", 1, 2), ("bias_tv", 1, 3), ("quality", 1, 3),
                                   ("target_logprob", 1, 3), ("target_argmax_agreement", 1, 3)):
            m, h = unit_ci(g, units, col)
            row[col], row[f"{col}_ci95"] = m, h
            row[f"{col}_text"] = fmt(m, h, scale, digits)
        row["seeds"] = len(g)
        row["prompts"] = int(g["prompts"].sum())
        rows.append(row)
    return pd.DataFrame(rows)


def lambda_table(df: pd.DataFrame, units: pd.DataFrame | None = None) -> pd.DataFrame:
    """The lambda sweep: acceptance, quality and fidelity of the heads trained at each lambda, per pair and task
    (mean ± 95% CI over the (seed, prompt) units, unit_ci)."""
    rows = []
    for (pair, task, lam), g in df.groupby(["pair", "task", "lambda"], sort=True):
        row = {"pair": pair, "task": task, "lambda": lam, "metric": g["metric"].iloc[0]}
        for col, scale, digits in (("draft_acceptance_rate", 100, 1), ("mean_weight", 1, 3), ("quality", 1, 3),
                                   ("target_logprob", 1, 3), ("target_argmax_agreement", 1, 3)):
            m, h = unit_ci(g, units, col)
            row[col], row[f"{col}_ci95"], row[f"{col}_text"] = m, h, fmt(m, h, scale, digits)
        row["seeds"] = len(g)
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


def learned_weights(df: pd.DataFrame) -> pd.DataFrame:
    """Every w the dynamic verifier used, one row per draft position, from the runs' generations."""
    rows = []
    for _, r in df[df["method"] == "dynamic"].iterrows():
        _, gens = load_run(r["run_dir"])
        rows += [{"pair": r["pair"], "task": r["task"], "head_task": r["head_task"], "temperature": r["temperature"],
                  "seed": r["seed"], "prompt": g["prompt_hash"], "position": i + 1, "w": w}
                 for g in gens for step in g["weights"] for i, w in enumerate(step)]
    return pd.DataFrame(rows, columns=["pair", "task", "head_task", "temperature", "seed", "prompt", "position", "w"])


def write_all(run_dirs: list[str | Path], out: str | Path, sweep_csvs: list[str | Path] = (),
              table3_temperature: float | None = None, lambda_dirs: list[str | Path] = ()) -> list[Path]:
    """runs.csv (tidy, one row per run), sweeps.csv, weights.csv, the paper's tables and the lambda table under out/.

    table3_temperature: the temperature of Table 3 (default: that of the cross-task runs); lambda_dirs: the lambda
    sweep's scored runs (their manifests carry a `lambda` label)."""
    from diversed.sweep import COLUMNS

    out = Path(out)
    df = collect(run_dirs)
    sweeps = pd.concat([pd.read_csv(p) for p in sweep_csvs]) if sweep_csvs else pd.DataFrame(columns=COLUMNS)
    write_text(out / "runs.csv", df.to_csv(index=False))
    write_text(out / "sweeps.csv", sweeps.to_csv(index=False))
    write_text(out / "weights.csv", learned_weights(df).to_csv(index=False))
    paths = [out / "runs.csv", out / "sweeps.csv", out / "weights.csv"]
    units = prompt_table(df)
    paths += write_table(table1(df, 1.0, units), out / "table1", "Table 1 (T = 1.0): acceptance rate % / quality")
    paths += write_table(table1(df, 0.1, units), out / "table2", "Table 2 (T = 0.1): acceptance rate % / quality")
    t3 = transfer_temperature(df) if table3_temperature is None else table3_temperature
    paths += write_table(table3(df, t3, units), out / "table3", f"Table 3 (T = {t3:g}): cross-task transfer of the "
                                                         "DIVERSED head (acceptance % / quality)")
    paths += write_table(speed_table(df, units), out / "speed", "Speed: tokens/s, speedup over target-only, "
                                                         "acceptance %, tau, bias TV, quality, fidelity")
    lam = pd.DataFrame()
    if lambda_dirs:
        lam = collect(lambda_dirs)
        lam["lambda"] = [json.loads((Path(d) / "manifest.json").read_text())["labels"]["lambda"]
                         for d in lam["run_dir"]]
        lam = lambda_table(lam.astype({"lambda": float}), prompt_table(lam))
    paths += write_table(lam, out / "lambda", "Lambda sweep: the DIVERSED head trained at each lambda (weight of "
                                              "the acceptance term): acceptance %, mean w, quality, fidelity")
    return paths


def split_sizes(runs: pd.DataFrame, sweeps: pd.DataFrame) -> pd.DataFrame:
    """Prompts per task and split, from the manifests: train (the prompts of the heads and fine-tuned drafts the
    runs used), dev and eval (the prompts each sweep point and run decoded, under the split it names)."""
    from diversed.tasks import SPLITS

    seen: dict[tuple[str, str], set[int]] = {}
    for run_dir in runs["run_dir"]:
        manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
        c = manifest["config"]
        seen.setdefault((c["task"], c["split"]), set()).add(manifest["summary"]["prompts"])
        trained = [Path(c["head"]).parent / "manifest.json"] if c.get("head") else []
        trained.append(Path(c["draft"]) / "distill_manifest.json")
        for path in (p for p in trained if p.is_file()):
            t = json.loads(path.read_text())
            seen.setdefault((t["config"]["task"], "train"), set()).add(t["prompts"])
    for r in sweeps.itertuples():
        seen.setdefault((r.task, r.split), set()).add(int(r.prompts))
    tasks = sorted({task for task, _ in seen})
    return pd.DataFrame([{"task": t} | {s: ", ".join(str(n) for n in sorted(seen.get((t, s), ()))) or "–"
                                         for s in SPLITS} for t in tasks], columns=["task", *SPLITS])


def write_report(tables: str | Path, figures: str | Path, out: str | Path) -> Path:
    """results/REPORT.md: the claims with their verdicts, the paper's tables, the speed table, the split sizes, the
    figures and where they came from."""
    from diversed.claims import claims
    from diversed.claims import markdown as claims_markdown
    from diversed.utils import provenance

    tables, figures, out = Path(tables), Path(figures), Path(out)
    runs = pd.read_csv(tables / "runs.csv")
    sweeps = pd.read_csv(tables / "sweeps.csv")
    parts = ["# diversed reproduction report", "",
             f"{len(runs)} scored decoding runs; pairs: {', '.join(sorted(runs['pair'].unique()))}; "
             f"tasks: {', '.join(sorted(runs['task'].unique()))}; seeds: "
             f"{', '.join(str(s) for s in sorted(runs['seed'].unique()))}. Cells are mean ± 95% CI over the "
             "(seed, prompt) pairs.", "",
             "**Splits**: prompts per task and split. The head and the fine-tuned draft train on train, the fixed w "
             "is chosen on dev, every table reports eval; the three are disjoint.", "",
             split_sizes(runs, sweeps).to_markdown(index=False), ""]
    if off := sorted(set(sweeps["split"]) - {"dev"}):
        parts += [f"**Warning**: the fixed w was chosen on the {', '.join(off)} split, not on dev.", ""]
    found = claims(runs, sweeps, pd.read_csv(tables / "weights.csv")) if (tables / "weights.csv").is_file() else []
    if found:
        parts += ["## Claims", "", "Each claim of the paper this run can test, computed from the runs and sweeps: "
                  "paired differences over the same (seed, prompt) pairs, mean ± 95% CI; a verdict holds when the "
                  "interval lies on the claimed side, fails when it lies on the other, and is inconclusive when it "
                  "spans it.", "", claims_markdown(found), ""]
    for name in ("table1", "table2", "table3", "speed", "lambda"):
        if (tables / f"{name}.md").is_file():
            parts += [(tables / f"{name}.md").read_text(), ""]
    rel = Path("..") / figures if not figures.is_absolute() else figures
    for png in sorted(figures.glob("*.png")):
        parts += [f"![{png.stem}]({rel / png.name})", ""]
    prov = provenance()
    parts += ["## Provenance", "", f"- git commit: {prov['git_commit']}",
              f"- versions: {json.dumps(prov['versions'])}", f"- hardware: {json.dumps(prov['hardware'])}", ""]
    write_text(out, "\n".join(parts))
    log_report(tables, sorted(figures.glob("*.png")), experiment(runs),
               pd.DataFrame([vars(c) for c in found], columns=["claim", "evidence", "verdict"]))
    return out


def experiment(runs: pd.DataFrame) -> str:
    """The experiment label of the runs (the workflow's config `experiment`), from the first run's manifest."""
    manifest = json.loads((Path(runs["run_dir"].iloc[0]) / "manifest.json").read_text()) if len(runs) else {}
    return manifest.get("labels", {}).get("experiment", "diversed")


def log_report(tables: Path, figures: list[Path], name: str, claims: pd.DataFrame) -> None:
    """Tables 1-3, the speed table, the claims and every figure to one W&B run of the experiment (job type
    report)."""
    from diversed.tracking import Tracker

    tracker = Tracker(name=f"report-{name}", group=name, job_type="report")
    tracker.frame("claims", claims)
    for table in ("table1", "table2", "table3", "speed", "lambda"):
        if (tables / f"{table}.csv").is_file() and (tables / f"{table}.csv").stat().st_size > 1:
            tracker.frame(table, pd.read_csv(tables / f"{table}.csv"))
    tracker.images(figures)
    tracker.finish()
