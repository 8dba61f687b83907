"""Scoring helpers shared by tasks: metric specs, numbers, code blocks, ROUGE. All offline."""

from __future__ import annotations

import functools
import re

from diversed.tasks.base import Metric

ACCURACY = Metric("accuracy", "fraction", tolerance=0.02, binary=True)  # final answer, exact match

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number in text, commas removed, trailing '.0' dropped; None if there is none."""
    found = _NUMBER.findall(text or "")
    if not found:
        return None
    return normalize_number(found[-1])


def normalize_number(s: str) -> str:
    s = s.replace(",", "").strip()
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def check_number_reference(task: str, example) -> None:
    """Raise unless a numeric task's reference is a number (GSM8K's "#### N" read, or arith's answer)."""
    if not re.fullmatch(r"-?\d+(?:\.\d+)?", str(example.reference or "")):
        raise ValueError(f"task {task}: the reference holds no number (got {example.reference!r}); give the final "
                         "answer, or GSM8K's solution ending '#### N'")


def answer_number(text: str) -> str | None:
    """The model's final answer: the number after 'answer is' when present, else the last number."""
    m = re.findall(r"answer is[:\s]*\$?\s*(-?\d[\d,]*(?:\.\d+)?)", text or "", flags=re.I)
    return normalize_number(m[-1]) if m else last_number(text)


def authors_number(text: str) -> int | None:
    """GSM8K's answer as the authors' code reads it (scripts/run_dp.py:97-106, the same in rl_train.py:67-75): commas
    dropped; the integer after the first "###" (so "#### 72" too; "### 3.7" is 3), else the last number (a "-" only
    where no digit precedes it: "20-15" is 15), rounded half to even (Python's round: 2.5 is 2); None where there
    is no number."""
    text = (text or "").replace(",", "")
    if m := re.search(r"###\s*(-?\d+)", text):
        return round(float(m.group(1)))
    found = re.findall(r"(?<!\d)-?\d+(?:\.\d+)?", text)
    return round(float(found[-1])) if found else None


def code_block(text: str) -> str:
    """The first fenced code block of a completion, or the whole completion when there is none."""
    m = re.search(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|$)", text or "", flags=re.S)
    return m.group(1) if m else (text or "")


def rouge(prediction: str, reference: str, stem: bool = True) -> dict[str, float]:
    """ROUGE-1/2/L F1 in percent (Google's rouge-score; with stemming as the summarisation papers, without as the
    library's default, which the DIVERSED authors' code keeps)."""
    s = _scorer(stem).score(reference, prediction or "")
    return {"rouge1": 100 * s["rouge1"].fmeasure, "rouge2": 100 * s["rouge2"].fmeasure,
            "rougeL": 100 * s["rougeL"].fmeasure}


@functools.cache
def _scorer(stem: bool):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=stem)

