"""The reader seam (analyzers/readers/): a format is one Reader behind one protocol and one line in the
registry, chosen by its first bytes; the importer opens and decompresses each file once.

A toy format (a text file starting ``#toytrace``, one kernel per line) shows that registering one reader is all
a new format takes: the import, the run's frames and ``show --json`` pick it up with no other change."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.importer import detect_kind, import_files, read_file
from tracekit.analyzers.readers import registry
from tracekit.analyzers.readers.base import Extract
from tracekit.analyzers.readers.protocol import FormatReader, Reader, ReadOptions
from tracekit.analyzers.readers.source import Source
from tracekit.analyzers.store import load_frames
from tracekit.cli import main
from tracekit.errors import UnreadableFileError
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


@pytest.fixture
def toy() -> ToyReader:
    reader = ToyReader()
    registry.register(reader, before="ncu-csv")
    yield reader
    registry.unregister("toy")


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
