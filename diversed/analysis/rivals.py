"""Rules read against each other where they accept equally, on the dev sweeps.

A rule's dev sweep is a line: strict (its lossless end) and its knob's points, in order of acceptance. At an
acceptance a between two of its points (acceptances a0 <= a <= a1) the line's loss is interpolated prompt by prompt,
(1 - l) x0 + l x1 with l = (a - a0) / (a1 - a0) from the points' acceptances over all prompts, so that a paired
difference with another rule's point over the same prompts has a t-interval over prompts. l is taken as known: the
interval is conditional on the acceptances (each estimated over every prompt's drafts). Outside a line's range
there is no comparison, and the setting says so.

Losses: the task's quality (signed so that positive is better), the bias TV(nu, p) and KL(nu || p) in nats per token
of what a rule emits. Two claims read them: DIVERSED against every rule at DIVERSED's acceptance (its quality
non-inferior within the task's tolerance), and which rules beat the static ensemble at their own acceptance, in
which loss (superiority: the static ensemble's loss minus the rule's above 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from diversed import statistics
from diversed.decoding.settings import FAMILIES, RULES
from diversed.statistics import Estimate, Test, noninferior, superior
from diversed.tasks import metric_spec

LOSSES = {"bias_tv": "bias TV(ν, p)", "kl": "KL(ν ‖ p) (nats/token)"}  # besides the task's quality


def prompt_values(units: pd.DataFrame, column: str) -> pd.Series:
    """A column's value per prompt (seeds pooled: a ratio column of statistics.METRICS as its ratio of sums)."""
    pooled = statistics.pool_seeds(units, [])
    pair = statistics.METRICS.get(column)
    values = pooled[pair[0]] / pooled[pair[1]] if pair else pooled[column]
    return pd.Series(values.to_numpy(dtype=float), index=pooled["prompt"].to_numpy())


def acceptance(units: pd.DataFrame) -> float:
    return statistics.estimate(units, "draft_acceptance_rate").value


@dataclass
class Line:
    """A rule's dev sweep: (acceptance, label, units) of each point, strict's first, in order of acceptance."""

    name: str
    points: list[tuple[float, str, pd.DataFrame]]

    @property
    def span(self) -> tuple[float, float]:
        return self.points[0][0], self.points[-1][0]

    def at(self, a: float, column: str) -> pd.Series | None:
        """column per prompt interpolated at acceptance a (None outside the line)."""
        for (a0, _, u0), (a1, _, u1) in zip(self.points, self.points[1:], strict=False):
            if a0 <= a <= a1 and a1 > a0:
                lam = (a - a0) / (a1 - a0)
                return ((1 - lam) * prompt_values(u0, column) + lam * prompt_values(u1, column)).dropna()
        return next((prompt_values(u, column) for a0, _, u in self.points if a0 == a), None)


def knob_label(verifier: str, knob: float) -> str:
    """'mentored, KL budget D = KL(p || pi) (nats) = 0.1': the source's knob, named, with its unit."""
    setting = RULES[verifier].setting(knob)
    return f"{verifier}, {setting}" if setting else verifier


def lines(sweep: pd.DataFrame) -> dict[str, Line]:
    """The lines of one sweep (pair, task, T, K): the fixed w per mixing, each family with a knob; strict first."""
    strict = sweep[sweep["verifier"] == "strict"]
    if strict.empty:
        return {}
    out = {}
    fixed = sweep[sweep["verifier"] == "fixed"]
    for mixing, g in fixed.groupby("mixing"):
        out[f"fixed ({mixing})"] = [(f"fixed ({mixing}), w = {w:g}", u) for w, u in g.groupby("weight")]
    if "knob" in sweep:
        for verifier in FAMILIES:
            g = sweep[sweep["verifier"] == verifier]
            if not g.empty:
                out[verifier] = [(knob_label(verifier, k), u) for k, u in g.groupby("knob")]
    base = (acceptance(strict), "strict", strict)
    return {name: Line(name, [base, *sorted(((acceptance(u), label, u) for label, u in pts), key=lambda p: p[0])])
            for name, pts in out.items()}


def difference(a: pd.Series, b: pd.Series, sign: float = 1.0) -> Estimate:
    """sign (a - b) over the prompts both have, with its t-interval."""
    both = a.index.intersection(b.index)
    return statistics.mean_estimate(sign * (a[both] - b[both]).to_numpy())


def sweeps_at(sweep_units: pd.DataFrame, T: float):
    """(pair, task, K, units) of each sweep at T."""
    d = sweep_units[sweep_units["temperature"] == T]
    for (pair, task, K), g in d.groupby(["pair", "task", "K"]):
        yield pair, task, int(K), g


def diversed_at_equal_acceptance(sweep_units: pd.DataFrame, T: float):
    """Settings of the claim: at DIVERSED's dev acceptance, its quality against each rule's line (non-inferior
    within the task's tolerance), with the KL(nu || p) difference beside it. Yields (name, evidence, Test)."""
    for pair, task, K, g in sweeps_at(sweep_units, T):
        dyn = g[g["verifier"] == "dynamic"]
        if dyn.empty:
            continue
        spec, a = metric_spec(dyn["metric"].iloc[0]), acceptance(dyn)
        sign = 1.0 if spec.higher_is_better else -1.0
        for name, line in lines(g).items():
            where = f"{pair}/{task} K={K} DIVERSED - {name} at acceptance {a:.3f}"
            quality = line.at(a, spec.statistic)
            if quality is None or quality.empty:
                lo, hi = line.span
                yield where, f"{name}'s dev sweep spans acceptance {lo:.3f}–{hi:.3f}", Test(
                    math.nan, math.nan, "DIVERSED's acceptance lies outside the rule's sweep")
                continue
            q = difference(prompt_values(dyn, spec.statistic), quality, sign)
            kl = difference(line.at(a, "kl"), prompt_values(dyn, "kl"))
            saved = f"KL saved {kl.text(sign=True)} nats/token" if kl.n else "KL not finite (nu has mass p lacks)"
            yield where, (f"quality {q.text(sign=True)} (tolerance {spec.tolerance:g}; n = {q.n} prompts), "
                          f"{saved}"), noninferior(q, spec.tolerance)


def beats_static(sweep_units: pd.DataFrame, T: float):
    """Settings of the claim: each rule's dev point (each family's knobs, DIVERSED) against the static ensemble's
    line (linear mixing where swept) at the point's acceptance, in each loss: the static loss minus the rule's
    (quality: the rule's minus the static's), superior above 0. Yields (name, evidence, Test, rule, loss)."""
    for pair, task, K, g in sweeps_at(sweep_units, T):
        found = lines(g)
        static = found.get("fixed (linear)") or next((v for k, v in found.items() if k.startswith("fixed")), None)
        if static is None:
            continue
        spec = metric_spec(g["metric"].iloc[0])
        points = [p for name, line in found.items() if not name.startswith("fixed") for p in line.points[1:]]
        dyn = g[g["verifier"] == "dynamic"]
        points += [(acceptance(dyn), "dynamic", dyn)] if not dyn.empty else []
        for a, label, u in points:  # each point's acceptance as its line computed it
            for column, loss in [(spec.statistic, "quality"), *LOSSES.items()]:
                s = static.at(a, column)
                if s is None or s.empty:
                    continue
                better = 1.0 if column == spec.statistic and spec.higher_is_better else -1.0
                e = difference(prompt_values(u, column), s, better)
                if not e.n:  # no finite value on any prompt (KL where nu has mass p lacks)
                    continue
                yield (f"{pair}/{task} K={K} {label}: {loss}", f"{e.text(sign=True)} better than the static "
                       f"ensemble at acceptance {a:.3f} (n = {e.n} prompts)", superior(e), label, loss)

