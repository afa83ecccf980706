"""The import: raw files to a run's frames, in the same steps whoever runs them.

``import_files`` makes a new run from existing files (any mix of the formats in readers/registry.py);
``import_into`` (re)builds a run's frames from its ``raw/`` (``import --rebuild``, ``capture``); :func:`build`
rebuilds them in memory for a read (analyzers/store.py, which never writes into a run); analyzers/parallel.py
reads many files at once in worker processes or Ray tasks. The serial import is the parallel one with one worker:

1. **read** (:func:`read_job`): the file is copied into raw/ when it is not there (in a thread, once it is read
   where it is: :class:`Copies`), opened once as a :class:`~.readers.source.Source`, handed to the reader whose
   sniff claims its first bytes, checked, read into an ``Extract`` and its rows labelled with their rank. Its
   sha256 is computed in that thread after the copy (the import's own copies: while the frames are settled).
2. **merge**: a reader that must see every file of its kind at once (two CSV exports of one Nsight Compute report
   hold the same launches) gets them together.
3. **settle** (:func:`settle`): one file's frames made whole on their own: conformed to their schemas, ranges
   nested, tracekit range names parsed, each kernel given its innermost range (the join groups rows by their
   ``source`` file, so a file needs no other).
4. **place** (:func:`place`): the files' frames become the run's: ids offset by the rows of the files before it
   in raw/ name order, a failure recorded by several capture passes kept once, tracekit's own records renumbered,
   then :func:`enrich`: the one place the run's frames gain what is derived after reading, with what it needs
   from the whole run (:func:`enrich_context`).
5. **write**: through the frames store (analyzers/store.py).

A file's kind comes from its content, never its name.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import naming
from tracekit.errors import BadInputError, TracekitError, UnreadableFileError
from tracekit.frames import SPECS
from tracekit.run import PARTITION_KEY, Run, new_run_name

from .join import nest_and_assign
from .ranks import RANKED_FRAMES, label_extract
from .rawfiles import Copies, Hash, in_raw, is_read, raw_names, shown, unexported_reports
from .readers import registry
from .readers.base import Extract, reporting_progress
from .readers.protocol import Reader, ReadOptions
from .readers.source import Source
from .taxonomy.frames import CLASSIFIED, class_table, ncu_evidence, with_classes, with_launch_ops

_WRAPPER_FAILURES = "breadcrumbs/*/failures.*.jsonl"
"""Failures the instrument wrapper records for wrapped calls that raised, one file per process and pass
(``TRACEKIT_BREADCRUMB_DIR`` of each capture pass, collectors/crash.py): read into the failures frame. A
breadcrumb folder set by hand (no pass folder) is read too: ``breadcrumbs/failures.*.jsonl``."""
ID_COLUMNS = {
    "kernels": ["kernel_id", "range_id"],
    "memops": ["memop_id", "range_id"],
    "ranges": ["range_id", "parent_id"],
    "ncu": ["ncu_id"],
    "ncu_metrics": ["ncu_id"],
    "ncu_rules": ["ncu_id"],
}
ID_OWNER = {"kernels": "kernel_id", "memops": "memop_id", "ranges": "range_id", "ncu": "ncu_id"}
ID_FAMILY = {
    "kernel_id": "kernels",
    "memop_id": "memops",
    "range_id": "ranges",
    "parent_id": "ranges",
    "ncu_id": "ncu",
}
FAILURE_KEY = ("backend", "op", "m", "n", "k", "kind", "error_type", "message")
"""A failure's identity across files: a capture with several passes (nsys, then ncu) records the same failure once
per pass, and the run keeps one."""
RENUMBERED = ("measurements", "failures", "moe", "moe_curve", "moe_routing")
"""Frames whose id column is renumbered 0..n-1 once the files are placed."""


# --- 1. read --------------------------------------------------------------------------------------------------------
PROGRESS_FIRST_S = 2.0
"""A read says how far it is once it has taken this long ..."""
PROGRESS_EVERY_S = 5.0
"""... and again every this many seconds."""


class _Progress:
    """A reader's progress as ``on_event`` lines, for reads long enough to need them (a 2 GB trace: 12 s on 2
    cores, a minute on one)."""

    def __init__(self, name: str, on_event: Callable[[str], None] | None) -> None:
        self.name, self.on_event = name, on_event
        self.start = time.monotonic()
        self.next = self.start + PROGRESS_FIRST_S

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.on_event is None or now < self.next or done >= total:
            return
        self.next = now + PROGRESS_EVERY_S
        self.on_event(
            f"reading {self.name}: {100 * done / total:.0f}% ({done / 1e9:.2f} of ~{total / 1e9:.2f} GB of text, "
            f"{now - self.start:.0f} s)"
        )


def open_file(path: Path, kind: str | None = None) -> tuple[Source, Reader]:
    """``path`` opened once and the reader that claims it (``kind``: that reader, whatever the content)."""
    source = registry.open_source(path)
    try:
        return source, registry.reader_for(kind) if kind else registry.detect(source)
    except BaseException:
        source.close()
        raise


def read_source(source: Source, reader: Reader, options: ReadOptions | None = None) -> Extract:
    """``reader``'s check and read of ``source``; an error names the file as given."""
    try:
        registry.option(reader, "check")(source)  # type: ignore[operator]
        return reader.read(source, options or ReadOptions())
    except TracekitError as exc:
        raise source.named(exc) from exc.__cause__


def read_file(path: Path, kind: str | None = None, options: ReadOptions | None = None) -> Extract:
    """Read one raw file (plain or xz / gzip-compressed) into an Extract, by detected kind. An empty JSONL file of
    tracekit's own (no failures, say) is a file with no rows, not a damaged one."""
    path = Path(path)
    own = registry.empty_file_kind(path.name)
    if own is not None and path.is_file() and path.stat().st_size == 0:
        return Extract(kind or own, path.name, {})
    source, reader = open_file(path, kind)
    with source:
        return read_source(source, reader, options)


def detect_kind(path: Path) -> str:
    """The kind of a profiler file, from its content (a compressed file by what it holds): the ``kind`` of the
    reader whose sniff claims it (readers/registry.py). Raises UnreadableFileError when none does."""
    source, reader = open_file(Path(path))
    source.close()
    return reader.kind


@dataclass(frozen=True)
class ReadJob:
    """One file to read: ``src`` copied to ``raw`` first when they differ. ``rel``: its path in the run's
    sources; ``kind``: its reader whatever the content (the instrument wrapper's failure files); ``stage``: where a
    worker writes its frames (None: they stay in memory); ``shown`` maps absolute paths back to the spelling the
    user gave, for messages."""

    index: int
    src: str
    raw: str
    rel: str
    read: bool
    kind: str | None = None
    stage: str | None = None
    shown: tuple[tuple[str, str], ...] = ()


@dataclass
class FileResult:
    """What reading one file gives: its ``sources`` record and what placing its frames needs. ``extract`` (after
    the read) and ``frames`` (after :func:`settle`) stay in the process that read them; a worker stages its frames
    and sends back the rest."""

    index: int
    name: str
    record: dict[str, Any] | None = None
    """The file's ``sources`` entry in run.json (None for files kept in raw/ but not read: logs, .nsys-rep)."""
    imported: bool = False
    partial: bool = False
    warnings: list[str] = field(default_factory=list)
    failed: str | None = None
    problem: tuple[str, str, str | None] | None = None
    """Why the file would not pass the import's first check (error class, message, hint), or None."""
    rows: dict[str, int] = field(default_factory=dict)
    ranks: dict[str, list[int | None]] = field(default_factory=dict)
    """Per frame with a ``rank`` column, the rank values its rows hold (None for rows without a rank)."""
    extract: Extract | None = None
    frames: dict[str, pl.DataFrame] | None = None
    hash_pending: bool = False
    """The record's sha256 is the import's to fill in from its :class:`Copies` (:func:`hash_copies`)."""


class _CopyFailed(Exception):
    """A file's copy into raw/ failed while it was read where it is: the import stops with the copy's error."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def read_job(
    job: ReadJob,
    options: ReadOptions | None = None,
    on_event: Callable[[str], None] | None = None,
    opened: tuple[Source, Reader] | None = None,
    copies: Copies | None = None,
) -> FileResult:
    """Step 1 for one file: copy it into raw/ (when ``src`` is elsewhere), read it, label its ranks. ``opened``:
    the file already opened and sniffed from ``src`` (the import's first check), reused so it is decompressed
    once; ``copies``: the import's copies into raw/, this file's among them (else it is copied here).

    A file being copied is read where it is, the same bytes, unless its name in raw/ differs (the content's
    name is the frames' ``source``) or its reader takes in files beside it (``FormatReader.reads_beside``:
    SQLite's journal), which the copy leaves behind: then it is read from raw/, as a rebuild will read it. Its
    sha256 is the copy's: with the import's ``copies``, its copy is released once it is read and the hash is
    left to :func:`hash_copies` (``hash_pending``); a file already in raw/ is hashed in a thread while it is
    read. Messages name the file in raw/ either way. Never raises for a file that cannot be read: the result
    says so."""
    src, raw = Path(job.src), Path(job.raw)
    theirs = copies is not None
    if src != raw and copies is None:
        copies = Copies([job])
    out = FileResult(index=job.index, name=raw.name)
    if not job.read:
        if copies is not None:
            copies.result(job.index)
        return out
    hashed = Hash(raw) if copies is None else None
    record: dict[str, Any] = {"path": job.rel, "bytes": src.stat().st_size, "sha256": None}
    here = src  # where the content is read: raw/ when it is there, or once its copy is made
    try:
        empty = registry.empty_file_kind(raw.name)
        if empty is not None and record["bytes"] == 0:
            ex = Extract(job.kind or empty, raw.name, {})
        else:
            source, reader = opened if opened is not None else open_file(src, job.kind)
            with source, reporting_progress(_Progress(raw.name, on_event)):
                beside = registry.option(reader, "reads_beside")
                if copies is not None and (src.name != raw.name or beside(source)):  # type: ignore[operator]
                    if (failed := copies.wait(job.index)) is not None:
                        raise _CopyFailed(failed)
                    source.moved_to(raw)
                    here = raw
                ex = read_source(source, reader, options)
    except _CopyFailed as stop:
        raise stop.error from None
    except TracekitError as exc:
        out.failed = shown(in_raw(exc.one_line(), here, raw), job.shown)
        record.update(kind=None, status="failed", message=out.failed)
    else:
        ex.warnings[:] = [shown(w, job.shown) for w in ex.warnings]
        out.warnings = list(
            ex.warnings
        )  # as read: what a merge adds reaches the file's record, not the summary
        record.update(
            kind=ex.kind, status="partial" if ex.partial else "ok", message=None, warnings=ex.warnings
        )
        record.update(label_extract(ex, raw.name))  # which rank(s) the file holds, and how that is known
        out.imported, out.partial, out.extract = True, ex.partial, ex
    out.record = record
    if theirs:  # (then no Hash: that is only for a file read from raw/ without copies)
        copies.release(job.index)  # type: ignore[union-attr]
        out.hash_pending = True
    else:
        record["sha256"] = hashed.result() if hashed is not None else copies.result(job.index)  # type: ignore[union-attr]
    return out


def hash_copies(results: list[FileResult], copies: Copies) -> None:
    """The sha256 of each file :func:`read_job` left to the import's copies, once copied (raises what a copy
    raised: StorageError for a full disk)."""
    for r in results:
        if r.hash_pending and r.record is not None:
            r.record["sha256"] = copies.result(r.index)
            r.hash_pending = False


def merge(results: list[FileResult]) -> None:
    """Step 2: each reader that merges (``FormatReader.merges``) sees the extracts of its kind together; an
    extract it drops contributes no frames. Warnings it adds reach the files' ``sources`` records."""
    by_kind: dict[str, list[FileResult]] = {}
    for r in results:
        if r.extract is not None:
            by_kind.setdefault(r.extract.kind, []).append(r)
    for kind, group in by_kind.items():
        reader = next((x for x in registry.READERS if x.kind == kind), None)
        if reader is None or not registry.option(reader, "merges"):
            continue
        kept = {id(ex) for ex in registry.option(reader, "merge")([r.extract for r in group])}  # type: ignore[operator]
        for r in group:
            if id(r.extract) not in kept:
                r.extract = None


# --- 2. settle ------------------------------------------------------------------------------------------------------
def tracekit_names(ranges: pl.DataFrame) -> list[str]:
    """The distinct names of ``ranges`` that may be tracekit range names, for :func:`parse_range_names`."""
    if ranges.height == 0:
        return []
    # Only names that start as a tracekit name can be one: a prefix test on every range (cheap: polars keeps a
    # string's first bytes beside it) instead of hashing every name. An emit_nvtx capture's op names are all
    # distinct (``aten::view, op_id = 314290``) and none of them starts so.
    name = pl.col("name")
    candidate = pl.any_horizontal(name.str.starts_with(start) for start in naming.NAME_STARTS)
    return ranges.select(name.filter(candidate).unique())["name"].to_list()


def parse_range_names(ranges: pl.DataFrame, names: list[str] | None = None) -> pl.DataFrame:
    """Fill the GEMM columns of ``ranges`` from tracekit range names (and the legacy probe form,
    ``naming.decode_legacy``); ``names``: :func:`tracekit_names` of these ranges, where already found."""
    if ranges.height == 0:
        return ranges
    names = tracekit_names(ranges) if names is None else names
    rows = []
    for name in names:
        decoded = naming.decode(name) or naming.decode_legacy(name)
        if decoded is None:
            continue
        kind, fields = decoded.kind, decoded.fields

        def as_int(key: str, fields: dict[str, str] = fields) -> int | None:
            value = fields.get(key)
            return int(value) if value is not None and value.lstrip("-").isdecimal() else None

        rows.append(
            {
                "name": name,
                "range_kind": kind,
                "backend": fields.get("backend"),
                "op": fields.get("op"),
                "m": as_int("M"),
                "n": as_int("N"),
                "k": as_int("K"),
                "dtype_a": fields.get("a"),
                "dtype_b": fields.get("b"),
                "dtype_out": fields.get("out"),
                "scale": fields.get("scale"),
                "role": fields.get("role"),
                "fields": [{"key": k, "value": v} for k, v in sorted(fields.items())],
            }
        )
    if not rows:
        return ranges
    parsed_cols = [c for c in rows[0] if c != "name"]
    schema = {c.name: c.dtype for c in SPECS["ranges"].columns if c.name in rows[0]}
    parsed = pl.DataFrame(rows, schema=schema).rename({c: f"{c}__parsed" for c in parsed_cols})
    out = ranges.join(parsed, on="name", how="left", maintain_order="left")
    # a name tracekit parses sets every GEMM field; other rows keep what their reader filled (PyTorch GEMM ops)
    named = pl.col("range_kind__parsed").is_not_null()
    out = out.with_columns(
        pl.when(named).then(pl.col(f"{c}__parsed")).otherwise(pl.col(c)).alias(c) for c in parsed_cols
    )
    return out.select(ranges.columns)


def settle(ex: Extract) -> dict[str, pl.DataFrame]:
    """Step 3: one file's frames, every frame of the run present and conformed, ranges nested, tracekit range
    names parsed, each kernel and memcpy / memset given its innermost range, each kernel's launching op completed
    from an op range it runs in (emit_nvtx under Nsight Systems; analyzers/taxonomy)."""
    frames = {name: SPECS[name].conform(df) for name, df in ex.frames.items() if name in SPECS}
    for name, spec in SPECS.items():
        frames.setdefault(name, spec.empty())
    with ThreadPoolExecutor(1) as pool:
        # the names' prefix test needs no nesting: done in a thread while the ranges are nested (0.1 s at 5M)
        names = pool.submit(tracekit_names, frames["ranges"])
        # one sort of the ranges nests them and places the kernels and memops (assigning needs no nesting)
        ranges, placed = nest_and_assign(
            frames["ranges"], {"kernels": frames["kernels"], "memops": frames["memops"]}
        )
        frames["ranges"] = parse_range_names(ranges, names.result())
    frames["kernels"] = with_launch_ops(placed["kernels"], frames["ranges"])
    frames["memops"] = placed["memops"]
    return {name: SPECS[name].conform(df) for name, df in frames.items()}


def settled(result: FileResult) -> FileResult:
    """``result`` with its extract settled into frames (and row counts and ranks noted); the extract let go."""
    if result.extract is not None:
        frames = settle(result.extract)
        result.extract = None
        result.frames = frames
        for name, df in frames.items():
            result.rows[name] = df.height
            if PARTITION_KEY in df.columns and df.height:
                result.ranks[name] = df[PARTITION_KEY].unique().sort(nulls_last=True).to_list()
    return result


# --- 3. place -------------------------------------------------------------------------------------------------------
def id_offsets(rows: list[dict[str, int]]) -> list[dict[str, int]]:
    """Per file (in placing order), the id offset of each id family: the rows of the files before it."""
    running = dict.fromkeys(ID_OWNER, 0)
    out = []
    for r in rows:
        out.append(dict(running))
        for fam in ID_OWNER:
            running[fam] += r.get(fam, 0)
    return out


def shifts(name: str, offsets: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """The (id column, offset) pairs that place one file's frame ``name``."""
    return tuple(
        (col, offsets[ID_FAMILY[col]]) for col in ID_COLUMNS.get(name, []) if offsets[ID_FAMILY[col]]
    )


def shifted(lf: pl.LazyFrame, moves: tuple[tuple[str, int], ...]) -> pl.LazyFrame:
    return lf.with_columns([(pl.col(c) + off).alias(c) for c, off in moves]) if moves else lf


def finish(name: str, lf: pl.LazyFrame) -> pl.LazyFrame:
    """The run's frame ``name`` from its placed pieces: a failure recorded by several passes kept once, tracekit's
    own records renumbered 0..n-1, the schema's columns."""
    spec = SPECS[name]
    if name == "failures":
        lf = lf.unique(subset=list(FAILURE_KEY), keep="first", maintain_order=True)
    if name in RENUMBERED:
        lf = lf.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(spec.columns[0].name))
    return lf.select(spec.schema.names())


def enrich_context(frames: dict[str, pl.LazyFrame]) -> dict[str, Any]:
    """What :func:`enrich` needs to know about the whole run, from its placed frames (lazy: only what is used is
    read), small and picklable: a parallel import computes it once and hands it to every write task.

    ``classes``: per classified frame (kernels, ncu), each distinct (kernel name, launching op) of the run with
    its class, family and class source (analyzers/taxonomy, docs/KERNELS.md), decided with Nsight Compute's
    evidence from every file of the run: a timeline kernel is GEMM-like when an ncu report of the same run shows
    its tensor-op counters, whichever file each is in."""
    ncu = frames["ncu"].collect()
    evidence = {}
    if ncu.height:
        evidence = ncu_evidence({"ncu": ncu, "ncu_metrics": frames["ncu_metrics"].collect()})
    return {"classes": {name: class_table(name, frames[name], evidence) for name in CLASSIFIED}}


def enrich(name: str, lf: pl.LazyFrame, context: dict[str, Any]) -> pl.LazyFrame:
    """The one place the run's frames gain what is derived after reading: frame ``name`` as placed, with what
    ``context`` (:func:`enrich_context`) says about the whole run. Called in memory on the whole frame, and by a
    parallel import's write tasks on each rank's part of it: it must hold for any subset of the frame's rows.
    Derived here: the kernels' and ncu rows' classes (a join on the context's table)."""
    table = context.get("classes", {}).get(name)
    return lf if table is None else with_classes(name, lf, table)


def place(parts: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Step 4, in memory: the settled frames of each file (in raw/ name order) as the run's frames, enriched."""
    offsets = id_offsets([{n: df.height for n, df in p.items()} for p in parts])
    plans = {}
    for name, spec in SPECS.items():
        pieces = [shifted(p[name].lazy(), shifts(name, off)) for p, off in zip(parts, offsets, strict=True)]
        lf = pl.concat(pieces, how="vertical") if pieces else spec.empty().lazy()
        plans[name] = finish(name, lf)
    context = enrich_context(plans)
    plans = {name: enrich(name, lf, context) for name, lf in plans.items()}
    return dict(zip(plans, pl.collect_all(list(plans.values())), strict=True))


def combine(extracts: Iterable[Extract]) -> dict[str, pl.DataFrame]:
    """The run's frames from the extracts of its files, in memory: steps 2-4 (merge, settle, place)."""
    results = [FileResult(index=i, name=ex.source, extract=ex) for i, ex in enumerate(extracts)]
    merge(results)
    return place([settled(r).frames for r in results if r.frames is not None or r.extract is not None])


# --- the serial import (one worker, this process) ------------------------------------------------------------------
def _raw_files(run: Run) -> list[Path]:
    """The files of raw/ that hold frames, and the instrument wrapper's failure files of each capture pass."""
    if not run.raw_dir.is_dir():
        return []
    top = sorted(p for p in run.raw_dir.iterdir() if p.is_file() and is_read(p.name))
    found = [*run.raw_dir.glob(_WRAPPER_FAILURES), *run.raw_dir.glob(_WRAPPER_FAILURES.replace("*/", "", 1))]
    wrapper = sorted(p for p in found if p.is_file() and p.stat().st_size)
    return top + wrapper


def raw_jobs(run: Run) -> list[ReadJob]:
    """A job per file of raw/ that holds frames, in the order the run places them: the wrapper's own files are
    failures by where they are, even when a crash tore their first line."""
    return [
        ReadJob(
            i,
            str(p),
            str(p),
            run.relative(p),
            True,
            "failures" if p.parent.parent == run.raw_dir / "breadcrumbs" else None,
        )
        for i, p in enumerate(_raw_files(run))
    ]


def read_here(
    jobs: list[ReadJob],
    on_event: Callable[[str], None] | None = None,
    opened: dict[int, tuple[Source, Reader]] | None = None,
    copies: Copies | None = None,
) -> tuple[list[FileResult], dict[str, pl.DataFrame]]:
    """Steps 1-4 in this process: every job read (in order), merged, settled and placed in memory. Returns the
    results (records, warnings) and the run's frames."""
    results = []
    for job in jobs:
        if on_event and job.read:
            on_event(f"reading {Path(job.raw).name}")
        results.append(read_job(job, None, on_event, (opened or {}).get(job.index), copies))
    merge(results)
    parts = [settled(r).frames for r in results if r.extract is not None]
    return results, place([p for p in parts if p is not None])


def summarize(results: list[FileResult], raw_dir: Path, frames_rows: dict[str, int]) -> dict[str, Any]:
    """The import's summary (``files``, ``imported``, ``failed``, ``warnings``, ``partial``, ``rows``)."""
    read = [r for r in results if r.record is not None]
    failed = [{"path": r.record["path"], "message": r.failed} for r in read if r.failed and r.record]
    warnings = [w for r in read for w in r.warnings] + unexported_reports(raw_dir)
    return {
        "files": len(read),
        "imported": sum(r.imported for r in read),
        "failed": failed,
        "warnings": warnings,
        "partial": bool(failed) or any(r.partial for r in read),
        "rows": frames_rows,
    }


def build(run: Run) -> tuple[dict[str, pl.DataFrame], list[dict[str, Any]], dict[str, Any]]:
    """Every file of ``run``'s raw/ read into frames, in memory: writes nothing anywhere. Returns the frames, the
    files' source records and the summary (see :func:`summarize`)."""
    results, frames = read_here(raw_jobs(run))
    records = [r.record for r in results if r.record is not None]
    return frames, records, summarize(results, run.raw_dir, {n: df.height for n, df in frames.items()})


def ranks_of(results: list[FileResult]) -> list[int]:
    """The distinct ranks of the run the files make (``ranks.run_ranks`` of its frames, from what :func:`settled`
    noted per file rather than another pass over the rows)."""
    found = {
        rank for r in results for name in RANKED_FRAMES for rank in r.ranks.get(name, []) if rank is not None
    }
    return sorted(found)


def _write(run: Run, frames: dict[str, pl.DataFrame], results: list[FileResult]) -> dict[str, Any]:
    """Write the frames and the manifest (sources, partial, warnings); returns the import's summary. Several
    ranks: frames with a rank column go one folder per rank (hive layout), so fleets scan lazily; ``frames`` is
    emptied and ``results`` lose their rows before the Analysis reads the written frames back."""
    from .store import forget, write_frames

    forget(run)  # frames read before this import are not the run's any more
    summary = summarize(results, run.raw_dir, {n: df.height for n, df in frames.items()})
    ranks = ranks_of(results)
    run.set_sources([r.record for r in results if r.record is not None])
    write_frames(run, frames, partition_by=PARTITION_KEY if len(ranks) >= 2 else None)
    run.mark_partial(summary["partial"], summary["warnings"])
    run.save()
    # the Analysis of the frames just written, kept with the run (frames partitioned by rank are read back:
    # every read sees them in that order)
    if len(ranks) >= 2:
        # the rows in memory are let go first (the run's and each file's), so the two copies never coexist: the
        # callers hand their frames over and keep only the summary
        frames.clear()
        for r in results:
            r.extract, r.frames = None, None
    keep_analysis(run, frames if len(ranks) < 2 else None, summary["warnings"])
    return {"run": str(run.path), **summary, "ranks": ranks}


def keep_analysis(run: Run, frames: dict[str, pl.DataFrame] | None, warnings: list[str]) -> None:
    """Build the run's Analysis and store it with the run (analyzers/analysis/stored.py), so reads load it
    instead of building it. A failure is a warning of the import, not its failure: reads build it then."""
    from .analysis.stored import STORED_FILE, store_analysis

    try:
        store_analysis(run, frames)
    except TracekitError as exc:
        (run.path / STORED_FILE).unlink(missing_ok=True)
        warnings.append(f"analysis not stored ({exc.one_line()}); reads build it")


def import_into(run: Run, on_event: Callable[[str], None] | None = None) -> dict[str, Any]:
    """(Re)build the frames of ``run`` from every file in its raw/ and write them into the run (``import``,
    ``import --rebuild`` and ``capture`` only: reads use ``store.load_frames``, which never writes). Files that
    cannot be read are recorded as failed sources (the run is then marked ``partial``); returns a summary dict."""
    results, frames = read_here(raw_jobs(run), on_event)
    return _write(run, frames, results)


def first_check(
    paths: list[Path], stack: ExitStack
) -> tuple[dict[int, tuple[Source, Reader]], list[TracekitError]]:
    """The import's first check of the files as given: each opened, sniffed and checked by its reader (a missing
    tool, a report that is read through its export). The opened files are kept open on ``stack`` for reading."""
    opened: dict[int, tuple[Source, Reader]] = {}
    problems: list[TracekitError] = []
    for i, p in enumerate(paths):
        try:
            source, reader = open_file(p)
        except TracekitError as exc:
            problems.append(exc)
            continue
        stack.enter_context(source)
        try:
            registry.option(reader, "check")(source)  # type: ignore[operator]
        except TracekitError as exc:
            problems.append(source.named(exc))
        else:
            opened[i] = (source, reader)
    return opened, problems


def none_readable(paths: list[Path], problems: list[TracekitError]) -> TracekitError:
    """The error of an import none of whose files can be read: the first problem (and how many files)."""
    if len(problems) == 1:
        return problems[0]
    return UnreadableFileError(
        paths[0],
        f"none of the {len(paths)} files could be read; first: {problems[0].message}",
        problems[0].hint,
    )


def import_files(
    paths: list[Path],
    out: Path | None = None,
    *,
    runs_dir: Path = Path("runs"),
    on_event: Callable[[str], None] | None = None,
) -> tuple[Run, dict[str, Any]]:
    """Make a new run from existing files, in this process. Every file is checked before the run is created; if
    none can be read, the first problem is raised and nothing is written."""
    if not paths:
        raise BadInputError("no files given", "pass one or more .ncu-rep / .sqlite / .json(.gz) files")
    with ExitStack() as stack:
        opened, problems = first_check(paths, stack)
        if len(problems) == len(paths):
            raise none_readable(paths, problems)
        target = out or runs_dir / new_run_name(paths[0].stem.split(".")[0])
        run = Run.create(target, command=None, capture={"imported_from": [str(p) for p in paths]})
        names = raw_names(paths)
        jobs = sorted(
            (
                ReadJob(i, str(p), str(run.raw_dir / n), f"raw/{n}", is_read(n))
                for i, (p, n) in enumerate(zip(paths, names, strict=True))
            ),
            key=lambda j: Path(j.raw).name,
        )
        # every file copied into raw/, in order, in one thread, each once it is read where it is
        copies = Copies(jobs, held=True)
        try:
            results, frames = read_here(jobs, on_event, opened, copies)
            hash_copies(results, copies)
        except BaseException:
            copies.stop()  # Ctrl-C waits for the file being copied, not for every file still to copy
            raise
        finally:
            copies.join()
    summary = summarize(results, run.raw_dir, {n: df.height for n, df in frames.items()})
    if summary["files"] and not summary["imported"]:
        # every file was recognised but none could be read: keep the promise "nothing is written"
        shutil.rmtree(run.path, ignore_errors=True)
        first = summary["failed"][0]["message"].split(": ", 1)[-1].replace(f"{run.raw_dir}/", "")
        if len(paths) == 1:
            raise UnreadableFileError(paths[0], first.removeprefix(f"{paths[0].name}: "))
        raise UnreadableFileError(paths[0], f"none of the {len(paths)} files could be read; first: {first}")
    return run, _write(run, frames, results)
