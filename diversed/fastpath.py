"""A lean decoder step for Llama-family models (Llama, Qwen3) on CPU, in the spirit of gpt-fast:
a static, preallocated KV cache (rollback = moving one integer), fused QKV and gate/up projections
against transposed weights (GEMV-friendly on CPU), and no per-call wrappers.

Same math as transformers' modules (RMSNorm in float32, the model's own rotary embedding, SDPA);
only the order of floating-point sums differs. The engine uses it for float32 Llama/Qwen3 on CPU and
falls back to the transformers modules everywhere else (`DIVERSED_FASTPATH=0` turns it off).
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
    w = model.get_output_embeddings().weight
    return (cfg.model_type in SUPPORTED and w.device.type == "cpu" and w.dtype == torch.float32
            and not getattr(cfg, "attention_bias", False) and not getattr(cfg, "mlp_bias", False)
            and getattr(cfg, "hidden_act", "silu") == "silu" and getattr(cfg, "sliding_window", None) is None)


@dataclass
class LayerWeights:
    ln1: torch.Tensor  # [h]
    qkv_t: torch.Tensor  # [h, (n_q + 2 n_kv) d]
    q_norm: torch.Tensor | None  # [d] (Qwen3)
    k_norm: torch.Tensor | None
    o_t: torch.Tensor  # [n_q d, h]
    ln2: torch.Tensor
    gate_up_t: torch.Tensor  # [h, 2 I]
    down_t: torch.Tensor  # [I, h]


def layer_weights(model: nn.Module) -> list[LayerWeights]:
    """Fused, transposed copies of the decoder weights, built once per model (and rebuilt if they change)."""
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
            ln1=layer.input_layernorm.weight.detach(),
            qkv_t=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach().T.contiguous(),
            q_norm=None if qn is None else qn.weight.detach(), k_norm=None if kn is None else kn.weight.detach(),
            o_t=a.o_proj.weight.detach().T.contiguous(), ln2=layer.post_attention_layernorm.weight.detach(),
            gate_up_t=torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach().T.contiguous(),
            down_t=m.down_proj.weight.detach().T.contiguous()))
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
        dtype = self.layers[0].qkv_t.dtype
        self.k = torch.zeros(len(self.layers), self.n_kv, max_len, self.d, dtype=dtype)  # [L, n_kv, max_len, d]
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
        pos = torch.arange(n, n + T)
        cos, sin = self.decoder.rotary_emb(x[None], pos[None])  # [1, T, d] each
        cos, sin = cos[0], sin[0]  # [T, d]
        mask = None if T == 1 else torch.ones(T, n + T, dtype=torch.bool).tril(n)  # [T, n + T]
        nq, nkv, d = self.n_q, self.n_kv, self.d
        for i, w in enumerate(self.layers):
            h = rms_norm(x, w.ln1, self.eps)
            qkv = h @ w.qkv_t  # [T, (nq + 2 nkv) d]
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
            x = x + attn.transpose(0, 1).reshape(T, nq * d) @ w.o_t
            g, u = (rms_norm(x, w.ln2, self.eps) @ w.gate_up_t).chunk(2, dim=-1)  # [T, I] each
            x = x + (F.silu(g) * u) @ w.down_t
        self.n = n + T
        return rms_norm(x, self.decoder.norm.weight, self.eps)

    def crop(self, n: int) -> None:
        self.n = min(self.n, n)  # later writes overwrite the rolled-back positions
