"""The regression gate (diversed.analysis.regress, `diversed regress`): on simulated reproductions shaped like the
default run, two runs of the same code fail it at most 5% of the time and a 5% drop of tau is caught at least 80% of
the time; a baseline with tau x 1.06 fails and the same results pass; the command writes and reads a baseline and
never replaces a user's file."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from diversed.analysis import regress

# the default run's shape (config/config.yaml): capitals 51 prompts of 16 tokens, open 12 of 24, at two
# temperatures, ten speculative methods at K = 5, one seed; a method's mean acceptance and its prompts' spread
METHODS = {"strict": 0.3, "fixed": 0.4, "dynamic": 0.45, "lenient": 0.5, "typical": 0.4, "cascade": 0.45,
           "topk": 0.5, "block": 0.35, "ears": 0.4, "finetuned": 0.35}
SETTINGS = [(task, n, tokens, T, method, alpha) for task, n, tokens in (("capitals", 51, 16), ("open", 12, 24))
            for T in (0.1, 1.0) for method, alpha in METHODS.items()]
RUNS = 100


def reproduction(rng: np.random.Generator, prompts: dict, slower: float = 1.0) -> pd.DataFrame:
    """One simulated run of every setting as a baseline holds it: each prompt decoded once, each step emitting
    min(K, accepted) + 1 tokens with the prompt's own acceptance, a 0/1 answer with the prompt's own chance; slower:
    every step count times it (tau / slower)."""
    rows = []
    for (task, n, tokens, T, method, _), (alpha, right) in zip(SETTINGS, prompts.values(), strict=True):
        for i in range(n):
            emitted = steps = 0
            while emitted < tokens:
                emitted += min(5, rng.geometric(1 - alpha[i]) - 1) + 1
                steps += 1
            rows.append({"pair": "p", "task": task, "temperature": T, "method": method, "K": 5, "prompt": f"{task}{i}",
                         "seeds": 1, "new_tokens": min(emitted, tokens), "steps": steps * slower,
                         "quality": float(rng.random() < right[i]), "target_logprob_sum": np.nan})
    return pd.DataFrame(rows)


def prompts(rng: np.random.Generator) -> dict:
    """Each setting's prompts: their acceptance (Beta around the method's mean) and their chance of a right answer."""
    return {s: (rng.beta(8 * s[5], 8 * (1 - s[5]), s[1]), rng.beta(2, 2, s[1])) for s in SETTINGS}


def alarms(slower: float, runs: int = RUNS, seed: int = 0) -> int:
    """How many of `runs` simulated pairs (baseline, current) the gate fails, the current `slower`."""
    rng = np.random.default_rng(seed)
    failed = 0
    for _ in range(runs):
        truth = prompts(rng)  # the same prompts on both sides, each decoded at its own seed
        table = regress.compare(reproduction(rng, truth, slower), reproduction(rng, truth))
        failed += bool((table["verdict"] == "regression").any())
    return failed


def test_two_runs_of_the_same_code_fail_the_gate_at_most_5_percent_of_the_time():
    """100 simulated pairs of runs at different seeds: at most 10 false alarms (at a true rate of 5%, 11 or more
    come 1.1% of the time). The adjustment is what holds it: each of the 81 tests at 2.5% on its own fails 44 of
    50 such pairs (measured)."""
    failed = alarms(1.0)
    assert failed <= 10, f"{failed} false alarms in {RUNS}"


def test_a_5_percent_tau_drop_fails_the_gate_at_least_80_percent_of_the_time():
    """100 simulated pairs, the current run's tau 5% below the baseline's: at least 71 caught (at a true power of
    80%, 70 or fewer come 1.6% of the time)."""
    caught = alarms(1 / 0.95)
    assert caught >= 71, f"{caught} of {RUNS} caught"


def test_a_baseline_with_tau_inflated_6_percent_fails_and_itself_passes():
    rng = np.random.default_rng(1)
    now = reproduction(rng, prompts(rng))
    inflated = now.assign(steps=now["steps"] / 1.06)
    table = regress.compare(now, inflated)
    overall = table.iloc[-1]
    assert overall["what"] == "tau, mean over 40 settings" and overall["verdict"] == "regression"
    assert overall["estimate"] == pytest.approx(1 / 1.06, rel=1e-9)
    same = regress.compare(now, now)
    assert not (same["verdict"] == "regression").any()


def test_a_setting_missing_from_the_results_is_reported_and_a_small_one_is_not_tested():
    rng = np.random.default_rng(2)
    base = reproduction(rng, prompts(rng))
    now = base[base["method"] != "ears"]
    table = regress.compare(now, base)
    assert (table.loc[table["method"] == "ears", "verdict"] == "missing: not in the current results").all()
    few = base[base["prompt"].isin(["open0", "open1", "open2"])]
    small = regress.compare(few, few)
    assert small.loc[small["what"] == "tau", "verdict"].str.startswith("not tested").all()


def test_the_command_writes_a_baseline_and_gates_on_it(tmp_path):
    """`diversed regress RESULTS --write FILE`, then `--baseline FILE`: exit 0; against a baseline whose tau is
    6% higher: exit 1 naming the regression; a user's file in the way of --write is not replaced."""
    rng = np.random.default_rng(3)
    units = reproduction(rng, prompts(rng)).rename(columns={"seeds": "seed"}).assign(
        seed=0, timing=False, head_task="", split="eval", target_logprob_sum=0.0)
    (tmp_path / "results" / "tables").mkdir(parents=True)
    units.to_csv(tmp_path / "results" / "tables" / "prompts.csv", index=False)
    run = [sys.executable, "-m", "diversed.cli", "regress", str(tmp_path / "results")]
    base = tmp_path / "baseline.csv"
    wrote = subprocess.run([*run, "--write", str(base)], capture_output=True, text=True)
    assert wrote.returncode == 0 and "40 settings" in wrote.stdout, wrote.stderr
    same = subprocess.run([*run, "--baseline", str(base)], capture_output=True, text=True)
    assert same.returncode == 0 and "regression" not in same.stdout, same.stdout + same.stderr
    inflated = pd.read_csv(base)
    inflated.assign(steps=inflated["steps"] / 1.06).to_csv(tmp_path / "inflated.csv", index=False)
    slow = subprocess.run([*run, "--baseline", str(tmp_path / "inflated.csv")], capture_output=True, text=True)
    assert slow.returncode == 1 and "every setting tau, mean over 40 settings" in slow.stderr, slow.stderr
    mine = tmp_path / "notes.csv"
    mine.write_text("my,own\n1,2\n")
    refused = subprocess.run([*run, "--write", str(mine)], capture_output=True, text=True)
    assert refused.returncode != 0 and "not overwritten" in refused.stderr and mine.read_text() == "my,own\n1,2\n"


def test_the_committed_baseline_covers_the_default_configs_quality_runs():
    """benchmarks/baseline_default.csv is a baseline of config/config.yaml: its settings are the plan's own-head eval
    quality runs (pair, task, T, method, K), each with the task's n_eval prompts; a config change that adds or drops
    a setting makes it stale, and this fails until it is rewritten (`diversed regress results --write FILE`)."""
    from helpers import ROOT

    from diversed.experiment.plan import load

    base = pd.read_csv(ROOT / "benchmarks" / "baseline_default.csv")
    assert list(base.columns) == regress.BASELINE_COLUMNS
    plan = load(ROOT / "config" / "config.yaml")
    runs = [r for r in plan.runs if r.rule == "decode"]
    planned = {(r.pair, r.task, r.temperature, r.method, r.K or 0) for r in runs}
    held = set(base[regress.KEYS].itertuples(index=False, name=None))
    assert held == planned
    prompts = base.groupby(["task", "temperature", "method"])["prompt"].nunique()
    assert all(prompts[t, T, m] == plan.tasks[t].n_eval for t, T, m in prompts.index)
