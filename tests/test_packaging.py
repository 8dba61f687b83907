"""Packaging: every dependency pinned, environment.yml mirrors pyproject.toml, the README's commands are CI's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


RANGED = ("torch", "transformers")  # a supported range whose top is the tested pin (diversed.compat)


def pyproject_pins() -> set[str]:
    """Every dependency as NAME==VERSION: a pin, or the top of a supported range (NAME>=LOW,<=TOP)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"]) + [d for group in project["optional-dependencies"].values() for d in group]
    return {re.sub(r">=[^,]+,<=", "==", d.replace(" ", "")) for d in deps}


def test_every_dependency_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"] + [d for group in project["optional-dependencies"].values() for d in group]:
        version = r"[0-9][A-Za-z0-9.+]*"
        if dep.startswith(RANGED):
            assert re.fullmatch(rf"[a-z]+>={version},<={version}", dep), f"not a range with a tested top: {dep}"
        else:
            assert re.fullmatch(rf"[A-Za-z0-9_.\-\[\],]+=={version}", dep), f"not pinned: {dep}"


def test_environment_yml_mirrors_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert any(str(d).startswith("python=3.11") for d in deps)
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert {p.replace(" ", "") for p in pip} == pyproject_pins()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    test_block = next(b for b in blocks if "pytest" in b)
    command = "\n".join(line for line in test_block.strip().splitlines() if not line.startswith("#"))
    def words(text):
        return " ".join(text.replace("\\\n", " ").split())
    assert words(command) in words(ci), "README test command and .ci/run disagree"


def test_readme_test_command_fails_when_the_first_test_run_fails(tmp_path):
    """A failing whole suite fails the block even though the rerun on the oldest transformers passes (rc of the
    block, as a user's shell or a script running it sees it)."""
    import subprocess

    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S) if "pytest" in b)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text("")
    stubs = ("command() { return 0; }; python3() { :; }; pip() { :; }; "
             "pytest() { [ -e ran ] && return 0; touch ran; return 1; }\n")
    done = subprocess.run(["bash", "-c", stubs + block], cwd=tmp_path, capture_output=True, text=True)
    assert (tmp_path / "ran").exists() and done.returncode != 0, done.stderr


@pytest.mark.slow  # ruff in a subprocess
def test_ruff_clean():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_stays_under_25_kb():
    """The README explains and points to the generated results (results/REPORT.md, benchmarks/RESULTS.md)."""
    size = len((ROOT / "README.md").read_bytes())
    assert size < 25_000, f"README.md is {size} bytes"
