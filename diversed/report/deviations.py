"""Where a run differs from the paper: each setting the paper's numbers depend on, the paper's value with its
source, the value this run used (read from its runs' and trainings' manifests, so what ran, not what was asked),
and whether they agree. REPORT.md's "Deviations from the paper" section."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from diversed.runs.run import Run, trained

SILENT = "the paper is silent"
PAPER_PAIRS = {("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
               ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B")}


def _values(xs) -> str:
    vals = sorted({str(x) for x in xs if x is not None and not (isinstance(x, float) and pd.isna(x))})
    return ", ".join(vals) if vals else "–"


def _per_task(runs: list[Run], value: Callable[[Run], object]) -> str:
    by_task: dict[str, set] = {}
    for r in runs:
        by_task.setdefault(r.config.get("task") or "prompts", set()).add(value(r))
    return "; ".join(f"{t} {_values(v)}" for t, v in sorted(by_task.items()))


def _lambda_choice(training: dict) -> str:
    """How a head's lambda was set: chosen on a split among candidates (sweep_lambda), or the config's."""
    task, chosen = training["config"]["task"], training.get("chosen")
    if not chosen:
        return f"{task}: the config's"
    return f"{task}: on {chosen['split']}, among {_values(c['lambda'] for c in chosen['candidates'])}"


def _sampling(run: Run) -> str:
    c, s = run.config, run.manifest.get("decoding", {}).get("sampling", {})
    top_k, top_p = s.get("top_k", c.get("top_k")), s.get("top_p", c.get("top_p"))
    return f"{c.get('sampling', 'full')} (top-k {top_k}, top-p {top_p})"


def settings(runs: pd.DataFrame) -> list[dict]:
    """One row per setting: setting, paper (value and source), this run, agrees (yes / no / the paper is silent)."""
    runs = runs.assign(**{c: runs.get(c) for c in ("timing", "head_task", "K", "knob")})
    quality = runs[~runs["timing"].fillna(False).astype(bool)]
    own = [Run(d) for d in quality.loc[quality["head_task"].isna(), "run_dir"]]
    cross = quality[quality["head_task"].notna()]
    heads = {t["path"]: t for r in own if r.config.get("head") for t in trained(r) if "final" in t}
    drafts = {t["path"]: t for r in own for t in trained(r) if "final" not in t}
    pairs = {(r.config.get("target"), r.config.get("draft")) for r in own if r.labels.get("method") != "finetuned"}
    temps = {float(t) for t in quality.loc[quality["head_task"].isna(), "temperature"]}
    ks = {int(k) for k in quality["K"].dropna()}
    evals = [r for r in own if r.config.get("split") == "eval"]
    rows = [
        ("model pairs", "Llama-3.2-1B / Llama-3.1-8B-Instruct, Qwen3-0.6B / Qwen3-8B (Tables 1-3)",
         _values(f"{d} / {t}" for t, d in pairs), pairs <= PAPER_PAIRS and bool(pairs)),
        ("temperatures", "1.0 (Table 1), 0.1 (Table 2)", _values(temps), temps <= {1.0, 0.1} and bool(temps)),
        ("draft length K", "5 (the paper's experiments)", _values(ks), ks == {5}),
        ("sampling", "each model's generation config (top-k / top-p), as transformers' generate (authors' code)",
         _values(_sampling(r) for r in own), {r.config.get("sampling") for r in own} == {"model"}),
        ("prompt format", "raw templates, no chat template (authors' code)",
         _values(r.config.get("prompt_format") for r in own), {r.config.get("prompt_format") for r in own} == {"raw"}),
        ("eval prompts per task", "100 (the authors' scripts' default; the paper does not say)",
         _per_task(evals, lambda r: r.manifest["summary"]["prompts"]), None),
        ("new tokens per prompt", "128 for every task (authors' scripts)",
         _per_task(own, lambda r: r.config.get("max_new_tokens")),
         {r.config.get("max_new_tokens") for r in own} == {128}),
        ("seeds", SILENT, _values(int(s) for s in quality["seed"]), None),
        ("fine-tuned draft", "supervised on the reference answers (authors' data loader)",
         _values(t["config"].get("finetune", "distill") for t in drafts.values()),
         {t["config"].get("finetune") for t in drafts.values()} == {"sft"} if drafts else None),
        ("acceptance term of the head", "relative: 5% of the reward loss's magnitude, every step (authors' code)",
         _values(f"{t['config'].get('acceptance_term', 'fixed')} {t['config']['acceptance_weight']:g}"
                 for t in heads.values()),
         {(t["config"].get("acceptance_term"), t["config"]["acceptance_weight"]) for t in heads.values()}
         == {("relative", 0.05)} if heads else None),
        ("choice of lambda", f"{SILENT} (the authors' code fixes 5%)",
         "; ".join(sorted({_lambda_choice(t) for t in heads.values()})) or "–", None),
        ("head training", "AdamW lr 5e-4, batch 8, 2 epochs, 400 train prompts (paper)",
         _values(f"lr {t['config']['lr']:g}, batch {t['config']['batch_size']}, {t['config']['epochs']} epochs, "
                 f"{t['prompts']} prompts" for t in heads.values()),
         {(t["config"]["lr"], t["config"]["batch_size"], t["config"]["epochs"], t["prompts"])
          for t in heads.values()} == {(5e-4, 8, 2, 400)} if heads else None),
        ("Table 3 temperature", "ambiguous: its caption says 0.1, its GSM8K rows are Table 1's T = 1.0",
         _values(float(t) for t in cross["temperature"]), None),
        ("choice of the fixed w and of each family's knob", f"{SILENT}; here on the dev split: the largest "
         "acceptance non-inferior to strict", "dev-split sweep", None),
        ("MBPP eval split", "validation (authors' code)", "test" if (quality["task"] == "mbpp").any() else "–",
         False if (quality["task"] == "mbpp").any() else None),
        ("lenient and cascade settings", "the authors' (sd_lossy, spe_cas) are not public",
         _values(f"{m} {_values(quality.loc[quality['method'] == m, 'knob'])}"
                 for m in ("lenient", "cascade") if (quality["method"] == m).any()), None),
    ]
    return [{"setting": s, "paper (source)": p, "this run": v,
             "agrees": SILENT if a is None else "yes" if a else "**no**"} for s, p, v, a in rows]


def section(runs: pd.DataFrame) -> list[str]:
    """REPORT.md's deviations section: the settings table and what it means for comparing numbers."""
    table = pd.DataFrame(settings(runs))
    return ["## Deviations from the paper", "",
            "Each setting the paper's numbers depend on, the paper's value (from the paper, or from the authors' "
            "released code where the paper does not say), and what this run used, read from its manifests. A "
            "number of this run is comparable with the paper's only where every setting it depends on agrees.", "",
            table.to_markdown(index=False), ""]
