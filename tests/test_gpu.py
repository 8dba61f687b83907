"""Checks that need a CUDA device (skipped without one; benchmarks/gpu_first.sh runs them first on a GPU machine):
the CUDA-graph and compiled steps emit the eager engine's tokens, decoding is deterministic from a seed, and
the fast path in bfloat16 matches transformers' own forward."""

from __future__ import annotations

import pytest
import torch

from diversed.decoding import fastpath
from diversed.decoding.engine import speculative_generate
from diversed.decoding.models import truncated_draft
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.stepper import Stepper

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def tiny_cuda(dtype=torch.float32, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to("cuda", dtype).eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = None
    return model


@pytest.mark.parametrize("capture", ["graph", "compile"])
@pytest.mark.parametrize("verifier,kw", [("strict", {"sampling": Sampling(0)}),
                                         ("fixed", {"weight": 0.5, "sampling": Sampling(1.0)})])
def test_captured_steps_emit_the_eager_tokens_on_cuda(capture, verifier, kw):
    torch.backends.cuda.matmul.allow_tf32 = False
    fastpath.clear()
    target = tiny_cuda()
    draft = truncated_draft(target, 1)
    for ids in ([1, 5, 7, 9], [1, 30, 31], [4]):
        outs = [speculative_generate(target, draft, ids, Decoding(verifier=verifier, K=4, max_new_tokens=43, **kw),
                                     seed=2,
                                     execution=Execution(capture=c)) for c in ("none", capture)]
        assert outs[0].accepted == outs[1].accepted
        assert outs[0].tokens == outs[1].tokens
    assert all(len(d.steps) for d in fastpath.pooled_decoders(target))  # the steps were captured, not run eagerly


@pytest.mark.parametrize("capture", ["none", "graph"])
def test_sampled_decoding_is_deterministic_on_cuda(capture):
    target = tiny_cuda()
    draft = truncated_draft(target, 1)
    runs = [speculative_generate(target, draft, [1, 5, 7],
                                 Decoding(verifier="fixed", weight=0.5, K=4, max_new_tokens=64,
                                          sampling=Sampling(1.0)), seed=7,
                                          execution=Execution(capture=capture)) for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and runs[0].bias_tv == runs[1].bias_tv


def test_fast_path_in_bfloat16_on_cuda_matches_transformers():
    model = tiny_cuda(torch.bfloat16)
    seq = torch.randint(3, 96, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq], device="cuda")).logits[0].float()  # [30, V]
    s = Stepper(model, max_len=64)
    assert s.fast is not None
    got = torch.cat([s(seq[:10])[0]] + [s([t])[0] for t in seq[10:30]])
    assert (got - ref).abs().max() / ref.abs().max() < 0.05
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_head_training_step_and_one_draft_fine_tuning_step_run_on_cuda(tmp_path, dtype):
    """The paper DAG's first GPU jobs: a REINFORCE step (rollouts, the fidelity and the task reward, the loss) and
    a supervised draft fine-tuning step, every tensor on the models' device."""
    from diversed.decoding.models import prepare_tiny
    from diversed.training.finetune import distill_draft
    from diversed.training.settings import DistillConfig, HeadTrainConfig
    from diversed.training.train import load_log, train_head

    prepare_tiny(tmp_path / "models")
    pair = {"target": str(tmp_path / "models" / "tiny-target"), "draft": str(tmp_path / "models" / "tiny-draft-l1"),
            "device": "cuda", "dtype": dtype, "task": "arith", "n_train": 2, "epochs": 1, "max_new_tokens": 6}
    for reward in ("fidelity", "task"):
        head = train_head(HeadTrainConfig(batch_size=2, rollout="sample", reward=reward, **pair),
                          tmp_path / f"head-{reward}", progress=False)
        assert len(load_log(head.parent / "train_log.csv")) == 1
    ft = distill_draft(DistillConfig(finetune="sft", **pair), tmp_path / "sft", progress=False)
    assert len(load_log(ft / "train_log.csv")) == 2


def test_one_synchronisation_per_speculative_step_on_cuda():
    """CUDA's sync debug mode warns at every host synchronisation: one a step (the records' read), none for the
    host-to-device copies (transfer.to_device, pinned and non-blocking)."""
    import warnings

    target, draft = tiny_cuda(), tiny_cuda(seed=1)
    d = Decoding("fixed", weight=0.5, K=4, max_new_tokens=40, sampling=Sampling(1.0))
    speculative_generate(target, draft, [1, 5, 7], d, seed=0)  # warm-up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = speculative_generate(target, draft, [1, 5, 7], d, seed=0)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) <= out.steps + 2, [str(w.message)[:120] for w in syncs[:5]]  # + the prefill's and the end's
