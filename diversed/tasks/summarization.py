"""CNN/DailyMail and XSum: summarisation scored by ROUGE-2 (ROUGE-1/L reported too)."""

from __future__ import annotations

from diversed.tasks.base import Example, Metric, Task
from diversed.tasks.common import rouge


def _truncate(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


class _Summarization(Task):
    metric = Metric("rouge2", "percent", tolerance=1.0, also=("rouge1", "rougeL"))
    source_field: str
    target_field: str
    instruction: str
    max_words = 400  # long articles are cut so that prompts fit small models and CPUs

    def to_example(self, row: dict, id: str) -> Example:
        article = _truncate(row[self.source_field].strip(), self.max_words)
        return Example(id, f"{self.instruction}\n\n{article}", row[self.target_field].strip())

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return rouge(completion, example.reference)

    def authors_score(self, completion: str, example: Example) -> dict[str, float]:
        return rouge(completion, example.reference, stem=False)


class CNNDM(_Summarization):
    name = "cnndm"
    hub = ("abisee/cnn_dailymail", "3.0.0")  # dev: the hub's validation split
    fields = ("article", "highlights")
    source_field, target_field = fields
    instruction = "Summarize the following news article in three sentences."
    raw = "Summarize the following article:\n\nArticle: {article}\n\nSummary:"
    stops = ("\n\nArticle:",)
    answer_field = "highlights"


def first_words(text: str, n: int) -> str:
    """The authors' truncate_to_n_words (scripts/run_dp.py:72-86): text with more than n whitespace-separated words
    becomes its first n joined by single spaces; shorter text stays as it is."""
    words = text.split()
    return text if len(words) <= n else " ".join(words[:n])


class XSum(_Summarization):
    name = "xsum"
    hub = ("EdinburghNLP/xsum", None)  # dev: the hub's validation split
    revision = "refs/convert/parquet"  # the hub's parquet export: main is a loading script, refused by datasets
    fields = ("document", "summary")
    source_field, target_field = fields
    instruction = "Summarize the following article in one sentence."
    raw = "Write a concise summary of the following document:\n\nDocument: {document}\n\nSummary:"
    stops = ("\n\nDocument:",)
    answer_field = "summary"
    max_new_tokens = 64
    AUTHORS_WORDS = 32  # the authors' evaluation scores the first 32 words of an XSum summary

    def authors_score(self, completion: str, example: Example) -> dict[str, float]:
        """The authors' per-example score (scripts/run_dp.py:387-391): the cut summary's first 32 words, ROUGE
        unstemmed."""
        return super().authors_score(first_words(completion, self.AUTHORS_WORDS), example)

    def reward(self, completion: str, example: Example, scoring: str = "standard") -> float:
        """The head's reward: under the authors' scoring, the cut summary whole, as their training reward reads it
        (rl_train.py:115-124, no 32-word cut)."""
        if scoring != "authors":
            return super().reward(completion, example, scoring)
        return _Summarization.authors_score(self, self.cut(completion), example)["rouge2"] / 100
