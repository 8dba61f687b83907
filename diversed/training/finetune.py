"""The fine-tuned-draft baseline ("SD with fine-tuned draft" in the paper's tables): the pair's draft fine-tuned on
a task's training prompts, toward the target's own greedy text (KL distillation) or on the task's reference
answers (supervised, the authors'); and the losses and optimiser the embedded draft's recipe shares."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from diversed.compat import enable_activation_checkpointing
from diversed.decoding.engine import Ends, Networks, generate
from diversed.decoding.models import draft_vocabulary, load_pair, weights_sha256
from diversed.decoding.rng import stream_seed
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.tasks import get_task
from diversed.tracking import Tracker
from diversed.training.settings import TEXT_BATCH, DistillConfig
from diversed.training.train import encode_examples, write_log_csv
from diversed.utils import DRAFT_OWNER, atomic_dir, check_output, config_hash, provenance, write_json


def kl_loss(target_logits: torch.Tensor, draft_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(softmax(target) || softmax(draft)): [L, V_t] x [L, V_d] -> scalar.

    Heads that differ only by padding are compared over the shared ids (the rest are never real tokens)."""
    shared = min(target_logits.shape[-1], draft_logits.shape[-1])
    log_p = target_logits[..., :shared].float().log_softmax(-1)  # [L, shared]
    log_q = draft_logits[..., :shared].float().log_softmax(-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


def sft_loss(draft_logits: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy of the draft on the reference tokens: [L, V_d] x [L] -> scalar. A draft over a draft
    vocabulary (index [R] of ids; logits [L, R]) learns the positions whose token it can propose."""
    if index is not None:
        lookup = torch.full((int(index.max()) + 1,), -1, dtype=torch.long, device=index.device)
        lookup[index] = torch.arange(len(index), device=index.device)  # id -> its column in [R]
        tokens = torch.where(tokens < len(lookup), lookup[tokens.clamp_max(len(lookup) - 1)], -1)  # [L], -1: none
    return torch.nn.functional.cross_entropy(draft_logits.float(), tokens, ignore_index=-1)


def stochastic_round(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """float32 -> bfloat16 rounded up or down at random, so that E[result] = x: random bits are added to the 16
    bits of the float32 pattern that bfloat16 drops, which are then cut off."""
    noise = torch.randint(0, 1 << 16, x.shape, generator=generator, device=x.device, dtype=torch.int32)
    return ((x.view(torch.int32) + noise) & -(1 << 16)).view(torch.float32).to(torch.bfloat16)


class AdamW16(torch.optim.Optimizer):
    """AdamW for bfloat16 weights without a float32 copy: both moments are kept in bfloat16 and every step is
    computed in float32, then written back by stochastic rounding (unbiased, so that steps below bfloat16's
    resolution, 1e-4 on a weight of 0.1, still move the weights on average; rounding to nearest drops them).
    8 bytes a parameter (weight, gradient, two moments), where mixed-precision AdamW holds 16."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, seed: int = 0, chunk: int = 1 << 24):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.seed, self.chunk, self.generators = seed, chunk, {}

    def generator(self, device: torch.device) -> torch.Generator:
        if device not in self.generators:
            self.generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[device]

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype != torch.bfloat16:
                    raise ValueError(f"AdamW16 trains bfloat16 weights, got {p.dtype}; use torch.optim.AdamW")
                state = self.state[p]
                if not state:
                    state["step"], state["m"], state["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                c1, c2 = 1 - b1 ** state["step"], 1 - b2 ** state["step"]
                gen = self.generator(p.device)
                # in chunks, so that the float32 temporaries of a large embedding stay small
                for w, g, m, v in zip(*(x.view(-1).split(self.chunk) for x in (p, p.grad, state["m"], state["v"])),
                                      strict=True):
                    g32 = g.float()
                    m32 = m.float().lerp_(g32, 1 - b1)
                    v32 = v.float().mul_(b2).addcmul_(g32, g32, value=1 - b2)
                    w32 = w.float().mul_(1 - lr * decay).addcdiv_(m32, (v32 / c2).sqrt_().add_(eps), value=-lr / c1)
                    for dst, src in ((w, w32), (m, m32), (v, v32)):
                        dst.copy_(stochastic_round(src, gen))


def target_text(target: nn.Module, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 0.0,
                seed: int = 0, progress: bool = True, batch_size: int = TEXT_BATCH,
                execution: Execution | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the target's completion) for each prompt: greedy at temperature 0, else sampled, prompt i from
    its own stream (seed, i), so that a completion does not depend on the others; batch_size prompts decode
    together (the same draws at any size)."""
    seeds = [stream_seed(seed, i) for i in range(len(prompts))]
    decoding = Decoding("autoregressive", max_new_tokens=max_new_tokens, sampling=Sampling(temperature))
    with tqdm(total=len(prompts), desc="target text", unit="prompt", disable=not progress) as bar:
        gens = generate(Networks(target), prompts, decoding, seeds=seeds, batch_size=batch_size,
                        execution=execution or Execution.here(), ends=Ends(on_finish=lambda _: bar.update()))
    return [(ids, gen.tokens) for ids, gen in zip(prompts, gens, strict=True)]


def fit_draft(student: nn.Module, target: nn.Module | None, seqs: list[tuple[list[int], list[int]]],
              cfg: DistillConfig, *, progress: bool = True, tracker=None) -> list[dict]:
    """Train student's trainable parameters on the completions of seqs (one sequence a step, in an order seeded by
    cfg.seed per epoch, cfg.epochs, lr and grad_clip) to minimise KL(p_target || q_student) (cfg.finetune distill)
    or the cross-entropy of the completion's tokens (sft, no target); returns the log rows.
    bfloat16 weights train with AdamW16. A student with a draft vocabulary R (models.draft_vocabulary) is compared
    over R, the only ids it proposes."""
    epochs, lr, grad_clip, seed = cfg.epochs, cfg.lr, cfg.grad_clip, cfg.seed
    objective = "ce" if cfg.finetune == "sft" else "kl"
    rows = draft_vocabulary(student)
    index = None if rows is None else torch.tensor(rows, device=student.device)  # [R]
    params = [p for p in student.parameters() if p.requires_grad]
    opt = AdamW16(params, lr=lr, seed=seed) if student.dtype == torch.bfloat16 else torch.optim.AdamW(params, lr=lr)
    log_rows, step = [], 0
    for epoch in range(epochs):
        order = torch.randperm(len(seqs), generator=torch.Generator().manual_seed(seed * 7919 + epoch)).tolist()
        for i in tqdm(order, desc=f"distill epoch {epoch + 1}", unit="seq", disable=not progress):
            ids, completion = seqs[i]
            if not completion:
                continue
            x = torch.tensor([ids + completion], device=student.device)  # [1, L]
            keep = len(completion) + 1  # the last n + 1 positions; all but the last predict the completion
            q_logits = student(x, use_cache=False, logits_to_keep=keep).logits[0, :-1]  # [n, V]
            if index is not None:
                q_logits = q_logits.index_select(-1, index)  # [n, R]
            if objective == "ce":
                loss = sft_loss(q_logits, torch.tensor(completion, device=student.device), index)
            else:
                with torch.no_grad():
                    p_logits = target(x, use_cache=False, logits_to_keep=keep).logits[0, :-1]  # [n, V]
                if index is not None:
                    p_logits = p_logits.index_select(-1, index)  # [n, R]
                loss = kl_loss(p_logits, q_logits)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            step += 1
            log_rows.append({"step": step, "epoch": epoch, objective: loss.item(), "tokens": len(completion)})
            if tracker is not None:
                tracker.log(log_rows[-1], step=step)
    return log_rows


def answer_ids(tokenizer, text: str, max_new_tokens: int) -> list[int]:
    """A reference answer as the completion a draft learns: its tokens, then EOS, at most max_new_tokens."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    eos = tokenizer.eos_token_id
    return (ids + ([] if eos is None else [eos]))[:max_new_tokens]


def distill_draft(cfg: DistillConfig, out: str | Path, *, progress: bool = True,
                  execution: Execution | None = None) -> Path:
    """Fine-tune the pair's draft on the task's training prompts (cfg.finetune: toward the target's greedy text,
    or on the reference answers, each cut at max_new_tokens); saves a plain checkpoint at out.

    One copy of each model: the draft loaded with the pair is the student, in bfloat16 (AdamW16) when the pair
    is, else in float32 (AdamW; a float16 draft is converted in place: its gradients would underflow), with
    activation checkpointing where the model supports it. Memory per pair: diversed.experiment.cost."""
    cfg.validate()
    out, execution = Path(out), execution or Execution.here()
    check_output(out, DRAFT_OWNER)  # before the models load
    cid = config_hash(dataclasses.asdict(cfg))
    pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers)
    task = get_task(cfg.task, cfg.data_files)
    examples = task.examples("train", cfg.n_train, seed=cfg.seed, prompt_format=cfg.prompt_format)
    prompts = encode_examples(cfg, pair.tokenizer, examples)
    if cfg.finetune == "sft":
        seqs = [(ids, answer_ids(pair.tokenizer, text, cfg.max_new_tokens))
                for ids, text in zip(prompts, task.answers("train", cfg.n_train, seed=cfg.seed), strict=True)]
    else:
        seqs = target_text(pair.target, prompts, max_new_tokens=cfg.max_new_tokens, progress=progress,
                           execution=execution)  # greedy
    student = pair.draft if pair.draft.dtype == torch.bfloat16 else pair.draft.float()  # in place
    student.train().requires_grad_(True)
    if student.supports_gradient_checkpointing:
        enable_activation_checkpointing(student)
    tracker = Tracker(name=f"distill-{cfg.task}-{cid}", group=f"train-{cfg.task}", job_type="distill-draft",
                      config=dataclasses.asdict(cfg) | {"config_id": cid})
    t_start = time.perf_counter()
    log_rows = fit_draft(student, pair.target, seqs, cfg, progress=progress, tracker=tracker)
    student.eval().requires_grad_(False)
    with atomic_dir(out, DRAFT_OWNER) as tmp:
        student.save_pretrained(tmp)
        pair.tokenizer.save_pretrained(tmp)
        write_log_csv(tmp / "train_log.csv", log_rows)
        write_json(tmp / "distill_manifest.json", {"config": dataclasses.asdict(cfg), "config_id": cid,
                                                   "weights_sha256": weights_sha256(tmp),
                                                   "prompts": len(examples), "steps": len(log_rows),
                                                   "seconds": time.perf_counter() - t_start,
                                                   "execution": dataclasses.asdict(execution),
                                                   **provenance()})
    tracker.finish()
    return out
