"""The breakdown as the views draw it: one frame of rows (each device for the whole run, then each range name on
each device) with a percent column per class, and one line of text per slice."""

from __future__ import annotations

import polars as pl

from .model import IDLE, Breakdown, Slice

__all__ = ["WHOLE_RUN", "breakdown_frame", "device_label", "gpu_label", "headline"]

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
