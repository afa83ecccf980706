"""Bundles: a run packed into one zip file to attach to a ticket, and opened safely from a stranger.

A bundle holds ``run.json``, the frames (``frames/<name>.parquet``, or partitioned by rank) and, when made with ``raw=True``, ``raw/...`` (the tools'
own files). :func:`open_bundle` extracts it into a private cache folder (``$TRACEKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/tracekit``, else ``~/.cache/tracekit``; then ``bundles/<sha256 of the zip>``) and returns the
:class:`~tracekit.run.Run` there, so every command that takes a run takes a bundle too.

Opening never executes anything (JSON and parquet only, no pickles) and writes nothing outside its target. Before
a single byte is written, every member is checked; a bundle is refused, with one line saying why, when a member

- has an absolute path, a drive letter, a backslash, a ``..`` / ``.`` / empty component or a control character
  (:data:`tracekit.text.CONTROL`: C0, DEL or C1);
- is a symlink or another special file (zip external attributes), is encrypted or uses an unknown compression;
- repeats another member's name (also when they differ only in case: they collide on macOS / Windows);
- is not one of the expected members (``run.json``, ``frames/<known frame>.parquet`` or, for a multi-rank run,
  ``frames/<known frame>/rank=<r>/part-<n>.parquet``, ``raw/...``);
- or the bundle is implausibly large: too many members, a member or total too big, or a compression ratio that
  only a decompression bomb has (see :class:`Limits`). Sizes are enforced while extracting too, not only as
  declared in the zip's directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import BadInputError, SchemaError
from tracekit.records import Bundle
from tracekit.run import MANIFEST, Run, atomic_path
from tracekit.text import has_control

__all__ = ["Limits", "bundle_cache_dir", "check_members", "open_bundle", "write_bundle"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Limits:
    """What a bundle may hold. Raw Nsight reports reach hundreds of MB and compress 3-20x; parquet hardly
    compresses; a ratio above ``max_ratio`` on a member over ``ratio_floor_bytes`` is a decompression bomb."""

    max_members: int = 10_000
    max_member_bytes: int = 8 * GiB
    max_total_bytes: int = 16 * GiB
    max_manifest_bytes: int = 16 * MiB
    max_ratio: float = 200.0
    ratio_floor_bytes: int = 1 * MiB
    max_depth: int = 6


DEFAULT_LIMITS = Limits()
_DRIVE = re.compile(r"^[A-Za-z]:")
_FRAME_MEMBER = re.compile(
    r"^frames/([a-z][a-z0-9_]*)(?:\.parquet|/rank=(?:-?\d{1,9}|__HIVE_DEFAULT_PARTITION__)/part-\d{1,6}\.parquet)$"
)
"""A frame file: ``frames/<name>.parquet``, or one rank's part of a partitioned frame (tracekit/run.py)."""
_FRAME_DIR = re.compile(r"^frames/([a-z][a-z0-9_]*)/(?:rank=(?:-?\d{1,9}|__HIVE_DEFAULT_PARTITION__)/)?$")
_OK_COMPRESSION = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # bundles of the same run are byte-identical


def _refuse(bundle: Path, message: str, hint: str | None = None) -> BadInputError:
    return BadInputError(f"bundle {bundle}: {message}", hint or "ask for a bundle made by `tracekit bundle`")


def _shown(name: str) -> str:
    return repr(name)[1:-1][:200]


# --- checking --------------------------------------------------------------------------------------------------
def _check_name(bundle: Path, name: str, limits: Limits) -> str | None:
    """Why ``name`` is not an acceptable member path, or None when it is."""
    if has_control(name):
        return f"member '{_shown(name)}' has a control character in its name"
    if "\\" in name:
        return f"member '{_shown(name)}' has a backslash in its name"
    if name.startswith("/"):
        return f"member '{_shown(name)}' has an absolute path"
    if _DRIVE.match(name):
        return f"member '{_shown(name)}' has a drive letter"
    parts = name.rstrip("/").split("/") if name.endswith("/") else name.split("/")
    if any(p == ".." for p in parts):
        return f"member '{_shown(name)}' climbs out of the bundle (path traversal with '..')"
    if any(p in ("", ".") for p in parts):
        return f"member '{_shown(name)}' has an empty or '.' path component"
    if any(":" in p for p in parts):
        return f"member '{_shown(name)}' has a ':' in its name"
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts):
        return f"member '{_shown(name)}' has a path component longer than 255 bytes"
    if len(parts) > limits.max_depth:
        return f"member '{_shown(name)}' is nested deeper than {limits.max_depth} folders"
    return None


def _expected(name: str, is_dir: bool) -> bool:
    from tracekit.frames import SPECS

    if is_dir:
        if (m := _FRAME_DIR.match(name)) is not None:
            return m.group(1) in SPECS
        return name in ("frames/", "raw/") or (name.startswith("raw/") and not name[4:].startswith("."))
    if name == MANIFEST:
        return True
    m = _FRAME_MEMBER.match(name)
    if m:
        return m.group(1) in SPECS
    if name.startswith("raw/"):
        return all(not p.startswith(".") for p in name[4:].split("/"))
    return False


def check_members(
    bundle: Path, zf: zipfile.ZipFile, limits: Limits = DEFAULT_LIMITS
) -> list[zipfile.ZipInfo]:
    """Every member of ``zf`` checked (see the module docstring); returns the files to extract, or raises
    BadInputError naming the first problem. Nothing is read or written."""
    infos = zf.infolist()
    if len(infos) > limits.max_members:
        raise _refuse(bundle, f"has {len(infos)} members, more than the {limits.max_members} a run has")
    seen: dict[str, str] = {}
    files: list[zipfile.ZipInfo] = []
    total = 0
    for info in infos:
        name = info.filename
        why = _check_name(bundle, name, limits)
        if why:
            raise _refuse(bundle, why)
        folded = name.casefold()
        if folded in seen:
            same = seen[folded] == name
            raise _refuse(
                bundle,
                f"member '{_shown(name)}' appears twice"
                + ("" if same else f" (as '{_shown(seen[folded])}', differing only in case)"),
            )
        seen[folded] = name
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        is_dir = info.is_dir()
        if kind == stat.S_IFLNK:
            raise _refuse(bundle, f"member '{_shown(name)}' is a symbolic link")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise _refuse(bundle, f"member '{_shown(name)}' is a special file (mode {oct(mode)})")
        if (kind == stat.S_IFDIR) != is_dir and kind != 0:
            raise _refuse(bundle, f"member '{_shown(name)}' is marked both a folder and a file")
        if not _expected(name, is_dir):
            raise _refuse(
                bundle,
                f"member '{_shown(name)}' is not part of a tracekit run "
                "(expected run.json, frames/<frame>.parquet, raw/...)",
            )
        if info.flag_bits & 0x1:
            raise _refuse(bundle, f"member '{_shown(name)}' is encrypted")
        if info.compress_type not in _OK_COMPRESSION:
            raise _refuse(
                bundle,
                f"member '{_shown(name)}' uses compression method {info.compress_type} (not stored/deflate)",
            )
        if is_dir:
            continue
        size = info.file_size
        if size > limits.max_member_bytes:
            raise _refuse(
                bundle,
                f"member '{_shown(name)}' would unpack to {size:,} bytes, over the {limits.max_member_bytes:,} "
                "byte limit",
            )
        if name == MANIFEST and size > limits.max_manifest_bytes:
            raise _refuse(bundle, f"run.json would unpack to {size:,} bytes; a manifest is a few KB")
        if size > limits.ratio_floor_bytes and size > limits.max_ratio * max(info.compress_size, 1):
            ratio = size / max(info.compress_size, 1)
            raise _refuse(
                bundle,
                f"member '{_shown(name)}' expands {ratio:,.0f}x ({info.compress_size:,} -> {size:,} bytes): "
                "a decompression bomb, not profiler data",
            )
        total += size
        if total > limits.max_total_bytes:
            raise _refuse(bundle, f"would unpack to more than {limits.max_total_bytes:,} bytes in all")
        files.append(info)
    if MANIFEST not in seen.values():
        raise _refuse(bundle, "has no run.json", "make bundles with `tracekit bundle RUN -o FILE.zip`")
    return files


# --- opening -------------------------------------------------------------------------------------------------------
def bundle_cache_dir() -> Path:
    """Where opened bundles are extracted: $TRACEKIT_CACHE_DIR, $XDG_CACHE_HOME/tracekit or ~/.cache/tracekit."""
    explicit = os.environ.get("TRACEKIT_CACHE_DIR")
    if explicit:
        return Path(explicit) / "bundles"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "tracekit" / "bundles"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _extract(
    bundle: Path, zf: zipfile.ZipFile, files: list[zipfile.ZipInfo], root: Path, limits: Limits
) -> None:
    """Write ``files`` under ``root`` (a fresh folder), never following links and never beyond declared sizes."""
    root_real = root.resolve()
    total = 0
    for info in files:
        target = root / info.filename
        parent = target.parent
        parent.mkdir(parents=True, exist_ok=True)
        if not parent.resolve().is_relative_to(root_real):
            raise _refuse(bundle, f"member '{_shown(info.filename)}' resolves outside the bundle folder")
        flags = (
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        )
        fd = os.open(target, flags, 0o600)
        written = 0
        with os.fdopen(fd, "wb") as out, zf.open(info) as src:
            while chunk := src.read(1 << 20):
                written += len(chunk)
                total += len(chunk)
                if written > info.file_size or written > limits.max_member_bytes:
                    raise _refuse(
                        bundle, f"member '{_shown(info.filename)}' unpacks to more than it declares"
                    )
                if total > limits.max_total_bytes:
                    raise _refuse(
                        bundle, f"would unpack to more than {limits.max_total_bytes:,} bytes in all"
                    )
                out.write(chunk)


def open_bundle(path: Path | str, *, cache_dir: Path | None = None, limits: Limits = DEFAULT_LIMITS) -> Run:
    """Check and extract a bundle into the private cache (once per distinct file) and open the run in it."""
    bundle = Path(path)
    if not bundle.is_file():
        raise BadInputError(f"bundle {bundle} does not exist", "check the path")
    cache = cache_dir if cache_dir is not None else bundle_cache_dir()
    digest = _sha256(bundle)
    final = cache / digest[:32]
    if not (final / MANIFEST).is_file():
        try:
            zf = zipfile.ZipFile(bundle)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
            raise _refuse(bundle, f"is not a readable zip file ({exc})") from exc
        with zf:
            files = check_members(bundle, zf, limits)
            cache.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}.", dir=cache))
            try:
                _extract(bundle, zf, files, tmp, limits)
                _check_run(bundle, tmp)
                try:
                    os.rename(tmp, final)
                except OSError:
                    if not (final / MANIFEST).is_file():  # not a concurrent opener that won the race
                        raise
            except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError) as exc:
                raise _refuse(bundle, f"is damaged ({type(exc).__name__}: {exc})") from exc
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
    run = Run.open(final)
    run.note_opened_from(bundle)
    return run


def _check_run(bundle: Path, root: Path) -> None:
    try:
        run = Run.open(root)
    except SchemaError as exc:
        raise _refuse(bundle, f"its run.json cannot be used: {exc.message}", exc.hint) from exc
    has_raw = (root / "raw").is_dir() and any(p.is_file() for p in (root / "raw").rglob("*"))
    if not (run.frames_current() or run.frames_migratable()) and not has_raw:
        raise SchemaError(
            f"bundle {bundle} holds frames of another schema version and no raw files to rebuild them from",
            "ask for a bundle made with `tracekit bundle --raw`, or one made by this tracekit version",
        )


# --- writing -------------------------------------------------------------------------------------------------------
def _member_info(name: str, compress: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
    info.compress_type = compress
    info.create_system = 3
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    return info


def _raw_members(run: Run, warnings: list[str]) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    if not run.raw_dir.is_dir():
        return out
    for p in sorted(run.raw_dir.rglob("*")):
        rel = "raw/" + p.relative_to(run.raw_dir).as_posix()
        if p.is_symlink():
            warnings.append(f"{rel}: a symbolic link, left out")
            continue
        if not p.is_file():
            continue
        if any(part.startswith(".") for part in rel.split("/")):
            continue  # temporary files of an interrupted write
        if _check_name(Path(run.path), rel, DEFAULT_LIMITS) or not _expected(rel, False):
            warnings.append(f"{rel}: a name a bundle cannot hold, left out")
            continue
        out.append((rel, p))
    return out


def _write_zip(out: Path, manifest: dict[str, Any], members: list[tuple[str, Path]]) -> None:
    """The zip itself, written atomically: run.json first, then ``members`` (name in the zip, file) in order."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
        zf.writestr(
            _member_info(MANIFEST, zipfile.ZIP_DEFLATED),
            json.dumps(manifest, indent=2, allow_nan=False) + "\n",
        )
        for name, src in members:
            # parquet is already zstd-compressed; everything else deflates well
            compress = zipfile.ZIP_STORED if name.endswith(".parquet") else zipfile.ZIP_DEFLATED
            info = _member_info(name, compress)
            info.file_size = src.stat().st_size
            with src.open("rb") as f, zf.open(info, "w", force_zip64=info.file_size > 2 * GiB) as dst:
                shutil.copyfileobj(f, dst, 1 << 20)


def write_bundle(
    run: Run,
    out: Path | str,
    *,
    raw: bool = False,
    make_current: Callable[[Run, Path], Run] | None = None,
) -> dict[str, Any]:
    """Pack ``run`` (manifest and frames; with ``raw`` also raw/) into the zip ``out``.

    A bundle without raw/ cannot rebuild its frames, so the frames packed must be current (or of the previous
    version, which every reader migrates on read: tracekit/frames.py ``migrate``). ``make_current``,
    given the run and a scratch folder, returns a run whose frames on disk are current: the run itself, or a
    copy in the scratch folder with frames rebuilt from raw/ (never written into the run). The CLI passes
    :func:`tracekit.commands.bundle.current_frames` (the analyzers' rebuild: this module imports no analyzers);
    without it the run's own frames must be current, else :class:`SchemaError`.

    Returns ``{"path", "members", "bytes", "raw", "warnings"}``. The zip is written atomically and is identical
    for identical runs (fixed timestamps and order)."""
    out = Path(out)
    if out.suffix.lower() != ".zip":
        raise BadInputError(f"{out}: a bundle's name must end in .zip", "e.g. -o ticket-1234.zip")
    if out.absolute().resolve().is_relative_to(run.path.absolute().resolve()):
        raise BadInputError(
            f"{out} is inside the run it would pack", "write the bundle outside the run folder"
        )
    with tempfile.TemporaryDirectory(prefix="tracekit-bundle-") as scratch:
        packed = make_current(run, Path(scratch)) if make_current is not None else run
        readable = (
            packed.frames_current() or packed.frames_migratable()
        )  # the previous version migrates on read
        if not readable or (packed.record.frames is not None and packed.record.frames.in_memory):
            raise SchemaError(
                f"the frames of {run.path} are missing or older than this tracekit's schema",
                f"bundle it with `tracekit bundle {run.path} -o FILE.zip`, which rebuilds them from raw/",
            )
        warnings: list[str] = []
        members = [(rel, p) for rel, p in packed.frame_files() if _FRAME_MEMBER.match(rel)]
        if raw:
            members += _raw_members(run, warnings)
        manifest = packed.bundled_manifest(Bundle(from_=run.name, raw=raw))
        _write_zip(out, manifest, members)
    return {
        "path": str(out),
        "members": 1 + len(members),
        "bytes": out.stat().st_size,
        "raw": raw,
        "warnings": warnings,
    }
