"""The acceptance rules published after the first families (settings.RULES): block verification, exact for p, checked
by enumerating every draft block of a prefix-dependent pair; EARS, fuzzy SD, SGLang's thresholds, mentored decoding,
the token-specific cascade and top-k's margin, each against its formula written here from its paper. Each rule's
identity with strict, its acceptance against a direct computation, its emitted distribution (chi-square, with a
power check), and batch invariance."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import (
    DRAWS,
    PROMPTS,
    Stream,
    V,
    accepts_as,
    binomial_ok,
    chi_square_ok,
    decode,
    first_position,
    random_dists,
    related,
    row_draws,
    verify,
    verify_many,
)

from diversed.decoding.verifiers import (
    Criterion,
    block_test,
    fuzzy_divergence,
    kl_divergence,
    mentored_target,
    total_variation,
    verify_rows,
)

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
    accepts_as(q, p, a, emitted, 5, test="ears", knob=beta)


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


# ------------------------------------------------------------------------------------------ the other new rules


def test_token_cascade_follows_its_rule():
    """Narasimhan et al.'s token-specific deferral: tokens with p(v) >= (1 - alpha) max p are kept as q proposes
    them, the rest of q's mass goes to p; a draft is accepted with min(1, pi / q)."""
    p = random_dists(100, 2, sharp=1.5)
    q = related(p[:1], 101)
    alpha = 0.6
    kept = (p[0] >= (1 - alpha) * p[0].max()).float()
    pi = q[0] * kept + (q[0] * (1 - kept)).sum() * p[0]
    assert 0 < kept.sum() < V
    accepts_as(q, p, torch.minimum(torch.ones(V), pi / q[0]), pi, 6, deferral="token", knob=alpha)


def test_topk_margin_follows_its_rule():
    """TensorRT-LLM's relaxed acceptance: x in p's top k and p(x) >= max p - delta; delta 1 is the top k alone."""
    p = random_dists(102, 2, sharp=1.0)
    q = related(p[:1], 103)
    k, r = 4, 0.1
    a = torch.zeros(V)
    a[p[0].argsort(descending=True)[:k]] = 1.0
    a *= (p[0] >= p[0].max() - r).float()
    assert 0 < a.sum() < k  # the margin drops some of the top k
    accepts_as(q, p, a, q[0] * a + (1 - (q[0] * a).sum()) * p[0], 7, test="topk", knob=k, knob2=r)
    gd = torch.Generator().manual_seed(12)
    for seed in range(200):
        x = torch.multinomial(q[0], 1, generator=gd)
        plain = verify(x, q, p, 1.0, stream=Stream(seed), test="topk", knob=k)
        zero = verify(x, q, p, 1.0, stream=Stream(seed), test="topk", knob=k, knob2=1.0)
        assert (plain.n_accepted, plain.next_token) == (zero.n_accepted, zero.next_token)


def test_fuzzy_and_kl_divergences_are_scipys():
    from scipy.stats import entropy

    p, q = random_dists(104, 3), random_dists(105, 3)
    pairs = list(zip(p.tolist(), q.tolist(), strict=True))
    m = [[(x + y) / 2 for x, y in zip(a, b, strict=True)] for a, b in pairs]  # fuzzy's: KL(m || p), KL(m || q)
    expected = [0.5 * entropy(mm, a) + 0.5 * entropy(mm, b) for mm, (a, b) in zip(m, pairs, strict=True)]
    assert fuzzy_divergence(p, q).tolist() == pytest.approx(expected, abs=1e-6)
    assert kl_divergence(p, q).tolist() == pytest.approx([entropy(a, b) for a, b in pairs], abs=1e-5)


def test_fuzzy_keeps_every_draft_below_its_bound_and_none_above():
    """Fuzzy SD's code: every draft kept where the divergence is within T (q emitted), none above (p emitted)."""
    p = random_dists(106, 2, sharp=1.0)
    q = related(p[:1], 107, noise=0.5)
    d = float(fuzzy_divergence(p[0], q[0]))
    accepts_as(q, p, torch.ones(V), q[0], 8, test="fuzzy", knob=d * 1.01)  # every draft, the draft's q emitted
    _, n, nxt = verify_many(q, p, 1.0, DRAWS, 9, test="fuzzy", knob=d * 0.99)
    counts = torch.bincount(nxt, minlength=V).float()
    assert int(n.sum()) == 0 and chi_square_ok(counts, p[0]) and not chi_square_ok(counts, q[0])


def threshold_rule(q, p, t_acc, t_single):
    """SGLang's rule written out: a(x) = 1 where p(x) >= t_single, else min(1, p(x) / t_acc); after rejecting x,
    y ~ p(y) / (1 - p(x)) over y != x; the emitted distribution summed over x ~ q."""
    a = torch.where(p >= t_single, torch.ones_like(p), torch.clamp(p / t_acc, max=1.0))
    emitted = q * a
    for x in range(V):
        rest = p.clone()
        rest[x] = 0
        emitted = emitted + q[x] * (1 - a[x]) * rest / rest.sum()
    return a, emitted


def test_threshold_follows_sglangs_rule_and_is_exact_at_one():
    p = random_dists(110, 2, sharp=1.0)
    q = related(p[:1], 111)
    a, emitted = threshold_rule(q[0], p[0], 0.3, 0.2)
    accepts_as(q, p, a, emitted, 10, test="threshold", knob=0.3, knob2=0.2)
    a, emitted = threshold_rule(q[0], p[0], 1.0, 1.0)
    assert torch.allclose(emitted, p[0], atol=1e-6) and torch.allclose(a, p[0])  # exact, accepting p(x)
    x, n, nxt = verify_many(q, p, 1.0, DRAWS, 11, test="threshold", knob=1.0)
    counts = torch.bincount(torch.where(n > 0, x[:, 0], nxt), minlength=V).float()
    assert chi_square_ok(counts, p[0]) and binomial_ok(int(n.sum()), DRAWS, float((q[0] * p[0]).sum()))
    assert float((q[0] * p[0]).sum()) < float(torch.minimum(q[0], p[0]).sum())  # less than strict


def test_mentored_target_is_the_best_within_its_kl_budget():
    """Over 200,000 random distributions of three tokens, none within KL(p || pi) <= D accepts more (sum min(q, pi))
    than mentored_target's, which lies within the budget and is reached by the search (within 1e-3)."""
    for seed, budget in ((0, 0.02), (1, 0.1), (2, 0.3)):
        p, q = (torch.randn(2, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 1.5).softmax(-1)
        pi = mentored_target(p, q, budget)
        assert float(pi.sum()) == pytest.approx(1.0) and float(kl_divergence(p, pi)) <= budget + 1e-6
        ours = float(torch.minimum(q, pi).sum())
        torch.manual_seed(14 + seed)
        others = torch.distributions.Dirichlet(torch.ones(3, dtype=torch.float64)).sample((200_000,))
        inside = others[kl_divergence(p.expand_as(others), others) <= budget]
        best = float(torch.minimum(q, inside).sum(-1).max())
        assert best <= ours + 1e-9 and best > ours - 0.01, (budget, best, ours)  # ours is feasible: the search nears it
        assert float(torch.minimum(q, p).sum()) < ours <= 1  # above strict's, at most every draft
    p = random_dists(112, 1, sharp=1.0)
    assert torch.equal(mentored_target(p, random_dists(113, 1), 0.0), p)
    assert torch.allclose(mentored_target(p, related(p, 114, 0.1), 10.0), related(p, 114, 0.1), atol=1e-5)


def test_mentored_decoding_samples_its_target():
    p = random_dists(115, 2, sharp=1.0)
    q = related(p[:1], 116)
    pi = mentored_target(p[:1], q, 0.05)[0]
    accepts_as(q, p, torch.minimum(torch.ones(V), pi / q[0]), pi, 12, test="mentored", knob=0.05)


# ------------------------------------------------------------------------------------------ every new rule


@pytest.mark.parametrize("criterion", [Criterion("block"), Criterion("ears", knob=0.5), Criterion("fuzzy", knob=0.05),
                                       Criterion("threshold", knob=0.5, knob2=0.8), Criterion("mentored", knob=0.1),
                                       Criterion("topk", knob=3, knob2=0.2), Criterion(knob=0.3, deferral="token")],
                         ids=lambda c: c.test if c.deferral == "chow" else c.deferral)
def test_rows_of_a_new_rule_draw_as_batches_of_one(criterion):
    """verify_rows over rows with their own k equals each row alone."""
    R, K = 3, 4
    q = torch.stack([random_dists(160 + r, K) for r in range(R)])
    p = torch.stack([random_dists(170 + r, K + 1) for r in range(R)])
    draft = torch.stack([torch.multinomial(q[r], 1, generator=torch.Generator().manual_seed(r))[:, 0]
                         for r in range(R)])
    k = [4, 2, 3]
    for seed in range(20):
        n, nxt, *_ = verify_rows(draft, q, p, torch.ones(R, K), k, criterion=criterion, draws=row_draws(seed, R))
        for r in range(R):
            one = verify_rows(draft[r:r + 1, :k[r]], q[r:r + 1, :k[r]], torch.cat([p[r:r + 1, :k[r]],
                              p[r:r + 1, k[r]:k[r] + 1]], 1), torch.ones(1, k[r]), [k[r]],
                              criterion=criterion, draws=row_draws(seed, R).at(r))
            assert (int(n[r]), int(nxt[r])) == (int(one[0][0]), int(one[1][0]))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_new_rules_on_models(target, other_draft, temperature):
    """At the settings where each reduces to strict (EARS beta = 0, mentored D = 0, a token cascade
    that always defers) the new rules emit strict's tokens for the same seeds, block verification and the thresholds
    under greedy too; sampled, block verification decodes and the relaxed rules keep more drafts than strict."""
    def rate(gens):
        return sum(sum(g.accepted) for g in gens) / sum(sum(g.drafted) for g in gens)

    strict = decode(target, other_draft, "strict", temperature)
    tokens = [g.tokens for g in strict]
    for verifier, kw in (("ears", {"knob": 0.0}), ("mentored", {"knob": 0.0}),
                         ("cascade", {"knob": -1e9, "deferral": "token"})):
        assert [g.tokens for g in decode(target, other_draft, verifier, temperature, **kw)] == tokens, verifier
    block = decode(target, other_draft, "block", temperature)
    if temperature == 0.0:
        assert [g.tokens for g in block] == tokens
        assert [g.tokens for g in decode(target, other_draft, "threshold", 0.0, knob=0.5)] == tokens
        return
    assert len(block) == len(PROMPTS) and all(g.tokens for g in block)
    for verifier, kw in (("ears", {"knob": 1.0}), ("fuzzy", {"knob": 20.0}), ("mentored", {"knob": 0.5}),
                         ("threshold", {"knob": 0.002}), ("cascade", {"knob": 0.9, "deferral": "token"})):
        assert rate(decode(target, other_draft, verifier, 1.0, **kw)) > rate(strict), verifier
