"""Where a run differs from the paper: each setting the paper's numbers depend on, the paper's value with its
source, the value this run used (read from the aggregated tables of its runs and trainings, which come from their
manifests: what ran, not what was asked), and whether they agree. REPORT.md's "Deviations from the paper" section."""

from __future__ import annotations

import math

import pandas as pd

SILENT = "the paper is silent"
PAPER_PAIRS = {("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
               ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B")}


def _values(xs) -> str:
    vals = sorted({str(x) for x in xs if x is not None and not (isinstance(x, float) and pd.isna(x))})
    return ", ".join(vals) if vals else "–"


def _per_task(runs: pd.DataFrame, column: str) -> str:
    return "; ".join(f"{t} {_values(g[column])}" for t, g in runs.groupby("task")) or "–"


def _lambda_choice(head) -> str:
    """How a head's lambda was set: chosen on a split among candidates (sweep_lambda), or the config's."""
    if not isinstance(head.chosen_split, str):
        return f"{head.task}: the config's"
    return f"{head.task}: on {head.chosen_split}, among {head.candidates}"


def _sampling(run) -> str:
    return f"{run.sampling} (top-k {run.top_k:g}, top-p {run.top_p:g})"


def _column(df: pd.DataFrame, name: str, default) -> pd.Series:
    """A table's column, its gaps (and the whole column, in a table written before it existed) at default."""
    if name not in df:
        return pd.Series(default, index=df.index)
    return df[name].astype(object).where(df[name].notna(), default)  # object: a text default in a float column


def _scoring_rows(own: pd.DataFrame) -> list[tuple]:
    """The rows of what decides a run's numbers beyond its settings: scoring, DIVERSED's mixing, the draft length
    policy, the acceptance rate's definition."""
    scoring = _column(own, "scoring", "standard")
    mixing = _column(own, "mixing", "linear")[own["method"] == "dynamic"]
    return [
        ("scoring and answer extraction", "each completion cut at the next prompt marker (\"Question:\", "
         "\"Article:\", \"Document:\"); GSM8K's \"#### N\", else the last number; ROUGE unstemmed (authors' code)",
         _values(scoring), set(scoring) == {"authors"}),
        ("DIVERSED's mixing", "logit: w log p + (1 - w) log q, renormalised (authors' head-training code)",
         _values(mixing), set(mixing) == {"logit"} if len(mixing) else None),
        ("draft length policy", "K drafts, or fewer where the draft's confidence falls below transformers' assistant "
         "threshold (authors' code may)", "always K", None),
        ("acceptance rate", f"{SILENT} (its definition is unstated)", "accepted / drafted tokens (alpha)", None)]


def _training_rows(heads: pd.DataFrame, trained: pd.DataFrame) -> list[tuple]:
    """The head's reward recipe and the training prompts' truncation."""
    recipe = {(b, float(z), s) for b, z, s in zip(_column(heads, "baseline", "mean"),
                                                   _column(heads, "relative_at_zero", 5.0),
                                                   _column(heads, "scoring", "standard"), strict=True)}
    cut = {int(x) if x == x else None for x in _column(trained, "max_prompt_tokens", math.nan)}
    return [
        ("the head's reward", "R - 1 on GSM8K and MBPP, R minus a running mean on the others; lambda 10 on a step "
         "without reward loss; scored as the authors score (authors' code)",
         _values(f"baseline {b}, lambda at zero {z:g}, {s} scoring" for b, z, s in recipe),
         recipe == {("authors", 10.0, "authors")} if len(heads) else None),
        ("training prompts", "each cut to its last 512 tokens (authors' code)",
         _values("whole" if x is None else f"last {x} tokens" for x in cut), cut == {512} if len(trained) else None)]


def _given_row(own: pd.DataFrame) -> tuple:
    """The static ensemble's and the cascade's settings: the authors' (w = 0.7, 0.5) among the runs, run as given
    (methods fixed-0.7, cascade-0.5), beside what the dev sweeps chose."""
    def setting(method: str) -> str:
        g = own[own["method"] == method]
        return f"{method.split('-')[0]} {_values(g['weight'] if method.startswith('fixed') else g['knob'])}"

    methods = [m for m in own["method"].unique() if m.split("-")[0] in ("fixed", "lenient", "cascade")]
    given = {m for m in methods if "-" in m}
    return ("static ensemble and cascade settings", "w = 0.7 (draft weight 0.3) and cascade lenience 0.5 (the "
            "authors' README); lenient decoding's are not public",
            "; ".join(sorted(setting(m) + (" (given)" if m in given else " (dev)") for m in methods)) or "–",
            {"fixed-0.7", "cascade-0.5"} <= given if methods else None)


def settings(runs: pd.DataFrame, trained: pd.DataFrame) -> list[dict]:
    """One row per setting: setting, paper (value and source), this run, agrees (yes / no / the paper is silent).
    runs, trained: the aggregated runs.csv and trained.csv."""
    quality = runs[~runs["timing"].fillna(False).astype(bool)]
    own = quality[quality["head_task"].isna()]
    cross = quality[quality["head_task"].notna()]
    heads, drafts = trained[trained["kind"] == "head"], trained[trained["kind"] == "draft"]
    pairs = set(zip(*(own.loc[own["method"] != "finetuned", c] for c in ("target", "draft")), strict=True))
    temps = {float(t) for t in own["temperature"]}
    ks = {int(k) for k in quality["K"].dropna()}
    evals = own[own["split"] == "eval"]
    head_settings = {(r.acceptance_term, r.acceptance_weight) for r in heads.itertuples()}
    training = {(r.lr, r.batch_size, r.epochs, r.prompts) for r in heads.itertuples()}
    rows = [
        ("model pairs", "Llama-3.2-1B / Llama-3.1-8B-Instruct, Qwen3-0.6B / Qwen3-8B (Tables 1-3)",
         _values(f"{d} / {t}" for t, d in pairs), pairs <= PAPER_PAIRS and bool(pairs)),
        ("temperatures", "1.0 (Table 1), 0.1 (Table 2)", _values(temps), temps <= {1.0, 0.1} and bool(temps)),
        ("draft length K", "5 (the paper's experiments)", _values(ks), ks == {5}),
        ("sampling", "each model's generation config (top-k / top-p), as transformers' generate (authors' code)",
         _values(_sampling(r) for r in own.itertuples()), set(own["sampling"]) == {"model"}),
        ("prompt format", "raw templates, no chat template (authors' code)",
         _values(own["prompt_format"]), set(own["prompt_format"]) == {"raw"}),
        ("eval prompts per task", "100 (the authors' scripts; the paper does not say)",
         _per_task(evals, "prompts"), set(evals["prompts"]) == {100} if len(evals) else None),
        *_scoring_rows(own),
        ("new tokens per prompt", "128 for every task (authors' scripts)",
         _per_task(own, "max_new_tokens"), set(own["max_new_tokens"]) == {128}),
        ("seeds", SILENT, _values(int(s) for s in quality["seed"]), None),
        ("fine-tuned draft's objective", "supervised on the reference answers (authors' data loader; its other "
         "settings are not public)",
         _values(drafts["finetune"]), set(drafts["finetune"]) == {"sft"} if len(drafts) else None),
        ("acceptance term of the head", "relative: 5% of the reward loss's magnitude, every step (authors' code)",
         _values(f"{term} {weight:g}" for term, weight in head_settings),
         head_settings == {("relative", 0.05)} if len(heads) else None),
        ("choice of lambda", f"{SILENT} (the authors' code fixes 5%)",
         "; ".join(sorted({_lambda_choice(h) for h in heads.itertuples()})) or "–", None),
        ("head training", "AdamW lr 5e-4, batch 8, 2 epochs, 400 train prompts (paper)",
         _values(f"lr {lr:g}, batch {batch:g}, {epochs:g} epochs, {prompts:g} prompts"
                 for lr, batch, epochs, prompts in training),
         training == {(5e-4, 8, 2, 400)} if len(heads) else None),
        *_training_rows(heads, trained),
        ("Table 3 temperature", "ambiguous: its caption says 0.1, its GSM8K rows are Table 1's T = 1.0",
         _values(float(t) for t in cross["temperature"]), None),
        ("choice of the fixed w and of each family's knob", f"{SILENT}; here on the dev split: the largest "
         "acceptance its rule admits against strict (sweep.select)", "dev-split sweep", None),
        ("MBPP eval split", "validation (authors' code)", "test" if (quality["task"] == "mbpp").any() else "–",
         False if (quality["task"] == "mbpp").any() else None),
        _given_row(own),
    ]
    return [{"setting": s, "paper (source)": p, "this run": v,
             "agrees": SILENT if a is None else "yes" if a else "**no**"} for s, p, v, a in rows]


def section(runs: pd.DataFrame, trained: pd.DataFrame) -> list[str]:
    """REPORT.md's deviations section: the settings table and what it means for comparing numbers."""
    table = pd.DataFrame(settings(runs, trained))
    return ["## Deviations from the paper", "",
            "Each setting the paper's numbers depend on, the paper's value (from the paper, or from the authors' "
            "released code where the paper does not say), and what this run used, read from its runs' and trainings' "
            "manifests (aggregated in results/tables/runs.csv and trained.csv). A "
            "number of this run is comparable with the paper's only where every setting it depends on agrees.", "",
            table.to_markdown(index=False), ""]
