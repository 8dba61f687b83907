"""The authors' protocol, setting by setting: what their released code does (comeusr/diversed at 3750237: the file
and line), the setting of this harness that reproduces it and its value there. A workflow config's `protocol`
(standard | authors) gives these settings their defaults: `authors` the values below, `standard` each setting's own
default (what a careful harness does). REPORT.md's deviations table reads each setting as it ran (the runs' and
trainings' manifests) against the authors' value, and prints both protocols' values beside it; docs/AUTHORS.md
walks their pipeline with the same references.

Their code does not run as released (its inference driver and patched transformers are missing; the trainer's
forward raises): where it is ambiguous or broken, the value is what their per-example path implies, and `theirs`
says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROTOCOLS = ("standard", "authors")


@dataclass(frozen=True)
class Step:
    """One setting of the authors' pipeline: its row name, the config key that sets it (section.name, or a top-level
    name), the value their code implies, their file and line, what their code does, and where it is recorded in
    force: the column of runs.csv ("runs"), or of trained.csv's heads or drafts."""

    name: str
    key: str
    authors: Any
    source: str
    theirs: str
    table: str = "runs"

    @property
    def column(self) -> str:
        return self.key.split(".")[-1]


STEPS = (
    Step("sampling", "sampling", "model", "scripts/run_dp.py:316-328",
         "transformers' generate with each model's generation config: its top-k and top-p stay on"),
    Step("prompt format", "prompt_format", "raw", "train/dataloader.py:152-234",
         "raw f-string templates; the jinja chat template is set but never used (run_dp.py:241)"),
    Step("decoding stops", "stop", "length", "scripts/run_dp.py:316-328, 517",
         "generate to 128 new tokens or EOS, no stop string; the task's marker is cut only when scoring"),
    Step("scoring and answer extraction", "scoring", "authors", "scripts/run_dp.py:89-106, 352-391",
         "per example: cut at the first marker (\"Question:\", \"\\n\\nArticle:\", \"\\n\\nDocument:\"); GSM8K: "
         "the integer after the first \"###\", else the last number, rounded half to even, against the same reading "
         "of the gold answer; XSum: the first 32 words; ROUGE unstemmed. Their metrics.json scores uncut text, and "
         "its GSM8K path cannot run as released (labels are row dicts): the per-example reading is the one used"),
    Step("training prompts", "train_head.prompt_keep", "first", "train/dataloader.py:272-278",
         "tokenizer(truncation=True, max_length=512) with the tokenizer's right truncation: the first 512 tokens, "
         "BOS kept, the reply's header lost", "heads"),
    Step("training prompts' length", "train_head.max_prompt_tokens", 512, "train_config/config.yaml:39",
         "max_prompt_length 512", "heads"),
    Step("DIVERSED's mixing", "train_head.mixing", "logit", "train/models.py:235-246",
         "w_draft * draft logits + w_target * target logits, then softmax", "heads"),
    Step("head's rollouts", "train_head.rollout", "greedy", "train_config/config.yaml:50-51",
         "do_sample false, temperature 0", "heads"),
    Step("head's reward baseline", "train_head.baseline", "authors", "train/trainer.py:231-236, 279-283",
         "R - 1 on GSM8K and MBPP (no baseline); a running mean (momentum 0.9) on CNN/DM, XSum, WMT", "heads"),
    Step("head's reward scoring", "scoring", "authors", "rl_train.py:67-124",
         "the same cut and GSM8K reading as their evaluation; XSum's summary whole (no 32-word cut)", "heads"),
    Step("acceptance term's size", "train_head.acceptance_weight", 0.05, "train/trainer.py:256",
         "0.05 of the reward loss's magnitude", "heads"),
    Step("acceptance term's sign", "train_head.acceptance_term", "authors", "train/trainer.py:245-261",
         "reg = -sum_t (1 - TV(q, nu)) <= 0 and scale = 0.05 |L_R| / (reg + 1e-8): negative, so whenever L_R != 0 "
         "the loss L_R + scale * reg penalises acceptance; with L_R = 0, scale = reg_scale and it rewards it", "heads"),
    Step("acceptance term without reward loss", "train_head.relative_at_zero", 10.0, "run_rl.sh:12, 56",
         "reg_scale = LAMBDA = 10 (their run script; 5 in configs/default_config.yaml:18)", "heads"),
    Step("learning-rate schedule", "train_head.schedule", "authors", "rl_train.py:224-228; train/dataloader.py:120",
         "LinearLR from 0.1 over 10 steps, then CosineAnnealingLR with T_max = 400 // 32 - 10 = 2 (their loader's "
         "default batch 32), stepped every batch: 5e-4, 2.5e-4, 0, 2.5e-4 to the end", "heads"),
    Step("fine-tuned draft's prompts", "distill.prompt_keep", "first", "train/dataloader.py:272-278",
         "the same tokenizer call as the head's prompts: the first 512 tokens", "drafts"),
    Step("fine-tuned draft's objective", "distill.finetune", "sft", "train/dataloader.py:153-239, 311-316",
         "their data loader pairs each prompt with its reference answer as the target and masks the prompt's labels; "
         "the draft's fine-tuning script itself is not public", "drafts"),
)
def authors_settings() -> dict[str, dict | Any]:
    """The authors' values as a config's keys: {key: value, section: {name: value}}."""
    out: dict[str, Any] = {}
    for s in STEPS:
        section, _, name = s.key.rpartition(".")
        (out.setdefault(section, {}) if section else out)[name] = s.authors
    return out


def apply(config: dict) -> dict:
    """The config with its protocol's defaults filled in where it does not set a key (protocol authors: the
    authors' values; standard: nothing, each setting's own default)."""
    protocol = config.get("protocol", "standard")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol: unknown protocol {protocol!r}; allowed: {', '.join(PROTOCOLS)}")
    if protocol == "standard":
        return config
    out = dict(config)
    for key, value in authors_settings().items():
        if isinstance(value, dict):
            section = out.get(key) or {}
            if not isinstance(section, dict):
                return out  # the schema names the bad section
            out[key] = value | section
        else:
            out.setdefault(key, value)
    return out
