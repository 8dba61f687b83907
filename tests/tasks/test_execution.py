"""The pass@1 executor survives hostile candidates: each fails its example and leaves the host untouched."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from diversed.tasks.execution import ISOLATIONS, best_isolation, run_untrusted, unavailable

pytestmark = pytest.mark.slow  # every test runs sandboxed subprocesses

# A hostile candidate first undoes the Python guard, so that only the operating system stands in the way.
DISARM = "import _io, builtins, io, os, posix, sys\nbuiltins.open = io.open = _io.open\nos.open = posix.open\n"
# Each route writes the file {t}.
ROUTES = {
    "os.open": "fd = os.open({t!r}, os.O_WRONLY | os.O_CREAT, 0o644)\nos.write(fd, b'x')\nos.close(fd)",
    "io.open": "io.open({t!r}, 'w').write('x')",
    "pathlib": "import pathlib\npathlib.Path({t!r}).write_text('x')",
    "shutil": "import shutil\nshutil.copyfile(__file__, {t!r})",
    "subprocess": "import importlib, subprocess\nimportlib.reload(subprocess)\n"
                  "subprocess.run(['sh', '-c', 'echo x > ' + {t!r}], check=True)",
    "ctypes": "del sys.modules['ctypes']\nimport ctypes\nlibc = ctypes.CDLL(None)\n"
              "fd = libc.open({t!r}.encode(), os.O_WRONLY | os.O_CREAT, 0o644)\n"
              "libc.write(fd, b'x', 1)\nlibc.close(fd)",
}
PLACES = {"temp": tempfile.gettempdir, "home": Path.home}
PASSES = "def f(x):\n    return x + 1\nassert f(1) == 2\n"


def probe_path(place: str) -> Path:
    return Path(PLACES[place]()) / f"diversed-probe-{uuid.uuid4().hex}"


def require(isolation: str) -> None:
    if why := unavailable(isolation):
        pytest.skip(f"isolation {isolation!r} is not available here: {why}")


def hostile(route: str, target: Path) -> str:
    """A candidate that writes `target` through `route`, swallows any error and passes its tests."""
    body = ROUTES[route].format(t=str(target)).replace("\n", "\n    ")
    return f"{DISARM}try:\n    {body}\nexcept Exception as e:\n    print(repr(e), file=sys.stderr)\n{PASSES}"


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
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_runs_unprivileged_when_root(isolation):
    """As root the candidate is nobody: it cannot read a root-only file. Under unshare it is uid 0 of its own user
    namespace (--map-root-user), mapped to nobody outside and without capabilities, so its uid alone says nothing."""
    if unavailable(isolation):
        pytest.skip(unavailable(isolation))
    if not os.path.isfile("/etc/shadow") or os.stat("/etc/shadow").st_mode & 0o004:
        pytest.skip("no root-only /etc/shadow here")
    r = run_untrusted("open('/etc/shadow').read()\n", isolation=isolation)
    assert not r.passed and "PermissionError" in r.detail, r


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
        assert not r.passed and any(e in r.detail for e in ("Permission", "No such file", "Read-only"))
        assert victim.read_text() == "keep me"


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_hostile_writes_leave_nothing_behind(isolation, route, place):
    """Every write route, with the guard undone, into the temporary and the home folder: the candidate still
    passes its tests, and nothing it wrote outlives it."""
    require(isolation)
    target = probe_path(place)
    try:
        r = run_untrusted(hostile(route, target), isolation=isolation)
        assert r.passed and r.isolation == isolation, r
        assert not target.exists(), f"{route} left {target} behind under {isolation}"
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("route", ["os.open", "io.open", "pathlib", "shutil"])
def test_the_guard_alone_blocks_plain_writes(route):
    """The second layer, without any isolation: writes outside the candidate's folder raise."""
    target = probe_path("temp")
    try:
        r = run_untrusted("import io, os, sys\n" + ROUTES[route].format(t=str(target)) + "\n", isolation="none")
        assert not r.passed and "blocked" in r.detail, r
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_honest_candidates_work_in_every_isolation(isolation):
    require(isolation)
    program = "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n" + PASSES
    r = run_untrusted(program, isolation=isolation)
    assert r.passed and r.isolation == isolation, r


def test_the_best_isolation_is_used_and_recorded():
    best = best_isolation()
    assert best == next(i for i in ISOLATIONS if not unavailable(i))
    assert run_untrusted(PASSES).isolation == best
    with pytest.raises(ValueError, match="unknown isolation 'chroot'; allowed: bwrap, unshare, none"):
        run_untrusted(PASSES, isolation="chroot")


@pytest.fixture
def fresh_isolation():
    """The once-per-process isolation check forgotten before and after the test."""
    checks = (best_isolation, unavailable)
    for check in checks:
        check.cache_clear()
    yield
    for check in checks:
        check.cache_clear()


@pytest.mark.parametrize("missing", [("bwrap",), ("bwrap", "unshare")])
def test_missing_tools_fall_back_with_a_warning(monkeypatch, capsys, fresh_isolation, missing):
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, **k: None if name in missing else which(name, **k))
    expected = "none" if len(missing) == 2 or unavailable("unshare") else "unshare"
    assert best_isolation() == expected and run_untrusted(PASSES).isolation == expected
    assert best_isolation() == expected  # checked once: one warning
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"isolation {expected!r}, not 'bwrap' (`bwrap` is not installed" in err


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_a_timeout_takes_the_whole_sandbox_down(isolation):
    require(isolation)
    marker = f"diversed-orphan-{uuid.uuid4().hex}"
    program = (f"import posix, sys\nposix.posix_spawn(sys.executable, [sys.executable, '-c', "
               f"'import time; time.sleep(60)', {marker!r}], {{}})\nwhile True:\n    pass\n")
    assert run_untrusted(program, timeout=2, isolation=isolation).status == "timeout"
    time.sleep(0.5)
    alive = [p for p in Path("/proc").iterdir() if p.name.isdigit() and marker in cmdline(p)]
    assert not alive, f"{len(alive)} process(es) outlived the sandbox"


def cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
