"""The decoding engine: speculative decoding with strict / fixed / dynamic verification, and the target-only and
draft-only baselines, for B sequences advancing in lockstep (B = 1 for timing).

Each model keeps a KV cache of B rows (`Stepper`), each row at its own length, holding every token of its
sequence but the newest. A speculative step, over the live rows at once: draft_block (the draft proposes k tokens
per row), score_block (one target forward over [newest, d_1..d_k] per row), RULES (w at each drafted
position), verify_step (verifiers.verify_rows, then the step's one host transfer for the whole batch),
Generation.record per row, roll_back (each row's caches cropped to its own accepted prefix: accepted tokens are
never re-encoded). A row that ends (EOS, its token budget) leaves the batch and the next prompt takes its slot.

A row's output does not depend on its batch: each prompt draws from its own generator in the order a batch of
one would, and each row computes with its own positions and mask. Statistics live in diversed.decoding.stats.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from diversed.decoding import fastpath
from diversed.decoding.fastpath import CAPTURES
from diversed.decoding.models import context_length, draft_vocabulary, shared_width
from diversed.decoding.models import vocab_size as vocab_width
from diversed.decoding.stats import Generation, Step
from diversed.decoding.verifiers import (
    DEFERRALS,
    MIXINGS,
    defer,
    fly_window,
    logits_to_logprobs,
    synthetic_rows,
    verify_rows,
)


@dataclass(frozen=True)
class Rule:
    """A speculative verifier: the weight w [R, k] of the ensemble it verifies against (None: it tests drafts
    another way, verifiers.TESTS), its test, and its knob (what Decoding.knob sets; None: it has none) with the
    range the knob must lie in."""

    weight: Callable[..., torch.Tensor] | None
    test: str = "ensemble"
    knob: str | None = None
    low: float = 0.0
    high: float = 1.0
    integer: bool = False


def _ones(R, k, device, **_):
    return torch.ones(R, k, device=device)


RULES: dict[str, Rule] = {  # verifier -> its rule: the one place a verifier is added
    "strict": Rule(_ones),  # w = 1: lossless
    "fixed": Rule(lambda R, k, device, weight, **_: torch.full((R, k), float(weight), device=device)),  # a constant w
    "dynamic": Rule(lambda R, k, head, h_target, h_draft, **_: head(h_target[:, :k], h_draft).float()),  # w(h_t, h_d)
    # speculative cascades: w = delta(q, p) in {0, 1}, the deferral rule (Decoding.deferral) at threshold alpha
    "cascade": Rule(lambda R, k, p, q, knob, deferral, **_: defer(p[:, :k], q, knob, deferral), knob="alpha",
                    low=-float("inf"), high=float("inf")),  # chow from 0 (strict) to 1 (the draft), opt unbounded
    "lenient": Rule(None, "lenient", knob="lenience l"),  # min(1, p / (l q)); l = 1 is strict
    "typical": Rule(None, "typical", knob="epsilon"),  # p(x) > min(epsilon, sqrt(epsilon) exp(-H(p)))
    "topk": Rule(None, "topk", knob="k", low=1, high=float("inf"), integer=True),  # x among p's top k
    # a strict rejection deferred where the target's top-3 entropy >= the threshold and the next W drafts pass
    "fly": Rule(None, "fly", knob="entropy threshold", high=float("inf")),
}
VERIFIERS = ("autoregressive", "draft", *RULES)  # autoregressive: the target alone; draft: the draft alone


@dataclass(frozen=True)
class Sampling:
    """How a token is drawn from logits: temperature (0 = greedy), then top_k (0: every token) and nucleus top_p,
    applied alike to p and q (strict speculative sampling is then exact for the filtered p)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if not self.temperature >= 0:  # NaN included
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0: no top-k filter), got {self.top_k!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [..., V] -> log-probabilities [..., V] after temperature (T = 1 when greedy), top-k and top-p."""
        return logits_to_logprobs(logits, self.temperature, self.top_p, self.top_k)

    def draw(self, scores: torch.Tensor, generators: list[torch.Generator | None],
             live: list[bool] | None = None) -> torch.Tensor:
        """scores [R, V] -> one token id per row [R] (long), on the device: the argmax when greedy (scores: any
        monotone map of the log-probabilities), else a sample from exp(scores[r]) (log-probabilities) with row
        r's own generator, as a batch of one draws it. live[r] False: the argmax, drawing nothing (a row
        drafting past what its step needs)."""
        if self.greedy:
            return scores.argmax(-1)
        best = scores.argmax(-1)
        draws = [torch.multinomial(scores[r].exp(), 1, generator=g)[0] if live is None or live[r] else best[r]
                 for r, g in enumerate(generators)]
        return torch.stack(draws)


@dataclass(frozen=True)
class Decoding:
    """What a decode computes, validated when built, passed whole and recorded whole in a run's manifest.

    verifier: one of VERIFIERS; K: draft length; weight: w of the fixed verifier; mixing: how nu mixes p and q;
    knob: the setting of a verifier whose rule has one (RULES: cascade's alpha, lenient's l, typical's epsilon,
    topk's k, fly's entropy threshold); deferral: cascade's deferral rule (verifiers.DEFERRALS);
    eos_token_id: the ids that end a sequence (None: the target's generation config's; () never stops);
    synthetic_acceptance = a replaces verification by accepting each draft with probability a (timing at real
    sizes with random weights: verifiers.synthetic_rows)."""

    verifier: str = "strict"
    K: int = 5
    max_new_tokens: int = 128
    sampling: Sampling = Sampling()
    weight: float | None = None
    mixing: str = "linear"
    knob: float | None = None
    deferral: str = "chow"
    eos_token_id: tuple[int, ...] | None = None
    synthetic_acceptance: float | None = None

    def __post_init__(self):
        if self.eos_token_id is not None:
            eos = (self.eos_token_id,) if isinstance(self.eos_token_id, int) else tuple(self.eos_token_id)
            object.__setattr__(self, "eos_token_id", tuple(int(t) for t in eos))
        v = self.verifier
        if v not in VERIFIERS:
            raise ValueError(f"unknown verifier {v!r}; allowed: {', '.join(VERIFIERS)}")
        if self.mixing not in MIXINGS:
            raise ValueError(f"unknown mixing {self.mixing!r}; allowed: {', '.join(MIXINGS)}")
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {n!r} (an integer)")
        if not isinstance(self.sampling, Sampling):
            raise TypeError(f"sampling must be an engine.Sampling, got {type(self.sampling).__name__}")
        if v in RULES and (isinstance(self.K, bool) or not isinstance(self.K, int) or self.K < 1):
            raise ValueError(f"draft length K must be >= 1, got {self.K!r} (an integer)")
        if v == "fixed" and self.weight is None:
            raise ValueError("verifier 'fixed' needs --weight w in [0, 1] (weight= in Python)")
        w = self.weight
        if w is not None:
            if v != "fixed":
                raise ValueError(f"weight is only used by the 'fixed' verifier, not {v!r}")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1:
                raise ValueError(f"weight w must be in [0, 1], got {w!r}")
        rule, x = RULES.get(v), self.knob
        if rule is not None and rule.knob is not None:
            if x is None:
                raise ValueError(f"verifier {v!r} needs --knob ({rule.knob}, in [{rule.low:g}, {rule.high:g}])")
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not rule.low <= x <= rule.high or (
                    rule.integer and x != int(x)):
                raise ValueError(f"{v}'s knob {rule.knob} must be {'an integer ' if rule.integer else ''}in "
                                 f"[{rule.low:g}, {rule.high:g}], got {x!r}")
        elif x is not None:
            raise ValueError(f"knob is only used by the verifiers {', '.join(r for r in RULES if RULES[r].knob)}, "
                             f"not {v!r}")
        if v == "fly" and isinstance(self.K, int) and self.K < 2:
            raise ValueError(f"verifier 'fly' needs K >= 2 (its window is min(6, K - 1)), got K = {self.K}")
        if self.deferral not in DEFERRALS:
            raise ValueError(f"unknown deferral rule {self.deferral!r}; allowed: {', '.join(DEFERRALS)}")
        if self.deferral != "chow" and v != "cascade":
            raise ValueError(f"deferral is only used by the 'cascade' verifier, not {v!r}")
        a = self.synthetic_acceptance
        if a is not None and not 0 <= a <= 1:
            raise ValueError(f"synthetic acceptance must be in [0, 1], got {a}")

    def record(self) -> dict:
        """The settings as a manifest records them."""
        return dataclasses.asdict(self) | {"eos_token_id": None if self.eos_token_id is None
                                           else list(self.eos_token_id)}


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
    def here(cls, capture: str = "none", fastpath: bool = True) -> Execution:
        """The settings an entry point was given (the --capture and --no-fastpath flags of generate, sweep-weight,
        train and bench; the lm-eval model's args), with torch's thread count; resolved once and passed down."""
        if capture not in CAPTURES:
            raise ValueError(f"unknown capture {capture!r}; allowed: {', '.join(CAPTURES)}")
        return cls(capture, bool(fastpath), torch.get_num_threads())


def check_request(target, draft, prompt_len: int, decoding: Decoding, *, head, vocab_size: int | None,
                  execution: Execution) -> None:
    """Every check that can fail, before any compute: the head a verifier needs, then the models (prompt_len:
    the longest prompt's)."""
    verifier = decoding.verifier
    if verifier == "dynamic" and head is None:
        raise ValueError("verifier 'dynamic' needs --head, a trained weight head (head= in Python)")
    models = [("target", target)]
    if verifier != "autoregressive":
        if draft is None:
            raise ValueError(f"verifier {verifier!r} needs a draft model")
        models.append(("draft", draft))
    if verifier in RULES:
        v_t, v_d = vocab_width(target), vocab_width(draft)
        if v_t != v_d and (vocab_size is None or vocab_size < max(v_t, v_d)):
            raise ValueError(f"vocabulary mismatch: target has {v_t} logits, draft has {v_d} (load the pair with "
                             "diversed.decoding.models.load_pair to pad provably identical tokenizers)")
    if verifier == "dynamic":
        head.check_pair(target, draft)
    for role, model in models:
        fastpath.check_capture(execution.capture, model, role, enabled=execution.fastpath)
        ctx = context_length(model)
        if ctx is not None and prompt_len + decoding.max_new_tokens > ctx:
            raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({decoding.max_new_tokens}) exceeds "
                             f"the {role}'s context length {ctx}")


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
    """h [N, h] -> logits [N, V] through the output projection, with a faster kernel on CPU.

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
        N = h.shape[0]
        x = h if N > 1 or not cpu_f32 else torch.cat([h, h])  # [max(N, 2), h] on CPU
        logits = (W @ x.T).T[:N] if cpu_f32 else torch.nn.functional.linear(x, W)  # [N, V or R]
        if rows is None:
            return logits.contiguous()
        return logits.new_full((N, V), float("-inf")).index_copy_(1, index, logits)  # [N, V]

    return head


class RowCache:
    """transformers' cache interface over preallocated [B, heads, capacity, d] buffers per layer, each row written
    at its own positions (the fast path's static cache, for every other architecture). Sliding-window layers keep
    every position too: the mask (Stepper._masks) applies the window, so rejected drafts roll back at any length.
    `at(rows, pos, window)` says where the next forward writes and how far it reads."""

    def __init__(self, model: nn.Module, rows: int, capacity: int):
        from transformers.cache_utils import Cache

        layers = [_RowLayer(self) for _ in range(model.get_decoder().config.num_hidden_layers)]
        self.cache = Cache(layers=layers)
        self.B, self.capacity = rows, capacity
        self.rows, self.pos, self.window = None, None, 0

    def at(self, rows: torch.Tensor | None, pos: torch.Tensor, window: int) -> None:
        self.rows, self.pos, self.window = rows, pos, window
        if window > self.capacity:  # grow (a Stepper without max_len)
            self.capacity = max(window, 2 * self.capacity)
            for layer in self.cache.layers:
                layer.grow(self.capacity)


def _row_layer_class():
    from transformers.cache_utils import DynamicLayer

    class RowLayer(DynamicLayer):
        """One layer of a RowCache."""

        def __init__(self, owner: RowCache):
            super().__init__()
            self.owner = owner

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            B, cap = self.owner.B, self.owner.capacity
            self.keys = key_states.new_zeros(B, key_states.shape[1], cap, key_states.shape[3])
            self.values = value_states.new_zeros(B, value_states.shape[1], cap, value_states.shape[3])
            self.device, self.is_initialized = key_states.device, True

        def grow(self, capacity: int) -> None:
            if self.is_initialized:
                pad = capacity - self.keys.shape[2]
                self.keys = torch.nn.functional.pad(self.keys, (0, 0, 0, pad))
                self.values = torch.nn.functional.pad(self.values, (0, 0, 0, pad))

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            """key_states [R, heads, T, d] at the owner's rows and positions -> keys, values [R, heads, window, d]."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            o = self.owner
            at = (torch.arange(key_states.shape[0], device=self.device) if o.rows is None else o.rows)[:, None]
            self.keys[at, :, o.pos] = key_states.transpose(1, 2)  # [R, T, heads, d]
            self.values[at, :, o.pos] = value_states.transpose(1, 2)
            keys, values = self.keys[:, :, :o.window], self.values[:, :, :o.window]
            if o.rows is not None:
                keys, values = keys.index_select(0, o.rows), values.index_select(0, o.rows)
            return keys, values

        def get_seq_length(self) -> int:
            return self.owner.window

    return RowLayer


def _RowLayer(owner: RowCache):
    global _RowLayer
    cls = _row_layer_class()
    _RowLayer = cls
    return cls(owner)


class Stepper:
    """One model with a KV cache of `rows` sequences, each at its own length (`held`): feed new tokens, get
    logits and last hidden states back."""

    def __init__(self, model: nn.Module, vocab_size: int | None = None, shared: int | None = None,
                 max_len: int | None = None, execution: Execution = Execution(), buckets: tuple[int, ...] = (),
                 rows: int = 1):
        """vocab_size: common logit width (pads with -inf); shared: ids at or past it get -inf (see check_vocab);
        max_len: positions a row will reach, which enables the static-cache fast path where supported and
        execution.fastpath allows; execution.capture: "none" / "graph" / "compile" for the fast path's steps of
        the lengths in `buckets` (fastpath)."""
        self.model, self.rows = model, rows
        self.decoder = model.get_decoder()
        lm_head = model.get_output_embeddings()
        self.device = lm_head.weight.device
        self.vocab = vocab_size or lm_head.out_features  # logit width V
        self.empty_hidden = lm_head.weight.new_zeros(rows, 0, lm_head.weight.shape[1])  # [B, 0, h]
        # as the class's forward applies it: Gemma3ForConditionalGeneration applies no softcap of its text config
        softcap = getattr(model.config, "final_logit_softcapping", None)
        pad = self.vocab - lm_head.out_features
        shared = shared if shared is not None and shared < lm_head.out_features else None
        vocabulary = draft_vocabulary(model)
        self.post = logits_fn(output_head(lm_head, vocabulary), softcap, shared, pad)
        # checked here too, else an unsupported model would silently run uncaptured
        fastpath.check_capture(execution.capture, model, enabled=execution.fastpath)
        fast = bool(max_len) and execution.fastpath and fastpath.supported(model)
        self.fast = fastpath.acquire(model, max_len, self, execution.capture, buckets, self.post,
                                     (softcap, shared, pad, vocabulary and len(vocabulary)), rows) if fast else None
        self.cache = None if self.fast else RowCache(model, rows, (max_len or 64) + max(buckets, default=1))
        self.held = self.fast.n if self.fast else [0] * rows  # positions held in the cache, per row

    @property
    def n(self) -> int:
        """Positions held by a one-row cache."""
        if self.rows != 1:
            raise ValueError(f"a cache of {self.rows} rows holds one length per row: read .held")
        return self.held[0]

    @torch.inference_mode()
    def __call__(self, ids: list[int] | torch.Tensor, rows: list[int] | None = None, lengths: list[int] | None = None,
                 last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [R, T] (long, on the model's device) for the cache rows `rows` (default: all, in order) -> logits
        [R, T or 1, V] (float32) and hidden states [R, T or 1, h]. Row r takes lengths[r] tokens (default T),
        ids[r, :lengths[r]], at its next positions; the rest is padding. last_only: each row's last real one.

        A one-row cache also takes ids [T] (a list or a tensor) and returns logits [T or 1, V], hidden [T or 1, h]."""
        single = not isinstance(ids, torch.Tensor) or ids.dim() == 1
        x = torch.as_tensor(ids, device=self.device).view(1, -1) if single else ids  # [R, T]
        if self.fast is not None:
            logits, h = self.fast(x, rows, lengths, last_only)
        else:
            logits, h = self._forward(x, rows, lengths, last_only)
        return (logits[0], h[0]) if single else (logits, h)

    def _forward(self, x: torch.Tensor, rows: list[int] | None, lengths: list[int] | None,
                 last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' modules over a RowCache, with each row's positions and a mask of its own."""
        R, T = x.shape
        rows = list(range(self.rows)) if rows is None else rows
        lengths = [T] * R if lengths is None else lengths
        n = [self.held[r] for r in rows]
        pos = torch.tensor(n, device=self.device)[:, None] + torch.arange(T, device=self.device)  # [R, T]
        window = max(n) + T
        index = None if rows == list(range(self.rows)) else torch.tensor(rows, device=self.device)
        self.cache.at(index, pos, window)
        h = self.decoder(input_ids=x, attention_mask=self._masks(pos, window), position_ids=pos,
                         cache=self.cache.cache, use_cache=True).last_hidden_state  # [R, T, h]
        if last_only:
            at = torch.tensor([k - 1 for k in lengths], device=self.device)[:, None, None]  # [R, 1, 1]
            h = h.gather(1, at.expand(R, 1, h.shape[-1]))  # [R, 1, h]
        for r, k in zip(rows, lengths, strict=True):
            self.held[r] += k
        return self.post(h.reshape(-1, h.shape[-1])).view(*h.shape[:2], -1), h

    def _masks(self, pos: torch.Tensor, window: int):
        """Each row's attention mask [R, 1, T, window] over its cache positions: keys at or before the query's
        position (and within the sliding window on sliding layers); one per layer type where the model has
        several, in the form its attention takes (boolean for SDPA, additive for eager)."""
        cfg = self.decoder.config
        keys = torch.arange(window, device=self.device)
        causal = keys <= pos[:, :, None]  # [R, T, window]
        allowed = {"full_attention": causal}
        if getattr(cfg, "sliding_window", None):
            allowed["sliding_attention"] = causal & (pos[:, :, None] - keys < cfg.sliding_window)
        impl = cfg._attn_implementation
        if impl not in ("sdpa", "eager"):
            raise ValueError(f"attention {impl!r} takes no custom mask; load the model with attn_implementation "
                             "'sdpa' or 'eager'")
        dtype = self.decoder.embed_tokens.weight.dtype
        form = {k: m[:, None] if impl == "sdpa" else torch.zeros(m[:, None].shape, dtype=dtype, device=self.device)
                .masked_fill(~m[:, None], torch.finfo(dtype).min) for k, m in allowed.items()}
        types = getattr(cfg, "layer_types", None)  # models with layer types take one mask per type
        if types:
            return {t: form[t] for t in set(types)}
        return form["sliding_attention" if "sliding_attention" in form else "full_attention"]

    def crop(self, n: int, row: int = 0) -> None:
        """Keep row's first n positions (rollback of rejected drafts); later writes overwrite the others."""
        self.held[row] = min(self.held[row], n)

    def reset(self, row: int) -> None:
        """Empty a row for the next sequence."""
        self.held[row] = 0


def logits_fn(head: Callable[[torch.Tensor], torch.Tensor], softcap: float | None, shared: int | None,
              pad: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """h [N, h] -> logits [N, V + pad] (float32): the output head, its softcap, -inf past the shared
    vocabulary and for the padding."""

    def post(h: torch.Tensor) -> torch.Tensor:
        logits = head(h).float()  # [N, V]
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
    """logits [R, ..., V] -> (logits, ok [R]) without a host sync. NaN anywhere in a row's logits, or a position
    without a finite value, makes its max non-finite (one reduction). Broken rows are zeroed so that sampling can
    go on; the caller raises at its next host sync (_raise_if_broken), and nothing sampled from them is emitted."""
    ok = torch.isfinite(logits.amax(dim=-1)).reshape(logits.shape[0], -1).all(dim=1)  # [R]
    return torch.where(ok.view(-1, *[1] * (logits.dim() - 1)), logits, torch.zeros_like(logits)), ok


def _raise_if_broken(ok: list[float], who: str, step: int) -> None:
    if not all(ok):
        raise FloatingPointError(f"{who} logits are not finite (NaN, +inf, or no finite value) at step {step}; "
                                 "refusing to sample")


def _fidelity(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference-free fidelity of tokens [...] under the target's raw logits [..., V] that predicted them:
    (log p_target(token) at T = 1 [...], is it the target's argmax [...]), on the device."""
    logprob = logits.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
    return logprob, logits.argmax(-1) == tokens


def _to_host(*xs: torch.Tensor) -> list[list[float]]:
    """Small device tensors to Python lists in one transfer: the host sync of a step, for the whole batch.

    Packed as float32, which holds token ids exactly (< 2^24) and the float32 statistics unchanged; each comes
    back flat (row-major)."""
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
                raise ValueError(f"input_ids holds {input_ids.shape[0]} sequences: pass a list of prompts to "
                                 "engine.generate for a batch")
            input_ids = input_ids[0]
        input_ids = input_ids.tolist()
    ids = [int(t) for t in input_ids]
    if not ids:
        raise ValueError("empty prompt: input_ids has no tokens")
    return ids


def eos_set(model: nn.Module, eos_token_id: int | tuple[int, ...] | list[int] | None = None) -> set[int]:
    """The ids that end a sequence: eos_token_id, else the model's generation config's."""
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}


@dataclass
class Row:
    """A sequence in the batch: its prompt's index, its record and generator, its newest token (in neither cache),
    what the draft has not seen, its step marks (draft start, verify start, done) and its start."""

    index: int
    out: Generation
    generator: torch.Generator | None
    last: int
    pending: list[int]
    started: float
    marks: list[tuple] = field(default_factory=list)


class Batch:
    """B cache rows over a queue of prompts: the live rows (slot -> Row), refilled as rows end."""

    def __init__(self, prompts: list[list[int]], steppers: list[Stepper], decoding: Decoding,
                 generators: list[torch.Generator | None], size: int, eos: set[int],
                 on_finish: Callable[[int], None] | None = None):
        self.prompts, self.steppers, self.decoding, self.generators = prompts, steppers, decoding, generators
        self.eos, self.on_finish = eos, on_finish  # the ids that end a row; called with each finished prompt
        self.queue: Iterator[int] = iter(range(len(prompts)))
        self.live: dict[int, Row] = {}
        self.done: list[Generation | None] = [None] * len(prompts)
        self.admit(list(range(size)))

    def admit(self, slots: list[int]) -> None:
        """The next prompts into the free slots, their prompts but the newest token prefilled together."""
        joining = []
        for slot in slots:
            index = next(self.queue, None)
            if index is None:
                break
            joining.append((slot, index))
        for s in self.steppers:
            for slot, _ in joining:
                s.reset(slot)
        prefill = [(slot, self.prompts[i][:-1]) for slot, i in joining if len(self.prompts[i]) > 1]
        if prefill:
            device = self.steppers[0].device
            width = max(len(ids) for _, ids in prefill)
            x = torch.tensor([ids + [0] * (width - len(ids)) for _, ids in prefill], device=device)  # [R, L]
            for s in self.steppers:
                s(x, [slot for slot, _ in prefill], [len(ids) for _, ids in prefill], last_only=True)
        for slot, i in joining:
            ids = self.prompts[i]
            self.live[slot] = Row(i, Generation(tokens=[], K=self.decoding.K if self.decoding.verifier in
                                                RULES else 0), self.generators[i], ids[-1], ids[-1:],
                                  time.perf_counter())

    def finish(self, slot: int, clock: _Clock | None = None) -> None:
        """A row that ended leaves (its times: from its admission, and its steps' draft and verify marks); its slot
        takes the next prompt."""
        row = self.live.pop(slot)
        synchronize(self.steppers[0].device)
        row.out.time_total = time.perf_counter() - row.started
        if clock is not None:
            row.out.time_draft = sum(clock.seconds(a, b) for a, b, _ in row.marks)
            row.out.time_verify = sum(clock.seconds(b, c) for _, b, c in row.marks)
        self.done[row.index] = row.out
        if self.on_finish is not None:
            self.on_finish(row.index)
        self.admit([slot])

    def rows(self) -> tuple[list[int], list[Row]]:
        slots = sorted(self.live)
        return slots, [self.live[s] for s in slots]


@dataclass
class Block:
    """Each row's draft tokens and what the draft computed for them, on the device (kmax: the longest k)."""

    tokens: torch.Tensor  # [R, kmax] long
    log_q: torch.Tensor  # [R, kmax, V]
    h: torch.Tensor  # [R, kmax, h_d]: the draft hidden state that proposed each token
    ok: torch.Tensor  # [R, kmax]: finite draft logits


@dataclass
class Scored:
    """The target's forward over [newest, d_1..d_k] of each row, on the device."""

    logits: torch.Tensor  # [R, kmax + 1, V] raw (zeroed if not finite), for the fidelity statistics
    log_p: torch.Tensor  # [R, kmax + 1, V] after temperature and top-p
    h: torch.Tensor  # [R, kmax + 1, h_t]: the target hidden state predicting each position
    ok: torch.Tensor  # [R]: finite target logits


def _padded(seqs: list[list[int]], device: torch.device) -> tuple[torch.Tensor, list[int]]:
    """Token lists -> ids [R, max length] (0-padded) and their lengths."""
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [0] * (width - len(s)) for s in seqs], device=device), [len(s) for s in seqs]


def draft_block(D: Stepper, slots: list[int], rows: list[Row], ks: list[int], sampling: Sampling) -> Block:
    """The draft proposes k_r tokens for each row r, one forward per position for all rows, fed each row's
    pending tokens first; rows that need fewer than the longest k draft on without drawing."""
    kmax, R = max(ks), len(rows)
    if not kmax:
        return Block(torch.zeros(R, 0, dtype=torch.long, device=D.device), torch.full(
            (R, 0, D.vocab), -torch.inf, device=D.device), D.empty_hidden[:R], torch.ones(R, 0, dtype=torch.bool))
    x, lengths = _padded([r.pending for r in rows], D.device)  # [R, 1 or 2]
    generators = [r.generator for r in rows]
    tokens, log_q, h, ok = [], [], [], []
    for j in range(kmax):
        logits, h_j = D(x, slots, lengths, last_only=True)  # [R, 1, V], [R, 1, h_d]
        logits, ok_j = _finite(logits[:, 0])  # [R, V], [R]
        log_q_j = sampling.logprobs(logits)  # [R, V]
        x = sampling.draw(log_q_j, generators, [j < k for k in ks])[:, None]  # [R, 1]
        tokens.append(x), log_q.append(log_q_j), h.append(h_j), ok.append(ok_j)
        lengths = [1] * R
    return Block(torch.cat(tokens, 1), torch.stack(log_q, 1), torch.cat(h, 1), torch.stack(ok, 1))


def score_block(T: Stepper, slots: list[int], rows: list[Row], block: Block, ks: list[int],
                sampling: Sampling) -> Scored:
    """One target forward over [last, d_1..d_k] per row: position i predicts draft token i + 1 (k, the bonus)."""
    last = torch.tensor([[r.last] for r in rows], device=T.device)  # [R, 1]
    logits, h = T(torch.cat([last, block.tokens], 1), slots, [k + 1 for k in ks])  # [R, kmax + 1, V], [.., h_t]
    logits, ok = _finite(logits)
    return Scored(logits, sampling.logprobs(logits), h, ok)


def verify_step(block: Block, scored: Scored, w: torch.Tensor, ks: list[int], rows: list[Row],
                decoding: Decoding, p: torch.Tensor, q: torch.Tensor) -> tuple[list[Step], list[list[int]]]:
    """Verify every row's block (verifiers.verify_rows, or synthetic acceptance), then bring the step's records to
    the host in one transfer for the whole batch; raises if any logits a row used were not finite (p, q: their
    probabilities, computed once a step). Returns per row its Step and its candidates [k + 1]: every possible
    emission, the drafts up to n and next_token at n."""
    kmax = block.tokens.shape[1]
    sampling, generators = decoding.sampling, [r.generator for r in rows]
    if decoding.synthetic_acceptance is None:
        logs = {"log_p": scored.log_p, "log_q": block.log_q} if decoding.mixing == "logit" else {}
        n, next_token, bias = verify_rows(block.tokens, q, p, w, ks, mixing=decoding.mixing, greedy=sampling.greedy,
                                          generators=generators, test=RULES[decoding.verifier].test,
                                          knob=decoding.knob, window=fly_window(decoding.K),
                                          **logs)  # [R], [R], [R, kmax + 1]
    else:
        n, next_token, bias = synthetic_rows(ks, p, decoding.synthetic_acceptance, greedy=sampling.greedy,
                                             generators=generators)
    at = torch.arange(kmax + 1, device=p.device)
    candidates = torch.where(at == n[:, None], next_token[:, None], torch.cat([block.tokens, next_token[:, None]], 1))
    live = at[:kmax] < torch.tensor(ks, device=p.device)[:, None]  # [R, kmax]
    ok = (block.ok.to(p.device) | ~live).all(1)  # [R]: the draft logits each row used
    n, ok, ok_t, tokens, ws, bias, logprob, is_max = _to_host(
        n, ok, scored.ok, candidates, w, bias, *_fidelity(scored.logits, candidates))
    steps, emitted, mixes = [], [], RULES[decoding.verifier].weight is not None  # w is recorded where it mixes
    for r, k in enumerate(ks):
        _raise_if_broken([ok[r]], "draft", len(rows[r].out.drafted))
        _raise_if_broken([ok_t[r]], "target", len(rows[r].out.drafted))
        m, span = int(n[r]) + 1, slice(r * (kmax + 1), (r + 1) * (kmax + 1))
        cand = [int(t) for t in tokens[span][:k + 1]]
        steps.append(Step(drafted=k, accepted=m - 1, tokens=cand[:m],
                          weights=ws[r * kmax:r * kmax + k] if mixes else [],
                          bias_tv=bias[span][:m], target_logprob=logprob[span][:m],
                          target_argmax=[bool(a) for a in is_max[span][:m]]))
        emitted.append(cand)
    return steps, emitted


def roll_back(T: Stepper, D: Stepper, slot: int, row: Row, candidates: list[int], m: int) -> None:
    """Keep the step's first m candidates [k + 1]: both caches keep the sequence but its newest token, which
    becomes row.last; row.pending is what the draft has not seen of it."""
    start = T.held[slot] - (len(candidates) - 1)  # sequence position of candidates[0]: T holds all of them but one
    T.crop(start + m - 1, slot)
    D.crop(start + m - 1, slot)
    row.last, row.pending = candidates[m - 1], candidates[D.held[slot] - start:m]


def speculative_step(T: Stepper, D: Stepper, batch: Batch, head: nn.Module | None, clock: _Clock) -> None:
    """One draft-score-verify step for every live row, then each row's record and rollback."""
    decoding = batch.decoding
    slots, rows = batch.rows()
    ks = [min(decoding.K, decoding.max_new_tokens - len(r.out.tokens) - 1) for r in rows]  # k + 1 tokens at most
    t_draft = clock()
    block = draft_block(D, slots, rows, ks, decoding.sampling)  # tokens [R, kmax], log_q [R, kmax, V]
    t_verify = clock()
    scored = score_block(T, slots, rows, block, ks, decoding.sampling)  # log_p [R, kmax + 1, V]
    rule = RULES[decoding.verifier]
    kmax = block.tokens.shape[1]
    p, q = scored.log_p.exp(), block.log_q.exp()  # [R, kmax + 1, V], [R, kmax, V]: once a step
    if rule.weight is None:
        w = _ones(len(rows), kmax, T.device)  # [R, kmax]: unused by its test, not recorded
    else:
        w = rule.weight(len(rows), kmax, device=T.device, weight=decoding.weight, head=head, h_target=scored.h,
                        h_draft=block.h, p=p, q=q, knob=decoding.knob,
                        deferral=decoding.deferral)  # [R, kmax]
    steps, candidates = verify_step(block, scored, w, ks, rows, decoding, p, q)
    t_done = clock()
    for slot, row, step, cand in zip(slots, rows, steps, candidates, strict=True):
        row.marks.append((t_draft, t_verify, t_done))
        m = row.out.record(step, batch.eos)
        if row.out.stop == "eos" or len(row.out.tokens) >= decoding.max_new_tokens:
            batch.finish(slot, clock)
        else:
            roll_back(T, D, slot, row, cand, m)


def alone_step(M: Stepper, batch: Batch, fidelity: bool) -> None:
    """One token for every live row from one model alone (the baselines); fidelity: its log p and argmax
    agreement under this model (off for the draft alone, which the target judges)."""
    slots, rows = batch.rows()
    sampling = batch.decoding.sampling
    x, lengths = _padded([r.pending for r in rows], M.device)
    logits, _ = M(x, slots, lengths, last_only=True)  # [R, 1, V]
    logits, ok = _finite(logits[:, 0])  # [R, V]
    tokens = sampling.draw(logits if sampling.greedy else sampling.logprobs(logits), [r.generator for r in rows])
    ok, tokens, logprob, is_max = _to_host(ok, tokens, *_fidelity(logits, tokens))  # one sync for the batch
    for r, (slot, row) in enumerate(zip(slots, rows, strict=True)):
        _raise_if_broken([ok[r]], "model", len(row.out.tokens))
        token = int(tokens[r])
        row.out.tokens.append(token)
        if fidelity:
            row.out.target_logprob.append(logprob[r])
            row.out.target_argmax.append(bool(is_max[r]))
        row.pending = [token]
        if token in batch.eos:
            row.out.stop = "eos"
        if row.out.stop == "eos" or len(row.out.tokens) >= batch.decoding.max_new_tokens:
            batch.finish(slot)


@torch.inference_mode()
def generate(target: nn.Module, draft: nn.Module | None, prompts: list, decoding: Decoding, *,
             head: nn.Module | None = None, generators: list[torch.Generator | None] | None = None,
             batch_size: int = 1, vocab_size: int | None = None, execution: Execution = Execution(),
             on_finish: Callable[[int], None] | None = None) -> list[Generation]:
    """Decode every prompt (token ids) with decoding.verifier (VERIFIERS), batch_size rows at a time in lockstep;
    returns one Generation per prompt, in order. generators[i]: prompt i's (None: torch's global one);
    on_finish(i): called as prompt i ends (a progress bar).

    strict: w = 1 (lossless); fixed: constant weight; dynamic: w_i = head(h_target_i, h_draft_i); cascade,
    lenient, typical, topk, fly: their rules with decoding.knob (RULES).
    execution.capture applies to the fixed-shape steps: the draft's 1- and 2-token steps, the target's
    K + 1-token verification (see fastpath)."""
    prompts = [_prompt_ids(p) for p in prompts]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size!r} (an integer)")
    if not prompts:
        raise ValueError("no prompts to decode")
    generators = [None] * len(prompts) if generators is None else list(generators)
    if len(generators) != len(prompts):
        raise ValueError(f"{len(generators)} generators for {len(prompts)} prompts")
    check_request(target, draft, max(len(p) for p in prompts), decoding, head=head, vocab_size=vocab_size,
                  execution=execution)
    B = min(batch_size, len(prompts))
    max_len = max(len(p) for p in prompts) + decoding.max_new_tokens + 1
    if decoding.verifier in ("autoregressive", "draft"):
        return _alone(target, draft, prompts, decoding, generators, B, max_len, vocab_size, execution, on_finish)
    shared = shared_width(target, draft)
    # the target verifies K + 1 tokens (fewer at the end: padded); the draft takes 1, or 2 after a full acceptance
    T = Stepper(target, vocab_size, shared, max_len, execution, buckets=(decoding.K + 1,), rows=B)
    # a row whose step needs fewer than K drafts drafts on with the others (untouched draws, rolled back): K more
    D = Stepper(draft, vocab_size, shared, max_len + decoding.K, execution, buckets=(1, 2), rows=B)
    head = head.to(T.device) if head is not None else None
    clock = _Clock(T.device)
    synchronize(T.device)
    batch = Batch(prompts, [T, D], decoding, generators, B, eos_set(target, decoding.eos_token_id), on_finish)
    while batch.live:  # one host sync per step, in verify_step
        speculative_step(T, D, batch, head, clock)
    return batch.done


def _alone(target: nn.Module, draft: nn.Module | None, prompts: list[list[int]], decoding: Decoding,
           generators: list, B: int, max_len: int, vocab_size: int | None, execution: Execution,
           on_finish: Callable[[int], None] | None) -> list[Generation]:
    """The baselines: the target alone, or the draft alone stopping at the target's EOS, its fidelity judged by
    the target in one pass per prompt."""
    alone = decoding.verifier == "draft"
    model = draft if alone else target
    M = Stepper(model, shared=shared_width(target, draft) if alone else None, max_len=max_len, execution=execution,
                buckets=(1,), rows=B)
    synchronize(M.device)
    batch = Batch(prompts, [M], decoding, generators, B, eos_set(target, decoding.eos_token_id), on_finish)
    while batch.live:
        alone_step(M, batch, fidelity=not alone)
    if alone:
        for ids, out in zip(prompts, batch.done, strict=True):
            logits, _ = Stepper(target, vocab_size)(ids + out.tokens[:-1])  # [len(ids) + n - 1, V]
            tokens = torch.tensor(out.tokens, device=logits.device)  # [n]
            logprob, is_max = _to_host(*_fidelity(logits[len(ids) - 1:], tokens))
            out.target_logprob, out.target_argmax = logprob, [bool(a) for a in is_max]
    return batch.done


def speculative_generate(target: nn.Module, draft: nn.Module | None, input_ids, decoding: Decoding, *,
                         head: nn.Module | None = None, generator: torch.Generator | None = None,
                         vocab_size: int | None = None, execution: Execution = Execution()) -> Generation:
    """Decode one prompt (generate with a batch of one): the new tokens and per-step statistics."""
    return generate(target, draft, [input_ids], decoding, head=head, generators=[generator], vocab_size=vocab_size,
                    execution=execution)[0]
