"""The Snakemake workflow: lint, schema validation, the paper DAG offline, and the smoke config end to end
(every declared output exists and parses; a second run does nothing; a config change reruns its dependents)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, jobs, snakemake


def test_lint_is_clean():
    done = snakemake("--lint")
    assert "Congratulations" in done.stdout + done.stderr


def test_paper_config_builds_its_full_dag_offline():
    done = snakemake("-n", "--configfile", "config/paper.yaml")
    counts = jobs(done.stdout)
    # 3 pairs x 4 tasks x 5 methods x 2 temperatures x 3 seeds + 3 x 2 transfer x 3 seeds
    assert counts["decode"] == counts["score"] == 3 * 4 * 5 * 2 * 3 + 3 * 2 * 3
    assert counts["train_head"] == counts["distill_draft"] == 12
    assert counts["aggregate"] == counts["plot"] == counts["report"] == 1


def test_default_config_dry_run():
    counts = jobs(snakemake("-n").stdout)
    assert counts["prepare_models"] == 1 and counts["decode"] == 44


@pytest.mark.parametrize(("change", "message"), [
    ({"temperatures": [-1.0]}, "minimum"),
    ({"methods": ["beam"]}, "beam"),
    ({"tasks": {"mmlu": {}}}, "mmlu"),
    ({"pairs": {"p": {"target": "x"}}}, "draft"),
    ({"seeds": "zero"}, "zero"),
])
def test_bad_config_is_refused_before_any_job(tmp_path, change, message):
    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()) | change
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    done = snakemake("-n", "--configfile", str(path), check=False)
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
    assert set(counts) == {"sweep_weight", "decode", "score", "aggregate", "plot", "report", "all"}, counts
    assert counts["sweep_weight"] == 5  # 2 tasks x 2 temperatures + the K-figure sweep
    assert counts["decode"] == counts["score"] == 4  # the fixed runs that read a re-chosen w
