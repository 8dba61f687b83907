"""Crash safety and determinism: SIGKILL a decoding run, a training run, the workflow and one of its jobs at random
points; nothing half-written looks complete, and rerunning the same command finishes only the missing work with the
same final result as an uninterrupted run."""

from __future__ import annotations

import filecmp
import random
import re
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers import ENV, kill_when, sigint_as_a_terminal_has_it, start

pytestmark = pytest.mark.slow  # kills subprocesses

def prompts_done(log: Path) -> int:
    """Prompts decoded so far, read off the progress bar a run writes to stderr ("... 17/60 ...")."""
    counts = re.findall(r"(\d+)/60 ", log.read_text(errors="replace")) if log.is_file() else []
    return int(counts[-1]) if counts else -1


def complete_runs(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.rglob("manifest.json"))


def test_killed_decoding_run_leaves_nothing_complete_and_rerun_finishes(tiny_dir, tmp_path, seed=0):
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


def test_ctrl_c_exits_130_in_one_line_and_leaves_nothing(tiny_dir, tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while decoding: exit 130, one line, no
    traceback, no run folder and no temporary folder left."""
    import os
    import signal

    if found := sigint_as_a_terminal_has_it():
        warnings.warn(f"before the Ctrl-C test: {found}", stacklevel=1)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "problem {i}: {i} + {i} ="}}\n' for i in range(60)))
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = start(["diversed", "generate", "--target", str(tiny_dir / "tiny-target"), "--draft",
                      str(tiny_dir / "tiny-draft-l1"), "--prompts", str(prompts), "--max-new-tokens", "64",
                      "--out", str(tmp_path / "out")], stderr=err)
        t0 = time.time()
        while prompts_done(log) < 3:
            assert proc.poll() is None and time.time() - t0 < 120, log.read_text()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = "no exit within 60 s"
    text = log.read_text(errors="replace")
    assert rc == 130, text[-3000:]
    assert "Traceback" not in text and text.rstrip().splitlines()[-1] == "error: interrupted", text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_ctrl_c_swallowed_by_a_library_still_stops_before_anything_is_written(tiny_dir, tmp_path, monkeypatch):
    """A SIGINT whose KeyboardInterrupt some code swallows (here a progress-bar update that catches BaseException)
    still ends the run at the next prompt with exit 130, and no run folder is written: with Python's own handler
    the decode went on and wrote the run."""
    import os
    import signal

    from tqdm.auto import tqdm

    from diversed.cli import main

    if found := sigint_as_a_terminal_has_it():
        warnings.warn(f"before the swallowed Ctrl-C test: {found}", stacklevel=1)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "problem {i}: {i} + {i} ="}}\n' for i in range(12)))
    update, calls = tqdm.update, []

    def swallowing_update(self, n=1):
        calls.append(n)
        if len(calls) == 3:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # the handler runs here
            except BaseException:  # the library at fault
                pass
        return update(self, n)

    monkeypatch.setattr(tqdm, "update", swallowing_update)
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1"),
              "--prompts", str(prompts), "--max-new-tokens", "16", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 130 and len(calls) == 3
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored for the rest of the process


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
