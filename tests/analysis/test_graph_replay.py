"""GEMM kernels replayed from CUDA graphs: attributed to the range that replays them (checked on real files: an
HTA Kineto trace of torch.compile graphs, and the H200 nsys sample whose GEMMs run from a graph), and given the
shapes of the operators recorded while the graph was captured.

No real trace here holds operators recorded during a graph's capture (the HTA trace's graphs were captured before
its profiler started, and this machine has no GPU to make one), so the shape matching is tested on small
synthetic Kineto traces written below, in the layout PyTorch 2.x writes; the H200 capture of
benchmarks/foreign/serve_step.py under ``capture --torch-profiler`` is the real one (samples, issue 27 item 5).
"""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.analyzers.explain import explain_case
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.gemm.graph_replay import NO_SHAPE_NOTE
from tracekit.analyzers.importer import combine
from tracekit.analyzers.readers.kineto.reader import read_kineto
from tracekit.analyzers.store import load_frames, open_run

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
HTA_GRAPHS = SHARED / "thirdparty/hta/negative_queue_length_values_check__rank0.json.gz"
NSYS_GRAPH = ROOT / "samples/h200-foreign-eager_host_gaps"


# --- real files: the join ------------------------------------------------------------------------------------------
@pytest.mark.skipif(not HTA_GRAPHS.is_file(), reason="../shared/data (HTA's traces) is not here")
def test_kineto_graph_replays_join_the_range_around_cudagraphlaunch():
    """Every kernel carrying a cudaGraphLaunch's correlation id belongs to the innermost record_function range
    open on the launching thread at the launch, read independently from the JSON."""
    with gzip.open(HTA_GRAPHS) as f:
        events = json.load(f)["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("name") == "cudaGraphLaunch"}
    notes = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    expected: dict[int, str | None] = {}
    for corr, g in launches.items():
        around = [
            a for a in notes if a["tid"] == g["tid"] and a["ts"] <= g["ts"] and g["ts"] <= a["ts"] + a["dur"]
        ]
        expected[corr] = min(around, key=lambda a: a["dur"])["name"] if around else None
    frames = combine([read_kineto(HTA_GRAPHS)])
    names = dict(zip(frames["ranges"]["range_id"].to_list(), frames["ranges"]["name"].to_list(), strict=True))
    replayed = frames["kernels"].filter(pl.col("correlation_id").is_in(list(launches)))
    assert replayed.height == 135 and replayed["launch_tid"].null_count() == 0
    got = {(r["correlation_id"], names.get(r["range_id"])) for r in replayed.iter_rows(named=True)}
    assert got == {(c, expected[c]) for c in replayed["correlation_id"].to_list()}
    assert sum(1 for _, n in got if n == "DistributedDataParallel.forward") == 35  # 7 graphs x 5 steps


@pytest.mark.skipif(not (NSYS_GRAPH / "raw/nsys.sqlite.xz").is_file(), reason="the H200 sample is not here")
def test_nsys_graph_replays_join_the_nvtx_range_around_cudagraphlaunch(tmp_path):
    """The H200 sample's 200 GEMMs replayed from one graph: under nsys (--cuda-graph-trace=node) each kernel
    carries its cudaGraphLaunch's correlation id; the one replay inside the user's ``graph_loop`` range puts its
    400 kernels there, the upload replay before it none."""
    db = tmp_path / "nsys.sqlite"
    with lzma.open(NSYS_GRAPH / "raw/nsys.sqlite.xz") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(db)
    launches = con.execute(
        "SELECT r.correlationId, r.start, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON r.nameId = s.id WHERE s.value LIKE 'cudaGraphLaunch%'"
    ).fetchall()
    expected = {}
    for corr, start, tid in launches:
        row = con.execute(
            "SELECT text FROM NVTX_EVENTS WHERE globalTid = ? AND start <= ? AND end >= ? AND text IS NOT NULL "
            "ORDER BY end - start LIMIT 1",
            (tid, start, start),
        ).fetchone()
        expected[corr] = row[0] if row else None
    con.close()
    assert sorted(expected.values(), key=str) == [None, "graph_loop"]
    frames = load_frames(open_run(NSYS_GRAPH))
    names = dict(zip(frames["ranges"]["range_id"].to_list(), frames["ranges"]["name"].to_list(), strict=True))
    replayed = frames["kernels"].filter(pl.col("correlation_id").is_in(list(expected)))
    assert replayed.height == 800
    by = replayed.group_by("correlation_id").agg(pl.col("range_id").unique())
    for corr, rids in by.iter_rows():
        assert [names.get(r) for r in rids] == [expected[corr]]


# --- synthetic Kineto traces: shapes of captured operators ------------------------------------------------------
GEMM_A = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
GEMM_B = "nvjet_sm90_tst_128x8_64x16_2x1_v_bz_TNN"
REDUCE = "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float>(...)"
SILU = "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(...)>(...)"
PREFILL = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopB_TNT"
BF16 = "c10::BFloat16"


class _Trace:
    """A Kineto trace written event by event, as PyTorch's profiler lays one out: CPU events on (pid 1, tid 1),
    kernels on the device's stream; times in microseconds."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 100

    def span(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
        e = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}
        self.events.append(e)
        return e

    def kernel(self, name: str, ts: float, dur: float, corr: int, stream: int = 7, grid: int = 132) -> None:
        args = {
            "device": 0,
            "stream": stream,
            "correlation": corr,
            "grid": [grid, 1, 1],
            "block": [384, 1, 1],
        }
        args |= {"registers per thread": 168, "shared memory": 213000}
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                            "dur": dur, "args": args})  # fmt: skip

    def launch(self, ts: float, name: str = "cudaLaunchKernel") -> int:
        self.corr += 1
        self.span("cuda_runtime", name, ts, 2.0, correlation=self.corr)
        return self.corr

    def mm(self, ts: float, m: int, n: int, k: int, kernels: list[str] | None, shapes: bool = True) -> None:
        """``aten::mm`` of an (m, k) by (k, n) product at ``ts``; its kernels run when ``kernels`` is given (eager),
        none when the launch was captured into a graph (``None``)."""
        args = {"Input Dims": [[m, k], [k, n]], "Input type": [BF16, BF16]} if shapes else {}
        self.span("cpu_op", "aten::mm", ts, 10.0, **args)
        corr = self.launch(ts + 2)
        for i, name in enumerate(kernels or []):
            self.kernel(name, ts + 20 + 10 * i, 8.0, corr)

    def replay(self, ts: float, streams: tuple[int, int] = (7, 7)) -> None:
        """One ``graph.replay()`` inside the user's ``serve/decode`` range: two GEMMs (the first split-K with its
        reduce) and an elementwise kernel between, all carrying the cudaGraphLaunch's correlation id."""
        self.span("user_annotation", "serve/decode", ts, 50.0)
        corr = self.launch(ts + 5, "cudaGraphLaunch")
        for i, (name, stream) in enumerate(
            [(GEMM_A, streams[0]), (REDUCE, streams[0]), (SILU, streams[0]), (GEMM_B, streams[1])]
        ):
            self.kernel(name, ts + 100 + 10 * i, 8.0 + i, corr, stream=stream, grid=32 + i)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": self.events}))
        return path


def _serve(
    tmp_path: Path, *, shapes: bool = True, captures: int = 1, streams: tuple[int, int] = (7, 7)
) -> dict[str, pl.DataFrame]:
    """A serving step's trace: an eager warm-up of decode, its capture (``captures`` graphs, the n-th with M=16n),
    three replays inside ``serve/decode``, then an eager prefill inside ``serve/prefill``."""
    t = _Trace()
    t.mm(0, 16, 6656, 6144, [GEMM_A, REDUCE], shapes)  # warm-up: eager, kernels run
    t.mm(40, 16, 6144, 6144, [GEMM_B], shapes)
    for c in range(captures):  # the capture: operators and their launches, no kernel
        base = 1000 + 100 * c
        t.mm(base, 16 * (c + 1), 6656, 6144, None, shapes)
        t.span("cpu_op", "aten::silu", base + 20, 5.0)
        t.launch(base + 21)
        t.mm(base + 40, 16 * (c + 1), 6144, 6144, None, shapes)
    for r in range(3):
        t.replay(5000 + 1000 * r, streams)
    t.span("user_annotation", "serve/prefill", 9000, 500.0)
    t.mm(9010, 4096, 6656, 6144, [PREFILL], shapes)
    return combine([read_kineto(t.write(tmp_path / "serve.json"))])


def _cases(frames: dict[str, pl.DataFrame]) -> dict[str, Any]:
    return {f"{w.case.name} [{w.case.range}]": w for w in map(explain_case, build_cases(frames))}


def _by_kernel(cases: dict[str, Any], kernel: str, where: str) -> Any:
    """The one case of ``kernel`` in the range ``where`` (a case without a shape is named by range and kernel)."""
    (w,) = [w for w in cases.values() if w.case.main_kernel == kernel and w.case.range == where]
    return w


def test_replayed_gemms_take_the_shapes_recorded_while_the_graph_was_captured(tmp_path):
    frames = _serve(tmp_path)
    names = dict(zip(frames["ranges"]["range_id"].to_list(), frames["ranges"]["name"].to_list(), strict=True))
    decode = frames["kernels"].filter(
        pl.col("name").is_in([GEMM_A, GEMM_B, REDUCE, SILU]) & pl.col("start_ns").gt(4_000_000)
    )
    assert decode.height == 12 and {names[r] for r in decode["range_id"]} == {"serve/decode"}
    cases = _cases(frames)
    a = cases["aten::mm M=16 N=6656 K=6144 [serve/decode]"].case
    b = cases["aten::mm M=16 N=6144 K=6144 [serve/decode]"].case
    assert a.graph_replay and a.main_kernel == GEMM_A and a.launches == 3 and a.dtype_class == "bf16"
    assert b.main_kernel == GEMM_B and b.launches == 3 and b.flops == 2 * 16 * 6144 * 6144
    assert a.flops_source == "shape" and a.achieved_tflops and a.shape.source == "captured operator"
    # kernel durations per replay: GEMM A's 8 us and its 9 us split-K reduce (GEMM time), GEMM B's 11 us
    assert a.timing.gemm_ns.median == 17000.0 and a.timing.splitk_ns_total == 3 * 9000.0
    assert b.timing.gemm_ns.median == 11000.0
    # the eager prefill GEMM is a case of its own operator, with its shape, in serve/prefill
    p = cases["aten::mm M=4096 N=6656 K=6144 [serve/prefill]"].case
    assert p.main_kernel == PREFILL and p.flops == 2 * 4096 * 6656 * 6144
    # nothing is left to be explained by kernel name alone
    assert not [w for w in cases.values() if w.case.origin == "kernel"]


def test_without_captured_shapes_the_case_says_what_to_capture(tmp_path):
    frames = _serve(tmp_path, shapes=False)
    cases = _cases(frames)
    a = _by_kernel(cases, GEMM_A, "serve/decode")
    assert a.case.graph_replay and a.case.launches == 3 and a.case.flops is None
    assert (
        NO_SHAPE_NOTE in a.notes and NO_SHAPE_NOTE == "FLOPs unknown (CUDA graph replay): capture with --ncu"
    )
    # the run's Analysis (what explain, show, report and view render) gives it as the case's verdict
    from tracekit.analyzers.analysis.build import analyze_frames

    # (GEMM A's calls also hold the replay's idle time: its verdict is the launch gaps, measured without FLOPs)
    (case,) = [
        c for c in analyze_frames(frames).cases if c.kernel.name == GEMM_B and c.range == "serve/decode"
    ]
    # its waves and calls are measured and lose nothing: it says so, and what stays unknown
    assert case.verdict.kind == "no-measured-loss"
    assert case.verdict.unknown.startswith("FLOPs unknown (CUDA graph replay): the achieved TFLOP/s")
    assert case.verdict.capture_hint == "capture with --ncu"


def test_several_captures_that_fit_leave_the_shape_unknown_rather_than_guess(tmp_path):
    # two graphs captured (M=16 and M=32), each with two GEMM operators: which one replays cannot be told
    cases = _cases(_serve(tmp_path, captures=2))
    assert _by_kernel(cases, GEMM_A, "serve/decode").case.flops is None
    assert NO_SHAPE_NOTE in _by_kernel(cases, GEMM_B, "serve/decode").notes
    assert not any(k.startswith("aten::mm") and k.endswith("[serve/decode]") for k in cases)


def test_a_graph_on_two_streams_is_not_matched_by_order(tmp_path):
    cases = _cases(_serve(tmp_path, streams=(7, 9)))
    assert NO_SHAPE_NOTE in _by_kernel(cases, GEMM_A, "serve/decode").notes
