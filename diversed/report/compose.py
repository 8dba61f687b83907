"""results/REPORT.md from the tables folder (diversed.analysis.tables) and the figures: the claims per
temperature with their verdicts, the trained heads (collapsed or not), the deviations from the paper, the splits,
the paper's tables, the speed, families and lambda tables, the figures and the provenance; logged to one W&B run
of the experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from diversed.analysis.claims import claims, frame, markdown
from diversed.analysis.tables import read_units
from diversed.experiment.cost import PRICED_AS
from diversed.experiment.plan import TABLE_NAMES
from diversed.report.deviations import section as deviations
from diversed.tasks import SPLITS
from diversed.tracking import Tracker
from diversed.utils import provenance, write_text

HTML = ('<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head><body>\n{body}\n'
        "</body></html>\n")

CLAIMS_TEXT = (
    "Each claim of the paper this run can test, at each temperature, over the settings it covers. A setting's verdict "
    "is a one-sided test at 2.5% on paired differences over the same prompts: superiority, or non-inferiority for "
    "quality within a task's tolerance (the interval's lower bound above minus the tolerance). A claim about every "
    "setting holds when each does (no adjustment) and fails when one does (Holm over its settings); a claim about "
    "some setting the other way round. A claim's \"holds\" is then Holm-adjusted over the report's claims (the "
    "records check aside), so that the chance of any false \"holds\" in this report stays at 2.5%. Verdicts: "
    "holds; fails, with what it failed on where a setting joins two tests (\"fails on quality\", \"fails on "
    "speed\"); inconclusive, with why (underpowered: the prompts its margin would need if the true difference is 0; "
    "for 0/1 answers, too few discordant prompts, gained and lost); not tested, with why (e.g. the dev sweep kept "
    "strict for the family named).")

STATISTICS = ("Every ± is the half-width of a 95% interval over prompts: each eval prompt is one unit, its seeds "
              "pooled (counts summed, quality averaged), since every seed decodes the same prompts. Acceptance, "
              "tokens/s, fidelity and the speedup are ratios of totals (a long answer weighs more than a short "
              "one); a task's quality is a mean over prompts. Quality runs decode batched (a prompt's random numbers "
              "do not depend on its batch, its tokens only up to float rounding); speed comes only from the timing "
              "runs, the first eval prompts decoded at batch 1 with every method interleaved prompt by prompt in one "
              "job.")


def split_sizes(runs: pd.DataFrame, sweeps: pd.DataFrame, trained: pd.DataFrame) -> pd.DataFrame:
    """Prompts per task and split: train (the prompts of the heads and fine-tuned drafts the runs used), dev and
    eval (the prompts each sweep point and run decoded, under the split it names)."""
    seen: dict[tuple[str, str], set[int]] = {}
    for rows, split in ((runs, None), (sweeps, None), (trained, "train")):
        for r in rows.dropna(subset=["prompts"]).itertuples():
            seen.setdefault((r.task, split or r.split), set()).add(int(r.prompts))
    tasks = sorted({task for task, _ in seen})
    return pd.DataFrame([{"task": t} | {s: ", ".join(str(n) for n in sorted(seen.get((t, s), ()))) or "–"
                                         for s in SPLITS} for t in tasks], columns=["task", *SPLITS])


def heads(trained: pd.DataFrame) -> pd.DataFrame:
    """Every DIVERSED head the runs used (the aggregated trained.csv): its task, lambda and where it was chosen, its
    training steps, final mean w, the share of steps whose batch rewards varied, and whether it collapsed
    (diversed.training.train.collapse)."""
    h = trained[trained["kind"] == "head"]
    return pd.DataFrame({
        "head": h["path"], "task": h["task"], "lambda": h["acceptance_weight"],
        "lambda from": [f"{s} choice" if isinstance(s, str) else "config" for s in h["chosen_split"]],
        "acceptance term": h["acceptance_term"], "steps": h["steps"].astype("Int64"),
        "final mean w": h["final_mean_w"].astype(float).round(3),
        "steps with varied rewards": [f"{100 * (v if v == v else 0):.0f}%" for v in h["reward_varied"].astype(float)],
        "collapsed": [c if isinstance(c, str) else "no" for c in h["collapsed"]]})


def measured_cost(benchmarks: str | Path) -> pd.DataFrame:
    """Per rule, from Snakemake's `benchmark:` files (logs/benchmarks/{rule}/...tsv): jobs, wall seconds in all and
    of the slowest job, and the largest resident memory (MiB; nan where a job ended before Snakemake sampled it).
    decode_transfer and train_head_lambda count under decode and train_head, as the cost model prices them."""
    rows = []
    for tsv in sorted(Path(benchmarks).rglob("*.tsv")):
        b = pd.read_csv(tsv, sep="\t")
        rule = tsv.relative_to(benchmarks).parts[0].removesuffix(".tsv")
        rows.append({"rule": PRICED_AS.get(rule, rule),
                     "s": float(b["s"].iloc[0]), "rss": pd.to_numeric(b["max_rss"], errors="coerce").iloc[0]})
    if not rows:
        return pd.DataFrame(columns=["rule", "jobs", "seconds", "slowest job (s)", "peak memory (MiB)"])
    d = pd.DataFrame(rows).groupby("rule", sort=False)
    return pd.DataFrame({"jobs": d.size(), "seconds": d["s"].sum().round(1), "slowest job (s)": d["s"].max().round(1),
                         "peak memory (MiB)": d["rss"].max().round(0)}).reset_index()


def cost_section(benchmarks: str | Path | None, predicted: dict[str, float] | None = None) -> list[str]:
    """The report's measured cost per rule (none without benchmark files), beside diversed.experiment.cost's
    prediction for the same jobs and the ratio where the cost model prices the pairs (predicted_seconds)."""
    table = measured_cost(benchmarks) if benchmarks is not None else pd.DataFrame()
    if table.empty:
        return []
    if predicted is not None:
        table["predicted (s)"] = table["rule"].map(predicted).round(1)
        table["measured / predicted"] = (table["seconds"] / table["predicted (s)"]).round(2)
    note = ("; beside the cost model's GPU seconds for the same jobs (diversed.experiment.cost: every answer at full "
            "length, so an early stop makes the ratio < 1)" if predicted is not None else
            "; the cost model prices the paper's GPU pairs only, so no prediction here")
    return ["## Measured cost", "", f"Wall time and peak resident memory per rule, as Snakemake's `benchmark:` "
            f"measured each job on this machine ({table['jobs'].sum()} jobs, {table['seconds'].sum() / 60:.1f} "
            f"minutes in all; jobs that ran side by side overlap; the provenance below names the hardware){note}.",
            "", table.to_markdown(index=False), ""]


def audit_section(audit: str | Path | None) -> list[str]:
    """The report's lines on `diversed audit --out`'s outcome (none without one)."""
    if audit is None:
        return []
    return ["## Audit", "", "`diversed audit`: each timed prompt's tokens against the scored run's at the same "
            "setting, every timed prompt scored, the same rule, knob and trained files, and every run's counters "
            "against its steps (diversed/analysis/audit.py).", "", "```", Path(audit).read_text().strip(), "```", ""]


def write_report(tables: str | Path, figures: str | Path, out: str | Path, audit: str | Path | None = None,
                 benchmarks: str | Path | None = None, claims_html: str | Path | None = None,
                 predicted: dict[str, float] | None = None) -> Path:
    """results/REPORT.md: the claims with their verdicts, the audit's outcome (`diversed audit --out`, where given),
    the heads, the splits, the paper's tables, the speed and lambda tables, the figures, the measured cost per rule
    (Snakemake's benchmark files, where given, beside the `predicted` GPU seconds per rule) and where they came
    from; claims_html: the claims as an HTML table too."""
    tables, figures, out = Path(tables), Path(figures), Path(out)
    runs = pd.read_csv(tables / "runs.csv")
    sweeps = pd.read_csv(tables / "sweeps.csv")
    units = read_units(tables / "prompts.csv")
    sweep_units = pd.read_csv(tables / "sweep_prompts.csv")
    trained = pd.read_csv(tables / "trained.csv")
    parts = ["# diversed reproduction report", "",
             f"{len(runs)} scored decoding runs; pairs: {', '.join(sorted(runs['pair'].unique()))}; tasks: "
             f"{', '.join(sorted(runs['task'].unique()))}; temperatures: "
             f"{', '.join(f'{t:g}' for t in sorted(runs['temperature'].unique()))}; seeds: "
             f"{', '.join(str(s) for s in sorted(runs['seed'].unique()))}.", "", STATISTICS, ""]
    found = claims(units, sweep_units, sweeps)
    parts += ["## Claims", "", CLAIMS_TEXT, "", markdown(found), ""]
    parts += audit_section(audit)
    head_table = heads(trained)
    if len(head_table):
        collapsed = head_table[head_table["collapsed"] != "no"]
        parts += ["## DIVERSED heads", "", head_table.to_markdown(index=False), ""]
        if len(collapsed):
            parts += [f"**Warning**: {len(collapsed)} head(s) collapsed: "
                      f"{'; '.join(f'{r.task}: {r.collapsed}' for r in collapsed.itertuples())}.", ""]
    parts += deviations(runs, trained)
    parts += ["## Splits", "", "Prompts per task and split. The head and the fine-tuned draft train on train, the "
              "fixed w, each family's knob and lambda are chosen on dev, every table reports eval; the three are "
              "disjoint.", "",
              split_sizes(runs, sweeps, trained).to_markdown(index=False), ""]
    if off := sorted(set(sweeps["split"]) - {"dev"}):
        parts += [f"**Warning**: the fixed w was chosen on the {', '.join(off)} split, not on dev.", ""]
    parts += ["## Tables", ""]
    for name in TABLE_NAMES:
        if (tables / f"{name}.md").is_file():
            parts += [(tables / f"{name}.md").read_text(), ""]
    rel = Path("..") / figures if not figures.is_absolute() else figures
    parts += ["## Figures", ""]
    for png in sorted(figures.glob("*.png")):
        parts += [f"![{png.stem}]({rel / png.name})", ""]
    parts += cost_section(benchmarks, predicted)
    prov = provenance()
    parts += ["## Provenance", "", f"- git commit: {prov['git_commit']}",
              f"- versions: {json.dumps(prov['versions'])}", f"- hardware: {json.dumps(prov['hardware'])}", ""]
    write_text(out, "\n".join(parts))
    if claims_html is not None:
        write_text(claims_html, HTML.format(title="Claims", body=frame(found).to_html(index=False)))
    log_report(tables, sorted(figures.glob("*.png")), experiment(runs), frame(found), head_table)
    return out


def experiment(runs: pd.DataFrame) -> str:
    """The experiment label of the runs (the workflow's config `experiment`)."""
    return str(runs["experiment"].iloc[0]) if len(runs) else "diversed"


def log_report(tables: Path, figures: list[Path], name: str, claims: pd.DataFrame, heads: pd.DataFrame) -> None:
    """Tables 1-3, the speed and lambda tables, the claims, the heads and every figure to one W&B run of the
    experiment (job type report)."""
    tracker = Tracker(name=f"report-{name}", group=name, job_type="report")
    tracker.frame("claims", claims)
    tracker.frame("heads", heads)
    for table in TABLE_NAMES:
        if (tables / f"{table}.csv").is_file() and (tables / f"{table}.csv").stat().st_size > 1:
            tracker.frame(table, pd.read_csv(tables / f"{table}.csv"))
    tracker.images(figures)
    tracker.finish()
