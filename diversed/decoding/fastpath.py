"""A lean decoder step for Llama-family models (Llama, Qwen3), in the spirit of gpt-fast: a static,
preallocated KV cache on the model's device (rollback = moving one integer) and no per-call wrappers.
On CPU in float32 the QKV and gate/up projections are fused against transposed copies (GEMV-friendly);
elsewhere (GPU, bf16) the model's own weights are used as they are, so nothing is copied.

Same math as transformers' modules (RMSNorm in float32, the model's rotary embedding tabulated once,
SDPA); only the order of floating-point sums differs. The engine uses it for Llama/Qwen3 and falls
back to the transformers modules for other architectures, or when its Execution turns it off.

Capture (`capture=`): the fixed-shape steps (the draft's 1-token step, the target's K + 1-token
verification) can run as one CUDA graph each ("graph"), or compiled by torch.compile and, on a GPU,
graphed ("compile"). A captured step is padded to its bucket length and attends over a window of the cache
under a mask by position: the live length rounded up to a power of two (WINDOW_MIN at least), one capture per
(bucket, window), so its shapes never change and a short sequence does not read the whole cache; prefill and
other lengths run eagerly.

State kept across calls, and its owner:
- per model (`ModelState`: the projections of its weights and its pooled captured decoders), held under a
  weak key, so it lives exactly as long as the model; replaced as a whole when any parameter of any decoder
  layer is replaced or changed in place (a new storage or a bumped tensor version);
- the compiled decoder layer (`_compiled`), once per process.
A decoder taken from the pool belongs to one Stepper while that Stepper lives (`acquire`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from diversed.decoding import transfer
from diversed.decoding.settings import CAPTURES
from diversed.decoding.transfer import to_device

SUPPORTED = ("llama", "qwen3")


def supported(model: nn.Module) -> bool:
    """Whether the fast path computes this model's forward (its architecture and options)."""
    cfg = model.config
    return (cfg.model_type in SUPPORTED and not getattr(cfg, "attention_bias", False)
            and not getattr(cfg, "mlp_bias", False) and getattr(cfg, "hidden_act", "silu") == "silu"
            and getattr(cfg, "sliding_window", None) is None
            # the rotary table is computed once: no RoPE that rescales with the sequence length
            and not any(t in str(getattr(model.get_decoder().rotary_emb, "rope_type", "default"))
                        for t in ("dynamic", "longrope")))


class Proj:
    """x [S, in] -> x @ [W_1; W_2; ...]^T [S, sum out]: one GEMM against a fused transposed copy on CPU in
    float32 (2x faster GEMVs there), else the weights' own linear calls (no copy of a GPU model's weights)."""

    def __init__(self, *weights: torch.Tensor):
        weights = [w.detach() for w in weights]
        fuse = weights[0].device.type == "cpu" and weights[0].dtype == torch.float32
        self.fused_t = torch.cat(weights).T.contiguous() if fuse else None  # [in, sum out]
        self.parts = None if fuse else weights

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_t is not None:
            return x @ self.fused_t
        ys = [F.linear(x, w) for w in self.parts]
        return ys[0] if len(ys) == 1 else torch.cat(ys, dim=-1)


@dataclass
class LayerWeights:
    ln1: torch.Tensor  # [h]
    qkv: Proj  # h -> (n_q + 2 n_kv) d
    q_norm: torch.Tensor | None  # [d] (Qwen3)
    k_norm: torch.Tensor | None
    o: Proj  # n_q d -> h
    ln2: torch.Tensor
    gate_up: Proj  # h -> 2 I
    down: Proj  # I -> h


def build_layer_weights(model: nn.Module) -> list[LayerWeights]:
    """The decoder layers' weights as projections (fused copies on CPU in float32)."""
    out = []
    for layer in model.get_decoder().layers:
        a, m = layer.self_attn, layer.mlp
        qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
        out.append(LayerWeights(
            ln1=layer.input_layernorm.weight.detach(), qkv=Proj(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight),
            q_norm=None if qn is None else qn.weight.detach(), k_norm=None if kn is None else kn.weight.detach(),
            o=Proj(a.o_proj.weight), ln2=layer.post_attention_layernorm.weight.detach(),
            gate_up=Proj(m.gate_proj.weight, m.up_proj.weight), down=Proj(m.down_proj.weight)))
    return out


def weights_key(model: nn.Module) -> tuple:
    """Storage and version of every parameter of every decoder layer: changes when any of them is replaced or
    changed in place (an in-place op bumps the tensor's version)."""
    return tuple((p.data_ptr(), p._version) for p in model.get_decoder().layers.parameters())


@dataclass
class ModelState:
    """What the fast path keeps for one model: its layers' projections, valid for the weights of `key`, and the
    captured decoders built on them (pooled across sequences by acquire)."""

    key: tuple
    layers: list[LayerWeights]
    decoders: list[FastDecoder] = field(default_factory=list)


_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> ModelState, dropped with the model


def model_state(model: nn.Module) -> ModelState:
    """The model's state, rebuilt (projections and pool) when its decoder weights changed."""
    key = weights_key(model)
    state = _STATE.get(model)
    if state is None or state.key != key:
        state = _STATE[model] = ModelState(key, build_layer_weights(model))
    return state


def layer_weights(model: nn.Module) -> list[LayerWeights]:
    """The decoder weights as projections, built once per model and rebuilt when they change."""
    return model_state(model).layers


def pooled_decoders(model: nn.Module) -> list[FastDecoder]:
    """The captured decoders pooled for `model` (empty if none)."""
    state = _STATE.get(model)
    return list(state.decoders) if state is not None else []


def clear() -> None:
    """Drop every model's state (projections, pooled decoders); the compiled layer stays."""
    _STATE.clear()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers' LlamaRMSNorm: normalise in float32, then scale."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def check_capture(capture: str, model: nn.Module, role: str = "model", enabled: bool = True) -> None:
    """A clear error unless `capture` can run for `model` (the `role` names it in the message); enabled: whether
    the fast path is on (Execution.fastpath)."""
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; allowed: {', '.join(CAPTURES)}")
    device = model.get_output_embeddings().weight.device
    if capture == "graph" and device.type != "cuda":
        raise ValueError(f"capture 'graph' (CUDA graphs) needs a CUDA device, not {device.type}; "
                         "use 'compile' (torch.compile) or 'none'")
    if capture != "none" and not (enabled and supported(model)):
        why = f"the {role} is {model.config.model_type!r}" if enabled else "it is off (--no-fastpath)"
        raise ValueError(f"capture {capture!r} needs the static-cache fast path (Llama / Qwen3); {why}: "
                         "use capture 'none'")


class FastDecoder:
    """The decoder of one model with a static KV cache of `rows` sequences x `max_len` positions, each row at its
    own length (`n`).

    capture: "none", "graph" or "compile" (see the module docstring); buckets: the step lengths to
    capture (a step of S tokens runs in the smallest bucket >= S); post: h [N, h] -> logits [N, V],
    the output head, captured with the step.
    """

    def __init__(self, model: nn.Module, max_len: int, capture: str = "none", buckets: tuple[int, ...] = (),
                 post: Callable[[torch.Tensor], torch.Tensor] | None = None, rows: int = 1):
        cfg = model.config
        decoder = model.get_decoder()
        self.layers = layer_weights(model)
        self.n_q, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_q
        self.eps = cfg.rms_norm_eps
        self.embed = decoder.embed_tokens.weight.detach()  # [V, h]
        self.norm = decoder.norm.weight.detach()  # [h]
        device = self.embed.device
        check_capture(capture, model)
        self.capture = capture
        self.buckets = tuple(sorted(set(buckets))) if capture != "none" else ()
        self.post = post
        self.max_len, self.rows = max_len, rows
        self.capacity = max_len + max(self.buckets, default=1)  # room for a padded step at the end
        self.key_pos = torch.arange(self.capacity, device=device)  # [capacity]
        cos, sin = decoder.rotary_emb(self.embed[None, :1], self.key_pos[None])  # [1, capacity, d] each
        self.cos, self.sin = cos[0], sin[0]  # [capacity, d]
        shape = (rows, self.n_kv, self.capacity, self.d)
        self.k = [torch.zeros(shape, dtype=self.embed.dtype, device=device)
                  for _ in self.layers]  # L x [B, n_kv, cap, d]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.steps: dict[int, CapturedStep] = {}
        self.n = [0] * rows  # positions filled, per row
        self.key, self.owner = None, None  # set by acquire() for pooled decoders
        # eager steps attend over a window bucketed as a captured step's, on CUDA: cuDNN's attention builds a new
        # graph for every (query length, key length), which a window growing by one each step would make
        self.bucket_eager = device.type == "cuda"

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, rows: list[int] | None = None, lengths: list[int] | None = None,
                 last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [R, S] for the cache rows `rows` (default: all, in order) -> (post(h) [R, S or 1, V], h [R, S or
        1, h]): hidden states after the final norm and their logits. Row r takes lengths[r] tokens (default S):
        ids[r, :lengths[r]] at its next positions; the rest is padding, written past its end and never attended
        to. last_only: each row's last real position."""
        R, S = ids.shape
        rows = list(range(self.rows)) if rows is None else rows
        lengths = [S] * R if lengths is None else lengths
        n = [self.n[r] for r in rows]
        if max(a + b for a, b in zip(n, lengths, strict=True)) > self.max_len:
            raise ValueError(f"static KV cache of {self.max_len} positions is full ({max(n)} + {S})")
        device = self.embed.device
        pos = (to_device(n, device)[:, None] + torch.arange(S, device=device)).clamp_max(self.capacity - 1)
        P = next((b for b in self.buckets if b >= S), None)
        if P is None or rows != list(range(self.rows)):  # eager: attend over the filled positions only
            index = None if self.rows == R and rows == list(range(R)) else transfer.index(tuple(rows), device)
            if self.bucket_eager:  # a few window lengths, the positions past each row's own masked
                h = forward(self, ids, pos, index, window_bucket(max(n) + S, self.capacity), masked=True)
            else:  # a padded row's tail is clamped to the last position
                h = forward(self, ids, pos, index, min(max(n) + S, self.capacity), masked=S > 1 or R > 1)  # [R, S, h]
            logits = None
        else:  # every row, in the bucket's fixed shape, over the live length's window
            W = window_bucket(max(n) + P, self.capacity)
            step = self.steps.get((P, W)) or self.steps.setdefault((P, W), CapturedStep(self, P, W))
            logits, h = step(ids, pos)  # [B, P, V], [B, P, h]: static buffers, reused by the next call
            logits, h = logits[:, :S], h[:, :S]
        if last_only:
            at = transfer.index(tuple(k - 1 for k in lengths), device)[:, None, None]  # [R, 1, 1]
            h = h.gather(1, at.expand(R, 1, h.shape[-1]))  # [R, 1, h]
            logits = None if logits is None else logits.gather(1, at.expand(R, 1, logits.shape[-1]))
        if logits is None:
            logits = self.post(h.reshape(-1, h.shape[-1])).view(*h.shape[:2], -1) if self.post else h
        elif P is not None:
            logits, h = logits.clone(), h.clone()
        for r, k in zip(rows, lengths, strict=True):
            self.n[r] += k
        return logits, h

    def crop(self, row: int, n: int) -> None:
        """Keep row's first n positions (later writes overwrite the rolled-back ones)."""
        self.n[row] = min(self.n[row], n)

    def precapture(self, live: int) -> int:
        """Capture now every (bucket, window) step a sequence of up to `live` positions will run, so that none is
        captured inside a timed decode; returns how many were new. Run between sequences: the captures write
        keys and values at the first positions, which the next sequence overwrites before it reads them."""
        if not self.buckets:
            return 0
        new, device = 0, self.embed.device
        for P in self.buckets:
            top, W = window_bucket(min(live + P, self.capacity), self.capacity), WINDOW_MIN
            while True:
                W = min(W, self.capacity)
                if (P, W) not in self.steps:
                    self.steps[(P, W)] = CapturedStep(self, P, W)
                    zeros = torch.zeros(self.rows, P, dtype=torch.long, device=device)
                    self.steps[(P, W)](zeros, zeros)
                    new += 1
                if top <= W:
                    break
                W *= 2
        return new


def forward(dec: FastDecoder, ids: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor | None, window: int,
            masked: bool, layer: Callable | None = None) -> torch.Tensor:
    """ids [R, S] at positions pos [R, S] of cache rows `rows` [R] (None: every row) -> h [R, S, h] after the final
    norm. Writes the keys/values into the cache at pos and attends over cache positions [0, window), keys at or
    before each query's position when masked (else all of them). Only tensors change between calls, so a fixed
    shape and window can be captured. layer: decoder_layer, or its compiled form (one compilation serves every
    layer: they share shapes)."""
    layer = layer or decoder_layer
    x = F.embedding(ids, dec.embed)  # [R, S, h]
    cos, sin = dec.cos[pos][:, :, None], dec.sin[pos][:, :, None]  # [R, S, 1, d]
    R, S = ids.shape
    group = dec.n_q // dec.n_kv  # query heads per key/value head
    mask = None
    if masked:  # [R, 1, group S, window]: query row g S + t of head group g sees the keys at or before pos[r, t]
        mask = (dec.key_pos[:window] <= pos[:, :, None])[:, None].expand(R, group, S, window)
        mask = mask.reshape(R, 1, group * S, window)
    at = Where(rows, pos, cos, sin, mask, window)
    for w, k_cache, v_cache in zip(dec.layers, dec.k, dec.v, strict=True):
        x = layer(dec, w, k_cache, v_cache, x, at)
    return rms_norm(x, dec.norm, dec.eps)


class Where(NamedTuple):
    """Where a step's tokens sit, the same for every layer: cache rows `rows` [R] (None: every row), positions pos
    [R, S] with their rotary cos, sin [R, S, 1, d], the attention mask [R, 1, group S, window] (None: every key)
    over cache positions [0, window)."""

    rows: torch.Tensor | None
    pos: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor | None
    window: int


def decoder_layer(dec: FastDecoder, w: LayerWeights, k_cache: torch.Tensor, v_cache: torch.Tensor, x: torch.Tensor,
                  at: Where) -> torch.Tensor:
    """One pre-norm decoder layer: x [R, S, h] -> [R, S, h]; k_cache, v_cache [B, n_kv, capacity, d] get the new
    positions of rows at.rows (None: all B). Attention runs as n_kv heads over group * S query rows: query head
    j group + i attends with key/value head j, as transformers' repeat_kv, without expanding the cache."""
    R, S, _ = x.shape
    nq, nkv, d = dec.n_q, dec.n_kv, dec.d
    rows, pos, cos, sin, mask, window = at
    h = rms_norm(x, w.ln1, dec.eps)
    q, k, v = w.qkv(h).split([nq * d, nkv * d, nkv * d], dim=-1)  # [R, S, nq d], [R, S, nkv d] x 2
    q, k, v = q.view(R, S, nq, d), k.view(R, S, nkv, d), v.view(R, S, nkv, d)
    if w.q_norm is not None:
        q, k = rms_norm(q, w.q_norm, dec.eps), rms_norm(k, w.k_norm, dec.eps)
    q = (q * cos + rotate_half(q) * sin).transpose(1, 2)  # [R, nq, S, d]
    k = k * cos + rotate_half(k) * sin  # [R, S, nkv, d]
    index = (torch.arange(R, device=x.device) if rows is None else rows)[:, None]  # [R, 1]
    k_cache[index, :, pos] = k  # [R, S, nkv, d] into [B, nkv, cap, d]
    v_cache[index, :, pos] = v
    keys, values = k_cache[:, :, :window], v_cache[:, :, :window]  # [B, nkv, window, d]
    if rows is not None:
        keys, values = keys.index_select(0, rows), values.index_select(0, rows)  # [R, nkv, window, d]
    attn = F.scaled_dot_product_attention(q.reshape(R, nkv, nq // nkv * S, d), keys, values,
                                          attn_mask=mask)  # [R, nkv, group S, d]
    x = x + w.o(attn.reshape(R, nq, S, d).transpose(1, 2).reshape(R, S, nq * d))
    gate, up = w.gate_up(rms_norm(x, w.ln2, dec.eps)).chunk(2, dim=-1)  # [R, S, I] each
    return x + w.down(F.silu(gate) * up)


def acquire(model: nn.Module, max_len: int, owner: object, capture: str = "none", buckets: tuple[int, ...] = (),
            post: Callable[[torch.Tensor], torch.Tensor] | None = None, post_key: tuple = (),
            rows: int = 1) -> FastDecoder:
    """A decoder of `rows` empty cache rows for `owner` (a Stepper) while it lives. Captured decoders are pooled
    per model and reused across batches, so their graphs and compiled code are built once, not per prompt;
    post_key names what `post` computes (decoders are shared only between equal keys)."""
    if capture == "none":
        return FastDecoder(model, max_len, post=post, rows=rows)
    key = (capture, tuple(sorted(set(buckets))), post_key, rows)
    state = model_state(model)  # a fresh one, with an empty pool, when the weights changed
    free = [d for d in state.decoders if d.key == key and d.owner() is None]  # pooled decoders always have an owner
    dec = next((d for d in free if d.max_len >= max_len), None)
    if dec is None:
        state.decoders = [d for d in state.decoders if d not in free]  # a larger one replaces this key's free ones
        # capacities in powers of two (>= 256): room for varying prompts, few shapes to compile
        dec = FastDecoder(model, max(256, 1 << (max_len - 1).bit_length()), capture, buckets, post, rows)
        dec.key = key
        state.decoders.append(dec)
    dec.owner, dec.n = weakref.ref(owner), [0] * rows
    return dec


@functools.cache
def _compiled(fn: Callable) -> Callable:
    """torch.compile(fn), cached for the life of the process. Its guards are on shapes and dtypes, so the layers
    of a model, and decoders of the same shapes, share the compiled code; each (layer shape, step length, cache
    capacity) is one entry, hence the raised limit."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(fn, fullgraph=True, dynamic=False)


WINDOW_MIN = 256  # the shortest window a captured step attends over


def window_bucket(live: int, capacity: int) -> int:
    """The cache window a captured step over `live` positions attends over: the next power of two, at least
    WINDOW_MIN, at most the capacity."""
    return min(capacity, max(WINDOW_MIN, 1 << (live - 1).bit_length()))


def _step(dec: FastDecoder, ids: torch.Tensor, pos: torch.Tensor, window: int,
          layer: Callable) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed-shape step of every row: ids, pos [B, P] -> (logits [B, P, V], h [B, P, h]) over cache positions
    [0, window)."""
    h = forward(dec, ids, pos, None, window, masked=True, layer=layer)  # [B, P, h]
    return (dec.post(h.reshape(-1, h.shape[-1])).view(*h.shape[:2], -1) if dec.post else h), h


class CapturedStep:
    """The step of one bucket length P over cache window W on static input buffers: compiled and/or one CUDA
    graph.

    The graph is captured at the first call, on that call's own inputs: warm-up runs write the same keys
    and values the real step writes, so nothing in the cache is disturbed."""

    def __init__(self, dec: FastDecoder, P: int, W: int):
        self.dec, self.window = dec, W
        device = dec.embed.device
        self.ids = torch.zeros(dec.rows, P, dtype=torch.long, device=device)  # [B, P] (the tail past S: padding)
        self.pos = torch.zeros(dec.rows, P, dtype=torch.long, device=device)  # [B, P]
        self.layer = _compiled(decoder_layer) if dec.capture == "compile" else decoder_layer
        self.use_graph = device.type == "cuda"
        self.graph, self.out = None, None

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _step(self.dec, self.ids, self.pos, self.window, self.layer)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids, pos [B, S <= P]: the padding's positions continue each row's (clamped to the cache)."""
        S = ids.shape[1]
        self.ids[:, :S].copy_(ids)
        self.pos.copy_((pos[:, :1] + torch.arange(self.pos.shape[1], device=pos.device)).clamp_max(
            self.dec.capacity - 1))
        if not self.use_graph:
            return self.run()
        if self.graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (and compilation) outside the capture
                for _ in range(3):
                    self.run()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = self.run()
        self.graph.replay()
        return self.out
