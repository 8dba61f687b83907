"""The first GPU contact's measurements, one step per call (benchmarks/gpu_first.sh runs them in order, each under
its own timeout): random weights at the paper's shapes, nothing downloaded. Each step writes {out}/probe-{step}.json
as soon as it has a number; `report` writes the GPU section of benchmarks/RESULTS.md from whatever steps finished.

python benchmarks/gpu_probe.py syncs      --device cuda   host synchronisations per speculative step
python benchmarks/gpu_probe.py batch      --arch llama    batch-32 target alone and strict: ms a step, tokens/s, peak
                                                          memory with long prompts, against cost.step_ms
python benchmarks/gpu_probe.py graphs     --arch qwen     batch 1, eager against CUDA graphs
python benchmarks/gpu_probe.py gemma                      a tiny Gemma 3 pair decodes (strict, DIVERSED)
python benchmarks/gpu_probe.py agreement  --arch llama    tokens at batch 1 against batch 32 (bf16 kernels differ)
python benchmarks/gpu_probe.py report
--arch tiny --device cpu runs every step in seconds (tests/test_gpu_probe.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]

from synthetic import ARCHITECTURES, build  # noqa: E402

from diversed.decoding.engine import Networks, generate, synchronize  # noqa: E402
from diversed.decoding.settings import Decoding, Execution, Sampling  # noqa: E402
from diversed.decoding.stats import summarize  # noqa: E402
from diversed.experiment import cost  # noqa: E402
from diversed.utils import command_line, provenance, record_result, write_json  # noqa: E402

HUB = {"llama": ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
       "qwen": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")}  # the cost model's names of ARCHITECTURES' shapes
STEPS = ("syncs", "batch", "graphs", "gemma", "agreement")


def greedy(verifier: str, tokens: int, K: int = 5, **kw) -> Decoding:
    return Decoding(verifier, K=K, max_new_tokens=tokens, sampling=Sampling(temperature=0.0), eos_token_id=(), **kw)


def pair(a: argparse.Namespace):
    dtype = getattr(torch, a.dtype)
    draft, target = (build(spec, dtype, a.device) for spec in ARCHITECTURES[a.arch])
    return target, draft


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, min(vocab, 32000), (n, length), generator=g).tolist()


def timed(device: torch.device, fn):
    """(seconds, result, peak bytes) of fn() after the device is idle."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else float("nan")
    return time.perf_counter() - t0, out, peak


def step_syncs(a: argparse.Namespace) -> dict:
    """Host synchronisations a speculative step makes, counted by CUDA's sync debug mode (none on a CPU)."""
    target, draft = pair(a)
    nets, p = Networks(target, draft), prompts(4, 32, 256)
    result = {}
    for verifier, kw in (("strict", {}), ("fixed", {"weight": 0.5})):
        d = greedy(verifier, a.tokens, **kw)
        generate(nets, p, d, batch_size=4)  # warm-up: allocations and lazy inits sync once
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if a.device.startswith("cuda"):
                torch.cuda.set_sync_debug_mode("warn")
            try:
                gens = generate(nets, p, d, batch_size=4)
            finally:
                if a.device.startswith("cuda"):
                    torch.cuda.set_sync_debug_mode("default")
        steps = max(len(g.drafted) for g in gens)
        syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
        result[verifier] = {"steps": steps, "syncs": len(syncs), "syncs_per_step": len(syncs) / steps,
                            "counted": a.device.startswith("cuda"), "first": sorted(set(syncs))[:5]}
    return result


def step_batch(a: argparse.Namespace) -> dict:
    """Target alone and strict (synthetic acceptance) at batch a.rows over a.prompt_tokens-token prompts: the
    prefill and the decode steps timed apart (the engine synchronises at both ends of each), ms a decode step beside
    cost.step_ms's computed ms a step for the same shapes, tokens/s of the decode, peak memory."""
    target, draft = pair(a)
    device = target.get_output_embeddings().weight.device
    p = prompts(a.rows, a.prompt_tokens, target.config.vocab_size)
    nets, result = Networks(target, draft), {"rows": a.rows, "prompt_tokens": a.prompt_tokens, "tokens": a.tokens}
    names = HUB.get(a.arch)
    for name, d in (("target alone", greedy("autoregressive", a.tokens)),
                    ("strict, synthetic acceptance 0.8", greedy("strict", a.tokens, synthetic_acceptance=0.8))):
        generate(nets, p[:2], greedy(d.verifier, 4, synthetic_acceptance=d.synthetic_acceptance), batch_size=2)
        seconds, gens, peak = timed(device, lambda d=d: generate(nets, p, d, batch_size=a.rows))
        steps = max(len(g.tokens) if d.verifier == "autoregressive" else len(g.drafted) for g in gens)
        decode = max(g.time_total for g in gens)  # every row joins at once and ends at the same step
        row = {"seconds": seconds, "prefill_ms": 1e3 * max(g.time_prefill for g in gens), "steps": steps,
               "ms_per_step": 1e3 * decode / steps, "tokens_per_s": sum(len(g.tokens) for g in gens) / decode,
               "peak_GiB": peak / 2**30}
        if names:  # the cost model's decode step for the same rows and context
            t, q = (cost.arch(n) for n in names[::-1])
            ctx = a.prompt_tokens + a.tokens // 2
            row["computed_ms_per_step"] = (cost.step_ms(t, a.rows, 1, ctx) if d.verifier == "autoregressive" else
                                           5 * cost.step_ms(q, a.rows, 1, ctx) + cost.step_ms(t, a.rows, 6, ctx))
            row["measured_over_computed"] = row["ms_per_step"] / row["computed_ms_per_step"]
        if d.verifier != "autoregressive":
            row["acceptance"] = summarize(gens)["draft_acceptance_rate"]
        result[name] = row
        write_json(f"{a.out}/probe-batch-{a.arch}.json", result)
    return result


def step_graphs(a: argparse.Namespace) -> dict:
    """Batch 1, 64-token prompts: ms a decode token of the target alone and of strict (synthetic acceptance 0.8),
    eager and with CUDA graphs. Every method is warmed up and every graph it will replay captured before either is
    timed (the capture's seconds reported apart), so no method pays another's captures."""
    from diversed.decoding.fastpath import pooled_decoders

    target, draft = pair(a)
    device = target.get_output_embeddings().weight.device
    p, nets, result = prompts(2, 64, target.config.vocab_size), Networks(target, draft), {}
    methods = {"target alone": greedy("autoregressive", a.tokens),
               "strict 0.8": greedy("strict", a.tokens, synthetic_acceptance=0.8)}
    for capture in ("none", "graph") if device.type == "cuda" else ("none",):
        execution = Execution(capture=capture)
        t0 = time.perf_counter()
        for d in methods.values():
            generate(nets, p[:1], d, execution=execution)
            for model in (target, draft):
                for decoder in pooled_decoders(model):
                    decoder.precapture(64 + a.tokens + 6)
        synchronize(device)
        result[f"warm-up and capture, {capture}"] = {"seconds": time.perf_counter() - t0}
        for name, d in methods.items():
            _, gens, _ = timed(device, lambda d=d, e=execution: generate(nets, p, d, execution=e))
            decode = sum(g.time_total for g in gens)
            result[f"{name}, {capture}"] = {"ms_per_token": 1e3 * decode / sum(len(g.tokens) for g in gens),
                                            "prefill_ms": 1e3 * sum(g.time_prefill for g in gens) / len(gens)}
            write_json(f"{a.out}/probe-graphs-{a.arch}.json", result)
    return result


def step_gemma(a: argparse.Namespace) -> dict:
    """A tiny random Gemma 3 pair (the class the hub's gemma-3-*-it load as) decodes with strict and DIVERSED."""
    from helpers import tiny_paper_model

    from diversed.decoding.head import WeightHead

    dtype = getattr(torch, a.dtype)
    target = tiny_paper_model("gemma3").to(a.device, dtype)
    draft = tiny_paper_model("gemma3", seed=1, hidden=32, layers=2).to(a.device, dtype)
    head = WeightHead(64, 32).to(a.device).bind(target, draft)
    result = {}
    for verifier in ("strict", "dynamic"):
        gens = generate(Networks(target, draft, head if verifier == "dynamic" else None), prompts(2, 16, 125),
                        greedy(verifier, 24), batch_size=2)
        result[verifier] = {"tokens": [len(g.tokens) for g in gens], "acceptance": summarize(gens)[
            "draft_acceptance_rate"]}
    return result


def step_agreement(a: argparse.Namespace) -> dict:
    """Greedy strict tokens of a.rows prompts decoded one at a time and all together: the fraction of positions that
    agree (bitwise on CPU; on CUDA bf16 kernels change with the batch size and flip near-ties)."""
    target, draft = pair(a)
    p, nets = prompts(a.rows, 64, target.config.vocab_size, seed=1), Networks(target, draft)
    d = greedy("strict", a.tokens)
    one = [g.tokens for g in generate(nets, p, d, batch_size=1)]
    many = [g.tokens for g in generate(nets, p, d, batch_size=a.rows)]
    pairs = [(x, y) for s, t in zip(one, many, strict=True) for x, y in zip(s, t, strict=False)]
    first = [next((i for i, (x, y) in enumerate(zip(s, t, strict=False)) if x != y), None) for s, t in zip(one, many,
                                                                                                          strict=True)]
    return {"rows": a.rows, "tokens": a.tokens, "agreement": sum(x == y for x, y in pairs) / len(pairs),
            "prompts_identical": sum(s == t for s, t in zip(one, many, strict=True)),
            "first_difference": [i for i in first if i is not None][:8]}


def report(a: argparse.Namespace) -> str:
    """The GPU section of benchmarks/RESULTS.md from the probe files under a.out (missing steps say so)."""
    out, md = Path(a.out), []
    for f in sorted(out.glob("probe-*.json")):
        r = json.loads(f.read_text())
        rows = {k: v for k, v in r.items() if isinstance(v, dict) and k != "provenance"}
        keys = sorted({k for v in rows.values() for k in v})
        md += [f"#### {f.stem.removeprefix('probe-')} ({r.get('device')}, {r.get('dtype')})", ""]
        if scalars := [f"{k} {_cell(v)}" for k, v in r.items() if not isinstance(v, dict) and k not in ("device",
                                                                                                       "dtype")]:
            md += [", ".join(scalars), ""]
        if rows:
            md += ["| | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
            md += [f"| {name} | " + " | ".join(_cell(v.get(k)) for k in keys) + " |" for name, v in rows.items()]
        md.append("")
    missing = [s for s in STEPS if not any(out.glob(f"probe-{s}*.json"))]
    if missing:
        md.append(f"Not measured (failed or out of time, see the logs beside the probe files): {', '.join(missing)}.")
    text = "\n".join(md)
    for log in ("gpu.txt",):
        if (out / log).is_file():
            text = "```\n" + (out / log).read_text().strip() + "\n```\n\n" + text
    if not a.no_record:
        record_result("GPU first contact", text, command_line(), commit=a.commit)
    return text


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "–" if v is None else str(v)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=[*STEPS, "report"])
    ap.add_argument("--arch", choices=sorted(ARCHITECTURES), default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", type=int, default=32, help="batch size (batch, agreement)")
    ap.add_argument("--prompt-tokens", type=int, default=3000, help="prompt length (batch)")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens a prompt")
    ap.add_argument("--out", default="results/bench/gpu")
    ap.add_argument("--no-record", action="store_true", help="report: do not rewrite benchmarks/RESULTS.md")
    ap.add_argument("--commit", help="report: the commit measured (the tree on a GPU machine has no .git)")
    a = ap.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    if a.step == "report":
        print(report(a))
        return
    torch.manual_seed(0)
    with torch.no_grad():  # not inference_mode: its tensors have no version counter, which the fast path reads
        result = globals()[f"step_{a.step}"](a)
    name = a.step if a.step in ("syncs", "gemma") else f"{a.step}-{a.arch}"
    write_json(f"{a.out}/probe-{name}.json", {**result, "device": a.device, "dtype": a.dtype,
                                              "provenance": provenance()})
    print(name, result)


if __name__ == "__main__":
    main()
