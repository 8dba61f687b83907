"""Verification math of relaxed speculative decoding. Pure functions, no model calls.

Names follow the paper: p target probabilities, q draft probabilities, w weight on the target,
K draft length, nu the verification distribution (the ensemble of p and q).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from diversed.decoding.rng import RESIDUAL, VERIFY, Draws
from diversed.decoding.settings import DEFERRAL, DEFERRALS, MIXINGS
from diversed.decoding.transfer import index


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                    top_k: int = 0) -> torch.Tensor:
    """[..., V] logits -> [..., V] probabilities after temperature, then top-k and nucleus (top-p) filtering, in
    transformers' order (its TopKLogitsWarper, then TopPLogitsWarper); top_k 0 keeps every token.

    temperature == 0 means greedy decoding; the distribution used for mixing is then the plain
    softmax (T = 1), as in transformers' assisted generation.
    """
    return logits_to_logprobs(logits, temperature, top_p, top_k).exp()


def logits_to_logprobs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                       top_k: int = 0) -> torch.Tensor:
    """As logits_to_probs, in log space (-inf for filtered tokens; no underflow at low temperature)."""
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # [..., 1]: the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))  # ties with the k-th stay, as transformers'
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop_sorted = (cum - sorted_logits.softmax(dim=-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.log_softmax(dim=-1)


def _as_weight(w: float | torch.Tensor, shape: torch.Size, device: torch.device, *, check: bool = True) -> torch.Tensor:
    """w as a float tensor of `shape` + [1] (shape: p's without its last dimension, e.g. [K] or [R, K]); check:
    that it lies in [0, 1] (a host sync for a device tensor)."""
    w = (w.to(device, torch.float32) if isinstance(w, torch.Tensor)
         else torch.full((), float(w), dtype=torch.float32, device=device))  # a fill, no copy from the host
    if w.dim() == 0:
        w = w.expand(shape)
    if w.shape != shape:
        raise ValueError(f"weight must be a float or a {list(shape)} tensor, got shape {tuple(w.shape)}")
    if check and not bool(((w >= 0) & (w <= 1)).all()):
        raise ValueError(f"weight w must lie in [0, 1], got {w.tolist()}")
    return w[..., None]


def ensemble(p: torch.Tensor, q: torch.Tensor, w: float | torch.Tensor, mixing: str = "linear", *,
             log_p: torch.Tensor | None = None, log_q: torch.Tensor | None = None, check: bool = True) -> torch.Tensor:
    """Verification distribution nu from p, q: [..., K, V] each, w float or [..., K] -> [..., K, V].

    linear: nu = w p + (1 - w) q;  logit: nu = softmax(w log p + (1 - w) log q). Pass log_p / log_q
    (from logits_to_logprobs) for logit mixing at low temperature, where p and q underflow to 0.
    """
    w = _as_weight(w, p.shape[:-1], p.device, check=check)
    if mixing == "linear":
        return w * p + (1 - w) * q
    if mixing == "logit":
        lp = torch.log(p) if log_p is None else log_p
        lq = torch.log(q) if log_q is None else log_q
        # w log p with w = 0 is 0 even where p = 0 (a token filtered by the ignored model stays possible)
        mixed = torch.where(w == 0, 0.0, w * lp) + torch.where(w == 1, 0.0, (1 - w) * lq)  # [..., K, V]
        # supports that do not overlap (top-p) leave no finite logit: the linear mixture is the only answer
        none = torch.isinf(mixed).all(dim=-1, keepdim=True)
        return torch.where(none, w * p + (1 - w) * q, mixed.softmax(dim=-1))
    raise ValueError(f"unknown mixing {mixing!r}; allowed: {', '.join(MIXINGS)}")


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """TV distance between rows: [..., V] x [..., V] -> [...]."""
    return 0.5 * (a - b).abs().sum(dim=-1)


# verify_rows' tests (settings.RULES'): against an ensemble, or another rule
TESTS = ("ensemble", "lenient", "typical", "topk", "ears", "fuzzy", "threshold", "mentored", "block", "fly", "judge",
         "mars")


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of rows: [..., V] -> [...] (0 log 0 = 0)."""
    return -(p * torch.where(p > 0, p.log(), 0.0)).sum(dim=-1)


def defer(p: torch.Tensor, q: torch.Tensor, alpha: float, deferral: str = DEFERRAL) -> torch.Tensor:
    """Speculative cascades' deferral delta(q, p) in {0, 1} at each position: p, q [..., V] -> [...] float, 1 where
    the cascade defers to the target (Narasimhan et al., "Faster Cascades via Speculative Decoding", ICLR 2025,
    section 4). chow: max q < 1 - alpha; diff: max q < max p - alpha; opt: max q < max p - alpha TV(p, q).
    Speculative sampling towards pi = (1 - delta) q + delta p is the ensemble with w = delta. token (their
    token-specific cascade): the draft mass deferred, sum_v q(v) [p(v) < (1 - alpha) max p], recorded as w; its pi
    is token_cascade's."""
    q_max, p_max = q.max(dim=-1).values, p.max(dim=-1).values
    if deferral == "token":
        return (q * token_deferred(p, alpha)).sum(-1)
    if deferral == "chow":
        bar = 1 - alpha
    elif deferral == "diff":
        bar = p_max - alpha
    elif deferral == "opt":
        bar = p_max - alpha * total_variation(p, q)
    else:
        raise ValueError(f"unknown deferral {deferral!r}; allowed: {', '.join(DEFERRALS)}")
    return (q_max < bar).float()


def token_deferred(p: torch.Tensor, alpha: float) -> torch.Tensor:
    """The token-specific cascade's deferral of each token: [p(v) < (1 - alpha) max p], p [..., V] -> [..., V]."""
    return (p < (1 - alpha) * p.max(-1, keepdim=True).values).float()


def token_cascade(p: torch.Tensor, q: torch.Tensor, alpha: float) -> torch.Tensor:
    """The target of the token-specific speculative cascade (Narasimhan et al., ICLR 2025, section 5): a draft token
    the target finds plausible (p(v) >= (1 - alpha) max p) is kept as q proposes it, the mass of the others goes to
    p: pi = q (1 - delta) + (sum_v q delta) p, p, q [..., V] -> [..., V]. alpha -> -inf: p (strict); 1: q."""
    delta = token_deferred(p, alpha)
    return q * (1 - delta) + (q * delta).sum(-1, keepdim=True) * p


def fuzzy_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The divergence Fuzzy SD's code thresholds (fsd_utils.py:2018-2039): 0.5 KL(m || p) + 0.5 KL(m || q) with
    m = (p + q) / 2, in nats ([..., V] x 2 -> [...]). Its kl_div(log p, m) is KL(m || p), so this is not the
    textbook JS divergence (0.5 KL(p || m) + 0.5 KL(q || m), at most ln 2): inf where p or q lacks mass m has."""
    m = (p + q) / 2
    return 0.5 * (kl_divergence(m, p) + kl_divergence(m, q))


def kl_divergence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) in nats of rows (inf where a has mass b lacks): [..., V] x [..., V] -> [...]."""
    return (a * torch.where(a > 0, a.log() - b.log(), 0.0)).sum(-1)


MENTORED_STEPS = 16  # bisection steps of each of mentored_target's two searches (2^-16 of their log ranges)


def mentored_target(p: torch.Tensor, q: torch.Tensor, budget: float) -> torch.Tensor:
    """Mentored decoding's target (Tran-Thien 2023, "A provably optimal lossy variant of speculative decoding";
    proof.pdf eq. 1-4, 23-28): of the distributions pi with KL(p || pi) <= budget (the target first, in nats), the
    one speculative sampling accepts most often (sum_v min(q, pi)), p, q [..., V] -> [..., V].

    The write-up's solution (its letters swapped: its p is our draft q): pi = p / alpha where p / q <= alpha, q
    where alpha < p / q < beta, p / beta where p / q >= beta, alpha <= 1 <= beta; that is pi = clip(q, c p, rho c p)
    with c = 1 / beta and rho = beta / alpha >= 1. For a rho, c in [1/rho, 1] makes pi sum to 1 (bisection in log
    c); KL(p || pi) grows with rho from 0 (rho = 1: pi = p) towards KL(p || q) (pi = q), so rho is the largest with
    KL <= budget (bisection in log rho up to e^30); q itself where KL(p || q) <= budget. budget 0 is p itself:
    strict. The write-up's notebook searches alpha to within 20% of the budget; this meets it to the searches'
    precision. A search step reads prefix sums: with the tokens sorted by r = q / p, pi is c p where r < c, q up to
    r = rho c and rho c p above."""
    if budget == 0:
        return p
    p2, q2 = p.reshape(-1, p.shape[-1]).double(), q.reshape(-1, q.shape[-1]).double()  # [N, V]
    r, order = torch.where(p2 > 0, q2 / p2, torch.where(q2 > 0, torch.inf, 0.0)).sort(-1)  # [N, V]: q / p
    ps, qs = p2.gather(-1, order), q2.gather(-1, order)
    zero = p2.new_zeros(len(p2), 1)  # [N, 1]
    # the write-up's notebook (its q the target, p the draft): "dkl = cumsum_q_log_q_over_p[-1]", KL(target || draft)
    log_r = torch.where((ps > 0) & (qs > 0), ps * r.log(), 0.0)  # p log(q / p) where both have mass
    P, Q, L = (torch.cat([zero, x.cumsum(-1)], -1) for x in (ps, qs, log_r))

    def mass(log_c: torch.Tensor, log_rho: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[N, 1] each -> sum pi and KL(p || pi) = -sum p log(pi / p) of pi = clip(q, c p, rho c p), [N, 1] each."""
        log_top = log_c + log_rho
        c, top = log_c.exp(), log_top.exp()
        low, high = torch.searchsorted(r, c), torch.searchsorted(r, top, right=True)
        p_low, p_high = P.gather(-1, low), P[:, -1:] - P.gather(-1, high)
        z = c * p_low + Q.gather(-1, high) - Q.gather(-1, low) + top * p_high
        return z, -(log_c * p_low + L.gather(-1, high) - L.gather(-1, low) + log_top * p_high)

    def scale(log_rho: torch.Tensor) -> torch.Tensor:  # the log c at which pi sums to 1
        lo, hi = -log_rho, torch.zeros_like(log_rho)
        for _ in range(MENTORED_STEPS):
            mid = (lo + hi) / 2
            below = mass(mid, log_rho)[0] < 1
            lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
        return hi

    lo, hi = zero, torch.full_like(zero, 30.0)  # log rho
    for _ in range(MENTORED_STEPS):
        mid = (lo + hi) / 2
        z, s = mass(scale(mid), mid)
        inside = s + z.log() <= budget  # KL(p || pi / z) = KL(p || pi) + log z
        lo, hi = torch.where(inside, mid, lo), torch.where(inside, hi, mid)
    c = scale(lo).exp()
    pi = torch.minimum(torch.maximum(q2, c * p2), lo.exp() * c * p2)
    pi = torch.where(kl_divergence(p2, q2)[:, None] <= budget, q2, pi)  # q itself within the budget: exactly q
    return (pi / pi.sum(-1, keepdim=True)).to(p.dtype).reshape(p.shape)


def typical_threshold(p: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Medusa's typical acceptance bar min(epsilon, delta exp(-H(p))) with delta = sqrt(epsilon) and H = -sum p
    log(p + 1e-5), as Medusa's code (medusa/model/utils.py:474-502) and vLLM's TypicalAcceptanceSampler compute it
    (defaults there: epsilon 0.09, delta 0.3): p [..., V] -> [...]."""
    h = -(p * torch.log(p + 1e-5)).sum(-1)
    return torch.minimum(torch.full_like(p[..., 0], epsilon), epsilon ** 0.5 * torch.exp(-h))


# The ensemble weight w [R, k] each rule of settings.RULES verifies against (Rule.weight names it), from what a
# speculative step holds: p [R, k + 1, V], q [R, k, V], the head's inputs h_target [R, k + 1, h_t], h_draft
# [R, k, h_d], and the decode's weight, knob and deferral.
WEIGHT_SOURCES = {
    "ones": lambda p, q, **_: q.new_ones(q.shape[:2]),  # w = 1: strict
    "constant": lambda q, weight, **_: q.new_full(q.shape[:2], float(weight)),  # one w: the static ensemble
    "head": lambda q, trained, h_target, h_draft, **_: trained(h_target[:, :q.shape[1]], h_draft).float(),  # DIVERSED
    "deferral": lambda p, q, knob, deferral, **_: defer(p[:, :q.shape[1]], q, knob, deferral),  # cascades' delta
    # AutoJudge: not a weight but the judge's P(a mismatch matters) at each position, which its test reads
    "judge": lambda q, trained, h_target, h_draft, **_: trained(h_target[:, :q.shape[1]], h_draft).float(),
}


FLY_TOP = 3  # FLy's entropy is over the target's 3 most likely tokens (vLLM's default)


def fly_window(K: int) -> int:
    """FLy's window W at draft length K (vLLM's default, min(6, K - 1)): a mismatch is deferred only when the W
    drafts after it pass the strict test."""
    return min(6, K - 1)


def _fly(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, r: torch.Tensor | None, k: torch.Tensor,
         threshold: float, window: int) -> torch.Tensor:
    """FLy's entropy-gated deferred acceptance (arXiv 2511.22972), as vLLM implements it (vllm/v1/spec_decode/
    fly.py): a draft the strict test rejects at position i is accepted all the same when the target is uncertain
    there (the entropy of its top FLY_TOP probabilities, not renormalised, at least threshold), the target allows
    it (p(x) > 0), and the W drafts after it, all within this step's k, pass the strict test with their own draws.
    draft_tokens [R, K], q / p [R, K, V], r [R, K] (None: greedy, strict test x == argmax p), k [R] -> accepted
    [R, K]. A rejection that is not deferred is strict's (correction from norm(max(0, p - q)))."""
    R, K = draft_tokens.shape
    p_x, q_x = p.gather(-1, draft_tokens[..., None])[..., 0], q.gather(-1, draft_tokens[..., None])[..., 0]
    native = draft_tokens == p.argmax(-1) if r is None else r * q_x < p_x  # [R, K]: strict's test
    top = p.topk(min(FLY_TOP, p.shape[-1]), dim=-1).values  # [R, K, 3]
    h = entropy(top)  # [R, K], not renormalised
    at = torch.arange(K, device=p.device)
    passed = torch.cat([native.new_zeros(R, 1, dtype=torch.long), native.long().cumsum(1)], 1)  # [R, K + 1]
    ahead = passed[:, (at + window + 1).clamp(max=K)] - passed[:, at + 1]  # [R, K]: strict passes among i+1..i+W
    deferred = ~native & (p_x > 0) & (at[None] + window < k[:, None]) & (h >= threshold) & (ahead == window)
    return native | deferred


def block_test(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, k: torch.Tensor,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025, Alg. 2): the
    k drafts of a row tested jointly. draft_tokens [R, K], q [R, K, V], p [R, K + 1, V], k [R] -> (h [R, K], the
    probability of stopping after draft i + 1, and stop [R, K, V], what the next token is drawn from (unnormalised)
    after i accepted drafts, i < k). With P_0 = 1 and P_i = min(1, P_{i-1} p_i(x_i) / q_i(x_i)) (the block's own
    acceptance weight after i drafts), m_i = sum_v min(P_i p_{i+1}(v), q_{i+1}(v)):
        h_i = (P_i - m_i) / (1 - m_i) for i < k,  h_k = P_k;  stop_i = max(0, P_i p_{i+1} - q_{i+1}).
    The step keeps tau = max{i : u_i <= h_i} drafts (0 if none), then draws from norm(stop_tau), or p_{k+1} at
    tau = k. An exact sampler of p that accepts at least as many tokens as strict in expectation (their Theorem 2);
    not draw for draw: with the same uniforms, strict may keep a draft that block verification drops."""
    R, K, V = q.shape
    at = torch.arange(K, device=q.device)
    live = at < k[:, None]  # [R, K]
    p_x, q_x = p[:, :K].gather(-1, draft_tokens[..., None])[..., 0], q.gather(-1, draft_tokens[..., None])[..., 0]
    log_ratio = torch.where(live, p_x.log() - q_x.clamp_min(torch.finfo(q.dtype).tiny).log(), 0.0)  # [R, K]
    walk = log_ratio.cumsum(1)  # [R, K]: log of the unclipped product; P_i = exp(walk_i - max(0, max_{j<=i} walk_j))
    P = (walk - walk.cummax(1).values.clamp_min(0)).exp()  # [R, K]: P_1 .. P_K
    P_from0 = torch.cat([P.new_ones(R, 1), P], 1)  # [R, K + 1]: P_0 .. P_K
    stop = (P_from0[:, :K, None] * p[:, :K] - q).clamp_min(0)  # [R, K, V]: after 0 .. K - 1 drafts
    stop = torch.where(stop.sum(-1, keepdim=True) <= torch.finfo(p.dtype).tiny, p[:, :K], stop)  # nothing left: p
    m = torch.minimum(P[..., None] * p[:, 1:], torch.cat([q[:, 1:], q.new_zeros(R, 1, V)], 1)).sum(-1)  # [R, K]
    inner = torch.where(1 - m > 1e-12, (P - m) / (1 - m).clamp_min(1e-12), 0.0).clamp(0, 1)  # [R, K]: i < k
    h = torch.where(at + 1 == k[:, None], P, inner)
    return torch.where(live, h, 0.0), stop


def _strict_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) unnormalised, [..., V]; p where it has no mass (p == q up to rounding: a draw from p is
    then exact)."""
    residual = (p - q).clamp_min(0)
    return torch.where(residual.sum(dim=-1, keepdim=True) <= torch.finfo(p.dtype).tiny, p, residual)


def _emitted(q: torch.Tensor, a: torch.Tensor, stop: torch.Tensor) -> torch.Tensor:
    """The distribution a sampled step emits at a position: a draft x ~ q kept with probability a(x), else a draw
    from norm(stop): q a + (1 - sum q a) norm(stop), all [..., V]."""
    kept = q * a
    return kept + (1 - kept.sum(-1, keepdim=True)).clamp_min(0) * stop / stop.sum(-1, keepdim=True)


Outcome = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (accepted [R, K] bool, stop [R, K, V], nu [R, K, V])


def _test(test: str, knob: float | None, draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
          r: torch.Tensor | None, knob2: float | None = None) -> Outcome:
    """A test other than the ensemble's: draft_tokens [R, K], q [R, K, V], p [R, K, V] (the drafted positions),
    r [R, K] uniforms (None: greedy) -> (accepted [R, K] bool, stop [R, K, V] what the correction is drawn from
    (unnormalised), nu [R, K, V] the distribution a sampled step emits at each position, for bias_tv). Each rule's
    function states its source's rule; MARS (which reads logits) is _mars."""
    if test not in _RULE_TESTS:
        raise ValueError(f"unknown verification test {test!r}; allowed: {', '.join(TESTS)}")
    p_x, q_x = p.gather(-1, draft_tokens[..., None])[..., 0], q.gather(-1, draft_tokens[..., None])[..., 0]  # [R, K]
    return _RULE_TESTS[test](knob, knob2, draft_tokens, q, p, p_x, q_x, r)


def _lenient(knob, knob2, draft_tokens, q, p, p_x, q_x, r) -> Outcome:
    """lenient (Leviathan et al. 2023, appendix A.5, lenience l = knob): q is multiplied by l before the comparison
    of Algorithm 1, so x is accepted with probability min(1, p(x) / (l q(x))); the correction is Algorithm 1's,
    norm(max(0, p - q)) (A.5 does not say; the authors' colab and Fast-HSD do this); l = 1 is strict. Greedy (A.5's
    temperature-0 rule, "p(x) <= l max p" there, a misprint: at l = 1 it must be argmax): accept while p(x) >= l max
    p and p(x) > 0 (l = 0 never keeps a token the target excludes), correction argmax p."""
    lq = knob * q
    a = torch.where(lq < p, 1.0, p / lq.clamp_min(torch.finfo(p.dtype).tiny))  # [R, K, V]: min(1, p / (l q))
    stop = _strict_residual(p, q)
    if r is None:
        return (p_x >= knob * p.max(-1).values) & (p_x > 0), p, _emitted(q, a, stop)
    return r * knob * q_x < p_x, stop, _emitted(q, a, stop)


def _typical(knob, knob2, draft_tokens, q, p, p_x, q_x, r) -> Outcome:
    """typical (Medusa, medusa/model/utils.py:474-502, epsilon = knob, delta = sqrt(epsilon) as its docstring
    recommends): accept x when p(x) > min(epsilon, delta exp(-H(p))); the token after the accepted prefix is argmax
    p (its default fast path, utils.py:280-286; vLLM's TypicalAcceptanceSampler likewise); greedy: exact argmax
    match (utils.py:459-472), strict greedy."""
    if r is None:  # Medusa at temperature 0: the argmax, strict greedy
        return draft_tokens == p.argmax(-1), p, p
    # medusa/model/utils.py: "posterior_mask = candidates_prob > threshold"; the next token "if temperature == 0
    # or fast: candidates_logit = torch.argmax(logits[:, -1])"
    a = (p > typical_threshold(p, knob)[..., None]).float()  # [R, K, V]
    top = torch.zeros_like(p).scatter(-1, p.argmax(-1, keepdim=True), 1.0)  # [R, K, V]: argmax p
    return a.gather(-1, draft_tokens[..., None])[..., 0] > 0, top, _emitted(q, a, top)


def _topk(knob, knob2, draft_tokens, q, p, p_x, q_x, r) -> Outcome:
    """topk (AutoJudge's top-k baseline, k = knob, else a draw from p; TensorRT-LLM's relaxed acceptance margin delta
    = knob2, mtpKernels.cu mtpRelaxedAcceptanceKernel): accept x when it is among p's k most likely tokens (ties
    kept) and p(x) >= max p - delta (additive, in probability; default delta 1: the top k alone); k = 1 under
    greedy is strict greedy."""
    kth = p.topk(min(int(knob), p.shape[-1]), dim=-1).values[..., -1:]  # [R, K, 1]
    delta = 1.0 if knob2 is None else knob2
    a = ((p >= kth) & (p >= p.max(-1, keepdim=True).values - delta)).float()  # [R, K, V]
    return a.gather(-1, draft_tokens[..., None])[..., 0] > 0, p, _emitted(q, a, p)


def _fuzzy(knob, knob2, draft_tokens, q, p, p_x, q_x, r) -> Outcome:
    """fuzzy (Fuzzy SD, Holsman et al., ACL Findings 2025; maxholsman/fsd fsd_utils.py:2018-2039, 2121, 2138-2146;
    the threshold is the knob): a draft is accepted, without a coin, where fuzzy_divergence(p, q) <= knob; at the
    first position over it a token is drawn from p (no residual) and the step ends. Theirs reads the divergence on the
    unprocessed softmaxes (temperature 1, no top-k / top-p) and proposes drafts greedily; here it reads the decode's
    p and q (the same at temperature 1 with sampling full) and q's own drafts. Greedy: the draw is argmax p (their
    code samples from p at temperature 1 even there). knob = 0 keeps only where p = q: an exact sampler of p."""
    # fsd_utils.py: "divs = (0.5 * kl_div(log(p), m) + 0.5 * kl_div(log(q), m)).sum(-1)", "is_accepted = divs
    # <= threshold" (no coin), "n_matches = ((~is_accepted).cumsum(-1) < 1).sum()", then "next_tokens =
    # multinomial(p_n_plus_1)": the first position over T draws from p
    kept = fuzzy_divergence(p, q) <= knob  # [R, K]: no coin, and it does not depend on x
    return kept, p, torch.where(kept[..., None], q, p)


def _ears(knob, knob2, draft_tokens, q, p, p_x, q_x, r) -> Outcome:
    """ears (EARS, arXiv 2512.13194; its authors' change vllm-ascend#5587, rejection_sampler.py, beta = knob): accept x
    when p(x) / q(x) >= max(u - beta (1 - max p), eps), eps float32's. The checked code has no eps: its test admits
    p(x) = 0 at u <= beta (1 - max p); the floor (the clamp of the later vllm-ascend#7845, whose code was not read
    here) keeps a token the target excludes out. The correction is Algorithm 1's; beta = 0 is strict. Greedy (our
    reading, q a point mass on x; their change leaves greedy requests to strict): accept while p(x) >= max p - beta
    (1 - max p) and p(x) > 0, correction argmax p."""
    slack = knob * (1 - p.max(-1).values)  # [R, K]: beta (1 - max p)
    # rejection_sampler.py (vllm-ascend#5587): "uncertainties = 1.0 - max_target_probs", "tolerance =
    # base_tolerance * uncertainty", "if draft_prob > 0 and (target_prob / draft_prob) >= (uniform_prob -
    # tolerance)"; the floor EARS_FLOOR keeps p(x) = 0 out
    ratio = p / q.clamp_min(torch.finfo(p.dtype).tiny)  # [R, K, V]
    a = torch.where(ratio >= EARS_FLOOR, (ratio + slack[..., None]).clamp(max=1.0), 0.0)  # [R, K, V]
    stop = _strict_residual(p, q)
    if r is None:
        return (p_x >= p.max(-1).values - slack) & (p_x > 0), p, _emitted(q, a, stop)
    return (p_x >= EARS_FLOOR * q_x) & (r * q_x < p_x + slack * q_x), stop, _emitted(q, a, stop)


def _threshold_test(knob, knob2, draft_tokens, q, p, p_x, q_x, r) -> Outcome:
    """threshold (SGLang's acceptance thresholds, speculative_sampling.cuh; t_acc = knob, t_single = knob2, default
    t_acc): accept x when p(x) >= t_single, else with probability min(1, p(x) / t_acc); the correction is p without
    x (SGLang's residual of a one-hot draft). At t_acc = t_single = 1 it accepts x with probability p(x) and is an
    exact sampler of p for any q, accepting less than strict (p(x) <= min(1, p(x) / q(x))); greedy: strict greedy."""
    return _threshold(knob, knob if knob2 is None else knob2, draft_tokens, q, p, r)


EARS_FLOOR = float(torch.finfo(torch.float32).eps)  # the floor of EARS' bar u - beta (1 - max p): p(x) = 0 never passes
_RULE_TESTS = {"lenient": _lenient, "typical": _typical, "topk": _topk, "fuzzy": _fuzzy, "ears": _ears,
               "threshold": _threshold_test}


def _mars(theta: float, draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, z: torch.Tensor,
          r: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MARS's margin-aware test (Song et al., arXiv 2601.15498; 5SSjw/MARS mars/model/utils.py:594-731): with z the
    target's logits as its sampler sees them [R, K, V] (the tokens top-k / top-p drop at -inf) and z1 >= z2 its two
    largest, a position is relaxed where z2 / z1 > theta (the logits' ratio, as theirs: not invariant to a shift of
    the logits). Relaxed: x is kept, without a coin, when it is the target's first or second choice, else a draw
    from p. Otherwise speculative sampling: x kept with probability min(1, p(x) / q(x)), else a draw from p with x's
    entry lowered to max(0, p(x) - q(x)) (their correction; not norm(max(0, p - q))). Greedy (the paper's rule;
    their code does not relax at temperature 0): x kept when it is the first choice, or the second at a relaxed
    position; else argmax p. Returns (accepted [R, K], stop [R, K, V], emitted [R, K, V])."""
    top2 = z.topk(2, dim=-1)  # [R, K, 2]
    z1, z2 = top2.values[..., 0], top2.values[..., 1]
    # utils.py: "logit_ratio = top2_logits[1].item() / (top2_logits[0].item() + 1e-10)", "use_relaxation =
    # logit_ratio > relaxation_threshold", then "if xi in top2_tokens: accept"
    relaxed = z2 / (z1 + 1e-10) > theta  # [R, K]
    first = draft_tokens == top2.indices[..., 0]
    in_top2 = first | (draft_tokens == top2.indices[..., 1])
    two = torch.zeros_like(p).scatter(-1, top2.indices, 1.0)  # [R, K, V]
    p_x, q_x = p.gather(-1, draft_tokens[..., None])[..., 0], q.gather(-1, draft_tokens[..., None])[..., 0]
    if r is None:
        kept = first | (relaxed & in_top2)
        return kept, p, torch.where(relaxed[..., None], _emitted(q, two, p), p)
    kept = torch.where(relaxed, in_top2, r * q_x < p_x)  # [R, K]
    # utils.py: "adjusted_prob = max(0.0, px - qx)", "gtp[xi] = adjusted_prob", "gtp = gtp / gtp.sum()"
    lowered = p.scatter(-1, draft_tokens[..., None], (p_x - q_x).clamp_min(0)[..., None])  # [R, K, V]
    stop = torch.where(relaxed[..., None], p, lowered)
    # speculative positions: kept min(p, q); a rejected x (q(x) > p(x)) draws from p without x
    over = (q - p).clamp_min(0) / (1 - p).clamp_min(torch.finfo(p.dtype).tiny)  # [R, K, V]
    sd = torch.minimum(p, q) + p * (over.sum(-1, keepdim=True) - over)
    return kept, stop, torch.where(relaxed[..., None], _emitted(q, two, p), sd)


def outright(kept: torch.Tensor, draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, r: torch.Tensor | None,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drafts accepted outright where kept [R, K] holds, else by strict's test and correction (fuzzy's and the judge's
    test; greedy: x == argmax p, correction argmax p): draft_tokens [R, K], q, p [R, K, V], r [R, K] uniforms or
    None -> (accepted [R, K], stop [R, K, V], emitted [R, K, V]: q where kept, else p)."""
    p_x, q_x = p.gather(-1, draft_tokens[..., None])[..., 0], q.gather(-1, draft_tokens[..., None])[..., 0]  # [R, K]
    emitted = torch.where(kept[..., None], q, p)  # strict's test emits p
    if r is None:
        return kept | (draft_tokens == p.argmax(-1)), p, emitted
    return kept | (r * q_x < p_x), _strict_residual(p, q), emitted


def _threshold(t_acc: float, t_single: float, draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
               r: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """_test's threshold rule: (accepted [R, K], stop [R, K, V] p without the draft, emitted [R, K, V]). A draft x
    is kept with a(x), else y ~ p(y) / (1 - p(x)), y != x: the emitted pi(y) = q(y) a(y) + p(y) (S - q(y) (1 - a(y))
    / (1 - p(y))) with S = sum_x q(x) (1 - a(x)) / (1 - p(x))."""
    p_x = p.gather(-1, draft_tokens[..., None])[..., 0]  # [R, K]
    a = torch.where(p >= t_single, 1.0, (p / t_acc).clamp(max=1.0))  # [R, K, V]
    stop = p.scatter(-1, draft_tokens[..., None], 0.0)  # [R, K, V]
    stop = torch.where(stop.sum(-1, keepdim=True) <= torch.finfo(p.dtype).tiny, p, stop)
    moved = q * (1 - a) / (1 - p).clamp_min(torch.finfo(p.dtype).tiny)  # [R, K, V]: 0 where a = 1
    emitted = q * a + p * (moved.sum(-1, keepdim=True) - moved)
    if r is None:
        return draft_tokens == p.argmax(-1), p, emitted
    return (p_x >= t_single) | (r * t_acc < p_x), stop, emitted


def _ensemble_test(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, nu: torch.Tensor,
                   r: torch.Tensor | None, mixing: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The test against the ensemble nu [R, K, V] of drafts [R, K] ~ q [R, K, V] (p [R, K, V] the drafted positions'),
    r [R, K] uniforms (None: greedy) -> (accepted [R, K] bool, stop [R, K, V]: what the correction is drawn from).
    mixing: linear draws the correction from norm(max(0, p - q)), equal to norm(max(0, nu - q)) and better
    conditioned; any other value (logit, or "target": a nu of another form) from norm(max(0, nu - q))."""
    if r is None:
        return draft_tokens == nu.argmax(dim=-1), nu  # greedy: the correction is argmax nu_n
    nu_x, q_x = nu.gather(-1, draft_tokens[..., None])[..., 0], q.gather(-1, draft_tokens[..., None])[..., 0]
    accepted = r * q_x < nu_x  # r < nu/q without dividing; a draft always has q_x > 0
    # residual: for linear mixing nu - q = w (p - q), so norm(max(0, p - q)) is exact and better conditioned
    residual = ((p if mixing == "linear" else nu) - q).clamp_min(0)  # [R, K, V]
    # nu == q up to rounding leaves no residual mass; then a draw from nu is exact
    empty = residual.sum(dim=-1, keepdim=True) <= torch.finfo(residual.dtype).tiny  # [R, K, 1]
    return accepted, torch.where(empty, nu, residual)


def _check_rows(q: torch.Tensor, k: list[int], draws: Draws | None, greedy: bool, test: str,
                **tensors: torch.Tensor | None) -> None:
    """verify_rows' arguments agree in shape with q [R, K, V] (no host sync: shapes live on the host); tensors:
    draft_tokens, p, w, log_p, log_q."""
    R, K, V = q.shape
    shapes = {"draft_tokens": (R, K), "p": (R, K + 1, V), "w": (R, K), "log_p": (R, K + 1, V), "log_q": (R, K, V)}
    wrong = [f"{name} {tuple(x.shape)} (expected {list(shapes[name])})" for name, x in tensors.items()
             if x is not None and tuple(x.shape) != shapes[name]]
    if len(k) != R or any(not 0 <= x <= K for x in k):
        wrong.append(f"k {list(k)} (expected {R} draft lengths, each in [0, {K}])")
    if not greedy and (draws is None or tuple(draws.count.shape) != (R,)):
        wrong.append(f"draws for {'no' if draws is None else draws.count.shape[0]} rows (sampling needs {R})")
    if wrong:
        raise ValueError(f"verify_rows with q [R = {R}, K = {K}, V = {V}]: " + "; ".join(wrong))
    if test not in TESTS:
        raise ValueError(f"unknown verification test {test!r}; allowed: {', '.join(TESTS)}")


@dataclass(frozen=True)
class Criterion:
    """How verify_rows accepts a draft. test: "ensemble" verifies against nu = ensemble(p, q, w) mixed by `mixing`;
    the others (_test; "fly" with its window of later drafts) with knob and knob2, w unused; "mentored" samples
    towards mentored_target's pi, a cascade with deferral "token" towards token_cascade's; "judge" reads w as
    AutoJudge's P(a mismatch matters) and keeps a draft outright where it is below knob (AutoJudge's greedy rule;
    sampled, after strict's test: this harness's extension). greedy: the
    temperature-0 rule (no uniforms drawn, the correction an argmax)."""

    test: str = "ensemble"
    mixing: str = "linear"
    greedy: bool = False
    knob: float | None = None
    window: int = 0
    knob2: float | None = None
    deferral: str = DEFERRAL


@dataclass(frozen=True)
class Logits:
    """What a rule may read besides p and q: log p [R, K + 1, V] and log q [R, K, V] (logit mixing, without
    underflow); target: the target's raw logits [R, K + 1, V] (MARS' margin is a ratio of logits)."""

    log_p: torch.Tensor | None = None
    log_q: torch.Tensor | None = None
    target: torch.Tensor | None = None


def verify_rows(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, w: torch.Tensor, k: list[int], *,
                draws: Draws | None, criterion: Criterion = Criterion(), logs: Logits = Logits(),
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """verify() for R rows at once, row r with its own k[r] <= K drafts (the rest padding), its test's uniforms at
    lanes VERIFY + i and its correction at lane RESIDUAL of its own stream (draws; None when greedy): draft_tokens
    [R, K], q [R, K, V], p [R, K + 1, V], w [R, K] -> (n_accepted [R], next_token [R], bias_tv [R, K + 1], kl
    [R, K + 1]) on the device: TV(nu, p) and KL(nu || p) in nats of the distribution nu a step emits at each
    position (inf where nu has mass p lacks), both 0 from k[r] on.

    criterion: the test (Criterion; FLy's bias and KL are NaN: its emitted distribution depends on later drafts);
    logs: the Logits a rule reads besides p and q. Every stopping point's outcome is computed, then n's taken.
    """
    R, K, V = q.shape
    log_p, log_q = logs.log_p, logs.log_q
    test, mixing, greedy, knob = criterion.test, criterion.mixing, criterion.greedy, criterion.knob
    _check_rows(q, k, draws, greedy, test, draft_tokens=draft_tokens, p=p, w=w, log_p=log_p, log_q=log_q)
    dev = q.device
    k_t = index(tuple(k), dev)  # [R]
    live = torch.arange(K, device=dev) < k_t[:, None]  # [R, K]: the positions each row drafted
    r = None if greedy else draws.uniform(VERIFY, K)  # [R, K] float64: position i's uniform, the same at any K
    n = None  # the first rejection, unless the test sets it
    if test == "block" and not greedy:  # greedy: strict's test (the only exact one)
        h, stop_dist = block_test(draft_tokens, q, p, k_t)
        kept = (r <= h) * torch.arange(1, K + 1, device=dev)  # [R, K]: i where u_i <= h_i
        n = torch.cat([kept.new_zeros(R, 1), kept], 1).amax(1)  # [R]: the last such i, else 0 (also when K = 0)
        nu = p[:, :K]  # an exact sampler of p: no bias
    elif test == "block":
        nu = stop_dist = p[:, :K]
        accepted = draft_tokens == p[:, :K].argmax(-1)
    elif test == "fly":
        accepted = _fly(draft_tokens, q, p[:, :K], r, k_t, knob, criterion.window)
        stop_dist = p[:, :K] if greedy else _strict_residual(p[:, :K], q)
        nu = torch.full_like(q, math.nan)  # no per-position distribution to compare with p
    elif test == "judge":  # w: the judge's P(the mismatch matters) [R, K]
        accepted, stop_dist, nu = outright(w < knob, draft_tokens, q, p[:, :K], r)
    elif test == "mentored" or criterion.deferral == "token":  # speculative sampling towards another target
        nu = mentored_target(p[:, :K], q, knob) if test == "mentored" else token_cascade(p[:, :K], q, knob)
        accepted, stop_dist = _ensemble_test(draft_tokens, q, p[:, :K], nu, r, "target")
    elif test == "mars":
        if logs.target is None:
            raise ValueError("MARS reads the target's logits: pass verify_rows(..., logs=Logits(target=))")
        z = torch.where(p[:, :K] > 0, logs.target[:, :K].to(p.dtype), -torch.inf)  # as its sampler sees them
        accepted, stop_dist, nu = _mars(knob, draft_tokens, q, p[:, :K], z, r)
    elif test != "ensemble":
        accepted, stop_dist, nu = _test(test, knob, draft_tokens, q, p[:, :K], r, criterion.knob2)
    else:
        nu = ensemble(p[:, :K], q, w, mixing, log_p=None if log_p is None else log_p[:, :K], log_q=log_q,
                      check=False)  # [R, K, V]
        accepted, stop_dist = _ensemble_test(draft_tokens, q, p[:, :K], nu, r, mixing)
    if n is None:
        n = (accepted & live).long().cumprod(dim=1).sum(dim=1)  # [R]: first rejection, k if none
    at = torch.arange(K + 1, device=dev)[None, :, None]  # [1, K + 1, 1]
    # row n of each: stop_dist where n < k, the bonus p_{k+1} at n = k
    rows = torch.where(at < k_t[:, None, None], torch.cat([stop_dist, q.new_zeros(R, 1, V)], 1), p)  # [R, K+1, V]
    dist = rows.gather(1, n[:, None, None].expand(R, 1, V))[:, 0]  # [R, V]
    next_token = dist.argmax(dim=-1) if greedy else draws.categorical(dist, RESIDUAL)  # [R]
    drafted = at[..., 0] < k_t[:, None]  # [R, K + 1]
    bias = torch.cat([total_variation(nu, p[:, :K]), p.new_zeros(R, 1)], 1)  # [R, K + 1]
    kl = torch.cat([kl_divergence(nu, p[:, :K]), p.new_zeros(R, 1)], 1)  # [R, K + 1]
    return n, next_token, torch.where(drafted, bias, 0.0), torch.where(drafted, kl, 0.0)


def synthetic_rows(k: list[int], p: torch.Tensor, acceptance: float, *, greedy: bool = False,
                   draws: Draws | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic acceptance for R rows, row r with k[r] drafts, accepting at the uniforms of its own stream (draws,
    at verify_rows' lanes; drawn under greedy decoding too): p [R, K + 1, V] -> (n [R], next_token [R], bias
    [R, K + 1] zeros, kl [R, K + 1] zeros), as verify_rows."""
    if not 0 <= acceptance <= 1:
        raise ValueError(f"synthetic acceptance must be in [0, 1], got {acceptance}")
    R, K1, V = p.shape
    live = torch.arange(K1 - 1, device=p.device) < index(tuple(k), p.device)[:, None]  # [R, K]
    n = ((draws.uniform(VERIFY, K1 - 1) < acceptance) & live).long().cumprod(dim=1).sum(dim=1)  # [R]
    dist = p.gather(1, n[:, None, None].expand(R, 1, V))[:, 0]  # [R, V]
    next_token = dist.argmax(dim=-1) if greedy else draws.categorical(dist, RESIDUAL)  # [R]
    return n, next_token, p.new_zeros(R, K1), p.new_zeros(R, K1)
