"""Output folders: replaced only where diversed wrote them, whole at every instant of the swap (a process killed at
each step leaves the old folder or the new one), readable by the user's group; every artifact proves it is whole
(hashes recorded when written, checked when read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from diversed.utils import RUN_OWNER, atomic_dir, check_output, recover_replaced


def old_run(path: Path, text: str = "old") -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"run_id": text}))
    (path / "generations.jsonl").write_text(text * 100)
    return path


def state(path: Path) -> str | None:
    """'old' or 'new' where path holds that run whole, None where it holds nothing or a mix."""
    try:
        rid = json.loads((path / "manifest.json").read_text())["run_id"]
        return rid if (path / "generations.jsonl").read_text() == rid * 100 else None
    except (OSError, ValueError, KeyError):
        return None


def test_a_run_folder_replaces_only_an_earlier_run_or_an_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = old_run(tmp_path / "run")
    with atomic_dir(run, RUN_OWNER) as tmp:
        (tmp / "manifest.json").write_text(json.dumps({"run_id": "new"}))
        (tmp / "generations.jsonl").write_text("new" * 100)
    assert state(run) == "new" and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty", RUN_OWNER) as tmp:
        (tmp / "manifest.json").write_text(json.dumps({"run_id": "x"}))
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    (mine / "manifest.json").write_text("{}")  # a manifest, but not a run's
    with (pytest.raises(ValueError, match="refusing to replace .*mine: it holds files and no manifest.json of a run"),
          atomic_dir(mine, RUN_OWNER)):
        raise AssertionError("the block must not run")
    assert (mine / "notes.txt").read_text() == "keep me" and (mine / "sub").is_dir()


@pytest.mark.parametrize("where", ["cwd", "parent", "home", "package", "repository", "root"])
def test_protected_folders_are_refused(where, tmp_path, monkeypatch):
    import diversed

    (tmp_path / "home").mkdir()
    (tmp_path / "work" / "here").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "work" / "here")
    package = Path(diversed.__file__).parent
    path = {"cwd": Path("."), "parent": Path(".."), "home": tmp_path / "home", "package": package,
            "repository": package.parent, "root": Path("/")}[where]
    with pytest.raises(ValueError, match="refusing to write a run folder at .*: it is"):
        check_output(path, RUN_OWNER)


def test_outputs_take_the_users_umask(tmp_path):
    """mkdtemp/mkstemp make 0700/0600; what a command writes is as readable as any file the user makes."""
    from diversed.utils import write_text

    old = os.umask(0o002)
    try:
        with atomic_dir(tmp_path / "run", RUN_OWNER) as tmp:
            (tmp / "manifest.json").write_text("{}")
        write_text(tmp_path / "table.csv", "a\n")
    finally:
        os.umask(old)
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o775
    assert (tmp_path / "table.csv").stat().st_mode & 0o777 == 0o664


SWAP = """
import json, os, shutil, signal, sys
from pathlib import Path
import diversed.utils as u

kill_at, exchange = int(sys.argv[2]), sys.argv[3] == "exchange"
calls = [0]

def step(fn):
    def wrapped(*a, **k):
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        calls[0] += 1
        return fn(*a, **k)
    return wrapped

os.rename, os.replace, shutil.rmtree = step(os.rename), step(os.replace), step(shutil.rmtree)
u._exchange = step(u._exchange) if exchange else (lambda a, b: False)
with u.atomic_dir(Path(sys.argv[1]), u.RUN_OWNER) as tmp:
    (tmp / "generations.jsonl").write_text("new" * 100)
    (tmp / "manifest.json").write_text(json.dumps({"run_id": "new"}))
print(calls[0])
"""


@pytest.mark.parametrize("mode", ["exchange", "two renames"])
def test_a_kill_at_any_step_of_the_swap_leaves_the_old_folder_or_the_new_one(mode, tmp_path):
    """The replacement killed (SIGKILL) before each of its file-system steps: the folder is then the old run or the
    new one, whole, never a mix nor nothing (with two renames, the next write first puts an old folder left aside
    back: recover_replaced)."""
    script = tmp_path / "swap.py"
    script.write_text(textwrap.dedent(SWAP))
    steps = None
    for kill_at in range(10):
        run = tmp_path / f"run{kill_at}"
        old_run(run)
        done = subprocess.run([sys.executable, str(script), str(run), str(kill_at), mode.split()[0]],
                              capture_output=True, text=True)
        recover_replaced(run)
        assert state(run) in ("old", "new"), (mode, kill_at, sorted(p.name for p in tmp_path.iterdir()))
        if done.returncode == 0:
            steps = int(done.stdout)
            assert state(run) == "new"
            break
        assert done.returncode == -9, done.stderr
    assert steps is not None and kill_at == steps >= 2  # each step was killed once before the run that finished


def test_a_run_proves_it_is_whole_and_its_scores_are_its_own(tiny_dir, tmp_path):
    """generations.jsonl is refused where it is not what manifest.json recorded: cut short, edited, another run's;
    a manifest whose config was edited; scores.json of other generations."""
    import shutil

    from diversed.runs.evaluate import score_run
    from diversed.runs.run import Run, RunConfig, execute
    from diversed.runs.settings import Launch

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), max_new_tokens=4,
                    task="arith", n=2)
    prompts = [{"id": str(i), "prompt": f"{i}+1?", "reference": str(i + 1), "task": "arith"} for i in range(2)]
    good = execute(cfg, prompts, run_dir=tmp_path / "good", launch=Launch(progress=False))
    score_run(good)
    assert len(Run(good).generations) == 2 and Run(good).scores["run_id"] == Run(good).manifest["run_id"]
    bad = {}
    for name in ("cut", "edited", "config", "rescored"):
        bad[name] = Path(shutil.copytree(good, tmp_path / name))
    text = (good / "generations.jsonl").read_text()
    (bad["cut"] / "generations.jsonl").write_text(text.splitlines(keepends=True)[0])
    (bad["edited"] / "generations.jsonl").write_text(text.replace('"completion": "', '"completion": "x', 1))
    manifest = json.loads((good / "manifest.json").read_text())
    manifest["config"]["task"] = "gsm8k"
    (bad["config"] / "manifest.json").write_text(json.dumps(manifest))
    scores = json.loads((good / "scores.json").read_text()) | {"generations_sha256": "0" * 64}
    (bad["rescored"] / "scores.json").write_text(json.dumps(scores))
    for name in ("cut", "edited"):
        with pytest.raises(ValueError, match=f"{name}/generations.jsonl is not the file .*{name}/manifest.json"):
            _ = Run(bad[name]).generations
    with pytest.raises(ValueError, match="config/manifest.json: its config and the prompts of .* give run id"):
        _ = Run(bad["config"]).generations
    with pytest.raises(ValueError, match="rescored/scores.json scored other generations than"):
        _ = Run(bad["rescored"]).scores
    assert not Run(bad["cut"]).holds(manifest["run_id"])  # a sweep decodes such a point again


def test_a_damaged_kept_run_is_decoded_again_not_restored(tiny_dir, tmp_path, capsys):
    from diversed.cli import main

    args = ["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1"),
            "--max-new-tokens", "6", "--prompt", "a", "--prompt", "b", "--run-dir", str(tmp_path / "run"),
            "--keep", str(tmp_path / "kept")]
    main(args)
    (kept,) = (tmp_path / "kept").iterdir()
    whole = (tmp_path / "run" / "generations.jsonl").read_bytes()
    (tmp_path / "run" / "generations.jsonl").unlink()  # hard links: write a new, shorter file into the kept run
    (kept / "generations.jsonl").write_bytes(whole.splitlines(keepends=True)[0])
    capsys.readouterr()
    main(args)
    out, err = capsys.readouterr()
    assert "taken from" not in out and "warning: not taking the kept run" in err and "sha256 differs" in err
    assert (tmp_path / "run" / "generations.jsonl").read_bytes() == whole  # decoded again, whole


def test_a_head_whose_bytes_changed_is_refused_and_runs_record_what_they_used(tiny_dir, tmp_path):
    """A flipped byte in a head's tensors (w stuck at 0/1 before): refused on load, not decoded; a run's manifest
    records the sha256 of the head it decoded with."""
    from diversed.decoding.head import WeightHead, load_head
    from diversed.runs.run import RunConfig, execute
    from diversed.runs.settings import Launch
    from diversed.utils import sha256_file

    head = WeightHead(64, 64)
    head.proj.bias.data[:] = 0.3
    path = tmp_path / "head.safetensors"
    head.save(path)
    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), verifier="dynamic",
                    head=str(path), max_new_tokens=4)
    run = execute(cfg, [{"id": "0", "prompt": "hi"}], tmp_path / "runs", launch=Launch(progress=False))
    assert json.loads((run / "manifest.json").read_text())["trained"] == {"head": sha256_file(path)}
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # a byte of the last tensor's data
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="its tensors do not match the hash written with them"):
        load_head(path)


def test_a_fine_tuned_draft_whose_weights_changed_is_refused(tiny_dir, tmp_path):
    import shutil

    from diversed.decoding.models import load_model, weights_sha256

    draft = Path(shutil.copytree(tiny_dir / "tiny-draft-l1", tmp_path / "draft"))
    (draft / "distill_manifest.json").write_text(json.dumps({"config_id": "x", "weights_sha256":
                                                             weights_sha256(draft)}))
    load_model(str(draft))
    weights = draft / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="are not those .*distill_manifest.json recorded"):
        load_model(str(draft))


def test_a_capitals_reference_given_as_one_name_is_one_answer(capsys):
    """`diversed score --task capitals --reference Paris` scored accuracy 0 (the string iterated by character)."""
    from diversed.cli import main

    for reference in ("Paris", '["Paris", "Paree"]'):
        main(["score", "--task", "capitals", "--reference", reference, "--completion", "It is Paris."])
        assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0


def test_a_family_that_resolves_to_strict_says_so(tmp_path, capsys):
    from diversed.runs.run import with_weight_file

    choice = tmp_path / "choice.json"
    choice.write_text(json.dumps({"weight": 1.0, "mixing": "linear",
                                  "families": {"lenient": {"verifier": "strict", "knob": None}}}))
    assert with_weight_file({"verifier": "lenient"}, choice)["verifier"] == "strict"
    assert with_weight_file({"verifier": "fixed"}, choice)["verifier"] == "strict"
    err = capsys.readouterr().err
    assert "kept strict for lenient" in err and "kept strict (w = 1)" in err


def test_a_fault_of_the_machine_is_one_line_exit_1_and_keeps_nothing_half_written(tiny_dir, tmp_path, monkeypatch,
                                                                                  capsys):
    """A full disk while the run folder is written: exit 1, one line naming the fault, no run folder and no temporary
    folder left (the old run, where there was one, untouched)."""
    import diversed.runs.run
    from diversed.cli import main

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(diversed.runs.run, "write_json", full)
    with pytest.raises(SystemExit) as e:
        main(["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1"),
              "--max-new-tokens", "4", "--prompt", "hi", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert e.value.code == 1 and err.splitlines()[-1] == "error: OSError: [Errno 28] No space left on device", err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_every_folder_the_package_replaces_names_its_owner():
    """Every atomic_dir call in the package passes the owner whose marker an existing folder must carry (the
    embedded target's conversion once called it without one, and failed only when the pair was built)."""
    import ast

    import diversed

    missing = []
    for path in Path(diversed.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "atomic_dir" and len(node.args) < 2:
                missing.append(f"{path.name}:{node.lineno}")
    assert not missing, missing
