"""The frames store: a run's frames written, read, or rebuilt in memory from its raw files.

Every frame goes through here: the import writes them (:func:`write_frames`), the views and the analysis read
them (:func:`load_frames`, :func:`read_frame`), and a run whose frames are missing or older than this tracekit's
schema is rebuilt from ``raw/`` in memory, never written (every read leaves a run byte-identical, also a read-only
one). The run directory itself (manifest, raw/, where each frame's files lie) is the core's ``tracekit/run.py``,
which imports no polars: the collectors create runs on GPU machines that lack it.

Layout on disk: ``frames/<name>.parquet``, or for a run of several ranks the frames that have a ``rank`` column
hive-partitioned, ``frames/<name>/rank=<r>/part-0.parquet`` (docs/RANKS.md). Every write is atomic.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracekit._version import CLASSES_SINCE, SCHEMA_VERSION
from tracekit.errors import RunNotFoundError, SchemaError
from tracekit.frames import SPECS, migrate
from tracekit.records import FramesInfo
from tracekit.run import HIVE_NULL, PART_FILE, PARTITION_KEY, Run, atomic_path, storage_error

from .ranks import run_ranks
from .taxonomy.frames import classify_on_load

PARQUET = {"compression": "zstd", "compression_level": 2, "statistics": True}
"""How every frame file is written. zstd level 2, not polars' default 3: the 5M-range frame of docs/PERFORMANCE.md's
nsys export in 1.07 s instead of 1.24 s, 35.8 MB instead of 35.6 (level 1: 1.06 s, 49.8 MB; lz4: 1.12 s, 89 MB);
reading them back takes the same time."""

WRITE_THREADS = 4
"""Frames written at once: parquet encoding releases the GIL, and the two large frames (kernels, ranges) take
most of the time."""


# --- write ----------------------------------------------------------------------------------------------------------
def _write_partitioned(run: Run, name: str, df: pl.DataFrame, key: str) -> None:
    """One folder per value of ``key`` (the column dropped from the files), swapped in with two renames."""
    run.frames_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=run.frames_dir))
    old: Path | None = None
    try:
        # each partition streamed from the frame (filtered and written in morsels), not copied out of it first:
        # a rank's copy of a 5M-row frame would be held beside the frame while it is written
        for value in df[key].unique(maintain_order=True).to_list():
            sub = tmp / f"{key}={HIVE_NULL if value is None else value}"
            sub.mkdir()
            rows = pl.col(key).is_null() if value is None else pl.col(key) == value
            df.lazy().filter(rows).drop(key).sink_parquet(sub / PART_FILE, **PARQUET)  # type: ignore[arg-type]
        target = run.frame_dir(name)
        if target.exists():
            old = run.frames_dir / f".{name}.old-{secrets.token_hex(3)}"
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    run.frame_path(name).unlink(missing_ok=True)


def write_frame(run: Run, name: str, df: pl.DataFrame, *, partition_by: str | None = None) -> None:
    """Write one frame atomically: one file, or with ``partition_by`` (a column of the frame, which must be
    ``rank``) one folder per value. An empty frame is always one file."""
    if name not in SPECS:
        raise ValueError(f"unknown frame {name!r}")
    if partition_by is not None and partition_by != PARTITION_KEY:
        raise ValueError(f"frames are partitioned by {PARTITION_KEY!r} only, not {partition_by!r}")
    partitioned = partition_by is not None and partition_by in df.columns and df.height > 0
    target = run.frame_dir(name) if partitioned else run.frame_path(name)
    try:
        if partitioned:
            _write_partitioned(run, name, df, partition_by)  # type: ignore[arg-type]
        else:
            with atomic_path(run.frame_path(name)) as tmp:
                df.write_parquet(tmp, **PARQUET)  # type: ignore[arg-type]
            shutil.rmtree(run.frame_dir(name), ignore_errors=True)
    except (OSError, pl.exceptions.ComputeError) as exc:  # polars reports a failed write as ComputeError
        raise storage_error(target, exc) from exc


def write_frames(run: Run, frames: dict[str, pl.DataFrame], *, partition_by: str | None = None) -> None:
    """Write all frames (those with a ``partition_by`` column partitioned by it; the large ones at once, in
    threads), then record in the manifest that they are current and how each is laid out."""
    largest_first = sorted(frames, key=lambda n: -frames[n].height)
    stop = threading.Event()

    def one(name: str) -> None:
        if stop.is_set():  # another write failed, or Ctrl-C: start no other
            return
        try:
            write_frame(run, name, frames[name], partition_by=partition_by)
        except BaseException:
            stop.set()
            raise

    pool = ThreadPoolExecutor(min(WRITE_THREADS, max(1, len(frames))))
    try:
        for done in [pool.submit(one, name) for name in largest_first]:
            done.result()
    except BaseException:
        # the frames being written finish (each write is atomic); the manifest calls none of them current
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    partitioned = {n: str(partition_by) for n in frames if run.frame_layout(n) == "partitioned"}
    run.set_frames(
        FramesInfo(
            schema_version=SCHEMA_VERSION,
            built_unix=time.time(),
            rows={name: df.height for name, df in frames.items()},
            partitioned=partitioned,
        )
    )
    run.save()


# --- read -----------------------------------------------------------------------------------------------------------
def read_frame(run: Run, name: str, *, lazy: bool = False) -> pl.DataFrame | pl.LazyFrame:
    """A frame as written (either layout, columns in the schema's order); an empty frame of the right schema if
    the run has none of that kind. Frames of a version in ``MIGRATES_FROM`` come back migrated to this version
    (JSON text columns as lists and structs), in memory: the files are not touched."""
    spec = SPECS[name]
    layout = run.frame_layout(name)
    if layout is None:
        empty = spec.empty()
        return empty.lazy() if lazy else empty
    path = run.frame_path(name) if layout == "file" else run.frame_dir(name)
    try:
        migratable = run.frames_migratable()
        if layout == "file":
            scan = pl.scan_parquet(path)
        else:
            key_type = spec.schema.get(PARTITION_KEY, pl.Int32)
            scan = pl.scan_parquet(
                path / "*" / "*.parquet", hive_partitioning=True, hive_schema={PARTITION_KEY: key_type}
            )
            have = set(scan.collect_schema().names()) if migratable else None
            scan = scan.select([c for c in spec.schema.names() if have is None or c in have])
        if migratable:
            # JSON text of an earlier version decoded, columns added since as nulls: in memory only
            migrated = spec.conform(migrate(name, scan.collect()))
            return migrated.lazy() if lazy else migrated
        return scan if lazy else scan.collect()
    except Exception as exc:  # polars raises several types for corrupt parquet
        raise SchemaError(
            f"frame {path} cannot be read ({type(exc).__name__}: {exc})",
            f"rebuild it from raw/ with `tracekit import --rebuild {run.path}`",
        ) from exc


# --- runs and their frames for the views ----------------------------------------------------------------------------
def open_run(path: Path | str) -> Run:
    """A run folder (or a bundle .zip) given on the command line."""
    path = Path(path)
    if path.is_file() and path.suffix == ".zip":
        from tracekit.bundle import open_bundle

        return open_bundle(path)
    if path.is_file():
        raise RunNotFoundError(
            f"{path} is a file, not a run", f"make a run from it first: `tracekit import {path} -o runs/NAME`"
        )
    return Run.open(path)


_MEMORY: dict[
    tuple[Any, ...], tuple[dict[str, pl.DataFrame], tuple[list[dict[str, Any]], bool, list[str], FramesInfo]]
] = {}
"""Frames rebuilt in memory for stale runs, keyed by the run's path and its raw files' (name, size, mtime):
a TUI reload or a compare of a run with itself rebuilds once per process. Holds a few runs at most."""
_MEMORY_MAX = 4
_SERVED: weakref.WeakKeyDictionary[Run, dict[str, pl.DataFrame]] = weakref.WeakKeyDictionary()
"""The frames :func:`load_frames` rebuilt for each open ``Run`` (its frames on disk being missing or stale)."""


def _raw_signature(run: Run) -> tuple[Any, ...]:
    from .importer import raw_jobs

    files = []
    for job in raw_jobs(run):
        st = Path(job.raw).stat()
        files.append((job.rel, st.st_size, st.st_mtime_ns))
    return (str(run.path.resolve()), SCHEMA_VERSION, tuple(files))


def forget(run: Run) -> None:
    """Drop the frames rebuilt in memory for ``run`` (an import has just rebuilt them on disk)."""
    _SERVED.pop(run, None)


def frames_in_memory(run: Run) -> bool:
    """True when :func:`load_frames` served ``run``'s frames from an in-memory rebuild (its frames on disk are
    missing or stale); ``run.record.frames`` then describes the rebuilt frames, not the files."""
    return run in _SERVED


def load_frames(run: Run, names: Iterable[str] | None = None) -> dict[str, pl.DataFrame]:
    """The run's frames (all, or ``names``). Frames of an earlier schema version in ``MIGRATES_FROM`` are migrated
    on read (their JSON text columns decoded, columns added since null, :func:`read_frame`; the kernel classes
    computed where they predate them, analyzers/taxonomy); frames that are missing or older are rebuilt from raw/ in
    memory, never written into the run: every read (show, explain, view, report, compare, bundle) leaves the run
    byte-identical, also a read-only one. ``run.record`` (in memory only) then carries the rebuilt sources,
    ``partial`` and ``import_warnings`` as an import would have written them."""
    wanted = list(names) if names is not None else list(SPECS)
    memory = _SERVED.get(run)
    if memory is None and not (run.frames_current() or run.frames_migratable()):
        from .importer import _raw_files, build

        said = run.record.frames
        built = (said is not None and said != FramesInfo()) or bool(run.frame_files())
        if not _raw_files(run) and (built or not run.frames_dir.is_dir()):
            # rebuilding from nothing would replace the run's frames with empty ones
            raise RunNotFoundError(
                f"{run.path} has no current frames and no raw files to rebuild them from",
                "re-capture or re-import it (an older tracekit may still read its frames)",
            )
        key = _raw_signature(run)
        cached = _MEMORY.get(key)
        if cached is None:
            frames, sources, summary = build(run)
            facts = (
                sources,
                summary["partial"],
                summary["warnings"],
                FramesInfo(
                    schema_version=SCHEMA_VERSION,
                    rows={name: df.height for name, df in frames.items()},
                    partitioned={},
                    in_memory=True,
                ),
            )
            if len(_MEMORY) >= _MEMORY_MAX:
                _MEMORY.pop(next(iter(_MEMORY)))
            cached = _MEMORY[key] = (frames, facts)
        memory = dict(cached[0])
        sources, partial, warnings, info = cached[1]
        run.set_sources(sources)
        run.mark_partial(partial, warnings)
        run.set_frames(info)
        _SERVED[run] = memory
    if memory is not None:
        return {name: memory[name] if name in memory else SPECS[name].empty() for name in wanted}
    frames = {name: read_frame(run, name) for name in wanted}
    if run.frames_migratable() and (run.frames_version() or 0) < CLASSES_SINCE:
        # frames from before the kernel taxonomy: the classes are computed on load, in memory
        frames = classify_on_load(frames, lambda name: read_frame(run, name))  # type: ignore[arg-type,return-value]
    return frames  # type: ignore[return-value]


class RunFrames(Mapping[str, pl.DataFrame]):
    """A run's frames read on first use, one by one (``frames["failures"]`` reads that frame only), and
    :meth:`scan` for a LazyFrame that reads only the columns and rows a query keeps: the views that print more
    than the stored Analysis (show's range and kernel tables, the report's environment) read what they print,
    not every frame of a run of millions of rows."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._read: dict[str, pl.DataFrame] = {}

    def __getitem__(self, name: str) -> pl.DataFrame:
        if name not in SPECS:
            raise KeyError(name)
        if name not in self._read:
            self._read[name] = load_frames(self._run, [name])[name]
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(SPECS)

    def __len__(self) -> int:
        return len(SPECS)

    def height(self, name: str) -> int:
        """The frame's row count without reading it: the manifest's count for frames of this schema, else a
        count over a scan."""
        if name in self._read:
            return self._read[name].height
        info = self._run.record.frames
        if self._run.frames_current() and info is not None and name in (info.rows or {}):
            return int(info.rows[name])
        return int(self.scan(name).select(pl.len()).collect().item())

    def scan(self, name: str) -> pl.LazyFrame:
        """One frame as a LazyFrame (:func:`scan_frame`; the frame already read, where it was). A frame file
        whose parquet footer cannot be read (a truncated copy) is read as :meth:`__getitem__` reads it, which
        rebuilds it from raw/ in memory, instead of failing later in the query."""
        if name in self._read:
            return self._read[name].lazy()
        scan = scan_frame(self._run, name)
        try:
            scan.collect_schema()
        except (pl.exceptions.PolarsError, OSError):
            return self[name].lazy()
        return scan


def scan_of(frames: Mapping[str, pl.DataFrame], name: str) -> pl.LazyFrame:
    """``frames[name]`` as a LazyFrame: scanned from the run's files for :class:`RunFrames`, else the frame held."""
    if isinstance(frames, RunFrames):
        return frames.scan(name)
    return frames[name].lazy()


def scan_frame(run: Run, name: str) -> pl.LazyFrame:
    """One frame of ``run`` as a LazyFrame (``tracekit.Run.scan``): scanned from its files where they are of this
    schema, so filters and column selections reach the parquet reader (one rank of a fleet's kernels is read, not
    the whole frame); else as :func:`load_frames` gives it (migrated, or rebuilt in memory from raw/). KeyError
    for a name no schema defines."""
    if name not in SPECS:
        raise KeyError(name)
    if run.frames_current() and run not in _SERVED:
        return read_frame(run, name, lazy=True)  # type: ignore[return-value]
    return load_frames(run, [name])[name].lazy()


def file_in_memory(path: Path) -> tuple[Run, dict[str, pl.DataFrame]]:
    """One raw profiler file read into a run's frames in memory, as an import of it would (read, settle, place,
    enrich: analyzers/importer.py), with a ``Run`` that lives only in memory: its path is the file's, its
    manifest names the file as the run's one source; nothing is written anywhere (``tracekit.load`` of a file).
    A file that cannot be read raises the import's error."""
    from .importer import combine, read_file
    from .ranks import label_extract

    path = Path(path)
    extract = read_file(path)
    record: dict[str, Any] = {
        "path": path.name,
        "kind": extract.kind,
        "status": "partial" if extract.partial else "ok",
        "message": None,
    }
    record.update(label_extract(extract, path.name))
    warnings = list(extract.warnings)
    frames = combine([extract])
    run = Run.in_memory(path, imported_from=[str(path)])
    run.set_sources([record])
    run.mark_partial(bool(extract.partial), warnings)
    return run, frames


def frames_copy(run: Run, folder: Path) -> Run:
    """A scratch run in ``folder`` (a temporary folder the caller owns) holding ``run``'s frames as written files
    and its manifest: how ``bundle`` packs a run whose frames were rebuilt in memory, without writing into it."""
    frames = load_frames(run)
    copy = run.moved(folder)
    write_frames(copy, frames, partition_by=PARTITION_KEY if len(run_ranks(frames)) >= 2 else None)
    written = copy.record.frames
    copy.set_frames(
        msgspec.structs.replace(written, in_memory=False) if written else FramesInfo(in_memory=False)
    )
    return copy
