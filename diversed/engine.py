"""The decoding engine: speculative decoding with strict / fixed / dynamic verification, and the
autoregressive baselines, for one sequence at a time (batch size 1).

Each model keeps a KV cache that holds every token of the sequence but the newest. A step drafts K
tokens with the draft, scores [newest, d_1..d_K] with one target forward, verifies (verifiers.verify),
then crops both caches back to the accepted prefix: accepted tokens are never re-encoded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from diversed import fastpath
from diversed.verifiers import MIXINGS, logits_to_logprobs, logits_to_probs, synthetic_on_device, verify_on_device

VERIFIERS = ("autoregressive", "draft", "strict", "fixed", "dynamic")  # draft: the draft alone (baseline)


@dataclass
class Generation:
    """New tokens of one prompt and the statistics of the run that made them (DESIGN.md §2)."""

    tokens: list[int]
    K: int
    drafted: list[int] = field(default_factory=list)  # per step: draft tokens proposed
    accepted: list[int] = field(default_factory=list)  # per step: draft tokens accepted
    weights: list[list[float]] = field(default_factory=list)  # per step: w at each drafted position
    bias_tv: list[float] = field(default_factory=list)  # per emitted token: TV(nu, p)
    target_logprob: list[float] = field(default_factory=list)  # per token: log p_target(token) at T = 1
    target_argmax: list[bool] = field(default_factory=list)  # per token: is it the target's greedy choice?
    time_draft: float = 0.0
    time_verify: float = 0.0
    time_total: float = 0.0
    stop: str = "length"  # "eos" or "length"

    @property
    def steps(self) -> int:
        return len(self.drafted) if self.drafted else len(self.tokens)

    @property
    def time_other(self) -> float:
        return self.time_total - self.time_draft - self.time_verify

    @property
    def draft_acceptance_rate(self) -> float:
        """alpha = accepted draft tokens / drafted tokens (nan without drafts)."""
        n = sum(self.drafted)
        return sum(self.accepted) / n if n else float("nan")

    @property
    def mean_acceptance_length(self) -> float:
        """tau = emitted tokens / verification steps (includes the correction/bonus token)."""
        return len(self.tokens) / self.steps if self.steps else float("nan")

    @property
    def acceptance_by_position(self) -> list[float]:
        """[K]: P(draft token i accepted | tokens 1..i-1 accepted)."""
        return [rate(*c) for c in position_counts(self.drafted, self.accepted, self.K)]

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.time_total if self.time_total else float("nan")

    def stats(self) -> dict:
        return {
            "new_tokens": len(self.tokens), "steps": self.steps, "stop": self.stop,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_by_position": self.acceptance_by_position,
            "mean_weight": _mean([w for ws in self.weights for w in ws]),
            "bias_tv": _mean(self.bias_tv),
            "target_logprob": _mean(self.target_logprob),
            "target_argmax_agreement": _mean([float(a) for a in self.target_argmax]),
            "tokens_per_s": self.tokens_per_s,
            "time_total": self.time_total, "time_draft": self.time_draft,
            "time_verify": self.time_verify, "time_other": self.time_other,
        }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def rate(hits: int, trials: int) -> float:
    return hits / trials if trials else float("nan")


def position_counts(drafted: list[int], accepted: list[int], K: int) -> list[tuple[int, int]]:
    """Per draft position i = 1..K: (accepted at i, reached i), where reaching i means 1..i-1 accepted."""
    return [(sum(n >= i for n in accepted),
             sum(k >= i and n >= i - 1 for k, n in zip(drafted, accepted, strict=True))) for i in range(1, K + 1)]


def output_head(lm_head: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """h [T, h] -> logits [T, V] through the output projection, with a faster kernel on CPU.

    For a small model the vocabulary projection dominates a decoding step. On CPU in float32, MKL's product
    W [V, h] @ h^T is 2-3x faster than h @ W^T whenever h has 2 or more rows (a 1-row h is doubled, as one
    row takes the slow GEMV path). Measured on the 2-core CPU of README "Speed", V = 49152, h = 576: 1 row
    3.9 ms (h @ W^T against a transposed copy) -> 2.1 ms; 6 rows 12.0 ms (h @ W^T), 8.4 ms (F.linear in
    2048-row vocabulary chunks) -> 4.3 ms. Same math, summation order aside; no copy of the weights.
    Elsewhere (GPU, bf16) the plain layer is used.
    """
    W = lm_head.weight
    if W.device.type != "cpu" or W.dtype != torch.float32 or getattr(lm_head, "bias", None) is not None:
        return lm_head
    W = W.detach()  # [V, h], shares the parameter's storage

    def head(h: torch.Tensor) -> torch.Tensor:
        T = h.shape[0]
        x = h if T > 1 else torch.cat([h, h])  # [max(T, 2), h]
        return (W @ x.T).T[:T].contiguous()  # [T, V]

    return head


class Stepper:
    """One model with its KV cache: feed new tokens, get logits and last hidden states back."""

    def __init__(self, model: nn.Module, vocab_size: int | None = None, shared: int | None = None,
                 max_len: int | None = None, capture: str = "none", buckets: tuple[int, ...] = ()):
        """vocab_size: common logit width (pads with -inf); shared: ids at or past it get -inf (see check_vocab);
        max_len: positions the sequence will reach, which enables the static-cache fast path where supported;
        capture: "none" / "graph" / "compile" for the fast path's steps of the lengths in `buckets` (fastpath)."""
        from transformers import DynamicCache

        self.model = model
        self.decoder = model.get_decoder()
        lm_head = model.get_output_embeddings()
        self.device = lm_head.weight.device
        softcap = getattr(model.config, "final_logit_softcapping", None)
        pad = (vocab_size or lm_head.out_features) - lm_head.out_features
        shared = shared if shared is not None and shared < lm_head.out_features else None
        self.post = logits_fn(output_head(lm_head), softcap, shared, pad)
        fastpath.check_capture(capture, model)  # else an unsupported model would silently run uncaptured
        fast = bool(max_len) and fastpath.supported(model)
        self.fast = fastpath.acquire(model, max_len, self, capture, buckets, self.post,
                                     (softcap, shared, pad)) if fast else None
        self.cache = None if self.fast else DynamicCache(config=model.config)
        self.n = 0  # positions held in the cache

    @torch.inference_mode()
    def __call__(self, ids: list[int] | torch.Tensor, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [T] (a list, or a long tensor on the model's device) -> logits [T or 1, V] (float32), hidden."""
        x = ids if isinstance(ids, torch.Tensor) else torch.tensor(ids, device=self.device)  # [T]
        if self.fast is not None:
            logits, h = self.fast(x, last_only)  # [T or 1, V], [T or 1, h]
        else:
            h = self.decoder(input_ids=x[None], cache=self.cache, use_cache=True).last_hidden_state[0]  # [T, h]
            h = h[-1:] if last_only else h
            logits = self.post(h)
        self.n += x.shape[0]
        return logits, h

    def crop(self, n: int) -> None:
        """Keep the first n positions (rollback of rejected drafts)."""
        if n < self.n:
            if self.fast is not None:
                self.fast.crop(n)
            else:
                self.cache.crop(n - self.n)
            self.n = n


def logits_fn(head: Callable[[torch.Tensor], torch.Tensor], softcap: float | None, shared: int | None,
              pad: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """h [T, h] -> logits [T, V + pad] (float32): the output head, its softcap, -inf past the shared
    vocabulary and for the padding."""

    def post(h: torch.Tensor) -> torch.Tensor:
        logits = head(h).float()  # [T, V]
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        if shared is not None:  # ids past the smaller model's head are padding, never real tokens
            logits[:, shared:] = float("-inf")
        if pad:
            logits = torch.nn.functional.pad(logits, (0, pad), value=float("-inf"))
        return logits

    return post


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _finite(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, ok []) without a host sync. NaN anywhere in a row, or a row without a finite value, makes
    its max non-finite (one reduction). Broken logits are zeroed so that sampling can go on; the caller
    raises at its next host sync (_raise_if_broken), and nothing sampled from them is ever emitted."""
    ok = torch.isfinite(logits.amax(dim=-1)).all()
    return torch.where(ok, logits, torch.zeros_like(logits)), ok


def _raise_if_broken(ok: list[float], who: list[str], step: int) -> None:
    for flag, name in zip(ok, who, strict=True):
        if not flag:
            raise FloatingPointError(f"{name} logits are not finite (NaN, +inf, or no finite value) at step {step}; "
                                     "refusing to sample")


def _fidelity(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference-free fidelity of tokens [m] under the target's raw logits [m, V] that predicted them:
    (log p_target(token) at T = 1 [m], is it the target's argmax [m]), on the device."""
    logprob = logits.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    return logprob, logits.argmax(-1) == tokens


def _sample(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    """probs [V] -> one token id [1] (long), on the device."""
    return probs.argmax(-1, keepdim=True) if greedy else torch.multinomial(probs, 1, generator=generator)


def _to_host(*xs: torch.Tensor) -> list[list[float]]:
    """Small device tensors to Python lists in one transfer: the host sync of a step.

    Packed as float32, which holds token ids exactly (< 2^24) and the float32 statistics unchanged."""
    flat = torch.cat([x.reshape(-1).float() for x in xs]).tolist()
    out, i = [], 0
    for x in xs:
        out.append(flat[i:i + x.numel()])
        i += x.numel()
    return out


class _Clock:
    """Timestamps inside a step without host syncs: CUDA events on a GPU (read after the final sync),
    perf_counter elsewhere."""

    def __init__(self, device: torch.device):
        self.events = device.type == "cuda"

    def __call__(self):
        if not self.events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1000 if self.events else b - a


def _prompt_ids(input_ids) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError(f"batch size {input_ids.shape[0]} is not supported yet; decode one prompt at a time")
            input_ids = input_ids[0]
        input_ids = input_ids.tolist()
    ids = [int(t) for t in input_ids]
    if not ids:
        raise ValueError("empty prompt: input_ids has no tokens")
    return ids


def _context_length(model: nn.Module) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def resolve_capture(capture: str | None) -> str:
    """The capture mode of the fast path's fixed-shape steps: the argument, else $DIVERSED_CAPTURE, else "none".
    An execution setting like the device's threads, not part of a run's config: it changes speed, not tokens."""
    return os.environ.get("DIVERSED_CAPTURE", "none") if capture is None else capture


def check_request(target, draft, prompt_len: int, *, verifier: str, K: int, max_new_tokens: int, temperature: float,
                  top_p: float, weight, head, mixing: str, vocab_size: int | None, capture: str | None = None) -> None:
    """Every check that can fail, before any compute: a clear message naming the bad value."""
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; allowed: {', '.join(VERIFIERS)}")
    if mixing not in MIXINGS:
        raise ValueError(f"unknown mixing {mixing!r}; allowed: {', '.join(MIXINGS)}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    models = [("target", target)]
    if verifier == "draft" and draft is None:
        raise ValueError("verifier 'draft' (draft-only decoding) needs a draft model")
    if verifier not in ("autoregressive", "draft"):
        if draft is None:
            raise ValueError(f"verifier {verifier!r} needs a draft model")
        models.append(("draft", draft))
        if not isinstance(K, int) or K < 1:
            raise ValueError(f"draft length K must be an integer >= 1, got {K!r}")
        v_t, v_d = target.get_output_embeddings().out_features, draft.get_output_embeddings().out_features
        if v_t != v_d and (vocab_size is None or vocab_size < max(v_t, v_d)):
            raise ValueError(f"vocabulary mismatch: target has {v_t} logits, draft has {v_d} "
                             "(load the pair with diversed.models.load_pair to pad provably identical tokenizers)")
    if verifier == "fixed":
        if weight is None:
            raise ValueError("verifier 'fixed' needs a weight w in [0, 1] (--weight)")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
            raise ValueError(f"weight w must be a number in [0, 1], got {weight!r}")
    elif weight is not None and verifier != "fixed":
        raise ValueError(f"weight is only used by the 'fixed' verifier, not {verifier!r}")
    if verifier == "dynamic":
        if head is None:
            raise ValueError("verifier 'dynamic' needs a trained weight head (--head)")
        head.check_pair(target, draft)
    for role, model in models:
        fastpath.check_capture(resolve_capture(capture), model, role)
        ctx = _context_length(model)
        if ctx is not None and prompt_len + max_new_tokens > ctx:
            raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                             f"{role}'s context length {ctx}")


@torch.inference_mode()
def autoregressive_generate(model: nn.Module, input_ids, *, max_new_tokens: int, temperature: float = 1.0,
                            top_p: float = 1.0, generator: torch.Generator | None = None,
                            eos_token_id: int | list[int] | None = None, fidelity: bool = True,
                            capture: str | None = None) -> Generation:
    """Plain one-token-per-forward decoding (the target-only and draft-only baselines).

    fidelity: record log p(token) and argmax agreement under this model (turn off for a draft-only run);
    capture: "none" / "graph" / "compile" for the 1-token step (see fastpath; None: resolve_capture).
    """
    ids = _prompt_ids(input_ids)
    capture = resolve_capture(capture)
    check_request(model, None, len(ids), verifier="autoregressive", K=1, max_new_tokens=max_new_tokens,
                  temperature=temperature, top_p=top_p, weight=None, head=None, mixing="linear", vocab_size=None,
                  capture=capture)
    eos = _eos_set(model, eos_token_id)
    run = Stepper(model, max_len=len(ids) + max_new_tokens, capture=capture, buckets=(1,))
    out = Generation(tokens=[], K=0)
    _sync(run.device)
    t0 = time.perf_counter()
    greedy = temperature == 0
    pending = ids
    while len(out.tokens) < max_new_tokens:
        logits, _ = run(pending, last_only=True)  # [1, V]
        logits, ok = _finite(logits)
        x = _sample(logits[0] if greedy else logits_to_probs(logits[0], temperature, top_p), greedy, generator)  # [1]
        (ok, token), logprob, is_max = _to_host(torch.cat([ok[None].long(), x]), *_fidelity(logits, x))  # one sync
        _raise_if_broken([ok], ["model"], len(out.tokens))
        token = int(token)
        out.tokens.append(token)
        if fidelity:
            out.target_logprob.extend(logprob)
            out.target_argmax.extend(bool(a) for a in is_max)
        pending = x
        if token in eos:
            out.stop = "eos"
            break
    _sync(run.device)
    out.time_total = time.perf_counter() - t0
    return out


def _eos_set(model: nn.Module, eos_token_id) -> set[int]:
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}


@torch.inference_mode()
def speculative_generate(target: nn.Module, draft: nn.Module | None, input_ids, *, verifier: str, K: int = 5,
                         max_new_tokens: int = 128, temperature: float = 1.0, top_p: float = 1.0,
                         weight: float | None = None, head: nn.Module | None = None, mixing: str = "linear",
                         generator: torch.Generator | None = None, eos_token_id: int | list[int] | None = None,
                         vocab_size: int | None = None, synthetic_acceptance: float | None = None,
                         capture: str | None = None) -> Generation:
    """Decode one prompt with `verifier` in {autoregressive, draft, strict, fixed, dynamic}.

    strict: w = 1 (lossless); fixed: constant `weight`; dynamic: w_i = head(h_target_i, h_draft_i).
    temperature 0 is greedy. synthetic_acceptance = a replaces verification by accepting each draft
    with probability a (timing at real sizes with random weights; see verifiers.synthetic_verify).
    capture: "none" / "graph" / "compile" for the fixed-shape steps (the draft's 1- and 2-token steps, the
    target's K + 1-token verification; see fastpath; None: resolve_capture). Returns the new tokens and
    per-step statistics.
    """
    ids = _prompt_ids(input_ids)
    capture = resolve_capture(capture)
    check_request(target, draft, len(ids), verifier=verifier, K=K, max_new_tokens=max_new_tokens,
                  temperature=temperature, top_p=top_p, weight=weight, head=head, mixing=mixing,
                  vocab_size=vocab_size, capture=capture)
    if verifier == "autoregressive":
        return autoregressive_generate(target, ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                       top_p=top_p, generator=generator, eos_token_id=eos_token_id, capture=capture)
    if verifier == "draft":  # the draft alone; fidelity is still judged by the target, in one extra pass
        out = autoregressive_generate(draft, ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                      top_p=top_p, generator=generator,
                                      eos_token_id=eos_token_id if eos_token_id is not None else sorted(
                                          _eos_set(target, None)), fidelity=False, capture=capture)
        logits, _ = Stepper(target, vocab_size)(ids + out.tokens[:-1])  # [len(ids) + n - 1, V]
        logprob, is_max = _to_host(*_fidelity(logits[len(ids) - 1:], torch.tensor(out.tokens, device=logits.device)))
        out.target_logprob, out.target_argmax = logprob, [bool(a) for a in is_max]
        return out
    greedy = temperature == 0
    eos = _eos_set(target, eos_token_id)
    shared = min(target.get_output_embeddings().out_features, draft.get_output_embeddings().out_features)
    max_len = len(ids) + max_new_tokens + 1
    # the target verifies K + 1 tokens (fewer at the end: padded); the draft takes 1, or 2 after a full acceptance
    T = Stepper(target, vocab_size, shared, max_len, capture, buckets=(K + 1,))
    D = Stepper(draft, vocab_size, shared, max_len, capture, buckets=(1, 2))
    if head is not None:
        head = head.to(T.device)
    out = Generation(tokens=[], K=K)
    n_tokens = len(ids)  # prompt + emitted so far; the caches hold all but the newest
    clock = _Clock(T.device)
    marks = []  # per step: (draft start, verify start, done)
    _sync(T.device)
    t0 = time.perf_counter()
    if len(ids) > 1:  # prefill: caches hold all tokens but the newest
        T(ids[:-1], last_only=True)
        D(ids[:-1], last_only=True)
    last = torch.tensor(ids[-1:], device=T.device)  # [1] the newest token, in neither cache
    draft_pending = last  # what the draft has not seen: also its own last draft after a fully accepted step

    # A step has one host sync (_to_host): everything before it stays on the device.
    while len(out.tokens) < max_new_tokens:
        step = len(out.drafted)
        k = min(K, max_new_tokens - len(out.tokens) - 1)  # the step emits at most k + 1 tokens

        t_draft = clock()
        drafts, log_q_rows, h_draft, ok = [], [], [], []
        pending = draft_pending
        for _ in range(k):
            logits, h = D(pending, last_only=True)  # [1, V], [1, h_d]
            logits, ok_i = _finite(logits)
            log_q_i = logits_to_logprobs(logits[0], temperature, top_p)  # [V]
            pending = _sample(log_q_i.exp(), greedy, generator)  # [1]
            drafts.append(pending), log_q_rows.append(log_q_i), h_draft.append(h[0]), ok.append(ok_i)
        t_verify = clock()

        draft_tokens = torch.cat(drafts) if drafts else last.new_zeros(0)  # [k]
        logits, h_target = T(torch.cat([last, draft_tokens]))  # [k + 1, V], [k + 1, h_t]
        logits, ok_t = _finite(logits)
        ok.append(ok_t)
        log_p = logits_to_logprobs(logits, temperature, top_p)  # [k + 1, V]
        log_q = torch.stack(log_q_rows) if log_q_rows else log_p.new_full((0, log_p.shape[-1]), -torch.inf)  # [k, V]
        p, q = log_p.exp(), log_q.exp()
        if verifier == "strict":
            w = torch.ones(k, device=p.device)
        elif verifier == "fixed":
            w = torch.full((k,), float(weight), device=p.device)
        else:  # dynamic: the hidden state that predicts draft token i, from both models
            w = head(h_target[:k], torch.stack(h_draft)).float() if k else p.new_zeros(0)  # [k]
        if synthetic_acceptance is None:
            logs = {"log_p": log_p, "log_q": log_q} if mixing == "logit" else {}
            n, next_token, bias = verify_on_device(draft_tokens, q, p, w, mixing=mixing, greedy=greedy,
                                                   generator=generator, **logs)
        else:
            n, next_token, bias = synthetic_on_device(k, p, synthetic_acceptance, greedy=greedy, generator=generator)
        # every possible emission [k + 1]: the drafts up to position n, next_token at n
        candidates = torch.cat([draft_tokens, next_token.view(1)])
        candidates = torch.where(torch.arange(k + 1, device=p.device) == n, next_token, candidates)
        n_next, ok, drafted, ws, bias, logprob, is_max = _to_host(
            torch.stack([n, next_token]), torch.stack(ok), draft_tokens, w, bias, *_fidelity(logits, candidates))
        t_done = clock()
        marks.append((t_draft, t_verify, t_done))
        _raise_if_broken(ok, ["draft"] * k + ["target"], step)

        n = int(n_next[0])
        emitted = [int(t) for t in drafted[:n]] + [int(n_next[1])]
        for j, token in enumerate(emitted):
            if token in eos:
                emitted = emitted[: j + 1]
                out.stop = "eos"
                break
        m = len(emitted)
        out.drafted.append(k)
        out.accepted.append(n)
        out.weights.append(ws)
        out.bias_tv.extend(bias[:m])
        out.target_logprob.extend(logprob[:m])
        out.target_argmax.extend(bool(a) for a in is_max[:m])
        out.tokens.extend(emitted)
        start, n_tokens = n_tokens, n_tokens + m  # candidates[j] sits at sequence position start + j
        # rollback: keep only positions of tokens that stay (the newest token is never cached)
        T.crop(n_tokens - 1)
        D.crop(n_tokens - 1)
        last = candidates[m - 1:m]  # [1], still on the device
        draft_pending = candidates[D.n - start:m]  # [1], or [2] when the draft never saw its K-th draft
        if out.stop == "eos":
            break
    _sync(T.device)
    out.time_total = time.perf_counter() - t0
    out.time_draft = sum(clock.seconds(a, b) for a, b, _ in marks)
    out.time_verify = sum(clock.seconds(b, c) for _, b, c in marks)
    return out


def summarize(gens: list[Generation]) -> dict:
    """Run-level metrics over several prompts: pooled counts, not a mean of per-prompt ratios."""
    drafted = [k for g in gens for k in g.drafted]
    accepted = [n for g in gens for n in g.accepted]
    K = max((g.K for g in gens), default=0)
    counts = position_counts(drafted, accepted, K)
    new_tokens = sum(len(g.tokens) for g in gens)
    steps = sum(g.steps for g in gens)
    seconds = sum(g.time_total for g in gens)
    return {
        "prompts": len(gens), "new_tokens": new_tokens, "steps": steps,
        "draft_acceptance_rate": rate(sum(accepted), sum(drafted)),
        "mean_acceptance_length": rate(new_tokens, steps),
        "acceptance_by_position": [rate(*c) for c in counts],
        # per-position acceptance pooled over positions reached: the alpha of the i.i.d. analytic bound
        "conditional_acceptance": rate(sum(h for h, _ in counts), sum(t for _, t in counts)),
        "mean_weight": _mean([w for g in gens for ws in g.weights for w in ws]),
        "bias_tv": _mean([b for g in gens for b in g.bias_tv]),
        "target_logprob": _mean([x for g in gens for x in g.target_logprob]),
        "target_argmax_agreement": _mean([float(x) for g in gens for x in g.target_argmax]),
        "tokens_per_s": rate(new_tokens, seconds),
        "time_total": seconds,
        "time_draft": sum(g.time_draft for g in gens),
        "time_verify": sum(g.time_verify for g in gens),
    }
