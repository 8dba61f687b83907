"""diversed audit: a results folder whose timed runs are its scored runs passes; an edited token, a timing at
another knob, a doctored counter or an unscored timed prompt fails, naming the file and the check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import rewrite_generations

from diversed.analysis.audit import ACCOUNTING, SAME_SETTING, TIMED_EQUALS_SCORED, TIMED_IS_SCORED, WHOLE, audit
from diversed.cli import main
from diversed.runs.run import RunConfig, execute
from diversed.runs.settings import Launch

PROMPTS = [{"id": str(i), "prompt": f"Tell me about {i} things."} for i in range(6)]
SCORED, TIMED = "runs/tiny/none/fixed/T1.0-K4-s0", "timing/tiny/none/fixed/T1.0-K4"


def decode(tiny_dir: Path, run_dir: Path, prompts: list[dict], weight: float = 0.5, **labels) -> Path:
    from diversed.runs.evaluate import score_run

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="fixed",
                    weight=weight, K=4, temperature=1.0, max_new_tokens=24)
    run = execute(cfg, prompts, run_dir=run_dir, launch=Launch(progress=False),
                  labels={"pair": "tiny", "method": "fixed", **labels})
    score_run(run)
    return run


@pytest.fixture(scope="module")
def results(tiny_dir, tmp_path_factory) -> Path:
    """A scored run on 6 prompts and its timing run on the first 3, both at batch 1."""
    root = tmp_path_factory.mktemp("results")
    decode(tiny_dir, root / SCORED, PROMPTS)
    decode(tiny_dir, root / TIMED, PROMPTS[:3], timing="1")
    return root


@pytest.fixture
def tree(results, tmp_path) -> Path:
    return Path(shutil.copytree(results, tmp_path / "results"))


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]


def failed(root: Path) -> list:
    return [f for f in audit(root) if not f.ok]


def test_timed_runs_that_are_the_scored_runs_pass(tree, capsys):
    findings = audit(tree)
    assert findings and all(f.ok for f in findings), [f.line() for f in findings if not f.ok]
    assert {f.check for f in findings} == {ACCOUNTING, TIMED_IS_SCORED, SAME_SETTING, TIMED_EQUALS_SCORED}
    assert next(f for f in findings if f.check == TIMED_EQUALS_SCORED).detail.startswith("3/3 token-identical")
    main(["audit", str(tree), "--out", str(tree / "audit.txt")])
    assert "timed = scored: 1 of 1 passed" in (tree / "audit.txt").read_text()


def test_one_edited_token_fails_the_timed_run(tree, capsys):
    timed = rows(tree / TIMED)
    longest = max(timed, key=lambda r: len(r["tokens"]))
    longest["tokens"][0] = (longest["tokens"][0] + 1) % 90  # the rows resealed: only the tokens tell
    rewrite_generations(tree / TIMED, timed)
    bad = failed(tree)
    assert [f.check for f in bad] == [TIMED_EQUALS_SCORED] and str(tree / TIMED) in bad[0].path
    assert "2/3 token-identical" in bad[0].detail
    with pytest.raises(SystemExit) as exit_:
        main(["audit", str(tree)])
    assert exit_.value.code == 1 and f"FAIL timed = scored: {tree / TIMED}" in capsys.readouterr().out
    (tree / TIMED / "generations.jsonl").write_text("{}\n")  # not resealed: the run is not whole
    assert [f.check for f in failed(tree)] == [WHOLE]


def test_a_timing_at_another_knob_fails(tree, tiny_dir):
    shutil.rmtree(tree / TIMED)
    decode(tiny_dir, tree / TIMED, PROMPTS[:3], weight=0.7, timing="1")
    bad = {f.check: f for f in failed(tree)}
    assert SAME_SETTING in bad and "'weight': 0.7" in bad[SAME_SETTING].detail


def test_a_doctored_counter_fails_the_accounting(tree):
    scored = rows(tree / SCORED)
    scored[0]["accepted"][0] = scored[0]["drafted"][0] + 1  # accepts more than it drafted: alpha > 1
    rewrite_generations(tree / SCORED, scored)
    bad = failed(tree)
    assert bad[0].check == ACCOUNTING and bad[0].path == str(tree / SCORED / "generations.jsonl")
    assert "row 0: a step accepts more than it drafted" in bad[0].detail

    timed = tree / TIMED / "manifest.json"
    manifest = json.loads(timed.read_text())
    manifest["summary"]["mean_acceptance_length"] += 0.5  # tau written wrong
    timed.write_text(json.dumps(manifest))
    doctored = [f for f in failed(tree) if f.path == str(tree / TIMED / "generations.jsonl")]
    assert doctored and "manifest summary mean_acceptance_length" in doctored[0].detail
    manifest["summary"]["steps"] = "many"  # not a number at all: a finding, not a traceback
    timed.write_text(json.dumps(manifest))
    assert "manifest summary steps 'many'" in next(f for f in failed(tree) if f.path.startswith(str(tree / TIMED))
                                                   ).detail


def test_an_eos_before_the_end_and_an_unscored_timed_prompt_fail(tree, tiny_dir):
    scored = rows(tree / SCORED)
    ended = next(r for r in scored if r["stop"] == "eos")  # prompt 1 ends at the tiny target's EOS
    other = next(r for r in scored if r is not ended and len(r["tokens"]) > 2)
    other["tokens"][0] = ended["tokens"][-1]
    rewrite_generations(tree / SCORED, scored)
    assert any("an EOS token before its end" in f.detail for f in failed(tree))
    shutil.rmtree(tree / TIMED)
    decode(tiny_dir, tree / TIMED, [*PROMPTS[:2], {"id": "x", "prompt": "Not among the scored prompts."}],
           timing="1")
    bad = {f.check: f for f in failed(tree)}
    assert TIMED_IS_SCORED in bad and "without a score in the scored run: x" in bad[TIMED_IS_SCORED].detail


def test_the_target_alone_timed_at_another_K_is_the_same_setting(tiny_dir, tmp_path):
    """Regression (the smoke workflow): the target alone's sweep point at K = 3 and its timing at the default K = 5
    are one decode; K decides nothing without drafts."""
    from diversed.runs.evaluate import score_run

    for folder, K in (("sweeps/p/none/T1.0-K3/autoregressive", 3), ("sweep_timing/p/none/T1.0-K3/autoregressive", 5)):
        cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"),
                        verifier="autoregressive", K=K, temperature=1.0, max_new_tokens=12)
        score_run(execute(cfg, PROMPTS[:2], run_dir=tmp_path / folder, launch=Launch(progress=False)))
    findings = audit(tmp_path)
    assert {f.check for f in findings} >= {SAME_SETTING, TIMED_EQUALS_SCORED} and all(f.ok for f in findings), [
        f.line() for f in findings]


def test_across_batch_sizes_only_a_quality_shown_to_differ_fails(tree, tiny_dir):
    """Timed at batch 1, scored at batch 2: tokens may differ by float rounding. A timed prompt that differs passes
    while the timed prompts' quality is not shown to differ by more than the tolerance (0.1 nats of target
    log-probability); every timed row 5 nats lower is shown to differ, and fails."""
    shutil.rmtree(tree / SCORED)
    from diversed.runs.evaluate import score_run

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="fixed",
                    weight=0.5, K=4, temperature=1.0, max_new_tokens=24)
    score_run(execute(cfg, PROMPTS, run_dir=tree / SCORED, launch=Launch(progress=False, batch_size=2),
                      labels={"pair": "tiny", "method": "fixed"}))
    timed = rows(tree / TIMED)
    longest = max(timed, key=lambda r: len(r["tokens"]))
    longest["tokens"][-1] = (longest["tokens"][-1] + 1) % 90  # as if rounding changed its last sampled token
    rewrite_generations(tree / TIMED, timed)
    check = next(f for f in audit(tree) if f.check == TIMED_EQUALS_SCORED)
    assert check.ok and "2/3 token-identical (timed at batch 1, scored at 2)" in check.detail, check.detail
    for row in timed:
        row["target_logprob"] -= 5.0
    rewrite_generations(tree / TIMED, timed)
    check = next(f for f in audit(tree) if f.check == TIMED_EQUALS_SCORED)
    assert not check.ok and "shown to differ by more than the tolerance 0.1" in check.detail, check.detail
