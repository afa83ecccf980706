"""memcpy / memset operations of an Nsight Systems SQLite export (CUPTI_ACTIVITY_KIND_MEMCPY and
CUPTI_ACTIVITY_KIND_MEMSET) -> the ``memops`` frame: device, stream, bytes and direction (``copyKind``), named as
Nsight Systems labels them (``[CUDA memcpy Host-to-Device]``, ``[CUDA memset]``) and linked to their runtime API
call as kernels are (``reader.py``, which reads the tables with its kernels in one pass over the export)."""

from __future__ import annotations

import polars as pl

from tracekit.frames import MEMOPS

from .db import _Db, _Query
from .reader import _fit, _link_launches

__all__ = ["MEMCPY_TABLE", "MEMSET_TABLE", "memop_query", "read_memops"]

MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"

_MEMOP_INTS = {
    "start_ns": "start",
    "end_ns": "end",
    "device": "deviceId",
    "context": "contextId",
    "stream": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "bytes": "bytes",
}
_COPY_KINDS = {
    1: ("HtoD", "Host-to-Device"),
    2: ("DtoH", "Device-to-Host"),
    3: ("HtoA", "Host-to-Array"),
    4: ("AtoH", "Array-to-Host"),
    5: ("AtoA", "Array-to-Array"),
    6: ("AtoD", "Array-to-Device"),
    7: ("DtoA", "Device-to-Array"),
    8: ("DtoD", "Device-to-Device"),
    9: ("HtoH", "Host-to-Host"),
    10: ("PtoP", "Peer-to-Peer"),
    11: ("UVM HtoD", "Unified Host-to-Device"),
    12: ("UVM DtoH", "Unified Device-to-Host"),
    13: ("UVM DtoD", "Unified Device-to-Device"),
}
"""CUPTI's CUpti_ActivityMemcpyKind: id -> (short direction, Nsight Systems' label in ENUM_CUDA_MEMCPY_OPER)."""


def memop_query(db: _Db, table: str) -> _Query:
    cols = db.columns(table)
    parts = [(alias, c, True) for alias, c in (*_MEMOP_INTS.items(), ("copy_kind_id", "copyKind"))]
    schema: dict[str, pl.DataType] = {alias: pl.Int64() for alias, *_ in parts}
    return _Query(table, cols, tuple(parts), schema)


def read_memops(
    got: dict[str, pl.DataFrame], runtime: pl.DataFrame | None, src: str, lost: list[int]
) -> pl.DataFrame:
    """memcpy rows named ``[CUDA memcpy Host-to-Device]`` and memset rows ``[CUDA memset]``, as Nsight Systems
    labels them, linked to their API call as kernels are."""
    parts = []
    if "memcpy" in got:
        code = {i: short for i, (short, _) in _COPY_KINDS.items()}
        label = {i: f"[CUDA memcpy {long}]" for i, (_, long) in _COPY_KINDS.items()}
        parts.append(
            got["memcpy"].with_columns(
                pl.lit("memcpy").alias("kind"),
                pl.col("copy_kind_id")
                .replace_strict(code, default=None, return_dtype=pl.String)
                .alias("copy_kind"),
                pl.col("copy_kind_id")
                .replace_strict(label, default="[CUDA memcpy]", return_dtype=pl.String)
                .alias("name"),
            )
        )
    if "memset" in got:
        parts.append(
            got["memset"].with_columns(
                pl.lit("memset").alias("kind"),
                pl.lit(None, pl.String).alias("copy_kind"),
                pl.lit("[CUDA memset]").alias("name"),
            )
        )
    if not parts:
        return MEMOPS.empty()
    ops = pl.concat(parts, how="vertical").drop("copy_kind_id").sort("start_ns", nulls_last=True)
    if runtime is not None:
        # the calls of these operations' ids only: a thousand copies matched against every runtime call (1.7M
        # of a serving step) cost 0.1 s of hashing the calls
        runtime = runtime.filter(pl.col("corr").is_in(ops["correlation_id"].drop_nulls().unique().implode()))
    ops = _link_launches(ops, runtime, [], src)  # a missing launch is said for kernels already
    ops = ops.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("memop_id"),
        pl.lit(src).alias("source"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
    )
    return _fit(MEMOPS, ops, lost)
