#!/usr/bin/env bash
# Prepares this checkout for a call of the GPU machine and checks it fits the call's 64 MiB (the working tree that
# travels plus the carried folders):
#   samples/scripts/device_prep.sh          build .whl (tracekit, nvtx, polars, msgspec) and .nsys-libs, print sizes
#   samples/scripts/device_prep.sh --slim   also delete, from the working tree only, what no GPU phase reads (the
#                                           TUI snapshots and the committed samples); restore after the call with
#                                           `git checkout -- tests/__snapshots__ samples`
# Then: run(carry=[".whl", ".nsys-libs"], command="TK_OUT=/tmp/tk TK_PACK=$OUT bash samples/scripts/gpu_phases.sh ...")
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=$((64 * 1024 * 1024))
if [[ ! -d .whl ]] || ! ls .whl/polars-*.whl >/dev/null 2>&1; then
  ../shared/tools/device-wheels.sh .whl msgspec
fi
rm -f .whl/tracekit-*.whl .whl/zlib_ng-*.whl # optional dependency: the gzip fallback
# tracekit's wheel holds its C scanner, built for one Python: the GPU machine's (3.12; DEVICE_PYTHON to change)
"${DEVICE_PYTHON:-python3.12}" -m pip wheel -q --no-deps -w .whl .
[[ -d .nsys-libs ]] || ../shared/tools/nsys-libs.sh .nsys-libs
if [[ ${1:-} == --slim ]]; then
  rm -rf tests/__snapshots__
  find samples -mindepth 1 -maxdepth 1 -type d -name 'h200-*' -exec rm -rf {} +
  rm -f samples/calibration-h200.json
fi
tree=$(git ls-files -co --exclude-standard -z | python3 -c "import os, sys
print(sum(os.path.getsize(p) for p in sys.stdin.buffer.read().decode().split(chr(0)) if p and os.path.isfile(p)))")
carry=$(du -cb .whl .nsys-libs | tail -1 | cut -f1)
total=$((tree + carry))
python3 -c "import sys; t, c, l = map(int, sys.argv[1:]); print(f'working tree {t/1e6:.1f} MB + carry {c/1e6:.1f} MB = {(t+c)/1e6:.1f} MB of {l/1e6:.1f} MB')" \
  "$tree" "$carry" "$limit"
if ((total > limit - 512 * 1024)); then
  echo "too close to the limit: run with --slim (restore with git checkout -- tests/__snapshots__ samples)" >&2
  exit 1
fi
