#!/usr/bin/env bash
# One device call = one round (device time is scarce: each round batches what belongs together).
# Usage on the GPU machine, from the repo root: bash benchmarks/device_round.sh check|e2e|perf
#   check: GPU-only pytest files (NVRTC, hardware, CUDA + Triton starters on cuda) next to
#          check_cuda_gpu.py, then (alone on the GPU, for clean timings) check_starters_gpu.py
#          without torch.compile, harness_overhead.py and `autokernel-ci gpu --calibrate`.
#   e2e:   the exploit suite on the GPU, end_to_end_gpu.py at the 7B size with torch.compile, then
#          search_agent_gpu.py on four memory-bound types.
#   show:  the exploit suite (60 s hang limit), end_to_end_gpu.py, then `autokernel-ci run --example llama
#          --local` in a scratch git repository: the plan, the journal and the publication (PR body,
#          report.html, plots) come back as show_run.tar.gz (docs/examples/h200-llama/ holds them).
#   perf:  search_agent_gpu.py on the other five types, then every starter (both backends) timed in
#          bf16 at the LLaMA-7B shapes against eager and torch.compile.
#   tune:  the search agent on layernorm, reduce, matmul, flash_attention, fused_mlp, then
#          benchmarks/variants_gpu.py over benchmarks/variants/{matmul,flash_attention,fused_mlp}.json.
#   second: the search agent at fp16 on the GPT-2 shapes (issue #7: not tuned to one shape set).
#   perf2: the Triton starters timed at fp16 on the GPT-2 shapes and at fp32 on the LLaMA shapes.
#   cuda16: the CUDA matmul and flash attention (cp.async + mma.sync) checked on every set and timed per
#          CONFIG, the CUDA starters' GPU tests, then the Triton GEMM/attention starters on every set.
#   table: the CUDA GEMM/attention re-checked at their new defaults, every starter (both backends) timed
#          in bf16 at the LLaMA-7B shapes, end_to_end_gpu.py at the 7B size.
#   flash2: every starter timed in bf16 at the LLaMA-7B shapes, the attention variants of
#          benchmarks/variants/flash_attention.json checked on every set and timed, end_to_end_gpu.py.
#   flash3: the attention variants of benchmarks/variants/flash_attention.json, then perf2.
#   hopper: the CUDA wgmma + TMA matmul checked and timed; flash attention, reduce and softmax variants at
#          the GPT-2 shapes in fp16 (also timed from a CUDA graph: host overhead vs kernel time).
#   hopper2: the CUDA wgmma flash attention checked and timed; the wgmma matmul re-checked and timed.
#   verify_cuda: GPU pytest of the CUDA / NVRTC files, `autokernel-ci verify` of four CUDA starters, the wgmma
#          flash attention's CONFIG points checked on every set in fp16 and timed, aftereffect.
#   verify2: the CUDA GPU tests (stress cases too), `autokernel-ci verify` of all 18 starters, timing_lead.py, the
#          starter table (bf16, LLaMA-7B shapes, no torch.compile).
#   verify3: the CUDA starters' GPU stress / reference tests, `verify` of the CUDA matmul, the search agent at
#          fp16 on the GPT-2 shapes for layernorm, rmsnorm, rotary, reduce.
#   second2: the search agent at fp16 on the GPT-2 shapes for the five types verify3 did not run.
#   pipeline: the CUDA wgmma flash attention's WG_PIPELINE schedules checked on every set, timed; their GPU tests.
#   pipeline2: the CUDA attention's new default and WG_PIN: GPU tests, `verify`, checked on every set in bf16 and
#          fp16 and timed; ncu counters of the matmul and attention starters next to cuBLAS / SDPA.
#   matmul2: the CUDA matmul's WG_PERSISTENT / WG_TMA_STORE / WG_L2_PROMOTION points checked on every set (bf16,
#          fp16) and timed; GPU tests of tensor maps and the CUDA starters' matmul.
#   matmul3: the CUDA matmul's persistent + TMA-store default: GPU tests, `verify`, split-store points timed twice.
#   gluon_ws: the warp-specialised Gluon attention (a load warp, two consumer warpgroups): GPU tests, `verify`,
#          checked on every set and timed against the default.
#   gluon_ws2: the Gluon attention's PINGPONG and 64-key-block points: GPU tests, checked and timed (bf16, fp16,
#          fp16 GPT-2 also from a CUDA graph).
#   final7: Triton attention GPU tests (new gluon_ws default), `verify`, the starter table, ncu of causal attention.
#   gluon_ws3: Triton attention GPU tests and `verify` after the tile-loop refactor; PERSISTENT checked + timed.
#   final8: Triton attention GPU tests (launches counted per kernel, fallbacks) and `verify` after the review.
#   review: Triton GEMM / Gluon attention GPU tests and `verify` of both GEMM files after the review.
#   launch: host time a call of the Triton GEMM / attention kernels by variant (cProfile of the launch path).
#   launch_cuda: the same for the nine CUDA starters (next to eager), and one CUDA launch split into its steps.
#   final12: the CUDA matmul at GROUP_M 16: GPU tests, `verify`, the matmul table rows (both backends).
#   cuda_mm_group: the CUDA matmul at GROUP_M 16 / 3 stages + whole-tile store against its default.
#   gpt2_gemm: the Gluon matmul / fused MLP defaults against tma at GPT-2 shapes, fp16.
#   final11: the Gluon matmul default: GPU tests, `verify`, its starter-table rows.
#   matmul_gluon2: the Gluon matmul with 32-wide k steps and 4-6 stages, checked + timed.
#   matmul_gluon: the Triton matmul's warp-specialised Gluon kernel: GPU tests, checked on every set + timed.
#   final10: fused MLP GPU tests, `verify`, its default against tma (bf16, fp16), fp32 tiles, its table row.
#   final9: fused MLP + CUDA attention GPU tests, `verify` of the fused MLP, its fp32 tiles (table9: their table rows).
#   gluon_mlp: the fused MLP's warp-specialised Gluon gate/up kernel checked on every set + timed (bf16, fp16).
#   ncu_flash_nc: ncu of not-causal attention: SDPA, Gluon, the CUDA default and its Gluon-like schedule.
#   flash_table: the attention rows of the starter table for the committed Gluon kernel.
#   persist: the CUDA attention's persistent walk (WG_PERSISTENT): GPU tests, `verify`, checked + timed.
#   unmasked: its loop without the causal mask's selects, timed against 8b6b3dc's file (carry benchmarks/variants/base).
#   final13: the CUDA attention's new default: GPU tests, `verify`, bf16 / fp16 timed against 8b6b3dc's file, the
#          GEMM + attention rows of the starter table with the baselines timed in turn (--repeats 3), ncu not causal.
#   pin13: WG_PIN 1 on the CUDA attention's new loop, three alternating pairs a dtype.
#   table13: every starter (both backends) timed with ours / eager / compile in turn three times.
#   ncu_mm: ncu of cuBLAS, the Gluon and the CUDA matmul at 4096x11008x4096.
#   mm_uniform: the CUDA matmul's consumer templated on its warpgroup: GPU tests, `verify`, timed against 2673f77.
#   final14: the GEMM and attention rows, ours / eager / compile in turn five times.
#   prelude14: the CUDA matmul and attention GPU tests and `verify` after desc_plus moved into nvrtc.PRELUDE.
#   rows15: the CUDA row kernels (softmax, cross entropy, reduce, rmsnorm, layernorm) after their rewrite: GPU tests,
#          checked on every set and timed against 287019b's files (bf16 LLaMA, fp16 GPT-2).
#   final15: rows15, clock15, `verify` of the five CUDA row kernels, their starter-table rows (--repeats 3).
#   final15b: layernorm's new default: GPU tests, `verify`; calibration; memory-bound table rows (both backends).
#   evict15: EVICT_FIRST on the CUDA reduce and cross entropy: GPU tests, checked + timed against it off.
#   final15c: `verify` of the CUDA reduce / cross entropy at their EVICT_FIRST defaults, their table rows.
#   final16: softmax at UNROLL 4, launches counting static shared memory: GPU tests, `verify`, timed, table rows.
#   round16: the CUDA matmul's leaner consumer loop and the softmax's vector / shared-memory wide rows: GPU tests,
#          `verify`, timed against bc1752e; the matmul's sustained clock and table rows; final15c.
#   round17: the CUDA softmax's kernels with / without the streaming loop: GPU tests, `verify`, timed against 9b28142.
#   streamk: the CUDA matmul's stream-K: GPU tests, `verify`, timed against 9b28142 and off; sustained clock; softmax UNROLL 4.
#   softmax_wide: the Triton softmax with whole 50257-wide rows in registers (16 / 32 warps) against the default.
#   final17: the CUDA softmax's UNROLL 4 default: GPU tests, `verify`, softmax / cross entropy table rows (bf16, fp16 GPT-2).
#   final17c: the CUDA starters' GPU tests and `verify` of the softmax after scan_vecs.
#   softmax_looped: the Triton softmax's looped kernel with 16 / 32 warps on GPT-2's rows.
#   final17b: the Triton softmax's looped default (8192 x 16 warps): GPU tests, `verify`, its table rows.
#   table18: every starter (both backends), baselines in turn three times; the GPU's calibration.
#   gpu24a: the Triton matmul / fused MLP GPU tests (the fp32 256x256 -> 256x128 narrowing of both) and `verify` of the
#          fused MLP, then the fp32 matmul's F32_BLOCK_K 16 points (benchmarks/variants/matmul_fp32_k16.json) timed.
#   gpu24b: the search agent (bf16, LLaMA-7B, 0.75 min) on softmax, layernorm, cross entropy (search21a's other half);
#          the GEMMs' fp32 table rows (ours / eager / compile in turn three times).
#   confirm25: the search agent with keeps confirmed in turn (the loop's new default) on the three types whose keeps
#          search24c / search24d did not believe (softmax, cross entropy, reduce), fp16 GPT-2 then bf16 LLaMA-7B, 0.75
#          min: how many keeps survive, and experiments an hour against those rounds.
#   evict25: the Triton cross entropy's EVICT_FIRST default against it off, alternating three times, bf16 at the LLaMA
#          shapes and fp16 at GPT-2's (the search agent kept it off on four H100 runs by 1.1-1.4%; the H200's `evict`
#          round measured it on 1.6% faster).
#   search24c: the search agent (bf16, LLaMA-7B, 0.75 min) on all nine types in one run: one table at one code state
#          (gpu24b took 143 s for three types; nine need ~430 s of one call).
#   search24d: the same at fp16 on the GPT-2 shapes (the issue's second shape set; its last table is rounds
#          `second` / `second2` of 2026-12-03, before most of today's starters).
#   fp32mm21: the Triton matmul's fp32 tiles (benchmarks/variants/matmul_fp32.json) checked + timed; interrupt_gpu.py.
#   final22: the Triton matmul's GPU tests and `verify` at its fp32 default tile, its fp32 table rows (ours / eager /
#          compile in turn three times), the loop stopped by a signal on CUDA.
#   screen22: `verify` of the Triton matmul at fp32; the search agent on matmul / attention with candidates timed first
#          (the loop's default), then on the matmul verifying every candidate first (--verify-every).
#   mem23: the search agent (bf16, LLaMA-7B, 0.75 min) on rmsnorm, rotary, reduce (the rows short of 1.25x compile).
#   search21a / search21b / search21c: the search agent's table at the current starters: bf16 on the memory-bound
#          types after the interrupt check (a), fp32 on all nine (b), bf16 on the GEMM-bound three at 1.5 min (c).
#   interrupt20: Ctrl-C / SIGTERM of the loop mid-experiment on the GPU (benchmarks/interrupt_gpu.py: stop time, what is
#          left running, resume); the GEMM and attention rows of the table, ours / eager in turn five times.
#   cluster18: the CUDA matmul's WG_CLUSTER 2 points against its default, alternating (bf16, fp16).
#   final18: the CUDA matmul's clustered-from-K-8192 default: table rows (5 in turn), GPU tests, `verify`.
#   tune18: stages / GROUP_M / L2 promotion around the clustered matmul default; its sustained clock.
#   read19: the reduce starters against read ceilings (CUB's flat sum, a same-bytes copy) under a dirty and a clean
#          L2 flush (benchmarks/read_ceiling_gpu.py); the PERSISTENT points of both reduces checked on every set and
#          timed; the CUDA matmul's GPU tests.
#   table19a / table19b: the starter table in two calls (a backend each, under the 600 s call limit): Triton rows,
#          the calibration and the CUDA reduce's THREADS A/B (default 512 / 2 against the old 256 / 4); CUDA rows and
#          the CUDA matmul's GPU tests (the clustered default's threshold case).
#   norms20: the CUDA layernorm / rmsnorm's EVICT_FIRST / STREAM_STORE points: GPU tests, checked on every set, timed.
#   norms21: the same for WEIGHTS_LATE (weights loaded after the reductions) at three THREADS x CACHE_VECS points.
#   rotary21: the CUDA rotary's EVICT_FIRST (x loaded ld.global.cs) against its default, checked on every set, timed.
#   host16: the CUDA matmul / attention with their launch sizes kept beside their defines (_build): GPU tests, `verify`
#          of both, then host time a call (launch_overhead.py --backend cuda) against the kernel files in OLD_KERNELS
#          (a folder of the earlier kernels/cuda/*.py, copied over a copy of this tree), old and new in turn 3 times.
#   clock15: the matmul at 4096x11008x4096 under sustained load (eager, Triton, CUDA) with the SM clock and power.
#   matmul4: the CUDA matmul's WG_CLUSTER 2 (B multicast to a 2-CTA cluster) checked on every set and timed twice.
#   final5: GPU tests, `verify` of the CUDA matmul, ncu stall reasons of WG_CLUSTER 2, the starter table with compile.
#   final6: WG_CLUSTER 2 without the cluster-scope release, checked + timed; the starter table again.
#   reduce2: the Triton reduce's EVICT_FIRST points checked on every set and timed twice.
#   evict: EVICT_FIRST on softmax, rmsnorm, layernorm, cross entropy, rotary (Triton), checked + timed; reduce's default.
#   aftereffect: benchmarks/profiler_aftereffect.py (harness timings before / after a profiler session).
#   descriptors: the tensor-descriptor (TMA) variants of matmul / fused_mlp / flash attention checked on
#          every shape set and timed (bf16; matmul also fp16 on the GPT-2 shape), the reduce CONFIG
#          grid, NVRTC's >48 KiB shared-memory launch.
# Logs and JSON land in $OUT (packed into $OUT/round.tar.gz at the end); the last lines printed are a summary.
set -uo pipefail
out="${OUT:-.gpu_out}"; mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$out/gpu.txt"
step() {  # step LIMIT NAME CMD... : run with a time limit, log to $out/NAME.log, record the exit code
  local limit="$1" name="$2"; shift 2
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}
cuda_norm_points() {  # cuda_norm_points FILE: the CUDA norms' GPU tests, then FILE's points of layernorm and rmsnorm
  # checked on every set and timed alternating, twice a type
  step 150 pytest_norms env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
    tests/kernels/test_cuda_row_kernels.py tests/kernels/test_cuda_starters.py -k "norm"
  local t run
  for t in layernorm rmsnorm; do
    for run in 1 2; do
      step 90 "variants_${t}_$run" python3 benchmarks/variants_gpu.py "$t" --backend cuda \
        --variants "$1" --sets cpu,edge,odd,gpt2,llama7b --out "$out/${t}_$run"
    done
  done
}
cuda_matmul_variants() {  # cuda_matmul_variants FILE: the CUDA matmul's CONFIG points of FILE checked on every set,
  # timed twice in bf16 (run-to-run spread; the first points of a run time fastest on a cool GPU), once in fp16
  local run
  for run in 1 2; do
    step 150 "variants_matmul_$run" python3 benchmarks/variants_gpu.py matmul --backend cuda \
      --variants "$1" --sets cpu,edge,odd,gpt2,llama7b --out "$out/matmul_$run"
  done
  step 100 variants_matmul_fp16 python3 benchmarks/variants_gpu.py matmul --backend cuda --dtype fp16 \
    --variants "$1" --sets cpu,edge,odd,gpt2,llama7b --out "$out/matmul_fp16"
}
matmul_gpu_tests() {
  step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
    tests/kernels/test_cuda_starters.py -k "gpu and matmul"
}
# The CUDA matmul's GPU tests: every layout, cluster and stress case (the clustered default's K = 8200 case too)
CUDA_MATMUL_TESTS=(tests/test_nvrtc.py tests/kernels/test_cuda_matmul_layout.py tests/kernels/test_cuda_starters.py)
CUDA_MATMUL_FILTER="gpu and (matmul or stress)"
cuda_matmul_gpu_tests() {  # those tests alone (pytest_cuda_matmul), without `verify`
  step 200 pytest_cuda_matmul env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
    "${CUDA_MATMUL_TESTS[@]}" -k "$CUDA_MATMUL_FILTER"
}
kernel_checks() {  # kernel_checks NAME KERNEL_FILE FILTER TEST_FILE...: the GPU tests FILTER selects in TEST_FILEs
  # (pytest_NAME) and `verify` of KERNEL_FILE as it is (verify_NAME, its JSON beside the log)
  # PYTEST_LIMIT: gpu24a's "matmul or fused_mlp" over two files ran 120 of ~140 tests in 200 s on an H100
  local name="$1" file="$2" filter="$3"; shift 3
  step "${PYTEST_LIMIT:-200}" "pytest_$name" env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 "$@" \
    -k "$filter"
  step 90 "verify_$name" python3 -m autokernel_ci verify "$file" --device cuda --json "$out/verify_$name.json"
}
cuda_matmul_against_base() {  # cuda_matmul_against_base NAME VARIANTS: the CUDA matmul's GPU tests and `verify`, then
  # the points of VARIANTS (an earlier file from benchmarks/variants/base/ alternating with the committed one) checked
  # on every set and timed in bf16 (variants_NAME), and checked at the cpu / LLaMA sets and timed in fp16
  kernel_checks cuda_matmul kernels/cuda/matmul.py "$CUDA_MATMUL_FILTER" "${CUDA_MATMUL_TESTS[@]}"
  step 200 "variants_$1" python3 benchmarks/variants_gpu.py matmul --backend cuda \
    --variants "$2" --sets cpu,edge,odd,gpt2,llama7b --out "$out/$1"
  step 120 "variants_$1_fp16" python3 benchmarks/variants_gpu.py matmul --backend cuda --dtype fp16 \
    --variants "$2" --sets cpu,llama7b --out "$out/$1_fp16"
}
cuda_softmax_variants() {  # cuda_softmax_variants FILE SETS: the CUDA softmax's points of FILE checked on SETS and timed
  # in bf16 (LLaMA), then checked on the cpu / gpt2 sets and timed in fp16 at GPT-2's shapes
  step 150 variants_softmax python3 benchmarks/variants_gpu.py softmax --backend cuda \
    --variants "$1" --sets "$2" --out "$out/softmax"
  step 120 variants_softmax_fp16_gpt2 python3 benchmarks/variants_gpu.py softmax --backend cuda --dtype fp16 \
    --variants "$1" --sets cpu,gpt2 --time-set gpt2 --out "$out/softmax_fp16_gpt2"
}
cuda_softmax_checks() {  # every CUDA starter's GPU tests, the launch / shared-memory tests and the softmax's paths, then
  # `verify` of the softmax
  kernel_checks cuda_softmax kernels/cuda/softmax.py "gpu or softmax or shared or launch" tests/test_nvrtc.py \
    tests/kernels/test_cuda_row_kernels.py tests/kernels/test_cuda_starters.py
}
softmax_table_rows() {  # the softmax / cross entropy rows of the starter table (both backends, baselines in turn three
  # times): softmax in bf16 (LLaMA), softmax and cross entropy in fp16 (GPT-2)
  step 150 starters_softmax python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --types softmax \
    --backends triton,cuda --out "$out/table"
  step 150 starters_gpt2 python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 \
    --types softmax,cross_entropy --backends triton,cuda --dtype fp16 --time-set gpt2 --out "$out/table_gpt2"
}
triton_attention_checks() {  # the Triton attention's GPU tests (every spec set, the Gluon kernel's cases and
  # fallbacks) and `verify` of the file as it is
  kernel_checks triton_flash kernels/triton/flash_attention.py "flash_attention or gluon" \
    tests/kernels/test_triton_starters.py
}
second_dtypes() {  # the Triton starters at fp16 on the GPT-2 shapes and at fp32 on the LLaMA shapes
  step 120 starters_fp16_gpt2 python3 benchmarks/check_starters_gpu.py --skip-check --no-compile --backends triton \
    --dtype fp16 --time-set gpt2 --out "$out/fp16_gpt2"
  step 120 starters_fp32 python3 benchmarks/check_starters_gpu.py --skip-check --no-compile --backends triton \
    --dtype fp32 --out "$out/fp32"
}
rows15_round() {  # the CUDA row kernels rewritten (softmax: one SFU exp2 an element from registers; cross entropy and reduce:
  # UNROLL vectors in flight, one-block mean; rmsnorm / layernorm: weights loaded with x): their GPU tests, then
  # each checked on every set in bf16 and timed alternating with 287019b's file (benchmarks/variants/base/),
  # then in fp16 at the GPT-2 shapes
  step 200 pytest_rows env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
    tests/kernels/test_cuda_row_kernels.py tests/kernels/test_cuda_starters.py \
    -k "row_kernels or (gpu and (softmax or cross_entropy or reduce or rmsnorm or layernorm or flash))"
  for t in softmax cross_entropy reduce rmsnorm layernorm; do
    step 150 "variants_$t" python3 benchmarks/variants_gpu.py "$t" --backend cuda \
      --variants "benchmarks/variants/cuda_rows_$t.json" --sets cpu,edge,odd,gpt2,llama7b --out "$out/$t"
  done
  for t in softmax cross_entropy reduce rmsnorm layernorm; do
    step 120 "variants_${t}_fp16_gpt2" python3 benchmarks/variants_gpu.py "$t" --backend cuda --dtype fp16 \
      --variants "benchmarks/variants/cuda_rows_$t.json" --sets cpu,gpt2 --time-set gpt2 --out "$out/${t}_fp16_gpt2"
  done
}
clock15_round() {  # is the CUDA matmul's 0.96x at 4096x11008x4096 the kernel or the clock? Sustained back-to-back calls of
  # cuBLAS, the Gluon and the CUDA kernel in turn (3 s each, twice) with nvidia-smi's SM clock and power beside them
  step 120 sustained_matmul python3 benchmarks/sustained_clock.py matmul --index 1 --backends triton,cuda \
    --out "$out/clock"
}
final15c_round() {  # the EVICT_FIRST defaults (reduce on, cross entropy off): `verify` of both files, their table rows
  for t in reduce cross_entropy; do
    step 60 "verify_cuda_$t" python3 -m autokernel_ci verify "kernels/cuda/$t.py" --device cuda \
      --json "$out/verify_cuda_$t.json"
  done
  step 150 starters_rows python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 \
    --types reduce,cross_entropy --backends triton,cuda --out "$out/table"
}
host16_round() {  # see host16 above; OLD_KERNELS must name a folder of earlier kernels/cuda files
  kernel_checks cuda_matmul kernels/cuda/matmul.py "$CUDA_MATMUL_FILTER" "${CUDA_MATMUL_TESTS[@]}"
  kernel_checks cuda_flash kernels/cuda/flash_attention.py "gpu or hopper or flash" \
    tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_starters.py
  local old=/tmp/old_tree run
  rm -rf "$old" && mkdir -p "$old" && cp -r autokernel_ci benchmarks kernels gpu_specs templates "$old"/ \
    && cp "${OLD_KERNELS:?}"/*.py "$old/kernels/cuda/"
  for run in 1 2 3; do  # the working data goes to /tmp: the device tool brings back 8 files
    step 150 "launch_old$run" env PYTHONPATH="$old" python3 "$old/benchmarks/launch_overhead.py" --backend cuda \
      --out "/tmp/launch_old$run"
    step 150 "launch_new$run" python3 benchmarks/launch_overhead.py --backend cuda --out "/tmp/launch_new$run"
  done
}
case "${1:-check}" in
  check)
    step 200 pytest_gpu python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_nvrtc.py tests/hardware \
      tests/kernels/test_cuda_starters.py tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_matmul_layout.py &
    step 200 pytest_triton_cuda env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 6 \
      tests/kernels/test_triton_starters.py &
    step 200 check_cuda_gpu python3 benchmarks/check_cuda_gpu.py --jobs 3 --out "$out" &
    wait
    step 200 check_starters python3 benchmarks/check_starters_gpu.py --no-compile --out "$out"
    step 120 harness_overhead python3 benchmarks/harness_overhead.py --out "$out"
    step 60 gpu_calibrate python3 -m autokernel_ci gpu --calibrate
    ;;
  e2e)
    step 140 exploits python3 benchmarks/harness_overhead.py --candidates 0 --out "$out"
    step 230 end_to_end python3 benchmarks/end_to_end_gpu.py --out "$out/e2e"
    step 210 search_agent python3 benchmarks/search_agent_gpu.py --minutes 0.75 \
      --types rmsnorm,softmax,cross_entropy,rotary_embedding --out "$out/search"
    ;;
  show)
    step 240 exploits python3 benchmarks/harness_overhead.py --candidates 0 --out "$out"
    step 120 end_to_end python3 benchmarks/end_to_end_gpu.py --out "$out/e2e"
    repo=$(mktemp -d)/model-repo; mkdir -p "$repo"
    git -C "$repo" init -q -b main && echo "# a model repository" > "$repo/README.md"
    git -C "$repo" add README.md && git -C "$repo" -c user.name=dev -c user.email=dev@example.com commit -qm init
    step 240 run_llama python3 -m autokernel_ci run --example llama --local --repo "$repo" --top 3 \
      --budget-minutes 1.5 --run-dir .autokernel-ci/runs/h200
    git -C "$repo" log --all --stat --format='%H %s' > "$out/run_llama_git.txt" 2>&1
    tar -C "$repo" -czf "$out/show_run.tar.gz" .autokernel-ci
    ;;
  perf)
    step 300 search_agent2 python3 benchmarks/search_agent_gpu.py --minutes 0.75 \
      --types layernorm,reduce,matmul,flash_attention,fused_mlp --out "$out/search2"
    step 280 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --out "$out/bf16"
    ;;
  tune)
    step 230 search_agent2 python3 benchmarks/search_agent_gpu.py --minutes 0.5 \
      --types layernorm,reduce,matmul,flash_attention,fused_mlp --out "$out/search2"
    step 110 variants_matmul python3 benchmarks/variants_gpu.py matmul --sets llama7b --out "$out/variants"
    step 60 variants_flash python3 benchmarks/variants_gpu.py flash_attention --sets llama7b --out "$out/variants"
    step 60 variants_fused_mlp python3 benchmarks/variants_gpu.py fused_mlp --sets llama7b --out "$out/variants"
    ;;
  second)  # the search agent at fp16 on the GPT-2 shapes, so a win is not tuned to one shape or dtype
    step 540 search_gpt2_fp16 python3 benchmarks/search_agent_gpu.py --dtype fp16 --shape-set gpt2 --minutes 1 \
      --out "$out/search_gpt2_fp16"
    ;;
  descriptors)
    step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 6 \
      tests/test_nvrtc.py tests/kernels/test_triton_tma_variants.py \
      tests/kernels/test_triton_starters.py -k "nvrtc or tma or matmul or fused_mlp or flash"
    step 150 variants_matmul python3 benchmarks/variants_gpu.py matmul --sets llama7b,gpt2,odd,edge,cpu --out "$out/variants"
    step 60 variants_matmul_fp16 python3 benchmarks/variants_gpu.py matmul --variants benchmarks/variants/matmul_fp16.json \
      --dtype fp16 --sets llama7b,gpt2,odd,edge --time-set gpt2 --out "$out/variants_fp16"
    step 100 variants_flash python3 benchmarks/variants_gpu.py flash_attention --sets llama7b,gpt2,odd,edge,cpu \
      --out "$out/variants"
    step 70 variants_fused_mlp python3 benchmarks/variants_gpu.py fused_mlp --sets llama7b,gpt2,odd,edge,cpu \
      --out "$out/variants"
    step 50 variants_reduce python3 benchmarks/variants_gpu.py reduce --sets llama7b,odd,edge --out "$out/variants"
    ;;
  cuda16)  # the CUDA matmul / flash attention rewrites (cp.async + mma.sync) and the new Triton defaults
    step 200 check_cuda python3 benchmarks/check_cuda_gpu.py --types matmul,flash_attention \
      --sets cpu,edge,odd,gpt2,llama7b --jobs 2 --out "$out" &
    step 200 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_cuda_starters.py tests/kernels/test_triton_tma_variants.py &
    wait
    step 100 variants_cuda_matmul python3 benchmarks/variants_gpu.py matmul --backend cuda \
      --variants benchmarks/variants/cuda_matmul.json --sets cpu,edge,odd --out "$out/variants"
    step 90 variants_cuda_flash python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_attention.json --sets cpu,edge,odd --out "$out/variants"
    step 150 check_triton python3 benchmarks/check_starters_gpu.py --types matmul,fused_mlp,flash_attention \
      --backends triton --no-compile --out "$out/triton"
    ;;
  table)  # the starter table after the CONFIG changes: CUDA GEMM/attention re-checked, every starter timed, 7B model
    step 60 check_cuda python3 benchmarks/check_cuda_gpu.py --types matmul,flash_attention \
      --sets cpu,edge,odd,llama7b --jobs 2 --out "$out"
    step 150 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --no-compile --out "$out/bf16"
    step 150 end_to_end python3 benchmarks/end_to_end_gpu.py --out "$out/e2e"
    ;;
  flash2)  # the starter table again (CUDA memory-bound timings after the NVRTC build memo), then attention
    # with the scale folded into exp2's FMA and half the exponentials on the FMA pipe (EXP2_FMA)
    step 150 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --no-compile --out "$out/bf16"
    step 150 variants_flash python3 benchmarks/variants_gpu.py flash_attention --sets llama7b,gpt2,odd,edge,cpu \
      --out "$out/variants"
    step 150 end_to_end python3 benchmarks/end_to_end_gpu.py --out "$out/e2e"
    ;;
  flash3)  # attention with two blocks an SM (register cap, smaller key blocks), then the perf2 tables
    step 150 variants_flash python3 benchmarks/variants_gpu.py flash_attention --sets llama7b,gpt2,odd,edge,cpu \
      --out "$out/variants"
    second_dtypes
    ;;
  hopper)  # the CUDA wgmma + TMA matmul (GPU tests, then checked on every set and timed), then the GPT-2
    # shape (fp16) variants of the types that lose to eager there, each also timed from a CUDA graph
    step 120 pytest_wgmma env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/test_nvrtc.py tests/kernels/test_cuda_matmul_layout.py tests/kernels/test_cuda_starters.py -k "matmul or nvrtc"
    step 200 variants_cuda_wgmma python3 benchmarks/variants_gpu.py matmul --backend cuda \
      --variants benchmarks/variants/cuda_matmul_wgmma.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/wgmma"
    for kind in flash_attention reduce softmax; do
      step 90 "gpt2_$kind" python3 benchmarks/variants_gpu.py "$kind" --variants "benchmarks/variants/${kind}_gpt2.json" \
        --dtype fp16 --sets gpt2,odd,edge --time-set gpt2 --graph --out "$out/gpt2"
    done
    ;;
  hopper2)  # the CUDA wgmma flash attention (GPU tests, checked on every set, timed), the wgmma matmul
    # re-checked after its Hopper helpers moved into nvrtc.PRELUDE
    step 150 pytest_cuda env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/test_nvrtc.py tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_matmul_layout.py \
      tests/kernels/test_cuda_starters.py
    step 200 variants_cuda_flash_wgmma python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_attention_wgmma.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/wgmma"
    step 100 variants_cuda_matmul_wgmma python3 benchmarks/variants_gpu.py matmul --backend cuda \
      --variants benchmarks/variants/cuda_matmul_wgmma.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/wgmma"
    ;;
  verify_cuda)  # the harness's five-stage verification of every CUDA starter on the GPU (kernel_ran must see
    # the CUDA kernels: fixed name detection), the GPU tests of this session's wgmma / tensor-map code, aftereffect
    step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_nvrtc.py \
      tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_matmul_layout.py tests/kernels/test_cuda_starters.py
    for kind in matmul flash_attention rmsnorm softmax; do
      step 150 "verify_cuda_$kind" python3 -m autokernel_ci verify "kernels/cuda/$kind.py" --device cuda \
        --json "$out/verify_cuda_$kind.json"
    done
    step 150 variants_cuda_flash_wgmma_fp16 python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_attention_wgmma.json --dtype fp16 --sets cpu,edge,odd,gpt2,llama7b \
      --out "$out/wgmma_fp16"
    step 200 profiler_aftereffect python3 benchmarks/profiler_aftereffect.py --out "$out"
    ;;
  verify2)  # after the verify_cuda findings (uint8 poison crash, fp32 TF32 on stress inputs): the CUDA GPU tests with
    # the stress cases, `autokernel-ci verify` of all 18 starters (three at a time), the timer's host lead, the table
    step 200 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_nvrtc.py \
      tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_matmul_layout.py tests/kernels/test_cuda_starters.py
    n=0
    for backend in cuda triton; do
      for kind in matmul flash_attention fused_mlp rmsnorm layernorm softmax cross_entropy rotary_embedding reduce; do
        step 200 "verify_${backend}_$kind" python3 -m autokernel_ci verify "kernels/$backend/$kind.py" --device cuda \
          --json "$out/verify_${backend}_$kind.json" &
        n=$((n + 1)); if [ $((n % 3)) -eq 0 ]; then wait; fi
      done
    done
    wait
    step 150 timing_lead python3 benchmarks/timing_lead.py --out "$out"
    step 150 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --no-compile --out "$out/bf16"
    ;;
  verify3)  # the 3xTF32 fp32 CUDA matmul on the stress inputs, then the search agent at the GPT-2 shapes on the
    # launch-bound types again, now that the timer gives the host a head start (timing.LEAD_US)
    step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_cuda_starters.py -k "stress or reference"
    step 100 verify_cuda_matmul python3 -m autokernel_ci verify kernels/cuda/matmul.py --device cuda \
      --json "$out/verify_cuda_matmul.json"
    step 300 search_gpt2_fp16 python3 benchmarks/search_agent_gpu.py --dtype fp16 --shape-set gpt2 --minutes 0.75 \
      --types layernorm,rmsnorm,rotary_embedding,reduce --out "$out/search_gpt2_fp16"
    ;;
  second2)  # the rest of the GPT-2 fp16 search-agent table with the timer's host lead (verify3 ran the other four)
    step 400 search_gpt2_fp16 python3 benchmarks/search_agent_gpu.py --dtype fp16 --shape-set gpt2 --minutes 0.75 \
      --types matmul,flash_attention,fused_mlp,softmax,cross_entropy --out "$out/search_gpt2_fp16b"
    ;;
  pipeline)  # CUDA wgmma flash attention schedules (WG_PIPELINE: serial, intra-warpgroup overlap, + ping-pong)
    # checked on every set and timed in bf16, then the GPU tests of every schedule in fp16 and bf16
    step 240 variants_cuda_flash_pipeline python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_attention_pipeline.json --sets cpu,edge,odd,gpt2,llama7b \
      --out "$out/pipeline"
    step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_cuda_flash_layout.py -k gpu
    ;;
  pipeline2)  # the new CUDA attention default (WG_PIPELINE 2, 3 stages) and WG_PIN: GPU tests, `verify`, every set
    # checked in bf16 and fp16 and timed
    step 120 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_starters.py -k "gpu and (flash or stress)"
    step 100 verify_cuda_flash_attention python3 -m autokernel_ci verify kernels/cuda/flash_attention.py --device cuda \
      --json "$out/verify_cuda_flash_attention.json"
    for dtype in bf16 fp16; do
      step 120 "variants_pin_$dtype" python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
        --variants benchmarks/variants/cuda_flash_attention_pin.json --dtype "$dtype" \
        --sets cpu,edge,odd,gpt2,llama7b --out "$out/pin_$dtype"
    done
    # Hardware counters of the matmul starters against cuBLAS (K = 11008, where CUDA is furthest behind) and of the
    # attention starters against SDPA (causal): where the CUDA kernels lose their time.
    for case in "matmul --index 1" "flash_attention --index 0"; do
      set -- $case
      step 90 "ncu_$1" ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats python3 benchmarks/ncu_kernels.py $case
    done
    ;;
  matmul2)  # the CUDA wgmma matmul's persistent loop, TMA-store epilogue and L2 promotion: checked on every set in
    # bf16 and fp16 and timed; GPU tests of the tensor maps and the CUDA starters
    step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/test_nvrtc.py tests/kernels/test_cuda_matmul_layout.py tests/kernels/test_cuda_starters.py -k "gpu and matmul or tensor_map"
    for dtype in bf16 fp16; do
      step 150 "variants_matmul_$dtype" python3 benchmarks/variants_gpu.py matmul --backend cuda \
        --variants benchmarks/variants/cuda_matmul_persistent.json --dtype "$dtype" \
        --sets cpu,edge,odd,gpt2,llama7b --out "$out/matmul_$dtype"
    done
    ;;
  matmul3)  # the CUDA matmul's new default (persistent, TMA-store epilogue): `verify`, stress tests, the split store
    # with 4 stages; timed twice (run-to-run spread)
    matmul_gpu_tests
    step 100 verify_cuda_matmul python3 -m autokernel_ci verify kernels/cuda/matmul.py --device cuda \
      --json "$out/verify_cuda_matmul.json"
    cuda_matmul_variants benchmarks/variants/cuda_matmul_store.json
    ;;
  gluon_ws)  # the warp-specialised Gluon attention (VARIANT gluon_ws, the default since): GPU tests, `verify`,
    # checked on every set and timed (alternating with the tma kernel)
    triton_attention_checks
    step 120 variants_gluon_ws python3 benchmarks/variants_gpu.py flash_attention \
      --variants benchmarks/variants/flash_attention_gluon_ws.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/ws"
    step 60 variants_gluon_ws_gpt2 python3 benchmarks/variants_gpu.py flash_attention --dtype fp16 --time-set gpt2 \
      --variants benchmarks/variants/flash_attention_gluon_ws_gpt2.json --sets gpt2,odd --out "$out/ws_gpt2"
    ;;
  gluon_ws2)  # the warp-specialised Gluon attention with PINGPONG (the consumer warpgroups take turns issuing
    # wgmma) and 64-key blocks: GPU tests, checked on every set and timed (bf16 and fp16 LLaMA shapes; fp16 GPT-2
    # shapes also from a CUDA graph, which leaves out the host's launch time)
    step 200 pytest_gluon env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_triton_starters.py -k gluon
    step 120 variants_ws2 python3 benchmarks/variants_gpu.py flash_attention \
      --variants benchmarks/variants/flash_attention_gluon_ws2.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/ws2"
    step 60 variants_ws2_fp16 python3 benchmarks/variants_gpu.py flash_attention --dtype fp16 \
      --variants benchmarks/variants/flash_attention_gluon_ws2_fp16.json --sets gpt2,llama7b --out "$out/ws2_fp16"
    step 60 variants_ws2_gpt2 python3 benchmarks/variants_gpu.py flash_attention --dtype fp16 --time-set gpt2 \
      --graph --variants benchmarks/variants/flash_attention_gluon_ws2_gpt2.json --sets gpt2 --out "$out/ws2_gpt2"
    ;;
  gluon_ws3)  # the Gluon attention's tile loop (the refactor after final7) and PERSISTENT: GPU tests of the Triton
    # attention, `verify` at the default, PERSISTENT points checked on every set and timed against the default
    triton_attention_checks
    step 120 variants_ws3 python3 benchmarks/variants_gpu.py flash_attention \
      --variants benchmarks/variants/flash_attention_gluon_ws3.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/ws3"
    ;;
  final8)  # after the review: the Triton attention's GPU tests (each launch counted per kernel, the fp32 and strided
    # fallbacks) and `verify` of the committed file
    triton_attention_checks
    ;;
  gluon_mlp)  # the fused MLP's warp-specialised Gluon gate/up kernel (one 2 x BLOCK_N-wide wgmma for gate and up)
    # checked on every set and timed against the tma default, in bf16 and fp16
    for dtype in bf16 fp16; do
      step 150 "variants_mlp_$dtype" python3 benchmarks/variants_gpu.py fused_mlp --dtype "$dtype" \
        --variants benchmarks/variants/fused_mlp_gluon.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/mlp_$dtype"
    done
    ;;
  final9)  # seventh session's closing round: GPU tests of the fused MLP (its Gluon default on every spec set, its
    # own cases and fallbacks) and of the CUDA attention (WG_CONSUMER_COPIES), `verify` of the fused MLP, fp32 at the
    # new 128-wide default against the former 64-wide tiles
    kernel_checks triton_mlp kernels/triton/fused_mlp.py mlp tests/kernels/test_triton_tma_variants.py \
      tests/kernels/test_triton_starters.py
    step 200 pytest_cuda_flash env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/test_nvrtc.py tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_starters.py \
      -k "gpu and (flash or stress)"
    step 120 variants_mlp_fp32 python3 benchmarks/variants_gpu.py fused_mlp --dtype fp32 \
      --variants benchmarks/variants/fused_mlp_fp32.json --sets cpu,odd --out "$out/mlp_fp32"
    ;;
  final10)  # the Gluon kernel's tile as its own knobs (GL_BLOCK_N, GL_STAGES; the fallbacks keep 64 x 3): GPU
    # tests and `verify` of the fused MLP, the committed default against "tma" in bf16 and fp16 (every set checked,
    # alternating), fp32 at the 64-wide default against 128 wide, and the fused MLP's starter-table row
    kernel_checks triton_mlp kernels/triton/fused_mlp.py mlp tests/kernels/test_triton_tma_variants.py \
      tests/kernels/test_triton_starters.py
    for dtype in bf16 fp16; do
      step 150 "variants_mlp_$dtype" python3 benchmarks/variants_gpu.py fused_mlp --dtype "$dtype" \
        --variants benchmarks/variants/fused_mlp_default.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/mlp_$dtype"
    done
    step 120 variants_mlp_fp32 python3 benchmarks/variants_gpu.py fused_mlp --dtype fp32 \
      --variants benchmarks/variants/fused_mlp_fp32.json --sets cpu,odd --out "$out/mlp_fp32"
    step 120 starters_table python3 benchmarks/check_starters_gpu.py --skip-check --types fused_mlp \
      --backends triton --out "$out/table"
    ;;
  matmul_gluon)  # the Triton matmul's persistent warp-specialised Gluon kernel (VARIANT gluon): its GPU tests, then
    # checked on every set and timed against the tma default (bf16, both LLaMA-7B shapes; fp16)
    step 200 pytest_matmul_gluon env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_triton_tma_variants.py tests/kernels/test_triton_starters.py -k "matmul"
    step 200 variants_matmul_bf16 python3 benchmarks/variants_gpu.py matmul --dtype bf16 \
      --variants benchmarks/variants/matmul_gluon.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/mm_bf16"
    ;;
  matmul_gluon2)  # the Gluon matmul with 32-wide k steps and a deeper ring (24 KB a stage: 4-6 fit next to the c
    # tile, against 3 of 48 KB), checked on every set and timed against the tma default
    step 200 variants_matmul_bf16 python3 benchmarks/variants_gpu.py matmul --dtype bf16 \
      --variants benchmarks/variants/matmul_gluon2.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/mm_bf16"
    ;;
  final11)  # the Gluon matmul as the default: the matmul GPU tests, `verify` of the committed file, its table rows
    kernel_checks triton_matmul kernels/triton/matmul.py matmul tests/kernels/test_triton_tma_variants.py \
      tests/kernels/test_triton_starters.py
    step 120 starters_table python3 benchmarks/check_starters_gpu.py --skip-check --types matmul \
      --backends triton --out "$out/table"
    ;;
  gpt2_gemm)  # the Gluon defaults of the matmul and the fused MLP against "tma" at the GPT-2 shapes in fp16 (checked
    # on the cpu / gpt2 sets first; CUDA-graph times next to the plain ones)
    for kt in matmul fused_mlp; do
      step 150 "variants_${kt}_gpt2" python3 benchmarks/variants_gpu.py "$kt" --dtype fp16 --time-set gpt2 --graph \
        --variants "benchmarks/variants/${kt}_default.json" --sets cpu,gpt2 --out "$out/${kt}_gpt2"
    done
    ;;
  cuda_mm_group)  # the CUDA matmul with the Gluon kernel's choices (GROUP_M 16; 3 stages and a whole-tile store),
    # checked on every set and timed alternating with its default, bf16
    step 200 variants_cuda_matmul python3 benchmarks/variants_gpu.py matmul --backend cuda --dtype bf16 \
      --variants benchmarks/variants/cuda_matmul_group.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/cuda_mm"
    ;;
  final12)  # the CUDA matmul at GROUP_M 16: its GPU tests (stress cases included), `verify`, its starter-table rows
    kernel_checks cuda_matmul kernels/cuda/matmul.py "$CUDA_MATMUL_FILTER" "${CUDA_MATMUL_TESTS[@]}"
    step 120 starters_table python3 benchmarks/check_starters_gpu.py --skip-check --types matmul \
      --backends triton,cuda --out "$out/table"
    ;;
  launch)  # host time a call of the Triton GEMM / attention kernels by variant at tiny shapes, and where it goes
    step 200 launch_overhead python3 benchmarks/launch_overhead.py --out "$out/launch"
    ;;
  launch_cuda)  # host time a call of each CUDA starter at its cpu shape (next to eager), one launch split into steps
    step 200 launch_cuda python3 benchmarks/launch_overhead.py --backend cuda --out "$out/launch_cuda"
    ;;
  review)  # after the review: the launchers' shared descriptor rule (matmul _b_nk; fused MLP descriptors_ok) and the
    # launch counts in one helper: the Triton GEMM / Gluon attention GPU tests, `verify` of both GEMM files
    kernel_checks triton_gemm kernels/triton/matmul.py "matmul or fused_mlp_gluon or gluon_attention or gluon_stage" \
      tests/kernels/test_triton_tma_variants.py tests/kernels/test_triton_starters.py
    step 90 verify_triton_mlp python3 -m autokernel_ci verify kernels/triton/fused_mlp.py --device cuda \
      --json "$out/verify_triton_mlp.json"
    ;;
  table9)  # the fused MLP and attention rows of the starter table (both backends, eager and torch.compile)
    step 300 starters_table python3 benchmarks/check_starters_gpu.py --skip-check --types fused_mlp,flash_attention \
      --backends triton,cuda --out "$out/table"
    ;;
  ncu_flash_nc)  # where the CUDA attention loses to the Gluon one when not causal (0.94x against ~1.0x SDPA): the
    # consumer with uniform wgmma descriptors (WG_CONSUMER_COPIES 2) against the former one, checked on every set in bf16 and
    # timed (alternating); ncu of SDPA, the Gluon kernel, the CUDA default and the CUDA schedule Gluon uses
    step 150 variants_issue python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_attention_issue.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/issue"
    step 240 ncu_flash_nc ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct \
      python3 benchmarks/ncu_kernels.py flash_attention --index 1 --backends triton,cuda \
      --config '{"WG_PIPELINE": 1, "WG_PIN": 1}'
    ;;
  persist)  # the CUDA attention's persistent walk (WG_PERSISTENT): its GPU tests (256 tiles on 132 SMs) and the CUDA
    # attention's, `verify` of the file, the walk checked on every set in bf16 and timed alternating with the default
    kernel_checks cuda_flash kernels/cuda/flash_attention.py "persistent or (gpu and (flash or stress))" \
      tests/test_nvrtc.py tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_starters.py
    step 200 variants_persist python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_persistent.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/persist"
    ;;
  unmasked)  # the CUDA attention's loop without the causal mask's selects (unmasked loop + masked loop) and
    # descriptors built by offset: GPU tests, `verify`, checked on every set and timed against the file of 8b6b3dc
    # (carried in benchmarks/variants/base/, see variants_gpu.py) with and without the persistent walk
    kernel_checks cuda_flash kernels/cuda/flash_attention.py "persistent or (gpu and (flash or stress))" \
      tests/test_nvrtc.py tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_starters.py
    step 240 variants_unmasked python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_unmasked.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/unmasked"
    ;;
  final13)  # the CUDA attention's new default (unmasked loop, WG_PERSISTENT 1): GPU tests, `verify`, timed against
    # 8b6b3dc's file and WG_PIN 1 in bf16 and fp16; the GEMM and attention rows of the starter table with ours, eager
    # and compile timed in turn three times; ncu of the not-causal case (SDPA, Triton, CUDA)
    kernel_checks cuda_flash kernels/cuda/flash_attention.py "persistent or (gpu and (flash or stress))" \
      tests/test_nvrtc.py tests/kernels/test_cuda_flash_layout.py tests/kernels/test_cuda_starters.py
    step 150 variants_final13 python3 benchmarks/variants_gpu.py flash_attention --backend cuda \
      --variants benchmarks/variants/cuda_flash_final13.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/final13"
    step 120 variants_final13_fp16 python3 benchmarks/variants_gpu.py flash_attention --backend cuda --dtype fp16 \
      --variants benchmarks/variants/cuda_flash_final13.json --sets cpu,llama7b --out "$out/final13_fp16"
    step 200 starters_repeats python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 \
      --types matmul,fused_mlp,flash_attention --backends triton,cuda --out "$out/table"
    step 90 ncu_flash_nc ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
      python3 benchmarks/ncu_kernels.py flash_attention --index 1 --backends triton,cuda
    ;;
  pin13)  # WG_PIN 1 on the unmasked loop: three alternating pairs with the default, bf16 and fp16
    for dtype in bf16 fp16; do
      step 150 "variants_pin_$dtype" python3 benchmarks/variants_gpu.py flash_attention --backend cuda --dtype "$dtype" \
        --variants benchmarks/variants/cuda_flash_pin.json --sets cpu,llama7b --out "$out/pin_$dtype"
    done
    ;;
  table13)  # every starter (both backends) at the LLaMA-7B shapes, ours / eager / torch.compile timed in turn three
    # times (medians, x eager's range), with the same-bytes copy for the memory-bound types
    step 420 starters_all python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --out "$out/table"
    ;;
  ncu_mm)  # where the CUDA matmul's tile is slower than the Gluon one at 4096x11008x4096 (0.96x against 1.00x cuBLAS):
    # ncu of cuBLAS, the Triton (Gluon) and the CUDA kernel, memory, warp-state and scheduler sections
    step 200 ncu_matmul ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section Occupancy --section InstructionStats \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__cycles_active.avg,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_issue_stalled_barrier,sm__warps_active.avg.pct_of_peak_sustained_active \
      python3 benchmarks/ncu_kernels.py matmul --index 1 --backends triton,cuda
    ;;
  mm_uniform)  # the CUDA matmul's consumer as a template on its warpgroup (uniform wgmma descriptors, 66 SASS
    # instructions a K slice instead of 93): GPU tests, `verify`, timed alternating with 2673f77's file (carried in
    # benchmarks/variants/base/) in bf16, then fp16
    cuda_matmul_against_base mm_uniform benchmarks/variants/cuda_matmul_uniform.json
    ;;
  final14)  # the GEMM and attention rows of the starter table after the CUDA matmul's uniform descriptors, ours /
    # eager / compile in turn five times
    step 300 starters_final14 python3 benchmarks/check_starters_gpu.py --skip-check --repeats 5 \
      --types matmul,flash_attention --backends triton,cuda --out "$out/table"
    ;;
  prelude14)  # desc_plus moved into nvrtc.PRELUDE (shared by the CUDA matmul and attention): both files' GPU tests
    kernel_checks cuda_gemm_attention kernels/cuda/matmul.py "gpu and (matmul or flash or persistent or stress)" \
      tests/test_nvrtc.py tests/kernels/test_cuda_matmul_layout.py tests/kernels/test_cuda_flash_layout.py \
      tests/kernels/test_cuda_starters.py
    step 90 verify_cuda_flash python3 -m autokernel_ci verify kernels/cuda/flash_attention.py --device cuda \
      --json "$out/verify_cuda_flash.json"
    ;;
  rows15) rows15_round ;;
  final15)  # one call for the session (device starts are scarce): rows15, `verify` of the five rewritten CUDA files,
    # the CUDA memory-bound rows of the starter table (ours / eager / compile in turn three times), clock15
    rows15_round
    clock15_round
    for t in softmax cross_entropy reduce rmsnorm layernorm; do
      step 60 "verify_cuda_$t" python3 -m autokernel_ci verify "kernels/cuda/$t.py" --device cuda \
        --json "$out/verify_cuda_$t.json"
    done
    step 240 starters_rows python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 \
      --types softmax,cross_entropy,reduce,rmsnorm,layernorm --backends cuda --out "$out/table"
    ;;
  final15b)  # layernorm's new default (128 threads x 4 cached vectors, picked from final15's points): its GPU tests
    # and `verify`; the memory-bound rows of the starter table, both backends in turn (--repeats 3); calibration
    step 150 pytest_layernorm env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_cuda_row_kernels.py tests/kernels/test_cuda_starters.py -k "layernorm and (norms or gpu)"
    step 60 verify_cuda_layernorm python3 -m autokernel_ci verify kernels/cuda/layernorm.py --device cuda \
      --json "$out/verify_cuda_layernorm.json"
    step 60 gpu_calibrate python3 -m autokernel_ci gpu --calibrate
    step 240 starters_rows python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 \
      --types softmax,cross_entropy,reduce,rmsnorm,layernorm --backends triton,cuda --out "$out/table"
    ;;
  evict15)  # EVICT_FIRST (ld.global.cs) on the CUDA reduce and cross entropy: their GPU tests at the new default, then
    # each checked on every set and timed alternating with EVICT_FIRST off, bf16 LLaMA and fp16 GPT-2
    step 150 pytest_evict env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/kernels/test_cuda_row_kernels.py tests/kernels/test_cuda_starters.py \
      -k "(cross_entropy or reduce) and (row_kernels or gpu or loads or degenerate)"
    for t in reduce cross_entropy; do
      step 100 "variants_$t" python3 benchmarks/variants_gpu.py "$t" --backend cuda \
        --variants "benchmarks/variants/cuda_evict_$t.json" --sets cpu,edge,odd,gpt2,llama7b --out "$out/$t"
      step 100 "variants_${t}_fp16_gpt2" python3 benchmarks/variants_gpu.py "$t" --backend cuda --dtype fp16 \
        --variants "benchmarks/variants/cuda_evict_$t.json" --sets cpu,gpt2 --time-set gpt2 --out "$out/${t}_fp16"
    done
    ;;
  final15c) final15c_round ;;
  clock15) clock15_round ;;
  host16) host16_round ;;
  final16)  # softmax at UNROLL 4 (its default then) and nvrtc.launch counting static shared memory toward 48 KiB: every CUDA
    # starter's GPU tests and the launch tests, `verify` of the softmax, alternating with bc1752e's file (bf16 LLaMA,
    # fp16 GPT-2), the softmax / cross entropy rows of the starter table (both backends) in bf16 and fp16 GPT-2
    cuda_softmax_checks
    cuda_softmax_variants benchmarks/variants/cuda_softmax_final16.json cpu,edge,odd,gpt2,llama7b
    softmax_table_rows
    ;;
  round16)  # (1) the CUDA matmul's consumer with ring counters and pinned descriptor words (45 SASS instructions a
    # K slice, 62 before): GPU tests, `verify`, alternating with bc1752e's file (carry benchmarks/variants/base) in
    # bf16 and fp16, the sustained-clock comparison, the matmul rows (ours / eager / compile in turn three times);
    # (2) the CUDA softmax with vectors on rows between vector boundaries and wide rows kept in shared memory: GPU
    # tests, `verify`, alternating with bc1752e's file in bf16 (LLaMA) and fp16 (GPT-2); (3) final15c
    cuda_matmul_against_base mm_lean benchmarks/variants/cuda_matmul_lean.json
    kernel_checks cuda_softmax kernels/cuda/softmax.py "softmax" tests/kernels/test_cuda_row_kernels.py \
      tests/kernels/test_cuda_starters.py
    cuda_softmax_variants benchmarks/variants/cuda_softmax_smem.json cpu,edge,odd,gpt2,llama7b
    clock15_round
    step 200 starters_matmul python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --types matmul \
      --backends triton,cuda --out "$out/table_mm"
    final15c_round
    ;;
  round17)  # the CUDA softmax's kernels without the streaming loop for rows the registers hold ("_r" kernels carry it,
    # so UNROLL costs the LLaMA row nothing) and 9b28142's untested paths (dynamic_shared_limit, one launch-cache
    # lookup): every CUDA starter's GPU tests and the launch tests, `verify` of the softmax, alternating with
    # 9b28142's file (carry benchmarks/variants/base) in bf16 (LLaMA) and fp16 (GPT-2)
    cuda_softmax_checks
    cuda_softmax_variants benchmarks/variants/cuda_softmax_split.json cpu,edge,odd,gpt2,llama7b
    ;;
  streamk)  # the CUDA matmul's stream-K (WG_STREAM_K: the last partial wave's tiles split along K over every SM; 20%
    # slower, not committed: benchmarks/variants/cuda_matmul_streamk.patch onto 9b28142's file gives
    # benchmarks/variants/base/cuda_matmul_streamk.py, carried): the committed matmul's GPU tests and `verify`, the
    # stream-K file alternating with 9b28142's and with stream-K off (bf16 on every set, fp16 at the cpu / LLaMA sets),
    # the sustained-clock comparison (the session's run had the stream-K file in place); the softmax's UNROLL 4
    # default (streaming kernels only) against 9b28142's file and UNROLL 2
    cuda_matmul_against_base mm_streamk benchmarks/variants/cuda_matmul_streamk.json
    clock15_round
    cuda_softmax_variants benchmarks/variants/cuda_softmax_unroll4.json cpu,gpt2,llama7b
    ;;
  softmax_wide)  # the Triton softmax on GPT-2's 50257-wide rows (0.79x eager in final16: "looped" reads a row twice and
    # takes two exps an element): whole rows in registers up to 65536 wide with 16 / 32 warps, against the default of
    # then (looped, 4096 x 8 warps; named explicitly since), fp16 on the GPT-2 set and bf16 on the LLaMA set
    step 150 variants_softmax_fp16_gpt2 python3 benchmarks/variants_gpu.py softmax --backend triton --dtype fp16 \
      --variants benchmarks/variants/softmax_wide.json --sets cpu,edge,odd,gpt2 --time-set gpt2 \
      --out "$out/softmax_fp16_gpt2"
    step 150 variants_softmax python3 benchmarks/variants_gpu.py softmax --backend triton \
      --variants benchmarks/variants/softmax_wide.json --sets cpu,llama7b --out "$out/softmax"
    ;;
  final17)  # the CUDA softmax's committed default (UNROLL 4, only the "_r" kernels stream): every CUDA starter's GPU tests
    # and the launch tests, `verify` of the softmax, the softmax / cross entropy rows of the starter table (both
    # backends, baselines in turn three times) in bf16 (LLaMA) and fp16 (GPT-2)
    cuda_softmax_checks
    softmax_table_rows
    ;;
  final17c)  # after the softmax's streaming loop became nvrtc.scan_vecs (cross entropy / reduce SASS unchanged): every
    # CUDA starter's GPU tests, the launch tests and the softmax's paths, `verify` of the softmax
    cuda_softmax_checks
    ;;
  softmax_looped)  # the Triton softmax's looped kernel on GPT-2's rows with fewer, wider programs an SM (16 / 32 warps:
    # fewer rows in flight, so the second pass may find its row in L2), fp16 on the GPT-2 set. The session's run set
    # the looped kernel's warps through num_warps (LOOP_WARPS came of it); the file now names LOOP_WARPS and the old
    # default (4096 x 8) explicitly
    step 150 variants_softmax_fp16_gpt2 python3 benchmarks/variants_gpu.py softmax --backend triton --dtype fp16 \
      --variants benchmarks/variants/softmax_looped.json --sets cpu,edge,odd,gpt2 --time-set gpt2 \
      --out "$out/softmax_fp16_gpt2"
    ;;
  final17b)  # the Triton softmax's looped kernel at its new default (8192-wide chunks, LOOP_WARPS 16): its GPU tests,
    # `verify`, its table rows in fp16 (GPT-2) and bf16 (LLaMA), baselines in turn three times
    kernel_checks triton_softmax kernels/triton/softmax.py softmax tests/kernels/test_triton_starters.py
    step 150 starters_gpt2 python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --types softmax \
      --backends triton --dtype fp16 --time-set gpt2 --out "$out/table_gpt2"
    step 150 starters_softmax python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --types softmax \
      --backends triton --out "$out/table"
    ;;
  gpu24a)  # see the list above
    PYTEST_LIMIT=400 kernel_checks triton_gemm kernels/triton/fused_mlp.py "matmul or fused_mlp" tests/kernels/test_triton_tma_variants.py \
      tests/kernels/test_triton_starters.py
    step 100 variants_fp32_k16 python3 benchmarks/variants_gpu.py matmul --dtype fp32 \
      --variants benchmarks/variants/matmul_fp32_k16.json --sets llama7b,odd,edge --out "$out/mm_fp32_k16"
    ;;
  confirm25)  # see the list above
    step 200 confirm_gpt2 python3 benchmarks/search_agent_gpu.py --dtype fp16 --shape-set gpt2 --minutes 0.75 \
      --types softmax,cross_entropy,reduce --out "$out/confirm_gpt2"
    step 200 confirm_llama python3 benchmarks/search_agent_gpu.py --minutes 0.75 --types softmax,cross_entropy,reduce \
      --out "$out/confirm_llama"
    ;;
  evict25)  # see the list above
    step 120 evict_bf16 python3 benchmarks/variants_gpu.py cross_entropy --backend triton \
      --variants benchmarks/variants/cross_entropy_evict_off.json --sets odd,llama7b --out "$out/bf16"
    step 120 evict_fp16 python3 benchmarks/variants_gpu.py cross_entropy --backend triton --dtype fp16 \
      --variants benchmarks/variants/cross_entropy_evict_off.json --sets odd,gpt2 --time-set gpt2 --out "$out/fp16"
    ;;
  search24c)  # see the list above
    step 540 search_all python3 benchmarks/search_agent_gpu.py --minutes 0.75 --out "$out/search_all"
    ;;
  search24d)  # see the list above
    step 540 search_gpt2 python3 benchmarks/search_agent_gpu.py --dtype fp16 --shape-set gpt2 --minutes 0.75 \
      --out "$out/search_gpt2"
    ;;
  gpu24b)  # see the list above
    step 280 search_rows python3 benchmarks/search_agent_gpu.py --minutes 0.75 --types softmax,layernorm,cross_entropy \
      --out "$out/search_rows"
    step 200 table_fp32 python3 benchmarks/check_starters_gpu.py --skip-check --types matmul,fused_mlp \
      --backends triton --dtype fp32 --repeats 3 --out "$out/table_fp32"
    ;;
  fp32mm21)  # the Triton matmul's fp32 (tf32x3, pointer kernel) tiles checked on three sets and timed, then the loop
    # stopped by a signal on CUDA
    step 370 variants_fp32 python3 benchmarks/variants_gpu.py matmul --dtype fp32 \
      --variants benchmarks/variants/matmul_fp32.json --sets llama7b,odd,edge --out "$out/mm_fp32"
    step 200 interrupt python3 benchmarks/interrupt_gpu.py --device cuda --after 5 --out "$out/interrupt"
    ;;
  final22)  # the fp32 default tile of the Triton matmul (256x64x32, 3 stages) as committed: its GPU tests, `verify` at
    # every dtype, the matmul rows of the table at fp32, then the loop stopped by a signal on CUDA
    kernel_checks triton_matmul kernels/triton/matmul.py matmul tests/kernels/test_triton_tma_variants.py \
      tests/kernels/test_triton_starters.py
    step 150 table_fp32 python3 benchmarks/check_starters_gpu.py --skip-check --types matmul --backends triton \
      --dtype fp32 --repeats 3 --out "$out/table_fp32"
    step 200 interrupt python3 benchmarks/interrupt_gpu.py --device cuda --after 5 --out "$out/interrupt"
    ;;
  screen22)  # what timing candidates first buys the GEMM-bound types at 0.75 min (bf16, LLaMA-7B): experiments run
    # with the screen, then with every candidate verified first; `verify` of the fp32 matmul default first
    step 90 verify_matmul_fp32 python3 -m autokernel_ci verify kernels/triton/matmul.py --device cuda --dtypes fp32 \
      --json "$out/verify_matmul_fp32.json"
    step 200 search_screen python3 benchmarks/search_agent_gpu.py --minutes 0.75 --types matmul,flash_attention \
      --out "$out/search_screen"
    step 110 search_verify_every python3 benchmarks/search_agent_gpu.py --minutes 0.75 --types matmul --verify-every \
      --out "$out/search_verify_every"
    ;;
  search21a)  # the loop stopped by a signal on CUDA, then the search agent (bf16, LLaMA-7B) on the memory-bound types
    step 200 interrupt python3 benchmarks/interrupt_gpu.py --device cuda --after 5 --out "$out/interrupt"
    step 380 search_bf16 python3 benchmarks/search_agent_gpu.py --minutes 0.75 \
      --types rmsnorm,layernorm,softmax,reduce,cross_entropy,rotary_embedding --out "$out/search_bf16"
    ;;
  search21b)  # the search agent at fp32 on the LLaMA-7B shapes, every type (the issue's third dtype)
    step 570 search_fp32 python3 benchmarks/search_agent_gpu.py --dtype fp32 --minutes 0.75 --out "$out/search_fp32"
    ;;
  mem23)  # the search agent (bf16, LLaMA-7B) on the memory-bound types that miss 1.25x torch.compile
    step 280 search_mem python3 benchmarks/search_agent_gpu.py --minutes 0.75 --types rmsnorm,rotary_embedding,reduce \
      --out "$out/search_mem"
    ;;
  search21c)  # the search agent (bf16, LLaMA-7B) on the GEMM-bound types, with room for experiments after baselines
    step 400 search_bf16_mm python3 benchmarks/search_agent_gpu.py --minutes 1.5 \
      --types matmul,flash_attention,fused_mlp --out "$out/search_bf16_mm"
    ;;
  interrupt20)  # how the loop stops on a signal with CUDA workers, then the rows that were below eager in table18
    step 200 interrupt python3 benchmarks/interrupt_gpu.py --device cuda --after 5 --out "$out/interrupt"
    step 240 rows python3 benchmarks/check_starters_gpu.py --types matmul,flash_attention --backends triton,cuda \
      --skip-check --no-compile --repeats 5 --out "$out/rows"
    ;;
  table18)  # every starter (both backends) at the LLaMA-7B shapes, ours / eager / torch.compile in turn three times,
    # and the calibration (copy, GEMM) of the GPU it ran on: the table after the CUDA row kernels' rewrite
    for backend in triton cuda; do  # one file a backend: a backend's rows survive the other's time limit
      step 270 "starters_$backend" python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 \
        --backends "$backend" --out "$out/table_$backend"
    done
    step 40 calibrate python3 -m autokernel_ci gpu --calibrate
    ;;
  read19)  # how fast a read-only kernel can go: the reduce starters, eager, compile, CUB's flat sum and a same-bytes copy
    # under do_bench's dirty L2 flush and a clean one; then the CUDA matmul's GPU tests (its threshold case)
    step 200 read_ceiling python3 benchmarks/read_ceiling_gpu.py --out "$out/read" \
      --cuda-configs '[{"THREADS": 256, "UNROLL": 4}, {"PERSISTENT": 4, "THREADS": 256, "UNROLL": 4}, {"PERSISTENT": 2}]' \
      --triton-configs '[{"VARIANT": "row", "PERSISTENT": 8}, {"VARIANT": "row", "PERSISTENT": 4, "num_warps": 16}]'
    step 100 variants_reduce_triton python3 benchmarks/variants_gpu.py reduce --backend triton \
      --variants benchmarks/variants/reduce_persistent.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/triton_reduce"
    step 100 variants_reduce_cuda python3 benchmarks/variants_gpu.py reduce --backend cuda \
      --variants benchmarks/variants/cuda_reduce_persistent.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/cuda_reduce"
    cuda_matmul_gpu_tests
    ;;
  table19a)  # the Triton half of table18's table (ours / eager / compile in turn three times), the calibration, and
    # the CUDA reduce's default (THREADS 512 / UNROLL 2 since 12 of 12 H100 pairs) alternating with the old 256 / 4
    step 330 starters_triton python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --backends triton \
      --out "$out/table_triton"
    step 40 calibrate python3 -m autokernel_ci gpu --calibrate
    step 60 variants_reduce_cuda_threads python3 benchmarks/variants_gpu.py reduce --backend cuda \
      --variants benchmarks/variants/cuda_reduce_threads.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/cuda_threads"
    ;;
  table19b)  # the CUDA half of the table, then the CUDA matmul's GPU tests (the default crossing WG_CLUSTER_MIN_K)
    step 330 starters_cuda python3 benchmarks/check_starters_gpu.py --skip-check --repeats 3 --backends cuda \
      --out "$out/table_cuda"
    cuda_matmul_gpu_tests
    ;;
  norms20)  # the CUDA layernorm / rmsnorm with evict-first loads of x (EVICT_FIRST) and stores of y (STREAM_STORE)
    cuda_norm_points benchmarks/variants/cuda_norms_evict.json ;;
  norms21)  # the CUDA norms' weights loaded after the reductions (WEIGHTS_LATE: 128 -> 64 registers for layernorm)
    cuda_norm_points benchmarks/variants/cuda_norms_late.json ;;
  rotary21)  # the CUDA rotary's evict-first loads of x (EVICT_FIRST), checked on every set and timed alternating, twice
    for run in 1 2; do
      step 90 "variants_rotary_$run" python3 benchmarks/variants_gpu.py rotary_embedding --backend cuda \
        --variants benchmarks/variants/cuda_rotary_evict.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/rotary_$run"
    done
    ;;
  cluster18)  # the CUDA matmul's WG_CLUSTER 2 (with GROUP_M 16 and 8) against its default at the current consumer
    # loop, alternating twice in one process, checked on every set, timed in bf16 and fp16 next to eager
    step 200 variants_cluster python3 benchmarks/variants_gpu.py matmul --backend cuda \
      --variants benchmarks/variants/cuda_matmul_cluster18.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/cluster"
    step 150 variants_cluster_fp16 python3 benchmarks/variants_gpu.py matmul --backend cuda --dtype fp16 \
      --variants benchmarks/variants/cuda_matmul_cluster18.json --sets cpu,llama7b --out "$out/cluster_fp16"
    ;;
  final18)  # the CUDA matmul's new default (WG_CLUSTER 2 from K = 8192, groups of GROUP_M block rows): its table rows
    # with ours / eager / compile in turn five times, then its GPU tests (the clustered / unclustered builds at odd
    # edges included) and `verify`
    step 240 starters_matmul python3 benchmarks/check_starters_gpu.py --skip-check --repeats 5 --types matmul \
      --backends cuda --out "$out/table"
    kernel_checks cuda_matmul kernels/cuda/matmul.py "$CUDA_MATMUL_FILTER" "${CUDA_MATMUL_TESTS[@]}"
    ;;
  tune18)  # around the clustered default at 4096x11008x4096: 3 stages, GROUP_M 8 / 32, L2 promotion 128, alternating
    # twice (checked on the cpu / odd / LLaMA sets), then the sustained clock of cuBLAS, the Gluon and the CUDA kernel
    step 200 variants_tune python3 benchmarks/variants_gpu.py matmul --backend cuda \
      --variants benchmarks/variants/cuda_matmul_tune18.json --sets cpu,odd,llama7b --out "$out/tune"
    clock15_round
    ;;
  flash_table)  # the attention rows of the starter table (both backends, eager and torch.compile) for the committed
    # Gluon kernel (final7's table ran it before its tile-loop refactor)
    step 150 starters_flash python3 benchmarks/check_starters_gpu.py --skip-check --types flash_attention \
      --backends triton,cuda --out "$out/flash"
    ;;
  final7)  # sixth session's closing round: GPU tests of the Triton attention (its new gluon_ws default on every spec
    # set, the Gluon kernel's own cases), `verify` of the file, the starter table (both backends, eager and
    # torch.compile), ncu of the causal case (SDPA, Triton, CUDA)
    triton_attention_checks
    step 220 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --out "$out/bf16"
    step 90 ncu_flash ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section WarpStateStats --section LaunchStats --section Occupancy \
      python3 benchmarks/ncu_kernels.py flash_attention --index 0 --backends triton,cuda
    ;;
  matmul4)  # the CUDA matmul with 2-CTA clusters (B multicast): GPU tests, checked on every set and timed twice
    matmul_gpu_tests
    cuda_matmul_variants benchmarks/variants/cuda_matmul_cluster.json
    ;;
  final5)  # fifth session's closing round: GPU tests of the CUDA starters, `verify` of the CUDA matmul at its new
    # default, ncu stall reasons of the clustered matmul, the starter table (both backends, eager and torch.compile)
    step 150 pytest_gpu env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
      tests/test_nvrtc.py tests/kernels/test_cuda_starters.py tests/kernels/test_cuda_matmul_layout.py -k gpu
    step 60 verify_cuda_matmul python3 -m autokernel_ci verify kernels/cuda/matmul.py --device cuda \
      --json "$out/verify_cuda_matmul.json"
    step 90 ncu_matmul_cluster ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section WarpStateStats --section LaunchStats --section Occupancy \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 benchmarks/ncu_kernels.py matmul --index 1 --backends cuda --no-eager --config '{"WG_CLUSTER": 2}'
    step 300 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --out "$out/bf16"
    ;;
  final6)  # WG_CLUSTER 2 with the CTA-scope remote arrival (no MEMBAR in the mainloop): checked on every set, timed
    # twice in bf16 and once in fp16; the starter table again (its same-bytes copy column)
    matmul_gpu_tests
    cuda_matmul_variants benchmarks/variants/cuda_matmul_cluster.json
    step 200 starters_bf16 python3 benchmarks/check_starters_gpu.py --skip-check --out "$out/bf16"
    ;;
  reduce2)  # the Triton reduce with EVICT_FIRST (streamed loads marked first for L2 eviction), checked on every set
    # and timed twice (the default point first and last: the first point of a run times fastest on a cool GPU)
    for run in 1 2; do
      step 120 "variants_reduce_$run" python3 benchmarks/variants_gpu.py reduce --backend triton \
        --variants benchmarks/variants/reduce_evict.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/reduce_$run"
    done
    ;;
  evict)  # EVICT_FIRST on the other memory-bound Triton starters (alternating with the default: the first points of
    # a run time fastest), each point checked on every set; the reduce's new default against the old policy
    for type in softmax rmsnorm layernorm cross_entropy rotary_embedding; do
      step 90 "variants_$type" python3 benchmarks/variants_gpu.py "$type" --backend triton \
        --variants benchmarks/variants/evict_first.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/$type"
    done
    step 90 variants_reduce python3 benchmarks/variants_gpu.py reduce --backend triton \
      --variants benchmarks/variants/reduce_evict_default.json --sets cpu,edge,odd,gpt2,llama7b --out "$out/reduce"
    ;;
  aftereffect)  # does verification's profiler session slow the timings after it? (see the script's docstring)
    step 200 profiler_aftereffect python3 benchmarks/profiler_aftereffect.py --out "$out"
    ;;
  perf2)
    second_dtypes
    ;;
esac
for f in "$out"/*.log; do echo "--- $(basename "$f"): last lines"; tail -n 8 "$f"; done
cat "$out/summary.txt"
# The device tool brings back at most 8 files: everything goes back as one archive beside the summary.
tar -C "$out" -czf /tmp/round.tar.gz --exclude=round.tar.gz . && mv /tmp/round.tar.gz "$out/round.tar.gz"
find "$out" -mindepth 1 -not -name round.tar.gz -not -name summary.txt -delete
