#!/usr/bin/env bash
# The serving step (serve_step.py) and the layer loop (layer_loop.py) on the GPU machine, before tracekit bounds
# its ncu pass: what each costs plain, under ncu as tracekit ran it, under ncu with Nsight Compute's
# per-launch-config filter, under nsys and under the PyTorch profiler (ranges only, every operator, every operator
# with shapes). Run from the checkout root on the GPU machine with the wheels carried in .whl (tracekit, nvtx,
# msgspec: the capture path needs no polars) and .nsys-libs:
#   run(carry=[".whl", ".nsys-libs"], command="OUT=$OUT bash benchmarks/foreign/serve_probe.sh")
# Each capture is left unimported (--no-import) and packed into $OUT/<name>.tgz; logs go to $OUT/logs.tgz.
set -uo pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$R/out}
W=/tmp/serve; mkdir -p "$W" "$OUT"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEKIT_NSYS_LIBS=$R/.nsys-libs
export TRACEKIT_NSYS=${TRACEKIT_NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl
# .whl-before/: an older tracekit wheel, for the `before` phase (the capture as it was), installed apart
BEFORE_PATH=/tmp/site
if ls "$R"/.whl-before/tracekit-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-before "$R"/.whl-before/tracekit-*.whl
  BEFORE_PATH=/tmp/site-before:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv,noheader
S=$R/benchmarks/foreign/serve_step.py
L=$R/benchmarks/foreign/layer_loop.py
cd /tmp
secs() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
profiled() { cat "$W/$1.out" "$W/$1"/raw/*.log 2>/dev/null | grep -ac '==PROF== Profiling'; }
orphans() { pgrep -fa 'ncu|nsys|serve_step' | grep -v pgrep || echo "none"; }

T0=$(date +%s)
for phase in ${PHASES:-plain nsys loop torch before plc}; do
  echo "=== $phase $(date +%T)"
  t=$(date +%s.%N)
  case $phase in
    plain)
      timeout 120 python3 "$S" 2>&1 | tail -4; echo "plain serve_step wall $(secs "$t") s"
      t=$(date +%s.%N); timeout 60 python3 "$L" 2>&1 | tail -2; echo "plain layer_loop wall $(secs "$t") s" ;;
    before)
      # tracekit's ncu pass as it is: every launch inside the user's ranges; cut at ${BEFORE_S:-60} s by SIGTERM,
      # as a batch scheduler's time limit would
      PYTHONPATH=$BEFORE_PATH timeout -s TERM "${BEFORE_S:-60}" python3 -m tracekit capture --ncu --ranges serve --no-import -o "$W/before" \
        -- python3 "$S" > "$W/before.out" 2>&1
      echo "rc=$? wall $(secs "$t") s; kernels profiled so far: $(profiled before)"
      echo "left running 3 s after tracekit ended:"; sleep 3; orphans
      pkill -9 -f 'ncu' ; pkill -9 -f serve_step; sleep 1
      grep -o '"status": *"[a-z]*"' "$W/before/run.json" 2>/dev/null
      rm -f "$W"/before/raw/*.ncu-rep ;;  # only the count and the orphan matter here
    plc)
      # what is left of ${BUDGET_S:-560} s since the start, as tracekit's own pass timeout (it stops ncu itself)
      left=$(( ${BUDGET_S:-560} - $(date +%s) + T0 )); echo "plc pass timeout ${left} s"
      timeout $((left + 30)) python3 -m tracekit capture --ncu --ranges serve --launch-count 2 --ncu-arg=--filter-mode \
        --ncu-arg=per-launch-config --timeout "$left" --no-import -o "$W/plc" -- python3 "$S" > "$W/plc.out" 2>&1
      echo "rc=$? wall $(secs "$t") s; profiled: $(profiled plc)"
      cat "$W"/plc.out "$W"/plc/raw/* 2>/dev/null | grep -a '==PROF== Profiling' | sed 's/.*Profiling "\([^"]*\)".*/\1/' | sort | uniq -c | sort -rn | head -60
      ls -la "$W"/plc/raw ;;
    nsys)
      timeout 200 python3 -m tracekit capture --nsys --no-import -o "$W/nsys" -- python3 "$S" > "$W/nsys.out" 2>&1
      echo "rc=$? wall $(secs "$t") s"; ls -la "$W"/nsys/raw ;;
    torch)
      for mode in ranges all shapes; do
        t=$(date +%s.%N); extra=(--ops ranges); [ $mode = all ] && extra=(--ops all)
        [ $mode = shapes ] && extra=(--ops all --record-shapes)
        timeout 200 python3 -m tracekit.collectors.torchprof --out "$W/torch-$mode/trace.json.gz" "${extra[@]}" \
          -- "$S" > "$W/torch-$mode.out" 2>&1
        echo "torch $mode rc=$? wall $(secs "$t") s: $(grep -h 'serve/' "$W/torch-$mode.out" | tr '\n' ' ')"
      done
      t=$(date +%s.%N)
      timeout 200 python3 -m tracekit capture --torch-profiler --torch-ops all --no-import -o "$W/torchprof" -- python3 "$S" > "$W/torchprof.out" 2>&1
      echo "capture --torch-profiler rc=$? wall $(secs "$t") s" ;;
    loop)
      timeout 120 python3 -m tracekit capture --nsys --no-import -o "$W/loop-nsys" -- python3 "$L" > "$W/loop.out" 2>&1
      echo "rc=$? wall $(secs "$t") s"; tail -3 "$W/loop.out" ;;
  esac
done
# at most 8 files of 16 MiB come back: one xz tarball a capture (the PyTorch ones together), split where larger
pack() { local name=$1; shift; tar cf - -C "$W" "$@" 2>/dev/null | xz -T0 -6 > "$OUT/$name.tar.xz"
  if [ "$(stat -c %s "$OUT/$name.tar.xz")" -gt 15000000 ]; then
    split -b 15000000 -d "$OUT/$name.tar.xz" "$OUT/$name.tar.xz."; rm "$OUT/$name.tar.xz"; fi; }
for d in before plc nsys loop-nsys; do [ -d "$W/$d" ] && pack "$d" "$d"; done
ls -d "$W"/torch* >/dev/null 2>&1 && pack torch $(cd "$W" && ls -d torch*/)
(cd "$W" && tar czf "$OUT/logs.tgz" ./*.out)
ls -la "$OUT"
