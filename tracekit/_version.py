"""Version numbers, kept free of imports so the capture path (which runs without polars) can read them."""

__version__ = "0.1.0"

SCHEMA_VERSION = 8
"""Version of the run format (manifest + frames). Bump it whenever a frame's columns change: runs whose frames
are older are rebuilt from raw/. 2: MoE frames (moe, moe_curve, moe_routing) and rank-partitioned multi-rank frames. 3: ranges gain batch,
flops and shape_source (PyTorch GEMM ops with their shapes, range_kind gemm-op). 4: failures gain a crash's evidence
(dtypes, range, caller, signal, python_stack, stderr_tail); gemms gain flops_source, dtype_source, counted_flops.
5: nested values are polars List / Struct columns instead of JSON text (failures.versions, ncu.nvtx_stack,
ranges.fields, gemms.aux_kernels, moe.counts, moe.expert_time_us, moe_routing.counts). 6: kernels gain launch_op,
kernels and ncu gain kernel_class, kernel_family, class_source (the kernel taxonomy, docs/KERNELS.md); the memops
frame (memcpy / memset operations on the timeline, for the step breakdown). 7: kernels gain blocks_per_sm and
est_occupancy_pct (the PyTorch profiler's launch statistics). 8: kernel_class gains convolution and softmax, and
Nsight Compute's evidence makes a GEMM whatever the name says (kernel table version 3): frames of 7 are read with
their classes decided again, in memory."""

MIGRATES_FROM = (4, 5, 6, 7)
"""Frame versions read without a rebuild: their JSON text columns are decoded into this version's nested columns
in memory on read (tracekit/frames.py ``migrate``), columns added since are null, and the kernel classes are
computed on load for versions before :data:`CLASSES_SINCE` (analyzers/store.py ``load_frames``); frames added since
(memops) read as empty, and the runs' manifest says so (``frames.rows`` does not name them); older frames are rebuilt
from raw/. A version-6 run of a PyTorch-profiler trace so read has no blocks_per_sm / est_occupancy_pct (null:
unknown); ``tracekit import --rebuild RUN`` reads them from its raw file."""

CLASSES_SINCE = 8
"""The first frame version whose ``kernels`` and ``ncu`` frames carry the kernel classes of this table as written
(frames of 6 and 7 carry those of an earlier table: 13 classes, evidence only for unknown names)."""
