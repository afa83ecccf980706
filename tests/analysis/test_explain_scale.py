"""The explainer on a timeline of many launches (issue 19: explain <= 5 s on a 1M-kernel Kineto run).

A million launches hold a few hundred distinct kernel and range names, so the name patterns run once per distinct
name, never once per launch (they cost tens of µs on a long CUTLASS name: 66 s of the first 1M measurement). The
timeline here is Kineto-shaped: the user's ``record_function`` ranges inside a profiler step, each holding a
profiler op range per kernel (a GEMM, then its activation), and GEMM kernels in no range, launched with three
grids. The cases it gives are checked against the per-call definitions (issue 26: every call summed, the
activation after a GEMM its auxiliary kernel, one case per kernel signature), computed here in plain Python from
the rows the test made.
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any

import polars as pl
import pytest

from tests.support.explain_data import frames
from tracekit import kernel_names as taxonomy_names
from tracekit.analyzers.gemm import build_cases

INSTANCES = 4000  # user-range instances, two kernels each
LOOSE = 2001  # GEMM launches in no range


def _timeline(tag: str) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """The frames, and what the per-launch definitions say the cases are."""
    gemm = {"attn_proj": f"nvjet_tst_128x256_{tag}", "mlp_up": f"sm90_xmma_gemm_bf16_{tag}"}
    elementwise = (
        f"gelu_kernel_{tag}"  # aten::gelu's activation after the GEMM: a fusion candidate, not its aux
    )
    loose = f"ampere_sgemm_128x64_{tag}"
    end = INSTANCES * 10_000
    ranges: list[dict[str, Any]] = [
        {"range_id": 0, "parent_id": None, "name": "ProfilerStep#1", "start_ns": 0, "end_ns": end}
    ]
    kernels: list[dict[str, Any]] = []
    expected: dict[str, dict[str, list[float]]] = {name: {"main": [], "aux": []} for name in gemm}
    for i in range(INSTANCES):
        t = i * 10_000
        user = "attn_proj" if i % 2 == 0 else "mlp_up"
        uid = 1 + 3 * i
        main_ns, aux_ns = 1_000 + (i * 37) % 500, 200 + (i * 11) % 100
        ranges += [
            {"range_id": uid, "parent_id": 0, "name": user, "start_ns": t, "end_ns": t + 5_000},
            {"range_id": uid + 1, "parent_id": uid, "name": f"aten::mm, seq = {i}", "start_ns": t + 10},
            {"range_id": uid + 2, "parent_id": uid, "name": f"aten::gelu, seq = {i}", "start_ns": t + 2_000},
        ]
        for rid, name, start, ns in (
            (uid + 1, gemm[user], t + 100, main_ns),
            (uid + 2, elementwise, t + 100 + main_ns, aux_ns),
        ):
            kernels.append({"name": name, "range_id": rid, "start_ns": start, "duration_ns": ns})
        expected[user]["main"].append(main_ns)
        expected[user]["aux"].append(aux_ns)
    loose_rows = []
    for j in range(LOOSE):
        start = end + 1_000 + j * 3_000
        row = {
            "name": loose,
            "range_id": None,
            "start_ns": start,
            "duration_ns": 500 + j % 7,
            "grid_x": j % 3 + 1,
        }
        if j == 5:  # a damaged launch without an end: counted, not timed
            row["duration_ns"] = None
        loose_rows.append(row)
    kernels += loose_rows[::-1]  # rows out of time order: the first launch is the earliest start, not row 0
    for k_id, k in enumerate(kernels):
        k["kernel_id"] = k_id
        k["device"] = 0
        k["end_ns"] = None if k["duration_ns"] is None else k["start_ns"] + k["duration_ns"]
        k.setdefault("grid_x", 132)
        k.update(grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1)
    for r in ranges:
        r.setdefault("end_ns", r["start_ns"] + 3_000)
    want: dict[str, Any] = {
        user: {
            "main_kernel": gemm[user],
            "calls": len(e["main"]),
            "gemm_ns_total": sum(e["main"]),
            "gemm_median": statistics.median(e["main"]),
            "aux_ns_total": 0,
            "aux_kernels": [],
            "fusion_ns_total": sum(e["aux"]),
            "fusion_kernels": [elementwise],
        }
        for user, e in expected.items()
    }
    for g in (1, 2, 3):  # one case per grid of the loose kernel; a launch without an end is no call
        timed = [r["duration_ns"] for r in loose_rows if r["grid_x"] == g and r["duration_ns"] is not None]
        want[f"{loose} (grid {g}, block 256)"] = {
            "main_kernel": loose,
            "calls": len(timed),
            "gemm_ns_total": sum(timed),
            "gemm_median": statistics.median(timed),
            "aux_ns_total": 0,
            "grid": g,
        }
    return frames(kernels=kernels, ranges=ranges), want


class _Counted:
    """A function that counts its calls (the function itself still answers)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.fn(*args)


def test_cases_of_a_kineto_shaped_timeline_follow_the_per_call_definitions() -> None:
    f, want = _timeline(uuid.uuid4().hex)
    cases = build_cases(f)
    got = {c.name: c for c in cases}
    assert set(got) == set(want), sorted(got)
    for name, fields in want.items():
        c, t = got[name], got[name].timing
        values = {
            "main_kernel": c.kernel.name,
            "calls": t.calls,
            "gemm_ns_total": t.gemm_ns_total,
            "gemm_median": t.gemm_ns.median,
            "aux_ns_total": t.aux_ns_total,
            "aux_median": t.aux_ns.median,
            "aux_kernels": [u.name for u in c.aux],
            "fusion_ns_total": sum(u.time_ns_total for u in c.fusion),
            "fusion_kernels": [k for u in c.fusion for k in u.kernels],
            "grid": c.kernel.grid,
        }
        for field, value in fields.items():
            assert values[field] == value, (name, field)
    attn = got["attn_proj"]
    assert attn.user_range and attn.origin == "range" and attn.range == "attn_proj"
    assert attn.parents == ("ProfilerStep",)  # the step around it, its counter folded: listed, not the key


def test_kernel_name_patterns_run_per_distinct_name_not_per_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    f, _ = _timeline(uuid.uuid4().hex)  # names no earlier test has seen: no answer is cached yet
    counted = _Counted(taxonomy_names.split_name)
    monkeypatch.setattr(taxonomy_names, "split_name", counted)
    launches = f["kernels"].height
    distinct = f["kernels"]["name"].n_unique()
    cases = build_cases(f)
    assert len(cases) == 5
    # each distinct name is split for the kernel table once (then cached), never once per launch
    assert 0 < counted.calls <= distinct, (counted.calls, distinct, launches)


def test_gap_inside_calls_matches_the_interval_union_also_for_damaged_kernels() -> None:
    """The idle time inside each call, summed in polars (cumulative maxima of the ends), equals a sequential walk
    over the union of its kernels' intervals on random intervals: overlapping, nested, touching, and kernels
    that end before they start (a damaged file); stretches of the launch-gap limit or more are pauses."""
    import random

    from tracekit.analyzers.gemm import LAUNCH_GAP_MAX_NS
    from tracekit.analyzers.gemm.calls import _with_gaps

    rnd = random.Random(19)
    rows: list[dict[str, Any]] = []
    for call in range(300):
        for _ in range(rnd.randint(1, 8)):
            start = rnd.randint(0, 2_000) + rnd.choice([0, 0, 0, 2 * LAUNCH_GAP_MAX_NS])
            end = start + rnd.choice([rnd.randint(0, 900), -rnd.randint(1, 300)])
            rows.append({"owner": call, "start_ns": start, "end_ns": end, "kernel_id": len(rows)})
    frame = pl.DataFrame(rows)
    calls = _with_gaps(frame.select("owner").unique(), frame, ["owner"])
    got = {r["owner"]: (r["gap"], r["paused"]) for r in calls.iter_rows(named=True)}
    for call in range(300):
        intervals = sorted((r["start_ns"], r["end_ns"], r["kernel_id"]) for r in rows if r["owner"] == call)
        gap = paused = 0
        end = None
        for s, e, _ in intervals:
            if end is not None and s > end:
                if s - end < LAUNCH_GAP_MAX_NS:
                    gap += s - end
                else:
                    paused += s - end
            end = e if end is None else max(end, e)
        assert got[call] == (gap, paused), call
