"""Properties of the readers and the kernel-to-range join on generated, valid traces (hypothesis).

One random timeline (threads with nested NVTX / annotation ranges, kernel launches on those threads, kernels on
two streams that never overlap on a stream) is written as a PyTorch profiler trace (Kineto JSON) and as an Nsight
Systems SQLite export (the committed capture sample's real export with its event rows replaced, so every table
and column is nsys's own), imported with ``tracekit import``'s code, and must keep its invariants:

- counts are preserved: every kernel and every range comes back once;
- each kernel is in at most one innermost range: the range its launch falls in on the launching thread, as a
  brute-force search over the generated ranges finds it (or none);
- times are exact and monotone within a stream: each stream's kernels, by start, never overlap, and their
  (start, end) are the generated ones.
"""

from __future__ import annotations

import itertools
import json
import lzma
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.analyzers.importer import import_files
from tracekit.analyzers.store import load_frames

SAMPLE_EXPORT = Path(__file__).resolve().parents[2] / "samples/h200-capture-gemm/raw/nsys.sqlite.xz"
STREAMS = (7, 13)


@dataclass
class Timeline:
    """A generated timeline; times in ns. ``ranges``: (thread, name, start, end); ``kernels``: (thread, launch,
    stream, start, end, name); ``expected``: per kernel, the innermost range's name or None."""

    threads: int
    ranges: list[tuple[int, str, int, int]] = field(default_factory=list)
    kernels: list[tuple[int, int, int, int, int, str]] = field(default_factory=list)
    expected: list[str | None] = field(default_factory=list)


@st.composite
def timelines(draw: st.DrawFn) -> Timeline:
    tl = Timeline(threads=draw(st.integers(1, 2)))
    # ranges start and end on multiples of 10 ns; launches fall on 5 mod 10, so never on a boundary
    for thread in range(tl.threads):

        def build(lo: int, hi: int, depth: int, thread: int = thread) -> None:
            t = lo
            while t < hi - 2 and depth < 4 and draw(st.integers(0, 3)) > 0:
                # hypothesis leans to small draws: start near t, end near hi, so ranges are long and nest
                s = t + draw(st.integers(0, hi - 2 - t))
                e = hi - 1 - draw(st.integers(0, hi - 2 - s))
                tl.ranges.append((thread, f"r{len(tl.ranges)}", 10_000 + s * 10, 10_000 + e * 10))
                build(s + 1, e, depth + 1)
                t = e + 1

        build(0, 300, 0)
    launches = sorted(
        draw(
            st.lists(
                st.tuples(st.integers(0, tl.threads - 1), st.integers(0, 320)),
                min_size=1,
                max_size=25,
                unique_by=lambda x: x[1],
            )
        ),
        key=lambda x: x[1],
    )
    last_end = dict.fromkeys(STREAMS, 0)
    for i, (thread, slot) in enumerate(launches):
        launch = 10_000 + slot * 10 + 5
        stream = draw(st.sampled_from(STREAMS))
        start = max(launch + 100, last_end[stream] + draw(st.integers(0, 50)))
        end = start + draw(st.integers(1, 500))
        last_end[stream] = end
        tl.kernels.append((thread, launch, stream, start, end, f"kernel_{i % 3}<int>"))
        inside = [(s, name) for th, name, s, e in tl.ranges if th == thread and s <= launch <= e]
        tl.expected.append(max(inside)[1] if inside else None)
    return tl


# --- writers ----------------------------------------------------------------------------------------------------
def _us(ns: int) -> float:
    return ns / 1000  # JSON carries it as the shortest exact decimal (at most 3 places)


def write_kineto(tl: Timeline, path: Path) -> Path:
    events = []
    for thread, name, s, e in tl.ranges:
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": 42,
                "tid": 100 + thread,
                "ts": _us(s),
                "dur": _us(e - s),
            }
        )
    for corr, (thread, launch, stream, start, end, name) in enumerate(tl.kernels, start=1):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 42,
                "tid": 100 + thread,
                "ts": _us(launch),
                "dur": 0.002,
                "args": {"correlation": corr},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": _us(start),
                "dur": _us(end - start),
                "args": {
                    "device": 0,
                    "stream": stream,
                    "correlation": corr,
                    "grid": [1, 1, 1],
                    "block": [128, 1, 1],
                },
            }
        )
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


@pytest.fixture(scope="module")
def export_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """The capture sample's real nsys export, emptied of events: (path, globalPid, globalTid of one thread)."""
    path = tmp_path_factory.mktemp("nsys") / "template.sqlite"
    path.write_bytes(lzma.decompress(SAMPLE_EXPORT.read_bytes()))
    con = sqlite3.connect(path)
    gpid = con.execute("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
    gtid = con.execute(
        "SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
        "USING (correlationId) LIMIT 1"
    ).fetchone()[0]
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    ):
        con.execute(f"DELETE FROM {table}")
    con.execute("DELETE FROM NVTX_EVENTS WHERE eventType != 75")  # keep the domain-create events
    con.commit()
    con.execute("VACUUM")
    con.close()
    return path, gpid, gtid


def write_nsys(tl: Timeline, template: tuple[Path, int, int], path: Path) -> Path:
    src, gpid, gtid = template
    shutil.copyfile(src, path)
    con = sqlite3.connect(path)
    sid = {}
    next_id = con.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
    for name in sorted({k[5] for k in tl.kernels} | {"cudaLaunchKernel"}):
        sid[name] = next_id
        con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id, name))
        next_id += 1
    for thread, name, s, e in tl.ranges:
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
            (s, e, name, gtid + thread),
        )
    for corr, (thread, launch, stream, start, end, name) in enumerate(tl.kernels, start=1):
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
            "returnValue) VALUES (?, ?, 1, ?, ?, ?, 0)",
            (launch, launch + 2, gtid + thread, corr, sid["cudaLaunchKernel"]),
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, "
            "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
            "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) "
            "VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?)",
            (start, end, stream, corr, gpid, sid[name], sid[name], corr),
        )
    con.commit()
    con.close()
    return path


# --- the invariants -----------------------------------------------------------------------------------------------
def check_invariants(tl: Timeline, frames: dict[str, pl.DataFrame]) -> None:
    kernels, ranges = frames["kernels"], frames["ranges"].filter(pl.col("name").str.starts_with("r"))
    # counts preserved
    assert kernels.height == len(tl.kernels)
    assert sorted(ranges["name"].to_list()) == sorted(name for _, name, _, _ in tl.ranges)
    # each kernel in at most one innermost range: the brute-force one
    names = dict(zip(frames["ranges"]["range_id"].to_list(), frames["ranges"]["name"].to_list(), strict=True))
    in_range = kernels.select(
        "start_ns",
        pl.col("range_id").replace_strict(names, default=None, return_dtype=pl.String).alias("range"),
    )

    def order(pair: tuple[int, str | None]) -> tuple[int, str]:  # kernels of two streams may start together
        return pair[0], pair[1] or ""

    got = sorted(zip(in_range["start_ns"].to_list(), in_range["range"].to_list(), strict=True), key=order)
    want = sorted(zip([k[3] for k in tl.kernels], tl.expected, strict=True), key=order)
    assert got == want
    # exact and monotone within a stream
    for stream in STREAMS:
        k = kernels.filter(pl.col("stream") == stream).sort("start_ns")
        want = sorted((s, e) for _, _, st_, s, e, _ in tl.kernels if st_ == stream)
        assert list(zip(k["start_ns"].to_list(), k["end_ns"].to_list(), strict=True)) == want
        starts, ends = k["start_ns"].to_list(), k["end_ns"].to_list()
        assert all(a < b for a, b in itertools.pairwise(starts))
        assert all(e <= s for e, s in zip(ends[:-1], starts[1:], strict=True))


def _import(path: Path) -> dict[str, pl.DataFrame]:
    with tempfile.TemporaryDirectory() as tmp:
        run, summary = import_files([path], Path(tmp) / "run")
        assert not summary["failed"] and not summary["partial"], summary
        return load_frames(run)


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(tl=timelines())
def test_kineto_reader_keeps_the_invariants(tl: Timeline) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_invariants(tl, _import(write_kineto(tl, Path(tmp) / "trace.json")))


@FAST
@given(tl=timelines())
def test_nsys_reader_keeps_the_invariants(tl: Timeline, export_template: tuple[Path, int, int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_invariants(tl, _import(write_nsys(tl, export_template, Path(tmp) / "trace.sqlite")))
