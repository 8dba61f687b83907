"""Statistics over prompts: the unit of every interval, test and claim.

Every seed decodes the same eval prompts, so (seed, prompt) pairs are not independent: the seeds of a prompt are
pooled first (their counts summed, their quality averaged) and intervals are taken over prompts. A metric is one
of two kinds (`METRICS`, the one place each is defined):

- a ratio of totals over prompts and seeds, R = sum(y) / sum(x): acceptance = accepted / drafted, tokens/s = new
  tokens / seconds, target log p per token, ...; a 256-token answer weighs 256 times a one-token one, as in the
  run-level summary;
- a mean over prompts of a per-prompt value (a task's quality: accuracy, ROUGE-2, pass@1).

A paired comparison of methods A and B on the same prompts is a difference (A - B) or, for speed, a ratio
(tokens/s of A over that of B, e.g. the speedup over target-only decoding), each over the prompts both decoded.

Every interval is a t-interval over the n prompts (n - 1 degrees of freedom): for a mean, of its per-prompt values;
for a ratio of totals, a difference of two or a ratio of two (on the log scale, exponentiated), with the jackknife's
standard error over prompts (each prompt left out in turn: numerator and denominator of a prompt leave together).
0/1 answers (accuracy, pass@1) have their own: one method's accuracy an exact (Clopper-Pearson) interval, a paired
difference Tango's score interval and a retention (ratio) Tang, Tang and Chan's, a prompt's seeds counting as
fractions (`discordance`).
Below the fewest prompts on which the simulations of diversed.calibration find a kind's tests and intervals
calibrated (MIN_PROMPTS), an estimate is descriptive: a value, no interval, no test, and the reason said.

Tests are one-sided at ALPHA / 2 = 0.025, the sides of the two-sided 95% interval:

- superiority: the interval lies above 0 (above 1 for a ratio);
- non-inferiority with margin delta: the lower bound lies above -delta ("no worse" is never "not significantly
  worse"); inferiority: the upper bound lies below -delta;
- equivalence within +-delta: both one-sided tests (TOST).

A non-inferiority or equivalence test that is inconclusive says how many prompts its margin would need
(`needed_prompts`: 80% power when the true difference is 0). Several settings tested for one claim are one family:
Holm's step-down adjustment (`holm`) keeps the chance of any false "holds" at the nominal level.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats

ALPHA = 0.05  # two-sided: 95% intervals, one-sided tests at ALPHA / 2
POWER = 0.8  # the power `needed_prompts` plans for
RISK = 0.05  # the most a certified knob may risk losing more than its margin (runs.sweep, Learn-then-Test)

# metric -> (numerator, denominator) summed over the prompts and seeds, or None: the mean over prompts of the
# per-prompt column of that name. A run's prompt rows (diversed.runs.run.Run.prompt_rows) carry every column here.
METRICS: dict[str, tuple[str, str] | None] = {
    "draft_acceptance_rate": ("accepted", "drafted"),  # alpha
    "mean_acceptance_length": ("new_tokens", "steps"),  # tau
    "tokens_per_s": ("new_tokens", "seconds"),
    "correct_per_s": ("correct", "seconds"),  # a 0/1 metric's right answers per second (correct: its quality)
    "mean_weight": ("weight_sum", "drafted"),  # w over drafted positions
    "bias_tv": ("bias_tv_sum", "new_tokens"),
    "kl": ("kl_sum", "new_tokens"),  # KL(emitted || p) in nats per token
    "target_logprob": ("target_logprob_sum", "new_tokens"),
    "target_argmax_agreement": ("target_argmax_sum", "new_tokens"),
    "quality": None,  # a task metric per example; a fidelity task's quality is its target_logprob (tables)
    "identity_gap": None,  # observed - predicted acceptance per prompt (claims.acceptance_identity)
    "front_gap": None,  # observed acceptance - the static front's at the same bias, per prompt (claims)
    "front_gap_zero": None,  # observed acceptance - 1 + TV(p, q): the front at zero bias (rules that test jointly)
    "weight_sd": None,  # standard deviation of w within a prompt
    "length": None,  # new tokens of a prompt's completion (its output length)
}
SUMS = sorted({c for pair in METRICS.values() if pair for c in pair})  # the columns pooled by summing
# The fewest prompts on which an estimate of each kind gets an interval and a test: below them it is descriptive.
# Found by diversed.calibration's simulations (tests/test_calibration.py recomputes them): the smallest n of its
# grid (4, 12, 26, 51, 200) from which every test of the kind holds falsely at most 3.5% of the time at its null's
# boundary and every interval covers at least 93%. binary: paired 0/1 answers (Tango's test); mean: a mean over
# prompts; ratio: a ratio of totals, a difference or ratio of two.
MIN_PROMPTS = {"binary": 4, "mean": 4, "ratio": 12}


@dataclass(frozen=True)
class Estimate:
    """A statistic over n prompts: its value, 95% interval [low, high], and its standard error se with df degrees
    of freedom (on the log scale when log: a ratio of ratios)."""

    value: float
    low: float
    high: float
    n: int
    se: float = math.nan
    log: bool = False
    # paired 0/1 answers: prompts (A right B wrong, A wrong B right), each prompt's seeds counting as its fraction
    discordant: tuple[float, float] | None = None
    missing: int = 0  # prompts left out for want of a value (a NaN quality, an unrecorded per-token list)
    minimum: int = 2  # the fewest prompts its kind is tested on (MIN_PROMPTS): below them, descriptive

    @property
    def half(self) -> float:
        """Half the interval's width (the '±' of a table cell)."""
        return (self.high - self.low) / 2

    @property
    def known(self) -> bool:
        return not math.isnan(self.value)

    def _t(self, threshold: float) -> float:
        if self.log:
            return (math.log(self.value) - math.log(threshold)) / self.se if threshold > 0 else math.inf
        return (self.value - threshold) / self.se

    @property
    def testable(self) -> bool:
        """Prompts enough for its kind (MIN_PROMPTS), a known value and a spread to test with: paired 0/1 answers
        are tested on their discordant prompts (Tango's score test), which needs none; any other zero spread is no
        evidence (identical differences on every prompt say nothing of the prompts not seen)."""
        return (self.n >= max(2, self.minimum) and self.known
                and (self.discordant is not None or self.se > 0))

    def p_above(self, threshold: float) -> float:
        """One-sided p-value of H0: value <= threshold against H1: value > threshold (nan when not testable)."""
        if not self.testable:
            return math.nan
        if self.discordant is not None:
            return float(stats.norm.sf(tango_z(*self.discordant, self.n, threshold)))
        return float(stats.t.sf(self._t(threshold), self.n - 1))

    def p_below(self, threshold: float) -> float:
        """One-sided p-value of H0: value >= threshold against H1: value < threshold."""
        if not self.testable:
            return math.nan
        if self.discordant is not None:
            return float(stats.norm.cdf(tango_z(*self.discordant, self.n, threshold)))
        return float(stats.t.cdf(self._t(threshold), self.n - 1))

    def text(self, scale: float = 1.0, digits: int = 3, sign: bool = False) -> str:
        """'value ± half' (the half-width of the 95% interval), or 'value [low, high]' where the interval is not
        symmetric at the digits shown (a ratio's, a score interval's); '–' when unknown."""
        if not self.known:
            return "–"
        value = f"{self.value * scale:{'+' if sign else ''}.{digits}f}"
        if math.isnan(self.half):
            return value
        up, down = (self.high - self.value) * scale, (self.value - self.low) * scale
        if abs(up - down) >= 10 ** -digits:
            return f"{value} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"
        return f"{value} ± {self.half * scale:.{digits}f}"


NONE = Estimate(math.nan, math.nan, math.nan, 0)


def mean_estimate(x) -> Estimate:
    """The mean of per-prompt values and its 95% t-interval."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return jackknife_estimate(float(x.mean()), (x.sum() - x) / max(len(x) - 1, 1)) if len(x) else NONE


def ratio_leave_one_out(y, x) -> tuple[float, np.ndarray]:
    """R = sum(y) / sum(x) and its leave-one-prompt-out values R_(i) = (sum(y) - y_i) / (sum(x) - x_i)."""
    y, x = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(y.sum()) / x.sum()), (y.sum() - y) / (x.sum() - x)


def jackknife_estimate(value: float, loo, log: bool = False) -> Estimate:
    """value with the 95% interval of its jackknife over prompts: se^2 = (n - 1) / n sum_i (v_(i) - mean v_(.))^2
    over the leave-one-prompt-out values v_(i), t with n - 1 df (log: value and v_(i) on the log scale, the
    interval exponentiated). For a mean this is the t-interval; for a ratio of totals it widens the delta
    method's where one prompt's weight dominates, which is what keeps it calibrated on few prompts
    (diversed.calibration)."""
    loo = np.asarray(loo, dtype=float)
    n = len(loo)
    if n < 2 or not math.isfinite(value) or (log and value <= 0) or not np.isfinite(loo).all() or (
            log and (loo <= 0).any()):
        return Estimate(value if n else math.nan, math.nan, math.nan, n)
    v = np.log(loo) if log else loo
    se = float(math.sqrt((n - 1) / n * ((v - v.mean()) ** 2).sum()))
    half = float(stats.t.ppf(1 - ALPHA / 2, n - 1)) * se
    if log:
        return Estimate(value, value * math.exp(-half), value * math.exp(half), n, se, log=True)
    return Estimate(value, value - half, value + half, n, se)


def ratio_estimate(y, x) -> Estimate:
    """The ratio of totals sum(y) / sum(x) over prompts and its 95% interval."""
    return jackknife_estimate(*ratio_leave_one_out(y, x))


def quality_gain(a: pd.DataFrame, b: pd.DataFrame, spec) -> Estimate:
    """A's quality over B's by their task metric spec (tasks.Metric), paired over the prompts both decoded (binary:
    on the discordant prompts), signed so that a positive value is better whatever the metric's direction."""
    a, b = (a, b) if spec.higher_is_better else (b, a)
    return paired(a, b, spec.statistic, binary=spec.binary)


def tango_z(a: int, b: int, n: int, delta: float) -> float:
    """Tango's (1998) score statistic for a difference of paired proportions: n pairs, a discordant A-right-B-wrong
    and b A-wrong-B-right; H0: P(A right) - P(B right) = delta. Z = (a - b - n delta) / sqrt(n (2 u + delta (1 -
    delta))), u the maximum-likelihood P(A wrong, B right) under H0: the root of 2n u^2 - B u - C = 0 with B = a (1
    + delta) + b (1 - delta) - 2 n delta, C = b delta (1 - delta) (tests/test_statistics.py checks it against a
    numerical maximisation). delta = 0 gives McNemar's; Z = 0 where H0 leaves no variance and no difference."""
    B = a * (1 + delta) + b * (1 - delta) - 2 * n * delta
    C = b * delta * (1 - delta)
    u = (B + math.sqrt(max(B * B + 8 * n * C, 0.0))) / (4 * n)
    var = n * (2 * u + delta * (1 - delta))
    diff = a - b - n * delta
    if var <= 0:
        return 0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def tango_estimate(a: float, b: float, n: int, se: float) -> Estimate:
    """The paired difference of 0/1 answers (a - b) / n with Tango's score interval (the deltas its two one-sided
    tests at ALPHA / 2 do not reject) and the discordant counts its tests use; se: the t-interval's, for planning
    (needed_prompts). With several seeds a prompt's counts are the fractions of its seeds (`discordance`): the
    variance Tango's test assumes for one answer per prompt bounds that of a mean over seeds (the mean of m
    exchangeable differences varies no more than one of them), so the test stays at or below its level however
    alike the seeds are, and is Tango's own when they agree."""
    z = stats.norm.isf(ALPHA / 2)
    edge = 1 - 1e-9

    def bound(target: float, outside: float) -> float:
        f = lambda d: tango_z(a, b, n, d) - target  # noqa: E731  decreasing in d
        value = (a - b) / n
        if f(outside) * f(value) > 0:
            return outside
        return float(optimize.brentq(f, min(value, outside), max(value, outside), xtol=1e-10))

    return Estimate((a - b) / n, bound(z, -edge), bound(-z, edge), n, se, discordant=(a, b))


CELLS = ("a_only", "b_only", "both")  # per (seed, prompt) of paired 0/1 answers: A right B wrong, A wrong B right,
# both right; pooled over a prompt's seeds, the fractions of its seeds in each


def zero_one(x: np.ndarray) -> bool:
    """Whether every known value is 0 or 1."""
    return bool(np.isin(x[np.isfinite(x)], (0, 1)).all())


def discordance(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """The CELLS columns of paired 0/1 answers x (A) and y (B), one per (seed, prompt) unit, nan where either is
    missing; none ({}) when some answer is neither 0 nor 1."""
    known = np.isfinite(x) & np.isfinite(y)
    if not (zero_one(x) and zero_one(y)):
        return {}
    with np.errstate(invalid="ignore"):
        cells = (x * (1 - y), (1 - x) * y, x * y)
    return {c: np.where(known, v, np.nan) for c, v in zip(CELLS, cells, strict=True)}


def ratio_score_z(a: float, b: float, both: float, n: int, theta: float) -> float:
    """Tang, Tang and Chan's (2003) score statistic for a ratio of paired proportions: n pairs, a A-right-B-wrong, b
    A-wrong-B-right, `both` both right; H0: P(A right) / P(B right) = theta. Z = (a + both - theta (b + both)) /
    sqrt(n (1 + theta) u + (a + b + both)(theta - 1)), u the maximum-likelihood P(A wrong, B right) under H0, the
    root of n (1 + theta) u^2 + B u + C = 0 with B = (both + b) theta^2 - (both + a + 2 b), C = b (1 - theta)(a +
    b + both) / n (tests/test_statistics.py checks it against a numerical maximisation). Z = 0 where H0 leaves no
    variance and no difference."""
    A, B = n * (1 + theta), (both + b) * theta ** 2 - (both + a + 2 * b)
    C = b * (1 - theta) * (a + b + both) / n
    u = (-B + math.sqrt(max(B * B - 4 * A * C, 0.0))) / (2 * A)
    var = n * (1 + theta) * u + (a + b + both) * (theta - 1)
    diff = a + both - theta * (b + both)
    if var <= 1e-12:
        return 0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def ratio_score_estimate(a: float, b: float, both: float, n: int) -> Estimate:
    """P(A right) / P(B right) of paired 0/1 answers, (a + both) / (b + both), with the score interval of Tang, Tang
    and Chan (the thetas their two one-sided tests at ALPHA / 2 do not reject). Identical answers keep a width (36
    right of 51 on both sides: [0.904, 1.107]), where a jackknife without spread had none."""
    if b + both <= 0:
        return Estimate(math.nan, math.nan, math.nan, n)
    value, z = (a + both) / (b + both), stats.norm.isf(ALPHA / 2)

    def bound(target: float, outside: float) -> float:
        f = lambda t: ratio_score_z(a, b, both, n, t) - target  # noqa: E731  decreasing in theta
        lo, hi = min(value, outside), max(value, outside)
        if lo == hi or f(lo) * f(hi) > 0:
            return outside
        return float(optimize.brentq(f, lo, hi, xtol=1e-10))

    return Estimate(value, bound(z, 1e-9) if value > 0 else 0.0, bound(-z, 1e9), n)


def proportion_estimate(x: np.ndarray) -> Estimate:
    """The mean of per-prompt fractions of 0/1 answers (a prompt's seeds pooled) with the Clopper-Pearson interval
    of its sum over n prompts: exact for one answer per prompt, and wider than needed for several (a mean of a
    prompt's seeds varies no more than one answer). The t-interval it replaces covered 64% at an accuracy of 0.02
    on 51 prompts."""
    n, k = len(x), float(np.sum(x))
    if n == 0:
        return NONE
    low = float(stats.beta.ppf(ALPHA / 2, k, n - k + 1)) if k > 0 else 0.0
    high = float(stats.beta.isf(ALPHA / 2, k + 1, n - k)) if k < n else 1.0
    se = float(np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return Estimate(k / n, low, high, n, se)


def pool_seeds(units: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (keys, prompt): the SUMS columns summed over seeds, every other METRICS column averaged."""
    means = [c for c, pair in METRICS.items() if pair is None and c in units]
    sums = [c for c in SUMS if c in units]
    agg = {c: "sum" for c in sums} | {c: "mean" for c in means}
    return units.groupby([*keys, "prompt"], as_index=False, dropna=False).agg(agg | {"seed": "nunique"})


def _columns(metric: str) -> list[str]:
    kind = METRICS[metric]
    return list(kind) if kind else [metric]


def pool_prompts(values: dict[str, np.ndarray], codes: np.ndarray, prompts: int) -> dict[str, np.ndarray]:
    """Each column's value per prompt code, its rows (seeds) pooled: SUMS summed, the others averaged (nan rows
    left out)."""
    out = {}
    for c, v in values.items():
        if c in SUMS:
            out[c] = np.bincount(codes, weights=v, minlength=prompts)
        else:
            ok = ~np.isnan(v)
            n = np.bincount(codes[ok], minlength=prompts)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[c] = np.bincount(codes[ok], weights=v[ok], minlength=prompts) / n
    return out


def prompt_estimate(metric: str, a: dict[str, np.ndarray], b: dict[str, np.ndarray] | None = None,
                    relative: bool = False, binary: bool = False, floor: bool = True) -> Estimate:
    """metric over per-prompt columns a (or A - B, A / B when relative, with b). binary, for 0/1 answers: one
    method's accuracy with its exact interval (proportion_estimate); A - B on the discordant prompts
    (tango_estimate) and A / B by the score interval (ratio_score_estimate), both read from a's CELLS columns (the
    fractions of each prompt's seeds, statistics.discordance). Below its kind's MIN_PROMPTS the estimate has no
    interval and no test (floor False: it keeps them, for the calibration that finds the minima)."""
    kind = METRICS[metric]
    sides = [a] if b is None else [a, b]
    binary = binary and (all(c in a for c in CELLS) if b is not None else
                         kind is None and bool(np.all((a[metric] >= 0) & (a[metric] <= 1) | np.isnan(a[metric]))))
    cols = [*(kind or [metric]), *(c for c in CELLS if binary and b is not None)]  # a prompt needs each, on both sides
    ok = np.logical_and.reduce([np.isfinite(side[c]) for side in sides for c in cols if c in side])  # [prompts]
    missing = int((~ok).sum())
    if not ok.any():
        return dataclasses.replace(NONE, missing=missing)
    a, b = ({c: v[ok] for c, v in side.items()} for side in (a, b or a))
    if binary:
        e = _binary_estimate(metric, a, b if len(sides) == 2 else None, relative)
    elif kind is None and not relative:
        e = mean_estimate(a[metric] if len(sides) == 1 else a[metric] - b[metric])
    else:  # a ratio of totals; a mean's relative comparison is the ratio of totals over one unit per prompt
        y, x = kind or (metric, "one")
        a, b = ({"one": np.ones(int(ok.sum()))} | side for side in (a, b))
        ra, la = ratio_leave_one_out(a[y], a[x])
        if len(sides) == 1:
            e = jackknife_estimate(ra, la)
        else:
            rb, lb = ratio_leave_one_out(b[y], b[x])
            with np.errstate(divide="ignore", invalid="ignore"):
                ra, rb = np.float64(ra), np.float64(rb)  # a zero total gives inf or nan (no interval), not an error
                e = (jackknife_estimate(float(ra / rb), la / lb, log=True) if relative
                     else jackknife_estimate(float(ra - rb), la - lb))
    kind = "binary" if binary else "ratio" if kind or relative else "mean"
    e = dataclasses.replace(e, missing=missing, minimum=MIN_PROMPTS[kind])
    if floor and e.n < e.minimum:
        e = dataclasses.replace(e, low=math.nan, high=math.nan)
    return e


def _binary_estimate(metric: str, a: dict[str, np.ndarray], b: dict[str, np.ndarray] | None,
                     relative: bool) -> Estimate:
    """prompt_estimate's 0/1 answers (a: one method's, or a with the CELLS of A against B)."""
    if b is None:
        return proportion_estimate(a[metric])
    only_a, only_b, both = (float(a[c].sum()) for c in CELLS)
    n = len(a[metric])
    if relative:
        return ratio_score_estimate(only_a, only_b, both, n)
    se = mean_estimate(a[metric] - b[metric]).se  # the t-interval's, for planning (needed_prompts)
    return tango_estimate(only_a, only_b, n, se)


def estimate(units: pd.DataFrame, metric: str, binary: bool = False) -> Estimate:
    """A metric of one method over its units (rows of the prompt table: (seed, prompt), any seeds), seeds pooled
    within each prompt first. binary: a 0/1 metric (tasks' Metric.binary), whose interval is exact where every
    answer is 0 or 1 (proportion_estimate)."""
    if units.empty:
        return NONE
    codes, prompts = pd.factorize(units["prompt"])
    values = {c: units[c].to_numpy(dtype=float) for c in _columns(metric)}
    binary = binary and metric in values and zero_one(values[metric])
    return prompt_estimate(metric, pool_prompts(values, codes, len(prompts)), binary=binary)


def paired(a: pd.DataFrame, b: pd.DataFrame, metric: str, relative: bool = False, binary: bool = False) -> Estimate:
    """metric(A) - metric(B) over the (seed, prompt) units both decoded, seeds pooled within each prompt
    (relative: the ratio metric(A) / metric(B), e.g. a speedup from tokens/s). Each side holds at most one row
    per (seed, prompt). binary: a 0/1 metric (tasks' Metric.binary); where every answer is 0 or 1 the difference
    is tested on the discordant prompts (tango_estimate), A's and B's answers paired by seed within a prompt."""
    if a.empty or b.empty:
        return NONE
    codes, prompts = pd.factorize(pd.concat([a["prompt"], b["prompt"]], ignore_index=True))
    stride = len(prompts) + 1
    key_a = a["seed"].to_numpy(dtype=np.int64) * stride + codes[:len(a)]
    key_b = b["seed"].to_numpy(dtype=np.int64) * stride + codes[len(a):]
    for side, keys in (("A", key_a), ("B", key_b)):
        if len(np.unique(keys)) < len(keys):
            raise ValueError(f"paired comparison: side {side} holds two rows for one (seed, prompt); select one "
                             "method, K and setting per side")
    _, ia, ib = np.intersect1d(key_a, key_b, return_indices=True)
    if not len(ia):
        return NONE
    common, n = np.unique(codes[:len(a)][ia], return_inverse=True)  # the prompts both decoded, renumbered
    ua = {c: a[c].to_numpy(dtype=float)[ia] for c in _columns(metric)}  # [units both decoded]
    ub = {c: b[c].to_numpy(dtype=float)[ib] for c in _columns(metric)}
    if binary:
        ua |= discordance(ua[metric], ub[metric])
    pa, pb = pool_prompts(ua, n, len(common)), pool_prompts(ub, n, len(common))
    return prompt_estimate(metric, pa, pb, relative, binary)


def needed_prompts(e: Estimate, margin: float, sides: int = 1, family: int = 1,
                   level: float = ALPHA / 2) -> int | None:
    """Prompts a non-inferiority test (sides 1) or an equivalence test (sides 2: both one-sided tests must reject,
    each with power 1 - (1 - POWER) / 2) with this margin needs for 80% power when the true difference is 0, at
    the spread behind e (`planned_prompts`); None when unknown. family: the settings of a claim whose "holds" Holm
    adjusts, planned at Holm's strictest step (level / family); level: the one-sided test's."""
    if not (e.n >= 2 and margin > 0):
        return None
    if e.discordant is not None:
        return planned_prompts(sum(e.discordant) / e.n, margin, sides, family, binary=True, level=level)
    return planned_prompts(e.se * math.sqrt(e.n), margin, sides, family, level=level) if e.se > 0 else None


def planned_prompts(spread: float, margin: float, sides: int = 1, family: int = 1, binary: bool = False,
                    level: float = ALPHA / 2) -> int:
    """needed_prompts from the per-prompt spread. A mean (spread: the per-prompt standard deviation): Guenther's
    closed form for the one-sample t-test, n = ((z_a + z_b) sd / margin)^2 + z_a^2 / 2, which rounds up to
    statsmodels' TTestPower solution wherever the margin is under 0.6 sd (tests/test_statistics.py). Paired 0/1
    answers tested by Tango's test (binary; spread: the fraction of discordant prompts psi): n = ((z_a sqrt(v0) +
    z_b sqrt(psi)) / margin)^2, v0 the variance per prompt Tango's test assumes at the margin for expected counts
    psi / 2 each way (Nam's 1997 formula: with psi = 0 it is the n from which no discordant prompt holds)."""
    z_a, z_b = stats.norm.isf(level / family), stats.norm.isf((1 - POWER) / sides)
    if not binary:
        return math.ceil(((z_a + z_b) * spread / margin) ** 2 + z_a ** 2 / 2)
    d = -margin
    B = spread / 2 * (1 + d) + spread / 2 * (1 - d) - 2 * d  # tango_z's B and C for one prompt's expected counts
    C = spread / 2 * d * (1 - d)
    u = (B + math.sqrt(max(B * B + 8 * C, 0.0))) / 4
    v0 = max(2 * u + d * (1 - d), 0.0)
    return math.ceil(((z_a * math.sqrt(v0) + z_b * math.sqrt(spread)) / margin) ** 2)


def resolvable_margin(e: Estimate) -> float:
    """The smallest margin a one-sided non-inferiority test over e's n prompts detects with 80% power when the true
    difference is 0 (needed_prompts solved for the margin, normal approximation); nan when unknown."""
    if not (e.n >= 2 and e.se > 0):
        return math.nan
    return float((stats.norm.isf(ALPHA / 2) + stats.norm.isf(1 - POWER)) * e.se)


HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
NOT_TESTED = "not tested"  # how the reason of a setting that has no test begins (it counts in no family)
IF_NULL = "if the true difference is 0"  # the assumption of every power statement


@dataclass(frozen=True)
class Test:
    """A one-sided test of one setting: p (its p-value for the claimed side), what a "fails" reads (p_against:
    the p-value of the opposite claim), and why an inconclusive one is so."""

    p: float
    p_against: float = math.nan
    why: str = ""  # e.g. "underpowered: n = 60, needs ≈ 900"
    need: int | None = None  # the prompts an underpowered margin needs
    plans: tuple[tuple[float, float, int, bool], ...] = ()  # planned_prompts' (spread, margin, sides, binary)
    # behind each "underpowered" in why
    on: str = ""  # what a "fails" is about, where the test joins parts (`both`): the part nearest to failing

    def verdict(self, p_adjusted: float | None = None, against_adjusted: float | None = None) -> str:
        """not tested when why says so; holds when p (or its family-adjusted value) is below ALPHA / 2, fails when
        p_against (or its adjusted value) is, else inconclusive."""
        if self.why.startswith(NOT_TESTED):
            return NOT_TESTED
        p = self.p if p_adjusted is None else p_adjusted
        against = self.p_against if against_adjusted is None else against_adjusted
        if p < ALPHA / 2:
            return HOLDS
        if against < ALPHA / 2:
            return FAILS
        return INCONCLUSIVE

    def in_family(self, family: int) -> Test:
        """The power statements planned for a Holm-adjusted "holds" over `family` settings (needed_prompts)."""
        if family < 2 or not self.plans:
            return self
        needs = [planned_prompts(spread, margin, sides, family, binary) for spread, margin, sides, binary in self.plans]
        each = iter(needs)
        why = re.sub(r"needs ≈ \d+", lambda _: f"needs ≈ {next(each)}", self.why)
        return dataclasses.replace(self, why=why, need=max(needs))


def superior(e: Estimate, above: float = 0.0) -> Test:
    """The value lies above `above` (0 for a difference, 1 for a ratio); inconclusive when its interval holds it."""
    test = Test(e.p_above(above), e.p_below(above))
    if test.verdict() != INCONCLUSIVE:
        return test
    return Test(test.p, test.p_against, f"the interval includes {above:g}" if e.testable else untestable(e))


def untestable(e: Estimate) -> str:
    """Why an estimate gives no test."""
    if e.n == 0 and e.missing:
        return f"no per-prompt value on its {e.missing} prompts (a corpus metric, or unscored): not testable per prompt"
    if e.n < 2 or not e.known:
        return f"n = {e.n} prompts"
    if e.n < e.minimum:
        return (f"descriptive: n = {e.n} prompts, under the {e.minimum} on which its test and interval are "
                "calibrated")
    return f"no spread over its {e.n} prompts (the same difference on each): no test"


def noninferior(e: Estimate, margin: float) -> Test:
    """A - B is no worse than -margin: the lower bound above -margin; fails when the upper bound lies below it.
    Inconclusive ones state the prompts the margin needs when the interval is too wide for it."""
    test = Test(e.p_above(-margin), e.p_below(-margin))
    return _powered(test, e, margin)


def equivalent(e: Estimate, margin: float) -> Test:
    """|A - B| < margin (two one-sided tests); fails when the interval lies wholly outside +-margin, on either side:
    Holm over its two p-values (as `both`), so that "fails" too stays at ALPHA / 2."""
    against = min(holm([e.p_below(-margin), e.p_above(margin)]))
    test = Test(max(e.p_above(-margin), e.p_below(margin)), against)
    return _powered(test, e, margin, sides=2)


def _powered(test: Test, e: Estimate, margin: float, sides: int = 1) -> Test:
    if test.verdict() != INCONCLUSIVE:
        return test
    need = needed_prompts(e, margin, sides)
    if not e.testable:
        return Test(test.p, test.p_against, untestable(e))
    if need is not None and need > e.n:
        binary = e.discordant is not None
        spread = sum(e.discordant) / e.n if binary else e.se * math.sqrt(e.n)
        few = f"; too few discordant prompts: {e.discordant[0]:g} gained, {e.discordant[1]:g} lost" if binary else ""
        return Test(test.p, test.p_against, f"underpowered: n = {e.n}, needs ≈ {need} {IF_NULL}{few}", need,
                    ((spread, margin, sides, binary),))
    return test


def differ(samples: list[np.ndarray], what: str = "group") -> Test:
    """The means of several groups (e.g. the learned w's per-prompt means per task) are not all equal: Welch's t-test
    for two groups, Alexander-Govern's for more. "Differ" has no side: the omnibus p-value as it is, against ALPHA /
    2 like every test here."""
    if len(samples) < 2 or any(len(x) < 2 for x in samples):
        return Test(math.nan, math.nan, f"fewer than two {what}s of two values: no comparison between {what}s")
    p = (stats.ttest_ind(*samples, equal_var=False) if len(samples) == 2 else stats.alexandergovern(*samples)).pvalue
    p = float(p) if math.isfinite(p) else 1.0
    return Test(p, math.nan, "" if p < ALPHA / 2 else f"{what} means not distinguishable")


def both(*tests: Test, **named: Test) -> Test:
    """An intersection-union test: every part must hold (p = the largest p, nan when any part has none: an
    untested part is no evidence); it fails when any part fails, Holm-adjusted over the parts (the smallest
    p_against times their number: unadjusted, two parts on their boundaries failed 5% of the time). Parts given by
    name (quality=..., speed=...) name what a "fails" is about (Test.on: the part with the smallest p_against)."""
    tests = (*tests, *named.values())
    open_ = [t for t in tests if t.why and t.verdict() == INCONCLUSIVE]
    need = max((t.need for t in open_ if t.need), default=None)
    p = [t.p for t in tests]
    against = [t.p_against for t in tests if not math.isnan(t.p_against)]
    nearest = min(named, key=lambda k: named[k].p_against if not math.isnan(named[k].p_against) else math.inf,
                  default="")
    return Test(math.nan if any(math.isnan(x) for x in p) else max(p), min(holm(against), default=math.nan),
                "; ".join(t.why for t in open_), need, tuple(plan for t in open_ for plan in t.plans), nearest)


def fixed_sequence(ps: list[float], level: float = RISK) -> int:
    """The fixed-sequence test of Learn-then-Test (Angelopoulos et al., arXiv 2110.01052): hypotheses in an order set
    before the data are rejected while each p-value is below level, stopping at the first that is not (nan
    included). Returns how many lead the sequence it rejected; the chance that any of them is true is at most level,
    with no adjustment, whatever the order and however the tests depend on one another."""
    for i, p in enumerate(ps):
        if not p < level:
            return i
    return len(ps)


CONFIDENCE = 0.99  # MLPerf LoadGen's early stopping: a latency percentile claimed at 99% confidence
PERCENTILES = (0.5, 0.9, 0.99)


@functools.cache
def min_passing(t: int, p: float, confidence: float = CONFIDENCE) -> int:
    """MLPerf LoadGen's early-stopping rule (loadgen/early_stopping.cc, tolerance 0): the fewest requests h within a
    latency beside t over it for which "the p-th percentile is within it" holds at `confidence`: P(at most t of
    h + t requests over it | each over it with probability 1 - p) = I_p(h, t + 1) <= 1 - confidence."""
    lo, hi = 1, 2
    while stats.binom.cdf(t, hi + t, 1 - p) > 1 - confidence:
        lo, hi = hi, 2 * hi
    while lo < hi:  # the smallest h in [lo, hi] that passes
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if stats.binom.cdf(t, mid + t, 1 - p) <= 1 - confidence else (mid + 1, hi)
    return lo


def requests_needed(p: float) -> int:
    """The fewest requests from which LoadGen's early stopping gives a p-th percentile (one request over it)."""
    return min_passing(1, p) + 1


def percentile_estimate(values: np.ndarray, p: float) -> float:
    """LoadGen's early-stopping estimate of the p-th percentile of n request latencies: the largest t (at least 1)
    whose min_passing(t) requests fit beside it in n, and the (n - t)-th smallest latency, which at least a share p
    of requests stay within at 99% confidence; nan under requests_needed(p) requests."""
    x = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    n, t = len(x), 0
    while min_passing(t + 1, p) + t + 1 <= n:
        t += 1
    return float(x[n - t - 1]) if t else math.nan


def admitted(select: str, tests: list[Test], gains: list[float], margin: float) -> list[bool]:
    """Which points of a family a selection (runs.settings.SELECTIONS describes each) lets a sweep choose. tests:
    each point's non-inferiority test against strict at margin, in the family's sequence (least lenient first);
    gains: each point's estimated quality over strict's, signed so that higher is better."""
    if select not in ADMIT:
        raise ValueError(f"unknown selection {select!r}; allowed: {', '.join(ADMIT)}")
    return ADMIT[select](tests, gains, margin)


def _certified(tests: list[Test], gains: list[float], margin: float) -> list[bool]:
    """The lead of the sequence that fixed_sequence rejects at RISK."""
    lead = fixed_sequence([t.p for t in tests])
    return [i < lead for i in range(len(tests))]


ADMIT = {  # each selection's admitted points, in the order runs.settings.SELECTIONS lists them
    "certified": _certified,
    "estimate": lambda tests, gains, margin: [bool(g >= -margin) for g in gains],  # nan: unscored, never admitted
    "noninferior": lambda tests, gains, margin: [t.verdict() == HOLDS for t in tests],  # each test on its own
}


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values of one family, min(1, max over j <= i of (m - j + 1) p_(j)) for the i-th
    smallest (nan stays nan and is no test). statsmodels' multipletests gives the same (tests/test_statistics.py)
    but collects the garbage on every call (~0.1 s), which the claims' simulations call thousands of times."""
    p = np.asarray(ps, dtype=float)
    out = np.full(len(p), np.nan)
    known = np.flatnonzero(~np.isnan(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = len(order)
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out.tolist()
