"""The embedded draft: a small model distilled from the embedded target, by `diversed prepare-models`.

Recipe (README "The embedded pair" has its measurements):
1. text: the target samples a completion (T = 1) for each distillation prompt: general instructions (below) and
   arith-style problems from arith's "draft" source, which no split holds. No prompt of any task's train, dev or
   eval split: the head trains on a task's train prompts, and a draft fit to the target there would look better
   to it than on the prompts the tables report (an off-the-shelf draft has never seen them either). The logits
   that sampled each completion are kept;
2. draft vocabulary R: the `vocab_rows` tokens the target wrote most often in that text (ties: lower id first,
   i.e. earlier BPE merges). The draft computes logits for those rows only and gives the others q = 0, as in
   frequency-ranked drafting (FR-Spec): the output projection is most of a small draft's cost. Verification
   stays exact: strict rejection resamples from max(0, p - q), which covers every token the draft cannot propose;
3. model: the target's first `layers` decoder blocks, embeddings, final norm and tied output head;
4. training: KL(p_R || q) over R on that text (fit), the embeddings and output head frozen.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from diversed.decoding.engine import eos_set
from diversed.decoding.models import encode_prompt, truncated_draft, vocab_size
from diversed.training.finetune import kl_loss
from diversed.training.settings import DraftRecipe


@dataclass
class Sample:
    """A distillation sequence: the prompt, the target's completion, and the target's logits that sampled it."""

    prompt: list[int]
    completion: list[int]  # [n], up to and including the first EOS
    logits: torch.Tensor  # [n, V] bfloat16


@torch.no_grad()
def sample_text(target: nn.Module, tokenizer, prompts: list[list[int]], *, max_new_tokens: int,
                temperature: float, batch_size: int, seed: int, progress: bool = True) -> list[Sample]:
    """The target's sampled completion of each prompt, with its logits, through transformers' batched generate
    (left padding); one seed for the whole, batches in a fixed order."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = eos_set(target) | {tokenizer.eos_token_id}
    torch.manual_seed(seed)
    samples = []
    for start in tqdm(range(0, len(prompts), batch_size), desc="target text", unit="batch", disable=not progress):
        batch = prompts[start:start + batch_size]
        width = max(map(len, batch))
        x = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=target.device)  # [B, width]
        starts = torch.tensor([width - len(ids) for ids in batch], device=target.device)  # [B]: left padding
        mask = (torch.arange(width, device=target.device) >= starts[:, None]).long()
        out = target.generate(x, attention_mask=mask, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                              max_new_tokens=max_new_tokens, pad_token_id=pad, return_dict_in_generate=True,
                              output_logits=True)
        tokens = out.sequences[:, width:].tolist()  # [B, n]
        logits = torch.stack(out.logits, 1).to(torch.bfloat16)  # [B, n, V]
        for ids, row, lg in zip(batch, tokens, logits, strict=True):
            n = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            samples.append(Sample(ids, row[:n], lg[:n].clone()))
    return samples


def draft_vocabulary(samples: list[Sample], rows: int, vocab: int, keep: set[int]) -> list[int]:
    """The `rows` ids the completions use most (ties: lower id first), the ids in keep (EOS) included; sorted."""
    counts = Counter(t for s in samples for t in s.completion)
    ranked = sorted(range(vocab), key=lambda t: (t not in keep, -counts[t], t))
    return sorted(ranked[:rows])


def fit(draft: nn.Module, samples: list[Sample], rows: list[int], *, epochs: int, lr: float, seed: int,
        progress: bool = True) -> list[dict]:
    """Train draft's trainable parameters (AdamW, one sequence a step, a seeded order per epoch) to minimise
    KL(p_R || q) over the draft vocabulary R, where p_R is the target's distribution restricted to R and
    renormalised, and q the draft's over R (its output head's rows R). Returns the log rows."""
    index = torch.tensor(rows, device=draft.device)  # [R]
    W = draft.get_output_embeddings().weight.detach().index_select(0, index)  # [R, h], frozen
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    log, step = [], 0
    for epoch in range(epochs):
        order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(seed * 7919 + epoch)).tolist()
        for i in tqdm(order, desc=f"draft epoch {epoch + 1}", unit="seq", disable=not progress):
            s = samples[i]
            n = len(s.completion)
            x = torch.tensor([s.prompt + s.completion[:-1]], device=draft.device)  # [1, L]: the last n predict
            h = draft.get_decoder()(input_ids=x).last_hidden_state[0, -n:]  # [n, h]
            loss = kl_loss(s.logits.index_select(1, index), h @ W.T)  # [n, R] x [n, R]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            log.append({"step": step, "epoch": epoch, "kl": loss.item(), "tokens": n})
    return log


def distil(target: nn.Module, tokenizer, recipe: DraftRecipe, *, progress: bool = True) -> nn.Module:
    """The embedded draft of `recipe` (float32, eval mode), its vocabulary in config.draft_vocabulary."""
    prompts = [encode_prompt(tokenizer, p) for p in recipe.prompts()]
    samples = sample_text(target, tokenizer, prompts, max_new_tokens=recipe.max_new_tokens,
                          temperature=recipe.temperature, batch_size=recipe.batch_size, seed=recipe.seed,
                          progress=progress)
    rows = draft_vocabulary(samples, recipe.vocab_rows, vocab_size(target), eos_set(target) | {tokenizer.eos_token_id})
    draft = truncated_draft(target, recipe.layers)
    draft.train().requires_grad_(True)
    draft.get_input_embeddings().requires_grad_(False)
    draft.get_output_embeddings().requires_grad_(False)  # tied to the embeddings in SmolLM2
    log = fit(draft, samples, rows, epochs=recipe.epochs, lr=recipe.lr, seed=recipe.seed, progress=progress)
    draft.config.draft_vocabulary = rows
    draft.config.draft_recipe = dataclasses.asdict(recipe) | {"id": recipe.id,
        "prompts": len(prompts), "tokens": sum(len(s.completion) for s in samples), "final_kl": log[-1]["kl"]}
    return draft.eval().requires_grad_(False)
