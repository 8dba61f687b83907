"""Small shared helpers: atomic writes, provenance (git, versions, hardware), run ids."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def option(default: Any, help: str, flag: str | None = None, choices: tuple | None = None) -> Any:
    """A config dataclass field with its help text: the command line's flag for it is generated from the field
    (cli.add_config_args), so its default lives in one place. flag: a short form such as "-K"; choices: the values
    the flag accepts."""
    meta = {"help": help} | ({"flag": flag} if flag else {}) | ({"choices": tuple(choices)} if choices else {})
    return dataclasses.field(default=default, metadata=meta)


def field_type(hint) -> type:
    """The type of a config field's annotation without its None (float | None -> float; a tuple[float, ...]: its
    items' type)."""
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0]
    return next(t for t in typing.get_args(hint) or (hint,) if t is not type(None))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory beside `path`; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg})") from e


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in rows))


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from e
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


def record_result(section: str, markdown: str, command: str, path: str | os.PathLike = RESULTS_MD) -> Path:
    """Write `markdown` as section `## {section}` of benchmarks/RESULTS.md, headed with the commit, date, hardware
    and the command that made it; other sections are kept. The benchmark scripts call this with their tables."""
    import datetime
    import re

    hw = hardware()
    device = hardware_label(hw)
    commit = (git_commit() or "unknown")[:10]
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
    """The metadata of a safetensors file, read from its header (8 bytes of length, then JSON), without torch."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(size)).get("__metadata__") or {}
