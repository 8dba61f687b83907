"""A lean decoder step for Llama-family models (Llama, Qwen3), in the spirit of gpt-fast: a static,
preallocated KV cache on the model's device (rollback = moving one integer) and no per-call wrappers.
On CPU in float32 the QKV and gate/up projections are fused against transposed copies (GEMV-friendly);
elsewhere (GPU, bf16) the model's own weights are used as they are, so nothing is copied.

Same math as transformers' modules (RMSNorm in float32, the model's rotary embedding tabulated once,
SDPA); only the order of floating-point sums differs. The engine uses it for Llama/Qwen3 and falls
back to the transformers modules for other architectures, or when its Execution turns it off.

Capture (`capture=`): the fixed-shape steps (the draft's 1-token step, the target's K + 1-token
verification) can run as one CUDA graph each ("graph"), or compiled by torch.compile and, on a GPU,
graphed ("compile"). A captured step is padded to its bucket length and attends over the whole cache
under a mask by position, so its shapes never change; prefill and other lengths run eagerly.

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

import torch
from torch import nn
from torch.nn import functional as F

SUPPORTED = ("llama", "qwen3")
CAPTURES = ("none", "graph", "compile")


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
    """x [T, in] -> x @ [W_1; W_2; ...]^T [T, sum out]: one GEMM against a fused transposed copy on CPU in
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
        why = f"the {role} is {model.config.model_type!r}" if enabled else "it is off (DIVERSED_FASTPATH=0)"
        raise ValueError(f"capture {capture!r} needs the static-cache fast path (Llama / Qwen3); {why}: "
                         "use capture 'none'")


class FastDecoder:
    """The decoder of one model with a static KV cache of `max_len` positions.

    capture: "none", "graph" or "compile" (see the module docstring); buckets: the step lengths to
    capture (a step of T tokens runs in the smallest bucket >= T); post: h [T, h] -> logits [T, V],
    the output head, captured with the step.
    """

    def __init__(self, model: nn.Module, max_len: int, capture: str = "none", buckets: tuple[int, ...] = (),
                 post: Callable[[torch.Tensor], torch.Tensor] | None = None):
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
        self.max_len = max_len
        self.capacity = max_len + max(self.buckets, default=0)  # room for a padded step at the end
        self.key_pos = torch.arange(self.capacity, device=device)  # [capacity]
        cos, sin = decoder.rotary_emb(self.embed[None, :1], self.key_pos[None])  # [1, capacity, d] each
        self.cos, self.sin = cos[0], sin[0]  # [capacity, d]
        shape = (self.n_kv, self.capacity, self.d)
        self.k = [torch.zeros(shape, dtype=self.embed.dtype, device=device) for _ in self.layers]  # L x [n_kv, cap, d]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.steps: dict[int, CapturedStep] = {}
        self.n = 0  # positions filled
        self.key, self.owner = None, None  # set by acquire() for pooled decoders

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [T] -> (post(h) [T or 1, V], h [T or 1, h]): the last hidden states after the final norm and
        their logits; appends T positions to the cache."""
        T, n = ids.shape[0], self.n
        if n + T > self.max_len:
            raise ValueError(f"static KV cache of {self.max_len} positions is full ({n} + {T})")
        P = next((b for b in self.buckets if b >= T), None)
        if P is None:  # eager: attend over the filled positions only
            h = forward(self, ids, self.key_pos[n:n + T], n + T, masked=T > 1)
            h = h[-1:] if last_only else h
            logits = self.post(h) if self.post else h
        else:
            step = self.steps.get(P) or self.steps.setdefault(P, CapturedStep(self, P))
            logits, h = step(ids, self.key_pos[n:n + P])  # [P, V], [P, h]: static buffers, reused by the next call
            rows = slice(T - 1, T) if last_only else slice(0, T)
            logits, h = logits[rows].clone(), h[rows].clone()
        self.n = n + T
        return logits, h

    def crop(self, n: int) -> None:
        self.n = min(self.n, n)  # later writes overwrite the rolled-back positions


def forward(dec: FastDecoder, ids: torch.Tensor, pos: torch.Tensor, window: int, masked: bool,
            layer: Callable | None = None) -> torch.Tensor:
    """ids [T] at positions pos [T] -> h [T, h] after the final norm. Writes the T keys/values into the cache
    at pos and attends over cache positions [0, window), keys at or before each query's position when masked
    (else all of them). Only tensors change between calls, so a fixed T and window can be captured.
    layer: decoder_layer, or its compiled form (one compilation serves every layer: they share shapes)."""
    layer = layer or decoder_layer
    x = F.embedding(ids, dec.embed)  # [T, h]
    cos, sin = dec.cos[pos][:, None], dec.sin[pos][:, None]  # [T, 1, d]
    group = dec.n_q // dec.n_kv  # query heads per key/value head
    mask = (dec.key_pos[None, :window] <= pos[:, None]).repeat(group, 1) if masked else None  # [group T, window]
    for w, k_cache, v_cache in zip(dec.layers, dec.k, dec.v, strict=True):
        x = layer(dec, w, k_cache, v_cache, x, pos, cos, sin, mask, window)
    return rms_norm(x, dec.norm, dec.eps)


def decoder_layer(dec: FastDecoder, w: LayerWeights, k_cache: torch.Tensor, v_cache: torch.Tensor, x: torch.Tensor,
                  pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                  window: int) -> torch.Tensor:
    """One pre-norm decoder layer: x [T, h] -> [T, h]; k_cache, v_cache [n_kv, capacity, d] get the T new
    positions. Attention runs as n_kv heads over group * T query rows: query head j group + i attends with
    key/value head j, as transformers' repeat_kv, without expanding the cache."""
    T = x.shape[0]
    nq, nkv, d = dec.n_q, dec.n_kv, dec.d
    h = rms_norm(x, w.ln1, dec.eps)
    q, k, v = w.qkv(h).split([nq * d, nkv * d, nkv * d], dim=-1)  # [T, nq d], [T, nkv d] x 2
    q, k, v = q.view(T, nq, d), k.view(T, nkv, d), v.view(T, nkv, d)
    if w.q_norm is not None:
        q, k = rms_norm(q, w.q_norm, dec.eps), rms_norm(k, w.k_norm, dec.eps)
    q = (q * cos + rotate_half(q) * sin).transpose(0, 1)  # [nq, T, d]
    k = (k * cos + rotate_half(k) * sin).transpose(0, 1)  # [nkv, T, d]
    k_cache.index_copy_(1, pos, k)
    v_cache.index_copy_(1, pos, v.transpose(0, 1))
    attn = F.scaled_dot_product_attention(q.reshape(nkv, nq // nkv * T, d), k_cache[:, :window],
                                          v_cache[:, :window], attn_mask=mask)  # [nkv, group T, d]
    x = x + w.o(attn.view(nq, T, d).transpose(0, 1).reshape(T, nq * d))
    gate, up = w.gate_up(rms_norm(x, w.ln2, dec.eps)).chunk(2, dim=-1)  # [T, I] each
    return x + w.down(F.silu(gate) * up)


def acquire(model: nn.Module, max_len: int, owner: object, capture: str = "none", buckets: tuple[int, ...] = (),
            post: Callable[[torch.Tensor], torch.Tensor] | None = None, post_key: tuple = ()) -> FastDecoder:
    """A decoder with an empty cache for `owner` (a Stepper) while it lives. Captured decoders are pooled per
    model and reused across sequences, so their graphs and compiled code are built once, not per prompt;
    post_key names what `post` computes (decoders are shared only between equal keys)."""
    if capture == "none":
        return FastDecoder(model, max_len, post=post)
    key = (capture, tuple(sorted(set(buckets))), post_key)
    state = model_state(model)  # a fresh one, with an empty pool, when the weights changed
    free = [d for d in state.decoders if d.key == key and d.owner() is None]  # pooled decoders always have an owner
    dec = next((d for d in free if d.max_len >= max_len), None)
    if dec is None:
        state.decoders = [d for d in state.decoders if d not in free]  # a larger one replaces this key's free ones
        # capacities in powers of two (>= 256): room for varying prompts, few shapes to compile
        dec = FastDecoder(model, max(256, 1 << (max_len - 1).bit_length()), capture, buckets, post)
        dec.key = key
        state.decoders.append(dec)
    dec.owner, dec.n = weakref.ref(owner), 0
    return dec


@functools.cache
def _compiled(fn: Callable) -> Callable:
    """torch.compile(fn), cached for the life of the process. Its guards are on shapes and dtypes, so the layers
    of a model, and decoders of the same shapes, share the compiled code; each (layer shape, step length, cache
    capacity) is one entry, hence the raised limit."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(fn, fullgraph=True, dynamic=False)


def _step(dec: FastDecoder, ids: torch.Tensor, pos: torch.Tensor, layer: Callable) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed-shape step: ids, pos [P] -> (logits [P, V], h [P, h]) over the whole cache."""
    h = forward(dec, ids, pos, dec.capacity, masked=True, layer=layer)
    return (dec.post(h) if dec.post else h), h


class CapturedStep:
    """The step of one bucket length P on static input buffers: compiled and/or one CUDA graph.

    The graph is captured at the first call, on that call's own inputs: warm-up runs write the same keys
    and values the real step writes, so nothing in the cache is disturbed."""

    def __init__(self, dec: FastDecoder, P: int):
        self.dec = dec
        device = dec.embed.device
        self.ids = torch.zeros(P, dtype=torch.long, device=device)  # [P] (the tail past T stays padding)
        self.pos = torch.zeros(P, dtype=torch.long, device=device)  # [P]
        self.layer = _compiled(decoder_layer) if dec.capture == "compile" else decoder_layer
        self.use_graph = device.type == "cuda"
        self.graph, self.out = None, None

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _step(self.dec, self.ids, self.pos, self.layer)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.ids[:ids.shape[0]].copy_(ids)
        self.pos.copy_(pos)
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
