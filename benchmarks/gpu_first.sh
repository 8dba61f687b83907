#!/usr/bin/env bash
# The first GPU contact, in order of information per second; step timeouts sum to 440 s (one H200, random weights
# at the paper's shapes, nothing downloaded). Each step writes its file under $OUT as it ends, so a timeout keeps
# what finished; the last step writes the "GPU first contact" section of benchmarks/RESULTS.md from them.
#  1. one head-training step and one SFT fine-tuning step on the tiny pair, CUDA, bf16 and float32 (tests/test_gpu.py)
#  2. the rest of tests/test_gpu.py but torch.compile (captured steps = eager tokens, determinism, bf16 fast path)
#  3. host synchronisations per speculative step (CUDA's sync debug mode)
#  4. batch 32, 3,000-token prompts, target alone and strict at the Llama and Qwen shapes: ms a step against
#     cost.step_ms, tokens/s, peak memory
#  5. batch 1 on the Qwen shapes: eager against CUDA graphs
#  6. a tiny Gemma 3 pair decodes; 7. tokens at batch 1 against batch 32 (Llama shapes)
# The machine's image may hold older torch/transformers than the pins: the pinned transformers wheel, downloaded
# beforehand with `pip download transformers==<pin> --no-deps -d .whl` and carried in .whl/, is installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1
out="${OUT:-results/bench/gpu}"
mkdir -p "$out"
if compgen -G ".whl/transformers-*.whl" > /dev/null; then
  timeout 60 python3 -m pip install -q --no-deps .whl/transformers-*.whl > "$out/pip.log" 2>&1 || echo "pip: rc $?"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name: rc $? in $((SECONDS - t0)) s (limit $limit): $(tail -n 1 "$out/$name.log" | cut -c1-160)" | tee -a "$out/gpu.txt"
}
step train 40 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_gpu.py -k "training"
step test_gpu 60 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_gpu.py -k "not compile and not training"
probe() { step "$1" "$2" python3 benchmarks/gpu_probe.py "${@:3}" --device cuda --out "$out"; }
probe syncs 30 syncs --dtype float32
probe batch-llama 85 batch --arch llama
probe batch-qwen 75 batch --arch qwen
probe graphs-qwen 45 graphs --arch qwen --tokens 64
probe gemma 20 gemma
probe agreement-llama 70 agreement --arch llama --tokens 16
python3 benchmarks/gpu_probe.py report --out "$out" | tail -n 40
cp benchmarks/RESULTS.md "$out/RESULTS.md"  # with the section the report rewrote
