"""The report's claims: paired evidence and verdicts computed from runs, each verdict able to come out either way."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from diversed.claims import FAILS, HOLDS, INCONCLUSIVE, acceptance_identity, relaxed_raises_acceptance, static_front


def prompt_rows(acceptance: dict[str, float], prompts: int = 12, seeds: int = 2, noise: float = 0.05) -> pd.DataFrame:
    """A prompt table of one pair and task at T = 1, K = 5: each method's per-prompt acceptance around its level."""
    rng = random.Random(0)
    rows = [{"pair": "p", "task": "arith", "method": method, "head_task": "", "temperature": 1.0, "K": 5,
             "weight": {"strict": 1.0, "fixed": 0.5}.get(method),
             "seed": seed, "prompt": str(i), "draft_acceptance_rate": level + rng.uniform(-noise, noise),
             "quality": 0.5}
            for method, level in acceptance.items() for seed in range(seeds) for i in range(prompts)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("levels", "verdict"), [
    ({"strict": 0.2, "dynamic": 0.6, "fixed": 0.5}, HOLDS),
    ({"strict": 0.6, "dynamic": 0.2, "fixed": 0.5}, FAILS),
    ({"strict": 0.4, "dynamic": 0.4, "fixed": 0.4}, INCONCLUSIVE),
])
def test_relaxed_acceptance_verdict_follows_the_paired_interval(levels, verdict):
    claim = relaxed_raises_acceptance(prompt_rows(levels), 1.0)
    assert claim.verdict == verdict
    assert "p/arith dynamic:" in claim.evidence and "(n=24)" in claim.evidence


def test_a_fixed_run_at_w_1_is_strict_and_not_evidence_about_relaxed_verification():
    """Regression: where the sweep kept w = 1, the fixed runs are strict's, their difference is 0 ± 0, and the
    claim came out inconclusive although DIVERSED clearly raised acceptance."""
    rows = prompt_rows({"strict": 0.2, "dynamic": 0.6, "fixed": 0.2})
    for kept in (1.0, None):  # w = 1, or the verifier strict itself (no weight), as the workflow runs it
        rows.loc[rows["method"] == "fixed", "weight"] = kept
        claim = relaxed_raises_acceptance(rows, 1.0)
        assert claim.verdict == HOLDS and "fixed: the sweep chose w = 1 (strict)" in claim.evidence


def test_static_front_needs_acceptance_falling_with_w():
    grid = [(1.0, "strict", 0.2), (0.0, "fixed", 0.9), (0.3, "fixed", 0.7), (0.6, "fixed", 0.5)]
    sweeps = pd.DataFrame([{"pair": "p", "task": "arith", "K": 5, "temperature": 1.0, "verifier": v, "weight": w,
                            "mixing": "linear", "draft_acceptance_rate": a, "run_id": str(w)} for w, v, a in grid])
    assert static_front(sweeps, 1.0).verdict == HOLDS
    sweeps["draft_acceptance_rate"] = 0.2 + 0.5 * sweeps["weight"]  # rising with w
    assert static_front(sweeps, 1.0).verdict == FAILS


def test_acceptance_identity_on_real_runs(tiny_dir, tmp_path):
    """Observed acceptance per tested position matches 1 - w TV(p, q) on fixed-w runs of the tiny pair; the same
    positions read with a wrong w (the identity broken) fail."""
    import json

    from diversed.runs import RunConfig, execute

    prompts = [{"id": str(i), "prompt": f"Tell me about {i} things."} for i in range(16)]
    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="fixed",
                    weight=0.5, K=4, temperature=1.0, max_new_tokens=40)
    run = execute(cfg, prompts, tmp_path, progress=False)
    runs = pd.DataFrame([{"pair": "tiny", "method": "fixed", "temperature": 1.0, "mixing": "linear",
                          "run_dir": str(run)}])
    claim = acceptance_identity(runs, 1.0)
    assert claim.verdict == HOLDS, claim.evidence
    rows = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]
    for row in rows:
        row["weights"] = [[0.9] * len(step) for step in row["weights"]]  # claims w = 0.9: predicts far less
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    broken = acceptance_identity(runs, 1.0)
    assert broken.verdict == FAILS, broken.evidence


@pytest.mark.parametrize(("levels", "verdict"), [({"arith": 0.3, "open": 0.8}, HOLDS),
                                                 ({"arith": 0.5, "open": 0.5}, INCONCLUSIVE)])
def test_learned_w_varies_between_tasks_and_within_a_prompt(levels, verdict):
    from diversed.claims import weight_varies

    rng = random.Random(0)
    weights = pd.DataFrame([{"pair": "p", "task": task, "head_task": None, "temperature": 1.0, "seed": 0,
                             "prompt": str(i), "position": j + 1, "w": level + rng.uniform(-0.1, 0.1)}
                            for task, level in levels.items() for i in range(10) for j in range(5)])
    assert weight_varies(weights, 1.0).verdict == verdict


def test_transferred_head_is_compared_with_the_task_own_head():
    from diversed.claims import transfer_worse

    df = prompt_rows({"dynamic": 0.6})
    own, other = df.copy(), df.assign(head_task="open")
    own["quality"], other["quality"] = 0.6, 0.3 + 0.01 * other["seed"]
    claim = transfer_worse(pd.concat([own, other]))
    assert claim.verdict == HOLDS and "p/arith own - open head: quality +0.29" in claim.evidence
    own["quality"] = 0.1
    assert transfer_worse(pd.concat([own, other])).verdict == FAILS
