"""Run model-written code as untrusted input: one process per candidate, limits on everything.

Each candidate runs in a fresh `python -I` process in an empty temporary folder (deleted afterwards), in its own
session (killed as a group at the deadline), with limits on address space, CPU time, file size, open files and
processes, as user nobody when we are root. Isolation comes from the operating system first (the first of
`ISOLATIONS` that works on this machine, checked once per process):

- "bwrap": bubblewrap, new user, mount, pid, network, ipc and uts namespaces; the whole file system read-only,
  private tmpfs on /tmp, /var/tmp and the home folder, a fresh /dev and /proc; only the candidate's folder is
  writable, and nothing written elsewhere outlives the candidate.
- "unshare": util-linux's unshare where bwrap is missing or refused: the same namespaces, private tmpfs on /tmp,
  /var/tmp and /dev/shm, the home folder read-only; elsewhere only file permissions stop writes.
- "none": the limits and the guard only (a warning says so once).

A Python guard, executed before the candidate's first line, is the second layer: it removes networking, process
creation and destructive file operations, and refuses writes outside the candidate's folder through `open`,
`io.open` (so `pathlib`) and `os.open`. A candidate that hangs, forks, floods memory, touches the network or
writes elsewhere fails its example or leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

NOBODY = 65534
PATH = "/usr/bin:/bin"  # where the sandbox's tools and the candidate's commands are looked up
MAX_PROCESSES = 32
ISOLATIONS = ("bwrap", "unshare", "none")  # best first
SANDBOX_TOOLS = ("bwrap:", "unshare:", "setpriv:")  # how the tools' own errors begin, before the candidate runs

# Executed before the candidate; closes the doors a test program never needs. The process limit is set here,
# inside the namespaces, so that it counts the candidate's processes only.
GUARD = f"import resource\nresource.setrlimit(resource.RLIMIT_NPROC, ({MAX_PROCESSES}, {MAX_PROCESSES}))\n" + r'''
import builtins, io, os, shutil, socket, subprocess, sys
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
_open, _os_open = builtins.open, os.open
_here = os.path.realpath(os.getcwd())
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def _outside(file):
    return not isinstance(file, int) and not os.path.realpath(os.fsdecode(file)).startswith(_here + os.sep)
def _guarded_open(file, mode="r", *a, **k):
    if any(c in mode for c in "wax+") and _outside(file):
        raise PermissionError("writes outside the sandbox directory are blocked")
    return _open(file, mode, *a, **k)
def _guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):
    if flags & _WRITE and (dir_fd is not None or _outside(path)):
        raise PermissionError("writes outside the sandbox directory are blocked")
    return _os_open(path, flags, mode)
builtins.open = io.open = _guarded_open
os.open = _guarded_os_open
sys.modules["multiprocessing"] = None
sys.modules["ctypes"] = None
del _name, _blocked
'''

# unshare's first process: private mounts as the namespace's root, then the candidate with no capabilities left.
# The work folder is held as the current directory across the tmpfs that may cover it, then bound back over it.
UNSHARE_PROLOGUE = r'''
set -e
work="$1"; home="$2"; shift 2
cd "$work"
if [ -n "$home" ]; then mount --bind "$home" "$home"; mount -o remount,bind,ro "$home"; fi
for d in /tmp /var/tmp /dev/shm; do if [ -d "$d" ]; then mount -t tmpfs -o mode=1777 tmpfs "$d"; fi; done
mkdir -p "$work"; mount --no-canonicalize --bind . "$work"; cd "$work"
exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
'''


@dataclass
class ExecResult:
    passed: bool
    status: str  # "passed" | "failed" | "timeout" | "error"
    detail: str = ""
    isolation: str = ""  # one of ISOLATIONS


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


def _home() -> str:
    """The home folder to protect, "" when there is none worth a mount."""
    home = os.path.realpath(os.path.expanduser("~"))
    return home if home != os.sep and os.path.isdir(home) else ""


def _under(path: str, folder: str) -> bool:
    return bool(folder) and (path + os.sep).startswith(folder + os.sep)


def _isolated(isolation: str, cmd: list[str], work: str) -> list[str]:
    """`cmd` wrapped in the namespaces of `isolation`, with `work` its only writable folder."""
    home = _home()
    if isolation == "bwrap":
        args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/var/tmp"]
        if home:  # hidden, except the interpreter when it lives there
            args += ["--tmpfs", home]
            prefixes = {os.path.dirname(os.path.dirname(p)) for p in (cmd[0], os.path.realpath(cmd[0]))}
            for prefix in sorted(p for p in prefixes if _under(p, home)):
                args += ["--ro-bind", prefix, prefix]
        return [*args, "--bind", work, work, "--chdir", work, "--unshare-all", "--die-with-parent",
                "--new-session", "--", *cmd]
    if isolation == "unshare":
        return ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork",
                "--kill-child", "--mount-proc", "sh", "-c", UNSHARE_PROLOGUE, "sh", work, home, *cmd]
    if isolation == "none":
        return cmd
    raise ValueError(f"unknown isolation {isolation!r}; allowed: {', '.join(ISOLATIONS)}")


@functools.cache
def unavailable(isolation: str) -> str:
    """Why `isolation` cannot run a trivial candidate on this machine, "" when it can (checked once per process)."""
    if isolation == "none":
        return ""
    if shutil.which(isolation, path=PATH) is None:
        return f"`{isolation}` is not installed in {PATH}"
    r = run_untrusted("", isolation=isolation)
    return "" if r.passed else f"`{isolation}` fails here: {(r.detail.strip().splitlines() or [r.status])[-1]}"


@functools.cache
def best_isolation() -> str:
    """The first of ISOLATIONS that works here, checked once per process; a warning when it is not bwrap."""
    best = next(i for i in ISOLATIONS if not unavailable(i))
    if best != "bwrap":
        print(f"warning: the code sandbox runs with isolation {best!r}, not 'bwrap' ({unavailable('bwrap')}); "
              "install bubblewrap for a read-only file system and a private home and temporary folder",
              file=sys.stderr)
    return best


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


def run_untrusted(program: str, *, timeout: float = 10.0, memory_mb: int = 1024,
                  isolation: str | None = None) -> ExecResult:
    """Run `program` (candidate + its tests); passed means exit status 0 within the limits.

    `isolation` is one of ISOLATIONS; None takes the best that works here (`best_isolation`)."""
    level = isolation or best_isolation()
    with tempfile.TemporaryDirectory(prefix="diversed-exec-") as tmp:
        tmp = os.path.realpath(tmp)
        os.chmod(tmp, 0o777)  # the unprivileged child must be able to work in it
        path = os.path.join(tmp, "candidate.py")
        with open(path, "w") as f:
            f.write(GUARD + "\n" + program)
        os.chmod(path, 0o644)
        python, drop = interpreter()
        cmd = _isolated(level, [python, "-I", "-B", path], tmp)
        env = {"PATH": PATH, "PYTHONHASHSEED": "0", "HOME": tmp, "LANG": "C.UTF-8"}
        try:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE,
                                    preexec_fn=lambda: _limits(memory_mb, int(timeout) + 1, drop))
        except OSError as e:
            return ExecResult(False, "error", f"could not start: {e}", level)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return ExecResult(False, "timeout", f"no result within {timeout:g} s", level)
        finally:
            _kill_group(proc)
        detail = err.decode(errors="replace")[-2000:]
        if proc.returncode == 0:
            return ExecResult(True, "passed", detail, level)
        if err.decode(errors="replace").lstrip().startswith(SANDBOX_TOOLS):  # the sandbox's own failure
            return ExecResult(False, "error", detail, level)
        return ExecResult(False, "failed", detail or f"exit status {proc.returncode}", level)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the candidate's session; bwrap and unshare take their namespaces' processes down with them."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
