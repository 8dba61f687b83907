"""A lean decoder step for Llama-family models (Llama, Qwen3), in the spirit of gpt-fast: a static,
preallocated KV cache on the model's device (rollback = moving one integer) and no per-call wrappers.
On CPU in float32 the QKV and gate/up projections are fused against transposed copies (GEMV-friendly);
elsewhere (GPU, bf16) the model's own weights are used as they are, so nothing is copied.

Same math as transformers' modules (RMSNorm in float32, the model's own rotary embedding, SDPA);
only the order of floating-point sums differs. The engine uses it for Llama/Qwen3 and falls back to
the transformers modules for other architectures (`DIVERSED_FASTPATH=0` turns it off).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

SUPPORTED = ("llama", "qwen3")
_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def supported(model: nn.Module) -> bool:
    if os.environ.get("DIVERSED_FASTPATH", "1") == "0":
        return False
    cfg = model.config
    return (cfg.model_type in SUPPORTED and not getattr(cfg, "attention_bias", False)
            and not getattr(cfg, "mlp_bias", False) and getattr(cfg, "hidden_act", "silu") == "silu"
            and getattr(cfg, "sliding_window", None) is None)


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


def layer_weights(model: nn.Module) -> list[LayerWeights]:
    """The decoder weights as projections, built once per model (and rebuilt if they change)."""
    layers = model.get_decoder().layers
    key = tuple((p.data_ptr(), p._version) for p in layers[0].parameters())
    cached = _WEIGHTS.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    out = []
    for layer in layers:
        a, m = layer.self_attn, layer.mlp
        qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
        out.append(LayerWeights(
            ln1=layer.input_layernorm.weight.detach(), qkv=Proj(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight),
            q_norm=None if qn is None else qn.weight.detach(), k_norm=None if kn is None else kn.weight.detach(),
            o=Proj(a.o_proj.weight), ln2=layer.post_attention_layernorm.weight.detach(),
            gate_up=Proj(m.gate_proj.weight, m.up_proj.weight), down=Proj(m.down_proj.weight)))
    _WEIGHTS[model] = (key, out)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers' LlamaRMSNorm: normalise in float32, then scale."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class FastDecoder:
    """The decoder of one model with a static KV cache of `max_len` positions."""

    def __init__(self, model: nn.Module, max_len: int):
        cfg = model.config
        self.decoder = model.get_decoder()
        self.layers = layer_weights(model)
        self.n_q, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_q
        self.eps = cfg.rms_norm_eps
        ln = self.layers[0].ln1
        self.k = torch.zeros(len(self.layers), self.n_kv, max_len, self.d, dtype=ln.dtype,
                             device=ln.device)  # [L, n_kv, max_len, d]
        self.v = torch.zeros_like(self.k)
        self.max_len = max_len
        self.n = 0  # positions filled

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] -> last hidden states [T, h] (after the final norm); appends T positions to the cache."""
        T, n = ids.shape[0], self.n
        if n + T > self.max_len:
            raise ValueError(f"static KV cache of {self.max_len} positions is full ({n} + {T})")
        x = self.decoder.embed_tokens(ids)  # [T, h]
        pos = torch.arange(n, n + T, device=ids.device)
        cos, sin = self.decoder.rotary_emb(x[None], pos[None])  # [1, T, d] each
        cos, sin = cos[0], sin[0]  # [T, d]
        mask = None if T == 1 else torch.ones(T, n + T, dtype=torch.bool, device=ids.device).tril(n)  # [T, n + T]
        nq, nkv, d = self.n_q, self.n_kv, self.d
        for i, w in enumerate(self.layers):
            h = rms_norm(x, w.ln1, self.eps)
            qkv = w.qkv(h)  # [T, (nq + 2 nkv) d]
            q, k, v = qkv.split([nq * d, nkv * d, nkv * d], dim=-1)
            q, k, v = q.view(T, nq, d), k.view(T, nkv, d), v.view(T, nkv, d)
            if w.q_norm is not None:
                q, k = rms_norm(q, w.q_norm, self.eps), rms_norm(k, w.k_norm, self.eps)
            q = (q * cos[:, None] + rotate_half(q) * sin[:, None]).transpose(0, 1)  # [nq, T, d]
            k = (k * cos[:, None] + rotate_half(k) * sin[:, None]).transpose(0, 1)  # [nkv, T, d]
            self.k[i, :, n:n + T] = k
            self.v[i, :, n:n + T] = v.transpose(0, 1)
            attn = F.scaled_dot_product_attention(q, self.k[i, :, :n + T], self.v[i, :, :n + T], attn_mask=mask,
                                                  enable_gqa=nq != nkv)  # [nq, T, d]
            x = x + w.o(attn.transpose(0, 1).reshape(T, nq * d))
            g, u = w.gate_up(rms_norm(x, w.ln2, self.eps)).chunk(2, dim=-1)  # [T, I] each
            x = x + w.down(F.silu(g) * u)
        self.n = n + T
        return rms_norm(x, self.decoder.norm.weight, self.eps)

    def crop(self, n: int) -> None:
        self.n = min(self.n, n)  # later writes overwrite the rolled-back positions
