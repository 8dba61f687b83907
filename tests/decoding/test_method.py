"""The Method value: one label and one parser for what the tables call a run (the plan, the tables, the figures,
the claims and the report read labels through it alone)."""

from __future__ import annotations

import pytest

from diversed.decoding.settings import FAMILIES, GIVEN, METHODS, RULES, Method


@pytest.mark.parametrize("base", METHODS)
def test_every_method_round_trips(base):
    assert Method.parse(base) == Method(base) and Method(base).label == base and Method(base).name == METHODS[base]


@pytest.mark.parametrize("base", GIVEN)
@pytest.mark.parametrize("value", [0.7, 0.5, 1e-05, -0.25, 3.0])
def test_a_given_setting_round_trips(base, value):
    m = Method(base, value)
    assert Method.parse(m.label) == m and m.label == f"{base}-{value:g}"
    knob = "w" if base == "fixed" else RULES[base].knob
    assert m.name == f"{METHODS[base]}, {knob} = {value:g} (given)"


@pytest.mark.parametrize("base", ["dynamic", "judge"])
def test_another_tasks_trained_module_round_trips(base):
    m = Method(base, head_task="cnndm")
    assert m.label == f"{base}@cnndm" and Method.parse(f"{base}@cnndm") == m and m.name == METHODS[base]


@pytest.mark.parametrize(("label", "message"), [
    ("beam", "method label 'beam': unknown method 'beam'"),
    ("strict-0.5", "only fixed, cascade.* run at a given setting, not 'strict'"),
    ("fixed@cnndm", "only dynamic and judge decode with another task.s trained module"),
    ("fixed-abc", "method label 'fixed-abc'"),
])
def test_a_bad_label_is_refused_naming_it(label, message):
    with pytest.raises(ValueError, match=message):
        Method.parse(label)


def test_the_plan_labels_its_runs_with_method_labels():
    """Every run of the paper config (given settings, transfers, families) carries a label Method parses back."""
    from helpers import ROOT

    from diversed.experiment.plan import load

    plan = load(ROOT / "config" / "paper.yaml")
    labels = {r.method for r in plan.runs}
    assert {Method.parse(x).label for x in labels} == labels
    assert any("@" in x for x in labels) and any(Method.parse(x).given is not None for x in labels)
    assert set(FAMILIES) & {Method.parse(x).base for x in labels}
