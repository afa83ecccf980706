"""The typed result of the step breakdown: :class:`Breakdown` holds one :class:`Slice` per device (the whole
run) and per (range name, device), each a list of :class:`ClassShare` that sums to the slice's span with idle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["IDLE", "Breakdown", "ClassShare", "Slice"]

IDLE = "idle"
"""The ``class`` of the share of a span when no kernel, memcpy or memset ran on the device."""


@dataclass(frozen=True)
class ClassShare:
    """One class's time in a slice: ``time_ns`` it owns under the priority order (docs/BREAKDOWN.md), ``pct``
    of the slice's span, ``kernels`` its rows (kernels, memcpy / memset) in the slice, and ``union_ns`` the time
    any of them ran (its own union, counting time other classes also ran)."""

    cls: str
    time_ns: int
    pct: float
    kernels: int
    union_ns: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClassShare:
        return cls(str(d["class"]), int(d["time_ns"]), float(d["pct"]), int(d["kernels"]), int(d["union_ns"]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "class": self.cls,
            "time_ns": self.time_ns,
            "pct": self.pct,
            "kernels": self.kernels,
            "union_ns": self.union_ns,
        }


@dataclass(frozen=True)
class Slice:
    """The breakdown of one device over the whole run (``range`` None) or over the instances of one range name.

    ``span_ns``: first start to last end of the device's rows (a range: the sum of its instances' GPU windows);
    ``busy_ns``: the union of every row; ``idle_ns`` = span - busy. ``compute_ns``: the union of the compute
    classes (all but communication and memory); ``communication_ns``: the union of communication kernels;
    ``overlap_ns``: communication time during which compute also ran (on another stream, since a stream runs
    one kernel at a time), ``overlap_pct`` its share of ``communication_ns`` (None without communication).
    ``classes``: every class present, in the priority order, then ``idle``; their ``time_ns`` sum to the span."""

    rank: int | None
    device: int | None
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    communication_ns: int
    overlap_ns: int
    overlap_pct: float | None
    kernels: int
    classes: tuple[ClassShare, ...]
    range: str | None = None
    instances: int | None = None

    def share(self, cls: str) -> ClassShare | None:
        """The share of ``cls`` (``idle`` included), None when the class has no time here."""
        return next((c for c in self.classes if c.cls == cls), None)

    def pct(self, value_ns: int) -> float:
        """``value_ns`` as a percentage of the span (0 for an empty span)."""
        return 100.0 * value_ns / self.span_ns if self.span_ns else 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Slice:
        """The slice :meth:`to_dict` wrote (the views render a report's or ``show --json``'s JSON)."""
        return cls(
            rank=d.get("rank"),
            device=d.get("device"),
            span_ns=int(d["span_ns"]),
            busy_ns=int(d["busy_ns"]),
            idle_ns=int(d["idle_ns"]),
            compute_ns=int(d["compute_ns"]),
            communication_ns=int(d["communication_ns"]),
            overlap_ns=int(d["overlap_ns"]),
            overlap_pct=d.get("overlap_pct"),
            kernels=int(d["kernels"]),
            classes=tuple(ClassShare.from_dict(c) for c in d["classes"]),
            range=d.get("range"),
            instances=d.get("instances"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.range is not None:
            out["range"] = self.range
            out["instances"] = self.instances
        out |= {
            "rank": self.rank,
            "device": self.device,
            "span_ns": self.span_ns,
            "busy_ns": self.busy_ns,
            "idle_ns": self.idle_ns,
            "idle_pct": self.pct(self.idle_ns),
            "compute_ns": self.compute_ns,
            "compute_pct": self.pct(self.compute_ns),
            "communication_ns": self.communication_ns,
            "communication_pct": self.pct(self.communication_ns),
            "overlap_ns": self.overlap_ns,
            "overlap_pct": self.overlap_pct,
            "kernels": self.kernels,
            "classes": [c.to_dict() for c in self.classes],
        }
        return out


@dataclass
class Breakdown:
    """GPU time by kernel class, idle and communication overlap: per device for the whole run (``devices``) and
    per range name and device (``ranges``, the ``ranges_total`` names with GPU work ranked by span, the first
    ones kept). ``order``: the priority order of the classes; ``notes``: what the numbers leave out."""

    devices: list[Slice] = field(default_factory=list)
    ranges: list[Slice] = field(default_factory=list)
    ranges_total: int = 0
    order: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.devices

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Breakdown:
        """The breakdown :meth:`to_dict` wrote."""
        return cls(
            devices=[Slice.from_dict(s) for s in d.get("devices") or []],
            ranges=[Slice.from_dict(s) for s in d.get("ranges") or []],
            ranges_total=int(d.get("ranges_total") or 0),
            order=tuple(d.get("order") or ()),
            notes=list(d.get("notes") or []),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``show --json`` / ``report --format json``'s ``breakdown``)."""
        return {
            "devices": [s.to_dict() for s in self.devices],
            "ranges": [s.to_dict() for s in self.ranges],
            "ranges_total": self.ranges_total,
            "order": list(self.order),
            "notes": list(self.notes),
        }
