"""Choose the embedded draft depth: acceptance and draft/target cost for drafts of N target layers.

python benchmarks/draft_layers.py --layers 1 2 4 6   (after `diversed prepare-models --draft-layers 1 2 4 6`)
Writes results/bench/draft_layers.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from diversed.bench import PROMPTS, step_ms
from diversed.engine import Execution, Sampling, speculative_generate
from diversed.models import encode_prompt, load_model, load_tokenizer
from diversed.stats import summarize
from diversed.utils import command_line, provenance, record_result, write_json, write_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 6])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("-K", type=int, default=5)
    ap.add_argument("--no-record", action="store_true", help="do not rewrite the section of benchmarks/RESULTS.md")
    a = ap.parse_args()
    tok = load_tokenizer("embedded")
    target = load_model("embedded")
    prompts = [encode_prompt(tok, t) for t in PROMPTS[: a.prompts]]
    execution = Execution.from_env()
    t_step = step_ms(target, prompts[0], execution=execution)
    rows = []
    for n in a.layers:
        draft = load_model("embedded", role="draft", draft_layers=n)
        row = {"draft_layers": n, "draft_ms": step_ms(draft, prompts[0], execution=execution), "target_ms": t_step}
        row["cost_ratio_c"] = row["draft_ms"] / t_step
        for name, kw in {"greedy_strict": dict(verifier="strict", sampling=Sampling(temperature=0)),
                         "sample_strict": dict(verifier="strict", sampling=Sampling(temperature=1.0)),
                         "sample_fixed_w0.5": dict(verifier="fixed", weight=0.5,
                                                   sampling=Sampling(temperature=1.0))}.items():
            gens = [speculative_generate(target, draft, ids, K=a.K, max_new_tokens=a.max_new_tokens,
                                         generator=torch.Generator().manual_seed(i), eos_token_id=[],
                                         execution=execution, **kw)
                    for i, ids in enumerate(prompts)]
            s = summarize(gens)
            row[f"alpha_{name}"] = s["draft_acceptance_rate"]
            row[f"tau_{name}"] = s["mean_acceptance_length"]
        rows.append(row)
        print(row, flush=True)
    write_json("results/bench/draft_layers.json",
               {"rows": rows, "K": a.K, "execution": dataclasses.asdict(execution), **provenance()})
    cols = list(rows[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |"
           for r in rows]
    write_text("results/bench/draft_layers.md", "\n".join(md) + "\n")
    if not a.no_record:
        record_result("Draft depth", "\n".join(md), command_line())
    print("\n".join(md))


if __name__ == "__main__":
    main()
