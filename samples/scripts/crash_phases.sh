#!/usr/bin/env bash
# One GPU-machine call for the crash work (issue 18) and the seed's flow, in order of importance, each under its
# own time limit; results packed into $OUT (the device returns at most 8 files of 16 MiB):
#   1. benchmarks/foreign/capture_all.sh crash  crashing workloads under tracekit capture --instrument (crash18.tgz)
#   2. the seed's flow: tracekit capture --nsys --ncu -- tracekit bench gemm over bf16, FP8 and the FP4 backends at
#      three M (ncu limited to GEMM kernels so the FP8 quantize kernels do not take the call) (seed.tgz)
#   3. benchmarks/bench_instrument.py --breadcrumbs, stand-in and --torch (the wrapper's cost with breadcrumbs)
#   4. the GPU tests of the crash capture and the instrument wrapper
#   5. an emit_nvtx(record_shapes=True) capture under nsys (emit.tgz)
# Needs: carried .whl (tracekit + nvtx + msgspec ...), .nsys-libs, .carry/fi-py.tgz; run from the repo root.
set -uo pipefail
R=$(pwd); export TK_OUT=/tmp/tk TK_PACK=$OUT; mkdir -p /tmp/tk /tmp/pk
bash samples/scripts/gpu_phases.sh setup 2>&1 | tail -2
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEKIT_NSYS_LIBS=$R/.nsys-libs PATH=$PATH:/usr/local/cuda/bin
export TRACEKIT_NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
T0=$SECONDS
LIMIT=${LIMIT_S:-530}
# run STEP only when at least NEED seconds of the call's LIMIT are left
left() { echo $((LIMIT - (SECONDS - T0))); }
room() { if (($(left) < $1)); then echo "=== skipped $2: $(left) s left"; return 1; fi; }
TK_PACK=/tmp/pk TK_BUDGET_S=${CRASH_BUDGET_S:-230} bash benchmarks/foreign/capture_all.sh crash 2>&1 | tail -12
echo "=== crash done at $((SECONDS - T0)) s"
room 100 seed && (cd /tmp && timeout $(($(left) < 160 ? $(left) - 10 : 150)) python3 -m tracekit capture --nsys --ncu --max-per-range 1 --timeout 150 \
  '--ncu-arg=--kernel-name=regex:nvjet|gemm|Gemm|xmma|cutlass|splitK' -o /tmp/tk/h200-capture-seed --no-import -- \
  python3 -m tracekit bench gemm --backends torch-bf16,torch-fp8-tensorwise,torch-nvfp4,flashinfer-fp4-cutlass,sgl-fp4 \
  --shapes 16x2048x6144,256x2048x6144,4096x2048x6144 --repeats 10 --warmup 3) > /tmp/tk/seed.log 2>&1
echo "seed rc=$? at $((SECONDS - T0)) s"; tail -6 /tmp/tk/seed.log
room 60 instrument && (cd /tmp && timeout 60 python3 "$R/benchmarks/bench_instrument.py" --breadcrumbs && timeout 90 python3 "$R/benchmarks/bench_instrument.py" --torch --breadcrumbs --rounds 4) > /tmp/tk/instrument.log 2>&1
echo "instrument rc=$? at $((SECONDS - T0)) s"; grep -v '^\s*$' /tmp/tk/instrument.log | tail -14
room 60 tests && (cd /tmp && timeout $(($(left) - 45)) python3 -m pytest -c "$R/pyproject.toml" -o addopts=-ra --rootdir "$R" -p no:cacheprovider -m gpu \
  "$R/tests/gpu/test_crash_capture_gpu.py" "$R/tests/gpu/test_instrument_gpu.py" -q -rs -W ignore::pytest.PytestUnraisableExceptionWarning) > /tmp/tk/tests.log 2>&1
echo "tests rc=$? at $((SECONDS - T0)) s"; tail -8 /tmp/tk/tests.log
room 35 emit && (cd /tmp/tk && LD_LIBRARY_PATH=$R/.nsys-libs:${LD_LIBRARY_PATH:-} timeout 30 "$TRACEKIT_NSYS" profile -t cuda,nvtx -s none \
  --cpuctxsw=none --export=sqlite -o /tmp/tk/emit_nvtx_shapes python3 "$R/benchmarks/foreign/emit_nvtx_shapes.py") > /tmp/tk/emit.log 2>&1
echo "emit rc=$? at $((SECONDS - T0)) s"
# pack: reports xz-compressed, no .nsys-rep (the .sqlite export is what tracekit reads)
find /tmp/tk -name '*.nsys-rep' -delete; find /tmp/tk -name '*.ncu-rep' -size +1M -exec xz -T0 -6 {} \;
cp /tmp/pk/crash18.tgz "$OUT/" 2>/dev/null
(cd /tmp/tk && [ -d h200-capture-seed ] && tar czf "$OUT/seed.tgz" h200-capture-seed)
(cd /tmp/tk && tar czf "$OUT/emit.tgz" emit_nvtx_shapes.sqlite emit.log 2>/dev/null)
(cd /tmp/tk && tar czf "$OUT/logs.tgz" --exclude='h200-*' --exclude='*.sqlite' --exclude='bin' . 2>/dev/null)
ls -la "$OUT"
