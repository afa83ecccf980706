"""The run directory: one folder per capture, self-describing and safe to share.

Layout::

    RUN/
      run.json          manifest (format, schema version, command, environment, capture settings, sources, status)
      raw/              the tools' own files, untouched (.ncu-rep, .sqlite, .json.gz, ranges.jsonl, failures.jsonl)
      frames/           polars frames as parquet, rebuilt from raw/ when missing or older than SCHEMA_VERSION:
                        frames/<name>.parquet, or for a run of several distributed ranks the frames that have a
                        ``rank`` column partitioned hive-style, frames/<name>/rank=<r>/part-0.parquet (the rank
                        lives in the folder name, not in the file), so a fleet of runs scans lazily with
                        ``polars.scan_parquet(..., hive_partitioning=True)``, DuckDB or Spark (docs/RANKS.md)

Every write is atomic (a temporary file in the same folder, then ``os.replace``), so a crash or Ctrl-C never
leaves a half-written manifest or frame. Nothing is pickled: parquet and JSON only. Code reads the manifest as its
typed record, :attr:`Run.record` (tracekit/records.py ``RunRecord``), and changes it through ``Run``'s methods
(:meth:`Run.set_environment`, :meth:`Run.set_passes`, :meth:`Run.set_sources`, :meth:`Run.set_frames`,
:meth:`Run.mark_partial`, :meth:`Run.mark`, :meth:`Run.log` ...), each checking what it is given through the record.
The run keeps the manifest's own JSON beside the record, so a read-modify-write leaves run.json as it was apart
from the change: key order, nulls and keys this tracekit does not know (a newer or foreign writer's) are kept. A
field of the wrong type is refused in one line. This module says where each frame's files lie and whether they
are current; reading and writing them is the frames store's (analyzers/store.py): this module imports no polars,
so collectors create runs where polars is absent.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from tracekit._version import MIGRATES_FROM, SCHEMA_VERSION, __version__
from tracekit.errors import RunNotFoundError, SchemaError, StorageError
from tracekit.records import (
    Bundle,
    CapturePass,
    Environment,
    FramesInfo,
    RecordError,
    RunRecord,
    Source,
    check_manifest,
    decode_json,
    encode_manifest,
)
from tracekit.schema import SCHEMAS

MANIFEST = "run.json"
FORMAT = "tracekit-run"

PARTITION_KEY = "rank"
"""The only partition key: frames of a multi-rank run are written one folder per rank."""
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
"""The folder name of rows whose key is null (Hive's, and what polars, DuckDB and Spark read as null)."""
PART_FILE = "part-0.parquet"
"""The one file of each partition folder."""

STATUS_CAPTURING = "capturing"
STATUS_COMPLETE = "complete"
STATUS_INCOMPLETE = "incomplete"


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target`` in one rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def storage_error(target: Path, exc: BaseException) -> StorageError:
    """The StorageError of a failed write of ``target``."""
    detail = getattr(exc, "strerror", None) or str(exc)
    return StorageError(
        f"cannot write {target} ({detail})",
        "free disk space (or check the folder's permissions and size limits), then retry",
    )


def write_json_atomic(target: Path, obj: Any) -> None:
    """Write ``obj`` as JSON in one rename; a full disk raises StorageError and leaves the old file intact."""
    try:
        with atomic_path(target) as tmp:
            tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str, allow_nan=False) + "\n")
    except OSError as exc:
        raise storage_error(target, exc) from exc


def sha256_file(path: Path, limit: int | None = None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_Part = TypeVar("_Part", bound=msgspec.Struct)


def _plain(value: msgspec.Struct | Mapping[str, Any], record: type[_Part], what: str) -> dict[str, Any]:
    """``value`` as run.json holds it, checked through ``record``: a record encoded (its defaults left out, as
    its type says), a mapping copied as plain data in its own key order, nulls kept. Raises SchemaError (a
    tracekit bug: the caller built it) on a field of the wrong type."""
    plain = msgspec.to_builtins(value, enc_hook=str)
    try:
        msgspec.convert(plain, record, strict=False)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"cannot record the run's {what}: {exc}", "report this as a tracekit bug") from exc
    return plain


def new_run_name(label: str = "run") -> str:
    """A name unique even for two captures started in the same second: time, label, random suffix. The label
    comes from a file or program name: :func:`tracekit.slug.slug` bounds it and makes it safe."""
    from tracekit.slug import slug

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{slug(label, limit=40, lower=False, empty='run')}-{secrets.token_hex(3)}"


RAW_NAME_BYTES = 200
"""The longest name a file keeps in raw/ (of the 255 bytes a component may have: room for a clash's number)."""


def raw_name(name: str) -> str:
    """``name`` as the name of a file in raw/: unchanged where it is at most :data:`RAW_NAME_BYTES` bytes with
    no control character or separator; else :func:`tracekit.slug.slug` of it, keeping up to two short suffixes
    (``.json.gz``, ``.sqlite``) by which the importer knows the format."""
    from tracekit.slug import slug

    if len(name.encode("utf-8", "surrogateescape")) <= RAW_NAME_BYTES and not re.search(
        r"[\x00-\x1f\x7f/\\]", name
    ):
        return name
    parts = name.split(".")
    suffixes: list[str] = []
    while len(parts) > 1 and len(suffixes) < 2 and re.fullmatch(r"[A-Za-z0-9-]{1,12}", parts[-1]):
        suffixes.insert(0, parts.pop())
    return ".".join([slug(".".join(parts), lower=False, empty="file"), *suffixes])


class Run:
    """A run directory on disk. Create with :meth:`create`, open with :meth:`open`. Read its manifest as
    :attr:`record`; change it through the methods of the manifest section (in memory, then :meth:`save`;
    :meth:`log`, :meth:`mark` and :meth:`add_source` save at once)."""

    def __init__(self, path: Path, manifest: dict[str, Any], record: RunRecord | None = None) -> None:
        """A run at ``path`` whose manifest is ``manifest`` (run.json's plain data, kept as given: the run
        owns it from here on); ``record`` its typed record where the caller checked it already."""
        self.path = path
        self._manifest = manifest
        self._record = record

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: Path | str,
        *,
        command: list[str] | None = None,
        capture: dict[str, Any] | None = None,
        environment: dict[str, Any] | None = None,
        status: str = STATUS_COMPLETE,
        exist_ok: bool = False,
    ) -> Run:
        """Make a new run folder (refusing to reuse a non-empty one unless ``exist_ok``)."""
        path = Path(path)
        if path.exists() and any(path.iterdir()) and not exist_ok:
            raise RunNotFoundError(
                f"{path} already exists and is not empty", "choose another -o path or remove it first"
            )
        (path / "raw").mkdir(parents=True, exist_ok=True)
        (path / "frames").mkdir(exist_ok=True)
        now = time.time()
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "tracekit_version": __version__,
            "created_unix": now,
            "created": _dt.datetime.fromtimestamp(now, _dt.UTC).isoformat(timespec="seconds"),
            "command": command,
            "status": status,
            "incomplete_reason": None,
            "environment": environment or {},
            "capture": capture or {},
            "sources": [],
            "frames": None,
            "events": [],
        }
        try:
            manifest = encode_manifest(manifest)
        except RecordError as exc:
            raise SchemaError(f"cannot record the run: {exc}", "report this as a tracekit bug") from exc
        run = cls(path, manifest)
        run.save()
        return run

    @classmethod
    def in_memory(cls, path: Path | str, *, imported_from: Sequence[str]) -> Run:
        """A run that lives only in memory (``tracekit.load`` of a raw file: its path is the file's, nothing is
        written): complete, its capture naming ``imported_from``; its sources set by the caller."""
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "status": STATUS_COMPLETE,
            "capture": {"imported_from": [str(p) for p in imported_from]},
        }
        return cls(Path(path), manifest)

    def moved(self, path: Path | str) -> Run:
        """This run's manifest (a copy) at another folder, nothing written: a scratch copy (``bundle`` packs a run
        whose frames were rebuilt in memory through one)."""
        return Run(Path(path), json.loads(json.dumps(self._manifest, default=str)), self._record)

    @classmethod
    def open(cls, path: Path | str) -> Run:
        """Open an existing run folder, checking its manifest."""
        path = Path(path)
        mpath = path / MANIFEST
        if not path.exists():
            raise RunNotFoundError(
                f"{path} does not exist", "give a run folder made by tracekit capture/import"
            )
        if not mpath.is_file():
            raise RunNotFoundError(
                f"{path} is not a tracekit run (no {MANIFEST})",
                "make one with `tracekit import FILE... -o RUN` or `tracekit capture`",
            )
        try:
            manifest = decode_json(mpath.read_bytes())
        except OSError as exc:
            raise SchemaError(f"{mpath} cannot be read ({exc})", "check the file's permissions") from exc
        except RecordError as exc:
            raise SchemaError(f"{mpath} is {exc}", "re-import the raw files into a new run") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise SchemaError(f"{mpath} is not a tracekit manifest", "re-import the raw files into a new run")
        version = manifest.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise SchemaError(
                f"{path} has schema version {version!r}; this tracekit reads up to {SCHEMA_VERSION}",
                "upgrade tracekit (pip install -U tracekit)",
            )
        try:
            record = check_manifest(manifest)
        except RecordError as exc:
            raise SchemaError(f"{mpath}: {exc}", "re-import the raw files into a new run") from exc
        return cls(path, manifest, record)

    # -- paths ---------------------------------------------------------------------------------------------
    @property
    def raw_dir(self) -> Path:
        return self.path / "raw"

    @property
    def frames_dir(self) -> Path:
        return self.path / "frames"

    @property
    def name(self) -> str:
        """The run's name: its folder's, or for a bundle opened into the cache (a folder named by the zip's
        hash) the name of the run it was packed from."""
        bundle = self.record.bundle
        if isinstance(bundle, Bundle) and bundle.from_ and bundle.from_.strip():
            return bundle.from_
        return self.path.name

    @property
    def status(self) -> str:
        return self.record.status

    # -- manifest ------------------------------------------------------------------------------------------
    @property
    def record(self) -> RunRecord:
        """The manifest as a typed record (tracekit/records.py): environment, capture and its passes, sources,
        frames, bundle. Frozen: change the manifest through this class's methods."""
        if self._record is None:
            try:
                self._record = check_manifest(self._manifest)
            except RecordError as exc:
                raise SchemaError(
                    f"{self.path / MANIFEST}: {exc}", "re-import the raw files into a new run"
                ) from exc
        return self._record

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest as plain JSON data, as run.json holds it (keys this tracekit does not know
        included): for the Python API (``tracekit.Run.manifest``) and tests. Code reads :attr:`record`;
        changing the copy changes nothing."""
        return json.loads(json.dumps(self._manifest, default=str))

    def _set(self, key: str, value: Any) -> None:
        """Set one top-level key of the manifest (in memory; a new key goes last, as a dict keeps it)."""
        self._manifest[key] = value
        self._record = None

    def set_environment(self, environment: Environment | Mapping[str, Any]) -> None:
        """Record the environment fingerprint (collectors/env.py), as given (its keys' order and nulls kept)."""
        self._set("environment", _plain(environment, Environment, "environment"))

    def set_passes(self, passes: Sequence[CapturePass]) -> None:
        """Record the capture's passes so far (``capture.passes``), replacing those recorded."""
        capture = self._manifest.get("capture")
        capture = dict(capture) if isinstance(capture, dict) else {}
        capture["passes"] = [_plain(p, CapturePass, "capture pass") for p in passes]
        self._set("capture", capture)

    def set_sources(self, sources: Sequence[Source | Mapping[str, Any]]) -> None:
        """Record the run's raw files (``sources``) as the import read them, replacing those recorded."""
        self._set("sources", [_plain(s, Source, "source") for s in sources])

    def set_frames(self, frames: FramesInfo) -> None:
        """Record the frames the run holds (``frames``: schema version, rows, partitioned, in memory)."""
        self._set("frames", _plain(frames, FramesInfo, "frames"))

    def mark_partial(self, partial: bool, warnings: Sequence[str]) -> None:
        """Record how an import went: ``partial`` (a file failed or was cut short) and its warnings."""
        self._set("partial", bool(partial))
        self._set("import_warnings", [str(w) for w in warnings])

    def note_opened_from(self, bundle: Path | str) -> None:
        """Note the zip this run was opened from (``bundle.opened_from``, in memory only: reports name it)."""
        held = self._manifest.get("bundle")
        held = dict(held) if isinstance(held, dict) else {}
        held["opened_from"] = str(bundle)
        self._set("bundle", held)

    def bundled_manifest(self, bundle: Bundle) -> dict[str, Any]:
        """The manifest a bundle of this run holds (plain data): this run's, its ``bundle`` key replaced by
        ``bundle`` (last: a bundle of a run opened from a bundle says where it came from)."""
        manifest = self.manifest
        manifest.pop("bundle", None)
        manifest["bundle"] = _plain(bundle, Bundle, "bundle")
        return manifest

    def save(self) -> None:
        """Write the manifest, checked through :class:`RunRecord` (unknown keys kept), in one rename."""
        try:
            manifest = encode_manifest(self._manifest)
        except RecordError as exc:
            raise SchemaError(
                f"cannot save {self.path / MANIFEST}: {exc}", "report this as a tracekit bug"
            ) from exc
        write_json_atomic(self.path / MANIFEST, manifest)

    def log(self, phase: str, message: str, **extra: Any) -> None:
        """Append a timestamped event to the manifest (and save), so an interrupted capture says how far it got."""
        self._manifest.setdefault("events", []).append(
            {"time_unix": time.time(), "phase": phase, "message": message, **extra}
        )  # in place: a sweep logs thousands of steps (the save checks the event through the record)
        self._record = None
        self.save()

    def mark(self, status: str, reason: str | None = None) -> None:
        """Record the run's status and why it is incomplete (and save)."""
        self._set("status", status)
        self._set("incomplete_reason", reason)
        self.save()

    def add_source(self, record: Source | Mapping[str, Any]) -> None:
        """Record one raw file (``path`` relative to the run) with its kind and import status (and save)."""
        plain = _plain(record, Source, "source")
        sources = self._manifest.get("sources")
        kept = [s for s in sources if s.get("path") != plain.get("path")] if isinstance(sources, list) else []
        self._set("sources", [*kept, plain])
        self.save()

    def add_raw(self, src: Path, *, name: str | None = None, move: bool = False) -> Path:
        """Copy (or move) a file into raw/, never overwriting: a clash gets a numbered name. A name too long to
        take a number, or with control characters, is made safe first (:func:`raw_name`)."""
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        base = raw_name(name or src.name)
        target = self.raw_dir / base
        i = 1
        while target.exists():
            stem, dot, ext = base.partition(".")
            target = self.raw_dir / f"{stem}-{i}{dot}{ext}"
            i += 1
        if move:
            shutil.move(str(src), target)
        else:
            shutil.copy2(src, target)
        return target

    def relative(self, path: Path) -> str:
        return path.resolve().relative_to(self.path.resolve()).as_posix()

    # -- frames --------------------------------------------------------------------------------------------
    def frame_path(self, name: str) -> Path:
        """Where an unpartitioned frame lives: ``frames/<name>.parquet``."""
        return self.frames_dir / f"{name}.parquet"

    def frame_dir(self, name: str) -> Path:
        """Where a partitioned frame lives: ``frames/<name>/<key>=<value>/part-0.parquet``."""
        return self.frames_dir / name

    def frame_layout(self, name: str) -> str | None:
        """``file``, ``partitioned`` or None (no such frame on disk). The manifest's word wins when both exist
        (a rebuild that switched layouts was interrupted between its two steps)."""
        has_file, has_dir = self.frame_path(name).is_file(), self.frame_dir(name).is_dir()
        if has_file and has_dir:
            frames = self.record.frames
            said = frames is not None and bool((frames.partitioned or {}).get(name))
            return "partitioned" if said else "file"
        return "file" if has_file else "partitioned" if has_dir else None

    def frame_files(self) -> list[tuple[str, Path]]:
        """Every frame file as (path relative to the run, absolute path), both layouts, sorted."""
        out: list[tuple[str, Path]] = []
        for name in SCHEMAS:
            layout = self.frame_layout(name)
            if layout == "file":
                out.append((f"frames/{name}.parquet", self.frame_path(name)))
            elif layout == "partitioned":
                for p in sorted(self.frame_dir(name).glob("*=*/*.parquet")):
                    if not any(part.startswith(".") for part in p.relative_to(self.frames_dir).parts):
                        out.append((p.relative_to(self.path).as_posix(), p))
        return sorted(out)

    def frames_current(self) -> bool:
        """The frames on disk are of this tracekit's schema version, and all there."""
        return self.frames_version() == SCHEMA_VERSION

    def frames_migratable(self) -> bool:
        """The frames on disk are of an earlier version that the frames store migrates on read (their JSON
        text columns decoded into nested ones, in memory), and all there: they need no rebuild from raw/."""
        return self.frames_version() in MIGRATES_FROM

    def frames_version(self) -> int | None:
        """The schema version of the frames on disk, None when the manifest names none or a frame it lists is
        missing."""
        info = self.record.frames
        if info is None or not isinstance(info.schema_version, int):
            return None
        return (
            info.schema_version if all(self.frame_layout(n) is not None for n in (info.rows or {})) else None
        )
