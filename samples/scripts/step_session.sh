#!/usr/bin/env bash
# One GPU-machine call for the GEMMs of a real step, behind one deadline: each phase's result is packed into
# $TK_PACK (default $OUT) as soon as it ends, so a call cut short still returns what it made.
#
#   TK_DEADLINE_S=540 bash samples/scripts/step_session.sh PHASE...
#
# Phases:
#   setup       install the carried wheels (.whl: tracekit for Python 3.12, nvtx, msgspec) into /tmp/site
#   block       benchmarks/foreign/block_step.py (a transformer block eager, under torch.compile max-autotune and
#               with an FP8 MLP, SDPA attention; no tracekit import): once plainly (fills Inductor's cache), then
#               `tracekit capture --nsys --ncu --ranges block` (the ncu pass takes each GEMM of the nsys timeline
#               once per place: --ncu-kernels gemm, the default) into block-nsys-ncu, and
#               `tracekit capture --torch-profiler` into block-torchprof
#   planted     raw `ncu` with its DEFAULT sections (no tracekit metrics) around the planted causes of
#               benchmarks/foreign: triton_waves (a one-tile last wave), simt_smem (occupancy capped by shared
#               memory), cublas_small_m (M=16, memory-bound), base_clock (ncu's default clock control locks the
#               clock to base) into ncu-default-<name>.ncu-rep, with the program's output beside each
#   fix         `tracekit bench gemm --shapes-from samples/h100-serve-torchprof --what-if fp8` (the recommendation
#               table), then the serving step as profiled and with the recommended FP8 MLPs (step time before/after)
#   planpass    `tracekit capture --ncu --ranges serve` (no --nsys) over a short serving step: the nsys planning
#               pass, then the ncu pass on the GEMMs its timeline chose
#   decoder     the ncu pass of `tracekit capture --nsys --ncu --ranges serve` over a 16-layer decoder step
#               (benchmarks/foreign/serve_step.py --layers 16) with the capture's defaults (the GEMMs of the nsys
#               timeline, each place once): wall time of each pass and the kernels ncu profiled (DECODER_ARGS adds
#               capture options, e.g. --ncu-kernels all for every kernel under the per-configuration bound;
#               DECODER_NAME names the run)
# Settings: TK_OUT (runs, default /tmp/tk), TK_PACK (default $OUT), TK_DEADLINE_S (default 540: a phase is skipped
# once less than 30 s are left, and each capture's --timeout ends inside the deadline).
set -uo pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${TK_OUT:-/tmp/tk}; mkdir -p "$RUNS"
PACK=${TK_PACK:-${OUT:-$RUNS/pack}}; mkdir -p "$PACK"
DEADLINE=${TK_DEADLINE_S:-540}
T0=$SECONDS
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEKIT_NSYS_LIBS=$R/.nsys-libs
export TRACEKIT_NSYS=${TRACEKIT_NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
export TORCHINDUCTOR_CACHE_DIR=/tmp/tk-inductor-cache
[[ -d /usr/local/cuda/bin ]] && export PATH=$PATH:/usr/local/cuda/bin
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
GEMM_NAMES='nvjet|gemm|Gemm|GEMM|triton_tem|matmul|cutlass|xmma|sgemm'
left() { echo $((DEADLINE - (SECONDS - T0))); }
tk() { (cd /tmp && python3 -m tracekit "$@"); }
# pack NAME PATH...: one tarball in $PACK, made now
pack() { local n=$1; shift; tar czf "$PACK/$n.tgz" -C "$RUNS" "$@" 2>/dev/null; ls -la "$PACK/$n.tgz" | awk '{print "packed", $5, $9}'; }
# cap SECONDS: a timeout that ends 20 s before the deadline
cap() { local t=$1 l; l=$(($(left) - 20)); ((l < t)) && t=$l; ((t < 10)) && t=10; echo "$t"; }
passes() { python3 - "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/run.json"))
print(f"  status {m['status']}; reason: {m.get('incomplete_reason')}")
for p in m["capture"]["passes"]:
    line = f"  {p['tool']} pass: wall {p['wall_s']:.1f} s, exit {p['exit_code']}, {p['status']}"
    ncu = p.get("ncu")
    if ncu:
        line += f"; kernels profiled {ncu['profiled']}: {json.dumps(ncu['kernels'])}"
    print(line)
PY
}
for p in "$@"; do
  if (($(left) < 30)); then echo "=== $p skipped: deadline"; continue; fi
  echo "=== $p $(date +%T) ($(left) s left)"
  case $p in
    setup)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
      (cd /tmp && python3 -c "import tracekit, torch, triton; print('tracekit', tracekit.__version__, 'torch', torch.__version__, 'triton', triton.__version__)")
      ;;
    block)
      S=$R/benchmarks/foreign/block_step.py
      t=$SECONDS; (cd /tmp && timeout "$(cap 200)" python3 "$S") > "$RUNS/block-plain.log" 2>&1
      echo "plain: rc=$? $((SECONDS - t)) s"; grep -a '^block/' "$RUNS/block-plain.log"
      t=$SECONDS
      tk capture --nsys --ncu --ranges '^block/' --timeout "$(cap 150)" --no-import \
        -o "$RUNS/block-nsys-ncu" -- python3 "$S" > "$RUNS/block-nsys-ncu.log" 2>&1
      echo "nsys+ncu: rc=$? $((SECONDS - t)) s"; passes "$RUNS/block-nsys-ncu"
      t=$SECONDS
      tk capture --torch-profiler --timeout "$(cap 120)" --no-import -o "$RUNS/block-torchprof" -- python3 "$S" \
        > "$RUNS/block-torchprof.log" 2>&1
      echo "torch-profiler: rc=$? $((SECONDS - t)) s"; passes "$RUNS/block-torchprof"
      pack block block-plain.log block-nsys-ncu block-nsys-ncu.log block-torchprof block-torchprof.log
      ;;
    planted)
      F=$R/benchmarks/foreign
      (cd /tmp && nvcc -O3 -arch=sm_90 -o /tmp/simt_smem "$F/simt_smem.cu" -ldl) > "$RUNS/nvcc.log" 2>&1 || echo "nvcc failed"
      declare -A CMD=(
        [triton_waves]="python3 $F/triton_waves.py --reps 1"
        [simt_smem]="/tmp/simt_smem --reps 1"
        [cublas_small_m]="python3 $F/cublas_small_m.py --reps 1"
        [base_clock]="python3 $F/base_clock.py --reps 1"
      )
      declare -A RNG=(
        [triton_waves]="triton_waves_bad triton_waves_control"
        [simt_smem]="sgemm_smem_capped sgemm_smem_control"
        [cublas_small_m]="decode_gemm_m16 prefill_gemm_m4096"
        [base_clock]="big_gemm"
      )
      files=()
      for n in triton_waves simt_smem cublas_small_m base_clock; do
        (($(left) < 40)) && { echo "$n skipped: deadline"; continue; }
        inc=(); for r in ${RNG[$n]}; do inc+=(--nvtx-include "$r/"); done
        t=$SECONDS
        (cd /tmp && timeout "$(cap 90)" "$NCU" --nvtx "${inc[@]}" --kernel-name "regex:$GEMM_NAMES" \
          -f -o "$RUNS/ncu-default-$n" ${CMD[$n]}) > "$RUNS/ncu-default-$n.log" 2>&1
        echo "$n: rc=$? $((SECONDS - t)) s $(du -h "$RUNS/ncu-default-$n.ncu-rep" 2>/dev/null | cut -f1)"
        files+=("ncu-default-$n.ncu-rep" "ncu-default-$n.log")
      done
      ls "$RUNS"/ncu-default-*.ncu-rep >/dev/null 2>&1 && pack planted "${files[@]}" nvcc.log
      ;;
    decoder)
      name=${DECODER_NAME:-decoder16}
      t=$SECONDS
      tk capture --nsys --ncu --ranges serve ${DECODER_ARGS:-} --timeout "$(cap 240)" --no-import \
        -o "$RUNS/$name" -- python3 "$R/benchmarks/foreign/serve_step.py" --layers 16 > "$RUNS/$name.log" 2>&1
      echo "$name: rc=$? $((SECONDS - t)) s"; grep -a 'ncu profiles' "$RUNS/$name.log" | head -2; passes "$RUNS/$name"
      # run.json and the log: the passes' wall times and what the ncu pass profiled
      (cd "$RUNS" && tar czf "$PACK/$name.tgz" "$name/run.json" "$name.log")
      ls -la "$PACK/$name.tgz" | awk '{print "packed", $5, $9}'
      ;;
    fix)
      # `bench gemm --shapes-from` on the committed serving sample (its stored Analysis: no polars needed here),
      # bf16 as profiled plus the FP8 what-if, then the step itself as profiled (the last layer's MLP in FP8) and
      # with every layer's MLP in FP8 (what the what-if recommends), each timed by the program's CUDA events
      t=$SECONDS
      (cd /tmp && timeout "$(cap 240)" python3 -m tracekit bench gemm --shapes-from "$R/samples/h100-serve-torchprof" \
        --what-if fp8 --json -o "$RUNS/fix-bench") > "$RUNS/fix-bench.json" 2> "$RUNS/fix-bench.log"
      echo "bench --shapes-from: rc=$? $((SECONDS - t)) s"; tail -3 "$RUNS/fix-bench.log"
      S=$R/benchmarks/foreign/serve_step.py
      for v in before:1 after:0,1; do
        (cd /tmp && timeout "$(cap 90)" python3 "$S" --fp8-layers "${v#*:}") > "$RUNS/fix-step-${v%%:*}.log" 2>&1
        echo "step ${v%%:*} (fp8 layers ${v#*:}): rc=$?"; cat "$RUNS/fix-step-${v%%:*}.log" | tail -4
      done
      pack fix fix-bench fix-bench.json fix-bench.log fix-step-before.log fix-step-after.log
      ;;
    planpass)
      # `--ncu` alone: the nsys planning pass, then the ncu pass on the GEMMs its timeline chose
      t=$SECONDS
      tk capture --ncu --ranges serve --timeout "$(cap 150)" --no-import -o "$RUNS/planpass" \
        -- python3 "$R/benchmarks/foreign/serve_step.py" --decode-steps 5 --prefill-steps 3 > "$RUNS/planpass.log" 2>&1
      echo "planpass: rc=$? $((SECONDS - t)) s"; grep -a 'planning\|ncu profiles' "$RUNS/planpass.log" | head -4
      passes "$RUNS/planpass"
      pack planpass planpass planpass.log
      ;;
    *) echo "unknown phase $p" ;;
  esac
done
echo "=== done $(date +%T) after $((SECONDS - T0)) s"
