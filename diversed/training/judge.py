"""AutoJudge (Garipov et al., NeurIPS 2025), the learned rival of DIVERSED's head: labels mined on a task's train
prompts, then a logistic-regression judge of whether a draft/target mismatch matters for the task's answer.

Mining, per prompt (`mine_judge`): the target's greedy answer y (n tokens); one teacher-forced pass of each model
over it gives, at every position t, the features the DIVERSED head reads (the target's and the draft's last hidden
states that predict y_t) and the draft's greedy choice d_t. Each position with d_t != y_t is a mismatch: the answer
y_<t d_t is continued greedily by the target (to the same budget of n_max tokens) and scored; the mismatch is
important when the task's scorer changes its verdict (a 0/1 metric) or moves its score by more than the task's
tolerance (a graded one). The prompts are mined batch_size at a time, each group written whole to its own shard,
so a killed job resumes at its first unfinished group.

The judge (`train_judge`): standardised features [h_draft; h_target], a logistic regression fit by L-BFGS with the
two classes weighted equally and an L2 penalty; some prompts are held out for its AUC. At decode time it gives
P(a mismatch here matters) at each drafted position, and the `judge` verifier keeps a mismatch below a threshold.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from scipy.stats import mannwhitneyu
from tqdm.auto import tqdm

from diversed.decoding.engine import Ends, Networks, eos_set, generate, stop_at
from diversed.decoding.head import Judge
from diversed.decoding.models import fingerprint, hidden_size, load_pair, shared_width
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.stepper import Stepper
from diversed.tasks import get_task
from diversed.training.settings import JudgeConfig, JudgeFit
from diversed.training.train import encode_examples
from diversed.utils import (
    atomic_path,
    config_hash,
    provenance,
    read_json,
    sha256_file,
    write_json,
    write_jsonl,
)

SHARDS = "shards"  # mine_judge's folder of finished prompt groups, one safetensors file each


@dataclass
class Mismatch:
    """One swapped position of a greedy answer: where, the two tokens, the two answers' scores and the label."""

    prompt: str  # the example's id
    position: int  # t, from 0 at the answer's first token
    target_token: int
    draft_token: int
    base: float  # the greedy answer's score
    swapped: float  # the swapped answer's score
    important: bool


@dataclass
class Miner:
    """What mining reads for every group: its config, the pair, the task, the ends of an answer, the engine."""

    cfg: JudgeConfig
    pair: object  # models.Pair
    task: object  # tasks.Task
    ends: Ends
    execution: Execution

    def greedy(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """The target's greedy continuations of token-id prompts, batch_size rows at a time."""
        decoding = Decoding("autoregressive", max_new_tokens=max_new_tokens, sampling=Sampling(0.0))
        gens = generate(Networks.of(self.pair), prompts, decoding, batch_size=self.cfg.batch_size,
                        execution=self.execution, ends=self.ends)
        return [g.tokens for g in gens]

    def score(self, tokens: list[int], example) -> float:
        text = self.pair.tokenizer.decode(tokens, skip_special_tokens=True)
        return float(self.task.quality([text], [example], self.cfg.scoring))

    def important(self, base: float, swapped: float) -> bool:
        """The task's verdict changes (0/1 metric), or its score moves by more than its tolerance."""
        metric = self.task.metric
        return base != swapped if metric.binary else abs(swapped - base) > metric.tolerance

    def features(self, ids: list[int], answer: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced over prompt + answer: ([h_draft; h_target] [n, h_d + h_t] at the positions predicting
        each answer token, the draft's greedy choice there [n])."""
        pair, seq, at = self.pair, ids + answer[:-1], slice(len(ids) - 1, len(ids) + len(answer) - 1)
        _, h_t = Stepper(pair.target, pair.vocab_size)(seq)  # [L, h_t]
        logits_d, h_d = Stepper(pair.draft, pair.vocab_size, shared_width(pair.target, pair.draft))(seq)  # [L, V]
        return torch.cat([h_d[at], h_t[at]], -1).float().cpu(), logits_d[at].argmax(-1).cpu()


def continuations(miner: Miner, encoded: list[list[int]], swaps: list[tuple[int, int, list[int]]]) -> list[list[int]]:
    """Each swapped answer's greedy continuation by the target, to the budget the greedy answer had (none after an
    EOS or at the budget): swaps (prompt i, position t, the answer's first t tokens and the draft's token)."""
    n_max, eos = miner.cfg.max_new_tokens, miner.ends.eos
    going = [k for k, (_, _, head) in enumerate(swaps) if head[-1] not in eos and len(head) < n_max]
    out: list[list[int]] = [[] for _ in swaps]
    if going:
        longest = n_max - min(len(swaps[k][2]) for k in going)
        tails = miner.greedy([encoded[swaps[k][0]] + swaps[k][2] for k in going], longest)
        for k, tail in zip(going, tails, strict=True):
            out[k] = tail[:n_max - len(swaps[k][2])]
    return out


def mine_group(miner: Miner, examples: list, encoded: list[list[int]]) -> tuple[dict, list[Mismatch], list[dict]]:
    """One group of prompts: (their mismatches' tensors: features [M, h_d + h_t], important [M], prompt [M] within
    the group; the mismatches; one summary per prompt)."""
    answers = miner.greedy(encoded, miner.cfg.max_new_tokens)
    swaps, found, prompts = [], [], []
    for i, (ex, ids, y) in enumerate(zip(examples, encoded, answers, strict=True)):
        at = []
        if y:
            feats, d = miner.features(ids, y)
            at = [t for t in range(len(y)) if int(d[t]) != y[t]]
            found.append(feats[at])
            swaps += [(i, t, y[:t] + [int(d[t])]) for t in at]
        prompts.append({"prompt": ex.id, "tokens": len(y), "mismatches": len(at), "score": miner.score(y, ex)})
    mismatches = []
    for (i, t, head), tail in zip(swaps, continuations(miner, encoded, swaps), strict=True):
        base, swapped = prompts[i]["score"], miner.score(head + tail, examples[i])
        mismatches.append(Mismatch(examples[i].id, t, answers[i][t], head[-1], base, swapped,
                                   miner.important(base, swapped)))
    width = hidden_size(miner.pair.draft) + hidden_size(miner.pair.target)
    tensors = {"features": torch.cat([torch.zeros(0, width, device="cpu"), *found]),
               "important": torch.tensor([float(m.important) for m in mismatches], device="cpu").reshape(-1),
               "prompt": torch.tensor([i for i, *_ in swaps], dtype=torch.long, device="cpu").reshape(-1)}
    return tensors, mismatches, prompts


def save_shard(path: Path, tensors: dict, mismatches: list[Mismatch], prompts: list[dict], start: int,
               seconds: float) -> None:
    """A finished group, written whole (atomically): its tensors, and its mismatches, prompts and time as metadata."""
    meta = {"start": str(start), "mismatches": json.dumps([dataclasses.asdict(m) for m in mismatches]),
            "prompts": json.dumps(prompts), "seconds": str(seconds)}
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)


@dataclass
class Mined:
    """mine_judge's shards read back, the groups in order."""

    features: torch.Tensor  # [M, h_d + h_t]: [h_draft; h_target] at each mismatch
    important: torch.Tensor  # [M] float, 1 where the mismatch changed the answer's verdict
    prompt: torch.Tensor  # [M] long: the index of its prompt among the mined ones
    records: list[dict]  # per mismatch: Mismatch's fields
    prompts: list[dict]  # per prompt: its id, answer tokens, mismatches and score
    seconds: float  # mining time, summed over the groups


def load_shards(folder: str | Path) -> Mined:
    """The labels mine_judge wrote to folder/shards."""
    paths = sorted((Path(folder) / SHARDS).glob("*.safetensors"))
    if not paths:
        raise FileNotFoundError(f"{folder}: no mined labels (run `diversed mine-judge --out {folder}` first)")
    tensors, records, prompts, seconds = [], [], [], 0.0
    for path in paths:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            tensors.append({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118 (not iterable)
        tensors[-1]["prompt"] += int(meta["start"])
        records += json.loads(meta["mismatches"])
        prompts += json.loads(meta["prompts"])
        seconds += float(meta["seconds"])
    return Mined(*(torch.cat([t[k] for t in tensors]) for k in ("features", "important", "prompt")), records,
                 prompts, seconds)


def claim_folder(out: Path, cfg) -> str:
    """The folder's config id (config.json), written on first use; a folder of another config is refused."""
    cid = config_hash(dataclasses.asdict(cfg))
    path = out / "config.json"
    if path.is_file() and read_json(path).get("config_id") != cid:
        raise ValueError(f"{out} holds labels mined with another config; use another output folder")
    write_json(path, {"config": dataclasses.asdict(cfg), "config_id": cid})
    return cid


def mine_judge(cfg: JudgeConfig, out: str | Path, *, pair=None, examples=None, progress: bool = True,
               on_group=None, execution: Execution | None = None) -> Path:
    """Mine AutoJudge's labels for cfg.task into out/ (shards/, then mismatches.jsonl and manifest.json); resumable:
    finished groups of batch_size prompts are kept. on_group(start): called after each group is written (tests).
    Returns out/manifest.json."""
    cfg.validate()
    out = Path(out)
    (out / SHARDS).mkdir(parents=True, exist_ok=True)
    cid = claim_folder(out, cfg)
    task = get_task(cfg.task, cfg.data_files)
    if examples is None:
        examples = task.examples("train", cfg.n_train, seed=cfg.seed, prompt_format=cfg.prompt_format)
    if pair is None:
        pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers)
    stops = task.stops if cfg.scoring == "authors" else ()
    ends = Ends(eos=eos_set(pair.target), stop=stop_at(pair.tokenizer, stops) if stops else None)
    miner = Miner(cfg, pair, task, ends, execution or Execution.here())
    starts = range(0, len(examples), cfg.batch_size)
    for start in tqdm(starts, desc=f"mine judge labels {cfg.task}", unit="group", disable=not progress):
        path = out / SHARDS / f"{start:06d}.safetensors"
        if path.is_file():
            continue
        group = examples[start:start + cfg.batch_size]
        t0 = time.perf_counter()
        mined = mine_group(miner, group, encode_examples(cfg, pair.tokenizer, group))
        save_shard(path, *mined, start, time.perf_counter() - t0)
        if on_group is not None:
            on_group(start)
    mined = load_shards(out)
    write_jsonl(out / "mismatches.jsonl", mined.records)
    manifest = {"config": dataclasses.asdict(cfg), "config_id": cid, "prompts": len(mined.prompts),
                "tokens": sum(p["tokens"] for p in mined.prompts), "mismatches": len(mined.records),
                "important": int(mined.important.sum()), "seconds": mined.seconds,
                "pair": {"target": fingerprint(pair.target), "draft": fingerprint(pair.draft)},
                "hidden": {"target": hidden_size(pair.target), "draft": hidden_size(pair.draft)},
                "execution": dataclasses.asdict(miner.execution), **provenance()}
    write_json(out / "manifest.json", manifest)
    return out / "manifest.json"


def held_out(prompts: torch.Tensor, share: float, seed: int) -> torch.Tensor:
    """A seeded share of the distinct prompts (at least one where share > 0 and there are two): mask [M] of the
    mismatches that belong to them."""
    distinct = prompts.unique()
    n = min(max(round(share * len(distinct)), 1 if share > 0 else 0), len(distinct) - 1)
    order = torch.randperm(len(distinct), generator=torch.Generator().manual_seed(seed), device="cpu")
    return torch.isin(prompts, distinct[order[:n]])


def fit_logistic(x: torch.Tensor, y: torch.Tensor, fit: JudgeFit) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                         torch.Tensor]:
    """Features x [M, F], labels y [M] in {0, 1} (both present) -> (mean [F], std [F], coef [F], bias []): the
    minimiser of the class-weighted mean log-loss + l2 / 2 |coef|^2 on (x - mean) / std, by L-BFGS in float64."""
    x = x.double()
    mean, std = x.mean(0), x.std(0, unbiased=False).clamp_min(1e-6)
    z, y = (x - mean) / std, y.double()
    weight = torch.where(y > 0, 0.5 / y.mean(), 0.5 / (1 - y.mean()))  # [M]: each class weighs half
    coef = torch.zeros(x.shape[1], dtype=torch.float64, device="cpu", requires_grad=True)
    bias = torch.zeros((), dtype=torch.float64, device="cpu", requires_grad=True)
    opt = torch.optim.LBFGS([coef, bias], max_iter=fit.iterations, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def loss() -> torch.Tensor:
        opt.zero_grad()
        value = (weight * torch.nn.functional.binary_cross_entropy_with_logits(z @ coef + bias, y, reduction="none")
                 ).mean() + fit.l2 / 2 * coef.square().sum()
        value.backward()
        return value
    opt.step(loss)
    return mean, std, coef.detach(), bias.detach()


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float | None:
    """The area under the ROC curve: P(an important mismatch scores above an unimportant one), ties half (the
    Mann-Whitney U over the pairs); None without both classes."""
    pos, neg = scores[labels > 0], scores[labels == 0]
    if not len(pos) or not len(neg):
        return None
    return float(mannwhitneyu(pos.numpy(), neg.numpy()).statistic) / (len(pos) * len(neg))


def mined_manifest(labels: Path) -> dict:
    """mine_judge's manifest in folder `labels` (written last: its absence means mining is unfinished)."""
    if not (labels / "manifest.json").is_file():
        raise FileNotFoundError(f"{labels}: no manifest.json (mining unfinished: rerun `diversed mine-judge`)")
    return read_json(labels / "manifest.json")


def other_labels(labels: Path, mined: dict) -> dict:
    """The manifest of another task's labels, which must be finished and mined on the pair of `mined`'s."""
    other = mined_manifest(labels)
    if other["pair"] != mined["pair"]:
        raise ValueError(f"--eval-labels {labels} were mined on another pair ({other['pair']}) than the judge's "
                         f"({mined['pair']}): its hidden states are not the judge's features")
    return other


def out_of_domain(judge: Judge, labels: Path, other: dict) -> dict:
    """The judge's AUC on another task's mined labels (every prompt: the judge saw none of them):
    {task, labels, prompts, mismatches, important, auc}."""
    data = load_shards(labels)
    with torch.no_grad():
        scores = judge.logits(data.features)
    return {"task": other["config"]["task"], "labels": str(labels), "prompts": len(data.prompt.unique()),
            "mismatches": len(data.important), "important": int(data.important.sum()),
            "auc": auc(scores, data.important)}


def train_judge(labels: str | Path, out: str | Path, fit: JudgeFit | None = None,
                eval_labels: list[str | Path] = ()) -> Path:
    """AutoJudge's classifier from mine_judge's folder `labels`: out/judge.safetensors (bound to the pair it was
    mined on; no model is loaded) and out/manifest.json (class balance, AUC on the training and the held-out
    prompts, and out of domain on each folder of eval_labels: other tasks' labels mined on the same pair).
    Training prompts whose mismatches hold one class give a constant judge at the smoothed rate of important ones
    (the manifest's `constant` says so). Returns the judge's path."""
    fit = fit or JudgeFit()
    fit.validate()
    labels, out = Path(labels), Path(out)
    mined = mined_manifest(labels)
    others = {Path(o): other_labels(Path(o), mined) for o in eval_labels}  # checked before any fit
    data = load_shards(labels)
    x, y, prompts = data.features, data.important, data.prompt
    test = held_out(prompts, fit.holdout, fit.seed)
    train_y = y[~test]
    judge = Judge(mined["hidden"]["target"], mined["hidden"]["draft"])
    judge.pair = mined["pair"]
    k, n = int(train_y.sum()), len(train_y)
    constant = None
    if 0 < k < n:
        mean, std, coef, bias = fit_logistic(x[~test], train_y, fit)
    else:  # one class: no feature can separate it; the smoothed base rate (k + 1) / (n + 2) everywhere
        constant = (f"the training prompts' {n} mismatches hold {k} important: one class, so a constant judge at "
                    f"P(important) = (k + 1) / (n + 2) = {(k + 1) / (n + 2):.4f}")
        print(f"warning: {labels}: {constant}", file=sys.stderr)
        mean, std, coef = judge.mean.double(), judge.std.double(), torch.zeros(x.shape[1], dtype=torch.float64,
                                                                               device="cpu")
        bias = torch.tensor(math.log((k + 1) / (n - k + 1)), dtype=torch.float64, device="cpu")
    with torch.no_grad():
        judge.mean.copy_(mean), judge.std.copy_(std), judge.proj.weight.copy_(coef[None]), judge.proj.bias.copy_(bias)
        scores = judge.logits(x)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "judge.safetensors"
    summary = {"prompts": len(prompts.unique()), "mismatches": len(y), "important": int(y.sum()),
               "important_share": float(y.mean()) if len(y) else None, "constant": constant,
               "train": {"prompts": len(prompts[~test].unique()), "mismatches": int((~test).sum()),
                         "auc": auc(scores[~test], y[~test])},
               "held_out": {"prompts": len(prompts[test].unique()), "mismatches": int(test.sum()),
                            "auc": auc(scores[test], y[test])},
               "out_of_domain": [out_of_domain(judge, o, m) for o, m in others.items()]}
    task = mined["config"]["task"]
    judge.save(path, task=task, fit=dataclasses.asdict(fit), mining=mined["config_id"])
    write_json(out / "manifest.json", {"task": task, "config": mined["config"], "fit": dataclasses.asdict(fit),
                                       "sha256": sha256_file(path), "labels": str(labels),
                                       "mining": mined["config_id"], **summary, **provenance()})
    return path
