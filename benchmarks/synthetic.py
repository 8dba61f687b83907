"""Engine overhead at real model sizes with random weights: synthetic acceptance (each draft accepted with
probability alpha), the analytic bound, and per-step costs against the memory-bandwidth floor.

python benchmarks/synthetic.py --pair llama --device cuda --dtype bfloat16   (GPU; no download)
python benchmarks/synthetic.py --pair tiny                                    (CPU smoke of the same code)
--capture graph | compile runs our fixed-shape steps as CUDA graphs / compiled (warm-up and capture untimed).
Writes {out}/synthetic-{pair}-{capture}.{json,md}; prints the summary table last.
"""

from __future__ import annotations

import argparse
import time

import torch

from diversed.bench import hf_generate, ideal_speedup, step_ms
from diversed.engine import _sync, autoregressive_generate, speculative_generate, summarize
from diversed.utils import provenance, write_json, write_text

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
    _sync(torch.device(device))
    t0 = time.perf_counter()
    for _ in range(5):
        y.copy_(x)
    _sync(torch.device(device))
    return 2 * x.numel() * 5 / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", choices=sorted(ARCHITECTURES), default="llama")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("-K", type=int, default=5)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.6, 0.8, 0.9])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--capture", choices=["none", "graph", "compile"], default="none")
    ap.add_argument("--out", default="results/bench")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    draft, target = (build(spec, dtype, a.device) for spec in ARCHITECTURES[a.pair])
    prompts = [list(range(10 + i, 74 + i)) for i in range(a.prompts)]
    bw = copy_bandwidth(a.device, 1.0 if a.device.startswith("cuda") else 0.25)
    floor = {name: 1000 * sum(p.numel() * p.element_size() for p in m.parameters()) / bw
             for name, m in (("draft", draft), ("target", target))}
    t_step, d_step = step_ms(target, prompts[0], capture=a.capture), step_ms(draft, prompts[0], capture=a.capture)
    c = d_step / t_step

    def timed(fn):
        fn(prompts[0])  # warm-up
        _sync(torch.device(a.device))
        t0 = time.perf_counter()
        out = [fn(p) for p in prompts]
        _sync(torch.device(a.device))
        return time.perf_counter() - t0, out

    kw = {"max_new_tokens": a.tokens, "temperature": 0.0, "eos_token_id": [], "capture": a.capture}
    t_ar, _ = timed(lambda p: autoregressive_generate(target, p, **kw))
    rows = [{"method": "ours target-only", "tokens_per_s": a.prompts * a.tokens / t_ar, "speedup": 1.0}]
    for alpha in a.alphas:
        t, gens = timed(lambda p, alpha=alpha: speculative_generate(target, draft, p, verifier="strict", K=a.K,
                                                                    synthetic_acceptance=alpha, **kw))
        s = summarize(gens)
        ideal = ideal_speedup(s["conditional_acceptance"], a.K, c)
        rows.append({"method": f"ours strict, synthetic alpha {alpha}", "tokens_per_s": s["new_tokens"] / t,
                     "speedup": t_ar / t, "alpha": s["conditional_acceptance"], "tau": s["mean_acceptance_length"],
                     "ideal_speedup": ideal, "efficiency": (t_ar / t) / ideal})
    t_ours, _ = timed(lambda p: speculative_generate(target, draft, p, verifier="strict", K=a.K, **kw))
    t_hf, _ = timed(lambda p: hf_generate(target, p, max_new_tokens=a.tokens, draft=draft, K=a.K))
    result = {"pair": a.pair, "device": a.device, "dtype": a.dtype, "K": a.K, "capture": a.capture,
              "copy_bandwidth_GBps": bw / 1e9,
              "target_step_ms": t_step, "draft_step_ms": d_step, "cost_ratio_c": c,
              "target_floor_ms": floor["target"], "draft_floor_ms": floor["draft"],
              "target_step_over_floor": t_step / floor["target"], "draft_step_over_floor": d_step / floor["draft"],
              "ours_strict_vs_hf_assisted_real_acceptance": t_hf / t_ours, "rows": rows, **provenance()}
    md = [f"# Synthetic acceptance, {a.pair} shapes, random {a.dtype} weights, {a.device}, K = {a.K}, "
          f"capture {a.capture}", "",
          f"copy bandwidth {bw / 1e9:.0f} GB/s; target step {t_step:.2f} ms ({t_step / floor['target']:.2f}x its "
          f"floor {floor['target']:.2f} ms); draft step {d_step:.2f} ms ({d_step / floor['draft']:.2f}x its floor "
          f"{floor['draft']:.2f} ms); c = {c:.3f}; ours strict / transformers assisted (random weights, real "
          f"verification, same K): {t_hf / t_ours:.2f}x", "",
          "| method | tokens/s | speedup | alpha | tau | ideal | efficiency |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f} | {r.get('alpha', float('nan')):.3f}"
                  f" | {r.get('tau', float('nan')):.2f} | {r.get('ideal_speedup', float('nan')):.2f} | "
                  f"{r.get('efficiency', float('nan')):.2f} |")
    write_json(f"{a.out}/synthetic-{a.pair}-{a.capture}.json", result)
    write_text(f"{a.out}/synthetic-{a.pair}-{a.capture}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
