"""`diversed audit RESULTS_DIR`: the timed runs are the scored runs, and every run's counters add up.

In the spirit of MLPerf Inference's compliance tests (TEST01: performance-mode outputs match accuracy-mode
outputs; TEST06: EOS and length checks; TEST07: every sample scored), four checks over a results folder:

- **timed = scored**: each timed prompt's tokens against the scored run's at the same setting (k of n
  token-identical). A decode is deterministic at one batch size, so there every prompt must match; across batch
  sizes float rounding may change a sampled token, and the timed prompts' quality in the timed run must then not
  be shown to differ from the scored run's by more than the task metric's tolerance (the paired 95% interval of
  timed - scored wholly outside +-tolerance: statistics.equivalent's "fails"; without an interval, the
  difference itself beyond it).
- **timed is scored**: every timed prompt is among the scored run's prompts and has a score there.
- **same setting**: the timed and the scored run decode the same rule at the same knob (manifest `decoding`) with
  the same trained files (manifest `trained`: the head's or judge's sha256).
- **accounting**, per run (per step s: k_s drafted, n_s accepted, n_s + 1 emitted; decoding/stats.py): 0 <= n_s <=
  k_s <= K, so alpha <= 1 and tau <= K + 1; the emitted tokens add up to the tokens written (an EOS may cut the
  last step: at most one EOS, and nothing after it); no more than max_new_tokens; each row's and the manifest's
  counters (new tokens, steps, alpha, tau, acceptance by position) are what the steps give (decoding.stats).

Timed runs are paired with scored ones by setting (pair, task, method, T, K, seed: results/timing with
results/runs) and by point (results/sweep_timing/X with results/sweeps/X).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from diversed import statistics
from diversed.decoding.settings import ALONE
from diversed.decoding.stats import Generation, summarize
from diversed.runs.run import Run
from diversed.tasks import metric_spec

TIMED_IS_SCORED, SAME_SETTING, TIMED_EQUALS_SCORED, ACCOUNTING, WHOLE = (
    "timed is scored", "same setting", "timed = scored", "accounting", "whole run")
CHECKS = (WHOLE, ACCOUNTING, TIMED_IS_SCORED, SAME_SETTING, TIMED_EQUALS_SCORED)
SUMMARY_KEYS = ("new_tokens", "steps", "draft_acceptance_rate", "mean_acceptance_length", "acceptance_by_position")


@dataclass(frozen=True)
class Finding:
    """One check of one run folder (or one timed/scored pair): passed or not, and what it saw."""

    check: str
    path: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.check}: {self.path}: {self.detail}"


def runs_under(folder: Path) -> list[Run]:
    """Every run folder (one holding manifest.json) under folder, in path order."""
    return [Run(m.parent) for m in sorted(folder.rglob("manifest.json")) if (m.parent / "generations.jsonl").exists()]


def same(x, y, rel: float = 1e-9) -> bool:
    """x equals y as recorded numbers do (nan equals nan; lists element-wise)."""
    if isinstance(x, list) or isinstance(y, list):
        return isinstance(x, list) and isinstance(y, list) and len(x) == len(y) and all(map(same, x, y))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y)):
        return x == y  # None, or something a run never records as a number (a doctored manifest)
    return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=rel, abs_tol=1e-12)


def steps(g: dict, K: int) -> Generation:
    """A generations.jsonl row's tokens and steps, as decoding.stats counts them."""
    return Generation(tokens=g["tokens"], K=K, drafted=g.get("drafted") or [], accepted=g.get("accepted") or [])


def row_problems(g: dict, gen: Generation, max_new: int) -> list[str]:
    """What does not add up in one generations.jsonl row (its id first); gen: its steps (`steps`)."""
    tokens, drafted, accepted, K = gen.tokens, gen.drafted, gen.accepted, gen.K
    out = []
    if len(drafted) != len(accepted):
        out.append(f"{len(drafted)} steps drafted, {len(accepted)} accepted")
    elif any(not 0 <= n <= k <= K for k, n in zip(drafted, accepted, strict=True)):
        out.append(f"a step accepts more than it drafted or drafts more than K = {K} (alpha > 1 or tau > K + 1)")
    elif drafted:
        emitted = sum(n + 1 for n in accepted)
        cut = g.get("stop") == "eos" and emitted - accepted[-1] - 1 < len(tokens) <= emitted
        if len(tokens) != emitted and not cut:
            out.append(f"its steps emit {emitted} tokens, it holds {len(tokens)}")
    if len(tokens) > max_new:
        out.append(f"{len(tokens)} tokens, over max_new_tokens = {max_new}")
    g_stats = gen.stats()
    out += [f"records {key} {g[key]!r}, its steps give {g_stats[key]!r}" for key in SUMMARY_KEYS[:4]
            if key in g and not same(g[key], g_stats[key])]
    return [f"row {g.get('id')}: {p}" for p in out]


def accounting(run: Run) -> list[Finding]:
    """The run's counters against its steps, its EOS and its token budget (ACCOUNTING)."""
    try:
        rows = run.generations
    except (OSError, ValueError) as e:
        return [Finding(WHOLE, str(run.path), False, str(e))]
    c = run.config
    K = 0 if c["verifier"] in ALONE else c["K"]
    gens = [steps(g, K) for g in rows]
    problems = [p for g, gen in zip(rows, gens, strict=True) for p in row_problems(g, gen, c["max_new_tokens"])]
    eos = {g["tokens"][-1] for g in rows if g.get("stop") == "eos" and g["tokens"]}
    problems += [f"row {g.get('id')}: an EOS token before its end" for g in rows
                 if any(t in eos for t in g["tokens"][:-1]) or (g.get("stop") != "eos" and g["tokens"]
                                                                and g["tokens"][-1] in eos)]
    pooled = summarize(gens)
    recorded = run.manifest.get("summary", {})
    problems += [f"manifest summary {key} {recorded.get(key)!r}, its rows give {pooled[key]!r}"
                 for key in SUMMARY_KEYS if not same(recorded.get(key), pooled[key])]
    detail = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return [Finding(ACCOUNTING, str(run.path / "generations.jsonl"), not problems,
                    detail or f"{len(rows)} rows, {pooled['steps']} steps add up")]


def setting_key(run: Run) -> tuple:
    """What a timed run and its scored run share: pair, task, method, T, K, seed."""
    c = run.config
    return (run.labels.get("pair"), c["task"], run.method, float(c["temperature"]),
            None if c["verifier"] in ALONE else c["K"], c["seed"])


def pairs(results: Path) -> tuple[list[tuple[Run, Run | None]], list[Run]]:
    """(timed run, its scored run or None) for every timed run under results, and every run read."""
    scored, timed = runs_under(results / "runs"), runs_under(results / "timing")
    points, timed_points = runs_under(results / "sweeps"), runs_under(results / "sweep_timing")
    by_key = {}
    for run in scored:
        if run.labels.get("head_task") in (None, ""):  # a transfer run is never timed
            by_key.setdefault(setting_key(run), run)
    by_point = {run.path.relative_to(results / "sweeps"): run for run in points}
    found = [(t, by_key.get(setting_key(t))) for t in timed]
    found += [(t, by_point.get(t.path.relative_to(results / "sweep_timing"))) for t in timed_points]
    return found, [*scored, *timed, *points, *timed_points]


def recorded(run: Run, key: str):
    """A manifest's record of what decoded (decoding) or what it loaded (trained), K left out of one model's alone."""
    value = run.manifest.get(key)
    if key == "decoding" and isinstance(value, dict) and value.get("verifier") in ALONE:
        value = {k: v for k, v in value.items() if k != "K"}
    return value


def prompt_quality(run: Run, hashes: list[str], metric: str) -> pd.DataFrame:
    """(seed, prompt, quality) of these prompts: a task metric from scores.json's per-prompt rows, a fidelity metric
    (target_logprob) from the generations' own per-prompt value."""
    per = {e["prompt_hash"]: e for e in run.scores.get("per_example", [])}
    rows = {g["prompt_hash"]: g for g in run.generations}
    return pd.DataFrame({"seed": 0, "prompt": hashes,
                         "quality": [float((per[h] if metric in per.get(h, {}) else rows[h])[metric]) for h in hashes]})


def compare(timed: Run, scored: Run) -> list[Finding]:
    """TIMED_IS_SCORED, SAME_SETTING and TIMED_EQUALS_SCORED for one pair."""
    where = f"{timed.path} vs {scored.path}"
    rows = {g["prompt_hash"]: g for g in scored.generations}
    per = {e["prompt_hash"]: e for e in scored.scores.get("per_example", [])}
    metric = scored.scores["metric"]
    missing = [g["id"] for g in timed.generations if g["prompt_hash"] not in rows or g["prompt_hash"] not in per]
    out = [Finding(TIMED_IS_SCORED, where, not missing, f"timed prompts without a score in the scored run: "
                   f"{', '.join(missing[:5])}" if missing else f"{len(timed.generations)} timed prompts all scored")]
    diff = {k: (recorded(timed, k), recorded(scored, k)) for k in ("decoding", "trained")}
    diff = {k: v for k, v in diff.items() if v[0] != v[1]}
    out.append(Finding(SAME_SETTING, where, not diff, "; ".join(f"{k}: timed {a}, scored {b}" for k, (a, b) in
                                                                diff.items()) or "same rule, knob and trained files"))
    if missing:
        return out
    hashes = [g["prompt_hash"] for g in timed.generations]
    k = sum(g["tokens"] == rows[g["prompt_hash"]]["tokens"] for g in timed.generations)
    text = f"{k}/{len(hashes)} token-identical (timed at batch {timed.batch_size}, scored at {scored.batch_size})"
    if k == len(hashes):
        return [*out, Finding(TIMED_EQUALS_SCORED, where, True, text)]
    if timed.batch_size == scored.batch_size:
        return [*out, Finding(TIMED_EQUALS_SCORED, where, False, f"{text}: at one batch size a decode is "
                              "deterministic, so every prompt must match")]
    try:
        spec = metric_spec(metric)
        gap = statistics.paired(prompt_quality(timed, hashes, metric), prompt_quality(scored, hashes, metric),
                                "quality", binary=spec.binary)
    except (KeyError, TypeError, ValueError):
        return [*out, Finding(TIMED_EQUALS_SCORED, where, False, f"{text}; no per-prompt {metric} to compare")]
    if math.isfinite(gap.low):  # an interval: fails when it lies wholly outside +-tolerance
        shown = statistics.equivalent(gap, spec.tolerance).verdict() == statistics.FAILS
    else:  # no interval (too few prompts, or the same difference on each): the difference as it is
        shown = not abs(gap.value) <= spec.tolerance
    return [*out, Finding(TIMED_EQUALS_SCORED, where, not shown, f"{text}; {metric} on the timed prompts, timed - "
                          f"scored {gap.text(digits=4, sign=True)}" + (f": shown to differ by more than the "
                          f"tolerance {spec.tolerance:g}" if shown else f" (tolerance {spec.tolerance:g})"))]


def audit(results: str | Path) -> list[Finding]:
    """Every check over a results folder (results/runs, timing, sweeps, sweep_timing)."""
    results = Path(results)
    if not results.is_dir():
        raise FileNotFoundError(f"{results} is not a folder of results (runs/, timing/, sweeps/, sweep_timing/)")
    found, runs = pairs(results)
    findings = [f for run in runs for f in accounting(run)]
    whole = {f.path for f in findings if f.check == WHOLE}
    for timed, scored in found:
        if scored is None:
            findings.append(Finding(TIMED_IS_SCORED, str(timed.path), False, "no scored run of this setting"))
        elif str(timed.path) not in whole and str(scored.path) not in whole:
            try:
                findings += compare(timed, scored)
            except (OSError, ValueError) as e:
                findings.append(Finding(WHOLE, f"{timed.path} vs {scored.path}", False, str(e)))
    return findings


def summary(findings: list[Finding]) -> str:
    """One line per check: how many passed, and each failure's line."""
    lines = [f"{check}: {sum(f.ok for f in fs)} of {len(fs)} passed"
             for check in CHECKS if (fs := [f for f in findings if f.check == check])]
    return "\n".join([*lines, *(f.line() for f in findings if not f.ok)])
