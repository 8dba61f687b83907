#!/usr/bin/env bash
# One-call GPU check and benchmark (<= 8 minutes on one H200; no download, random weights):
#  1. tests/test_gpu.py: CUDA-graph and compiled steps emit the eager tokens, seeded decoding is deterministic,
#     the bf16 fast path matches transformers (about 1 minute);
#  2. synthetic acceptance at the paper's Llama-3.2-1B / Llama-3.1-8B shapes, eager, CUDA graphs and compiled;
#  3. the same at the Qwen3-0.6B / Qwen3-8B shapes, eager and CUDA graphs;
#  4. the embedded-pair bench, if its models were built on this machine.
# Everything lands under ${OUT:-results/bench/gpu} (results are rewritten after each mode, so a timeout keeps
# what finished); the summary tables are printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1
out="${OUT:-results/bench/gpu}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py > "$out/test_gpu.log" 2>&1
echo "tests/test_gpu.py: rc $? ($(tail -n 1 "$out/test_gpu.log"))" | tee -a "$out/gpu.txt"
syn() {  # pair, seconds, captures...
  local pair=$1 limit=$2; shift 2
  timeout "$limit" python3 benchmarks/synthetic.py --pair "$pair" --device cuda --dtype bfloat16 --tokens 96 \
    --prompts 2 --captures "$@" --out "$out" > "$out/synthetic-$pair.log" 2>&1 \
    || echo "synthetic $pair: rc $? (partial results kept): see $out/synthetic-$pair.log"
}
syn llama 230 none graph compile
syn qwen 110 none graph
if [ -f resources/models/smollm2-135m-instruct/config.json ]; then
  timeout 60 python3 -m diversed.cli bench --device cuda --dtype bfloat16 --repeats 3 --capture graph \
    --out "$out/embedded" > "$out/embedded.log" 2>&1 || echo "embedded bench failed: see $out/embedded.log"
fi
for f in "$out"/synthetic-*.md "$out"/embedded/bench.md; do [ -f "$f" ] && { echo; cat "$f"; }; done
cp benchmarks/RESULTS.md "$out/RESULTS.md"  # with the sections the runs above rewrote
