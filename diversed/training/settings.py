"""The training jobs' settings as plain data: the DIVERSED head's (`HeadTrainConfig`), the fine-tuned draft's
(`DistillConfig`), AutoJudge's labels and classifier (`JudgeConfig`, `JudgeFit`) and the embedded draft's recipe
(`DraftRecipe`), each field declared once (diversed.utils.option): the command line's flags, the workflow config's
training sections and the checks of `validate` are generated from the declarations; no torch is imported here."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from diversed.decoding.settings import DEFAULT_DRAFT_LAYERS, DTYPES, MIXINGS
from diversed.experiment.declared import check
from diversed.tasks import PROMPT_FORMATS, SCORINGS, get_task, registry
from diversed.utils import config_hash, option

REWARDS = ("task", "fidelity")
ROLLOUTS = ("greedy", "sample")
ACCEPTANCE_TERMS = ("fixed", "relative", "authors")
SCHEDULES = ("cosine", "authors")  # HeadTrainConfig.schedule
PROMPT_KEEPS = ("last", "first")  # TaskPairConfig.prompt_keep
# the reward baseline b of the advantage R - b: a running mean, none (b = 1: R - 1), or the authors' choice per task
# (none where the reward is 0/1, GSM8K and MBPP; the running mean on the others)
REWARD_BASELINES = ("mean", "none", "authors")
FINETUNES = ("distill", "sft")
TEXT_BATCH = 16  # prompts the target decodes together for a fine-tuned draft's text


@dataclass
class TaskPairConfig:
    """What every training job reads: the pair and the task's train prompts."""

    task: str = option("arith", "task whose train prompts the job learns from")
    target: str = option("embedded", "target model: local path, hub id, or `embedded`")
    draft: str = option("embedded", "draft model: local path, hub id, `embedded` or `embedded-weak`")
    draft_layers: int = option(DEFAULT_DRAFT_LAYERS, "which embedded draft (its N decoder layers)", low=1)
    data_files: str | None = option(None, "local JSONL for the task (offline use of hub tasks)")
    n_train: int = option(400, "training prompts (seeded subsample of the train split)", low=1)
    max_new_tokens: int = option(128, "length of each completion the job generates", low=1)
    seed: int = option(0, "seed of the subsample, the order and the sampling", low=0)
    dtype: str = option("float32", "weight dtype of both models", choices=DTYPES)
    device: str = option("cpu", "cpu | cuda | cuda:N", pattern="^(cpu|cuda(:[0-9]+)?)$")
    prompt_format: str = option("chat", "chat (the task's instructions in the chat template) | raw (the task's "
                                        "plain template: the authors')", choices=PROMPT_FORMATS)
    max_prompt_tokens: int | None = option(None, "cut each training prompt to N tokens (the authors' 512: a long "
                                                 "article then fits a batch of rollouts); none: whole prompts", low=1)
    prompt_keep: str = option("last", "which max_prompt_tokens a cut prompt keeps: last (the question and the reply's "
                                      "header) | first (with BOS, as the authors' tokenizer call truncates)",
                              choices=PROMPT_KEEPS)

    def clip(self, ids: list[int]) -> list[int]:
        """A training prompt's token ids cut to max_prompt_tokens: its last ones, or its first (prompt_keep)."""
        if self.max_prompt_tokens is None:
            return ids
        return ids[:self.max_prompt_tokens] if self.prompt_keep == "first" else ids[-self.max_prompt_tokens:]

    def validate(self) -> None:
        """Raise at the first field outside its declaration (diversed.experiment.declared), or an unknown task."""
        check(self)
        if self.task not in registry():
            raise ValueError(f"task: unknown task {self.task!r}; allowed: {', '.join(sorted(registry()))}")


@dataclass
class TrainConfig(TaskPairConfig):
    """What head training and distillation share: the pair, the task's train prompts, the optimiser's basics."""

    epochs: int = option(2, "passes over the training prompts", low=1)
    lr: float = option(1e-4, "AdamW learning rate", above=0)
    grad_clip: float = option(1.0, "gradient-norm clip", above=0)


@dataclass
class HeadTrainConfig(TrainConfig):
    """One head's training run. Defaults are the paper's (AdamW 5e-4, warm-up + cosine, batch 8, 2 epochs, 400
    prompts, 128 tokens, clip 5, greedy rollouts)."""

    lr: float = option(5e-4, "AdamW learning rate", above=0)
    grad_clip: float = option(5.0, "gradient-norm clip", above=0)
    batch_size: int = option(8, "prompts per REINFORCE step", low=1)
    warmup_frac: float = option(0.1, "fraction of the steps spent in linear warm-up", low=0, below=1)
    acceptance_term: str = option("fixed", "fixed (lambda weighs the expected acceptance) | relative (lambda is its "
                                          "size as a fraction of the reward loss's, every step, always rewarding "
                                          "acceptance) | authors (their arithmetic: the same fraction with their "
                                          "sign, which penalises acceptance whenever the reward loss is not 0)",
                                   choices=ACCEPTANCE_TERMS)
    schedule: str = option("cosine", "learning rate: cosine (linear warm-up over warmup_frac, one cosine decay to 0) "
                                     "| authors (their LinearLR from 0.1 over 10 steps, then cosine with T_max = "
                                     "n_train // 32 - 10, stepped every batch: it cycles)", choices=SCHEDULES)
    acceptance_weight: float = option(0.1, "lambda: the acceptance term's weight (fixed) or fraction (relative)",
                                       low=0)
    baseline: str = option("mean", "the reward baseline b in R - b: mean (running) | none (b = 1) | authors (none for "
                                   "0/1 rewards, GSM8K and MBPP; mean on the others)", choices=REWARD_BASELINES)
    baseline_momentum: float = option(0.9, "momentum of the running-mean reward baseline", low=0, below=1)
    relative_at_zero: float = option(5.0, "the relative term's lambda on a step whose reward loss is 0 (the "
                                          "authors' run script: 10)", low=0)
    scoring: str = option("standard", "how the reward scores a rollout (tasks.SCORINGS)", choices=SCORINGS)
    rollout: str = option("greedy", "greedy (the paper) | sample (explores)", choices=ROLLOUTS)
    temperature: float = option(1.0, "temperature of p and q (and of sampled rollouts)", above=0)
    mixing: str = option("linear", "the ensemble form trained (DIVERSED's runs decode with the same)", choices=MIXINGS)
    reward: str = option("task", "task (the task metric) | fidelity (mean target log-likelihood per token)",
                         choices=REWARDS)


@dataclass
class DistillConfig(TrainConfig):
    """Fine-tune the draft: distil it toward the target (KL(p_target || q_draft) on the target's greedy text), or
    supervised (cross-entropy on the task's reference answers). The draft trains in bfloat16 with AdamW16 when
    dtype is bfloat16, else in float32 with AdamW."""

    finetune: str = option("distill", "distill (toward the target, on its own text) | sft (on the task's reference "
                                      "answers: the authors')", choices=FINETUNES)


@dataclass
class JudgeConfig(TaskPairConfig):
    """AutoJudge's label mining on a task's train prompts (Garipov et al., NeurIPS 2025): the target's greedy answer,
    each position where the draft's greedy choice differs swapped to it and continued greedily by the target, the
    swap labelled important where the task's scorer changes its verdict (or a graded score moves by more than the
    task's tolerance)."""

    n_train: int = option(400, "training prompts mined (seeded subsample of the train split)", low=1)
    max_new_tokens: int = option(128, "length of each greedy answer, and of a swapped answer's continuation", low=1)
    batch_size: int = option(8, "prompts mined together (a resumed job keeps each finished group of them); the "
                                "rows the target decodes at once", low=1)
    scoring: str = option("standard", "how an answer is scored: standard | authors (tasks.SCORINGS; authors: "
                                      "answers stop at the task's stop markers)", choices=SCORINGS)

    def validate(self) -> None:
        super().validate()
        if get_task(self.task).metric.fidelity:
            raise ValueError(f"task {self.task} has no references: AutoJudge's labels need a task whose answers are "
                             "scored (one with a checkable answer)")


@dataclass
class JudgeFit:
    """AutoJudge's classifier: an L2-penalised logistic regression on the standardised features of the mined
    mismatches, the classes weighted to equal total weight, some prompts held out for its AUC."""

    l2: float = option(0.01, "L2 penalty on the coefficients (of the class-weighted mean log-loss)", low=0)
    holdout: float = option(0.2, "share of the mined prompts held out for the AUC (the judge learns from the rest)",
                            low=0, below=1)
    iterations: int = option(200, "L-BFGS iterations", low=1)
    seed: int = option(0, "seed of the held-out prompts", low=0)

    def validate(self) -> None:
        check(self)


# general instructions (topics x requests), disjoint from every task's prompts
TOPICS = ["the ocean", "volcanoes", "friendship", "the moon", "music", "a city park", "electricity", "honey bees",
          "the internet", "winter", "a long train journey", "gardening", "the human heart", "recycling",
          "mountains", "a rainy day", "chess", "dinosaurs", "coffee", "the solar system", "a small bakery",
          "kindness", "clouds", "a lighthouse", "learning a new language", "public transport", "a birthday party",
          "photosynthesis", "the printing press", "saving money", "dogs and cats", "a football match", "deserts",
          "the history of bicycles", "cooking pasta", "time management", "rivers", "a museum visit",
          "healthy sleep", "solar panels", "a school library", "trees in a forest", "the first airplane",
          "a snowy village", "teamwork", "a farmers market", "the brain", "board games"]
REQUESTS = ["Tell me three interesting facts about {}.", "Write a short paragraph about {}.",
            "Explain {} to a ten-year-old.", "Write four lines of poetry about {}.",
            "What are the pros and cons of {}?", "Give me a list of five words related to {}.",
            "Write a short story that involves {}.", "What questions would a curious student ask about {}?"]
GENERAL_PROMPTS = [r.format(t) for t, r in itertools.product(TOPICS, REQUESTS)]  # 384


@dataclass(frozen=True)
class DraftRecipe:
    """How the embedded draft is made from the target; every field is part of what gets cached."""

    layers: int = option(2, "decoder blocks, the target's first ones")
    vocab_rows: int = option(4096, "draft vocabulary: the most frequent tokens of the distillation text")
    general_prompts: int = option(len(GENERAL_PROMPTS), "general instructions (the first N)")
    arith_prompts: int = option(160, "arith-style problems of no arith split (the first N of its draft source)")
    max_new_tokens: int = option(48, "tokens the target samples per prompt")
    temperature: float = option(1.0, "temperature of the target's samples")
    batch_size: int = option(32, "prompts sampled at once")
    epochs: int = option(8, "passes over the text")
    lr: float = option(3e-4, "AdamW learning rate")
    seed: int = option(0, "seed of the samples and the order")

    @property
    def id(self) -> str:
        """What identifies the draft this recipe builds: a short hash of its fields."""
        return config_hash(dataclasses.asdict(self))

    def prompts(self) -> list[str]:
        arith = get_task("arith")
        problems = [arith.to_example(row, str(i)).prompt
                    for i, row in enumerate(arith.source_rows("draft")[: self.arith_prompts])]
        return GENERAL_PROMPTS[: self.general_prompts] + problems
