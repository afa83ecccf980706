"""Builds a run's frames from its raw files, and opens runs for the views.

``import_files`` makes a new run from existing reports (any mix of Nsight Compute reports and CSV exports, Nsight
Systems SQLite exports, Kineto traces, tracekit's own JSONL records); ``import_into`` (re)builds the frames of a
run from everything in its ``raw/`` and writes them (only ``import`` and ``capture`` call it); ``load_frames``
returns a run's frames for the views, rebuilding them in memory when they are missing or older than this
tracekit's schema: a read never writes into a run. A file's kind is detected from its content, not its
extension.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import naming
from tracekit._version import SCHEMA_VERSION
from tracekit.errors import BadInputError, RunNotFoundError, TracekitError, UnreadableFileError
from tracekit.frames import SPECS, nested_value
from tracekit.run import PARTITION_KEY, Run, new_run_name, sha256_file

from .join import assign_ranges, nest_ranges
from .ranks import label_extract, run_ranks
from .readers.base import Extract, reporting_progress

# Files a capture leaves in raw/ that hold no frames (the program's own output is raw/program*.stdout / .stderr).
_IGNORED_SUFFIXES = (".log", ".qdstrm", ".txt", ".tmp", ".nsys-rep", ".stdout", ".stderr")
_WRAPPER_FAILURES = "breadcrumbs/*/failures.*.jsonl"
"""Failures the instrument wrapper records for wrapped calls that raised, one file per process and pass
(``TRACEKIT_BREADCRUMB_DIR`` of each capture pass, collectors/crash.py): read into the failures frame. A
breadcrumb folder set by hand (no pass folder) is read too: ``breadcrumbs/failures.*.jsonl``."""
ID_COLUMNS = {
    "kernels": ["kernel_id", "range_id"],
    "ranges": ["range_id", "parent_id"],
    "ncu": ["ncu_id"],
    "ncu_metrics": ["ncu_id"],
    "ncu_rules": ["ncu_id"],
}
ID_OWNER = {"kernels": "kernel_id", "ranges": "range_id", "ncu": "ncu_id"}
ID_FAMILY = {"kernel_id": "kernels", "range_id": "ranges", "parent_id": "ranges", "ncu_id": "ncu"}


# --- kinds ------------------------------------------------------------------------------------------------------
def _head(path: Path, n: int = 4096) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


_XZ_MAGIC = b"\xfd7zXZ\x00"
_GZ_MAGIC = b"\x1f\x8b"
COMPRESSED_SUFFIXES = (".xz", ".gz")
MAX_DECOMPRESSED_BYTES = 32 << 30
"""A compressed raw file that expands past this is refused (a decompression bomb, or not a profile)."""


def plain_name(name: str) -> str:
    """The file name without a compression suffix: ``probe.ncu-rep.xz`` -> ``probe.ncu-rep``."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _compression(path: Path) -> str | None:
    head = _head(path, 6)
    if head.startswith(_XZ_MAGIC):
        return "xz"
    if head.startswith(_GZ_MAGIC):
        return "gz"
    return None


@contextmanager
def materialized(path: Path) -> Iterator[Path]:
    """``path`` itself, or for an xz / gzip-compressed profile (``X.ncu-rep.xz``, ``X.sqlite.gz``) a temporary
    decompressed copy under its plain name. Kineto traces are read compressed by their reader and pass through.
    Samples keep their reports xz-compressed: an ncu report shrinks 5-40x."""
    comp = _compression(path) if path.is_file() else None
    if comp is None:
        yield path
        return
    from .readers.kineto.reader import is_kineto_trace

    if comp == "gz" and is_kineto_trace(path):
        yield path
        return
    import gzip
    import lzma
    import tempfile
    import zlib

    opener = lzma.open if comp == "xz" else gzip.open
    with tempfile.TemporaryDirectory(prefix="tracekit-raw-") as tmp:
        target = Path(tmp) / plain_name(path.name)
        written = 0
        try:
            with opener(path, "rb") as src, target.open("wb") as dst:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > MAX_DECOMPRESSED_BYTES:
                        raise UnreadableFileError(
                            path,
                            f"expands past {MAX_DECOMPRESSED_BYTES >> 30} GiB",
                            "decompress it yourself if it is real",
                        )
                    dst.write(chunk)
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
            raise UnreadableFileError(
                path, f"is a damaged {comp} file ({exc})", "re-compress or send the uncompressed file"
            ) from exc
        if written == 0:
            raise UnreadableFileError(path, f"is an empty {comp} file (it holds no bytes)", "re-export it")
        yield target


def _is_jsonl_records(path: Path, columns: set[str]) -> bool:
    try:
        first = _head(path, 65536).split(b"\n", 1)[0]
        obj = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and len(columns & set(obj)) >= 3


def _moe_jsonl_kind(path: Path) -> str | None:
    """``moe`` for ``tracekit bench moe`` rows, ``moe-curve`` for its per-expert curve, ``moe-routing`` for
    instrument()'s routing sidecar, else None."""
    try:
        first = _head(path, 1 << 20).split(b"\n", 1)[0]
        obj = json.loads(first)
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    if str(obj.get("range") or "").startswith("gemm ") and " of=moe" in str(obj.get("range")):
        return "moe-curve"
    if "counts" not in obj:
        return None
    if "instance" in obj and "range" in obj:
        return "moe-routing"
    if "route" in obj and "rows" in obj:
        return "moe"
    return None


def _detect_plain(path: Path) -> str:
    """The kind of a profiler file, from its content: ``ncu``, ``ncu-csv``, ``nsys``, ``nsys-rep``, ``kineto``,
    ``measurements`` or ``failures``. Raises UnreadableFileError for anything else."""
    from .readers.kineto.reader import is_kineto_trace
    from .readers.ncu.csv_export import sniff_ncu_csv
    from .readers.ncu.report import is_ncu_report
    from .readers.nsys.reader import is_nsys_sqlite

    if not path.exists():
        raise BadInputError(f"{path} does not exist", "check the path")
    if path.is_dir():
        raise UnreadableFileError(path, "is a folder, not a profiler file", "give the files inside it")
    if path.stat().st_size == 0:
        raise UnreadableFileError(path, "is empty", "re-export or re-capture it")
    if is_ncu_report(path):
        return "ncu"
    if is_nsys_sqlite(path):
        return "nsys"
    if is_kineto_trace(path):
        return "kineto"
    head = _head(path, 64)
    if head.startswith(b"SQLite format 3\x00"):
        from .readers.nsys.reader import _check_file

        _check_file(path)  # raises the precise reason: truncated, malformed, not an nsys export
        return "nsys"
    if path.suffix == ".nsys-rep" or head.startswith(b"QDSTRM") or b"nsys" in head[:16].lower():
        return "nsys-rep"
    moe_kind = _moe_jsonl_kind(path)
    if moe_kind is not None:
        return moe_kind
    meas = {c.name for c in SPECS["measurements"].columns}
    fail = {c.name for c in SPECS["failures"].columns}
    if _is_jsonl_records(path, fail - meas):
        return "failures"
    if _is_jsonl_records(path, meas - fail):
        return "measurements"
    if sniff_ncu_csv(path):
        return "ncu-csv"
    raise UnreadableFileError(
        path,
        "is not a file tracekit reads (Nsight Compute .ncu-rep or CSV export, Nsight Systems SQLite export, "
        "PyTorch profiler trace .json/.json.gz, or tracekit JSONL)",
        "check that you passed the profiler's output file",
    )


def _clean_json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return None
    return value


def read_jsonl_records(path: Path, frame: str) -> Extract:
    """tracekit's own measurements.jsonl / failures.jsonl; bad lines are skipped and counted, never fatal."""
    spec = SPECS[frame]
    names = [c.name for c in spec.columns]
    rows: list[dict[str, Any]] = []
    bad = 0
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(obj, dict):
                bad += 1
                continue
            rows.append({k: _clean_json_value(obj.get(k)) for k in names})
    text_cols = [c.name for c in spec.columns if c.dtype == pl.String]
    nested = spec.declared.nested()
    for row in rows:
        for key in text_cols:  # a list or object where text belongs is kept as JSON text
            if row.get(key) is not None and not isinstance(row[key], str):
                row[key] = json.dumps(row[key])
        for c in nested:  # lists and objects (versions, per-expert counts), also when written as JSON text
            row[c.name] = nested_value(row[c.name], c.dtype)
    if rows:
        df = pl.DataFrame(rows, schema={c.name: c.dtype for c in spec.columns}, strict=False)
    else:
        df = spec.empty()
    id_col = spec.columns[0].name
    df = spec.conform(df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(id_col)))
    ex = Extract(frame, path.name, {frame: df})
    if bad:
        ex.partial = True
        ex.warnings.append(f"{path.name}: {bad} line(s) were not valid JSON records and were skipped")
    return ex


def _read_plain(path: Path, kind: str | None = None) -> Extract:
    """Read one raw file into an Extract, by detected kind."""
    kind = kind or detect_kind(path)
    if kind == "ncu":
        from .readers.ncu.report import read_ncu_report

        return read_ncu_report(path)
    if kind == "ncu-csv":
        from .readers.ncu.csv_export import read_ncu_csv

        return read_ncu_csv(path)
    if kind == "nsys":
        from .readers.nsys.reader import read_nsys_sqlite

        return read_nsys_sqlite(path)
    if kind == "kineto":
        from .readers.kineto.reader import read_kineto

        return read_kineto(path)
    if kind in ("measurements", "failures"):
        return read_jsonl_records(path, kind)
    if kind in ("moe", "moe-routing", "moe-curve"):
        return read_jsonl_records(path, kind.replace("-", "_"))
    if kind == "nsys-rep":
        raise UnreadableFileError(
            path,
            "is an Nsight Systems report; tracekit reads its SQLite export",
            f"run `nsys export --type sqlite -o {path.with_suffix('.sqlite')} {path}` and import the .sqlite",
        )
    raise UnreadableFileError(path, f"has unknown kind {kind!r}")


def detect_kind(path: Path) -> str:
    """The kind of a profiler file, from its content (compressed files by what they hold): ``ncu``,
    ``ncu-csv``, ``nsys``, ``nsys-rep``, ``kineto``, ``measurements`` or ``failures``. Raises UnreadableFileError
    for anything else."""
    if path.is_file() and path.stat().st_size and _compression(path):
        with materialized(path) as plain:
            return _detect_plain(plain)
    return _detect_plain(path)


def _own_jsonl_kind(name: str) -> str | None:
    """The kind of one of tracekit's own JSONL files, by its name (a sweep writes them even when they get no
    row: ``failures.jsonl`` of a sweep where nothing failed)."""
    if name.startswith("moe_routing-") and name.endswith(".jsonl"):
        return "moe-routing"
    return {
        "failures.jsonl": "failures",
        "measurements.jsonl": "measurements",
        "moe.jsonl": "moe",
        "moe_curve.jsonl": "moe-curve",
    }.get(name)


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


def read_file(path: Path, kind: str | None = None) -> Extract:
    """Read one raw file (plain or xz / gzip-compressed) into an Extract, by detected kind. An empty JSONL file of
    tracekit's own (no failures, say) is a file with no rows, not a damaged one."""
    own = _own_jsonl_kind(path.name)
    if own is not None and path.is_file() and path.stat().st_size == 0:
        return Extract(kind or own, path.name, {})
    with materialized(path) as plain:
        return _read_plain(plain, kind or _detect_plain(plain))


# --- combining --------------------------------------------------------------------------------------------------
def _legacy_gemm_fields(name: str) -> dict[str, str] | None:
    """Older probe ranges: ``gemm/<dtype>/M=1024,N=2048,K=6144``."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != "gemm":
        return None
    dims: dict[str, str] = {}
    for item in parts[2].split(","):
        key, sep, value = item.partition("=")
        if not sep or key not in ("M", "N", "K") or not value.isdigit():
            return None
        dims[key] = value
    if len(dims) != 3:
        return None
    dtype = naming.canonical_dtype(parts[1])
    dtype = {"fp8": "e4m3"}.get(dtype, dtype)
    return {"backend": f"torch-{parts[1]}", "op": "mm", "a": dtype, "b": dtype, **dims}


def parse_range_names(ranges: pl.DataFrame) -> pl.DataFrame:
    """Fill the GEMM columns of ``ranges`` from tracekit range names (and the legacy probe form)."""
    if ranges.height == 0:
        return ranges
    names = ranges["name"].drop_nulls().unique().to_list()
    rows = []
    for name in names:
        decoded = naming.decode(name)
        if decoded is not None:
            kind, fields = decoded.kind, decoded.fields
        else:
            legacy = _legacy_gemm_fields(name)
            if legacy is None:
                continue
            kind, fields = "gemm", legacy

        def as_int(key: str, fields: dict[str, str] = fields) -> int | None:
            value = fields.get(key)
            return int(value) if value is not None and value.lstrip("-").isdigit() else None

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
    out = ranges.join(parsed, on="name", how="left")
    # a name tracekit parses sets every GEMM field; other rows keep what their reader filled (PyTorch GEMM ops)
    named = pl.col("range_kind__parsed").is_not_null()
    out = out.with_columns(
        pl.when(named).then(pl.col(f"{c}__parsed")).otherwise(pl.col(c)).alias(c) for c in parsed_cols
    )
    return out.select(ranges.columns)


FAILURE_KEY = ("backend", "op", "m", "n", "k", "kind", "error_type", "message")
"""A failure's identity across files: a capture with several passes (nsys, then ncu) records the same failure once
per pass, and the run keeps one."""
RENUMBERED = ("measurements", "failures", "moe", "moe_curve", "moe_routing")
"""Frames whose id column is renumbered 0..n-1 once the files are combined."""


def is_read(name: str) -> bool:
    """Whether an import reads a file of raw/ by its name (logs and .nsys-rep reports are kept, not read)."""
    return not name.startswith(".") and Path(plain_name(name)).suffix not in _IGNORED_SUFFIXES


def unexported_reports(raw_dir: Path) -> list[str]:
    """Warnings for the .nsys-rep / .qdstrm reports of raw/ with no SQLite export beside them (not read)."""
    warnings = []
    for p in sorted(raw_dir.glob("*")) if raw_dir.is_dir() else []:
        name = plain_name(p.name)
        if p.is_file() and Path(name).suffix in (".nsys-rep", ".qdstrm"):
            stem = Path(name).stem
            if not any((raw_dir / f"{stem}.sqlite{z}").exists() for z in ("", *COMPRESSED_SUFFIXES)):
                warnings.append(
                    f"{p.name}: no SQLite export beside it; run `nsys export --type sqlite` on it and re-import"
                )
    return warnings


def combine(extracts: Iterable[Extract]) -> dict[str, pl.DataFrame]:
    """Concatenate the frames of several files, offsetting local ids so they are unique in the run (a launch that
    two CSV exports of one report both hold counts once), then nest ranges, parse tracekit range names and assign each kernel its innermost range."""
    from .readers.ncu.csv_export import drop_repeated_exports

    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in SPECS}
    for ex in drop_repeated_exports(list(extracts)):
        offsets = {fam: sum(df.height for df in parts[fam]) for fam in ID_OWNER}
        for name, df in ex.frames.items():
            if name not in SPECS:
                continue
            df = SPECS[name].conform(df)
            shifts = [
                (pl.col(col) + offsets[ID_FAMILY[col]]).alias(col)
                for col in ID_COLUMNS.get(name, [])
                if col in df.columns
            ]
            if shifts:
                df = df.with_columns(shifts)
            parts[name].append(df)
    frames: dict[str, pl.DataFrame] = {}
    for name, dfs in parts.items():
        frames[name] = pl.concat(dfs, how="vertical") if dfs else SPECS[name].empty()
    frames["failures"] = frames["failures"].unique(
        subset=list(FAILURE_KEY), keep="first", maintain_order=True
    )
    for name in RENUMBERED:
        id_col = SPECS[name].columns[0].name
        frames[name] = frames[name].with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(id_col))
    ranges = parse_range_names(nest_ranges(frames["ranges"]))
    frames["ranges"] = ranges
    frames["kernels"] = assign_ranges(frames["kernels"], ranges)
    return {name: SPECS[name].conform(df) for name, df in frames.items()}


# --- runs ---------------------------------------------------------------------------------------------------------
def _raw_files(run: Run) -> list[Path]:
    """The files of raw/ that hold frames, and the instrument wrapper's failure files of each capture pass."""
    if not run.raw_dir.is_dir():
        return []
    top = sorted(p for p in run.raw_dir.iterdir() if p.is_file() and is_read(p.name))
    found = [*run.raw_dir.glob(_WRAPPER_FAILURES), *run.raw_dir.glob(_WRAPPER_FAILURES.replace("*/", "", 1))]
    wrapper = sorted(p for p in found if p.is_file() and p.stat().st_size)
    return top + wrapper


def _build(
    run: Run,
    on_event: Callable[[str], None] | None = None,
    on_source: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Read every file in ``run``'s raw/ into frames, in memory: writes nothing anywhere.

    Each raw file's source record (path, size, hash, kind, import status) goes to ``on_source`` as it is read.
    Returns the frames and a summary (``files``, ``imported``, ``failed``, ``warnings``, ``partial``)."""
    extracts: list[Extract] = []
    failed: list[dict[str, str]] = []
    warnings: list[str] = []
    files = _raw_files(run)
    for path in files:
        rel = run.relative(path)
        if on_event:
            on_event(f"reading {path.name}")
        record: dict[str, Any] = {"path": rel, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
        try:
            # the wrapper's own files are failures by where they are, even when a crash tore their first line
            with reporting_progress(_Progress(path.name, on_event)):
                ex = read_file(
                    path, "failures" if path.parent.parent == run.raw_dir / "breadcrumbs" else None
                )
        except TracekitError as exc:
            record.update(kind=None, status="failed", message=exc.one_line())
            failed.append({"path": rel, "message": exc.one_line()})
        else:
            record.update(
                kind=ex.kind, status="partial" if ex.partial else "ok", message=None, warnings=ex.warnings
            )
            record.update(label_extract(ex, path.name))  # which rank(s) the file holds, and how that is known
            warnings.extend(ex.warnings)
            extracts.append(ex)
        if on_source:
            on_source(record)
    warnings.extend(unexported_reports(run.raw_dir))
    frames = combine(extracts)
    partial = bool(failed) or any(ex.partial for ex in extracts)
    summary = {
        "files": len(files),
        "imported": len(extracts),
        "failed": failed,
        "warnings": warnings,
        "partial": partial,
    }
    return frames, summary


def import_into(run: Run, on_event: Callable[[str], None] | None = None) -> dict[str, Any]:
    """(Re)build the frames of ``run`` from every file in its raw/ and write them into the run (``import``,
    ``import --rebuild`` and ``capture`` only: reads use :func:`load_frames`, which never writes). Files that
    cannot be read are recorded as failed sources (the run is then marked ``partial``); returns a summary dict."""
    run.manifest["sources"] = []  # rebuilt from what raw/ holds now
    run.__dict__.pop("_memory_frames", None)  # frames read before this import are not the run's any more
    frames, summary = _build(run, on_event, run.add_source)
    # several ranks: frames with a rank column go one folder per rank (hive layout), so fleets scan lazily
    run.write_frames(frames, partition_by=PARTITION_KEY if len(run_ranks(frames)) >= 2 else None)
    run.manifest["partial"] = summary["partial"]
    run.manifest["import_warnings"] = summary["warnings"]
    run.save()
    return {
        "run": str(run.path),
        **summary,
        "rows": {name: df.height for name, df in frames.items()},
        "ranks": run_ranks(frames),
    }


def import_files(
    paths: list[Path],
    out: Path | None = None,
    *,
    runs_dir: Path = Path("runs"),
    on_event: Callable[[str], None] | None = None,
) -> tuple[Run, dict[str, Any]]:
    """Make a new run from existing files. Every file is checked before the run is created; if none can be read,
    the first problem is raised and nothing is written."""
    if not paths:
        raise BadInputError("no files given", "pass one or more .ncu-rep / .sqlite / .json(.gz) files")
    problems: list[TracekitError] = []
    for p in paths:
        try:
            kind = detect_kind(p)
            if kind == "nsys-rep":
                read_file(p, "nsys-rep")  # raises: the report is kept only beside its SQLite export
            elif kind == "ncu":
                from .readers.ncu.report import check_reader

                check_reader(p)  # a missing reader is a missing tool (exit 3), not a damaged file
        except TracekitError as exc:
            problems.append(exc)
    if len(problems) == len(paths):
        if len(problems) == 1:
            raise problems[0]
        raise UnreadableFileError(
            paths[0],
            f"none of the {len(paths)} files could be read; first: {problems[0].message}",
            problems[0].hint,
        )
    target = out or runs_dir / new_run_name(paths[0].stem.split(".")[0])
    run = Run.create(target, command=None, capture={"imported_from": [str(p) for p in paths]})
    for p in paths:
        run.add_raw(p)
    summary = import_into(run, on_event)
    if summary["files"] and not summary["imported"]:
        # every file was recognised but none could be read: keep the promise "nothing is written"
        import shutil

        shutil.rmtree(run.path, ignore_errors=True)
        first = summary["failed"][0]["message"].split(": ", 1)[-1].replace(f"{run.raw_dir}/", "")
        if len(paths) == 1:
            raise UnreadableFileError(paths[0], first.removeprefix(f"{paths[0].name}: "))
        raise UnreadableFileError(paths[0], f"none of the {len(paths)} files could be read; first: {first}")
    return run, summary


def open_run(path: Path | str) -> Run:
    """A run folder (or, once bundles exist, a bundle) given on the command line."""
    path = Path(path)
    if path.is_file() and path.suffix == ".zip":
        try:
            from tracekit.bundle import open_bundle
        except ImportError as exc:
            raise RunNotFoundError(
                f"{path} is a zip file; bundles are not supported by this tracekit"
            ) from exc
        return open_bundle(path)
    if path.is_file():
        raise RunNotFoundError(
            f"{path} is a file, not a run", f"make a run from it first: `tracekit import {path} -o runs/NAME`"
        )
    return Run.open(path)


_MEMORY: dict[tuple[Any, ...], tuple[dict[str, pl.DataFrame], dict[str, Any]]] = {}
"""Frames rebuilt in memory for stale runs, keyed by the run's path and its raw files' (name, size, mtime):
a TUI reload or a compare of a run with itself rebuilds once per process. Holds a few runs at most."""
_MEMORY_MAX = 4


def _raw_signature(run: Run) -> tuple[Any, ...]:
    files = []
    for p in _raw_files(run):
        st = p.stat()
        files.append((run.relative(p), st.st_size, st.st_mtime_ns))
    return (str(run.path.resolve()), SCHEMA_VERSION, tuple(files))


def frames_in_memory(run: Run) -> bool:
    """True when :func:`load_frames` served ``run``'s frames from an in-memory rebuild (its frames on disk are
    missing or stale); ``run.manifest["frames"]`` then describes the rebuilt frames, not the files."""
    return bool(getattr(run, "_memory_frames", None) is not None)


def load_frames(run: Run, names: Iterable[str] | None = None) -> dict[str, pl.DataFrame]:
    """The run's frames (all, or ``names``). Frames of the previous schema version are migrated on read (their
    JSON text columns decoded, :meth:`Run.read_frame`); frames that are missing or older are rebuilt from raw/
    in memory, never written into the run: every read (show, explain, view, report, compare, bundle) leaves the
    run byte-identical, also a read-only one. ``run.manifest`` (in memory only) then carries the rebuilt
    sources, ``partial`` and ``import_warnings`` as an import would have written them."""
    wanted = list(names) if names is not None else list(SPECS)
    memory: dict[str, pl.DataFrame] | None = getattr(run, "_memory_frames", None)
    if memory is None and not (run.frames_current() or run.frames_migratable()):
        built = run.manifest.get("frames") or bool(run.frame_files())
        if not _raw_files(run) and (built or not run.frames_dir.is_dir()):
            # rebuilding from nothing would replace the run's frames with empty ones
            raise RunNotFoundError(
                f"{run.path} has no current frames and no raw files to rebuild them from",
                "re-capture or re-import it (an older tracekit may still read its frames)",
            )
        key = _raw_signature(run)
        cached = _MEMORY.get(key)
        if cached is None:
            sources: list[dict[str, Any]] = []
            frames, summary = _build(run, None, sources.append)
            facts = {
                "sources": sources,
                "partial": summary["partial"],
                "import_warnings": summary["warnings"],
                "frames": {
                    "schema_version": SCHEMA_VERSION,
                    "in_memory": True,
                    "rows": {name: df.height for name, df in frames.items()},
                    "partitioned": {},
                },
            }
            if len(_MEMORY) >= _MEMORY_MAX:
                _MEMORY.pop(next(iter(_MEMORY)))
            cached = _MEMORY[key] = (frames, facts)
        memory = dict(cached[0])
        run.manifest.update(json.loads(json.dumps(cached[1], default=str)))
        run._memory_frames = memory  # type: ignore[attr-defined]
    if memory is not None:
        return {name: memory[name] if name in memory else SPECS[name].empty() for name in wanted}
    return {name: run.read_frame(name) for name in wanted}  # type: ignore[misc]


def frames_copy(run: Run, folder: Path) -> Run:
    """A scratch run in ``folder`` (a temporary folder the caller owns) holding ``run``'s frames as written files
    and its manifest: how ``bundle`` packs a run whose frames were rebuilt in memory, without writing into it."""
    frames = load_frames(run)
    copy = Run(Path(folder), json.loads(json.dumps(run.manifest, default=str)))
    copy.write_frames(frames, partition_by=PARTITION_KEY if len(run_ranks(frames)) >= 2 else None)
    copy.manifest["frames"]["in_memory"] = False
    return copy
