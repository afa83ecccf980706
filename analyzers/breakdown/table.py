"""The breakdown as the views draw it: one frame of rows (each device for the whole run, then each range name on
each device) with a percent column per class, and one line of text per slice."""

from __future__ import annotations

import polars as pl

from .model import IDLE, Breakdown, Slice

__all__ = ["WHOLE_RUN", "breakdown_frame", "collapse_same_ranges", "device_label", "gpu_label", "headline"]

WHOLE_RUN = "(whole run)"
"""The ``scope`` of a device's row over the whole run."""


def device_label(s: Slice) -> str:
    """``0`` for device 0, ``r1:0`` for device 0 of rank 1, ``?`` where the device is unknown."""
    return gpu_label(s.rank, s.device)


def gpu_label(rank: int | None, device: int | None) -> str:
    """:func:`device_label` from a rank and a device number."""
    dev = "?" if device is None else str(device)
    return dev if rank is None else f"r{rank}:{dev}"


def breakdown_frame(b: Breakdown, limit: int | None = None) -> pl.DataFrame:
    """``scope`` (the range name, or :data:`WHOLE_RUN`), ``gpu`` (:func:`device_label`), ``n`` (instances of the
    range), ``span_ms``, then the percent of the span of ``idle`` and of each class any row holds (in the
    priority order), and ``comm_hidden`` (% of communication time under compute). Range rows: the first
    ``limit`` range names (None: all kept)."""
    names: list[str] = []
    for s in b.ranges:
        if s.range not in names:
            names.append(str(s.range))
    keep = set(names if limit is None else names[:limit])
    slices = [*b.devices, *[s for s in b.ranges if s.range in keep]]
    present = {c.cls for s in slices for c in s.classes if c.cls != IDLE and c.time_ns > 0}
    classes = [c for c in b.order if c in present]
    rows = []
    for s in slices:
        pct = {c.cls: c.pct for c in s.classes}
        rows.append(
            {
                "scope": WHOLE_RUN if s.range is None else s.range,
                "gpu": device_label(s),
                "n": s.instances,
                "span_ms": s.span_ns / 1e6,
                IDLE: pct.get(IDLE, 0.0),
                **{c: pct.get(c, 0.0) for c in classes},
                "comm_hidden": s.overlap_pct,
            }
        )
    schema = {
        "scope": pl.String,
        "gpu": pl.String,
        "n": pl.Int64,
        "span_ms": pl.Float64,
        IDLE: pl.Float64,
        **dict.fromkeys(classes, pl.Float64),
        "comm_hidden": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, strict=False)


SAME_PCT_POINTS = 1.0
"""Two GPUs' rows of one range name are the same when every class share differs by at most this many points..."""
SAME_SPAN_RATIO = 1.1
"""...and their spans by at most this ratio (a collective twice as long on one rank is a straggler, kept apart)."""


def collapse_same_ranges(df: pl.DataFrame) -> pl.DataFrame:
    """:func:`breakdown_frame`'s rows with each range name that is the same on every GPU (see
    :data:`SAME_PCT_POINTS`, :data:`SAME_SPAN_RATIO`) as one row, ``gpu`` ``all N (mean)``, its numbers the
    GPUs' mean, in the place of its first row. A 2-rank FSDP run repeats the same 20 ranges per rank otherwise;
    ranges that differ between GPUs (the straggler's collectives) keep a row per GPU. One GPU: unchanged."""
    gpus = df.filter(pl.col("scope") == WHOLE_RUN)["gpu"].to_list()
    if len(gpus) < 2:
        return df
    pct = [c for c in df.columns if c not in ("scope", "gpu", "n", "span_ms")]
    rows = df.to_dicts()
    by_scope: dict[str, list[dict]] = {}
    for r in rows:
        if r["scope"] != WHOLE_RUN:
            by_scope.setdefault(r["scope"], []).append(r)

    def same(group: list[dict]) -> bool:
        if sorted(r["gpu"] for r in group) != sorted(gpus):
            return False
        spans = [r["span_ms"] or 0.0 for r in group]
        if min(spans) <= 0 or max(spans) / min(spans) > SAME_SPAN_RATIO:
            return False
        for c in pct:
            values = [r[c] for r in group]
            if any(v is None for v in values):
                if not all(v is None for v in values):
                    return False
            elif max(values) - min(values) > SAME_PCT_POINTS:
                return False
        return True

    def mean(values: list) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    out, done = [], set()
    for r in rows:
        group = by_scope.get(r["scope"]) if r["scope"] != WHOLE_RUN else None
        if group is None:
            out.append(r)
            continue
        if r["scope"] in done:
            continue
        done.add(r["scope"])
        if not same(group):  # a row per GPU, side by side
            out.extend(group)
            continue
        n = mean([g["n"] for g in group])
        out.append(
            {
                "scope": r["scope"],
                "gpu": f"all {len(group)} (mean)",
                "n": None if n is None else round(n),
                **{c: mean([g[c] for g in group]) for c in ("span_ms", *pct)},
            }
        )
    return pl.DataFrame(out, schema=df.schema, strict=False)


def _pct(value: float) -> str:
    """``23%``; below 10% and above 99%, one decimal (``0.4%``, ``99.5%``), so that a small share does not read
    as nothing nor a large one as everything."""
    return f"{value:.0f}%" if 9.95 <= value < 99 or value == 100 else f"{value:.1f}%"


def headline(s: Slice, top: int = 4) -> str:
    """One line for a slice: idle and its largest classes as % of the span, and how much communication ran
    hidden under compute: ``GPU 1, 1,733.0 ms: idle 44%, gemm 23%, communication 21% (0.0% hidden under compute),
    elementwise 9.2%``; idle first, so that a line cut to a narrow screen keeps it."""
    ranked = sorted((c for c in s.classes if c.cls != IDLE and c.time_ns > 0), key=lambda c: -c.time_ns)
    idle = s.share(IDLE)
    parts = [f"idle {_pct(idle.pct if idle else 0.0)}"]
    for c in ranked[:top]:
        text = f"{c.cls} {_pct(c.pct)}"
        if c.cls == "communication" and s.overlap_pct is not None:
            text += f" ({_pct(s.overlap_pct)} hidden under compute)"
        parts.append(text)
    if len(ranked) > top:
        parts.append(f"{len(ranked) - top} more classes {_pct(sum(c.pct for c in ranked[top:]))}")
    where = f"GPU {device_label(s)}" if s.range is None else f"{s.range} on GPU {device_label(s)}"
    return f"{where}, {s.span_ns / 1e6:,.1f} ms: " + ", ".join(parts)
