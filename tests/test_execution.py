"""The pass@1 executor survives hostile candidates: each fails its example and leaves the host untouched."""

from __future__ import annotations

import os
import time

import pytest

from diversed.tasks.execution import run_untrusted


def test_passing_and_failing_programs():
    assert run_untrusted("def f(x):\n    return x + 1\nassert f(1) == 2\n").passed
    r = run_untrusted("def f(x):\n    return x\nassert f(1) == 2\n")
    assert not r.passed and r.status == "failed" and "AssertionError" in r.detail
    r = run_untrusted("def f(:\n")
    assert not r.passed and "SyntaxError" in r.detail


def test_infinite_loop_times_out():
    t0 = time.time()
    r = run_untrusted("while True:\n    pass\n", timeout=2)
    assert r.status == "timeout" and not r.passed
    assert time.time() - t0 < 10


def test_fork_bomb_is_contained():
    r = run_untrusted("import os\nwhile True:\n    os.fork()\n", timeout=3)
    assert not r.passed
    r = run_untrusted("import subprocess\nsubprocess.Popen(['sleep', '100'])\n", timeout=3)
    assert not r.passed and "blocked" in r.detail


def test_memory_bomb_is_contained():
    r = run_untrusted("x = bytearray(8 * 1024**3)\n", timeout=5, memory_mb=512)
    assert not r.passed and "MemoryError" in r.detail
    r = run_untrusted("xs = []\nwhile True:\n    xs.append(' ' * 10**7)\n", timeout=5, memory_mb=512)
    assert not r.passed


def test_writes_outside_the_sandbox_are_blocked(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    r = run_untrusted(f"open({str(victim)!r}, 'w').write('pwned')\n")
    assert not r.passed
    r = run_untrusted(f"import os\nos.remove({str(victim)!r})\n")
    assert not r.passed
    assert victim.read_text() == "keep me"
    assert run_untrusted("open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n").passed


def test_network_is_blocked():
    r = run_untrusted("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n", timeout=5)
    assert not r.passed and "blocked" in r.detail
    r = run_untrusted("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)\n", timeout=5)
    assert not r.passed


@pytest.mark.skipif(os.geteuid() != 0, reason="privilege drop only happens when running as root")
def test_runs_unprivileged_when_root():
    assert run_untrusted("import os\nassert os.geteuid() != 0\n").passed


def test_os_limits_hold_when_the_python_guard_is_bypassed(tmp_path):
    """The guard only patches Python names; `posix` reaches the raw system calls. The process, memory and
    file-permission limits must still contain the candidate (defence in depth)."""
    fork_bomb = "import posix\nwhile True:\n    posix.fork()\n"
    t0 = time.time()
    r = run_untrusted(fork_bomb, timeout=3)
    assert not r.passed and time.time() - t0 < 15
    r = run_untrusted("import posix\nxs = []\nwhile True:\n    xs.append(bytearray(10**8))\n", timeout=5,
                      memory_mb=512)
    assert not r.passed
    if os.geteuid() == 0:  # as root the candidate runs as nobody: the OS refuses writes to our files
        victim = tmp_path / "victim.txt"
        victim.write_text("keep me")
        r = run_untrusted(f"import posix\nfd = posix.open({str(victim)!r}, posix.O_WRONLY)\n"
                          "posix.write(fd, b'pwned')\n")
        assert not r.passed and "Permission" in r.detail
        assert victim.read_text() == "keep me"
