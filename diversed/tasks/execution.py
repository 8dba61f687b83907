"""Run model-written code as untrusted input: one process per candidate, limits on everything.

Each candidate runs in a fresh `python -I` process in an empty temporary directory, in its own
session (killed as a group at the deadline), with limits on address space, CPU time, file size,
open files and processes, as an unprivileged user when we are root, and behind a guard that removes
networking, process creation and destructive file operations before the candidate's first line.
A candidate that hangs, forks, floods memory or touches the network fails its example and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

NOBODY = 65534

# Executed before the candidate; closes the doors a test program never needs.
GUARD = r'''
import builtins, os, shutil, socket, subprocess, sys
def _blocked(*a, **k):
    raise PermissionError("blocked by the diversed sandbox")
for _name in ("socket", "create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo"):
    setattr(socket, _name, _blocked)
for _name in ("fork", "forkpty", "system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execle",
              "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp",
              "kill", "killpg", "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace",
              "truncate", "chmod", "chown", "lchown", "fchmod", "fchown", "symlink", "link", "putenv", "setuid",
              "setgid", "chroot"):
    if hasattr(os, _name):
        setattr(os, _name, _blocked)
shutil.rmtree = shutil.move = shutil.chown = _blocked
subprocess.Popen = subprocess.run = subprocess.call = subprocess.check_output = subprocess.check_call = _blocked
_open = builtins.open
_here = os.path.realpath(os.getcwd())
def _guarded_open(file, mode="r", *a, **k):
    if any(c in mode for c in "wax+") and not os.path.realpath(str(file)).startswith(_here + os.sep):
        raise PermissionError("writes outside the sandbox directory are blocked")
    return _open(file, mode, *a, **k)
builtins.open = _guarded_open
sys.modules["multiprocessing"] = None
sys.modules["ctypes"] = None
del _name, _blocked
'''


@dataclass
class ExecResult:
    passed: bool
    status: str  # "passed" | "failed" | "timeout" | "error"
    detail: str = ""


def _world_executable(path: str) -> bool:
    """Can an unprivileged user run this file (o+x on it and o+x on every directory above it)?"""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        p = os.sep.join(parts[:i])
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def interpreter() -> tuple[str, bool]:
    """(python to run candidates with, whether to drop to an unprivileged user).

    As root we run candidates as nobody, so that process limits apply and private files stay closed;
    that needs an interpreter nobody can execute (a venv under /root is not), else the system python.
    """
    if os.geteuid() != 0:
        return sys.executable, False
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and _world_executable(candidate):
            return os.path.realpath(candidate), True
    return sys.executable, False


def _limits(memory_mb: int, cpu_s: int, drop: bool) -> None:
    """preexec_fn: runs in the child between fork and exec."""
    os.setsid()
    mem = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (10 * 1024 * 1024, 10 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if drop:  # root ignores RLIMIT_NPROC and can read everything: become nobody
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (32, 32))


def run_untrusted(program: str, *, timeout: float = 10.0, memory_mb: int = 1024) -> ExecResult:
    """Run `program` (candidate + its tests); passed means exit status 0 within the limits."""
    with tempfile.TemporaryDirectory(prefix="diversed-exec-") as tmp:
        os.chmod(tmp, 0o777)  # the unprivileged child must be able to work in it
        path = os.path.join(tmp, "candidate.py")
        with open(path, "w") as f:
            f.write(GUARD + "\n" + program)
        os.chmod(path, 0o644)
        python, drop = interpreter()
        cmd = [python, "-I", "-B", path]
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "HOME": tmp, "LANG": "C.UTF-8"}
        try:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE,
                                    preexec_fn=lambda: _limits(memory_mb, int(timeout) + 1, drop))
        except OSError as e:
            return ExecResult(False, "error", f"could not start: {e}")
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return ExecResult(False, "timeout", f"no result within {timeout:g} s")
        finally:
            _kill_group(proc)
        detail = err.decode(errors="replace")[-2000:]
        if proc.returncode == 0:
            return ExecResult(True, "passed", detail)
        return ExecResult(False, "failed", detail or f"exit status {proc.returncode}")


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
