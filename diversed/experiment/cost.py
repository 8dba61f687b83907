"""What the paper config costs, computed (not measured) from the models' public configs: the GPU memory of each job
(the bytes of weights, gradients, optimizer state, KV caches, activations and logits it holds at once), and the
GPU-hours and disk of each pair.

The sizes are approximations: parameter counts as the model cards round them (and as the architectures below
reproduce them), the rest from each checkpoint's config.json; the KV cache ignores Gemma 3's sliding window (an
upper bound). The CUDA context (~0.5-1 GB) and allocator fragmentation come on top. Times follow a model of one
forward of B rows (step_ms): the weights read once for all rows and each row's KV cache read, at the memory
bandwidth, overlapped with the matmuls at the compute throughput, plus a fixed cost per layer. Quality decodes
run at the config's batch_size, timing decodes at batch 1. Print the tables of a config with
`python -m diversed.experiment.cost config/paper.yaml`."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from diversed.experiment.config import Pair
from diversed.experiment.plan import Plan, load
from diversed.training.settings import TEXT_BATCH

GB = 1e9
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
JOBS = ("decode", "train_head", "distill")


@dataclass(frozen=True)
class Arch:
    """What the estimate reads from a model's config (the text model's, for a conditional-generation model)."""

    params: float  # all parameters, a vision tower included
    vision: float  # the vision tower and its projector: no gradient in text-only training
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": Arch(8.03e9, 0, 32, 4096, 14336, 32, 8, 128, 128256),
    "meta-llama/Llama-3.2-1B-Instruct": Arch(1.24e9, 0, 16, 2048, 8192, 32, 8, 64, 128256),
    "Qwen/Qwen3-8B": Arch(8.19e9, 0, 36, 4096, 12288, 32, 8, 128, 151936),
    "Qwen/Qwen3-0.6B": Arch(0.60e9, 0, 28, 1024, 3072, 16, 8, 128, 151936),
    "google/gemma-3-12b-it": Arch(12.2e9, 0.44e9, 48, 3840, 15360, 16, 8, 256, 262208),
    "google/gemma-3-4b-it": Arch(4.3e9, 0.44e9, 34, 2560, 10240, 8, 4, 256, 262208),
}


def arch(model: str) -> Arch:
    if model not in MODELS:
        raise ValueError(f"no memory estimate for {model!r}; known models: {', '.join(MODELS)}")
    return MODELS[model]


def kv_cache(a: Arch, tokens: int, width: int) -> float:
    """Keys and values of every layer for `tokens` positions."""
    return 2 * a.layers * a.kv_heads * a.head_dim * tokens * width


def layer_workspace(a: Arch, tokens: int, width: int) -> float:
    """The activations of one decoder layer's forward: its input and output, queries, keys, values and the attention
    output, and the gated MLP's three widths."""
    return tokens * (2 * a.hidden + 2 * (a.heads + a.kv_heads) * a.head_dim + 3 * a.intermediate) * width


@dataclass(frozen=True)
class Workload:
    """The sizes a job's memory depends on: tokens, the longest prompt + completion a decode holds (a long CNN/DM
    article); train_tokens a training job's (its prompts cut at max_prompt_tokens; default: tokens); new_tokens a
    rollout's; batch_size rollouts a head-training step decodes together; K the draft length; decode_batch the rows
    a decode job runs in lockstep."""

    tokens: int = 2048
    new_tokens: int = 128
    batch_size: int = 8
    K: int = 5
    decode_batch: int = 1
    train_tokens: int | None = None


def estimate(target: str, draft: str, job: str, *, dtype: str = "bfloat16",
             load: Workload | None = None) -> dict[str, float]:
    """Bytes a job of the pair holds at its peak, by part, at `load`'s sizes (default Workload()).

    job: decode (a decode job: target only, then each speculative run, the fine-tuned draft's included, with
    decode_batch rows in lockstep), train_head (REINFORCE, batch_size rollouts of new_tokens, decoded together) or
    distill (the draft trained as distill_draft does: bfloat16 with AdamW16 when dtype is bfloat16, else float32
    with AdamW, activation checkpointing)."""
    load = load or Workload()
    new_tokens, batch_size, K, decode_batch = load.new_tokens, load.batch_size, load.K, load.decode_batch
    tokens = load.tokens if job == "decode" else load.train_tokens or load.tokens
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}; allowed: {', '.join(JOBS)}")
    if dtype not in BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; allowed: {', '.join(BYTES)}")
    t, d, b = arch(target), arch(draft), BYTES[dtype]
    V = max(t.vocab, d.vocab)
    if job == "distill":
        s = 2 if dtype == "bfloat16" else 4  # the student's bytes a value
        trainable = d.params - d.vision
        return {"weights": t.params * b + d.params * s, "gradients": trainable * s,
                "optimizer": 2 * trainable * s,  # two moments
                # checkpointed: each layer's input, and one layer recomputed with its gradient
                "activations": d.layers * tokens * d.hidden * s + 2 * layer_workspace(d, tokens, s),
                # target and student logits (+ gradient) of the n + 1 kept positions, the KL's float32 terms
                "logits": (new_tokens + 1) * V * (b + 2 * s) + 5 * new_tokens * V * 4}
    drafts = 2 if job == "decode" else 1  # a decode job also holds the fine-tuned draft (each model loads once)
    rows = decode_batch if job == "decode" else batch_size  # the static caches' rows
    parts = {"weights": (t.params + drafts * d.params) * b,
             "kv_cache": rows * (kv_cache(t, tokens, b) + kv_cache(d, tokens + K, b)),
             "activations": layer_workspace(t, tokens, b)}  # a no-grad prefill, one layer at a time
    if job == "decode":
        parts["logits"] = 4 * rows * (K + 1) * V * 4  # p, q and the verifier's float32 rows
    else:
        parts["logits"] = 6 * batch_size * new_tokens * V * 4  # log p, log q kept; p, q, nu, min(q, nu) in the loss
    return parts


def total(parts: dict[str, float]) -> float:
    return sum(parts.values())


# A forward reads every weight once and each row's KV cache at an A100 / H100-class GPU's memory bandwidth,
# overlapped with its matmuls at a sustained bf16 throughput, plus a fixed cost per layer for the eager kernels it
# launches (assumptions, not measurements).
BANDWIDTH = 1.5e12  # bytes/s
FLOPS = 4e14  # bf16 multiply-adds x 2 per second, sustained (an H100's dense peak is ~1e15, an A100's 3.1e14)
LAYER_MS = 0.25
TAU = 1.25  # tokens per speculative step at a low acceptance (alpha ~0.2 with K = 5): the slow end
PROMPT_TOKENS = {"gsm8k": 150, "mbpp": 150, "cnndm": 900, "xsum": 500}  # typical prompt lengths (others: 256)
# each task's longest eval prompt in tokens, raw template included: assumed (the hub's data is not read here); every
# run records each prompt's prompt_tokens in its records, which checks these at first use (others: 512)
LONGEST_PROMPT = {"gsm8k": 400, "mbpp": 700, "cnndm": 3000, "xsum": 3000}


def workloads(plan: Plan) -> dict[str, Workload]:
    """Each task's Workload in a plan: its longest prompt (LONGEST_PROMPT) and max_new_tokens, the config's K and
    quality-decode batch, head training's batch. Training prompts are cut at max_prompt_tokens (where set), decode
    prompts are not."""
    x = plan.experiment
    train = x.train_head
    loads = {}
    for task, t in plan.tasks.items():
        longest, new = LONGEST_PROMPT.get(task, 512), t.max_new_tokens
        cut = min(longest, train.max_prompt_tokens or longest)
        loads[task] = Workload(tokens=longest + new, new_tokens=new, batch_size=train.batch_size,
                               K=max(x.K), decode_batch=x.batch_size, train_tokens=cut + new)
    return loads


def step_ms(a: Arch, rows: int = 1, tokens: int = 1, context: int = 0, dtype: str = "bfloat16") -> float:
    """One forward of `rows` rows of `tokens` new tokens each over `context` cached positions a row: the weights
    (read once for every row) and the rows' KV caches at BANDWIDTH, the matmuls (2 flops a parameter a token) at
    FLOPS, whichever is slower, plus LAYER_MS a layer."""
    b = BYTES[dtype]
    memory = (a.params * b + rows * kv_cache(a, context, b)) / BANDWIDTH
    compute = 2 * a.params * rows * tokens / FLOPS
    return max(memory, compute) * 1e3 + LAYER_MS * a.layers


def forward_ms(a: Arch, dtype: str = "bfloat16") -> float:
    """One token's forward at batch 1 over an empty cache: every weight read once, plus LAYER_MS a layer."""
    return step_ms(a, dtype=dtype)


def token_ms(t: Arch, d: Arch, *, K: int | None, rows: int = 1, context: int = 0, tau: float = TAU,
             dtype: str = "bfloat16") -> float:
    """GPU time per emitted token of one row, `rows` rows in lockstep: target alone (K None), or speculative: K
    draft steps of one token and one target step of K + 1 tokens a row, emitting tau tokens a row per step."""
    if K is None:
        return step_ms(t, rows, 1, context, dtype) / rows
    return (K * step_ms(d, rows, 1, context, dtype) + step_ms(t, rows, K + 1, context, dtype)) / (rows * tau)


def crossover(target: str, draft: str, *, K: int = 5, tau: float = 3.0, context: int = 512,
              dtype: str = "bfloat16", limit: int = 4096) -> int | None:
    """The smallest batch size at which speculative decoding (K drafts, tau tokens a step) costs at least as much
    per token as the target alone at the same batch size, computed with step_ms: 1 when it never beats the target
    alone, None when it still does at `limit`."""
    t, d = arch(target), arch(draft)
    for rows in range(1, limit + 1):
        if token_ms(t, d, K=K, rows=rows, context=context, tau=tau, dtype=dtype) >= token_ms(
                t, d, K=None, rows=rows, context=context, dtype=dtype):
            return rows
    return None


GPU_RULES = ("decode", "time", "sweep", "time_sweep", "sweep_lambda", "train_head", "distill_draft", "mine_judge")
MISMATCH = 0.3  # the share of a greedy answer's positions where the draft would choose otherwise (assumed)
# rules priced under another's column
PRICED_AS = {"decode_transfer": "decode", "train_head_lambda": "train_head"}


def job_ms(plan: Plan, pair: str) -> dict[str, list[float]]:
    """GPU milliseconds of every job of each GPU rule for one pair of a workflow plan (diversed.experiment.plan), every
    completion at full length: each decoding run of a job (quality decodes at the config's batch_size, timing
    decodes at batch 1) costs prompts x max_new_tokens x its per-token time (the target alone, the draft alone,
    or a speculative token at TAU: token_ms), over the task's mean context; head training decodes n_train x
    epochs rollouts of max_new_tokens, batch_size at a time, through both models; the fine-tuned draft's text is
    the target's, TEXT_BATCH prompts at a time; AutoJudge's mining decodes n_train greedy answers, then a MISMATCH
    share of their positions each continued for half the budget on average, batch_size rows at a time, through the
    target. Transfer runs count under decode, the lambda sweep's heads under train_head (PRICED_AS)."""
    p = plan.pairs[pair]
    dtype = p.dtype
    t, d = arch(p.target), arch(p.draft)
    jobs: dict[str, list[float]] = {rule: [] for rule in GPU_RULES}

    def per_token(K, rows, ctx, model=None):
        if model is not None:  # one model alone
            return step_ms(model, rows, 1, ctx, dtype) / rows
        return token_ms(t, d, K=K, rows=rows, context=ctx, dtype=dtype)

    def context(task, new):
        return PROMPT_TOKENS.get(task, 256) + new // 2

    def run_ms(r):
        ctx = context(r.task, r.max_new_tokens)
        alone = {"autoregressive": t, "draft": d}.get(r.verifier)
        return r.prompts * r.max_new_tokens * per_token(r.K, r.batch_size, ctx, alone)

    for job in plan.jobs:
        if job.pair != pair or PRICED_AS.get(job.rule, job.rule) not in GPU_RULES:
            continue
        rule, cfg = PRICED_AS.get(job.rule, job.rule), job.train
        if rule == "train_head":
            ctx = context(cfg.task, plan.tasks[cfg.task].max_new_tokens)
            ms = cfg.n_train * cfg.epochs * cfg.max_new_tokens * (
                per_token(None, cfg.batch_size, ctx, t) + per_token(None, cfg.batch_size, ctx, d))
        elif rule == "mine_judge":
            n = cfg.max_new_tokens
            ctx = context(cfg.task, n)
            ms = cfg.n_train * n * (1 + MISMATCH * n / 2) * per_token(None, cfg.batch_size, ctx, t)
        elif rule == "distill_draft":
            ctx = context(cfg.task, plan.tasks[cfg.task].max_new_tokens)
            ms = cfg.n_train * cfg.max_new_tokens * per_token(None, TEXT_BATCH, ctx, t)
        else:
            ms = sum(run_ms(r) for r in job.runs)
        jobs[rule].append(ms)
    return jobs


def gpu_hours(plan: Plan, pair: str) -> dict[str, float]:
    """GPU-hours of each GPU rule for one pair of a workflow plan: its jobs' job_ms, summed."""
    return {rule: sum(ms) / 3.6e6 for rule, ms in job_ms(plan, pair).items()}


def predicted_seconds(plan: Plan) -> dict[str, float] | None:
    """GPU seconds of each GPU rule over every pair of a plan (decode_transfer and train_head_lambda under the rule
    they are priced as, PRICED_AS), for the report's measured cost; None where a pair does not run on a GPU or its
    models are not among MODELS (the cost model prices the paper's GPU pairs only)."""
    if any(not p.device.startswith("cuda") or p.target not in MODELS or p.draft not in MODELS
           for p in plan.pairs.values()):
        return None
    hours = [gpu_hours(plan, pair) for pair in plan.pairs]  # each pair's jobs priced once
    return {rule: sum(h[rule] for h in hours) * 3600 for rule in GPU_RULES}


def longest_job_minutes(plan: Plan) -> dict[str, float]:
    """GPU minutes of the longest job of each GPU rule over every pair of a workflow plan (computed): what a
    cluster profile's time limit per rule must cover."""
    return {rule: max((max(job_ms(plan, name)[rule], default=0.0) for name in plan.pairs), default=0.0)
            / 6e4 for rule in GPU_RULES}


def disk_gb(plan: Plan, pair: str) -> float:
    """The pair's checkpoints in the Hugging Face cache, and the fine-tuned drafts its jobs save (in the pair's
    dtype), in GB."""
    p = plan.pairs[pair]
    b, t, d = BYTES[p.dtype], arch(p.target), arch(p.draft)
    drafts = sum(job.pair == pair for job in plan.of("distill_draft"))
    return (t.params + (1 + drafts) * d.params) * b / GB


def cost_table(plan: Plan) -> str:
    """Markdown: the computed GPU-hours of each pair by rule, and its disk."""
    rows = ["| pair | decode | time | sweep | sweep timing | lambda sweep | train head | distill | mine judge | "
            "GPU-hours | disk |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    hours = {name: gpu_hours(plan, name) for name in plan.pairs}
    for name, h in hours.items():
        rows.append(f"| {name} | " + " | ".join(f"{h[r]:.1f}" for r in GPU_RULES)
                    + f" | {sum(h.values()):.0f} | {disk_gb(plan, name):.0f} GB |")
    total_hours = sum(sum(h.values()) for h in hours.values())
    return "\n".join(rows) + f"\n\nAll pairs: {total_hours:.0f} GPU-hours (batch size {plan.experiment.batch_size})."


def crossover_table(pairs: dict[str, Pair], taus=(2.0, 3.0, 4.0), K: int = 5, context: int = 512) -> str:
    """Markdown: the computed batch size at which speculative decoding stops beating the target alone."""
    rows = ["| pair | " + " | ".join(f"tau = {tau:g}" for tau in taus) + " |", "|---|" + "---|" * len(taus)]
    for name, p in pairs.items():
        cells = [crossover(p.target, p.draft, K=K, tau=tau, context=context) for tau in taus]
        text = {None: "> 4096", 1: "never faster"}
        rows.append(f"| {name} | " + " | ".join(text.get(c, str(c)) for c in cells) + " |")
    return "\n".join(rows)


def table(pairs: dict[str, Pair], load: Workload | dict[str, Workload] | None = None) -> str:
    """Markdown: the computed GB (10^9 bytes) of each pair's decode, head-training and distillation job (a pair's own
    batch_size sets its decode rows). load: one
    Workload, or one per task (workloads()), each job then at its largest task's, named."""
    loads = load if isinstance(load, dict) else {"": load}
    rows = ["| pair | target / draft | decode | train head | distill |", "|---|---|---|---|---|"]
    for name, p in pairs.items():
        own = {task: w and dataclasses.replace(w, decode_batch=p.batch_size or w.decode_batch)
               for task, w in loads.items()}  # the pair's own decode rows, where it sets them
        cells = []
        for job in JOBS:
            gb, task = max(((total(estimate(p.target, p.draft, job, dtype=p.dtype,
                                            load=w)) / GB, task) for task, w in own.items()), key=lambda x: x[0])
            cells.append(f"{gb:.1f} GB" + (f" ({task})" if task else ""))
        rows.append(f"| {name} | {p.target} / {p.draft} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _print(paths: list[str]) -> None:
    plan = load(*(paths or ["config/paper.yaml"]))  # several files layer (paper-gemma.yaml)
    print(table(plan.pairs, workloads(plan)), cost_table(plan), crossover_table(plan.pairs), sep="\n\n")


if __name__ == "__main__":
    from diversed.utils import guarded

    guarded(lambda: _print(sys.argv[1:]))
