"""Range nesting and the kernel-to-range join, in polars (vectorised; millions of rows).

Ranges are grouped per timeline: per thread for NVTX push/pop, record_function annotations and PyTorch GEMM ops
(kind ``op``: a kernel launched inside ``aten::mm`` inside ``aten::linear`` gets the ``aten::mm``) (source, pid, tid),
per device and stream for GPU-side annotations (source, device, tid=stream). NVTX start/end ranges may overlap
and cross threads: they keep null parent and depth.

One integer key per group and time
    Each group gets a dense integer id ``g`` and every time ``t`` becomes ``g * span + (t - t_min)`` (``span`` the
    whole trace's, so groups occupy disjoint stretches of one integer line; where that would overflow, times are
    replaced by their dense rank first). Unclosed ranges end at the last instant of their group's stretch. After
    that every step is a single-column sort, ``search_sorted`` or gather: no ``.over()`` and no multi-column sort.

``nest_ranges``: depth and parent
    Ranges are sorted in preorder: by start, then longer first, then ``range_id`` (for identical intervals the
    lower id is the outer one). A range's depth is the number of ranges open at its start: the ranges before it in
    preorder minus the ends before its start, where an end at the instant another range starts comes first (the
    two are siblings) except the end of a zero-length range, which comes after every start at its instant (it
    nests inside a range that starts with it). This is the +1/-1 event sweep, counted with ``search_sorted``
    instead of a sort of start and end events. The parent is the last range one level up before it in preorder
    (an as-of join on preorder position by depth; with proper nesting that range is on the same timeline).

``assign_ranges``: the innermost range of each kernel
    A kernel belongs to the innermost range open on the thread that launched it at the moment of the launch call
    (``launch_tid``, ``launch_start_ns``, from the runtime API record with the same process and correlation id).
    A range contains the instant ``t`` when ``start <= t <= end``; when one range ends at ``t`` and a sibling
    starts at ``t``, the one starting wins. The answer's depth comes from the same counts: the ranges started by
    ``t``, minus those ended before ``t``, minus those ended at ``t`` when a range starts at ``t``; the answer is
    the last range at that depth at or before ``R`` in preorder, ``R`` the last range started by ``t``. Where
    nesting is improper (annotations that overlap), an answer that does not contain ``t`` is replaced by walking up
    from ``R`` through parents to the first range containing ``t``. Kernels with no launch record, or none open on
    their thread, fall back to time containment on the GPU: the innermost ``gpu_annotation`` on the same device
    and stream containing the kernel's start.

``nest_and_assign``: both at once
    The import nests a file's ranges and places its kernels and memcpy / memset rows on them: one timeline per
    family, built with every point on it, serves all three (each call above builds its own: the sort of 5M
    ranges three times over on the nsys 1M-kernel export).

One way, in polars
    A C sweep (a stack of open ranges over the preorder) answered properly nested timelines beside these counts
    until the two were measured on the whole import command: it saved less than the 20% a native path must
    save to be kept (docs/PERFORMANCE.md, "One fast path and one fallback per format"), and was removed.

Measured with benchmarks/bench_nsys.py (1.0M kernels, 5.0M NVTX ranges, 2 cores): nest_ranges 10.4 s -> 1.4 s,
assign_ranges 1.5 s -> 1.2 s (docs/PERFORMANCE.md, "The range join").
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

_THREAD_KINDS = ("push_pop", "annotation", "op")
_MAX_DEPTH = 256
_LIMIT = 2**62
_THREAD_KEYS = ["source", "pid", "tid"]
_GPU_KEYS = ["source", "device", "tid"]


def _key_codes(cols: list[pl.Series], max_groups: int | None = None) -> pl.Series:
    """An id per distinct tuple of ``cols`` (equal-length series; nulls are a value), ascending with the tuples:
    dense (0, 1, ...), unless the tuples' mixed-radix number stays below ``max_groups``, which is then the id as it
    is (the same order, so the same sort and the same answers, without hashing every row: 0.05-0.1 s of a join
    over 3-6M rows). A key of one value is the caller's to leave out (:func:`_one_value`: one file's source)."""
    parts = []
    for c in cols:
        if c.dtype == pl.String:
            c = c.cast(pl.Categorical).to_physical()
        parts.append(c.cast(pl.Int64).fill_null(-1))
    raw, size = None, 1
    for c in parts:
        lo, hi = c.min(), c.max()
        width = int(hi) - int(lo) + 1  # type: ignore[arg-type]
        if size * width >= _LIMIT:
            raw = None
            break
        if width == 1:
            continue  # one value (a key that is null throughout): nothing to add
        code = c - lo
        raw = code if raw is None else raw * width + code
        size *= width
    else:
        if raw is None:  # every key has one value
            raw = pl.repeat(0, cols[0].len() if cols else 0, dtype=pl.Int64, eager=True)
        if max_groups is not None and size <= max_groups:
            return raw
        distinct = raw.unique().sort()
        return distinct.search_sorted(raw).cast(pl.Int64)
    # Mixed radix would overflow (huge, sparse ids): rank the tuples instead.
    frame = pl.DataFrame({f"k{i}": c for i, c in enumerate(parts)})
    return frame.select(pl.struct(pl.all()).rank("dense").cast(pl.Int64) - 1).to_series()


@dataclass
class _Timeline:
    """Ranges of one family in preorder, on the combined integer line, with depth and parent position."""

    range_id: pl.Series
    order: pl.Series  # row of each preorder entry in the input frame
    start: pl.Series  # combined keys, sorted ascending
    end: pl.Series
    depth: pl.Series
    ends_nz: pl.Series | None = None  # sorted ends of ranges with end != start (the counts' way)
    ends_z: pl.Series | None = None  # sorted ends of zero-length ranges


def _time_bounds(starts: pl.Series, ends: pl.Series, points: pl.Series) -> tuple[int, int] | None:
    """The earliest and latest of the ranges' starts and ends and the points (None when there are no times):
    each series' min and max, not a min and max of all of them concatenated (16M rows at 5M ranges)."""
    bounds = [v for s in (starts, ends, points) for v in (s.min(), s.max()) if v is not None]
    return (int(min(bounds)), int(max(bounds))) if bounds else None  # type: ignore[call-overload]


def _combined_times(
    g: pl.Series, starts: pl.Series, ends: pl.Series, points: pl.Series, bounds: tuple[int, int] | None
) -> tuple[pl.Series, pl.Series, pl.Series]:
    """``g * span + (t - t_min)`` for range starts, ends (null: the group's last instant) and points;
    ``bounds``: :func:`_time_bounds` of them."""
    ngroups = int(g.max()) + 1 if g.len() else 1  # type: ignore[arg-type]
    lo, hi = bounds or (0, 0)
    span = hi - lo + 2
    if ngroups * span >= _LIMIT:
        # Replace times by their dense rank (same order, same ties), which always fits.
        distinct = pl.concat([starts, ends.drop_nulls(), points]).unique().sort()
        starts, points = distinct.search_sorted(starts), distinct.search_sorted(points)
        ends = pl.when(ends.is_null()).then(None).otherwise(distinct.search_sorted(ends.fill_null(0)))
        ends = pl.select(ends).to_series()
        lo, span = 0, distinct.len() + 1
    n = starts.len()
    base = g * span - lo
    gs, gp = base.slice(0, n), base.slice(n)
    start = (gs + starts).rename("start")
    end = gs + ends
    if ends.null_count():  # unclosed ranges end at their group's last instant
        end = end.fill_null(gs + lo + span - 1)
    end = end.rename("end")
    return start, end, (gp + points).rename("t")


def _groups_that_fit(bounds: tuple[int, int] | None) -> int | None:
    """How many groups ``_combined_times`` can place side by side without replacing the times by their ranks
    (None when there are no times), from :func:`_time_bounds`."""
    return None if bounds is None else (_LIMIT - 1) // (bounds[1] - bounds[0] + 2)


def _one_value(a: pl.DataFrame, b: pl.DataFrame, key: str) -> bool:
    """Whether column ``key`` holds one value and no null in both frames. Asked through expressions, which
    answer a column the reader made from a literal (a file's ``source``) without writing out its rows: taken as
    a Series it is written out (0.06 s at 5M rows), and concatenated and compared it cost a join 0.15 s."""
    seen = set()
    for f in (a, b):
        if f.height == 0:
            continue
        c = pl.col(key)
        lo, hi, nulls = f.select(c.min().alias("lo"), c.max().alias("hi"), c.null_count().alias("z")).row(0)
        if nulls or lo != hi:
            return False
        seen.add(lo)
    return len(seen) == 1


def _build(
    ranges: pl.DataFrame, keys: list[str], points: pl.DataFrame | None = None
) -> tuple[_Timeline, pl.Series | None]:
    """The timeline of ``ranges`` grouped by ``keys``; with ``points`` (same keys and a ``t`` column), their keys."""
    n = ranges.height
    pts = points if points is not None else pl.DataFrame({k: [] for k in [*keys, "t"]})
    cols = []
    for k in keys:
        if _one_value(ranges, pts, k):
            continue  # one source (one file's ranges): a key that separates nothing
        dtype = pl.String if ranges.schema[k] == pl.String else pl.Int64
        cols.append(pl.concat([ranges[k].cast(dtype), pts[k].cast(dtype)]))
    starts, ends, times = (
        ranges["start_ns"].cast(pl.Int64),
        ranges["end_ns"].cast(pl.Int64),
        pts["t"].cast(pl.Int64),
    )
    bounds = _time_bounds(starts, ends, times)
    if cols:
        g = _key_codes(cols, _groups_that_fit(bounds))
    else:
        g = pl.repeat(0, n + pts.height, dtype=pl.Int64, eager=True)
    start, end, t = _combined_times(g, starts, ends, times, bounds)
    # Preorder: start, longer first, lower id first. One single-column sort, then ties fixed where they occur.
    order = start.arg_sort()
    s_sorted = start.gather(order)
    tied = s_sorted.diff().fill_null(1) == 0
    if tied.any():
        run = tied | tied.shift(-1, fill_value=False)
        at = run.arg_true()
        sub = pl.DataFrame({"row": order.gather(at)})
        sub = sub.with_columns(
            start.gather(sub["row"]).alias("s"),
            end.gather(sub["row"]).alias("e"),
            ranges["range_id"].gather(sub["row"]).alias("id"),
        ).sort(["s", "e", "id"], descending=[False, True, False])
        order = order.scatter(at, sub["row"])
    e_sorted = end.gather(order)
    range_id = ranges["range_id"].gather(order)
    zero = e_sorted == s_sorted
    ends_nz = e_sorted.filter(~zero).sort()
    ends_z = e_sorted.filter(zero).sort()
    pos = pl.int_range(n, dtype=pl.Int64, eager=True)
    closed = ends_nz.search_sorted(s_sorted, side="right").cast(pl.Int64)
    if ends_z.len():
        closed = closed + ends_z.search_sorted(s_sorted, side="left").cast(pl.Int64)
    depth = (pos - closed).cast(pl.Int32).rename("depth")
    tl = _Timeline(
        range_id=range_id,
        order=order,
        start=s_sorted,
        end=e_sorted,
        depth=depth,
        ends_nz=ends_nz,
        ends_z=ends_z,
    )
    return tl, (t if points is not None else None)


def _parent_pos(tl: _Timeline) -> pl.Series:
    """Preorder position of each range's parent: the last range one level up before it (null at depth 0)."""
    pre = pl.DataFrame({"pos": pl.int_range(tl.depth.len(), dtype=pl.Int64, eager=True), "depth": tl.depth})
    parent = pre.with_columns((pl.col("depth") - 1).alias("d")).join_asof(
        pre.select(
            pl.col("pos").alias("ppos"), pl.col("depth").alias("d"), pl.col("pos").alias("parent_pos")
        ),
        left_on="pos",
        right_on="ppos",
        by="d",
        strategy="backward",
        check_sortedness=False,
    )["parent_pos"]
    return pl.select(pl.when(tl.depth > 0).then(parent)).to_series().rename("parent_pos")


def nest_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    """Return ``ranges`` with ``parent_id`` and ``depth`` filled where nesting is defined."""
    return nest_and_assign(ranges, {})[0]


def _points(family: str, df: pl.DataFrame, keys: list[str], dtypes: dict[str, pl.DataType]) -> pl.DataFrame:
    """The points of ``df`` (kernels or memops) that :func:`assign_ranges` places on the ranges of ``family``:
    the launch call on the launching thread, or (``gpu``) the start on the device and stream, every row with a
    start (a superset: only those the thread family left unassigned are taken from it)."""
    if family == "thread":
        rows = df["launch_tid"].is_not_null() & df["launch_start_ns"].is_not_null()
        cols = {"source": "source", "pid": "pid", "tid": "launch_tid", "t": "launch_start_ns"}
    else:
        rows = df["start_ns"].is_not_null()
        cols = {"source": "source", "device": "device", "tid": "stream", "t": "start_ns"}
    return df.select(
        pl.int_range(df.height, dtype=pl.Int64).alias("point_id"),
        *(pl.col(cols[k]).cast(dtypes[k]).alias(k) for k in keys),
        pl.col(cols["t"]).cast(pl.Int64).alias("t"),
    ).filter(rows)


def nest_and_assign(
    ranges: pl.DataFrame, targets: dict[str, pl.DataFrame]
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """:func:`nest_ranges` of ``ranges`` and :func:`assign_ranges` of each frame of ``targets`` (kernels, memops)
    on them, with each family's timeline (the sort of every range behind both) built once for all of them
    instead of once per call. Points never change each other's answer nor the ranges' order (the integer line
    keeps every comparison), so the results are those of the separate calls."""
    out = {
        name: assign_ranges(df, ranges)
        for name, df in targets.items()
        if df.height == 0 or ranges.height == 0
    }
    live = {name: df for name, df in targets.items() if name not in out}
    if ranges.height == 0:
        return ranges, out
    result = {name: pl.repeat(None, df.height, dtype=pl.Int64, eager=True) for name, df in live.items()}
    parent = pl.repeat(None, ranges.height, dtype=pl.Int64, eager=True)
    depth = pl.repeat(None, ranges.height, dtype=pl.Int32, eager=True)
    found = False
    # asked through expressions: a reader's literal ``kind`` (one event type) answers at once, not row by row
    kind, has_start = pl.col("kind"), pl.col("start_ns").is_not_null()
    masks = ranges.select(
        (kind.is_in(_THREAD_KINDS) & has_start).alias("thread"),
        ((kind == "gpu_annotation") & has_start).alias("gpu"),
    )
    families = (
        ("thread", masks["thread"], _THREAD_KEYS),
        ("gpu", masks["gpu"], _GPU_KEYS),
    )
    for family, mask, keys in families:
        rows = mask.arg_true()
        if rows.len() == 0:
            continue
        found = True
        part = ranges.select(*keys, "range_id", "start_ns", "end_ns")
        if rows.len() != ranges.height:
            part = part.filter(mask)
        dtypes = {k: pl.String if part.schema[k] == pl.String else pl.Int64 for k in keys}
        pts = {name: _points(family, df, keys, dtypes) for name, df in live.items()}
        if family == "gpu":  # kernels placed on a thread's range keep it
            pts = {name: p.filter(result[name].gather(p["point_id"]).is_null()) for name, p in pts.items()}
        pts = {name: p for name, p in pts.items() if p.height}
        tl, t = _build(part, keys, pl.concat(list(pts.values())) if pts else None)
        at = rows.gather(tl.order)
        parent = parent.scatter(at, tl.range_id.gather(_parent_pos(tl))) if at.len() else parent
        depth = depth.scatter(at, tl.depth)
        if t is None:
            continue
        pos, offset = _innermost(tl, t), 0
        for name, p in pts.items():
            mine = pos.slice(offset, p.height)
            offset += p.height
            hit = mine.is_not_null()
            at_p = p["point_id"].filter(hit)
            if at_p.len():
                result[name] = result[name].scatter(at_p, tl.range_id.gather(mine.filter(hit)))
    out.update({name: df.with_columns(result[name].alias("range_id")) for name, df in live.items()})
    nested = ranges.with_columns(parent.alias("parent_id"), depth.alias("depth")) if found else ranges
    return nested, {name: out[name] for name in targets}


def _innermost(tl: _Timeline, t: pl.Series) -> pl.Series:
    """For each point of the combined line ``t`` (those ``_build`` was given), the preorder position of the
    innermost range containing it."""
    assert tl.ends_nz is not None and tl.ends_z is not None
    n = tl.start.len()
    last = tl.start.search_sorted(t, side="right").cast(pl.Int64) - 1  # R: last range started by t
    ended = tl.ends_nz.search_sorted(t, side="left").cast(pl.Int64)
    if tl.ends_z.len():
        ended = ended + tl.ends_z.search_sorted(t, side="left").cast(pl.Int64)
    safe_last = last.clip(0, n - 1)
    r = pl.DataFrame(
        {
            "last": last,
            "t": t,
            "ended": ended,
            "s_last": tl.start.gather(safe_last),
            "d_last": tl.depth.gather(safe_last),
        }
    )
    # Ranges ending at t are closed when a range starts at t (the later sibling wins).
    touching = r["s_last"] == r["t"]
    if touching.any():
        at_t = (
            tl.ends_nz.search_sorted(r["t"], side="right") - tl.ends_nz.search_sorted(r["t"], side="left")
        ).cast(pl.Int64)
        r = r.with_columns(pl.when(touching & (r["last"] >= 0)).then(at_t).otherwise(0).alias("touch"))
    else:
        r = r.with_columns(pl.lit(0, pl.Int64).alias("touch"))
    r = r.with_row_index("i").with_columns(
        (pl.col("last") - pl.col("ended") - pl.col("touch")).cast(pl.Int32).alias("d")
    )
    r = r.with_columns(
        pl.when(pl.col("last") < 0)
        .then(None)
        .when(pl.col("d") == pl.col("d_last"))
        .then(pl.col("last"))
        .otherwise(None)
        .alias("pos")
    )
    up = r.filter((pl.col("last") >= 0) & (pl.col("d") >= 0) & (pl.col("d") < pl.col("d_last")))
    if up.height:
        anc = (
            up.select("i", "last", "d")
            .sort("last")
            .join_asof(
                pl.DataFrame({"p": pl.int_range(n, dtype=pl.Int64, eager=True), "d": tl.depth}),
                left_on="last",
                right_on="p",
                by="d",
                strategy="backward",
                check_sortedness=False,
            )
        )
        pos = r["pos"].scatter(anc["i"], anc["p"])
        r = r.with_columns(pos.alias("pos"))
    # Check containment; a miss only happens with improper nesting: walk up parents from R instead.
    pos = r["pos"]
    valid = pos.is_not_null()
    safe = pos.fill_null(0)
    ok = valid & (tl.start.gather(safe) <= r["t"]) & (tl.end.gather(safe) >= r["t"])
    # With proper nesting d < 0 means nothing contains t; R itself containing t shows improper nesting.
    r_holds = tl.end.gather(safe_last) >= r["t"]
    redo = (~ok & (r["last"] >= 0) & ((r["d"] >= 0) | r_holds)).arg_true()
    if redo.len():
        cur = r["last"].gather(redo)
        tt = r["t"].gather(redo)
        ans = pl.repeat(None, redo.len(), dtype=pl.Int64, eager=True)
        live = pl.Series(range(redo.len()), dtype=pl.Int64)
        parent_pos = _parent_pos(tl)
        for _ in range(_MAX_DEPTH):
            if live.len() == 0:
                break
            c, tv = cur.gather(live), tt.gather(live)
            hit = tl.end.gather(c) >= tv
            ans = ans.scatter(live.filter(hit), c.filter(hit))
            nxt = parent_pos.gather(c.filter(~hit))
            keep = nxt.is_not_null()
            live = live.filter(~hit).filter(keep)
            cur = cur.scatter(live, nxt.filter(keep)) if live.len() else cur
        return pl.select(pl.when(ok).then(pos)).to_series().scatter(redo, ans)
    return pl.select(pl.when(ok).then(pos)).to_series()


def _assign(tl_ranges: pl.DataFrame, keys: list[str], points: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """(point_id, range_id) for the points that fall in a range of ``tl_ranges`` (same keys)."""
    tl, t = _build(tl_ranges, keys, points)
    assert t is not None
    pos = _innermost(tl, t)
    hit = pos.is_not_null()
    return points["point_id"].filter(hit), tl.range_id.gather(pos.filter(hit))


def assign_innermost(
    ranges: pl.DataFrame, keys: list[str], points: pl.DataFrame
) -> tuple[pl.Series, pl.Series]:
    """(point_id, range_id) of the innermost range of ``ranges`` (``keys``, range_id, start_ns, end_ns)
    containing each point of ``points`` (point_id, ``keys``, t) on the same ``keys``; points in no range are
    left out."""
    return _assign(ranges, keys, points)


def assign_ranges(kernels: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Return ``kernels`` with ``range_id`` set to the innermost enclosing range (null where none).

    Nesting is computed from the ranges' intervals (any ``parent_id`` / ``depth`` given is not needed)."""
    if kernels.height == 0 or ranges.height == 0:
        return kernels.with_columns(pl.lit(None, pl.Int64).alias("range_id"))
    result = pl.repeat(None, kernels.height, dtype=pl.Int64, eager=True)
    kind = ranges["kind"]
    has_start = ranges["start_ns"].is_not_null()
    cols = ranges.select("source", "pid", "tid", "device", "range_id", "start_ns", "end_ns")
    thread = kind.is_in(_THREAD_KINDS) & has_start
    thread_ranges = cols if thread.all() else cols.filter(thread)
    ids = pl.int_range(kernels.height, dtype=pl.Int64, eager=True).alias("point_id")
    linked = kernels["launch_tid"].is_not_null() & kernels["launch_start_ns"].is_not_null()
    if thread_ranges.height and linked.any():
        pts = kernels.select(
            ids, "source", "pid", pl.col("launch_tid").alias("tid"), pl.col("launch_start_ns").alias("t")
        ).filter(linked)
        at, rid = _assign(thread_ranges, _THREAD_KEYS, pts)
        result = result.scatter(at, rid) if at.len() else result
    gpu_ranges = cols.filter((kind == "gpu_annotation") & has_start)
    rest = result.is_null()
    if gpu_ranges.height and rest.any():
        pts = kernels.select(
            ids, "source", "device", pl.col("stream").alias("tid"), pl.col("start_ns").alias("t")
        ).filter(rest & pl.Series(kernels["start_ns"].is_not_null()))
        if pts.height:
            at, rid = _assign(gpu_ranges, _GPU_KEYS, pts)
            result = result.scatter(at, rid) if at.len() else result
    return kernels.with_columns(result.alias("range_id"))
