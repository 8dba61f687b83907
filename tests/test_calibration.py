"""The report's statistics calibrated by simulation (diversed.calibration): each test holds falsely at most 3.5% of
the time at its null's boundary and each interval covers at least 93%, wherever the report gives one; the minimum
prompts per estimate kind (statistics.MIN_PROMPTS) are the ones the simulations find."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from diversed import calibration
from diversed import statistics as st


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return calibration.calibrate(floor=False)  # every n tested: ~1 minute on one core


def test_the_minimum_prompts_are_the_calibrated_ones(table):
    assert calibration.minimum(table) == st.MIN_PROMPTS


def test_every_test_and_interval_the_report_gives_is_calibrated(table):
    given = table[table["n"] >= table["kind"].map(st.MIN_PROMPTS)]
    bad = given[~calibration.passes(given)]
    assert bad.empty, bad.to_string()
    assert (given["intervals"] == 1).all()  # nothing left out above the minimum: the rates are over every run


def test_below_its_minimum_an_estimate_has_no_interval_and_no_test():
    ratio = next(c for c in calibration.cases() if c.kind == "ratio" and c.test is not None)
    small = calibration.calibrate(grid=(4,), runs=50, only=[ratio])
    assert small["intervals"].item() == 0 and small["false_holds"].item() == 0
    e = ratio.draw(np.random.default_rng(0), 4)(True)
    assert math.isnan(e.low) and not e.testable
    assert st.untestable(e) == "descriptive: n = 4 prompts, under the 12 on which its test and interval are calibrated"
    assert ratio.test(e).why == st.untestable(e)


@pytest.mark.parametrize("n", [51, 100])
def test_three_seeds_a_prompt_hold_falsely_at_most_five_percent(n):
    """Seeds as decoding produces them (A's and B's seeds paired within a prompt, mostly alike), at the margin:
    false "holds" at most 5% on 51 x 3 and 100 x 3 (the t-test on the seeds' fractions held falsely 5-6%)."""
    seeded = [c for c in calibration.cases() if "3 seeds pooled" in c.name and c.test is not None]
    t = calibration.calibrate(grid=(n,), runs=2000, only=seeded)
    assert len(t) == 3 and (t["false_holds"] <= 0.05).all(), t.to_string()


def test_a_miscalibrated_interval_is_caught():
    """The check can fail: intervals of half the width (a t-interval's se halved) fail coverage at every n."""
    case = next(c for c in calibration.cases() if c.name.startswith("acceptance, one"))

    def narrow(rng, n):
        e = case.draw(rng, n)(False)
        return lambda floor: st.Estimate(e.value, e.value - e.half / 2, e.value + e.half / 2, e.n, e.se / 2)
    t = calibration.calibrate(grid=(26,), runs=300, only=[calibration.Case("narrow", "ratio", "", narrow, case.truth)])
    assert not calibration.passes(t).any() and t["coverage"].item() < 0.8


def test_the_true_acceptance_of_the_skewed_prompts():
    rng = np.random.default_rng(5)
    rows = calibration._acceptance_rows(rng, rng.beta(*calibration.SKEWED, 2_000_000))
    assert rows["accepted"].sum() / rows["drafted"].sum() == pytest.approx(calibration.ACCEPTANCE_TRUTH, abs=5e-4)


def test_the_jackknife_of_a_mean_is_the_t_interval():
    x = np.random.default_rng(0).normal(size=20)
    t = st.mean_estimate(x)
    loo = (x.sum() - x) / (len(x) - 1)
    j = st.jackknife_estimate(float(x.mean()), loo)
    assert (j.low, j.high, j.se) == pytest.approx((t.low, t.high, t.se))


def selection_violations(runs: int) -> pd.DataFrame:
    return calibration.selections(runs=runs).set_index(["chain", "selection", "n_dev"])["violations"]


def test_the_default_selection_rarely_chooses_a_knob_that_loses_the_margin():
    """Over simulated dev sweeps (knobs that keep quality then lose it, and knobs that all lose at least the
    margin), the sweeps' default rule chooses a knob truly losing the margin at most RISK (5%) of the time, at
    n_dev = 51, 100 and 300; choosing by the estimate does so most of the time."""
    from diversed.runs.settings import SELECTIONS
    from diversed.runs.sweep import choose

    default = choose.__defaults__[0]
    assert default == next(iter(SELECTIONS)) == "certified" and tuple(SELECTIONS) == tuple(st.ADMIT)
    violations = selection_violations(runs=400)
    assert (violations.xs(default, level="selection") <= st.RISK).all(), violations.to_string()
    assert (violations.xs("estimate", level="selection") > 0.5).all(), violations.to_string()


@pytest.mark.slow  # 2,000 sweeps of each chain at each n_dev: about a minute
def test_certified_selection_is_calibrated_over_two_thousand_sweeps():
    violations = selection_violations(runs=calibration.RUNS)
    assert (violations.xs("certified", level="selection") <= st.RISK).all(), violations.to_string()
