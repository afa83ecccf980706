R=$PWD; bash samples/scripts/gpu_phases.sh setup > /dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEKIT_NSYS_LIBS=$R/.nsys-libs PATH=$PATH:/usr/local/cuda/bin
export TRACEKIT_NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
mkdir -p /tmp/tk; cd /tmp
timeout 80 python3 -m tracekit capture --ncu --ranges attn -o /tmp/tk/h200-ranges-attn --no-import -- python3 $R/benchmarks/foreign/ranges_probe.py > /tmp/tk/ranges.log 2>&1; echo "ranges rc=$?"; grep -c "==PROF== Profiling" /tmp/tk/h200-ranges-attn/raw/ncu.log; grep -n "nvtx-include" /tmp/tk/h200-ranges-attn/run.json | head -3
/usr/local/cuda/bin/ncu -i /tmp/tk/h200-ranges-attn/raw/ncu.ncu-rep --print-nvtx-rename kernel --page raw --csv --metrics gpu__time_duration.sum 2>&1 | cut -c1-160 | head -8
cd $R && TK_OUT=/tmp/tk TK_PACK=$OUT FOREIGN_RANGES=1 TK_BUDGET_S=150 bash benchmarks/foreign/capture_all.sh cublas_small_m 2>&1 | tail -8
grep -n -- "--nvtx-include\|ranges" /tmp/tk/h200-foreign-cublas_small_m/run.json | head -5; grep -c "==PROF== Profiling" /tmp/tk/h200-foreign-cublas_small_m/raw/ncu.log
cd /tmp/tk && tar czf $OUT/ranges.tgz h200-ranges-attn ranges.log && ls -la $OUT
