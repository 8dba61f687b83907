"""The DIVERSED weight head, trained by REINFORCE (the fine-tuned-draft baseline: diversed.training.finetune).
Both models stay frozen while the head learns.

Head training, per step: roll out a batch of prompts from the ensemble nu (greedy or sampled) with the
current head, score each completion with the task's reward, then minimise

    L = -mean_b[(sum_t log nu_t(y_t)) (R_b - b)] - lambda mean_b sum_t sum_v min(q_t(v), nu_t(v))

where b is a running mean of the reward (momentum 0.9). The second term is the expected acceptance:
it must *raise* acceptance (the authors' code had its sign flipped; tests/training/test_train.py catches that).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from diversed.decoding.engine import Networks, eos_set
from diversed.decoding.head import WeightHead
from diversed.decoding.models import (
    encode_prompt,
    hidden_size,
    load_pair,
    shared_width,
)
from diversed.decoding.rng import DRAFT, Streams, stream_seed
from diversed.decoding.settings import Execution
from diversed.decoding.stepper import Stepper
from diversed.decoding.transfer import index
from diversed.decoding.verifiers import ensemble, logits_to_logprobs
from diversed.tasks import get_task
from diversed.tracking import Tracker
from diversed.training.settings import HeadTrainConfig, TaskPairConfig
from diversed.utils import atomic_path, config_hash, provenance, sha256_file, write_json, write_text


@dataclass
class Rollout:
    """One completion sampled from nu, with everything the loss needs (no graph attached)."""

    tokens: torch.Tensor  # [S] long
    log_p: torch.Tensor  # [S, V] target log-probabilities
    log_q: torch.Tensor  # [S, V] draft log-probabilities
    h_target: torch.Tensor  # [S, h_t]
    h_draft: torch.Tensor  # [S, h_d]

    @property
    def p(self) -> torch.Tensor:
        return self.log_p.exp()

    @property
    def q(self) -> torch.Tensor:
        return self.log_q.exp()


ROLLOUT_CHECK = 16  # tokens between the rollouts' one look at whether every row has ended (a host sync)


@torch.no_grad()
def rollouts(nets: Networks, prompts: list[list[int]], cfg: HeadTrainConfig, *,
             seeds: list[int], eos: set[int],
             execution: Execution | None = None) -> list[Rollout]:
    """Decode every prompt from nu_t = ensemble(p_t, q_t, nets.trained(h_t)) one token at a time (cfg's rollout,
    temperature, mixing and max_new_tokens), all prompts together with KV caches, row r drawing from its own stream
    (rng, from seeds[r]) and ending at its own EOS: a rollout's draws do not depend on its batch. Every row steps
    until all have ended, its tokens and their terms kept on the device (a row past its EOS decodes on, its tokens
    cut afterwards), so a token costs no host synchronisation: whether all have ended is read every ROLLOUT_CHECK
    tokens. Its tensors live on the target's device."""
    target, draft, head, vocab_size = nets.target, nets.draft, nets.trained, nets.vocab_size
    max_new_tokens, temperature, mixing = cfg.max_new_tokens, cfg.temperature, cfg.mixing
    shared = shared_width(target, draft)
    B, execution = len(prompts), execution or Execution()
    max_len = max(len(ids) for ids in prompts) + max_new_tokens
    P = Stepper(target, vocab_size, shared, max_len, execution=execution, rows=B)
    Q = Stepper(draft, vocab_size, shared, max_len, execution=execution, rows=B)
    streams, every = Streams(B, P.device), index(tuple(range(B)), P.device)
    streams.start(list(range(B)), seeds)
    stop = torch.tensor(sorted(eos), dtype=torch.long, device=P.device)  # [E]
    width = max(len(ids) for ids in prompts)
    x = torch.tensor([ids + [0] * (width - len(ids)) for ids in prompts], device=P.device)  # [B, L]
    lengths = [len(ids) for ids in prompts]
    ended = torch.zeros(B, dtype=torch.bool, device=P.device)  # [B]: its EOS emitted
    steps: dict[str, list[torch.Tensor]] = {"tokens": [], "log_p": [], "log_q": [], "h_target": [], "h_draft": []}
    for t in range(max_new_tokens):
        lt, h_t = P(x, None, lengths, last_only=True)  # [B, 1, V], [B, 1, h_t]
        ld, h_d = Q(x, None, lengths, last_only=True)
        lp, lq = logits_to_logprobs(lt, temperature), logits_to_logprobs(ld, temperature)  # [B, 1, V]
        w = head(h_t, h_d).float()  # [B, 1]
        nu = ensemble(lp.exp(), lq.exp(), w, mixing, log_p=lp, log_q=lq, check=False)[:, 0]  # [B, V]: w a softmax
        y = nu.argmax(-1) if cfg.rollout == "greedy" else streams.take(every).categorical(nu, DRAFT)  # [B]
        for name, value in zip(steps, (y, lp[:, 0], lq[:, 0], h_t[:, 0], h_d[:, 0]), strict=True):
            steps[name].append(value)
        ended |= torch.isin(y, stop)
        x, lengths = y[:, None], None  # [B, 1]: each row's newest token
        if (t + 1) % ROLLOUT_CHECK == 0 and bool(ended.all()):  # the one sync of ROLLOUT_CHECK tokens
            break
    tokens = torch.stack(steps["tokens"], 1)  # [B, steps]
    at_eos = torch.isin(tokens, stop)
    first = torch.where(at_eos.any(1), at_eos.float().argmax(1) + 1, tokens.shape[1]).tolist()  # kept per row
    stacked = {name: torch.stack(v, 1) for name, v in steps.items() if name != "tokens"}  # [B, steps, ...]
    return [Rollout(tokens[r, :n], stacked["log_p"][r, :n], stacked["log_q"][r, :n],
                    stacked["h_target"][r, :n].float(), stacked["h_draft"][r, :n].float())
            for r, n in enumerate(first)]


def sequence_terms(head: WeightHead, r: Rollout, mixing: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum_t log nu_t(y_t), sum_t sum_v min(q_t, nu_t), w [S]) with gradients into the head."""
    w = head(r.h_target, r.h_draft).float()  # [S]
    q = r.q
    nu = ensemble(r.p, q, w, mixing, log_p=r.log_p, log_q=r.log_q)  # [S, V]
    log_nu = torch.log(nu.gather(-1, r.tokens[:, None])[:, 0].clamp_min(1e-30)).sum()
    acceptance = torch.minimum(q, nu).sum()
    return log_nu, acceptance, w


AUTHORS_EPS = 1e-8  # the authors' EPS (train/trainer.py:20)


def acceptance_lambda(term: str, weight: float, reward_loss: torch.Tensor, acceptance: torch.Tensor,
                      at_zero: float = 5.0) -> float:
    """The step's lambda in L = L_reward - lambda L_acc: `weight` (fixed); weight * |L_reward| / |L_acc| (relative:
    the acceptance term that fraction of the reward loss's magnitude, at_zero when the reward loss is 0;
    magnitudes, so it always rewards acceptance); or the authors' arithmetic (train/trainer.py:249-261): their
    regulariser is -L_acc <= 0 and their scale weight * |L_reward| / (-L_acc + EPS), so lambda is negative, and the
    term penalises acceptance, whenever |L_reward| > EPS; at_zero (their reg_scale) otherwise."""
    if term == "fixed":
        return weight
    r, a = abs(float(reward_loss.detach())), float(acceptance.detach())
    if term == "authors":
        return weight * r / (-a + AUTHORS_EPS) if r > AUTHORS_EPS else at_zero
    return weight * r / abs(a) if r > 0 and a != 0 else at_zero


def reinforce_loss(head: WeightHead, rollouts: list[Rollout], rewards: torch.Tensor, baseline: float, *,
                   acceptance_weight: float, mixing: str, acceptance_term: str = "fixed",
                   at_zero: float = 5.0) -> tuple[torch.Tensor, dict]:
    """L = L_reward - lambda L_acc, L_reward = -mean[(sum log nu)(R - b)], L_acc = mean[sum_t sum_v min(q, nu)],
    lambda from acceptance_lambda (at_zero: its relative value without reward loss); returns (loss, stats)."""
    terms = [sequence_terms(head, r, mixing) for r in rollouts]
    log_nu = torch.stack([t[0] for t in terms])  # [B]
    acceptance = torch.stack([t[1] for t in terms])  # [B]
    advantage = rewards - baseline  # [B]
    reward_loss, acc = -(log_nu * advantage).mean(), acceptance.mean()
    lam = acceptance_lambda(acceptance_term, acceptance_weight, reward_loss, acc, at_zero)
    loss = reward_loss - lam * acc
    n_tokens = sum(len(r.tokens) for r in rollouts)
    ws = torch.cat([t[2] for t in terms])
    return loss, {"loss": loss.item(), "expected_acceptance": acceptance.detach().sum().item() / n_tokens,
                  "mean_w": ws.detach().mean().item(), "tokens": n_tokens, "lambda": lam}


def encode_examples(cfg: TaskPairConfig, tokenizer, examples: list) -> list[list[int]]:
    """A training job's prompts as token ids: each example's prompt in cfg's format, cut to its last
    max_prompt_tokens (TaskPairConfig.clip)."""
    return [cfg.clip(encode_prompt(tokenizer, ex.prompt, chat=cfg.prompt_format == "chat")) for ex in examples]


def fixed_baseline(cfg: HeadTrainConfig) -> bool:
    """The reward baseline is b = 1 (advantage R - 1), not the running mean: baseline none, or authors on a task
    with 0/1 rewards (GSM8K, MBPP)."""
    return cfg.baseline == "none" or (cfg.baseline == "authors" and get_task(cfg.task).metric.binary)


AUTHORS_WARMUP, AUTHORS_LOADER_BATCH = 10, 32  # train_config/config.yaml:23; train/dataloader.py:60's default


def make_optimizer(head: WeightHead, cfg: HeadTrainConfig, total_steps: int):
    """AdamW at cfg.lr and its schedule, stepped every batch: cosine (linear warm-up over cfg.warmup_frac of the
    steps, one cosine decay to 0), or the authors' (rl_train.py:224-228): LinearLR from 0.1 over 10 steps, then
    CosineAnnealingLR whose T_max is their loader's step count (n_train // 32, its default batch, for one epoch)
    less the warm-up, at least 1; at 400 prompts T_max is 2, so the rate cycles 5e-4, 2.5e-4, 0, 2.5e-4 every 4
    steps to the end."""
    from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
    from transformers import get_cosine_schedule_with_warmup

    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr)
    if cfg.schedule == "cosine":
        return opt, get_cosine_schedule_with_warmup(opt, int(cfg.warmup_frac * total_steps), total_steps)
    t_max = max(1, cfg.n_train // AUTHORS_LOADER_BATCH - AUTHORS_WARMUP)
    warmup = LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=AUTHORS_WARMUP)
    return opt, SequentialLR(opt, [warmup, CosineAnnealingLR(opt, T_max=t_max, eta_min=0)], [AUTHORS_WARMUP])


def task_reward(task, reward: str, scoring: str = "standard"):
    """Reward of a completion: the task's quality in [0, 1] under a scoring (Task.reward), or the mean target
    log-likelihood."""

    def fn(completion: str, example, r: Rollout) -> float:
        if reward == "fidelity" or task.metric.fidelity:
            return float(r.log_p.gather(-1, r.tokens[:, None]).mean())
        return task.reward(completion, example, scoring)

    return fn


class Interrupted(Exception):
    """Raised by tests (through `on_step`) to simulate a killed run."""


@dataclass
class Progress:
    """A head's training state, all a checkpoint holds: the head, its optimiser and schedule, the reward baseline,
    the steps done, their log rows and the last batch's (prompt, completion) samples."""

    head: WeightHead
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    baseline: float | None = None
    step: int = 0
    log: list = dataclasses.field(default_factory=list)
    samples: list = dataclasses.field(default_factory=list)

    def resume(self, path: Path, cid: str) -> None:
        """Continue from a checkpoint of the same config (none: from the start)."""
        if not path.is_file():
            return
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise ValueError(f"{path} is corrupt ({e}); delete it to restart training") from e
        if ckpt.get("config_id") != cid:
            raise ValueError(f"{path} belongs to another training config; use another output folder")
        self.head.load_state_dict(ckpt["head"])
        self.opt.load_state_dict(ckpt["optimizer"])
        self.sched.load_state_dict(ckpt["scheduler"])
        self.baseline, self.step, self.log, self.samples = ckpt["baseline"], ckpt["step"], ckpt["log"], ckpt["samples"]

    def save(self, path: Path, cid: str) -> None:
        with atomic_path(path) as tmp:
            torch.save({"config_id": cid, "step": self.step, "head": self.head.state_dict(),
                        "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                        "baseline": self.baseline, "log": self.log, "samples": self.samples}, tmp)


@dataclass
class HeadJob:
    """What a head's training reads at every step: its config, the pair, the task's train examples and their token
    ids, the reward, the ids that end a rollout and how the engine runs."""

    cfg: HeadTrainConfig
    pair: typing.Any  # models.Pair
    examples: list
    encoded: list[list[int]]
    reward: typing.Callable
    eos: set[int]
    execution: Execution

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.examples) / self.cfg.batch_size)


def train_step(job: HeadJob, state: Progress) -> dict:
    """One REINFORCE step: the step's batch rolled out from nu with the current head, rewarded, the loss minimised
    and the baseline moved; returns its log row."""
    cfg, pair, head, t0 = job.cfg, job.pair, state.head, time.perf_counter()
    epoch, b = divmod(state.step, job.steps_per_epoch)
    seeded = torch.Generator().manual_seed(cfg.seed * 7919 + epoch)  # the order: host-side, on every device alike
    batch = torch.randperm(len(job.examples), generator=seeded).tolist()[b * cfg.batch_size:(b + 1) * cfg.batch_size]
    device = head.proj.weight.device
    seeds = [stream_seed(cfg.seed, state.step * cfg.batch_size + j) for j in range(len(batch))]
    head.eval()
    rolled = rollouts(Networks.of(pair, head), [job.encoded[i] for i in batch], cfg, seeds=seeds,
                      eos=job.eos, execution=job.execution)
    completions = [pair.tokenizer.decode(r.tokens.tolist(), skip_special_tokens=True) for r in rolled]
    state.samples = [[job.examples[i].prompt[:500], c[:500]] for i, c in zip(batch, completions, strict=True)]
    rewards = torch.tensor([job.reward(c, job.examples[i], r) for c, i, r in zip(completions, batch, rolled,
                                                                                  strict=True)], device=device)
    if state.baseline is None:
        state.baseline = float(rewards.mean())
    head.train()
    baseline = 1.0 if fixed_baseline(cfg) else state.baseline  # none: the advantage is R - 1
    loss, stats = reinforce_loss(head, rolled, rewards, baseline, acceptance_weight=cfg.acceptance_weight,
                                 mixing=cfg.mixing, acceptance_term=cfg.acceptance_term, at_zero=cfg.relative_at_zero)
    state.opt.zero_grad()
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip))
    state.opt.step()
    state.sched.step()
    state.baseline = cfg.baseline_momentum * state.baseline + (1 - cfg.baseline_momentum) * float(rewards.mean())
    state.step += 1
    return {"step": state.step, "epoch": epoch, "reward": float(rewards.mean()),
            "reward_std": float(rewards.std(unbiased=False)), "baseline": state.baseline,
            "lr": state.sched.get_last_lr()[0], "grad_norm": grad_norm, "seconds": time.perf_counter() - t0, **stats}


def train_head(cfg: HeadTrainConfig, out: str | Path, *, pair=None, examples=None, progress: bool = True,
               on_step=None, execution: Execution | None = None) -> Path:
    """Train one head for cfg.task; resumable from out/checkpoint.pt. Returns out/head.safetensors.
    execution: how the rollouts run (default Execution.here())."""
    cfg.validate()
    out, cid = Path(out), config_hash(dataclasses.asdict(cfg))
    out.mkdir(parents=True, exist_ok=True)
    task = get_task(cfg.task, cfg.data_files)
    if examples is None:
        examples = task.examples("train", cfg.n_train, seed=cfg.seed, prompt_format=cfg.prompt_format)
    if pair is None:
        pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers)
    encoded = encode_examples(cfg, pair.tokenizer, examples)
    job = HeadJob(cfg, pair, examples, encoded, task_reward(task, cfg.reward, cfg.scoring), eos_set(pair.target),
                  execution or Execution.here())
    head = WeightHead(hidden_size(pair.target), hidden_size(pair.draft)).bind(pair.target, pair.draft)
    head = head.to(pair.target.get_output_embeddings().weight.device)
    total = cfg.epochs * job.steps_per_epoch
    state = Progress(head, *make_optimizer(head, cfg, total))
    state.resume(out / "checkpoint.pt", cid)
    tracker = Tracker(name=f"train-head-{cfg.task}-{cid}", group=f"train-{cfg.task}", job_type="train-head",
                      config=dataclasses.asdict(cfg) | {"config_id": cid})
    bar = tqdm(range(state.step, total), desc=f"train head {cfg.task}", unit="step", disable=not progress,
               initial=state.step, total=total)
    for _ in bar:
        row = train_step(job, state)
        state.log.append(row)
        tracker.log(row, step=row["step"])
        bar.set_postfix(reward=f"{row['reward']:.3f}", w=f"{row['mean_w']:.3f}",
                        acc=f"{row['expected_acceptance']:.3f}")
        state.save(out / "checkpoint.pt", cid)
        if on_step is not None:
            on_step(row["step"])
    return finish(job, state, out, cid, tracker)


def finish(job: HeadJob, state: Progress, out: Path, cid: str, tracker: Tracker) -> Path:
    """A trained head's folder: head.safetensors, train_log.csv and manifest.json (its collapse checked), and its
    W&B summary."""
    cfg, log_rows = job.cfg, state.log
    write_log_csv(out / "train_log.csv", log_rows)
    collapsed = collapse(log_rows)
    if collapsed:
        print(f"warning: the {cfg.task} head collapsed: {collapsed}", file=sys.stderr)
    total = cfg.epochs * job.steps_per_epoch
    head_path = out / "head.safetensors"
    state.head.save(head_path, task=cfg.task, config=dataclasses.asdict(cfg), config_id=cid, steps=total)
    summary = {k: log_rows[-1][k] for k in ("reward", "expected_acceptance", "mean_w")} if log_rows else {}
    summary |= {"collapsed": collapsed or None,
                "reward_varied": sum(r.get("reward_std", 0) > 0 for r in log_rows) / max(len(log_rows), 1)}
    tracker.summary(summary)
    if state.samples:
        tracker.table("samples", ["prompt", "completion"], state.samples)
    tracker.finish()
    write_json(out / "manifest.json", {"config": dataclasses.asdict(cfg), "config_id": cid, "steps": total,
                                       "sha256": sha256_file(head_path), "collapsed": collapsed or None,
                                       "prompts": len(job.examples),
                                       "seconds": sum(r["seconds"] for r in log_rows), "final": summary,
                                       "execution": dataclasses.asdict(job.execution), **provenance()})
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
