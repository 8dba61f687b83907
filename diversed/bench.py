"""`diversed bench`: our engine against transformers on the same prompts in one process.

Reports medians over repeats and ratios (never a bare absolute time is the claim): tokens/s relative
to transformers' target-only `generate`, to our target-only decoding, and to transformers' assisted
generation at the same K, plus alpha, tau and whether the greedy tokens agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from diversed.decoding.engine import (
    Execution,
    Sampling,
    Stepper,
    autoregressive_generate,
    speculative_generate,
    synchronize,
)
from diversed.decoding.fastpath import check_capture
from diversed.decoding.models import draft_vocabulary
from diversed.decoding.stats import summarize
from diversed.utils import provenance, write_json, write_text

PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Tom has 3 boxes with 12 apples each. He gives away 7 apples. How many apples does he have left?",
    "Summarize the plot of Romeo and Juliet in three sentences.",
    "List five tips for writing clear technical documentation.",
    "Translate to French: The weather is nice today and we are going to the park.",
    "What is the capital of Australia, and why was it chosen?",
    "Describe how a hash table works to a beginner programmer.",
]


def expected_tokens_per_step(alpha: float, K: int) -> float:
    """E[tokens per verification step] for i.i.d. acceptance alpha: (1 - a^(K+1)) / (1 - a)."""
    return K + 1.0 if alpha >= 1 else (1 - alpha ** (K + 1)) / (1 - alpha)


def ideal_speedup(alpha: float, K: int, c: float, v: float = 1.0) -> float:
    """The analytic bound on speedup over target-only decoding, c = draft step time / target step time.
    v = verification pass (K + 1 tokens) time / target step time: 1 in the analytic bound; the measured v
    gives the bound for hardware where scoring K + 1 tokens costs more than one."""
    return expected_tokens_per_step(alpha, K) / (K * c + v)


def step_ms(model: nn.Module, prompt: list[int], n_tokens: int = 1, reps: int = 20,
            execution: Execution | None = None) -> float:
    """Median ms of one cached forward of n_tokens after `prompt` (the engine's step, run and captured as
    `execution` says; default Execution()), synced; the first (capturing) call is not timed."""
    s = Stepper(model, max_len=len(prompt) + n_tokens + 1, execution=execution or Execution(), buckets=(n_tokens,))
    s(prompt, last_only=True)
    s(list(range(5, 5 + n_tokens)))  # warm-up / capture
    s.crop(s.n - n_tokens)
    times = []
    for _ in range(reps):
        synchronize(s.device)
        t0 = time.perf_counter()
        s(list(range(5, 5 + n_tokens)))
        synchronize(s.device)
        times.append(time.perf_counter() - t0)
        s.crop(s.n - n_tokens)
    return 1000 * statistics.median(times)


@contextlib.contextmanager
def no_eos(model: nn.Module) -> Iterator[None]:
    """Let transformers' generate run to max_new_tokens (the bench compares fixed-length outputs)."""
    gc = model.generation_config
    saved = gc.eos_token_id
    gc.eos_token_id = None
    try:
        yield
    finally:
        gc.eos_token_id = saved


@contextlib.contextmanager
def constant_k(draft: nn.Module, K: int) -> Iterator[None]:
    """Make transformers' assisted generation draft exactly K tokens per step (no heuristics)."""
    gc = draft.generation_config
    saved = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold)
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = K, "constant", 0.0
    try:
        yield
    finally:
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = saved


@contextlib.contextmanager
def vocabulary_mask(draft: nn.Module | None) -> Iterator[None]:
    """transformers runs a draft's whole output head: give -inf to the ids outside its draft vocabulary
    (models.draft_vocabulary), so that its q is the one the engine computes from those rows alone."""
    rows = draft_vocabulary(draft) if draft is not None else None
    if rows is None:
        yield
        return
    head = draft.get_output_embeddings()
    outside = torch.ones(head.out_features, dtype=torch.bool, device=head.weight.device)
    outside[rows] = False
    handle = head.register_forward_hook(lambda _m, _x, logits: logits.masked_fill(outside, float("-inf")))
    try:
        yield
    finally:
        handle.remove()


def hf_generate(target: nn.Module, ids: list[int], *, max_new_tokens: int, draft: nn.Module | None = None, K: int = 5,
                weight: float | None = None, temperature: float = 0.0) -> list[int]:
    """transformers' own decoding: target-only, assisted (constant K), or its static ensemble (weight)."""
    x = torch.tensor([ids], device=target.device)
    kwargs = {"do_sample": temperature > 0, "max_new_tokens": max_new_tokens, "pad_token_id": 0}
    if temperature > 0:
        kwargs |= {"temperature": temperature, "top_k": 0, "top_p": 1.0}
    if draft is not None:
        kwargs["assistant_model"] = draft
        if weight is not None:
            kwargs["assistant_ensemble_weight"] = weight
    with constant_k(draft, K) if draft is not None else contextlib.nullcontext(), vocabulary_mask(draft):
        out = target.generate(x, **kwargs)
    return out[0, len(ids):].tolist()


class _CallCounter:
    """Counts forward calls of a module (transformers' verification steps)."""

    def __init__(self, module: nn.Module):
        self.n = 0
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.n += 1


def time_prompts(fn: Callable[[list[int]], object], prompts: list[list[int]], device: torch.device,
                 warmup: bool = False) -> tuple[float, list]:
    """(seconds, [fn(p) for p in prompts]), synced before and after; warmup: one untimed fn(prompts[0]) first
    (allocation, capture, compilation)."""
    if warmup:
        fn(prompts[0])
    synchronize(device)
    t0 = time.perf_counter()
    result = [fn(p) for p in prompts]
    synchronize(device)
    return time.perf_counter() - t0, result


def run_bench(target: nn.Module, draft: nn.Module, prompts: list[list[int]], *, K: int = 5, max_new_tokens: int = 64,
              weights: tuple[float, ...] = (0.3, 0.5, 0.7), repeats: int = 3, vocab_size: int | None = None,
              progress: bool = True, capture: str = "none") -> dict:
    """Time every method over all prompts `repeats` times (after one warm-up each); greedy decoding.
    capture: how our engine runs its fixed-shape steps (engine.Execution; the rest from the environment)."""
    execution = dataclasses.replace(Execution.from_env(), capture=capture)
    for role, model in (("target", target), ("draft", draft)):  # before anything is timed
        check_capture(capture, model, role, enabled=execution.fastpath)
    device = target.get_output_embeddings().weight.device
    ours = {"eos_token_id": [], "sampling": Sampling(temperature=0.0), "max_new_tokens": max_new_tokens,
            "execution": execution}

    def ours_ar(ids):
        return [autoregressive_generate(target, ids, **ours)]

    def ours_sd(verifier, w=None):
        return lambda ids: [speculative_generate(target, draft, ids, verifier=verifier, K=K, weight=w,
                                                 vocab_size=vocab_size, **ours)]

    methods: dict[str, tuple[Callable, bool]] = {  # name -> (one-prompt fn, is ours)
        "hf_target": (lambda ids: hf_generate(target, ids, max_new_tokens=max_new_tokens), False),
        "ours_target": (ours_ar, True),
        "ours_draft": (lambda ids: [autoregressive_generate(draft, ids, **ours)], True),
        "hf_assisted_strict": (lambda ids: hf_generate(target, ids, max_new_tokens=max_new_tokens, draft=draft, K=K),
                               False),
        "ours_strict": (ours_sd("strict"), True),
    }
    for w in weights:
        methods[f"hf_assisted_fixed_w{w}"] = (
            lambda ids, w=w: hf_generate(target, ids, max_new_tokens=max_new_tokens, draft=draft, K=K, weight=w), False)
        methods[f"ours_fixed_w{w}"] = (ours_sd("fixed", w), True)

    rows: dict[str, dict] = {}
    with no_eos(target), no_eos(draft):
        for name, (fn, is_ours) in tqdm(methods.items(), desc="bench", unit="method", disable=not progress):
            fn(prompts[0])  # warm-up
            counter = None if is_ours else _CallCounter(target)
            times, outputs = [], None
            for _ in range(repeats):
                if counter:
                    counter.n = 0
                t, outputs = time_prompts(fn, prompts, device)
                times.append(t)
            if counter:
                counter.handle.remove()
            tokens = [o[0].tokens if is_ours else o for o in outputs]
            n_tokens = sum(len(t) for t in tokens)
            row = {"seconds_median": statistics.median(times), "seconds_all": times, "new_tokens": n_tokens,
                   "tokens": tokens}
            row["tokens_per_s"] = n_tokens / row["seconds_median"]
            row["ms_per_token"] = 1000 * row["seconds_median"] / n_tokens
            if is_ours:
                s = summarize([o[0] for o in outputs])
                row |= {k: s[k] for k in ("draft_acceptance_rate", "conditional_acceptance", "mean_acceptance_length",
                                          "bias_tv")}
                if s["time_total"]:
                    row["share_draft"] = s["time_draft"] / s["time_total"]
                    row["share_verify"] = s["time_verify"] / s["time_total"]
            elif counter and "assisted" in name:
                steps = counter.n  # target forwards of the last repeat = verification steps
                row["mean_acceptance_length"] = n_tokens / steps
                row["draft_acceptance_rate_approx"] = (n_tokens - steps) / (K * steps)
            rows[name] = row

    ref = rows["hf_target"]
    for row in rows.values():
        row["speedup_vs_hf_target"] = row["tokens_per_s"] / ref["tokens_per_s"]
        row["speedup_vs_ours_target"] = row["tokens_per_s"] / rows["ours_target"]["tokens_per_s"]
    c = rows["ours_draft"]["seconds_median"] / rows["ours_target"]["seconds_median"]  # per-token cost ratio
    v = step_ms(target, prompts[0], K + 1, execution=execution) / step_ms(target, prompts[0], execution=execution)
    for row in rows.values():
        alpha = row.get("conditional_acceptance")  # the bound's i.i.d. per-position alpha
        if alpha is not None and alpha == alpha:  # our speculative methods (nan for the baselines)
            row["ideal_speedup"] = ideal_speedup(alpha, K, c)
            row["efficiency"] = row["speedup_vs_ours_target"] / row["ideal_speedup"]
            row["efficiency_at_measured_v"] = row["speedup_vs_ours_target"] / ideal_speedup(alpha, K, c, v)
    ratios = {
        "ours_target / hf_target": rows["ours_target"]["tokens_per_s"] / ref["tokens_per_s"],
        "ours_strict / hf_assisted_strict": rows["ours_strict"]["tokens_per_s"]
        / rows["hf_assisted_strict"]["tokens_per_s"],
        "draft_cost_ratio_c": c,
        "verify_cost_ratio_v": v,
    }
    for w in weights:
        ratios[f"ours_fixed_w{w} / hf_assisted_fixed_w{w}"] = (rows[f"ours_fixed_w{w}"]["tokens_per_s"]
                                                               / rows[f"hf_assisted_fixed_w{w}"]["tokens_per_s"])
    identical = {
        "ours_target == hf_target": rows["ours_target"]["tokens"] == ref["tokens"],
        "ours_strict == hf_target": rows["ours_strict"]["tokens"] == ref["tokens"],
        "ours_strict == hf_assisted_strict": rows["ours_strict"]["tokens"] == rows["hf_assisted_strict"]["tokens"],
    }
    for w in weights:
        identical[f"ours_fixed_w{w} == hf_assisted_fixed_w{w}"] = (rows[f"ours_fixed_w{w}"]["tokens"]
                                                                   == rows[f"hf_assisted_fixed_w{w}"]["tokens"])
    return {"K": K, "max_new_tokens": max_new_tokens, "prompts": len(prompts), "repeats": repeats,
            "capture": capture, "execution": dataclasses.asdict(execution), "methods": rows,
            "ratios": ratios, "identical_greedy_tokens": identical, **provenance()}


def markdown(result: dict) -> str:
    """The bench as a Markdown table (ratios first, then per method)."""
    def f(x, spec=".3f"):
        return "–" if x is None or x != x else format(x, spec)

    ex = result.get("execution")
    how = f", fast path {'on' if ex['fastpath'] else 'off'}, {ex['threads']} threads" if ex else ""
    lines = [f"# Bench: K = {result['K']}, {result['prompts']} prompts x {result['max_new_tokens']} tokens, greedy, "
             f"median of {result['repeats']}, capture {result.get('capture', 'none')}{how}", "",
             f"Hardware: {result['hardware'].get('gpu') or result['hardware']['cpu']}, "
             f"torch {result['versions'].get('torch')}, transformers {result['versions'].get('transformers')}", "",
             "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {f(v)} |" for k, v in result["ratios"].items()]
    lines += ["", "| identical greedy tokens | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["identical_greedy_tokens"].items()]
    lines += ["", "| method | tokens/s | ms/token | x hf target | x ours target | alpha | tau | ideal | efficiency | "
              "efficiency at measured v |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in result["methods"].items():
        alpha = r.get("draft_acceptance_rate", r.get("draft_acceptance_rate_approx"))
        lines.append(f"| {name} | {f(r['tokens_per_s'], '.1f')} | {f(r['ms_per_token'], '.2f')} | "
                     f"{f(r['speedup_vs_hf_target'])} | {f(r['speedup_vs_ours_target'])} | {f(alpha)} | "
                     f"{f(r.get('mean_acceptance_length'))} | {f(r.get('ideal_speedup'))} | "
                     f"{f(r.get('efficiency'))} | {f(r.get('efficiency_at_measured_v'))} |")
    return "\n".join(lines) + "\n"


def write(result: dict, out: str | Path) -> tuple[Path, Path]:
    out = Path(out)
    slim = {**result, "methods": {k: {kk: vv for kk, vv in v.items() if kk != "tokens"}
                                  for k, v in result["methods"].items()}}
    write_json(out / "bench.json", slim)
    write_text(out / "bench.md", markdown(result))
    return out / "bench.json", out / "bench.md"
