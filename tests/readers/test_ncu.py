"""Nsight Compute readers: .ncu-rep (analyzers/readers/ncu/report.py) and CSV exports (analyzers/readers/ncu/csv_export.py), on real files."""

from __future__ import annotations

import csv
import re
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.analyzers.readers.ncu import report as ncu_mod
from tracekit.analyzers.readers.ncu.columns import function_name, to_base
from tracekit.analyzers.readers.ncu.csv_export import read_ncu_csv, sniff_ncu_csv
from tracekit.analyzers.readers.ncu.report import (
    check_structure,
    clock_control,
    is_ncu_report,
    read_ncu_report,
)
from tracekit.errors import UnreadableFileError
from tracekit.frames import DEVICES, NCU, NCU_METRICS, NCU_RULES

PROBE = "h200-probe/probe.ncu-rep"
RTX50 = "thirdparty/llm-perf-opt-rtx50"
PROBE_NAMES = [
    "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT",
    "nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT",
    "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_TNT",
    "nvjet_sm90_qqtst_128x160_128x5_2x1_v_bz_coopA_algo2_TNT",
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT",
]
PROBE_RANGES = [
    "gemm/bf16/M=1024,N=2048,K=6144",
    "gemm/fp8/M=1024,N=2048,K=6144",
    "gemm/bf16/M=16,N=6144,K=6144",
    "gemm/fp8/M=16384,N=6144,K=6144",
    "gemm/bf16/M=8192,N=8192,K=8192",
]
SPECS = {"ncu": NCU, "ncu_metrics": NCU_METRICS, "ncu_rules": NCU_RULES, "devices": DEVICES}


def _manifest(shared: Path) -> list[dict[str, str]]:
    with open(shared / "thirdparty" / "MANIFEST.tsv", newline="") as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] == "ncu-rep"]


@pytest.fixture(scope="module")
def probe(shared_data: Path):
    return read_ncu_report(shared_data / PROBE)


@pytest.fixture(scope="module")
def probe_csv(shared_data: Path):
    return read_ncu_csv(shared_data / "h200-probe" / "ncu_raw.csv")


# --- every report ---------------------------------------------------------------------------------------------


def test_every_report_loads_with_manifest_kernel_counts(shared_data: Path) -> None:
    rows = _manifest(shared_data)
    assert len(rows) == 10
    for row in rows:
        path = shared_data / "thirdparty" / row["local_path"]
        ex = read_ncu_report(path)
        df = ex.frames["ncu"]
        expected = int(re.match(r"(\d+) profiled launches", row["kernels"])[1])
        assert df.height == expected, row["local_path"]
        assert df["device_name"].null_count() == 0 and df["compute_capability"].null_count() == 0
        # MANIFEST says e.g. "NVIDIA A100 80GB PCIe sm_80": name and compute capability must agree.
        name, sm = row["gpu_arch"].rsplit(" ", 1)
        assert set(df["device_name"]) == {name}
        assert set(df["compute_capability"]) == {f"{sm[3:-1]}.{sm[-1]}"}
        assert df["sm_count"].null_count() == 0  # older reports lack launch__sm_count: the attribute fills it
        assert ex.frames["devices"].height == 1
        assert ex.frames["ncu_metrics"].height > 0
        for frame, spec in SPECS.items():
            assert ex.frames[frame].schema == spec.schema, (row["local_path"], frame)


def test_int8_gemm_tensor_pipe_uses_all_types_metric(shared_data: Path) -> None:
    """An IMMA (int8) kernel on A100 shows 0% in the hmma metric; the aggregate tensor metric says 21%."""
    df = read_ncu_report(shared_data / "thirdparty/panjd123-cutlass/report75.ncu-rep").frames["ncu"]
    first = df.row(0, named=True)
    assert first["tensor_pipe_metric"] == "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    assert first["tensor_pipe_pct"] == pytest.approx(20.968, abs=1e-3)
    assert first["device_name"] == "NVIDIA A100 80GB PCIe" and first["sm_count"] == 108
    assert first["clock_control"] == "base"  # the command line says --clock-control base


def test_old_report_without_sm_count_metric_falls_back(shared_data: Path) -> None:
    ex = read_ncu_report(shared_data / "thirdparty/yzwang2000-cudacode/profile.ncu-rep")
    df = ex.frames["ncu"]
    assert df["sm_count"].to_list() == [68, 68]  # RTX 2080 Ti, from device__attribute_multiprocessor_count
    assert df["compute_capability"].to_list() == ["7.5", "7.5"]
    assert df["boost_clock_hz"].to_list() == [1.62e9, 1.62e9]
    assert df["clock_control"].to_list() == ["base", "base"]  # ncu's default: no --clock-control given
    assert df["nvtx_range"].null_count() == 2


# --- the H200 probe ---------------------------------------------------------------------------------------------


def test_probe_kernels(probe) -> None:
    df = probe.frames["ncu"]
    assert probe.kind == "ncu" and probe.source == "probe.ncu-rep"
    assert df["name"].to_list() == PROBE_NAMES
    assert df["nvtx_range"].to_list() == PROBE_RANGES
    assert df["nvtx_stack"][0].to_list() == [{"domain": None, "name": PROBE_RANGES[0]}]
    assert df["ncu_id"].to_list() == [0, 1, 2, 3, 4]
    assert df["action_index"].to_list() == [0, 1, 2, 3, 4]
    assert set(df["sm_count"]) == {132} and set(df["compute_capability"]) == {"9.0"}
    assert set(df["device_name"]) == {"NVIDIA H200"}
    k0 = df.row(0, named=True)
    assert k0["tensor_pipe_pct"] == pytest.approx(90.13, abs=0.01)
    assert k0["sm_clock_hz"] == pytest.approx(1.692e9, rel=1e-3)
    assert k0["boost_clock_hz"] == 1.98e9
    assert k0["duration_ns"] == 34816.0
    assert (k0["grid_x"], k0["grid_y"], k0["grid_z"], k0["grid_size"]) == (2, 64, 1, 128)
    assert (k0["block_x"], k0["block_size"], k0["registers_per_thread"]) == (384, 384, 168)
    assert (k0["dynamic_smem_bytes"], k0["smem_per_block_limit_bytes"]) == (213220, 232448)
    assert k0["theoretical_occupancy_pct"] == 18.75
    assert k0["occupancy_limit_registers"] == 1 and k0["occupancy_limit_warps"] == 5
    assert k0["clock_control"] == "none"
    assert k0["dram_bytes"] is None  # these sections only give the rate
    assert k0["dram_bytes_per_s"] == pytest.approx(1.1529e12, rel=1e-4)
    dev = probe.frames["devices"].row(0, named=True)
    assert (dev["name"], dev["device"], dev["sm_count"]) == ("NVIDIA H200", 0, 132)
    assert dev["memory_bytes"] == 150109880320


def test_probe_rules(probe) -> None:
    rules = probe.frames["ncu_rules"]
    assert rules.height > 0 and rules["message"].null_count() == 0
    assert set(rules["kind"]) <= {"OK", "OPTIMIZATION", "WARNING", "ERROR", "NONE"}
    first_kernel = rules.filter(pl.col("ncu_id") == 0)
    small_grid = first_kernel.filter(pl.col("rule") == "LaunchConfiguration").row(0, named=True)
    assert small_grid["title"] == "Small Grid" and small_grid["section"] == "LaunchStats"
    assert small_grid["speedup_pct"] == pytest.approx(3.03, abs=0.01)
    assert small_grid["speedup_type"] == "global"
    assert "128 blocks" in small_grid["message"]


def test_probe_metrics_long_frame_has_every_metric(shared_data: Path, probe) -> None:
    import ncu_report

    ctx = ncu_report.load_report(str(shared_data / PROBE))
    counts = [len(a.metric_names()) for r in ctx for a in r]
    m = probe.frames["ncu_metrics"]
    assert m.height == sum(counts) == 3730
    assert m.group_by("ncu_id").len().sort("ncu_id")["len"].to_list() == counts
    name = m.filter((pl.col("ncu_id") == 0) & (pl.col("metric") == "device__attribute_display_name"))
    assert name.row(0, named=True)["text"] == "NVIDIA H200" and name["value"][0] is None
    clock = m.filter((pl.col("ncu_id") == 0) & (pl.col("metric") == "gpc__cycles_elapsed.avg.per_second"))
    assert clock["unit"][0] == "hz" and clock["value"][0] == pytest.approx(1.692e9, rel=1e-3)


def test_in_process_read_matches_isolated(shared_data: Path, probe) -> None:
    direct = read_ncu_report(shared_data / PROBE, isolate=False)
    for frame in SPECS:
        assert_frame_equal(direct.frames[frame], probe.frames[frame])


def test_probe_reads_fast(shared_data: Path) -> None:
    start = time.perf_counter()
    read_ncu_report(shared_data / PROBE)
    assert time.perf_counter() - start < 2.0  # 0.25-0.3 s measured on 2 cores, child process included


# --- CSV exports ---------------------------------------------------------------------------------------------


def test_sniff_csv_layouts(shared_data: Path) -> None:
    assert sniff_ncu_csv(shared_data / "h200-probe/ncu_raw.csv") == "raw"
    for f in sorted((shared_data / RTX50).glob("kernel_*_ncu.*.csv")):
        assert sniff_ncu_csv(f) == "details", f.name
    for f in ("metrics_summary.csv", "all_metrics_long.csv"):
        assert sniff_ncu_csv(shared_data / RTX50 / f) is None
    assert sniff_ncu_csv(shared_data / "h200-probe/gemm_bench.csv") is None
    assert sniff_ncu_csv(shared_data / PROBE) is None


def _close(a: float | None, b: float | None) -> bool:
    """Equal to the CSV's rounding: it prints 6 decimals, or 2 for unitless ratios."""
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-5 * abs(b) + 0.005


def test_raw_csv_matches_report(probe, probe_csv) -> None:
    rep, exp = probe.frames["ncu"], probe_csv.frames["ncu"]
    assert exp.schema == NCU.schema and exp.height == 5
    for column, dtype in NCU.schema.items():
        if column in ("source", "range_index", "clock_control"):
            continue  # not in a CSV
        for r, c in zip(rep[column].to_list(), exp[column].to_list(), strict=True):
            if dtype == pl.Float64:
                assert _close(c, r), (column, r, c)
            else:
                assert c == r, (column, r, c)
    dev_rep, dev_csv = probe.frames["devices"], probe_csv.frames["devices"]
    assert_frame_equal(dev_rep.drop("source"), dev_csv.drop("source"))


def test_raw_csv_metrics_match_report(probe, probe_csv) -> None:
    rep, exp = probe.frames["ncu_metrics"], probe_csv.frames["ncu_metrics"]
    joined = rep.join(exp, on=["ncu_id", "metric"], how="full", suffix="_csv", coalesce=True)
    missing = joined.filter(pl.col("text_csv").is_null() & (pl.col("text") != ""))["metric"].unique()
    assert missing.len() == 8 and all(m.startswith("breakdown:") for m in missing)  # not on the raw page
    both = joined.filter(pl.col("value").is_not_null() | pl.col("value_csv").is_not_null())
    assert both.height > 3600
    bad = [r for r in both.iter_rows(named=True) if not _close(r["value_csv"], r["value"])]
    assert not bad
    # CSV units (Ghz, Kbyte, ms) are brought back to the report's base units.
    assert both.filter(pl.col("unit") != pl.col("unit_csv")).height == 0


def test_details_csv(shared_data: Path) -> None:
    ex = read_ncu_csv(shared_data / RTX50 / "kernel_0003_ncu.details.csv")
    assert ex.kind == "ncu-csv"
    k = ex.frames["ncu"].row(0, named=True)
    assert k["name"] == "Kernel2"
    assert k["demangled_name"].startswith("void Kernel2<cutlass_80_wmma_tensorop_bf16")
    assert k["compute_capability"] == "12.0"
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"]) == (152, 4, 1, 128)
    assert k["duration_ns"] == pytest.approx(23420.0)
    assert k["sm_clock_hz"] == pytest.approx(1.99e9) and k["dram_clock_hz"] == pytest.approx(13.77e9)
    assert k["theoretical_occupancy_pct"] == 16.67 and k["achieved_occupancy_pct"] == 15.18
    assert k["occupancy_limit_shared_mem"] == 2 and k["l2_hit_rate_pct"] == 95.4
    assert k["dram_bytes"] == pytest.approx(3.35e6)  # dram__bytes_read.sum 3.35 Mbyte + write 0
    rules = ex.frames["ncu_rules"]
    occ = rules.filter(pl.col("rule") == "TheoreticalOccupancy").row(0, named=True)
    assert (occ["kind"], occ["speedup_pct"], occ["speedup_type"]) == ("OPTIMIZATION", 38.17, "global")
    assert ex.frames["devices"].row(0, named=True)["compute_capability"] == "12.0"
    metrics = ex.frames["ncu_metrics"]
    # SOL "Duration" and the command-line section both give gpu__time_duration.sum: kept once.
    assert metrics.filter(pl.col("metric") == "gpu__time_duration.sum").height == 1
    for frame, spec in SPECS.items():
        assert ex.frames[frame].schema == spec.schema


def test_metrics_variant_agrees_with_details(shared_data: Path) -> None:
    for kernel in ("0003", "0005", "0016"):
        details = read_ncu_csv(shared_data / RTX50 / f"kernel_{kernel}_ncu.details.csv").frames["ncu"]
        metrics = read_ncu_csv(shared_data / RTX50 / f"kernel_{kernel}_ncu.metrics.csv").frames["ncu"]
        for column in ("name", "duration_ns", "compute_throughput_pct", "dram_throughput_pct", "grid_size"):
            assert metrics[column][0] == details[column][0], (kernel, column)


@pytest.mark.parametrize("name", ["metrics_summary.csv", "all_metrics_long.csv"])
def test_user_summaries_are_rejected(shared_data: Path, name: str) -> None:
    with pytest.raises(UnreadableFileError, match="not an Nsight Compute CSV export") as err:
        read_ncu_csv(shared_data / RTX50 / name)
    assert "--page raw --csv" in err.value.one_line()


def test_csv_with_profiler_chatter_before_header(tmp_path: Path, shared_data: Path) -> None:
    """`ncu --csv ... > out.csv` also captures ==PROF== lines and program output ahead of the table."""
    text = (shared_data / "h200-probe/ncu_raw.csv").read_text()
    f = tmp_path / "out.txt"
    f.write_text("==PROF== Connected to process 1218\nhello from the app\n" + text)
    assert sniff_ncu_csv(f) == "raw"
    assert read_ncu_csv(f).frames["ncu"]["name"].to_list() == PROBE_NAMES


# --- damaged files ---------------------------------------------------------------------------------------------


def _damaged(tmp_path: Path, shared: Path, how: str) -> Path:
    data = bytearray((shared / PROBE).read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":
        mid = len(data) // 2
        data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    elif how == "empty":
        data = bytearray()
    elif how == "text":
        data = bytearray(b"this is not a report\n" * 20)
    elif how == "header":
        data = data[:8]
    elif how == "count":
        data[17] = 2  # the first block now announces 2 results it does not hold: ncu_report aborts on this
    f = tmp_path / f"{how}.ncu-rep"
    f.write_bytes(bytes(data))
    return f


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("truncated", "past the end of the file"),
        ("flipped", "has no metrics"),
        ("empty", "the file is empty"),
        ("text", "not an Nsight Compute report"),
        ("header", "file header is cut off"),
        ("count", "announces 2 records but holds 0"),
    ],
)
def test_damaged_reports_raise(tmp_path: Path, shared_data: Path, how: str, says: str) -> None:
    f = _damaged(tmp_path, shared_data, how)
    with pytest.raises(UnreadableFileError, match=says) as err:
        read_ncu_report(f)
    assert "\n" not in err.value.one_line()


def test_reader_crash_is_contained(tmp_path: Path, shared_data: Path) -> None:
    """Past the structure check, Nsight Compute's reader itself aborts (SIGABRT) on this file: the child dies,
    the caller gets an error."""
    f = _damaged(tmp_path, shared_data, "count")
    with pytest.raises(UnreadableFileError, match="killed by SIGABRT"):
        ncu_mod._load_isolated(f, timeout_s=60)


def test_is_ncu_report(tmp_path: Path, shared_data: Path) -> None:
    assert is_ncu_report(shared_data / PROBE)
    assert not is_ncu_report(shared_data / "h200-probe/ncu_raw.csv")
    assert not is_ncu_report(shared_data / "h200-probe/probe.sqlite")
    assert not is_ncu_report(_damaged(tmp_path, shared_data, "empty"))
    assert not is_ncu_report(tmp_path / "missing.ncu-rep")


def test_corrupt_csv(tmp_path: Path) -> None:
    f = tmp_path / "x.csv"
    f.write_text("")
    with pytest.raises(UnreadableFileError, match="the file is empty"):
        read_ncu_csv(f)
    f.write_bytes(b"\x00\x01binary")
    with pytest.raises(UnreadableFileError, match="not an Nsight Compute CSV export"):
        read_ncu_csv(f)


# --- small pieces --------------------------------------------------------------------------------------------


def test_structure_counts_results(shared_data: Path) -> None:
    s = check_structure(shared_data / PROBE)
    assert s.results == 5 and s.size == (shared_data / PROBE).stat().st_size
    assert "--clock-control none" in s.command_line


def test_clock_control_parsing() -> None:
    assert clock_control("/opt/ncu --clock-control none -o x python3 a.py") == "none"
    assert clock_control("/opt/ncu --clock-control=base --set full ./a.out") == "base"
    assert clock_control("/usr/local/cuda/bin/ncu -o profile ./a.out") == "base"
    assert clock_control("python3 a.py") is None
    assert clock_control(None) is None


def test_units_to_base() -> None:
    assert to_base(1.691948, "Ghz") == (pytest.approx(1.691948e9), "hz")
    assert to_base(0.034816, "ms") == (pytest.approx(34816.0), "ns")
    assert to_base(214.244, "Kbyte/block") == (pytest.approx(214244.0), "byte/block")
    assert to_base(8.19, "%/Kbyte") == (pytest.approx(8190.0), "%/byte")
    assert to_base(1.152934, "Tbyte/s") == (pytest.approx(1.152934e12), "byte/s")
    assert to_base(1.41, "cycle/nsecond") == (pytest.approx(1.41e9), "hz")
    assert to_base(3.0, "inst/cycle") == (3.0, "inst/cycle")


def test_function_name() -> None:
    assert function_name("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<int, 3>>(Params)") == "Kernel"
    assert function_name("void Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>(Params)") == "Kernel2"
    assert function_name(PROBE_NAMES[0]) == PROBE_NAMES[0]
    assert function_name("kernel_A(double *, int, int)") == "kernel_A"
