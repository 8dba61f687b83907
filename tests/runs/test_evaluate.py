"""Scoring through lm-eval, offline: live decoding with the `diversed` model, replay of stored runs
(`diversed-replay`), corpus metrics."""

from __future__ import annotations

import dataclasses
import json

import pytest
from helpers import seal_run

from diversed.runs.evaluate import DiversedLM, ReplayLM, evaluate, score_run
from diversed.runs.run import Run, RunConfig, execute, prompt_hash, task_prompts
from diversed.runs.settings import Launch
from diversed.utils import write_json, write_jsonl

ROWS = [{"question": f"Tom has {a} apples and gets {b} more. How many apples does Tom have?", "answer": str(a + b)}
        for a, b in [(2, 3), (4, 1), (5, 5), (1, 7), (3, 3)]]


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")  # the rows are the eval split (one file per split)
    (folder / "arith-eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(folder / "arith-{split}.jsonl")


@pytest.fixture(scope="module")
def greedy_run(tiny_dir, task_file, tmp_path_factory):
    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="fixed",
                    weight=0.5, K=3, temperature=0.0, max_new_tokens=16, task="arith", data_files=task_file)
    return execute(cfg, task_prompts(cfg), tmp_path_factory.mktemp("runs"), launch=Launch(progress=False))


def test_replay_scoring_writes_scores(greedy_run):
    path = score_run(greedy_run)
    s = Run(greedy_run).scores
    assert path.name == "scores.json" and s["task"] == "arith" and s["metric"] == "accuracy"
    assert 0.0 <= s["quality"] <= 1.0 and len(s["per_example"]) == 5
    rows = Run(greedy_run).generations
    assert {r["prompt_hash"] for r in rows} == {e["prompt_hash"] for e in s["per_example"]}
    assert s["fidelity"]["target_logprob"] < 0 and 0 <= s["fidelity"]["target_argmax_agreement"] <= 1


def test_replay_scores_match_direct_scoring(greedy_run):
    """lm-eval's numbers equal the task scorer applied by hand to the stored completions."""
    from diversed.tasks import Example, get_task

    s = json.loads(score_run(greedy_run).read_text())
    rows = Run(greedy_run).generations
    task = get_task("arith")
    direct = [task.score(r["completion"], Example(r["id"], r["prompt"], r["reference"]))["accuracy"] for r in rows]
    assert s["quality"] == pytest.approx(sum(direct) / len(direct))
    # a known-correct completion scores 1 through the same lm-eval path
    fake = [{"prompt_hash": r["prompt_hash"], "completion": f"The answer is {r['reference']}"} for r in rows]
    result = evaluate(ReplayLM(fake), "arith", rows, max_gen_toks=16)
    assert result["aggregate"]["accuracy"] == 1.0


def test_live_lm_eval_model_decodes_like_the_run(tiny_dir, greedy_run):
    """The `diversed` lm-eval model decodes with our engine: greedy output equals the stored run."""
    rows = Run(greedy_run).generations
    lm = DiversedLM.create_from_arg_string(
        f"target={tiny_dir / 'tiny-target'},draft={tiny_dir / 'tiny-draft-l1'},verifier=fixed,weight=0.5,K=3,"
        "temperature=0,max_new_tokens=16")
    result = evaluate(lm, "arith", rows, max_gen_toks=16)
    replayed = evaluate(ReplayLM.create_from_arg_string(f"run={greedy_run}"), "arith", rows, max_gen_toks=16)
    assert result["per_example"] == replayed["per_example"]


def test_live_lm_eval_model_batches_its_requests_with_the_same_completions(tiny_dir, greedy_run):
    """batch_size (as lm-eval's own HF model takes it): requests decode together, sampled too, each from its own
    generator, so the completions are those of batch 1."""
    rows = Run(greedy_run).generations
    args = (f"target={tiny_dir / 'tiny-target'},draft={tiny_dir / 'tiny-draft-l1'},verifier=fixed,weight=0.5,K=3,"
            "temperature=1.0,max_new_tokens=16")
    from types import SimpleNamespace

    requests = [SimpleNamespace(args=(r["prompt"], {"max_gen_toks": 8 + 4 * (i % 2)})) for i, r in enumerate(rows)]
    one, four = (DiversedLM.create_from_arg_string(args + extra).generate_until(requests, disable_tqdm=True)
                 for extra in ("", ",batch_size=4"))
    assert one == four and len(set(one)) > 1
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        DiversedLM.create_from_arg_string(args + ",batch_size=0")


def test_replay_of_unknown_prompt_is_a_clear_error(greedy_run):
    rows = Run(greedy_run).generations
    other = [dict(rows[0], prompt="a prompt that was never decoded")]
    with pytest.raises(KeyError, match="no stored generation"):
        evaluate(ReplayLM(rows), "arith", other, max_gen_toks=16)


def test_open_ended_run_gets_fidelity_only(tiny_dir, tmp_path):
    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="strict",
                    K=3, temperature=1.0, max_new_tokens=8, task="open", n=3)
    run = execute(cfg, task_prompts(cfg), tmp_path, launch=Launch(progress=False))
    s = json.loads(score_run(run).read_text())
    assert s["metric"] == "target_logprob" and s["quality"] == s["fidelity"]["target_logprob"]


def test_strict_greedy_run_agrees_with_target_everywhere(tiny_dir, task_file, tmp_path):
    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="strict",
                    K=3, temperature=0.0, max_new_tokens=12, task="arith", data_files=task_file)
    run = execute(cfg, task_prompts(cfg), tmp_path, launch=Launch(progress=False))
    s = json.loads(score_run(run).read_text())
    assert s["fidelity"]["target_argmax_agreement"] == 1.0


def test_lm_eval_command_line_with_the_diversed_model(tiny_dir, tmp_path, capsys):
    """lm-eval's own CLI (through `diversed lm-eval`, which registers the model) on an exported task."""
    from diversed.cli import main

    main(["export-task", "--task", "arith", "-n", "3", "--max-new-tokens", "8", "--out", str(tmp_path / "t")])
    assert "diversed_arith" in capsys.readouterr().out
    main(["lm-eval", "--model", "diversed", "--model_args",
          f"target={tiny_dir / 'tiny-target'},draft={tiny_dir / 'tiny-draft-l1'},verifier=fixed,weight=0.5,"
          "temperature=0,max_new_tokens=8", "--tasks", "diversed_arith", "--include_path", str(tmp_path / "t"),
          "--output_path", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "diversed_arith" in out and "accuracy" in out


@pytest.mark.parametrize(("model", "args", "message"), [
    ("diversed", "verifer=fixed", "unknown model_args verifer for model diversed; allowed: target, draft,"),
    ("diversed", "replay=results/runs/x", "unknown model_args replay for model diversed; allowed:"),
    ("diversed", "K=three", "model_args K='three' must be of type int"),
    ("diversed", "prompt_format=plain", "unknown prompt format .plain.; allowed: chat, raw"),
    ("diversed", "verifier", "model_args must be name=value pairs"),
    ("diversed-replay", "run_dir=x", "unknown model_args run_dir for model diversed-replay; allowed: run"),
    ("diversed-replay", "", "needs model_args run=RUN_DIR"),
])
def test_unknown_or_bad_model_args_are_an_error(model, args, message):
    """A misspelt model_arg is refused by name before anything loads (it used to be silently ignored)."""
    from lm_eval.api.registry import get_model

    with pytest.raises(ValueError, match=message):
        get_model(model).create_from_arg_string(args)


def test_live_model_loads_nothing_until_asked():
    lm = DiversedLM.create_from_arg_string("target=no-such-org/no-such-model,verifier=fixed,weight=0.5,K=3")
    assert lm.cfg.weight == 0.5 and lm.cfg.K == 3 and lm.cfg.temperature == 0.0
    assert "pair" not in vars(lm)


def test_misspelt_model_arg_on_the_lm_eval_command_line(tmp_path):
    from diversed.cli import main

    main(["export-task", "--task", "arith", "-n", "2", "--out", str(tmp_path / "t")])
    with pytest.raises(ValueError, match="unknown model_args verifer"):
        main(["lm-eval", "--model", "diversed", "--model_args", "target=embedded,verifer=fixed,weight=0.5",
              "--tasks", "diversed_arith", "--include_path", str(tmp_path / "t")])


WMT_REFS = ["The cat sat on the mat today.", "A quick brown fox jumps over the lazy dog near the river.",
            "It is raining in Berlin."]
WMT_HYPS = ["The cat sat on the mat today.", "A fox jumps.\nNotes that follow the translation.", "It rains in Berlin."]


def test_wmt16_headline_is_corpus_bleu(tmp_path):
    """scores.json's quality for wmt16-de-en is sacrebleu's corpus BLEU, not the mean sentence BLEU."""
    import sacrebleu

    prompts = [f"Translate the following German text to English.\n\nSatz {i}" for i in range(len(WMT_REFS))]
    rows = [{"id": str(i), "prompt": p, "prompt_hash": prompt_hash(p), "reference": r, "completion": h}
            for i, (p, r, h) in enumerate(zip(prompts, WMT_REFS, WMT_HYPS, strict=True))]
    run = tmp_path / "run"
    write_jsonl(run / "generations.jsonl", rows)
    write_json(run / "manifest.json", {"run_id": "wmt", "config": {"task": "wmt16-de-en", "max_new_tokens": 32}})
    seal_run(run)
    s = Run(score_run(run).parent).scores
    hyps = [h.split("\n")[0] for h in WMT_HYPS]
    corpus = sacrebleu.corpus_bleu(hyps, [WMT_REFS]).score
    sentence = [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hyps, WMT_REFS, strict=True)]
    assert abs(corpus - sum(sentence) / len(sentence)) > 1
    assert s["metric"] == "bleu" and s["quality"] == pytest.approx(corpus)
    assert s["aggregate"]["sentence_bleu"] == pytest.approx(sum(sentence) / len(sentence))
    assert [e["sentence_bleu"] for e in s["per_example"]] == pytest.approx(sentence)


def test_a_finished_run_is_scored_again_offline_under_another_scoring(greedy_run, monkeypatch):
    """diversed score RUN --scoring S re-scores the stored completions (no decoding: the engine is never called)
    and records the scoring in scores.json and in the run's table row."""
    import diversed.decoding.engine as engine
    from diversed.cli import main

    monkeypatch.setattr(engine, "generate", lambda *a, **k: pytest.fail("re-scoring decoded"))
    assert Run(greedy_run).manifest["config"]["scoring"] == "standard"
    main(["score", str(greedy_run), "--scoring", "authors"])
    authors = Run(greedy_run).scores
    assert authors["scoring"] == "authors" and Run(greedy_run).row()["scoring"] == "authors"
    main(["score", str(greedy_run)])  # its own scoring again
    standard = Run(greedy_run).scores
    assert standard["scoring"] == "standard" and standard["quality"] == authors["quality"]  # arith: no stop marker


def test_stop_strings_end_on_the_text_of_the_newest_tokens(tiny_dir):
    from transformers import AutoTokenizer

    from diversed.decoding.engine import stop_at

    tok = AutoTokenizer.from_pretrained(tiny_dir / "tiny-target")
    stop = stop_at(tok, ("\n\nQuestion:",))
    assert stop(0, tok.encode("18 eggs.\n#### 18\n\nQuestion: Ann", add_special_tokens=False))
    assert not stop(0, tok.encode("18 eggs.\n#### 18\n\nAnswer", add_special_tokens=False))
    assert not stop_at(tok, ("",))(0, tok.encode("anything", add_special_tokens=False))


def test_scoring_lists_no_environment(greedy_run, monkeypatch):
    """Scoring a run does not run lm-eval's environment report (torch's collect_env lists pip and conda packages in
    subprocesses, 0.6 s a scored run), and lm-eval's own report is back afterwards."""
    import lm_eval.evaluator
    import torch.utils.collect_env

    report = lm_eval.evaluator.add_env_info
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: pytest.fail("environment listed"))
    score_run(greedy_run)
    assert lm_eval.evaluator.add_env_info is report


def test_a_tracked_run_does_not_list_the_installed_packages(monkeypatch):
    """W&B is not asked to save the installed packages with each run (each manifest's provenance has them)."""
    import wandb

    from diversed.tracking import Tracker

    seen = {}
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(wandb, "init", lambda **kw: seen.update(kw))
    Tracker(name="n", group="g", job_type="decode")
    assert seen["mode"] == "offline" and seen["settings"].x_save_requirements is False


def test_the_authors_decode_runs_on_past_the_marker_their_scoring_cuts_at(tiny_dir, tmp_path, monkeypatch):
    """#47 item 1: stop length (the authors' decode) runs to max_new_tokens or EOS and cuts only when scored; stop
    markers ends at the marker: fewer tokens, so other acceptance and time, and the same scored text."""
    from diversed.tasks import get_task
    from diversed.tasks.arith import Arith

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), task="arith", n=2,
                    max_new_tokens=24, temperature=0.0, scoring="authors", stop="length")
    prompts = task_prompts(cfg)
    runs = {"length": execute(cfg, prompts, tmp_path / "length", launch=Launch(progress=False))}
    first = Run(runs["length"]).generations[0]["completion"]
    monkeypatch.setattr(Arith, "stops", (first[4:6],))  # a marker the decode meets early
    runs["length"] = execute(cfg, prompts, tmp_path / "length", launch=Launch(progress=False))
    runs["markers"] = execute(dataclasses.replace(cfg, stop="markers"), prompts, tmp_path / "markers",
                              launch=Launch(progress=False))
    rows = {name: Run(path).generations for name, path in runs.items()}
    assert [len(r["tokens"]) for r in rows["length"]] == [24, 24]
    assert len(rows["markers"][0]["tokens"]) < 24 and rows["markers"][0]["stop"] == "stop"
    task = get_task("arith")
    for a, b in zip(rows["length"], rows["markers"], strict=True):
        assert task.scored_text(a["completion"], "authors") == task.scored_text(b["completion"], "authors")
    assert Run(runs["length"]).manifest["run_id"] != Run(runs["markers"]).manifest["run_id"]
