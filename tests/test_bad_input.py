"""Bad input -> a clear error before compute, naming the value and what is allowed. One table of cases
(mirrored in docs/TROUBLESHOOTING.md); engine and CLI cases with their own fixtures live in
test_engine.py / test_cli.py, workflow-config cases in test_workflow.py."""

from __future__ import annotations

import json

import pytest
import torch

from diversed.runs.run import RunConfig
from diversed.runs.settings import Launch


def corrupt(path, text="{not json"):
    path.write_text(text)
    return path


# (case, config change, expected message)
CONFIG_CASES = [
    ("verifier unknown", {"verifier": "beam"}, "unknown verifier 'beam'; allowed: autoregressive, draft, strict"),
    ("mixing unknown", {"mixing": "cubic"}, "unknown mixing 'cubic'; allowed: linear, logit"),
    ("task unknown", {"task": "mmlu"}, "unknown task 'mmlu'; allowed:"),
    ("split unknown", {"task": "arith", "split": "test"}, "unknown split 'test'"),
    ("weight > 1", {"verifier": "fixed", "weight": 1.5}, "weight w must be in [0, 1], got 1.5"),
    ("weight < 0", {"verifier": "fixed", "weight": -0.5}, "weight w must be in [0, 1], got -0.5"),
    ("fixed without weight", {"verifier": "fixed"}, "needs --weight"),
    ("dynamic without head", {"verifier": "dynamic"}, "needs --head"),
    ("K < 1", {"K": 0}, "K must be >= 1, got 0"),
    ("negative temperature", {"temperature": -0.1}, "temperature must be >= 0"),
    ("top_p out of range", {"top_p": 1.5}, "top_p must be in (0, 1]"),
    ("max_new_tokens < 1", {"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
    ("dtype unknown", {"dtype": "int4"}, "unknown dtype 'int4'"),
    ("subsample < 1", {"task": "arith", "n": 0}, "n (subsample size) must be >= 1"),
]


@pytest.mark.parametrize(("case", "change", "message"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_run_config_errors(case, change, message):
    with pytest.raises(ValueError) as e:
        RunConfig(**change).validate()
    assert message in str(e.value)


def test_unknown_model_id_offline(monkeypatch):
    from diversed.decoding.models import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="cannot load target model 'acme/no-such-model'.*offline: 1"):
        load_model("acme/no-such-model")


def test_corrupted_results_files(tiny_dir, tmp_path):
    from diversed.runs.run import Run, execute
    from diversed.utils import read_jsonl

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), max_new_tokens=4)
    run = execute(cfg, [{"id": "0", "prompt": "hi"}], tmp_path, launch=Launch(progress=False))
    with pytest.raises(FileNotFoundError, match="not scored yet"):
        Run(run).row()
    corrupt(run / "scores.json")
    with pytest.raises(ValueError, match="scores.json is corrupt"):
        Run(run).row()
    corrupt(run / "generations.jsonl", '{"ok": 1}\n{broken\n')
    with pytest.raises(ValueError, match="generations.jsonl:2: not valid JSON"):
        read_jsonl(run / "generations.jsonl")
    corrupt(run / "manifest.json")
    with pytest.raises(ValueError, match="manifest.json is corrupt"):
        _ = Run(run).manifest
    (run / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="not a complete run"):
        _ = Run(run).manifest


def test_corrupted_head_and_checkpoint(tmp_path):
    from diversed.decoding.head import load_head

    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_head(corrupt(tmp_path / "head.safetensors"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_inf_logits_are_reported_with_the_step(target, draft, bad):
    import copy

    from diversed.decoding.engine import speculative_generate
    from diversed.decoding.settings import Decoding

    broken = copy.deepcopy(target)
    with torch.no_grad():
        broken.lm_head.weight[5] = bad  # one vocabulary row: NaN/inf appears in every step's logits
    with pytest.raises(FloatingPointError, match="target logits are not finite .* at step 0"):
        speculative_generate(broken, draft, [1, 2, 3], Decoding(verifier="strict", K=2, max_new_tokens=5))


def test_over_long_and_empty_prompts(tiny_dir, tmp_path):
    from diversed.runs.run import execute

    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), max_new_tokens=8)
    with pytest.raises(ValueError, match="exceeds the target's context length 4096"):
        execute(cfg, [{"id": "0", "prompt": "x" * 5000}], tmp_path, launch=Launch(progress=False))
    with pytest.raises(ValueError, match="prompt 2 is empty"):
        execute(cfg, [{"id": "0", "prompt": "ok"}, {"id": "1", "prompt": " "}], tmp_path, launch=Launch(progress=False))
    assert not any(tmp_path.iterdir())  # refused before any output


def test_weight_file_from_a_sweep(tiny_dir, tmp_path, capsys):
    from diversed.cli import main

    bad = corrupt(tmp_path / "choice.json", json.dumps({"weight": 2.0, "mixing": "linear"}))
    with pytest.raises(SystemExit):
        main(["generate", "--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1"),
              "--verifier", "fixed", "--weight-file", str(bad), "--prompt", "x", "--out", str(tmp_path / "o")])
    assert "weight w must be in [0, 1], got 2.0" in capsys.readouterr().err
