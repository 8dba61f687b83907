"""`diversed bench`: our engine against transformers on the same prompts in one process.

Reports medians over repeats and ratios (never a bare absolute time is the claim): tokens/s relative
to transformers' target-only `generate`, to our target-only decoding, and to transformers' assisted
generation at the same K, plus alpha, tau and whether the greedy tokens agree; and every acceptance rule's
alpha, tau and tokens/s against strict at the same K and temperature (what each rule costs and gains a step).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from diversed.decoding.engine import Networks, generate, speculative_generate, synchronize
from diversed.decoding.fastpath import check_capture
from diversed.decoding.head import WeightHead
from diversed.decoding.models import draft_vocabulary, hidden_size
from diversed.decoding.settings import RULES, Decoding, Execution, Sampling
from diversed.decoding.stats import summarize
from diversed.decoding.stepper import Stepper
from diversed.utils import option, provenance, write_json, write_text

BENCH_PROMPTS = [
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


# the rules the bench times by default, each at a knob that relaxes strict (every rule of settings.RULES but the
# ensembles', which the fixed w rows cover)
RULE_SPECS = ("block", "cascade=0.9", "lenient=0.5", "typical=0.09", "topk=2", "ears=0.5", "fuzzy=0.1",
              "threshold=0.5", "mentored=0.1", "mars=0.9", "fly=0.3")


@dataclass(frozen=True)
class BenchConfig:
    """What `diversed bench` times (greedy, every prompt to full length); its flags are generated from these fields."""

    K: int = option(5, "draft length", flag="-K", low=1)
    max_new_tokens: int = option(64, "new tokens per prompt", low=1)
    weights: tuple[float, ...] = option((0.3, 0.5, 0.7), "the fixed verifier's weights (the batched bench: the first)")
    repeats: int = option(3, "timings of every method (the median is reported)", low=1)
    rules: tuple[str, ...] = option(RULE_SPECS, "acceptance rules timed against strict at the same K, sampled at "
                                                "--rules-temperature: VERIFIER or VERIFIER=KNOB")
    rules_temperature: float = option(1.0, "the temperature of the rules' rows and of their strict reference")


def rule_decoding(spec: str, K: int, max_new_tokens: int, temperature: float) -> Decoding:
    """The Decoding of a rule spec of BenchConfig.rules, "block" or "ears=0.5" (checked as Decoding checks it)."""
    verifier, _, knob = spec.partition("=")
    if verifier not in RULES:
        raise ValueError(f"unknown rule {verifier!r} in --rules; allowed: {', '.join(RULES)}")
    return Decoding(verifier, K=K, max_new_tokens=max_new_tokens, eos_token_id=(), sampling=Sampling(temperature),
                    knob=float(knob) if knob else None)


def _methods(target: nn.Module, draft: nn.Module, config: BenchConfig, vocab_size: int | None,
             execution: Execution) -> dict[str, tuple[Callable, bool]]:
    """Every method timed, name -> (a function decoding one prompt, whether it is ours)."""
    K, n = config.K, config.max_new_tokens
    greedy = {"eos_token_id": (), "sampling": Sampling(temperature=0.0), "max_new_tokens": n}

    def ours(model, verifier="autoregressive", w=None):
        decoding = Decoding(verifier, K=K, weight=w, **greedy)
        return lambda ids: [speculative_generate(model, draft, ids, decoding, vocab_size=vocab_size,
                                                 execution=execution)]

    def rule(spec):
        decoding = rule_decoding(spec, K, n, config.rules_temperature)
        return lambda ids: [speculative_generate(target, draft, ids, decoding, vocab_size=vocab_size,
                                                 execution=execution)]

    methods = {"hf_target": (lambda ids: hf_generate(target, ids, max_new_tokens=n), False),
               "ours_target": (ours(target), True), "ours_draft": (ours(draft), True),
               "hf_assisted_strict": (lambda ids: hf_generate(target, ids, max_new_tokens=n, draft=draft, K=K), False),
               "ours_strict": (ours(target, "strict"), True)}
    for w in config.weights:
        methods[f"hf_assisted_fixed_w{w}"] = (
            lambda ids, w=w: hf_generate(target, ids, max_new_tokens=n, draft=draft, K=K, weight=w), False)
        methods[f"ours_fixed_w{w}"] = (ours(target, "fixed", w), True)
    for spec in ("strict", *config.rules) if config.rules else ():
        methods[f"rule {spec} at T={config.rules_temperature:g}"] = (rule(spec), True)
    return methods


def time_method(target: nn.Module, fn: Callable, is_ours: bool, prompts: list[list[int]], config: BenchConfig,
                assisted: bool) -> dict:
    """One method over every prompt `repeats` times after a warm-up: median seconds, tokens/s, its tokens, and
    alpha and tau (ours: from its statistics; transformers' assisted generation: from its target forwards)."""
    fn(prompts[0])  # warm-up
    counter = None if is_ours else _CallCounter(target)
    times, outputs = [], None
    for _ in range(config.repeats):
        if counter:
            counter.n = 0
        t, outputs = time_prompts(fn, prompts, target.get_output_embeddings().weight.device)
        times.append(t)
    if counter:
        counter.handle.remove()
    tokens = [o[0].tokens if is_ours else o for o in outputs]
    n_tokens = sum(len(t) for t in tokens)
    row = {"seconds_median": statistics.median(times), "seconds_all": times, "new_tokens": n_tokens, "tokens": tokens}
    row["tokens_per_s"] = n_tokens / row["seconds_median"]
    row["ms_per_token"] = 1000 * row["seconds_median"] / n_tokens
    if is_ours:
        s = summarize([o[0] for o in outputs])
        row |= {k: s[k] for k in ("draft_acceptance_rate", "conditional_acceptance", "mean_acceptance_length",
                                  "bias_tv")}
        if s["time_total"]:
            row["share_draft"] = s["time_draft"] / s["time_total"]
            row["share_verify"] = s["time_verify"] / s["time_total"]
    elif assisted:
        steps = counter.n  # target forwards of the last repeat = verification steps
        row["mean_acceptance_length"] = n_tokens / steps
        row["draft_acceptance_rate_approx"] = (n_tokens - steps) / (config.K * steps)
    return row


def run_bench(target: nn.Module, draft: nn.Module, prompts: list[list[int]], config: BenchConfig = BenchConfig(), *,
              vocab_size: int | None = None, progress: bool = True, execution: Execution | None = None) -> dict:
    """Time every method over all prompts `repeats` times (after one warm-up each); greedy decoding; then the
    speedups, the ideal speedups of the i.i.d. bound and whether the greedy tokens agree. execution: how our
    engine runs (default Execution.here())."""
    execution = execution or Execution.here()
    for role, model in (("target", target), ("draft", draft)):  # before anything is timed
        check_capture(execution.capture, model, role, enabled=execution.fastpath)
    rows: dict[str, dict] = {}
    with no_eos(target), no_eos(draft):
        methods = _methods(target, draft, config, vocab_size, execution)
        for name, (fn, is_ours) in tqdm(methods.items(), desc="bench", unit="method", disable=not progress):
            rows[name] = time_method(target, fn, is_ours, prompts, config, "assisted" in name)
    c, v = _speedups(rows, target, prompts[0], config.K, execution)
    return {"K": config.K, "max_new_tokens": config.max_new_tokens, "prompts": len(prompts),
            "repeats": config.repeats, "capture": execution.capture, "execution": dataclasses.asdict(execution),
            "methods": rows, "ratios": _ratios(rows, config.weights, c, v), "rules": _rules(rows, config),
            "identical_greedy_tokens": _identical(rows, config.weights), **provenance()}


def _rules(rows: dict[str, dict], config: BenchConfig) -> list[dict]:
    """Each rule's alpha, tau and tokens/s, and its tokens/s and tau over strict's at the same K and temperature."""
    if not config.rules:
        return []
    T = f"{config.rules_temperature:g}"
    strict = rows[f"rule strict at T={T}"]
    return [{"rule": spec, "temperature": config.rules_temperature, "K": config.K,
             "draft_acceptance_rate": r["draft_acceptance_rate"], "mean_acceptance_length": r["mean_acceptance_length"],
             "bias_tv": r["bias_tv"], "tokens_per_s": r["tokens_per_s"],
             "tokens_per_s_vs_strict": r["tokens_per_s"] / strict["tokens_per_s"],
             "tau_vs_strict": r["mean_acceptance_length"] / strict["mean_acceptance_length"]}
            for spec in ("strict", *config.rules) for r in [rows[f"rule {spec} at T={T}"]]]


def _speedups(rows: dict[str, dict], target: nn.Module, prompt: list[int], K: int,
              execution: Execution) -> tuple[float, float]:
    """Each row's speedups over both target-only baselines and, for our speculative methods, its ideal speedup and
    efficiency; returns the measured cost ratios c (draft / target step) and v (verify / target step)."""
    ref = rows["hf_target"]
    for row in rows.values():
        row["speedup_vs_hf_target"] = row["tokens_per_s"] / ref["tokens_per_s"]
        row["speedup_vs_ours_target"] = row["tokens_per_s"] / rows["ours_target"]["tokens_per_s"]
    c = rows["ours_draft"]["seconds_median"] / rows["ours_target"]["seconds_median"]  # per-token cost ratio
    v = step_ms(target, prompt, K + 1, execution=execution) / step_ms(target, prompt, execution=execution)
    for row in rows.values():
        alpha = row.get("conditional_acceptance")  # the bound's i.i.d. per-position alpha
        if alpha is not None and alpha == alpha:  # our speculative methods (nan for the baselines)
            row["ideal_speedup"] = ideal_speedup(alpha, K, c)
            row["efficiency"] = row["speedup_vs_ours_target"] / row["ideal_speedup"]
            row["efficiency_at_measured_v"] = row["speedup_vs_ours_target"] / ideal_speedup(alpha, K, c, v)
    return c, v


def _ratios(rows: dict[str, dict], weights: tuple[float, ...], c: float, v: float) -> dict[str, float]:
    speed = {name: row["tokens_per_s"] for name, row in rows.items()}
    ratios = {"ours_target / hf_target": speed["ours_target"] / speed["hf_target"],
              "ours_strict / hf_assisted_strict": speed["ours_strict"] / speed["hf_assisted_strict"],
              "draft_cost_ratio_c": c, "verify_cost_ratio_v": v}
    for w in weights:
        ratios[f"ours_fixed_w{w} / hf_assisted_fixed_w{w}"] = (speed[f"ours_fixed_w{w}"]
                                                               / speed[f"hf_assisted_fixed_w{w}"])
    return ratios


def _identical(rows: dict[str, dict], weights: tuple[float, ...]) -> dict[str, bool]:
    tokens = {name: row["tokens"] for name, row in rows.items()}
    same = {"ours_target == hf_target": tokens["ours_target"] == tokens["hf_target"],
            "ours_strict == hf_target": tokens["ours_strict"] == tokens["hf_target"],
            "ours_strict == hf_assisted_strict": tokens["ours_strict"] == tokens["hf_assisted_strict"]}
    for w in weights:
        same[f"ours_fixed_w{w} == hf_assisted_fixed_w{w}"] = tokens[f"ours_fixed_w{w}"] == tokens[
            f"hf_assisted_fixed_w{w}"]
    return same


def hf_generate_batch(model: nn.Module, prompts: list[list[int]], *, max_new_tokens: int, batch_size: int,
                      pad_id: int = 0) -> list[list[int]]:
    """transformers' batched greedy generate of the target alone, batch_size prompts at a time (left padding with
    an attention mask, as transformers batches; each chunk runs to max_new_tokens)."""
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        width = max(len(p) for p in chunk)
        x = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=model.device)
        y = model.generate(x, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                           pad_token_id=pad_id)
        out += y[:, width:].tolist()
    return out


def batch_bench(nets: Networks, prompts: list[list[int]], batch_sizes: list[int], config: BenchConfig = BenchConfig(),
                *, execution: Execution | None = None, progress: bool = True) -> dict:
    """Total tokens/s of every prompt decoded at each batch size, greedy and to full length, in one process:
    transformers' batched generate (target only) and ours: target only, strict, fixed w, dynamic (nets.trained, or a
    zero-initialised head: w = 0.5 with the head's cost). Each (method, batch size) is timed once after a warm-up
    (batch of the same size, 8 tokens)."""
    execution, target, draft = execution or Execution.here(), nets.target, nets.draft
    head = nets.trained or WeightHead(hidden_size(target), hidden_size(draft)).bind(target, draft)
    device = target.get_output_embeddings().weight.device
    K, max_new_tokens, weight = config.K, config.max_new_tokens, config.weights[0]
    greedy = {"eos_token_id": (), "sampling": Sampling(temperature=0.0), "K": K}
    ours = {"ours_target": Decoding("autoregressive", **greedy, max_new_tokens=max_new_tokens),
            "ours_strict": Decoding("strict", **greedy, max_new_tokens=max_new_tokens),
            f"ours_fixed_w{weight}": Decoding("fixed", weight=weight, **greedy, max_new_tokens=max_new_tokens),
            "ours_dynamic": Decoding("dynamic", **greedy, max_new_tokens=max_new_tokens)}

    def run(name, B, n_tokens, items):
        if name == "hf_target":
            return hf_generate_batch(target, items, max_new_tokens=n_tokens, batch_size=B), None
        d = dataclasses.replace(ours[name], max_new_tokens=n_tokens)
        gens = generate(Networks(target, draft, head if d.verifier == "dynamic" else None, nets.vocab_size), items, d,
                        batch_size=B, execution=execution)
        return [g.tokens for g in gens], gens

    rows, tokens = [], {}
    with no_eos(target), no_eos(draft):
        for B in tqdm(batch_sizes, desc="batch bench", unit="batch size", disable=not progress):
            for name in ("hf_target", *ours):
                run(name, B, 8, prompts[:B])  # warm-up
                synchronize(device)
                t0 = time.perf_counter()
                out, gens = run(name, B, max_new_tokens, prompts)
                synchronize(device)
                seconds = time.perf_counter() - t0
                n = sum(len(t) for t in out)
                row = {"batch_size": B, "method": name, "tokens_per_s": n / seconds, "seconds": seconds,
                       "new_tokens": n}
                if gens is not None and ours[name].verifier != "autoregressive":
                    s = summarize(gens)
                    row |= {"draft_acceptance_rate": s["draft_acceptance_rate"],
                            "mean_acceptance_length": s["mean_acceptance_length"]}
                rows.append(row)
                tokens[(B, name)] = out
    by = {(r["batch_size"], r["method"]): r for r in rows}
    for r in rows:
        r["x_ours_target_same_batch"] = r["tokens_per_s"] / by[(r["batch_size"], "ours_target")]["tokens_per_s"]
        r["x_hf_target_same_batch"] = r["tokens_per_s"] / by[(r["batch_size"], "hf_target")]["tokens_per_s"]
    crossover = {}
    for name in ours:
        if name == "ours_target":
            continue
        losing = [B for B in batch_sizes if by[(B, name)]["x_ours_target_same_batch"] < 1]
        crossover[name] = min(losing) if losing else None
    identical = {f"{name} at every batch size == at batch 1": all(tokens[(B, name)] == tokens[(batch_sizes[0], name)]
                                                                 for B in batch_sizes) for name in ours}
    return {"K": K, "max_new_tokens": max_new_tokens, "prompts": len(prompts), "batch_sizes": list(batch_sizes),
            "weight": weight, "execution": dataclasses.asdict(execution), "rows": rows,
            "crossover_batch_size": crossover, "identical_tokens": identical, **provenance()}


def batch_markdown(result: dict) -> str:
    """The batch bench as Markdown: total tokens/s per batch size and method, and where speculative decoding stops
    beating the target alone at the same batch size."""
    def f(x, spec=".2f"):
        return "–" if x is None or x != x else format(x, spec)

    ex = result["execution"]
    lines = [f"# Batched decoding: {result['prompts']} prompts x {result['max_new_tokens']} tokens, greedy, K = "
             f"{result['K']}, fixed w = {result['weight']}, capture {ex['capture']}, fast path "
             f"{'on' if ex['fastpath'] else 'off'}, {ex['threads']} threads", "",
             f"Hardware: {result['hardware'].get('gpu') or result['hardware']['cpu']}, "
             f"torch {result['versions'].get('torch')}, transformers {result['versions'].get('transformers')}", "",
             "| batch | method | tokens/s | x ours target (same batch) | x hf target (same batch) | alpha | tau |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['batch_size']} | {r['method']} | {r['tokens_per_s']:.1f} | "
                     f"{f(r['x_ours_target_same_batch'])} | {f(r['x_hf_target_same_batch'])} | "
                     f"{f(r.get('draft_acceptance_rate'), '.3f')} | {f(r.get('mean_acceptance_length'))} |")
    lines += ["", "| method | first batch size slower than the target alone at that batch size |", "|---|---|"]
    lines += [f"| {k} | {'none measured' if v is None else v} |" for k, v in result["crossover_batch_size"].items()]
    lines += ["", "| the same tokens | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["identical_tokens"].items()]
    return "\n".join(lines) + "\n"


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
    if result.get("rules"):
        lines += ["", f"Acceptance rules, sampled at T = {result['rules'][0]['temperature']:g}, K = {result['K']} "
                  "(one seed; x strict: the same K and temperature):", "",
                  "| rule | alpha | tau | bias TV | tokens/s | x strict tokens/s | x strict tau |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['rule']} | {f(r['draft_acceptance_rate'])} | {f(r['mean_acceptance_length'])} | "
                  f"{f(r['bias_tv'])} | {f(r['tokens_per_s'], '.1f')} | {f(r['tokens_per_s_vs_strict'])} | "
                  f"{f(r['tau_vs_strict'])} |" for r in result["rules"]]
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
