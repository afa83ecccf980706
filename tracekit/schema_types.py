"""The vocabulary the frame schemas are written in (tracekit/schema.py): column types by polars' names, lists and
structs, a column, a frame. Standard library only, like schema.py, which loads this file by its path where it is
itself loaded by path with no tracekit installed (collectors/failures.py beside torchprof.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = [
    "BOOL",
    "F64",
    "I32",
    "I64",
    "STR",
    "Column",
    "DType",
    "FrameSchema",
    "ListOf",
    "Scalar",
    "StructOf",
]

Scalar: TypeAlias = Literal["Int64", "Int32", "Float64", "String", "Boolean"]
"""A scalar column type, by its polars name."""


@dataclass(frozen=True)
class ListOf:
    """A list column (polars ``List``) of ``inner`` values."""

    inner: DType


@dataclass(frozen=True)
class StructOf:
    """A struct column (polars ``Struct``) with these (name, type) fields, in order."""

    fields: tuple[tuple[str, DType], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)


DType: TypeAlias = "Scalar | ListOf | StructOf"


@dataclass(frozen=True)
class Column:
    """One column: its name, type and what it holds (with its unit)."""

    name: str
    dtype: DType
    doc: str


@dataclass(frozen=True)
class FrameSchema:
    """One frame: its name, what a row is, and its columns in order (the first is the frame's id, where any)."""

    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def nested(self) -> tuple[Column, ...]:
        """The columns that hold lists or structs (JSON text in runs of schema version 4 and older)."""
        return tuple(c for c in self.columns if not isinstance(c.dtype, str))


I64: Scalar = "Int64"
I32: Scalar = "Int32"
F64: Scalar = "Float64"
STR: Scalar = "String"
BOOL: Scalar = "Boolean"
