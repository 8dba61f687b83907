"""Batched decoding: on these tiny models a row's output does not depend on its batch. On CPU in float32, every
prompt decoded inside a batch (any slot, rows refilled from the queue as others end) emits the tokens, acceptances,
weights and fidelity of a batch of one, for every verifier and both baselines, greedy and sampled, on the
static-cache fast path and on transformers' modules (Gemma 3 with its sliding window included); one host transfer
per step for the batch. (Larger models agree up to float rounding, which a batch's shape changes.)"""

from __future__ import annotations

import pytest
import torch
from helpers import host_syncs, tiny, tiny_paper_model

from diversed.decoding.engine import Networks, generate, speculative_generate
from diversed.decoding.head import WeightHead
from diversed.decoding.models import truncated_draft
from diversed.decoding.settings import Decoding, Execution, Sampling

# prompts of different lengths, so that rows sit at different positions and end at different steps
PROMPTS = [[1, 5, 7, 9], [1, 30, 31], [4], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [7, 7], [9, 40, 41, 42, 43, 44]]
SETTINGS = [
    ("autoregressive", {}),
    ("draft", {}),
    ("strict", {}),
    ("fixed", {"weight": 0.5}),
    ("fixed", {"weight": 0.3, "mixing": "logit"}),
    ("dynamic", {}),
    ("cascade", {"knob": 0.3, "deferral": "opt"}),
    ("lenient", {"knob": 0.5}),
    ("typical", {"knob": 0.09}),
    ("topk", {"knob": 3}),
    ("fly", {"knob": 0.3}),
]


def head_for(target, draft):
    """A head whose w varies with the hidden states (a zero-initialised head gives 0.5 everywhere)."""
    from diversed.decoding.models import hidden_size

    head = WeightHead(hidden_size(target), hidden_size(draft))
    with torch.no_grad():
        head.proj.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    return head.bind(target, draft)


EAGER = Execution()


def decode(target, draft, verifier, kw, temperature, batch_size, execution=EAGER, max_new=23, prompts=PROMPTS):
    decoding = Decoding(verifier, K=4, max_new_tokens=max_new, sampling=Sampling(temperature), **kw)
    head = head_for(target, draft) if verifier == "dynamic" else None
    seeds = [100 + i for i in range(len(prompts))]
    return generate(Networks(target, draft, head), prompts, decoding, seeds=seeds, batch_size=batch_size,
                    execution=execution)


def same(one, many):
    for a, b in zip(one, many, strict=True):
        assert a.tokens == b.tokens
        assert a.drafted == b.drafted and a.accepted == b.accepted and a.stop == b.stop
        assert [w for s in a.weights for w in s] == pytest.approx([w for s in b.weights for w in s], abs=1e-5)
        assert a.bias_tv == pytest.approx(b.bias_tv, abs=1e-5, nan_ok=True)
        assert a.target_logprob == pytest.approx(b.target_logprob, abs=1e-4)
        assert a.target_argmax == b.target_argmax


@pytest.fixture(scope="module")
def llama_pair():
    target = tiny("llama")
    return target, truncated_draft(target, 1)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(("verifier", "kw"), SETTINGS)
def test_a_row_decodes_as_in_a_batch_of_one_on_the_fast_path(llama_pair, verifier, kw, temperature):
    target, draft = llama_pair
    one = decode(target, draft, verifier, kw, temperature, 1)
    for B in (4, 6):  # 4: rows refilled from the queue as others end; 6: every prompt at once
        same(one, decode(target, draft, verifier, kw, temperature, B))
    if verifier in ("strict", "fixed", "dynamic"):
        assert 0 < sum(sum(g.accepted) for g in one) < sum(sum(g.drafted) for g in one)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(("verifier", "kw"), [s for s in SETTINGS
                                              if s[0] in ("draft", "strict", "fixed", "dynamic", "lenient")])
def test_a_row_decodes_as_in_a_batch_of_one_on_transformers_modules(llama_pair, verifier, kw, temperature):
    """The fast path off: transformers' Llama over the row cache, each row with its own positions and mask."""
    target, draft = llama_pair
    slow = Execution(fastpath=False)
    one = decode(target, draft, verifier, kw, temperature, 1, slow)
    same(one, decode(target, draft, verifier, kw, temperature, 4, slow))
    if temperature == 0.0:  # and the fast path's tokens (sampled ones may differ in the last float bits)
        assert [g.tokens for g in one] == [g.tokens for g in decode(target, draft, verifier, kw, 0.0, 1)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(("verifier", "kw"), [("strict", {}), ("fixed", {"weight": 0.5}), ("dynamic", {}),
                                              ("autoregressive", {})])
def test_gemma3_rows_past_the_sliding_window_decode_as_in_a_batch_of_one(verifier, kw, temperature):
    """Gemma 3 (Gemma3ForConditionalGeneration, window 8): every row crosses the window several times."""
    target = tiny_paper_model("gemma3")
    draft = tiny_paper_model("gemma3", seed=1, hidden=32, layers=2)
    one = decode(target, draft, verifier, kw, temperature, 1, max_new=30)
    same(one, decode(target, draft, verifier, kw, temperature, 4, max_new=30))
    if temperature == 0.0 and verifier == "strict":
        from diversed.bench import hf_generate

        assert [g.tokens for g in one] == [hf_generate(target, p, max_new_tokens=30) for p in PROMPTS]


def test_rows_stop_at_their_own_eos_and_the_queue_refills_their_slots(llama_pair):
    target, draft = llama_pair
    free = decode(target, draft, "strict", {}, 0.0, 1, max_new=30)
    eos = free[0].tokens[5]  # ends prompt 0 early; other prompts end wherever they emit it, or at the budget
    decoding = Decoding("strict", K=4, max_new_tokens=30, sampling=Sampling(0), eos_token_id=eos)
    one = [speculative_generate(target, draft, p, decoding) for p in PROMPTS]
    many = generate(Networks(target, draft), PROMPTS, decoding, batch_size=3)
    same(one, many)
    assert many[0].stop == "eos" and many[0].tokens[-1] == eos and len(many[0].tokens) <= 6
    assert {g.stop for g in many} == {"eos", "length"} or all(g.stop == "eos" for g in many)


def test_one_host_transfer_per_step_for_the_whole_batch(llama_pair, monkeypatch):
    """A step of B rows reaches the host once (what a GPU needs not to stall), as a step of one row does."""
    target, draft = llama_pair
    syncs = host_syncs(monkeypatch)
    steps = []
    from diversed.decoding import engine

    original_step = engine.speculative_step
    monkeypatch.setattr(engine, "speculative_step", lambda *a: (steps.append(1), original_step(*a)))
    prompts = [p for p in PROMPTS if len(p) > 1]
    decoding = Decoding("fixed", weight=0.5, K=4, max_new_tokens=20, sampling=Sampling(1.0))
    engine.generate(Networks(target, draft), prompts, decoding, seeds=list(range(len(prompts))),
                    batch_size=len(prompts))
    assert syncs == ["tolist"] * len(steps) and len(steps) < sum(20 for _ in prompts) / 2


def test_batched_rollouts_and_target_text_do_not_depend_on_their_batch(llama_pair):
    from diversed.training.finetune import target_text
    from diversed.training.settings import HeadTrainConfig
    from diversed.training.train import rollouts

    target, draft = llama_pair
    head = head_for(target, draft)
    nets = Networks(target, draft, head)
    for rollout in ("greedy", "sample"):
        cfg = HeadTrainConfig(max_new_tokens=12, temperature=1.0, mixing="linear", rollout=rollout)
        together = rollouts(nets, PROMPTS, cfg, eos={2},
                            seeds=[i for i in range(len(PROMPTS))])
        alone = [rollouts(nets, [p], cfg, eos={2}, seeds=[i])[0]
                 for i, p in enumerate(PROMPTS)]
        for a, b in zip(alone, together, strict=True):
            assert a.tokens.tolist() == b.tokens.tolist()
            assert torch.allclose(a.log_p, b.log_p, atol=1e-4) and torch.allclose(a.h_draft, b.h_draft, atol=1e-4)
    for temperature in (0.0, 1.0):
        text = [target_text(target, PROMPTS, max_new_tokens=10, temperature=temperature, progress=False,
                            batch_size=B) for B in (1, 4)]
        assert text[0] == text[1]


def test_a_batch_of_long_prompts_is_prefilled_a_few_rows_at_a_time(llama_pair, monkeypatch):
    """#32 item 5: the first admission of a batch prefills rows in groups of at most PREFILL_TOKENS padded tokens
    (a batch of 32 long articles in one forward outgrew the GPU), with the tokens of a single prefill."""
    from diversed.decoding import engine

    target, draft = llama_pair
    whole = decode(target, draft, "fixed", {"weight": 0.5}, 1.0, 6)
    calls = []
    original = engine._prefill_groups

    def recorded(prefill):
        for group in original(prefill):
            calls.append((len(group), max(len(ids) for _, ids in group)))  # [R, longest prompt] of a prefill
            yield group

    monkeypatch.setattr(engine, "_prefill_groups", recorded)
    monkeypatch.setattr(engine, "PREFILL_TOKENS", 12)
    same(whole, decode(target, draft, "fixed", {"weight": 0.5}, 1.0, 6))
    assert len(calls) > 2 and all(R * L <= 12 or R == 1 for R, L in calls), calls
    groups = list(engine._prefill_groups([(s, [0] * n) for s, n in enumerate([1, 2, 3, 3, 5, 20])]))
    assert [[s for s, _ in g] for g in groups] == [[0, 1, 2, 3], [4], [5]]  # 4 x 3 = 12; 5 x 5 > 12; 20 alone


def test_batch_size_is_checked(llama_pair):
    target, draft = llama_pair
    with pytest.raises(ValueError, match="batch size must be >= 1, got 0"):
        generate(Networks(target, draft), PROMPTS, Decoding("strict"), batch_size=0)
    with pytest.raises(ValueError, match="2 seeds for 6 prompts"):
        generate(Networks(target, draft), PROMPTS, Decoding("strict"), seeds=[0, 1])
