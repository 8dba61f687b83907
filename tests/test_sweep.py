"""The static frontier: a grid of fixed weights, scored, and the choice of the task's fixed w."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pandas as pd
import pytest

from diversed.runs import RunConfig
from diversed.sweep import COLUMNS, choose, choose_runs, grid, point_name, sweep_point, sweep_weight


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
                     temperature=1.0, max_new_tokens=8, task="arith", split="dev", n=3)
    choice = sweep_weight(base, tmp_path, weights=(0.0, 0.5), mixings=("linear", "logit"), progress=False)
    df = pd.read_csv(tmp_path / "sweep.csv")
    assert len(df) == 5 and set(df["verifier"]) == {"strict", "fixed"}
    assert set(df["split"]) == {"dev"} and set(df["prompts"]) == {3}
    lin = df[df["mixing"] == "linear"].set_index("weight")
    assert lin.loc[0.0, "draft_acceptance_rate"] == 1.0  # w = 0: nu = q, every draft accepted
    assert lin.loc[0.0, "draft_acceptance_rate"] >= lin.loc[1.0, "draft_acceptance_rate"]
    assert lin.loc[1.0, "bias_tv"] == 0.0
    saved = json.loads((tmp_path / "choice.json").read_text())
    assert saved["weight"] == choice["weight"] and saved["task"] == "arith"
    assert saved["config"]["verifier"] == "strict" and saved["config"]["weight"] is None
    assert (tmp_path / "sweep.md").read_text().startswith("|")

    # a rerun keeps the finished points (a sweep stopped by a time limit resumes) and redoes what is missing
    runs = sorted(p for p in tmp_path.iterdir() if (p / "manifest.json").is_file())
    finished = {p.name: json.loads((p / "manifest.json").read_text())["finished"] for p in runs}
    shutil.rmtree(tmp_path / point_name(0.5, "logit"))
    (tmp_path / point_name(0.0, "logit") / "scores.json").unlink()  # decoded, never scored: not finished
    again = sweep_weight(base, tmp_path, weights=(0.0, 0.5), mixings=("linear", "logit"), progress=False)
    assert again == choice and pd.read_csv(tmp_path / "sweep.csv")["run_id"].tolist() == df["run_id"].tolist()
    redone = {p.name for p in runs if json.loads((p / "manifest.json").read_text())["finished"] != finished[p.name]}
    assert redone == {point_name(0.5, "logit"), point_name(0.0, "logit")}
    # a changed setting (more prompts) is not the finished point
    sweep_weight(dataclasses.replace(base, n=4), tmp_path, weights=(0.0,), mixings=("linear",), progress=False)
    assert set(pd.read_csv(tmp_path / "sweep.csv")["prompts"]) == {4}
    # a sweep chooses on one split
    other = sweep_point(dataclasses.replace(base, split="eval"), 1.0, "linear", tmp_path / "eval", progress=False)
    with pytest.raises(ValueError, match="a sweep covers one split; the runs given cover \\['dev', 'eval'\\]"):
        choose_runs([*runs, other], tmp_path / "mixed")


def test_grid_is_strict_then_each_mixing():
    assert grid((0.0, 0.5, 1.0), ("linear", "logit")) == [(1.0, "linear"), (0.0, "linear"), (0.5, "linear"),
                                                         (0.0, "logit"), (0.5, "logit")]
    assert point_name(1, "linear") == "w1.0-linear"


def test_sweep_needs_a_task_and_valid_weights(tmp_path):
    with pytest.raises(ValueError, match="needs a task"):
        sweep_weight(RunConfig(), tmp_path)
    with pytest.raises(ValueError, match="must be in \\[0, 1\\], got 1.5"):
        sweep_weight(RunConfig(task="arith"), tmp_path, weights=(1.5,))


def test_sweep_command_decodes_the_dev_split(monkeypatch):
    """The fixed w is chosen on dev prompts: the sweep command's split unless told otherwise."""
    import diversed.sweep
    from diversed.cli import main

    bases = []

    def stop(base, *args, **kwargs):
        bases.append(base)
        raise ValueError("stop")

    monkeypatch.setattr(diversed.sweep, "sweep_weight", stop)
    with pytest.raises(SystemExit):
        main(["sweep-weight", "--out", "unused", "--task", "arith", "-n", "2"])
    assert [b.split for b in bases] == ["dev"]


def test_report_states_the_split_sizes(tmp_path):
    """REPORT.md gives the prompts of each task's train (the head's prompts), dev (the sweeps) and eval (the runs)
    splits, read from the manifests."""
    from diversed.aggregate import write_report
    from diversed.utils import write_json

    head = tmp_path / "heads" / "arith"
    write_json(head / "manifest.json", {"config": {"task": "arith", "n_train": 40}, "prompts": 32})
    runs = []
    for i, (task, prompts) in enumerate([("arith", 10), ("arith", 10), ("open", 6)]):
        run = tmp_path / "runs" / str(i)
        config = {"task": task, "split": "eval", "draft": "embedded", "head": str(head / "head.safetensors")}
        write_json(run / "manifest.json", {"config": config, "summary": {"prompts": prompts}})
        runs.append({"pair": "p", "task": task, "seed": 0, "run_dir": str(run)})
    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame(runs).to_csv(tables / "runs.csv", index=False)
    sweeps = [{"task": "arith", "split": "dev", "prompts": 6}, {"task": "open", "split": "dev", "prompts": 4}]
    pd.DataFrame(sweeps, columns=COLUMNS).to_csv(tables / "sweeps.csv", index=False)
    for name in ("table1", "table2", "table3", "speed"):
        (tables / f"{name}.md").write_text(f"**{name}**\n")
    report = write_report(tables, tmp_path / "figures", tmp_path / "REPORT.md").read_text()
    lines = [" ".join(line.split()) for line in report.splitlines()]
    assert "| task | train | dev | eval |" in lines
    assert "| arith | 32 | 6 | 10 |" in lines and "| open | – | 4 | 6 |" in lines
    assert "Warning" not in report

    pd.DataFrame([{"task": "arith", "split": "eval", "prompts": 6}], columns=COLUMNS).to_csv(tables / "sweeps.csv")
    assert "the fixed w was chosen on the eval split" in write_report(tables, tmp_path, tmp_path / "R.md").read_text()
