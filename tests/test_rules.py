"""The acceptance rules published after the first families (settings.RULES): block verification, exact for p, checked
by enumerating every draft block of a prefix-dependent pair, and EARS, checked against its formula. Each rule's
identity with strict, its acceptance against a direct computation, its emitted distribution (chi-square, with a
power check), and batch invariance."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import row_draws, verify
from test_families import PROMPTS, binomial_ok, decode, first_position, related
from test_verifiers import DRAWS, V, chi_square_ok, random_dists

from diversed.decoding.rng import Stream
from diversed.decoding.verifiers import Criterion, block_test, total_variation, verify_rows

# ------------------------------------------------------------------------------------------ block verification


def tree(V: int, K: int, seed: int, sharp: float = 1.5) -> dict:
    """A prefix-dependent pair: for every prefix of up to K tokens, (q, p) over V tokens, q near p."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for length in range(K + 1):
        for prefix in itertools.product(range(V), repeat=length):
            p = (sharp * torch.randn(V, generator=g, dtype=torch.float64)).softmax(-1)
            q = (p.log() + torch.randn(V, generator=g, dtype=torch.float64)).softmax(-1)
            out[prefix] = (q, p)
    return out


def block_outputs(model: dict, V: int, K: int) -> tuple[dict, float]:
    """Every output (accepted drafts, next token) of one block-verification step and its probability, summed over
    every draft block x ~ q, with P(tau = i) = h_i prod_{j > i} (1 - h_j); and the expected accepted drafts."""
    out: dict = {}
    mean = 0.0
    for x in itertools.product(range(V), repeat=K):
        q = torch.stack([model[x[:i]][0] for i in range(K)])[None]  # [1, K, V]
        p = torch.stack([model[x[:i]][1] for i in range(K + 1)])[None]  # [1, K + 1, V]
        drafted = math.prod(float(q[0, i, x[i]]) for i in range(K))
        h, stop = block_test(torch.tensor([x]), q, p, torch.tensor([K]))
        h = h[0].tolist()
        for tau in range(K + 1):
            chance = (h[tau - 1] if tau else 1.0) * math.prod(1 - v for v in h[tau:])
            dist = p[0, K] if tau == K else stop[0, tau] / stop[0, tau].sum()
            mean += drafted * chance * tau
            for y in range(V):
                key = (*x[:tau], y)
                out[key] = out.get(key, 0.0) + drafted * chance * float(dist[y])
    return out, mean


def strict_mean(model: dict, V: int, K: int) -> float:
    """Strict speculative sampling's expected accepted drafts: sum over x ~ q of prod min(1, p / q) up to i."""
    mean = 0.0
    for x in itertools.product(range(V), repeat=K):
        drafted, kept = 1.0, [1.0]
        for i in range(K):
            q, p = model[x[:i]]
            drafted *= float(q[x[i]])
            kept.append(kept[-1] * min(1.0, float(p[x[i]] / q[x[i]])))
        mean += drafted * sum(kept[1:])
    return mean


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_verification_is_an_exact_sampler_of_p(seed):
    """Enumerated exactly (V = 3, K = 3, p and q depending on the prefix): an output (x_1..x_tau, y) continued by p
    to K + 1 tokens has p's probability for every sequence; and it keeps at least strict's expected drafts."""
    V, K = 3, 3
    model = tree(V, K, seed)
    out, mean = block_outputs(model, V, K)
    assert sum(out.values()) == pytest.approx(1.0, abs=1e-9)
    for z in itertools.product(range(V), repeat=K + 1):
        target = 1.0
        for i in range(K + 1):
            target *= float(model[z[:i]][1][z[i]])
        emitted = 0.0
        for tau in range(K + 1):
            rest = 1.0
            for i in range(tau + 1, K + 1):
                rest *= float(model[z[:i]][1][z[i]])
            emitted += out.get(z[:tau + 1], 0.0) * rest
        assert emitted == pytest.approx(target, abs=1e-9), z
    assert mean >= strict_mean(model, V, K) - 1e-12


def test_block_verification_keeps_more_drafts_than_strict_on_average():
    """Their Theorem 2, strictly on these pairs: the expected accepted drafts exceed strict's."""
    gains = []
    for seed in range(3, 8):
        model = tree(3, 3, seed)
        gains.append(block_outputs(model, 3, 3)[1] - strict_mean(model, 3, 3))
    assert min(gains) >= -1e-12 and max(gains) > 0.01, gains


def test_block_verification_samples_p_at_the_first_position():
    """Sampled through verify_rows (K = 3, drafts from q): the first emitted token follows p (chi-square), and the
    check has power (q is rejected)."""
    p = random_dists(90, 4, sharp=1.5)
    q = related(p[:3], 91)
    counts, _ = first_position(q, p, "block", None, seed=3)
    assert chi_square_ok(counts, p[0]) and not chi_square_ok(counts, q[0])
    assert float(total_variation(p[0], q[0])) > 0.05


def test_block_verification_reduces_to_strict_where_it_must():
    """One draft (K = 1): h_1 = min(1, p / q), strict's test draw for draw; greedy: strict greedy."""
    q, p = random_dists(92, 1), random_dists(93, 2)
    gd = torch.Generator().manual_seed(4)
    for seed in range(300):
        x = torch.multinomial(q[0], 1, generator=gd)
        strict = verify(x, q, p, 1.0, stream=Stream(seed))
        block = verify(x, q, p, 1.0, stream=Stream(seed), test="block")
        assert (block.n_accepted, block.next_token) == (strict.n_accepted, strict.next_token)
        assert block.bias_tv.abs().max() == 0
    q, p = random_dists(94, 3), random_dists(95, 4)
    best = p[:3].argmax(-1)
    wrong = best.clone()
    wrong[1] = (best[1] + 1) % V
    for drafts, expected in ((best, (3, int(p[3].argmax()))), (wrong, (1, int(p[1].argmax())))):
        v = verify(drafts, q, p, 1.0, greedy=True, test="block")
        assert (v.n_accepted, v.next_token) == expected


# ------------------------------------------------------------------------------------------ EARS


def ears_rule(q, p, beta):
    """EARS as written in its paper: a(x) = min(1, p(x) / q(x) + beta (1 - max p)); the correction Algorithm 1's."""
    a = torch.minimum(torch.ones_like(q), p / q + beta * (1 - p.max()))
    residual = (p - q).clamp_min(0)
    return a, q * a + (1 - (q * a).sum()) * residual / residual.sum()


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_ears_acceptance_and_emitted_distribution_follow_the_rule(beta):
    p = random_dists(96, 2, sharp=1.0)
    q = related(p[:1], 97)
    a, emitted = ears_rule(q[0], p[0], beta)
    strict = float(torch.minimum(q[0], p[0]).sum())
    assert float((q[0] * a).sum()) > strict + 0.05  # the rule relaxes strict at this beta: the checks have power
    counts, accepted = first_position(q, p, "ears", beta, seed=5)
    assert binomial_ok(accepted, DRAWS, float((q[0] * a).sum())), (accepted / DRAWS, float((q[0] * a).sum()))
    assert chi_square_ok(counts, emitted) and not chi_square_ok(counts, p[0])
    v = verify(torch.tensor([0]), q, p, 1.0, stream=Stream(0), test="ears", knob=beta)
    assert float(v.bias_tv[0]) == pytest.approx(float(total_variation(emitted, p[0])), abs=1e-5)


def test_ears_at_beta_0_is_strict_draw_for_draw():
    K = 4
    q, p = random_dists(98, K), random_dists(99, K + 1)
    gd = torch.Generator().manual_seed(11)
    for seed in range(300):
        draft = torch.multinomial(q, 1, generator=gd)[:, 0]
        strict = verify(draft, q, p, 1.0, stream=Stream(seed))
        ears = verify(draft, q, p, 1.0, stream=Stream(seed), test="ears", knob=0.0)
        assert (ears.n_accepted, ears.next_token) == (strict.n_accepted, strict.next_token)
    best = p[:K].argmax(-1)
    assert verify(best, q, p, 1.0, greedy=True, test="ears", knob=0.0).n_accepted == K
    second = p[0].argsort(descending=True)[1]
    gap = float(p[0].max() - p[0, second]) / float(1 - p[0].max())  # the beta at which the runner-up passes
    for beta, n in ((gap * 1.01, 1), (gap * 0.99, 0)):
        assert verify(second[None], q[:1], p[:2], 1.0, greedy=True, test="ears", knob=beta).n_accepted == n


# ------------------------------------------------------------------------------------------ every new rule


@pytest.mark.parametrize("test,knob", [("block", None), ("ears", 0.5)])
def test_rows_of_a_new_rule_draw_as_batches_of_one(test, knob):
    """verify_rows over rows with their own k equals each row alone."""
    R, K = 3, 4
    q = torch.stack([random_dists(160 + r, K) for r in range(R)])
    p = torch.stack([random_dists(170 + r, K + 1) for r in range(R)])
    draft = torch.stack([torch.multinomial(q[r], 1, generator=torch.Generator().manual_seed(r))[:, 0]
                         for r in range(R)])
    k = [4, 2, 3]
    for seed in range(20):
        n, nxt, _ = verify_rows(draft, q, p, torch.ones(R, K), k, criterion=Criterion(test, knob=knob),
                                draws=row_draws(seed, R))
        for r in range(R):
            one = verify_rows(draft[r:r + 1, :k[r]], q[r:r + 1, :k[r]], torch.cat([p[r:r + 1, :k[r]],
                              p[r:r + 1, k[r]:k[r] + 1]], 1), torch.ones(1, k[r]), [k[r]],
                              criterion=Criterion(test, knob=knob), draws=row_draws(seed, R).at(r))
            assert (int(n[r]), int(nxt[r])) == (int(one[0][0]), int(one[1][0]))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_new_rules_on_models(target, other_draft, temperature):
    """EARS at beta = 0 emits strict's tokens for the same seeds, block verification under greedy too; sampled,
    block verification and EARS at beta = 1 keep more drafts than strict on the same prompts."""
    def rate(gens):
        return sum(sum(g.accepted) for g in gens) / sum(sum(g.drafted) for g in gens)

    strict = decode(target, other_draft, "strict", temperature)
    assert [g.tokens for g in decode(target, other_draft, "ears", temperature, knob=0.0)] == [g.tokens for g in strict]
    block = decode(target, other_draft, "block", temperature)
    if temperature == 0.0:
        assert [g.tokens for g in block] == [g.tokens for g in strict]
    else:
        assert rate(decode(target, other_draft, "ears", 1.0, knob=1.0)) > rate(strict)
        assert len(block) == len(PROMPTS) and all(g.tokens for g in block)
