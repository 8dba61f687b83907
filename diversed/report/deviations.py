"""Where a run differs from the paper and from the authors' code: each setting the paper's numbers depend on, its
source (the paper, or the authors' file and line), the authors' value, the standard protocol's, the value this run
used (read from the aggregated tables of its runs and trainings, which come from their manifests: what ran, not
what was asked), and whether it agrees. The settings the authors' code decides come from diversed.protocol, one row
each, so no row can say "yes" by hand. REPORT.md's "Deviations from the paper" section."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from diversed.protocol import STEPS, Step
from diversed.runs.settings import RunConfig
from diversed.training.settings import DistillConfig, HeadTrainConfig

SILENT = "the paper is silent"
NOT_PUBLIC = "not public"
PAPER_PAIRS = {("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
               ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B")}
SECTIONS = {"": RunConfig, "train_head": HeadTrainConfig, "distill": DistillConfig}  # where a key's default lives


@dataclass
class Row:
    """One setting: its source and the authors' value, the standard protocol's, this run's, and the verdict (True
    yes, False no, None or a text: no verdict, saying why)."""

    setting: str
    source: str
    authors: str
    standard: str
    this_run: str
    agrees: bool | str | None

    def cells(self) -> dict:
        verdict = self.agrees if isinstance(self.agrees, str) else SILENT if self.agrees is None else \
            "yes" if self.agrees else "**no**"
        return {"setting": self.setting, "source": self.source, "authors": self.authors,
                "standard": self.standard, "this run": self.this_run, "agrees": verdict}


def _norm(x) -> str:
    """A recorded value as text: 512.0 (an integer column read with gaps) as 512."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _values(xs) -> str:
    vals = sorted({_norm(x) for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))})
    return ", ".join(vals) if vals else "–"


def _per_task(runs: pd.DataFrame, column: str) -> str:
    return "; ".join(f"{t} {_values(g[column])}" for t, g in runs.groupby("task")) or "–"


def _column(df: pd.DataFrame, name: str, default) -> pd.Series:
    """A table's column, its gaps (and the whole column, in a table written before it existed) at default."""
    if name not in df:
        return pd.Series(default, index=df.index)
    return df[name].astype(object).where(df[name].notna(), default)  # object: a text default in a float column


def standard_value(step: Step):
    """The setting's value under the standard protocol: its own default."""
    section, _, name = step.key.rpartition(".")
    return getattr(SECTIONS[section], name)


DETAILS = {"sampling": lambda r: f"{r.sampling} (top-k {r.top_k:g}, top-p {r.top_p:g})"}  # what a value meant


def protocol_row(step: Step, tables: dict[str, pd.DataFrame]) -> Row:
    """A setting the authors' code decides, as it ran in the table its step names."""
    table = tables[step.table]
    recorded = {_norm(x) for x in _column(table, step.column, standard_value(step))}
    shown = _values(DETAILS[step.column](r) for r in table.itertuples()) if step.column in DETAILS else \
        _values(recorded)
    return Row(step.name, f"authors' code, {step.source}: {step.theirs}", _norm(step.authors),
               _norm(standard_value(step)), shown, recorded == {_norm(step.authors)} if recorded else None)


def _lambda_choice(head) -> str:
    """How a head's lambda was set: chosen on a split among candidates (sweep_lambda), or the config's."""
    if not isinstance(head.chosen_split, str):
        return f"{head.task}: the config's"
    return f"{head.task}: on {head.chosen_split}, among {head.candidates}"


def _given_rows(own: pd.DataFrame) -> list[Row]:
    """The static ensemble and the cascade at the authors' README settings (w = 0.7, lenience 0.5), run as given
    (methods fixed-0.7, cascade-0.5) beside what the dev sweeps chose."""
    fixed, cascade = own[own["method"] == "fixed-0.7"], own[own["method"] == "cascade-0.5"]
    mixing = set(_column(fixed, "mixing", "linear"))
    return [
        Row("static ensemble at the authors' w", "the authors' README: draft weight 0.3 (w = 0.7); their static path "
            "is not released, and the only static code they released mixes logits (train/models.py:227-246)",
            "w 0.7, logit", "–", f"w 0.7, {_values(mixing)}" if len(fixed) else "–",
            (NOT_PUBLIC if mixing == {"logit"} else False) if len(fixed) else None),
        Row("cascade at the authors' lenience", "the authors' README: lenience 0.5; their cascade and lenient rules "
            "are not public (their run script has no --lenience; run_dp.py:525)", "lenience 0.5", "–",
            "this harness's cascade rule at 0.5" if len(cascade) else "–", NOT_PUBLIC if len(cascade) else None)]


def _run_rows(own: pd.DataFrame, quality: pd.DataFrame) -> list[Row]:
    """The settings of the runs the paper states, or the authors' scripts show."""
    pairs = set(zip(*(own.loc[own["method"] != "finetuned", c] for c in ("target", "draft")), strict=True))
    temps = {float(t) for t in own["temperature"]}
    ks = {int(k) for k in quality["K"].dropna()}
    evals = own[own["split"] == "eval"]
    return [
        Row("model pairs", "paper, Tables 1-3", "Llama-3.2-1B / Llama-3.1-8B-Instruct, Qwen3-0.6B / Qwen3-8B", "–",
            _values(f"{d} / {t}" for t, d in pairs), pairs <= PAPER_PAIRS and bool(pairs)),
        Row("temperatures", "paper, Tables 1 and 2", "1.0, 0.1", "–", _values(temps),
            temps <= {1.0, 0.1} and bool(temps)),
        Row("draft length K", "paper; authors' code, scripts/run_dp.py:158-165, 527-530: a constant schedule, "
            "confidence threshold 0", "5 every step", "K every step", _values(ks), ks == {5}),
        Row("eval prompts per task", "authors' code, train/dataloader.py:33, 113-117; scripts/run_dp.py:522: the "
            "first 100 of a seed-42 shuffle of the test split (the paper does not say)", "100", "–",
            _per_task(evals, "prompts"), set(evals["prompts"]) == {100} if len(evals) else None),
        Row("eval prompts' length", "authors' code, scripts/run_dp.py:257: tokenised with max_length 2048, right "
            "truncation", "first 2,048 tokens", "whole (refused past the context)", "whole", False),
        Row("new tokens per prompt", "authors' code, scripts/run_dp.py:517", "128", "–",
            _per_task(own, "max_new_tokens"), set(own["max_new_tokens"]) == {128}),
        Row("timed prompts", "authors' code, scripts/run_dp.py:315-334, 484-489: every eval prompt timed as it is "
            "decoded, no warm-up, tokens/s a mean of per-prompt ratios", "the 100 eval prompts", "–",
            "the first n_timing eval prompts at batch 1 after a warm-up, a ratio of totals", False),
        Row("acceptance rate", "authors' code: none is computed (no acceptance count in the released code)",
            "–", "accepted / drafted tokens (alpha)", "accepted / drafted tokens (alpha)", None),
        Row("seeds", SILENT, "42 (scripts/run_dp.py:519)", "–", _values(int(s) for s in quality["seed"]), None),
        Row("MBPP eval split", "authors' code, train/dataloader.py:231", "validation", "test",
            "test" if (quality["task"] == "mbpp").any() else "–", False if (quality["task"] == "mbpp").any() else None),
    ]


def _training_rows(heads: pd.DataFrame, cross: pd.DataFrame) -> list[Row]:
    """The head's training that the paper states, its lambda's choice, Table 3's temperature."""
    training = {(r.lr, r.batch_size, r.epochs, r.prompts) for r in heads.itertuples()}
    return [
        Row("head training", "paper; authors' code, train_config/config.yaml, rl_train.py:177-185",
            "AdamW lr 5e-4, batch 8, 2 epochs, 400 train prompts", "–",
            _values(f"lr {lr:g}, batch {batch:g}, {epochs:g} epochs, {prompts:g} prompts"
                    for lr, batch, epochs, prompts in training),
            training == {(5e-4, 8, 2, 400)} if len(heads) else None),
        Row("choice of lambda", f"{SILENT}; the authors' code fixes 5%", "0.05", "–",
            "; ".join(sorted({_lambda_choice(h) for h in heads.itertuples()})) or "–", None),
        Row("Table 3 temperature", "paper: its caption says 0.1, its GSM8K rows are Table 1's T = 1.0", "ambiguous",
            "–", _values(float(t) for t in cross["temperature"]), None),
        Row("choice of the fixed w and of each family's knob", f"{SILENT}; here on the dev split: the largest "
            "acceptance certified non-inferior to strict (sweep.select: certified, Learn-then-Test's fixed sequence "
            "at 5%; or the rule the config names)", "–", "dev-split sweep", "dev-split sweep",
            None),
    ]


def settings(runs: pd.DataFrame, trained: pd.DataFrame) -> list[dict]:
    """One row per setting: setting, source, authors, standard, this run, agrees (yes / no / no verdict and why).
    runs, trained: the aggregated runs.csv and trained.csv."""
    quality = runs[~runs["timing"].fillna(False).astype(bool)]
    own = quality[quality["head_task"].isna()]
    cross = quality[quality["head_task"].notna()]
    heads, drafts = trained[trained["kind"] == "head"], trained[trained["kind"] == "draft"]
    tables = {"runs": own, "heads": heads, "drafts": drafts}
    rows = [*_run_rows(own, quality), *(protocol_row(step, tables) for step in STEPS),
            *_training_rows(heads, cross), *_given_rows(own)]
    return [row.cells() for row in rows]


def section(runs: pd.DataFrame, trained: pd.DataFrame) -> list[str]:
    """REPORT.md's deviations section: the settings table and what it means for comparing numbers."""
    table = pd.DataFrame(settings(runs, trained))
    return ["## Deviations from the paper", "",
            "Each setting the paper's numbers depend on: its source (the paper, or the authors' released code, "
            "comeusr/diversed, file and line, where the paper does not say), the authors' value, the standard "
            "protocol's (`protocol: standard`; `protocol: authors` runs the authors'), and what this run used, read "
            "from its runs' and trainings' manifests (aggregated in results/tables/runs.csv and trained.csv). A "
            "number of this run is comparable with the paper's only where every setting it depends on agrees. "
            "docs/AUTHORS.md walks the authors' pipeline step by step.", "",
            table.to_markdown(index=False), ""]
