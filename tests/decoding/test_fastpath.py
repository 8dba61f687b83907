"""The static-cache CPU fast path equals transformers' own forward (Llama and Qwen3 shapes)."""

from __future__ import annotations

import pytest
import torch
from helpers import host_copies, host_syncs, reference_speculative, tiny

from diversed.decoding import fastpath
from diversed.decoding.engine import speculative_generate
from diversed.decoding.models import truncated_draft
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.stepper import Stepper

COMPILE = Execution(capture="compile")


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
        out = speculative_generate(target, draft, ids, Decoding(verifier="strict", K=4, max_new_tokens=60,
                                                                sampling=Sampling(0)))
        assert out.tokens == ref
    assert Stepper(target, max_len=64, execution=Execution(fastpath=False)).fast is None
    assert Execution.here("none", fastpath=False).fastpath is False  # what --no-fastpath gives an entry point
    assert Stepper(target, max_len=64).fast is not None
    with pytest.raises(ValueError, match="unknown capture 'cuda'; allowed: none, graph, compile"):
        Execution.here("cuda")


def test_static_cache_overflow_is_an_error():
    s = Stepper(tiny("llama"), max_len=8)
    s(list(range(1, 8)))
    with pytest.raises(ValueError, match="static KV cache of 8 positions is full"):
        s([1, 2])


def test_fast_path_rollback_matches_cache_free_reference():

    target, draft = tiny("llama"), tiny("llama", seed=1)
    with torch.no_grad():
        ref = reference_speculative(target, draft, [1, 30, 31], K=4, n_new=150, w=0.5, temperature=1.0, seed=3)
    out = speculative_generate(target, draft, [1, 30, 31],
                               Decoding(verifier="fixed", weight=0.5, K=4, max_new_tokens=150,
                                        sampling=Sampling(1.0)), seed=3)
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


@pytest.mark.parametrize("capture", ["none", "compile"])
def test_one_host_sync_per_speculative_step(monkeypatch, capture):
    """Everything in a step stays on the device but one transfer (what a GPU needs not to stall): count every
    way a tensor reaches the host while decoding, eager and with the padded captured steps; and every tensor made
    from host data goes through transfer.to_device (on CUDA a non-blocking copy from pinned memory, where
    torch.tensor(list, device=cuda) would wait for the device)."""
    from diversed.decoding import engine

    monkeypatch.setattr(fastpath, "_compiled", lambda fn: fn)

    target, draft = tiny("llama"), tiny("llama", seed=1)
    syncs, copies = host_syncs(monkeypatch), host_copies(monkeypatch)
    from diversed.decoding.head import WeightHead

    head = WeightHead(64, 64).bind(target, draft)
    cases = (("strict", {}), ("fixed", {"weight": 0.5}), ("fixed", {"weight": 0.5, "mixing": "logit"}),
             ("dynamic", {"head": head}))
    for verifier, kw in cases:
        syncs.clear()
        out = engine.speculative_generate(target, draft, [1, 5, 7], Decoding(verifier=verifier, K=4, max_new_tokens=40,
                                                                             sampling=Sampling(1.0),
                                                   **{k: v for k, v in kw.items() if k != "head"}),
                                          trained=kw.get("head"), seed=0,
                                          execution=Execution(capture=capture))
        assert syncs == ["tolist"] * out.steps, (verifier, kw, syncs[:10])
        copies.clear()
        out = engine.speculative_generate(target, draft, [1, 5, 7], Decoding(verifier=verifier, K=4, max_new_tokens=40,
                                                                             sampling=Sampling(1.0),
                                                   **{k: v for k, v in kw.items() if k != "head"}),
                                          trained=kw.get("head"), seed=0,
                                          execution=Execution(capture=capture))
        made_elsewhere = [m for m in copies if m != "diversed.decoding.transfer"]
        assert not made_elsewhere, made_elsewhere  # every host-to-device copy: pinned and non-blocking on CUDA
        assert len(copies) <= 10 * out.steps  # measured 8.8-9.1 a step at K = 4: positions per forward, tokens, k;
        # the row and last-position indices once per batch shape (transfer.index)


@pytest.fixture
def eager_capture(monkeypatch):
    """The captured step's math (padded to its bucket, attention over its window of the cache under a mask by
    position) without compiling it: what a CUDA graph replays, runnable on a CPU."""
    monkeypatch.setattr(fastpath, "_compiled", lambda fn: fn)
    fastpath.clear()
    yield
    fastpath.clear()


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_padded_whole_cache_steps_match_the_full_forward(model_type, eager_capture):
    model = tiny(model_type)
    seq = torch.randint(3, 96, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]  # [40, V]
    s = Stepper(model, max_len=64, execution=COMPILE, buckets=(1, 2, 6))
    got = [s(seq[:10])[0]]  # prefill: longer than every bucket, eager
    got += [s([t])[0] for t in seq[10:13]]  # bucket 1
    got.append(s(seq[13:15])[0])  # bucket 2
    got.append(s(seq[15:18])[0])  # 3 tokens padded to bucket 6
    s(seq[18:24])  # a full verification block, rolled back
    s.crop(18)
    got.append(s(seq[18:24])[0])
    got.append(s(seq[24:40])[0])
    assert sorted(P for P, _ in s.fast.steps) == [1, 2, 6]
    assert {W for _, W in s.fast.steps} == {fastpath.WINDOW_MIN} and s.fast.capacity > fastpath.WINDOW_MIN
    assert torch.allclose(torch.cat(got), ref, atol=1e-4, rtol=1e-4)


def test_a_captured_step_attends_over_its_live_length_bucketed(eager_capture):
    """#32 item 3: past 256 positions the window doubles (one capture per bucket and window), never the whole
    cache of a long run, and the logits stay the full forward's."""
    model = tiny("llama")
    seq = torch.randint(3, 96, (300,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]  # [300, V]
    s = Stepper(model, max_len=1000, execution=COMPILE, buckets=(1,))
    got = [s(seq[:250])[0]] + [s([t])[0] for t in seq[250:300]]  # 6 steps at window 256, then 512
    assert sorted(s.fast.steps) == [(1, 256), (1, 512)] and s.fast.capacity == 1025
    assert fastpath.window_bucket(2000, 1025) == 1025
    assert torch.allclose(torch.cat(got), ref, atol=1e-4, rtol=1e-4)


def test_captured_decoders_are_pooled_per_model_and_never_shared_while_in_use(eager_capture):
    target = tiny("llama")
    a = Stepper(target, max_len=40, execution=COMPILE, buckets=(1,))
    b = Stepper(target, max_len=40, execution=COMPILE, buckets=(1,))  # a is alive: b needs its own cache
    assert a.fast is not b.fast
    dec = a.fast
    del a
    c = Stepper(target, max_len=200, execution=COMPILE, buckets=(1,))  # reuses a's (capacity 256)
    assert c.fast is dec and c.fast.n == [0]
    del b, c
    with torch.no_grad():
        target.model.layers[0].mlp.down_proj.weight.mul_(1.5)  # changed weights: the pooled decoders are stale
    assert Stepper(target, max_len=40, execution=COMPILE, buckets=(1,)).fast is not dec


@pytest.mark.parametrize("capture", ["none", "compile"])
def test_in_place_change_to_a_later_layer_reaches_the_next_decode(capture, eager_capture):
    """The fused CPU copies follow an in-place change to any decoder layer, not only the first: after a decode,
    the next decode's logits and tokens are transformers' forward with the new weights."""
    from diversed.bench import hf_generate
    from diversed.decoding.engine import speculative_generate
    from diversed.decoding.settings import Decoding

    model = tiny("llama")  # float32 on CPU: fused, transposed copies of the projections
    execution = Execution(capture=capture)
    seq = torch.randint(3, 96, (20,), generator=torch.Generator().manual_seed(0)).tolist()
    speculative_generate(model, None, seq[:5], Decoding("autoregressive", max_new_tokens=10, sampling=Sampling(0)),
                         execution=execution)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(3.0)
        model.model.layers[1].self_attn.v_proj.weight.neg_()
        ref = model(torch.tensor([seq])).logits[0]  # [20, V]
    s = Stepper(model, max_len=64, execution=execution, buckets=(1,))
    got = torch.cat([s(seq[:10])[0]] + [s([t])[0] for t in seq[10:]])
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)
    out = speculative_generate(model, None, seq[:5], Decoding("autoregressive", max_new_tokens=30,
                                                              sampling=Sampling(0)), execution=execution)
    assert out.tokens == hf_generate(model, seq[:5], max_new_tokens=30)


@pytest.mark.parametrize("verifier,kw", [("strict", {"sampling": Sampling(0)}),
                                         ("fixed", {"weight": 0.5, "sampling": Sampling(1.0)}),
                                         ("fixed", {"weight": 0.5, "sampling": Sampling(1.0), "mixing": "logit"})])
def test_captured_engine_emits_the_eager_tokens(verifier, kw, eager_capture):
    """Sampled or greedy, with the end of the sequence padded and the draft stepping 2 tokens after full
    acceptance: the captured steps give the eager engine's tokens and statistics, the draft drafting for itself
    included (two caches of one model in use at once)."""
    target = tiny("llama")
    for draft in (truncated_draft(target, 1), target):
        for ids in ([1, 5, 7, 9], [1, 30, 31]):
            outs = [speculative_generate(target, draft, ids, Decoding(verifier=verifier, K=4, max_new_tokens=43, **kw),
                                         seed=2, execution=Execution(capture=c))
                    for c in ("none", "compile")]
            assert outs[0].tokens == outs[1].tokens and outs[0].accepted == outs[1].accepted
            assert outs[0].bias_tv == pytest.approx(outs[1].bias_tv, abs=1e-5)
    assert max(outs[1].accepted) == 4  # a fully accepted step happened (the draft's 2-token step)


@pytest.mark.slow  # torch.compile (inductor)
def test_compiled_steps_match_eager():
    """torch.compile (inductor, on this CPU) of the fixed-shape steps: the same tokens as eager, compiled
    without graph breaks (fullgraph), one entry per step length and model shape."""
    from torch._dynamo.utils import counters

    fastpath.clear()
    target = tiny("llama")
    draft = truncated_draft(target, 1)
    before = counters["stats"]["unique_graphs"]
    for ids in ([1, 5, 7, 9], [1, 30, 31]):
        outs = [speculative_generate(target, draft, ids,
                                     Decoding(verifier="fixed", weight=0.5, K=3, max_new_tokens=30,
                                              sampling=Sampling(1.0)), seed=0,
                                              execution=Execution(capture=c)) for c in ("none", "compile")]
        assert outs[0].tokens == outs[1].tokens and outs[0].accepted == outs[1].accepted
    assert counters["stats"]["unique_graphs"] - before == 3  # draft 1 and 2 tokens, target K + 1; then reused
    fastpath.clear()


def test_capture_is_checked_before_any_compute(monkeypatch):
    target = tiny("llama")
    draft = truncated_draft(target, 1)
    strict = Decoding("strict", K=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="unknown capture 'cuda'; allowed: none, graph, compile"):
        speculative_generate(target, draft, [1, 2], strict, execution=Execution(capture="cuda"))
    with pytest.raises(ValueError, match="capture 'graph' .* needs a CUDA device, not cpu"):
        speculative_generate(target, draft, [1, 2], strict, execution=Execution(capture="graph"))
    with pytest.raises(ValueError, match="needs a CUDA device"):  # what --capture graph gives an entry point
        speculative_generate(target, draft, [1, 2], strict, execution=Execution.here("graph"))
    with pytest.raises(ValueError, match="capture 'compile' needs the static-cache fast path.* off"):
        speculative_generate(target, draft, [1, 2], strict, execution=Execution.here("compile", fastpath=False))


@pytest.mark.parametrize("layout", ["memory-efficient [B, L, H, d]", "every stride reversed"])
def test_fast_steps_take_any_layout_of_the_attention_output(layout, monkeypatch):
    """SDPA's memory-efficient backend (every float32 model on a GPU, every masked bf16 forward on an A100) returns
    its output laid out [B, L, H, d], which a .view of it in [B, H, L, d] order cannot read: the step, fed that
    layout (or any other), still equals transformers' forward."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def strided(*args, **kwargs):
        out = sdpa(*args, **kwargs)  # [B, H, L, d]
        if layout.startswith("memory"):
            return out.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, stored [B, L, H, d]
        return out.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0)

    monkeypatch.setattr(fastpath.F, "scaled_dot_product_attention", strided)
    model = tiny("llama")
    seq = torch.randint(3, 96, (24,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]  # [24, V]
    s = Stepper(model, max_len=32)
    got = torch.cat([s(seq[:8])[0], *(s([t])[0] for t in seq[8:12]), s(seq[12:24])[0]])
    assert not strided(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4)).is_contiguous()
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_precapture_takes_every_step_a_sequence_will_run(eager_capture):
    """#49: a timed decode captures nothing: the warm-up captures each (bucket, window) up to the longest sequence
    the timed prompts reach, so no method pays a capture inside its clock."""
    model = tiny("llama")
    s = Stepper(model, max_len=1000, execution=COMPILE, buckets=(1, 3))
    assert s.fast.precapture(300) == 4 and sorted(s.fast.steps) == [(1, 256), (1, 512), (3, 256), (3, 512)]
    assert s.fast.precapture(300) == 0
    seq = torch.randint(3, 96, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]  # [300, V]
    got = [s(seq[:250])[0]] + [s([t])[0] for t in seq[250:297]] + [s(seq[297:300])[0]]
    assert sorted(s.fast.steps) == [(1, 256), (1, 512), (3, 256), (3, 512)]  # none captured while decoding
    assert torch.allclose(torch.cat(got), ref, atol=1e-4, rtol=1e-4)


def test_eager_steps_over_a_bucketed_window_match_the_full_forward():
    """On CUDA an eager step attends over the bucketed window under a mask (cuDNN builds one graph per key length):
    the same logits as transformers' forward, checked here by turning it on on the CPU."""
    model = tiny("qwen3")
    seq = torch.randint(3, 96, (280,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]
    s = Stepper(model, max_len=600)
    s.fast.bucket_eager = True
    got = [s(seq[:200])[0]] + [s([t])[0] for t in seq[200:260]] + [s(seq[260:280])[0]]
    assert torch.allclose(torch.cat(got), ref, atol=1e-4, rtol=1e-4)
