"""Aggregation: the paper's table layouts from tidy run rows and speedups."""

from __future__ import annotations

import json

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


def write_run(folder, method, K, tokens_per_s, seed=0, prompts=2, time_total=1.0, hardware=None, device="cpu",
              per_prompt=None):
    """A scored run on disk with what aggregation reads (the target-only run keeps the CLI's default K).

    per_prompt: [(new tokens, seconds, accepted, drafted, correct)] per prompt, else no prompt rows."""
    from diversed.utils import write_json

    verifier = "strict" if method == "finetuned" else method
    config = {"target": "t", "draft": "d", "verifier": verifier, "temperature": 1.0, "K": K, "seed": seed,
              "weight": None, "mixing": "linear", "task": "arith", "device": device}
    summary = {"prompts": prompts, "draft_acceptance_rate": 0.5, "mean_acceptance_length": 1.5,
               "acceptance_by_position": [0.5], "mean_weight": None, "bias_tv": 0.0, "tokens_per_s": tokens_per_s,
               "time_total": time_total}
    folder.mkdir(parents=True)
    per_prompt = per_prompt or []
    write_json(folder / "manifest.json", {"run_id": folder.name, "config": config, "summary": summary,
                                          "labels": {"pair": "p", "task": "arith", "method": method},
                                          "prompt_seconds": [sec for _, sec, *_ in per_prompt],
                                          **({"hardware": hardware} if hardware else {})})
    gens = [{"prompt_hash": f"h{i}", "tokens": [5] * n, "accepted": [a], "drafted": [d], "target_logprobs": [-1.0],
             "target_argmax": [True], "bias_tv_per_token": [0.0]} for i, (n, _, a, d, _) in enumerate(per_prompt)]
    (folder / "generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))
    write_json(folder / "scores.json", {"metric": "accuracy", "quality": 0.5,
                                        "per_example": [{"prompt_hash": f"h{i}", "accuracy": c}
                                                        for i, (*_, c) in enumerate(per_prompt)],
                                        "fidelity": {"target_logprob": -1.0, "target_argmax_agreement": 0.9}})
    return folder


def test_confidence_intervals_are_over_seed_prompt_units(tmp_path):
    """Regression: with 2 seeds, a t-interval over seeds (t = 12.7 at 1 degree of freedom) gave cells like
    10.0 ± 127.1; the unit is now the (seed, prompt) pair, with speed and speedup per prompt."""
    from diversed.aggregate import ci95, collect, prompt_table, speed_table, table1

    target = {0: [(10, 1.0, 0, 0, 1.0), (10, 2.0, 0, 0, 0.0)], 1: [(10, 1.0, 0, 0, 1.0), (10, 0.5, 0, 0, 1.0)]}
    sd = {0: [(10, 0.5, 2, 4, 1.0), (10, 1.0, 3, 4, 0.0)], 1: [(10, 0.25, 4, 4, 1.0), (10, 0.5, 1, 4, 0.0)]}
    runs = [write_run(tmp_path / f"{m}{seed}", m, 5, tokens_per_s=1.0, seed=seed, per_prompt=rows[seed])
            for m, rows in (("autoregressive", target), ("strict", sd)) for seed in (0, 1)]
    df = collect(runs)
    units = prompt_table(df)
    speed = speed_table(df, units).set_index("method")
    assert speed.loc["strict", "tokens_per_s"] == pytest.approx((20 + 10 + 40 + 20) / 4)
    assert speed.loc["strict", "tokens_per_s_ci95"] == pytest.approx(ci95([20, 10, 40, 20])[1])
    assert speed.loc["strict", "speedup"] == pytest.approx((2 + 2 + 4 + 1) / 4)  # per prompt, same seed and prompt
    assert speed.loc["strict", "prompts"] == 4 and speed.loc["strict", "seeds"] == 2
    a_half, q_half = ci95([.5, .75, 1, .25])[1], ci95([1.0, 0.0, 1.0, 0.0])[1]
    cell = table1(df, 1.0, units).set_index("method").loc["SD", "arith"]
    assert cell == f"62.5 ± {100 * a_half:.1f} / 50.0 ± {100 * q_half:.1f}"
    assert table1(df, 1.0).set_index("method").loc["SD", "arith"] == "50.0 / 50.0"  # runs only: over seeds


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


def test_the_paper_rows_show_quality_on_the_scale_of_the_measured_cells():
    """Regression: the paper's GSM8K accuracy printed as 0.67 under cells that show accuracy in percent."""
    from diversed.aggregate import PAPER_PAIR

    rows = [{"pair": "llama", "task": "gsm8k", "method": "dynamic", "head_task": None, "temperature": 1.0, "seed": 0,
             "draft_acceptance_rate": 0.7, "quality": 0.6, "metric": "accuracy", "target": PAPER_PAIR[0],
             "draft": PAPER_PAIR[1]}]
    t1 = table1(pd.DataFrame(rows), 1.0).set_index("method")
    assert t1.loc["DIVERSED", "gsm8k"] == "70.0 / 60.0" and t1.loc["DIVERSED (paper)", "gsm8k"] == "72.61 / 67.0"
