"""Ranks on the CPU: labelling at import, the hive-partitioned frames of a multi-rank run (one scan over a fleet,
with polars and DuckDB), bundles of such runs, and the cross-rank analysis, on the real 2-GPU Nsight Systems
exports in ../shared/data/thirdparty/nsys-ai. Every expected count comes from SQL on the files themselves."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.analyzers.importer import combine, import_files, read_file
from tracekit.analyzers.ranks import analyze_ranks, label_extract, rank_from_name, run_ranks
from tracekit.analyzers.store import load_frames, read_frame, write_frame, write_frames
from tracekit.frames import SPECS
from tracekit.run import HIVE_NULL, Run

NSYS_AI = "thirdparty/nsys-ai"
TWO_GPU = ["h100_2gpu_1s", "mfu_2gpu_before", "mfu_2gpu_after"]
GPID = "(globalPid >> 24) & 16777215"
GTID = "(globalTid >> 24) & 16777215"
NCCL = "(SELECT value FROM StringIds WHERE id = k.shortName) LIKE 'nccl%'"


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _export(shared: Path, name: str) -> Path:
    return shared / NSYS_AI / f"{name}.sqlite"


@pytest.fixture(scope="module")
def runs(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each 2-GPU export imported into its own run under one runs/ folder (a small fleet)."""
    root = tmp_path_factory.mktemp("fleet")
    out = {}
    for name in TWO_GPU:
        run, _ = import_files([_export(shared_data, name)], root / name)
        out[name] = run.path
    return out


def _ranks_by_sql(path: Path) -> dict[int, tuple[int, int]]:
    """rank -> (pid, device): processes that launched kernels, by lowest device then pid (the documented rule)."""
    rows = _sql(
        path,
        f"SELECT {GPID} AS pid, min(deviceId) AS dev FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 2, 1",
    )
    return {i: (pid, dev) for i, (pid, dev) in enumerate(rows)}


# --- labelling ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("nsys.rank3.sqlite", 3),
        ("ncu.rank12.ncu-rep.xz", 12),
        ("ns_resolution_trace__rank-0.Apr_03.pt.trace.json.gz", 0),
        ("trace_rank_7.json", 7),
        ("rank=2.sqlite", 2),
        ("nsys-1.rank0.sqlite", 0),
        ("ranking.sqlite", None),
        ("frank3.sqlite", None),
        ("h100_2gpu_1s.sqlite", None),
        ("nsys.sqlite", None),
    ],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


@pytest.mark.parametrize("name", TWO_GPU)
def test_whole_tree_export_ranks_follow_processes(
    shared_data: Path, runs: dict[str, Path], name: str
) -> None:
    path = _export(shared_data, name)
    expected = _ranks_by_sql(path)
    assert len(expected) == 2
    run = Run.open(runs[name])
    (source,) = run.manifest["sources"]
    assert source["rank_source"] == "processes"
    assert {r["rank"]: (r["pid"], r["device"]) for r in source["ranks"]} == expected
    frames = load_frames(run)
    assert run_ranks(frames) == [0, 1]
    k = frames["kernels"]
    assert k["rank"].null_count() == 0 and k["device"].null_count() == 0
    for rank, (pid, dev) in expected.items():
        mine = k.filter(pl.col("rank") == rank)
        ((count,),) = _sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {GPID} = {pid}")
        assert mine.height == count
        assert mine["pid"].unique().to_list() == [pid] and mine["device"].unique().to_list() == [dev]
        ((nranges,),) = _sql(
            path, f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND {GTID} = {pid}"
        )
        assert frames["ranges"].filter(pl.col("rank") == rank).height == nranges


def test_file_rank_wins_and_single_process_files_stay_unranked(shared_data: Path) -> None:
    kineto = shared_data / "thirdparty/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    if kineto.is_file():
        ex = read_file(kineto)
        before = ex.frame("kernels")["rank"].unique().to_list()
        assert label_extract(ex, "x_rank-5.json.gz")["rank_source"] == "file"
        assert ex.frame("kernels")["rank"].unique().to_list() == before
    probe = read_file(shared_data / "h200-probe/probe.sqlite")  # one process: a single-process run
    assert label_extract(probe, "probe.sqlite") == {}
    assert probe.frame("kernels")["rank"].null_count() == probe.frame("kernels").height
    named = read_file(shared_data / "h200-probe/probe.sqlite")
    assert label_extract(named, "nsys.rank4.sqlite")["rank_source"] == "file name"
    assert named.frame("kernels")["rank"].unique().to_list() == [4]
    assert named.frame("ranges")["rank"].unique().to_list() == [4]


# --- frames layout -------------------------------------------------------------------------------------------------------
def test_multi_rank_frames_are_hive_partitioned(runs: dict[str, Path]) -> None:
    run = Run.open(runs["mfu_2gpu_before"])
    frames_dir = run.frames_dir
    for name in ("kernels", "memops", "ranges"):
        assert not (frames_dir / f"{name}.parquet").exists()
        parts = sorted(p.relative_to(frames_dir).as_posix() for p in (frames_dir / name).rglob("*.parquet"))
        assert parts == [f"{name}/rank=0/part-0.parquet", f"{name}/rank=1/part-0.parquet"]
        # the rank lives in the folder name only (hive): the file itself has no rank column
        assert "rank" not in pl.read_parquet_schema(frames_dir / name / "rank=0" / "part-0.parquet")
        df = read_frame(run, name)
        assert df.columns == [c.name for c in SPECS[name].columns]
        assert df.schema == SPECS[name].schema
    # frames without rows (no devices in these exports) and without a rank column stay single files
    assert (frames_dir / "devices.parquet").is_file() and (frames_dir / "measurements.parquet").is_file()
    assert run.manifest["frames"]["partitioned"] == {"kernels": "rank", "memops": "rank", "ranges": "rank"}
    lazy = read_frame(run, "kernels", lazy=True)
    assert isinstance(lazy, pl.LazyFrame)
    assert_frame_equal(
        lazy.filter(pl.col("rank") == 1).collect(), read_frame(run, "kernels").filter(pl.col("rank") == 1)
    )


def test_partitioned_round_trip_and_layout_switch(shared_data: Path, tmp_path: Path) -> None:
    ex = read_file(_export(shared_data, "h100_2gpu_1s"))
    label_extract(ex, "h100_2gpu_1s.sqlite")
    frames = combine([ex])
    frames["kernels"] = frames["kernels"].with_columns(  # a row without a rank goes to Hive's null folder
        pl.when(pl.col("kernel_id") == 0).then(None).otherwise(pl.col("rank")).alias("rank")
    )
    run = Run.create(tmp_path / "r")
    write_frames(run, frames, partition_by="rank")
    assert (run.frame_dir("kernels") / f"rank={HIVE_NULL}" / "part-0.parquet").is_file()
    back = read_frame(run, "kernels")
    assert_frame_equal(back.sort("kernel_id"), frames["kernels"].sort("kernel_id"))
    assert back["rank"].null_count() == 1
    assert run.frames_current()
    write_frames(run, frames)  # the same run rebuilt unpartitioned: the folders go
    assert run.frame_layout("kernels") == "file" and not run.frame_dir("kernels").exists()
    assert_frame_equal(read_frame(run, "kernels"), frames["kernels"])
    assert not [p for p in run.frames_dir.iterdir() if p.name.startswith(".")]  # no temporary leftovers
    with pytest.raises(ValueError, match="rank"):
        write_frame(run, "kernels", frames["kernels"], partition_by="device")


def test_single_process_run_keeps_one_file_per_frame(shared_data: Path, tmp_path: Path) -> None:
    run, _ = import_files([shared_data / "h200-probe/probe.sqlite"], tmp_path / "probe")
    assert (run.frames_dir / "kernels.parquet").is_file()
    assert not [p for p in run.frames_dir.iterdir() if p.is_dir()]
    assert run.manifest["frames"]["partitioned"] == {}


def test_one_lazy_scan_over_a_fleet(shared_data: Path, runs: dict[str, Path]) -> None:
    """Several runs, one polars scan, no conversion: the rank comes from the folder names."""
    root = next(iter(runs.values())).parent
    scan = pl.scan_parquet(
        f"{root}/*/frames/kernels/*/*.parquet",
        hive_partitioning=True,
        include_file_paths="path",
    )
    per = (
        scan.with_columns(pl.col("path").str.extract(r"([^/]+)/frames/kernels/").alias("run"))
        .group_by("run", "rank")
        .agg(pl.len().alias("kernels"), pl.col("device").unique().first())
        .sort("run", "rank")
        .collect()
    )
    expected = []
    for name in sorted(TWO_GPU):
        path = _export(shared_data, name)
        for rank, (pid, dev) in _ranks_by_sql(path).items():
            ((count,),) = _sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {GPID} = {pid}")
            expected.append((name, rank, count, dev))
    assert [tuple(r) for r in per.iter_rows()] == expected


def test_duckdb_reads_the_fleet_without_conversion(shared_data: Path, runs: dict[str, Path]) -> None:
    duckdb = pytest.importorskip("duckdb")
    root = next(iter(runs.values())).parent
    rows = duckdb.sql(
        f"SELECT regexp_extract(filename, '([^/]+)/frames/kernels/', 1) AS run, rank, count(*) AS n "
        f"FROM read_parquet('{root}/*/frames/kernels/*/*.parquet', hive_partitioning = true, filename = true) "
        "GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    expected = []
    for name in sorted(TWO_GPU):
        path = _export(shared_data, name)
        for rank, (pid, _dev) in _ranks_by_sql(path).items():
            ((count,),) = _sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {GPID} = {pid}")
            expected.append((name, rank, count))
    assert [(r, int(k), n) for r, k, n in rows] == expected


def test_bundle_of_a_multi_rank_run(runs: dict[str, Path], tmp_path: Path) -> None:
    from tracekit.bundle import open_bundle, write_bundle

    run = Run.open(runs["mfu_2gpu_after"])
    info = write_bundle(run, tmp_path / "b.zip")
    import zipfile

    names = zipfile.ZipFile(info["path"]).namelist()
    assert "frames/kernels/rank=1/part-0.parquet" in names
    opened = open_bundle(tmp_path / "b.zip", cache_dir=tmp_path / "cache")
    assert opened.frame_layout("kernels") == "partitioned"
    assert_frame_equal(read_frame(opened, "kernels"), read_frame(run, "kernels"))


# --- merging per-rank files -----------------------------------------------------------------------------------------------
def _split_by_process(src: Path, out: Path, pid: int) -> Path:
    """A copy of a whole-tree export holding one process's kernels, launches and NVTX events: what an nsys
    wrapped around that rank alone writes."""
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    try:
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {GPID} != {pid}")
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {GTID} != {pid}")
        con.execute(f"DELETE FROM NVTX_EVENTS WHERE {GTID} != {pid}")
        con.commit()
    finally:
        con.close()
    return out


def test_per_rank_files_merge_into_one_run(shared_data: Path, runs: dict[str, Path], tmp_path: Path) -> None:
    """The per-rank files tracekit capture --ranks writes (nsys.rank<R>.sqlite) merge into the same frames and the
    same cross-rank answer as the whole-tree export they were cut from."""
    src = _export(shared_data, "mfu_2gpu_before")
    files = [
        _split_by_process(src, tmp_path / f"nsys.rank{rank}.sqlite", pid)
        for rank, (pid, _dev) in _ranks_by_sql(src).items()
    ]
    merged, _ = import_files(files, tmp_path / "merged")
    assert [s["rank_source"] for s in merged.manifest["sources"]] == ["file name", "file name"]
    a, b = load_frames(merged), load_frames(Run.open(runs["mfu_2gpu_before"]))
    key = ["rank", "start_ns", "correlation_id"]
    cols = ["rank", "pid", "device", "name", "start_ns", "duration_ns", "launch_tid"]
    assert_frame_equal(a["kernels"].sort(key).select(cols), b["kernels"].sort(key).select(cols))
    ra, rb = analyze_ranks(a), analyze_ranks(b)
    assert ra is not None and rb is not None
    same = ["rank", "kernels", "busy_ns", "gemm_ns", "comm_ns", "compute_ns", "last_arrivals", "straggler"]
    assert_frame_equal(ra.ranks.select(same), rb.ranks.select(same))
    # one file: a shared clock, so the arrival skew is measured; separate files: it is not
    assert (
        rb.collectives["skew_ns"].null_count() == 0
        and ra.collectives["skew_ns"].null_count() == ra.collectives.height
    )
    assert any("separate files" in n for n in ra.notes)


# --- the cross-rank analysis against SQL ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TWO_GPU)
def test_rank_table_matches_sql(shared_data: Path, runs: dict[str, Path], name: str) -> None:
    path = _export(shared_data, name)
    ranks = _ranks_by_sql(path)
    run = Run.open(runs[name])
    ra = analyze_ranks(load_frames(run))
    assert ra is not None
    table = {r["rank"]: r for r in ra.ranks.iter_rows(named=True)}
    for rank, (pid, dev) in ranks.items():
        ((busy, comm, first, last, n),) = _sql(
            path,
            f"SELECT sum(k.end - k.start), coalesce(sum(CASE WHEN {NCCL} THEN k.end - k.start END), 0), "
            f"min(k.start), max(k.end), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE {GPID} = {pid}",
        )
        row = table[rank]
        assert (row["pid"], row["device"], row["kernels"]) == (pid, dev, n)
        assert (row["busy_ns"], row["comm_ns"], row["span_ns"]) == (busy, comm, last - first)
        assert row["compute_ns"] == busy - comm
        assert row["gemm_ns"] + row["comm_ns"] + row["other_ns"] == busy
    # the straggler is the rank the others wait for: the least time inside NCCL kernels (when there are any)
    comm = {r: table[r]["comm_ns"] for r in table}
    if all(comm.values()):
        assert ra.straggler == min(comm, key=comm.get)
        assert ra.reasons[0].startswith(f"rank {ra.straggler} is the one the others wait for")
    else:
        assert ra.straggler is None and ra.reasons[0].startswith("no straggler")


@pytest.mark.parametrize("name", ["mfu_2gpu_before", "mfu_2gpu_after"])
def test_collectives_match_sql(shared_data: Path, runs: dict[str, Path], name: str) -> None:
    """The i-th NCCL kernel on each device is one collective; the shortest arrived last."""
    path = _export(shared_data, name)
    ranks = _ranks_by_sql(path)
    rows = _sql(
        path,
        f"SELECT {GPID}, k.start, k.end - k.start, row_number() OVER (PARTITION BY {GPID} ORDER BY k.start) "
        f"FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE {NCCL}",
    )
    rank_of = {pid: rank for rank, (pid, _d) in ranks.items()}
    by_index: dict[int, dict[int, tuple[int, int]]] = {}
    for pid, start, dur, i in rows:
        by_index.setdefault(i - 1, {})[rank_of[pid]] = (start, dur)
    full = {i: v for i, v in by_index.items() if len(v) == len(ranks)}
    last = {r: 0 for r in ranks}
    skews = []
    for per in full.values():
        shortest = min(d for _s, d in per.values())
        for r, (_s, d) in per.items():
            last[r] += d == shortest
        starts = [s for s, _d in per.values()]
        skews.append(max(starts) - min(starts))
    ra = analyze_ranks(load_frames(Run.open(runs[name])))
    assert ra is not None
    assert ra.collectives.select("name", "index").n_unique() == len(full)
    assert dict(ra.ranks.select("rank", "last_arrivals").iter_rows()) == last
    assert ra.to_dict()["collectives"]["mean_skew_ns"] == pytest.approx(sum(skews) / len(skews))


def test_same_gemm_kernel_side_by_side_matches_sql(shared_data: Path, runs: dict[str, Path]) -> None:
    path = _export(shared_data, "mfu_2gpu_before")
    ranks = _ranks_by_sql(path)
    ra = analyze_ranks(load_frames(Run.open(runs["mfu_2gpu_before"])))
    assert ra is not None
    assert set(ra.gemms["origin"].unique()) == {"kernel"}  # no tracekit ranges, no ncu: kernels by name
    name = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
    rows = ra.gemms.filter(pl.col("gemm") == name)
    for rank, (pid, _d) in ranks.items():
        ((n, mean),) = _sql(
            path,
            "SELECT count(*), avg(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            f"ON s.id = k.demangledName WHERE s.value = '{name}' AND {GPID} = {pid}",
        )
        row = rows.filter(pl.col("rank") == rank).row(0, named=True)
        assert row["launches"] == n and row["time_ns"] == pytest.approx(mean)
    spread = ra.gemm_spread.filter(pl.col("gemm") == name).row(0, named=True)
    times = dict(rows.select("rank", "time_ns").iter_rows())
    assert spread["slowest_rank"] == max(times, key=times.get)
    assert spread["spread_pct"] == pytest.approx((max(times.values()) / min(times.values()) - 1) * 100)


def test_single_rank_run_has_no_rank_analysis(shared_data: Path) -> None:
    ex = read_file(shared_data / "h200-probe/probe.sqlite")
    assert analyze_ranks(combine([ex])) is None


@pytest.mark.parametrize("name", TWO_GPU)
def test_copies_counted_as_idle_in_the_rank_table_are_said(
    shared_data: Path, runs: dict[str, Path], name: str
) -> None:
    """The rank table's idle is the span with no kernel running; h100_2gpu_1s spends 920 ms of its 969 ms on each
    GPU in pageable host-to-device copies, which the step breakdown counts as memory (idle 0.7% there, 97.7%
    here). A note names each rank's copy time where it is 1% of the span or more, from the export's own tables."""
    path = _export(shared_data, name)
    ra = analyze_ranks(load_frames(Run.open(runs[name])))
    assert ra is not None
    spans = {r["rank"]: r["span_ns"] for r in ra.ranks.iter_rows(named=True)}
    copies = {}
    for rank, (pid, _dev) in _ranks_by_sql(path).items():
        ((ns,),) = _sql(
            path,
            "SELECT coalesce(sum(t.end - t.start), 0) FROM (SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY"
            f" UNION ALL SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) t WHERE {GPID} = {pid}",
        )
        copies[rank] = ns
    named = {r: ns for r, ns in copies.items() if ns >= 0.01 * spans[r]}
    said = [n for n in ra.notes if n.startswith("idle here is time with no kernel running")]
    if not named:
        assert not said
        return
    (note,) = said
    for rank, ns in named.items():
        assert f"rank {rank}: {ns / 1e6:,.1f} ms" in note
    if name == "h100_2gpu_1s":
        assert all(ns > 0.9 * spans[r] for r, ns in named.items())


# --- views: show --json and the report --------------------------------------------------------------------------------------
def test_show_json_lists_ranks(shared_data: Path, runs: dict[str, Path]) -> None:
    import json
    import subprocess
    import sys

    path = _export(shared_data, "mfu_2gpu_after")
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "show", str(runs["mfu_2gpu_after"]), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    expected = _ranks_by_sql(path)
    assert [(r["rank"], r["pid"], r["device"]) for r in data["ranks"]] == [
        (k, *v) for k, v in expected.items()
    ]
    comm = {
        dev: ns
        for dev, ns in _sql(
            path,
            f"SELECT deviceId, sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE {NCCL} GROUP BY 1",
        )
    }
    assert [r["comm_ns"] for r in data["ranks"]] == [comm[v[1]] for v in expected.values()]
    waited_for = min(expected, key=lambda r: comm[expected[r][1]])
    assert data["straggler"]["rank"] == waited_for
    assert [r["rank"] for r in data["ranks"] if r["straggler"]] == [waited_for]


def test_show_json_of_a_single_process_run_has_no_ranks(shared_data: Path, tmp_path: Path) -> None:
    from tracekit.analyzers.summary import summary

    run, _ = import_files([shared_data / "h200-probe/probe.sqlite"], tmp_path / "probe")
    data = summary(run, load_frames(run))
    assert "ranks" not in data and "straggler" not in data


def test_report_has_a_ranks_section(runs: dict[str, Path]) -> None:
    from tracekit.analyzers.report import build_report, render_markdown

    run = Run.open(runs["mfu_2gpu_before"])
    frames = load_frames(run)
    rep = build_report(run, frames)
    ra = analyze_ranks(frames)
    assert ra is not None
    assert rep["ranks"]["straggler"] == ra.straggler and len(rep["ranks"]["ranks"]) == 2
    text = render_markdown(rep).text
    section = text[text.index("### Ranks") :]
    assert f"Rank {ra.straggler} is the straggler." in section
    assert f"| **{ra.straggler}** |" in section  # the straggler's row is bold
    assert ra.reasons[0].split(":")[0] in section
    top = ra.gemm_spread.row(0, named=True)
    assert f"`{top['gemm'][:60]}" in section


def test_same_gemm_on_two_ranks_explained_by_its_waterfall(samples_dir: Path, tmp_path: Path) -> None:
    """Two real H200 Nsight Compute reports of the same GEMM ranges (the probe sample and the capture sample),
    imported as rank 0 and rank 1: the fp8 4096x2048x6144 GEMM is slower on the rank whose SM clock was lower, and
    the clock factor of the two waterfalls says so."""
    r0 = samples_dir / "h200-gemm-probe/raw/probe.ncu-rep.xz"
    r1 = samples_dir / "h200-capture-gemm/raw/ncu.ncu-rep.xz"
    files = []
    for rank, src in enumerate((r0, r1)):
        files.append(tmp_path / f"ncu.rank{rank}.ncu-rep.xz")
        shutil.copyfile(src, files[-1])
    run, _ = import_files(files, tmp_path / "two")
    frames = load_frames(run)
    # the capture sample's report also profiled the fp8 GEMMs' quantize step (aux ranges), which the explainer
    # counts into that GEMM's time; the probe ran no such step. Left out, both ranks ran the same work.
    frames["ncu"] = frames["ncu"].filter(~pl.col("nvtx_range").fill_null("").str.starts_with("aux "))
    ra = analyze_ranks(frames)
    assert ra is not None
    name = "gemm backend=torch-fp8-tensorwise op=scaled_mm M=4096 N=2048 K=6144 a=e4m3 b=e4m3 out=bf16 scale=tensorwise"
    ncu = frames["ncu"].filter(pl.col("nvtx_range") == name).sort("rank")
    assert ncu["rank"].to_list() == [0, 1]  # one profiled kernel of it per report
    dur = dict(zip(ncu["rank"], ncu["duration_ns"], strict=True))
    clock = dict(zip(ncu["rank"], ncu["sm_clock_hz"], strict=True))
    slow, fast = max(dur, key=dur.get), min(dur, key=dur.get)
    row = ra.gemm_spread.filter(pl.col("gemm") == name).row(0, named=True)
    assert (row["ranks"], row["slowest_rank"], row["fastest_rank"]) == (2, slow, fast)
    assert row["spread_pct"] == pytest.approx((dur[slow] / dur[fast] - 1) * 100)
    assert clock[slow] < clock[fast]
    assert row["why"].startswith("clock factor ") and f"on rank {slow} vs " in row["why"]
    assert f"SM clock {clock[slow] / 1e6:.0f} vs {clock[fast] / 1e6:.0f} MHz" in row["why"]
    # only GEMMs are compared: the reports' elementwise kernels (quantize, copies) are left out
    assert all(g.startswith("gemm ") for g in ra.gemm_spread["gemm"])
    # ncu alone has no timeline: nobody is named the straggler, the GEMM gap is still reported
    assert ra.straggler is None and "who waits for whom is unknown" in ra.reasons[0]


def _frames(kernels: list[dict], ranges: list[dict]) -> dict[str, pl.DataFrame]:
    from tracekit.analyzers.importer import parse_range_names

    frames = {name: spec.empty() for name, spec in SPECS.items()}
    frames["kernels"] = SPECS["kernels"].conform(pl.DataFrame(kernels))
    r = SPECS["ranges"].conform(pl.DataFrame(ranges).with_columns(pl.lit(0, pl.Int32).alias("depth")))
    frames["ranges"] = parse_range_names(r)
    return frames


def test_steps_take_the_kernels_launched_inside_them() -> None:
    """Two ranks, two steps each: a kernel belongs to the step open on its process when it was launched (not when
    it ran); kernels launched outside every step count in no step. Rank 1 does more GEMM work each step and is
    waited for in both."""
    ranges, kernels = [], []
    for rank, pid in ((0, 100), (1, 200)):
        for step in (0, 1):
            t0 = 1_000_000 * (step + 1)
            ranges.append({"range_id": len(ranges), "rank": rank, "pid": pid, "tid": pid, "kind": "push_pop",
                           "name": f"step i={step}", "start_ns": t0, "end_ns": t0 + 500_000})  # fmt: skip
            gemm = 100_000 + 50_000 * rank  # rank 1's GEMM is slower
            comm = 60_000 - 40_000 * rank  # so rank 0 waits longer in the all-reduce
            for name, dur, launch in (("nvjet_tst_128x128", gemm, t0 + 10), ("ncclDevKernel_AllReduce", comm, t0 + 20),
                                      ("vectorized_elementwise_kernel", 5_000, t0 + 30)):  # fmt: skip
                kernels.append({"kernel_id": len(kernels), "source": "s", "rank": rank, "pid": pid, "device": rank,
                                "name": name, "start_ns": launch + 100, "end_ns": launch + 100 + dur, "duration_ns": dur,
                                "launch_tid": pid, "launch_start_ns": launch})  # fmt: skip
        # launched before the first step: in no step (it runs inside step 0's time, which must not matter)
        kernels.append({"kernel_id": len(kernels), "source": "s", "rank": rank, "pid": pid, "device": rank,
                        "name": "vectorized_elementwise_kernel", "start_ns": 1_000_050, "end_ns": 1_000_060,
                        "duration_ns": 10, "launch_tid": pid, "launch_start_ns": 999_000})  # fmt: skip
    ra = analyze_ranks(_frames(kernels, ranges))
    assert ra is not None
    steps = ra.steps.select("rank", "step", "kernels", "gemm_ns", "comm_ns", "other_ns", "compute_ns").rows()
    assert steps == [
        (0, 0, 3, 100_000, 60_000, 5_000, 105_000),
        (0, 1, 3, 100_000, 60_000, 5_000, 105_000),
        (1, 0, 3, 150_000, 20_000, 5_000, 155_000),
        (1, 1, 3, 150_000, 20_000, 5_000, 155_000),
    ]
    assert ra.straggler == 1
    assert "it was waited for in 2 of 2 steps" in ra.reasons
    assert dict(ra.ranks.select("rank", "last_arrivals").iter_rows()) == {0: 0, 1: 2}


def test_sequential_worker_processes_are_not_ranks(samples_dir: Path) -> None:
    """`tracekit bench gemm` under nsys runs each backend in a worker process of its own, one after another on
    one GPU: several processes in one export, but one job. They get no ranks (the 2-GPU exports above do)."""
    from tracekit.analyzers.ranks import run_ranks

    frames = load_frames(Run.open(samples_dir / "h200-capture-gemm"))
    assert frames["kernels"]["pid"].n_unique() > 1
    assert run_ranks(frames) == []


def test_h200_two_rank_gloo_capture(samples_dir: Path) -> None:
    """samples/h200-ranks-gloo: `tracekit capture --ranks --nsys` around torchrun, two ranks on one H200,
    8 steps; rank 1 launches 4 extra unranged GEMMs per step (samples/scripts/tp_gemm_gloo.py --slow-rank 1)."""
    run = Run.open(samples_dir / "h200-ranks-gloo")
    assert run.frame_layout("kernels") == "partitioned"
    frames = load_frames(run)
    assert sorted(frames["kernels"]["rank"].unique().to_list()) == [0, 1]
    ra = analyze_ranks(frames)
    assert ra is not None and ra.straggler == 1
    assert ra.steps.group_by("rank").len().sort("rank")["len"].to_list() == [8, 8]
    gemm_ms = dict(zip(ra.ranks["rank"].to_list(), (ra.ranks["gemm_ns"] / 1e6).to_list(), strict=True))
    assert gemm_ms[1] > 1.8 * gemm_ms[0]  # 4 extra GEMMs on top of the 2 ranged ones per step
    in_steps = ra.gemm_spread.filter(pl.col("gemm").str.ends_with(" [step]"))
    assert in_steps.height == 2 and in_steps["ranks"].to_list() == [2, 2]
    assert in_steps["spread_pct"].max() < 5  # the same GEMM on the same GPU: no real straggler in the kernel
