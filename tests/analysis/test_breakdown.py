"""The step breakdown (analyzers/breakdown) on real traces and exports: its interval arithmetic against an
independent sweep in plain Python, its invariants on every shared file, the per-range windows and the folding
of range names."""

from __future__ import annotations

import functools
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tracekit.analyzers.breakdown import (
    CLASS_ORDER,
    COMPUTE_EXCLUDED,
    IDLE,
    activity,
    breakdown,
    fold_range_name,
)
from tracekit.analyzers.breakdown.intervals import window_stats
from tracekit.analyzers.importer import combine, read_file

TRACE_DIFF = "thirdparty/hta/trace_diff__control__control.json.gz"
NCCL = "thirdparty/hta/nccl_parser_config__nccl_data.json.gz"
H100_2GPU = "thirdparty/nsys-ai/h100_2gpu_1s.sqlite"
MFU_BEFORE = "thirdparty/nsys-ai/mfu_2gpu_before.sqlite"
QWEN = "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@functools.cache
def _frames(path: Path) -> dict[str, pl.DataFrame]:
    return combine([read_file(path)])


def _sweep(rows: list[tuple[int, int, str]]) -> tuple[int, dict[str, int], dict[str, int]]:
    """Busy time, the time each class owns (the first running class of CLASS_ORDER takes an instant) and each
    class's own union, by walking the start / end events in time order."""
    rank = {c: i for i, c in enumerate(CLASS_ORDER)}
    events = sorted([(s, 1, c) for s, e, c in rows] + [(e, -1, c) for s, e, c in rows])
    running = [0] * len(CLASS_ORDER)
    busy = 0
    owned: dict[str, int] = {}
    union: dict[str, int] = {}
    last = None
    for t, step, c in events:
        if last is not None and t > last:
            active = [i for i, n in enumerate(running) if n > 0]
            if active:
                busy += t - last
                first = CLASS_ORDER[active[0]]
                owned[first] = owned.get(first, 0) + t - last
                for i in active:
                    union[CLASS_ORDER[i]] = union.get(CLASS_ORDER[i], 0) + t - last
        running[rank[c]] += step
        last = t
    return busy, owned, union


def test_the_priority_order_names_every_kernel_class_once() -> None:
    """CLASS_ORDER is the taxonomy's classes in priority order: a class added to the taxonomy and not here would
    be counted as ``other`` by the breakdown (its fallback for a newer table), silently."""
    from tracekit.analyzers.taxonomy.table import CLASSES

    assert sorted(CLASS_ORDER) == sorted(CLASSES) and len(set(CLASS_ORDER)) == len(CLASS_ORDER)


@pytest.mark.parametrize("rel", [TRACE_DIFF, NCCL, MFU_BEFORE])
def test_unions_and_owned_time_match_a_plain_sweep(shared_data: Path, rel: str) -> None:
    fr = _frames(shared_data / rel)
    rows = activity(fr)
    b = breakdown(fr, with_ranges=False)
    assert b.devices
    for s in b.devices:
        mine = rows.filter((pl.col("device") == s.device) & pl.col("rank").eq_missing(s.rank))
        busy, owned, union = _sweep(list(mine.select("start_ns", "end_ns", "cls").iter_rows()))
        assert s.busy_ns == busy
        assert {c.cls: c.time_ns for c in s.classes if c.cls != IDLE} == owned
        assert {c.cls: c.union_ns for c in s.classes if c.cls != IDLE} == union
        assert s.span_ns == mine["end_ns"].max() - mine["start_ns"].min()
        assert s.kernels == mine.height == sum(c.kernels for c in s.classes)


def test_windows_match_a_plain_sweep_of_clipped_rows(shared_data: Path) -> None:
    """Any window (here the CPU spans of trace_diff's ProfilerSteps and seven equal slices of the GPU's span):
    what the window arithmetic finds equals the sweep of the rows clipped to the window."""
    fr = _frames(shared_data / TRACE_DIFF)
    rows = activity(fr)
    lo, hi = int(rows["start_ns"].min()), int(rows["end_ns"].max())
    steps = fr["ranges"].filter(pl.col("name").str.starts_with("ProfilerStep#"))
    bounds = [*steps.select("start_ns", "end_ns").iter_rows()]
    bounds += [(lo + i * (hi - lo) // 7, lo + (i + 1) * (hi - lo) // 7) for i in range(7)]
    windows = pl.DataFrame(bounds, schema={"w0": pl.Int64, "w1": pl.Int64}, orient="row")
    compute = [c for c in CLASS_ORDER if c not in COMPUTE_EXCLUDED]
    totals, classes = window_stats(rows, windows, CLASS_ORDER, compute, "communication")
    for win, (w0, w1) in enumerate(bounds):
        inside = rows.filter((pl.col("start_ns") < w1) & (pl.col("end_ns") > w0))
        clipped = [
            (max(s, w0), min(e, w1), c) for s, e, c in inside.select("start_ns", "end_ns", "cls").iter_rows()
        ]
        busy, owned, union = _sweep(clipped)
        mine = classes.filter(pl.col("win") == win)
        assert totals["busy_ns"][win] == busy
        assert dict(mine.select("cls", "time_ns").iter_rows()) == {c: t for c, t in owned.items() if t}
        assert dict(mine.select("cls", "union_ns").iter_rows()) == union
        assert dict(mine.select("cls", "kernels").iter_rows()) == dict(
            inside.group_by("cls").len().iter_rows()
        )
        assert totals["kernels"][win] == inside.height


def _all_files(shared: Path) -> list[Path]:
    picked = [*shared.glob("thirdparty/hta/*.json.gz"), *shared.glob("thirdparty/tracelens/*.json.gz")]
    return sorted([*picked, *shared.glob("thirdparty/nsys-ai/*.sqlite"), *shared.glob("h200-probe/*.sqlite")])


def test_shares_add_up_on_every_shared_file(shared_data: Path) -> None:
    """On every HTA, TraceLens and nsys-ai file: the classes and idle sum to the span exactly, no share is above
    100%, no class owns more than its own union, compute is the compute classes together and the overlap lies
    within the communication time."""
    devices = 0
    for path in _all_files(shared_data):
        b = breakdown(_frames(path))
        for s in [*b.devices, *b.ranges]:
            devices += 1
            assert sum(c.time_ns for c in s.classes) == s.span_ns, path.name
            assert abs(sum(c.pct for c in s.classes) - 100.0) < 1e-6 or s.span_ns == 0, path.name
            assert all(0 <= c.pct <= 100.0 and c.time_ns <= c.union_ns for c in s.classes), path.name
            compute = sum(c.time_ns for c in s.classes if c.cls not in COMPUTE_EXCLUDED | {IDLE})
            assert compute == s.compute_ns, path.name
            assert 0 <= s.overlap_ns <= s.communication_ns, path.name
            assert s.busy_ns + s.idle_ns == s.span_ns
    assert devices > 100


def test_two_gpu_exports_are_per_device(shared_data: Path) -> None:
    """nsys-ai's 2-GPU H100 runs: one slice per GPU; h100_2gpu_1s spends 97% of its span in its 4.2 GB device
    copies (memcpy, counted since the reader keeps CUPTI_ACTIVITY_KIND_MEMCPY), mfu_2gpu_before is FlashAttention
    ahead of GEMMs, with NCCL on both GPUs."""
    b = breakdown(_frames(shared_data / H100_2GPU))
    assert [s.device for s in b.devices] == [0, 1]
    for s in b.devices:
        memory = s.share("memory")
        assert memory is not None and memory.pct > 90 and s.pct(s.idle_ns) < 2
    b = breakdown(_frames(shared_data / MFU_BEFORE))
    assert [s.device for s in b.devices] == [0, 1]
    for s in b.devices:
        attention, gemm, comm = s.share("attention"), s.share("gemm"), s.share("communication")
        assert attention is not None and gemm is not None and comm is not None
        assert attention.time_ns > gemm.time_ns > comm.time_ns > 0
        assert 80 < s.pct(s.compute_ns) < 90


def test_ranges_fold_steps_and_stay_inside_the_device(shared_data: Path) -> None:
    """trace_diff: the 6 ProfilerStep#N instances are one row whose windows lie within the device's span; the
    nccl:all_to_all calls are mostly communication; each range row's classes sum to its windows."""
    fr = _frames(shared_data / TRACE_DIFF)
    b = breakdown(fr, range_limit=None)
    (dev,) = b.devices
    by_name = {s.range: s for s in b.ranges}
    assert len(by_name) == len(b.ranges) == b.ranges_total
    step = by_name["ProfilerStep"]
    names = fr["ranges"]["name"]
    assert step.instances == names.str.starts_with("ProfilerStep#").sum() == 6
    assert 0.9 * dev.span_ns < step.span_ns <= dev.span_ns
    a2a = by_name["nccl:all_to_all"]
    comm = a2a.share("communication")
    assert comm is not None and comm.pct > 50 and a2a.share(IDLE) is not None
    assert all(s.kernels <= dev.kernels for s in b.ranges)
    top = breakdown(fr, range_limit=3)
    assert [s.range for s in top.ranges] == [
        s.range for s in b.ranges[:3]
    ] and top.ranges_total == b.ranges_total


def test_range_of_profiler_op_ranges(shared_data: Path) -> None:
    """Qwen (TraceLens H100): aten::mm's instances are almost all GEMM time, the one ProfilerStep holds every
    class of the device."""
    b = breakdown(_frames(shared_data / QWEN), range_limit=None)
    by_name = {s.range: s for s in b.ranges}
    mm = by_name["aten::mm"]
    gemm = mm.share("gemm")
    assert gemm is not None and gemm.pct > 90 and mm.instances == 96
    step = by_name["ProfilerStep"]
    assert {c.cls for c in step.classes} <= {c.cls for c in b.devices[0].classes}


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("ProfilerStep#12", "ProfilerStep"),
        ("step i=7", "step"),
        ("aten::addmm, seq = 7, op_id = 12", "aten::addmm"),
        ("aten::mm, seq = 3, op_id = 7, sizes = [[1024, 6144], [6144, 2048]]", "aten::mm"),
        ("decode i=3 tokens=16", "decode tokens=16"),
        ("layer 3", "layer"),
        ("decode #7", "decode"),
        (
            "tk:gemm backend=torch-bf16 m=1024 n=2048 k=6144",
            "tk:gemm backend=torch-bf16 m=1024 n=2048 k=6144",
        ),
        ("step/prefill", "step/prefill"),
        ("fc1", "fc1"),
        ("42", "42"),
    ],
)
def test_fold_range_name(name: str, key: str) -> None:
    assert fold_range_name(name) == key


def test_the_order_ranks_every_class_of_the_taxonomy() -> None:
    from tracekit.analyzers.taxonomy import CLASSES

    assert sorted(CLASS_ORDER) == sorted(CLASSES) and len(CLASS_ORDER) == len(set(CLASS_ORDER))
    assert CLASS_ORDER[-2:] == ("communication", "memory") and set(CLASS_ORDER[-2:]) == COMPUTE_EXCLUDED


def test_no_kernels_no_slices(shared_data: Path) -> None:
    """HTA's cupti_profiler trace holds no kernels: an empty breakdown, not an error."""
    b = breakdown(
        _frames(
            shared_data / "thirdparty/hta/cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"
        )
    )
    assert b.empty and msgspec.to_builtins(b)["devices"] == []


def test_devices_come_in_rank_order() -> None:
    """Sixteen ranks' GPUs are listed rank 0 first: the device spans were grouped without an order (polars' hash
    order put them out of order every time at 16 ranks, and ``explain --json`` of the two-rank gloo sample listed
    r1 first in about one build of three)."""
    n = 16
    kernels = pl.DataFrame(
        {
            "rank": [r for r in range(n) for _ in range(3)],
            "device": [0] * (3 * n),
            "start_ns": [10 * i for i in range(3 * n)],
            "end_ns": [10 * i + 5 for i in range(3 * n)],
            "kernel_class": ["gemm"] * (3 * n),
        }
    )
    ranks = [s.rank for s in breakdown({"kernels": kernels}, with_ranges=False, memops=False).devices]
    assert ranks == list(range(n))


def test_files_of_one_gpu_far_apart_are_said(shared_data: Path) -> None:
    """The H200 probe captured under Nsight Systems and under the PyTorch profiler, imported as one run: both files
    are GPU 0, but nsys counts from its session's start and Kineto from the epoch, so the span runs over decades of
    'idle'. The breakdown says which files and how far apart; one file, or one file per GPU, gets no such note."""
    probe = shared_data / "h200-probe"
    both = combine([read_file(probe / "probe.sqlite"), read_file(probe / "torch_trace.json.gz")])
    b = breakdown(both)
    (note,) = [n for n in b.notes if "apart" in n]
    assert note.startswith(
        "GPU 0: its kernels come from 2 files, and probe.sqlite and torch_trace.json.gz lie "
    )
    assert " days apart " in note and "read better as separate runs" in note
    assert not [n for n in breakdown(_frames(probe / "probe.sqlite")).notes if "apart" in n]
    assert not [n for n in breakdown(_frames(shared_data / H100_2GPU)).notes if "apart" in n]


def test_two_captures_minutes_apart_are_said_and_close_ones_are_not() -> None:
    """The rule on its edges: two files of one GPU 5 minutes apart with 2 s of kernels are far apart; 30 s apart
    (under a minute) or 5 minutes apart with 60 s of kernels (under ten times their span) are not."""
    from tracekit.analyzers.breakdown.sources import far_apart_notes

    def two(gap_s: float, each_s: float) -> pl.DataFrame:
        a0, a1 = 0, int(each_s * 1e9)
        b0 = a1 + int(gap_s * 1e9)
        return pl.DataFrame(
            {
                "source": ["a.json", "a.json", "b.json", "b.json"],
                "rank": [None] * 4,
                "device": [0] * 4,
                "start_ns": [a0, a1 - 10, b0, b0 + int(each_s * 1e9) - 10],
                "end_ns": [a0 + 10, a1, b0 + 10, b0 + int(each_s * 1e9)],
            },
            schema_overrides={"rank": pl.Int32, "device": pl.Int32},
        )

    (note,) = far_apart_notes(two(300, 1))
    assert note.startswith("GPU 0: its kernels come from 2 files, and a.json and b.json lie 300.00 s apart")
    assert not far_apart_notes(two(30, 0.1))
    assert not far_apart_notes(two(300, 30))
