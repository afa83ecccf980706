"""The Kineto reader's streaming decode: chunked (small chunks, worker threads) and whole give the same result.

"Whole" is the same reader with one chunk in one process (``chunk_bytes=WHOLE, workers=1``): the text decoded
at once, as the reader did before it streamed. Each real trace under ../shared/data is read both ways, gzipped
and plain, whole and cut short at several places; so are made-up traces whose cut points fall inside strings and
nested values, or that hold damage, NaN, bytes that are not UTF-8 and events that are not objects.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

from tracekit.analyzers.readers.kineto.reader import WHOLE, read_kineto
from tracekit.analyzers.readers.kineto.stream import Chunk, stream_chunks
from tracekit.analyzers.workers import default_workers
from tracekit.errors import UnreadableFileError

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
PROBE = "h200-probe/torch_trace.json.gz"
DF_INDEX = "thirdparty/hta/df_index_resolver__df_index_resolver.json.gz"
TB0 = "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
OWL = "thirdparty/tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz"
NS_RES = "thirdparty/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def _kineto_traces() -> list[str]:
    """Every Kineto trace under shared/data (names only; the ``shared_data`` fixture skips where absent)."""
    if not SHARED.is_dir():
        return [PROBE]
    return sorted(p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*.json.gz"))


def _small_chunks(text_bytes: int) -> int:
    """64 KiB, or more for a large file, so that each file is cut into 64 chunks or more at most sizes."""
    return max(64 << 10, text_bytes // 64)


def _outcome(path: Path, **kw: Any) -> Any:
    """The frames, warnings and partial flag of a read, or the one-line error it ended in."""
    try:
        ex = read_kineto(path, **kw)
    except UnreadableFileError as exc:
        return exc.one_line()
    return ex


def _assert_same(whole: Any, chunked: Any) -> None:
    if isinstance(whole, str) or isinstance(chunked, str):
        assert whole == chunked
        return
    for name in ("kernels", "ranges", "devices"):
        assert_frame_equal(whole.frame(name), chunked.frame(name))
    assert (whole.partial, whole.warnings) == (chunked.partial, chunked.warnings)


def _compare(path: Path, text_bytes: int, workers: int = 2) -> Any:
    whole = _outcome(path, workers=1, chunk_bytes=WHOLE)
    chunked = _outcome(path, workers=workers, chunk_bytes=_small_chunks(text_bytes))
    _assert_same(whole, chunked)
    return whole


# -- every real trace -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel", _kineto_traces())
def test_chunked_and_whole_give_the_same_frames(shared_data: Path, rel: str) -> None:
    path = shared_data / rel
    text = gzip.decompress(path.read_bytes())
    whole = _compare(path, len(text))
    assert not isinstance(whole, str) and not whole.partial, whole


@pytest.mark.parametrize("rel", [PROBE, DF_INDEX, TB0, OWL, NS_RES])
def test_plain_json_read_in_byte_ranges(shared_data: Path, tmp_path: Path, rel: str) -> None:
    """A plain .json: the workers read their own byte ranges of the file."""
    text = gzip.decompress((shared_data / rel).read_bytes())
    plain = tmp_path / "trace.json"
    plain.write_bytes(text)
    whole = _compare(plain, len(text))
    assert whole.frame("kernels").height == read_kineto(shared_data / rel).frame("kernels").height


CUTS = [
    (rel, fraction, gz)
    for rel in (PROBE, DF_INDEX, OWL)
    for fraction, gz in ((0.0004, False), (0.37, True), (0.5, False), (0.83, True), (0.9995, False))
]


@pytest.mark.parametrize(("rel", "fraction", "gz"), CUTS)
def test_truncated_same_partial_result(
    shared_data: Path, tmp_path: Path, rel: str, fraction: float, gz: bool
) -> None:
    """The text cut short (plain, or re-gzipped whole): the same events kept, the same warning, partial."""
    text = gzip.decompress((shared_data / rel).read_bytes())
    cut = text[: int(len(text) * fraction)]
    path = tmp_path / ("cut.json.gz" if gz else "cut.json")
    path.write_bytes(gzip.compress(cut, 1) if gz else cut)
    whole = _compare(path, len(cut))
    if not isinstance(whole, str):
        assert whole.partial and any("truncated" in w for w in whole.warnings), whole.warnings
        assert whole.frame("kernels").height <= read_kineto(shared_data / rel).frame("kernels").height


def test_gzip_stream_cut_short(shared_data: Path, tmp_path: Path) -> None:
    data = (shared_data / DF_INDEX).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) * 3 // 5])
    whole = _compare(path, 53 << 20)
    assert whole.partial and whole.warnings[0] == "gzip stream is truncated (the file was cut short)"
    assert "JSON is truncated or corrupt" in whole.warnings[1]


# -- made-up traces whose cut points are hard ------------------------------------------------------------------
def _kernel(i: int, name: str, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": "stream 7",
        "ts": 1000 + 10 * i + 0.125,
        "dur": 5.5,
        "args": {
            "device": 0,
            "stream": 7,
            "correlation": i,
            "grid": [i + 1, 1, 1],
            "block": [128, 1, 1],
            **args,
        },
    }


def _launch(i: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 42,
        "tid": 43,
        "ts": 999 + 10 * i,
        "dur": 1,
        "args": {"correlation": i},
    }


def _hard_trace(n: int = 150) -> dict[str, Any]:
    """Kernel names holding ``}, {`` (the cut pattern) and args holding lists of objects: many candidate cuts
    fall inside a string or a nested value."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        name = f'void k<{i}>(S) "}}, {{" {{lambda()#1}}' if i % 3 else f"gemm_{i}"
        blocks = [x for j in range(i % 4) for x in ({"a": j}, {"b": [{"c": j}]})]
        nested = {"blocks": blocks} if i % 2 else {}
        events += [_kernel(i, name, **nested), _launch(i)]
    events.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "step }, {",
            "pid": 42,
            "tid": 43,
            "ts": 990,
            "dur": 5000,
        }
    )
    return {
        "deviceProperties": [{"id": 0, "name": "GPU }, {", "numSms": 132}],
        "traceEvents": events,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


@pytest.mark.parametrize("indent", [None, 1])
@pytest.mark.parametrize("chunk", [200, 1000, 7777])
def test_cuts_inside_strings_and_nested_values_are_mended(
    tmp_path: Path, indent: int | None, chunk: int
) -> None:
    path = tmp_path / "hard.json"
    path.write_text(json.dumps(_hard_trace(), indent=indent))
    whole = read_kineto(path, workers=1, chunk_bytes=WHOLE)
    assert not whole.partial and whole.frame("kernels").height == 150
    assert whole.frame("kernels")["pid"].to_list() == [42] * 150
    for workers in (1, 2):
        _assert_same(whole, read_kineto(path, workers=workers, chunk_bytes=chunk))
    gz = tmp_path / "hard.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    _assert_same(read_kineto(gz, workers=1, chunk_bytes=WHOLE), read_kineto(gz, workers=2, chunk_bytes=chunk))


def _damaged(tmp_path: Path, at: float, bad: bytes) -> Path:
    text = json.dumps(_hard_trace(), indent=1).encode()
    i = int(len(text) * at)
    path = tmp_path / "damaged.json"
    path.write_bytes(text[:i] + bad + text[i:])
    return path


@pytest.mark.parametrize("at", [0.2, 0.5, 0.95])
def test_damage_in_the_middle_keeps_the_events_before_it(tmp_path: Path, at: float) -> None:
    path = _damaged(tmp_path, at, b"\x00garbage{[")
    whole = _compare(path, 2000)
    assert whole.partial and any("truncated or corrupt" in w for w in whole.warnings)
    assert 0 < whole.frame("kernels").height < 150


@pytest.mark.parametrize("at", [0.3, 0.7])
def test_bytes_that_are_not_utf8_mid_file(tmp_path: Path, at: float) -> None:
    text = json.dumps(_hard_trace(), indent=1).encode()
    i = text.index(b'"gemm_', int(len(text) * at)) + 1
    path = tmp_path / "latin1.json"
    path.write_bytes(text[:i] + b"\xff\xfe" + text[i:])
    whole = _compare(path, 2000)
    assert whole.frame("kernels").height == 150
    assert whole.warnings == ["some strings hold bytes that are not UTF-8; they are shown as U+FFFD"]


def test_nan_and_events_that_are_not_objects_mid_file(tmp_path: Path) -> None:
    trace = _hard_trace()
    trace["traceEvents"][200]["dur"] = float("nan")
    trace["traceEvents"][250:250] = [5, "x", [1]]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(trace, indent=1))  # json writes NaN
    whole = _compare(path, 2000)
    k = whole.frame("kernels")
    assert k.height == 150 and k["duration_ns"].null_count() == 1
    assert len(whole.warnings) == 1 and whole.warnings[0].startswith("3 trace events are not JSON objects")
    assert "event 250" in whole.warnings[0]


def test_not_a_trace_and_empty_array(tmp_path: Path) -> None:
    for content, expect in [
        (b'{"traceEvents": 5}', "not a PyTorch profiler trace"),
        (b'{"a": {"traceEvents": [1]}}', "no traceEvents"),
        (b'{"traceEvents": [], "baseTimeNanoseconds": 1}', None),
        (b'  [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]', None),
    ]:
        path = tmp_path / "t.json"
        path.write_bytes(content)
        whole = _compare(path, 1)
        if expect:
            assert isinstance(whole, str) and expect in whole, whole
        else:
            assert not whole.partial


# -- memory and workers -------------------------------------------------------------------------------------------
def test_chunks_stay_near_their_size() -> None:
    """Text is handed on in chunks of about ``chunk_bytes`` (one block more at most), never accumulated."""
    events = b",".join(json.dumps(_kernel(i, f"k{i}")).encode() for i in range(5000))
    blocks = [events[i : i + 4096] for i in range(0, len(events), 4096)]
    chunks: list[Chunk] = list(stream_chunks(b"", 0, iter(blocks), 16 << 10))
    assert len(chunks) > 20
    assert max(c.length for c in chunks) < (16 << 10) + 4096
    text = b"".join((c.text() or b"")[: c.length] for c in chunks)
    assert text == events  # nothing lost or repeated between chunks


def test_worker_processes_only_for_large_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule for both: an import reads one file per core; one file's decode starts workers only when large,
    at most 8."""
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(16)))
    assert default_workers() == 16
    assert default_workers(1 << 20) == 1
    assert default_workers(1 << 40) == 8
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1})
    assert default_workers(1 << 40) == 2
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0})
    assert default_workers(1 << 40) == 1


def test_worker_threads_from_two_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads cost nothing to start: a file of two chunks already gets them (the import's worker processes,
    one file each, wait for 128 MB of text)."""
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1})
    assert default_workers(40 << 20) == 1
    assert default_workers(64 << 20) == 2


def test_a_script_without_a_main_guard_still_reads(shared_data: Path, tmp_path: Path) -> None:
    """The workers are threads: a script without a ``__main__`` guard reads a file in chunks with them (spawned
    processes would re-run the script)."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        "import sys\nfrom tracekit.analyzers.readers.kineto.reader import read_kineto\n"
        f"ex = read_kineto(sys.argv[1], workers=2, chunk_bytes={64 << 10})\n"
        "print(ex.frame('kernels').height)\n"
    )
    p = subprocess.run(
        [sys.executable, str(script), str(shared_data / TB0)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "8772"
