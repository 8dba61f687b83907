"""Model loading: truncated drafts, vocabulary checks, chat templates, local checkpoints, the embedded pair."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

from diversed.decoding import models


def test_truncated_draft_shares_weights_and_first_layers(target):
    d = models.truncated_draft(target, 1)
    assert d.config.num_hidden_layers == 1
    assert torch.equal(d.model.embed_tokens.weight, target.model.embed_tokens.weight)
    assert torch.equal(d.lm_head.weight, target.lm_head.weight)
    assert torch.equal(d.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(ValueError, match="draft layers must be in \\[1, 2\\], got 3"):
        models.truncated_draft(target, 3)


class FakeTokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    def get_vocab(self):
        return self.vocab


def test_check_vocab():
    a, b = tiny_llama(0, vocab=96), tiny_llama(1, vocab=80)
    same = FakeTokenizer({f"t{i}": i for i in range(70)})
    assert models.check_vocab(a, a) is None
    assert models.check_vocab(a, b, same, same) == 96  # identical tokenizers: pad to the wider head
    with pytest.raises(ValueError, match="target has 96 logits, draft has 80"):
        models.check_vocab(a, b)
    with pytest.raises(ValueError, match="target has 96 logits, draft has 80"):
        models.check_vocab(a, b, same, FakeTokenizer({"x": 0}))
    with pytest.raises(ValueError, match="tokenizers differ"):
        models.check_vocab(a, a, same, FakeTokenizer({"x": 0}))


def test_load_local_checkpoint_and_unknown_model(tmp_path, target):
    target.save_pretrained(tmp_path / "m")
    m = models.load_model(str(tmp_path / "m"), dtype="float64")
    assert m.dtype == torch.float64 and not m.training
    with pytest.raises(ValueError, match="cannot load target model 'no-such-org/no-such-model'"):
        models.load_model("no-such-org/no-such-model")
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        models.load_model(str(tmp_path / "m"), dtype="float8")


def test_embedded_pair_missing_points_to_prepare_models(tmp_path, monkeypatch):
    monkeypatch.setenv("DIVERSED_RESOURCES", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="diversed prepare-models"):
        models.load_model("embedded")


def test_encode_prompt_uses_chat_template_and_refuses_empty():
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, **kw):
            assert messages == [{"role": "user", "content": "hi"}] and kw["add_generation_prompt"]
            assert kw["enable_thinking"] is False  # Qwen3 answers without a <think> block
            return [1, 2, 3]

    assert models.encode_prompt(Tok(), "hi") == [1, 2, 3]
    with pytest.raises(ValueError, match="empty prompt"):
        models.encode_prompt(Tok(), "   ")
