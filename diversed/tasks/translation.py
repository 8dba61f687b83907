"""WMT16 German to English, scored by corpus BLEU (sacrebleu) over the whole set; sentence BLEU per example."""

from __future__ import annotations

from diversed.tasks.base import Example, Metric, Task


def hypothesis(completion: str) -> str:
    """The translation: the completion's first line."""
    return (completion or "").strip().split("\n")[0]


class WMT16DeEn(Task):
    name = "wmt16-de-en"
    metric = Metric("bleu", "percent", tolerance=1.0, corpus=True, also=("sentence_bleu",))
    hub = ("wmt/wmt16", "de-en")  # dev: the hub's validation split (newstest2015)
    fields = ("de", "en")
    max_new_tokens = 96
    raw = "Translate the following German text to English:\n\nGerman: {de}\n\nEnglish:"
    answer_field = "en"

    def flatten(self, row: dict) -> dict:
        return row.get("translation", row)  # the hub nests the pair under "translation"; local files may too

    def to_example(self, row: dict, id: str) -> Example:
        return Example(id, f"Translate the following German text to English.\n\n{row['de'].strip()}",
                       row["en"].strip())

    def score(self, completion: str, example: Example) -> dict[str, float]:
        import sacrebleu

        return {"sentence_bleu": sacrebleu.sentence_bleu(hypothesis(completion), [example.reference]).score}

    def corpus_item(self, completion: str, example: Example) -> list[str]:
        return [hypothesis(completion), example.reference]

    def corpus_score(self, items: list) -> float:
        import sacrebleu

        return sacrebleu.corpus_bleu([h for h, _ in items], [[r for _, r in items]]).score
