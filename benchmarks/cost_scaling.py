"""Cost scaling of the engine on CPU with a tiny random pair: time vs number of prompts (1, 10, 100) at 64
tokens, and vs output length (64, 256, 1024) for one prompt; per-step time by context length.

python benchmarks/cost_scaling.py   -> results/bench/cost_scaling.{json,md}
Linear growth shows as a constant time per token; a per-step slowdown with context beyond attention's
own would show as ms/step rising from 64 to 1024 new tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from diversed.decoding.engine import speculative_generate
from diversed.decoding.models import truncated_draft
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.utils import command_line, provenance, record_result, write_json, write_text


def tiny_pair():
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    torch.manual_seed(0)
    target = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    return target, truncated_draft(target, 1)


def decode(target, draft, prompts: int, tokens: int, execution: Execution, seed: int = 0):
    t0 = time.perf_counter()
    decoding = Decoding("fixed", weight=0.5, K=5, max_new_tokens=tokens, sampling=Sampling(1.0), eos_token_id=())
    gens = [speculative_generate(target, draft, [1, 10 + i % 100, 20], decoding,
                                 seed=seed + i, execution=execution)
            for i in range(prompts)]
    return time.perf_counter() - t0, gens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-record", action="store_true", help="do not rewrite the section of benchmarks/RESULTS.md")
    a = ap.parse_args()
    target, draft = tiny_pair()
    execution = Execution.here()
    decode(target, draft, 2, 32, execution)  # warm-up
    rows = []
    for prompts, tokens in [(1, 64), (10, 64), (100, 64), (1, 256), (1, 1024)]:
        seconds, gens = decode(target, draft, prompts, tokens, execution)
        n_tokens = sum(len(g.tokens) for g in gens)
        steps = sum(g.steps for g in gens)
        rows.append({"prompts": prompts, "new_tokens_each": tokens, "seconds": seconds,
                     "ms_per_token": 1000 * seconds / n_tokens, "ms_per_step": 1000 * seconds / steps,
                     "tau": n_tokens / steps})
        print(rows[-1], flush=True)
    write_json("results/bench/cost_scaling.json",
               {"rows": rows, "execution": dataclasses.asdict(execution), **provenance()})
    md = ["| prompts | new tokens each | seconds | ms/token | ms/step | tau |", "|---|---|---|---|---|---|"]
    md += [f"| {r['prompts']} | {r['new_tokens_each']} | {r['seconds']:.2f} | {r['ms_per_token']:.3f} | "
           f"{r['ms_per_step']:.3f} | {r['tau']:.2f} |" for r in rows]
    write_text("results/bench/cost_scaling.md", "\n".join(md) + "\n")
    if not a.no_record:
        record_result("Cost scaling", "\n".join(md), command_line())
    print("\n".join(md))


if __name__ == "__main__":
    main()
