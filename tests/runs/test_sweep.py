"""The static frontier: a grid of fixed weights, scored, and the choice of the task's fixed w."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pandas as pd
import pytest

from diversed.runs.settings import Grid, Launch, RunConfig, point_name
from diversed.runs.sweep import (
    COLUMNS,
    choose,
    choose_lambda,
    choose_runs,
    sweep_lambda,
    sweep_point,
    sweep_weight,
)


def grid(*args, **kw) -> list[dict]:
    return Grid(*args, **kw).points()


def point(verifier, w, alpha, correct, mixing="linear"):
    """A sweep point's row and prompt rows: correct[i] is prompt i's accuracy (None: unscored)."""
    rid = f"{verifier}-{w}-{mixing}"
    known = [c for c in correct if c is not None]
    row = {"verifier": verifier, "weight": w, "mixing": mixing, "draft_acceptance_rate": alpha, "metric": "accuracy",
           "quality": sum(known) / len(known) if known else None, "run_id": rid}
    units = pd.DataFrame({"seed": 0, "prompt": range(len(correct)),
                          "quality": [float("nan") if c is None else float(c) for c in correct]})
    return row, units


def pick(points, tolerance, select="noninferior"):
    return choose([r for r, _ in points], {r["run_id"]: u for r, u in points}, tolerance, select)


STRICT = [1, 0] * 150  # strict's answers on 300 dev prompts: enough to show identical answers within 0.02


def test_choose_picks_the_largest_acceptance_shown_noninferior():
    same, worse = STRICT, [1, 0, 0, 0] * 75
    points = [point("strict", 1.0, 0.1, STRICT), point("fixed", 0.7, 0.3, same),
              point("fixed", 0.5, 0.6, same, "logit"), point("fixed", 0.2, 0.8, worse)]
    c = pick(points, 0.02)
    assert (c["weight"], c["mixing"], c["draft_acceptance_rate"]) == (0.5, "logit", 0.6)
    verdicts = {(p["weight"], p["mixing"]): p["verdict"] for p in c["points"]}
    assert verdicts == {(0.7, "linear"): "holds", (0.5, "logit"): "holds", (0.2, "linear"): "fails"}
    # nothing relaxed keeps quality: fall back to strict
    assert pick([points[0], points[3]], 0.01)["weight"] == 1.0
    # regression (#31, defect 1): identical answers on 20 prompts held (zero spread, p = 0); on their discordant
    # prompts (none of 20) they show nothing about a 2% margin
    few = pick([point("strict", 1.0, 0.1, STRICT[:20]), point("fixed", 0.5, 0.6, STRICT[:20])], 0.02)
    assert few["weight"] == 1.0 and few["points"][0]["verdict"] == "inconclusive"


def test_a_point_estimate_within_tolerance_is_not_enough():
    """Regression (winner's curse): a point whose mean accuracy equals strict's but whose answers differ on every
    prompt was chosen by its point estimate; its difference from strict is not shown within 0.02."""
    flipped = [1 - c for c in STRICT]
    c = pick([point("strict", 1.0, 0.1, STRICT), point("fixed", 0.3, 0.9, flipped)], 0.02)
    assert c["weight"] == 1.0 and c["points"][0]["verdict"] == "inconclusive"
    assert c["points"][0]["why"].startswith("underpowered: n = 300")


def test_the_estimate_rule_chooses_by_the_data_where_the_test_cannot_on_dev():
    """select estimate (the default): on dev prompts too few for a 0/1 metric's non-inferiority test, a point
    whose quality estimate lies within the tolerance of strict's may be chosen (the largest acceptance among them);
    a point below it may not; the eval verdicts stay the tests. Each point reports its dev interval and verdict."""
    flipped = [1 - c for c in STRICT]  # the same accuracy, every answer different
    worse = [1, 0, 0, 0] * 75  # 0.25 against 0.5
    points = [point("strict", 1.0, 0.1, STRICT), point("fixed", 0.3, 0.9, flipped), point("fixed", 0.1, 0.95, worse)]
    assert pick(points, 0.02)["weight"] == 1.0  # noninferior: inconclusive on 300 prompts, strict kept
    c = pick(points, 0.02, "estimate")
    assert (c["weight"], c["select"]) == (0.3, "estimate") and "within the task's tolerance" in c["rule"]
    tested = {p["weight"]: p for p in c["points"]}
    assert tested[0.3]["admitted"] and tested[0.3]["verdict"] == "inconclusive" and "±" in tested[0.3][
        "quality_vs_strict"]
    assert not tested[0.1]["admitted"]
    # lambda alike: the estimate admits heads the test cannot, the largest acceptance wins
    best, reason, rows = pick_lambda([point("strict", 1.0, 0.1, STRICT), head_point(0.05, 0.3, flipped),
                                      head_point(0.1, 0.6, flipped), head_point(0.2, 0.9, worse)], select="estimate")
    assert best["lambda"] == 0.1 and reason == "quality within the tolerance of strict's on dev"
    assert [r.get("admitted") for r in rows] == [None, True, True, False]
    with pytest.raises(ValueError, match="unknown selection 'best'"):
        pick(points, 0.02, "best")


def knob_point(verifier, knob, alpha, correct):
    """A knob family's sweep row and prompt rows."""
    row, units = point(verifier, None, alpha, correct)
    return row | {"knob": knob, "run_id": f"{verifier}-{knob}"}, units


def test_certified_tests_from_the_least_lenient_and_stops_at_the_first_failure():
    """Learn-then-Test's fixed sequence: w = 0.9 is certified, w = 0.7 loses a quarter of the answers and fails, so
    w = 0.5 is never certified though its answers are strict's: the certified choice is 0.9, while noninferior and
    estimate, which look at each point alone, take 0.5. Each row records its place in the sequence, its dev
    p-value, whether it is certified and which rule chose it."""
    worse = [1, 0, 0, 0] * 75
    points = [point("strict", 1.0, 0.1, STRICT), point("fixed", 0.5, 0.9, STRICT), point("fixed", 0.9, 0.3, STRICT),
              point("fixed", 0.7, 0.6, worse)]
    rows = [r for r, _ in points]
    c = choose(rows, {r["run_id"]: u for r, u in points}, 0.02)
    assert (c["weight"], c["select"]) == (0.9, "certified") and "fixed sequence" in c["rule"]
    assert c["by_selection"] == {"certified": {"weight": 0.9, "mixing": "linear"},
                                 "estimate": {"weight": 0.5, "mixing": "linear"},
                                 "noninferior": {"weight": 0.5, "mixing": "linear"}}
    by_w = {r["weight"]: r for r in rows[1:]}
    assert [by_w[w]["sequence"] for w in (0.9, 0.7, 0.5)] == [1, 2, 3]
    assert [by_w[w]["certified"] for w in (0.9, 0.7, 0.5)] == [True, False, False]
    assert by_w[0.9]["dev_p"] < 0.05 <= by_w[0.7]["dev_p"]
    assert [by_w[w]["chosen_certified"] for w in (0.9, 0.7, 0.5)] == [True, False, False]
    assert by_w[0.5]["chosen_estimate"] and by_w[0.5]["chosen_noninferior"]
    assert c["certified_needs"] is None  # certified something: nothing to plan
    # a knob family in its rule's order: lenience l relaxes down, so 0.9 is tested before 0.3
    lenient = [point("strict", 1.0, 0.1, STRICT), knob_point("lenient", 0.3, 0.8, worse),
               knob_point("lenient", 0.9, 0.4, STRICT)]
    family = pick(lenient, 0.02, "certified")["families"]["lenient"]
    assert [(p["knob"], p["sequence"], p["certified"]) for p in family["points"]] == [(0.9, 1, True), (0.3, 2, False)]
    assert family["knob"] == 0.9


def test_certified_falls_back_to_strict_and_says_how_many_dev_prompts_it_needs():
    """On 20 dev prompts identical answers certify nothing at a 0.02 margin: the family keeps strict and records the
    dev prompts its least lenient point would need (80% power if it loses nothing); lambda keeps the smallest."""
    few = [point("strict", 1.0, 0.1, STRICT[:20]), point("fixed", 0.9, 0.3, STRICT[:20])]
    c = pick(few, 0.02, "certified")
    assert c["weight"] == 1.0 and c["by_selection"]["certified"] == "strict"
    assert c["certified_needs"] > 20 and not c["points"][0]["certified"]
    best, reason, rows = pick_lambda([point("strict", 1.0, 0.1, STRICT), head_point(0.05, 0.3, STRICT),
                                      head_point(0.1, 0.6, [1, 0, 0, 0] * 75), head_point(0.2, 0.9, STRICT)],
                                     select="certified")
    assert best["lambda"] == 0.05 and reason == "certified non-inferior to strict"
    assert [r.get("admitted") for r in rows] == [None, True, False, False]


def test_choose_skips_points_of_unknown_quality():
    """Regression: a None quality (an unscored point) raised TypeError."""
    points = [point("strict", 1.0, 0.1, STRICT), point("fixed", 0.2, 0.9, [None] * 300),
              point("fixed", 0.5, 0.4, STRICT)]
    assert pick(points, 0.02)["weight"] == 0.5
    unknown_strict = [point("strict", 1.0, 0.1, [None] * 300), point("fixed", 0.5, 0.4, STRICT)]
    assert pick(unknown_strict, 0.02)["weight"] == 1.0  # nothing can be shown to keep quality
    assert pick(points, 0.02, "estimate")["weight"] == 0.5 and pick(unknown_strict, 0.02, "estimate")["weight"] == 1
    with pytest.raises(ValueError, match="strict point"):
        pick(points[1:], 0.02)


def test_sweep_weight_on_tiny_pair(tiny_dir, tmp_path):
    base = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), K=3,
                     temperature=1.0, max_new_tokens=8, task="arith", split="dev", n=3)
    choice = sweep_weight(base, tmp_path, Grid((0.0, 0.5), ("linear", "logit")), launch=Launch(progress=False))
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
    shutil.rmtree(tmp_path / point_name(fixed(0.5, "logit")))
    (tmp_path / point_name(fixed(0.0, "logit")) / "scores.json").unlink()  # decoded, never scored: not finished
    again = sweep_weight(base, tmp_path, Grid((0.0, 0.5), ("linear", "logit")), launch=Launch(progress=False))
    assert again == choice and pd.read_csv(tmp_path / "sweep.csv")["run_id"].tolist() == df["run_id"].tolist()
    redone = {p.name for p in runs if json.loads((p / "manifest.json").read_text())["finished"] != finished[p.name]}
    assert redone == {point_name(fixed(0.5, "logit")), point_name(fixed(0.0, "logit"))}
    # a changed setting (more prompts) is not the finished point
    sweep_weight(dataclasses.replace(base, n=4), tmp_path, Grid((0.0,), ("linear",)),
                 launch=Launch(progress=False))
    assert set(pd.read_csv(tmp_path / "sweep.csv")["prompts"]) == {4}
    # a sweep chooses on one split
    other = sweep_point(dataclasses.replace(base, split="eval"), {"verifier": "strict"}, tmp_path / "eval",
                        launch=Launch(progress=False))
    with pytest.raises(ValueError, match="a sweep covers one split; the runs given cover \\['dev', 'eval'\\]"):
        choose_runs([*runs, other], tmp_path / "mixed")


def fixed(w, mixing):
    return {"verifier": "fixed", "weight": w, "mixing": mixing}


def test_grid_is_strict_then_each_mixing_then_each_family():
    assert grid((0.0, 0.5, 1.0), ("linear", "logit")) == [{"verifier": "strict"}, fixed(0.0, "linear"),
                                                         fixed(0.5, "linear"), fixed(0.0, "logit"), fixed(0.5, "logit")]
    points = grid((0.5,), ("linear",), {"lenient": [0.5], "cascade": [0.1, 0.3]}, deferrals=("chow", "opt"))
    assert [point_name(p) for p in points] == ["w1.0-linear", "w0.5-linear", "lenient-0.5", "cascade-chow-0.1",
                                               "cascade-chow-0.3", "cascade-opt-0.1", "cascade-opt-0.3"]
    refs = grid((0.5,), ("linear",), head="h.safetensors", target_only=True)[-2:]  # the fronts' references, last
    assert refs == [{"verifier": "dynamic", "head": "h.safetensors", "mixing": "linear"},
                    {"verifier": "autoregressive"}]
    assert [point_name(p) for p in refs] == ["dynamic", "autoregressive"]
    with pytest.raises(ValueError, match="unknown family 'dynamic' to sweep; allowed: cascade, lenient, typical"):
        grid((0.5,), ("linear",), {"dynamic": [0.5]})


def test_each_family_chooses_its_own_setting_on_the_same_test():
    """Lenient's best non-inferior point, and a cascade with no point shown to keep quality falls back to strict;
    the fixed w's choice is unchanged by the other families."""
    same, worse = STRICT, [1, 0, 0, 0] * 75

    def family(verifier, knob, alpha, correct, deferral=None):
        row, units = point(verifier, None, alpha, correct)
        row.update(knob=knob, deferral=deferral, run_id=f"{verifier}-{knob}-{deferral}")
        return row, units

    points = [point("strict", 1.0, 0.1, STRICT), point("fixed", 0.5, 0.6, same),
              family("lenient", 0.7, 0.3, same), family("lenient", 0.3, 0.5, same), family("lenient", 0.1, 0.9, worse),
              family("cascade", 0.4, 0.9, worse, "opt")]
    c = pick(points, 0.02)
    assert (c["weight"], c["draft_acceptance_rate"]) == (0.5, 0.6)
    assert {k: c["families"]["lenient"][k] for k in ("verifier", "knob", "draft_acceptance_rate")} == {
        "verifier": "lenient", "knob": 0.3, "draft_acceptance_rate": 0.5}
    assert [p["verdict"] for p in c["families"]["lenient"]["points"]] == ["holds", "holds", "fails"]
    assert c["families"]["cascade"]["verifier"] == "strict" and c["families"]["cascade"]["knob"] is None
    assert c["families"]["cascade"]["points"][0]["deferral"] == "opt"
    assert set(c["families"]) == {"lenient", "cascade"}  # only the families swept


def test_sweep_needs_a_task_and_valid_weights(tmp_path):
    with pytest.raises(ValueError, match="needs a task"):
        sweep_weight(RunConfig(), tmp_path)
    with pytest.raises(ValueError, match="must be in \\[0, 1\\], got 1.5"):
        sweep_weight(RunConfig(task="arith"), tmp_path, Grid((1.5,)))


def test_sweep_command_decodes_the_dev_split(monkeypatch):
    """The fixed w is chosen on dev prompts: the sweep command's split unless told otherwise."""
    import diversed.runs.sweep
    from diversed.cli import main

    bases = []

    def stop(base, *args, **kwargs):
        bases.append(base)
        raise ValueError("stop")

    monkeypatch.setattr(diversed.runs.sweep, "sweep_weight", stop)
    with pytest.raises(SystemExit):
        main(["sweep-weight", "--out", "unused", "--task", "arith", "-n", "2"])
    assert [b.split for b in bases] == ["dev"]


def test_report_states_the_split_sizes(tmp_path):
    """REPORT.md gives the prompts of each task's train (the head's prompts), dev (the sweeps) and eval (the runs)
    splits, read from the aggregated tables alone: the run folders they name are gone (regression: the report
    opened every run folder and training manifest itself)."""
    from diversed.analysis.tables import TRAINED_COLUMNS
    from diversed.report.compose import write_report

    runs = [{"experiment": "x", "pair": "p", "task": task, "split": "eval", "method": "strict", "temperature": 1.0,
             "seed": 0, "prompts": prompts, "timing": False, "head_task": None, "K": 5, "knob": None,
             "target": "t", "draft": "d", "sampling": "full", "top_k": 0, "top_p": 1.0, "prompt_format": "chat",
             "max_new_tokens": 8, "run_dir": str(tmp_path / "gone" / str(i))}
            for i, (task, prompts) in enumerate([("arith", 10), ("arith", 10), ("open", 6)])]
    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame(runs).to_csv(tables / "runs.csv", index=False)
    head = {"kind": "head", "path": str(tmp_path / "gone" / "head"), "task": "arith", "prompts": 32}
    pd.DataFrame([head], columns=TRAINED_COLUMNS).to_csv(tables / "trained.csv", index=False)
    columns = ["pair", "task", "method", "head_task", "lambda", "temperature", "K", "metric", "seed", "prompt"]
    pd.DataFrame(columns=columns).to_csv(tables / "prompts.csv", index=False)
    pd.DataFrame(columns=columns).to_csv(tables / "sweep_prompts.csv", index=False)
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


def test_a_family_reads_its_knob_from_the_sweeps_choice(tmp_path):
    """weight_file=choice.json gives each method its own setting: the fixed w, a family's knob (and cascade's
    deferral), strict where the family's sweep kept strict; a family the sweep did not sweep is refused."""
    from diversed.runs.run import with_weight_file

    path = tmp_path / "choice.json"
    path.write_text(json.dumps({"weight": 0.5, "mixing": "logit", "families": {
        "lenient": {"verifier": "lenient", "knob": 0.3}, "cascade": {"verifier": "cascade", "knob": 0.2,
                                                                        "deferral": "opt"},
        "topk": {"verifier": "strict", "knob": None, "deferral": None}}}))
    assert with_weight_file({"verifier": "fixed"}, path) == {"verifier": "fixed", "weight": 0.5, "mixing": "logit"}
    assert with_weight_file({"verifier": "lenient"}, path) == {"verifier": "lenient", "knob": 0.3, "deferral": "chow"}
    assert with_weight_file({"verifier": "cascade"}, path)["deferral"] == "opt"
    assert with_weight_file({"verifier": "topk"}, path) == {"verifier": "strict", "knob": None, "deferral": "chow",
                                                                "judge": None}  # a judge file goes with it
    with pytest.raises(ValueError, match="holds no choice for the 'typical' verifier"):
        with_weight_file({"verifier": "typical"}, path)


def test_sweep_weight_sweeps_the_families_on_tiny_pair(tiny_dir, tmp_path):
    """Each family at its knobs, and DIVERSED and the target alone on the same dev prompts as the fronts'
    references: in the sweep's table (the target alone under the sweep's K), never chosen."""
    from diversed.training.settings import HeadTrainConfig
    from diversed.training.train import train_head

    pair = {"target": str(tiny_dir / "tiny-target"), "draft": str(tiny_dir / "tiny-draft-l1")}
    head = train_head(HeadTrainConfig(task="arith", n_train=2, epochs=1, batch_size=2, max_new_tokens=4,
                                      rollout="sample", reward="fidelity", draft_layers=1, **pair),
                      tmp_path / "head", progress=False)
    base = RunConfig(**pair, K=3, temperature=1.0, max_new_tokens=6, task="arith", split="dev", n=2)
    grid = Grid((0.5,), ("linear",), {"lenient": [0.0], "cascade": [1.0]}, head=head, target_only=True)
    choice = sweep_weight(base, tmp_path / "sweep", grid, launch=Launch(progress=False))
    tmp_path = tmp_path / "sweep"
    df = pd.read_csv(tmp_path / "sweep.csv").set_index("verifier")
    assert set(df.index) == {"strict", "fixed", "lenient", "cascade", "dynamic", "autoregressive"}
    assert df.loc["autoregressive", "K"] == 3 and pd.isna(df.loc["autoregressive", "draft_acceptance_rate"])
    assert df.loc["dynamic", "draft_acceptance_rate"] >= 0 and (tmp_path / "dynamic").is_dir()
    assert df.loc["cascade", "draft_acceptance_rate"] == 1.0  # chow at alpha 1 never defers: every draft kept
    assert df.loc["lenient", "knob"] == 0.0 and df.loc["cascade", "deferral"] == "chow"
    assert set(choice["families"]) == {"lenient", "cascade"}
    assert (tmp_path / "lenient-0").is_dir() and (tmp_path / "cascade-chow-1").is_dir()


def head_point(lam, alpha, correct, collapsed=""):
    """A lambda sweep's head row (verifier dynamic) and its prompt rows."""
    row, units = point("dynamic", None, alpha, correct)
    return row | {"lambda": lam, "collapsed": collapsed, "run_id": f"lambda{lam}"}, units


def pick_lambda(points, tolerance=0.02, select="noninferior"):
    rows = [dict(r) for r, _ in points]
    best, reason = choose_lambda(rows, {r["run_id"]: u for r, u in points}, tolerance, select)
    assert [r["chosen"] for r in rows].count(True) == 1 and best["chosen"]
    return best, reason, rows


def test_choose_lambda_takes_the_largest_acceptance_noninferior_among_heads_that_did_not_collapse():
    strict = point("strict", 1.0, 0.1, STRICT)
    best, reason, rows = pick_lambda([strict, head_point(0.05, 0.3, STRICT), head_point(0.1, 0.6, STRICT),
                                      head_point(0.2, 0.9, STRICT, collapsed="mean w below 0.05")])
    assert best["lambda"] == 0.1 and reason == "non-inferior to strict"  # 0.2 accepts more, but collapsed
    assert [r.get("verdict") for r in rows] == [None, "holds", "holds", "holds"]


def test_choose_lambda_falls_back_to_the_smallest_lambda_that_did_not_collapse():
    """On dev prompts too few for the margin nothing is shown non-inferior: the choice is then the head that weighs
    quality most, not the best point estimate (a winner's curse)."""
    flipped = [1 - c for c in STRICT]  # the same mean accuracy, every answer different: inconclusive
    strict = point("strict", 1.0, 0.1, STRICT)
    best, reason, rows = pick_lambda([strict, head_point(0.05, 0.3, flipped, collapsed="mean w above 0.95"),
                                      head_point(0.1, 0.6, flipped), head_point(0.2, 0.9, flipped)])
    assert best["lambda"] == 0.1 and reason.startswith("none admitted")
    assert rows[2]["why"].startswith("underpowered: n = 300")
    best, reason, _ = pick_lambda([strict, head_point(0.1, 0.6, STRICT, "w pinned"), head_point(0.05, 0.3, STRICT,
                                                                                                "w pinned")])
    assert best["lambda"] == 0.05 and reason.startswith("every head collapsed")
    with pytest.raises(ValueError, match="strict point"):
        pick_lambda([head_point(0.1, 0.6, STRICT)])


def test_sweep_lambda_chooses_on_dev_and_installs_the_head(tiny_dir, tmp_path):
    """Heads at two lambdas decode the dev split beside strict; the chosen one is copied as the task's head, its
    manifest recording the choice, and every candidate is in lambda.csv and choice.json."""
    from diversed.training.settings import HeadTrainConfig
    from diversed.training.train import train_head

    pair = {"target": str(tiny_dir / "tiny-target"), "draft": str(tiny_dir / "tiny-draft-l1"), "draft_layers": 1}
    heads = [train_head(HeadTrainConfig(task="arith", n_train=4, epochs=1, batch_size=2, max_new_tokens=6,
                                        rollout="sample", reward="fidelity", acceptance_weight=lam, **pair),
                        tmp_path / f"lambda{lam}", progress=False) for lam in (0.0, 1.0)]
    base = RunConfig(**pair, K=3, temperature=1.0, max_new_tokens=8, task="arith", split="dev", n=3)
    choice = sweep_lambda(base, heads, tmp_path / "sweep", tmp_path / "head", launch=Launch(2, progress=False))
    table = pd.read_csv(tmp_path / "sweep" / "lambda.csv")
    assert list(table["verifier"]) == ["strict", "dynamic", "dynamic"] and set(table["split"]) == {"dev"}
    assert list(table["lambda"].iloc[1:]) == [0.0, 1.0] and table["chosen"].sum() == 1
    assert table.loc[table["chosen"], "lambda"].item() == choice["lambda"] in (0.0, 1.0)
    assert table["verdict"].iloc[1:].isin(["holds", "fails", "inconclusive"]).all()
    chosen = heads[[0.0, 1.0].index(choice["lambda"])]
    assert (tmp_path / "head" / "head.safetensors").read_bytes() == chosen.read_bytes()
    manifest = json.loads((tmp_path / "head" / "manifest.json").read_text())
    assert manifest["config"]["acceptance_weight"] == choice["lambda"] and manifest["chosen"]["split"] == "dev"
    assert [c["lambda"] for c in manifest["chosen"]["candidates"]] == [0.0, 1.0]
    saved = json.loads((tmp_path / "sweep" / "choice.json").read_text())
    assert saved["lambda"] == choice["lambda"] and saved["config"]["split"] == "dev"
    with pytest.raises(ValueError, match="overwritten by its run"):  # a head where its run would be written
        sweep_lambda(base, heads, tmp_path, tmp_path / "head", launch=Launch(progress=False))
    # a rerun keeps the finished runs
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "sweep").rglob("generations.jsonl")}
    sweep_lambda(base, heads, tmp_path / "sweep", tmp_path / "head", launch=Launch(2, progress=False))
    assert len(mtimes) == 3 and all(p.stat().st_mtime_ns == t for p, t in mtimes.items())
