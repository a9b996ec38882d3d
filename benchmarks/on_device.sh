#!/usr/bin/env bash
# Run benchmark scripts on the lent GPU machine in one call (device time is scarce: batch them).
# Usage (from the repo root, on the GPU machine): bash benchmarks/on_device.sh SECONDS SCRIPT [ARGS...] -- SCRIPT ...
# Each script runs with the checkout on PYTHONPATH (no install: the machine has no network) and
# its own time limit; logs and outputs go to $OUT (or .gpu_out/ when OUT is unset).
set -uo pipefail
out="${OUT:-.gpu_out}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True
limit="$1"; shift
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
while [ $# -gt 0 ]; do
  cmd=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  name=$(basename "${cmd[0]}" .py)
  echo "=== $name (limit ${limit}s) ==="
  timeout -k 10 "$limit" python3 "${cmd[@]}" --out "$out" 2>&1 | tee "$out/$name.log" | tail -n 60
  echo "=== $name exit ${PIPESTATUS[0]} ==="
done
