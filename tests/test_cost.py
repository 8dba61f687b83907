"""Computed GPU memory of the paper's jobs: every pair has an estimate, Gemma's distillation fits one 80 GB GPU,
and the architectures the estimate reads reproduce the models' published parameter counts."""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import ROOT

from diversed.cost import GB, JOBS, MODELS, estimate, table, total

PAIRS = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())["pairs"]


def test_every_paper_pair_has_an_estimate_for_every_job():
    assert set(PAIRS) == {"llama", "qwen", "gemma"}
    for p in PAIRS.values():
        sizes = [total(estimate(p["target"], p["draft"], job, dtype=p["dtype"])) / GB for job in JOBS]
        assert all(10 < s < 80 for s in sizes), sizes
    text = table(PAIRS)
    assert len(text.splitlines()) == 2 + 3 and "| gemma | google/gemma-3-12b-it / google/gemma-3-4b-it |" in text


def test_gemma_distillation_fits_one_80_gb_gpu():
    """Regression: a float32 student with float32 AdamW beside the bfloat16 12B target (and a second, unused draft
    copy) needed ~100 GB; the bfloat16 student with AdamW16 needs under 60."""
    gemma = PAIRS["gemma"]
    lean = estimate(gemma["target"], gemma["draft"], "distill", dtype="bfloat16")
    assert total(lean) < 60 * GB
    float32_student = estimate(gemma["target"], gemma["draft"], "distill", dtype="float16")  # trains in float32
    assert total(float32_student) + MODELS[gemma["draft"]].params * 2 > 95 * GB  # + the second copy: ~100 GB
    assert lean["optimizer"] == 2 * lean["gradients"]  # two bfloat16 moments, no float32 copy


def test_unknown_model_or_job_is_refused():
    with pytest.raises(ValueError, match="no memory estimate for 'org/other'; known models: meta-llama"):
        estimate("org/other", "Qwen/Qwen3-0.6B", "decode")
    with pytest.raises(ValueError, match="unknown job 'serve'"):
        estimate("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "serve")


# the rest of each public config.json: tied embeddings; Gemma 3's SigLIP vision tower (so400m, 896 px, patch 14)
TIED = {"meta-llama/Llama-3.1-8B-Instruct": False, "meta-llama/Llama-3.2-1B-Instruct": True,
        "Qwen/Qwen3-8B": False, "Qwen/Qwen3-0.6B": True, "google/gemma-3-12b-it": True, "google/gemma-3-4b-it": True}
SIGLIP = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
          "image_size": 896, "patch_size": 14}


@pytest.mark.parametrize("name", list(MODELS))
def test_architecture_reproduces_the_published_parameter_count(name):
    from transformers import (
        AutoModelForCausalLM,
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        LlamaConfig,
        Qwen3Config,
        SiglipVisionConfig,
    )

    a = MODELS[name]
    shape = {"vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.intermediate,
             "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
             "head_dim": a.head_dim, "tie_word_embeddings": TIED[name]}
    with torch.device("meta"):
        if name.startswith("google/"):
            model = Gemma3ForConditionalGeneration(Gemma3Config(text_config=Gemma3TextConfig(**shape),
                                                                vision_config=SiglipVisionConfig(**SIGLIP)))
        else:
            model = AutoModelForCausalLM.from_config((LlamaConfig if "llama" in name else Qwen3Config)(**shape))
    counts = {"all": 0, "vision": 0}
    for key, p in model.named_parameters():
        counts["all"] += p.numel()
        counts["vision"] += p.numel() if "vision" in key or "multi_modal" in key else 0
    assert counts["all"] == pytest.approx(a.params, rel=0.01)
    assert counts["vision"] == pytest.approx(a.vision, rel=0.02)


def test_forward_times_and_gpu_hours_follow_the_stated_model():
    from diversed.cost import TAU, disk_gb, forward_ms, gpu_hours

    # the per-token times the SLURM profile's time limits assume
    assert [round(forward_ms(MODELS[m])) for m in ("google/gemma-3-12b-it", "google/gemma-3-4b-it",
                                                   "meta-llama/Llama-3.1-8B-Instruct")] == [28, 14, 19]
    pair = PAIRS["qwen"]
    config = {"pairs": {"qwen": pair}, "methods": ["autoregressive", "strict", "fixed"], "temperatures": [1.0],
              "K": [5], "seeds": [0, 1], "transfer": [{"head": "a", "eval": "b"}],
              "tasks": {"a": {"n_eval": 10, "n_dev": 4, "n_train": 6, "max_new_tokens": 20},
                        "b": {"n_eval": 5, "n_dev": 4, "n_train": 6, "max_new_tokens": 20}},
              "sweep": {"weights": [0.5, 1.0], "mixings": ["linear", "logit"], "figure_K": [3], "figure_tasks": ["a"]},
              "train_head": {"epochs": 2, "max_new_tokens": 8}, "distill": {"max_new_tokens": 8}}
    t, d = forward_ms(MODELS[pair["target"]]), forward_ms(MODELS[pair["draft"]])
    spec5, spec3 = (5 * d + t) / TAU, (3 * d + t) / TAU
    h = {rule: v * 3.6e6 for rule, v in gpu_hours(config, "qwen").items()}  # ms
    assert h["decode"] == pytest.approx(2 * (10 + 5) * 20 * (t + 2 * spec5) + 2 * 5 * 20 * spec5)
    # 3 points (strict, 0.5 linear, 0.5 logit): a and b at (T = 1, K = 5), and a at the figure's K = 3
    assert h["sweep"] == pytest.approx(3 * 4 * 20 * (2 * spec5 + spec3))
    assert h["train_head"] == pytest.approx(2 * 6 * 2 * 8 * (t + d))
    assert h["distill_draft"] == pytest.approx(2 * 6 * 8 * t)
    assert disk_gb(config, "qwen") == pytest.approx((MODELS[pair["target"]].params + MODELS[pair["draft"]].params) * 2
                                                    / GB)  # no finetuned method: no fine-tuned drafts
