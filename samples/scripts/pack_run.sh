#!/usr/bin/env bash
# Makes a captured run small enough to commit: xz-compresses its reports in raw/ (ncu reports shrink 5-40x; the
# importer reads .xz transparently), drops empty files, then rebuilds the frames with `tracekit import --rebuild`.
#   samples/scripts/pack_run.sh RUN...
set -euo pipefail
for run in "$@"; do
  find "$run/raw" -maxdepth 1 -type f \( -name '*.ncu-rep' -o -name '*.sqlite' -o -name '*.nsys-rep' -o -name '*.qdstrm' \) -exec xz -9 -T1 {} \;
  find "$run/raw" -type f -empty -delete
  tracekit import --rebuild "$run" >/dev/null || [ $? -eq 4 ]
  du -sh "$run"
done
