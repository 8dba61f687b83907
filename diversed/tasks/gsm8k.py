"""GSM8K: grade-school math word problems; accuracy = the final answer's exact match."""

from __future__ import annotations

from typing import ClassVar

from diversed.tasks.base import Example, Task
from diversed.tasks.common import ACCURACY, answer_number, authors_number, check_number_reference, normalize_number

GSM8K_INSTRUCTION = "Solve the problem step by step. End with a line of the form \"The answer is N\".\n\n"


class GSM8K(Task):
    name = "gsm8k"
    metric = ACCURACY
    hub = ("openai/gsm8k", "main")
    # no validation split on the hub: dev is a seeded third of train, held out of the head's training
    sources: ClassVar[dict[str, str]] = {"train": "train", "dev": "train", "eval": "test"}
    fields = ("question", "answer")
    max_new_tokens = 256
    raw = "Question: {question}\n\nAnswer:"
    answer_field = "answer"  # the worked solution, ending "#### N"
    stops = ("Question:",)

    def to_example(self, row: dict, id: str) -> Example:
        answer = row["answer"].split("####")[-1]
        return Example(id, GSM8K_INSTRUCTION + row["question"].strip(), normalize_number(answer))

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return {"accuracy": float(answer_number(completion) == example.reference)}

    def check_reference(self, example: Example) -> None:
        check_number_reference(self.name, example)

    def authors_score(self, completion: str, example: Example) -> dict[str, float]:
        """The authors' per-example score (scripts/run_dp.py:354-357): their reading of the cut completion against
        their reading of the gold answer ("#### N"), both by authors_number."""
        answer = authors_number(completion)
        return {"accuracy": float(answer is not None and answer == authors_number(f"#### {example.reference}"))}
