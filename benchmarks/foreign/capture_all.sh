#!/usr/bin/env bash
# Captures the foreign workloads of benchmarks/foreign (code that does not import tracekit: the user's own
# NVTX ranges, Triton, raw CUDA, cuBLAS through torch) and the crashing workload of issue 18 with
# `tracekit capture`, in one GPU-machine call of at most 10 minutes:
#
#   bash samples/scripts/gpu_phases.sh setup          # installs the carried tracekit wheel into /tmp/site
#   TK_OUT=/tmp/tk bash benchmarks/foreign/capture_all.sh [NAME...]
#
# NAME is a workload below, `foreign` (all issue-17 runs) or `crash` (all issue-18 runs); none = all, in the
# order listed (issue 17 first). Each run goes to $TK_OUT/h200-foreign-<name> or $TK_OUT/h200-crash-<mode>
# with --no-import (frames are built later on a CPU machine: `tracekit import --rebuild RUN`), its capture
# output to $TK_OUT/<run>.log. At the end: a table (name, rc, seconds, size) on stdout and in
# $TK_OUT/summary.tsv, then foreign17.tgz, crash18.tgz and logs.tgz in $TK_PACK (default $OUT, the device's
# return folder; no packing if neither is set).
#
# issue 17: --nsys --ncu --max-per-range 2, ncu limited to the workload's ranges and GEMM-named kernels
#   triton_waves     Triton bf16 GEMM, 133 tiles (a 1-tile last wave) vs 132    triton_waves_bad / _control
#   simt_smem        raw CUDA fp32 sgemm, 200 KB smem (1 CTA/SM) vs 2 KB        sgemm_smem_capped / _control
#                    (built here: nvcc -O3 -arch=sm_90; skipped and marked if that fails)
#   cublas_small_m   torch.mm bf16 M=16 (memory-bound) vs M=4096               decode_gemm_m16 /
#                                                                               prefill_gemm_m4096
#   fp8_eager_quant  eager FP8 quantization + _scaled_mm vs prequantized       fp8_linear / _prequant
#   eager_host_gaps  200 eager GEMMs with host work between vs a CUDA graph    eager_loop / graph_loop
#   base_clock       8192^3 bf16 under ncu --clock-control base (ncu only)     big_gemm
#   base_clock_none  the same under --clock-control none, with nsys            big_gemm
# issue 18: crash_segv.py (good bf16 + fp8 GEMMs, an NVFP4 error caught, then it dies), with --instrument
#   crash_segv, crash_abort, crash_illegal, crash_hang, crash_segv_in_gemm     --nsys --ncu
#   crash_segv_torchprof                                                       --torch-profiler
#   (runs h200-crash-segv, -abort, -illegal, -hang, -segv-in-gemm, -segv-torchprof)
#
# Why the ncu filter: tracekit's default ncu filter selects tracekit's own NVTX domain, which these programs
# never use. So the issue-17 runs pass --all-kernels and their own filter through --ncu-arg: --nvtx-include=
# <range>/ per range name (a push/pop range of the default domain) and --kernel-name=regex:<NCU_KERNELS>,
# which keeps torch's elementwise kernels (megabytes each in a report) out. With FOREIGN_RANGES=1 and a
# tracekit that has `capture --ranges REGEX`, that option replaces the --nvtx-include arguments.
#
# Settings (environment): TK_OUT (runs, default ./out); TK_PACK (default $OUT); TK_BUDGET_S (default 520 s
# for all runs: each pass gets a --timeout that ends inside it, a run is skipped and marked once less than
# 20 s a pass is left); RUN_TIMEOUT_S (per tracekit pass, default 100); CRASH_TIMEOUT_S (crash passes,
# default 60); HANG_TIMEOUT_S (the crash_hang passes, default 30); NCU_LAUNCHES (ncu --launch-count per
# issue-17 run, default 8); NCU_KERNELS (ncu kernel-name regex for the issue-17 runs; empty = every kernel
# inside the ranges). nsys is found as in samples/scripts/gpu_phases.sh (TRACEKIT_NSYS, TRACEKIT_NSYS_LIBS).
set -uo pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
F=$R/benchmarks/foreign
RUNS=${TK_OUT:-$R/out}
mkdir -p "$RUNS"
RUNS=$(cd "$RUNS" && pwd)
PACK=${TK_PACK:-${OUT:-}}
BUDGET=${TK_BUDGET_S:-520}
PASS_T=${RUN_TIMEOUT_S:-100}
CRASH_T=${CRASH_TIMEOUT_S:-60}
HANG_T=${HANG_TIMEOUT_S:-30}
LAUNCHES=${NCU_LAUNCHES:-8}
KERNELS=${NCU_KERNELS-gemm|Gemm|GEMM|gemv|Gemv|nvjet|matmul|xmma|cutlass}
export PYTHONPATH=${PYTHONPATH:-/tmp/site} PYTHONUNBUFFERED=1
export TRACEKIT_NSYS_LIBS=${TRACEKIT_NSYS_LIBS:-$R/.nsys-libs}
NSYS_GLOB=(/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys)
[[ -n ${TRACEKIT_NSYS:-} ]] || TRACEKIT_NSYS=$(ls -d "${NSYS_GLOB[@]}" 2>/dev/null | tail -1)
export TRACEKIT_NSYS
[[ -d /usr/local/cuda/bin ]] && export PATH=$PATH:/usr/local/cuda/bin # ncu, nvcc
T0=$SECONDS
SUMMARY=$RUNS/summary.tsv
printf 'name\trc\tseconds\tsize\trun\n' >"$SUMMARY"

FOREIGN=(triton_waves simt_smem cublas_small_m fp8_eager_quant eager_host_gaps base_clock base_clock_none)
CRASH=(crash_segv crash_abort crash_illegal crash_hang crash_segv_in_gemm crash_segv_torchprof)
ALL=("${FOREIGN[@]}" "${CRASH[@]}")

declare -A RANGES=(
  [triton_waves]="triton_waves_bad triton_waves_control"
  [simt_smem]="sgemm_smem_capped sgemm_smem_control"
  [cublas_small_m]="decode_gemm_m16 prefill_gemm_m4096"
  [fp8_eager_quant]="fp8_linear fp8_linear_prequant"
  [eager_host_gaps]="eager_loop graph_loop"
  [base_clock]="big_gemm"
  [base_clock_none]="big_gemm"
)

tk_has_ranges() { (cd /tmp && python3 -m tracekit capture --help 2>/dev/null) | grep -q -- '--ranges'; }

# ncu options that select the workload's own ranges: --all-kernels plus ncu's own filter, or --ranges REGEX
ncu_filter() {
  local name=$1 r regex=""
  FILTER=(--launch-count "$LAUNCHES")
  if [[ -n ${FOREIGN_RANGES:-} ]] && tk_has_ranges; then
    for r in ${RANGES[$name]}; do regex+="${regex:+|}$r"; done
    FILTER+=(--ranges "^($regex)\$")
  else
    FILTER+=(--all-kernels --ncu-arg=--nvtx)
    for r in ${RANGES[$name]}; do FILTER+=("--ncu-arg=--nvtx-include=$r/"); done
  fi
  [[ -n $KERNELS ]] && FILTER+=("--ncu-arg=--kernel-name=regex:$KERNELS")
  return 0
}

# record NAME RC START RUN: one summary row, echoed
record() {
  local size="-"
  [[ -d $4 ]] && size=$(du -sh "$4" | cut -f1)
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$((SECONDS - $3))" "$size" "$(basename "$4")" | tee -a "$SUMMARY"
}

# pass_timeout PASSES: tracekit's --timeout per pass, RUN_TIMEOUT_S or less so the run ends inside the budget
pass_timeout() {
  local rem=$((BUDGET - (SECONDS - T0) - 15)) t=$PASS_T
  ((rem / $1 < t)) && t=$((rem / $1))
  echo "$t"
}

# capture NAME RUN PASSES PASS_TIMEOUT TRACEKIT_ARGS... -- CMD...: one `tracekit capture`, logged; skipped
# (and marked so) when less than 20 s of the budget is left per pass
capture() {
  local name=$1 run=$2 passes=$3 t=$4 start=$SECONDS rc
  shift 4
  if ((t < 20)); then
    printf '%s\tskipped\t0\t-\t%s\n' "$name" "$(basename "$run") (budget of ${BUDGET}s spent)" |
      tee -a "$SUMMARY"
    return
  fi
  rm -rf "$run"
  echo "=== $name $(date +%T): tracekit capture --timeout $t $*" >"$run.log"
  (cd /tmp && timeout -k 10 "$((passes * t + 40))" python3 -m tracekit capture --timeout "$t" "$@") \
    >>"$run.log" 2>&1
  rc=$?
  record "$name" "$rc" "$start" "$run"
  tail -4 "$run.log" | sed 's/^/    /'
}

foreign() {
  local name=$1 run=$RUNS/h200-foreign-$1
  local tools=(--nsys --ncu) clock=(--clock-control none) cmd
  ncu_filter "$name"
  case $name in
    simt_smem)
      mkdir -p "$RUNS/bin"
      if ! nvcc -O3 -arch=sm_90 -o "$RUNS/bin/simt_smem" "$F/simt_smem.cu" -ldl \
        >"$RUNS/nvcc-simt_smem.log" 2>&1; then
        printf '%s\tnvcc-failed\t0\t-\t%s\n' "$name" "see nvcc-simt_smem.log" | tee -a "$SUMMARY"
        tail -5 "$RUNS/nvcc-simt_smem.log"
        return
      fi
      cmd=("$RUNS/bin/simt_smem") ;;
    base_clock) tools=(--ncu) clock=(--clock-control base) cmd=(python3 "$F/base_clock.py") ;;
    base_clock_none) cmd=(python3 "$F/base_clock.py") ;;
    *) cmd=(python3 "$F/$name.py") ;;
  esac
  capture "$name" "$run" "${#tools[@]}" "$(pass_timeout "${#tools[@]}")" "${tools[@]}" "${clock[@]}" \
    --max-per-range 2 "${FILTER[@]}" -o "$run" --no-import -- "${cmd[@]}"
}

crash() {
  local name=$1 mode=${1#crash_} t tools=(--nsys --ncu)
  mode=${mode%_torchprof}
  mode=${mode//_/-}
  [[ $name == *_torchprof ]] && tools=(--torch-profiler)
  t=$(pass_timeout "${#tools[@]}")
  ((t > CRASH_T)) && t=$CRASH_T
  [[ $mode == hang ]] && ((t > HANG_T)) && t=$HANG_T
  local base=${name#crash_}
  local run=$RUNS/h200-crash-${base//_/-}
  capture "$name" "$run" "${#tools[@]}" "$t" "${tools[@]}" --instrument --max-per-range 2 \
    -o "$run" --no-import -- python3 "$F/crash_segv.py" --mode "$mode"
}

names=()
for a in "${@:-all}"; do
  case $a in
    all) names+=("${ALL[@]}") ;;
    foreign) names+=("${FOREIGN[@]}") ;;
    crash) names+=("${CRASH[@]}") ;;
    *)
      if [[ " ${ALL[*]} " == *" $a "* ]]; then names+=("$a"); else
        echo "capture_all.sh: unknown workload '$a'; pick from: all foreign crash ${ALL[*]}" >&2
        exit 2
      fi ;;
  esac
done

{
  echo "=== environment $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv
  (cd /tmp && python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)
try:
    import triton; print('triton', triton.__version__)
except ImportError as e:
    print('triton missing:', e)
import tracekit; print('tracekit', tracekit.__version__, tracekit.__file__)")
  nvcc --version | tail -1
  echo "ncu $(command -v ncu || echo /usr/local/cuda/bin/ncu) nsys $TRACEKIT_NSYS"
} 2>&1 | tee "$RUNS/environment.log"

for n in "${names[@]}"; do
  echo "--- $n ($((SECONDS - T0)) s in)"
  if [[ $n == crash_* ]]; then crash "$n"; else foreign "$n"; fi
done

echo "=== done in $((SECONDS - T0)) s"
column -t -s $'\t' "$SUMMARY" 2>/dev/null || cat "$SUMMARY"

# pack: one .tgz per group into $TK_PACK/$OUT (the device returns at most 8 files of 16 MiB, 2 folders down)
if [[ -n $PACK ]]; then
  mkdir -p "$PACK"
  pack_group() { # TGZ PATTERN
    local tgz=$PACK/$1 dirs
    mapfile -t dirs < <(cd "$RUNS" && ls -d $2 2>/dev/null)
    ((${#dirs[@]})) || return 0
    tar czf "$tgz" -C "$RUNS" "${dirs[@]}"
    if (($(stat -c %s "$tgz") > 15 * 1024 * 1024)); then
      echo "$1 is over 15 MiB: packed again without .nsys-rep / .qdstrm (the .sqlite exports stay)"
      tar czf "$tgz" --exclude='*.nsys-rep' --exclude='*.qdstrm' -C "$RUNS" "${dirs[@]}"
    fi
  }
  pack_group foreign17.tgz 'h200-foreign-*/'
  pack_group crash18.tgz 'h200-crash-*/'
  (cd "$RUNS" && tar czf "$PACK/logs.tgz" --exclude='*/' $(ls -p | grep -v /))
  ls -la "$PACK"
fi
