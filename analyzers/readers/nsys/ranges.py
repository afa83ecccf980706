"""NVTX_EVENTS of an Nsight Systems export -> the ``ranges`` frame (``reader.py`` reads the table with the
others, in one pass over the export).

Push/pop ranges (``NvtxPushPopRange``, eventType 59) as kind ``push_pop``, start/end ranges
(``NvtxStartEndRange``, 60) as ``start_end``; the ids are checked against ENUM_NSYS_EVENT_TYPE where the file
has it. Marks (``NvtxMark``) have no duration: they are dropped and counted in a warning. ``name`` from
``text`` or ``textId`` -> StringIds; ``domain`` from the ``NvtxDomainCreate`` event (75) of the same process
and ``domainId``, null for the default domain (0); ``pid`` / ``tid`` from ``globalTid``. ``parent_id`` /
``depth`` (the join computes nesting) and the GEMM fields (the importer parses names) stay null, except for
ranges that ``torch.autograd.profiler.emit_nvtx`` writes around PyTorch GEMM ops (``"aten::mm, seq = 3,
op_id = 7, sizes = [[1024, 6144], [6144, 2048]]"``): those get ``range_kind="gemm-op"``, ``op`` and, with
``record_shapes=True``, ``m`` / ``n`` / ``k`` / ``batch`` from ``sizes`` (``shape_source="nvtx-record-shapes"``;
the text has no dtypes). See analyzers/readers/torch_ops.py.
"""

from __future__ import annotations

import os
import re

import polars as pl

from tracekit.frames import RANGES

from ..torch_ops import GEMM_OPS, nvtx_op_shape
from .db import _Db, _Query
from .reader import _FIELD, NVTX_TABLE, _fit, _lookup

__all__ = ["EVENT_DEFAULTS", "event_ids", "nvtx_op_shapes", "nvtx_query", "read_ranges"]

EVENT_DEFAULTS = {"NvtxMark": 34, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
"""ENUM_NSYS_EVENT_TYPE ids, used where the file has no enum table (they have been stable across nsys versions)."""


def event_ids(db: _Db) -> dict[str, int]:
    ids = dict(EVENT_DEFAULTS)
    if "ENUM_NSYS_EVENT_TYPE" in db.tables and {"id", "name"} <= set(db.columns("ENUM_NSYS_EVENT_TYPE")):
        names = ", ".join(f"'{n}'" for n in ids)
        for i, name in db.small(f"SELECT id, name FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ({names})"):
            if isinstance(i, int):  # a damaged table can hold NULL or text there: the usual id stands
                ids[name] = i
    return ids


def nvtx_query(db: _Db, ids: dict[str, int]) -> _Query:
    cols = db.columns(NVTX_TABLE)
    wanted = tuple(ids[n] for n in ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxMark", "NvtxDomainCreate"))
    parts = (
        ("start_ns", "start", True),
        ("end_ns", "end", True),
        ("event", "eventType", True),
        ("text", "text", False),
        ("text_id", "textId", True),
        ("gtid", "globalTid", True),
        ("domain_id", "domainId", True),
    )
    schema: dict[str, pl.DataType] = {
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "event": pl.Int64(),
        "text": pl.String(),
        "text_id": pl.Int64(),
        "gtid": pl.Int64(),
        "domain_id": pl.Int64(),
    }
    return _Query(NVTX_TABLE, cols, parts, schema, keep=("eventType", wanted))


def read_ranges(
    events: pl.DataFrame,
    ids: dict[str, int],
    strings: pl.DataFrame,
    warnings: list[str],
    src: str,
    lost: list[int],
) -> pl.DataFrame:
    kinds = {ids["NvtxPushPopRange"]: "push_pop", ids["NvtxStartEndRange"]: "start_end"}
    marks = int((events["event"] == ids["NvtxMark"]).sum())
    if marks:
        warnings.append(f"{src}: {marks} NVTX marks (instantaneous, no range) were left out")
    events = events.with_columns((pl.col("gtid") // _FIELD).alias("proc"))
    if events["text_id"].null_count() < events.height:
        found = _lookup(events, ["text_id"], strings.rename({"id": "text_id"}))["value"]
        events = events.with_columns(found.fill_null(events["text"]).alias("name"))
    else:
        events = events.rename({"text": "name"})
    is_range = pl.col("event").is_in(list(kinds))
    # usually every event is a range (the table read keeps only the four types): no copy of the frame then
    ranges = events if events.select(is_range.all()).item() else events.filter(is_range)
    # Domain ids are per process: name them from that process's NvtxDomainCreate event.
    used = ranges.filter(pl.col("domain_id").fill_null(0) != 0).select("proc", "domain_id").unique()
    if used.height:
        created = (
            events.filter(pl.col("event") == ids["NvtxDomainCreate"])
            .sort("start_ns")
            .unique(["proc", "domain_id"], keep="first", maintain_order=True)
            .select("proc", "domain_id", pl.col("name").alias("domain"))
        )
        named = used.join(created, on=["proc", "domain_id"], how="left")
        unnamed = named.filter(pl.col("domain").is_null())
        if unnamed.height:
            count = ranges.join(unnamed.select("proc", "domain_id"), on=["proc", "domain_id"]).height
            warnings.append(
                f"{src}: {count} NVTX ranges are in domains with no NvtxDomainCreate event "
                f"(ids {sorted(unnamed['domain_id'].unique().to_list())}); their domain is given as 'domain#<id>'"
            )
        named = named.with_columns(pl.coalesce("domain", pl.format("domain#{}", "domain_id")).alias("domain"))
        ranges = ranges.with_columns(_lookup(ranges, ["proc", "domain_id"], named)["domain"])
    lo, hi = ranges.select(pl.col("event").min().alias("lo"), pl.col("event").max().alias("hi")).row(0)
    # one event type (push / pop ranges, the usual case): the kind as a literal, which polars writes out only
    # where it must (the frame's write), and asked of it answers at once
    kind = (
        pl.lit(kinds[lo], dtype=pl.String)
        if lo == hi and lo in kinds
        else pl.col("event").replace_strict(kinds, return_dtype=pl.String)
    )
    ranges = ranges.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("range_id"),
        pl.lit(src).alias("source"),
        kind.alias("kind"),
        (pl.col("proc") % _FIELD).alias("pid"),
        (pl.col("gtid") % _FIELD).alias("tid"),
    )
    return nvtx_op_shapes(_fit(RANGES, ranges, lost))


_GEMM_OP_PREFIX = os.path.commonprefix(sorted(GEMM_OPS))  # noqa: RUF071 (op names, by character on purpose)
"""How every GEMM op's name starts ("aten::")."""


def nvtx_op_shapes(ranges: pl.DataFrame) -> pl.DataFrame:
    """Fill the GEMM fields (null, as ``_fit`` leaves them) of emit_nvtx ranges around PyTorch GEMM ops
    (analyzers/readers/torch_ops.py). Only names that
    start with a GEMM op are parsed, and each distinct (op, sizes) once: an emit_nvtx capture holds a range per op
    call, most of them not GEMMs, each GEMM call's text made unique by its ``seq`` / ``op_id``."""
    if ranges.height == 0:
        return ranges
    # Cheap first cuts: names that start as every GEMM op does ("aten::", a test polars answers from the
    # string's inline first bytes: a serving engine's own NVTX ranges do not), then those that start with a
    # GEMM op's name (a superset of the GEMM calls). An emit_nvtx capture is mostly non-GEMM ops, and extracting
    # the op of every range cost 0.8 s at 5M ranges; the pattern over 5M names, about 0.2 s.
    maybe = ranges["name"].str.starts_with(_GEMM_OP_PREFIX)
    if not maybe.any():
        return ranges
    first_cut = "^(?:" + "|".join(re.escape(op) for op in sorted(GEMM_OPS)) + ")"
    name = pl.col("name")
    # one lazy query, both cuts in one filter: filtering on the prefix first copied the 4.9M names of an
    # emit_nvtx capture out before the pattern (0.21 -> 0.12 s at 5M ranges)
    calls = (
        ranges.lazy()
        .select(name)
        .with_row_index("_row")
        .filter(pl.lit(maybe) & name.str.contains(first_cut))
        .with_columns(name.str.extract(r"^([^,]*)").str.strip_chars().alias("_op"))
        .filter(pl.col("_op").is_in(list(GEMM_OPS)))
        .collect()
    )
    if calls.height == 0:
        return ranges
    sizes = name.str.extract(r",\s*sizes = (\[.*?\]\])")
    calls = calls.with_columns(
        pl.when(sizes.is_null())
        .then(pl.col("_op"))
        .otherwise(pl.format("{}, sizes = {}", "_op", sizes))
        .alias("_key")
    )
    rows = []
    for key in calls["_key"].unique().to_list():
        shape = nvtx_op_shape(key)
        if shape is None:
            continue
        rows.append(
            {
                "_key": key,
                "range_kind": "gemm-op",
                "op": shape.op,
                "m": shape.m,
                "n": shape.n,
                "k": shape.k,
                "batch": shape.batch,
                "shape_source": "nvtx-record-shapes" if shape.m is not None else None,
            }
        )
    if not rows:
        return ranges
    cols = [c for c in rows[0] if c != "_key"]
    parsed = pl.DataFrame(rows, schema={"_key": pl.String, **{c: RANGES.schema[c] for c in cols}})
    found = calls.select("_row", "_key").join(parsed.with_row_index("_at"), on="_key", how="inner")
    # Each field gathered from the parsed rows through one row -> parsed-row index (null for other ranges):
    # a scatter per field copied the whole column first. In a fresh process, as the import runs it: 0.49-0.64 s
    # against 0.58-0.76 s at 5M ranges, and 100k fewer page faults (an in-process comparison, where freed memory
    # is reused, had it the other way).
    at = pl.repeat(None, ranges.height, dtype=pl.UInt32, eager=True).scatter(found["_row"], found["_at"])
    # a field no parsed op has (m / n / k without record_shapes) stays as it is: null, as _fit left it
    filled = [c for c in cols if parsed[c].null_count() < parsed.height]
    return ranges.with_columns(parsed[c].gather(at).alias(c) for c in filled)
