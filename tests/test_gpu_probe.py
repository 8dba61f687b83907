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


def test_the_script_fits_its_loan_and_brings_back_few_files():
    """#49: step limits within 270 s (a second attempt fits a 15-minute loan); the versions checked before any step;
    three files in $OUT (at most 8 come back, 2 folders deep), the summary printed last; the commit from the file
    written when the script is prepared (the tree travels without .git)."""
    script = (ROOT / "benchmarks" / "gpu_first.sh").read_text()
    limits = [int(m) for m in re.findall(r"^(?:PYTORCH_CUDA_ALLOC_CONF=\S+ )?(?:step|probe) \S+ (\d+) ", script,
                                         flags=re.M)]
    assert len(limits) == 8 and sum(limits) <= 270
    for step in ("syncs", "batch --arch llama", "batch --arch qwen", "graphs --arch qwen", "gemma", "agreement"):
        assert f" {step}" in script
    assert script.index("python3 -m diversed.compat") < script.index("\nstep ")
    written = set(re.findall(r'"\$out/([\w.]+)"', script))
    assert written == {"summary.md", "gpu.log", "results.tar.gz"}, written
    assert script.rstrip().splitlines()[-1].startswith('cat "$out/summary.md"')
    assert "benchmarks/.prepared" in script and "--commit" in script


def test_the_script_stops_at_once_on_an_unsupported_version(tmp_path):
    """Run as on a GPU machine whose image holds an older transformers: one line, exit 2, before any step."""
    import os
    import subprocess

    fake = tmp_path / "transformers"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '5.16.0'\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559 MiB, 580.00'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = os.environ | {"OUT": str(tmp_path / "out"), "PYTHONPATH": str(tmp_path),
                        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_first.sh")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: transformers 5.16.0 is older than diversed supports" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu.log", "summary.md"]
