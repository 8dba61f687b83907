"""Aggregation: the paper's table layouts from tidy run rows and speedups."""

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


def write_run(folder, method, K, tokens_per_s, seed=0, prompts=2, time_total=1.0, hardware=None, device="cpu"):
    """A scored run on disk with what aggregation reads (the target-only run keeps the CLI's default K)."""
    from diversed.utils import write_json

    verifier = "strict" if method == "finetuned" else method
    config = {"target": "t", "draft": "d", "verifier": verifier, "temperature": 1.0, "K": K, "seed": seed,
              "weight": None, "mixing": "linear", "task": "arith", "device": device}
    summary = {"prompts": prompts, "draft_acceptance_rate": 0.5, "mean_acceptance_length": 1.5,
               "acceptance_by_position": [0.5], "mean_weight": None, "bias_tv": 0.0, "tokens_per_s": tokens_per_s,
               "time_total": time_total}
    folder.mkdir(parents=True)
    write_json(folder / "manifest.json", {"run_id": folder.name, "config": config, "summary": summary,
                                          "labels": {"pair": "p", "task": "arith", "method": method},
                                          **({"hardware": hardware} if hardware else {})})
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
    # the reference-free fidelity beside the quality
    assert list(speed["target_logprob"]) == [-1.0] * 3 and list(speed["target_argmax_agreement"]) == [0.9] * 3

    write_run(tmp_path / "ar-again", "autoregressive", 3, tokens_per_s=12.0)  # a second baseline: ambiguous
    with pytest.raises(ValueError, match="2 target-only runs for pair p, task arith, temperature 1.0, seed 0"):
        collect([*runs, tmp_path / "ar-again"])


H100 = {"cpu": "AMD EPYC 9654", "cpu_count": 192, "gpu": "NVIDIA H100 80GB HBM3"}
A100 = {"cpu": "AMD EPYC 7763", "cpu_count": 128, "gpu": "NVIDIA A100-SXM4-80GB"}


def test_speedup_only_divides_times_from_the_same_hardware(tmp_path, capsys):
    """Regression: on a cluster a run and its target-only baseline land on different GPU types, and the speedup
    divided their times."""
    from diversed.aggregate import collect, speed_table

    runs = [write_run(tmp_path / "ar0", "autoregressive", 5, 10.0, seed=0, hardware=H100, device="cuda"),
            write_run(tmp_path / "sd0", "strict", 5, 30.0, seed=0, hardware=H100, device="cuda"),
            write_run(tmp_path / "ar1", "autoregressive", 5, 5.0, seed=1, hardware=A100, device="cuda"),
            write_run(tmp_path / "sd1", "strict", 5, 30.0, seed=1, hardware=H100, device="cuda")]
    df = collect(runs).set_index("run_dir")
    assert df.loc[str(runs[1]), "speedup"] == 3.0 and pd.isna(df.loc[str(runs[3]), "speedup"])
    warning = capsys.readouterr().err.strip()
    assert len(warning.splitlines()) == 1
    assert "1 run(s) timed on NVIDIA H100 80GB HBM3" in warning and "ran on NVIDIA A100-SXM4-80GB" in warning
    assert "seed 1" in warning

    speed = speed_table(df.reset_index())
    target_only = speed[speed["method"] == "autoregressive"]
    assert sorted(target_only["hardware"]) == [A100["gpu"], H100["gpu"]]  # never one row over two GPU types
    assert speed.loc[speed["method"] == "strict", "speedup"].tolist() == [3.0]


def test_a_cpu_run_is_labelled_by_its_cpu_even_on_a_gpu_machine(tmp_path):
    from diversed.aggregate import collect

    runs = [write_run(tmp_path / "ar", "autoregressive", 5, 10.0, hardware=H100, device="cpu"),
            write_run(tmp_path / "sd", "strict", 5, 20.0, hardware=H100, device="cuda")]
    df = collect(runs)
    assert df["hardware"].tolist() == ["AMD EPYC 9654, 192 cores", H100["gpu"]] and df["speedup"].isna().tolist() \
        == [False, True]
