"""The `diversed` command line: generate writes a complete run or nothing; bad input is a clear error."""

from __future__ import annotations

import json

import pytest

from diversed.cli import main


def generate(tiny_dir, out, *extra):
    main(["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1"),
          "--out", str(out), "--max-new-tokens", "12", *extra])


def test_generate_writes_run_with_manifest(tiny_dir, tmp_path, capsys):
    generate(tiny_dir, tmp_path, "--verifier", "fixed", "--weight", "0.5", "-K", "3", "--prompt", "hi there",
             "--prompt", "2+2=")
    (run_dir,) = tmp_path.iterdir()
    rows = [json.loads(line) for line in (run_dir / "generations.jsonl").read_text().splitlines()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [r["prompt"] for r in rows] == ["hi there", "2+2="]
    assert all(r["new_tokens"] == len(r["tokens"]) == len(r["bias_tv_per_token"]) == len(r["kl_per_token"]) <= 12
               for r in rows)
    assert manifest["run_id"] == run_dir.name and manifest["config"]["weight"] == 0.5
    assert {"git_commit", "versions", "hardware", "seed", "summary"} <= manifest.keys()
    assert "torch" in manifest["versions"] and manifest["hardware"]["cpu"]
    out = capsys.readouterr().out
    assert "tokens/s" in out and "alpha" in out and "tau" in out


def test_generate_is_deterministic_and_reruns_overwrite(tiny_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "abc"}\n{"prompt": "hello", "id": "h"}\n')
    args = ("--verifier", "strict", "--temperature", "1.0", "--prompts", str(prompts), "--seed", "3")
    generate(tiny_dir, tmp_path / "a", *args)
    generate(tiny_dir, tmp_path / "b", *args)
    (a,), (b,) = (tmp_path / "a").iterdir(), (tmp_path / "b").iterdir()
    assert a.name == b.name
    assert (a / "generations.jsonl").read_bytes() == (b / "generations.jsonl").read_bytes()
    generate(tiny_dir, tmp_path / "a", *args)  # rerun overwrites in place
    assert [p.name for p in (tmp_path / "a").iterdir()] == [a.name]


def test_runs_of_one_setting_in_one_process_equal_separate_runs(tiny_dir, tmp_path, capsys):
    """`generate --run ...` (a workflow decode job): each run byte-identical to the same run on its own, the target
    loaded once, every run decoded before any is scored."""
    import diversed.decoding.models
    import diversed.runs.evaluate
    import diversed.runs.run
    from diversed.utils import write_json

    choice = tmp_path / "choice.json"
    write_json(choice, {"weight": 0.5, "mixing": "logit"})
    strict_choice = tmp_path / "strict.json"
    write_json(strict_choice, {"weight": 1.0, "mixing": "linear"})
    shared = ["--task", "arith", "-n", "2", "--temperature", "1.0", "--seed", "1", "--label", "pair=tiny"]
    runs = {"target-only": ["verifier=autoregressive", "label:method=autoregressive"],
            "strict": ["verifier=strict", "K=3"],
            "fixed": ["verifier=fixed", "K=2", f"weight_file={choice}", "label:method=fixed"],
            "kept-strict": ["verifier=fixed", "K=2", f"weight_file={strict_choice}"]}
    loads, order = [], []
    models = diversed.decoding.models
    load_model, execute, score_run = models.load_model, diversed.runs.run.execute, diversed.runs.evaluate.score_run
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(models, "load_model", lambda name, **kw: loads.append(name) or load_model(name, **kw))
        mp.setattr(diversed.runs.run, "execute", lambda *a, **kw: order.append("decode") or execute(*a, **kw))
        mp.setattr(diversed.runs.evaluate, "score_run",
                   lambda d, scoring=None: order.append("score") or score_run(d, scoring))
        generate(tiny_dir, tmp_path, *shared, "--score",
                 *[x for name, changes in runs.items() for x in ("--run", str(tmp_path / name), *changes)])
    assert sorted(loads) == sorted([str(tiny_dir / "tiny-target"), str(tiny_dir / "tiny-draft-l1")])
    assert order == ["decode"] * 4 + ["score"] * 4
    separate = {"target-only": ["--verifier", "autoregressive"], "strict": ["--verifier", "strict", "-K", "3"],
                "fixed": ["--verifier", "fixed", "-K", "2", "--weight", "0.5", "--mixing", "logit"],
                "kept-strict": ["--verifier", "strict", "-K", "2"]}
    for name, flags in separate.items():
        alone = tmp_path / "alone" / name
        generate(tiny_dir, tmp_path, *shared, *flags, "--run-dir", str(alone))
        batch = json.loads((tmp_path / name / "manifest.json").read_text())
        assert batch["run_id"] == json.loads((alone / "manifest.json").read_text())["run_id"], name
        assert (tmp_path / name / "generations.jsonl").read_bytes() == (alone / "generations.jsonl").read_bytes()
        assert (tmp_path / name / "scores.json").is_file() and not (alone / "scores.json").exists()
    labels = json.loads((tmp_path / "fixed" / "manifest.json").read_text())["labels"]
    assert labels == {"pair": "tiny", "method": "fixed"}


@pytest.mark.parametrize("interleave", [False, True])
def test_runs_of_one_config_decode_once(tiny_dir, tmp_path, capsys, interleave):
    """A decode or timing job whose dev choices fell on strict (fixed w = 1, a family's knob kept strict) decodes
    that config once: the other methods' folders get its generations and timings under their own labels."""
    import diversed.decoding.engine
    import diversed.runs.run
    from diversed.utils import write_json

    strict_choice = tmp_path / "strict.json"
    write_json(strict_choice, {"weight": 1.0, "mixing": "linear"})
    shared = ["--task", "arith", "-n", "2", "--temperature", "1.0", "--seed", "1"] + (["--interleave"] if interleave
                                                                                      else [])
    runs = {"strict": ["verifier=strict", "K=2", "label:method=strict"],
            "fixed": ["verifier=fixed", "K=2", f"weight_file={strict_choice}", "label:method=fixed"],
            "other": ["verifier=fixed", "K=2", "weight=0.5", "label:method=other"]}
    calls = []
    engine_generate = diversed.runs.run.generate
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diversed.runs.run, "generate", lambda *a, **kw: calls.append(a[2]) or engine_generate(*a, **kw))
        generate(tiny_dir, tmp_path, *shared, *[x for name, changes in runs.items()
                                                for x in ("--run", str(tmp_path / name), *changes)])
    decodes = [c for c in calls if c.max_new_tokens == 12]  # not the warm-ups
    assert len(decodes) == 2 * (2 if interleave else 1)  # two configs (per prompt when interleaved)
    strict, fixed, other = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in runs)
    assert strict["run_id"] == fixed["run_id"] != other["run_id"]
    assert fixed["labels"] == {"method": "fixed"} and fixed["copied_from"] == str(tmp_path / "strict")
    assert fixed["prompt_seconds"] == strict["prompt_seconds"] and fixed["summary"] == strict["summary"]
    assert (tmp_path / "fixed" / "generations.jsonl").read_bytes() == (tmp_path / "strict" /
                                                                       "generations.jsonl").read_bytes()
    assert "copied_from" not in strict and "copied_from" not in other



@pytest.mark.parametrize("batch", [1, 2])
def test_only_a_timed_run_warms_up(tiny_dir, tmp_path, batch):
    """A batch of one is timed, so a short warm-up decode precedes it; a batched (untimed) run decodes its prompts
    and nothing else."""
    import diversed.runs.run

    calls = []
    engine_generate = diversed.runs.run.generate
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diversed.runs.run, "generate", lambda *a, **kw: calls.append(a[2]) or engine_generate(*a, **kw))
        generate(tiny_dir, tmp_path, "--task", "arith", "-n", "2", "--batch-size", str(batch),
                 "--run", str(tmp_path / "strict"), "verifier=strict", "K=2")
    assert [c.max_new_tokens for c in calls] == ([8] if batch == 1 else []) + [12]
    assert (json.loads((tmp_path / "strict" / "manifest.json").read_text())["prompt_seconds"] is None) == (batch > 1)

def test_kept_runs_are_taken_back_only_when_the_same_code_decoded_them_with_the_same_labels(tiny_dir, tmp_path,
                                                                                          capsys):
    """generate --keep DIR: each finished run is hard-linked into DIR/{run_id}; a rerun whose outputs were deleted
    (a failed workflow job) takes back the kept runs, byte-identical, without loading a model, and decodes a run
    whose labels or code differ."""
    import os

    import diversed.decoding.models
    import diversed.runs.run

    keep = tmp_path / "kept"
    shared = ["--task", "arith", "-n", "2", "--temperature", "1.0", "--seed", "1", "--keep", str(keep)]
    runs = ["--run", str(tmp_path / "a"), "verifier=strict", "K=2", "--run", str(tmp_path / "b"), "verifier=fixed",
            "weight=0.5", "K=2"]
    generate(tiny_dir, tmp_path, *shared, *runs)
    first = {name: (tmp_path / name / "generations.jsonl").read_bytes() for name in "ab"}
    kept = sorted(p for p in keep.iterdir())
    assert len(kept) == 2 and all(os.stat(p / "generations.jsonl").st_nlink == 2 for p in kept)  # links, no copy
    for name in "ab":  # Snakemake deletes a failed job's outputs
        for f in (tmp_path / name).iterdir():
            f.unlink()
        (tmp_path / name).rmdir()
    loads = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diversed.decoding.models, "load_model", lambda name, **kw: loads.append(name))
        generate(tiny_dir, tmp_path, *shared, *runs)
    assert loads == [] and {name: (tmp_path / name / "generations.jsonl").read_bytes() for name in "ab"} == first
    assert capsys.readouterr().out.count("taken from") == 2
    generate(tiny_dir, tmp_path, *shared, "--label", "experiment=other", *runs)  # other labels: decoded
    assert capsys.readouterr().out.count("taken from") == 0
    with pytest.MonkeyPatch.context() as mp:  # other code: decoded
        mp.setattr(diversed.runs.run, "code_hash", lambda: "another")
        generate(tiny_dir, tmp_path, *shared, *runs)
    assert capsys.readouterr().out.count("taken from") == 0
    with pytest.raises(SystemExit) as e:
        generate(tiny_dir, tmp_path, *shared, "--interleave", *runs)
    assert e.value.code == 2 and "--keep resumes quality runs" in capsys.readouterr().err


@pytest.mark.parametrize(("run", "message"), [
    (["out/a", "verifer=strict"], "unknown key 'verifer'"),
    (["out/a", "task=open"], "unknown key 'task'"),  # the runs of one process share their prompts
    (["out/a", "K"], "'K' is not KEY=VALUE"),
    (["K=3"], "a run is DIR followed by KEY=VALUE items"),
    (["out/a", "K=three"], "K=three: 'three' is not an integer"),
    (["out/a", "verifier=fixed", "weight=1.5"], "weight w must be in [0, 1], got 1.5"),
])
def test_bad_run_items_are_refused_before_any_model_loads(tiny_dir, tmp_path, capsys, run, message):
    run = [str(tmp_path / item) if item.startswith("out/") else item for item in run]
    with pytest.raises(SystemExit):
        generate(tiny_dir, tmp_path, "--task", "arith", "-n", "1", "--run", str(tmp_path / "out" / "ok"),
                 "verifier=strict", "--run", *run)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--verifier", "fixed", "--weight", "1.5"], "weight w must be in [0, 1], got 1.5"),
    (["--verifier", "strict", "-K", "0"], "K must be >= 1, got 0"),
    (["--verifier", "speculative"], "invalid choice: 'speculative'"),  # the registry's verifiers only
    (["--verifier", "dynamic"], "needs --head"),
    (["--verifier", "dynamic", "--head", "missing.safetensors"], "weight head not found"),
    (["--verifier", "strict", "--mixing", "cubic"], "unknown mixing 'cubic'"),
    (["--verifier", "strict", "--prompt", "   "], "empty"),
    (["--verifier", "strict", "--max-new-tokens", "5000"], "exceeds the target's context length 4096"),
    (["--verifier", "strict", "--draft", "no-such-org/no-such-model"], "cannot load the tokenizer of draft"),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(tiny_dir, tmp_path, capsys, args, message):
    if "--prompt" not in args:
        args = [*args, "--prompt", "hello"]
    with pytest.raises(SystemExit) as e:
        generate(tiny_dir, tmp_path / "out", *args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_mismatched_vocabularies_are_refused(tiny_dir, tmp_path, capsys):
    from helpers import tiny_llama

    from diversed.decoding.models import char_tokenizer

    other = tmp_path / "other"
    tiny_llama(5, vocab=100, dtype=__import__("torch").float32).save_pretrained(other)
    char_tokenizer().save_pretrained(other)
    with pytest.raises(SystemExit):
        main(["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(other), "--prompt", "x",
              "--out", str(tmp_path / "out")])
    assert "target has 128 logits, draft has 100" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_prompts_file_errors(tiny_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt key"}\n')
    with pytest.raises(SystemExit):
        generate(tiny_dir, tmp_path / "out", "--prompts", str(bad))
    assert "prompt 2 has no non-empty \"prompt\" field" in capsys.readouterr().err


@pytest.mark.parametrize("device", ["cuda", "cuda:7", "tpu"])
def test_unavailable_device_is_one_line_error(tiny_dir, tmp_path, capsys, device):
    import torch

    if torch.cuda.is_available() and device != "tpu":
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as e:
        generate(tiny_dir, tmp_path, "--device", device, "--prompt", "hi")
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert (f"device {device!r}" in err and "available: cpu" in err) or "unknown device" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["train", "head", "--task", "arith", "--out", "x"],
                                     ["train", "draft", "--task", "arith", "--out", "x"],
                                     ["generate", "--task", "arith"]])
def test_flags_default_to_the_config_dataclass(command):
    """The dataclass is the one place a default lives: parsing only the required flags gives its defaults."""
    from diversed.cli import build_parser, config_from_args
    from diversed.runs.run import RunConfig
    from diversed.training.settings import DistillConfig, HeadTrainConfig

    cls = {"head": HeadTrainConfig, "draft": DistillConfig, "generate": RunConfig}[command[1] if command[0] == "train"
                                                                                  else "generate"]
    assert config_from_args(cls, build_parser().parse_args(command)) == cls(task="arith")
    changed = build_parser().parse_args([*command, "--seed", "3", "--prompt-format", "raw"])
    assert config_from_args(cls, changed) == cls(task="arith", seed=3, prompt_format="raw")


def test_generate_writes_its_job_manifest_once_every_run_is_done(tiny_dir, tmp_path):
    """--job: the workflow's one output of a decoding job, written after every run (each run's folder, id and
    generations hash, as its own manifest records them); a rerun replaces the manifest it wrote."""
    runs = [["--run", str(tmp_path / "strict"), "verifier=strict"],
            ["--run", str(tmp_path / "fixed"), "verifier=fixed", "weight=0.5"]]
    for _ in range(2):
        main(["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1"),
              "--max-new-tokens", "6", "--prompt", "hi", *runs[0], *runs[1], "--job", str(tmp_path / "job.json")])
    job = json.loads((tmp_path / "job.json").read_text())
    assert [r["dir"] for r in job["runs"]] == [str(tmp_path / "strict"), str(tmp_path / "fixed")]
    for r in job["runs"]:
        manifest = json.loads((tmp_path / r["dir"] / "manifest.json").read_text())
        assert (r["run_id"], r["generations_sha256"]) == (manifest["run_id"], manifest["generations_sha256"])
        assert r["scored"] is False
