"""The supported versions (torch >= 2.11, transformers >= 5.17, the pins the tested top) and the shims between
them, each checked at both ends whatever transformers is installed (CI runs the in-process tests again on 5.17.0)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import torch

from diversed import compat

ROOT = Path(__file__).resolve().parent.parent


class Decoder517(torch.nn.Module):
    def forward(self, input_ids=None, past_key_values=None, use_cache=None):  # transformers 5.17's name
        return past_key_values


class Decoder524(torch.nn.Module):
    def forward(self, input_ids=None, cache=None, use_cache=None):  # the name from 5.24 on
        return cache


def test_the_cache_goes_by_the_name_the_decoder_takes():
    from transformers import LlamaConfig, LlamaModel

    assert compat.cache_kwarg(Decoder517()) == "past_key_values" and compat.cache_kwarg(Decoder524()) == "cache"
    installed = LlamaModel(LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                       num_attention_heads=2, num_key_value_heads=1))
    import inspect

    assert compat.cache_kwarg(installed) in inspect.signature(type(installed).forward).parameters


def test_activation_checkpointing_by_either_name():
    calls = []

    class Old:  # 5.17
        def gradient_checkpointing_enable(self):
            calls.append("gradient")

    class New(Old):  # 5.24: the new name, the old one a deprecated alias
        def activation_checkpointing_enable(self):
            calls.append("activation")

    compat.enable_activation_checkpointing(Old())
    compat.enable_activation_checkpointing(New())
    assert calls == ["gradient", "activation"]


@pytest.mark.parametrize(("name", "installed", "ok"), [
    ("torch", "2.10.1+cu128", False), ("torch", "2.11.0+cu130", True), ("transformers", "5.16.1", False),
    ("transformers", "5.17.0", True), ("transformers", "4.57.6", False)])
def test_versions_out_of_range_stop_at_once(name, installed, ok, monkeypatch):
    import transformers

    monkeypatch.setattr(torch if name == "torch" else transformers, "__version__", installed)
    if ok:
        compat.check_versions()
    else:
        with pytest.raises(ValueError, match=re.escape(f"{name} {installed} is older than diversed supports")):
            compat.check_versions()


def test_pyproject_states_the_supported_range_with_the_pins_at_its_top():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name, floor in compat.FLOORS.items():
        (spec,) = [d for d in deps if d.startswith(f"{name}>=")]
        low, high = spec.removeprefix(f"{name}>=").split(",<=")
        assert compat.version_tuple(low)[:2] == floor and compat.version_tuple(high) >= compat.version_tuple(low)


def test_ci_runs_the_in_process_tests_on_the_floor():
    ci = (ROOT / ".ci" / "run").read_text()
    floor = ".".join(map(str, compat.FLOORS["transformers"]))
    assert f"--target .floor transformers=={floor}.0 " in ci and 'PYTHONPATH=.floor pytest -m "not slow"' in ci
