"""Progress of long reads: the Kineto reader reports how much of the text it has decoded, and ``import`` turns
that into a line every few seconds (a 2 GB trace takes 12 s on two cores)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tracekit.analyzers import importer
from tracekit.analyzers.readers.base import reporting_progress
from tracekit.analyzers.readers.kineto.reader import read_kineto

DF_INDEX = "thirdparty/hta/df_index_resolver__df_index_resolver.json.gz"


@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize("workers", [1, 2])
def test_the_kineto_reader_reports_its_progress(
    shared_data: Path, tmp_path: Path, plain: bool, workers: int
) -> None:
    src = shared_data / DF_INDEX
    text = gzip.decompress(src.read_bytes())
    path = src
    if plain:
        path = tmp_path / "t.json"
        path.write_bytes(text)
    seen: list[tuple[int, int]] = []
    with reporting_progress(lambda done, total: seen.append((done, total))):
        ex = read_kineto(path, workers=workers, chunk_bytes=4 << 20)
    assert ex.frame("kernels").height == 19370
    assert len(seen) >= 10  # one report per chunk of 4 MB
    dones = [d for d, _ in seen]
    assert dones == sorted(dones) and dones[-1] == len(text)
    assert all(total >= done for done, total in seen)
    assert seen[-1][1] == len(text)  # the estimate is exact at the end
    if not plain:  # compressed: estimated from the share of the file read, close from the first chunk on
        assert all(abs(total - len(text)) < 0.2 * len(text) for _, total in seen)


def test_import_prints_progress_lines_for_long_reads(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer, "PROGRESS_FIRST_S", 0.0)
    monkeypatch.setattr(importer, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr("tracekit.analyzers.readers.kineto.reader.CHUNK_BYTES", 4 << 20)
    lines: list[str] = []
    importer.import_files([shared_data / DF_INDEX], tmp_path / "run", on_event=lines.append)
    progress = [ln for ln in lines if "% (" in ln]
    assert progress, lines
    assert all(ln.startswith("reading df_index_resolver__df_index_resolver.json.gz: ") for ln in progress)
    assert "GB of text" in progress[0]


def test_no_progress_lines_before_the_first_interval(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer, "PROGRESS_FIRST_S", 3600.0)
    lines: list[str] = []
    importer.import_files([shared_data / DF_INDEX], tmp_path / "run", on_event=lines.append)
    assert not [ln for ln in lines if "% (" in ln], lines
