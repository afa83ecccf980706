"""Seeded damage for tests/corpus/test_fuzz.py: real profiler files (../shared/data) damaged the ways files get damaged.

Each ``Mutant`` is one damaged copy of one real file, written by ``make(dst)`` from a seed, so a failing case is
reproduced by its name alone (``probe.sqlite~sql-null-17``). Damage by format:

- any file: bit flips past the first bytes (so the kind is still recognised), truncation, a chunk of the file
  duplicated in place (what a bad copy or a resumed download leaves);
- nsys SQLite exports: SQL-level damage through ``sqlite3``: a table dropped, a column set to NULL, to text, to
  a blob that is not UTF-8, to a real or to an out-of-range integer, rows deleted, StringIds values made
  invalid UTF-8; and bit flips inside the b-tree pages (``database disk image is malformed``);
- Kineto traces: the JSON inside the gzip damaged (flips, truncation, duplicated chunk, values replaced by ones
  of the wrong type) and re-compressed, so the damage reaches the parser rather than gzip's checksum;
- ncu CSV exports: cells replaced with text, blanks and numbers that overflow, rows cut and duplicated.

``campaign(shared)`` returns a bounded, seeded list of mutants over every source present; ``by_name`` rebuilds one.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"

# (format, path under ../shared/data, mutants in the test suite's campaign): small real files of each format
# tracekit reads; the big Kineto trace (75k events, 1.1 MB gzip) gets fewer cases, it costs ~0.5 s each
SOURCES: list[tuple[str, str, int]] = [
    ("nsys", "h200-probe/probe.sqlite", 28),
    ("nsys", "thirdparty/nsys-ai/healthy_1pct.sqlite", 28),
    ("nsys", "thirdparty/nsys-ai/mock.sqlite", 28),
    ("kineto", "h200-probe/torch_trace.json.gz", 16),
    ("kineto", "thirdparty/hta/critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz", 8),
    ("kineto", "thirdparty/hta/triton_example__triton_example.json.gz", 4),
    ("kineto", "thirdparty/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz", 8),
    (
        "kineto",
        "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
        4,
    ),
    ("ncu", "h200-probe/probe.ncu-rep", 12),
    ("ncu-csv", "h200-probe/ncu_raw.csv", 12),
    ("ncu-csv", "thirdparty/llm-perf-opt-rtx50/kernel_0003_ncu.details.csv", 6),
    ("ncu-csv", "thirdparty/llm-perf-opt-rtx50/kernel_0005_ncu.metrics.csv", 6),
]


@dataclass(frozen=True)
class Mutant:
    """One damaged copy of ``source``: ``name`` says which damage and seed; ``make(dst)`` writes it."""

    name: str
    fmt: str
    source: Path
    make: Callable[[Path], Path]


# --- byte-level damage (any format) ------------------------------------------------------------------------------
def flip(data: bytes, rng: random.Random, n: int, skip: int = 100) -> bytes:
    """``n`` single-bit flips at or past byte ``skip``."""
    b = bytearray(data)
    lo = min(skip, len(b) - 1)
    for _ in range(n):
        i = rng.randrange(lo, len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncate(data: bytes, rng: random.Random, skip: int = 100) -> bytes:
    return data[: rng.randrange(min(skip, len(data) - 1), len(data))]


def duplicate(data: bytes, rng: random.Random, skip: int = 100) -> bytes:
    """A chunk of the file repeated right after itself."""
    lo = min(skip, len(data) - 1)
    start = rng.randrange(lo, len(data))
    size = rng.randrange(1, max(2, min(len(data) - start, 1 << rng.randrange(4, 16))))
    return data[: start + size] + data[start : start + size] + data[start + size :]


def zero(data: bytes, rng: random.Random, skip: int = 100) -> bytes:
    """A block of the file overwritten with zero bytes (what a crash or a sparse copy leaves)."""
    lo = min(skip, len(data) - 1)
    start = rng.randrange(lo, len(data))
    size = rng.randrange(1, max(2, min(len(data) - start, 1 << rng.randrange(4, 14))))
    return data[:start] + bytes(size) + data[start + size :]


BYTE_DAMAGE: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip1": lambda d, r: flip(d, r, 1),
    "flip16": lambda d, r: flip(d, r, 16),
    "cut": truncate,
    "dup": duplicate,
}
EXTRA_BYTE_DAMAGE: dict[str, Callable[[bytes, random.Random], bytes]] = {"zero": zero}
"""Damage the native readers' sanitizer run (.ci/fuzz_native.py) adds to :data:`BYTE_DAMAGE`."""
_ANY_BYTE_DAMAGE = {**BYTE_DAMAGE, **EXTRA_BYTE_DAMAGE}


# --- SQL-level damage (nsys exports) -----------------------------------------------------------------------------
def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


# the tables the reader uses, chosen more often than the rest
_KEY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "StringIds",
    "ENUM_NSYS_EVENT_TYPE",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
)
_WRONG_VALUES = {
    "null": "NULL",
    "text": "'not a number'",
    "blob": "x'fffe00ff'",
    "real": "1.5e300",
    "huge": "9223372036854775807",
    "negative": "-1",
}


def _pick_table(con: sqlite3.Connection, rng: random.Random) -> str:
    tables = _tables(con)
    key = [t for t in _KEY_TABLES if t in tables]
    return rng.choice(key) if key and rng.random() < 0.75 else rng.choice(tables)


def sql_damage(kind: str, rng: random.Random) -> Callable[[sqlite3.Connection], None]:
    """One SQL-level damage; the rows it touches are chosen by rowid from ``rng`` (SQLite's random() is not
    seeded)."""

    def damage(con: sqlite3.Connection) -> None:
        table = _pick_table(con, rng)
        every = rng.randrange(2, 5)
        some = f"rowid % {every} = {rng.randrange(every)}"
        if kind == "drop":
            con.execute(f'DROP TABLE "{table}"')
            return
        if kind == "delete":
            con.execute(f'DELETE FROM "{table}" WHERE {some}')
            return
        if kind == "badutf8":
            if "StringIds" in _tables(con):
                con.execute(
                    "UPDATE StringIds SET value = CAST(x'66ff00fe' || CAST(value AS BLOB) AS TEXT) "
                    f"WHERE {some}"
                )
            return
        cols = _columns(con, table)
        where = "" if rng.random() < 0.5 else f" WHERE {some}"
        for col in rng.sample(cols, len(cols)):
            try:  # an INTEGER PRIMARY KEY takes only integers: try another column
                con.execute(f'UPDATE "{table}" SET "{col}" = {_WRONG_VALUES[kind]}{where}')
                return
            except sqlite3.IntegrityError:
                continue

    return damage


SQL_DAMAGE = ["drop", "delete", "badutf8", *_WRONG_VALUES]


def _sqlite_mutant(src: Path, dst: Path, kind: str, seed: int) -> Path:
    shutil.copyfile(src, dst)
    rng = random.Random(seed)
    con = sqlite3.connect(dst)
    try:
        for _ in range(20):  # until a row changes: the rows picked may hold nothing to change
            sql_damage(kind, rng)(con)
            if kind == "drop" or con.total_changes:
                break
        con.commit()
    finally:
        con.close()
    return dst


def _page_flips(src: Path, dst: Path, seed: int) -> Path:
    """Bit flips inside the b-tree pages (past the first page, which holds the schema)."""
    data = src.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    page = 65536 if page == 1 else page
    dst.write_bytes(flip(data, random.Random(seed), 8, skip=min(page, len(data) - 1)))
    return dst


# --- JSON-level damage (Kineto) -------------------------------------------------------------------------------
_WRONG_JSON: list[object] = [None, "x", -1, 2**70, 1.5, [], {}, [1, "a"], True, "NaN"]


def _paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    out: list[tuple] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((*prefix, i))
            out.extend(_paths(v, (*prefix, i)))
    return out


def json_values(doc: object, rng: random.Random, n: int) -> object:
    """``n`` values anywhere in ``doc`` replaced by ones of another type (null, text, huge, list ...)."""
    paths = _paths(doc)
    for _ in range(n):
        if not paths:
            break
        path = rng.choice(paths)
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]  # type: ignore[index]
            node[path[-1]] = rng.choice(_WRONG_JSON)  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            continue
        paths = _paths(doc)
    return doc


def _kineto_text(src: Path) -> bytes:
    data = src.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _kineto_mutant(src: Path, dst: Path, kind: str, seed: int) -> Path:
    rng = random.Random(seed)
    text = _kineto_text(src)
    if kind == "values":
        damaged = json.dumps(json_values(json.loads(text), rng, rng.randrange(1, 6))).encode()
    else:
        damaged = _ANY_BYTE_DAMAGE[kind](text, rng)
    dst.write_bytes(gzip.compress(damaged, 1, mtime=0))  # no time stamp: the same name gives the same bytes
    return dst


# --- CSV-level damage (ncu CSV) ---------------------------------------------------------------------------------
_WRONG_CELLS = ["", "n/a", "1e999", "-", "9" * 40, '"', "1,2,3", "\x00", "NaN", "12 Zbyte"]


def _csv_mutant(src: Path, dst: Path, kind: str, seed: int) -> Path:
    rng = random.Random(seed)
    lines = src.read_bytes().split(b"\n")
    if kind == "cells":
        for _ in range(rng.randrange(1, 12)):
            i = rng.randrange(len(lines))
            cells = lines[i].split(b'","')
            j = rng.randrange(len(cells))
            cells[j] = rng.choice(_WRONG_CELLS).encode()
            lines[i] = b'","'.join(cells)
    elif kind == "rows":
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            lines.insert(i, lines[rng.randrange(len(lines))])
        else:
            del lines[i]
    dst.write_bytes(b"\n".join(lines))
    return dst


# --- the campaign -------------------------------------------------------------------------------------------
def _byte_mutant(src: Path, dst: Path, kind: str, seed: int) -> Path:
    dst.write_bytes(_ANY_BYTE_DAMAGE[kind](src.read_bytes(), random.Random(seed)))
    return dst


def kinds(fmt: str) -> list[str]:
    """The damage applied to files of ``fmt``."""
    if fmt == "nsys":
        return [*BYTE_DAMAGE, "pages", *SQL_DAMAGE]
    if fmt == "kineto":
        return ["gz-flip16", "gz-cut", *BYTE_DAMAGE, "values", "values"]
    if fmt == "ncu-csv":
        return [*BYTE_DAMAGE, "cells", "rows"]
    return list(BYTE_DAMAGE)


def mutant(fmt: str, src: Path, kind: str, seed: int) -> Mutant:
    """The mutant ``kind`` / ``seed`` of ``src``."""

    def make(dst: Path) -> Path:
        if kind.startswith("gz-"):
            return _byte_mutant(src, dst, kind[3:], seed)
        if fmt == "nsys" and kind in SQL_DAMAGE:
            return _sqlite_mutant(src, dst, kind, seed)
        if fmt == "nsys" and kind == "pages":
            return _page_flips(src, dst, seed)
        if fmt == "kineto":
            return _kineto_mutant(src, dst, kind, seed)
        if fmt == "ncu-csv" and kind in ("cells", "rows"):
            return _csv_mutant(src, dst, kind, seed)
        return _byte_mutant(src, dst, kind, seed)

    return Mutant(f"{src.name}~{kind}-{seed}", fmt, src, make)


def campaign(shared: Path, scale: float = 1.0, seed: int = 18) -> list[Mutant]:
    """The seeded mutants of every source present under ``shared``: ``scale`` times its count in SOURCES, the
    damage kinds of its format taken in turn so each appears, the seeds drawn from ``seed``."""
    rng = random.Random(seed)
    out: list[Mutant] = []
    for fmt, rel, count in SOURCES:
        src = shared / rel
        if not src.is_file():
            continue
        ks = kinds(fmt)
        for i in range(round(count * scale)):
            out.append(mutant(fmt, src, ks[i % len(ks)], rng.randrange(1 << 30)))
    return out


def by_name(shared: Path, name: str) -> Mutant:
    """The mutant a campaign named ``name`` (``probe.sqlite~pages-363104290``), to reproduce one case."""
    file, _, rest = name.partition("~")
    kind, _, seed = rest.rpartition("-")
    for fmt, rel, _count in SOURCES:
        if rel.endswith("/" + file):
            return mutant(fmt, shared / rel, kind, int(seed))
    raise KeyError(name)
