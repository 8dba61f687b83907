"""The paper's tasks: prompts, references, seeded splits, scorers and metric specs, one module per task, one registry.

A task turns rows of its source (HF hub dataset, a local JSONL given as `data_files`, or data shipped
with an installed package) into `Example`s, scores a completion against an example's reference, and
owns its headline `Metric`: every consumer (lm-eval scoring, tables, the sweep, the head's reward) reads
that spec and nothing else. Adding a task is one module plus a line in `registry()`.

Three disjoint splits: `train` fits (the head, the distilled draft), `dev` selects (the sweep's fixed w),
`eval` is reported. Splits whose rows come from one source (a single local file, a hub split serving two)
divide it by a seeded partition (`SHARES`); a data_files path with `{split}` in it names one file per split.
A prompt found in two splits is kept only in the later one of `SPLITS`, so no prompt that is reported was
ever trained or selected on.
"""

from __future__ import annotations

from diversed.tasks import arith, capitals, code, gsm8k, open_ended, summarization, translation
from diversed.tasks.base import (
    FIDELITY,
    PROMPT_FORMATS,
    SCORINGS,
    SHARES,
    SPLITS,
    UNITS,
    DataUnavailable,
    Example,
    Metric,
    Task,
    check_scoring,
)

__all__ = [
    "FIDELITY",
    "PROMPT_FORMATS",
    "SCORINGS",
    "SHARES",
    "SPLITS",
    "UNITS",
    "DataUnavailable",
    "Example",
    "Metric",
    "Task",
    "check_scoring",
    "get_task",
    "metric_spec",
    "registry",
]


def registry() -> dict[str, type[Task]]:
    tasks = [gsm8k.GSM8K, arith.Arith, capitals.Capitals, summarization.CNNDM, summarization.XSum, code.MBPP,
             code.HumanEval, translation.WMT16DeEn, open_ended.OpenEnded]
    return {t.name: t for t in tasks}


def get_task(name: str, data_files: str | dict[str, str] | None = None) -> Task:
    tasks = registry()
    if name not in tasks:
        raise ValueError(f"unknown task {name!r}; allowed: {', '.join(sorted(tasks))}")
    return tasks[name](data_files=data_files)


def metric_spec(name: str) -> Metric:
    """The Metric called `name` (as stored in scores.json and the tables): a task's, or the fidelity metric."""
    specs = {t.metric.name: t.metric for t in registry().values()} | {FIDELITY.name: FIDELITY}
    if name not in specs:
        raise ValueError(f"unknown metric {name!r}; allowed: {', '.join(sorted(specs))}")
    return specs[name]
