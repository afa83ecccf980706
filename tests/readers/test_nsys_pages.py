"""The page reader (analyzers/readers/nsys/_pages.c): a table read from the file's pages must equal the same
query through SQLite, on every real export (shared data and the samples' captures) and on made-up databases
that reach the b-tree's corners (small pages, deep trees, overflow chains, deleted rows, columns added later,
the rowid's alias); whatever it is not sure of it declines with a reason, and it never crashes on damage."""

from __future__ import annotations

import contextlib
import lzma
import random
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tracekit.analyzers.readers.nsys import pages
from tracekit.analyzers.readers.nsys.db import _Db
from tracekit.analyzers.readers.nsys.memops import MEMCPY_TABLE, MEMSET_TABLE, memop_query
from tracekit.analyzers.readers.nsys.ranges import event_ids, nvtx_query
from tracekit.analyzers.readers.nsys.reader import (
    KERNEL_TABLE,
    NVTX_TABLE,
    STRINGS_TABLE,
    _kernel_query,
    _Query,
    _runtime_query,
    _table_names,
    read_nsys_sqlite,
)
from tracekit.errors import UnreadableFileError

pytestmark = pytest.mark.skipif(not pages.AVAILABLE, reason="the page reader is not built (no C compiler)")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _queries(db: _Db) -> list[_Query]:
    """The queries the nsys reader makes of an export (reader.py's makers)."""
    out: list[_Query] = []
    if STRINGS_TABLE in db.tables:
        out.append(
            _Query(
                STRINGS_TABLE,
                db.columns(STRINGS_TABLE),
                (("id", "id", True), ("value", "value", False)),
                {"id": pl.Int64(), "value": pl.String()},
            )
        )
    if KERNEL_TABLE in db.tables:
        out.append(_kernel_query(db))
        if (q := _runtime_query(db)) is not None:
            out.append(q)
    if NVTX_TABLE in db.tables:
        out.append(nvtx_query(db, event_ids(db)))
    out += [memop_query(db, t) for t in (MEMCPY_TABLE, MEMSET_TABLE) if t in db.tables]
    return out


def _through_sqlite(db: _Db, q: _Query) -> pl.DataFrame:
    return pl.concat([db.query(sql, q.schema) for sql in db.chunks(q)])


def _from_pages(db: _Db, q: _Query, parts: int | None = None) -> pl.DataFrame | str:
    where = pages.layout(db.path, q.table)
    if isinstance(where, str):
        return where
    columns = [(a, c if c in q.declared else None, "int" if i else "text") for a, c, i in q.columns]
    span = db.span(q.table)
    planned = pages.plan(db.path, where, columns, span[1] - span[0] + 1 if span else 0, parts)
    if isinstance(planned, str):
        return planned
    got = [p.read() for p in planned.parts]
    why = next((g for g in got if g is not None), None)
    return why if why is not None else q.filtered(planned.frame())


def _exports(shared_data: Path, tmp: Path) -> list[Path]:
    found = sorted(shared_data.rglob("*.sqlite"))
    for xz in sorted(SAMPLES.glob("*/raw/*.sqlite.xz")):
        out = tmp / f"{xz.parts[-3]}.sqlite"
        out.write_bytes(lzma.decompress(xz.read_bytes()))
        found.append(out)
    return found


def test_every_export_reads_from_its_pages_as_through_sqlite(shared_data: Path, tmp_path: Path) -> None:
    """Each query of every real export (7 shared, 27 of the samples' captures), whole and in 1 to 3 parts:
    the same frame as SQLite gives, and no table declined."""
    exports = _exports(shared_data, tmp_path)
    assert len(exports) >= 30
    read = 0
    for path in exports:
        db = _Db(path, _table_names(path), engine="sqlite3")
        for q in _queries(db):
            slow = _through_sqlite(db, q)
            for parts in (None, 1, 2, 3):
                fast = _from_pages(db, q, parts)
                assert not isinstance(fast, str), f"{path.name} {q.table}: declined ({fast})"
                assert_frame_equal(fast, slow, check_dtypes=True)
            read += slow.height
    assert read > 100_000


def test_the_reader_uses_pages_by_default_and_not_for_sqlite_engines(shared_data: Path) -> None:
    path = shared_data / "thirdparty/nsys-ai/h100_2gpu_1s.sqlite"
    q = _kernel_query(_Db(path, _table_names(path)))
    assert _Db(path, _table_names(path)).page_plan(q) is not None
    assert _Db(path, _table_names(path), engine="pages").page_plan(q) is not None
    assert _Db(path, _table_names(path), engine="sqlite3").page_plan(q) is None
    with pytest.raises(ValueError, match="engine must be one of"):
        _Db(path, _table_names(path), engine="adbc")  # the ADBC path was removed


def test_parts_read_in_any_order_make_one_chunk_per_column(tmp_path: Path) -> None:
    """A table's parts each write their rows into the table's buffers at their offset: read in any order, or
    at once, the frame is SQLite's, one chunk per column (polars copies columns of several chunks into one at
    the first join), with the NULLs of every part where they belong (parts start at rows that are not a
    multiple of 8)."""
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 512")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, s TEXT)")
    rng = random.Random(7)
    rows = [
        (
            i,
            None if rng.random() < 0.3 else rng.randint(-(2**40), 2**40),
            None if rng.random() < 0.2 else "x" * rng.randint(0, 30) + str(i),
        )
        for i in range(1, 3001)
    ]
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    where = pages.layout(path, "t")
    assert not isinstance(where, str)
    want = pl.DataFrame(
        {
            "id": [r[0] for r in rows],
            "a": [r[1] for r in rows],
            "s": [r[2] for r in rows],
            "none": [None] * 3000,
        },
        schema={"id": pl.Int64, "a": pl.Int64, "s": pl.String, "none": pl.String},
    )
    cols = [("id", "id", "int"), ("a", "a", "int"), ("s", "s", "text"), ("none", None, "text")]
    for parts, order in ((3, [2, 0, 1]), (4, [3, 2, 1, 0]), (1, [0])):
        planned = pages.plan(path, where, cols, 3000, parts)
        assert not isinstance(planned, str)
        assert [p.offset for p in planned.parts] == [
            sum(p.rows for p in planned.parts[:i]) for i in range(parts)
        ]
        assert sum(p.rows for p in planned.parts) == 3000
        if parts > 1:
            # (a part may hold no rows: the root has few children)
            assert sum(p.rows > 0 for p in planned.parts) >= 2 and any(p.offset % 8 for p in planned.parts)
        assert all(planned.parts[i].read() is None for i in order)
        got = planned.frame()
        assert_frame_equal(got, want)
        assert got.n_chunks("all") == [1, 1, 1, 1]


# --- made-up databases ------------------------------------------------------------------------------------------
_INTS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-130, 130),
    st.sampled_from([0, 1, -1, 127, 128, -128, 32767, 32768, 2**23, 2**31, -(2**31) - 1, 2**47, 2**48]),
)
_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
    st.text(st.characters(exclude_categories=("Cs",)), min_size=500, max_size=9000),  # overflow pages
)


@st.composite
def _tables(draw: st.DrawFn) -> dict:
    n_int = draw(st.integers(1, 4))
    n_text = draw(st.integers(0, 2))
    rows = draw(st.integers(0, 400))
    return {
        "page_size": draw(st.sampled_from([512, 1024, 4096, 65536])),
        "alias": draw(st.booleans()),
        "ints": n_int,
        "texts": n_text,
        "rows": [
            (
                [draw(st.one_of(st.none(), _INTS)) for _ in range(n_int)],
                [draw(st.one_of(st.none(), _TEXT)) for _ in range(n_text)],
            )
            for _ in range(draw(st.integers(0, 12)))
        ],
        "repeat": rows,  # rows are the drawn ones cycled to this many, with fresh ints: deep trees cheaply
        "seed": draw(st.integers(0, 2**32)),
        "delete": draw(st.floats(0, 0.6)),
        "added": draw(st.sampled_from([None, "NULL", "7"])),
    }


def _make(path: Path, spec: dict) -> None:
    rng = random.Random(spec["seed"])
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {spec['page_size']}")
    cols = (["id INTEGER PRIMARY KEY"] if spec["alias"] else []) + [
        *(f"i{j} INTEGER" for j in range(spec["ints"])),
        *(f"t{j} TEXT" for j in range(spec["texts"])),
    ]
    con.execute(f"CREATE TABLE t ({', '.join(cols)})")
    names = [c.split()[0] for c in cols if not c.startswith("id ")]
    marks = ", ".join("?" for _ in names)
    drawn = spec["rows"]
    if drawn:
        for k in range(max(len(drawn), spec["repeat"])):
            ints, texts = drawn[k % len(drawn)]
            if k >= len(drawn):
                ints = [None if v is None else rng.randint(-(2**40), 2**40) for v in ints]
            con.execute(f"INSERT INTO t ({', '.join(names)}) VALUES ({marks})", [*ints, *texts])
    if spec["delete"]:
        con.execute("DELETE FROM t WHERE abs(random()) % 1000 < ?", (int(spec["delete"] * 1000),))
    if spec["added"] is not None:
        con.execute(f"ALTER TABLE t ADD COLUMN late INTEGER DEFAULT {spec['added']}")
        con.execute("INSERT INTO t (i0, late) VALUES (5, 9)")
    con.commit()
    con.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=_tables(), parts=st.integers(1, 4))
def test_made_up_tables_read_as_sqlite_reads_them(
    tmp_path_factory: pytest.TempPathFactory, spec, parts
) -> None:
    path = tmp_path_factory.mktemp("db") / "t.sqlite"
    _make(path, spec)
    db = _Db(path, {"t"}, engine="sqlite3")
    declared = db.columns("t")
    names = list(declared)
    columns = (*((f"c_{n}", n, "INT" in declared[n]) for n in names), ("absent", None, True))
    q = _Query("t", declared, columns, {a: pl.Int64() if i else pl.String() for a, _, i in columns})
    slow = _through_sqlite(db, q)
    fast = _from_pages(db, q, parts)
    if spec["added"] == "7" and slow.height > 1:
        assert fast == "a record shorter than its table, where the column has a default"
        return
    assert not isinstance(fast, str), fast
    assert_frame_equal(fast, slow)


# --- what it declines -------------------------------------------------------------------------------------------
def _one_table(path: Path, create: str, *rows: str, wal: bool = False) -> _Db:
    con = sqlite3.connect(path)
    if wal:
        con.execute("PRAGMA journal_mode = WAL")
    con.execute(create)
    for r in rows:
        con.execute(f"INSERT INTO t VALUES ({r})")
    con.commit()
    con.close()
    return _Db(path, {"t"}, engine="sqlite3")


@pytest.mark.parametrize(
    ("create", "row", "text", "why"),
    [
        ("CREATE TABLE t (a INTEGER)", "1.5", False, "a real, text or blob in an integer column"),
        ("CREATE TABLE t (a INTEGER)", "'abc'", False, "a real, text or blob in an integer column"),
        ("CREATE TABLE t (a INTEGER)", "x'00'", False, "a real, text or blob in an integer column"),
        ("CREATE TABLE t (a TEXT)", "x'00'", True, "a number or blob in a text column"),
        ("CREATE TABLE t (a)", "3", True, "a number or blob in a text column"),
        ("CREATE TABLE t (a TEXT)", "CAST(x'ff41' AS TEXT)", True, "text that is not UTF-8"),
        ("CREATE TABLE t (a TEXT)", "CAST(x'eda080' AS TEXT)", True, "text that is not UTF-8"),
        ("CREATE TABLE t (a INTEGER PRIMARY KEY, b) WITHOUT ROWID", "1, 2", False, "a WITHOUT ROWID table"),
        ("CREATE TABLE t (a INTEGER PRIMARY KEY DESC)", "1", False, "INTEGER PRIMARY KEY DESC"),
        ("CREATE TABLE t (a INTEGER, b INTEGER AS (a + 1))", "1", False, "generated or hidden columns"),
    ],
)
def test_what_it_is_not_sure_of_is_declined(
    tmp_path: Path, create: str, row: str, text: bool, why: str
) -> None:
    db = _one_table(tmp_path / "t.sqlite", create, row)
    q = _Query("t", db.columns("t"), (("a", "a", not text),), {"a": pl.String() if text else pl.Int64()})
    got = _from_pages(db, q)
    assert isinstance(got, str) and why in got


def test_a_wal_database_is_left_to_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    db = _one_table(path, "CREATE TABLE t (a INTEGER)", "1", "2", wal=True)
    q = _Query("t", db.columns("t"), (("a", "a", True),), {"a": pl.Int64()})
    assert "WAL" in str(_from_pages(db, q))
    other = _one_table(tmp_path / "u.sqlite", "CREATE TABLE t (a INTEGER)", "1")
    q = _Query("t", other.columns("t"), q.columns, q.schema)
    (tmp_path / "u.sqlite-journal").write_bytes(b"x")  # as a writer that crashed leaves it
    assert "journal" in str(_from_pages(other, q))


def test_a_column_sqlite_would_cast_is_left_to_sqlite(tmp_path: Path) -> None:
    _one_table(tmp_path / "t.sqlite", "CREATE TABLE t (a TEXT)", "'12'")
    db = _Db(tmp_path / "t.sqlite", {"t"}, engine="pages")
    q = _Query("t", db.columns("t"), (("a", "a", True),), {"a": pl.Int64()})
    assert db.page_plan(q) is None
    assert "CAST" in db.declined["t"]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), flips=st.integers(1, 40))
def test_damage_is_declined_or_read_as_sqlite_reads_it(
    shared_data: Path, tmp_path_factory, seed, flips
) -> None:
    """Random bytes of the probe export's pages overwritten: the page reader must not crash, and where it
    reads rows and SQLite reads the table too, they are the same rows."""
    path = tmp_path_factory.mktemp("damaged") / "probe.sqlite"
    data = bytearray((shared_data / "h200-probe/probe.sqlite").read_bytes())
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(100, len(data))] = rng.randrange(256)
    path.write_bytes(bytes(data))
    with contextlib.suppress(UnreadableFileError):  # frames (maybe partial) or the one clear error, no other
        read_nsys_sqlite(path)
    try:
        db = _Db(path, _table_names(path), engine="sqlite3")
        queries = _queries(db)
    except (sqlite3.Error, UnicodeDecodeError):
        return  # the schema itself is damaged: the reader refuses the file before any table is read
    for q in queries:
        try:
            fast = _from_pages(db, q)
        except (sqlite3.Error, UnicodeDecodeError):
            continue  # SQLite failed on the schema or the rowid span, before the pages were read
        try:
            slow = _through_sqlite(db, q)
        except (sqlite3.Error, UnicodeDecodeError, pl.exceptions.PolarsError):
            continue
        if not isinstance(fast, str):
            assert_frame_equal(fast, slow)
