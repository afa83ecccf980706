#!/usr/bin/env bash
# tracekit's own captures on a GPU machine, phase by phase: `gpu_phases.sh PHASE...` with phases
#   setup     install the carried wheels (tracekit, nvtx, polars, msgspec) and FlashInfer's Python files (if carried
#             as .carry/fi-py.tgz) into /tmp/site
#   tests     the GPU tests (tests/gpu, marker gpu; GPU_TESTS="tests/gpu/a.py ..." picks files, relative to the checkout)
#   probe     the h200-gemm-probe sample: samples/scripts/gemm_probe.py under ncu and nsys (raw files)
#   bench     the h200-bench-gemm sample: `tracekit bench gemm --backends all` (plain timings)
#   capture   the h200-capture-gemm sample: `tracekit capture --nsys --ncu -- tracekit bench gemm ...`
#   planted   the planted-cause runs of benchmarks/planted under `tracekit capture` (PLANTED="b_waves" for some)
#   calibrate `tracekit calibrate`
#   overhead  benchmarks/bench_capture_overhead.py: ncu modes on its sweep, timelines on a short bench
#   timeline  benchmarks/bench_capture_overhead.py: nsys and the PyTorch profiler on the default glm5 bench
#   torchprof benchmarks/torchprof_probe.py: where a PyTorch-profiled worker process spends its time
#   instrument benchmarks/bench_instrument.py: the wrapper's cost per call, stand-in and real torch.mm on the GPU
#   nsysprobe benchmarks/nsys_probe.py: where Nsight Systems' time goes around one short CUDA program
#   pack      one .tgz per result folder of $TK_OUT, plus logs.tgz, into $TK_PACK (the device tool returns at most
#             8 files, 2 folders down: a run folder's frames/ and raw/ need packing); PACK_SLIM=1 leaves out the
#             profilers' own reports and traces (kept timeline runs: their logs and frames are what is read)
#   ranks     two torchrun ranks on the one GPU (gloo): `tracekit capture --ranks --nsys` of samples/scripts/tp_gemm_gloo.py
#             into $OUT/h200-ranks-gloo; with RANKS_TESTS=1 also tests/gpu/test_ranks_gpu.py (also part of `tests`)
#   serve     the serving step benchmarks/foreign/serve_step.py (no tracekit import) with capture's defaults:
#             `--nsys --ncu --ranges serve` into $OUT/h200-serve-nsys-ncu and `--torch-profiler` into
#             $OUT/h200-serve-torchprof (both --no-import, SERVE_TIMEOUT s each, default 300); prints each pass's wall
#             time, the kernels the ncu pass profiled (per kernel name) and the run's status
#   shapes    benchmarks/bench_capture_overhead.py on the serving step: the PyTorch profiler with ranges only vs
#             ranges and every operator's shapes (--torch-ops ranges / shapes), ROUNDS rounds (default 3)
#   budget    `--ncu --ranges serve --max-per-range 50 --ncu-budget BUDGET_S` (default 15) of the serving step into
#             $OUT/h200-serve-budget: does Nsight Compute stop profiling at cuProfilerStop (profiled_after near 0,
#             stopped_by profiler-stop) while the program runs to its end (its prefill line printed)?
#   sigterm   a capture of the serving step (--nsys --ncu --ranges serve) sent SIGTERM SIGTERM_AFTER s (default 10)
#             into its ncu pass (as `timeout` or a Slurm time limit would); prints the exit code (143 expected), the
#             run's status and reason, the passes, and any ncu / nsys / serve_step process left 3 s later
# The checkout plus carried wheels must stay under the device's 64 MiB: polars' runtime wheel alone is 52 MB, so
# polars travels as .carry/polars-site.tar.xz, its installed files under xz -9 (31.7 MB), made here with
#   d=$(mktemp -d); for w in polars-*.whl polars_runtime_*.whl; do unzip -q -o "$w" -d "$d"; done
#   mkdir -p .carry; tar cf - -C "$d" . | xz -T0 -9 > .carry/polars-site.tar.xz
# Results go under $TK_OUT (default ./out); each phase logs to $OUT/<phase>.log. Python runs from /tmp so that the
# checkout's tracekit/ folder does not shadow the installed package (collectors/ maps into it only when installed).
set -uo pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${TK_OUT:-$R/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEKIT_NSYS_LIBS=$R/.nsys-libs
export TRACEKIT_NSYS=${TRACEKIT_NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
tk() { (cd /tmp && python3 -m tracekit "$@"); }
phase() { echo "=== $1 $(date +%T)"; }
secs() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
SERVE=${SERVE_SCRIPT:-$R/benchmarks/foreign/serve_step.py}
# a kept run's status, reason and passes (run.json through the json module: no polars needed here)
passes() { python3 - "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/run.json"))
print(f"status {m['status']}; reason: {m.get('incomplete_reason')}")
for p in m["capture"]["passes"]:
    line = f"  {p['tool']} pass: wall {p['wall_s']:.1f} s, exit {p['exit_code']}, {p['status']}"
    line += f", signal {p['signal']}" if p.get("signal") else ""
    ncu = p.get("ncu")
    if ncu:
        line += f"; kernels profiled {ncu['profiled']}: {json.dumps(ncu['kernels'])}"
        line += f"; budget {json.dumps(ncu['budget'])}" if ncu.get("budget") else ""
    print(line)
PY
}
left() { pgrep -fa 'nsight-compute|/ncu |/nsys |serve_step' | grep -v pgrep || echo "none"; }
for p in "$@"; do
  phase "$p"
  case $p in
    setup)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl
      [ -f "$R/.carry/fi-py.tgz" ] && tar xzf "$R/.carry/fi-py.tgz" -C /tmp/site
      # polars as an xz tarball of its installed files (31.7 MB, against 54.8 MB of wheels): with it the checkout
      # and the other wheels fit in a call's 64 MiB, so the GPU tests that import polars run there too
      [ -f "$R/.carry/polars-site.tar.xz" ] && tar xJf "$R/.carry/polars-site.tar.xz" -C /tmp/site
      (cd /tmp && timeout 120 python3 -c "import time;t=time.time();import flashinfer;print('flashinfer', flashinfer.__version__, round(time.time()-t,1),'s')") 2>&1 | tail -3
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv ;;
    tests)
      # pytest puts its rootdir on sys.path (pyproject's pythonpath = ["."], for tests.support): a rootdir of links to
      # the checkout's tests, samples, benchmarks and docs, without its tracekit/ folder, which would shadow the
      # installed package (its collectors/ and analyzers/ map into tracekit only when installed)
      T=/tmp/tkroot; rm -rf "$T"; mkdir -p "$T"; cp "$R/pyproject.toml" "$T/"
      for d in tests samples benchmarks docs; do ln -s "$R/$d" "$T/$d"; done
      (cd /tmp && timeout ${TESTS_TIMEOUT:-330} python3 -X faulthandler -m pytest -c "$T/pyproject.toml" -o addopts=-ra --rootdir "$T" -p no:cacheprovider -m gpu $(for t in ${GPU_TESTS:-tests/gpu}; do printf '%s ' "$T/$t"; done) -q -rs -W ignore::pytest.PytestUnraisableExceptionWarning) 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    probe)
      (cd /tmp && LD_LIBRARY_PATH=$R/.nsys-libs:${LD_LIBRARY_PATH:-} NSYS=$TRACEKIT_NSYS OUT=$OUT/probe bash "$R/samples/scripts/make_probe_sample.sh") > "$OUT/probe.log" 2>&1; tail -4 "$OUT/probe.log" ;;
    bench)
      tk bench gemm --backends all --shapes glm5 --repeats 25 --warmup 10 --stall-timeout 300 -o "$OUT/h200-bench-gemm" > "$OUT/bench.log" 2>&1; echo "rc=$?"; tail -30 "$OUT/bench.log" ;;
    capture)
      tk capture --nsys --ncu --max-per-range 1 -o "$OUT/h200-capture-gemm" --no-import -- python3 -m tracekit bench gemm \
        --backends torch-bf16,torch-fp8-tensorwise,torch-fp8-blockwise,torch-nvfp4,flashinfer-fp4-cutlass,sgl-fp4 \
        --shapes 16x2048x6144,256x2048x6144,4096x2048x6144 --repeats 10 --warmup 3 > "$OUT/capture.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/capture.log" ;;
    planted)
      for s in ${PLANTED:-a_clock b_waves c_memory d_smem_occupancy e_launch_gaps f_aux_quantize}; do
        tools="--nsys --ncu"; [ "$s" = a_clock ] && tools="--nsys"
        timeout 200 bash -c "cd /tmp && python3 -m tracekit capture $tools --max-per-range 1 -o "$OUT/planted-$s" --no-import -- python3 '$R/benchmarks/planted/$s.py'" > "$OUT/planted-$s.log" 2>&1
        echo "$s rc=$? $(du -sh "$OUT/planted-$s" | cut -f1)"
      done ;;
    calibrate)
      timeout 120 bash -c "cd /tmp && python3 -m tracekit calibrate -o '$OUT/calibration-h200.json'" > "$OUT/calibrate.log" 2>&1; echo "rc=$?"; tail -20 "$OUT/calibrate.log" ;;
    ranks)
      timeout 150 bash -c "cd /tmp && python3 -m tracekit capture --ranks --nsys -o '$OUT/h200-ranks-gloo' --no-import -- \
        python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29611 '$R/samples/scripts/tp_gemm_gloo.py' \
        --steps 8 --slow-rank 1 --extra-gemms 4" > "$OUT/ranks-capture.log" 2>&1
      echo "capture rc=$? $(du -sh "$OUT/h200-ranks-gloo" | cut -f1)"; tail -8 "$OUT/ranks-capture.log"
      [ -n "${RANKS_TESTS:-}" ] && (cd /tmp && timeout 300 python3 -m pytest -c "$R/pyproject.toml" -o addopts=-ra --rootdir "$R" -p no:cacheprovider -m gpu "$R/tests/gpu/test_ranks_gpu.py" -q -rs -s -W ignore::pytest.PytestUnraisableExceptionWarning) 2>&1 | tee "$OUT/ranks-tests.log" | tail -40 ;;
    serve)
      rm -rf "$OUT/h200-serve-nsys-ncu" "$OUT/h200-serve-torchprof"
      t=$(date +%s.%N)
      timeout "${SERVE_TIMEOUT:-300}" bash -c "cd /tmp && python3 -m tracekit capture --nsys --ncu --ranges serve --no-import \
        -o '$OUT/h200-serve-nsys-ncu' -- python3 '$SERVE'" > "$OUT/serve-nsys-ncu.log" 2>&1
      echo "capture --nsys --ncu --ranges serve: rc=$? wall $(secs "$t") s"
      grep -a 'ncu profiles the kernels' "$OUT/serve-nsys-ncu.log" | head -1
      passes "$OUT/h200-serve-nsys-ncu"
      t=$(date +%s.%N)
      timeout "${SERVE_TIMEOUT:-300}" bash -c "cd /tmp && python3 -m tracekit capture --torch-profiler --no-import \
        -o '$OUT/h200-serve-torchprof' -- python3 '$SERVE'" > "$OUT/serve-torchprof.log" 2>&1
      echo "capture --torch-profiler: rc=$? wall $(secs "$t") s"
      grep -a -E 'tracekit torchprof|^serve/' "$OUT/serve-torchprof.log"
      passes "$OUT/h200-serve-torchprof"
      du -sh "$OUT"/h200-serve-nsys-ncu/raw/* "$OUT"/h200-serve-torchprof/raw/* ;;
    shapes)
      (cd /tmp && timeout 560 python3 "$R/benchmarks/bench_capture_overhead.py" --script "$SERVE" --modes torch-ranges,torch-shapes \
        --rounds "${ROUNDS:-3}" --timeout 150) > "$OUT/shapes.log" 2>&1; echo "rc=$?"; tail -12 "$OUT/shapes.log" ;;
    budget)
      rm -rf "$OUT/h200-serve-budget"; t=$(date +%s.%N)
      timeout "${SERVE_TIMEOUT:-300}" bash -c "cd /tmp && python3 -m tracekit capture --ncu --ranges serve --max-per-range 50 \
        --ncu-budget ${BUDGET_S:-15} --no-import -o '$OUT/h200-serve-budget' -- python3 '$SERVE'" > "$OUT/serve-budget.log" 2>&1
      echo "capture --ncu --ncu-budget ${BUDGET_S:-15}: rc=$? wall $(secs "$t") s"
      passes "$OUT/h200-serve-budget"
      echo "the program's own lines:"; grep -a '^serve/' "$OUT/h200-serve-budget/raw/program.stdout"
      cat "$OUT/h200-serve-budget/raw/ncu_budget.jsonl" 2>/dev/null ;;
    sigterm)
      rm -rf "$OUT/h200-serve-sigterm"; : > "$OUT/sigterm.log"
      (cd /tmp && exec python3 -m tracekit capture --nsys --ncu --ranges serve --no-import -o "$OUT/h200-serve-sigterm" \
        -- python3 "$SERVE") > "$OUT/sigterm.log" 2>&1 &
      pid=$!
      for _ in $(seq 600); do grep -aq 'ncu pass:' "$OUT/sigterm.log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
      sleep "${SIGTERM_AFTER:-10}"
      t=$(date +%s.%N); kill -TERM $pid; wait $pid; rc=$?
      echo "exit code after SIGTERM: $rc (143 expected), $(secs "$t") s after the signal"
      passes "$OUT/h200-serve-sigterm"
      sleep 3; echo "ncu / nsys / serve_step left running 3 s later: $(left)"
      ls -la "$OUT/h200-serve-sigterm/raw" ;;
    overhead)
      # ncu: targeted vs --set full on the built-in sweep (M = 16..4096, N = 2048, K = 6144); timelines: nsys and the
      # PyTorch profiler vs plain on `tracekit bench gemm --shapes glm5`
      (cd /tmp && timeout 330 python3 "$R/benchmarks/bench_capture_overhead.py" --shapes 5 --reps 10 --modes ncu,ncu-full,ncu-full-all --timeout 200
       timeout 220 python3 "$R/benchmarks/bench_capture_overhead.py" --bench torch-bf16,torch-fp8-tensorwise --reps 10 --modes ${MODES:-nsys,torch-profiler} --timeout 100) > "$OUT/overhead.log" 2>&1; tail -24 "$OUT/overhead.log" ;;
    timeline)
      (cd /tmp && timeout ${TIMELINE_TIMEOUT:-500} python3 "$R/benchmarks/bench_capture_overhead.py" --bench torch-bf16,torch-fp8-tensorwise \
        --reps 25 --modes ${MODES:-nsys,torch-profiler} --timeout 160 --rounds ${ROUNDS:-3} ${KEEP:+--keep "$OUT/timeline-runs"}) > "$OUT/timeline.log" 2>&1; grep -v '^[│┃┏┡└]' "$OUT/timeline.log" | tail -12 ;;
    torchprof)
      (cd /tmp && timeout 200 python3 "$R/benchmarks/torchprof_probe.py" --iters 3000 --rounds ${PROBE_ROUNDS:-2}) > "$OUT/torchprof.log" 2>&1; tail -12 "$OUT/torchprof.log" ;;
    instrument)
      (cd /tmp && python3 "$R/benchmarks/bench_instrument.py" && python3 "$R/benchmarks/bench_instrument.py" --torch) > "$OUT/instrument.log" 2>&1; tail -12 "$OUT/instrument.log" ;;
    nsysprobe)
      (cd /tmp && timeout 300 python3 "$R/benchmarks/nsys_probe.py" --iters 3000 --procs 3 --rounds ${PROBE_ROUNDS:-2} --dump "$OUT") > "$OUT/nsysprobe.log" 2>&1; tail -20 "$OUT/nsysprobe.log" ;;
    pack)
      dest=${TK_PACK:-$OUT/../tk-pack}; mkdir -p "$dest"
      # PACK_SLIM=1: logs, run.json and frames only (no .nsys-rep, .sqlite or Kineto traces), for kept timeline runs
      slim=(); [ -n "${PACK_SLIM:-}" ] && slim=(--exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.json.gz' --exclude='*.qdstrm')
      for d in "$OUT"/*/; do [ -d "$d" ] && tar czf "$dest/$(basename "$d").tgz" "${slim[@]}" -C "$OUT" "$(basename "$d")"; done
      (cd "$OUT" && tar czf "$dest/logs.tgz" --exclude='*/' $(ls -p | grep -v /)); ls -la "$dest" ;;
  esac
done
