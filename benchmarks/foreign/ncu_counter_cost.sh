N=/usr/local/cuda/bin/ncu; P=benchmarks/foreign/counter_probe.py
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats"
B=gpc__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum
C=smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum
F="--nvtx --nvtx-include regex:probe_bf16_M1024.*/ --clock-control none"
for R in 'regex:sm__ops_path_tensor_src_.*' 'regex:^sm__ops_path_tensor_src_[a-z0-9_]+\.sum$' 'regex:sm__ops_path_tensor_src_[a-z0-9]+(_dst_[a-z0-9]+)?\.sum$'; do
  echo "== $R"; $N $F --metrics "$R" --csv python3 $P 2>&1 | grep -o '"sm__ops[^"]*"' | sort -u | tr '\n' ' '; echo
done
run() { name=$1; shift; t0=$(date +%s.%N); $N --nvtx --nvtx-include "regex:probe.*/" --clock-control none "$@" -o /tmp/r_$name --force-overwrite python3 $P > /tmp/log_$name 2>&1; rc=$?; t1=$(date +%s.%N); passes=$(grep -o '[0-9]* passes' /tmp/log_$name | awk '{s+=$1} END {print s}'); k=$(grep -c 'passes' /tmp/log_$name); echo "$name rc=$rc wall=$(python3 -c "print(round($t1-$t0,1))") kernels=$k passes=$passes size=$(du -k /tmp/r_$name.ncu-rep | cut -f1)KB"; }
run plain_py_only --metrics gpu__time_duration.sum
run old $S --metrics $B
run new $S --metrics "$B,$C,regex:^sm__ops_path_tensor_src_[a-z0-9_]+\.sum$"
run full --set full
t0=$(date +%s.%N); python3 $P; t1=$(date +%s.%N); echo "no ncu: $(python3 -c "print(round($t1-$t0,1))") s"
tail -5 /tmp/log_new
