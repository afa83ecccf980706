"""A table's rows read from the SQLite file's pages (``_pages.c``) instead of through SQLite's virtual machine.

An nsys export of a serving step is millions of rows; SQLite steps them at about 0.7 us per row and column (3.4
s of one core for the 5M NVTX ranges of the scale export in docs/PERFORMANCE.md, 1.9 s for its 1M kernels). The C reader
walks a table's b-tree and writes the columns into Arrow buffers at a fraction of that, a large table in parallel
parts that each write their rows into the table's buffers at their offset (one chunk per column).

This module is the seam: whether the reader is there (``AVAILABLE``: built at install time where a C compiler
was found, and not turned off by ``TRACEKIT_NO_PAGE_READER``), what SQLite's schema says about a table that the
reader must know (``Layout``: its root page, each column's place in a record, which column is the rowid), and
what a query may ask of it (plain columns of integers or text; ``CAST`` and the like are SQLite's). Whatever the
reader is not sure of it declines with a reason (a str), and ``db.py`` reads the table through SQLite, whose
frames the reader's must equal (tests/readers/test_nsys_pages.py reads every shared export both ways).
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from . import sidecars, sqlite_uri

DISABLE_ENV = "TRACEKIT_NO_PAGE_READER"
"""Set (to anything but "" or "0"), every table is read through SQLite: to compare the two, or to rule the page
reader out when a result looks wrong. Read at import."""

try:
    from . import _pages  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: every table goes through SQLite
    _pages = None
if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
    _pages = None

AVAILABLE = _pages is not None
"""Whether the page reader was built with this install (and not turned off by ``TRACEKIT_NO_PAGE_READER``)."""

_INT, _TEXT, _ROWID = 0, 1, 2  # the reader's column kinds
_PART_ROWS = 250_000
"""Rows below which a table is read in one part: a part costs a thread and a file mapping."""


@dataclass(frozen=True)
class Layout:
    """What the reader needs from a table's schema: its b-tree's root page, each column's place in a record,
    the column that is the rowid's alias (stored as NULL in the record), and the columns whose default is not
    NULL (a record written before ``ALTER TABLE ADD COLUMN`` lacks them and reads as that default)."""

    root: int
    place: dict[str, int]
    rowid: str | None
    has_default: frozenset[str]


def layout(path: Path, table: str) -> Layout | str:
    """``table``'s layout, or why the page reader cannot read it (a WITHOUT ROWID or virtual table, generated
    columns, a file in WAL mode whose latest pages may be in the -wal file, a hot journal)."""
    for other in sidecars(path):
        return f"a {other.name.removeprefix(path.name)} file beside it may hold pages the file lacks"
    try:
        con = sqlite3.connect(sqlite_uri(path), uri=True)
    except sqlite3.Error as e:
        return f"SQLite could not open it ({e})"
    try:
        row = con.execute(
            "SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        if row is None or not row[0] or not row[1]:
            return "not an ordinary table"
        root, sql = row
        if re.search(r"WITHOUT\s+ROWID", sql, re.I):
            return "a WITHOUT ROWID table"
        if re.search(r"PRIMARY\s+KEY\s+DESC", sql, re.I):
            return "an INTEGER PRIMARY KEY DESC column (not the rowid's alias)"
        info = con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
    except (sqlite3.Error, UnicodeDecodeError) as e:
        return f"SQLite could not read its schema ({e})"
    finally:
        con.close()
    if any(hidden for *_, hidden in info):
        return "generated or hidden columns"
    keys = [(name, decl) for _, name, decl, _, _, pk, _ in info if pk]
    rowid = keys[0][0] if len(keys) == 1 and (keys[0][1] or "").upper() == "INTEGER" else None
    return Layout(
        root=int(root),
        place={name: cid for cid, name, *_ in info},
        rowid=rowid,
        has_default=frozenset(
            name for _, name, _, _, default, *_ in info if default is not None and default.upper() != "NULL"
        ),
    )


Column = tuple[str, str | None, str]
"""A result column: its name, the table's column it is read from (None: a column of NULLs), "int" or "text"."""


@dataclass(frozen=True)
class Part:
    """A share of a table's rows (``part`` of ``parts`` of its b-tree's root children, ``rows`` of them,
    counted), written into the table's buffers from row ``offset``."""

    path: Path
    root: int
    spec: tuple[tuple[int, int, bool], ...]
    part: int
    parts: int
    table: object  # the C reader's Table
    offset: int
    rows: int

    def read(self) -> str | None:
        """Read this part into the table; None, or why the reader declined it. Runs without the GIL: the parts
        of a table may be read at once."""
        assert _pages is not None
        return _pages.read(
            str(self.path), self.root, self.spec, self.part, self.parts, self.table, self.offset, self.rows
        )


@dataclass(frozen=True)
class Planned:
    """A table's read from its pages: its parts (each read once, in any order or at once), then :meth:`frame`."""

    parts: tuple[Part, ...]
    columns: tuple[Column, ...]
    table: object

    @property
    def rows(self) -> int:
        """The table's rows: its parts', counted."""
        return sum(p.rows for p in self.parts)

    def frame(self) -> pl.DataFrame:
        """The table as a frame of ``columns`` in their order (Int64 or String), each column one chunk, once
        every part was read."""
        assert _pages is not None
        stored = iter(self.table.columns())  # type: ignore[attr-defined]
        height = self.rows
        out = []
        for alias, column, kind in self.columns:
            dtype = pl.Int64 if kind == "int" else pl.String
            if column is None:
                out.append(pl.repeat(None, height, dtype=dtype, eager=True).alias(alias))
            else:
                out.append(pl.Series(next(stored)).alias(alias))
        return pl.DataFrame(out)


def plan(
    path: Path, where: Layout, columns: Sequence[Column], rows_hint: int, parts: int | None = None
) -> Planned | str:
    """How to read ``columns`` of the table (about ``rows_hint`` rows: one part per 250k, at most four, unless
    ``parts`` says), each part's rows counted; or why the page reader cannot (it is not built; a column the
    table lacks; no stored column; a b-tree it cannot count)."""
    if _pages is None:
        return "the page reader is not built"
    spec = []
    for _, column, kind in columns:
        if column is None:
            continue
        if column not in where.place:
            return f"no column {column!r}"
        if column == where.rowid:
            if kind != "int":
                return "the rowid read as text"
            spec.append((_ROWID, 0, True))
        else:
            spec.append(
                (_INT if kind == "int" else _TEXT, where.place[column], column not in where.has_default)
            )
    if not spec:
        return "no stored column asked for"
    n = parts or max(1, min(4, rows_hint // _PART_ROWS))
    # each part counted in a thread of its own (the walk of a 5M-row table's leaves: 0.05-0.1 s in one)
    with ThreadPoolExecutor(n) as pool:
        counts = list(pool.map(lambda i: _pages.count(str(path), where.root, i, n), range(n)))
    if why := next((c for c in counts if isinstance(c, str)), None):
        return why
    table = _pages.Table(tuple(k for k, _, _ in spec), sum(counts), n)
    offsets = [sum(counts[:i]) for i in range(n)]
    return Planned(
        tuple(Part(path, where.root, tuple(spec), i, n, table, offsets[i], counts[i]) for i in range(n)),
        tuple(columns),
        table,
    )
