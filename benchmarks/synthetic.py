"""Engine overhead at real model sizes with random weights: synthetic acceptance (each draft accepted with
probability alpha), the analytic bound, and per-step costs against the memory-bandwidth floor.

python benchmarks/synthetic.py --pair llama --device cuda --dtype bfloat16   (GPU; no download)
python benchmarks/synthetic.py --pair tiny                                    (CPU smoke of the same code)
--captures none graph compile measures our engine eager, with CUDA graphs (GPU only) and compiled (+ graphs on a
GPU) in turn; warm-up, capture and compilation are not timed. transformers' target-only and assisted
generation are timed once, in the same process. Writes {out}/synthetic-{pair}.{json,md} after each mode;
prints the summary tables last.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from diversed.bench import hf_generate, ideal_speedup, step_ms, time_prompts
from diversed.decoding.engine import speculative_generate, synchronize
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.stats import summarize
from diversed.utils import command_line, provenance, record_result, write_json, write_text

# The paper's architectures (public configs), built with random weights: (draft, target).
ARCHITECTURES = {
    "llama": ({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
               "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
               "tie_word_embeddings": True},
              {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
               "tie_word_embeddings": False}),
    "qwen": ({"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
              "tie_word_embeddings": True},
             {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
              "tie_word_embeddings": False}),
    "tiny": ({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "tie_word_embeddings": True},
             {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "tie_word_embeddings": False}),
}


def build(spec: dict, dtype: torch.dtype, device: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(spec)
    cfg = AutoConfig.for_model(spec.pop("model_type"), max_position_embeddings=8192, **spec)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.generation_config.eos_token_id = None
    return model.eval().requires_grad_(False)


def copy_bandwidth(device: str, gib: float = 1.0) -> float:
    """Measured device memory bandwidth (bytes/s) of a large copy: read + write."""
    x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    synchronize(torch.device(device))
    t0 = time.perf_counter()
    for _ in range(5):
        y.copy_(x)
    synchronize(torch.device(device))
    return 2 * x.numel() * 5 / (time.perf_counter() - t0)


def measure(target, draft, prompts: list[list[int]], a: argparse.Namespace, execution: Execution,
            floor: dict) -> dict:
    """Step costs and synthetic-acceptance decoding of our engine with one capture mode."""
    device, capture = torch.device(a.device), execution.capture
    t_step = step_ms(target, prompts[0], execution=execution)
    v_step = step_ms(target, prompts[0], n_tokens=a.K + 1, execution=execution)
    d_step = step_ms(draft, prompts[0], execution=execution)
    c = d_step / t_step

    def timed(fn):
        return time_prompts(fn, prompts, device, warmup=True)

    greedy = {"K": a.K, "max_new_tokens": a.tokens, "sampling": Sampling(temperature=0.0), "eos_token_id": ()}
    t_ar, _ = timed(lambda p: speculative_generate(target, None, p, Decoding("autoregressive", **greedy),
                                                   execution=execution))
    rows = [{"method": f"ours target-only ({capture})", "tokens_per_s": len(prompts) * a.tokens / t_ar,
             "speedup": 1.0}]
    for alpha in a.alphas:
        decoding = Decoding("strict", synthetic_acceptance=alpha, **greedy)
        t, gens = timed(lambda p, d=decoding: speculative_generate(target, draft, p, d, execution=execution))
        s = summarize(gens)
        ideal = ideal_speedup(s["conditional_acceptance"], a.K, c)
        rows.append({"method": f"ours strict ({capture}), synthetic alpha {alpha}",
                     "tokens_per_s": s["new_tokens"] / t, "speedup": t_ar / t, "alpha": s["conditional_acceptance"],
                     "tau": s["mean_acceptance_length"], "ideal_speedup": ideal, "efficiency": (t_ar / t) / ideal})
    t_real, real = timed(lambda p: speculative_generate(target, draft, p, Decoding("strict", **greedy),
                                                        execution=execution))
    return {"capture": capture, "target_step_ms": t_step, "verify_step_ms": v_step, "draft_step_ms": d_step,
            "cost_ratio_c": c, "target_step_over_floor": t_step / floor["target"],
            "draft_step_over_floor": d_step / floor["draft"],
            "target_only_tokens_per_s": len(prompts) * a.tokens / t_ar,
            "strict_real_acceptance_tokens_per_s": len(prompts) * a.tokens / t_real, "rows": rows,
            "tokens": [g.tokens for g in real]}


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Fraction of greedy tokens equal position by position (bf16 rounding may flip near-ties of random weights)."""
    pairs = [(x, y) for ta, tb in zip(a, b, strict=True) for x, y in zip(ta, tb, strict=True)]
    return sum(x == y for x, y in pairs) / len(pairs)


def markdown(result: dict) -> str:
    f = result["floor_ms"]
    md = [f"# Synthetic acceptance, {result['pair']} shapes, random {result['dtype']} weights, {result['device']}, "
          f"K = {result['K']}", "",
          f"copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s; HBM floor (weight bytes / bandwidth): target "
          f"{f['target']:.2f} ms, draft {f['draft']:.2f} ms. transformers (eager, random weights, real "
          f"verification, K = {result['K']}): target-only {result['hf_target_tokens_per_s']:.1f} tok/s, assisted "
          f"{result['hf_assisted_tokens_per_s']:.1f} tok/s.", "",
          "| capture | target step ms (x floor) | verify K+1 ms | draft step ms (x floor) | c | ours target-only / HF "
          "target-only | ours strict / HF assisted | greedy tokens = eager |", "|---|---|---|---|---|---|---|---|"]
    for m in result["captures"]:
        if "error" in m:
            md.append(f"| {m['capture']} | failed: {m['error']} | | | | | | |")
            continue
        md.append(f"| {m['capture']} | {m['target_step_ms']:.2f} ({m['target_step_over_floor']:.2f}x) | "
                  f"{m['verify_step_ms']:.2f} | {m['draft_step_ms']:.2f} ({m['draft_step_over_floor']:.2f}x) | "
                  f"{m['cost_ratio_c']:.3f} | {m['target_only_tokens_per_s'] / result['hf_target_tokens_per_s']:.2f} | "
                  f"{m['strict_real_acceptance_tokens_per_s'] / result['hf_assisted_tokens_per_s']:.2f} | "
                  f"{m.get('tokens_equal_to_eager', float('nan')):.3f} |")
    md += ["", "| method | tokens/s | speedup | alpha | tau | ideal | efficiency |", "|---|---|---|---|---|---|---|"]
    for m in result["captures"]:
        for r in m.get("rows", []):
            md.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f} | "
                      f"{r.get('alpha', float('nan')):.3f} | {r.get('tau', float('nan')):.2f} | "
                      f"{r.get('ideal_speedup', float('nan')):.2f} | {r.get('efficiency', float('nan')):.2f} |")
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", choices=sorted(ARCHITECTURES), default="llama")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("-K", type=int, default=5)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.6, 0.8, 0.9])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--captures", nargs="+", choices=["none", "graph", "compile"], default=["none"],
                    help="capture modes of our engine, measured in turn (the results file is rewritten after each)")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--no-record", action="store_true", help="do not rewrite the section of benchmarks/RESULTS.md")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    draft, target = (build(spec, dtype, a.device) for spec in ARCHITECTURES[a.pair])
    prompts = [list(range(10 + i, 74 + i)) for i in range(a.prompts)]
    bw = copy_bandwidth(a.device, 1.0 if a.device.startswith("cuda") else 0.25)
    floor = {name: 1000 * sum(p.numel() * p.element_size() for p in m.parameters()) / bw
             for name, m in (("draft", draft), ("target", target))}
    execution = Execution.here()
    result = {"pair": a.pair, "device": a.device, "dtype": a.dtype, "K": a.K, "tokens": a.tokens,
              "prompts": a.prompts, "copy_bandwidth_GBps": bw / 1e9, "floor_ms": floor, "captures": [],
              "execution": dataclasses.asdict(execution), **provenance()}
    for name, fn in (("hf_target_tokens_per_s", lambda p: hf_generate(target, p, max_new_tokens=a.tokens)),
                     ("hf_assisted_tokens_per_s",
                      lambda p: hf_generate(target, p, max_new_tokens=a.tokens, draft=draft, K=a.K))):
        t, outs = time_prompts(fn, prompts, torch.device(a.device), warmup=True)
        result[name] = sum(len(o) for o in outs) / t
    tokens = {}  # capture -> greedy tokens with real verification
    for capture in sorted(a.captures, key=lambda c: c != "none"):  # eager first: the reference for agreement
        try:
            m = measure(target, draft, prompts, a, dataclasses.replace(execution, capture=capture), floor)
            tokens[capture] = m.pop("tokens")
            if "none" in tokens:
                m["tokens_equal_to_eager"] = agreement(tokens[capture], tokens["none"])
            result["captures"].append(m)
        except Exception as e:  # one failing mode must not lose the others' measurements
            result["captures"].append({"capture": capture, "error": f"{type(e).__name__}: {e}"[:300]})
        write_json(f"{a.out}/synthetic-{a.pair}.json", result)
        write_text(f"{a.out}/synthetic-{a.pair}.md", markdown(result))
    print(markdown(result))
    if not a.no_record:
        record_result(f"Synthetic acceptance, {a.pair} shapes, {a.device}", markdown(result).split("\n", 1)[1],
                      command_line())


if __name__ == "__main__":
    main()
