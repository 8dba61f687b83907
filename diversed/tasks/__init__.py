"""The paper's tasks: prompts, references, seeded splits and scorers, one module per task, one registry.

A task turns rows of its source (HF hub dataset, a local JSONL given as `data_files`, or data shipped
with an installed package) into `Example`s, and scores a completion against an example's reference.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from diversed.utils import read_jsonl


@dataclass
class Example:
    id: str
    prompt: str  # the user message; the chat template is applied by the model side
    reference: Any  # answer, summary, translation, or tests
    meta: dict = field(default_factory=dict)

    def row(self) -> dict:
        return {"id": self.id, "prompt": self.prompt, "reference": self.reference, **self.meta}


class Task:
    """Base class. Subclasses set the class attributes and implement `to_example` and `score`."""

    name: ClassVar[str]
    metric: ClassVar[str]  # the headline metric reported in tables
    hub: ClassVar[tuple[str, str | None] | None] = None  # (dataset path, config name)
    hub_splits: ClassVar[dict[str, str]] = {"train": "train", "eval": "test"}
    fields: ClassVar[tuple[str, ...]] = ()  # fields a local JSONL row must have
    max_new_tokens: ClassVar[int] = 128

    def __init__(self, data_files: str | dict[str, str] | None = None):
        self.data_files = data_files

    # -- data ---------------------------------------------------------------------------------------
    def rows(self, split: str) -> list[dict]:
        """Raw rows of a split: from data_files when given, else from the source."""
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split {split!r}; allowed: train, eval")
        if self.data_files:
            path = self.data_files[split] if isinstance(self.data_files, dict) else self.data_files
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{self.name}: data_files {path} does not exist")
            rows = read_jsonl(path)
            for i, row in enumerate(rows):
                missing = [f for f in self.fields if f not in row]
                if missing:
                    raise ValueError(f"{path}:{i + 1}: a {self.name} row needs fields {list(self.fields)}, "
                                     f"missing {missing}")
            return rows
        return self.source_rows(split)

    def source_rows(self, split: str) -> list[dict]:
        return load_hub_rows(self.name, self.hub, self.hub_splits[split], self.fields)

    def examples(self, split: str = "eval", n: int | None = None, seed: int = 0) -> list[Example]:
        """A fixed, seeded subsample of n examples of the split (all of them when n is None)."""
        rows = self.rows(split)
        order = list(range(len(rows)))
        if n is not None and n < len(rows):
            order = sorted(random.Random(f"{self.name}-{split}-{seed}").sample(order, n))
        return [self.to_example(rows[i], f"{self.name}-{split}-{i}") for i in order]

    def to_example(self, row: dict, id: str) -> Example:
        raise NotImplementedError

    # -- scoring ------------------------------------------------------------------------------------
    def score(self, completion: str, example: Example) -> dict[str, float]:
        """Per-example metrics; aggregate by the mean (corpus-level metrics override `aggregate`)."""
        raise NotImplementedError

    def aggregate(self, scores: list[dict[str, float]], completions: list[str], examples: list[Example]) -> dict:
        keys = scores[0].keys() if scores else []
        return {k: sum(s[k] for s in scores) / len(scores) for k in keys}


def load_hub_rows(task: str, hub: tuple[str, str | None] | None, split: str, fields: tuple[str, ...]) -> list[dict]:
    """Rows of a hub dataset; offline or unreachable is a clear error naming the data_files override."""
    if hub is None:
        raise ValueError(f"task {task} has no online source; give data_files")
    try:
        import datasets

        ds = datasets.load_dataset(hub[0], hub[1], split=split)
    except Exception as e:  # any failure to reach or read the hub means the same to the user
        raise RuntimeError(
            f"task {task}: cannot load {hub[0]} ({hub[1] or 'default'}, split {split}) from the Hugging Face hub "
            f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}): {type(e).__name__}: {str(e)[:300]}. "
            f"Offline, set data_files to a local JSONL with fields {list(fields)}."
        ) from e
    return [dict(r) for r in ds]


def registry() -> dict[str, type[Task]]:
    from diversed.tasks import arith, code, gsm8k, open_ended, summarization, translation

    tasks = [gsm8k.GSM8K, arith.Arith, summarization.CNNDM, summarization.XSum, code.MBPP, code.HumanEval,
             translation.WMT16DeEn, open_ended.OpenEnded]
    return {t.name: t for t in tasks}


def get_task(name: str, data_files: str | dict[str, str] | None = None) -> Task:
    tasks = registry()
    if name not in tasks:
        raise ValueError(f"unknown task {name!r}; allowed: {', '.join(sorted(tasks))}")
    return tasks[name](data_files=data_files)
