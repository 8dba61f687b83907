"""A model stepped over a KV cache of B rows (`Stepper`), each row at its own length: the static-cache fast path
(diversed.decoding.fastpath) where the architecture has one, else transformers' modules over a `RowCache`; and the
output head that turns last hidden states into logits (a draft vocabulary's rows only, a faster CPU kernel)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

import torch
from torch import nn

from diversed.compat import cache_kwarg
from diversed.decoding import fastpath, transfer
from diversed.decoding.models import draft_vocabulary
from diversed.decoding.settings import Execution
from diversed.decoding.transfer import to_device

_ROWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # lm_head -> (key, index [R], W rows [R, h])


def _vocabulary_rows(lm_head: nn.Module, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft vocabulary's ids and a copy of their weight rows, made once per head and weight version (not once
    per sequence)."""
    W = lm_head.weight
    key = (W._version, W.data_ptr(), W.dtype, W.device, rows)
    cached = _ROWS.get(lm_head)
    if cached is None or cached[0] != key:
        index = to_device(rows, W.device)  # [R]
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

        layers = [_row_layer_class()(self) for _ in range(model.get_decoder().config.num_hidden_layers)]
        self.cache = Cache(layers=layers)
        self.B, self.capacity = rows, capacity
        self.rows, self.pos, self.window = None, None, 0

    def at(self, rows: torch.Tensor | None, pos: torch.Tensor, window: int) -> None:
        self.rows, self.pos, self.window = rows, pos, window
        if window > self.capacity:  # grow (a Stepper without max_len)
            self.capacity = max(window, 2 * self.capacity)
            for layer in self.cache.layers:
                layer.grow(self.capacity)


@functools.cache
def _row_layer_class() -> type:
    """RowCache's layer class, built once (transformers is imported on first use)."""
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
            """key_states [R, heads, S, d] at the owner's rows and positions -> keys, values [R, heads, window, d]."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            o = self.owner
            at = (torch.arange(key_states.shape[0], device=self.device) if o.rows is None else o.rows)[:, None]
            self.keys[at, :, o.pos] = key_states.transpose(1, 2)  # [R, S, heads, d]
            self.values[at, :, o.pos] = value_states.transpose(1, 2)
            keys, values = self.keys[:, :, :o.window], self.values[:, :, :o.window]
            if o.rows is not None:
                keys, values = keys.index_select(0, o.rows), values.index_select(0, o.rows)
            return keys, values

        def get_seq_length(self) -> int:
            return self.owner.window

    return RowLayer


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
        """ids [R, S] (long, on the model's device) for the cache rows `rows` (default: all, in order) -> logits
        [R, S or 1, V] (float32) and hidden states [R, S or 1, h]. Row r takes lengths[r] tokens (default S),
        ids[r, :lengths[r]], at its next positions; the rest is padding. last_only: each row's last real one.

        A one-row cache also takes ids [S] (a list or a tensor) and returns logits [S or 1, V], hidden [S or 1, h]."""
        single = not isinstance(ids, torch.Tensor) or ids.dim() == 1
        if single:
            x = (ids.to(self.device) if isinstance(ids, torch.Tensor) else to_device(ids, self.device)).view(1, -1)
        else:
            x = ids  # [R, S]
        if self.fast is not None:
            logits, h = self.fast(x, rows, lengths, last_only)
        else:
            logits, h = self._forward(x, rows, lengths, last_only)
        return (logits[0], h[0]) if single else (logits, h)

    def _forward(self, x: torch.Tensor, rows: list[int] | None, lengths: list[int] | None,
                 last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' modules over a RowCache, with each row's positions and a mask of its own."""
        R, S = x.shape
        rows = list(range(self.rows)) if rows is None else rows
        lengths = [S] * R if lengths is None else lengths
        n = [self.held[r] for r in rows]
        pos = to_device(n, self.device)[:, None] + torch.arange(S, device=self.device)  # [R, S]
        window = max(n) + S
        index = None if rows == list(range(self.rows)) else transfer.index(tuple(rows), self.device)
        self.cache.at(index, pos, window)
        h = self.decoder(input_ids=x, attention_mask=self._masks(pos, window), position_ids=pos, use_cache=True,
                         **{cache_kwarg(self.decoder): self.cache.cache}).last_hidden_state  # [R, S, h]
        if last_only:
            at = transfer.index(tuple(k - 1 for k in lengths), self.device)[:, None, None]  # [R, 1, 1]
            h = h.gather(1, at.expand(R, 1, h.shape[-1]))  # [R, 1, h]
        for r, k in zip(rows, lengths, strict=True):
            self.held[r] += k
        return self.post(h.reshape(-1, h.shape[-1])).view(*h.shape[:2], -1), h

    def _masks(self, pos: torch.Tensor, window: int):
        """Each row's attention mask [R, 1, S, window] over its cache positions: keys at or before the query's
        position (and within the sliding window on sliding layers); one per layer type where the model has
        several, in the form its attention takes (boolean for SDPA, additive for eager)."""
        cfg = self.decoder.config
        keys = torch.arange(window, device=self.device)
        causal = keys <= pos[:, :, None]  # [R, S, window]
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
