"""The paper pairs' model classes on tiny random checkpoints: Llama 3 (llama3 RoPE scaling), Qwen3 (a chat template
with a thinking switch), Gemma 3 as the hub ids load it (Gemma3ForConditionalGeneration, with a sliding window that
every decode here crosses)."""

from __future__ import annotations

import pytest
import torch
from helpers import PAPER_KINDS, reference_speculative, thinking_tokenizer, tiny_paper_model

from diversed.bench import hf_generate
from diversed.decoding.engine import speculative_generate
from diversed.decoding.head import WeightHead, load_head
from diversed.decoding.models import (
    char_tokenizer,
    context_length,
    encode_prompt,
    hidden_size,
    load_model,
    load_pair,
    text_config,
    truncated_draft,
    vocab_size,
)
from diversed.decoding.settings import Decoding, Sampling

PROMPT = [1, 30, 31, 40, 50]  # + 40 new tokens: five times Gemma's window of 8


@pytest.fixture(scope="module")
def gemma():
    return tiny_paper_model("gemma3")


@pytest.fixture(scope="module")
def gemma_draft():
    return tiny_paper_model("gemma3", seed=1, hidden=32, layers=2)


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory, gemma, gemma_draft):
    """The tiny Gemma 3 pair saved with the character tokenizer, as load_pair reads a hub checkpoint."""
    root = tmp_path_factory.mktemp("gemma3")
    for name, model in (("target", gemma), ("draft", gemma_draft)):
        model.save_pretrained(root / name)
        char_tokenizer().save_pretrained(root / name)
    return root


@pytest.mark.parametrize("kind", PAPER_KINDS)
def test_text_config_of_every_paper_class(kind):
    model = tiny_paper_model(kind, hidden=32, layers=2, ctx=256)
    assert (hidden_size(model), context_length(model), vocab_size(model)) == (32, 256, 128)


@pytest.mark.parametrize("kind", PAPER_KINDS)
def test_strict_greedy_equals_target_greedy_past_the_sliding_window(kind):
    """Rejections roll both caches back, past Gemma's window too; the tokens stay the target's own greedy ones."""
    target = tiny_paper_model(kind)
    draft = truncated_draft(target, 1)
    ref = hf_generate(target, PROMPT, max_new_tokens=40)  # transformers' generate
    out = speculative_generate(target, draft, PROMPT, Decoding(verifier="strict", K=4, max_new_tokens=40,
                                                               sampling=Sampling(0)))
    assert out.tokens == ref
    assert 0 < sum(out.accepted) < sum(out.drafted)


def test_gemma3_kv_rollback_past_the_window_matches_cache_free_reference(gemma, gemma_draft):
    with torch.no_grad():
        ref = reference_speculative(gemma, gemma_draft, PROMPT, K=4, n_new=60, w=0.5, temperature=1.0, seed=3)
    out = speculative_generate(gemma, gemma_draft, PROMPT,
                               Decoding(verifier="fixed", weight=0.5, K=4, max_new_tokens=60,
                                        sampling=Sampling(1.0)), seed=3)
    assert out.tokens == ref
    assert 0 < sum(out.accepted) < sum(out.drafted)


def test_gemma3_head_and_dynamic_decoding(gemma, gemma_draft):
    head = WeightHead(64, 32).bind(gemma, gemma_draft)
    head.check_pair(gemma, gemma_draft)
    with torch.no_grad():
        head.proj.weight.normal_()  # w varies with the hidden states
    out = speculative_generate(gemma, gemma_draft, PROMPT,
                               Decoding(verifier="dynamic", K=3, max_new_tokens=30,
                                        sampling=Sampling(1.0)), trained=head, seed=0)
    assert len(out.tokens) == 30 and len({w for step in out.weights for w in step}) > 1


def test_gemma3_context_length_is_checked():
    target = tiny_paper_model("gemma3", hidden=32, layers=2, ctx=32)
    with pytest.raises(ValueError, match="exceeds the target's context length 32"):
        speculative_generate(target, None, PROMPT, Decoding(verifier="autoregressive", max_new_tokens=40,
                                                            sampling=Sampling(0)))


def test_gemma3_truncated_draft_keeps_the_vision_tower(gemma):
    draft = truncated_draft(gemma, 1)
    assert type(draft) is type(gemma)
    assert text_config(draft).num_hidden_layers == 1 and text_config(draft).layer_types == ["sliding_attention"]
    assert text_config(gemma).num_hidden_layers == 3  # the target's config is untouched
    assert len(draft.model.vision_tower.encoder.layers) == len(gemma.model.vision_tower.encoder.layers) == 2
    layer = "model.language_model.layers.0.mlp.up_proj.weight"
    assert torch.equal(draft.state_dict()[layer], gemma.state_dict()[layer])


def test_load_model_loads_the_class_the_checkpoint_declares(tmp_path, gemma):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    gemma.save_pretrained(tmp_path / "gemma")
    assert type(load_model(str(tmp_path / "gemma"))) is type(gemma)
    # a conditional-generation class AutoModelForCausalLM refuses
    text = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2)
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                              image_size=16, patch_size=8, projection_dim=16)
    LlavaForConditionalGeneration(LlavaConfig(text_config=text, vision_config=vision, image_token_index=127)
                                  ).save_pretrained(tmp_path / "llava")
    llava = load_model(str(tmp_path / "llava"))
    assert type(llava) is LlavaForConditionalGeneration and hidden_size(llava) == 32
    out = speculative_generate(llava, llava, PROMPT, Decoding(verifier="strict", K=3, max_new_tokens=12,
                                                              sampling=Sampling(0)))
    assert out.tokens == hf_generate(llava, PROMPT, max_new_tokens=12)


def test_gemma3_pair_trains_a_head_and_distils_from_checkpoints(gemma_dir, tmp_path):
    from diversed.training.finetune import distill_draft
    from diversed.training.settings import DistillConfig, HeadTrainConfig
    from diversed.training.train import load_log, train_head

    target, draft = str(gemma_dir / "target"), str(gemma_dir / "draft")
    pair = load_pair(target, draft)
    assert type(pair.target).__name__ == "Gemma3ForConditionalGeneration"
    cfg = HeadTrainConfig(task="arith", target=target, draft=draft, n_train=2, epochs=1, batch_size=2,
                          max_new_tokens=8, rollout="sample", reward="fidelity")
    head = load_head(train_head(cfg, tmp_path / "head", pair=pair, progress=False), pair.target, pair.draft)
    out = speculative_generate(pair.target, pair.draft, PROMPT, Decoding(verifier="dynamic", K=3, max_new_tokens=8,
                                                                         sampling=Sampling(0)), trained=head)
    assert len(out.tokens) == 8
    ft = distill_draft(DistillConfig(task="arith", target=target, draft=draft, n_train=2, max_new_tokens=8,
                                     epochs=1), tmp_path / "ft", progress=False)
    assert len(load_log(ft / "train_log.csv")) == 2
    assert type(load_pair(target, str(ft)).draft).__name__ == "Gemma3ForConditionalGeneration"


def test_qwen3_prompt_has_thinking_off():
    """Qwen3's template opens the reply with an empty think block when enable_thinking is false; without it the
    model writes its reasoning first. Templates without the switch are unchanged."""
    thinking = thinking_tokenizer()
    assert thinking.decode(encode_prompt(thinking, "2+2?")) == "<|user|>2+2?\n<|assistant|><think>\n\n</think>\n\n"
    plain = char_tokenizer()
    assert plain.decode(encode_prompt(plain, "2+2?")) == "<s>2+2?\n>"
