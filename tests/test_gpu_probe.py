"""benchmarks/gpu_first.sh and its probe, rehearsed on a CPU: every step runs at the tiny shapes and lands in the
report, and the script's step timeouts fit the 450 s it is given."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def probe():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    return gpu_probe


def test_every_probe_step_runs_and_reaches_the_report(probe, tmp_path):
    small = {"batch": ["--rows", "3", "--prompt-tokens", "40", "--tokens", "6"], "graphs": ["--tokens", "6"],
             "agreement": ["--rows", "3", "--tokens", "6"], "syncs": ["--tokens", "12"], "gemma": []}
    for step in probe.STEPS:
        probe.main([step, "--device", "cpu", "--dtype", "float32", "--out", str(tmp_path), *small[step]])
    text = probe.report(argparse.Namespace(out=str(tmp_path), no_record=True))
    for step in ("syncs", "batch-tiny", "graphs-tiny", "gemma", "agreement-tiny"):
        assert f"#### {step} (cpu, float32)" in text
    assert "Not measured" not in text
    assert "agreement 1," in text  # bitwise on CPU: batch 1 and batch 3 give the same tokens


def test_a_missing_step_is_reported_missing(probe, tmp_path):
    probe.main(["gemma", "--device", "cpu", "--dtype", "float32", "--out", str(tmp_path)])
    text = probe.report(argparse.Namespace(out=str(tmp_path), no_record=True))
    assert "Not measured (failed or out of time" in text and "syncs, batch, graphs, agreement" in text


def test_the_scripts_steps_fit_450_seconds():
    script = (ROOT / "benchmarks" / "gpu_first.sh").read_text()
    limits = [int(m) for m in re.findall(r"^(?:step|probe) \S+ (\d+) ", script, flags=re.M)]
    assert len(limits) == 8 and sum(limits) <= 450
    for step in ("syncs", "batch --arch llama", "batch --arch qwen", "graphs --arch qwen", "gemma", "agreement"):
        assert f" {step}" in script
