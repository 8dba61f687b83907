"""The paper's claims, tested on a reproduction's runs: each claim, its evidence (numbers with 95% CIs) and a verdict
(holds, fails, or inconclusive at this sample size), computed from the runs and sweeps, never written by hand.

Comparisons between methods are paired: the same eval prompts and seeds decode under each method, so a claim reads
the per-prompt difference (method A - method B) and its t-interval over (seed, prompt) pairs. A verdict holds when
the interval lies on the claimed side of zero, fails when it lies on the other side, and is inconclusive when it
spans zero."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from diversed.aggregate import ci95, prompt_table

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
IDENTITY_TOLERANCE = 0.05  # |observed - predicted acceptance| within which the acceptance identity holds


@dataclass
class Claim:
    """One claim of the paper as this reproduction tests it."""

    claim: str
    evidence: str
    verdict: str


def paired(df: pd.DataFrame, a: dict, b: dict, column: str) -> tuple[float, float, int]:
    """Mean and 95% half-width of column(a) - column(b) over the (seed, prompt) pairs both selections share."""
    def pick(sel):
        d = df
        for k, v in sel.items():
            d = d[d[k] == v]
        return d.set_index(["seed", "prompt"])[column]

    diff = (pick(a) - pick(b)).dropna()
    mean, half = ci95(diff.tolist())
    return mean, half, len(diff)


def side(mean: float, half: float, *, above: float = 0.0) -> str:
    """HOLDS if the interval lies above `above`, FAILS if below, else INCONCLUSIVE."""
    if math.isnan(mean):
        return INCONCLUSIVE
    if mean - half > above:
        return HOLDS
    if mean + half < above:
        return FAILS
    return INCONCLUSIVE


def all_of(verdicts: list[str]) -> str:
    """Every case holds: HOLDS; any case fails: FAILS; else INCONCLUSIVE."""
    if not verdicts:
        return INCONCLUSIVE
    return FAILS if FAILS in verdicts else HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def any_of(verdicts: list[str]) -> str:
    """Some case holds: HOLDS; every case fails: FAILS; else INCONCLUSIVE."""
    if HOLDS in verdicts:
        return HOLDS
    return FAILS if verdicts and all(v == FAILS for v in verdicts) else INCONCLUSIVE


def num(mean: float, half: float, digits: int = 3) -> str:
    return "–" if math.isnan(mean) else f"{mean:+.{digits}f} ± {half:.{digits}f}"


def settings(df: pd.DataFrame, temperature: float) -> list[tuple[str, str, int]]:
    """(pair, task, K) of the speculative runs at one temperature, own heads only."""
    d = df[(df["temperature"] == temperature) & df["K"].notna() & (df["head_task"] == "")]
    return sorted({(p, t, int(k)) for p, t, k in zip(d["pair"], d["task"], d["K"], strict=True)})


def relaxed_raises_acceptance(df: pd.DataFrame, T: float) -> Claim:
    parts, verdicts = [], []
    for pair, task, K in settings(df, T):
        key = {"pair": pair, "task": task, "temperature": T, "K": K, "head_task": ""}
        for method in ("dynamic", "fixed"):
            chosen = df.loc[(df["pair"] == pair) & (df["task"] == task) & (df["method"] == method), "weight"]
            if method == "fixed" and len(chosen) and (chosen.isna() | (chosen == 1.0)).all():  # the sweep kept strict
                parts.append(f"{pair}/{task} fixed: the sweep chose w = 1 (strict), not a relaxed verifier")
                continue
            m, h, n = paired(df, key | {"method": method}, key | {"method": "strict"}, "draft_acceptance_rate")
            if n:
                verdicts.append(side(m, h))
                parts.append(f"{pair}/{task} {method}: {num(m, h)} (n={n})")
    return Claim(f"Relaxed verification (DIVERSED, static w) raises acceptance over strict (T = {T:g})",
                 "; ".join(parts) or "no paired runs", all_of(verdicts))


def acceptance_identity(runs: pd.DataFrame, T: float) -> Claim:
    """At each drafted position with linear mixing, P(accept) = 1 - w TV(p, q) = 1 - w / (1 - w) TV(nu, p)."""
    parts, verdicts = [], []
    d = runs[(runs["temperature"] == T) & runs["method"].isin(["dynamic", "fixed"]) & (runs["mixing"] == "linear")]
    for (pair, method), g in d.groupby(["pair", "method"]):
        gaps = []  # per prompt: mean(observed - predicted) over its tested positions
        for run_dir in g["run_dir"]:
            for line in (Path(run_dir) / "generations.jsonl").read_text().splitlines():
                row = json.loads(line)
                tv, obs, pred, at = row.get("bias_tv_per_token", []), [], [], 0
                for k, n, ws in zip(row["drafted"], row["accepted"], row["weights"], strict=True):
                    for j in range(min(n + 1, k)):  # positions tested: the accepted ones and the first rejected
                        if at + j < len(tv) and ws[j] < 1:
                            obs.append(float(j < n))
                            pred.append(1 - ws[j] / (1 - ws[j]) * tv[at + j])
                    at += n + 1
                if obs:
                    gaps.append(sum(obs) / len(obs) - sum(pred) / len(pred))
        m, h = ci95(gaps)
        verdicts.append(HOLDS if abs(m) + h < IDENTITY_TOLERANCE else FAILS if abs(m) - h > IDENTITY_TOLERANCE
                        else INCONCLUSIVE)
        parts.append(f"{pair} {method}: observed - predicted {num(m, h)} over {len(gaps)} prompts")
    return Claim(f"Acceptance = 1 - w TV(p, q) at each position, linear mixing (T = {T:g}; within "
                 f"±{IDENTITY_TOLERANCE})", "; ".join(parts) or "no linear-mixing runs", all_of(verdicts))


def static_front(sweeps: pd.DataFrame, T: float) -> Claim:
    """Along a sweep, acceptance falls as w rises (w = 1 is strict)."""
    parts, verdicts = [], []
    d = sweeps[sweeps["temperature"] == T]
    for (pair, task, K), g in d.groupby(["pair", "task", "K"]):
        fixed = g[g["verifier"] == "fixed"]
        for mixing in sorted(set(fixed["mixing"])):
            s = pd.concat([g[g["verifier"] == "strict"], fixed[fixed["mixing"] == mixing]])
            if len(s) < 3:
                continue
            rho = s["weight"].rank().corr(s["draft_acceptance_rate"].rank())
            verdicts.append(HOLDS if rho <= -0.8 else FAILS if rho >= 0 else INCONCLUSIVE)
            lo, hi = s.sort_values("weight").iloc[[0, -1]]["draft_acceptance_rate"]
            parts.append(f"{pair}/{task} K={K} {mixing}: acceptance {lo:.2f} (w = {s['weight'].min():g}) -> "
                         f"{hi:.2f} (w = 1), rank correlation {rho:.2f}")
    return Claim(f"The static weights trace a front: acceptance falls as w rises (dev split, T = {T:g})",
                 "; ".join(parts) or "no sweeps", all_of(verdicts))


def beyond_front(df: pd.DataFrame, T: float) -> Claim:
    """DIVERSED against the static front's chosen point (fixed w) on the eval prompts: more acceptance at no
    significant loss of quality, or more quality at no significant loss of acceptance."""
    parts, verdicts = [], []
    for pair, task, K in settings(df, T):
        key = {"pair": pair, "task": task, "temperature": T, "K": K, "head_task": ""}
        a = paired(df, key | {"method": "dynamic"}, key | {"method": "fixed"}, "draft_acceptance_rate")
        q = paired(df, key | {"method": "dynamic"}, key | {"method": "fixed"}, "quality")
        if not a[2]:
            continue
        sa, sq = side(a[0], a[1]), side(q[0], q[1])
        verdicts.append(HOLDS if (sa == HOLDS and sq != FAILS) or (sq == HOLDS and sa != FAILS)
                        else FAILS if FAILS in (sa, sq) and HOLDS not in (sa, sq) else INCONCLUSIVE)
        parts.append(f"{pair}/{task}: acceptance {num(*a[:2])}, quality {num(*q[:2])}")
    return Claim(f"DIVERSED lies beyond the static front on some task (vs the fixed w, T = {T:g})",
                 "; ".join(parts) or "no paired runs", any_of(verdicts))


def faster_than_sd(df: pd.DataFrame, runs: pd.DataFrame, T: float, tolerance: dict[str, float]) -> Claim:
    """DIVERSED's tokens/s above SD's (paired over (seed, prompt); over seeds for runs without per-prompt timings),
    at quality within the task's tolerance of the target."""
    parts, verdicts = [], []
    for pair, task, K in settings(df, T):
        key = {"pair": pair, "task": task, "temperature": T}
        *s, n = paired(df, key | {"method": "dynamic", "K": K, "head_task": ""},
                       key | {"method": "strict", "K": K, "head_task": ""}, "tokens_per_s")
        unit = "(seed, prompt) pairs"
        if not n:
            sel = runs[(runs["pair"] == pair) & (runs["task"] == task) & (runs["temperature"] == T)
                       & runs["head_task"].isna()]
            speed = sel.pivot_table(index="seed", columns="method", values="tokens_per_s")
            if not {"dynamic", "strict"} <= set(speed.columns):
                continue
            diff = (speed["dynamic"] - speed["strict"]).dropna()
            s, n, unit = ci95(diff.tolist()), len(diff), "seeds"
        q = paired(df, key | {"method": "dynamic", "K": K, "head_task": ""},
                   {"pair": pair, "task": task, "temperature": T, "method": "autoregressive"}, "quality")
        tol = tolerance.get(task, 0.0)
        sq = side(q[0], q[1], above=-tol)
        verdicts.append(HOLDS if side(*s) == HOLDS and sq == HOLDS else FAILS if FAILS in (side(*s), sq)
                        else INCONCLUSIVE)
        parts.append(f"{pair}/{task}: tokens/s vs SD {num(*s, digits=1)} (n={n} {unit}); quality vs "
                     f"target only {num(*q[:2])} (tolerance {tol:g})")
    return Claim(f"DIVERSED is faster than SD at quality within the task's tolerance of the target (T = {T:g})",
                 "; ".join(parts) or "no paired runs", all_of(verdicts))


def weight_varies(weights: pd.DataFrame, T: float) -> Claim:
    """The learned w differs between tasks (per-prompt means) and within a context (positions of one prompt)."""
    d = weights[(weights["temperature"] == T) & weights["head_task"].isna()]
    if d.empty:
        return Claim("The learned w varies with the task and the context", "no DIVERSED runs", INCONCLUSIVE)
    per_prompt = d.groupby(["pair", "task", "seed", "prompt"])["w"].agg(["mean", "std"]).reset_index()
    parts, verdicts = [], []
    for pair, g in per_prompt.groupby("pair"):
        means = {t: ci95(x["mean"].tolist()) for t, x in g.groupby("task")}
        within = ci95(g["std"].fillna(0).tolist())
        text = ", ".join(f"{t} {m:.3f} ± {h:.3f}" for t, (m, h) in means.items())
        if len(means) > 1:  # the tasks of lowest and highest mean w apart, and w moving within prompts
            (m1, h1), (m2, h2) = sorted(means.values())[0], sorted(means.values())[-1]
            verdicts.append(HOLDS if m2 - h2 > m1 + h1 and within[0] - within[1] > 0.01 else INCONCLUSIVE)
        parts.append(f"{pair}: mean w per task {text}; std of w within a prompt {within[0]:.3f} ± {within[1]:.3f}")
    return Claim(f"The learned w varies with the task and the context (T = {T:g})", "; ".join(parts), all_of(verdicts))


def transfer_worse(df: pd.DataFrame) -> Claim:
    """A head trained on another task against the task's own head, same eval prompts: lower quality."""
    parts, verdicts = [], []
    cross = df[df["head_task"] != ""]
    for (pair, task, head, T, K), _ in cross.groupby(["pair", "task", "head_task", "temperature", "K"]):
        key = {"pair": pair, "task": task, "temperature": T, "K": K, "method": "dynamic"}
        q = paired(df, key | {"head_task": ""}, key | {"head_task": head}, "quality")
        a = paired(df, key | {"head_task": ""}, key | {"head_task": head}, "draft_acceptance_rate")
        verdicts.append(side(q[0], q[1]))
        parts.append(f"{pair}/{task} own - {head} head: quality {num(*q[:2])}, acceptance {num(*a[:2])}")
    return Claim("A head transferred from another task does worse than the task's own (quality)",
                 "; ".join(parts) or "no transfer runs", all_of(verdicts))


def claims(runs: pd.DataFrame, sweeps: pd.DataFrame, weights: pd.DataFrame, *, temperature: float = 1.0,
           tolerance: dict[str, float] | None = None) -> list[Claim]:
    """Every claim this reproduction can test, at one temperature."""
    from diversed.tasks import get_task

    df = prompt_table(runs)
    tolerance = tolerance or {t: get_task(t).metric.tolerance for t in runs["task"].unique()}
    return [relaxed_raises_acceptance(df, temperature), acceptance_identity(runs, temperature),
            static_front(sweeps, temperature), beyond_front(df, temperature),
            faster_than_sd(df, runs, temperature, tolerance), weight_varies(weights, temperature),
            transfer_worse(df)]


def markdown(found: list[Claim]) -> str:
    rows = ["| claim | evidence (mean difference ± 95% CI) | verdict |", "|---|---|---|"]
    rows += [f"| {c.claim} | {c.evidence} | **{c.verdict}** |" for c in found]
    return "\n".join(rows)
