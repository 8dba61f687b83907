"""The report's tests calibrated by simulation: for each test the claims use (diversed.statistics), on prompts
simulated to look like a reproduction's, the rate of false "holds" at its null's boundary and the coverage of its
95% interval, at n = 4 to 200 prompts.

A test is calibrated at n when its false "holds" rate is at most LEVEL_MAX (nominal 2.5%) and its interval covers
the true value at least COVERAGE_MIN of the time, at n and at every larger n of the grid. The smallest such n of
the cases of one estimate kind is that kind's calibrated minimum (`minimum`); statistics.MIN_PROMPTS holds the
minima the simulations found, and below them an estimate is descriptive: no interval, no test
(tests/test_calibration.py recomputes them). Print the table with `diversed calibrate`.

Each case draws (seed, prompt) rows the way a run records them and estimates through the statistics module's own
code: seeds pooled within a prompt (statistics.pool_prompts), then the kind's estimate (statistics.prompt_estimate).

The sweeps' selections are calibrated the same way (`selections`): over simulated dev sweeps of one family,
how often the knob each selection chooses truly loses more than the margin against strict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diversed import statistics as st

GRID = (4, 12, 26, 51, 200)  # prompts
LEVEL_MAX = 0.035  # the most a test may hold falsely at its null's boundary (nominal ALPHA / 2 = 0.025)
COVERAGE_MIN = 0.93  # the least a 95% interval may cover
RUNS = 2000  # simulated reproductions per case and n
ACCURACY_MARGIN, FIDELITY_MARGIN, ROUGE_MARGIN = 0.02, 0.1, 1.0  # the tasks' tolerances (tasks.Metric)
IDENTITY_MARGIN = 0.05  # claims.IDENTITY_TOLERANCE


@dataclass(frozen=True)
class Case:
    """One test on data like a reproduction's, at its null's boundary: draw(rng, n) is the estimate over n simulated
    prompts (given floor: statistics.prompt_estimate), truth the value its interval should cover, test the
    report's test of it (None: an interval only)."""

    name: str
    kind: str  # the estimate's kind: statistics.KINDS
    data: str  # what the simulated prompts look like
    draw: Callable[[np.random.Generator, int], Callable[[bool], st.Estimate]]
    truth: float
    test: Callable[[st.Estimate], st.Test] | None = None


def _pooled(metric: str, a: dict[str, np.ndarray], b: dict[str, np.ndarray] | None = None, seeds: int = 1,
            **how) -> Callable[[bool], st.Estimate]:
    """The estimate of the (seed, prompt) rows a (and b), seed-major, their seeds pooled within a prompt, given floor
    (statistics.prompt_estimate)."""
    n = len(next(iter(a.values()))) // seeds
    codes = np.tile(np.arange(n), seeds)
    if how.get("binary") and b is not None:
        a = a | st.discordance(a[metric], b[metric])  # as statistics.paired pairs them: by seed within a prompt
    pa, pb = st.pool_prompts(a, codes, n), None if b is None else st.pool_prompts(b, codes, n)
    return lambda floor: st.prompt_estimate(metric, pa, pb, floor=floor, **how)


def binary(discordant: tuple[float, float], relative: bool = False) -> Callable:
    """0/1 answers of A and B on the same prompts (B right on 70%), discordant with probabilities (A right B wrong,
    A wrong B right): their difference (or, relative, their ratio)."""
    d10, d01 = discordant
    cells = np.array([0.7 - d01, d10, d01, 0.0])
    cells[3] = 1 - cells[:3].sum()  # (A, B) = (1, 1), (1, 0), (0, 1), (0, 0)

    def draw(rng, n):
        cell = rng.choice(4, size=n, p=cells)
        return _pooled("quality", {"quality": np.isin(cell, (0, 1)).astype(float)},
                       {"quality": np.isin(cell, (0, 2)).astype(float)}, binary=True, relative=relative)
    return draw


def accuracy(p: float) -> Callable:
    """One method's 0/1 answers, right with probability p on every prompt."""
    return lambda rng, n: _pooled("quality", {"quality": (rng.random(n) < p).astype(float)}, binary=True)


def accuracy_seeds(rng, n, seeds=3):
    """One method's 0/1 answers on 3 seeds per prompt, the prompt's accuracy 0.05 + 0.9 Beta(2, 1) (mean 0.65)."""
    p = np.tile(0.05 + 0.9 * rng.beta(2.0, 1.0, n), seeds)
    return _pooled("quality", {"quality": (rng.random(len(p)) < p).astype(float)}, seeds=seeds, binary=True)


def binary_seeds(rng, n, seeds=3):
    """0/1 answers of 3 seeds per prompt, the prompt's accuracy Beta-distributed (hard and easy prompts), A's 0.02
    below B's on every prompt: pooled over seeds the answers are fractions, tested by the t-test."""
    p_b = 0.05 + 0.9 * rng.beta(2.0, 1.0, n)  # [n]
    p = np.tile(p_b, seeds)  # [seeds * n]
    return _pooled("quality", {"quality": (rng.random(len(p)) < p - ACCURACY_MARGIN).astype(float)},
                   {"quality": (rng.random(len(p)) < p).astype(float)}, seeds=seeds, binary=True)


def binary_seeds_alike(rng, n, seeds=3, discordant=(0.01, 0.03), relative=False):
    """0/1 answers of 3 seeds per prompt, A's paired with B's by seed and mostly alike (T = 0.1-like): per (seed,
    prompt) B right with the prompt's accuracy (0.05 + 0.9 Beta(2, 1)), A right B wrong 1% and A wrong B right 3%
    of the time, so A is 0.02 below B on every prompt: few discordant answers, spread over fractions of seeds."""
    d10, d01 = discordant
    p = np.tile(0.05 + 0.9 * rng.beta(2.0, 1.0, n), seeds)  # [seeds * n]
    u = rng.random(len(p))
    b = u < p
    a = (b & (u >= d01)) | (~b & (u < p + d10))
    return _pooled("quality", {"quality": a.astype(float)}, {"quality": b.astype(float)}, seeds=seeds, binary=True,
                   relative=relative)


def retention_seeds(rng, n):
    """binary_seeds_alike's answers, A right B wrong 0.5% and A wrong B right 4% of the time: A's accuracy over B's
    is 0.9487 (1 - 0.035 / 0.6833, B's mean accuracy 0.05 + 0.9 x 2 / 3)."""
    return binary_seeds_alike(rng, n, discordant=(0.005, 0.04), relative=True)


def _acceptance_rows(rng, rate: np.ndarray, K: int = 5) -> dict[str, np.ndarray]:
    """A run's counts on prompts with acceptance rates `rate`: tokens ~ 1 + Poisson(24), steps as a speculative
    decode takes them (1 + K rate tokens a step), accepted ~ Binomial(drafted, rate)."""
    tokens = 1 + rng.poisson(24, len(rate))
    drafted = K * np.ceil(tokens / (1 + K * rate))
    return {"accepted": rng.binomial(drafted.astype(int), rate).astype(float), "drafted": drafted}


SKEWED = (0.6, 1.4)  # Beta parameters of a prompt's acceptance: mean 0.3, most prompts low, a few near 1


def acceptance_difference(rng, n):
    """Two methods with the same skewed law of per-prompt acceptance on the same prompts (true difference 0)."""
    rate = rng.beta(*SKEWED, n)
    return _pooled("draft_acceptance_rate", _acceptance_rows(rng, rate), _acceptance_rows(rng, rate))


def acceptance_one(rng, n):
    """One method's acceptance rate (a ratio of totals) over prompts of skewed acceptance."""
    return _pooled("draft_acceptance_rate", _acceptance_rows(rng, rng.beta(*SKEWED, n)))


ACCEPTANCE_TRUTH = 0.1863  # the population sum(accepted) / sum(drafted) of acceptance_one: 0.18628 by 2 million
# simulated prompts (tests/test_calibration.py checks it to 3 decimals)


def _timed_rows(rng, pace: np.ndarray, mean_tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Timed decodes at batch 1: tokens ~ 1 + Poisson(the prompt's mean), seconds = tokens / the prompt's pace x a
    heavy-tailed factor (lognormal(0, 0.3); one decode in 20 stalls, 3x slower)."""
    tokens = 1 + rng.poisson(mean_tokens)
    noise = rng.lognormal(0.0, 0.3, len(pace)) * np.where(rng.random(len(pace)) < 0.05, 3.0, 1.0)
    return {"new_tokens": tokens.astype(float), "seconds": tokens / pace * noise}


def speedup(rng, n):
    """tokens/s of A over B on the same prompts, both with the same law (true ratio 1): prompts differ in pace
    (Gamma(8), mean 1, sd 0.35) and length (Gamma(2, 12) mean tokens)."""
    pace, mean_tokens = rng.gamma(8.0, 1 / 8, n), rng.gamma(2.0, 12.0, n)
    return _pooled("tokens_per_s", _timed_rows(rng, pace, mean_tokens), _timed_rows(rng, pace, mean_tokens),
                   relative=True)


def fidelity(rng, n):
    """The target's log-likelihood per token (a ratio of totals over tokens), A's 0.1 nats below B's per token:
    prompts differ in length and in their mean log p (-Gamma(2, 0.5)), tokens are heavy-tailed (a Student t with
    3 degrees of freedom, scale 1.5, around the prompt's mean)."""
    level = -rng.gamma(2.0, 0.5, n)

    def rows(shift):
        tokens = 1 + rng.poisson(rng.gamma(2.0, 12.0, n))
        noise = 1.5 * rng.standard_t(3, n) * np.sqrt(tokens)  # the sum of tokens' deviations, sd ~ sqrt(tokens)
        return {"target_logprob_sum": tokens * (level + shift) + noise, "new_tokens": tokens.astype(float)}
    return _pooled("target_logprob", rows(-FIDELITY_MARGIN), rows(0.0))


def rouge_seeds(rng, n, seeds=3):
    """A per-example score in percent (ROUGE-like: a prompt's own level Beta(2, 5) x 100, times a Gamma(4) factor
    per seed), 3 seeds pooled, A 1 point below B."""
    level = np.tile(100 * rng.beta(2.0, 5.0, n), seeds)
    a = level * rng.gamma(4.0, 0.25, len(level)) - ROUGE_MARGIN
    return _pooled("quality", {"quality": a}, {"quality": level * rng.gamma(4.0, 0.25, len(level))}, seeds=seeds)


def identity_gap(rng, n):
    """Observed minus predicted acceptance per prompt (claims.acceptance_identity), at the equivalence margin: the
    prompt's observed acceptance is Binomial(drafted, rate) / drafted over its drafted positions, its prediction
    the rate less the margin (rates Beta(0.6, 1.4): skewed, many prompts near 0)."""
    rate = rng.beta(*SKEWED, n)
    rows = _acceptance_rows(rng, rate)
    return _pooled("identity_gap", {"identity_gap": rows["accepted"] / rows["drafted"] - rate + IDENTITY_MARGIN})


def cases() -> list[Case]:
    """Every test and interval the report gives, each at its null's boundary."""
    return [
        Case("quality, 0/1 answers, few discordant (T = 0.1-like)", "binary",
             "B right on 70%; A right B wrong 1%, A wrong B right 3% of prompts", binary((0.01, 0.03)),
             -ACCURACY_MARGIN, lambda e: st.noninferior(e, ACCURACY_MARGIN)),
        Case("quality, 0/1 answers, many discordant (T = 1-like)", "binary",
             "B right on 70%; A right B wrong 20%, A wrong B right 22%", binary((0.20, 0.22)),
             -ACCURACY_MARGIN, lambda e: st.noninferior(e, ACCURACY_MARGIN)),
        Case("quality, 0/1 answers, 3 seeds pooled", "binary",
             "prompt accuracy 0.05 + 0.9 Beta(2, 1), A 0.02 below, seeds of A and B drawn apart", binary_seeds,
             -ACCURACY_MARGIN, lambda e: st.noninferior(e, ACCURACY_MARGIN)),
        Case("quality, ROUGE-like, 3 seeds pooled", "mean", "prompt level 100 Beta(2, 5) x Gamma(4) per seed",
             rouge_seeds, -ROUGE_MARGIN, lambda e: st.noninferior(e, ROUGE_MARGIN)),
        Case("fidelity (log p per token)", "ratio", "heavy-tailed tokens (t with 3 df), prompts of unequal length",
             fidelity, -FIDELITY_MARGIN, lambda e: st.noninferior(e, FIDELITY_MARGIN)),
        Case("acceptance, A - B", "ratio", f"prompt acceptance Beta{SKEWED} (skewed), K = 5",
             acceptance_difference, 0.0, st.superior),
        Case("acceptance, one method", "ratio", f"prompt acceptance Beta{SKEWED} (skewed), K = 5",
             acceptance_one, ACCEPTANCE_TRUTH),
        Case("tokens/s, A / B", "ratio", "prompt pace Gamma(8), lognormal(0, 0.3) noise, 5% stalls at 3x",
             speedup, 1.0, lambda e: st.superior(e, 1.0)),
        Case("acceptance identity (equivalence)", "mean", f"binomial per-prompt gaps, acceptance Beta{SKEWED}",
             identity_gap, IDENTITY_MARGIN, lambda e: st.equivalent(e, IDENTITY_MARGIN)),
        # calibrate seeds the draws of each case by its position here: append new cases, never insert
        Case("quality, 0/1 answers, 3 seeds pooled, A and B alike", "binary",
             "prompt accuracy 0.05 + 0.9 Beta(2, 1); per seed A right B wrong 1%, A wrong B right 3%",
             binary_seeds_alike, -ACCURACY_MARGIN, lambda e: st.noninferior(e, ACCURACY_MARGIN)),
        Case("accuracy, one method, 0/1 answers", "binary", "right with probability 0.02", accuracy(0.02), 0.02),
        Case("accuracy, one method, 0/1 answers", "binary", "right with probability 0.7", accuracy(0.7), 0.7),
        Case("accuracy, one method, 3 seeds pooled", "binary", "prompt accuracy 0.05 + 0.9 Beta(2, 1)",
             accuracy_seeds, 0.65),
        Case("retention (A / B), 0/1 answers", "binary", "B right on 70%; A right B wrong 0.5%, A wrong B right 4%",
             binary((0.005, 0.04), relative=True), 0.665 / 0.7),
        Case("retention (A / B), 0/1 answers, 3 seeds pooled, A and B alike", "binary",
             "prompt accuracy 0.05 + 0.9 Beta(2, 1); per seed A right B wrong 0.5%, A wrong B right 4%",
             retention_seeds, 1 - 0.035 / (0.05 + 0.9 * 2 / 3)),
    ]


def calibrate(grid=GRID, runs: int = RUNS, seed: int = 0, only: list[Case] | None = None,
              floor: bool = True) -> pd.DataFrame:
    """One row per (case, n): the false "holds" rate (nan for an interval without a test), the interval's coverage
    and how often an interval was given, over `runs` seeded simulated reproductions; floor False gives every
    n its test and interval (to find the minima), True as the report does (none below statistics.MIN_PROMPTS).
    intervals: the share of the estimates with a value that have an interval (a ratio whose denominator is 0 has
    neither)."""
    rows = []
    for i, case in enumerate(only or cases()):
        for n in grid:
            rng = np.random.default_rng([seed, i, n])
            holds = covered = given = known = 0
            for _ in range(runs):
                e = case.draw(rng, n)(floor)
                if case.test is not None and case.test(e).verdict() == st.HOLDS:
                    holds += 1
                known += e.known
                if np.isfinite(e.low):
                    given += 1
                    covered += e.low <= case.truth <= e.high
            rows.append({"case": case.name, "kind": case.kind, "n": n, "runs": runs, "data": case.data,
                         "false_holds": holds / runs if case.test is not None else np.nan,
                         "coverage": covered / given if given else np.nan,
                         "intervals": given / known if known else np.nan})
    return pd.DataFrame(rows)


def passes(table: pd.DataFrame) -> pd.Series:
    """Whether each row is calibrated: false holds at most LEVEL_MAX (or no test), coverage at least COVERAGE_MIN (or
    no interval)."""
    return ((table["false_holds"].isna() | (table["false_holds"] <= LEVEL_MAX))
            & (table["coverage"].isna() | (table["coverage"] >= COVERAGE_MIN)))


def minimum(table: pd.DataFrame) -> dict[str, int]:
    """Per estimate kind, the smallest n of the grid from which every case of that kind is calibrated at n and at
    every larger n (None: at no n)."""
    out = {}
    for kind, g in table.assign(ok=passes(table)).groupby("kind"):
        ok = g.groupby("n")["ok"].all().sort_index()
        failing = ok.index[~ok]
        larger = ok.index[ok.index > failing.max()] if len(failing) else ok.index
        out[kind] = int(larger.min()) if len(larger) else None
    return out


def markdown(table: pd.DataFrame) -> str:
    """The table as RESULTS.md shows it: per case, 'false holds / coverage' at each n (– where there is none), in
    italics where the report gives no test or interval (under statistics.MIN_PROMPTS)."""
    grid = sorted(table["n"].unique())
    lines = ["| test (estimate kind) | data | " + " | ".join(f"n = {n}" for n in grid) + " |",
             "|---" * (2 + len(grid)) + "|"]
    for (case, kind, data), g in table.groupby(["case", "kind", "data"], sort=False):
        cells = []
        for r in g.sort_values("n").itertuples():
            text = " / ".join("–" if np.isnan(v) else f"{100 * v:.1f}%" for v in (r.false_holds, r.coverage))
            cells.append(text if r.n >= st.MIN_PROMPTS[kind] else f"*{text}*")
        lines.append(f"| {case} ({kind}) | {data} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# a family's true quality losses in margins, least lenient first: knobs that keep quality then lose it, and knobs
# that all lose at least the margin (the first at the null's boundary, where a test is likeliest to hold falsely)
CHAINS = {"rising": (0.0, 0.5, 0.9, 1.1, 1.5, 2.0, 3.0), "lossy": (1.0, 1.25, 1.5, 2.0, 3.0)}
N_DEV = (51, 100, 300)  # dev prompts of the simulated sweeps


def sweep(rng, n: int, losses: tuple[float, ...], margin: float = ACCURACY_MARGIN) -> tuple[list[st.Test], list[float]]:
    """One simulated dev sweep of a family on n prompts, 0/1 answers: strict right on 70%; the j-th knob (least
    lenient first) right where strict is wrong with probability 0.01 + 0.02 j, wrong where it is right with that
    plus losses[j] margins (discordance rising with leniency). Returns each knob's non-inferiority test against
    strict at margin, and its estimated gain, as runs.sweep.choose_family computes them."""
    b = rng.random(n) < 0.7  # [n] strict's answers
    tests, gains = [], []
    for j, loss in enumerate(losses):
        d10 = 0.01 + 0.02 * j
        d01 = d10 + loss * margin
        u = rng.random(n)  # [n]
        a = np.where(b, u >= d01 / 0.7, u < d10 / 0.3)
        e = _pooled("quality", {"quality": a.astype(float)}, {"quality": b.astype(float)}, binary=True)(True)
        tests.append(st.noninferior(e, margin))
        gains.append(e.value)
    return tests, gains


def selections(n_dev=N_DEV, runs: int = RUNS, seed: int = 0, margin: float = ACCURACY_MARGIN,
               chains: dict | None = None) -> pd.DataFrame:
    """One row per (chain, selection, n_dev) over `runs` seeded simulated sweeps (`sweep`; every selection reads the
    same sweeps): violations, how often the chosen knob truly loses at least the margin (strict, chosen when a selection
    admits nothing, loses 0); relaxed, how often it chose a knob at all; mean_loss, the chosen knob's true loss in
    margins. The highest acceptance among the admitted knobs is the most lenient one (acceptance rises with
    leniency), as runs.sweep.pick chooses."""
    rows = []
    for c, (chain, losses) in enumerate((chains or CHAINS).items()):
        for n in n_dev:
            rng = np.random.default_rng([seed, c, n])
            leads = {r: [] for r in st.ADMIT}  # the index of each sweep's chosen knob (None: strict)
            for _ in range(runs):
                tests, gains = sweep(rng, n, losses, margin)
                for r in st.ADMIT:
                    leads[r].append(max((j for j, ok in enumerate(st.admitted(r, tests, gains, margin)) if ok),
                                        default=None))
            for r, lead in leads.items():
                loss = np.array([0.0 if j is None else losses[j] for j in lead])
                rows.append({"chain": chain, "selection": r, "n_dev": n, "runs": runs,
                             "violations": float(np.mean(loss >= 1)),
                             "relaxed": float(np.mean([j is not None for j in lead])), "mean_loss": float(loss.mean())})
    return pd.DataFrame(rows)


def selections_markdown(table: pd.DataFrame) -> str:
    """Per chain, selection and n_dev: 'violations / relaxed' in percent and the chosen knob's mean true loss
    in margins."""
    grid = sorted(table["n_dev"].unique())
    lines = ["| knobs' true losses (margins) | selection | " + " | ".join(f"n_dev = {n}" for n in grid) + " |",
             "|---" * (2 + len(grid)) + "|"]
    for (chain, selection), g in table.groupby(["chain", "selection"], sort=False):
        losses = ", ".join(f"{x:g}" for x in CHAINS.get(chain, ())) or chain
        cells = [f"{100 * r.violations:.1f}% / {100 * r.relaxed:.0f}% / {r.mean_loss:.2f}"
                 for r in g.sort_values("n_dev").itertuples()]
        lines.append(f"| {chain}: {losses} | {selection} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
