#!/usr/bin/env bash
# One-call GPU benchmark (<= 8 minutes on one H200): synthetic acceptance at the paper's 1B/8B and
# 0.6B/8B shapes with random bf16 weights (no download), then the embedded-pair bench if it was built.
# Everything lands under ${OUT:-results/bench/gpu}; the summary tables are printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-results/bench/gpu}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
for pair in llama qwen; do
  timeout 200 python benchmarks/synthetic.py --pair "$pair" --device cuda --dtype bfloat16 --tokens 128 --prompts 3 \
    --out "$out" > "$out/synthetic-$pair.log" 2>&1 || echo "synthetic $pair failed: see $out/synthetic-$pair.log"
done
if [ -f resources/models/smollm2-135m-instruct/config.json ]; then
  timeout 120 diversed bench --device cuda --dtype bfloat16 --repeats 3 --out "$out/embedded" > "$out/embedded.log" 2>&1 \
    || echo "embedded bench failed: see $out/embedded.log"
fi
for f in "$out"/synthetic-*.md "$out"/embedded/bench.md; do [ -f "$f" ] && { echo; cat "$f"; }; done
