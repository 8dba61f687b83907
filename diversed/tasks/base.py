"""What every task is made of: the Metric spec, Example, the Task base class with its seeded splits, and
reading rows from the hub."""


from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from diversed.utils import read_jsonl

UNITS = ("fraction", "percent", "logprob")
SPLITS = ("train", "dev", "eval")  # a prompt in two splits stays in the later one
SHARES = {"train": 2, "dev": 1, "eval": 2}  # how splits that share one source divide its rows
# chat: the task's instructions in the tokenizer's chat template; raw: the task's `raw` template, no chat template
PROMPT_FORMATS = ("chat", "raw")
# standard: this harness's scorers, on the whole completion; authors: as the authors' code scores, the completion
# cut at the task's first stop marker (where a raw completion runs on into an invented next example), then the
# task's authors_score (GSM8K's "#### N" first, ROUGE unstemmed)
SCORINGS = ("standard", "authors")


@dataclass(frozen=True)
class Metric:
    """A task's headline quality metric."""

    name: str  # its key in scores.json and the tables (and in `Task.score` unless corpus)
    unit: str  # "fraction" in [0, 1] (accuracy, pass@1), "percent" in [0, 100] (ROUGE, BLEU), "logprob" per token
    tolerance: float  # quality the static sweep may give up vs strict when it picks the fixed w, in `unit`
    corpus: bool = False  # scored over the whole set (`Task.corpus_score`), else the mean of per-example scores
    also: tuple[str, ...] = ()  # per-example scores reported beside it (ROUGE-1/L, sentence BLEU)
    binary: bool = False  # each example scores 0 or 1 (accuracy, pass@1): paired tests on the discordant prompts
    higher_is_better: bool = True  # the direction every comparison of quality reads

    def __post_init__(self):
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.name}: unknown unit {self.unit!r}; allowed: {', '.join(UNITS)}")
        if self.binary and (self.unit != "fraction" or self.corpus):
            raise ValueError(f"metric {self.name}: a binary metric is a per-example fraction (0 or 1)")

    @property
    def per_example(self) -> tuple[str, ...]:
        """The keys of `Task.score`, each aggregated by the mean."""
        return self.also if self.corpus or self.fidelity else (self.name, *self.also)

    @property
    def fidelity(self) -> bool:
        """Reference-free: the run's own target log-likelihood per token, recorded while decoding."""
        return self.unit == "logprob"

    @property
    def statistic(self) -> str:
        """Its column in the prompt table (diversed.statistics.METRICS): a fidelity metric is target_logprob, a
        ratio of totals over tokens; any other is quality, a mean over prompts (nan per prompt for a corpus
        metric, which has no per-prompt value)."""
        return "target_logprob" if self.fidelity else "quality"


FIDELITY = Metric("target_logprob", "logprob", tolerance=0.1)  # open-ended prompts and runs without a task


class DataUnavailable(ValueError):
    """A task's data cannot be read (hub unreachable or offline, a missing local file); one line naming the fix."""


@dataclass
class Example:
    id: str
    prompt: str  # the user message; the chat template is applied by the model side
    reference: Any  # answer, summary, translation, or tests
    meta: dict = field(default_factory=dict)

    def row(self) -> dict:
        return {"id": self.id, "prompt": self.prompt, "reference": self.reference, **self.meta}


class Task:
    """Base class. Subclasses set the class attributes and implement `to_example` and `score` (and, for a
    corpus metric, `corpus_item` and `corpus_score`)."""

    name: ClassVar[str]
    metric: ClassVar[Metric]  # the headline metric reported in tables
    hub: ClassVar[tuple[str, str | None] | None] = None  # (dataset path, config name)
    revision: ClassVar[str | None] = None  # hub revision (branch, tag or commit); None is main
    # our split -> the source's split it comes from (hub split, or a built-in task's own); splits naming one
    # source split divide it (SHARES)
    sources: ClassVar[dict[str, str]] = {"train": "train", "dev": "validation", "eval": "test"}
    fields: ClassVar[tuple[str, ...]] = ()  # fields a row must have (after `flatten`)
    max_new_tokens: ClassVar[int] = 128
    # the prompt as a plain string (prompt_format raw): a str.format template over a row's fields, the authors'
    # wording for the paper's tasks (their data loaders); None: the task has no raw form
    raw: ClassVar[str | None] = None
    answer_field: ClassVar[str | None] = None  # the row field with a reference answer as text (finetune sft)
    stops: ClassVar[tuple[str, ...]] = ()  # the authors' cut markers: the start of their prompt's next example

    def __init__(self, data_files: str | dict[str, str] | None = None):
        self.data_files = data_files
        self._rows: dict[str, list[dict]] = {}  # split -> its rows

    # -- data ---------------------------------------------------------------------------------------
    def split_sources(self) -> dict[str, str]:
        """Each split's source: its local file (a data_files path with `{split}` names one file per split), else
        its source split."""
        if not self.data_files:
            return dict(self.sources)
        if isinstance(self.data_files, str):
            return {s: self.data_files.replace("{split}", s) for s in SPLITS}
        return {s: self.data_files[s] for s in SPLITS if s in self.data_files}

    def source(self, split: str) -> str:
        """Where a split's rows come from."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        if split not in (sources := self.split_sources()):
            raise ValueError(f"task {self.name}: data_files has no {split!r} file; give one file per split "
                             f"({', '.join(SPLITS)}) or one file for all")
        return sources[split]

    def rows(self, split: str) -> list[dict]:
        """Raw rows of a split (in the form `fields` names): its part of the source, less the prompts of the
        later splits."""
        if split in self._rows:
            return self._rows[split]
        sources, source = self.split_sources(), self.source(split)
        rows = [self.flatten(r) for r in self.read(source)]
        if self.data_files:
            for i, row in enumerate(rows):
                if missing := [f for f in self.fields if f not in row]:
                    raise ValueError(f"{source}:{i + 1}: a {self.name} row needs fields {list(self.fields)}, "
                                     f"missing {missing}")
        sharing = [s for s, src in sources.items() if src == source]
        if len(sharing) > 1:
            rows = [rows[i] for i in partition(len(rows), sharing, seed=self.name)[split]]
        later = [s for s in SPLITS[SPLITS.index(split) + 1:] if s in sources]
        taken = {self.to_example(r, "").prompt for s in later for r in self.rows(s)}
        self._rows[split] = [r for r in rows if self.to_example(r, "").prompt not in taken]
        return self._rows[split]

    def read(self, source: str) -> list[dict]:
        """All rows of a source: a local JSONL when data_files is given, else `source_rows`."""
        if not self.data_files:
            return self.source_rows(source)
        if not os.path.isfile(source):
            raise DataUnavailable(f"task {self.name}: data_files {source} does not exist")
        return read_jsonl(source)

    def source_rows(self, source: str) -> list[dict]:
        """Rows of a source split (a hub split; built-in tasks generate or ship theirs)."""
        return load_hub_rows(self.name, self.hub, source, self.fields, revision=self.revision)

    def flatten(self, row: dict) -> dict:
        """A source row in the form `fields` names (a task whose hub rows nest their fields undoes that here)."""
        return row

    def sample(self, split: str = "eval", n: int | None = None, seed: int = 0) -> list[int]:
        """The row indices of a fixed, seeded subsample of n rows of the split (all of them when n is None)."""
        rows = self.rows(split)
        if not rows:
            shares = ":".join(str(SHARES[s]) for s in SPLITS)
            raise ValueError(f"task {self.name}: the {split} split ({self.source(split)}) has no rows; splits sharing "
                             f"one file divide it train:dev:eval = {shares}: give more rows, or one file per split "
                             "(a data_files path with {split})")
        order = list(range(len(rows)))
        if n is not None and n < len(rows):
            order = sorted(random.Random(f"{self.name}-{split}-{seed}").sample(order, n))
        return order

    def examples(self, split: str = "eval", n: int | None = None, seed: int = 0,
                 prompt_format: str = "chat") -> list[Example]:
        """The examples of sample(split, n, seed), their prompts in prompt_format (PROMPT_FORMATS)."""
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"unknown prompt format {prompt_format!r}; allowed: {', '.join(PROMPT_FORMATS)}")
        if prompt_format == "raw" and self.raw is None:
            raise ValueError(f"task {self.name} has no raw prompt template: use prompt_format chat")
        rows = self.rows(split)
        examples = []
        for i in self.sample(split, n, seed):
            ex = self.to_example(rows[i], f"{self.name}-{split}-{i}")
            if prompt_format == "raw":
                ex.prompt = self.raw.format(**rows[i])
            examples.append(ex)
        return examples

    def answers(self, split: str = "eval", n: int | None = None, seed: int = 0) -> list[str]:
        """The reference answers as text of the examples of sample(split, n, seed): what supervised fine-tuning
        of the draft learns (finetune sft)."""
        if self.answer_field is None:
            raise ValueError(f"task {self.name} has no reference answer text: fine-tune its draft with distill")
        rows, f = self.rows(split), self.answer_field
        picked = self.sample(split, n, seed)
        if missing := [i for i in picked if f not in rows[i]]:
            raise ValueError(f"task {self.name}: {len(missing)} {split} row(s) have no {f!r} field (the reference "
                             f"answer finetune sft learns), e.g. row {missing[0] + 1} of {self.source(split)}")
        return [str(rows[i][f]).strip("\n").rstrip() for i in picked]  # the indentation of code stays

    def to_example(self, row: dict, id: str) -> Example:
        raise NotImplementedError

    def check_reference(self, example: Example) -> None:
        """Raise unless the example's reference holds an answer this task can score against (a reference given by
        hand: `diversed score --reference`)."""
        if example.reference is None or (isinstance(example.reference, str) and not example.reference.strip()):
            raise ValueError(f"task {self.name}: the reference is empty; it holds no answer to score against")

    # -- scoring ------------------------------------------------------------------------------------
    def score(self, completion: str, example: Example) -> dict[str, float]:
        """Per-example scores, keyed by `metric.per_example` (scoring standard)."""
        raise NotImplementedError

    def authors_score(self, completion: str, example: Example) -> dict[str, float]:
        """Per-example scores as the authors' code computes them, of a completion already cut (default: score)."""
        return self.score(completion, example)

    def cut(self, completion: str) -> str:
        """The completion up to the first of the task's stop markers."""
        at = min((i for i in (completion.find(m) for m in self.stops) if i >= 0), default=len(completion))
        return completion[:at]

    def scored_text(self, completion: str, scoring: str = "standard") -> str:
        """What a scoring (SCORINGS) reads of a completion: all of it (standard), or up to its stop (authors)."""
        check_scoring(scoring)
        return self.cut(completion) if scoring == "authors" else completion

    def scores(self, completion: str, example: Example, scoring: str = "standard") -> dict[str, float]:
        """Per-example scores under a scoring (SCORINGS)."""
        text = self.scored_text(completion, scoring)
        return self.authors_score(text, example) if scoring == "authors" else self.score(text, example)

    def item(self, completion: str, example: Example, scoring: str = "standard"):
        """What a corpus metric keeps of one example under a scoring."""
        return self.corpus_item(self.scored_text(completion, scoring), example)

    def corpus_item(self, completion: str, example: Example) -> Any:
        """What a corpus metric keeps of one example (JSON-serialisable)."""
        raise NotImplementedError(f"task {self.name} has no corpus metric")

    def corpus_score(self, items: list) -> float:
        """A corpus metric over the items of the whole set."""
        raise NotImplementedError(f"task {self.name} has no corpus metric")

    def quality(self, completions: list[str], examples: list[Example], scoring: str = "standard") -> float:
        """The headline metric over a set under a scoring: the corpus score, or the mean per-example score."""
        pairs = list(zip(completions, examples, strict=True))
        if self.metric.fidelity:
            raise ValueError(f"task {self.name} has no references: its quality is the run's fidelity")
        if not pairs:
            raise ValueError(f"task {self.name}: no completions to score")
        if self.metric.corpus:
            return self.corpus_score([self.item(c, e, scoring) for c, e in pairs])
        return sum(self.scores(c, e, scoring)[self.metric.name] for c, e in pairs) / len(pairs)

    def reward(self, completion: str, example: Example, scoring: str = "standard") -> float:
        """One completion's quality in [0, 1]: the headline metric on a set of one."""
        value = self.quality([completion], [example], scoring)
        return value / 100 if self.metric.unit == "percent" else value


def check_scoring(scoring: str) -> None:
    if scoring not in SCORINGS:
        raise ValueError(f"unknown scoring {scoring!r}; allowed: {', '.join(SCORINGS)}")


def partition(n: int, splits: list[str], seed: str) -> dict[str, list[int]]:
    """A seeded partition of row indices 0..n-1 among splits, in proportion to their SHARES (source order kept)."""
    order = list(range(n))
    random.Random(f"{seed}-partition").shuffle(order)
    total, start, taken, parts = sum(SHARES[s] for s in splits), 0, 0, {}
    for s in splits:
        taken += SHARES[s]
        end = round(n * taken / total)
        parts[s] = sorted(order[start:end])
        start = end
    return parts


def load_hub_rows(task: str, hub: tuple[str, str | None] | None, split: str, fields: tuple[str, ...],
                  revision: str | None = None) -> list[dict]:
    """Rows of a hub dataset; offline or unreachable is a one-line DataUnavailable naming the data_files fix."""
    if hub is None:
        raise DataUnavailable(f"task {task} has no online source; give data_files (--data-files) a local JSONL")
    try:
        import datasets

        ds = datasets.load_dataset(hub[0], hub[1], split=split, revision=revision)
    except Exception as e:  # any failure to reach or read the hub means the same to the user
        reason = " ".join(str(e).split())[:200]
        at = f", revision {revision}" if revision else ""
        raise DataUnavailable(
            f"task {task}: cannot load {hub[0]} ({hub[1] or 'default'}, split {split}{at}) from the Hugging Face "
            f"hub (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}; {type(e).__name__}: {reason}); "
            f"offline, pass data_files (--data-files) a local JSONL with fields {list(fields)}"
        ) from e
    return [dict(r) for r in ds]
