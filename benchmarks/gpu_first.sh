#!/usr/bin/env bash
# The first GPU contact, in order of information per second, sized for one 15-minute loan of a GPU machine: its step
# limits sum to 270 s (the command about 300 s with imports and packing), so a second attempt after a fix fits.
# Random weights at the paper's shapes, nothing downloaded.
#  0. the installed torch and transformers are in the supported range (diversed.compat), else stop at once
#  1. one head-training step and one SFT fine-tuning step on the tiny pair, CUDA, bf16 and float32 (tests/test_gpu.py)
#  2. the rest of tests/test_gpu.py but torch.compile (captured steps = eager tokens, determinism, bf16 fast path)
#  3. host synchronisations per speculative step (CUDA's sync debug mode)
#  4. batch 32, 3,000-token prompts, target alone and strict at the Llama and Qwen shapes: prefill and decode steps
#     timed apart, ms a step against cost.step_ms, tokens/s, peak memory
#  5. batch 1 on the Qwen shapes: eager against CUDA graphs (every graph captured before any clock)
#  6. a tiny Gemma 3 pair decodes; 7. tokens at batch 1 against batch 8 (Llama shapes)
# What comes back from the machine is at most 8 files: $OUT holds three, summary.md (also printed last), gpu.log (every
# step's log) and results.tar.gz (the probe files, the logs, the RESULTS.md section). The tree travels without .git:
# `bash benchmarks/gpu_first.sh --prepare` writes benchmarks/.prepared (the commit) beforehand; carry it along.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--prepare" ]]; then
  { git rev-parse HEAD; git status --porcelain --untracked-files=no | head -c 2000; } > benchmarks/.prepared
  echo "prepared: $(head -n 1 benchmarks/.prepared)"; exit 0
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1
out="${OUT:-results/bench/gpu-out}"
work="results/bench/gpu"
mkdir -p "$out" "$work"
commit="$(head -n 1 benchmarks/.prepared 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)"
log="$out/gpu.log"
{ echo "commit $commit"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; } \
  | tee "$work/gpu.txt" > "$log"
if ! python3 -m diversed.compat >> "$work/gpu.txt" 2>&1; then  # check_versions: one line, before any model
  tee "$out/summary.md" < "$work/gpu.txt"; exit 2
fi
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$work/$name.log" 2>&1
  echo "$name: rc $? in $((SECONDS - t0)) s (limit $limit): $(tail -n 1 "$work/$name.log" | cut -c1-160)" \
    | tee -a "$work/gpu.txt"
  { echo "===== $name"; cat "$work/$name.log"; } >> "$log"
}
step train 30 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_gpu.py -k "training"
step test_gpu 45 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_gpu.py -k "not compile and not training"
probe() { step "$1" "$2" python3 benchmarks/gpu_probe.py "${@:3}" --device cuda --out "$work"; }
probe syncs 20 syncs --dtype float32
probe batch-llama 55 batch --arch llama
probe batch-qwen 45 batch --arch qwen
probe graphs-qwen 30 graphs --arch qwen --tokens 64
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True probe gemma 15 gemma  # transformers' modules: no graph captured
probe agreement-llama 30 agreement --arch llama --tokens 16 --rows 8
python3 benchmarks/gpu_probe.py report --out "$work" --commit "$commit" > "$work/summary.md" 2>> "$log"
cp benchmarks/RESULTS.md "$work/RESULTS.md"  # with the section the report rewrote
tar -czf "$out/results.tar.gz" -C "$work" . 2>> "$log"
cp "$work/summary.md" "$out/summary.md"
cat "$out/summary.md"  # last: in the output's tail even if the files do not come back
