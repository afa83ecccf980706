"""The reader seam (analyzers/readers/): a format is one Reader behind one protocol and one line in the
registry, chosen by its first bytes; the importer opens and decompresses each file once.

A toy format (a text file starting ``#toytrace``, one kernel per line) shows that registering one reader is all
a new format takes: the import, the run's frames and ``show --json`` pick it up with no other change."""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import polars as pl
import pytest

from tracekit.analyzers import rawfiles
from tracekit.analyzers.importer import ReadJob, build, detect_kind, import_files, read_file, read_job
from tracekit.analyzers.readers import registry
from tracekit.analyzers.readers.base import Extract
from tracekit.analyzers.readers.protocol import FormatReader, Reader, ReadOptions
from tracekit.analyzers.readers.source import Source
from tracekit.analyzers.store import load_frames
from tracekit.cli import main
from tracekit.errors import StorageError, UnreadableFileError
from tracekit.frames import KERNELS

TOY = b"#toytrace\n"


class ToyReader(FormatReader):
    """``#toytrace`` then ``name,start_ns,end_ns`` per line."""

    kind = "toy"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(TOY)

    def read(self, source: Source, options: ReadOptions) -> Extract:
        rows = [line.split(",") for line in source.file().read_text().splitlines()[1:] if line]
        kernels = pl.DataFrame(
            {
                "kernel_id": list(range(len(rows))),
                "source": [source.name] * len(rows),
                "name": [r[0] for r in rows],
                "start_ns": [int(r[1]) for r in rows],
                "end_ns": [int(r[2]) for r in rows],
                "duration_ns": [int(r[2]) - int(r[1]) for r in rows],
            }
        )
        return Extract(self.kind, source.name, {"kernels": KERNELS.conform(kernels)})


_R = TypeVar("_R", bound=ToyReader)


def _registered(reader: _R) -> Iterator[_R]:
    """``reader`` registered for one test."""
    registry.register(reader, before="ncu-csv")
    try:
        yield reader
    finally:
        registry.unregister("toy")


@pytest.fixture
def toy() -> Iterator[ToyReader]:
    yield from _registered(ToyReader())


def _toy_file(path: Path) -> Path:
    path.write_bytes(TOY + b"gemm_a,100,300\nrelu,400,450\n")
    return path


def test_a_new_format_is_one_registered_reader(
    toy: ToyReader, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert isinstance(toy, Reader)  # the protocol: kind, sniff, read
    path = _toy_file(tmp_path / "trace.toy")
    assert detect_kind(path) == "toy"
    run, summary = import_files([path], tmp_path / "run")
    assert summary["imported"] == 1 and summary["rows"]["kernels"] == 2
    kernels = load_frames(run, ["kernels"])["kernels"]
    assert kernels["name"].to_list() == ["gemm_a", "relu"] and kernels["duration_ns"].to_list() == [200, 50]
    assert run.manifest["sources"][0]["kind"] == "toy"
    main(["show", str(run.path), "--json"])
    assert json.loads(capsys.readouterr().out)["kernel_count"] == 2


def test_without_its_reader_the_file_is_unknown(tmp_path: Path) -> None:
    path = _toy_file(tmp_path / "trace.toy")
    with pytest.raises(UnreadableFileError, match="is not a file tracekit reads"):
        detect_kind(path)


def test_a_compressed_file_is_sniffed_by_its_content_and_read_once(
    toy: ToyReader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An xz-compressed file is claimed from its decompressed head; the whole content is decompressed once, for
    the reader that asks for a file, and the temporary copy is gone afterwards; the frames name the content."""
    plain = _toy_file(tmp_path / "plain.toy")
    packed = tmp_path / "trace.toy.xz"
    packed.write_bytes(lzma.compress(plain.read_bytes()))
    made: list[Path] = []
    original = Source.file

    def counting(self: Source) -> Path:
        path = original(self)
        if path != self.path and path not in made:
            made.append(path)
        return path

    monkeypatch.setattr(Source, "file", counting)
    ex = read_file(packed)
    assert ex.kind == "toy" and ex.source == "trace.toy"
    assert len(made) == 1 and not made[0].exists()


def test_an_error_names_the_file_as_given_not_a_temporary_copy(tmp_path: Path) -> None:
    packed = tmp_path / "notes.txt.xz"
    packed.write_bytes(lzma.compress(b"just some text\n"))
    with pytest.raises(UnreadableFileError) as err:
        read_file(packed)
    assert str(packed) in err.value.message and "tracekit-raw-" not in err.value.message


class _Watching(ToyReader):
    """The toy reader, noting where it read each file; a file whose first line says so fails to read."""

    kind = "toy"

    def __init__(self) -> None:
        self.read_from: list[Path] = []

    def read(self, source: Source, options: ReadOptions) -> Extract:
        self.read_from.append(source.file())
        if b"broken" in source.head:
            raise UnreadableFileError(source.file(), "is broken", f"re-export {source.file()}")
        return super().read(source, options)


@pytest.fixture
def watching() -> Iterator[_Watching]:
    yield from _registered(_Watching())


def test_a_file_is_read_where_it_is_while_its_copy_into_raw_is_made(
    watching: _Watching, tmp_path: Path
) -> None:
    """The import reads each file from where it was given while one thread copies them into raw/ and hashes
    the copies; a file whose name in raw/ differs (two files of one name) is read from its copy. The record's
    sha256 and bytes are the file's, and a failure's message names the file in raw/."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _toy_file(tmp_path / "a" / "trace.toy")
    second = _toy_file(tmp_path / "b" / "trace.toy")
    broken = tmp_path / "broken.toy"
    broken.write_bytes(TOY + b"broken\n")
    run, summary = import_files([first, second, broken], tmp_path / "run")
    raw = sorted(p.name for p in run.raw_dir.iterdir())
    assert len(raw) == 3 and "trace.toy" in raw and "broken.toy" in raw
    renamed = run.raw_dir / next(n for n in raw if n not in ("trace.toy", "broken.toy"))
    assert sorted(watching.read_from) == sorted([first, renamed, broken])
    for record in run.manifest["sources"]:
        copy = run.path / record["path"]
        assert record["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
        assert record["bytes"] == copy.stat().st_size
    copy = run.raw_dir / "broken.toy"
    message = f"cannot read file: {copy}: is broken — re-export {copy}"
    assert summary["failed"] == [{"path": "raw/broken.toy", "message": message}]


def test_an_nsys_export_with_its_write_ahead_log_beside_it_is_read_from_its_copy(
    shared_data: Path, tmp_path: Path
) -> None:
    """SQLite reads a -wal file beside the database with it; the copy in raw/ has none. The import reads such a
    file from its copy, so its frames are those a rebuild of the run reads, not the log's rows too; and the
    reads leave raw/ holding the copy alone."""
    held, db = tmp_path / "writer" / "probe.sqlite", tmp_path / "probe.sqlite"
    held.parent.mkdir()
    shutil.copy(shared_data / "h200-probe" / "probe.sqlite", held)
    writer = sqlite3.connect(held)
    try:
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        before = writer.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]
        writer.execute("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS")
        writer.commit()
        # the database and its log as a writer leaves them, copied while it holds them: no connection of this
        # process stays open on what is read below
        shutil.copy(held, db)
        shutil.copy(held.with_name("probe.sqlite-wal"), tmp_path / "probe.sqlite-wal")
    finally:
        writer.close()
    assert (tmp_path / "probe.sqlite-wal").stat().st_size > 0
    assert read_file(db).frames["ranges"].height == 2 * before  # where it is: the log's rows too
    run, summary = import_files([db], tmp_path / "run")
    assert summary["rows"]["ranges"] == before
    assert build(run)[0]["ranges"].height == before  # a rebuild from raw/ reads the same
    assert [p.name for p in run.raw_dir.iterdir()] == ["probe.sqlite"]  # and leaves no -shm / -wal beside it


def test_a_copy_into_raw_that_fails_stops_the_read_with_a_storage_error(
    watching: _Watching, tmp_path: Path
) -> None:
    """A file cannot be kept (a full disk, a raw/ that is not a folder): the import stops with the copy's error
    (exit 2, nothing recorded as read), also when the file itself was read meanwhile."""
    src = _toy_file(tmp_path / "trace.toy")
    blocked = tmp_path / "raw"
    blocked.write_text("a file where raw/ belongs\n")
    job = ReadJob(0, str(src), str(blocked / "trace.toy"), "raw/trace.toy", True)
    with pytest.raises(StorageError, match="cannot copy"):
        read_job(job)
    assert watching.read_from == [src]  # read where it is; its copy failed


def test_an_import_that_stops_finishes_the_copy_under_way_and_starts_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or an error) while the files are read: the copy under way is finished, whole, and the files
    after it are not copied, so the import stops without waiting for every copy."""
    first, second = _toy_file(tmp_path / "a.toy"), _toy_file(tmp_path / "b.toy")
    jobs = [
        ReadJob(i, str(p), str(tmp_path / "raw" / p.name), f"raw/{p.name}", True)
        for i, p in enumerate([first, second])
    ]
    started, release = threading.Event(), threading.Event()
    real = rawfiles.copy_into_raw

    def held(src: Path, raw: Path, pairs: tuple = ()) -> None:  # the first copy waits until the import stops
        started.set()
        release.wait(10)
        real(src, raw, pairs)

    monkeypatch.setattr(rawfiles, "copy_into_raw", held)
    copies = rawfiles.Copies(jobs)
    assert started.wait(10)
    copies.stop()
    release.set()
    copies.join()
    assert copies.result(0) == hashlib.sha256(first.read_bytes()).hexdigest()
    assert (tmp_path / "raw" / "a.toy").read_bytes() == first.read_bytes()
    assert not (tmp_path / "raw" / "b.toy").exists()
    with pytest.raises(StorageError, match="not made"):
        copies.result(1)


def test_the_import_copies_each_file_once_it_is_read_and_hashes_the_copy(
    watching: _Watching, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import's copies are held until their file is read (copying and hashing take no core from the
    reading); each file's sha256 still reaches run.json, and a copy that fails after its file was read stops the
    import with the copy's error."""
    first, second = _toy_file(tmp_path / "a.toy"), _toy_file(tmp_path / "b.toy")
    order: list[str] = []
    real_read, real_copy = watching.read, rawfiles.copy_into_raw

    def read(source: Source, options: ReadOptions) -> Extract:
        order.append(f"read {source.file().name}")
        return real_read(source, options)

    def copy(src: Path, raw: Path, pairs: tuple = ()) -> None:
        order.append(f"copy {src.name}")
        real_copy(src, raw, pairs)

    monkeypatch.setattr(watching, "read", read)
    monkeypatch.setattr(rawfiles, "copy_into_raw", copy)
    run, _ = import_files([first, second], tmp_path / "run")
    assert order.index("copy a.toy") > order.index("read a.toy")
    assert order.index("copy b.toy") > order.index("read b.toy")
    hashes = {r["path"]: r["sha256"] for r in run.manifest["sources"]}
    assert hashes == {f"raw/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, second)}

    def full(src: Path, raw: Path, pairs: tuple = ()) -> None:
        raise StorageError(f"cannot copy {src} into raw (No space left on device)", "free disk space")

    monkeypatch.setattr(rawfiles, "copy_into_raw", full)
    with pytest.raises(StorageError, match="No space left"):
        import_files([first], tmp_path / "run2")


def test_held_copies_start_when_released_or_waited_for_and_stop_when_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held copy does not start by itself; releasing it, or waiting for it (a reader that must read the copy),
    starts it; an import that stops leaves the held ones uncopied, and the thread ends."""
    files = [_toy_file(tmp_path / f"{c}.toy") for c in "abc"]
    jobs = [
        ReadJob(i, str(p), str(tmp_path / "raw" / p.name), f"raw/{p.name}", True) for i, p in enumerate(files)
    ]
    copied: list[str] = []
    real = rawfiles.copy_into_raw

    def copy(src: Path, raw: Path, pairs: tuple = ()) -> None:
        copied.append(src.name)
        real(src, raw, pairs)

    monkeypatch.setattr(rawfiles, "copy_into_raw", copy)
    copies = rawfiles.Copies(jobs, held=True)
    copies._thread.join(0.2)
    assert copied == []  # nothing released
    copies.release(0)
    assert copies.wait(1) is None  # the first released, the second waited for
    assert copied == ["a.toy", "b.toy"]
    copies.stop()
    copies.join()
    assert copied == ["a.toy", "b.toy"] and not (tmp_path / "raw" / "c.toy").exists()
    with pytest.raises(StorageError, match="not made"):
        copies.result(2)
