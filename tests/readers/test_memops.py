"""memcpy / memset operations (the ``memops`` frame) from the Kineto and Nsight Systems readers, against an
independent reading of every real trace and export in ../shared/data."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from tracekit.analyzers.importer import combine
from tracekit.analyzers.readers.kineto.reader import read_kineto
from tracekit.analyzers.readers.nsys.reader import read_nsys_sqlite
from tracekit.frames import MEMOPS

_KINDS = {"gpu_memcpy": "memcpy", "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset"}


def _traces(shared: Path) -> list[Path]:
    return sorted(p for p in shared.rglob("*.json.gz") if "thirdparty" in p.parts or "h200-probe" in p.parts)


def _plain_memops(path: Path) -> tuple[dict[str, int], int]:
    """memcpy / memset events per kind and their total duration in ns, by the stdlib parser."""
    obj = json.loads(gzip.decompress(path.read_bytes()))
    events = obj["traceEvents"] if isinstance(obj, dict) else obj
    counts: dict[str, int] = {}
    total = 0
    for e in events:
        kind = _KINDS.get(e.get("cat")) if isinstance(e, dict) else None
        if kind and e.get("ph") == "X":
            counts[kind] = counts.get(kind, 0) + 1
            total += round(float(e["dur"]) * 1000)
    return counts, total


def test_kineto_memops_match_the_files(shared_data: Path) -> None:
    """Every gpu_memcpy / gpu_memset event of every shared trace is one row, with its duration."""
    seen = 0
    for path in _traces(shared_data):
        try:
            m = read_kineto(path).frames["memops"]
        except Exception as exc:  # a file the reader refuses is another test's business
            pytest.fail(f"{path.name}: {exc}")
        counts, total = _plain_memops(path)
        got = dict(m.group_by("kind").len().iter_rows()) if m.height else {}
        assert got == counts, path.name
        assert abs(int(m["duration_ns"].sum()) - total) <= m.height, path.name  # ns rounding of each event
        assert m.schema == MEMOPS.schema
        seen += m.height
    assert seen > 5000


def test_kineto_memop_fields(shared_data: Path) -> None:
    """trace_diff's copies: directions from the names, bytes from args, each linked to its API call."""
    path = shared_data / "thirdparty/hta/trace_diff__control__control.json.gz"
    m = read_kineto(path).frames["memops"]
    copies = m.filter(m["kind"] == "memcpy")
    assert set(copies["copy_kind"].to_list()) == {"HtoD", "DtoH", "DtoD"}
    assert copies["bytes"].min() > 0
    assert m.filter(m["kind"] == "memset")["copy_kind"].null_count() == 654
    assert m["launch_tid"].null_count() == 0 and m["stream"].null_count() == 0
    assert m["memop_id"].to_list() == list(range(m.height)) and m["start_ns"].is_sorted()


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_nsys_memops_match_the_tables(shared_data: Path) -> None:
    """Every CUPTI_ACTIVITY_KIND_MEMCPY / MEMSET row is one memops row with its time, bytes and direction."""
    for path in sorted(shared_data.rglob("*.sqlite")):
        tables = {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
        m = read_nsys_sqlite(path).frames["memops"]
        want = {}
        for kind, table in (
            ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
            ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
        ):
            if table in tables:
                (n, total, nbytes) = _sql(
                    path, f'SELECT count(*), sum("end" - start), sum(bytes) FROM {table}'
                )[0]
                if n:
                    want[kind] = n
                    got = m.filter(m["kind"] == kind)
                    assert int(got["duration_ns"].sum()) == total and int(got["bytes"].sum()) == nbytes, (
                        path.name
                    )
        assert (dict(m.group_by("kind").len().iter_rows()) if m.height else {}) == want, path.name


def test_nsys_memop_names_and_launches(shared_data: Path) -> None:
    """h100_2gpu_1s: 450 host-to-device and 450 device-to-device copies, 4 back to the host, 22 memsets, on both
    GPUs; a copy linked to its runtime call gets that call's thread and start."""
    m = read_nsys_sqlite(shared_data / "thirdparty/nsys-ai/h100_2gpu_1s.sqlite").frames["memops"]
    assert dict(m.group_by("name").len().iter_rows()) == {
        "[CUDA memcpy Host-to-Device]": 450,
        "[CUDA memcpy Device-to-Device]": 450,
        "[CUDA memcpy Device-to-Host]": 4,
        "[CUDA memset]": 22,
    }
    assert set(m["device"].to_list()) == {0, 1}
    linked = m.filter(m["launch_tid"].is_not_null())
    assert linked.height > 0 and (linked["launch_start_ns"] <= linked["start_ns"]).all()


def test_combined_memops_get_their_range(shared_data: Path) -> None:
    """Imported frames: every copy issued on the thread that runs the ProfilerSteps gets a range on that thread
    (the join of kernels, analyzers/join.py); copies of the backward thread only where it had a range open."""
    fr = combine([read_kineto(shared_data / "thirdparty/hta/trace_diff__control__control.json.gz")])
    m, ranges = fr["memops"], fr["ranges"]
    assert m.height == 882
    steps = ranges.filter(ranges["name"].str.starts_with("ProfilerStep#"))
    (main,) = steps["tid"].unique().to_list()
    on_main = m.filter(m["launch_tid"] == main)
    assert on_main.height == 306 and on_main["range_id"].null_count() == 0
    tids = ranges.filter(ranges["range_id"].is_in(on_main["range_id"].implode()))["tid"].unique().to_list()
    assert tids == [main]
