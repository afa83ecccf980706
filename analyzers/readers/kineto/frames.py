"""The ``Part`` s of a Kineto trace, in file order -> ``kernels``, ``ranges`` and ``devices`` frames.

What needs the whole file is done here, on columns: each kernel's launch (the launch event with the same
``correlation``; a runtime call wins over a driver call, the first of equals wins; an id launched from two
processes links nothing and is said), the op that launched it (the innermost ``cpu_op`` on the launching thread),
the trace's only CPU process (for kernels without a launch), each GPU
annotation's process (the CPU annotation with the same ``External id``), the base time, kernel ids and order.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.frames import DEVICES, KERNELS, MEMOPS, RANGES

from ...join import assign_innermost
from ..base import fit_rows
from .part import Part, as_int


def short_kernel_name(name: str) -> str:
    """``void ns::foo<int, 4>(float*, int)`` -> ``foo``: the function name without return type, templates, args."""
    s = name.strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            c = s[i]
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    s = s[:i]
                    break
    out: list[str] = []
    depth = 0
    for c in s:
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(c)
    s = "".join(out).strip()
    s = s.rsplit(" ", 1)[-1] if " " in s and "(" not in s else s
    s = s.rsplit("::", 1)[-1]
    return s or name


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical", rechunk=True)


def build(
    parts: list[Part], base_ns: int, source: str, rank: int | None, warnings: list[str]
) -> dict[str, pl.DataFrame]:
    """The kernels, memops and ranges frames of ``parts`` (in file order; the list is emptied as they are joined, so
    the parts and the frames are not both held); warnings are appended to ``warnings``."""
    kernels = _concat([p.kernels for p in parts])
    launches = _concat([p.launches for p in parts])
    cpu = _concat([p.cpu for p in parts] + [p.steps for p in parts])
    gpu = _concat([p.gpu for p in parts])
    ops = _concat([p.ops for p in parts])
    cpu_ops = _concat([p.cpu_ops for p in parts])
    memops = _concat([p.memops for p in parts])
    parts.clear()
    chosen, ambiguous = _launch_of_each_id(launches)
    wanted = pl.concat([kernels["correlation_id"], memops["correlation_id"]]).drop_nulls()
    chosen = _with_launch_op(chosen, cpu_ops, wanted)
    del cpu_ops
    if ambiguous:
        warnings.append(
            f"{ambiguous} correlation ids belong to launches in more than one process; "
            "their kernels have no launching pid/tid"
        )
    cpu_pids = pl.concat([launches["pid"], cpu["pid"]]).drop_nulls().unique()
    single_pid = int(cpu_pids[0]) if cpu_pids.len() == 1 else None
    del launches
    return {
        "kernels": _kernels(kernels, chosen, base_ns, single_pid, source, rank),
        "memops": _memops(memops, chosen, base_ns, single_pid, source, rank),
        "ranges": _ranges(cpu, gpu, ops, base_ns, single_pid, source, rank),
    }


def _launch_of_each_id(launches: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """One launch per correlation id (runtime before driver, then the first); ids whose launches are in more
    than one process (the pid differs, or is known for one and not another) are left out and counted."""
    df = launches.filter(pl.col("corr").is_not_null()).with_row_index("order")
    many = df.group_by("corr").agg(pl.col("pid").n_unique().alias("pids")).filter(pl.col("pids") > 1)["corr"]
    chosen = (
        df.filter(~pl.col("corr").is_in(many.implode()))
        .sort("corr", "pref", "order")
        .unique("corr", keep="first", maintain_order=True)
        .select(
            "corr",
            pl.col("pid").alias("l_pid"),
            pl.col("tid").alias("l_tid"),
            pl.col("start_rel").alias("l_ts"),
        )
        .with_columns(pl.lit(True).alias("linked"))
    )
    return chosen, many.len()


def _with_launch_op(chosen: pl.DataFrame, cpu_ops: pl.DataFrame, wanted: pl.Series) -> pl.DataFrame:
    """``chosen`` launches with ``l_op``: the innermost ``cpu_op`` open on the launching thread at the launch
    call (the nesting join of analyzers/join.py on (pid, tid)); null where none is open, and for launches whose
    correlation id is not in ``wanted`` (the kernels' and memops'): only those rows are read, and a trace's
    runtime calls with an id are half of them no kernel's (synchronizations, event records ...)."""
    op = pl.lit(None, pl.String).alias("l_op")
    timed = cpu_ops.filter(pl.col("start_rel").is_not_null() & pl.col("dur").is_not_null())
    points = chosen.filter(pl.col("l_ts").is_not_null() & pl.col("corr").is_in(wanted.implode()))
    if timed.height == 0 or points.height == 0:
        return chosen.with_columns(op)
    ranges = timed.select(
        "pid",
        "tid",
        pl.int_range(pl.len(), dtype=pl.Int64).alias("range_id"),
        pl.col("start_rel").alias("start_ns"),
        (pl.col("start_rel") + pl.col("dur")).alias("end_ns"),
    )
    chosen = chosen.with_row_index("__pt")
    pts = chosen.filter(pl.col("l_ts").is_not_null() & pl.col("corr").is_in(wanted.implode())).select(
        pl.col("__pt").cast(pl.Int64).alias("point_id"),
        pl.col("l_pid").alias("pid"),
        pl.col("l_tid").alias("tid"),
        pl.col("l_ts").alias("t"),
    )
    at, rid = assign_innermost(ranges, ["pid", "tid"], pts)
    found = pl.DataFrame({"__pt": at.cast(pl.UInt32), "l_op": timed["name"].gather(rid)})
    return chosen.join(found, on="__pt", how="left", maintain_order="left").drop("__pt")


def _device_columns(source: str, rank: int | None, single_pid: int | None) -> list[pl.Expr | str]:
    """The columns kernels and memops both begin with: the file, its rank, the launching process (the trace's
    only CPU process when the row has no launch event), and where on the GPU the row ran."""
    return [
        pl.lit(source, pl.String).alias("source"),
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.when(pl.col("linked")).then(pl.col("l_pid")).otherwise(pl.lit(single_pid, pl.Int64)).alias("pid"),
        "device",
        "context",
        "stream",
        "correlation_id",
    ]


def _launch_columns(base_ns: int) -> list[pl.Expr]:
    """The launching thread and the launch call's start (on the capture's clock) of kernels and memops."""
    return [pl.col("l_tid").alias("launch_tid"), (pl.col("l_ts") + base_ns).alias("launch_start_ns")]


def _kernels(
    k: pl.DataFrame, chosen: pl.DataFrame, base_ns: int, single_pid: int | None, source: str, rank: int | None
) -> pl.DataFrame:
    k = k.join(chosen, left_on="correlation_id", right_on="corr", how="left", maintain_order="left")
    names = k["name"].unique()
    short = pl.Series([short_kernel_name(n) for n in names.to_list()], dtype=pl.String)
    start = pl.col("start_rel") + base_ns
    df = k.select(
        *_device_columns(source, rank, single_pid),
        "name",
        pl.col("name").replace_strict(names, short, return_dtype=pl.String).alias("short_name"),
        start.alias("start_ns"),
        pl.col("dur").alias("duration_ns"),
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers_per_thread",
        "smem_bytes",
        "blocks_per_sm",
        "est_occupancy_pct",
        *_launch_columns(base_ns),
        pl.col("l_op").alias("launch_op"),
    )
    df = (
        df.with_columns(end_ns=pl.col("start_ns") + pl.col("duration_ns"))
        .sort("start_ns", "stream", nulls_last=True, maintain_order=True)
        .with_row_index("kernel_id")
        .with_columns(pl.col("kernel_id").cast(pl.Int64))
    )
    return KERNELS.conform(df)


def _memops(
    m: pl.DataFrame, chosen: pl.DataFrame, base_ns: int, single_pid: int | None, source: str, rank: int | None
) -> pl.DataFrame:
    """memcpy / memset rows, linked to their API call (``cudaMemcpyAsync``, ``cudaMemsetAsync``) as kernels are."""
    m = m.join(chosen, left_on="correlation_id", right_on="corr", how="left", maintain_order="left")
    start = pl.col("start_rel") + base_ns
    df = m.select(
        *_device_columns(source, rank, single_pid),
        "kind",
        "name",
        "copy_kind",
        "bytes",
        start.alias("start_ns"),
        pl.col("dur").alias("duration_ns"),
        (start + pl.col("dur")).alias("end_ns"),
        *_launch_columns(base_ns),
    )
    df = (
        df.sort("start_ns", "stream", nulls_last=True, maintain_order=True)
        .with_row_index("memop_id")
        .with_columns(pl.col("memop_id").cast(pl.Int64))
    )
    return MEMOPS.conform(df)


def _ranges(
    cpu: pl.DataFrame,
    gpu: pl.DataFrame,
    ops: pl.DataFrame,
    base_ns: int,
    single_pid: int | None,
    source: str,
    rank: int | None,
) -> pl.DataFrame:
    ext_pid = (
        cpu.filter(pl.col("ext").is_not_null() & pl.col("pid").is_not_null())
        .unique("ext", keep="first", maintain_order=True)
        .select("ext", pl.col("pid").alias("x_pid"))
    )
    gpu = gpu.join(ext_pid, on="ext", how="left", maintain_order="left")
    common = [pl.lit(source, pl.String).alias("source"), pl.lit(rank, pl.Int32).alias("rank")]
    cpu_rows = cpu.select(
        *common,
        pl.lit("annotation", pl.String).alias("kind"),
        "name",
        "pid",
        "tid",
        pl.lit(None, pl.Int32).alias("device"),
        "start_rel",
        "dur",
    )
    gpu_rows = gpu.select(
        *common,
        pl.lit("gpu_annotation", pl.String).alias("kind"),
        "name",
        pl.coalesce("x_pid", pl.lit(single_pid, pl.Int64)).alias("pid"),
        "tid",
        "device",
        "start_rel",
        "dur",
    )
    start = pl.col("start_rel") + base_ns
    df = _concat([cpu_rows, gpu_rows]).with_columns(
        start.alias("start_ns"), (start + pl.col("dur")).alias("end_ns")
    )
    df = RANGES.conform(df)
    if ops.height:
        ops = ops.with_columns(*common, start.alias("start_ns"), (start + pl.col("dur")).alias("end_ns"))
        df = pl.concat([df, RANGES.conform(ops)], how="vertical")
    df = (
        df.drop("range_id")
        .sort("start_ns", "kind", nulls_last=True, maintain_order=True)
        .with_row_index("range_id")
        .with_columns(pl.col("range_id").cast(pl.Int64))
    )
    return RANGES.conform(df)


def devices(props: Any, source: str, rank: int | None, warnings: list[str]) -> pl.DataFrame:
    """``deviceProperties`` as device rows; a value past its column's range (a damaged file) is null and said."""
    rows = []
    for p in props if isinstance(props, list) else []:
        if not isinstance(p, dict):
            continue
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        rows.append(
            {
                "source": source,
                "rank": rank,
                "device": as_int(p.get("id")),
                "name": p.get("name") if isinstance(p.get("name"), str) else None,
                "compute_capability": f"{major}.{minor}"
                if type(major) is int and type(minor) is int
                else None,
                "sm_count": as_int(p.get("numSms")),
                "memory_bytes": as_int(p.get("totalGlobalMem")),
                "smem_per_block_optin_bytes": as_int(p.get("sharedMemPerBlockOptin")),
                "smem_per_sm_bytes": as_int(
                    p.get("sharedMemPerMultiprocessor", p.get("maxSharedMemoryPerMultiProcessor"))
                ),
                "regs_per_sm": as_int(p.get("regsPerMultiprocessor")),
            }
        )
    df, bad = fit_rows(rows, DEVICES)
    if bad:
        warnings.append(f"{bad} deviceProperties values are out of range for their column and are left null")
    return DEVICES.conform(df)
