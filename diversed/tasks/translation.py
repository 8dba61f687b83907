"""WMT16 German to English, scored by BLEU (sacrebleu; corpus BLEU aggregate, sentence BLEU per example)."""

from __future__ import annotations

from diversed.tasks import Example, Task


class WMT16DeEn(Task):
    name = "wmt16-de-en"
    metric = "bleu"
    hub = ("wmt/wmt16", "de-en")
    fields = ("de", "en")
    max_new_tokens = 96

    def rows(self, split: str) -> list[dict]:
        rows = super().rows(split)
        # the hub nests the pair under "translation"; local files may use either form
        return [r.get("translation", r) for r in rows]

    def source_rows(self, split: str) -> list[dict]:
        from diversed.tasks import load_hub_rows

        return load_hub_rows(self.name, self.hub, self.hub_splits[split], ("translation",))

    def to_example(self, row: dict, id: str) -> Example:
        return Example(id, f"Translate the following German text to English.\n\n{row['de'].strip()}",
                       row["en"].strip())

    def score(self, completion: str, example: Example) -> dict[str, float]:
        import sacrebleu

        hyp = (completion or "").strip().split("\n")[0]
        return {"bleu": sacrebleu.sentence_bleu(hyp, [example.reference]).score}

    def aggregate(self, scores, completions, examples) -> dict:
        import sacrebleu

        hyps = [(c or "").strip().split("\n")[0] for c in completions]
        return {"bleu": sacrebleu.corpus_bleu(hyps, [[e.reference for e in examples]]).score,
                "sentence_bleu": sum(s["bleu"] for s in scores) / max(len(scores), 1)}
