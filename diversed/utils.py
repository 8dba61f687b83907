"""Small shared helpers: atomic writes, provenance (git, versions, hardware), run ids."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import functools
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# what an option may declare beyond its default and help (diversed.utils.option)
SPEC = ("flag", "choices", "low", "high", "above", "below", "pattern", "nonempty", "unique", "required", "omit", "keys")


def option(default: Any, help: str, **spec) -> Any:
    """A config dataclass field declared once: its default, help, and what it accepts. The command line's flag
    (cli.add_config_args), the workflow config's schema, parse, checks and key table (diversed.experiment) are
    generated from it. spec (SPEC): flag, a short form such as "-K"; choices, the values accepted; low / high, the
    least / most value accepted, above / below, the bounds it must exceed / stay under (a list's bounds and choices
    apply to its items); pattern, a regular expression a string matches; nonempty, unique: a list's or mapping's;
    required: a key a config must give; omit: the fields of a nested settings object a config may not set (the plan
    sets them per job); keys: a mapping's allowed keys, each with its (type, option) pair."""
    if unknown := sorted(set(spec) - set(SPEC)):
        raise TypeError(f"option() got unknown declaration(s) {', '.join(unknown)}; allowed: {', '.join(SPEC)}")
    meta = {"help": help} | {k: tuple(v) if k in ("choices", "omit") else v for k, v in spec.items()
                             if v is not None and v is not False and v != ()}  # (0 is a bound)
    if type(default).__hash__ is None:  # a list, a mapping, a settings object: each instance its own copy
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_type(hint) -> type:
    """The type of a config field's annotation without its None (float | None -> float; a tuple[float, ...]: its
    items' type)."""
    if typing.get_origin(hint) in (tuple, list):
        return typing.get_args(hint)[0]
    return next(t for t in typing.get_args(hint) or (hint,) if t is not type(None))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _as_umask_allows(path: Path, directory: bool) -> None:
    """Give a temp file (0600 from mkstemp) or folder (0700 from mkdtemp) the mode the user's umask gives a new one,
    so that a shared project folder can read what a command wrote."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"cannot write the file {path}: a folder is there")
    check_writable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        _as_umask_allows(tmp, directory=False)
        yield tmp
        stop_if_interrupted()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclasses.dataclass(frozen=True)
class Owner:
    """What marks a folder as written by one of diversed's commands: a JSON file `marker` in it holding the key
    `key`. An existing folder is replaced only if it carries its writer's marker (or is empty)."""

    what: str  # the folder's kind, in messages
    marker: str
    key: str

    def owns(self, folder: Path) -> bool:
        try:
            return self.key in json.loads((folder / self.marker).read_text())
        except (OSError, ValueError, TypeError):
            return False


RUN_OWNER = Owner("run folder", "manifest.json", "run_id")  # diversed.runs.run
DRAFT_OWNER = Owner("fine-tuned draft", "distill_manifest.json", "config_id")  # diversed.training.finetune
MODEL_OWNER = Owner("model folder", "built.json", "built_by")  # diversed prepare-models


def protected(path: Path) -> str | None:
    """Why a folder may never be replaced (None: it may): the root, the home folder, the working directory or one
    above it, the package's repository or one above it."""
    path, cwd = path.resolve(), Path.cwd().resolve()
    package = Path(__file__).resolve().parent
    if path == Path(path.anchor):
        return "the file system's root"
    if path == Path.home().resolve():
        return "the home folder"
    if path == cwd or path in cwd.parents:
        return "the working directory" if path == cwd else "a folder above the working directory"
    if path == package or path in package.parents:
        return "diversed's own source folder" if path == package else "a folder above diversed's source"
    return None


def check_writable(path: str | os.PathLike) -> None:
    """Raise (before any compute) unless `path` can be written: every existing folder above it is a folder, the
    nearest one writable, and `path` itself not a folder where a file is written (or the reverse, for folders)."""
    path = Path(path)
    above = path.parent
    while not above.exists():
        if above.is_symlink():  # a dangling link
            raise ValueError(f"cannot write {path}: {above} is a broken link")
        above = above.parent
    if not above.is_dir():
        raise ValueError(f"cannot write {path}: {above} is a file, not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {path}: {above} is not writable")


def check_output(path: str | os.PathLike, owner: Owner) -> None:
    """Raise (with one line, before any compute) unless `path` may be replaced by a new `owner` folder: it is
    absent, empty, or an earlier output of the same kind (owner's marker in it); never a protected folder."""
    path = Path(path)
    if why := protected(path):
        raise ValueError(f"refusing to write a {owner.what} at {path}: it is {why}; give a folder of its own")
    if path.exists() or path.is_symlink():
        if not path.is_dir() or path.is_symlink():
            raise ValueError(f"refusing to write a {owner.what} at {path}: a file or link is there")
        if any(path.iterdir()) and not owner.owns(path):
            raise ValueError(f"refusing to replace {path}: it holds files and no {owner.marker} of a {owner.what} "
                             "(diversed replaces only what it wrote); give another folder, or empty it yourself")
    check_writable(path)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_cwd = -100
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False  # this file system has no exchange: the caller renames in two steps
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.replaced")


def recover_replaced(path: Path) -> None:
    """Where a two-step replacement was killed between its renames (old folder aside, new not yet in), put the
    old folder back."""
    aside = _aside(path)
    if aside.is_dir() and not path.exists():
        os.rename(aside, path)


def replace_dir(new: Path, path: Path) -> None:
    """Put the folder `new` at `path`, whole at every instant: an atomic exchange where the system has one (then
    the old folder, now at `new`, is removed); else the old folder renamed aside, the new one in, the old one
    removed (recover_replaced undoes a kill between the two renames)."""
    if not path.exists():
        os.rename(new, path)
    elif _exchange(new, path):
        shutil.rmtree(new)
    else:
        aside = _aside(path)
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(path, aside)
        os.rename(new, path)
        shutil.rmtree(aside)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, owner: Owner) -> Iterator[Path]:
    """Yield a temp folder beside `path`; it replaces `path` only if the block succeeds, and only where `path` is
    absent, empty or an earlier `owner` folder (check_output, also before the block: nothing else is ever
    deleted)."""
    path = Path(path)
    recover_replaced(path)
    check_output(path, owner)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        _as_umask_allows(tmp, directory=True)
        yield tmp
        check_output(path, owner)  # again: something may have appeared there meanwhile
        stop_if_interrupted()
        replace_dir(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's value; a missing, unreadable or invalid file raises one line naming it (and the line)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a JSON file")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def finite(where: str, x: Any) -> None:
    """Raise unless x, a number at `where` (a config key's path or a flag), is finite (NaN and inf never are)."""
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{where}: {x} is not a finite number")


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in rows))


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The objects of a JSONL file, one a line; a line that is not a JSON object raises naming the file and line."""
    path, rows = Path(path), []
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a JSONL file")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: a JSON {type(row).__name__}, not an object ({{\"key\": value}})")
            rows.append(row)
    return rows


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@functools.cache
def code_hash() -> str:
    """A short hash of the package's source files: what decoded a kept run (runs.run.restore_run reuses a run
    only when the code that made it is this code)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """A hard link of src at dst (no second copy on disk), or a copy where links cannot be made."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def config_hash(config: dict) -> str:
    """run_id: a short, stable hash of a resolved config."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("diversed", "torch", "transformers", "lm_eval", "datasets"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out


def hardware() -> dict[str, Any]:
    """The CPU, its cores, torch's threads and version, CUDA's, and the GPU where there is one."""
    import torch  # here, not at the top: the workflow's plan imports this module without the ML stack

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    hw: dict[str, Any] = {"cpu": cpu, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        hw["gpu"] = torch.cuda.get_device_name(0)
    return hw


def hardware_label(hardware: dict | None, device: str = "cuda") -> str:
    """What a run was timed on: the GPU's name for a CUDA run, else the CPU model and core count."""
    if not hardware:
        return "unknown"
    if device.startswith("cuda") and hardware.get("gpu"):
        return hardware["gpu"]
    return f"{hardware.get('cpu', 'unknown CPU')}, {hardware.get('cpu_count', '?')} cores"


def provenance() -> dict[str, Any]:
    """What every artifact records besides its config: commit, versions, hardware."""
    return {"git_commit": git_commit(), "versions": versions(), "hardware": hardware()}


RESULTS_MD = Path(__file__).resolve().parent.parent / "benchmarks" / "RESULTS.md"


def command_line() -> str:
    """The command this process was started with, as a user would type it (for RESULTS.md headers)."""
    import shlex
    import sys

    prog = Path(sys.argv[0])
    head = ["python", str(prog.relative_to(Path.cwd()) if prog.is_relative_to(Path.cwd()) else prog)] \
        if prog.suffix == ".py" else [prog.name]
    return shlex.join([*head, *sys.argv[1:]])


def record_result(section: str, markdown: str, command: str, path: str | os.PathLike = RESULTS_MD,
                  commit: str | None = None) -> Path:
    """Write `markdown` as section `## {section}` of benchmarks/RESULTS.md, headed with the commit (`commit`, else
    git's), date, hardware and the command that made it; other sections are kept. The benchmark scripts call this
    with their tables."""
    import datetime
    import re

    hw = hardware()
    device = hardware_label(hw)
    commit = (commit or git_commit() or "unknown")[:10]
    head = (f"## {section}\n\n`{command}` · commit `{commit}` · {datetime.date.today().isoformat()} · {device} · "
            f"torch {hw['torch']} ({hw['torch_threads']} threads) · transformers {versions().get('transformers')}\n\n")
    path = Path(path)
    intro = ("# Benchmark results\n\nGenerated by the scripts in `benchmarks/` and `diversed bench`; each section is "
             "rewritten by the command in its header.\n")
    text = path.read_text() if path.is_file() else intro
    body = head + re.sub(r"^#+ ", "#### ", markdown.strip(), flags=re.M) + "\n"  # its own headings sit below ours
    pattern = re.compile(rf"^## {re.escape(section)}\n.*?(?=^## |\Z)", flags=re.S | re.M)
    text = pattern.sub(lambda _: body + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + body
    write_text(path, text.rstrip("\n") + "\n")
    return path


def safetensors_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The metadata of a safetensors file, read from its header (8 bytes of length, then JSON), without torch; a
    file that is not one raises ValueError naming it."""
    path = Path(path)
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if not 2 <= size <= min(path.stat().st_size - 8, 100 << 20):
            raise ValueError(f"{path} is not a safetensors file (its header length does not fit the file)")
        try:
            header = json.loads(f.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{path} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is not a JSON object)")
    return header.get("__metadata__") or {}


BAD_INPUT, FAILED, INTERRUPTED = 2, 1, 130  # exit codes (README "Exit codes")


def exit_code(e: BaseException) -> int | None:
    """The exit code of an error a user can act on without a traceback (None: a bug, shown whole): bad input
    (a value, a file, a path) 2; a fault of the machine while running (disk, memory, the OS) 1."""
    import yaml

    if isinstance(e, (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, yaml.YAMLError)):
        return BAD_INPUT
    if isinstance(e, (OSError, MemoryError)) or type(e).__name__ == "OutOfMemoryError":  # torch's, on a GPU
        return FAILED
    return None


_INTERRUPTS: list[int] = []  # the SIGINTs `guarded`'s handler received


def _interrupt(signum, frame) -> None:
    """SIGINT as Python handles it (KeyboardInterrupt), and remembered: code that swallows the exception (an `except
    BaseException`, a `__del__` it was raised in, a C extension that clears it) cannot let the work go on to commit
    (stop_if_interrupted)."""
    _INTERRUPTS.append(signum)
    raise KeyboardInterrupt


def stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came: called before anything is committed (atomic_path, atomic_dir) and as
    each prompt ends."""
    if _INTERRUPTS:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _remembering_interrupts() -> Iterator[None]:
    """`_interrupt` handles SIGINT in the block, where Python's handler would (not where SIGINT is ignored, as in a
    shell's background job)."""
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _INTERRUPTS.clear()


def guarded(fn) -> None:
    """Call fn(); a user's error or a machine's fault ends in one line on stderr and its exit code, an interrupt in
    exit 130 with nothing committed after it (a traceback only for a bug, or with DIVERSED_TRACEBACK=1). Every entry
    point runs through it."""
    try:
        with _remembering_interrupts():
            fn()
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
    except Exception as e:
        code = exit_code(e)
        if code is None or os.environ.get("DIVERSED_TRACEBACK"):
            raise
        text = " ".join(str(e).split()) or type(e).__name__
        print(f"error: {text if code == BAD_INPUT else f'{type(e).__name__}: {text}'}", file=sys.stderr)
        raise SystemExit(code) from None
