#!/usr/bin/env bash
# The h200-moe sample and the MoE GPU tests in one device call (fits 10 minutes):
#   samples/scripts/moe_phases.sh [PHASE...]    phases: setup tests capture (default: all three)
# Carry .whl (tracekit + nvtx wheels: ../shared/tools/device-wheels.sh .whl, `pip wheel --no-deps -w .whl .`) and
# .nsys-libs (../shared/tools/nsys-libs.sh .nsys-libs). Results under $TK_OUT (default ./out): out/h200-moe is the
# run to commit as samples/h200-moe after `samples/scripts/pack_run.sh` on the CPU machine.
set -uo pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${TK_OUT:-$R/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEKIT_NSYS_LIBS=$R/.nsys-libs
export TRACEKIT_NSYS=${TRACEKIT_NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
tk() { (cd /tmp && python3 -m tracekit "$@"); }
phases=${*:-setup tests capture}
for p in $phases; do
  echo "=== $p $(date +%T)"
  case $p in
    setup)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$R"/.whl/*.whl
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv ;;
    tests)
      (cd /tmp && timeout 200 python3 -m pytest -c "$R/pyproject.toml" -o addopts=-ra --rootdir "$R" -p no:cacheprovider -m gpu \
        "$R/tests/gpu/test_moe_gpu.py" -q -rs -W ignore::pytest.PytestUnraisableExceptionWarning) 2>&1 | tee "$OUT/moe-tests.log" | tail -20 ;;
    capture)
      # bf16 and fp8 grouped GEMMs + the bf16 per-expert loop, uniform and skewed routing, under nsys: the timeline
      # gives the grouped kernels' names (their tile) and the moe ranges; the benchmark's rows give the timings.
      timeout 260 bash -c "cd /tmp && python3 -m tracekit capture --nsys -o '$OUT/h200-moe' --no-import -- \
        python3 -m tracekit bench moe --backends torch-bf16-grouped,torch-fp8-grouped,torch-bf16-loop \
        --tokens 16,64,256,1024,4096 --routing uniform,zipf:1.2 --repeats 10 --warmup 3 --stall-timeout 120" \
        > "$OUT/moe-capture.log" 2>&1; echo "rc=$?"; tail -25 "$OUT/moe-capture.log"; du -sh "$OUT/h200-moe" ;;
  esac
done
