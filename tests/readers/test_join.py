"""Range nesting and the kernel-to-range join, on hand-built timelines whose answer is known, plus
properties on generated ones."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.analyzers.join import assign_ranges, nest_and_assign, nest_ranges
from tracekit.frames import KERNELS, RANGES


def ranges_frame(rows: list[dict]) -> pl.DataFrame:
    base = {"source": "t", "kind": "push_pop", "pid": 1, "tid": 1}
    return RANGES.conform(pl.DataFrame([{**base, **r} for r in rows]))


def kernels_frame(rows: list[dict]) -> pl.DataFrame:
    base = {"source": "t", "pid": 1, "device": 0, "stream": 7}
    out = []
    for i, r in enumerate(rows):
        row = {**base, "kernel_id": i, "launch_tid": 1, **r}
        if "start_ns" not in row:
            row["start_ns"] = (row.get("launch_start_ns") or 0) + 5
        row.setdefault("end_ns", row["start_ns"] + 1)
        out.append(row)
    return KERNELS.conform(pl.DataFrame(out))


def test_nesting_depth_and_parent() -> None:
    #  0 [0,100)  1 [10,50)  2 [20,30)  3 [60,90)  4 on another thread [0,100)
    r = ranges_frame(
        [
            {"range_id": 0, "start_ns": 0, "end_ns": 100},
            {"range_id": 1, "start_ns": 10, "end_ns": 50},
            {"range_id": 2, "start_ns": 20, "end_ns": 30},
            {"range_id": 3, "start_ns": 60, "end_ns": 90},
            {"range_id": 4, "start_ns": 0, "end_ns": 100, "tid": 2},
        ]
    )
    out = nest_ranges(r).sort("range_id")
    assert out["depth"].to_list() == [0, 1, 2, 1, 0]
    assert out["parent_id"].to_list() == [None, 0, 1, 0, None]


def test_families_interleaved_in_the_frame_keep_their_rows() -> None:
    """Thread ranges, GPU annotations and a start/end range (neither family: no nesting) interleaved, ids not in
    row order: each row gets its own range's depth and parent, the
    start/end row stays null."""
    r = ranges_frame(
        [
            {"range_id": 7, "kind": "gpu_annotation", "device": 0, "tid": 7, "start_ns": 100, "end_ns": 200},
            {"range_id": 3, "start_ns": 10, "end_ns": 50},
            {"range_id": 9, "kind": "start_end", "start_ns": 0, "end_ns": 300},
            {"range_id": 5, "kind": "gpu_annotation", "device": 0, "tid": 7, "start_ns": 120, "end_ns": 150},
            {"range_id": 1, "start_ns": 0, "end_ns": 100},
            {"range_id": 4, "start_ns": 20, "end_ns": 30},
        ]
    )
    out = nest_ranges(r)
    assert out["range_id"].to_list() == [7, 3, 9, 5, 1, 4]  # the frame's order kept
    assert out["depth"].to_list() == [0, 1, None, 1, 0, 2]
    assert out["parent_id"].to_list() == [None, 1, None, 7, None, 3]


def test_kernel_gets_innermost_range_of_its_launching_thread() -> None:
    r = ranges_frame(
        [
            {"range_id": 0, "start_ns": 0, "end_ns": 100},
            {"range_id": 1, "start_ns": 10, "end_ns": 50},
            {"range_id": 2, "start_ns": 20, "end_ns": 30},
            {"range_id": 3, "start_ns": 60, "end_ns": 90},
            {"range_id": 9, "start_ns": 0, "end_ns": 1000, "tid": 2},  # other thread: never chosen for tid 1
        ]
    )
    k = kernels_frame(
        [
            {"launch_start_ns": 25},  # inside 2
            {"launch_start_ns": 40},  # 2 closed, inside 1
            {"launch_start_ns": 55},  # 1 closed, inside 0
            {"launch_start_ns": 95},  # 3 closed, inside 0
            {"launch_start_ns": 150},  # nothing open on tid 1
            {"launch_start_ns": 150, "launch_tid": 2},  # inside 9
            {"launch_start_ns": 25, "pid": 2},  # another process: none
        ]
    )
    out = assign_ranges(k, r)
    assert out["range_id"].to_list() == [2, 1, 0, 0, None, 9, None]
    assert out.columns == k.columns


def test_a_key_of_one_value_is_left_out_and_two_sources_still_apart() -> None:
    """The timeline's keys include the file (``source``); a key of one value separates nothing and is left out
    (asked of the frame without writing out a literal column's rows), but two files' ranges on the same
    process and thread never nest in each other nor take each other's kernels."""
    rows = [
        {"range_id": 0, "start_ns": 0, "end_ns": 100},
        {"range_id": 1, "start_ns": 10, "end_ns": 50, "source": "b"},
        {"range_id": 2, "start_ns": 20, "end_ns": 30},
    ]
    two = ranges_frame(rows)
    out = nest_ranges(two).sort("range_id")
    assert out["depth"].to_list() == [0, 0, 1] and out["parent_id"].to_list() == [None, None, 0]
    k = kernels_frame([{"launch_start_ns": 25}, {"launch_start_ns": 25, "source": "b"}])
    assert assign_ranges(k, two)["range_id"].to_list() == [2, 1]
    # one source, as a literal column (what the readers make): the same answers as the written-out column
    one = ranges_frame([{**r, "source": "t"} for r in rows])
    literal = one.with_columns(pl.lit("t").alias("source"))
    assert nest_ranges(literal).equals(nest_ranges(one))
    assert nest_ranges(one).sort("range_id")["depth"].to_list() == [0, 1, 2]


def test_unlinked_kernels_fall_back_to_gpu_annotations() -> None:
    r = ranges_frame(
        [
            {"range_id": 0, "kind": "gpu_annotation", "device": 0, "tid": 7, "start_ns": 100, "end_ns": 200},
            {"range_id": 1, "kind": "gpu_annotation", "device": 0, "tid": 7, "start_ns": 120, "end_ns": 150},
        ]
    )
    k = kernels_frame(
        [
            {"launch_tid": None, "start_ns": 130},
            {"launch_tid": None, "start_ns": 160},
            {"launch_tid": None, "start_ns": 300},
            {"launch_tid": None, "start_ns": 130, "stream": 8},
        ]
    )
    assert assign_ranges(k, r)["range_id"].to_list() == [1, 0, None, None]


def test_improperly_nested_annotations_walk_up_to_a_containing_range() -> None:
    # 1 [10,50) and 2 [40,80) overlap (annotations need not nest); the depth arithmetic would pick 1 at t=60.
    r = ranges_frame(
        [
            {"range_id": 0, "kind": "annotation", "start_ns": 0, "end_ns": 100},
            {"range_id": 1, "kind": "annotation", "start_ns": 10, "end_ns": 50},
            {"range_id": 2, "kind": "annotation", "start_ns": 40, "end_ns": 80},
        ]
    )
    assert nest_ranges(r).sort("range_id")["depth"].to_list() == [0, 1, 2]
    k = kernels_frame([{"launch_start_ns": t} for t in (45, 60, 90, 150)])
    assert assign_ranges(k, r)["range_id"].to_list() == [2, 2, 0, None]


@st.composite
def nested_timeline(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame, list[int | None]]:
    """A random properly nested tree of ranges on one thread, launches at random times, and the brute-force answer."""
    spans: list[tuple[int, int]] = []

    def build(lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi - 2 and depth < 5 and draw(st.booleans()):
            s = draw(st.integers(t, hi - 2))
            e = draw(st.integers(s + 1, hi - 1))
            spans.append((s, e))
            build(s + 1, e, depth + 1)
            t = e + 1

    build(0, 400, 0)
    times = draw(st.lists(st.integers(0, 400), max_size=30))
    ranges = ranges_frame([{"range_id": i, "start_ns": s, "end_ns": e} for i, (s, e) in enumerate(spans)])
    kernels = kernels_frame([{"launch_start_ns": t} for t in times])
    expected: list[int | None] = []
    for t in times:
        inside = [(s, i) for i, (s, e) in enumerate(spans) if s <= t <= e]
        expected.append(max(inside)[1] if inside else None)
    return ranges, kernels, expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nested_timeline())
def test_join_matches_brute_force(case: tuple[pl.DataFrame, pl.DataFrame, list[int | None]]) -> None:
    ranges, kernels, expected = case
    out = assign_ranges(kernels, ranges)
    assert out.height == kernels.height  # no kernel lost or duplicated
    assert out["range_id"].to_list() == expected


INF = float("inf")


def _contains(j: tuple, i: tuple) -> bool:
    """Brute-force nesting on intervals (s, e, id): j encloses i on the same timeline (see analyzers/join.py)."""
    sj, ej, idj = j
    si, ei, idi = i
    if not (sj <= si and ei <= ej):
        return False
    if sj < si == ei == ej:  # i is zero-length exactly where j ends: j was popped first, they are siblings
        return False
    return (sj, ej) != (si, ei) or idj < idi  # identical intervals: the lower id is the outer


def _brute(spans: list[tuple]) -> dict[int, tuple[int, int | None]]:
    """range id -> (depth, parent id) over one timeline's (s, e, id) spans."""
    out = {}
    for i in spans:
        outer = [j for j in spans if j is not i and _contains(j, i)]
        depth = len(outer)
        parent = [
            j[2] for j in outer if len([k for k in spans if k is not j and _contains(k, j)]) == depth - 1
        ]
        out[i[2]] = (depth, parent[0] if parent else None)
    return out


def _brute_innermost(spans: list[tuple], depth: dict[int, tuple[int, int | None]], t: int) -> int | None:
    inside = [(s, depth[i][0], i) for s, e, i in spans if s <= t <= e]
    return max(inside)[2] if inside else None


@st.composite
def tied_timelines(draw: st.DrawFn) -> tuple[list[dict], list[dict]]:
    """Push/pop sequences on several (pid, tid) timelines and GPU annotations, with time steps of 0 or 1 (so equal
    starts, zero-length ranges, siblings touching), ranges left open at the end, and kernels launched on them."""
    rows: list[dict] = []
    next_id = 0
    for pid, tid, kind in draw(
        st.lists(
            st.tuples(st.integers(1, 2), st.integers(1, 2), st.sampled_from(["push_pop", "gpu_annotation"])),
            min_size=1,
            max_size=4,
            unique=True,
        )
    ):
        t, stack = draw(st.integers(0, 3)), []
        for op in draw(st.lists(st.sampled_from(["push", "pop", "tick", "tick"]), max_size=40)):
            if op == "tick":
                t += 1
            elif op == "push" and len(stack) < 6:
                row = {
                    "range_id": next_id,
                    "kind": kind,
                    "pid": pid,
                    "tid": tid,
                    "start_ns": t,
                    "end_ns": None,
                }
                if kind == "gpu_annotation":
                    row |= {"pid": None, "device": pid}
                rows.append(row)
                stack.append(row)
                next_id += 1
            elif op == "pop" and stack:
                stack.pop()["end_ns"] = t
    ids = draw(st.permutations(list(range(len(rows)))))  # ids unrelated to push order
    for row, new in zip(rows, ids, strict=True):
        row["range_id"] = new
    kernels = []
    for _ in range(draw(st.integers(0, 25))):
        linked = draw(st.booleans())
        kernels.append(
            {
                "pid": draw(st.integers(1, 3)),
                "launch_tid": draw(st.integers(1, 2)) if linked else None,
                "launch_start_ns": draw(st.integers(0, 25)) if linked else None,
                "device": draw(st.integers(1, 2)),
                "stream": draw(st.integers(1, 2)),
                "start_ns": draw(st.integers(0, 25)),
            }
        )
    # ids far apart: the group ids are then dense codes (the key numbers times the time span would overflow) or
    # ranks (the key numbers themselves would), not the key numbers as they are
    pid_step, tid_step = draw(st.sampled_from([(1, 1), (3 * 10**17, 1), (10**15, 2**40)]))
    for r in rows:
        r["tid"] *= tid_step
        if r["pid"] is not None:
            r["pid"] *= pid_step
    for k in kernels:
        k["pid"] *= pid_step
        k["stream"] *= tid_step
        if k["launch_tid"] is not None:
            k["launch_tid"] *= tid_step
    return rows, kernels


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tied_timelines())
def test_nesting_and_join_match_brute_force_with_ties(case: tuple[list[dict], list[dict]]) -> None:
    rows, krows = case
    if not rows:
        return
    ranges = ranges_frame(rows)
    timelines: dict[tuple, list[tuple]] = {}
    for r in rows:
        key = (r["kind"] == "gpu_annotation", r.get("device"), r["pid"], r["tid"])
        timelines.setdefault(key, []).append(
            (r["start_ns"], INF if r["end_ns"] is None else r["end_ns"], r["range_id"])
        )
    nest = {rid: v for spans in timelines.values() for rid, v in _brute(spans).items()}
    got = nest_ranges(ranges).sort("range_id")
    assert got["depth"].to_list() == [nest[i][0] for i in got["range_id"]]
    assert got["parent_id"].to_list() == [nest[i][1] for i in got["range_id"]]

    expected: list[int | None] = []
    for k in krows:
        found = None
        if k["launch_tid"] is not None:
            spans = timelines.get((False, None, k["pid"], k["launch_tid"]), [])
            found = _brute_innermost(spans, nest, k["launch_start_ns"])
        if found is None:
            spans = timelines.get((True, k["device"], None, k["stream"]), [])
            found = _brute_innermost(spans, nest, k["start_ns"])
        expected.append(found)
    if krows:
        out = assign_ranges(kernels_frame(krows), ranges)
        assert out["range_id"].to_list() == expected
    # the import's one pass: nesting and both point frames (kernels split in two here) on one timeline
    half = len(krows) // 2
    nested, placed = nest_and_assign(
        ranges, {"a": kernels_frame(krows[:half]), "b": kernels_frame(krows[half:])}
    )
    assert nested.sort("range_id").equals(got)
    assert [*placed["a"]["range_id"], *placed["b"]["range_id"]] == expected
