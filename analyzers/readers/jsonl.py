"""tracekit's own JSONL records: ``measurements``, ``failures`` (the sweep, a crashed capture, the instrument
wrapper), ``moe`` (``tracekit bench moe``), ``moe-curve`` (its per-expert curve), ``moe-routing`` (instrument()'s
routing sidecar). One row per line, keyed like the frame of the same name; a line that is not a JSON object is
skipped and counted, never fatal."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import polars as pl

from tracekit.frames import SPECS, nested_value

from .base import Extract
from .protocol import FormatReader, ReadOptions

if TYPE_CHECKING:
    from pathlib import Path

    from .source import Source

_RECORDS_HEAD = 65536
"""The first line of a measurements / failures file must end within this many bytes."""


def _first_object(head: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(head.split(b"\n", 1)[0])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def moe_kind(head: bytes) -> str | None:
    """``moe`` for ``tracekit bench moe`` rows, ``moe-curve`` for its per-expert curve, ``moe-routing`` for
    instrument()'s routing sidecar, else None (from the first line)."""
    obj = _first_object(head)
    if obj is None:
        return None
    if str(obj.get("range") or "").startswith("gemm ") and " of=moe" in str(obj.get("range")):
        return "moe-curve"
    if "counts" not in obj:
        return None
    if "instance" in obj and "range" in obj:
        return "moe-routing"
    if "route" in obj and "rows" in obj:
        return "moe"
    return None


def _is_records(head: bytes, columns: set[str]) -> bool:
    obj = _first_object(head[:_RECORDS_HEAD])
    return obj is not None and len(columns & set(obj)) >= 3


def own_kind(name: str) -> str | None:
    """The kind of one of tracekit's own JSONL files, by its name (a sweep writes them even when they get no
    row: ``failures.jsonl`` of a sweep where nothing failed)."""
    if name.startswith("moe_routing-") and name.endswith(".jsonl"):
        return "moe-routing"
    return {
        "failures.jsonl": "failures",
        "measurements.jsonl": "measurements",
        "moe.jsonl": "moe",
        "moe_curve.jsonl": "moe-curve",
    }.get(name)


def _clean_json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return None
    return value


def read_jsonl_records(path: Path, frame: str) -> Extract:
    """tracekit's own measurements.jsonl / failures.jsonl; bad lines are skipped and counted, never fatal."""
    spec = SPECS[frame]
    names = [c.name for c in spec.columns]
    rows: list[dict[str, Any]] = []
    bad = 0
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(obj, dict):
                bad += 1
                continue
            rows.append({k: _clean_json_value(obj.get(k)) for k in names})
    text_cols = [c.name for c in spec.columns if c.dtype == pl.String]
    nested = spec.declared.nested()
    for row in rows:
        for key in text_cols:  # a list or object where text belongs is kept as JSON text
            if row.get(key) is not None and not isinstance(row[key], str):
                row[key] = json.dumps(row[key])
        for c in nested:  # lists and objects (versions, per-expert counts), also when written as JSON text
            row[c.name] = nested_value(row[c.name], c.dtype)
    if rows:
        df = pl.DataFrame(rows, schema={c.name: c.dtype for c in spec.columns}, strict=False)
    else:
        df = spec.empty()
    id_col = spec.columns[0].name
    df = spec.conform(df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(id_col)))
    ex = Extract(frame, path.name, {frame: df})
    if bad:
        ex.partial = True
        ex.warnings.append(f"{path.name}: {bad} line(s) were not valid JSON records and were skipped")
    return ex


class RecordsReader(FormatReader):
    """One kind of tracekit's JSONL records, read into the frame of the same name (``-`` becomes ``_``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.frame = kind.replace("-", "_")
        if kind.startswith("moe"):
            self._sniff = lambda head: moe_kind(head) == kind
        else:
            # a row of one of the two frames holds at least three columns only that frame has
            mine = {c.name for c in SPECS[self.frame].columns}
            other = {c.name for c in SPECS["failures" if kind == "measurements" else "measurements"].columns}
            self._sniff = lambda head: _is_records(head, mine - other)

    def sniff(self, head: bytes) -> bool:
        return self._sniff(head)

    def read(self, source: Source, options: ReadOptions) -> Extract:
        return read_jsonl_records(source.file(), self.frame)


READERS = [
    RecordsReader("moe-curve"),
    RecordsReader("moe-routing"),
    RecordsReader("moe"),
    RecordsReader("failures"),
    RecordsReader("measurements"),
]
"""In the order they are tried: the MoE rows by their keys, then failures before measurements."""
