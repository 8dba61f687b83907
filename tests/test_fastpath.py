"""The static-cache CPU fast path equals transformers' own forward (Llama and Qwen3 shapes)."""

from __future__ import annotations

import pytest
import torch

from diversed import fastpath
from diversed.engine import Stepper, speculative_generate
from diversed.models import truncated_draft


def tiny(model_type: str, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).float().eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = None
    return model


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_fast_steps_match_the_full_forward(model_type):
    model = tiny(model_type)
    assert fastpath.supported(model)
    seq = torch.randint(3, 96, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]  # [40, V]
    s = Stepper(model, max_len=64)
    assert s.fast is not None
    got = [s(seq[:10])[0]]  # prefill
    got += [s([t])[0] for t in seq[10:15]]  # single steps
    s(seq[15:20])  # a verification block that is then rolled back
    s.crop(15)
    got.append(s(seq[15:20])[0])
    got.append(s(seq[20:40])[0])
    assert torch.allclose(torch.cat(got), ref, atol=1e-4, rtol=1e-4)


def test_fast_path_engine_is_target_greedy_and_can_be_turned_off(monkeypatch):
    from diversed.bench import hf_generate

    target = tiny("llama")
    draft = truncated_draft(target, 1)
    for ids in ([1, 5, 7, 9], [1, 30, 31]):
        ref = hf_generate(target, ids, max_new_tokens=60)
        out = speculative_generate(target, draft, ids, verifier="strict", K=4, max_new_tokens=60, temperature=0)
        assert out.tokens == ref
    monkeypatch.setenv("DIVERSED_FASTPATH", "0")
    assert not fastpath.supported(target) and Stepper(target, max_len=64).fast is None


def test_static_cache_overflow_is_an_error():
    s = Stepper(tiny("llama"), max_len=8)
    s(list(range(1, 8)))
    with pytest.raises(ValueError, match="static KV cache of 8 positions is full"):
        s([1, 2])


def test_fast_path_rollback_matches_cache_free_reference():
    from test_engine import reference_speculative

    target, draft = tiny("llama"), tiny("llama", seed=1)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    with torch.no_grad():
        ref = reference_speculative(target, draft, [1, 30, 31], K=4, n_new=150, w=0.5, temperature=1.0, generator=g1)
    out = speculative_generate(target, draft, [1, 30, 31], verifier="fixed", weight=0.5, K=4, max_new_tokens=150,
                               temperature=1.0, generator=g2)
    assert out.tokens == ref and 0 < sum(out.accepted) < sum(out.drafted)


def test_fast_path_off_cpu_float32_uses_the_weights_as_they_are():
    """bfloat16 (as on a GPU): no fused copies, the model's own weights; same logits as transformers'
    bfloat16 forward within bfloat16 rounding."""
    model = tiny("qwen3").to(torch.bfloat16)
    s = Stepper(model, max_len=64)
    assert s.fast is not None and s.fast.layers[0].qkv.fused_t is None
    assert s.fast.layers[0].qkv.parts[0].data_ptr() == model.model.layers[0].self_attn.q_proj.weight.data_ptr()
    seq = torch.randint(3, 96, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0].float()  # [30, V]
    got = torch.cat([s(seq[:10])[0]] + [s([t])[0] for t in seq[10:30]])
    scale = ref.abs().max()
    assert (got - ref).abs().max() / scale < 0.05
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_one_host_sync_per_speculative_step(monkeypatch):
    """Everything in a step stays on the device but one transfer (what a GPU needs not to stall): count every
    way a tensor reaches the host while decoding."""
    from diversed import engine

    target, draft = tiny("llama"), tiny("llama", seed=1)
    syncs = []
    for name in ("tolist", "item", "__bool__", "__int__", "__float__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, _name=name, **k):
            syncs.append(_name)
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    from diversed.head import WeightHead

    head = WeightHead(64, 64).bind(target, draft)
    cases = (("strict", {}), ("fixed", {"weight": 0.5}), ("fixed", {"weight": 0.5, "mixing": "logit"}),
             ("dynamic", {"head": head}))
    for verifier, kw in cases:
        syncs.clear()
        out = engine.speculative_generate(target, draft, [1, 5, 7], verifier=verifier, K=4, max_new_tokens=40,
                                          temperature=1.0, generator=torch.Generator().manual_seed(0), **kw)
        assert syncs == ["tolist"] * out.steps, (verifier, kw, syncs[:10])
