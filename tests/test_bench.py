"""diversed bench: the analytic bound, and one small run of the whole bench on a tiny pair."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny

from diversed.bench import BenchConfig, expected_tokens_per_step, ideal_speedup, markdown, run_bench
from diversed.decoding.engine import Networks
from diversed.decoding.models import truncated_draft
from diversed.decoding.settings import Execution


def test_analytic_bound():
    assert expected_tokens_per_step(0.0, 5) == 1.0 and expected_tokens_per_step(1.0, 5) == 6.0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert ideal_speedup(1.0, 5, 0.0) == 6.0
    assert ideal_speedup(0.8, 5, 0.2) == pytest.approx((1 - 0.8**6) / 0.2 / 2.0)
    assert ideal_speedup(0.8, 5, 0.2, v=1.5) == pytest.approx((1 - 0.8**6) / 0.2 / 2.5)


def test_bench_runs_every_method_and_agrees_with_transformers():

    target = tiny("llama")
    draft = truncated_draft(target, 1)
    result = run_bench(target, draft, [[1, 5, 7, 9], [1, 30, 31]], BenchConfig(K=3, max_new_tokens=12, weights=(0.5,),
                       repeats=1, rules=("block", "ears=0.5")), progress=False)
    assert set(result["methods"]) == {"hf_target", "ours_target", "ours_draft", "hf_assisted_strict", "ours_strict",
                                      "hf_assisted_fixed_w0.5", "ours_fixed_w0.5", "rule strict at T=1",
                                      "rule block at T=1", "rule ears=0.5 at T=1"}
    rules = {r["rule"]: r for r in result["rules"]}  # #34 item 4: each rule against strict at the same K and T
    assert list(rules) == ["strict", "block", "ears=0.5"] and rules["strict"]["tokens_per_s_vs_strict"] == 1.0
    ears = result["methods"]["rule ears=0.5 at T=1"]
    assert rules["ears=0.5"]["tau_vs_strict"] == pytest.approx(
        ears["mean_acceptance_length"] / result["methods"]["rule strict at T=1"]["mean_acceptance_length"])
    assert all(r["new_tokens"] == 24 for name, r in result["methods"].items() if name.startswith("rule"))
    assert "| ears=0.5 |" in markdown(result) and "x strict tokens/s" in markdown(result)
    assert all(result["identical_greedy_tokens"].values()), result["identical_greedy_tokens"]
    assert result["execution"] == {"capture": "none", "fastpath": True, "threads": torch.get_num_threads()}
    strict = result["methods"]["ours_strict"]
    assert strict["new_tokens"] == 24 and 0 <= strict["conditional_acceptance"] <= 1
    c, v = result["ratios"]["draft_cost_ratio_c"], result["ratios"]["verify_cost_ratio_v"]
    assert c > 0 and v > 0
    alpha, speedup = strict["conditional_acceptance"], strict["speedup_vs_ours_target"]
    assert strict["efficiency"] == pytest.approx(speedup / ideal_speedup(alpha, 3, c))
    assert strict["efficiency_at_measured_v"] == pytest.approx(speedup / ideal_speedup(alpha, 3, c, v))
    md = markdown(result)
    assert "| ours_strict |" in md and "efficiency at measured v" in md


def test_transformers_assisted_generation_uses_the_draft_vocabulary_too():
    """The engine computes a restricted draft's q from its vocabulary's rows; transformers runs the whole head, and
    without the mask its greedy drafts (and so the static ensemble's tokens) would differ."""
    target = tiny("llama")
    draft = truncated_draft(target, 1)
    draft.config.draft_vocabulary = list(range(0, 96, 3))
    result = run_bench(target, draft, [[1, 5, 7, 9], [1, 30, 31]], BenchConfig(K=3, max_new_tokens=12, weights=(0.5,),
                       repeats=1), progress=False)
    assert all(result["identical_greedy_tokens"].values()), result["identical_greedy_tokens"]
    assert not draft.get_output_embeddings()._forward_hooks  # removed after each call


def test_bench_refuses_an_unknown_rule_or_a_bad_knob_before_timing_anything():
    target = tiny("llama")
    for rules, message in ((("beam",), "unknown rule 'beam' in --rules"), (("lenient=2",), "lenient's knob")):
        with pytest.raises(ValueError, match=message):
            run_bench(target, truncated_draft(target, 1), [[1, 2]], BenchConfig(K=2, max_new_tokens=4, repeats=1,
                      rules=rules), progress=False)


def test_bench_refuses_a_bad_capture_before_timing_anything():

    target = tiny("llama")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        run_bench(target, truncated_draft(target, 1), [[1, 2]], execution=Execution("graph"), progress=False)


def test_batch_bench_measures_every_batch_size_with_the_same_tokens():
    from diversed.bench import batch_bench, batch_markdown

    target = tiny("llama")
    draft = truncated_draft(target, 1)
    prompts = [[1, 5, 7, 9], [1, 30, 31], [4, 4], [2, 3, 4, 5, 6, 7]]
    result = batch_bench(Networks(target, draft), prompts, [1, 2, 4],
                         BenchConfig(K=3, max_new_tokens=10, weights=(0.5,)), progress=False)
    assert {(r["batch_size"], r["method"]) for r in result["rows"]} == {
        (B, m) for B in (1, 2, 4) for m in ("hf_target", "ours_target", "ours_strict", "ours_fixed_w0.5",
                                           "ours_dynamic")}
    assert all(result["identical_tokens"].values()), result["identical_tokens"]
    assert all(r["new_tokens"] == 4 * 10 for r in result["rows"])  # every prompt to its full length
    assert set(result["crossover_batch_size"]) == {"ours_strict", "ours_fixed_w0.5", "ours_dynamic"}
    assert "| 4 | ours_strict |" in batch_markdown(result)
