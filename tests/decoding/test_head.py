"""The weight head: initial w, save/load round trip, refusal of another pair, corrupt files."""

from __future__ import annotations

import pytest
import torch

from diversed.decoding.head import WeightHead, load_head


def test_initial_weight_is_one_half_and_parameter_count():
    head = WeightHead(576, 576)
    w = head(torch.randn(5, 576), torch.randn(5, 576))
    assert torch.allclose(w, torch.full((5,), 0.5))
    assert sum(p.numel() for p in head.parameters()) == 2 * (576 + 576) + 2


def test_save_load_round_trip_and_pair_check(tmp_path, target, draft, other_draft):
    head = WeightHead(target.config.hidden_size, draft.config.hidden_size).bind(target, draft)
    torch.nn.init.normal_(head.proj.weight)
    path = tmp_path / "head.safetensors"
    head.save(path, task="arith")
    assert path.stat().st_size < 16_000
    loaded = load_head(path, target, draft)
    h_t, h_d = torch.randn(3, 32), torch.randn(3, 32)
    assert torch.allclose(loaded(h_t, h_d), head(h_t, h_d))
    assert loaded.meta == {"task": "arith"}
    with pytest.raises(ValueError, match="trained for another draft model"):
        load_head(path, target, other_draft)
    with pytest.raises(ValueError, match="trained for another target model"):
        load_head(path, other_draft, draft)


def test_fingerprint_ignores_dtype_but_not_weights(target, draft):
    import copy

    head = WeightHead(32, 32).bind(target, draft)
    head.check_pair(copy.deepcopy(target).float(), copy.deepcopy(draft).bfloat16())  # same weights, other dtype
    changed = copy.deepcopy(draft)
    with torch.no_grad():
        w = changed.model.layers[0].mlp.down_proj.weight
        w.add_(1e-2 * torch.randn_like(w))  # as fine-tuning does
    with pytest.raises(ValueError, match="another draft model"):
        head.check_pair(target, changed)


def test_hidden_size_mismatch_and_corrupt_file(tmp_path, target, draft):
    head = WeightHead(64, 32)
    with pytest.raises(ValueError, match="expects hidden sizes \\(target 64, draft 32\\)"):
        head.check_pair(target, draft)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_head(bad)
    with pytest.raises(FileNotFoundError):
        load_head(tmp_path / "missing.safetensors")
