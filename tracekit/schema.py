"""The frames of a run: names, columns, type names and units, written down once, without polars.

Each frame a run may hold is declared here as a :class:`FrameSchema` of :class:`Column` (name, type, doc; the
vocabulary is tracekit/schema_types.py). This module imports only the standard library, so the collectors (which run in bare GPU environments without polars)
take the keys of the JSONL rows they write from the same declaration the analyzers read; tracekit/frames.py builds
the polars dtypes from it (``conform`` casts and orders columns, adding missing ones as nulls) and the run stores
the frames as ``frames/<name>.parquet`` (a run of several distributed ranks stores the frames with a ``rank``
column hive-partitioned, ``frames/<name>/rank=<r>/part-0.parquet``: tracekit/run.py). ``tests/core/test_schema.py``
checks that importing it pulls in no polars, and the ``schema`` import-linter contract (pyproject.toml) too.

Types are polars' names: ``Int64``, ``Int32``, ``Float64``, ``String``, ``Boolean``; nested values are
:class:`ListOf` and :class:`StructOf` (polars List / Struct columns, never JSON text: a run written before schema
version 5 held JSON text there, and tracekit/frames.py ``migrate`` decodes it on read).

``rank`` (kernels, ranges, ncu, devices): the distributed rank, filled at import from the file itself (Kineto's
``distributedInfo``), its name (``nsys.rank3.sqlite``, as ``tracekit capture --ranks`` writes) or, in an Nsight
Systems export of a whole process tree, the process that launched the kernels (analyzers/ranks/labels.py); null in a
single-process run. Bump ``SCHEMA_VERSION`` (tracekit/_version.py) whenever a column changes: runs whose frames
are older are rebuilt from ``raw/`` (or, from the previous version, migrated on read).

Units: times are integer nanoseconds on the capture's own clock (``*_ns``); sizes are bytes; ``*_pct`` are
percentages 0-100 of the named peak; clocks are hertz (``*_hz``); rates are ``*_per_s``.
"""

from __future__ import annotations

try:
    from tracekit._version import SCHEMA_VERSION
except (
    ImportError
):  # loaded by file path with no tracekit installed (collectors/failures.py beside torchprof.py)
    SCHEMA_VERSION = 0  # unknown there; nothing in that mode reads it

__all__ = [
    "SCHEMAS",
    "SCHEMA_VERSION",
    "Column",
    "DType",
    "FrameSchema",
    "ListOf",
    "StructOf",
    "jsonl_keys",
]

try:
    from tracekit.schema_types import (
        BOOL,
        F64,
        I32,
        I64,
        STR,
        Column,
        DType,
        FrameSchema,
        ListOf,
        Scalar,
        StructOf,
    )
except ImportError:  # loaded by file path with no tracekit installed: its sibling, by path too
    import importlib.util
    import sys
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location(
        "_tracekit_schema_types", Path(__file__).with_name("schema_types.py")
    )
    assert _spec is not None and _spec.loader is not None
    _types = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _types  # its dataclasses look their module up there
    _spec.loader.exec_module(_types)
    BOOL, F64, I32, I64, STR = _types.BOOL, _types.F64, _types.I32, _types.I64, _types.STR
    Column, DType, FrameSchema, ListOf, Scalar, StructOf = (
        _types.Column,
        _types.DType,
        _types.FrameSchema,
        _types.ListOf,
        _types.Scalar,
        _types.StructOf,
    )

NVTX_RANGE = StructOf((("domain", STR), ("name", STR)))
"""One open NVTX range of a launch: its domain (null for the default one) and its text."""
PACKAGE_VERSION = StructOf((("package", STR), ("version", STR)))
"""One installed distribution and its version."""
FIELD = StructOf((("key", STR), ("value", STR)))
"""One ``key=value`` field of a tracekit range name."""

KERNEL_CLASS = (
    Column(
        "kernel_class",
        STR,
        "kernel class (docs/KERNELS.md): gemm, attention, convolution, communication, normalization, softmax, "
        "activation, quantize, splitk-reduce, layout, rng, memory, reduction, elementwise, other",
    ),
    Column(
        "kernel_family", STR, "library family of tracekit/data/kernel_classes.json that matched, null if none"
    ),
    Column("class_source", STR, "what decided kernel_class: name | template | op | counters | tensor-pipe"),
)
"""A kernel's place in the taxonomy (analyzers/taxonomy/frames.py), the last columns of ``kernels`` and ``ncu``."""

KERNELS = FrameSchema(
    "kernels",
    "One row per kernel launch on a timeline (Nsight Systems or the PyTorch profiler).",
    (
        Column("kernel_id", I64, "unique id of the launch within the run"),
        Column("source", STR, "raw file the row came from (path relative to raw/)"),
        Column("rank", I32, "distributed rank, null for single-process runs"),
        Column("pid", I64, "id of the process that launched the kernel"),
        Column("device", I32, "CUDA device ordinal"),
        Column("context", I64, "CUDA context id, null where unknown"),
        Column("stream", I64, "CUDA stream id"),
        Column("correlation_id", I64, "launch correlation id (unique per process, not per run)"),
        Column("name", STR, "demangled kernel name"),
        Column("short_name", STR, "short (function) name"),
        Column("start_ns", I64, "kernel start, ns"),
        Column("end_ns", I64, "kernel end, ns"),
        Column("duration_ns", I64, "end - start, ns"),
        Column("grid_x", I32, "grid size x (blocks)"),
        Column("grid_y", I32, "grid size y"),
        Column("grid_z", I32, "grid size z"),
        Column("block_x", I32, "block size x (threads)"),
        Column("block_y", I32, "block size y"),
        Column("block_z", I32, "block size z"),
        Column("registers_per_thread", I32, "registers per thread"),
        Column("static_smem_bytes", I64, "static shared memory per block, bytes"),
        Column("dynamic_smem_bytes", I64, "dynamic shared memory per block, bytes"),
        Column(
            "smem_bytes", I64, "static + dynamic shared memory per block, bytes (Kineto gives only this sum)"
        ),
        Column("blocks_per_sm", F64, "grid CTAs per SM, as the PyTorch profiler gives it; null if not given"),
        Column("est_occupancy_pct", F64, "occupancy %, the PyTorch profiler's estimate; null if unknown"),
        Column("launch_tid", I64, "thread that made the launch call, from the runtime API record"),
        Column("launch_start_ns", I64, "start of the launch call on the CPU, ns"),
        Column("range_id", I64, "innermost enclosing range (ranges.range_id), null if none"),
        Column(
            "launch_op",
            STR,
            "CPU op that launched the kernel: Kineto's innermost cpu_op on the launching thread, or an emit_nvtx "
            "op range (aten::silu); null where unknown",
        ),
        *KERNEL_CLASS,
    ),
)

MEMOPS = FrameSchema(
    "memops",
    "One row per memcpy / memset on a timeline (Kineto gpu_memcpy / gpu_memset, Nsight Systems "
    "CUPTI_ACTIVITY_KIND_MEMCPY / MEMSET): GPU time that is no kernel, counted by the step breakdown.",
    (
        Column("memop_id", I64, "unique id of the operation within the run"),
        Column("source", STR, "raw file the row came from (path relative to raw/)"),
        Column("rank", I32, "distributed rank, null for single-process runs"),
        Column("pid", I64, "id of the process that issued it"),
        Column("device", I32, "CUDA device ordinal"),
        Column("context", I64, "CUDA context id, null where unknown"),
        Column("stream", I64, "CUDA stream id"),
        Column("correlation_id", I64, "API call correlation id (unique per process, not per run)"),
        Column("kind", STR, "memcpy | memset"),
        Column(
            "name",
            STR,
            "the tool's label: Kineto's event name ('Memcpy HtoD (Pageable -> Device)', 'Memset (Device)'), "
            "Nsight Systems' '[CUDA memcpy Host-to-Device]' / '[CUDA memset]'",
        ),
        Column("copy_kind", STR, "direction of a memcpy: HtoD, DtoH, DtoD, HtoH, PtoP, ...; null for memset"),
        Column("bytes", I64, "bytes copied or set"),
        Column("start_ns", I64, "start, ns"),
        Column("end_ns", I64, "end, ns"),
        Column("duration_ns", I64, "end - start, ns"),
        Column("launch_tid", I64, "thread that made the API call, from the runtime API record"),
        Column("launch_start_ns", I64, "start of the API call on the CPU, ns"),
        Column("range_id", I64, "innermost enclosing range (ranges.range_id), null if none"),
    ),
)

RANGES = FrameSchema(
    "ranges",
    "NVTX ranges and PyTorch record_function annotations; GEMM fields parsed from tracekit range names.",
    (
        Column("range_id", I64, "unique id of the range within the run"),
        Column("parent_id", I64, "enclosing range on the same thread, null at top level"),
        Column("source", STR, "raw file the row came from"),
        Column("rank", I32, "distributed rank, null for single-process runs"),
        Column(
            "kind",
            STR,
            "push_pop | start_end | annotation | gpu_annotation | op (a PyTorch GEMM op's cpu_op event, Kineto)",
        ),
        Column("domain", STR, "NVTX domain name, null for the default domain"),
        Column("name", STR, "range text"),
        Column("pid", I64, "process id"),
        Column("tid", I64, "thread id (push/pop and annotations are per thread)"),
        Column("device", I32, "device, for GPU-side annotations"),
        Column("start_ns", I64, "range start, ns"),
        Column("end_ns", I64, "range end, ns (null if the range never closed)"),
        Column("depth", I32, "nesting depth on its thread, 0 at top level"),
        Column(
            "range_kind",
            STR,
            "tracekit range kind (gemm, aux, moe, step); gemm-op for a PyTorch GEMM op (aten::mm, addmm, bmm, "
            "linear, _scaled_mm, ...: analyzers/readers/torch_ops.py); null for other ranges",
        ),
        Column("backend", STR, "GEMM backend, e.g. torch-bf16, flashinfer-fp4"),
        Column("op", STR, "entry point, e.g. mm, scaled_mm, mm_fp4"),
        Column("m", I64, "GEMM M"),
        Column("n", I64, "GEMM N"),
        Column("k", I64, "GEMM K"),
        Column("dtype_a", STR, "A operand dtype (canonical short name)"),
        Column("dtype_b", STR, "B operand dtype"),
        Column("dtype_out", STR, "output dtype"),
        Column("scale", STR, "scale layout: none, tensorwise, rowwise, blockwise, nvfp4-1x16, ..."),
        Column("role", STR, "for aux ranges: quantize, reduce, swizzle"),
        Column(
            "fields", ListOf(FIELD), "every field of a tracekit range name as (key, value), sorted by key"
        ),
        Column(
            "batch", I64, "independent M x N x K products of a gemm-op call (bmm's batch), 1 for a plain GEMM"
        ),
        Column(
            "flops", F64, "the profiler's own FLOP count for the call (Kineto ``flops``, with_flops=True)"
        ),
        Column(
            "shape_source",
            STR,
            "where m / n / k came from: kineto-input-dims, nvtx-record-shapes; null for tracekit names",
        ),
    ),
)

NCU = FrameSchema(
    "ncu",
    "One row per kernel profiled by Nsight Compute, with the metrics the analysis uses (null when absent).",
    (
        Column("ncu_id", I64, "unique id of the profiled kernel within the run"),
        Column("source", STR, "report file"),
        Column("rank", I32, "distributed rank"),
        Column("range_index", I32, "ncu report range index"),
        Column("action_index", I32, "index of the kernel in its report range"),
        Column("name", STR, "kernel (function) name"),
        Column("demangled_name", STR, "demangled kernel name"),
        Column("nvtx_range", STR, "innermost NVTX push/pop range of the launch (tracekit's domain first)"),
        Column(
            "nvtx_stack", ListOf(NVTX_RANGE), "all open NVTX push/pop ranges (domain, name), outermost first"
        ),
        Column("device_name", STR, "GPU name"),
        Column("compute_capability", STR, "compute capability, e.g. '9.0'"),
        Column("sm_count", I32, "multiprocessors on the device"),
        Column("grid_x", I32, "grid size x"),
        Column("grid_y", I32, "grid size y"),
        Column("grid_z", I32, "grid size z"),
        Column("grid_size", I64, "blocks in the grid"),
        Column("block_x", I32, "block size x"),
        Column("block_y", I32, "block size y"),
        Column("block_z", I32, "block size z"),
        Column("block_size", I32, "threads per block"),
        Column("registers_per_thread", I32, "registers per thread"),
        Column("static_smem_bytes", I64, "static shared memory per block, bytes"),
        Column("dynamic_smem_bytes", I64, "dynamic shared memory per block, bytes"),
        Column("smem_config_bytes", I64, "shared memory configured per SM for the launch, bytes"),
        Column("smem_per_block_limit_bytes", I64, "device maximum shared memory per block (opt-in), bytes"),
        Column("smem_per_sm_bytes", I64, "device shared memory per SM, bytes"),
        Column("theoretical_occupancy_pct", F64, "theoretical occupancy, % of max warps"),
        Column("achieved_occupancy_pct", F64, "achieved occupancy, % of max warps"),
        Column("occupancy_limit_registers", I32, "blocks per SM allowed by registers"),
        Column("occupancy_limit_shared_mem", I32, "blocks per SM allowed by shared memory"),
        Column("occupancy_limit_warps", I32, "blocks per SM allowed by warps"),
        Column("occupancy_limit_blocks", I32, "blocks per SM allowed by the block limit"),
        Column("waves_per_sm", F64, "launch__waves_per_multiprocessor"),
        Column("duration_ns", F64, "gpu__time_duration.sum, ns"),
        Column("sm_clock_hz", F64, "clock the kernel ran at (gpc__cycles_elapsed.avg.per_second), Hz"),
        Column("boost_clock_hz", F64, "device boost clock (device__attribute_clock_rate), Hz"),
        Column("dram_clock_hz", F64, "DRAM clock during the kernel, Hz"),
        Column("compute_throughput_pct", F64, "SM throughput, % of peak (sm__throughput)"),
        Column("memory_throughput_pct", F64, "memory throughput, % of peak (gpu__compute_memory_throughput)"),
        Column("dram_throughput_pct", F64, "DRAM throughput, % of peak"),
        Column("dram_bytes", F64, "DRAM bytes read + written"),
        Column("dram_bytes_per_s", F64, "DRAM bandwidth achieved, bytes/s"),
        Column("l2_hit_rate_pct", F64, "L2 hit rate, %"),
        Column(
            "tensor_pipe_pct", F64, "tensor pipe active, % of peak sustained (architecture-specific metric)"
        ),
        Column("tensor_pipe_metric", STR, "which metric gave tensor_pipe_pct"),
        Column("issue_active_pct", F64, "issue slots busy, %"),
        Column("clock_control", STR, "ncu clock control the report was taken with, if known"),
        *KERNEL_CLASS,
    ),
)

NCU_METRICS = FrameSchema(
    "ncu_metrics",
    "Every metric of every profiled kernel, long form.",
    (
        Column("ncu_id", I64, "ncu.ncu_id"),
        Column("metric", STR, "metric name"),
        Column("value", F64, "numeric value (null for strings)"),
        Column("text", STR, "string value, or the number as text"),
        Column("unit", STR, "unit as ncu reports it"),
    ),
)

NCU_RULES = FrameSchema(
    "ncu_rules",
    "Nsight Compute's own guided-analysis findings per profiled kernel.",
    (
        Column("ncu_id", I64, "ncu.ncu_id"),
        Column("rule", STR, "rule identifier"),
        Column("section", STR, "section the rule belongs to"),
        Column("kind", STR, "message type: OPTIMIZATION, WARNING, ..."),
        Column("title", STR, "message title"),
        Column("message", STR, "full message text"),
        Column("speedup_pct", F64, "ncu's estimated speedup, % (null if none)"),
        Column("speedup_type", STR, "local | global"),
    ),
)

DEVICES = FrameSchema(
    "devices",
    "GPUs seen in the run's files.",
    (
        Column("source", STR, "file the device was read from"),
        Column("rank", I32, "distributed rank"),
        Column("device", I32, "device ordinal"),
        Column("name", STR, "GPU name"),
        Column("compute_capability", STR, "e.g. '9.0'"),
        Column("sm_count", I32, "multiprocessors"),
        Column("memory_bytes", I64, "device memory, bytes"),
        Column("smem_per_block_optin_bytes", I64, "max shared memory per block (opt-in), bytes"),
        Column("smem_per_sm_bytes", I64, "shared memory per SM, bytes"),
        Column("regs_per_sm", I64, "registers per SM"),
        Column("boost_clock_hz", F64, "boost clock, Hz"),
    ),
)

FAILURES = FrameSchema(
    "failures",
    "A backend x shape that failed, recorded in full.",
    (
        Column("failure_id", I64, "id within the run"),
        Column("backend", STR, "backend name"),
        Column("op", STR, "entry point"),
        Column("m", I64, "M"),
        Column("n", I64, "N"),
        Column("k", I64, "K"),
        Column("kind", STR, "unsupported | unavailable | crashed | wrong | timeout"),
        Column("error_type", STR, "exception type (module-qualified), or signal name"),
        Column("message", STR, "full, untruncated message"),
        Column("traceback", STR, "full traceback text"),
        Column("device_name", STR, "GPU name"),
        Column("compute_capability", STR, "compute capability"),
        Column(
            "versions", ListOf(PACKAGE_VERSION), "installed library versions (package, version), by package"
        ),
        Column("time_unix", F64, "when it happened, seconds since the epoch"),
        Column("dtype_a", STR, "A operand dtype of the call (instrument breadcrumb)"),
        Column("dtype_b", STR, "B operand dtype of the call (instrument breadcrumb)"),
        Column("dtype_out", STR, "output dtype of the call (instrument breadcrumb)"),
        Column("range", STR, "tracekit range name of the call in flight"),
        Column("caller", STR, "the program's file:line that made the call"),
        Column("signal", STR, "signal the program died of (SIGSEGV ...), for a crash"),
        Column("python_stack", STR, "the program's Python stack at the crash (fault handler, traceback)"),
        Column("stderr_tail", STR, "the program's own last stderr lines (50), progress bars collapsed"),
    ),
)

MEASUREMENTS = FrameSchema(
    "measurements",
    "GEMMs timed by tracekit's own benchmark (``tracekit bench gemm``), with the NVML sample beside each.",
    (
        Column("measurement_id", I64, "id within the run"),
        Column("range", STR, "tracekit range name of the GEMM"),
        Column("backend", STR, "backend"),
        Column("op", STR, "entry point"),
        Column("m", I64, "M"),
        Column("n", I64, "N"),
        Column("k", I64, "K"),
        Column("dtype", STR, "input dtype (canonical short name)"),
        Column("dtype_out", STR, "output dtype"),
        Column("scale", STR, "scale layout"),
        Column("time_us", F64, "median time per GEMM, microseconds"),
        Column("time_us_p10", F64, "10th percentile, microseconds"),
        Column("time_us_p90", F64, "90th percentile, microseconds"),
        Column("repeats", I32, "timed repeats"),
        Column("tflops", F64, "2*M*N*K / median time, TFLOP/s"),
        Column(
            "aux_time_us", F64, "median time of the auxiliary step (e.g. activation quantize), microseconds"
        ),
        Column("rel_error", F64, "||out - ref|| / ||ref|| against a high-precision reference"),
        Column("status", STR, "ok | wrong"),
        Column("sm_clock_hz", F64, "mean SM clock during the timing (NVML), Hz"),
        Column("power_w", F64, "mean board power during the timing (NVML), W"),
        Column("power_limit_w", F64, "enforced power limit, W"),
        Column("temperature_c", F64, "GPU temperature, C"),
        Column("throttle_reasons", I64, "NVML clocks-event reasons bitmask seen during the timing (OR)"),
        Column("timing", STR, "how it was timed: cuda-graph | events"),
    ),
)

GEMMS = FrameSchema(
    "gemms",
    "The analysis result per GEMM (analyzers/gemm/, analyzers/explain.py): one row per GEMM range name in its "
    "parent range, measurement, or profiled kernel without a GEMM range. Times are per launch.",
    (
        Column("gemm_id", I64, "index of the GEMM in this analysis"),
        Column(
            "origin",
            STR,
            "measurement | range (timeline: tracekit's or the user's own range) | ncu (ncu rows of a GEMM range) | "
            "ncu-kernel | kernel (timeline kernel in no range)",
        ),
        Column("range", STR, "range name (or kernel name for ncu-kernel)"),
        Column("context", STR, "name of the enclosing range, null at top level"),
        Column("backend", STR, "GEMM backend"),
        Column("op", STR, "entry point"),
        Column("m", I64, "GEMM M"),
        Column("n", I64, "GEMM N"),
        Column("k", I64, "GEMM K"),
        Column("dtype_a", STR, "A dtype"),
        Column("dtype_b", STR, "B dtype"),
        Column("dtype_out", STR, "output dtype"),
        Column("scale", STR, "scale layout"),
        Column("dtype_class", STR, "tensor-core rate class used for the peak (fp4, fp8, bf16, ...)"),
        Column("launches", I64, "launches (range instances or profiled GEMM kernels) aggregated"),
        Column(
            "time_source", STR, "where the main / aux / gap times came from: measurement, timeline or ncu"
        ),
        Column("main_kernel", STR, "the GEMM's own (longest) kernel"),
        Column("aux_kernels", ListOf(STR), "auxiliary kernels in the range, by name"),
        Column("device_name", STR, "GPU name"),
        Column("device_key", STR, "device catalog key (tracekit/data/devices.json)"),
        Column(
            "flops",
            F64,
            "FLOPs per launch: 2*M*N*K from the shape, else Nsight Compute's counted math (tile padding "
            "included), else the profiler's own count",
        ),
        Column("flops_source", STR, "where flops came from: shape | ncu-counters | profiler-flops | none"),
        Column(
            "dtype_source",
            STR,
            "where dtype_class came from: shape | ncu-counters | kernel-name | achieved-rate | none "
            "(fp32 shapes on TF32 tensor-op kernels: kernel-name or ncu-counters)",
        ),
        Column(
            "counted_flops",
            F64,
            "FLOPs Nsight Compute counted per launch of the main kernel (sm__ops_path_tensor_src_*, or FP32 "
            "2*FFMA+FADD+FMUL); above 2*M*N*K when tiles are padded",
        ),
        Column("min_bytes", F64, "fewest bytes per launch: A, B, their scales and C at real widths"),
        Column("intensity_flops_per_byte", F64, "flops / min_bytes"),
        Column("main_time_ns", F64, "time of the GEMM's own kernels per launch, ns"),
        Column("aux_time_ns", F64, "time of auxiliary kernels per launch, ns"),
        Column("gap_time_ns", F64, "idle GPU time inside / between the range's launches per launch, ns"),
        Column("kernel_tflops", F64, "flops / main_time, TFLOP/s"),
        Column("achieved_tflops", F64, "flops / (main + aux + gap time), TFLOP/s"),
        Column("achieved_estimate", STR, "how achieved_tflops was estimated when the shape is unknown"),
        Column("peak_tflops", F64, "dense peak of the device for dtype_class, TFLOP/s"),
        Column("peak_source", STR, "datasheet | derived | unknown"),
        Column("calibrated_tflops", F64, "sustained TFLOP/s measured by tracekit calibrate, if given"),
        Column("pct_of_peak", F64, "achieved, % of peak_tflops"),
        Column("pct_of_calibrated", F64, "achieved, % of calibrated_tflops"),
        Column("roofline_bound", STR, "compute | memory (intensity vs the device ridge)"),
        Column("memory_roof_tflops", F64, "intensity x memory bandwidth, TFLOP/s"),
        Column("sm_clock_hz", F64, "SM clock during the GEMM (NVML or ncu), Hz"),
        Column("clock_source", STR, "where sm_clock_hz came from"),
        Column("power_w", F64, "board power during the timing (NVML), W"),
        Column("power_limit_w", F64, "enforced power limit, W"),
        Column("throttle_reasons", I64, "NVML clocks-event reasons bitmask"),
        Column("grid_size", I64, "CTAs in the main kernel's grid"),
        Column("block_size", I32, "threads per CTA"),
        Column("registers_per_thread", I32, "registers per thread"),
        Column("smem_per_block_bytes", I64, "shared memory per CTA (static + dynamic), bytes"),
        Column("ncu_id", I64, "ncu.ncu_id of the profiled main kernel, if any"),
        Column("measurement_id", I64, "measurements.measurement_id, if any"),
        Column("verdict", STR, "the factor with the largest loss (analyzers/explain.py)"),
        Column("verdict_gain_pct", F64, "speed-up if that loss were removed, %"),
    ),
)

MOE = FrameSchema(
    "moe",
    "Grouped (MoE) launches timed by ``tracekit bench moe``: one row per backend x routing case, read from "
    "``raw/moe*.jsonl`` (collectors/moe/worker.py, docs/MOE.md). The per-expert counts ride along as a list.",
    (
        Column("moe_id", I64, "id within the run"),
        Column("range", STR, "tracekit ``moe`` range name of the launch"),
        Column("backend", STR, "backend, e.g. torch-bf16-grouped, torch-bf16-loop"),
        Column("op", STR, "entry point: grouped_mm, scaled_grouped_mm, loop_mm, cutlass_fused_moe, ..."),
        Column("proj", STR, "gate_up | down | fused (both expert GEMMs in one call)"),
        Column("route", STR, "routing case: uniform, zipf<S>, file:<stem>#<step>"),
        Column("tokens", I64, "tokens in the step"),
        Column("topk", I64, "experts per token"),
        Column("experts", I64, "experts in the weight tensor (E)"),
        Column("active", I64, "experts that got at least one row"),
        Column("rows", I64, "routed rows: sum of the per-expert counts (tokens x top-k)"),
        Column("n", I64, "one expert's GEMM N"),
        Column("k", I64, "one expert's GEMM K"),
        Column("inter", I64, "expert intermediate size of the second GEMM, for fused launches (else null)"),
        Column("dtype", STR, "A (activation) dtype"),
        Column("dtype_b", STR, "B (expert weight) dtype"),
        Column("dtype_out", STR, "output dtype"),
        Column("scale", STR, "scale layout"),
        Column("time_us", F64, "median time of the whole launch, microseconds"),
        Column("time_us_p10", F64, "10th percentile, microseconds"),
        Column("time_us_p90", F64, "90th percentile, microseconds"),
        Column("repeats", I32, "timed repeats"),
        Column("tflops", F64, "FLOPs of every expert's GEMM(s) / median time, TFLOP/s"),
        Column("rel_error", F64, "||out - ref|| / ||ref|| against an fp32 reference"),
        Column("status", STR, "ok | wrong"),
        Column("sm_clock_hz", F64, "mean SM clock during the timing (NVML), Hz"),
        Column("power_w", F64, "mean board power (NVML), W"),
        Column("power_limit_w", F64, "enforced power limit, W"),
        Column("temperature_c", F64, "GPU temperature, C"),
        Column("throttle_reasons", I64, "NVML clocks-event reasons bitmask seen during the timing (OR)"),
        Column("timing", STR, "cuda-graph | events | wall"),
        Column("counts", ListOf(I64), "tokens routed to each expert: E integers"),
        Column(
            "expert_time_us",
            ListOf(F64),
            "measured per-expert times (loop backends), microseconds, one per expert (null = inactive)",
        ),
        Column("expert_time_source", STR, "how expert_time_us was measured, null when not measured"),
        Column(
            "tile_m", I64, "CTA tile M of the grouped kernel as the backend's dispatch rule says, if known"
        ),
        Column("tile_n", I64, "CTA tile N, if known"),
        Column("tile_source", STR, "where tile_m / tile_n came from"),
    ),
)

MOE_CURVE = FrameSchema(
    "moe_curve",
    "One expert's GEMM timed on its own at each per-expert row count a loop backend met (``raw/moe_curve.jsonl``, "
    "same keys as ``measurements``): the measured time-vs-M curve behind per-expert times and the what-if.",
    (Column("curve_id", I64, "id within the run"), *MEASUREMENTS.columns[1:]),
)

MOE_ROUTING = FrameSchema(
    "moe_routing",
    "Per-launch expert counts that ``instrument()`` recorded beside a capture (``raw/moe_routing-<tool>-<pid>"
    ".jsonl``, collectors/moe_ranges.py): the i-th launch of a ``moe`` range name in a process.",
    (
        Column("routing_id", I64, "id within the run"),
        Column("range", STR, "the launch's ``moe`` range name"),
        Column("instance", I64, "1-based launch number of that name in its process"),
        Column("pid", I64, "process id (matches ranges.pid of the same capture pass)"),
        Column("tool", STR, "capture pass that recorded it: nsys, ncu, torch, run"),
        Column("experts", I64, "experts in the weight tensor"),
        Column("counts", ListOf(I64), "tokens per expert (null when unknown or skipped)"),
        Column("counts_from", STR, "offsets | sizes | ids | counts | unknown"),
        Column("skipped", STR, "why no counts were read (cuda-graph-capture), else null"),
    ),
)

MOE_LAUNCHES = FrameSchema(
    "moe_launches",
    "The analysis per grouped launch (analyzers/moe/): from ``moe`` rows (benchmark) or ``moe`` ranges with "
    "their kernels and routing sidecar (timeline). Times are per launch.",
    (
        Column("launch_id", I64, "index of the launch in this analysis"),
        Column("origin", STR, "measurement | range (timeline)"),
        Column("range", STR, "moe range name"),
        Column("backend", STR, "backend"),
        Column("op", STR, "entry point"),
        Column("route", STR, "routing case (null on a timeline)"),
        Column("tokens", I64, "tokens per step (null where unknown)"),
        Column("topk", I64, "experts per token (null where unknown)"),
        Column("experts", I64, "experts in the weight tensor"),
        Column("active", I64, "experts with at least one row"),
        Column("rows", F64, "routed rows per launch (mean over launches on a timeline)"),
        Column("n", I64, "one expert's N"),
        Column("k", I64, "one expert's K"),
        Column("dtype_class", STR, "tensor-core rate class of the peak"),
        Column("launches", I64, "launches aggregated (1 for a benchmark row)"),
        Column("time_ns", F64, "time of the launch's GEMM kernel(s), ns"),
        Column("aux_time_ns", F64, "other kernels in the range (e.g. grouped-GEMM argument setup), ns"),
        Column("flops", F64, "FLOPs of every expert's GEMM(s) per launch"),
        Column("tflops", F64, "flops / time_ns, TFLOP/s"),
        Column("peak_tflops", F64, "dense datasheet peak for dtype_class, TFLOP/s"),
        Column("pct_of_peak", F64, "tflops, % of peak: the FLOP-weighted efficiency of the launch"),
        Column(
            "roofline_tflops",
            F64,
            "the launch's attainable rate: flops / sum over experts of max(flops_e / "
            "peak, bytes_e / bandwidth), TFLOP/s",
        ),
        Column("pct_of_roofline", F64, "tflops, % of roofline_tflops"),
        Column("kernel", STR, "the main kernel's name, if a timeline has it"),
        Column("tile_m", I64, "CTA tile M used for padding and attribution"),
        Column("tile_n", I64, "CTA tile N"),
        Column("tile_source", STR, "kernel name | backend dispatch rule | assumed"),
        Column("padded_rows", F64, "rows after padding each active expert up to a multiple of tile_m"),
        Column("padding_waste_pct", F64, "(padded_rows - rows) / padded_rows, %: MMA work spent on padding"),
        Column("time_source", STR, "how per-expert times were obtained (measured, or attributed by tiles)"),
        Column("hot_expert", I64, "expert with the most rows"),
        Column("hot_rows_share_pct", F64, "its share of the routed rows, %"),
        Column("hot_time_share_pct", F64, "its share of the launch's per-expert time, %"),
        Column("hot_vs_median", F64, "its time over the median active expert's time"),
        Column("memory_bound_experts", I64, "active experts below the ridge (memory-bound at their M)"),
        Column("memory_bound_time_pct", F64, "share of the launch time spent in memory-bound experts, %"),
        Column(
            "skewed", BOOL, "the routing is skewed: the hot expert has >= 4x the mean rows of active experts"
        ),
        Column(
            "hot_dominates",
            BOOL,
            "the hot expert is the slowest expert and takes >= 4x the median active expert's time",
        ),
        Column("verdict", STR, "one sentence: what bounds this launch"),
        Column("sm_clock_hz", F64, "SM clock (NVML), Hz"),
        Column("status", STR, "ok | wrong"),
    ),
)

MOE_EXPERTS = FrameSchema(
    "moe_experts",
    "Per expert of each analysed launch (analyzers/moe/); only experts with at least one row.",
    (
        Column("launch_id", I64, "moe_launches.launch_id"),
        Column("expert", I64, "expert index"),
        Column("m", F64, "effective M: rows routed to the expert per launch"),
        Column("padded_m", F64, "m rounded up to the tile's M"),
        Column("tiles", F64, "CTA tiles of the expert: ceil(m / tile_m) x ceil(N / tile_n)"),
        Column("time_ns", F64, "time of the expert's GEMM(s) per launch, ns"),
        Column("time_source", STR, "measured | attributed (launch time x the expert's share of tiles)"),
        Column("time_share_pct", F64, "share of the launch's per-expert time, %"),
        Column("flops", F64, "2 x m x N x K (both GEMMs for fused launches)"),
        Column("tflops", F64, "flops / time_ns, TFLOP/s"),
        Column("pct_of_peak", F64, "tflops, % of the dense peak"),
        Column("min_bytes", F64, "weights of the expert read once + its rows of A and C, bytes"),
        Column("intensity_flops_per_byte", F64, "flops / min_bytes"),
        Column("roofline_bound", STR, "memory | compute (intensity vs the device ridge)"),
        Column("roofline_tflops", F64, "min(peak, intensity x bandwidth), TFLOP/s"),
        Column("pct_of_roofline", F64, "tflops, % of roofline_tflops"),
        Column("hot", BOOL, "the launch's hot expert"),
    ),
)

MOE_WHATIF = FrameSchema(
    "moe_whatif",
    "Rows per expert needed to reach a share of peak, read off a measured TFLOP/s-vs-M curve (analyzers/moe/).",
    (
        Column("backend", STR, "backend the curve belongs to"),
        Column("curve", STR, "expert (each expert's GEMM timed alone) | launch (uniform-routing launches)"),
        Column("dtype_class", STR, "tensor-core rate class of the peak"),
        Column("n", I64, "N"),
        Column("k", I64, "K"),
        Column("target_pct", F64, "share of peak asked for, %"),
        Column("m_needed", F64, "rows per expert that reach it (null: not reachable on this curve)"),
        Column("how", STR, "interpolated | extrapolated | below the curve | not reached"),
        Column("curve_m_min", F64, "smallest M measured on the curve"),
        Column("curve_m_max", F64, "largest M measured"),
        Column("best_pct", F64, "best % of peak measured on the curve"),
        Column(
            "tokens_per_step",
            F64,
            "tokens per step that give m_needed rows per expert with uniform routing (m_needed x E / top-k)",
        ),
        Column(
            "ep_degree",
            F64,
            "expert-parallel degree that gives m_needed when each GPU runs ep_batch tokens per step "
            "(every GPU's experts see the tokens of all EP ranks: m = degree x ep_batch x top-k / E)",
        ),
        Column(
            "ep_batch", F64, "tokens per step per GPU the EP degree assumes (analysis option, default 64)"
        ),
    ),
)

SCHEMAS: dict[str, FrameSchema] = {
    s.name: s
    for s in (
        KERNELS, MEMOPS, RANGES, NCU, NCU_METRICS, NCU_RULES, DEVICES, FAILURES, MEASUREMENTS, GEMMS,
        MOE, MOE_CURVE, MOE_ROUTING, MOE_LAUNCHES, MOE_EXPERTS, MOE_WHATIF,
    )
}  # fmt: skip
"""Every frame a run may hold, by name."""


def jsonl_keys(frame: str) -> tuple[str, ...]:
    """The keys of one JSONL row that a collector writes for ``frame`` (``raw/measurements.jsonl``,
    ``raw/failures.jsonl``, ``raw/moe.jsonl`` ...): the frame's columns without its id, which the import
    numbers."""
    return SCHEMAS[frame].names[1:]
