"""Crash safety and determinism: SIGKILL a decoding run, a training run and the workflow at random points;
nothing half-written looks complete, and rerunning the same command finishes only the missing work with the
same final result as an uninterrupted run."""

from __future__ import annotations

import filecmp
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # kills subprocesses

ENV = os.environ | {"WANDB_MODE": "disabled", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def start(args: list[str], cwd: Path | None = None, stderr=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)


def prompts_done(log: Path) -> int:
    """Prompts decoded so far, read off the progress bar a run writes to stderr ("... 17/60 ...")."""
    counts = re.findall(r"(\d+)/60 ", log.read_text(errors="replace")) if log.is_file() else []
    return int(counts[-1]) if counts else -1


def kill_when(proc: subprocess.Popen, ready, deadline: float = 120.0) -> None:
    """SIGKILL the whole process group once ready() holds (the process must still be running)."""
    t0 = time.time()
    while not ready():
        assert proc.poll() is None, "finished before it could be killed"
        assert time.time() - t0 < deadline, "never reached the kill point"
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def complete_runs(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.rglob("manifest.json"))


def count_files(root: Path, name: str) -> int:
    """Files called name under root, read while a live process renames and removes its temporary folders
    (os.walk skips a folder that vanishes between listing and reading; Path.rglob raises)."""
    return sum(name in files for _, _, files in os.walk(root))


@pytest.mark.parametrize("seed", [0, 1])
def test_killed_decoding_run_leaves_nothing_complete_and_rerun_finishes(tiny_dir, tmp_path, seed):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "problem {i}: {i} + {i} ="}}\n' for i in range(60)))
    args = ["diversed", "generate", "--target", str(tiny_dir / "tiny-target"), "--draft",
            str(tiny_dir / "tiny-draft-l1"), "--verifier", "fixed", "--weight", "0.5", "--prompts", str(prompts),
            "--max-new-tokens", "64", "--seed", "1"]
    subprocess.run([*args, "--out", str(tmp_path / "clean")], env=ENV, check=True, capture_output=True)
    at = random.Random(seed).randint(1, 40)  # a random point while decoding, >= 20 prompts before the end
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = start([*args, "--out", str(tmp_path / "killed")], stderr=err)
        kill_when(proc, lambda: prompts_done(log) >= at)
    killed = tmp_path / "killed"
    assert complete_runs(killed) == []  # no manifest, so no run that looks finished
    assert not killed.exists() or all(p.name.startswith(".") for p in killed.iterdir())  # only hidden temp dirs
    subprocess.run([*args, "--out", str(killed)], env=ENV, check=True, capture_output=True)
    (a,), (b,) = complete_runs(killed), complete_runs(tmp_path / "clean")
    assert filecmp.cmp(a / "generations.jsonl", b / "generations.jsonl", shallow=False)


def test_killed_training_resumes_to_the_same_head(tiny_dir, tmp_path):
    from diversed.decoding.head import load_head
    from diversed.decoding.models import load_pair

    args = ["diversed", "train", "head", "--target", str(tiny_dir / "tiny-target"), "--draft",
            str(tiny_dir / "tiny-draft-l1"), "--task", "arith", "--n-train", "8", "--batch-size", "2", "--epochs", "2",
            "--max-new-tokens", "24", "--rollout", "sample", "--reward", "fidelity"]
    ckpt = tmp_path / "killed" / "checkpoint.pt"

    def ready():
        if not ckpt.is_file():
            return False
        return torch.load(ckpt, weights_only=False)["step"] >= 3  # mid-training, at a random batch boundary

    kill_when(start([*args, "--out", str(tmp_path / "killed")]), ready)
    assert not (tmp_path / "killed" / "head.safetensors").exists()
    subprocess.run([*args, "--out", str(tmp_path / "killed")], env=ENV, check=True, capture_output=True)
    subprocess.run([*args, "--out", str(tmp_path / "clean")], env=ENV, check=True, capture_output=True)
    pair = load_pair(str(tiny_dir / "tiny-target"), str(tiny_dir / "tiny-draft-l1"))
    a = load_head(tmp_path / "killed" / "head.safetensors", pair.target, pair.draft)
    b = load_head(tmp_path / "clean" / "head.safetensors", pair.target, pair.draft)
    assert torch.equal(a.proj.weight, b.proj.weight) and torch.equal(a.proj.bias, b.proj.bias)


@pytest.mark.slow
def test_killed_workflow_resumes_to_identical_results(smoke_run, tmp_path):
    """Kill the smoke workflow mid-run, unlock, rerun the same command: byte-identical generations and Tables 1-3
    to an uninterrupted run (so also: the same config and seed give the same results, run twice)."""
    from conftest import snakemake, workflow_copy

    wd = workflow_copy(tmp_path)
    proc = start([sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "config/smoke.yaml"], cwd=wd)
    runs = wd / "results" / "runs"
    target = random.Random(0).randint(4, 12)  # after a random number of finished decoding runs
    kill_when(proc, lambda: count_files(runs, "manifest.json") >= target, deadline=600)
    assert not (wd / "results" / "REPORT.md").exists()
    snakemake("--unlock", "--configfile", "config/smoke.yaml", cwd=wd)  # the lock the SIGKILL left
    snakemake("--cores", "2", "--configfile", "config/smoke.yaml", cwd=wd, timeout=1200)

    ref = smoke_run
    gens = sorted(p.relative_to(ref) for p in (ref / "results" / "runs").rglob("generations.jsonl"))
    assert len(gens) == 29  # 2 tasks x 2 temperatures x 7 methods, and the transfer run
    for rel in gens:
        assert filecmp.cmp(ref / rel, wd / rel, shallow=False), rel
    for name in ("table1", "table2", "table3"):
        for ext in ("csv", "md", "tex"):
            rel = Path("results") / "tables" / f"{name}.{ext}"
            assert filecmp.cmp(ref / rel, wd / rel, shallow=False), rel


def test_a_failed_decode_job_keeps_its_finished_runs_and_its_rerun_decodes_only_the_rest(smoke_run, tmp_path):
    """Regression: a decode job killed after some of its runs lost them all (Snakemake deletes a failed job's
    outputs) and its rerun decoded everything again. Each finished run is kept (hard links under results/kept);
    the rerun takes back exactly those and decodes the rest, to the same bytes as an uninterrupted run."""
    from conftest import snakemake, workflow_copy

    wd = workflow_copy(tmp_path)
    job = "results/runs/tiny/arith/autoregressive/T1.0-s0/scores.json"  # one decode job: every method's run
    kept = wd / "results" / "kept"
    proc = start([sys.executable, "-m", "snakemake", job, "--cores", "2", "--configfile", "config/smoke.yaml"],
                 cwd=wd)  # the target first: --configfile takes every value after it
    decode_log = wd / "logs" / "decode" / "tiny" / "arith" / "T1.0-s0.log"

    def two_runs_done():  # the decode job has kept 2 of its runs (earlier jobs keep none: only decode keeps)
        return decode_log.is_file() and kept.is_dir() and len([p for p in kept.iterdir()
                                                               if not p.name.startswith(".")]) >= 2

    t0 = time.time()
    while not two_runs_done():
        assert proc.poll() is None and time.time() - t0 < 600, "the decode job never kept two runs"
        time.sleep(0.05)
    found = subprocess.run(["pgrep", "-f", "diversed generate"], capture_output=True, text=True).stdout.split()
    decoders = [pid for pid in found if Path(f"/proc/{pid}/cwd").resolve() == wd.resolve()]  # this test's only
    assert decoders
    for pid in decoders:  # the job's process dies; Snakemake sees a failed job and deletes its outputs
        os.kill(int(pid), signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    assert not (wd / job).exists()
    finished = {p.name for p in kept.iterdir() if not p.name.startswith(".")}
    snakemake(job, "--cores", "2", "--configfile", "config/smoke.yaml", cwd=wd, timeout=600)
    log = decode_log.read_text()
    taken = set(re.findall(r"run (\w+): taken from", log))
    decoded = set(re.findall(r"decode (\w+) \(batch", log))
    assert taken == finished and len(taken) >= 2, (taken, finished)
    # the rest decoded, or copied: a fixed w the sweep left at 1, or a family kept at strict, is strict's run id
    runs = list((wd / "results" / "runs" / "tiny" / "arith").glob("*/T1.0*-s0/manifest.json"))
    assert len(runs) == 7  # autoregressive, strict, finetuned, fixed, dynamic, cascade, lenient
    assert decoded and len(taken) + len(decoded) + log.count(", copied") == len(runs), (decoded, taken)
    ref = smoke_run
    for rel in sorted(p.relative_to(wd) for p in (wd / "results" / "runs" / "tiny" / "arith").rglob(
            "T1.0*-s0/generations.jsonl")):
        assert filecmp.cmp(ref / rel, wd / rel, shallow=False), rel
