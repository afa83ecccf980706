"""Read-only access to Nsight Systems exports (``reader.py``): typed polars frames from queries of a table's
columns, read from the file's pages where the page reader is built and sure of the table (``pages.py``, the fast
path), else through the standard library's sqlite3 (the fallback), the big tables in rowid chunks. A value of
the wrong type (a damaged export) is read as null and counted in ``_Db.lost``.

An ADBC path (adbc-driver-sqlite, Arrow batches from SQLite) sat between the two until the paths were measured
against each other (docs/PERFORMANCE.md, "One fast path and one fallback per format"); it was removed."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.errors import MissingToolError

from . import pages, sqlite_uri

ENGINES = ("auto", "pages", "sqlite3")
"""How tables are read: ``auto`` from the pages where the page reader is built and sure of a table, else
sqlite3; ``pages`` the same but refused where the page reader is not built; ``sqlite3`` through SQLite only.
All give the same frames."""
_CHUNK_ROWS = 1 << 19  # rowids per statement; the big tables are read in such chunks


def _replace_bad_utf8(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _rows_frame(rows: list[tuple], schema: dict[str, pl.DataType], lost: list[int]) -> pl.DataFrame:
    """``rows`` as a frame of ``schema``; a value of the wrong type (text in an INTEGER column: SQLite keeps
    whatever it is given) becomes null and is counted in ``lost``."""
    try:
        return pl.DataFrame(rows, schema=schema, orient="row")
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        columns = {}
        for i, (name, dtype) in enumerate(schema.items()):
            values = [r[i] for r in rows]
            columns[name] = pl.Series(values, dtype=dtype, strict=False)
            lost.append(columns[name].null_count() - sum(v is None for v in values))
        return pl.DataFrame(columns)


def _query_sqlite3(
    uri: str,
    sql: str,
    schema: dict[str, pl.DataType],
    lost: list[int],
    *,
    replace_bad_utf8: bool = False,
) -> pl.DataFrame:
    con = sqlite3.connect(uri, uri=True)
    if replace_bad_utf8:  # slower (a Python call per text value): only after the plain read failed on one
        con.text_factory = _replace_bad_utf8
    try:
        cur = con.execute(sql)
        parts = []
        while rows := cur.fetchmany(262144):
            parts.append(_rows_frame(rows, schema, lost))
        return pl.concat(parts) if parts else pl.DataFrame(schema=schema)
    finally:
        con.close()


def _cast(cols: dict[str, str], name: str | None, integer: bool) -> bool:
    """Whether reading ``name`` needs SQLite's CAST: an integer read from a column not declared INTEGER."""
    return bool(name) and name in cols and integer and "INT" not in cols[name]  # type: ignore[index]


def _col(cols: dict[str, str], name: str | None, alias: str, *, integer: bool = True) -> str:
    """``name AS alias``: NULL where the column is absent; CAST where an integer column is not declared so."""
    if not name or name not in cols:
        return f"NULL AS {alias}"
    if _cast(cols, name, integer):
        return f'CAST("{name}" AS INTEGER) AS {alias}'
    return f'"{name}" AS {alias}'


@dataclass(frozen=True)
class _Query:
    """``SELECT <columns> FROM <table> [WHERE <keep column> IN (<values>)]``: each result column is
    ``(alias, the table's column or None for NULL, whether it is an integer)``, named and ordered as ``schema``;
    ``declared`` is the table's column -> declared type (upper case)."""

    table: str
    declared: dict[str, str]
    columns: tuple[tuple[str, str | None, bool], ...]
    schema: dict[str, pl.DataType]
    keep: tuple[str, tuple[int, ...]] | None = None

    @property
    def select(self) -> str:
        return ", ".join(_col(self.declared, c, a, integer=i) for a, c, i in self.columns)

    @property
    def where(self) -> str | None:
        if self.keep is None:
            return None
        column, values = self.keep
        return f'"{column}" IN ({", ".join(str(v) for v in values)})'

    def filtered(self, df: pl.DataFrame) -> pl.DataFrame:
        """``df`` (the table's rows, read without ``where``) cut to the rows ``where`` keeps."""
        if self.keep is None:
            return df
        column, values = self.keep
        alias = next(a for a, c, _ in self.columns if c == column)
        return df.filter(pl.col(alias).is_in(values))


class _Db:
    """Read-only access to one export: table columns, and queries returning typed polars frames."""

    def __init__(self, path: Path, tables: set[str], *, engine: str = "auto") -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        self.path = path
        self.uri = sqlite_uri(path)
        self.tables = tables
        if engine == "pages" and not pages.AVAILABLE:
            raise MissingToolError(
                "engine 'pages' needs the page reader, which this install did not build (no C compiler) or "
                f"{pages.DISABLE_ENV} turned off",
                "reinstall tracekit where a C compiler is found, or use --engine auto",
            )
        self.use_pages = engine in ("auto", "pages") and pages.AVAILABLE
        self._cols: dict[str, dict[str, str]] = {}
        self._spans: dict[str, tuple[int, int] | None] = {}
        self.notes: list[str] = []
        self.lost: list[int] = []  # per query chunk: values of the wrong type, read as null
        self.declined: dict[str, str] = {}  # table -> why the page reader left it to SQLite

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> declared type (upper case) of ``table``; empty when the table is absent."""
        if table not in self.tables:
            return {}
        if table not in self._cols:
            self._cols[table] = {
                r[1]: (r[2] or "").upper() for r in self.small(f'PRAGMA table_info("{table}")')
            }
        return self._cols[table]

    def small(self, sql: str) -> list[tuple]:
        con = sqlite3.connect(self.uri, uri=True)
        try:
            try:
                return con.execute(sql).fetchall()
            except sqlite3.OperationalError as e:
                if "decode" not in str(e):
                    raise
                note = "some strings are not UTF-8; the bad bytes are shown as U+FFFD"
                if note not in self.notes:
                    self.notes.append(note)
                con.text_factory = _replace_bad_utf8
                return con.execute(sql).fetchall()
        finally:
            con.close()

    def span(self, table: str) -> tuple[int, int] | None:
        """The least and greatest rowid of ``table``; None for a WITHOUT ROWID table, an empty one, or a
        damaged b-tree that answers max < min."""
        if table not in self._spans:
            try:
                # Two subqueries: SQLite answers a lone min() or max() of the rowid from the b-tree, both at
                # once by a scan.
                lo, hi = self.small(
                    f'SELECT (SELECT min(rowid) FROM "{table}"), (SELECT max(rowid) FROM "{table}")'
                )[0]
            except sqlite3.OperationalError:  # a WITHOUT ROWID table
                lo = hi = None
            self._spans[table] = None if lo is None or hi is None or hi < lo else (lo, hi)
        return self._spans[table]

    def page_plan(self, q: _Query) -> pages.Planned | None:
        """The page reader's plan for the query (``pages.py``: its parts, then the frame), or None where it is
        not used for it (then ``chunks``); why not is kept in ``declined``."""
        if not self.use_pages:
            return None
        why: str | None = None
        if q.keep is not None and q.keep[0] not in {c for _, c, _ in q.columns}:
            why = f"the filter's column {q.keep[0]!r} is not read"
        elif any(_cast(q.declared, c, i) for _, c, i in q.columns):
            why = "an integer read from a column not declared INTEGER (SQLite's CAST)"
        else:
            where = pages.layout(self.path, q.table)
            if isinstance(where, str):
                why = where
            else:
                span = self.span(q.table)
                columns = [
                    (a, c if c in q.declared else None, "int" if i else "text") for a, c, i in q.columns
                ]
                planned = pages.plan(self.path, where, columns, span[1] - span[0] + 1 if span else 0)
                if not isinstance(planned, str):
                    return planned
                why = planned
        self.declined[q.table] = why
        return None

    def chunks(self, q: _Query) -> list[str]:
        """The query as SQL statements over consecutive rowid ranges (in table order), to read in parallel."""
        where = [q.where] if q.where else []
        span = self.span(q.table)
        bounds = [None] if span is None else list(range(span[0], span[1] + 1, _CHUNK_ROWS))
        out = []
        for b in bounds:
            cond = where if b is None else [*where, f"rowid >= {b}", f"rowid < {b + _CHUNK_ROWS}"]
            sql = f'SELECT {q.select} FROM "{q.table}"'
            out.append(sql + (" WHERE " + " AND ".join(cond) if cond else ""))
        return out

    def query(self, sql: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        """Run ``sql`` (its result columns named and ordered as ``schema``) into a frame of that schema."""
        try:
            return _query_sqlite3(self.uri, sql, schema, self.lost)
        except sqlite3.OperationalError as e:
            if "decode" not in str(e):
                raise
            note = "some strings are not UTF-8; the bad bytes are shown as U+FFFD"
            if note not in self.notes:
                self.notes.append(note)
            return _query_sqlite3(self.uri, sql, schema, self.lost, replace_bad_utf8=True)
