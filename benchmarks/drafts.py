"""Compare embedded drafts: cost per step and acceptance against the embedded target on the tasks' eval prompts.

python benchmarks/drafts.py --drafts embedded-weak:1 embedded-weak:2 embedded:2
(after `diversed prepare-models --kind KIND --draft-layers N` for each). Writes results/bench/drafts.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses

from diversed.bench import step_ms
from diversed.decoding.engine import speculative_generate
from diversed.decoding.models import draft_vocabulary, encode_prompt, load_model, load_tokenizer
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.stats import summarize
from diversed.tasks import get_task
from diversed.utils import command_line, provenance, record_result, write_json, write_text

SETTINGS = {"strict": {"verifier": "strict"}, "fixed w=0.5": {"verifier": "fixed", "weight": 0.5}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafts", nargs="+", default=["embedded-weak:1", "embedded-weak:2", "embedded:2"],
                    help="NAME:LAYERS of each embedded draft")
    ap.add_argument("--tasks", nargs="+", default=["arith", "open"])
    ap.add_argument("--prompts", type=int, default=12, help="eval prompts per task")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("-K", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--no-record", action="store_true", help="do not rewrite the section of benchmarks/RESULTS.md")
    a = ap.parse_args()
    tok = load_tokenizer("embedded")
    target = load_model("embedded")
    prompts = {t: [encode_prompt(tok, ex.prompt) for ex in get_task(t).examples("eval", a.prompts, seed=0)]
               for t in a.tasks}
    execution = Execution.here()
    first = prompts[a.tasks[0]][0]
    t_step = step_ms(target, first, execution=execution)
    rows = []
    for spec in a.drafts:
        name, layers = spec.split(":")
        draft = load_model(name, role="draft", draft_layers=int(layers))
        rows_v = draft_vocabulary(draft)
        row = {"draft": spec, "vocab rows": len(rows_v) if rows_v else target.config.vocab_size,
               "draft ms": step_ms(draft, first, execution=execution), "target ms": t_step}
        row["c"] = row["draft ms"] / t_step
        for task, ids_list in prompts.items():
            for setting, kw in SETTINGS.items():
                decoding = Decoding(K=a.K, max_new_tokens=a.max_new_tokens, sampling=Sampling(a.temperature), **kw)
                gens = [speculative_generate(target, draft, ids, decoding, execution=execution,
                                             seed=i)
                        for i, ids in enumerate(ids_list)]
                row[f"{task} {setting}"] = summarize(gens)["conditional_acceptance"]
        rows.append(row)
        print(row, flush=True)
    write_json("results/bench/drafts.json", {"rows": rows, "K": a.K, "temperature": a.temperature,
                                             "execution": dataclasses.asdict(execution), **provenance()})
    cols = list(rows[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |"
           for r in rows]
    write_text("results/bench/drafts.md", "\n".join(md) + "\n")
    if not a.no_record:
        record_result("Embedded drafts", "\n".join(md), command_line())


if __name__ == "__main__":
    main()
