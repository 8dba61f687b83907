"""The decoding engine: speculative decoding with strict / fixed / dynamic verification, and the
autoregressive baselines, for one sequence at a time (batch size 1).

Each model keeps a KV cache that holds every token of the sequence but the newest. A speculative step:
draft_block (the draft proposes k tokens), score_block (one target forward over [newest, d_1..d_k]),
WEIGHT_RULES (w at each drafted position), verify_step (verifiers.verify_on_device, then the step's one
host transfer), Generation.record, roll_back (both caches cropped to the accepted prefix: accepted tokens
are never re-encoded). Statistics live in diversed.decoding.stats.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from diversed.decoding import fastpath
from diversed.decoding.models import context_length, draft_vocabulary, shared_width
from diversed.decoding.models import vocab_size as vocab_width
from diversed.decoding.stats import Generation, Step
from diversed.decoding.verifiers import MIXINGS, logits_to_logprobs, synthetic_on_device, verify_on_device

WEIGHT_RULES: dict[str, Callable[..., torch.Tensor]] = {  # verifier -> w [k]: the one place a verifier is added
    "strict": lambda k, device, **_: torch.ones(k, device=device),  # w = 1: lossless
    "fixed": lambda k, device, weight, **_: torch.full((k,), float(weight), device=device),  # a constant w
    "dynamic": lambda k, head, h_target, h_draft, **_: head(h_target[:k], h_draft).float(),  # w_i = head(h_t, h_d)
}
VERIFIERS = ("autoregressive", "draft", *WEIGHT_RULES)  # autoregressive: the target alone; draft: the draft alone


@dataclass(frozen=True)
class Sampling:
    """How a token is drawn from logits: temperature (0 = greedy) and nucleus top_p."""

    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature >= 0:  # NaN included
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [..., V] -> log-probabilities [..., V] after temperature (T = 1 when greedy) and top-p."""
        return logits_to_logprobs(logits, self.temperature, self.top_p)

    def draw(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """scores [V] -> one token id [1] (long), on the device: the argmax when greedy (scores: any monotone
        map of the log-probabilities), else a sample from exp(scores) (scores: log-probabilities)."""
        if self.greedy:
            return scores.argmax(-1, keepdim=True)
        return torch.multinomial(scores.exp(), 1, generator=generator)


@dataclass(frozen=True)
class Execution:
    """How the engine runs, not what it computes: recorded in a run's manifest, never part of its run id.

    capture: "none" / "graph" / "compile" for the fast path's fixed-shape steps (fastpath);
    fastpath: the static-cache fast path for Llama / Qwen3, else transformers' modules (it changes the order
    of float sums, so the last bits of the logits); threads: torch's intra-op threads (recorded, not set).
    """

    capture: str = "none"
    fastpath: bool = True
    threads: int | None = None

    @classmethod
    def from_env(cls) -> Execution:
        """$DIVERSED_CAPTURE (default none), $DIVERSED_FASTPATH (1 on, 0 off; default 1) and torch's thread
        count, read once by an entry point (a run, the bench, the lm-eval model) and passed down."""
        fast = os.environ.get("DIVERSED_FASTPATH", "1")
        if fast not in ("0", "1"):
            raise ValueError(f"DIVERSED_FASTPATH must be 0 or 1, got {fast!r}")
        return cls(os.environ.get("DIVERSED_CAPTURE", "none"), fast == "1", torch.get_num_threads())


def check_settings(verifier: str, *, K: int, max_new_tokens: int, sampling: Sampling, weight=None, head=None,
                   mixing: str = "linear") -> None:
    """The checks of the decoding settings, shared by the engine and RunConfig.validate (head: anything but
    None when given). `sampling` checked itself when built."""
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; allowed: {', '.join(VERIFIERS)}")
    if mixing not in MIXINGS:
        raise ValueError(f"unknown mixing {mixing!r}; allowed: {', '.join(MIXINGS)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens!r} (an integer)")
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be an engine.Sampling, got {type(sampling).__name__}")
    if verifier in WEIGHT_RULES and (isinstance(K, bool) or not isinstance(K, int) or K < 1):
        raise ValueError(f"draft length K must be >= 1, got {K!r} (an integer)")
    if verifier == "fixed" and weight is None:
        raise ValueError("verifier 'fixed' needs --weight w in [0, 1] (weight= in Python)")
    if weight is not None:
        if verifier != "fixed":
            raise ValueError(f"weight is only used by the 'fixed' verifier, not {verifier!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
            raise ValueError(f"weight w must be in [0, 1], got {weight!r}")
    if verifier == "dynamic" and head is None:
        raise ValueError("verifier 'dynamic' needs --head, a trained weight head (head= in Python)")


def check_request(target, draft, prompt_len: int, *, verifier: str, K: int, max_new_tokens: int, sampling: Sampling,
                  weight, head, mixing: str, vocab_size: int | None, execution: Execution) -> None:
    """Every check that can fail, before any compute: the settings, then the models they run on."""
    check_settings(verifier, K=K, max_new_tokens=max_new_tokens, sampling=sampling, weight=weight, head=head,
                   mixing=mixing)
    models = [("target", target)]
    if verifier != "autoregressive":
        if draft is None:
            raise ValueError(f"verifier {verifier!r} needs a draft model")
        models.append(("draft", draft))
    if verifier in WEIGHT_RULES:
        v_t, v_d = vocab_width(target), vocab_width(draft)
        if v_t != v_d and (vocab_size is None or vocab_size < max(v_t, v_d)):
            raise ValueError(f"vocabulary mismatch: target has {v_t} logits, draft has {v_d} (load the pair with "
                             "diversed.decoding.models.load_pair to pad provably identical tokenizers)")
    if verifier == "dynamic":
        head.check_pair(target, draft)
    for role, model in models:
        fastpath.check_capture(execution.capture, model, role, enabled=execution.fastpath)
        ctx = context_length(model)
        if ctx is not None and prompt_len + max_new_tokens > ctx:
            raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                             f"{role}'s context length {ctx}")


_ROWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # lm_head -> (key, index [R], W rows [R, h])


def _vocabulary_rows(lm_head: nn.Module, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft vocabulary's ids and a copy of their weight rows, made once per head and weight version (not once
    per sequence)."""
    W = lm_head.weight
    key = (W._version, W.data_ptr(), W.dtype, W.device, rows)
    cached = _ROWS.get(lm_head)
    if cached is None or cached[0] != key:
        index = torch.tensor(rows, device=W.device)  # [R]
        cached = _ROWS[lm_head] = (key, index, W.detach().index_select(0, index))
    return cached[1], cached[2]


def output_head(lm_head: nn.Module, rows: list[int] | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """h [T, h] -> logits [T, V] through the output projection, with a faster kernel on CPU.

    rows: a draft vocabulary (models.draft_vocabulary): only those rows of the projection are computed, every
    other logit is -inf (q = 0 there).

    For a small model the vocabulary projection dominates a decoding step. On CPU in float32, MKL's product
    W [V, h] @ h^T is 2-3x faster than h @ W^T whenever h has 2 or more rows (a 1-row h is doubled, as one
    row takes the slow GEMV path). Measured on the 2-core CPU of README "Speed", V = 49152, h = 576: 1 row
    3.9 ms (h @ W^T against a transposed copy) -> 2.1 ms; 6 rows 12.0 ms (h @ W^T), 8.4 ms (F.linear in
    2048-row vocabulary chunks) -> 4.3 ms. Same math, summation order aside; no copy of the weights.
    Elsewhere (GPU, bf16) the plain layer is used.
    """
    W = lm_head.weight
    cpu_f32 = W.device.type == "cpu" and W.dtype == torch.float32
    if rows is None and (not cpu_f32 or getattr(lm_head, "bias", None) is not None):
        return lm_head
    V = W.shape[0]
    if rows is not None:
        if getattr(lm_head, "bias", None) is not None:
            raise ValueError("a draft vocabulary needs an output head without bias")
        index, W = _vocabulary_rows(lm_head, rows)  # [R], [R, h]
    else:
        W = W.detach()  # [V, h], shares the parameter's storage

    def head(h: torch.Tensor) -> torch.Tensor:
        T = h.shape[0]
        x = h if T > 1 or not cpu_f32 else torch.cat([h, h])  # [max(T, 2), h] on CPU
        logits = (W @ x.T).T[:T]  # [T, V or R]
        if rows is None:
            return logits.contiguous()
        return logits.new_full((T, V), float("-inf")).index_copy_(1, index, logits)  # [T, V]

    return head


class Stepper:
    """One model with its KV cache: feed new tokens, get logits and last hidden states back."""

    def __init__(self, model: nn.Module, vocab_size: int | None = None, shared: int | None = None,
                 max_len: int | None = None, execution: Execution = Execution(), buckets: tuple[int, ...] = ()):
        """vocab_size: common logit width (pads with -inf); shared: ids at or past it get -inf (see check_vocab);
        max_len: positions the sequence will reach, which enables the static-cache fast path where supported
        and execution.fastpath allows; execution.capture: "none" / "graph" / "compile" for the fast path's steps
        of the lengths in `buckets` (fastpath)."""
        self.model = model
        self.decoder = model.get_decoder()
        lm_head = model.get_output_embeddings()
        self.device = lm_head.weight.device
        self.vocab = vocab_size or lm_head.out_features  # logit width V
        self.empty_hidden = lm_head.weight.new_zeros(0, lm_head.weight.shape[1])  # [0, h]
        # as the class's forward applies it: Gemma3ForConditionalGeneration applies no softcap of its text config
        softcap = getattr(model.config, "final_logit_softcapping", None)
        pad = self.vocab - lm_head.out_features
        shared = shared if shared is not None and shared < lm_head.out_features else None
        rows = draft_vocabulary(model)
        self.post = logits_fn(output_head(lm_head, rows), softcap, shared, pad)
        # checked here too, else an unsupported model would silently run uncaptured
        fastpath.check_capture(execution.capture, model, enabled=execution.fastpath)
        fast = bool(max_len) and execution.fastpath and fastpath.supported(model)
        self.fast = fastpath.acquire(model, max_len, self, execution.capture, buckets, self.post,
                                     (softcap, shared, pad, rows and len(rows))) if fast else None
        self.cache = None if self.fast else rollback_cache(model)
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


def rollback_cache(model: nn.Module):
    """transformers' DynamicCache for the model, whose sliding-window layers keep every position (the attention
    mask does the windowing): a window-sized layer drops the positions a rollback past the window would need."""
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    cache = DynamicCache(config=model.config)
    cache.layers = [DynamicLayer() if type(layer) is DynamicSlidingWindowLayer else layer for layer in cache.layers]
    return cache


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


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU): before and after anything timed."""
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
    perf_counter elsewhere. marks: per step (draft start, verify start, done)."""

    def __init__(self, device: torch.device):
        self.events = device.type == "cuda"
        self.marks: list[tuple] = []

    def __call__(self):
        if not self.events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1000 if self.events else b - a

    def totals(self) -> tuple[float, float]:
        """(draft seconds, verify seconds) over the marked steps."""
        return (sum(self.seconds(a, b) for a, b, _ in self.marks),
                sum(self.seconds(b, c) for _, b, c in self.marks))


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


def eos_set(model: nn.Module, eos_token_id: int | list[int] | None = None) -> set[int]:
    """The ids that end a sequence: eos_token_id, else the model's generation config's."""
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}


@torch.inference_mode()
def autoregressive_generate(model: nn.Module, input_ids, *, max_new_tokens: int, sampling: Sampling = Sampling(),
                            generator: torch.Generator | None = None, eos_token_id: int | list[int] | None = None,
                            fidelity: bool = True, execution: Execution = Execution(),
                            shared: int | None = None) -> Generation:
    """Plain one-token-per-forward decoding (the target-only and draft-only baselines).

    fidelity: record log p(token) and argmax agreement under this model (turn off for a draft-only run);
    execution.capture applies to the 1-token step (see fastpath); shared: ids at or past it are never emitted
    (a draft whose head is wider than its target's).
    """
    ids = _prompt_ids(input_ids)
    check_request(model, None, len(ids), verifier="autoregressive", K=1, max_new_tokens=max_new_tokens,
                  sampling=sampling, weight=None, head=None, mixing="linear", vocab_size=None, execution=execution)
    eos = eos_set(model, eos_token_id)
    run = Stepper(model, shared=shared, max_len=len(ids) + max_new_tokens, execution=execution, buckets=(1,))
    out = Generation(tokens=[], K=0)
    synchronize(run.device)
    t0 = time.perf_counter()
    pending = ids
    while len(out.tokens) < max_new_tokens:
        logits, _ = run(pending, last_only=True)  # [1, V]
        logits, ok = _finite(logits)
        x = sampling.draw(logits[0] if sampling.greedy else sampling.logprobs(logits[0]), generator)  # [1]
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
    synchronize(run.device)
    out.time_total = time.perf_counter() - t0
    return out


@torch.inference_mode()
def draft_only_generate(target: nn.Module, draft: nn.Module, ids: list[int], *, max_new_tokens: int,
                        sampling: Sampling, generator: torch.Generator | None, eos_token_id, vocab_size: int | None,
                        execution: Execution) -> Generation:
    """The draft alone (a baseline), stopping at the target's EOS; fidelity judged by the target in one pass."""
    eos = eos_token_id if eos_token_id is not None else sorted(eos_set(target))
    out = autoregressive_generate(draft, ids, max_new_tokens=max_new_tokens, sampling=sampling, generator=generator,
                                  eos_token_id=eos, fidelity=False, execution=execution,
                                  shared=shared_width(target, draft))
    logits, _ = Stepper(target, vocab_size)(ids + out.tokens[:-1])  # [len(ids) + n - 1, V]
    tokens = torch.tensor(out.tokens, device=logits.device)  # [n]
    logprob, is_max = _to_host(*_fidelity(logits[len(ids) - 1:], tokens))
    out.target_logprob, out.target_argmax = logprob, [bool(a) for a in is_max]
    return out


@dataclass
class Block:
    """k draft tokens and what the draft computed for them, on the device."""

    tokens: torch.Tensor  # [k] long
    log_q: torch.Tensor  # [k, V]
    h: torch.Tensor  # [k, h_d]: the draft hidden state that proposed each token
    ok: list[torch.Tensor]  # k x []: finite draft logits


@dataclass
class Scored:
    """The target's forward over [newest, d_1..d_k], on the device."""

    logits: torch.Tensor  # [k + 1, V] raw (zeroed if not finite), for the fidelity statistics
    log_p: torch.Tensor  # [k + 1, V] after temperature and top-p
    h: torch.Tensor  # [k + 1, h_t]: the target hidden state predicting each position
    ok: torch.Tensor  # []: finite target logits


def draft_block(D: Stepper, pending: torch.Tensor, k: int, sampling: Sampling,
                generator: torch.Generator | None) -> Block:
    """The draft proposes k tokens one at a time, fed `pending` first (the tokens its cache has not seen)."""
    tokens, log_q, h, ok = [], [], [], []
    for _ in range(k):
        logits, h_i = D(pending, last_only=True)  # [1, V], [1, h_d]
        logits, ok_i = _finite(logits)
        log_q_i = sampling.logprobs(logits[0])  # [V]
        pending = sampling.draw(log_q_i, generator)  # [1]
        tokens.append(pending), log_q.append(log_q_i), h.append(h_i[0]), ok.append(ok_i)
    if not k:
        return Block(pending.new_zeros(0), torch.full((0, D.vocab), -torch.inf, device=D.device), D.empty_hidden, [])
    return Block(torch.cat(tokens), torch.stack(log_q), torch.stack(h), ok)


def score_block(T: Stepper, last: torch.Tensor, tokens: torch.Tensor, sampling: Sampling) -> Scored:
    """One target forward over [last, tokens]: row i predicts draft token i + 1 (row k, the bonus token)."""
    logits, h = T(torch.cat([last, tokens]))  # [k + 1, V], [k + 1, h_t]
    logits, ok = _finite(logits)
    return Scored(logits, sampling.logprobs(logits), h, ok)


def verify_step(block: Block, scored: Scored, w: torch.Tensor, mixing: str, sampling: Sampling,
                generator: torch.Generator | None, synthetic_acceptance: float | None,
                index: int) -> tuple[Step, torch.Tensor]:
    """Verify the block (verifiers.verify_on_device, or synthetic acceptance), then bring the step's record to
    the host in one transfer; raises if any logits of step `index` were not finite. Returns the record and
    candidates [k + 1], still on the device: every possible emission, the drafts up to n and next_token at n."""
    k = block.tokens.shape[0]
    p, q = scored.log_p.exp(), block.log_q.exp()  # [k + 1, V], [k, V]
    if synthetic_acceptance is None:
        logs = {"log_p": scored.log_p, "log_q": block.log_q} if mixing == "logit" else {}
        n, next_token, bias = verify_on_device(block.tokens, q, p, w, mixing=mixing, greedy=sampling.greedy,
                                               generator=generator, **logs)
    else:
        n, next_token, bias = synthetic_on_device(k, p, synthetic_acceptance, greedy=sampling.greedy,
                                                  generator=generator)
    candidates = torch.cat([block.tokens, next_token.view(1)])  # [k + 1]
    candidates = torch.where(torch.arange(k + 1, device=p.device) == n, next_token, candidates)
    n, ok, tokens, ws, bias, logprob, is_max = _to_host(
        n.view(1), torch.stack([*block.ok, scored.ok]), candidates, w, bias, *_fidelity(scored.logits, candidates))
    _raise_if_broken(ok, ["draft"] * k + ["target"], index)
    m = int(n[0]) + 1  # emitted
    step = Step(drafted=k, accepted=m - 1, tokens=[int(t) for t in tokens[:m]], weights=ws, bias_tv=bias[:m],
                target_logprob=logprob[:m], target_argmax=[bool(a) for a in is_max[:m]])
    return step, candidates


def roll_back(T: Stepper, D: Stepper, candidates: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the step's first m candidates [k + 1]: both caches keep the sequence but its newest token. Returns
    (newest token [1], what the draft has not seen [1], or [2] when it never saw its own k-th draft)."""
    start = T.n - (candidates.shape[0] - 1)  # sequence position of candidates[0]: T holds all of them but one
    T.crop(start + m - 1)
    D.crop(start + m - 1)
    return candidates[m - 1:m], candidates[D.n - start:m]


@torch.inference_mode()
def speculative_generate(target: nn.Module, draft: nn.Module | None, input_ids, *, verifier: str, K: int = 5,
                         max_new_tokens: int = 128, sampling: Sampling = Sampling(), weight: float | None = None,
                         head: nn.Module | None = None, mixing: str = "linear",
                         generator: torch.Generator | None = None, eos_token_id: int | list[int] | None = None,
                         vocab_size: int | None = None, synthetic_acceptance: float | None = None,
                         execution: Execution = Execution()) -> Generation:
    """Decode one prompt with `verifier` (VERIFIERS); returns the new tokens and per-step statistics.

    strict: w = 1 (lossless); fixed: constant `weight`; dynamic: w_i = head(h_target_i, h_draft_i) (WEIGHT_RULES).
    synthetic_acceptance = a replaces verification by accepting each draft with probability a (timing at real
    sizes with random weights; see verifiers.synthetic_verify). execution.capture applies to the fixed-shape
    steps: the draft's 1- and 2-token steps, the target's K + 1-token verification (see fastpath).
    """
    ids = _prompt_ids(input_ids)
    check_request(target, draft, len(ids), verifier=verifier, K=K, max_new_tokens=max_new_tokens, sampling=sampling,
                  weight=weight, head=head, mixing=mixing, vocab_size=vocab_size, execution=execution)
    common = {"max_new_tokens": max_new_tokens, "sampling": sampling, "generator": generator,
              "eos_token_id": eos_token_id, "execution": execution}
    if verifier == "autoregressive":
        return autoregressive_generate(target, ids, **common)
    if verifier == "draft":
        return draft_only_generate(target, draft, ids, vocab_size=vocab_size, **common)
    eos = eos_set(target, eos_token_id)
    shared = shared_width(target, draft)
    max_len = len(ids) + max_new_tokens + 1
    # the target verifies K + 1 tokens (fewer at the end: padded); the draft takes 1, or 2 after a full acceptance
    T = Stepper(target, vocab_size, shared, max_len, execution, buckets=(K + 1,))
    D = Stepper(draft, vocab_size, shared, max_len, execution, buckets=(1, 2))
    head = head.to(T.device) if head is not None else None
    out, clock = Generation(tokens=[], K=K), _Clock(T.device)
    synchronize(T.device)
    t0 = time.perf_counter()
    if len(ids) > 1:  # prefill: caches hold all tokens but the newest
        T(ids[:-1], last_only=True)
        D(ids[:-1], last_only=True)
    last = pending = torch.tensor(ids[-1:], device=T.device)  # [1] the newest token; pending: what D has not seen
    while len(out.tokens) < max_new_tokens:  # one host sync per step, in verify_step
        k = min(K, max_new_tokens - len(out.tokens) - 1)  # the step emits at most k + 1 tokens
        t_draft = clock()
        block = draft_block(D, pending, k, sampling, generator)  # tokens [k], log_q [k, V], h [k, h_d]
        t_verify = clock()
        scored = score_block(T, last, block.tokens, sampling)  # log_p [k + 1, V], h [k + 1, h_t]
        w = WEIGHT_RULES[verifier](k, device=T.device, weight=weight, head=head, h_target=scored.h, h_draft=block.h)
        step, candidates = verify_step(block, scored, w, mixing, sampling, generator, synthetic_acceptance,
                                       index=len(out.drafted))
        clock.marks.append((t_draft, t_verify, clock()))
        m = out.record(step, eos)
        last, pending = roll_back(T, D, candidates, m)
        if out.stop == "eos":
            break
    synchronize(T.device)
    out.time_total = time.perf_counter() - t0
    out.time_draft, out.time_verify = clock.totals()
    return out
