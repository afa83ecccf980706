"""Imports many profiler files at once: worker processes on all cores, or one Ray task per file on a cluster.

A distributed job leaves one trace per rank (a serving profile or a large model's training step is 1-3 GB per rank,
and a job has 8 to thousands of ranks). ``importer.import_files`` reads them one after another in one process;
``import_parallel`` reads them in parallel and writes the same run (same ``run.json`` sources, ranks, warnings,
partial flag, and the same frames row for row):

1. **read**, one task per file (``importer.read_job``, then ``importer.settled``): copy the file into
   ``RUN/raw/`` under the name the serial import gives it, read it, label its rank and settle its frames on their
   own (ranges nest and kernels find their range per file, since both group rows by their ``source`` file), write
   them to a staging folder inside the run and return only a small summary (the source record, row counts, the
   ranks present). A file that cannot be read is recorded as failed, exactly as the serial import records it.
2. **place**, in the parent: ids (``kernel_id``, ``range_id``, ``ncu_id`` ...) are dense over the run in the order
   of ``raw/`` (sorted names), so a file's id offsets are the row counts of the files before it
   (``importer.id_offsets``, as the serial import places them).
3. **write**, one task per rank and one for the frames without a rank: stream the staged frames, ids shifted, into
   ``frames/<frame>/rank=<r>/part-0.parquet`` (a run of two or more ranks) or ``frames/<frame>.parquet``, lazily
   (``LazyFrame.sink_parquet``), each finished as the serial import finishes it (``importer.finish``: failures
   kept once, tracekit's records renumbered).
4. the parent writes ``run.json`` last; until then the run's frames are not current, so an interrupted import is
   rebuilt from ``raw/`` by the next read.

Files whose reader must see them together (``FormatReader.merges``: several CSV exports of one Nsight Compute
report) are read in one process: the serial import. So is an import with one worker.

Memory is bounded by the workers, not by the number of files: a worker holds one file's frames at a time, and the
parent only the summaries. Local workers are ``spawn``-ed processes (polars' thread pool does not survive
``fork``), each with ``POLARS_MAX_THREADS`` = cores / workers. With Ray, input files and the output folder must be
on storage every node sees under the same path (paths are made absolute).

``--rebuild`` of an existing run stays serial (``importer.import_into``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit._version import SCHEMA_VERSION
from tracekit.errors import BadInputError, MissingToolError, TracekitError, UnreadableFileError
from tracekit.frames import SPECS
from tracekit.records import FramesInfo
from tracekit.run import (
    HIVE_NULL,
    PARTITION_KEY,
    STATUS_INCOMPLETE,
    Run,
    atomic_path,
    new_run_name,
    sha256_file,
)

from .importer import (
    FileResult,
    ReadJob,
    enrich,
    enrich_context,
    finish,
    id_offsets,
    import_files,
    open_file,
    read_job,
    settled,
    shifted,
    shifts,
)
from .rawfiles import is_read, raw_names, shown, unexported_reports
from .readers import registry
from .store import PARQUET
from .workers import default_workers, in_one_process

EXECUTORS = ("local", "ray")
"""Where the files are read: ``local`` worker processes, or ``ray`` tasks on a Ray cluster."""

_STAGE_PREFIX = ".import-stage-"


@dataclass(frozen=True)
class Piece:
    """One file's staged frame, with the id offsets that place it in the run."""

    path: str
    shifts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class WriteJob:
    """One frame file to write: the pieces in file order, for one rank (``rank`` set, ``partitioned``) or all."""

    frame: str
    target: str
    pieces: tuple[Piece, ...]
    partitioned: bool = False
    rank: int | None = None
    context: dict[str, Any] = field(default_factory=dict)
    """``importer.enrich_context`` of the whole run, for ``importer.enrich`` of this part."""


def _portable(exc: TracekitError, pairs: tuple[tuple[str, str], ...]) -> tuple[str, str, str | None]:
    return type(exc).__name__, shown(exc.message, pairs), exc.hint


def _revive(problem: tuple[str, str, str | None]) -> TracekitError:
    """The error a read task reported, rebuilt in the parent (TracekitError subclasses do not all pickle)."""
    import tracekit.errors as errors

    name, message, hint = problem
    cls = getattr(errors, name, BadInputError)
    if not (isinstance(cls, type) and issubclass(cls, TracekitError)):
        cls = BadInputError
    exc = cls.__new__(cls)
    TracekitError.__init__(exc, message, hint)
    if isinstance(exc, UnreadableFileError):
        exc.path = message.split(": ", 1)[0]
    return exc


def read_task(job: ReadJob) -> FileResult:
    """Read one file and stage its settled frames (steps 1 and 3). Runs in a worker process or a Ray task: only
    the summary goes back, never frames."""
    with in_one_process():  # this task has one core: a large trace is not spread over the node's
        out = settled(read_job(job))
    if out.frames is not None:
        assert job.stage is not None
        stage = Path(job.stage)
        stage.mkdir(parents=True, exist_ok=True)
        for name, df in out.frames.items():
            df.write_parquet(stage / f"{name}.parquet", compression="lz4", statistics=False)
        out.frames = None
    if not out.imported:
        # The serial import checks every file before it makes the run; the parent needs that verdict only when
        # no file is readable (then nothing is kept), and only files that did not read can fail it.
        try:
            source, reader = open_file(Path(job.src))
            with source:
                registry.option(reader, "check")(source)  # type: ignore[operator]
        except TracekitError as exc:
            out.problem = _portable(exc, job.shown)
    return out


def write_task(jobs: list[WriteJob]) -> dict[str, int]:
    """Write frame files from staged pieces, ids shifted; returns each target's row count."""
    rows: dict[str, int] = {}
    for job in jobs:
        spec = SPECS[job.frame]
        parts = []
        for piece in job.pieces:
            lf = pl.scan_parquet(piece.path)
            if job.partitioned:
                key = pl.col(PARTITION_KEY)
                lf = lf.filter(key.is_null() if job.rank is None else key == job.rank)
            parts.append(shifted(lf, piece.shifts))
        lf = finish(job.frame, pl.concat(parts, how="vertical") if parts else spec.empty().lazy())
        lf = enrich(job.frame, lf, job.context)
        if job.partitioned:
            lf = lf.drop(PARTITION_KEY)
        target = Path(job.target)
        with atomic_path(target) as tmp:
            lf.sink_parquet(tmp, **PARQUET)  # type: ignore[arg-type]
        rows[job.target] = pl.scan_parquet(target).select(pl.len()).collect().item()
    return rows


# --- executors ------------------------------------------------------------------------------------------------------
def _worker_start() -> None:
    """In each worker: Ctrl-C is the parent's to handle (it stops the workers and keeps what was copied)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Local:
    """Spawned worker processes, each with a share of the cores for polars."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def _pool(self, workers: int) -> ProcessPoolExecutor:
        import multiprocessing

        return ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start
        )

    def _stop(self) -> None:
        """End the workers now (an error or Ctrl-C in the parent): their files' work is not wanted any more."""
        for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
            with suppress(OSError):
                proc.terminate()

    @contextmanager
    def session(self) -> Iterator[None]:
        threads = str(max(1, default_workers() // self.workers))
        before = os.environ.get("POLARS_MAX_THREADS")
        os.environ["POLARS_MAX_THREADS"] = threads  # read by each spawned worker when it imports polars
        self.pool = self._pool(self.workers)
        try:
            yield
        except BaseException:
            self._stop()
            raise
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            if before is None:
                os.environ.pop("POLARS_MAX_THREADS", None)
            else:
                os.environ["POLARS_MAX_THREADS"] = before

    def run(
        self, fn: Callable[[Any], Any], jobs: list[Any]
    ) -> Iterator[tuple[Any, Any, BaseException | None]]:
        """(job, result, None) as each job completes; (job, None, why) for a job whose worker died."""
        futures: dict[Future[Any], Any] = {self.pool.submit(fn, job): job for job in jobs}
        broken: list[Any] = []
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    result = fut.result()
                except BrokenProcessPool:
                    broken.append(futures[fut])
                else:
                    yield futures[fut], result, None
        if broken:
            # A worker died (killed for memory, most likely) and took the pool down: retry those files one at a
            # time in a fresh process each, so the one that kills its worker is named and the others are kept.
            self.pool.shutdown(wait=True, cancel_futures=True)
            for job in broken:
                self.pool = self._pool(1)
                try:
                    result = self.pool.submit(fn, job).result()
                except BrokenProcessPool as exc:
                    yield job, None, exc
                else:
                    yield job, result, None
                finally:
                    self.pool.shutdown(wait=True)
            self.pool = self._pool(self.workers)


class _Ray:
    """One Ray task per job on an existing cluster (``address``), or the one this process is connected to."""

    def __init__(self, address: str | None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise MissingToolError(
                "--executor ray needs the ray package, which is not installed",
                "pip install 'tracekit[ray]' (on every node of the cluster), or import with --executor local",
            ) from exc
        self.ray = ray
        self.address = address

    @contextmanager
    def session(self) -> Iterator[None]:
        ray = self.ray
        started = False
        if not ray.is_initialized():
            import logging

            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise MissingToolError(
                    f"cannot reach a Ray cluster at {self.address or 'the default address'} ({exc})",
                    "start one (`ray start --head`) or pass --ray-address HOST:PORT",
                ) from exc
            started = True
        try:
            yield
        finally:
            if started:
                ray.shutdown()

    def run(
        self, fn: Callable[[Any], Any], jobs: list[Any]
    ) -> Iterator[tuple[Any, Any, BaseException | None]]:
        ray = self.ray
        remote = ray.remote(num_cpus=1)(fn)
        refs = {remote.remote(job): job for job in jobs}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    yield refs[ref], ray.get(ref), None
                except ray.exceptions.RayTaskError as exc:  # raised by tracekit's code in the task
                    cause = getattr(exc, "cause", None)
                    raise (cause if isinstance(cause, BaseException) else exc.as_instanceof_cause()) from None
                except ray.exceptions.RayError as exc:  # the worker or node died (out of memory, preempted)
                    yield refs[ref], None, exc


# --- the import -----------------------------------------------------------------------------------------------------
def _died(job: ReadJob, why: BaseException, pairs: tuple[tuple[str, str], ...]) -> FileResult:
    """A file whose worker died: recorded as failed (the run is partial), the other files kept."""
    raw = Path(job.raw)
    message = shown(
        f"cannot read file: {raw}: the worker reading it died ({type(why).__name__}; out of memory?) — "
        "import it alone, or with fewer --workers",
        pairs,
    )
    record: dict[str, Any] = {"path": job.rel}
    if raw.is_file():
        record.update(bytes=raw.stat().st_size, sha256=sha256_file(raw))
    record.update(kind=None, status="failed", message=message)
    return FileResult(index=job.index, name=raw.name, record=record if job.read else None, failed=message)


def _write_jobs(
    frames_dir: Path, stage: Path, results: list[FileResult]
) -> tuple[list[list[WriteJob]], dict[str, str], list[int]]:
    """Split the frames' writing into tasks: one per rank partition, one for the frames written as one file.
    ``frames_dir`` is absolute: a Ray task does not run in this process's folder."""
    imported = [r for r in results if r.imported]
    ranks = sorted({rk for r in imported for values in r.ranks.values() for rk in values if rk is not None})
    totals = {name: sum(r.rows.get(name, 0) for r in imported) for name in SPECS}
    offsets = dict(zip((r.index for r in imported), id_offsets([r.rows for r in imported]), strict=True))

    def piece(r: FileResult, name: str) -> Piece:
        return Piece(str(stage / str(r.index) / f"{name}.parquet"), shifts(name, offsets[r.index]))

    def placed(name: str) -> pl.LazyFrame:
        """The run's frame ``name``, lazily (read only where ``enrich_context`` reads it)."""
        scans = [shifted(pl.scan_parquet(p.path), p.shifts) for p in (piece(r, name) for r in imported)]
        return finish(name, pl.concat(scans, how="vertical") if scans else SPECS[name].empty().lazy())

    context = enrich_context({name: placed(name) for name in SPECS})

    per_rank: dict[int | None, list[WriteJob]] = {}
    rest: list[WriteJob] = []
    partitioned: dict[str, str] = {}
    for name, spec in SPECS.items():
        if len(ranks) >= 2 and PARTITION_KEY in spec.schema.names() and totals[name]:
            partitioned[name] = PARTITION_KEY
            values = {v for r in imported for v in r.ranks.get(name, [])}
            for value in sorted(values, key=lambda v: (v is None, v or 0)):
                folder = f"{PARTITION_KEY}={HIVE_NULL if value is None else value}"
                pieces = tuple(piece(r, name) for r in imported if value in r.ranks.get(name, []))
                target = frames_dir / name / folder / "part-0.parquet"
                per_rank.setdefault(value, []).append(
                    WriteJob(name, str(target), pieces, True, value, context)
                )
        else:
            pieces = tuple(piece(r, name) for r in imported)
            rest.append(WriteJob(name, str(frames_dir / f"{name}.parquet"), pieces, context=context))
    return [*per_rank.values(), rest], partitioned, ranks


def _read_together(paths: list[Path]) -> bool:
    """Whether some reader must see several of ``paths`` together (``FormatReader.merges``): then they are read
    in one process. Files that cannot be opened here are left to the read tasks to report."""
    merging: dict[str, int] = {}
    for p in paths:
        try:
            source, reader = open_file(p)
        except TracekitError:
            continue
        source.close()
        if registry.option(reader, "merges"):
            merging[reader.kind] = merging.get(reader.kind, 0) + 1
    return any(n > 1 for n in merging.values())


def import_parallel(
    paths: list[Path],
    out: Path | None = None,
    *,
    runs_dir: Path = Path("runs"),
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    on_event: Callable[[str], None] | None = None,
) -> tuple[Run, dict[str, Any]]:
    """Make a new run from ``paths`` as ``importer.import_files`` does, reading the files in parallel: ``workers``
    local processes (default: the cores), or one Ray task per file (``executor="ray"``). Returns the same
    (run, summary); raises the same errors (nothing is kept when no file can be read). With one worker, or files
    a reader must see together, the files are read here (``importer.import_files``)."""
    if not paths:
        raise BadInputError("no files given", "pass one or more .ncu-rep / .sqlite / .json(.gz) files")
    if executor not in EXECUTORS:
        raise BadInputError(f"unknown executor {executor!r}", f"use one of {', '.join(EXECUTORS)}")
    for p in paths:
        if not p.exists():
            raise BadInputError(f"{p} does not exist", "check the path")
        if not p.is_file():
            raise UnreadableFileError(p, "is a folder, not a profiler file", "give the files inside it")
    local_workers = max(1, min(workers or default_workers(), len(paths)))
    if executor == "local" and local_workers == 1:
        return import_files(paths, out, runs_dir=runs_dir, on_event=on_event)
    if _read_together(paths):
        if on_event:
            on_event("files of one report that are read together: reading them in one process")
        return import_files(paths, out, runs_dir=runs_dir, on_event=on_event)
    backend: _Local | _Ray = _Ray(ray_address) if executor == "ray" else _Local(local_workers)
    target = out or runs_dir / new_run_name(paths[0].stem.split(".")[0])
    existed = target.exists()
    run = Run.create(target, command=None, capture={"imported_from": [str(p) for p in paths]})
    raw_abs = run.raw_dir.resolve()
    stage = run.frames_dir.resolve() / f"{_STAGE_PREFIX}{secrets.token_hex(4)}"
    pairs = ((str(raw_abs), str(run.raw_dir)), *((str(p.resolve()), str(p)) for p in paths))
    names = raw_names(paths)
    jobs = [
        ReadJob(
            i,
            str(p.resolve()),
            str(raw_abs / name),
            f"raw/{name}",
            is_read(name),
            None,
            str(stage / str(i)),
            pairs,
        )
        for i, (p, name) in enumerate(zip(paths, names, strict=True))
    ]
    # the serial import reads raw/ in name order: ids and sources follow that order
    order = {job.index: rank for rank, job in enumerate(sorted(jobs, key=lambda j: names[j.index]))}
    results: list[FileResult] = []
    keep = False
    try:
        with backend.session():
            if on_event:
                how = f"{backend.workers} worker processes" if isinstance(backend, _Local) else "Ray tasks"
                on_event(f"reading {len(paths)} files in {how}")
            for job, result, why in backend.run(read_task, jobs):
                if why is not None:
                    result = _died(job, why, pairs)
                results.append(result)
                if on_event:
                    state = "failed" if result.failed else "kept" if result.record is None else "read"
                    on_event(f"{state} {result.name} ({len(results)}/{len(jobs)})")
            results.sort(key=lambda r: order[r.index])
            by_path = sorted(results, key=lambda r: r.index)
            problems = [r.problem for r in by_path]
            if all(p is not None for p in problems):
                if len(problems) == 1:
                    raise _revive(problems[0])  # type: ignore[arg-type]
                first = _revive(problems[0])  # type: ignore[arg-type]
                raise UnreadableFileError(
                    paths[0],
                    f"none of the {len(paths)} files could be read; first: {first.message}",
                    first.hint,
                )
            sources = [r.record for r in results if r.record is not None]
            if sources and not any(r.imported for r in results):
                failed = next(r.failed for r in results if r.failed)
                first_msg = str(failed).split(": ", 1)[-1].replace(f"{run.raw_dir}/", "")
                if len(paths) == 1:
                    raise UnreadableFileError(paths[0], first_msg.removeprefix(f"{paths[0].name}: "))
                raise UnreadableFileError(
                    paths[0], f"none of the {len(paths)} files could be read; first: {first_msg}"
                )
            tasks, partitioned, ranks = _write_jobs(run.frames_dir.resolve(), stage, results)
            if on_event:
                on_event("writing frames" + (f" of {len(ranks)} ranks" if len(ranks) >= 2 else ""))
            written: dict[str, int] = {}
            for _tasks, rows, why in backend.run(write_task, [t for t in tasks if t]):
                if why is not None:
                    raise TracekitError(
                        f"a worker writing the frames of {run.path} died ({why})",
                        "import again with fewer --workers",
                    )
                written.update(rows)
        keep = True
    except KeyboardInterrupt:
        # what was copied stays in raw/; run.json says the frames are not built, so the next read rebuilds them
        keep = True
        run.mark(STATUS_INCOMPLETE, "import interrupted: rerun it, or `tracekit import --rebuild` this run")
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if not keep:
            if existed:
                for child in run.path.iterdir():
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            else:
                shutil.rmtree(run.path, ignore_errors=True)

    rows = {name: 0 for name in SPECS}
    for tgt, n in written.items():
        rel = Path(tgt).relative_to(run.frames_dir.resolve())
        rows[rel.parts[0].removesuffix(".parquet")] += n
    failed = [{"path": r.record["path"], "message": r.failed} for r in results if r.failed and r.record]
    warnings = [w for r in results for w in r.warnings] + unexported_reports(run.raw_dir)
    partial = bool(failed) or any(r.partial for r in results)
    run.set_sources([r.record for r in results if r.record is not None])
    run.set_frames(
        FramesInfo(schema_version=SCHEMA_VERSION, built_unix=time.time(), rows=rows, partitioned=partitioned)
    )
    run.mark_partial(partial, warnings)
    run.save()
    from .importer import keep_analysis

    keep_analysis(run, None, warnings)
    return run, {
        "run": str(run.path),
        "files": len(run.record.sources),
        "imported": sum(r.imported for r in results),
        "failed": failed,
        "warnings": warnings,
        "partial": partial,
        "rows": rows,
        "ranks": ranks,
    }
