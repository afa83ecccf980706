"""The bad-input corpus of tests/corpus/test_robustness.py and benchmarks/robustness_table.py, built from real files.

Every case is made from a real profile (the H200 probe under ../shared/data, or the committed sample runs'
xz-compressed raw files) by truncating, flipping bits, editing tables or replacing the content behind the name.
``build_corpus`` writes the files; ``build_bad_runs`` damages copies of a real run directory; ``cli`` runs
``python -m tracekit`` as a user would, with a time limit.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "samples"
TIME_LIMIT_S = 30.0
MEMORY_LIMIT_MB = 1024.0
"""Peak resident memory any one CLI call on the corpus may reach (the files are small; a bomb must not grow it)."""

HOSTILE_NAMES = [
    "[bold red]x[/]",
    "[link=https://evil.example]click[/link]_kernel",
    "\x1b[31mred\x1b[0m_kernel\x07",
    "void very_long<" + "T" * 10_000 + ">(int)",
]
"""Kernel names no view may interpret: Rich markup, a link, ANSI escapes and a bell, 10,000 characters."""
INVALID_UTF8 = b"bad\xff\xfeutf8_kernel"


@dataclass(frozen=True)
class Sources:
    """The real files the corpus is made from (None where this checkout lacks them)."""

    ncu: Path | None
    sqlite: Path | None
    kineto: Path | None
    csv: Path | None
    nsys_rep: Path | None
    old_ncu: Path | None
    other_sqlite: Path | None
    old_kineto: Path | None


def _sample_raw(name: str, tmp: Path) -> Path | None:
    """A committed sample's raw file, decompressed into ``tmp``."""
    for run in sorted(SAMPLES.glob("*/raw")):
        packed = run / f"{name}.xz"
        if packed.is_file():
            out = tmp / name
            out.write_bytes(lzma.decompress(packed.read_bytes()))
            return out
    return None


def find_sources(shared: Path | None, tmp: Path) -> Sources:
    """The probe's files from ../shared/data, else from the committed samples."""

    def pick(rel: str) -> Path | None:
        p = shared / rel if shared is not None else None
        return p if p is not None and p.is_file() else None

    tmp.mkdir(parents=True, exist_ok=True)
    return Sources(
        ncu=pick("h200-probe/probe.ncu-rep") or _sample_raw("probe.ncu-rep", tmp),
        sqlite=pick("h200-probe/probe.sqlite") or _sample_raw("probe.sqlite", tmp),
        kineto=pick("h200-probe/torch_trace.json.gz"),
        csv=pick("h200-probe/ncu_raw.csv"),
        nsys_rep=pick("h200-probe/probe.nsys-rep"),
        old_ncu=pick("thirdparty/yzwang2000-cudacode/profile.ncu-rep"),
        other_sqlite=pick("thirdparty/nsys-ai/mock.sqlite"),
        old_kineto=pick(
            "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
        ),
    )


# --- damage -----------------------------------------------------------------------------------------------------
def _flip(data: bytes, n: int = 64, start: float = 0.1, seed: int = 7) -> bytes:
    """``n`` single-bit flips, none in the first ``start`` of the file (so the kind is still recognised)."""
    b = bytearray(data)
    rng = random.Random(seed)
    for _ in range(n):
        i = rng.randrange(int(len(b) * start), len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _sql(src: Path, dst: Path, *statements: str) -> Path:
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        for s in statements:
            con.execute(s)
        con.commit()
    finally:
        con.close()
    return dst


def _old_schema_sqlite(src: Path, dst: Path) -> Path:
    """An export of an old nsys: kernel names as text in a ``name`` column, no globalPid / shortName / grid ids."""
    return _sql(
        src,
        dst,
        "CREATE TABLE k_old AS SELECT k.start, k.end, k.deviceId, k.contextId, k.streamId, k.correlationId, "
        "s.value AS name, k.registersPerThread, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, "
        "k.staticSharedMemory, k.dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName",
        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
        "ALTER TABLE k_old RENAME TO CUPTI_ACTIVITY_KIND_KERNEL",
    )


def hostile_sqlite(src: Path, dst: Path) -> Path:
    """The probe export with its kernels renamed (in StringIds) to the hostile names and invalid UTF-8."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        ids = [r[0] for r in con.execute("SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL")]
        ids += [r[0] for r in con.execute("SELECT DISTINCT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL")]
        for i, sid in enumerate(ids):
            if i % 5 == 4:
                con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (INVALID_UTF8, sid))
            else:
                con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (HOSTILE_NAMES[i % 5], sid))
        con.commit()
    finally:
        con.close()
    return dst


def _kernel_event(i: int, name: str) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": 1000.0 + 10 * i,
        "dur": 5.0,
        "args": {"device": 0, "stream": 7, "correlation": i, "grid": [132, 1, 1], "block": [384, 1, 1]},
    }


def hostile_json(dst: Path) -> Path:
    """A Kineto trace whose kernel names are hostile, one holding bytes that are not UTF-8."""
    events = [_kernel_event(i, HOSTILE_NAMES[i % 4]) for i in range(8)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": [*events, _kernel_event(8, "@@INVALID@@")]})
    dst.write_bytes(text.encode().replace(b"@@INVALID@@", INVALID_UTF8))
    return dst


def hostile_jsonl(dst: Path) -> Path:
    """tracekit's own failure records whose backend and message hold markup, escapes and a long name."""
    rows = []
    for i, name in enumerate(HOSTILE_NAMES):
        rows.append(
            {
                "backend": name[:200],
                "op": "mm",
                "m": 16 << i,
                "n": 2048,
                "k": 6144,
                "kind": "unsupported",
                "error_type": "RuntimeError",
                "message": f"{name} | not | a | table",
                "traceback": f"Traceback (most recent call last):\n  {name}\n",
                "device_name": "NVIDIA H200",
                "compute_capability": "9.0",
                "versions": {"torch": "2.11.0"},
                "time_unix": 1_800_000_000.0,
            }
        )
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def _gzip_bomb(dst: Path, mib: int = 300) -> Path:
    """A Kineto trace's first bytes, then ``mib`` MiB of whitespace (valid JSON once closed), gzip'd ~1000x."""
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with dst.open("wb") as f:
        f.write(c.compress(b'{"schemaVersion": 1, "traceEvents": ['))
        block = b" " * (1 << 20)
        for _ in range(mib):
            f.write(c.compress(block))
        f.write(c.compress(b"]}") + c.flush())
    return dst


def _nan_json(dst: Path) -> Path:
    events = [_kernel_event(i, f"k{i}") for i in range(6)]
    events[1]["dur"] = "NaN@"
    events[2]["ts"] = "INF@"
    events[3]["args"]["correlation"] = 2**80
    del events[4]["ts"]
    del events[5]["name"]
    text = json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": None}]})
    text = text.replace('"NaN@"', "NaN").replace('"INF@"', "Infinity")
    dst.write_text(text)
    return dst


# --- the corpus -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One bad (or odd) input: ``name`` is its file name, ``kind`` what it is, ``make`` writes it."""

    name: str
    kind: str
    needs: str | None
    make: Callable[[Sources, Path], Path]


def _bytes(data: Callable[[Sources], bytes]) -> Callable[[Sources, Path], Path]:
    def make(src: Sources, dst: Path) -> Path:
        dst.write_bytes(data(src))
        return dst

    return make


def _copy(field: str) -> Callable[[Sources, Path], Path]:
    def make(src: Sources, dst: Path) -> Path:
        shutil.copyfile(getattr(src, field), dst)
        return dst

    return make


def _rb(p: Path | None) -> bytes:
    assert p is not None
    return p.read_bytes()


def _dir(src: Sources, dst: Path) -> Path:
    dst.mkdir()
    return dst


CASES: list[Case] = [
    Case(
        "truncated-half.ncu-rep",
        "ncu report cut at half",
        "ncu",
        _bytes(lambda s: _rb(s.ncu)[: len(_rb(s.ncu)) // 2]),
    ),
    Case(
        "truncated-header.ncu-rep",
        "ncu report cut after 100 bytes",
        "ncu",
        _bytes(lambda s: _rb(s.ncu)[:100]),
    ),
    Case("bitflip.ncu-rep", "ncu report, 64 bits flipped", "ncu", _bytes(lambda s: _flip(_rb(s.ncu)))),
    Case("empty.ncu-rep", "empty file", None, _bytes(lambda s: b"")),
    Case("text.ncu-rep", "text behind .ncu-rep", None, _bytes(lambda s: b"not a report\n" * 100)),
    Case("kineto-inside.ncu-rep", "Kineto trace behind .ncu-rep", "kineto", _bytes(lambda s: _rb(s.kineto))),
    Case(
        "truncated.ncu-rep.xz",
        "xz-compressed ncu report cut at half",
        "ncu",
        _bytes(lambda s: lzma.compress(_rb(s.ncu))[: len(lzma.compress(_rb(s.ncu))) // 2]),
    ),
    Case("old-tool.ncu-rep", "ncu report from another ncu version (real)", "old_ncu", _copy("old_ncu")),
    Case(
        "truncated.sqlite",
        "nsys export cut at a third",
        "sqlite",
        _bytes(lambda s: _rb(s.sqlite)[: len(_rb(s.sqlite)) // 3]),
    ),
    Case("bitflip.sqlite", "nsys export, 64 bits flipped", "sqlite", _bytes(lambda s: _flip(_rb(s.sqlite)))),
    Case(
        "no-kernel-table.sqlite",
        "nsys export without a kernel table",
        "sqlite",
        lambda s, d: _sql(s.sqlite, d, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL"),
    ),
    Case(
        "old-schema.sqlite",
        "nsys export in an old schema (names inline)",
        "sqlite",
        lambda s, d: _old_schema_sqlite(s.sqlite, d),
    ),
    Case(
        "not-nsys.sqlite",
        "SQLite database that is not an nsys export",
        None,
        lambda s, d: _sql(Path(os.devnull), d, "CREATE TABLE t (x INTEGER)"),
    ),
    Case(
        "pdf.sqlite",
        "PDF bytes behind .sqlite",
        None,
        _bytes(lambda s: b"%PDF-1.4\n" + bytes(range(256)) * 8),
    ),
    Case(
        "other-exporter.sqlite",
        "nsys export from another project (real)",
        "other_sqlite",
        _copy("other_sqlite"),
    ),
    Case(
        "truncated.json.gz",
        "Kineto trace, gzip cut at 40%",
        "kineto",
        _bytes(lambda s: _rb(s.kineto)[: len(_rb(s.kineto)) * 2 // 5]),
    ),
    Case(
        "bitflip.json.gz",
        "Kineto trace, 64 bits flipped",
        "kineto",
        _bytes(lambda s: _flip(_rb(s.kineto), start=0.2)),
    ),
    Case("empty.json.gz", "gzip of nothing", None, _bytes(lambda s: gzip.compress(b""))),
    Case(
        "bomb.json.gz",
        "gzip bomb: a trace header then 300 MiB of spaces, in 0.3 MB",
        None,
        lambda s, d: _gzip_bomb(d),
    ),
    Case(
        "nan-huge-missing.json",
        "JSON with NaN, Infinity, 2**80, missing fields",
        None,
        lambda s, d: _nan_json(d),
    ),
    Case(
        "not-a-trace.json", "JSON object without traceEvents", None, _bytes(lambda s: b'{"hello": [1, 2, 3]}')
    ),
    Case("events-not-list.json", "traceEvents is a number", None, _bytes(lambda s: b'{"traceEvents": 5}')),
    Case("text.json.gz", "plain text behind .json.gz", None, _bytes(lambda s: b"hello, world\n" * 50)),
    Case(
        "old-kineto.json.gz",
        "Kineto trace from 2021 (real, Kernel category)",
        "old_kineto",
        _copy("old_kineto"),
    ),
    Case(
        "truncated.csv",
        "ncu CSV cut mid-row",
        "csv",
        _bytes(lambda s: _rb(s.csv)[: len(_rb(s.csv)) // 2 + 7]),
    ),
    Case("unrelated.csv", "a CSV that is not ncu's", None, _bytes(lambda s: b"a,b,c\n1,2,3\n")),
    Case(
        "bad-lines.jsonl",
        "tracekit JSONL with broken lines",
        None,
        lambda s, d: d.write_text(hostile_jsonl(d).read_text() + "{not json\n[1,2]\n") and d,
    ),
    Case("probe.nsys-rep", "nsys report (not its export)", "nsys_rep", _copy("nsys_rep")),
    Case("folder", "a folder", None, _dir),
    Case("missing.ncu-rep", "a path that does not exist", None, lambda s, d: d),
]
HOSTILE_CASES: list[Case] = [
    Case(
        "hostile.sqlite",
        "kernel names: markup, ANSI, invalid UTF-8, 10k chars (SQLite)",
        "sqlite",
        lambda s, d: hostile_sqlite(s.sqlite, d),
    ),
    Case(
        "hostile.json",
        "kernel names: markup, ANSI, invalid UTF-8, 10k chars (JSON)",
        None,
        lambda s, d: hostile_json(d),
    ),
    Case(
        "hostile-failures.jsonl",
        "failure records holding markup and pipes",
        None,
        lambda s, d: hostile_jsonl(d),
    ),
]


def build_corpus(src: Sources, out: Path, cases: list[Case] = CASES) -> dict[str, Path | None]:
    """Write every case under ``out``; a case whose source file is absent maps to None."""
    out.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path | None] = {}
    for case in cases:
        if case.needs is not None and getattr(src, case.needs) is None:
            built[case.name] = None
            continue
        built[case.name] = case.make(src, out / case.name)
    return built


# --- damaged run directories ------------------------------------------------------------------------------------
def _edit_manifest(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        m = json.loads((run / "run.json").read_text())
        result = edit(m)
        (run / "run.json").write_text(json.dumps(m if result is None else result))

    return damage


def _truncate(rel: str, keep: float = 0.5) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        p = run / rel
        p.write_bytes(p.read_bytes()[: int(p.stat().st_size * keep)])

    return damage


def _remove(*rels: str, keep_dirs: bool = False) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        for rel in rels:
            p = run / rel
            if keep_dirs:
                for f in p.iterdir():
                    f.unlink()
            else:
                shutil.rmtree(p)

    return damage


BAD_RUNS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "run-json-truncated": ("run.json cut at half", _truncate("run.json")),
    "run-json-not-json": (
        "run.json holds binary bytes",
        lambda r: (r / "run.json").write_bytes(b"\x00\xff\xfe"),
    ),
    "run-json-wrong-format": (
        "run.json of another tool",
        _edit_manifest(lambda m: {"format": "other", "v": 1}),
    ),
    "run-json-a-list": ("run.json is a JSON list", _edit_manifest(lambda m: [1, 2, 3])),
    "run-json-future-schema": ("schema_version 99", _edit_manifest(lambda m: m.update(schema_version=99))),
    "run-json-missing": ("no run.json", lambda r: (r / "run.json").unlink()),
    "frame-truncated": ("frames/kernels.parquet cut at half", _truncate("frames/kernels.parquet")),
    "frame-not-parquet": (
        "frames/gemms.parquet holds text",
        lambda r: (r / "frames/gemms.parquet").write_text("x"),
    ),
    "frames-stale-schema": (
        "frames of schema 0, raw present",
        _edit_manifest(lambda m: m["frames"].update(schema_version=0)),
    ),
    "frames-missing": ("frames/ deleted, raw present", _remove("frames")),
    "frames-and-raw-missing": ("frames/ and raw/ deleted", _remove("frames", "raw")),
    "frames-and-raw-emptied": ("frames/ and raw/ emptied", _remove("frames", "raw", keep_dirs=True)),
    "stale-frames-no-raw": (
        "frames of schema 0, raw/ emptied",
        lambda r: (
            _edit_manifest(lambda m: m["frames"].update(schema_version=0))(r),
            _remove("raw", keep_dirs=True)(r),
        ),
    ),
}


def build_bad_runs(good: Path, out: Path) -> dict[str, Path]:
    """A damaged copy of the run ``good`` per BAD_RUNS entry."""
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for name, (_, damage) in BAD_RUNS.items():
        target = out / name
        shutil.copytree(good, target)
        damage(target)
        runs[name] = target
    return runs


# --- the CLI ----------------------------------------------------------------------------------------------------
@dataclass
class Result:
    """What one ``python -m tracekit`` call did; ``max_rss_mb``: its peak resident memory (children included)."""

    args: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float | None = None

    def error_line(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""


# ``python -m tracekit ARGS`` that also writes its peak RSS (KiB; its own or a child's, e.g. the ncu reader's
# worker, whichever is larger) to $TRACEKIT_TEST_MAXRSS when it ends, however it ends. Its own peak is VmHWM of
# /proc/self/status: Linux's ru_maxrss of an exec'd process also counts the parent's resident set at fork, so a
# test process that had imported torch made every CLI call look over 1 GiB.
_MEASURED = (
    "import os, resource, runpy, sys\n"
    "sys.argv = ['tracekit', *sys.argv[1:]]\n"
    "def _own_kib():\n"
    "    try:\n"
    "        with open('/proc/self/status') as f:\n"
    "            for line in f:\n"
    "                if line.startswith('VmHWM:'):\n"
    "                    return int(line.split()[1])\n"
    "    except OSError:\n"
    "        pass\n"
    "    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "try:\n"
    "    runpy.run_module('tracekit', run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    kib = max(_own_kib(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "    with open(os.environ['TRACEKIT_TEST_MAXRSS'], 'w') as f:\n"
    "        f.write(str(kib))\n"
)


def cli(*args: str | Path, env: dict[str, str] | None = None, timeout: float = TIME_LIMIT_S) -> Result:
    """Run the CLI in a fresh process, as a user would; a run past ``timeout`` comes back as rc -9."""
    import tempfile

    argv = [sys.executable, "-c", _MEASURED, *map(str, args)]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tracekit-rss-") as tmp:
        rss_file = Path(tmp) / "maxrss"
        full_env = {**os.environ, **(env or {}), "COLUMNS": "100", "TRACEKIT_TEST_MAXRSS": str(rss_file)}
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout, env=full_env)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = -9, exc.stdout or b"", exc.stderr or b""
        try:
            max_rss_mb: float | None = int(rss_file.read_text()) / 1024
        except (OSError, ValueError):
            max_rss_mb = None
    return Result(
        [str(a) for a in args],
        rc,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        time.monotonic() - start,
        max_rss_mb,
    )
