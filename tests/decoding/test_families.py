"""The other relaxed verifiers (settings.RULES): lenient speculative sampling, speculative cascades, typical and top-k
acceptance. Each rule's identities with strict verification, its per-position acceptance probability against its
formula on random p, q, and the distribution it emits against its own target distribution (chi-square, as the
ensemble's tests in test_verifiers), with a check that the test has power."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import (
    DRAWS,
    Stream,
    V,
    accepts_as,
    binomial_ok,
    chi_square_ok,
    decode,
    random_dists,
    related,
    row_draws,
    verify,
    verify_many,
)

from diversed.decoding import settings
from diversed.decoding.settings import FAMILIES, Decoding
from diversed.decoding.verifiers import Criterion, defer, fly_window, total_variation, typical_threshold, verify_rows


# each rule's acceptance probability a(x) of a draft x and the distribution its sampled step emits, written from
# the papers independently of diversed.decoding.verifiers
def lenient_rule(q, p, lenience):
    a = torch.minimum(torch.ones_like(q), p / (lenience * q))
    residual = (p - q).clamp_min(0)  # Algorithm 1's correction
    return a, (q * a) + (1 - (q * a).sum()) * residual / residual.sum()


def typical_rule(q, p, eps):  # Medusa's code: H with log(p + 1e-5), the next token argmax p
    h = -(p * (p + 1e-5).log()).sum()
    a = (p > min(eps, math.sqrt(eps) * math.exp(-float(h)))).float()
    return a, q * a + (1 - (q * a).sum()) * torch.nn.functional.one_hot(p.argmax(), len(p)).float()


def topk_rule(q, p, k):
    a = torch.zeros_like(p)
    a[p.argsort(descending=True)[:k]] = 1.0
    return a, q * a + (1 - (q * a).sum()) * p


RULES = {"lenient": (lenient_rule, [0.3, 0.6]), "typical": (typical_rule, [0.09, 0.2]), "topk": (topk_rule, [2, 3])}


@pytest.mark.parametrize("test", sorted(RULES))
@pytest.mark.parametrize("i", [0, 1])
def test_acceptance_and_emitted_distribution_follow_the_rule(test, i):
    rule, knobs = RULES[test]
    knob = knobs[i]
    p = random_dists(30 + i, 2, sharp=2.0)
    q = related(p[:1], 20 + i)
    a, emitted = rule(q[0], p[0], knob)
    assert total_variation(emitted, p[0]) > 0.04  # the rule is lossy at this knob: the power check below means it
    accepts_as(q, p, a, emitted, i, test=test, knob=knob)


def test_lenient_at_l_1_is_strict_draw_for_draw():
    K = 4
    q, p = random_dists(7, K), random_dists(8, K + 1)
    gd = torch.Generator().manual_seed(10)
    for seed in range(500):
        draft = torch.multinomial(q, 1, generator=gd)[:, 0]
        strict = verify(draft, q, p, 1.0, stream=Stream(seed))
        lenient = verify(draft, q, p, 1.0, stream=Stream(seed), test="lenient", knob=1.0)
        assert (lenient.n_accepted, lenient.next_token) == (strict.n_accepted, strict.next_token)
        assert lenient.bias_tv.abs().max() < 1e-6


def test_the_lenient_correction_is_algorithm_1s():
    """Lenient's correction after a rejection follows Algorithm 1's norm(max(0, p - q)), not norm(max(0, p - l q))."""
    p, lenience = random_dists(41, 2, sharp=1.5), 0.8
    q = related(p[:1], 40)  # rejected 8% of the time, the two corrections 0.44 apart in TV
    _, n, next_token = verify_many(q, p, 1.0, DRAWS, 3, test="lenient", knob=lenience)
    counts = torch.bincount(next_token[n == 0], minlength=V).float()  # the corrections after a rejection
    assert counts.sum() > 1000
    own, other = (p[0] - q[0]).clamp_min(0), (p[0] - lenience * q[0]).clamp_min(0)
    assert chi_square_ok(counts, own / own.sum())
    assert not chi_square_ok(counts, other / other.sum())


def test_greedy_rules_of_the_families():
    q, p = random_dists(11, 3), random_dists(12, 4)
    best = p[:3].argmax(-1)
    # lenient l = 1 and top-1 accept exactly the target's argmax, as strict greedy
    for test, knob in (("lenient", 1.0), ("topk", 1)):
        v = verify(best, q, p, 1.0, greedy=True, test=test, knob=knob)
        assert (v.n_accepted, v.next_token) == (3, int(p[3].argmax()))
        wrong = best.clone()
        wrong[1] = (best[1] + 1) % V
        v = verify(wrong, q, p, 1.0, greedy=True, test=test, knob=knob)
        assert (v.n_accepted, v.next_token) == (1, int(p[1].argmax()))
    # lenient l: the second most likely token passes when p(x) >= l max p
    second = p[0].argsort(descending=True)[1]
    ratio = float(p[0, second] / p[0].max())
    for lenience, n in ((ratio * 0.99, 1), (min(1.0, ratio * 1.01), 0)):
        v = verify(torch.tensor([int(second)]), q[:1], p[:2], 1.0, greedy=True, test="lenient", knob=lenience)
        assert v.n_accepted == n


def test_cascade_deferral_rules():
    q = torch.tensor([[0.7, 0.2, 0.1], [0.4, 0.3, 0.3]])
    p = torch.tensor([[0.9, 0.05, 0.05], [0.5, 0.25, 0.25]])
    # chow: defer when max q < 1 - alpha
    assert defer(p, q, 0.2, "chow").tolist() == [1.0, 1.0] and defer(p, q, 0.5, "chow").tolist() == [0.0, 1.0]
    # diff: defer when max q < max p - alpha
    assert defer(p, q, 0.15, "diff").tolist() == [1.0, 0.0]
    # opt: defer when max q < max p - alpha TV(p, q); TV = 0.2 and 0.1
    assert defer(p, q, 0.5, "opt").tolist() == [1.0, 1.0] and defer(p, q, 1.5, "opt").tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="unknown deferral rule 'max'"):
        defer(p, q, 0.1, "max")


def test_cascade_emits_pi_and_accepts_as_its_rule():
    """Sampling towards pi = (1 - delta) q + delta p: at a deferred position the emitted token follows p, at a kept
    one q (every draft accepted)."""
    q, p = random_dists(50, 1, sharp=1.5), random_dists(51, 2, sharp=1.5)
    for alpha, deferred in ((1.0, False), (-1.0, True)):  # chow: max q < 0 never, max q < 2 always
        delta = defer(p[:1], q, alpha, "chow")
        assert bool(delta[0]) == deferred
        x, n, next_token = verify_many(q, p, delta, DRAWS // 2, 4)
        counts = torch.bincount(torch.where(n > 0, x[:, 0], next_token), minlength=V).float()
        accepted = int(n.sum())
        pi = delta * p[0] + (1 - delta) * q[0]
        assert chi_square_ok(counts, pi)
        assert binomial_ok(accepted, DRAWS // 2, 1 - float(delta[0] * total_variation(p[0], q[0])))


def test_typical_threshold_is_medusas():
    p = torch.tensor([0.5, 0.25, 0.25])
    h = -(0.5 * math.log(0.5 + 1e-5) + 2 * 0.25 * math.log(0.25 + 1e-5))  # Medusa's code: log(p + 1e-5)
    assert float(typical_threshold(p, 0.09)) == pytest.approx(min(0.09, 0.3 * math.exp(-h)))
    assert float(typical_threshold(p, 0.5)) == pytest.approx(min(0.5, math.sqrt(0.5) * math.exp(-h)))


def test_rows_of_a_family_draw_as_batches_of_one():
    """verify_rows over rows with their own k equals each row alone, for every test."""
    R, K = 3, 4
    q = torch.stack([random_dists(60 + r, K) for r in range(R)])
    p = torch.stack([random_dists(70 + r, K + 1) for r in range(R)])
    draft = torch.stack([torch.multinomial(q[r], 1, generator=torch.Generator().manual_seed(r))[:, 0]
                         for r in range(R)])
    k = [4, 2, 3]
    for test, knob in (("lenient", 0.5), ("typical", 0.09), ("topk", 2)):
        n, nxt, *_ = verify_rows(draft, q, p, torch.ones(R, K), k, criterion=Criterion(test, knob=knob),
                                 draws=row_draws(0, R))
        for r in range(R):
            one = verify_rows(draft[r:r + 1, :k[r]], q[r:r + 1, :k[r]], torch.cat([p[r:r + 1, :k[r]],
                              p[r:r + 1, k[r]:k[r] + 1]], 1), torch.ones(1, k[r]), [k[r]],
                              criterion=Criterion(test, knob=knob), draws=row_draws(0, R).at(r))
            assert (int(n[r]), int(nxt[r])) == (int(one[0][0]), int(one[1][0]))


def entropy3(p):
    top = p.sort(descending=True).values[:3]
    return float(-(top * top.log()).sum())


def test_fly_defers_a_mismatch_only_under_uncertainty_and_a_passing_window():
    """Greedy FLy, K = 3, W = 1 (window given): a mismatch at 0 is accepted when H3(p_0) >= threshold and draft 1
    matches; else it is strict's rejection."""
    p = torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.25] * 4])  # [K + 1, V]
    q = torch.full((3, 4), 0.25)
    h = entropy3(p[0])

    def n_accepted(draft, threshold, k=3):
        n, nxt, *_ = verify_rows(torch.tensor([draft]), q[None], p[None], torch.ones(1, 3), [k], draws=None,
                                 criterion=Criterion("fly", greedy=True, knob=threshold, window=1))
        return int(n[0]), int(nxt[0])

    assert n_accepted([3, 1, 2], h - 1e-5) == (3, 0)  # deferred: 3 is not argmax p_0, p_0 uncertain, draft 1 matches
    assert n_accepted([3, 1, 2], h + 1e-3) == (0, 0)  # the target too certain: strict's rejection, argmax p_0
    assert n_accepted([3, 0, 2], h - 1e-5) == (0, 0)  # draft 1 fails: no deferral
    assert n_accepted([0, 3, 2], 0.0) == (3, 0)  # a deferral at position 1, then the bonus
    assert n_accepted([0, 3, 2], 0.0, k=2) == (1, 1)  # with k = 2 drafts its window leaves the step: strict
    assert n_accepted([0, 1, 3], 0.0) == (2, 2)  # position 2 has no window inside the step: strict rejection


def test_fly_acceptance_follows_its_rule_and_reduces_to_strict():
    """Sampled, K = 2, W = 1: P(draft 0 accepted) = (1 - TV_0) + TV_0 (1 - TV_1) when H3(p_0) >= threshold, strict's
    1 - TV_0 otherwise; an infinite threshold is strict draw for draw."""
    p = random_dists(80, 3, sharp=1.0)
    q = related(p[:2], 81)
    tv = total_variation(p[:2], q)
    h = entropy3(p[0])
    assert fly_window(2) == 1 and fly_window(10) == 6
    for threshold, expected in ((h - 1e-3, 1 - tv[0] + tv[0] * (1 - tv[1])), (h + 1e-3, 1 - tv[0])):
        _, n, _ = verify_many(q, p, 1.0, DRAWS // 2, 5, test="fly", knob=threshold,
                              window=1)
        accepted = int((n >= 1).sum())
        assert binomial_ok(accepted, DRAWS // 2, float(expected)), (accepted / (DRAWS // 2), float(expected))
    gd = torch.Generator().manual_seed(10)
    for seed in range(300):
        x = torch.stack([torch.multinomial(q[i], 1, generator=gd)[0] for i in range(2)])
        strict = verify(x, q, p, 1.0, stream=Stream(seed))
        fly = verify_rows(x[None], q[None], p[None], torch.ones(1, 2), [2],
                          criterion=Criterion("fly", knob=math.inf, window=1),
                          draws=Stream(seed).next())
        assert (strict.n_accepted, strict.next_token) == (int(fly[0][0]), int(fly[1][0]))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identities_with_strict_on_models(target, other_draft, temperature):
    """lenient l = 1, a cascade that always defers (chow, alpha = -1) and FLy at an entropy threshold no top 3 reaches
    (10 nats > log 3) emit strict's tokens for the same seeds; top-1 acceptance does under greedy."""
    strict = [g.tokens for g in decode(target, other_draft, "strict", temperature)]
    assert [g.tokens for g in decode(target, other_draft, "lenient", temperature, knob=1.0)] == strict
    cascade = decode(target, other_draft, "cascade", temperature, knob=-1.0)
    assert [g.tokens for g in cascade] == strict
    assert {w for g in cascade for ws in g.weights for w in ws} == {1.0}  # w = delta, recorded
    assert [g.tokens for g in decode(target, other_draft, "fly", temperature, knob=10.0)] == strict
    if temperature == 0.0:
        assert [g.tokens for g in decode(target, other_draft, "topk", 0.0, knob=1)] == strict


@pytest.mark.parametrize("verifier,knob", [("cascade", 0.9), ("lenient", 0.3), ("typical", 0.01), ("topk", 20),
                                           ("fly", 0.0)])
def test_relaxed_families_accept_more_than_strict(target, draft, verifier, knob):
    """At a lossy knob each family accepts more drafts than strict on the same prompts (the rule is applied)."""
    def rate(gens):
        return sum(sum(g.accepted) for g in gens) / sum(sum(g.drafted) for g in gens)

    strict = rate(decode(target, draft, "strict", 1.0))
    relaxed = decode(target, draft, verifier, 1.0, knob=knob)
    assert rate(relaxed) > strict
    assert all(g.weights == [[] for _ in g.drafted] for g in relaxed) or verifier == "cascade"


# two settings of each family, the smaller first (fixed: w); the sweep certifies from the one Rule.relaxes says is
# stricter. AutoJudge's threshold relaxes up from 0 (strict) to 1 (every draft): tests/training/test_judge.py.
KNOB_PAIRS = {"fixed": (0.3, 0.9), "cascade": (0.1, 0.9), "lenient": (0.3, 0.9), "typical": (0.01, 0.3),
              "topk": (1, 20), "ears": (0.0, 1.0), "fuzzy": (0.0, 1.0), "mentored": (0.0, 1.0), "mars": (-10.0, 10.0),
              "threshold": (0.01, 1.0), "fly": (0.0, 10.0)}
# MARS keeps a draft among the target's top 2: that accepts more than speculative sampling only where the target is
# peaked; on the tiny pair at T = 1 (flat) its relaxed positions accept less
PEAKED = {"mars": 0.1}


@pytest.mark.parametrize("verifier", KNOB_PAIRS)
def test_each_family_relaxes_the_way_its_rule_says(target, draft, verifier):
    """settings.Rule.relaxes, the order a certified sweep tests a family's points in: on the same prompts the
    larger setting accepts more drafts when the rule relaxes up, fewer when down."""
    def rate(gens):
        return sum(sum(g.accepted) for g in gens) / sum(sum(g.drafted) for g in gens)

    assert set(KNOB_PAIRS) == {"fixed", *FAMILIES} - {"judge"} and settings.RULES["judge"].relaxes == "up"
    setting = "weight" if verifier == "fixed" else "knob"
    T = PEAKED.get(verifier, 1.0)
    small, large = (rate(decode(target, draft, verifier, T, **{setting: x})) for x in KNOB_PAIRS[verifier])
    assert (large > small) if settings.RULES[verifier].relaxes == "up" else (small > large), (small, large)


@pytest.mark.parametrize("kw,message", [
    ({"verifier": "lenient"}, r"verifier 'lenient' needs --knob \(lenience l, in \[0, 1\]\)"),
    ({"verifier": "lenient", "knob": 1.5}, r"lenient's knob lenience l must be in \[0, 1\], got 1.5"),
    ({"verifier": "topk", "knob": 2.5}, r"topk's knob k must be an integer in \[1, inf\], got 2.5"),
    ({"verifier": "strict", "knob": 0.5}, "knob is only used by the verifiers cascade, lenient, typical, topk, ears"),
    ({"verifier": "fly", "knob": 0.3, "K": 1}, r"verifier 'fly' needs K >= 2 \(its window is min\(6, K - 1\)\)"),
    ({"verifier": "cascade", "knob": 0.1, "deferral": "max"}, "unknown deferral rule 'max'; allowed: chow, diff, opt"),
    ({"verifier": "fixed", "weight": 0.5, "deferral": "opt"}, "deferral is only used by the 'cascade' verifier"),
])
def test_bad_knobs_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        Decoding(**kw)
