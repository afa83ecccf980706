"""The stored Analysis: built once by ``import`` and ``capture``, kept with the run, loaded by every view.

Every read command (show, explain, report, compare, view) and ``tracekit.load(...).analyze()`` get a run's
:class:`~.model.Analysis` from :func:`load_analysis`, which never rebuilds it from the frames when a kept one
fits. An Analysis fits when its **key** is the key of the read: a digest of everything it was built from
(:class:`Inputs`):

- the frames' content: each frame file's path in the run, size and SHA-256 (recorded with the stored Analysis
  together with the file's modification time, so a read re-hashes only a file whose size or time changed: a
  copied or checked-out run, not every read of a large one); a run whose frames must be rebuilt from ``raw/``
  (older than this tracekit's frames) is keyed by its raw files' paths, sizes and times instead;
- the manifest (``run.json``, without the time the frames were built), which names the run's status, sources,
  environment and command;
- tracekit's version and the Analysis schema version;
- the options that change it: ``--device``, the calibration profile (its source and content: ``--calibration``,
  the one the run carries, or the cached one of its GPU) and how much of the step breakdown it holds.

Where it is kept (docs/ANALYSIS.md, "The stored Analysis and its cache"):

- ``RUN/analysis.msgpack``, written by ``tracekit import`` / ``capture`` / ``import --rebuild`` (the default
  options: no ``--device``, the calibration found for the run, the breakdown's top ranges). MessagePack, not
  JSON: it holds non-finite numbers exactly, and decodes in milliseconds.
- the per-user cache (``$TRACEKIT_CACHE_DIR/analyses``, else ``$XDG_CACHE_HOME/tracekit/analyses``, else
  ``~/.cache/tracekit/analyses``), one file per key, named by the key's SHA-256: where a read keeps the Analysis
  it had to build (a run from an older tracekit, other options, a bundle). A read never writes into the run.

The stored file is an envelope (:class:`Stored`: the key, its inputs, the Analysis) encoded whole: this module
knows nothing of the Analysis' fields except the run's path and name, which are the folder's as opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tracekit import __version__
from tracekit.devices import DeviceSpec
from tracekit.records import Bundle
from tracekit.run import MANIFEST, Run, atomic_path

from .model import ANALYSIS_SCHEMA_VERSION, Analysis

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "DEFAULT_BREAKDOWN",
    "STORED_FILE",
    "FileDigest",
    "Inputs",
    "Stored",
    "cache_dir",
    "load_analysis",
    "read_stored",
    "store_analysis",
]

STORED_FILE = "analysis.msgpack"
"""The stored Analysis in a run folder."""

STORE_FORMAT = 1
"""The envelope's layout (:class:`Stored`); part of the key."""

DEFAULT_BREAKDOWN = "top"
"""The step breakdown the stored Analysis holds (``build.BREAKDOWN_SCOPES``): per device and the range names
with the longest GPU windows, what show, explain and report print. ``show --all`` asks for every range name,
built and kept in the cache."""

HASH_CHUNK = 1 << 20

ZLIB_LEVEL = 6
"""The stored Analysis' compression (the largest sample's, 2.9 MB of MessagePack, takes a tenth of that)."""


class FileDigest(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One input file: its path in the run, size and SHA-256; a raw file of a run whose frames are rebuilt on
    read has no hash but its modification time (ns) instead."""

    path: str
    size: int
    sha256: str | None = None
    mtime_ns: int | None = None


class Inputs(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """What an Analysis is built from; :meth:`key` is their digest."""

    tracekit_version: str
    analysis_schema_version: int
    store_format: int
    device: str | None
    calibration_source: str | None
    calibration_sha256: str | None
    breakdown: str
    manifest_sha256: str
    files: list[FileDigest]
    frames: str = "current"
    """``current`` or ``migrated`` (frames of this or an earlier schema read from the run's files: keyed by their
    content) or ``rebuilt`` (frames rebuilt from raw/ on read: keyed by the raw files)."""

    def key(self) -> str:
        """The SHA-256 of the inputs."""
        return hashlib.sha256(msgspec.msgpack.encode(self)).hexdigest()


class Stored(msgspec.Struct, forbid_unknown_fields=False):
    """The stored file: the key, the inputs it digests, and the Analysis encoded apart (MessagePack, then zlib:
    a tenth of the size, for the samples in git), so the key is read without decoding the Analysis, and an
    Analysis of other fields (another tracekit) is only stale, not an error."""

    key: str
    inputs: Inputs
    analysis: bytes


# --- the key ------------------------------------------------------------------------------------------------------
def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _manifest_sha256(run: Run) -> str:
    """The manifest as written (``run.json`` on disk, else the in-memory one), the frames' build time left out:
    a rebuild that changes nothing else keeps the key."""
    path = run.path / MANIFEST
    try:
        manifest = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):  # a run held in memory: its typed record, as it would be written
        manifest = msgspec.to_builtins(run.record)
    if isinstance(manifest, dict):
        manifest.pop("bundle", None)  # a bundle's packing note, and where it was opened from
        frames = manifest.get("frames")
        if isinstance(frames, dict):
            manifest["frames"] = {k: v for k, v in frames.items() if k != "built_unix"}
    return hashlib.sha256(msgspec.json.encode(manifest, order="sorted")).hexdigest()


def _index_path(run: Run) -> Path:
    return cache_dir() / "files" / f"{hashlib.sha256(str(run.path.resolve()).encode()).hexdigest()}.msgpack"


def _frame_digests(run: Run) -> list[FileDigest]:
    """Every frame file by content. The hashes are remembered in the per-user cache by the file's size, time
    and inode (an index per run folder): a read re-hashes only a file that changed, was copied or checked out."""
    path = _index_path(run)
    try:
        index: dict[str, list[Any]] = msgspec.msgpack.decode(path.read_bytes(), type=dict[str, list[Any]])
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        index = {}
    out, changed = [], False
    for rel, file in run.frame_files():
        st = file.stat()
        stat = [st.st_size, st.st_mtime_ns, st.st_ino]
        seen = index.get(rel)
        if seen is not None and seen[:3] == stat and isinstance(seen[3], str):
            digest = seen[3]
        else:
            digest, changed = _sha256_file(file), True
            index[rel] = [*stat, digest]
        out.append(FileDigest(rel, st.st_size, digest))
    if changed:
        with contextlib.suppress(OSError):  # no cache: the next read hashes again
            _write_bytes(path, msgspec.msgpack.encode(index))
            _trim(path.parent)
    return out


def _raw_digests(run: Run) -> list[FileDigest]:
    """The raw files by path, size and time (frames rebuilt from them on read: hashing gigabytes of traces at
    every read would cost more than the cache saves)."""
    from ..importer import _raw_files

    out = []
    for path in sorted(_raw_files(run)):
        st = path.stat()
        out.append(FileDigest(run.relative(path), st.st_size, None, st.st_mtime_ns))
    return out


def _calibration_sha256(calibration: dict[str, Any] | None) -> str | None:
    if calibration is None:
        return None
    return hashlib.sha256(msgspec.json.encode(calibration, order="sorted")).hexdigest()


def _inputs(
    run: Run,
    *,
    device: DeviceSpec | None,
    calibration: dict[str, Any] | None,
    calibration_source: str | None,
    breakdown: str,
) -> Inputs:
    on_disk = run.frames_current() or run.frames_migratable()  # else rebuilt from raw/ on read
    return Inputs(
        tracekit_version=code_version(),
        analysis_schema_version=ANALYSIS_SCHEMA_VERSION,
        store_format=STORE_FORMAT,
        device=device.key if device is not None else None,
        calibration_source=calibration_source,
        calibration_sha256=_calibration_sha256(calibration),
        breakdown=breakdown,
        manifest_sha256=_manifest_sha256(run),
        files=_frame_digests(run) if on_disk else _raw_digests(run),
        frames="current" if run.frames_current() else "migrated" if on_disk else "rebuilt",
    )


_CODE: list[str] = []


def code_version() -> str:
    """tracekit's version, as the key holds it. Run from a source checkout (``pyproject.toml`` beside the
    packages), the version plus a digest of the packages' source and data files: a change to the code that
    builds the Analysis makes every kept one stale, though the version string stays."""
    if _CODE:
        return _CODE[0]
    import tracekit
    from tracekit import analyzers

    roots = [Path(tracekit.__file__).resolve().parent, Path(analyzers.__file__).resolve().parent]
    version = __version__
    if (roots[0].parent / "pyproject.toml").is_file():
        h = hashlib.sha256()
        for root in roots:
            for path in sorted(root.rglob("*")):
                if path.suffix in _SOURCE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                    h.update(path.relative_to(root.parent).as_posix().encode() + b"\0")
                    h.update(path.read_bytes())
        version += f"+src.{h.hexdigest()[:16]}"
    _CODE.append(version)
    return version


_SOURCE_SUFFIXES = {".py", ".json", ".csv", ".toml", ".yaml", ".yml", ".c", ".h"}


def _release(version: str) -> str:
    return version.split("+", 1)[0]


# --- where it is kept ---------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """The per-user cache of built Analyses: ``$TRACEKIT_CACHE_DIR/analyses``, else
    ``$XDG_CACHE_HOME/tracekit/analyses``, else ``~/.cache/tracekit/analyses`` (beside the opened bundles)."""
    explicit = os.environ.get("TRACEKIT_CACHE_DIR")
    if explicit:
        return Path(explicit) / "analyses"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "tracekit" / "analyses"


_HEAD = msgspec.msgpack.Decoder(Stored)
_ANALYSIS = msgspec.msgpack.Decoder(Analysis)
_ENCODER = msgspec.msgpack.Encoder()


def read_stored(path: Path) -> Stored | None:
    """The envelope at ``path`` (its Analysis still encoded: :func:`decode_analysis`); None when there is none
    or it cannot be decoded."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return _HEAD.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def decode_analysis(stored: Stored) -> Analysis | None:
    """The envelope's Analysis; None when it was written with other fields (a tracekit of another Analysis)."""
    try:
        return _ANALYSIS.decode(zlib.decompress(stored.analysis))
    except (msgspec.DecodeError, msgspec.ValidationError, zlib.error):
        return None


CACHE_KEEP = 200
"""Files the cache keeps per folder (Analyses; frame-hash indexes): a write past it removes the oldest."""


def _write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _trim(folder: Path, keep: int = CACHE_KEEP) -> None:
    """The ``keep`` most recently written files of a cache folder; older ones removed (best effort)."""
    with contextlib.suppress(OSError):
        files = [p for p in folder.iterdir() if p.suffix == ".msgpack" and p.is_file()]
        if len(files) > keep:
            files.sort(key=lambda p: p.stat().st_mtime_ns)
            for old in files[: len(files) - keep]:
                old.unlink(missing_ok=True)


def _write(path: Path, inputs: Inputs, analysis: Analysis) -> None:
    """The envelope, with the run's path in the Analysis given as its folder's name (the stored file is the same
    wherever the run was imported from: :func:`_as_opened` puts the opened path back)."""
    plain = msgspec.structs.replace(
        analysis, run=msgspec.structs.replace(analysis.run, path=analysis.run.name)
    )
    stored = Stored(inputs.key(), inputs, zlib.compress(_ENCODER.encode(plain), ZLIB_LEVEL))
    _write_bytes(path, _ENCODER.encode(stored))


def _as_opened(analysis: Analysis, run: Run) -> Analysis:
    """The Analysis with the run's path and name as opened (a run moved, copied or named another way)."""
    info = analysis.run
    if info.path == str(run.path) and info.name == run.name:
        return analysis
    return msgspec.structs.replace(
        analysis, run=msgspec.structs.replace(info, path=str(run.path), name=run.name)
    )


# --- building -----------------------------------------------------------------------------------------------------
def _device(device: str | DeviceSpec | None) -> DeviceSpec | None:
    if device is None or isinstance(device, DeviceSpec):
        return device
    from tracekit.devices import lookup_device

    return lookup_device(device)


def _calibration(
    run: Run, frames: Mapping[str, Any] | None, calibration: Path | str | dict[str, Any] | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The profile the Analysis uses and its source (:func:`tracekit.devices.find_calibration`); only the
    small ``devices`` frame is read to find it."""
    from tracekit.devices import find_calibration

    if isinstance(calibration, dict):
        return calibration, "given"
    if frames is None:
        from ..store import scan_frame

        frames = {"devices": scan_frame(run, "devices").collect()}
    return find_calibration(run, frames, calibration)


def _build(
    run: Run,
    frames: dict[str, pl.DataFrame] | None,
    device: DeviceSpec | None,
    calibration: dict[str, Any] | None,
    calibration_source: str | None,
    breakdown: str,
) -> Analysis:
    from ..store import load_frames
    from .build import analyze_frames

    analysis = analyze_frames(
        frames if frames is not None else load_frames(run),
        run=run,
        device=device,
        calibration=calibration,
        calibration_source=calibration_source,
        breakdown=breakdown,
    )
    # as a stored one decodes (a number the builders give as an int where the model says float is a float):
    # the read that builds it and the next one that loads it print the same
    return _ANALYSIS.decode(_ENCODER.encode(analysis))


def store_analysis(run: Run, frames: dict[str, pl.DataFrame] | None = None) -> Analysis:
    """Build the run's Analysis with the default options and keep it in ``RUN/analysis.msgpack`` (``import``,
    ``import --rebuild``, ``capture``: the frames just written, given in memory where the caller holds them)."""
    cal, source = _calibration(run, frames, None)
    analysis = _build(run, frames, None, cal, source, DEFAULT_BREAKDOWN)
    inputs = _inputs(
        run, device=None, calibration=cal, calibration_source=source, breakdown=DEFAULT_BREAKDOWN
    )
    _write(run.path / STORED_FILE, inputs, analysis)
    return analysis


def hint_line(run: Run) -> str:
    """What a read of a run without an Analysis stored by this tracekit says on stderr."""
    return (
        f"tracekit: {run.path} holds no analysis stored by this tracekit (one is kept in the per-user cache "
        f"instead); `tracekit import --rebuild {run.path}` stores it with the run"
    )


def load_analysis(
    run: Run,
    *,
    device: str | DeviceSpec | None = None,
    calibration: Path | str | dict[str, Any] | None = None,
    breakdown: str = DEFAULT_BREAKDOWN,
    frames: dict[str, pl.DataFrame] | None = None,
    say: Callable[[str], None] | None = None,
) -> Analysis:
    """The run's Analysis, as every view gets it: the stored one where its key is this read's, else the one in
    the per-user cache, else built now (from ``frames`` where the caller holds them) and kept in the cache. The
    run is never written. ``say`` gets one line (:func:`hint_line`) for a run folder that holds no Analysis
    stored by this tracekit's version (a run imported by an older one), where ``import --rebuild`` would store
    it."""
    spec = _device(device)
    cal, source = _calibration(run, frames, calibration)
    if not (run.path / MANIFEST).is_file():  # a raw file read in memory (tracekit.load of a file)
        return _build(run, frames, spec, cal, source, breakdown)
    own = read_stored(run.path / STORED_FILE)
    inputs = _inputs(run, device=spec, calibration=cal, calibration_source=source, breakdown=breakdown)
    key = inputs.key()
    if own is not None and own.key == key:
        analysis = decode_analysis(own)
        if analysis is not None:
            return _as_opened(analysis, run)
    if say is not None and spec is None and _older(run, own, calibration, breakdown):
        say(hint_line(run))
    cached_path = cache_dir() / f"{key}.msgpack"
    cached = read_stored(cached_path)
    if cached is not None and cached.key == key:
        analysis = decode_analysis(cached)
        if analysis is not None:
            return _as_opened(analysis, run)
    analysis = _build(run, frames, spec, cal, source, breakdown)
    with contextlib.suppress(OSError):  # a read-only or full home: the Analysis is built again next time
        _write(cached_path, inputs, analysis)
        _trim(cached_path.parent)
    return analysis


def _older(
    run: Run, own: Stored | None, calibration: Path | str | dict[str, Any] | None, breakdown: str
) -> bool:
    """Whether the read should say how to store the Analysis: a run folder (not an opened bundle) read with the
    default options whose stored Analysis is missing or was written by another version of tracekit or of the
    Analysis (a rebuild stores it). One whose frames changed since, or written by this version from other
    source files (a development checkout), is rebuilt into the cache without a word."""
    bundle = run.record.bundle
    if isinstance(bundle, Bundle) and bundle.opened_from:
        return False
    if calibration is not None or breakdown != DEFAULT_BREAKDOWN:
        return False
    if own is None:
        return True
    was = own.inputs
    return (
        _release(was.tracekit_version) != __version__
        or was.analysis_schema_version != ANALYSIS_SCHEMA_VERSION
        or was.store_format != STORE_FORMAT
    )
