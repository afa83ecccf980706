#!/usr/bin/env bash
# Captures the h200-gemm-probe sample on a GPU machine: the probe under Nsight Compute (the six sections the
# explainer reads, --clock-control none) and under Nsight Systems (cuda + nvtx, SQLite export). Outputs go to
# ${OUT:-out}/; import them on any machine with:
#   tracekit import out/probe.ncu-rep out/probe.sqlite -o samples/h200-gemm-probe
# Needs: torch with CUDA, the nvtx package, ncu; nsys (or the copy inside Nsight Compute, with libdw on
# LD_LIBRARY_PATH: see shared/tools/nsys-libs.sh).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
S=$(cd "$(dirname "$0")" && pwd)
[ -n "${PYTHONPATH:-}" ] || export PYTHONPATH=$(dirname "$(dirname "$S")")
L=${LAUNCHES:-1}
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
nsys=${NSYS:-$(command -v nsys || ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv | tee "$out/gpu.txt"
"$ncu" --version | tail -1 | tee -a "$out/gpu.txt"
python3 "$S/gemm_probe.py" --launches "$L" 2>&1 | tee "$out/plain.log"
time "$ncu" --nvtx --nvtx-include "regex:tracekit@.+/" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section WarpStateStats \
  --clock-control none --target-processes all -f -o "$out/probe" \
  python3 "$S/gemm_probe.py" --launches "$L" > "$out/ncu.log" 2>&1; echo "ncu rc=$?"
tail -5 "$out/ncu.log"
time "$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none --export=sqlite -f true -o "$out/probe" \
  python3 "$S/gemm_probe.py" --launches "$L" > "$out/nsys.log" 2>&1; echo "nsys rc=$?"
tail -5 "$out/nsys.log"
ls -la "$out"
