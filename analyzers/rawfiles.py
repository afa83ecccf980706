"""A run's raw/ as the import fills it: which files it reads, the names they get there, their copies (made in a
thread while they are read where they are) and their sha256.

A run keeps every file it was made from in raw/, so its frames can be rebuilt from it (``import --rebuild``,
analyzers/store.py); the import copies each file there and records its size and sha256 in the run's sources.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import StorageError
from tracekit.run import atomic_path, raw_name, sha256_file

from .readers.source import COMPRESSED_SUFFIXES, plain_name

if TYPE_CHECKING:
    from .importer import ReadJob

# Files a capture leaves in raw/ that hold no frames (the program's own output is raw/program*.stdout / .stderr).
_IGNORED_SUFFIXES = (".log", ".qdstrm", ".txt", ".tmp", ".nsys-rep", ".stdout", ".stderr")


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


def raw_names(paths: list[Path]) -> list[str]:
    """The names ``Run.add_raw`` gives ``paths`` copied one after another into an empty raw/ (a name too long for
    a clash's number made safe by ``tracekit.run.raw_name``)."""
    taken: set[str] = set()
    out = []
    for p in paths:
        base = name = raw_name(p.name)
        i = 1
        while name in taken:
            stem, dot, ext = base.partition(".")
            name = f"{stem}-{i}{dot}{ext}"
            i += 1
        taken.add(name)
        out.append(name)
    return out


class Hash:
    """A file's sha256, computed in a thread while the file is read (hashlib and file reads release the GIL)."""

    def __init__(self, path: Path) -> None:
        self.value: str | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(path,), daemon=True)
        self.thread.start()

    def _run(self, path: Path) -> None:
        try:
            self.value = sha256_file(path)
        except BaseException as exc:
            self.error = exc

    def result(self) -> str:
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


def shown(text: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for absolute, given in pairs:
        text = text.replace(absolute, given)
    return text


def copy_into_raw(src: Path, raw: Path, pairs: tuple[tuple[str, str], ...] = ()) -> None:
    """Copy ``src`` to ``raw`` (a worker killed mid-copy leaves a hidden .tmp, not a short raw file)."""
    try:
        with atomic_path(raw) as tmp:
            shutil.copy2(src, tmp)
    except OSError as exc:
        raise StorageError(
            f"cannot copy {src} into {Path(shown(str(raw), pairs)).parent} ({exc.strerror or exc})",
            "free disk space (or check the folder's permissions), then retry",
        ) from exc


class Copies:
    """The files of an import copied into raw/ in order, in one thread, each then hashed (sha256) from its
    copy, while :func:`read_job` reads them where they are: the copy of a large file costs the import no
    time of its own (0.3-0.35 s of the 564 MB export in docs/PERFORMANCE.md). Each copy is
    :func:`copy_into_raw`'s.

    ``held``: a file's copy starts once :meth:`release` says its reading is done (or something waits for it),
    so that copying and hashing (0.7 CPU s at 564 MB) take no core from the reading, whose C page reader and
    polars use both; they run while the frames are settled, which leaves a core partly idle (docs/PERFORMANCE.md).
    The reading leaves the file in the page cache and the copy writes into it, so the copy runs at memory speed;
    only a file larger than the kernel lets be dirty at once (20% of memory by default) on a slow disk copies
    at the disk's speed, and then after the read rather than beside it. Holding only the hash (the copy at
    once): 1.027x the time of holding both, at 564 MB."""

    def __init__(self, jobs: list[ReadJob], *, held: bool = False) -> None:
        self._done = {job.index: threading.Event() for job in jobs}
        self._go = {job.index: threading.Event() for job in jobs}
        if not held:
            for go in self._go.values():
                go.set()
        self._value: dict[int, str | None] = {}
        self._error: dict[int, BaseException] = {}
        self._stop = threading.Event()
        # not a daemon: a copy under way when the import stops is finished (or its temporary file removed), never
        # left short in raw/
        self._thread = threading.Thread(target=self._run, args=(jobs,), name="tracekit-copies")
        self._thread.start()

    def _run(self, jobs: list[ReadJob]) -> None:
        for job in jobs:
            self._go[job.index].wait()
            if self._stop.is_set():
                self._error[job.index] = StorageError(
                    f"the copy of {job.src} was not made: the import stopped"
                )
                self._done[job.index].set()
                continue
            try:
                copy_into_raw(Path(job.src), Path(job.raw), job.shown)
                self._value[job.index] = sha256_file(Path(job.raw)) if job.read else None
            except BaseException as exc:  # the reader of that file raises it
                self._error[job.index] = exc
            self._done[job.index].set()

    def wait(self, index: int) -> BaseException | None:
        """Wait for the copy of job ``index`` (released, if it was held); what it raised, or None."""
        self.release(index)
        self._done[index].wait()
        return self._error.get(index)

    def result(self, index: int) -> str | None:
        """Wait for the copy of job ``index``: its sha256 (None for a file that is not read). Raises what the
        copy raised (StorageError for a full disk)."""
        if (error := self.wait(index)) is not None:
            raise error
        return self._value[index]

    def stop(self) -> None:
        """Copy no file after the one under way (the import stopped: Ctrl-C, or an error)."""
        self._stop.set()
        for go in self._go.values():
            go.set()

    def release(self, index: int) -> None:
        """Job ``index``'s copy may start (its reading is done)."""
        self._go[index].set()

    def join(self) -> None:
        self._thread.join()


def in_raw(message: str, here: Path, raw: Path) -> str:
    """``message`` about a file read where it was given, naming its copy in raw/ instead (as every message
    about a run's files does)."""
    if here == raw:
        return message
    spellings = sorted({str(here.resolve()), str(here.absolute()), str(here)}, key=len, reverse=True)
    # one pass (a replaced path is not replaced again), and only a whole path: not the end of a longer one
    path = re.compile(r"(?<![\w./\\-])(?:" + "|".join(map(re.escape, spellings)) + ")")
    return path.sub(lambda _: str(raw), message)
