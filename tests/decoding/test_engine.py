"""Engine tests on tiny random models: greedy identity, cache rollback, transformers cross-checks, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import negated, reference_speculative, tiny_llama

from diversed.bench import hf_generate
from diversed.decoding.engine import speculative_generate
from diversed.decoding.head import WeightHead
from diversed.decoding.settings import Decoding, Sampling
from diversed.decoding.stats import summarize
from diversed.decoding.verifiers import ensemble
from diversed.runs.settings import Launch

PROMPTS = [[1, 5, 7, 9], [1, 30, 31], [1, 80, 3, 3, 3, 40, 12]]


def greedy(target, ids, n=60):
    return speculative_generate(target, None, ids, Decoding("autoregressive", max_new_tokens=n,
                                                            sampling=Sampling(0))).tokens


@pytest.mark.parametrize("K", [1, 3, 5])
def test_strict_greedy_equals_target_greedy(target, draft, K):
    for ids in PROMPTS:
        ref = greedy(target, ids)
        assert ref == hf_generate(target, ids, max_new_tokens=60)  # our baseline is transformers' greedy
        out = speculative_generate(target, draft, ids, Decoding(verifier="strict", K=K, max_new_tokens=60,
                                                                sampling=Sampling(0)))
        assert out.tokens == ref
        assert sum(out.accepted) + out.steps == len(out.tokens)


def test_every_draft_accepted_and_none_accepted(target):
    ids = PROMPTS[0]
    ref = greedy(target, ids)
    same = speculative_generate(target, target, ids, Decoding(verifier="strict", K=4, max_new_tokens=60,
                                                              sampling=Sampling(0)))
    assert same.tokens == ref and same.draft_acceptance_rate == 1.0
    assert same.mean_acceptance_length == 5.0  # 60 tokens in 12 steps of 4 drafts + bonus
    worst = speculative_generate(target, negated(target), ids, Decoding(verifier="strict", K=4, max_new_tokens=60,
                                                                        sampling=Sampling(0)))
    assert worst.tokens == ref and sum(worst.accepted) == 0 and worst.mean_acceptance_length == 1.0


@pytest.mark.parametrize("w", [1.0, 0.5])
def test_kv_rollback_matches_cache_free_reference(target, other_draft, w):
    """200 sampled tokens with random rejections: identical to re-encoding everything every step."""
    ids = PROMPTS[1]
    with torch.no_grad():
        ref = reference_speculative(target, other_draft, ids, K=4, n_new=200, w=w, temperature=1.0, seed=3)
    out = speculative_generate(target, other_draft, ids, Decoding(verifier="fixed", weight=w, K=4, max_new_tokens=200,
                                                                  sampling=Sampling(1.0)), seed=3)
    assert out.tokens == ref
    assert 0 < sum(out.accepted) < sum(out.drafted)  # there were rejections, so rollbacks happened


@pytest.mark.parametrize("w", [0.3, 0.7])
def test_fixed_greedy_matches_transformers_ensemble(target, other_draft, w):
    """Our fixed verifier (linear) == transformers' assistant_ensemble_weight, greedy."""
    for ids in PROMPTS:
        ours = speculative_generate(target, other_draft, ids, Decoding(verifier="fixed", weight=w, K=4,
                                                                       max_new_tokens=40, sampling=Sampling(0)))
        theirs = hf_generate(target, ids, max_new_tokens=40, draft=other_draft, K=4, weight=w)
        assert ours.tokens == theirs
    strict = hf_generate(target, PROMPTS[0], max_new_tokens=40, draft=other_draft, K=4)
    assert strict == greedy(target, PROMPTS[0], 40)


def test_fixed_sampling_acceptance_matches_transformers(target, draft, monkeypatch):
    """In sampling, the acceptance rate of transformers' static ensemble equals ours within sampling error."""
    import transformers.generation.utils as gen_utils

    w, K, n_new = 0.5, 3, 40
    matches = []
    original = gen_utils._speculative_sampling

    def recording(*args, **kwargs):
        valid, n = original(*args, **kwargs)
        matches.append((int(n), args[2]))  # (accepted, candidate length)
        return valid, n

    monkeypatch.setattr(gen_utils, "_speculative_sampling", recording)
    torch.manual_seed(0)
    prompts = [[1, t] for t in range(10, 40)]
    for ids in prompts:
        hf_generate(target, ids, max_new_tokens=n_new, draft=draft, K=K, weight=w, temperature=1.0)
    theirs = sum(n for n, _ in matches) / sum(k for _, k in matches)
    gens = [speculative_generate(target, draft, ids,
                                 Decoding(verifier="fixed", weight=w, K=K, max_new_tokens=n_new,
                                          sampling=Sampling(1.0)), seed=i) for i,
                                          ids in enumerate(prompts)]
    ours = summarize(gens)["draft_acceptance_rate"]
    n = sum(k for _, k in matches)
    se = math.sqrt(2 * ours * (1 - ours) / n)
    assert abs(ours - theirs) < 4 * se + 0.02, (ours, theirs)


def test_dynamic_head_runs_and_weights_are_recorded(target, draft):
    head = WeightHead(target.config.hidden_size, draft.config.hidden_size).double().bind(target, draft)
    torch.nn.init.normal_(head.proj.weight, std=0.5)
    out = speculative_generate(target, draft, PROMPTS[0],
                               Decoding(verifier="dynamic", K=3, max_new_tokens=30,
                                        sampling=Sampling(1.0)), trained=head, seed=0)
    ws = [w for step in out.weights for w in step]
    assert len(out.tokens) == 30 and len(ws) == sum(out.drafted)
    assert all(0 < w < 1 for w in ws) and len({round(w, 6) for w in ws}) > 1  # per-position, not constant


def test_dynamic_weight_uses_the_hidden_states_that_predict_each_draft(target, draft):
    """Head inputs: target hidden state at the position predicting draft i (from the verification pass) and the
    draft hidden state from the forward that proposed it; checked against a cache-free recomputation."""
    head = WeightHead(target.config.hidden_size, draft.config.hidden_size).double().bind(target, draft)
    torch.nn.init.normal_(head.proj.weight, std=0.5)
    ids = PROMPTS[2]
    out = speculative_generate(target, draft, ids, Decoding(verifier="dynamic", K=3, max_new_tokens=3,
                                                            sampling=Sampling(0)), trained=head)
    # first step drafts k = 2 tokens (max_new_tokens - 1); recompute their weights without caches
    drafts = []
    for _ in range(2):
        drafts.append(int(draft(torch.tensor([ids + drafts])).logits[0, -1].argmax()))
    seq = torch.tensor([ids + drafts])
    h_t = target.model(seq).last_hidden_state[0, len(ids) - 1: len(ids) + 1]
    h_d = draft.model(seq).last_hidden_state[0, len(ids) - 1: len(ids) + 1]
    assert torch.allclose(torch.tensor(out.weights[0], dtype=torch.float64), head(h_t, h_d), atol=1e-9)


def test_a_verifier_is_one_weight_rule(target, other_draft, monkeypatch):
    """A verifier is one RULES entry: a rule giving w = 0.4 decodes as the fixed verifier at w = 0.4."""
    from diversed.decoding import settings, verifiers

    monkeypatch.setitem(verifiers.WEIGHT_SOURCES, "two_fifths", lambda q, **_: q.new_full(q.shape[:2], 0.4))
    monkeypatch.setitem(settings.RULES, "two_fifths", settings.Rule("Two fifths", "two_fifths"))
    monkeypatch.setattr(settings, "VERIFIERS", (*settings.VERIFIERS, "two_fifths"))
    outs = [speculative_generate(target, other_draft, PROMPTS[1], Decoding(K=3, max_new_tokens=40,
                                                                           sampling=Sampling(1.0), **kw),
                                 seed=5)
            for kw in ({"verifier": "two_fifths"}, {"verifier": "fixed", "weight": 0.4})]
    assert outs[0].tokens == outs[1].tokens and outs[0].weights == outs[1].weights


def test_eos_stops_and_is_kept(target, draft):
    ref = greedy(target, PROMPTS[0], 30)
    eos = ref[10]
    first = ref.index(eos)
    out = speculative_generate(target, draft, PROMPTS[0], Decoding(verifier="strict", K=4, max_new_tokens=30,
                                                                   sampling=Sampling(0), eos_token_id=eos))
    assert out.tokens == ref[: first + 1] and out.stop == "eos"
    ar = speculative_generate(target, None, PROMPTS[0], Decoding("autoregressive", max_new_tokens=30,
                                                                 sampling=Sampling(0), eos_token_id=[eos]))
    assert ar.tokens == out.tokens


def test_statistics_and_timings(target, draft):
    out = speculative_generate(target, draft, PROMPTS[0],
                               Decoding(verifier="fixed", weight=0.5, K=4, max_new_tokens=50,
                                        sampling=Sampling(1.0)), seed=0)
    s = out.stats()
    assert s["new_tokens"] == 50 and len(out.bias_tv) == 50
    assert math.isclose(s["mean_acceptance_length"], 50 / len(out.drafted))
    assert len(s["acceptance_by_position"]) == 4
    assert s["time_draft"] > 0 and s["time_verify"] > 0 and s["time_other"] >= 0
    assert s["bias_tv"] > 0


def test_draft_only_baseline(draft):
    out = speculative_generate(draft, None, PROMPTS[0], Decoding("autoregressive", max_new_tokens=20,
                                                                 sampling=Sampling(0)))
    assert len(out.tokens) == 20 and out.steps == 20


def test_sampling_is_deterministic_given_the_seed(target, draft):
    def run():
        return speculative_generate(target, draft, PROMPTS[0],
                                    Decoding(verifier="fixed", weight=0.4, K=3, max_new_tokens=40,
                                             sampling=Sampling(0.8,
                                                               0.9)), seed=7).tokens
    assert run() == run()


def test_logit_mixing_runs(target, draft):
    out = speculative_generate(target, draft, PROMPTS[0],
                               Decoding(verifier="fixed", weight=0.5, mixing="logit", K=3, max_new_tokens=30,
                                        sampling=Sampling(1.0)), seed=0)
    assert len(out.tokens) == 30


# ---------------------------------------------------------------------------------------------- bad input

BAD = [
    (dict(verifier="fixed", weight=1.5), "weight w must be in \\[0, 1\\], got 1.5"),
    (dict(verifier="fixed", weight=-0.1), "weight w must be in \\[0, 1\\]"),
    (dict(verifier="fixed", weight=True), "weight w must be in \\[0, 1\\], got True"),
    (dict(verifier="strict", weight=0.5), "weight is only used by the 'fixed' verifier"),
    (dict(verifier="fixed"), "needs --weight"),
    (dict(verifier="strict", K=0), "K must be >= 1, got 0"),
    (dict(verifier="strict", K=2.5), "K must be >= 1, got 2.5"),
    (dict(verifier="beam"), "unknown verifier 'beam'"),
    (dict(verifier="dynamic"), "needs --head"),
    (dict(verifier="strict", mixing="geometric"), "unknown mixing 'geometric'"),
    (dict(verifier="strict", temperature=-1.0), "temperature must be >= 0"),
    (dict(verifier="strict", top_p=0.0), "top_p must be in"),
    (dict(verifier="strict", max_new_tokens=600), "exceeds the target's context length 512"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_bad_input_is_refused_before_compute(target, draft, kwargs, message, monkeypatch):
    from diversed.decoding import engine

    def boom(*_a, **_k):
        raise AssertionError("compute started")

    monkeypatch.setattr(engine.Stepper, "__call__", boom)
    kwargs = {"K": 3, "max_new_tokens": 10, "temperature": 1.0} | kwargs
    with pytest.raises(ValueError, match=message):  # Sampling checks itself when built
        sampling = Sampling(kwargs.pop("temperature"), kwargs.pop("top_p", 1.0))
        speculative_generate(target, draft, PROMPTS[0], Decoding(sampling=sampling, **kwargs))


@pytest.mark.parametrize(("kwargs", "message"), BAD[:-1])
def test_run_config_refuses_the_same_settings_with_the_same_message(kwargs, message):
    """One validation path: RunConfig.validate runs the engine's checks (the context length needs the models)."""
    from diversed.runs.run import RunConfig

    with pytest.raises(ValueError, match=message):
        RunConfig(**kwargs).validate()


def test_sampling_is_a_checked_value():
    assert Sampling(0).greedy and not Sampling(0.5, 0.9).greedy
    with pytest.raises(ValueError, match="temperature must be >= 0 \\(0 = greedy\\) and finite, got nan"):
        Sampling(float("nan"))
    with pytest.raises(ValueError, match="top_p must be in \\(0, 1\\], got 1.5"):
        Sampling(1.0, 1.5)
    with pytest.raises(TypeError, match="sampling must be a settings.Sampling"):
        speculative_generate(tiny_llama(0), None, [1, 2], Decoding(verifier="autoregressive", max_new_tokens=2,
                                                                   sampling=0.5))


def test_empty_prompt_and_batches_are_refused(target, draft):
    with pytest.raises(ValueError, match="empty prompt"):
        speculative_generate(target, draft, [], Decoding(verifier="strict", max_new_tokens=5))
    with pytest.raises(ValueError, match="input_ids holds 2 sequences: pass a list of prompts"):
        speculative_generate(target, draft, torch.ones(2, 3, dtype=torch.long), Decoding(verifier="strict",
                                                                                         max_new_tokens=5))


def test_vocabulary_mismatch_is_refused(target):
    small = tiny_llama(2, vocab=80)
    with pytest.raises(ValueError, match="target has 96 logits, draft has 80"):
        speculative_generate(target, small, PROMPTS[0], Decoding(verifier="strict", max_new_tokens=5))


def test_padded_vocabulary_when_declared_identical(target):
    """With vocab_size given (load_pair sets it for provably identical tokenizers) the narrower head is padded
    and ids past it (padding rows, never real tokens) get no mass in either model."""
    small = tiny_llama(2, vocab=80)
    out = speculative_generate(target, small, PROMPTS[0], Decoding(verifier="strict", K=3, max_new_tokens=20,
                                                                   sampling=Sampling(0)), vocab_size=96)
    tokens = list(PROMPTS[0])
    with torch.no_grad():
        for _ in range(20):
            tokens.append(int(target(torch.tensor([tokens])).logits[0, -1, :80].argmax()))
    assert out.tokens == tokens[len(PROMPTS[0]):]


def test_head_for_another_pair_is_refused(target, draft, other_draft):
    head = WeightHead(target.config.hidden_size, draft.config.hidden_size).bind(target, draft)
    with pytest.raises(ValueError, match="trained for another draft model"):
        speculative_generate(target, other_draft, PROMPTS[0], Decoding(verifier="dynamic", max_new_tokens=5),
                             trained=head)


def test_nan_logits_are_reported_with_the_step(target, draft):
    import copy

    broken = copy.deepcopy(draft)
    with torch.no_grad():
        broken.lm_head.weight[:] = float("nan")
    with pytest.raises(FloatingPointError, match="draft logits are not finite .* at step 0"):
        speculative_generate(target, broken, PROMPTS[0], Decoding(verifier="strict", K=2, max_new_tokens=5))


def test_ensemble_definition_used_by_engine_bias(target, draft):
    """bias_tv per emitted token equals TV(nu, p) recomputed from the models (first step, first position)."""
    ids = PROMPTS[0]
    out = speculative_generate(target, draft, ids, Decoding(verifier="fixed", weight=0.25, K=1, max_new_tokens=2,
                                                            sampling=Sampling(0)))
    with torch.no_grad():
        p = target(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
        q = draft(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
    nu = ensemble(p[None], q[None], 0.25)[0]
    assert math.isclose(out.bias_tv[0], float(0.5 * (nu - p).abs().sum()), rel_tol=1e-5)


def test_synthetic_acceptance_mode(target, other_draft):
    """Synthetic acceptance a: each draft position is accepted with probability a, whatever the models say."""
    gens = [speculative_generate(target, other_draft, PROMPTS[i % 3],
                                 Decoding(verifier="strict", K=4, max_new_tokens=80, sampling=Sampling(1.0),
                                          synthetic_acceptance=0.7),
                                          seed=i) for i in range(6)]
    s = summarize(gens)
    assert all(abs(r - 0.7) < 0.12 for r in s["acceptance_by_position"][:3]), s["acceptance_by_position"]


def test_logit_mixing_at_low_temperature(target, other_draft):
    """Regression: at T = 0.1 the models' probabilities underflow on each other's tokens (the embedded DAG's
    sweep crashed with NaN in multinomial); the engine mixes log-probabilities instead."""
    import copy

    sharp_t, sharp_d = copy.deepcopy(target), copy.deepcopy(other_draft)
    with torch.no_grad():  # logits as spread out as a 49k-token model's
        sharp_t.lm_head.weight.mul_(20.0)
        sharp_d.lm_head.weight.mul_(20.0)
    for seed in range(3):
        out = speculative_generate(sharp_t, sharp_d, PROMPTS[seed],
                                   Decoding(verifier="fixed", weight=0.5, mixing="logit", K=3, max_new_tokens=40,
                                            sampling=Sampling(0.1)), seed=seed)
        assert len(out.tokens) == 40


def test_manifest_records_the_execution_and_the_run_id_ignores_it(tiny_dir, tmp_path, monkeypatch):
    """Execution settings (the --capture / --no-fastpath flags) are resolved once per run, land in manifest.json,
    never in the run id."""
    from diversed.decoding.settings import Execution
    from diversed.runs.run import Run, RunConfig, execute

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), max_new_tokens=4,
                    temperature=0)
    runs = {}
    for fast in ("1", "0"):
        run = execute(cfg, [{"id": "0", "prompt": "hi"}], tmp_path / fast,
                      launch=Launch(execution=Execution.here("none", fast == "1"), progress=False))
        runs[fast] = (run.name, Run(run).manifest["execution"])
    assert runs["1"][0] == runs["0"][0]
    assert runs["1"][1] == {"capture": "none", "fastpath": True, "threads": torch.get_num_threads()}
    assert runs["0"][1] == {"capture": "none", "fastpath": False, "threads": torch.get_num_threads()}


def test_draft_only_never_emits_ids_past_the_target_vocabulary():
    """A draft whose head is wider than the target's (padding, as load_pair accepts) must not emit the padding ids,
    even when its padding rows score highest."""
    target, wide = tiny_llama(0, vocab=80), tiny_llama(1, vocab=96)
    with torch.no_grad():
        wide.lm_head.weight[80:] = wide.lm_head.weight[:16] * 50  # the padding rows win every argmax
    out = speculative_generate(target, wide, [1, 20, 30], Decoding(verifier="draft", max_new_tokens=12,
                                                                   sampling=Sampling(temperature=0)), vocab_size=96)
    assert len(out.tokens) == 12 and max(out.tokens) < 80


def test_sampling_model_takes_the_target_generation_configs_filters(tiny_dir, tmp_path):
    """sampling: model decodes with the top-k / top-p that transformers' generate would apply with the target's
    generation config (recorded in the manifest), different tokens from the full vocabulary's; the filters come
    from the generation config or from flags, never both."""
    import shutil

    from transformers import GenerationConfig

    from diversed.runs.run import Run, RunConfig, execute

    target = tmp_path / "target"
    shutil.copytree(tiny_dir / "tiny-target", target)
    GenerationConfig(do_sample=True, top_k=3, top_p=0.7, eos_token_id=None).save_pretrained(target)
    prompts = [{"id": str(i), "prompt": f"ab{i}"} for i in range(4)]
    base = dict(target=str(target), draft=str(tiny_dir / "tiny-draft-l1"), max_new_tokens=24, temperature=1.0)
    runs = {s: Run(execute(RunConfig(sampling=s, **base), prompts, tmp_path / s, launch=Launch(progress=False)))
            for s in ("model", "full")}
    assert runs["model"].manifest["decoding"]["sampling"] == {"temperature": 1.0, "top_p": 0.7, "top_k": 3}
    assert runs["full"].manifest["decoding"]["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    tokens = {s: [g["tokens"] for g in run.generations] for s, run in runs.items()}
    assert tokens["model"] != tokens["full"]
    from diversed.runs.settings import model_filters

    assert model_filters(GenerationConfig()) == (50, 1.0)  # generate's defaults where the model's file sets none
    assert model_filters(GenerationConfig(top_p=0.9)) == (50, 0.9)  # Llama 3's
    with pytest.raises(ValueError, match="give --top-k / --top-p only with --sampling full"):
        RunConfig(sampling="model", top_k=5, **base).validate()
    with pytest.raises(ValueError, match="unknown sampling 'nucleus'; allowed: full, model"):
        RunConfig(sampling="nucleus", **base).validate()
    with pytest.raises(ValueError, match="top_k must be an integer >= 0"):
        RunConfig(top_k=-1, **base).validate()


@pytest.mark.parametrize("verifier", ["fixed", "autoregressive"])
def test_a_stop_ends_a_row_at_the_step_that_meets_it_in_any_batch(target, draft, verifier):
    """Ends.stop (a stop string) ends a row after the step whose tokens meet it (stop = "stop"); the other rows
    and the row's own tokens are those of a batch of one."""
    from diversed.decoding.engine import Ends, Networks, generate

    decoding = Decoding(verifier, weight=0.5 if verifier == "fixed" else None, K=3, max_new_tokens=30,
                        sampling=Sampling(1.0))
    free = generate(Networks(target, draft), PROMPTS, decoding, batch_size=3)
    marker = free[1].tokens[10]  # a token prompt 1 emits

    def stop(i, tokens):
        return marker in tokens

    batched = generate(Networks(target, draft), PROMPTS, decoding, batch_size=3, ends=Ends(stop=stop))
    alone = [generate(Networks(target, draft), [p], decoding, seeds=[i], ends=Ends(stop=stop))[0]
             for i, p in enumerate(PROMPTS)]
    assert [g.tokens for g in batched] == [g.tokens for g in alone]
    row = batched[1]
    assert row.stop == "stop" and marker in row.tokens and len(row.tokens) < 30
    cut = row.tokens.index(marker)
    assert row.tokens == free[1].tokens[:len(row.tokens)] and len(row.tokens) - cut <= 4  # the step's tokens kept
    for g, f in zip(batched, free, strict=True):
        assert (g.stop == "stop") == (marker in f.tokens) and (g.stop != "stop" or g.tokens == f.tokens[:len(g.tokens)])


def test_the_prefill_is_timed_apart_from_the_decode_steps(target, draft, monkeypatch):
    """#49: a row's clock starts once its prefill has finished on the device (a synchronisation there: on a GPU the
    prefill's kernels were still queued when the clock started, on a CPU they were not), and the prefill is
    timed on its own: the same definition on both."""
    import time

    from diversed.decoding import engine, stepper

    call = stepper.Stepper.__call__

    def slow_prefill(self, ids, rows=None, lengths=None, last_only=False):
        if ids.shape[-1] > 10:  # the 36-token prompt's prefill; a step feeds at most K + 1 = 4 tokens
            time.sleep(0.3)
        return call(self, ids, rows, lengths, last_only)

    monkeypatch.setattr(stepper.Stepper, "__call__", slow_prefill)
    synced = []
    monkeypatch.setattr(engine, "synchronize", lambda device: synced.append(device))
    d = Decoding("strict", K=3, max_new_tokens=6, sampling=Sampling(temperature=0.0), eos_token_id=())
    (gen,) = engine.generate(engine.Networks(target, draft), [list(range(3, 40))], d)
    assert gen.time_prefill >= 0.6 and gen.time_total < 0.3  # two models prefilled; the decode alone after
    assert len(synced) >= 3  # before the prefill, after it, at the row's end
    assert gen.stats()["time_prefill"] == gen.time_prefill


@pytest.mark.parametrize("verifier", ["strict", "autoregressive"])
def test_the_first_token_is_timed_from_the_end_of_the_prefill(target, draft, monkeypatch, verifier):
    """TTFT's second part: a row's first token is timed when it reaches the host, from the end of its prefill; a
    slow first step shows in it, a slow later step does not."""
    import time

    from diversed.decoding import engine

    step = {"strict": engine.speculative_step, "autoregressive": engine.alone_step}[verifier]
    calls = []

    def slow_first(*args, **kw):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)
        elif len(calls) == 2:
            time.sleep(1.0)
        return step(*args, **kw)

    monkeypatch.setattr(engine, {"strict": "speculative_step", "autoregressive": "alone_step"}[verifier], slow_first)
    d = Decoding(verifier, K=3, max_new_tokens=12, sampling=Sampling(temperature=0.0), eos_token_id=())
    (gen,) = engine.generate(engine.Networks(target, draft), [list(range(3, 20))], d)
    assert len(calls) >= 2 and 0.3 <= gen.time_first < 1.0 and gen.time_total >= gen.time_first + 1.0, (
        len(calls), gen.time_first, gen.time_total)
