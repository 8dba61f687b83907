"""Distribution-level tests of the verification math."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import DRAWS, Stream, V, chi_square_ok, random_dists, row_draws, verify, verify_many

from diversed.decoding.rng import RESIDUAL, VERIFY
from diversed.decoding.verifiers import ensemble, logits_to_probs, total_variation


def emitted_histogram(q, p, w, mixing, position, seed=0):
    """Histogram of the token emitted at draft `position` (0-based), over draws where it is reached.

    Drafts are sampled from q. Returns (histogram of emitted tokens, acceptance count, draws reaching it)."""
    drafts, n, next_token = verify_many(q, p, w, DRAWS, seed, mixing=mixing)
    reached = n >= position
    kept = n > position
    token = torch.where(kept, drafts[:, position], next_token)[reached]
    return torch.bincount(token, minlength=V).float(), int(kept.sum()), int(reached.sum())




@pytest.mark.parametrize("mixing", ["linear", "logit"])
@pytest.mark.parametrize("w", [0.0, 0.3, 0.7, 1.0])
def test_emitted_token_is_distributed_as_nu(mixing, w):
    q, p = random_dists(1, 1), random_dists(2, 2)
    nu = ensemble(p[:1], q, w, mixing)[0]
    counts, accepted, reached = emitted_histogram(q, p, w, mixing, position=0, seed=int(10 * w))
    assert reached == DRAWS
    assert chi_square_ok(counts, nu), (counts / DRAWS, nu)
    if mixing == "linear":  # acceptance = 1 - w TV(p, q), within 4.5 standard errors
        expected = 1 - w * float(total_variation(p[0], q[0]))
        se = math.sqrt(max(expected * (1 - expected), 1e-6) / DRAWS)
        assert abs(accepted / DRAWS - expected) < 4.5 * se + 1e-9


def test_second_position_and_bonus_token():
    """Position 2 (given position 1 accepted) is distributed as nu_2; the bonus token as p_{K+1}."""
    q, p = random_dists(3, 2, sharp=1.0), random_dists(4, 3, sharp=1.0)
    w = torch.tensor([0.2, 0.6])
    nu = ensemble(p[:2], q, w, "linear")
    counts, _, reached = emitted_histogram(q, p, w, "linear", position=1, seed=5)
    assert reached > DRAWS * 0.3
    assert chi_square_ok(counts, nu[1])

    _, n, bonus = verify_many(q, p, 0.0, DRAWS // 2, 6)  # w = 0: every draft kept
    assert bool((n == 2).all())  # so next_token is the bonus token
    assert chi_square_ok(torch.bincount(bonus, minlength=V).float(), p[2])


def test_emitted_distribution_wrong_nu_is_detected():
    """The chi-square check has power: the emitted distribution is not p when w < 1."""
    q, p = random_dists(1, 1), random_dists(2, 2)
    counts, _, _ = emitted_histogram(q, p, 0.3, "linear", position=0)
    assert not chi_square_ok(counts, p[0])


def standard_speculative_sampling(draft, q, p, draws):
    """Leviathan et al. (2023) Algorithm 1, written out independently, on the engine's random numbers (draws:
    one row; its uniforms at lanes VERIFY + i, the correction's inverse-CDF uniform at lane RESIDUAL)."""
    K = q.shape[0]
    r = draws.uniform(VERIFY, K)[0]
    u = float(draws.uniform(RESIDUAL)[0, 0])
    for i in range(K):
        x = draft[i]
        if not r[i] * q[i, x] < p[i, x]:
            return i, inverse_cdf((p[i] - q[i]).clamp_min(0), u)
    return K, inverse_cdf(p[K], u)


def inverse_cdf(weights, u):
    """The first token whose cumulative weight (summed in order, float64) reaches u times the total."""
    cdf = list(itertools.accumulate(weights.double().tolist()))
    return next((token for token, c in enumerate(cdf) if c >= u * cdf[-1]), len(cdf) - 1)


def test_w1_is_standard_speculative_sampling():
    K = 4
    q, p = random_dists(7, K), random_dists(8, K + 1)
    stream, gd = Stream(9), torch.Generator().manual_seed(10)
    for _ in range(2000):
        draft = torch.multinomial(q, 1, generator=gd)[:, 0]
        draws = stream.next()
        v = verify(draft, q, p, 1.0, draws=draws)
        assert (v.n_accepted, v.next_token) == standard_speculative_sampling(draft, q, p, draws)
        assert float(v.bias_tv.abs().sum()) == 0.0


def test_greedy_rules():
    q, p = random_dists(11, 3), random_dists(12, 4)
    nu = ensemble(p[:3], q, 0.5)
    best = nu.argmax(-1)
    # all accepted -> bonus is argmax p_{K+1}
    v = verify(best, q, p, 0.5, greedy=True)
    assert (v.n_accepted, v.next_token) == (3, int(p[3].argmax()))
    # mismatch at position 2 -> correction is argmax nu_2
    draft = best.clone()
    draft[1] = (best[1] + 1) % V
    v = verify(draft, q, p, 0.5, greedy=True)
    assert (v.n_accepted, v.next_token) == (1, int(nu[1].argmax()))
    # w = 1: plain target argmax
    v = verify(p[:3].argmax(-1), q, p, 1.0, greedy=True)
    assert v.n_accepted == 3


def test_linear_residual_equals_p_minus_q_and_bias_formula():
    q, p = random_dists(13, 1), random_dists(14, 2)
    w = 0.4
    nu = ensemble(p[:1], q, w)
    assert torch.allclose((nu - q).clamp_min(0) / (nu - q).clamp_min(0).sum(),
                          (p[:1] - q).clamp_min(0) / (p[:1] - q).clamp_min(0).sum(), atol=1e-6)
    # Pareto front of the static ensemble: bias TV(nu, p) = (1 - w) TV(p, q)
    assert torch.allclose(total_variation(nu, p[:1]), (1 - w) * total_variation(p[:1], q), atol=1e-6)


def test_logit_mixing_handles_filtered_tokens():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    q = torch.tensor([[0.0, 0.2, 0.8, 0.0]])
    assert torch.allclose(ensemble(p, q, 1.0, "logit"), p)
    assert torch.allclose(ensemble(p, q, 0.0, "logit"), q)
    mid = ensemble(p, q, 0.5, "logit")
    assert torch.allclose(mid, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))  # the only token both allow


def test_top_p_and_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    full = logits.softmax(-1)  # [0.644, 0.237, 0.087, 0.032]
    assert torch.allclose(logits_to_probs(logits, 1.0, 1.0), full)
    kept = logits_to_probs(logits, 1.0, 0.8)
    assert kept[2:].sum() == 0 and torch.isclose(kept.sum(), torch.tensor(1.0))
    assert torch.allclose(logits_to_probs(logits, 0.5), (logits / 0.5).softmax(-1))
    assert torch.allclose(logits_to_probs(logits, 0.0), full)  # greedy mixes plain softmax


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_weight_out_of_range_is_refused(bad):
    q, p = random_dists(1, 2), random_dists(2, 3)
    with pytest.raises(ValueError, match="w must lie in"):
        verify(torch.tensor([0, 1]), q, p, bad)


def test_shape_errors_and_unknown_mixing():
    q, p = random_dists(1, 2), random_dists(2, 2)
    with pytest.raises(ValueError, match="shapes disagree"):
        verify(torch.tensor([0, 1]), q, p, 1.0)
    with pytest.raises(ValueError, match="unknown mixing"):
        ensemble(p[:2], q, 0.5, "geometric")


def test_synthetic_acceptance_rate_and_position_structure():
    from helpers import synthetic_verify

    p = random_dists(3, 6)
    stream = Stream(0)
    n = [synthetic_verify(5, p, 0.8, stream=stream).n_accepted for _ in range(DRAWS // 4)]
    # E[accepted per step] = sum_{i=1..K} a^i for independent acceptance up to the first rejection
    expected = sum(0.8**i for i in range(1, 6))
    assert abs(sum(n) / len(n) - expected) < 0.05
    assert synthetic_verify(5, p, 1.0).n_accepted == 5 and synthetic_verify(5, p, 0.0).n_accepted == 0
    with pytest.raises(ValueError, match="synthetic acceptance must be in"):
        synthetic_verify(5, p, 1.2)


def test_logit_mixing_at_low_temperature_does_not_underflow():
    """At T = 0.1 the two models' probabilities underflow to 0 on each other's favourite tokens; with the
    log-probabilities the geometric mixture is still exact (float64 reference), and verification samples."""
    from diversed.decoding.verifiers import logits_to_logprobs

    g = torch.Generator().manual_seed(0)
    lt, ld = 30 * torch.randn(2, V, generator=g), 30 * torch.randn(2, V, generator=g)
    log_p, log_q = logits_to_logprobs(lt, 0.1), logits_to_logprobs(ld[:1], 0.1)
    p, q = log_p.exp(), log_q.exp()
    assert (p[0] * q[0] == 0).all()  # the underflow that made softmax(w log p + (1 - w) log q) all NaN
    nu = ensemble(p[:1], q, 0.5, "logit", log_p=log_p[:1], log_q=log_q)
    ref = (0.5 * (lt[:1].double() / 0.1).log_softmax(-1) + 0.5 * (ld[:1].double() / 0.1).log_softmax(-1)).softmax(-1)
    assert torch.isfinite(nu).all() and torch.allclose(nu.double(), ref, atol=1e-6)
    v = verify(torch.tensor([int(q[0].argmax())]), q, p, 0.5, mixing="logit", stream=Stream(1), log_p=log_p,
               log_q=log_q)
    assert 0 <= v.next_token < V


def test_top_k_then_top_p_equal_transformers_warpers():
    """sampling: model applies what transformers' generate applies: temperature, then top-k, then top-p."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = 3 * torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    for T, k, top_p in ((1.0, 20, 0.95), (0.7, 50, 0.9), (1.0, 5, 1.0), (0.1, 0, 0.9)):
        scores = TemperatureLogitsWarper(T)(None, logits.clone())
        if k:
            scores = TopKLogitsWarper(k)(None, scores)
        if top_p < 1:
            scores = TopPLogitsWarper(top_p)(None, scores)
        ours = logits_to_probs(logits, T, top_p, k)
        assert torch.equal(ours > 0, scores.softmax(-1) > 0), (T, k, top_p)
        assert torch.allclose(ours, scores.softmax(-1), atol=1e-6)
        assert ((ours > 0).sum(-1) <= (k or 50)).all()


def test_strict_is_exact_on_top_k_top_p_filtered_distributions():
    """With the same filters on p and q, strict speculative sampling emits the filtered p (and relaxed
    verification the filtered nu), though a draft token may lie outside p's support."""
    g = torch.Generator().manual_seed(3)
    lp, lq = 2 * torch.randn(2, V, generator=g), 2 * torch.randn(1, V, generator=g)
    p, q = logits_to_probs(lp, 1.0, 0.9, 4), logits_to_probs(lq, 1.0, 0.9, 4)
    assert (p[0] == 0).sum() >= V - 4 and (q[0] == 0).sum() >= V - 4 and ((p[0] > 0) != (q[0] > 0)).any()
    for w in (1.0, 0.5):
        counts, _, _ = emitted_histogram(q, p, w, "linear", position=0, seed=5)
        assert chi_square_ok(counts, ensemble(p[:1], q, w, "linear")[0]), (w, counts / DRAWS)
    assert counts[(p[0] == 0) & (q[0] == 0)].sum() == 0  # a token both filters drop is never emitted


@pytest.mark.parametrize("bad", ["draft_tokens", "p", "w", "k", "draws", "log_q", "test"])
def test_verify_rows_checks_its_shapes_at_entry(bad):
    """Every decode verifies through verify_rows: arguments that disagree in shape fail there, with their shapes,
    not deep inside the math (or silently, by broadcasting)."""
    from diversed.decoding.verifiers import Criterion, Logits, verify_rows

    R, K, V = 2, 3, 7
    q = torch.full((R, K, V), 1 / V)
    args = {"draft_tokens": torch.zeros(R, K, dtype=torch.long), "q": q, "p": torch.full((R, K + 1, V), 1 / V),
            "w": torch.ones(R, K), "k": [K, K - 1], "draws": row_draws(0, R), "logs": Logits(None, q.log()),
            "criterion": Criterion("ensemble")}
    verify_rows(**args)  # as given: fine
    args[bad if bad in args else {"log_q": "logs", "test": "criterion"}[bad]] = {
        "draft_tokens": torch.zeros(R, K + 1, dtype=torch.long), "p": torch.full((R, K, V), 1 / V),
        "w": torch.ones(R), "k": [K + 1, K], "draws": row_draws(0, R + 1), "log_q": Logits(None, q[:, :, :-1]),
        "test": Criterion("unknown")}[bad]
    with pytest.raises(ValueError, match="verify_rows|unknown verification test"):
        verify_rows(**args)
