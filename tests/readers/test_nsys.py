"""The Nsight Systems SQLite reader, checked against the real exports in ../shared/data and direct SQL on them."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tracekit.analyzers.readers.nsys.reader import _lookup, is_nsys_sqlite, read_nsys_sqlite
from tracekit.errors import UnreadableFileError
from tracekit.frames import DEVICES, KERNELS, RANGES

PROBE = "h200-probe/probe.sqlite"
H100 = "thirdparty/nsys-ai/h100_2gpu_1s.sqlite"
BEFORE = "thirdparty/nsys-ai/mfu_2gpu_before.sqlite"
AFTER = "thirdparty/nsys-ai/mfu_2gpu_after.sqlite"
HEALTHY = "thirdparty/nsys-ai/healthy_1pct.sqlite"
MOCK = "thirdparty/nsys-ai/mock.sqlite"

# Kernel counts as the files hold them (also in thirdparty/MANIFEST.tsv).
KERNEL_COUNTS = {PROBE: 24, H100: 3442, BEFORE: 4010, AFTER: 3587, HEALTHY: 400, MOCK: 2}
TWO_PROCESS = [H100, BEFORE, AFTER]

# The probe's five cuBLAS GEMM ranges (see shared/DEVICE.md), with their times from NVTX_EVENTS.
PROBE_RANGES = [
    ("gemm/bf16/M=1024,N=2048,K=6144", 4147891694, 4148051665),
    ("gemm/fp8/M=1024,N=2048,K=6144", 4148062178, 4148200232),
    ("gemm/bf16/M=16,N=6144,K=6144", 4148203377, 4148281849),
    ("gemm/fp8/M=16384,N=6144,K=6144", 4148284129, 4148614803),
    ("gemm/bf16/M=8192,N=8192,K=8192", 4148617886, 4148681494),
]


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _all_exports(shared: Path) -> list[Path]:
    found = sorted(shared.rglob("*.sqlite"))
    assert found, f"no .sqlite files under {shared}"
    return found


@pytest.fixture(scope="module")
def extracts(shared_data: Path) -> dict[str, object]:
    """Every export read once (the default engine), by path relative to shared/data."""
    return {str(p.relative_to(shared_data)): read_nsys_sqlite(p) for p in _all_exports(shared_data)}


def test_every_export_sniffs_and_reads_with_pinned_schemas(shared_data: Path, extracts: dict) -> None:
    for rel, ex in extracts.items():
        path = shared_data / rel
        assert is_nsys_sqlite(path), rel
        assert ex.kind == "nsys" and ex.source == path.name and not ex.partial
        assert ex.frames["kernels"].schema == KERNELS.schema, rel
        assert ex.frames["ranges"].schema == RANGES.schema, rel
        assert ex.frames["devices"].schema == DEVICES.schema, rel


def test_kernel_counts_match_the_files(shared_data: Path, extracts: dict) -> None:
    for rel, expected in KERNEL_COUNTS.items():
        assert extracts[rel].frames["kernels"].height == expected, rel
    for rel, ex in extracts.items():
        path = shared_data / rel
        (n,) = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
        kernels = ex.frames["kernels"]
        assert kernels.height == n, rel
        assert kernels["kernel_id"].to_list() == list(range(n))
        assert (kernels["duration_ns"] == kernels["end_ns"] - kernels["start_ns"]).all()
        assert kernels["name"].null_count() == 0 and kernels["short_name"].null_count() == 0, rel


def test_kernel_names_and_fields_match_direct_sql(shared_data: Path, extracts: dict) -> None:
    for rel in (PROBE, AFTER, HEALTHY):
        path = shared_data / rel
        rows = _sql(
            path,
            "SELECT k.start, d.value, s.value, k.gridX, k.blockX, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName ORDER BY k.rowid",
        )
        got = (
            extracts[rel]
            .frames["kernels"]
            .select("start_ns", "name", "short_name", "grid_x", "block_x", "stream")
        )
        assert got.rows() == rows, rel


def test_nvtx_counts_match_push_pop_plus_start_end_rows(shared_data: Path, extracts: dict) -> None:
    for rel, ex in extracts.items():
        path = shared_data / rel
        ranges = ex.frames["ranges"]
        if "NVTX_EVENTS" not in _tables(path):
            assert ranges.height == 0
            assert any("no NVTX_EVENTS table" in w for w in ex.warnings), rel
            continue
        counts = dict(_sql(path, "SELECT eventType, count(*) FROM NVTX_EVENTS GROUP BY 1"))
        assert ranges.height == counts.get(59, 0) + counts.get(60, 0), rel
        assert ranges.filter(pl.col("kind") == "push_pop").height == counts.get(59, 0)
        assert ranges.filter(pl.col("kind") == "start_end").height == counts.get(60, 0)
        assert ranges["range_id"].to_list() == list(range(ranges.height))
        assert ranges["name"].null_count() == 0, rel
        # Left for the join and the importer, except emit_nvtx's PyTorch GEMM ops (tests/readers/test_nvtx_shapes.py)
        plain = ranges.filter(pl.col("range_kind").is_null() | (pl.col("range_kind") != "gemm-op"))
        for col in ("parent_id", "depth", "range_kind", "m", "n", "k"):
            assert plain[col].null_count() == plain.height
    assert extracts[H100].frames["ranges"].height == 16782
    assert extracts[BEFORE].frames["ranges"].height == 19118
    assert extracts[AFTER].frames["ranges"].height == 17113


def test_probe_gemm_ranges(extracts: dict) -> None:
    ranges = extracts[PROBE].frames["ranges"]
    assert ranges.select("name", "start_ns", "end_ns").rows() == PROBE_RANGES
    assert set(ranges["kind"]) == {"push_pop"}
    assert ranges["domain"].null_count() == 5  # the default domain
    assert set(ranges["pid"]) == {676} and set(ranges["tid"]) == {676}
    # Every probe kernel was launched by that thread; the GEMMs' launches fall inside the ranges.
    kernels = extracts[PROBE].frames["kernels"]
    assert set(kernels["launch_tid"]) == {676} and set(kernels["pid"]) == {676}
    inside = kernels.join_where(
        ranges.select("name", "start_ns", "end_ns"),
        pl.col("launch_start_ns") >= pl.col("start_ns_right"),
        pl.col("launch_start_ns") <= pl.col("end_ns_right"),
    )
    assert set(inside["name_right"]) == {r[0] for r in PROBE_RANGES}


def test_two_process_exports_have_two_distinct_pids(extracts: dict) -> None:
    for rel in TWO_PROCESS:
        kernels, ranges = extracts[rel].frames["kernels"], extracts[rel].frames["ranges"]
        pids = set(kernels["pid"])
        assert len(pids) == 2 and None not in pids, rel
        assert set(ranges["pid"]) == pids, rel
        # Each process's kernels ran on its own GPU.
        per_pid = kernels.group_by("pid").agg(
            pl.col("device").n_unique().alias("n"), pl.col("device").first()
        )
        assert per_pid["n"].to_list() == [1, 1] and per_pid["device"].n_unique() == 2, rel


def _launch_pairs(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    kernels = pl.DataFrame(
        _sql(path, "SELECT rowid - 1, globalPid >> 24, correlationId, start FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        schema=["kid", "proc", "corr", "start"],
        orient="row",
    )
    runtime = pl.DataFrame(
        _sql(
            path,
            "SELECT globalTid >> 24, correlationId, globalTid & 16777215, start FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        ),
        schema=["proc", "corr", "tid", "launch"],
        orient="row",
    )
    return kernels, runtime


@pytest.mark.parametrize("rel", TWO_PROCESS)
def test_launch_link_matches_on_process_and_correlation_id(
    shared_data: Path, extracts: dict, rel: str
) -> None:
    kernels, runtime = _launch_pairs(shared_data / rel)
    by_pair = kernels.join(runtime, on=["proc", "corr"])
    got = extracts[rel].frames["kernels"]
    # Every kernel with a runtime row of its own process gets exactly that one launch thread and time.
    assert by_pair["kid"].is_unique().all()
    linked = got.filter(pl.col("launch_tid").is_not_null())
    assert linked.height == by_pair.height
    assert linked.select("kernel_id", "launch_tid", "launch_start_ns").sort("kernel_id").rows() == (
        by_pair.select("kid", "tid", "launch").sort("kid").rows()
    )
    assert (linked["launch_start_ns"] <= linked["start_ns"]).all()
    # Kernel correlation ids recur in the other process's runtime rows: matching on the id alone pairs
    # kernels with the other process's calls (more pairs than there are launches).
    by_id = kernels.join(runtime, on="corr", suffix="_rt")
    cross = by_id.filter(pl.col("proc") != pl.col("proc_rt"))
    assert by_id.height - cross.height == by_pair.height
    assert by_id.height > by_pair.height
    assert cross.height > (
        200 if rel != H100 else 10
    )  # the 1 s slice has 11 such pairs, the mfu runs hundreds
    assert extracts[rel].warnings and any(
        "no CUDA runtime launch record" in w for w in extracts[rel].warnings
    )


def test_mfu_counts_against_the_peer_tools_mismatch(extracts: dict) -> None:
    # ARCHITECTURE.md: matching on the id alone gave one peer tool 3,846 launches for 3,587 kernels.
    kernels = extracts[AFTER].frames["kernels"]
    assert kernels.height == 3587
    assert kernels["launch_tid"].is_not_null().sum() == 3577


def test_export_without_global_pid_takes_process_from_runtime(extracts: dict) -> None:
    ex = extracts[HEALTHY]
    kernels = ex.frames["kernels"]
    # healthy_1pct: no globalPid / registersPerThread columns; its runtime rows have globalTid = 1 (pid 0, tid 1).
    assert set(kernels["pid"]) == {0} and set(kernels["launch_tid"]) == {1}
    assert kernels["registers_per_thread"].null_count() == 400
    assert kernels["context"].null_count() == 400
    assert (kernels["launch_start_ns"] <= kernels["start_ns"]).all()
    assert ex.frames["ranges"].height == 0


def test_text_id_ranges_and_unnamed_domains(shared_data: Path, extracts: dict) -> None:
    for rel in (BEFORE, AFTER):
        path = shared_data / rel
        ex = extracts[rel]
        ranges = ex.frames["ranges"]
        expected = sorted(
            r[0]
            for r in _sql(
                path,
                "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59",
            )
        )
        (in_domain1,) = _sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND domainId = 1")[
            0
        ]
        assert len(expected) == in_domain1 > 400  # the NCCL ranges: registered strings in domain 1
        # No NvtxDomainCreate event in these files: the domain is named after its id, with a warning.
        nccl = ranges.filter(pl.col("domain") == "domain#1")
        assert sorted(nccl["name"]) == expected
        assert {"ncclGroupStart", "ncclSend", "ncclRecv"} <= set(nccl["name"])
        assert ranges.filter(pl.col("domain").is_null()).height == ranges.height - in_domain1
        assert any("no NvtxDomainCreate" in w for w in ex.warnings)


def test_devices(extracts: dict) -> None:
    probe = extracts[PROBE].frames["devices"]
    assert probe.drop("source", "rank").rows() == [
        (0, "NVIDIA H200", "9.0", 132, 150109880320, 232448, 233472, 65536, 1.98e9)
    ]
    mock = extracts[MOCK].frames["devices"]
    assert mock.select("name", "compute_capability", "sm_count", "smem_per_block_optin_bytes").rows() == [
        ("NVIDIA GeForce RTX 3080", "8.6", 68, 101376)
    ]
    healthy = extracts[HEALTHY].frames["devices"]  # a TARGET_INFO_GPU with only id and name
    assert healthy.select("device", "name", "sm_count").rows() == [(0, "NVIDIA H100 80GB HBM3", None)]
    h100 = extracts[H100]
    assert h100.frames["devices"].height == 0
    assert any("no TARGET_INFO_GPU" in w for w in h100.warnings)


def test_engines_give_the_same_frames(shared_data: Path, extracts: dict) -> None:
    for rel, ex in extracts.items():
        slow = read_nsys_sqlite(shared_data / rel, engine="sqlite3")
        for name, frame in ex.frames.items():
            assert_frame_equal(frame, slow.frames[name])
        assert slow.warnings == ex.warnings


def _copy(shared_data: Path, rel: str, tmp_path: Path) -> Path:
    out = tmp_path / Path(rel).name
    shutil.copyfile(shared_data / rel, out)
    out.chmod(0o644)
    return out


def test_file_is_never_modified(shared_data: Path, tmp_path: Path) -> None:
    path = _copy(shared_data, PROBE, tmp_path)  # writable, unlike shared/data
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    read_nsys_sqlite(path)
    read_nsys_sqlite(path, engine="sqlite3")
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no journal or WAL left behind


def test_missing_tables_give_typed_empty_frames_and_warnings(shared_data: Path, tmp_path: Path) -> None:
    path = _copy(shared_data, PROBE, tmp_path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("DROP TABLE TARGET_INFO_GPU")
    con.commit()
    con.close()
    ex = read_nsys_sqlite(path)
    assert ex.frames["kernels"].height == 0 and ex.frames["kernels"].schema == KERNELS.schema
    assert ex.frames["ranges"].height == 5
    # TARGET_INFO_CUDA_DEVICE remains: the device with what it knows.
    assert ex.frames["devices"].select("device", "name").rows() == [(0, None)]
    assert any("no CUPTI_ACTIVITY_KIND_KERNEL table" in w for w in ex.warnings)


def test_an_event_type_enum_without_ids_keeps_the_usual_ones(shared_data: Path, tmp_path: Path) -> None:
    """A damaged ENUM_NSYS_EVENT_TYPE (NULL or text where an id belongs) stopped the read with a TypeError
    (found by the page reader's damage test): such a row is passed over and the usual id stands."""
    path = _copy(shared_data, PROBE, tmp_path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE ENUM_NSYS_EVENT_TYPE")  # its id is the rowid there, never NULL: a plain column
    con.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT)")
    con.executemany(
        "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?)",
        [(None, "NvtxPushPopRange"), ("x", "NvtxMark"), (60, "NvtxStartEndRange"), (75, "NvtxDomainCreate")],
    )
    con.commit()
    con.close()
    ex = read_nsys_sqlite(path)
    assert ex.frames["ranges"]["name"].to_list() == [name for name, *_ in PROBE_RANGES]


def test_marks_dropped_and_domains_named_from_create_events(shared_data: Path, tmp_path: Path) -> None:
    path = _copy(shared_data, PROBE, tmp_path)
    con = sqlite3.connect(path)
    gtid = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (1, 34, 'm', ?, 0)",
        (gtid,),
    )
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (2, 75, 'tracekit', ?, 7)",
        (gtid,),
    )
    con.execute("UPDATE NVTX_EVENTS SET domainId = 7 WHERE text LIKE 'gemm/fp8/%'")
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (5, 9, 60, 'se', ?, 0)",
        (gtid,),
    )
    con.commit()
    con.close()
    ex = read_nsys_sqlite(path)
    ranges = ex.frames["ranges"]
    assert ranges.height == 6
    assert sorted(ranges.filter(pl.col("domain") == "tracekit")["name"]) == [
        "gemm/fp8/M=1024,N=2048,K=6144",
        "gemm/fp8/M=16384,N=6144,K=6144",
    ]
    assert ranges.filter(pl.col("kind") == "start_end").select("name", "start_ns", "end_ns").rows() == [
        ("se", 5, 9)
    ]
    assert any("1 NVTX marks" in w for w in ex.warnings)
    assert not any("NvtxDomainCreate" in w for w in ex.warnings)


def test_warnings_keep_their_order_though_kernels_and_ranges_are_built_at_once(
    shared_data: Path, tmp_path: Path
) -> None:
    """The kernels (with memcpy / memset) and the NVTX ranges are built in two threads; what each says comes in
    the file's fixed order all the same: the kernels' warnings before the ranges'."""
    path = _copy(shared_data, PROBE, tmp_path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    gtid = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (1, 34, 'm', ?, 0)",
        (gtid,),
    )
    con.commit()
    con.close()
    for _ in range(5):
        said = read_nsys_sqlite(path).warnings
        runtime = [i for i, w in enumerate(said) if "no usable CUPTI_ACTIVITY_KIND_RUNTIME" in w]
        marks = [i for i, w in enumerate(said) if "1 NVTX marks" in w]
        assert len(runtime) == 1 and len(marks) == 1 and runtime[0] < marks[0], said


def _unreadable(path: Path) -> UnreadableFileError:
    assert not is_nsys_sqlite(path)
    with pytest.raises(UnreadableFileError) as info:
        read_nsys_sqlite(path)
    line = info.value.one_line()
    assert "\n" not in line and str(path) in line
    return info.value


def test_bad_input_is_unreadable(shared_data: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert "empty" in _unreadable(empty).message

    text = tmp_path / "notes.sqlite"
    text.write_text("kernel,duration\nsgemm,12\n")
    err = _unreadable(text)
    assert "not an SQLite database" in err.message and "nsys export --type sqlite" in (err.hint or "")

    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE measurements (name TEXT, value REAL)")
    con.commit()
    con.close()
    err = _unreadable(other)
    assert "not an Nsight Systems export" in err.message

    data = (shared_data / H100).read_bytes()
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(data[: len(data) // 2])
    assert "truncated" in _unreadable(truncated).message

    tiny = tmp_path / "tiny.sqlite"
    tiny.write_bytes(data[:50])
    assert "truncated" in _unreadable(tiny).message

    with pytest.raises(UnreadableFileError, match="does not exist"):
        read_nsys_sqlite(tmp_path / "missing.sqlite")


def test_nsys_rep_asks_for_the_export(shared_data: Path, tmp_path: Path) -> None:
    rep = shared_data / "h200-probe" / "probe.nsys-rep"
    err = _unreadable(rep)
    assert "Nsight Systems report" in err.message
    assert err.hint is not None and "nsys export --type sqlite" in err.hint and str(rep) in err.hint
    # Detected by content too, whatever the name.
    renamed = tmp_path / "probe.sqlite"
    shutil.copyfile(rep, renamed)
    assert "Nsight Systems report" in _unreadable(renamed).message


@pytest.mark.parametrize("engine", ["auto", "sqlite3"])
def test_mistyped_values_are_null_and_marked(shared_data: Path, tmp_path: Path, engine: str) -> None:
    """Text and an out-of-range number in INTEGER columns: the file is read, those values are null, the
    Extract is partial and says how many values it lost."""
    path = _copy(shared_data, PROBE, tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'oops' WHERE rowid = 3")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET blockX = 9223372036854775807 WHERE rowid = 5")
    (n,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.commit()
    con.close()
    ex = read_nsys_sqlite(path, engine=engine)
    kernels = ex.frames["kernels"]
    assert ex.partial and kernels.height == n
    assert kernels["grid_x"][2] is None and kernels["block_x"][4] is None
    assert kernels["grid_x"].null_count() == 1 and kernels["block_x"].null_count() == 1
    assert any("2 values are of the wrong type or out of range" in w for w in ex.warnings), ex.warnings


def test_a_malformed_table_is_left_out_and_marked(shared_data: Path, tmp_path: Path) -> None:
    """A page of NVTX_EVENTS zeroed (``database disk image is malformed``): kernels are kept, the run is partial."""
    path = _copy(shared_data, PROBE, tmp_path)
    con = sqlite3.connect(path)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone()
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    (n,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page_size : root * page_size] = b"\xff" * page_size
    path.write_bytes(bytes(data))
    ex = read_nsys_sqlite(path)
    assert ex.partial and ex.frames["kernels"].height == n and ex.frames["ranges"].height == 0
    assert any("NVTX_EVENTS could not be read" in w and "malformed" in w for w in ex.warnings), ex.warnings


def _unreadable_sqlite(path: Path) -> UnreadableFileError:
    with pytest.raises(UnreadableFileError) as info:
        read_nsys_sqlite(path)
    assert "\n" not in info.value.one_line()
    return info.value


def test_unknown_engine_is_refused(shared_data: Path) -> None:
    with pytest.raises(ValueError, match="engine"):
        read_nsys_sqlite(shared_data / PROBE, engine="duckdb")


# Names on the edge of the GEMM-op pre-filter in ranges.nvtx_op_shapes: a GEMM op, one that only starts like one, one
# with space before its comma, a non-GEMM op, text before the op, an op with no arguments, a null-free plain name.
_OP_NAMES = [
    "aten::mm, seq = 4, op_id = 7, sizes = [[16, 32], [32, 64]]",
    "aten::mm_out_variant, sizes = [[16, 32], [32, 64]]",
    "aten::addmm , seq = 2, sizes = [[64], [8, 32], [32, 64], [], []]",
    "aten::add, sizes = [[2, 3], [2, 3]]",
    " aten::mm, sizes = [[16, 32], [32, 64]]",
    "aten::bmm",
    "gemm/bf16/M=16,N=64,K=32",
    "aten::linear, op_id = 5, sizes = [[4, 197, 768], [768, 768], [768]]",
]


def test_nvtx_op_shapes_match_per_name_parse(shared_data: Path) -> None:
    """Each range's GEMM fields equal parsing its own name (the op before the first comma, stripped, must be a
    GEMM op; names with text before the op are not PyTorch's): the vectorised pre-filter drops none and adds
    none."""
    from tracekit.analyzers.readers.nsys.ranges import nvtx_op_shapes
    from tracekit.analyzers.readers.torch_ops import GEMM_OPS, nvtx_op_shape

    base = read_nsys_sqlite(shared_data / PROBE).frames["ranges"]
    ranges = pl.concat([base] * 2).head(len(_OP_NAMES)).with_columns(pl.Series("name", _OP_NAMES))
    got = nvtx_op_shapes(ranges)
    for name, row in zip(_OP_NAMES, got.iter_rows(named=True), strict=True):
        op = name.split(",")[0].strip()
        shape = nvtx_op_shape(name) if name.startswith("aten::") and op in GEMM_OPS else None
        if shape is None:
            assert row["range_kind"] is None and row["op"] is None, name
        else:
            assert (row["range_kind"], row["op"], row["m"], row["n"], row["k"]) == (
                "gemm-op",
                shape.op,
                shape.m,
                shape.n,
                shape.k,
            ), name
    assert got.filter(pl.col("range_kind") == "gemm-op").height == 4  # mm, addmm, bmm, linear


_KEY = st.one_of(
    st.integers(0, 2), st.integers(0, 2), st.none(), st.sampled_from([-3, 2**40, -(2**40), 2**62, -(2**62)])
)


@settings(max_examples=200, deadline=None)
@given(
    left=st.lists(st.tuples(_KEY, _KEY), max_size=30),
    right=st.lists(st.tuples(_KEY, _KEY, st.integers(-(2**63), 2**63 - 1)), max_size=30),
)
def test_two_integer_keys_join_as_one_number_as_on_two(left: list, right: list) -> None:
    """``_lookup`` on two integer keys (joined as one number where they fit): the same rows as the join on
    both columns, nulls matching nothing, repeated keys repeating rows, huge keys falling back to two."""
    lf = pl.DataFrame(left, schema={"a": pl.Int64, "b": pl.Int64}, orient="row")
    rf = pl.DataFrame(right, schema={"a": pl.Int64, "b": pl.Int64, "v": pl.Int64}, orient="row")
    expected = lf.join(rf, on=["a", "b"], how="left", maintain_order="left").drop("a", "b")
    assert_frame_equal(_lookup(lf, ["a", "b"], rf), expected)


@settings(max_examples=200, deadline=None)
@given(
    left=st.lists(_KEY, max_size=30),
    right=st.lists(st.tuples(_KEY, st.none() | st.text(max_size=3)), max_size=30),
)
def test_one_integer_key_lookup_gives_the_join(left: list, right: list) -> None:
    """``_lookup`` on one integer key (StringIds' ids), by address where the keys allow it: the join's rows."""
    lf = pl.DataFrame({"id": left}, schema={"id": pl.Int64})
    rf = pl.DataFrame(right, schema={"id": pl.Int64, "value": pl.String}, orient="row")
    expected = lf.join(rf, on="id", how="left", maintain_order="left").drop("id")
    assert_frame_equal(_lookup(lf, ["id"], rf), expected)


def test_distinct_keys_of_a_narrow_span_are_looked_up_by_address() -> None:
    from tracekit.analyzers.readers.nsys.reader import _direct

    values = pl.DataFrame({"value": ["a", "b", "c", "d"]})
    got = _direct(pl.Series([13, None, 10, 17, -1], dtype=pl.Int64), pl.Series([10, 11, 12, 13]), values)
    assert got is not None and got["value"].to_list() == ["d", None, "a", None, None]
    # a key held by two rows, or keys far apart: the join answers (and shows the repeat)
    assert _direct(pl.Series([0]), pl.Series([0, 0]), values.head(2)) is None
    assert _direct(pl.Series([0]), pl.Series([0, 2**40]), values.head(2)) is None
