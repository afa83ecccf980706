"""Nsight Systems SQLite exports (``nsys export --type sqlite``) -> ``kernels``, ``memops``, ``ranges`` and ``devices``
frames.

Where each column comes from (the columns themselves are documented in tracekit/frames.py):

``kernels`` (CUPTI_ACTIVITY_KIND_KERNEL, one row per kernel, in table order)
    ``pid`` from ``globalPid`` (nsys packs ``pid = globalPid >> 24 & 0xFFFFFF``); ``name`` / ``short_name`` from
    ``demangledName`` / ``shortName``, ids into StringIds (old exports that hold the text itself, or a ``name``
    column, are read as text); ``launch_tid`` (the 24-bit tid, ``globalTid & 0xFFFFFF``, as ``ranges.tid``) and
    ``launch_start_ns`` from the CUPTI_ACTIVITY_KIND_RUNTIME row with the same process and ``correlationId``.
    Correlation ids repeat across processes, so the match is on (process, id), never the id alone; a kernel
    table without ``globalPid`` takes its process from that runtime row, matched on the id only where the id
    belongs to one process. Columns a schema version lacks are nulls.
``memops`` (CUPTI_ACTIVITY_KIND_MEMCPY and CUPTI_ACTIVITY_KIND_MEMSET, by start)
    memcpy / memset operations with their device, stream, bytes and direction (``copyKind``: HtoD, DtoD, ...),
    named as Nsight Systems labels them (``[CUDA memcpy Host-to-Device]``, ``[CUDA memset]``) and linked to their
    API call as kernels are; the step breakdown counts them as GPU time of class ``memory``.
``ranges`` (NVTX_EVENTS)
    push/pop and start/end ranges with their names, domains and threads, and the GEMM fields of emit_nvtx's
    ranges around PyTorch GEMM ops: ``ranges.py``.
``devices`` (TARGET_INFO_GPU, else TARGET_INFO_CUDA_DEVICE)
    One row per GPU: CUDA ordinal, name, ``computeMajor.computeMinor``, SM count, memory, shared memory per
    block (opt-in) and per SM, registers per SM, ``clockRate`` (Hz) as the boost clock.

Files are opened read-only (``mode=ro``) and never changed. The big tables are read from the file's pages by
the page reader (``pages.py``, a C extension: the fast path), several tables at once and a large one in parallel
parts; a table it is not sure of, or every table where it was not built, through ``sqlite3`` in rowid chunks
(the fallback). Both give the same frames (tests/readers/test_nsys.py and test_nsys_pages.py check that on every
export).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracekit.errors import UnreadableFileError
from tracekit.frames import DEVICES, KERNELS, RANGES, FrameSpec

from ..base import Extract, fit_frame, source_name
from . import pages, sqlite_uri
from .db import _Db, _Query

__all__ = ["is_nsys_sqlite", "read_nsys_sqlite"]

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_REP_MAGICS = (b"NVIDIA Tegra Profiler Report", b"QDSTRM")
_REP_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")
_EXPORT_HINT = "export the report first: `nsys export --type sqlite -o {out} {rep}` and read the .sqlite"


_FIELD = (
    1 << 24
)  # nsys packs pid and tid in 24-bit fields: pid = gtid >> 24 & 0xFFFFFF, tid = gtid & 0xFFFFFF
_WORKERS = max(2, min(4, os.cpu_count() or 2))
_MAX_SMEM_BYTES = 1 << 31  # shared memory per block; real GPUs have at most a few hundred KiB


# --- file checks ------------------------------------------------------------------------------------------------
def _head(path: Path, n: int = 100) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


def _table_names(path: Path) -> set[str]:
    con = sqlite3.connect(sqlite_uri(path), uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except UnicodeDecodeError as e:  # a damaged schema page: names that are not text
        raise sqlite3.DatabaseError(f"its schema is damaged: a table name is not UTF-8 ({e.reason})") from e
    finally:
        con.close()


def _looks_nsys(tables: set[str]) -> bool:
    return (
        STRINGS_TABLE in tables
        or NVTX_TABLE in tables
        or any(t.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_")) for t in tables)
    )


def is_nsys_sqlite(path: Path) -> bool:
    """True when ``path`` is an SQLite database with Nsight Systems export tables (a content sniff, no errors)."""
    try:
        path = Path(path)
        if not path.is_file() or not _head(path, 16).startswith(_SQLITE_MAGIC):
            return False
        return _looks_nsys(_table_names(path))
    except (OSError, sqlite3.Error):
        return False


def _rep_hint(path: Path) -> str:
    return _EXPORT_HINT.format(out=path.with_suffix(".sqlite"), rep=path)


def _check_file(path: Path) -> set[str]:
    """Raise UnreadableFileError unless ``path`` is a complete nsys SQLite export; return its table names."""
    if not path.exists():
        raise UnreadableFileError(path, "does not exist", "check the path")
    if path.is_dir():
        raise UnreadableFileError(path, "is a folder, not an Nsight Systems SQLite export")
    size = path.stat().st_size
    if size == 0:
        raise UnreadableFileError(path, "is empty", "export the report again")
    head = _head(path)
    if path.suffix.lower() in _REP_SUFFIXES or head.startswith(_REP_MAGICS):
        raise UnreadableFileError(
            path, "is an Nsight Systems report; tracekit reads its SQLite export", _rep_hint(path)
        )
    if not head.startswith(_SQLITE_MAGIC):
        raise UnreadableFileError(
            path,
            "is not an SQLite database (no SQLite header)",
            "give the .sqlite that `nsys export --type sqlite X.nsys-rep` writes",
        )
    if len(head) < 100:
        raise UnreadableFileError(path, f"is truncated ({size} bytes, shorter than an SQLite header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The page count in the header is valid when its version stamp matches the change counter.
    if pages and head[92:96] == head[24:28] and size < pages * page_size:
        raise UnreadableFileError(
            path,
            f"is truncated: its header says {pages * page_size} bytes, the file has {size}",
            "copy or export it again",
        )
    try:
        tables = _table_names(path)
    except sqlite3.Error as e:
        raise UnreadableFileError(path, f"cannot be opened as SQLite ({e})", "export the report again") from e
    if not _looks_nsys(tables):
        raise UnreadableFileError(
            path,
            "is an SQLite database but not an Nsight Systems export (no StringIds, CUPTI_*, NVTX_EVENTS or "
            "TARGET_INFO_* table)",
            "give the .sqlite that `nsys export --type sqlite X.nsys-rep` writes",
        )
    return tables


def _fit(spec: FrameSpec, df: pl.DataFrame, lost: list[int]) -> pl.DataFrame:
    """``df`` conformed to ``spec``; values that do not fit their column (a damaged file: a grid of 2**63 - 1
    blocks) become null and are counted in ``lost``."""
    df, n = fit_frame(df, spec)
    lost.append(n)
    return df


def _first(cols: dict[str, str], *names: str) -> str | None:
    return next((n for n in names if n in cols), None)


# --- kernels ----------------------------------------------------------------------------------------------------
_KERNEL_INTS = {
    "start_ns": "start",
    "end_ns": "end",
    "device": "deviceId",
    "context": "contextId",
    "stream": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "grid_x": "gridX",
    "grid_y": "gridY",
    "grid_z": "gridZ",
    "block_x": "blockX",
    "block_y": "blockY",
    "block_z": "blockZ",
    "registers_per_thread": "registersPerThread",
    "static_smem_bytes": "staticSharedMemory",
    "dynamic_smem_bytes": "dynamicSharedMemory",
}
# Current exports hold ids into StringIds; very old ones the text itself (or a ``name`` column).
_KERNEL_NAMES = {"name": ("demangledName", "name", "mangledName"), "short_name": ("shortName",)}


def _kernel_query(db: _Db) -> _Query:
    cols = db.columns(KERNEL_TABLE)
    parts: list[tuple[str, str | None, bool]] = [(alias, c, True) for alias, c in _KERNEL_INTS.items()]
    schema: dict[str, pl.DataType] = {alias: pl.Int64() for alias in _KERNEL_INTS}
    for alias, candidates in _KERNEL_NAMES.items():
        name = _first(cols, *candidates)
        as_text = bool(name) and "INT" not in cols[name]  # type: ignore[index]
        parts.append((f"{alias}_id", name if not as_text else None, True))
        parts.append((f"{alias}_text", name if as_text else None, False))
        schema |= {f"{alias}_id": pl.Int64(), f"{alias}_text": pl.String()}
    return _Query(KERNEL_TABLE, cols, tuple(parts), schema)


def _runtime_query(db: _Db) -> _Query | None:
    cols = db.columns(RUNTIME_TABLE)
    if not {"globalTid", "correlationId"} <= set(cols):
        return None
    parts = (("gtid", "globalTid", True), ("corr", "correlationId", True), ("start", "start", True))
    schema: dict[str, pl.DataType] = {"gtid": pl.Int64(), "corr": pl.Int64(), "start": pl.Int64()}
    return _Query(RUNTIME_TABLE, cols, parts, schema)


def _lookup(df: pl.DataFrame, keys: list[str], table: pl.DataFrame) -> pl.DataFrame:
    """The non-key columns of ``table`` for each row of ``df``, matched on ``keys`` (null where none matches).

    Only the key columns take part in the join, so the wide frame is never gathered; the result lines up with
    ``df`` row for row while ``table`` has at most one row per key. Two integer keys are joined as one number
    where they fit (the first key's rank among its values times the second's span, plus the second): a join on
    one integer column is several times cheaper than on two (1M kernels against 1.7M runtime rows: 0.2 s
    instead of 0.3); a null in either key stays a null, which matches nothing, as before."""
    # the key columns as they are: a select of a frame whose columns are chunked unalike (read in parts, then
    # joined to) copies every column into one chunk first
    left = pl.DataFrame([df.get_column(k) for k in keys])
    one = _one_key(left, table, keys)
    if one is None and len(keys) == 1 and all(f.schema[keys[0]].is_integer() for f in (left, table)):
        one = left[keys[0]].cast(pl.Int64), table[keys[0]].cast(pl.Int64)
    if one is not None:
        lkey, rkey = one
        direct = _direct(lkey, rkey, table.drop(keys))
        if direct is not None:
            return direct
        return (
            lkey.to_frame("_key")
            .join(
                table.drop(keys).with_columns(rkey.alias("_key")),
                on="_key",
                how="left",
                maintain_order="left",
            )
            .drop("_key")
        )
    return left.join(table, on=keys, how="left", maintain_order="left").drop(keys)


def _direct(lkey: pl.Series, rkey: pl.Series, values: pl.DataFrame) -> pl.DataFrame | None:
    """The rows of ``values`` whose ``rkey`` equals each ``lkey`` (null where none does), by address: where the
    right keys are distinct and span at most a few times the rows (StringIds' dense ids), a slot per key value
    holds its row and each left key reads its slot, instead of hashing both sides. None (the caller joins)
    where a key repeats or the span is wide (the launch join's process x correlation-id numbers usually are)."""
    keyed = rkey.is_not_null()
    rows = pl.int_range(rkey.len(), dtype=pl.Int64, eager=True)
    if not keyed.all():
        rkey, rows = rkey.filter(keyed), rows.filter(keyed)
    lo, hi = rkey.min(), rkey.max()
    if lo is None or int(hi) - int(lo) + 1 > 4 * (lkey.len() + rkey.len()) + 1024:  # type: ignore[arg-type]
        return None
    span = int(hi) - int(lo) + 1  # type: ignore[arg-type]
    slots = pl.repeat(None, span, dtype=pl.Int64, eager=True).scatter(rkey - lo, rows)
    if (slots.gather(rkey - lo) != rows).any():  # a key held by two rows: the caller's join shows it
        return None
    inside = (lkey >= lo) & (lkey <= hi)
    at = pl.select(pl.when(inside).then(lkey - lo)).to_series()
    return values.select(pl.all().gather(slots.gather(at)))


def _one_key(left: pl.DataFrame, right: pl.DataFrame, keys: list[str]) -> tuple[pl.Series, pl.Series] | None:
    """Two integer key columns of both frames as one Int64 each (equal exactly where both keys are equal, null
    where either is null), or None where they are not two integers or the number would not fit."""
    if len(keys) != 2 or not all(f.schema[k].is_integer() for f in (left, right) for k in keys):
        return None
    a, b = keys
    seconds = pl.concat([left[b].cast(pl.Int64), right[b].cast(pl.Int64)])
    lo, hi = seconds.min(), seconds.max()
    whole = pl.concat([left[a].cast(pl.Int64), right[a].cast(pl.Int64)])
    a_lo, a_hi = whole.min(), whole.max()
    if lo is None or a_lo is None:
        return None
    width = int(hi) - int(lo) + 1  # type: ignore[arg-type]
    # the first key's code: its offset from the smallest where that fits (process ids: a few hundred apart),
    # else its rank among its distinct values
    firsts = None
    if (int(a_hi) - int(a_lo) + 1) * width >= 2**62:  # type: ignore[arg-type]
        firsts = whole.drop_nulls().unique().sort()
        if firsts.len() * width >= 2**62:
            return None

    def number(f: pl.DataFrame) -> pl.Series:
        first = f[a].cast(pl.Int64)
        code = first - a_lo if firsts is None else firsts.search_sorted(first).cast(pl.Int64)
        value = code * width + (f[b].cast(pl.Int64) - lo)
        return pl.select(pl.when(f[a].is_null() | f[b].is_null()).then(None).otherwise(value)).to_series()

    return number(left), number(right)


def _resolve(df: pl.DataFrame, alias: str, strings: pl.DataFrame) -> pl.DataFrame:
    """Replace ``<alias>_id`` (into StringIds) / ``<alias>_text`` by one string column ``alias``."""
    if df[f"{alias}_id"].null_count() == df.height:
        name = df[f"{alias}_text"]
    else:
        found = _lookup(df, [f"{alias}_id"], strings.rename({"id": f"{alias}_id"}))["value"]
        name = found.fill_null(df[f"{alias}_text"])
    return df.drop(f"{alias}_id", f"{alias}_text").with_columns(name.alias(alias))


def _link_launches(kernels: pl.DataFrame, runtime: pl.DataFrame | None, warnings: list[str], src: str):
    """Fill pid / launch_tid / launch_start_ns from the runtime rows of the same (process, correlation id)."""
    if runtime is None or runtime.height == 0:
        return kernels.with_columns(
            ((pl.col("global_pid") // _FIELD) % _FIELD).alias("pid"),
            pl.lit(None, pl.Int64).alias("launch_tid"),
            pl.lit(None, pl.Int64).alias("launch_start_ns"),
        )
    rt = runtime.select(
        (pl.col("gtid") // _FIELD).alias("proc"),
        pl.col("corr").alias("correlation_id"),
        (pl.col("gtid") % _FIELD).alias("launch_tid"),
        pl.col("start").alias("launch_start_ns"),
    )
    if kernels["global_pid"].null_count() < kernels.height:
        keys = ["proc", "correlation_id"]
        keyed = kernels.select((pl.col("global_pid") // _FIELD).alias("proc"), "correlation_id")
        found = _lookup(keyed, keys, rt)
        if found.height != kernels.height:
            # Runtime rows sharing a (process, id) duplicated kernels: link none of those kernels.
            dup = rt.group_by(keys).len().filter(pl.col("len") > 1)
            warnings.append(
                f"{src}: {int(dup['len'].sum())} runtime API rows share a (process, correlation id) with "
                "another; their kernels get no launch thread"
            )
            found = _lookup(keyed, keys, rt.join(dup.select(keys), on=keys, how="anti"))
        found = found.with_columns(keyed["proc"])
    else:
        # No globalPid (some exports): the id alone, and only where it belongs to one launch in one process.
        per_id = rt.group_by("correlation_id").agg(pl.len().alias("_n"), pl.all().first())
        ambiguous = per_id.filter(pl.col("_n") > 1).height
        if ambiguous:
            warnings.append(
                f"{src}: the kernel table has no globalPid and {ambiguous} correlation ids occur in several "
                "runtime API rows (processes); those kernels get no process or launch thread"
            )
        found = _lookup(kernels, ["correlation_id"], per_id.filter(pl.col("_n") == 1).drop("_n"))
    return kernels.with_columns(
        (found["proc"] % _FIELD).alias("pid"), found["launch_tid"], found["launch_start_ns"]
    )


def _read_kernels(
    kernels: pl.DataFrame,
    runtime: pl.DataFrame | None,
    strings: pl.DataFrame,
    warnings: list[str],
    src: str,
    lost: list[int],
) -> pl.DataFrame:
    kernels = _resolve(_resolve(kernels, "name", strings), "short_name", strings)
    kernels = _link_launches(kernels, runtime, warnings, src)
    unlinked = kernels["launch_tid"].null_count()
    if runtime is not None and unlinked:
        warnings.append(
            f"{src}: {unlinked} of {kernels.height} kernels have no CUDA runtime launch record "
            "(launch_tid / launch_start_ns null)"
        )
    # shared memory per block past 2 GiB is no GPU's (a damaged value: summed, it overflowed later analyses)
    for c in ("static_smem_bytes", "dynamic_smem_bytes"):
        lost.append(int((~kernels[c].is_between(0, _MAX_SMEM_BYTES)).sum()))
    kernels = kernels.with_columns(
        pl.when(pl.col(c).is_between(0, _MAX_SMEM_BYTES)).then(pl.col(c)).alias(c)
        for c in ("static_smem_bytes", "dynamic_smem_bytes")
    )
    kernels = kernels.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("kernel_id"),
        pl.lit(src).alias("source"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
        (pl.col("static_smem_bytes") + pl.col("dynamic_smem_bytes")).alias("smem_bytes"),
    )
    return _fit(KERNELS, kernels, lost)


# --- devices ----------------------------------------------------------------------------------------------------
_GPU_COLUMNS = {
    "name": "name",
    "sm_count": "smCount",
    "memory_bytes": "totalMemory",
    "smem_per_block_optin_bytes": "maxShmemPerBlockOptin",
    "smem_per_sm_bytes": "maxShmemPerSm",
    "regs_per_sm": "maxRegistersPerSm",
    "boost_clock_hz": "clockRate",
}


def _read_devices(db: _Db, warnings: list[str], src: str) -> pl.DataFrame:
    gpu = db.columns("TARGET_INFO_GPU")
    cuda = db.columns("TARGET_INFO_CUDA_DEVICE")
    rows: list[dict[str, object]] = []
    if gpu:
        order = [c for c in _GPU_COLUMNS.values() if c in gpu]
        extra = [c for c in ("id", "cuDevice", "computeMajor", "computeMinor") if c in gpu]
        select = ", ".join(f'"{c}"' for c in order + extra)
        ordinals: dict[int, int] = {}
        if {"gpuId", "cudaId"} <= set(cuda):
            for gid, cid in db.small('SELECT "gpuId", min("cudaId") FROM TARGET_INFO_CUDA_DEVICE GROUP BY 1'):
                ordinals[gid] = cid
        for values in db.small(f"SELECT {select} FROM TARGET_INFO_GPU"):
            rec = dict(zip(order + extra, values, strict=True))
            row: dict[str, object] = {k: rec.get(c) for k, c in _GPU_COLUMNS.items()}
            gid = rec.get("id")
            row["device"] = rec.get("cuDevice", ordinals.get(gid, gid))  # type: ignore[arg-type]
            if rec.get("computeMajor") is not None:
                row["compute_capability"] = f"{rec['computeMajor']}.{rec.get('computeMinor') or 0}"
            rows.append(row)
    elif {"cudaId"} <= set(cuda):
        sms = '"numMultiprocessors"' if "numMultiprocessors" in cuda else "NULL"
        for cid, sm in db.small(f'SELECT DISTINCT "cudaId", {sms} FROM TARGET_INFO_CUDA_DEVICE'):
            rows.append({"device": cid, "sm_count": sm})
    else:
        warnings.append(f"{src}: no TARGET_INFO_GPU or TARGET_INFO_CUDA_DEVICE table, so no device rows")
    if not rows:
        return DEVICES.empty()
    df = pl.DataFrame(rows, infer_schema_length=None).with_columns(pl.lit(src).alias("source"))
    return _fit(DEVICES, df, db.lost).unique("device", keep="first", maintain_order=True)


# --- the reader -------------------------------------------------------------------------------------------------
# What a damaged export raises while it is read: SQLite's own errors ("database disk image is malformed"), text
# that is not UTF-8 where SQLite hands Python a str, values polars cannot hold.
_DAMAGE = (sqlite3.Error, UnicodeDecodeError, pl.exceptions.PolarsError)
_TABLE_OF = {
    "strings": STRINGS_TABLE,
    "kernels": KERNEL_TABLE,
    "runtime": RUNTIME_TABLE,
    "nvtx": NVTX_TABLE,
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
}


def _why(e: BaseException) -> str:
    """The first line of an exception's text, short enough for a one-line message."""
    text = " ".join((str(e).strip().splitlines() or [type(e).__name__])[0].split())
    return text if len(text) <= 160 else text[:157] + "..."


@dataclass
class _Half:
    """What one half of the read (the kernels, or the ranges) made, said and lost, kept apart while the two
    halves are built at once."""

    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # table -> why it could not be read
    said: list[str] = field(default_factory=list)  # warnings, in order
    bad: list[int] = field(default_factory=list)  # counts of values of the wrong type


def read_nsys_sqlite(path: Path, *, engine: str = "auto") -> Extract:
    """Read an Nsight Systems SQLite export into ``kernels``, ``ranges`` and ``devices`` frames.

    ``engine`` is ``auto`` (from the file's pages where the page reader is built and sure of a table, else
    sqlite3), ``pages`` or ``sqlite3`` (db.ENGINES); all give the same frames. Raises UnreadableFileError for a file that is not a complete nsys SQLite export (a ``.nsys-rep``
    needs ``nsys export --type sqlite`` first). A table the file lacks gives an empty frame and a warning.

    A damaged export keeps what can be read: a table SQLite cannot read (``database disk image is malformed``)
    is left out, and a value of the wrong type (text or an out-of-range number in an INTEGER column) is null;
    either marks the Extract ``partial`` with a warning that says what was lost. When neither kernels nor
    ranges can be read the file is refused (UnreadableFileError).
    """
    # imported here: memops.py and ranges.py import this module's helpers
    from .memops import MEMCPY_TABLE, MEMSET_TABLE, memop_query, read_memops
    from .ranges import EVENT_DEFAULTS, event_ids, nvtx_query, read_ranges

    path = Path(path)
    tables = _check_file(path)
    src = source_name(path)
    db = _Db(path, tables, engine=engine)
    warnings: list[str] = []
    lost: dict[str, str] = {}  # table -> why it could not be read (a damaged file: the rest is kept)
    try:
        ids = event_ids(db)
    except _DAMAGE as e:
        ids = dict(EVENT_DEFAULTS)
        warnings.append(
            f"{src}: ENUM_NSYS_EVENT_TYPE could not be read ({_why(e)}); the usual NVTX ids are used"
        )

    makers: dict[str, Callable[[], _Query | None]] = {}
    if STRINGS_TABLE in tables:
        makers["strings"] = lambda: _Query(
            STRINGS_TABLE,
            db.columns(STRINGS_TABLE),
            (("id", "id", True), ("value", "value", False)),
            {"id": pl.Int64(), "value": pl.String()},
        )
    if KERNEL_TABLE in tables:
        makers["kernels"] = lambda: _kernel_query(db)
        makers["runtime"] = lambda: _runtime_query(db)
    if NVTX_TABLE in tables:
        makers["nvtx"] = lambda: nvtx_query(db, ids)

    for key, table in (("memcpy", MEMCPY_TABLE), ("memset", MEMSET_TABLE)):
        if table in tables:
            makers[key] = lambda table=table: memop_query(db, table)  # type: ignore[misc]
    jobs: dict[str, _Query] = {}
    paged: dict[str, pages.Planned] = {}  # key -> the page reader's plan (pages.py)
    for key, make in makers.items():
        try:
            if (q := make()) is not None:
                jobs[key] = q
                if (planned := db.page_plan(q)) is not None:
                    paged[key] = planned
        except _DAMAGE as e:
            lost[_TABLE_OF[key]] = _why(e)

    def read(key: str, sql: str) -> pl.DataFrame | Exception:
        try:
            return db.query(sql, jobs[key].schema)
        except _DAMAGE as e:
            return e

    got: dict[str, pl.DataFrame] = {}
    try:
        with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
            # The page reader walks the b-tree without holding the GIL: the parts are read in parallel. A table
            # it declines in any part (a value or page it is not sure of) is read through SQLite below.
            # The largest table's parts first: the thread left with the last of them ends about when the others do.
            queue = sorted(
                ((k, p) for k, planned in paged.items() for p in planned.parts),
                key=lambda kp: -paged[kp[0]].rows,
            )
            done = [(k, pool.submit(part.read)) for k, part in queue]
            from_pages = [(k, f.result()) for k, f in done]
            for key, planned in paged.items():
                why = next((m for k, m in from_pages if k == key and m is not None), None)
                if why is None:
                    got[key] = jobs[key].filtered(planned.frame())
                else:
                    db.declined[jobs[key].table] = why
            del from_pages, done
            plan: list[tuple[str, str]] = []
            for key in [k for k in jobs if k not in got]:
                try:
                    plan += [(key, sql) for sql in db.chunks(jobs[key])]
                except _DAMAGE as e:
                    lost[_TABLE_OF[key]] = _why(e)
            parts = [(k, read(k, sql)) for k, sql in plan]
    except OSError as e:
        raise UnreadableFileError(path, f"could not be read ({e})", "export the report again") from e
    for key in {k for k, _ in plan}:
        mine = [df for k, df in parts if k == key]
        failed = next((e for e in mine if isinstance(e, Exception)), None)
        if failed is not None:
            lost[_TABLE_OF[key]] = _why(failed)
        else:
            got[key] = pl.concat(mine, rechunk=False)  # type: ignore[arg-type]

    strings = got.get("strings", pl.DataFrame(schema={"id": pl.Int64(), "value": pl.String()}))
    counts: list[int] = []
    frames: dict[str, pl.DataFrame] = {}
    try:
        frames["devices"] = _read_devices(db, warnings, src)
    except _DAMAGE as e:
        lost["TARGET_INFO_GPU"] = _why(e)
        frames["devices"] = DEVICES.empty()

    def timeline() -> _Half:
        """kernels and memops, linked to their launch calls"""
        half = _Half()
        if "kernels" in got:
            if "runtime" not in got:
                half.said.append(f"{src}: no usable {RUNTIME_TABLE} table, so kernels have no launch thread")
            try:
                half.frames["kernels"] = _read_kernels(
                    got["kernels"], got.get("runtime"), strings, half.said, src, half.bad
                )
            except pl.exceptions.PolarsError as e:
                half.lost[KERNEL_TABLE] = _why(e)
        elif KERNEL_TABLE not in lost:
            half.said.append(f"{src}: no {KERNEL_TABLE} table (no kernels were traced), so no kernel rows")
        try:
            half.frames["memops"] = read_memops(got, got.get("runtime"), src, half.bad)
        except pl.exceptions.PolarsError as e:
            half.lost[MEMCPY_TABLE] = _why(e)
        return half

    def nvtx() -> _Half:
        """NVTX ranges"""
        half = _Half()
        if "nvtx" in got:
            try:
                half.frames["ranges"] = read_ranges(got["nvtx"], ids, strings, half.said, src, half.bad)
            except pl.exceptions.PolarsError as e:
                half.lost[NVTX_TABLE] = _why(e)
        elif NVTX_TABLE not in lost:
            half.said.append(f"{src}: no {NVTX_TABLE} table (NVTX was not traced), so no range rows")
        return half

    # The two halves share nothing but the strings: built at once, each mostly in polars (no GIL held), where
    # either alone leaves the second core idle much of the time. Their warnings keep this order.
    with ThreadPoolExecutor(max_workers=2) as pool:
        halves = [pool.submit(timeline), pool.submit(nvtx)]
        built = [h.result() for h in halves]
    for half in built:
        frames.update(half.frames)
        lost.update(half.lost)
        warnings += half.said
        counts += half.bad

    if lost and "kernels" not in frames and "ranges" not in frames:
        table = next(t for t in (KERNEL_TABLE, NVTX_TABLE, *lost) if t in lost)  # the one that mattered
        why = lost[table]
        raise UnreadableFileError(
            path, f"is damaged: {table} could not be read ({why})", "export the report again"
        )
    warnings += [f"{src}: {note}" for note in db.notes]
    frames.setdefault("kernels", KERNELS.empty())
    frames.setdefault("ranges", RANGES.empty())
    warnings += [
        f"{src}: {table} could not be read ({why}); its rows are left out" for table, why in lost.items()
    ]
    if bad := sum(counts) + sum(db.lost):
        warnings.append(
            f"{src}: {bad} values are of the wrong type or out of range (a damaged file?) and are left null"
        )
    ex = Extract("nsys", src, frames, warnings=warnings)
    ex.partial = bool(lost or bad)
    return ex
