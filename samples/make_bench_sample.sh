#!/usr/bin/env bash
# Make a small sample run of `tracekit bench gemm` on the GPU machine (the lead runs this there).
#   samples/make_bench_sample.sh [OUT]        default OUT: samples/h200-bench-gemm
# Every built-in backend on three GLM-5 shapes: bf16 / fp8 measured, FP4 recorded as unsupported with the
# libraries' own errors, sgl-kernel as unavailable where absent. Needs torch with CUDA (+ nvtx, nvidia-ml-py);
# flashinfer's Python files are enough to reach its FP4 errors (DEVICE.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-samples/h200-bench-gemm}"
if [ -e "$OUT" ]; then
  echo "$OUT exists; remove it or give another path" >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m tracekit bench gemm \
  --backends all \
  --shapes 16x768x6144,1024x2048x6144,4096x2048x6144 \
  --repeats 25 --warmup 10 --stall-timeout 300 \
  -o "$OUT" --json > "$OUT.json.tmp" || rc=$?
rc=${rc:-0}
mv "$OUT.json.tmp" "$OUT/bench.json" 2>/dev/null || true
rm -rf "$OUT/raw/logs"/*.stderr.txt.empty 2>/dev/null || true
echo "wrote $OUT (exit $rc); rows: $(wc -l < "$OUT/raw/measurements.jsonl") measurements, $(wc -l < "$OUT/raw/failures.jsonl") failures" >&2
exit "$rc"
