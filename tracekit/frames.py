"""The frames of a run as polars schemas, built from the polars-free declarations of tracekit/schema.py.

Every reader builds its frames to these schemas (``conform`` casts and orders columns, adding missing ones as
nulls); the columns, their types and units are declared once, in tracekit/schema.py, which the collectors read
without polars. A frame written by the previous schema version held JSON text where lists and structs are now
(``versions``, ``nvtx_stack``, ``aux_kernels``, ``counts`` ...): :func:`migrate` decodes those columns on read, in
memory only, so older runs open without a rebuild and without being written to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit import schema
from tracekit._version import MIGRATES_FROM, SCHEMA_VERSION

__all__ = [
    "MIGRATES_FROM",
    "SCHEMA_VERSION",
    "SPECS",
    "Column",
    "FrameSpec",
    "conform",
    "empty",
    "migrate",
    "nested_value",
    "polars_dtype",
]

_SCALARS: dict[str, pl.DataType] = {
    "Int64": pl.Int64(),
    "Int32": pl.Int32(),
    "Float64": pl.Float64(),
    "String": pl.String(),
    "Boolean": pl.Boolean(),
}


def polars_dtype(dtype: schema.DType) -> pl.DataType:
    """The polars dtype of a declared column type."""
    if isinstance(dtype, schema.ListOf):
        return pl.List(polars_dtype(dtype.inner))
    if isinstance(dtype, schema.StructOf):
        return pl.Struct({name: polars_dtype(inner) for name, inner in dtype.fields})
    return _SCALARS[dtype]


@dataclass(frozen=True)
class Column:
    """One column with its polars dtype (built from its declaration in tracekit/schema.py)."""

    name: str
    dtype: pl.DataType
    doc: str


@dataclass(frozen=True)
class FrameSpec:
    """One frame's polars schema; ``declared`` is its polars-free declaration (tracekit/schema.py)."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    declared: schema.FrameSchema

    @classmethod
    def of(cls, declared: schema.FrameSchema) -> FrameSpec:
        """The polars form of a frame declared in tracekit/schema.py."""
        cols = tuple(Column(c.name, polars_dtype(c.dtype), c.doc) for c in declared.columns)
        return cls(declared.name, declared.doc, cols, declared)

    @property
    def schema(self) -> pl.Schema:
        return pl.Schema({c.name: c.dtype for c in self.columns})

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.schema)

    def conform(self, df: pl.DataFrame) -> pl.DataFrame:
        """Cast ``df`` to this schema: known columns cast (strictly), missing ones null, extra ones dropped."""
        if df.width == 0:  # selecting literals from a frame without columns would make one row
            return self.empty()
        exprs = []
        schema = df.schema
        for c in self.columns:
            if c.name in schema:
                # a column of its own type as it is: polars' cast to the same type still rewrites it (a
                # generated 5M-row id column: 0.05 s and 120 MB of fresh memory)
                same = schema[c.name] == c.dtype
                exprs.append(pl.col(c.name) if same else pl.col(c.name).cast(c.dtype, strict=True))
            else:
                exprs.append(pl.lit(None, dtype=c.dtype).alias(c.name))
        return df.select(exprs)


def nested_value(value: Any, dtype: schema.DType) -> Any:
    """A value for a nested column from what a JSONL row or an earlier schema's frame holds: a list, an object
    (``{"torch": "2.11"}`` becomes a list of two-field structs, sorted by key) or either as JSON text. What does
    not fit the column (unreadable text, a number where a list belongs) is None, never an error."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if (
        isinstance(dtype, schema.ListOf)
        and isinstance(dtype.inner, schema.StructOf)
        and isinstance(value, dict)
    ):
        names = dtype.inner.names
        if len(names) != 2:
            return None
        key, val = names
        return [{key: str(k), val: None if v is None else str(v)} for k, v in sorted(value.items())]
    if isinstance(dtype, schema.ListOf):
        return value if isinstance(value, list) else None
    return value if isinstance(value, dict) else None


_DECODED = "__tracekit_decoded"
"""A scratch column name of :func:`migrate`."""


def migrate(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` as read from a frame file of an earlier schema, with its JSON text columns decoded into the nested
    columns of this schema (in memory; the file is not touched). Frames already nested come back as they are."""
    for c in SPECS[name].declared.nested():
        if c.name not in df.columns or df.schema[c.name] != pl.String:
            continue
        # each distinct text decoded once (a million ranges hold a few hundred distinct names), then joined back
        texts = df[c.name].drop_nulls().unique(maintain_order=True)
        values = [nested_value(v, c.dtype) for v in texts.to_list()]
        lookup = pl.DataFrame([texts, pl.Series(_DECODED, values, dtype=polars_dtype(c.dtype), strict=False)])
        df = (
            df.join(lookup, on=c.name, how="left", maintain_order="left")
            .with_columns(pl.col(_DECODED).alias(c.name))
            .drop(_DECODED)
        )
    return df


SPECS: dict[str, FrameSpec] = {name: FrameSpec.of(declared) for name, declared in schema.SCHEMAS.items()}
"""Every frame a run may hold, by name."""

KERNELS = SPECS["kernels"]
MEMOPS = SPECS["memops"]
RANGES = SPECS["ranges"]
NCU = SPECS["ncu"]
NCU_METRICS = SPECS["ncu_metrics"]
NCU_RULES = SPECS["ncu_rules"]
DEVICES = SPECS["devices"]
FAILURES = SPECS["failures"]
MEASUREMENTS = SPECS["measurements"]
GEMMS = SPECS["gemms"]
MOE = SPECS["moe"]
MOE_CURVE = SPECS["moe_curve"]
MOE_ROUTING = SPECS["moe_routing"]
MOE_LAUNCHES = SPECS["moe_launches"]
MOE_EXPERTS = SPECS["moe_experts"]
MOE_WHATIF = SPECS["moe_whatif"]


def empty(name: str) -> pl.DataFrame:
    return SPECS[name].empty()


def conform(name: str, df: pl.DataFrame) -> pl.DataFrame:
    return SPECS[name].conform(df)
