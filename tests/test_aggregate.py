"""Aggregation: the paper's table layouts from tidy run rows."""

from __future__ import annotations

import pandas as pd
import pytest

from diversed.aggregate import table1, table3, transfer_temperature


def runs() -> pd.DataFrame:
    """DIVERSED runs on two tasks at two temperatures, own heads and one cross-task head, two seeds each."""
    rows = []
    for T in (0.1, 1.0):
        for task in ("arith", "open"):
            for seed in (0, 1):
                rows.append({"pair": "p", "task": task, "method": "dynamic", "head_task": None, "temperature": T,
                             "seed": seed, "draft_acceptance_rate": 0.5 if T == 1.0 else 0.1,
                             "quality": 0.2 if T == 1.0 else 0.9, "metric": "accuracy"})
    for seed in (0, 1):
        rows.append({"pair": "p", "task": "open", "method": "dynamic", "head_task": "arith", "temperature": 1.0,
                     "seed": seed, "draft_acceptance_rate": 0.3, "quality": 0.4, "metric": "accuracy"})
    return pd.DataFrame(rows)


def test_table3_takes_its_diagonal_from_the_transfer_temperature():
    """Regression: the diagonal (a task's own head) pooled both temperatures' runs."""
    df = runs()
    assert transfer_temperature(df) == 1.0
    t3 = table3(df, 1.0).set_index("head trained on")
    assert t3.loc["arith", "arith"] == "50.0 / 20.0" and t3.loc["arith", "open"] == "30.0 / 40.0"
    assert t3.loc["open", "open"] == "50.0 / 20.0"
    assert table1(df, 0.1).set_index("method").loc["DIVERSED", "arith"] == "10.0 / 90.0"


def test_cross_task_runs_at_two_temperatures_need_an_explicit_one():
    df = runs()
    extra = df[df["head_task"].notna()].assign(temperature=0.1)
    with pytest.raises(ValueError, match="several temperatures"):
        transfer_temperature(pd.concat([df, extra]))
