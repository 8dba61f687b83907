"""Figures: what each one plots (its data function's frame) and that every figure is written."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from diversed.report.figures import (
    acceptance_by_position_bars,
    acceptance_vs_bias_points,
    acceptance_vs_weight_lines,
    quality_vs_time,
    quality_vs_time_points,
    weight_values,
    write_all,
)

# Two pairs far apart: pooled, they would make one point at (3 s, 0.6) and acceptance 0.7.
PAIRS = {"llama": {"seconds": 1.0, "quality": 0.8, "alpha": 0.9}, "gemma": {"seconds": 5.0, "quality": 0.4,
                                                                             "alpha": 0.5}}


def runs() -> pd.DataFrame:
    """Scored runs of two pairs on one task at T = 1.0, two seeds: target only, SD and DIVERSED at K = 5."""
    return pd.DataFrame([{"pair": pair, "task": "gsm8k", "method": method, "head_task": None, "lambda": None,
                          "temperature": 1.0, "run_id": f"{pair}-{method}-{seed}",
                          "K": None if method == "autoregressive" else 5, "seed": seed, "metric": "accuracy",
                          "seconds_per_sample": v["seconds"] * (2 if method == "autoregressive" else 1),
                          "quality": v["quality"], "draft_acceptance_rate": v["alpha"],
                          "acceptance_by_position": json.dumps([v["alpha"], v["alpha"] - 0.1])}
                         for pair, v in PAIRS.items() for method in ("autoregressive", "strict", "dynamic")
                         for seed in (0, 1)])


def units() -> pd.DataFrame:
    """The runs' prompt rows: four prompts each (statistics.MIN_PROMPTS of a mean), the run's seconds per sample and
    its quality on them, +-0.1 around the run's."""
    return pd.DataFrame([{"run_id": r.run_id, "pair": r.pair, "task": r.task, "method": r.method, "head_task": "",
                          "lambda": float("nan"), "temperature": r.temperature, "K": r.K, "seed": r.seed,
                          "metric": r.metric, "prompt": f"p{i}", "seconds": r.seconds_per_sample,
                          "quality": r.quality + (0.1 if i % 2 else -0.1),
                          # per position: 10 steps reach it, 10 alpha of them accept (position 2: alpha - 0.1)
                          "position_reached": json.dumps([10, 10] if r.K == 5 else []),
                          "position_accepted": json.dumps([round(10 * a, 6) for a in json.loads(
                              r.acceptance_by_position)] if r.K == 5 else [])}
                         for r in runs().itertuples() for i in range(4)])


def sweeps() -> pd.DataFrame:
    """A static sweep of w per pair at T = 1.0, K = 5 (both mixings)."""
    return pd.DataFrame([{"pair": pair, "task": "gsm8k", "temperature": 1.0, "K": 5, "weight": w, "mixing": m,
                          "verifier": "strict" if w == 1.0 else "fixed",
                          "draft_acceptance_rate": v["alpha"] * (1 - w / 2), "seconds_per_sample": v["seconds"],
                          "quality": v["quality"] * w, "metric": "accuracy", "bias_tv": 0.3 * (1 - w)}
                         for pair, v in PAIRS.items() for w in (0.5, 1.0) for m in ("linear", "logit")])


def test_the_dev_panel_draws_every_familys_sweep(tmp_path):
    """The fronts: each family's sweep points (here lenient's beside the static w's) reach the dev panel with their
    verifier, and the figure draws one front per family."""
    fam = sweeps().iloc[:1].assign(verifier="lenient", knob=0.5, weight=float("nan"), draft_acceptance_rate=0.99)
    s = pd.concat([sweeps(), fam], ignore_index=True)
    points = quality_vs_time_points(units(), runs(), s, 1.0)
    dev = points[points["method"] == "sweep"]
    assert set(dev["verifier"]) == {"strict", "fixed", "lenient"}
    paths = quality_vs_time(units(), runs(), s, tmp_path / "q", 1.0)
    assert all(p.stat().st_size > 0 for p in paths)


def test_the_dev_panels_set_diversed_and_the_target_alone_beside_the_fronts(tmp_path):
    """Every family's front on the dev prompts, against acceptance and against tokens/s at batch 1, beside DIVERSED
    and the target alone decoded on the same prompts; the target alone has no acceptance, and its speed is 1."""
    s = sweeps().assign(speedup=1.2)
    refs = pd.DataFrame([{"pair": pair, "task": "gsm8k", "temperature": 1.0, "K": 5, "verifier": v, "mixing": "linear",
                          "weight": float("nan"), "draft_acceptance_rate": alpha, "speedup": speed,
                          "quality": q, "metric": "accuracy"}
                         for pair in PAIRS for v, alpha, speed, q in (("dynamic", 0.95, 1.5, 0.7),
                                                                      ("autoregressive", float("nan"), 1.0, 0.75))])
    points = quality_vs_time_points(units(), runs(), pd.concat([s, refs], ignore_index=True), 1.0)
    dev = points[points["method"] == "sweep"].set_index(["pair", "task", "verifier"])
    for pair in PAIRS:
        assert dev.loc[(pair, "gsm8k: dev, acceptance", "dynamic"), "x"] == 0.95
        assert dev.loc[(pair, "gsm8k: dev, speed", "dynamic"), "x"] == 1.5
        assert dev.loc[(pair, "gsm8k: dev, speed", "autoregressive"), "x"] == 1.0
        assert pd.isna(dev.loc[(pair, "gsm8k: dev, acceptance", "autoregressive"), "x"])
        assert set(dev.loc[(pair, "gsm8k: dev, speed")].index) == {"strict", "fixed", "dynamic", "autoregressive"}
    paths = quality_vs_time(units(), runs(), pd.concat([s, refs], ignore_index=True), tmp_path / "q", 1.0)
    assert all(p.stat().st_size > 0 for p in paths)


def weights() -> pd.DataFrame:
    """Learned w per pair: llama's near the target, gemma's near the draft, at two temperatures."""
    return pd.DataFrame([{"pair": pair, "task": "gsm8k", "head_task": None, "temperature": T, "seed": 0,
                          "position": i, "w": w}
                         for pair, w in (("llama", 0.9), ("gemma", 0.1)) for T in (0.1, 1.0) for i in (1, 2)])


def test_quality_vs_time_keeps_pairs_apart():
    """Regression: each method was one point over all pairs (Llama at (1 s, 0.8) and Gemma at (5 s, 0.4) became
    (3 s, 0.6))."""
    points = quality_vs_time_points(units(), runs(), sweeps(), 1.0).set_index(["pair", "method"])
    for pair, v in PAIRS.items():
        dyn = points.loc[(pair, "dynamic")]
        assert (dyn["x"], dyn["quality"]) == pytest.approx((v["seconds"], v["quality"])) and dyn["x_kind"] == "seconds"
        assert dyn["quality_low"] < v["quality"] < dyn["quality_high"]  # its 95% interval over the prompts
        assert points.loc[(pair, "autoregressive"), "x"] == 2 * v["seconds"]
        sweep = points.loc[(pair, "sweep")]  # the dev sweep: quality against acceptance, and against speed
        accept = sweep[sweep["x_kind"] == "acceptance"]
        assert len(accept) == 4 and set(accept["x"]) == {v["alpha"] / 2, 0.75 * v["alpha"]}
        assert set(sweep["x_kind"]) == {"acceptance", "speedup"}


def test_quality_vs_time_times_only_runs_at_batch_1():
    """Seconds per sample come from the timed runs (batch 1, interleaved) only, quality from the quality runs."""
    batched = units().assign(batch_size=8, timing=False, seconds=100.0)  # a batch's shared wall clock
    timed = units().assign(batch_size=1, timing=True, quality=0.0)
    points = quality_vs_time_points(pd.concat([batched, timed]), runs(), sweeps(), 1.0).set_index(["pair", "method"])
    for pair, v in PAIRS.items():
        assert points.loc[(pair, "dynamic"), "x"] == v["seconds"]
        assert points.loc[(pair, "dynamic"), "quality"] == pytest.approx(v["quality"])


def test_quality_vs_time_keeps_the_dev_sweep_on_its_own_panel():
    """Regression: the dev split's sweep points were drawn among the eval split's methods, on one panel."""
    points = quality_vs_time_points(units(), runs(), sweeps(), 1.0)
    assert set(points.loc[points["method"] == "sweep", "task"]) == {"gsm8k: dev, acceptance", "gsm8k: dev, speed"}
    assert set(points.loc[points["method"] != "sweep", "task"]) == {"gsm8k: eval"}


def test_acceptance_by_position_keeps_pairs_apart_with_intervals_over_prompts():
    """Each position's acceptance is a ratio of totals over the prompts (seeds pooled), with its interval where the
    prompts are enough (statistics.MIN_PROMPTS['ratio'] = 12): 4 prompts give none, 16 unequal ones give one."""
    bars = acceptance_by_position_bars(units(), 1.0).set_index(["pair", "method", "position"])
    assert len(bars) == 2 * 2 * 2  # pairs x speculative methods x positions
    for pair, v in PAIRS.items():
        assert bars.loc[(pair, "dynamic", 1), "acceptance"] == pytest.approx(v["alpha"])
        assert bars.loc[(pair, "strict", 2), "acceptance"] == pytest.approx(v["alpha"] - 0.1)
    assert bars["low"].isna().all()  # 4 prompts
    many = pd.concat([units().assign(prompt=lambda d, i=i: d["prompt"] + f"-{i}",
                                     position_accepted=json.dumps([i % 4, 1]), position_reached=json.dumps([4, 4]))
                      for i in range(4)], ignore_index=True)
    b = acceptance_by_position_bars(many, 1.0).set_index(["pair", "method", "position"]).loc[("llama", "strict", 1)]
    assert b["acceptance"] == pytest.approx(1.5 / 4) and b["low"] < b["acceptance"] < b["high"]
    assert acceptance_by_position_bars(units().drop(columns=["position_reached", "position_accepted"]), 1.0).empty


def test_a_figure_of_many_tasks_is_a_grid_of_at_most_three_columns(tmp_path):
    """The quality-vs-time figure has three panels per task (eval, dev acceptance, dev speed): two tasks make two
    rows of three, not one row of six."""
    import matplotlib.image

    two = pd.concat([units(), units().assign(task="xsum")], ignore_index=True)
    sw = pd.concat([sweeps(), sweeps().assign(task="xsum")], ignore_index=True)
    (png, _) = quality_vs_time(two[two["pair"] == "llama"], runs(), sw[sw["pair"] == "llama"], tmp_path / "q", 1.0)
    height, width = matplotlib.image.imread(png).shape[:2]
    assert width < 2.2 * height, (width, height)  # three columns of two rows (six in a row: ~6.5 x 1)


def test_acceptance_vs_weight_keeps_pairs_apart():
    lines = acceptance_vs_weight_lines(sweeps(), 1.0).set_index(["pair", "weight"])["draft_acceptance_rate"]
    for pair, v in PAIRS.items():
        assert lines[(pair, 1.0)] == v["alpha"] / 2 and lines[(pair, 0.5)] == 0.75 * v["alpha"]


def test_weight_distribution_keeps_pairs_and_temperatures_apart():
    w = weight_values(weights())
    assert w.groupby(["pair", "temperature"])["w"].mean().to_dict() == {
        ("gemma", 0.1): 0.1, ("gemma", 1.0): 0.1, ("llama", 0.1): 0.9, ("llama", 1.0): 0.9}


def test_acceptance_vs_weight_plots_one_temperature():
    """Regression: the K = 5 line averaged the T = 0.1 and T = 1.0 sweeps while the other K were T = 1 only."""
    sweeps = pd.DataFrame([{"pair": "p", "task": "arith", "K": K, "temperature": T, "mixing": m, "weight": w,
                            "verifier": "strict" if w == 1.0 else "fixed", "draft_acceptance_rate": alpha}
                           for K, T, alpha in ((3, 1.0, 0.6), (5, 1.0, 0.4), (5, 0.1, 0.9), (7, 1.0, 0.2))
                           for m in ("linear", "logit") for w in (0.5, 1.0)])
    lines = acceptance_vs_weight_lines(sweeps, 1.0)
    assert len(lines) == 3 * 2  # K x w, linear mixing only
    assert lines.groupby("K")["draft_acceptance_rate"].mean().to_dict() == {3: 0.6, 5: 0.4, 7: 0.2}
    assert acceptance_vs_weight_lines(sweeps, 0.1)["K"].tolist() == [5, 5]


def test_acceptance_vs_bias_draws_every_rule_beside_the_static_front():
    """#34 item 2: every rule's dev points at one temperature, at the K the families were swept at; the front is
    strict with the linear fixed w."""
    rows = [("strict", None, 1.0, "linear", 0.3, 0.0), ("fixed", None, 0.5, "linear", 0.6, 0.2),
            ("fixed", None, 0.5, "logit", 0.55, 0.25), ("lenient", 0.5, None, "linear", 0.5, 0.2),
            ("ears", 0.5, None, "linear", 0.45, 0.1), ("autoregressive", None, None, "linear", None, 0.0)]
    sweeps = pd.DataFrame([{"pair": "p", "task": "arith", "K": K, "temperature": T, "verifier": v, "knob": knob,
                            "weight": w, "mixing": m, "draft_acceptance_rate": a, "bias_tv": b}
                           for K, T in ((5, 1.0), (3, 1.0), (5, 0.1)) for v, knob, w, m, a, b in rows
                           if K == 5 or v in ("strict", "fixed")])
    points = acceptance_vs_bias_points(sweeps, 1.0)
    assert set(points["K"]) == {5} and "autoregressive" not in set(points["verifier"])
    assert points.loc[points["front"], "verifier"].tolist() == ["strict", "fixed"]
    assert sorted(points["verifier"]) == ["ears", "fixed", "fixed", "lenient", "strict"]
    # against KL(emitted || p): the points where it is finite (lenient's emits tokens p lacks here)
    kl = sweeps.assign(kl=[float("inf") if v == "lenient" else 2 * b for v, b in zip(sweeps["verifier"],
                                                                                     sweeps["bias_tv"], strict=True)])
    points = acceptance_vs_bias_points(kl, 1.0, "kl")
    assert sorted(points["verifier"]) == ["ears", "fixed", "fixed", "strict"] and points["front"].sum() == 2
    assert acceptance_vs_bias_points(sweeps, 1.0, "kl").empty  # tables written before KL was recorded


def test_every_figure_is_written_from_the_tables(tmp_path):
    import matplotlib.image

    tables = tmp_path / "tables"
    tables.mkdir()
    for name, frame in (("runs", runs()), ("prompts", units()), ("sweeps", sweeps()), ("weights", weights())):
        frame.to_csv(tables / f"{name}.csv", index=False)
    paths = write_all(tables, tmp_path / "figures", [0.1, 1.0])
    assert sorted(p.name for p in paths if p.suffix == ".png") == [
        "acceptance_by_position_T0.1.png", "acceptance_by_position_T1.png", "acceptance_vs_bias_T0.1.png",
        "acceptance_vs_bias_T1.png", "acceptance_vs_kl_T0.1.png", "acceptance_vs_kl_T1.png", "acceptance_vs_weight.png",
        "quality_vs_time_T0.1.png", "quality_vs_time_T1.png",
        "weight_distribution.png"]
    heights = {p.name: matplotlib.image.imread(p).shape[0] for p in paths if p.suffix == ".png"}
    for stem in ("acceptance_vs_weight", "quality_vs_time_T1", "acceptance_by_position_T1", "weight_distribution"):
        assert heights[f"{stem}.png"] > 1.8 * heights["quality_vs_time_T0.1.png"]  # a row per pair; T = 0.1: no data
