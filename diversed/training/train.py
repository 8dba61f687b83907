"""Verifier training: the DIVERSED weight head by REINFORCE, and the fine-tuned-draft
baseline by distillation. Both models stay frozen while the head learns.

Head training, per step: roll out a batch of prompts from the ensemble nu (greedy or sampled) with the
current head, score each completion with the task's reward, then minimise

    L = -mean_b[(sum_t log nu_t(y_t)) (R_b - b)] - lambda mean_b sum_t sum_v min(q_t(v), nu_t(v))

where b is a running mean of the reward (momentum 0.9). The second term is the expected acceptance:
it must *raise* acceptance (the authors' code had its sign flipped; tests/test_train.py catches that).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from diversed.decoding.engine import Decoding, Execution, Sampling, Stepper, eos_set, generate
from diversed.decoding.head import WeightHead
from diversed.decoding.models import (
    DEFAULT_DRAFT_LAYERS,
    draft_vocabulary,
    encode_prompt,
    hidden_size,
    load_pair,
    shared_width,
)
from diversed.decoding.verifiers import MIXINGS, ensemble, logits_to_logprobs
from diversed.tasks import PROMPT_FORMATS, get_task, registry
from diversed.tracking import Tracker
from diversed.utils import atomic_dir, atomic_path, config_hash, option, provenance, write_json, write_text

REWARDS = ("task", "fidelity")
ACCEPTANCE_TERMS = ("fixed", "relative")
RELATIVE_AT_ZERO = 5.0  # the relative term's lambda on a step whose reward loss is 0 (the authors' value)
FINETUNES = ("distill", "sft")
TEXT_BATCH = 16  # prompts the target decodes together for a fine-tuned draft's text


@dataclass
class TrainConfig:
    """What head training and distillation share: the pair, the task's train prompts, the optimiser's basics."""

    task: str = option("arith", "task whose train prompts the job learns from")
    target: str = option("embedded", "target model: local path, hub id, or `embedded`")
    draft: str = option("embedded", "draft model: local path, hub id, `embedded` or `embedded-weak`")
    draft_layers: int = option(DEFAULT_DRAFT_LAYERS, "which embedded draft (its N decoder layers)")
    data_files: str | None = option(None, "local JSONL for the task (offline use of hub tasks)")
    n_train: int = option(400, "training prompts (seeded subsample of the train split)")
    epochs: int = option(2, "passes over the training prompts")
    max_new_tokens: int = option(128, "length of each completion the job generates")
    lr: float = option(1e-4, "AdamW learning rate")
    grad_clip: float = option(1.0, "gradient-norm clip")
    seed: int = option(0, "seed of the subsample, the order and the sampling")
    dtype: str = option("float32", "float32 | bfloat16 | float16")
    device: str = option("cpu", "cpu | cuda | cuda:N")
    prompt_format: str = option("chat", "chat (the task's instructions in the chat template) | raw (the task's "
                                        "plain template: the authors')")

    COUNTS = ("n_train", "epochs", "max_new_tokens")  # integers that must be >= 1

    def validate(self) -> None:
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"unknown prompt format {self.prompt_format!r}; allowed: {', '.join(PROMPT_FORMATS)}")
        if self.task not in registry():
            raise ValueError(f"unknown task {self.task!r}; allowed: {', '.join(sorted(registry()))}")
        for name in self.COUNTS:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class HeadTrainConfig(TrainConfig):
    """One head's training run. Defaults are the paper's (AdamW 5e-4, warm-up + cosine, batch 8, 2 epochs, 400
    prompts, 128 tokens, clip 5, greedy rollouts)."""

    lr: float = option(5e-4, "AdamW learning rate")
    grad_clip: float = option(5.0, "gradient-norm clip")
    batch_size: int = option(8, "prompts per REINFORCE step")
    warmup_frac: float = option(0.1, "fraction of the steps spent in linear warm-up")
    acceptance_term: str = option("fixed", "fixed (lambda weighs the expected acceptance) | relative (lambda is its "
                                          "size as a fraction of the reward loss's, every step: the authors')")
    acceptance_weight: float = option(0.1, "lambda >= 0: the acceptance term's weight (fixed) or fraction (relative)")
    baseline_momentum: float = option(0.9, "momentum of the running-mean reward baseline")
    rollout: str = option("greedy", "greedy (the paper) | sample (explores)")
    temperature: float = option(1.0, "temperature of p and q (and of sampled rollouts)")
    mixing: str = option("linear", "linear | logit")
    reward: str = option("task", "task (the task metric) | fidelity (mean target log-likelihood per token)")

    COUNTS = (*TrainConfig.COUNTS, "batch_size")

    def validate(self) -> None:
        super().validate()
        if self.reward not in REWARDS:
            raise ValueError(f"unknown reward {self.reward!r}; allowed: {', '.join(REWARDS)}")
        if self.rollout not in ("greedy", "sample"):
            raise ValueError(f"unknown rollout {self.rollout!r}; allowed: greedy, sample")
        if self.mixing not in MIXINGS:
            raise ValueError(f"unknown mixing {self.mixing!r}; allowed: {', '.join(MIXINGS)}")
        if self.acceptance_term not in ACCEPTANCE_TERMS:
            raise ValueError(f"unknown acceptance term {self.acceptance_term!r}; "
                             f"allowed: {', '.join(ACCEPTANCE_TERMS)}")
        if not self.lr > 0 or self.acceptance_weight < 0 or not 0 <= self.warmup_frac < 1:
            raise ValueError("need lr > 0, acceptance_weight >= 0 and warmup_frac in [0, 1)")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for head training, got {self.temperature}")


@dataclass
class Rollout:
    """One completion sampled from nu, with everything the loss needs (no graph attached)."""

    tokens: torch.Tensor  # [T] long
    log_p: torch.Tensor  # [T, V] target log-probabilities
    log_q: torch.Tensor  # [T, V] draft log-probabilities
    h_target: torch.Tensor  # [T, h_t]
    h_draft: torch.Tensor  # [T, h_d]

    @property
    def p(self) -> torch.Tensor:
        return self.log_p.exp()

    @property
    def q(self) -> torch.Tensor:
        return self.log_q.exp()


@torch.no_grad()
def rollouts(target: nn.Module, draft: nn.Module, head: WeightHead, prompts: list[list[int]], *,
             max_new_tokens: int, temperature: float, mixing: str, greedy: bool,
             generators: list[torch.Generator | None], eos: set[int], vocab_size: int | None = None,
             execution: Execution | None = None) -> list[Rollout]:
    """Decode every prompt from nu_t = ensemble(p_t, q_t, head(h_t)) one token at a time, all prompts together
    with KV caches (one host transfer per token for the batch), row r drawing from generators[r] and stopping at
    its own EOS: a rollout does not depend on its batch.

    vocab_size: the pair's common logit width (Pair.vocab_size) when the two heads differ by padding."""
    shared = shared_width(target, draft)
    B, execution = len(prompts), execution or Execution()
    max_len = max(len(ids) for ids in prompts) + max_new_tokens
    T = Stepper(target, vocab_size, shared, max_len, execution=execution, rows=B)
    D = Stepper(draft, vocab_size, shared, max_len, execution=execution, rows=B)
    out = [{"tokens": [], "log_p": [], "log_q": [], "h_target": [], "h_draft": []} for _ in prompts]
    pending, live = [list(ids) for ids in prompts], list(range(B))
    for _ in range(max_new_tokens):
        width = max(len(pending[r]) for r in live)
        x = torch.tensor([pending[r] + [0] * (width - len(pending[r])) for r in live], device=T.device)  # [R, L]
        lengths = [len(pending[r]) for r in live]
        lt, h_t = T(x, live, lengths, last_only=True)  # [R, 1, V], [R, 1, h_t]
        ld, h_d = D(x, live, lengths, last_only=True)
        lp, lq = logits_to_logprobs(lt, temperature), logits_to_logprobs(ld, temperature)  # [R, 1, V]
        w = head(h_t, h_d).float()  # [R, 1]
        nu = ensemble(lp.exp(), lq.exp(), w, mixing, log_p=lp, log_q=lq)[:, 0]  # [R, V]
        if greedy:
            y = nu.argmax(-1)
        else:
            y = torch.stack([torch.multinomial(nu[i], 1, generator=generators[r])[0] for i, r in enumerate(live)])
        for i, (r, token) in enumerate(zip(live, y.tolist(), strict=True)):  # one transfer for the batch
            o = out[r]
            o["tokens"].append(token), o["log_p"].append(lp[i, 0]), o["log_q"].append(lq[i, 0])
            o["h_target"].append(h_t[i, 0]), o["h_draft"].append(h_d[i, 0])
            pending[r] = [token]
        live = [r for r in live if pending[r][0] not in eos]
        if not live:
            break
    return [Rollout(torch.tensor(o["tokens"]), torch.stack(o["log_p"]), torch.stack(o["log_q"]),
                    torch.stack(o["h_target"]).float(), torch.stack(o["h_draft"]).float()) for o in out]


def sequence_terms(head: WeightHead, r: Rollout, mixing: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum_t log nu_t(y_t), sum_t sum_v min(q_t, nu_t), w [T]) with gradients into the head."""
    w = head(r.h_target, r.h_draft).float()  # [T]
    q = r.q
    nu = ensemble(r.p, q, w, mixing, log_p=r.log_p, log_q=r.log_q)  # [T, V]
    log_nu = torch.log(nu.gather(-1, r.tokens[:, None])[:, 0].clamp_min(1e-30)).sum()
    acceptance = torch.minimum(q, nu).sum()
    return log_nu, acceptance, w


def acceptance_lambda(term: str, weight: float, reward_loss: torch.Tensor, acceptance: torch.Tensor) -> float:
    """The step's lambda: `weight` (fixed), or weight * |L_reward| / |L_acc| (relative: the acceptance term is
    that fraction of the reward loss's magnitude, RELATIVE_AT_ZERO when the reward loss is 0, as the authors'
    code rescales it; magnitudes, so the term always rewards acceptance)."""
    if term == "fixed":
        return weight
    r, a = abs(float(reward_loss.detach())), abs(float(acceptance.detach()))
    return weight * r / a if r > 0 and a > 0 else RELATIVE_AT_ZERO


def reinforce_loss(head: WeightHead, rollouts: list[Rollout], rewards: torch.Tensor, baseline: float, *,
                   acceptance_weight: float, mixing: str, acceptance_term: str = "fixed") -> tuple[torch.Tensor, dict]:
    """L = L_reward - lambda L_acc, L_reward = -mean[(sum log nu)(R - b)], L_acc = mean[sum_t sum_v min(q, nu)],
    lambda from acceptance_lambda; returns (loss, stats)."""
    terms = [sequence_terms(head, r, mixing) for r in rollouts]
    log_nu = torch.stack([t[0] for t in terms])  # [B]
    acceptance = torch.stack([t[1] for t in terms])  # [B]
    advantage = rewards - baseline  # [B]
    reward_loss, acc = -(log_nu * advantage).mean(), acceptance.mean()
    lam = acceptance_lambda(acceptance_term, acceptance_weight, reward_loss, acc)
    loss = reward_loss - lam * acc
    n_tokens = sum(len(r.tokens) for r in rollouts)
    ws = torch.cat([t[2] for t in terms])
    return loss, {"loss": loss.item(), "expected_acceptance": acceptance.detach().sum().item() / n_tokens,
                  "mean_w": ws.detach().mean().item(), "tokens": n_tokens, "lambda": lam}


def make_optimizer(head: WeightHead, lr: float, total_steps: int, warmup_frac: float):
    from transformers import get_cosine_schedule_with_warmup

    opt = torch.optim.AdamW(head.parameters(), lr=lr)
    sched = get_cosine_schedule_with_warmup(opt, int(warmup_frac * total_steps), total_steps)
    return opt, sched


def task_reward(task, reward: str):
    """Reward of a completion: the task's quality in [0, 1] (Task.reward), or the mean target log-likelihood."""

    def fn(completion: str, example, r: Rollout) -> float:
        if reward == "fidelity" or task.metric.fidelity:
            return float(r.log_p.gather(-1, r.tokens[:, None]).mean())
        return task.reward(completion, example)

    return fn


class Interrupted(Exception):
    """Raised by tests (through `on_step`) to simulate a killed run."""


def train_head(cfg: HeadTrainConfig, out: str | Path, *, pair=None, examples=None, progress: bool = True,
               on_step=None, execution: Execution | None = None) -> Path:
    """Train one head for cfg.task; resumable from out/checkpoint.pt. Returns out/head.safetensors.
    execution: how the rollouts run (default Execution.here())."""
    cfg.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cid = config_hash(dataclasses.asdict(cfg))
    task = get_task(cfg.task, cfg.data_files)
    if examples is None:
        examples = task.examples("train", cfg.n_train, seed=cfg.seed, prompt_format=cfg.prompt_format)
    if pair is None:
        pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers)
    encoded = [encode_prompt(pair.tokenizer, ex.prompt, chat=cfg.prompt_format == "chat") for ex in examples]
    head = WeightHead(hidden_size(pair.target), hidden_size(pair.draft)).bind(pair.target, pair.draft)
    head = head.to(pair.target.get_output_embeddings().weight.device)
    steps_per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    opt, sched = make_optimizer(head, cfg.lr, total, cfg.warmup_frac)
    baseline, start, log_rows, samples = None, 0, [], []  # samples: (prompt, completion) of the last batch

    ckpt_path = out / "checkpoint.pt"
    if ckpt_path.is_file():
        try:
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise ValueError(f"{ckpt_path} is corrupt ({e}); delete it to restart training") from e
        if ckpt.get("config_id") != cid:
            raise ValueError(f"{ckpt_path} belongs to another training config; use another output folder")
        head.load_state_dict(ckpt["head"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        baseline, start, log_rows, samples = ckpt["baseline"], ckpt["step"], ckpt["log"], ckpt["samples"]

    reward_fn = task_reward(task, cfg.reward)
    execution = execution or Execution.here()
    eos = eos_set(pair.target)
    tracker = Tracker(name=f"train-head-{cfg.task}-{cid}", group=f"train-{cfg.task}", job_type="train-head",
                      config=dataclasses.asdict(cfg) | {"config_id": cid})
    device = head.proj.weight.device
    bar = tqdm(range(start, total), desc=f"train head {cfg.task}", unit="step", disable=not progress,
               initial=start, total=total)
    for step in bar:
        t0 = time.perf_counter()
        epoch, b = divmod(step, steps_per_epoch)
        order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(cfg.seed * 7919 + epoch))
        batch = order[b * cfg.batch_size:(b + 1) * cfg.batch_size].tolist()
        generators = [torch.Generator(device=device).manual_seed(cfg.seed * 1_000_003 + step * 1_009 + j)
                      for j in range(len(batch))]
        head.eval()
        rolled = rollouts(pair.target, pair.draft, head, [encoded[i] for i in batch],
                          max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, mixing=cfg.mixing,
                          greedy=cfg.rollout == "greedy", generators=generators, eos=eos,
                          vocab_size=pair.vocab_size, execution=execution)
        completions = [pair.tokenizer.decode(r.tokens.tolist(), skip_special_tokens=True) for r in rolled]
        samples = [[examples[i].prompt[:500], c[:500]] for i, c in zip(batch, completions, strict=True)]
        rewards = torch.tensor([reward_fn(c, examples[i], r) for c, i, r in zip(completions, batch, rolled,
                                                                                 strict=True)], device=device)
        if baseline is None:
            baseline = float(rewards.mean())
        head.train()
        loss, stats = reinforce_loss(head, rolled, rewards, baseline, acceptance_weight=cfg.acceptance_weight,
                                     mixing=cfg.mixing, acceptance_term=cfg.acceptance_term)
        opt.zero_grad()
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip))
        opt.step()
        sched.step()
        baseline = cfg.baseline_momentum * baseline + (1 - cfg.baseline_momentum) * float(rewards.mean())
        row = {"step": step + 1, "epoch": epoch, "reward": float(rewards.mean()),
               "reward_std": float(rewards.std(unbiased=False)), "baseline": baseline,
               "lr": sched.get_last_lr()[0], "grad_norm": grad_norm, "seconds": time.perf_counter() - t0, **stats}
        log_rows.append(row)
        tracker.log(row, step=step + 1)
        bar.set_postfix(reward=f"{row['reward']:.3f}", w=f"{row['mean_w']:.3f}",
                        acc=f"{row['expected_acceptance']:.3f}")
        with atomic_path(ckpt_path) as tmp:
            torch.save({"config_id": cid, "step": step + 1, "head": head.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "baseline": baseline, "log": log_rows,
                        "samples": samples}, tmp)
        if on_step is not None:
            on_step(step + 1)

    write_log_csv(out / "train_log.csv", log_rows)
    collapsed = collapse(log_rows)
    if collapsed:
        print(f"warning: the {cfg.task} head collapsed: {collapsed}", file=sys.stderr)
    head_path = out / "head.safetensors"
    head.save(head_path, task=cfg.task, config=dataclasses.asdict(cfg), config_id=cid, steps=total)
    summary = {k: log_rows[-1][k] for k in ("reward", "expected_acceptance", "mean_w")} if log_rows else {}
    summary |= {"collapsed": collapsed or None,
                "reward_varied": sum(r.get("reward_std", 0) > 0 for r in log_rows) / max(len(log_rows), 1)}
    tracker.summary(summary)
    if samples:
        tracker.table("samples", ["prompt", "completion"], samples)
    tracker.finish()
    write_json(out / "manifest.json", {"config": dataclasses.asdict(cfg), "config_id": cid, "steps": total,
                                       "collapsed": collapsed or None,
                                       "prompts": len(examples),
                                       "seconds": sum(r["seconds"] for r in log_rows), "final": summary,
                                       "execution": dataclasses.asdict(execution), **provenance()})
    return head_path


COLLAPSED_W = 0.05  # a head whose mean w stays below this (or above 1 - this) over its last half of steps
STILL_SHARE = 0.5  # ... or whose batch rewards are all equal on more than this share of its steps


def collapse(rows: list[dict]) -> str:
    """Why a head's training collapsed ('' when it did not): its mean w pinned within COLLAPSED_W of 0 or 1 over
    the last half of its steps (the head is then the draft alone or strict), or a reward without variance within
    the batch on most steps (REINFORCE then learns from the acceptance term alone)."""
    if not rows:
        return ""
    tail = [r["mean_w"] for r in rows[len(rows) // 2:]]
    if all(w < COLLAPSED_W for w in tail):
        return f"mean w below {COLLAPSED_W} over the last {len(tail)} steps"
    if all(w > 1 - COLLAPSED_W for w in tail):
        return f"mean w above {1 - COLLAPSED_W} over the last {len(tail)} steps"
    still = sum(r.get("reward_std", 0) == 0 for r in rows)
    if still > STILL_SHARE * len(rows):
        return f"batch rewards without variance on {still} of {len(rows)} steps"
    return ""


def write_log_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        write_text(path, "")
        return
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def load_log(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [{k: json.loads(v) if v not in ("", None) else None for k, v in r.items()} for r in csv.DictReader(f)]


# ---------------------------------------------------------------------------------------------------
# The fine-tuned-draft baseline ("SD with fine-tuned draft" in the paper's tables)


@dataclass
class DistillConfig(TrainConfig):
    """Fine-tune the draft: distil it toward the target (KL(p_target || q_draft) on the target's greedy text), or
    supervised (cross-entropy on the task's reference answers). The draft trains in bfloat16 with AdamW16 when
    dtype is bfloat16, else in float32 with AdamW."""

    finetune: str = option("distill", "distill (toward the target, on its own text) | sft (on the task's reference "
                                      "answers: the authors')")

    def validate(self) -> None:
        super().validate()
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.finetune not in FINETUNES:
            raise ValueError(f"unknown finetune {self.finetune!r}; allowed: {', '.join(FINETUNES)}")


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
                seed: int = 0, progress: bool = True, desc: str = "target text", batch_size: int = TEXT_BATCH,
                execution: Execution | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the target's completion) for each prompt: greedy at temperature 0, else sampled, prompt i from
    its own generator (seed, i), so that a completion does not depend on the others; batch_size prompts decode
    together (the same completions at any size)."""
    generators = [torch.Generator(device=target.device).manual_seed(seed * 1_000_003 + i) for i in range(len(prompts))]
    decoding = Decoding("autoregressive", max_new_tokens=max_new_tokens, sampling=Sampling(temperature))
    with tqdm(total=len(prompts), desc=desc, unit="prompt", disable=not progress) as bar:
        gens = generate(target, None, prompts, decoding, generators=generators, batch_size=batch_size,
                        execution=execution or Execution.here(), on_finish=lambda _: bar.update())
    return [(ids, gen.tokens) for ids, gen in zip(prompts, gens, strict=True)]


def fit_draft(student: nn.Module, target: nn.Module | None, seqs: list[tuple[list[int], list[int]]], *, epochs: int,
              lr: float, grad_clip: float, seed: int, progress: bool = True, tracker=None,
              objective: str = "kl") -> list[dict]:
    """Train student's trainable parameters on the completions of seqs (one sequence a step, in a seeded order per
    epoch) to minimise KL(p_target || q_student) (objective kl) or the cross-entropy of the completion's tokens
    (objective ce, no target); returns the log rows. bfloat16 weights train with AdamW16. A student with a draft
    vocabulary R (models.draft_vocabulary) is compared over R, the only ids it proposes."""
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
    activation checkpointing where the model supports it. Memory per pair: diversed.cost."""
    cfg.validate()
    out, execution = Path(out), execution or Execution.here()
    cid = config_hash(dataclasses.asdict(cfg))
    pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers)
    task = get_task(cfg.task, cfg.data_files)
    examples = task.examples("train", cfg.n_train, seed=cfg.seed, prompt_format=cfg.prompt_format)
    prompts = [encode_prompt(pair.tokenizer, ex.prompt, chat=cfg.prompt_format == "chat") for ex in examples]
    if cfg.finetune == "sft":
        seqs = [(ids, answer_ids(pair.tokenizer, text, cfg.max_new_tokens))
                for ids, text in zip(prompts, task.answers("train", cfg.n_train, seed=cfg.seed), strict=True)]
    else:
        seqs = target_text(pair.target, prompts, max_new_tokens=cfg.max_new_tokens, progress=progress,
                           execution=execution)  # greedy
    student = pair.draft if pair.draft.dtype == torch.bfloat16 else pair.draft.float()  # in place
    student.train().requires_grad_(True)
    if student.supports_gradient_checkpointing:
        student.activation_checkpointing_enable()
    tracker = Tracker(name=f"distill-{cfg.task}-{cid}", group=f"train-{cfg.task}", job_type="distill-draft",
                      config=dataclasses.asdict(cfg) | {"config_id": cid})
    t_start = time.perf_counter()
    log_rows = fit_draft(student, pair.target, seqs, epochs=cfg.epochs, lr=cfg.lr, grad_clip=cfg.grad_clip,
                         seed=cfg.seed, progress=progress, tracker=tracker,
                         objective="ce" if cfg.finetune == "sft" else "kl")
    student.eval().requires_grad_(False)
    with atomic_dir(out) as tmp:
        student.save_pretrained(tmp)
        pair.tokenizer.save_pretrained(tmp)
        write_log_csv(tmp / "train_log.csv", log_rows)
        write_json(tmp / "distill_manifest.json", {"config": dataclasses.asdict(cfg), "config_id": cid,
                                                   "prompts": len(examples), "steps": len(log_rows),
                                                   "seconds": time.perf_counter() - t_start,
                                                   "execution": dataclasses.asdict(execution),
                                                   **provenance()})
    tracker.finish()
    return out
