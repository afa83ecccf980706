"""``tracekit export``: the Chrome trace-event format (keys, phases, named tracks), the GEMM calls' args from the
Analysis, the marks and counters, the filters, and the round trip through tracekit's own Kineto reader: the same
kernels at the same times, to the nanosecond."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import polars.testing
import pytest

import tracekit

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "samples" / "h100-serve-torchprof"  # PyTorch profiler: ops with shapes, CUDA-graph decode
NSYS = ROOT / "samples" / "h100-serve-nsys-ncu"  # nsys + ncu: NVTX ranges, SM clocks
CAPTURE = ROOT / "samples" / "h200-capture-gemm"
PHASES = {"X", "M", "i", "C"}


def _export(run: Path, out: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "export", str(run), "-o", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _export(SERVE, tmp_path_factory.mktemp("x") / "serve.json")


@pytest.fixture(scope="module")
def nsys(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _export(NSYS, tmp_path_factory.mktemp("x") / "nsys.json")


@pytest.mark.parametrize("which", ["serve", "nsys"])
def test_trace_event_format(which: str, request: pytest.FixtureRequest) -> None:
    doc = request.getfixturevalue(which)
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ns" and isinstance(doc["otherData"]["base_ns"], int)
    assert {e["ph"] for e in events} <= PHASES
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in events:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int)
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "thread_name", "process_sort_index"} and e["args"]
            if e["name"] != "process_sort_index":
                assert isinstance(e["args"]["name"], str) and e["args"]["name"]
        elif e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["cat"]
            assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int) and e["dur"] >= 0
            assert e["pid"] in named_pids and (e["pid"], e["tid"]) in named_tids
        elif e["ph"] == "i":
            assert e["s"] in {"g", "p", "t"} and "ts" in e
        elif e["ph"] == "C":
            assert all(isinstance(v, float | int) for v in e["args"].values())
    gpu = [
        e
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("GPU")
    ]
    assert gpu and "H100" in gpu[0]["args"]["name"]


def test_kernels_have_their_class_as_category(serve: dict) -> None:
    run = tracekit.load(SERVE)
    want = Counter(run.frames["kernels"]["kernel_class"].fill_null("other").to_list())
    got = Counter(e["cat"] for e in serve["traceEvents"] if e["ph"] == "X" and "class" in e.get("args", {}))
    assert got == want


@pytest.mark.parametrize("run_path", [SERVE, NSYS, CAPTURE])
def test_every_gemm_call_carries_its_case(run_path: Path, tmp_path: Path) -> None:
    doc = _export(run_path, tmp_path / "t.json")
    analysis = tracekit.load(run_path).analyze()
    calls = [e for e in doc["traceEvents"] if e["ph"] == "X" and "case_id" in e.get("args", {})]
    per_case = Counter(e["args"]["case_id"] for e in calls)
    for case in analysis.cases:  # one GEMM kernel per call: every call of every case, no other kernel
        assert per_case.get(case.id, 0) == case.timing.launches, case.label
    assert sum(per_case.values()) == sum(c.timing.launches for c in analysis.cases)
    by_id = {c.id: c for c in analysis.cases}
    for e in calls:
        a, c = e["args"], by_id[e["args"]["case_id"]]
        assert e["cat"] == "gemm" and e["name"] == c.kernel.name
        assert a["case"] == c.label and a["pct_of_peak"] == c.pct_of_peak
        assert (
            a["achieved_tflops"] == c.timing.achieved_tflops and a["kernel_tflops"] == c.timing.kernel_tflops
        )
        assert a["cost_ms"] == (
            None if c.verdict.lost_ns_total is None else pytest.approx(c.verdict.lost_ns_total / 1e6)
        )
        assert (c.verdict.factor or c.verdict.kind) in a["verdict"]
        for f in c.factors:
            assert f"{f.name} x{f.value:.3f}" in a["factors"]
    # the largest losses: one instant event each at the case's first call, and the rank in every call's args
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    tops = list(dict.fromkeys(loss.case_id for loss in analysis.summary.top_losses))
    assert [m["args"]["case_id"] for m in sorted(marks, key=lambda m: m["name"])] == tops
    for rank, case_id in enumerate(tops, 1):
        first = min(e["ts"] for e in calls if e["args"]["case_id"] == case_id)
        mark = next(m for m in marks if m["args"]["case_id"] == case_id)
        assert mark["ts"] == first and mark["name"].startswith(f"top loss #{rank}:")
        # a case holding several of the largest losses is marked once, naming each factor
        assert all(
            loss.factor in mark["name"] for loss in analysis.summary.top_losses if loss.case_id == case_id
        )
        assert {e["args"]["top_loss"] for e in calls if e["args"]["case_id"] == case_id} == {rank}


def test_each_place_case_gets_the_launches_at_its_place(nsys: dict) -> None:
    """GEMMs sharing one kernel and grid in a range, told apart by their place in its instances (cuBLAS's
    persistent ``nvjet_sm90_tst_*`` kernels on the nsys serving sample): each such case's calls are exactly the
    launches whose number among their instance's GEMM launches (numbered here from the frames, by start) its
    ``place`` holds, as its name says; no launch of the shared kernel goes to another of its cases."""
    run = tracekit.load(NSYS)
    placed = [c for c in run.analyze().cases if c.place]
    assert {c.range for c in placed} == {"serve/prefill", "serve/decode"}
    base = nsys["otherData"]["base_ns"]
    got: dict[str, set[tuple[int, int]]] = {}
    for e in nsys["traceEvents"]:
        if e["ph"] == "X" and "case_id" in e.get("args", {}):
            got.setdefault(e["args"]["case_id"], set()).add(
                (e["args"]["stream"], base + round(e["ts"] * 1000))
            )
    kernels, ranges = run.frames["kernels"], run.frames["ranges"]
    for rng in {c.range for c in placed}:
        instances = ranges.filter(pl.col("name") == rng)["range_id"]
        gemm = (
            kernels.filter((pl.col("kernel_class") == "gemm") & pl.col("range_id").is_in(instances.implode()))
            .sort("start_ns", "kernel_id")
            .with_columns((pl.int_range(pl.len()).over("range_id") + 1).alias("nth"))
        )
        mine = [c for c in placed if c.range == rng]
        assert len({c.kernel.name for c in mine}) < len(mine)  # cases that share a kernel
        for case in mine:
            nth, launches = case.place.nth, case.place.launches  # type: ignore[union-attr]
            word = "launch" if len(nth) == 1 else "launches"
            assert case.name.endswith(f"GEMM {word} {', '.join(map(str, nth))} of {launches})")
            assert gemm.group_by("range_id").len()["len"].unique().to_list() == [launches]
            want = gemm.filter(pl.col("nth").is_in(nth))
            assert want["name"].unique().to_list() == [case.kernel.name]
            assert got[case.id] == set(want.select("stream", "start_ns").iter_rows()), case.label
            assert len(got[case.id]) == case.timing.launches


def test_sm_clock_counters_where_measured(nsys: dict, serve: dict) -> None:
    analysis = tracekit.load(NSYS).analyze()
    counters = [e for e in nsys["traceEvents"] if e["ph"] == "C"]
    calls = {
        (e["pid"], e["ts"]): e["args"]["case_id"]
        for e in nsys["traceEvents"]
        if "case_id" in e.get("args", {})
    }
    assert counters and len(counters) == len(calls)
    for e in counters:
        case = analysis.case(calls[(e["pid"], e["ts"])])
        assert e["name"] == "SM clock (MHz)" and e["args"]["MHz"] == pytest.approx(case.sm_clock_hz / 1e6)
    assert not [e for e in serve["traceEvents"] if e["ph"] == "C"]  # the PyTorch profiler measured no clock


def test_ranges_are_on_their_threads(serve: dict) -> None:
    ranges = tracekit.load(SERVE).frames["ranges"]
    got = [
        e
        for e in serve["traceEvents"]
        if e["ph"] == "X" and e["cat"] in {"user_annotation", "cpu_op", "gpu_user_annotation"}
    ]
    assert len(got) == ranges.height
    user = {(e["pid"], e["tid"], e["name"]) for e in got if e["cat"] == "user_annotation"}
    want = {
        (p, t, n)
        for p, t, n, k in ranges.select("pid", "tid", "name", "kind").iter_rows()
        if k == "annotation"
    }
    assert user == want and any(n == "serve/prefill" for _, _, n in user)


def test_read_back_through_the_kineto_reader(tmp_path: Path) -> None:
    out = tmp_path / "kineto.json"
    doc = _export(SERVE, out, "--cat", "kernel")
    base = doc["otherData"]["base_ns"]
    cols = ["name", "start_ns", "duration_ns", "device", "stream", "correlation_id"]
    before = tracekit.load(SERVE).frames["kernels"].select(cols).with_columns(pl.col("start_ns") - base)
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "import", str(out), "-o", str(tmp_path / "back")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = tracekit.load(tmp_path / "back").frames["kernels"].select(cols)
    key = ["start_ns", "correlation_id", "name"]
    pl.testing.assert_frame_equal(before.sort(key), after.sort(key), check_dtypes=False)
    ranges = tracekit.load(tmp_path / "back").frames["ranges"]
    assert ranges.filter(pl.col("name") == "serve/prefill").height == 2 * 30  # CPU and GPU side, every step


def test_the_default_categories_differ_from_kinetos_only_in_cat(serve: dict, tmp_path: Path) -> None:
    kineto = _export(SERVE, tmp_path / "k.json", "--cat", "kernel")
    strip = [{k: v for k, v in e.items() if k != "cat"} for e in serve["traceEvents"]]
    assert strip == [{k: v for k, v in e.items() if k != "cat"} for e in kineto["traceEvents"]]


def test_ranges_filter_keeps_what_the_ranges_hold(tmp_path: Path) -> None:
    doc = _export(SERVE, tmp_path / "p.json", "--ranges", "^serve/prefill$")
    run = tracekit.load(SERVE)
    ranges = run.frames["ranges"]
    parent = dict(zip(ranges["range_id"].to_list(), ranges["parent_id"].to_list(), strict=True))
    name = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))

    def inside(rid: int | None) -> bool:
        while rid is not None:
            if name[rid] == "serve/prefill":
                return True
            rid = parent[rid]
        return False

    ks = run.frames["kernels"]
    want = {c for c, r in ks.select("correlation_id", "range_id").iter_rows() if inside(r)}
    got = {e["args"]["correlation"] for e in doc["traceEvents"] if e["ph"] == "X" and "class" in e["args"]}
    assert got == want and 0 < len(got) < ks.height
    assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "user_annotation"} == {
        "serve/prefill"
    }


def test_time_window(tmp_path: Path) -> None:
    doc = _export(SERVE, tmp_path / "w.json", "--from-ms", "2200", "--to-ms", "2400")
    ks = tracekit.load(SERVE).frames["kernels"]
    first = ks["start_ns"].min()
    lo, hi = first + 2_200_000_000, first + 2_400_000_000
    want = ks.filter((pl.col("end_ns") >= lo) & (pl.col("start_ns") <= hi)).height
    got = [e for e in doc["traceEvents"] if e["ph"] == "X" and "class" in e["args"]]
    assert len(got) == want and 0 < want < ks.height


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([str(SERVE), "-o", "x.json", "--ranges", "("], "not a regular expression"),
        ([str(SERVE), "-o", "x.json", "--from-ms", "5", "--to-ms", "1"], "--to-ms is before --from-ms"),
        ([str(ROOT / "samples" / "h200-ranges-attn"), "-o", "x.json"], "no kernel timeline"),
        (["no/such/run", "-o", "x.json"], "no/such/run"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "export", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr and not (tmp_path / "x.json").exists()


def _trace_processor_shell() -> str | None:
    return os.environ.get("TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")


def test_perfetto_trace_processor_reads_it(serve: dict, tmp_path: Path) -> None:
    tp_mod = pytest.importorskip(
        "perfetto.trace_processor", reason="the `perfetto` package is not installed (pip install perfetto)"
    )
    shell = _trace_processor_shell()
    if shell is None:
        pytest.skip(
            "Perfetto's trace processor needs its trace_processor_shell binary, which the `perfetto` package "
            "downloads at run time from commondatastorage.googleapis.com; no network here and none on PATH "
            "(set TRACE_PROCESSOR_SHELL=/path/to/trace_processor_shell)"
        )
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(serve))
    tp = tp_mod.TraceProcessor(trace=str(path), config=tp_mod.TraceProcessorConfig(bin_path=shell))
    try:
        n = next(iter(tp.query("select count(*) as n from slice where category = 'gemm'"))).n
        want = sum(1 for e in serve["traceEvents"] if e["ph"] == "X" and e["cat"] == "gemm")
        assert n == want
        names = {r.name for r in tp.query("select name from thread where name like 'stream %'")}
        assert names and all(re.fullmatch(r"stream \d+", x) for x in names)
    finally:
        tp.close()
