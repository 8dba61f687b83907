"""arith: seeded multi-step arithmetic word problems, small enough for a 135M model to partly solve.

Offline and built in: each split is generated from a seed, so train, dev and eval never overlap and every
machine sees the same problems. Difficulty = number of operations (1 to `steps`, additions and
subtractions) and operand range. At the default (1-2 operations, operands up to 5) SmolLM2-135M-
Instruct answers 33% of the first 30 eval problems greedily and its 1-layer draft none (measured;
operands up to 10 gave 12.5%, multiplications 15%, a step-by-step instruction 7-20%).
"""

from __future__ import annotations

import random
from typing import ClassVar

from diversed.tasks.base import Example, Task
from diversed.tasks.common import ACCURACY, answer_number, check_number_reference

NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Leo", "Emma", "Max", "Zoe"]
ITEMS = ["apples", "books", "marbles", "stickers", "pencils", "cookies", "cards", "shells"]
ARITH_INSTRUCTION = "Answer with the final number.\n\n"


def problem(rng: random.Random, steps: int, top: int) -> tuple[str, int]:
    """One word problem with 1..steps operations on operands in [1, top]; returns (text, answer)."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    total = rng.randint(2, top)
    text = [f"{name} has {total} {item}."]
    for _ in range(rng.randint(1, steps)):
        if total < 2 or rng.random() < 0.5:
            n = rng.randint(1, top)
            total += n
            text.append(rng.choice([f"{name} gets {n} more {item}.", f"A friend gives {name} {n} {item}."]))
        else:
            n = rng.randint(1, total - 1)
            total -= n
            text.append(rng.choice([f"{name} gives away {n} {item}.", f"{name} loses {n} {item}."]))
    text.append(f"How many {item} does {name} have now?")
    return " ".join(text), total


class Arith(Task):
    name = "arith"
    metric = ACCURACY
    max_new_tokens = 64
    # drawn in this order; "draft": problems in no split, for the embedded draft's distillation text
    sizes: ClassVar[dict[str, int]] = {"eval": 200, "train": 400, "dev": 200, "draft": 400}
    sources: ClassVar[dict[str, str]] = {"train": "train", "dev": "dev", "eval": "eval"}

    def __init__(self, data_files=None, steps: int = 2, top: int = 5):
        super().__init__(data_files)
        self.steps, self.top = steps, top

    def source_rows(self, source: str) -> list[dict]:
        """Distinct problems; each split never repeats a problem of the splits drawn before it."""
        seen: set[str] = set()
        for s, size in self.sizes.items():
            rng = random.Random(f"arith-{s}-{self.steps}-{self.top}")
            rows: list[dict] = []
            while len(rows) < size:
                text, answer = problem(rng, self.steps, self.top)
                if text not in seen:
                    seen.add(text)
                    rows.append({"question": text, "answer": str(answer)})
            if s == source:
                return rows
        raise ValueError(f"unknown split {source!r}")

    fields = ("question", "answer")

    def to_example(self, row: dict, id: str) -> Example:
        return Example(id, ARITH_INSTRUCTION + row["question"], str(row["answer"]))

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return {"accuracy": float(answer_number(completion) == example.reference)}

    def check_reference(self, example: Example) -> None:
        check_number_reference(self.name, example)
