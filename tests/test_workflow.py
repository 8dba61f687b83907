"""The Snakemake workflow: lint, schema validation, the paper DAG offline, and the smoke config end to end
(every declared output exists and parses; a second run does nothing; a config change reruns its dependents)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, jobs, snakemake, workflow_copy

pytestmark = pytest.mark.slow  # Snakemake in subprocesses


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A fresh copy of the workflow: nothing the user's working tree has made or locked shows in a dry run."""
    return workflow_copy(tmp_path_factory.mktemp("workflow"))


def dag(wd: Path, *args: str) -> dict[str, int]:
    """Job counts of the full DAG in wd, whatever outputs it already holds."""
    return jobs(snakemake("-n", "--forceall", *args, cwd=wd).stdout)


def with_config(wd: Path, **change) -> str:
    """The smoke config with some top-level keys changed, written into wd; returns its path."""
    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()) | change
    path = wd / "changed.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_lint_is_clean(tree):
    done = snakemake("--lint", cwd=tree)
    assert "Congratulations" in done.stdout + done.stderr


def test_paper_config_builds_its_full_dag_offline(tree):
    counts = dag(tree, "--configfile", "config/paper.yaml")
    # 3 pairs x 4 tasks x (4 speculative methods x 1 K + target only) x 2 temperatures x 3 seeds, + 3 x 2 transfer x 3
    assert counts["decode"] == 3 * 4 * 4 * 2 * 3 + 3 * 2 * 3 and counts["decode_baseline"] == 3 * 4 * 2 * 3
    assert counts["score"] == counts["decode"] + counts["decode_baseline"]
    # sweeps: 3 pairs x 4 tasks x 2 temperatures at K = 5, + 3 pairs x 2 figure K; 1 strict + 7 w x 2 mixings each
    assert counts["sweep_choose"] == 3 * 4 * 2 + 3 * 2 and counts["sweep_point"] == 15 * counts["sweep_choose"]
    assert counts["train_head"] == counts["distill_draft"] == 12
    assert counts["aggregate"] == counts["plot"] == counts["report"] == 1


def test_default_config_dry_run(tree):
    counts = dag(tree)
    assert counts["prepare_models"] == 1 and counts["decode"] + counts["decode_baseline"] == 44
    assert counts["sweep_choose"] == 6 and counts["sweep_point"] == 6 * 7


def test_dry_run_ignores_what_the_working_tree_already_made(tmp_path):
    """Regression: after `snakemake --cores all` the test's dry run in the working tree found nothing to prepare
    (KeyError: 'prepare_models')."""
    wd = workflow_copy(tmp_path)
    (wd / "resources" / "models").mkdir(parents=True)
    (wd / "resources" / "models" / "smollm2.json").write_text("{}")  # what a completed default run leaves
    counts = dag(wd)
    assert counts["prepare_models"] == 1 and counts["decode"] + counts["decode_baseline"] == 44


def test_target_only_runs_once_per_pair_task_temperature_seed(tree):
    """Regression: the target-only (and draft-only) run was decoded once per K."""
    done = snakemake("-n", "--forceall", "-p", "--configfile", with_config(tree, K=[2, 3], transfer=[]), cwd=tree)
    shell = [line for line in done.stdout.splitlines() if "diversed generate" in line]
    target_only = [line for line in shell if "--verifier autoregressive" in line]
    assert len(target_only) == 2 * 2  # 2 tasks x 2 temperatures x 1 seed, no K
    assert not any(" -K " in line for line in target_only)
    assert len(shell) - len(target_only) == 2 * 2 * 2 * 4  # tasks x temperatures x K x 4 speculative methods


def test_one_path_per_temperature(tree):
    """Regression: T = 1 and T = 1.0 made two sweeps (and T1-K3 vs T1.0-K3 paths) of the same setting."""
    done = snakemake("-n", "--forceall", "--configfile", with_config(tree, temperatures=[1], K=[2]), cwd=tree)
    assert "/T1-" not in done.stdout and "/T1.0-K2" in done.stdout
    assert jobs(done.stdout)["sweep_choose"] == 2  # arith and open at (T = 1.0, K = 2): the figure's sweep too


def test_wildcards_do_not_swallow_each_other(tree):
    """Regression: T matched "0.1-K5", so a malformed path was planned as a run at temperature "0.1-K5"."""
    target = "results/runs/tiny/arith/strict/T0.1-K5-K3-s0/manifest.json"
    done = snakemake("-n", target, "--configfile", "config/smoke.yaml", cwd=tree, check=False)
    assert done.returncode != 0 and "rule decode:" not in done.stdout


@pytest.mark.parametrize(("change", "message"), [
    ({"temperatures": [-1.0]}, "minimum"),
    ({"methods": ["beam"]}, "beam"),
    ({"tasks": {"mmlu": {}}}, "mmlu"),
    ({"pairs": {"p": {"target": "x"}}}, "draft"),
    ({"seeds": "zero"}, "zero"),
])
def test_bad_config_is_refused_before_any_job(tmp_path, change, message):
    wd = workflow_copy(tmp_path)
    done = snakemake("-n", "--configfile", with_config(wd, **change), cwd=wd, check=False)
    assert done.returncode != 0 and message in done.stdout + done.stderr


def parses(path: Path) -> bool:
    """Every kind of file the workflow writes, opened by what reads it."""
    import matplotlib.image
    import pandas as pd
    from safetensors.torch import load_file

    from diversed.utils import read_jsonl

    readers = {".json": lambda p: json.loads(p.read_text()), ".jsonl": read_jsonl, ".csv": pd.read_csv,
               ".png": matplotlib.image.imread, ".pdf": lambda p: p.read_bytes().startswith(b"%PDF") or None,
               ".md": lambda p: p.read_text().strip() or None, ".tex": lambda p: p.read_text().strip() or None,
               ".safetensors": load_file, ".pt": lambda p: p.stat().st_size or None}
    return readers[path.suffix](path) is not None


@pytest.mark.slow
def test_smoke_config_end_to_end(smoke_run):
    import pandas as pd

    wd = smoke_run
    files = [p for d in ("results", "figures") for p in (wd / d).rglob("*") if p.is_file()]
    assert len(files) > 100
    for path in files:
        assert parses(path), path
    for name in ("table1", "table2", "table3", "speed"):
        assert "tabular" in (wd / "results" / "tables" / f"{name}.tex").read_text()
    runs = pd.read_csv(wd / "results" / "tables" / "runs.csv")
    assert len(runs) == 21 and set(runs["method"]) == {"autoregressive", "strict", "finetuned", "fixed", "dynamic"}
    assert list(pd.read_csv(wd / "results" / "tables" / "table1.csv")["method"]) == [
        "SD", "SD with fine-tuned draft", "DIVERSED"]
    assert len(list((wd / "figures").glob("*.png"))) == 6
    assert "Table 1" in (wd / "results" / "REPORT.md").read_text()

    # nothing changed: nothing to do
    assert "Nothing to be done" in snakemake("-n", "--configfile", "config/smoke.yaml", cwd=wd).stdout
    # one config value changed (the sweep grid): only what depends on it reruns
    config = yaml.safe_load((wd / "config" / "smoke.yaml").read_text())
    config["sweep"]["weights"] = [0.25]
    (wd / "config" / "smoke.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    counts = jobs(snakemake("-n", "--configfile", "config/smoke.yaml", cwd=wd).stdout)
    assert set(counts) == {"sweep_point", "sweep_choose", "decode", "score", "aggregate", "plot", "report",
                           "all"}, counts
    # 2 tasks x 2 temperatures + the K-figure sweep: the new point only, and the choice
    assert counts["sweep_point"] == counts["sweep_choose"] == 5
    assert counts["decode"] == counts["score"] == 4  # the fixed runs that read a re-chosen w
