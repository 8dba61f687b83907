"""Aggregation: the paper's table layouts from tidy run rows, speedups, and the data the figures plot."""

from __future__ import annotations

import pandas as pd
import pytest

from diversed.aggregate import table1, table3, transfer_temperature


def runs() -> pd.DataFrame:
    """DIVERSED runs on two tasks at two temperatures, own heads and one cross-task head, two seeds each."""
    rows = []
    for T in (0.1, 1.0):
        for task in ("arith", "open"):
            for seed in (0, 1):
                rows.append({"pair": "p", "task": task, "method": "dynamic", "head_task": None, "temperature": T,
                             "seed": seed, "draft_acceptance_rate": 0.5 if T == 1.0 else 0.1,
                             "quality": 0.2 if T == 1.0 else 0.9, "metric": "accuracy"})
    for seed in (0, 1):
        rows.append({"pair": "p", "task": "open", "method": "dynamic", "head_task": "arith", "temperature": 1.0,
                     "seed": seed, "draft_acceptance_rate": 0.3, "quality": 0.4, "metric": "accuracy"})
    return pd.DataFrame(rows)


def test_table3_takes_its_diagonal_from_the_transfer_temperature():
    """Regression: the diagonal (a task's own head) pooled both temperatures' runs."""
    df = runs()
    assert transfer_temperature(df) == 1.0
    t3 = table3(df, 1.0).set_index("head trained on")
    assert t3.loc["arith", "arith"] == "50.0 / 20.0" and t3.loc["arith", "open"] == "30.0 / 40.0"
    assert t3.loc["open", "open"] == "50.0 / 20.0"
    assert table1(df, 0.1).set_index("method").loc["DIVERSED", "arith"] == "10.0 / 90.0"


def test_cross_task_runs_at_two_temperatures_need_an_explicit_one():
    df = runs()
    extra = df[df["head_task"].notna()].assign(temperature=0.1)
    with pytest.raises(ValueError, match="several temperatures"):
        transfer_temperature(pd.concat([df, extra]))


def write_run(folder, method, K, tokens_per_s, seed=0, prompts=2, time_total=1.0):
    """A scored run on disk with what aggregation reads (the target-only run keeps the CLI's default K)."""
    from diversed.utils import write_json

    verifier = "strict" if method == "finetuned" else method
    config = {"target": "t", "draft": "d", "verifier": verifier, "temperature": 1.0, "K": K, "seed": seed,
              "weight": None, "mixing": "linear", "task": "arith"}
    summary = {"prompts": prompts, "draft_acceptance_rate": 0.5, "mean_acceptance_length": 1.5,
               "acceptance_by_position": [0.5], "mean_weight": None, "bias_tv": 0.0, "tokens_per_s": tokens_per_s,
               "time_total": time_total}
    folder.mkdir(parents=True)
    write_json(folder / "manifest.json", {"run_id": folder.name, "config": config, "summary": summary,
                                          "labels": {"pair": "p", "task": "arith", "method": method}})
    (folder / "generations.jsonl").write_text("")
    write_json(folder / "scores.json", {"metric": "accuracy", "quality": 0.5,
                                        "fidelity": {"target_logprob": -1.0, "target_argmax_agreement": 0.9}})
    return folder


def test_speedup_is_over_the_one_target_only_run_of_the_same_pair_task_temperature_seed(tmp_path):
    """Regression: target-only was decoded once per K and one of them, by seconds per sample, was the baseline."""
    from diversed.aggregate import collect, speed_table

    runs = [write_run(tmp_path / "ar", "autoregressive", 5, tokens_per_s=10.0),
            write_run(tmp_path / "k3", "strict", 3, tokens_per_s=30.0, time_total=0.5),
            write_run(tmp_path / "k7", "strict", 7, tokens_per_s=40.0, time_total=2.0)]  # longer completions
    df = collect(runs).set_index("run_dir")
    assert df.loc[str(runs[1]), "speedup"] == 3.0 and df.loc[str(runs[2]), "speedup"] == 4.0
    assert df.loc[str(runs[0]), "speedup"] == 1.0 and pd.isna(df.loc[str(runs[0]), "K"])
    speed = speed_table(df.reset_index())
    assert list(speed["K"].dropna()) == [3, 7] and list(speed["speedup"].dropna()) == [1.0, 3.0, 4.0]

    write_run(tmp_path / "ar-again", "autoregressive", 3, tokens_per_s=12.0)  # a second baseline: ambiguous
    with pytest.raises(ValueError, match="2 target-only runs for pair p, task arith, temperature 1.0, seed 0"):
        collect([*runs, tmp_path / "ar-again"])


def test_acceptance_vs_weight_plots_one_temperature():
    """Regression: the K = 5 line averaged the T = 0.1 and T = 1.0 sweeps while the other K were T = 1 only."""
    from diversed.plots import acceptance_vs_weight_lines

    sweeps = pd.DataFrame([{"task": "arith", "K": K, "temperature": T, "mixing": m, "weight": w,
                            "draft_acceptance_rate": alpha}
                           for K, T, alpha in ((3, 1.0, 0.6), (5, 1.0, 0.4), (5, 0.1, 0.9), (7, 1.0, 0.2))
                           for m in ("linear", "logit") for w in (0.5, 1.0)])
    lines = acceptance_vs_weight_lines(sweeps, 1.0)
    assert len(lines) == 3 * 2  # K x w, linear mixing only
    assert lines.groupby("K")["draft_acceptance_rate"].mean().to_dict() == {3: 0.6, 5: 0.4, 7: 0.2}
    assert acceptance_vs_weight_lines(sweeps, 0.1)["K"].tolist() == [5, 5]
