"""The fronts of the relaxed verifiers: decode and score a task split at each point of a grid of w (both mixings;
w = 1 is strict), and of each other family's knob (settings.RULES: cascade, lenient, typical, topk, fly), then pick
each family's setting: the largest acceptance whose quality is shown non-inferior to strict's (margin: the
task's tolerance) on the same prompts. The w grid is the paper's `fixed` verifier and the Pareto front it traces.
The command line and the workflow sweep the dev split, so that no setting is chosen on the eval prompts it is
reported on.

`sweep_point` is one point, `choose_runs` the choice from the scored points, `sweep_weight` the whole sweep in
one process (the pair loaded once, every point timed on the same hardware); a rerun keeps the points already
finished with the same config and prompts, so a killed sweep resumes point by point.

`sweep_lambda` chooses DIVERSED's lambda (the weight of the head's acceptance term) the same way: heads trained
at several lambda decode the dev split beside strict, and the chosen head becomes the task's head."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pandas as pd

from diversed import statistics
from diversed.decoding.settings import DEFERRAL, FAMILIES, RULES, check_trained_file
from diversed.runs.evaluate import score_run
from diversed.runs.run import Run, execute, run_id, task_prompts
from diversed.runs.settings import SELECTIONS, Grid, Launch, RunConfig, dynamic_point, point_name
from diversed.tasks import get_task, metric_spec
from diversed.utils import RUN_OWNER, atomic_path, check_output, check_writable, provenance, write_json, write_text

COLUMNS = ["pair", "task", "split", "prompts", "temperature", "K", "verifier", "weight", "mixing", "knob", "deferral",
           "draft_acceptance_rate", "mean_acceptance_length", "tokens_per_s", "seconds_per_sample", "bias_tv", "kl",
           "metric", "quality", "target_logprob", "sequence", "dev_p", "certified", "dev_needs",
           *(f"chosen_{s}" for s in SELECTIONS), "run_id", "run_dir"]


def run_row(run: Run) -> dict:
    """One line of a frontier table from a scored run."""
    return {k: v for k, v in run.row().items() if k in COLUMNS}


def sequence(rows: list[dict], family: str) -> list[dict]:
    """A family's points in the order a certified selection tests them, fixed before the data: least lenient first
    (settings.Rule.relaxes), fixed's by w with its mixings in turn at each w, cascade's deferrals in turn at
    each alpha."""
    knob = "weight" if family == "fixed" else "knob"
    sign = 1 if RULES[family].relaxes == "up" else -1
    return sorted((r for r in rows if r["verifier"] == family), key=lambda r: sign * r[knob])


def gain(point: dict, strict: dict, spec) -> float:
    """A point's quality estimate over strict's on the same prompts (run level: a corpus metric's too), signed so
    that higher is better; nan when either is unscored."""
    if point["quality"] is None or strict["quality"] is None:
        return math.nan
    g = point["quality"] - strict["quality"]
    return g if spec.higher_is_better else -g


def pick(points: list[dict], admitted: list[bool], strict: dict) -> dict:
    """The highest acceptance among the admitted points (ties: the smaller w); strict when none is admitted or none
    accepts more."""
    key = lambda r: (r["draft_acceptance_rate"], -r["weight"] if r["verifier"] == "fixed" else 0)  # noqa: E731
    best = max((r for r, ok in zip(points, admitted, strict=True) if ok), key=key, default=None)
    return strict if best is None or best["draft_acceptance_rate"] <= strict["draft_acceptance_rate"] else best


def choose_family(points: list[dict], strict: dict, units: dict[str, pd.DataFrame], spec, tolerance: float,
                  select: str) -> dict:
    """One family's setting under `select` from its points in sequence (`sequence`). Each point's row gains its place
    in the sequence, its dev test's p-value, whether it is certified and, per selection, whether that rule
    chose it (chosen_{rule}: the columns the tables read). Returns the setting, each point's dev evidence, the
    setting each rule chooses, and the dev prompts certifying the least lenient point would need where none is
    certified and the prompts were too few (80% power if it loses nothing)."""
    tested = [versus_strict(units[r["run_id"]], units[strict["run_id"]], spec, tolerance) for r in points]
    tests, gains = [t for _, t in tested], [gain(r, strict, spec) for r in points]
    admitted = {s: statistics.admitted(s, tests, gains, tolerance) for s in SELECTIONS}
    picks = {s: pick(points, ok, strict) for s, ok in admitted.items()}
    needs = [statistics.needed_prompts(diff, tolerance, level=statistics.RISK) for diff, _ in tested]
    needs = [n if n and n > diff.n else None for n, (diff, _) in zip(needs, tested, strict=True)]  # underpowered
    for i, r in enumerate(points):
        r.update(sequence=i + 1, dev_p=tests[i].p, certified=admitted["certified"][i], dev_needs=needs[i],
                 **{f"chosen_{s}": r is best for s, best in picks.items()})
    best = picks[select]
    kept = {"weight": 1.0, "mixing": "linear"} if points and points[0]["verifier"] == "fixed" else {
        "knob": None, "deferral": None}
    return {**(kept if best is strict else setting(best)), "verifier": best["verifier"],
            "draft_acceptance_rate": best["draft_acceptance_rate"], "quality": best["quality"],
            "by_selection": {s: "strict" if b is strict else setting(b) for s, b in picks.items()},
            "certified_needs": None if any(admitted["certified"]) or not points else needs[0],
            "points": [{**setting(r), "sequence": i + 1, "acceptance": r["draft_acceptance_rate"],
                        "quality_vs_strict": diff.text(digits=4, sign=True), "prompts": diff.n, "dev_p": test.p,
                        "verdict": test.verdict(), "why": test.why, "certified": admitted["certified"][i],
                        "admitted": admitted[select][i]}
                       for i, (r, (diff, test)) in enumerate(zip(points, tested, strict=True))]}


def choose(rows: list[dict], units: dict[str, pd.DataFrame], tolerance: float, select: str = "certified") -> dict:
    """Each family's setting: the highest acceptance among its points that `select` (SELECTIONS) admits against
    strict's quality; strict when none is, or none accepts more. units: each point's prompt rows, by run_id.

    Returns the fixed verifier's choice (w, mixing) with, under "families", every other family's swept (knob,
    deferral; knob None: strict), each with its points' dev evidence (choose_family)."""
    strict = next((r for r in rows if r["verifier"] == "strict"), None)
    if strict is None:
        raise ValueError("a sweep needs its strict point (w = 1) to choose a setting; none among the rows given")
    if select not in SELECTIONS:
        raise ValueError(f"unknown selection {select!r}; allowed: {', '.join(SELECTIONS)}")
    spec = metric_spec(strict["metric"])
    out = {family: choose_family(points, strict, units, spec, tolerance, select)
           for family in ("fixed", *FAMILIES) if (points := sequence(rows, family)) or family == "fixed"}
    shared = {"strict_quality": strict["quality"], "strict_acceptance_rate": strict["draft_acceptance_rate"],
              "tolerance": tolerance, "metric": strict["metric"], "select": select, "rule": SELECTIONS[select]}
    fixed = out.pop("fixed")
    del fixed["verifier"]
    return {**fixed, **shared, "families": out}


def versus_strict(point: pd.DataFrame, strict: pd.DataFrame, spec, tolerance: float):
    """A point's quality over strict's (spec: the task's Metric), paired over the same prompts, and its
    non-inferiority test at tolerance."""
    diff = statistics.quality_gain(point, strict, spec)
    return diff, statistics.noninferior(diff, tolerance)


def setting(row: dict) -> dict:
    """A point's setting: w and mixing for the fixed verifier, knob (and cascade's deferral) for the others."""
    if row["verifier"] in ("fixed", "strict"):
        return {"weight": row["weight"], "mixing": row["mixing"]}
    return {"knob": row["knob"]} | ({"deferral": row["deferral"]} if row["verifier"] == "cascade" else {})


def point_config(base: RunConfig, point: dict) -> RunConfig:
    """The run config of a sweep's point (Grid.points' RunConfig changes of base), checked."""
    if base.task is None:
        raise ValueError("a sweep needs a task (a split of it is decoded and scored)")
    reset = {"weight": None, "mixing": "linear", "knob": None, "deferral": DEFERRAL}
    cfg = dataclasses.replace(base, **(reset | point))
    cfg.validate()
    return cfg


def check_points(base: RunConfig, points: dict[Path, dict], out: Path) -> None:
    """Every point's config and folder (points: run folder -> point), and the sweep's own files' folder, checked
    before the first decode: a bad knob, mixing, deferral, head or judge file, or an output folder that is not the
    sweep's fails in seconds, not after strict and the grid were decoded."""
    check_writable(out / "choice.json")
    for run_dir, point in points.items():
        point_config(base, point)
        check_output(run_dir, RUN_OWNER)


def sweep_point(base: RunConfig, point: dict, run_dir: str | Path, *, labels: dict | None = None,
                launch: Launch | None = None) -> Path:
    """Decode + score base's task split at one point (Grid.points' RunConfig changes) into run_dir, as `launch`
    says (batch size, execution; its models shared by the sweep's points). A run_dir that already holds this
    point's scored run is kept as it is."""
    cfg = point_config(base, point)
    prompts = task_prompts(cfg)
    if Run(run_dir).holds(run_id(cfg, prompts)):
        return Path(run_dir)
    run_dir = execute(cfg, prompts, run_dir=run_dir, labels=labels, launch=launch)
    score_run(run_dir)
    return run_dir


def choose_runs(run_dirs: list[str | Path], out: str | Path, tolerance: float | None = None,
                select: str = "certified") -> dict:
    """The sweep's table (out/sweep.csv, .md) and choice (out/choice.json) from its scored points.

    tolerance: the quality strict may lose, in the metric's units (default: the task metric's own); select: which
    points may be chosen (SELECTIONS)."""
    out = Path(out)
    runs = [Run(d) for d in run_dirs]
    rows = [run_row(run) for run in runs]
    K = next((r["K"] for r in rows if r["verifier"] == "strict"), None)
    for r in rows:  # the target alone has no K: its row carries the sweep's
        r["K"] = K if r["K"] is None else r["K"]
    for key in ("task", "split"):
        if len({r[key] for r in rows}) != 1:
            raise ValueError(f"a sweep covers one {key}; the runs given cover {sorted({str(r[key]) for r in rows})}")
    strict = [run for run, r in zip(runs, rows, strict=True) if r["verifier"] == "strict"]
    if not strict:
        raise ValueError("a sweep needs its strict point (w = 1) to choose a setting; none among the runs given")
    config = strict[0].config
    units = {r["run_id"]: pd.DataFrame(run.prompt_rows()) for run, r in zip(runs, rows, strict=True)}
    choice = choose(rows, units, get_task(config["task"]).metric.tolerance if tolerance is None else tolerance,
                    select)
    write_table(out / "sweep", rows)
    write_json(out / "choice.json", {"task": config["task"], **choice, "config": config, **provenance()})
    return choice


def sweep_weight(base: RunConfig, out: str | Path, grid: Grid | None = None, *, tolerance: float | None = None,
                 select: str = "certified", labels: dict | None = None, launch: Launch | None = None) -> dict:
    """Every point of the grid (with DIVERSED at grid.head and the target alone where asked), decoded as `launch`
    says, then the choice: out/{point}/ runs, out/sweep.csv/.md and out/choice.json."""
    out, launch = Path(out), launch or Launch()
    points = {out / point_name(point): point for point in (grid or Grid()).points()}
    check_points(base, points, out)
    runs = [sweep_point(base, point, run_dir, labels=labels, launch=launch) for run_dir, point in points.items()]
    return choose_runs(runs, out, tolerance, select)


LAMBDA_COLUMNS = ["pair", "task", "split", "prompts", "temperature", "K", "verifier", "lambda", "acceptance_term",
                  "collapsed", "draft_acceptance_rate", "draft_acceptance_rate_ci95", "mean_weight", "metric",
                  "quality", "quality_ci95", "quality_vs_strict", "quality_vs_strict_ci95", "verdict", "why",
                  "admitted", "chosen", "head", "run_id", "run_dir"]
def lambda_rule(select: str) -> str:
    """choose_lambda's rule in words."""
    return (f"the largest acceptance among the heads that did not collapse {SELECTIONS[select]}; when none is, the "
            "smallest lambda among them (the head that weighs quality most); when every head collapsed, the "
            "smallest lambda")


def head_training(head: str | Path) -> dict:
    """The training manifest beside a head (train_head's manifest.json)."""
    path = Path(head).parent / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{head}: no manifest.json beside it (a head written by `diversed train head`)")
    return json.loads(path.read_text())


def choose_lambda(rows: list[dict], units: dict[str, pd.DataFrame], tolerance: float,
                  select: str = "certified") -> tuple[dict, str]:
    """The chosen head row by lambda_rule(select), and which branch of the rule chose it. rows: strict's and each
    head's (verifier dynamic, with lambda and collapsed); each head's row gains its quality difference from strict,
    the non-inferiority verdict, whether the rule admitted it, and chosen."""
    strict = next((r for r in rows if r["verifier"] == "strict"), None)
    heads = sorted((r for r in rows if r["verifier"] == "dynamic"), key=lambda r: r["lambda"])
    if strict is None or not heads:
        raise ValueError("choosing lambda needs the strict point and at least one head's run")
    spec = metric_spec(strict["metric"])
    tests = {}
    for r in heads:
        diff, tests[r["run_id"]] = versus_strict(units[r["run_id"]], units[strict["run_id"]], spec, tolerance)
        r.update(quality_vs_strict=diff.value, quality_vs_strict_ci95=diff.half, verdict=tests[r["run_id"]].verdict(),
                 why=tests[r["run_id"]].why, admitted=False)
    healthy = [r for r in heads if not r["collapsed"]]  # in sequence: the least lenient (smallest lambda) first
    ok = statistics.admitted(select, [tests[r["run_id"]] for r in healthy], [gain(r, strict, spec) for r in healthy],
                             tolerance)
    for r, admitted in zip(healthy, ok, strict=True):
        r["admitted"] = admitted
    safe = [r for r in healthy if r["admitted"]]
    if safe:
        best = max(safe, key=lambda r: (r["draft_acceptance_rate"], -r["lambda"]))
        reason = {"estimate": "quality within the tolerance of strict's on dev",
                  "noninferior": "non-inferior to strict", "certified": "certified non-inferior to strict"}[select]
    elif healthy:
        best, reason = healthy[0], "none admitted against strict: the smallest lambda"
    else:
        best, reason = heads[0], "every head collapsed: the smallest lambda"
    for r in rows:
        r["chosen"] = r is best
    return best, reason


def lambda_row(run: Run, units: pd.DataFrame, training: dict | None = None) -> dict:
    """One line of a lambda table from a scored run: strict's, or a head's with its training manifest's lambda."""
    tidy = run.row()
    row = {k: v for k, v in tidy.items() if k in LAMBDA_COLUMNS}
    column = metric_spec(tidy["metric"]).statistic
    acceptance, quality = statistics.estimate(units, "draft_acceptance_rate"), statistics.estimate(units, column)
    row |= {"draft_acceptance_rate_ci95": acceptance.half, "quality_ci95": quality.half, "chosen": False}
    if training is not None:
        row |= {"lambda": training["config"]["acceptance_weight"], "collapsed": training.get("collapsed") or "",
                "acceptance_term": training["config"].get("acceptance_term", "fixed"), "head": run.config["head"]}
    return row


def sweep_lambda(base: RunConfig, heads: list[str | Path], out: str | Path, head_out: str | Path, *,
                 tolerance: float | None = None, select: str = "certified", labels: dict | None = None,
                 launch: Launch | None = None) -> dict:
    """Decode + score base's task split (dev) with strict and with DIVERSED at each head (each trained at another
    lambda), choose one by lambda_rule(select) and copy it to head_out (head.safetensors, manifest.json recording the
    choice, train_log.csv): out/{point}/ runs, out/lambda.csv/.md (every candidate: acceptance, mean w, quality,
    its difference from strict, the verdict, collapsed, chosen) and out/choice.json."""
    out, labels, launch = Path(out), labels or {}, launch or Launch()
    if not heads:
        raise ValueError("a lambda sweep needs at least one head")
    for h in heads:
        check_trained_file(h, "head")
    trainings = [head_training(h) for h in heads]
    if len({t["config"]["task"] for t in trainings} | {base.task}) != 1:
        raise ValueError(f"the heads of a lambda sweep are trained on its task {base.task!r}; got "
                         f"{sorted({t['config']['task'] for t in trainings})}")
    lambdas = [float(t["config"]["acceptance_weight"]) for t in trainings]
    for head, lam in zip(heads, lambdas, strict=True):
        if Path(head).parent.resolve() == (out / f"lambda{lam}").resolve():
            raise ValueError(f"{head}: a head inside the run folder {out / f'lambda{lam}'} would be overwritten by "
                             "its run; train heads elsewhere")
    points = {out / point_name({"verifier": "strict"}): {"verifier": "strict"}} | {
        out / f"lambda{lam}": dynamic_point(head) for head, lam in zip(heads, lambdas, strict=True)}
    check_points(base, points, out)
    for name in ("head.safetensors", "train_log.csv", "manifest.json"):
        check_writable(Path(head_out) / name)
    runs = [Run(sweep_point(base, {"verifier": "strict"}, out / point_name({"verifier": "strict"}), labels=labels,
                            launch=launch))]
    for head, lam in zip(heads, lambdas, strict=True):
        runs.append(Run(sweep_point(base, dynamic_point(head), out / f"lambda{lam}",
                                    labels=labels | {"method": "dynamic", "lambda": str(lam)}, launch=launch)))
    units = {run.manifest["run_id"]: pd.DataFrame(run.prompt_rows()) for run in runs}
    rows = [lambda_row(run, units[run.manifest["run_id"]], training)
            for run, training in zip(runs, [None, *trainings], strict=True)]
    if tolerance is None:
        tolerance = get_task(base.task).metric.tolerance
    best, reason = choose_lambda(rows, units, tolerance, select)
    candidates = [{k: r[k] for k in ("lambda", "collapsed", "draft_acceptance_rate", "quality", "quality_vs_strict",
                                     "quality_vs_strict_ci95", "verdict", "why", "admitted", "head")}
                  for r in rows if r["verifier"] == "dynamic"]
    choice = {"task": base.task, "split": base.split, "lambda": best["lambda"], "head": best["head"],
              "select": select, "rule": lambda_rule(select), "reason": reason, "tolerance": tolerance,
              "metric": best["metric"],
              "strict_quality": rows[0]["quality"], "candidates": candidates}
    install_head(Path(best["head"]), Path(head_out), choice)
    write_table(out / "lambda", rows, LAMBDA_COLUMNS)
    write_json(out / "choice.json", choice | {"config": runs[0].config, **provenance()})
    return choice


def install_head(head: Path, dest: Path, choice: dict) -> None:
    """The chosen head's files into dest, each by an atomic rename; its manifest records the choice."""
    for name in ("head.safetensors", "train_log.csv"):
        with atomic_path(dest / name) as tmp:
            shutil.copyfile(head.parent / name, tmp)
    write_json(dest / "manifest.json", head_training(head) | {"chosen": choice})


def write_table(stem: Path, rows: list[dict], columns: list[str] = COLUMNS) -> None:
    df = pd.DataFrame(rows, columns=columns)
    write_text(stem.with_suffix(".csv"), df.to_csv(index=False))
    write_text(stem.with_suffix(".md"), df.to_markdown(index=False, floatfmt=".4g") + "\n")
