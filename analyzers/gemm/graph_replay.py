"""GEMM kernels replayed from CUDA graphs: which kernels they are, and the shapes of the operators the graph
recorded when it was captured. The timeline's cases (timeline.py) make each one a call of the range that replays
it, with the captured shape where one matches, else ``FLOPs unknown (CUDA graph replay)``.

A replay (``cudaGraphLaunch``) is one launch call whose kernels all carry its correlation id: CUPTI's runtime
record links every kernel of the graph to the call, so the join already puts them in the innermost range open on
the launching thread (Kineto and nsys alike; tests/analysis/test_graph_replay.py checks both on real files). Such kernels
have no PyTorch operator of their own: the operators ran once, while the graph was captured, and launched no
kernel then (stream capture records launches instead of running them). A trace recorded with operators and
shapes (``capture --torch-profiler``, ``--torch-ops shapes``) holds those operators, each with ``Input Dims`` and
no kernel.

Matching: a graph's GEMM kernels run in the order they were captured (one stream: a graph captured from one
stream is a chain), and its GEMM operators were recorded in that order, one GEMM kernel each (cuBLAS's split-K
reduce and epilogue kernels are auxiliary, not GEMM kernels). So the i-th GEMM kernel of every replay takes the
shape of the i-th GEMM operator of the capture. A capture is a run of leaf GEMM operators without kernels on one
thread, unbroken by a GEMM operator that launched kernels (the eager warm-up before a capture breaks it). A
replay takes a capture's shapes only when that is unambiguous: the replay's GEMM kernels are on one stream, and
every capture before the first replay with as many GEMM operators as the replay has GEMM kernels gives the same
shapes (engines capture one graph per batch size, each with the same operators: those stay unmatched rather than
take a wrong M). Otherwise the case says ``FLOPs unknown (CUDA graph replay): capture with --ncu``: Nsight
Compute profiles replayed kernels one by one and counts their math.
"""

from __future__ import annotations

import polars as pl

from .case import context_key
from .names import is_gemm_kernel
from .user_ranges import range_key

NO_SHAPE_NOTE = "FLOPs unknown (CUDA graph replay): capture with --ncu"
"""What a replayed GEMM without a captured shape says (the explainer's note, ``flops_note``)."""

_SHAPE = ("m", "n", "k", "batch", "dtype_a", "dtype_b", "dtype_out")
"""A captured operator's dims, in the order the timeline's shaped ranges give them."""


def _replayed_gemms(kernels: pl.DataFrame, owned: set[int]) -> pl.DataFrame:
    """GEMM kernels of launch calls that ran two or more kernels (graph replays), each with its replay (``_g``),
    its place among the replay's GEMM kernels (``_pos``) and whether the replay's GEMM kernels share one stream."""
    cols = ["kernel_id", "source", "pid", "correlation_id", "name", "start_ns", "end_ns", "duration_ns"]
    cols += ["range_id", "stream", "launch_start_ns", "grid_x", "grid_y", "grid_z", "block_x", "block_y"]
    cols += ["block_z", "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes", "smem_bytes"]
    ks = kernels.select([c for c in cols if c in kernels.columns]).filter(
        pl.col("correlation_id").is_not_null() & pl.col("start_ns").is_not_null()
    )
    if owned:
        ks = ks.filter(pl.col("range_id").is_null() | ~pl.col("range_id").is_in(list(owned)))
    key = ["source", "pid", "correlation_id"]
    ks = ks.with_columns(pl.len().over(key).alias("_n")).filter(pl.col("_n") >= 2)
    if ks.height == 0:
        return ks
    gemm = [n for n in ks["name"].unique().to_list() if is_gemm_kernel(n)]
    ks = ks.filter(pl.col("name").is_in(gemm)).sort([*key, "start_ns"])
    return ks.with_columns(
        pl.struct(key).rank("dense").alias("_g"),
        pl.int_range(pl.len()).over(key).alias("_pos"),
        (pl.col("stream").n_unique().over(key) <= 1).alias("_one_stream"),
        pl.col("launch_start_ns").fill_null(pl.col("start_ns")).min().over(key).alias("_launch"),
    )


def _captures(ranges: pl.DataFrame, kernels: pl.DataFrame) -> list[dict]:
    """Runs of leaf GEMM operators that launched no kernel, per thread (see the module docstring): each with its
    (source, pid), its end and its operators' shapes in order (None for an operator without one)."""
    if "range_kind" not in ranges.columns:
        return []
    ops = ranges.filter(pl.col("range_kind") == "gemm-op")
    if ops.height == 0:
        return []
    inner = set(ops["parent_id"].drop_nulls().to_list()) & set(ops["range_id"].to_list())
    with_kernel = set(kernels["range_id"].drop_nulls().unique().to_list())
    shape = [pl.col(c) if c in ops.columns else pl.lit(None).alias(c) for c in _SHAPE]
    leaf = (
        ops.filter(~pl.col("range_id").is_in(list(inner)))
        .select("range_id", "source", "pid", "tid", "name", "start_ns", "end_ns", *shape)
        .with_columns(pl.col("range_id").is_in(list(with_kernel)).alias("_ran"))
        .sort(["source", "pid", "tid", "start_ns"])
        .with_columns(pl.col("_ran").cast(pl.Int64).cum_sum().over(["source", "pid", "tid"]).alias("_run"))
        .filter(~pl.col("_ran"))
    )
    out = []
    for _, part in leaf.group_by(["source", "pid", "tid", "_run"], maintain_order=True):
        shapes = []
        for row in part.iter_rows(named=True):
            dims = tuple(row[c] for c in _SHAPE)
            shapes.append((range_key(row["name"]), dims) if row["m"] and row["n"] and row["k"] else None)
        out.append(
            {
                "where": (part["source"][0], part["pid"][0]),
                "end": part["end_ns"].max(),
                "shapes": shapes,
                "ids": part["range_id"].to_list(),
            }
        )
    return out


def _shapes_for(sig_rows: pl.DataFrame, captures: list[dict]) -> list | None:
    """The captured operators' shapes for the replays of one graph (rows of its GEMM kernels), or None."""
    if not sig_rows["_one_stream"].all():
        return None
    m = int(sig_rows["_pos"].max()) + 1  # type: ignore[arg-type]
    first = sig_rows["_launch"].min()
    where = (sig_rows["source"][0], sig_rows["pid"][0])
    fits = [
        c["shapes"]
        for c in captures
        if c["where"] == where and len(c["shapes"]) == m and (c["end"] is None or c["end"] <= first)
    ]
    if not fits or any(f != fits[0] for f in fits) or any(s is None for s in fits[0]):
        return None
    return fits[0]


def replay_kernel_shapes(frames: dict[str, pl.DataFrame]) -> dict[int, tuple[str, tuple] | None]:
    """Every GEMM kernel replayed from a CUDA graph (a launch call that ran two or more kernels), by kernel id:
    the captured operator's name and dims (:data:`_SHAPE`) where the capture matches unambiguously (module
    docstring), else None (replayed, shape unknown). Kernels of no replay are absent."""
    kernels, ranges = frames.get("kernels"), frames.get("ranges")
    if kernels is None or kernels.height == 0 or "correlation_id" not in kernels.columns:
        return {}
    ks = _replayed_gemms(kernels, set())
    if ks.height == 0:
        return {}
    names: dict[int, str] = {}
    captures: list[dict] = []
    if ranges is not None and ranges.height:
        names = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))
        captures = _captures(ranges, kernels)
    # a graph: its replays' sequence of GEMM kernel names, in the range that replays it
    sig = ks.group_by("_g").agg(pl.col("name").sort_by("_pos").str.join("\x1f").alias("_sigkey"))
    holder_names = pl.DataFrame(
        {"range_id": list(names), "_where": list(names.values())},
        schema={"range_id": ks.schema["range_id"], "_where": pl.String},
    )
    ks = ks.join(sig, on="_g").join(holder_names, on="range_id", how="left")
    # every replay of one graph in ranges of one name (a step counter folded: ``step i=7``) shares its shapes
    ks = ks.with_columns(pl.col("_where").map_elements(context_key, return_dtype=pl.String).alias("_ctx"))
    out: dict[int, tuple[str, tuple] | None] = {}
    for _, part in ks.group_by(["_sigkey", "_ctx"], maintain_order=True):
        shapes = _shapes_for(part, captures)
        if shapes is None and part["name"].n_unique() == 1:
            # one GEMM kernel per launch call: a graph looping one GEMM, or a library launching a GEMM and its
            # helpers under one call; the range around it says what it is, as for any launch
            continue
        for kid, pos in part.select("kernel_id", "_pos").iter_rows():
            out[kid] = shapes[pos] if shapes else None
    return out


def captured_ops(frames: dict[str, pl.DataFrame]) -> set[int]:
    """Range ids of the GEMM operators recorded while a CUDA graph was captured (kernel-less by nature: stream
    capture records the launches), where the run replays a graph; empty otherwise. They are not calls whose
    kernel was sampled out."""
    kernels, ranges = frames.get("kernels"), frames.get("ranges")
    if kernels is None or ranges is None or ranges.height == 0 or "correlation_id" not in kernels.columns:
        return set()
    if _replayed_gemms(kernels, set()).height == 0:
        return set()
    return {rid for c in _captures(ranges, kernels) for rid in c["ids"]}
