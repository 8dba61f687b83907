"""The static frontier: a grid of fixed weights, scored, and the choice of the task's fixed w."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from diversed.runs import RunConfig
from diversed.sweep import choose, choose_runs, grid, point_name, sweep_point, sweep_weight


def row(verifier, w, alpha, quality, mixing="linear"):
    return {"verifier": verifier, "weight": w, "mixing": mixing, "draft_acceptance_rate": alpha, "quality": quality,
            "metric": "accuracy"}


def test_choose_picks_largest_acceptance_within_tolerance():
    rows = [row("strict", 1.0, 0.1, 0.50), row("fixed", 0.7, 0.3, 0.50), row("fixed", 0.5, 0.5, 0.49),
            row("fixed", 0.2, 0.8, 0.30), row("fixed", 0.5, 0.6, 0.485, "logit")]
    c = choose(rows, 0.02)
    assert (c["weight"], c["mixing"], c["draft_acceptance_rate"]) == (0.5, "logit", 0.6)
    assert choose(rows, 0.0)["weight"] == 0.7
    # nothing relaxed keeps quality: fall back to strict
    assert choose([row("strict", 1.0, 0.1, 0.5), row("fixed", 0.3, 0.9, 0.1)], 0.01)["weight"] == 1.0


def test_choose_skips_points_of_unknown_quality():
    """Regression: a None quality (an unscored point) raised TypeError."""
    rows = [row("strict", 1.0, 0.1, 0.5), row("fixed", 0.2, 0.9, None), row("fixed", 0.5, 0.4, 0.5)]
    assert choose(rows, 0.02)["weight"] == 0.5
    unknown_strict = [row("strict", 1.0, 0.1, None), row("fixed", 0.5, 0.4, 0.5)]
    assert choose(unknown_strict, 0.02)["weight"] == 1.0  # nothing can be shown to keep quality
    with pytest.raises(ValueError, match="strict point"):
        choose(rows[1:], 0.02)


def test_sweep_weight_on_tiny_pair(tiny_dir, tmp_path):
    base = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), K=3,
                     temperature=1.0, max_new_tokens=8, task="arith", n=3)
    choice = sweep_weight(base, tmp_path, weights=(0.0, 0.5), mixings=("linear", "logit"), progress=False)
    df = pd.read_csv(tmp_path / "sweep.csv")
    assert len(df) == 5 and set(df["verifier"]) == {"strict", "fixed"}
    lin = df[df["mixing"] == "linear"].set_index("weight")
    assert lin.loc[0.0, "draft_acceptance_rate"] == 1.0  # w = 0: nu = q, every draft accepted
    assert lin.loc[0.0, "draft_acceptance_rate"] >= lin.loc[1.0, "draft_acceptance_rate"]
    assert lin.loc[1.0, "bias_tv"] == 0.0
    saved = json.loads((tmp_path / "choice.json").read_text())
    assert saved["weight"] == choice["weight"] and saved["task"] == "arith"
    assert saved["config"]["verifier"] == "strict" and saved["config"]["weight"] is None
    assert (tmp_path / "sweep.md").read_text().startswith("|")

    # the workflow's way: one point per job, then the choice; same runs, same choice
    points = tmp_path / "points"
    runs = [sweep_point(base, w, m, points / point_name(w, m), progress=False)
            for w, m in grid((0.0, 0.5), ("linear", "logit"))]
    again = choose_runs(runs, points)
    assert pd.read_csv(points / "sweep.csv")["run_id"].tolist() == df["run_id"].tolist()
    assert again == choice


def test_grid_is_strict_then_each_mixing():
    assert grid((0.0, 0.5, 1.0), ("linear", "logit")) == [(1.0, "linear"), (0.0, "linear"), (0.5, "linear"),
                                                         (0.0, "logit"), (0.5, "logit")]
    assert point_name(1, "linear") == "w1.0-linear"


def test_sweep_needs_a_task_and_valid_weights(tmp_path):
    with pytest.raises(ValueError, match="needs a task"):
        sweep_weight(RunConfig(), tmp_path)
    with pytest.raises(ValueError, match="must be in \\[0, 1\\], got 1.5"):
        sweep_weight(RunConfig(task="arith"), tmp_path, weights=(1.5,))
