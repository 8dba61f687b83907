"""Tiny random Llama models built in the test process: no downloads, a few layers, a small vocabulary."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from diversed.verifiers import logits_to_probs, verify

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_llama(seed: int = 0, *, vocab: int = 96, hidden: int = 32, layers: int = 2, ctx: int = 512,
               dtype: torch.dtype = torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ctx,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(dtype)
    # larger logits than the default init, so that distributions are peaked like a trained model's
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = None  # tests decode to full length unless they ask for an EOS
    return model.eval().requires_grad_(False)


def negated(model):
    """A draft whose greedy token is the target's argmin: every greedy draft is rejected."""
    d = copy.deepcopy(model)
    with torch.no_grad():
        d.lm_head.weight.neg_()
    return d


def tiny(model_type: str, seed: int = 0):
    """A tiny random model of a transformers model type (llama, qwen3, ...), float32, peaked logits."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).float().eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = None
    return model


def reference_speculative(target, draft, ids, *, K, n_new, w, temperature, generator, mixing="linear"):
    """Cache-free reference: every step re-encodes the whole sequence through both models."""
    tokens = list(ids)
    new: list[int] = []
    while len(new) < n_new:
        k = min(K, n_new - len(new) - 1)
        drafts, q_rows = [], []
        for _ in range(k):
            logits = draft(torch.tensor([tokens + drafts])).logits[0, -1].float()
            q_i = logits_to_probs(logits, temperature)
            drafts.append(int(torch.multinomial(q_i, 1, generator=generator)))
            q_rows.append(q_i)
        logits = target(torch.tensor([tokens + drafts])).logits[0, -(k + 1):].float()
        p = logits_to_probs(logits, temperature)
        q = torch.stack(q_rows) if q_rows else p.new_zeros(0, p.shape[-1])
        v = verify(torch.tensor(drafts, dtype=torch.long), q, p, w, mixing=mixing, generator=generator)
        emitted = drafts[: v.n_accepted] + [v.next_token]
        tokens += emitted
        new += emitted
    return new


@pytest.fixture(scope="session")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="session")
def draft(target):
    from diversed.models import truncated_draft

    return truncated_draft(target, 1)


@pytest.fixture(scope="session")
def other_draft():
    return tiny_llama(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random target + 1-layer draft saved with a character tokenizer (what the CLI loads)."""
    from diversed.models import prepare_tiny

    root = tmp_path_factory.mktemp("models")
    prepare_tiny(root)
    return root


# ------------------------------------------------------------------------------------------- workflow


def snakemake(*args, cwd=ROOT, check=True, timeout=900) -> subprocess.CompletedProcess:
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                        "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def jobs(dry_run_output: str) -> dict[str, int]:
    """Job counts per rule from a dry run's 'Job stats' table."""
    table = dry_run_output.split("Job stats:")[-1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.M)
            if m.group(1) != "total"}


def workflow_copy(tmp: Path) -> Path:
    for name in ("Snakefile", "workflow", "config", "profiles", "environment.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp / name)
    return tmp


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke config run once, uninterrupted, in a copy of the workflow (W&B disabled)."""
    wd = workflow_copy(tmp_path_factory.mktemp("smoke"))
    snakemake("--cores", "2", "--configfile", "config/smoke.yaml", cwd=wd, timeout=1200)
    return wd
