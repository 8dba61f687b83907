"""The experiment's declarations (diversed.experiment): the committed schema and key table are what they generate,
the schema and the parse agree, every number key refuses NaN and inf naming its path, and the plan of every
committed config is the one it was before the declarations (its jobs and run ids)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import os
import typing

import jsonschema
import pytest
import yaml
from helpers import ROOT

from diversed.experiment import declared
from diversed.experiment.config import Experiment, validated
from diversed.experiment.generated import FILES, stale
from diversed.experiment.plan import load
from diversed.experiment.sources import load_config
from diversed.utils import option

SMOKE = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
CONFIGS = {"config/config.yaml": (), "config/smoke.yaml": (), "config/paper.yaml": (),
           "config/paper.yaml+config/paper-gemma.yaml": ("config/paper-gemma.yaml",),
           "config/paper.yaml+config/paper-lambda.yaml": ("config/paper-lambda.yaml",)}
DIGESTS = ROOT / "tests" / "data" / "plan_digests.json"


def test_the_committed_generated_files_are_current():
    """A declaration changed without `python -m diversed.experiment.generated` leaves a stale file: this fails."""
    assert stale() == [], f"stale: {stale()}; run python -m diversed.experiment.generated"


def test_a_changed_declaration_makes_the_files_stale(tmp_path, monkeypatch):
    for name, make in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(make())
    assert stale(tmp_path) == []
    monkeypatch.setattr(Experiment.__dataclass_fields__["batch_size"], "metadata", {"help": "another help", "low": 2})
    assert stale(tmp_path) == list(FILES)


def _committed(name: str) -> dict:
    return load_config(ROOT / name.split("+")[0], *(ROOT / e for e in CONFIGS[name]))


@pytest.mark.parametrize("name", CONFIGS)
def test_the_schema_accepts_what_the_parse_accepts(name):
    """The committed schema (an editor's) validates every committed config, filled and as written."""
    schema = yaml.safe_load((ROOT / "diversed" / "config.schema.yaml").read_text())
    config = _committed(name)
    jsonschema.Draft202012Validator(schema).validate(validated(config))


@pytest.mark.parametrize(("change", "path"), [
    ({"temperatures": [0.0]}, "temperatures[0]"), ({"seeds": [-1]}, "seeds[0]"), ({"K": []}, "K"),
    ({"methods": ["strict", "strict"]}, "methods"), ({"given": {"topk": [0]}}, "given.topk[0]"),
    ({"pairs": {"tiny": {"target": "t", "draft": "d", "device": "gpu"}}}, "pairs.tiny.device"),
    ({"sweep": {"weights": [1.5]}}, "sweep.weights[0]"), ({"tasks": {"arith": {"n_eval": 0}}}, "tasks.arith.n_eval"),
    ({"train_head": {"schedule": "step"}}, "train_head.schedule"), ({"batch_size": True}, "batch_size"),
])
def test_the_schema_refuses_what_the_parse_refuses(change, path):
    schema = yaml.safe_load((ROOT / "diversed" / "config.schema.yaml").read_text())
    with pytest.raises(ValueError, match=f"invalid config: {path.replace('[', '.').replace(']', '.')}: "):
        validated(SMOKE | change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(SMOKE | change)


def _number_paths(cls: type, prefix: tuple = ()) -> list[tuple]:
    """The path of every number a config can hold (a list's first item, a mapping's sample key), from the
    declarations: where a NaN or an inf can be written."""
    hints = typing.get_type_hints(cls)
    return [p for f in declared.declared(cls) for p in _paths_of(hints[f.name], f.metadata, (*prefix, f.name))]


def _paths_of(hint, meta, path: tuple) -> list[tuple]:
    base, _ = declared._parts(hint)
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        omit = meta.get("omit", ())
        return [p for f in declared.declared(base, omit)
                for p in _paths_of(typing.get_type_hints(base)[f.name], f.metadata, (*path, f.name))]
    if origin in (list, tuple):
        return _paths_of(typing.get_args(base)[0], meta, (*path, 0))
    if origin is dict:
        if meta.get("keys"):
            return [p for k, (h, f) in meta["keys"].items() for p in _paths_of(h, f.metadata, (*path, k))]
        return _paths_of(typing.get_args(base)[1], meta, (*path, "x"))
    return [path] if base is float else []


def _set(config: dict, path: tuple, x) -> dict:
    """The config with x written at path (the missing mappings and lists made; a sample key 'x' renamed to the
    config's first)."""
    config = copy.deepcopy(config)
    node = config
    for here, nxt in itertools.pairwise(path):
        if here == "x":
            here = next(iter(node))
        if isinstance(node, list):
            node = node[here]
            continue
        node = node.setdefault(here, [] if isinstance(nxt, int) else {})
        if isinstance(node, list) and not node:
            node.append({"head": "arith", "eval": "open"} if here == "transfer" else 0.5)
    node[path[-1]] = x
    return config


NUMBER_PATHS = _number_paths(Experiment)


def test_every_number_key_is_found():
    names = {".".join(map(str, p)) for p in NUMBER_PATHS}
    assert {"temperatures.0", "train_head.lr", "judge.l2", "sweep.weights.0", "given.fixed.0",
            "sweep.families.cascade.0", "lambda_sweep.values.0", "transfer_temperature"} <= names
    assert len(NUMBER_PATHS) > 30


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_every_number_key_refuses_non_finite_values_naming_its_path(bad):
    """Non-finite numbers are refused by construction: the parse of a float checks it, wherever it is declared
    (a range check alone would let NaN through, every comparison with it being false)."""
    for path in NUMBER_PATHS:
        config = _set(SMOKE, path, bad)
        with pytest.raises(ValueError, match=r"not a finite number") as e:
            validated(config)
        shown = str(e.value).removeprefix("invalid config: ").split(": ")[0]
        assert shown.replace("[", ".").replace("]", "") == ".".join(map(str, path)), str(e.value)


def test_a_declared_option_with_a_mutable_default_gives_each_instance_its_own():
    @dataclasses.dataclass
    class Section:
        values: list[float] = option([1.0], "values")

    a, b = Section(), Section()
    a.values.append(2.0)
    assert b.values == [1.0]


def _digest(name: str) -> dict:
    plan = load(ROOT / name.split("+")[0], *(ROOT / e for e in CONFIGS[name]))
    jobs = sorted(json.dumps([j.rule, j.wildcards, j.outputs, j.inputs, j.threads, j.gpu,
                              dataclasses.asdict(j.train) if j.train else None], sort_keys=True) for j in plan.jobs)
    runs = sorted(json.dumps([r.dir, r.rule, r.method, r.verifier, r.split, r.temperature, r.K, r.seed, r.prompts,
                              r.max_new_tokens, r.batch_size, r.timing, r.changes], sort_keys=True, default=str)
                  for r in plan.runs)
    return {"jobs": len(jobs), "runs": len(runs), "jobs_sha256": hashlib.sha256("\n".join(jobs).encode()).hexdigest(),
            "runs_sha256": hashlib.sha256("\n".join(runs).encode()).hexdigest()}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_plan_of_each_committed_config_is_unchanged(name):
    """Each committed config's jobs (rule, wildcards, inputs, outputs, threads, GPU, training settings) and runs
    (folder, method, verifier, split, T, K, seed, prompts, tokens, batch, changes) hash to the committed digest.
    A change meant to alter the plan rewrites tests/data/plan_digests.json in the same commit:
    WRITE_PLAN_DIGESTS=1 pytest tests/experiment -k plan_of."""
    if os.environ.get("WRITE_PLAN_DIGESTS") == "1":
        digests = json.loads(DIGESTS.read_text()) | {name: _digest(name)}
        DIGESTS.write_text(json.dumps(digests, indent=1) + "\n")
    assert _digest(name) == json.loads(DIGESTS.read_text())[name]


def test_the_plan_reads_a_config_as_its_typed_sections():
    """`experiment` builds every section as the dataclass that declares it, so the plan reads attributes; a training
    section is the training settings object itself, and a job's training config is that section with the job's
    pair and task."""
    from diversed.experiment.config import Judging, Pair, Sweep, TaskSetup, Transfer, experiment
    from diversed.experiment.plan import Plan
    from diversed.training.settings import DistillConfig, HeadTrainConfig

    config = SMOKE | {"transfer": [{"head": t, "eval": t} for t in SMOKE["tasks"]][:1],
                      "train_head": {"epochs": 3}}
    x = experiment(config)
    assert all(isinstance(p, Pair) for p in x.pairs.values()) and all(
        isinstance(t, TaskSetup) for t in x.tasks.values())
    assert isinstance(x.sweep, Sweep) and isinstance(x.judge, Judging) and isinstance(x.transfer[0], Transfer)
    assert isinstance(x.train_head, HeadTrainConfig) and isinstance(x.distill, DistillConfig)
    assert x.train_head.epochs == 3 and x.train_head.task == HeadTrainConfig().task  # a job's field: not the section's
    job = Plan(config).of("train_head")[0]
    pair, task = x.pairs[job.pair], x.tasks[job.wildcards["task"]]
    assert job.train == dataclasses.replace(x.train_head, target=pair.target, draft=pair.draft,
                                            draft_layers=pair.draft_layers, dtype=pair.dtype, device=pair.device,
                                            task=job.wildcards["task"], data_files=task.data_files,
                                            n_train=task.n_train, seed=0, prompt_format=x.prompt_format,
                                            scoring=x.scoring)
    assert "--epochs 3" in job.flags["config"]
