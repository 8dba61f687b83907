"""Quality and fidelity on the embedded pair: arith, humaneval and the open-ended set, decoded by the target
alone, the draft alone, strict SD and the static ensemble (fixed w = 0.5), then scored (lm-eval replay).

python benchmarks/embedded_quality.py [--temperature 0] [--out results/bench/quality]
Writes {out}/quality.{csv,md} and the runs under {out}/runs; prints the table last.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from diversed.runs.evaluate import score_run
from diversed.runs.run import Run, RunConfig, execute, task_prompts
from diversed.utils import command_line, record_result, write_text

TASKS = {"arith": {"n": 30, "max_new_tokens": 48}, "humaneval": {"n": 12, "max_new_tokens": 192},
         "open": {"n": 12, "max_new_tokens": 64}}
METHODS = {"target only": {"verifier": "autoregressive"}, "draft only": {"verifier": "draft"},
           "strict": {"verifier": "strict"}, "fixed w=0.5": {"verifier": "fixed", "weight": 0.5}}
COLUMNS = ["task", "method", "metric", "quality", "target_logprob", "target_argmax_agreement",
           "draft_acceptance_rate", "mean_acceptance_length", "bias_tv", "tokens_per_s", "prompts"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("-K", type=int, default=5)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--out", default="results/bench/quality")
    ap.add_argument("--no-record", action="store_true", help="do not rewrite the section of benchmarks/RESULTS.md")
    a = ap.parse_args()
    out = Path(a.out)
    rows = []
    for task in a.tasks:
        for method, kw in METHODS.items():
            cfg = RunConfig(task=task, K=a.K, temperature=a.temperature, seed=0, **TASKS[task], **kw)
            run = execute(cfg, task_prompts(cfg), out / "runs", labels={"task": task, "method": method})
            score_run(run)
            rows.append(Run(run).row())
            r = rows[-1]
            print(json.dumps({k: r[k] for k in COLUMNS}), flush=True)
    df = pd.DataFrame(rows)[COLUMNS]
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "quality.csv", df.to_csv(index=False))
    md = (f"Embedded pair, T = {a.temperature:g}, K = {a.K}; quality in each task's metric "
          f"(open: mean target log p, no reference)\n\n" + df.to_markdown(index=False, floatfmt=".3f") + "\n")
    write_text(out / "quality.md", md)
    if not a.no_record:
        record_result("Embedded quality", md, command_line())
    print(md)


if __name__ == "__main__":
    main()
