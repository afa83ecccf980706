"""Breadcrumbs: the GEMM call each thread has in flight, kept where a crash cannot take it away.

Before every GEMM call an instrument wrapper makes (``tracekit.instrument()``), a small fixed record (state, a
per-process sequence number, the time and a site id) is packed into this thread's slot of a memory-mapped file;
the site id names, in a table in the same file written once per distinct (range, call site), the call's backend,
op, M, N, K, dtypes, scale, range name and the caller's ``file:line``. When the call returns the slot's state
byte turns from ``C`` to ``D`` (``R`` when it raised). The mapping is a shared file mapping, so the page cache
keeps every write when the process dies by SIGSEGV, SIGABRT, SIGKILL or a CUDA fault, and a call costs no system
call. After the crash, :func:`read_breadcrumbs` names the call that was in flight.

Active only when ``TRACEKIT_BREADCRUMB_DIR`` is set (``tracekit capture`` sets it to ``<run>/raw/breadcrumbs``);
otherwise the wrappers check one module attribute (``active``) and do nothing else.

File format v2 (the contract the capture / import side reads; all integers little-endian):

- one file per process, ``<dir>/breadcrumb.<pid>.bin``, :data:`FILE_BYTES` (136 KiB) long (sparse: only
  written pages take space), created at the process's first wrapped call;
- header, :data:`HEADER_BYTES` (64) bytes: magic ``b"tkcrumb\\0"``, then u32 version (2), pid, slot count
  (:data:`SLOTS`, 256), slot bytes (:data:`SLOT_BYTES`, 32), site count (:data:`SITES`, 256), site bytes
  (:data:`SITE_BYTES`, 512);
- slots, from byte 64: a thread takes the next slot on its first call (slot = per-process thread index mod 256)
  and reuses it. Slot: u8 state (``C`` call in flight, ``D`` returned, ``R`` raised, NUL no call yet), 3 bytes
  padding, u32 site id, u64 seq (per-process counter, from 1), u64 t (``time.time_ns()`` at the call), u64 tid
  (the thread's native id, written when the thread takes the slot);
- sites, from byte 64 + 256 * 32: site id ``s`` (from 1) lives in entry ``(s - 1) mod 256``: u32 ``s``, then a
  UTF-8 (ASCII) JSON object with keys ``backend``, ``op``, ``m``, ``n``, ``k``, ``dtype_a``, ``dtype_b``,
  ``dtype_out``, ``scale``, ``range``, ``caller`` (``path/to/file.py:123``), then a NUL (what follows it is
  padding, possibly left from a longer earlier entry). ``range`` and ``caller`` are shortened so the entry fits.
  A process with more than 256 distinct sites reuses entries from the oldest: a slot whose entry no longer
  holds its id is read with the site's keys None rather than with another call's.

:func:`read_breadcrumbs` returns one dict per used slot with the keys ``v``, ``pid``, ``tid``, ``seq``, ``t``
(seconds, float), the site's keys, ``state`` and ``file``. It also reads the files of format v1 (no header; 64
slots of 512 bytes, each a state byte then the whole JSON object, keys as returned, NUL padded).

A wrapped call that raises is also written as one failure record (the keys of
``tracekit.collectors.failures.failure_record``) to ``<dir>/failures.<pid>.jsonl``, whether or not the caller
catches the exception; the import reads those files as failures.

Cost: a call packs 24 bytes with one precompiled ``struct`` (no text formatting) after one ``threading.local``
read (its slot) and one dict lookup of its site, cached per range scope on the caller's bytecode offset and
checked against the caller's code object by identity (cheaper than hashing an (id, offset) pair); the return
rewrites one byte. ``benchmarks/bench_instrument.py --breadcrumbs`` measures it. On a loaded 2-core CPU (Python
3.11; the v1 module, which formatted a ~250-byte JSON slot per call, imported beside this one, runs interleaved,
best of 9 x 100,000 calls): ``enter`` + ``done`` about 0.39-0.6 µs (v1: 1.1-1.3 µs); the instrumented call with
breadcrumbs on 0.65-1.0 µs over the same call with them off (v1: 1.6-2.0 µs). What is left is Python's floor
for the work: the caller's frame (``sys._getframe``), two attribute reads off it, ``time.time_ns()``, one
``pack_into`` and two function calls.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import mmap
import os
import struct
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from tracekit.naming import decode

__all__ = [
    "ENV_DIR",
    "FILE_BYTES",
    "SITES",
    "SITE_BYTES",
    "SLOTS",
    "SLOT_BYTES",
    "active",
    "done",
    "enter",
    "failure_kind",
    "raised",
    "read_breadcrumbs",
    "reload",
]

ENV_DIR = "TRACEKIT_BREADCRUMB_DIR"
VERSION = 2
MAGIC = b"tkcrumb\0"
HEADER = struct.Struct("<8s6I")
HEADER_BYTES = 64
SLOTS = 256
SLOT_BYTES = 32
SITES = 256
SITE_BYTES = 512
SLOTS_AT = HEADER_BYTES
SITES_AT = SLOTS_AT + SLOTS * SLOT_BYTES
FILE_BYTES = SITES_AT + SITES * SITE_BYTES

_RECORD = struct.Struct("<B3xIQQ")
"""A slot's per-call part: state, site id, seq, t (ns). The tid follows it, written once per thread."""
_SLOT = struct.Struct("<B3xIQQQ")
_SITE_ID = struct.Struct("<I")

V1_SLOTS = 64
V1_SLOT_BYTES = 512
"""Format v1: 64 slots of 512 bytes, each a state byte and a JSON object (still read)."""

_CALL, _DONE, _RAISED = ord("C"), ord("D"), ord("R")
_STATES = {_CALL: "call", _DONE: "done", _RAISED: "raised"}
_RANGE_MAX = 200
"""Longest range name kept in a site entry: with the fixed keys and a caller it leaves room for ~150 path
bytes."""
_SITE_KEYS = ("backend", "op", "m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "scale", "range", "caller")

active = False
"""True while breadcrumbs are recorded (``TRACEKIT_BREADCRUMB_DIR`` set and its file usable)."""
_dir: Path | None = None
_map: mmap.mmap | None = None
_lock = threading.Lock()
_slots = itertools.count()
_seq = itertools.count(1)
_next_site = 1
_site_maps: dict[int, dict[Any, Any]] = {}
"""Every scope's site cache that holds a site of this file, by id: emptied when the file changes (reload,
fork) and when the site table starts a new lap (the ids they hold are about to be overwritten)."""
_keep: list[Any] = []
"""The caller code objects site caches hold by id: kept alive so no other code object can take the id while a
cache holds it."""


class _Thread(threading.local):
    """This thread's slot: its byte offset in the mapping, -1 until the thread's first call."""

    def __init__(self) -> None:
        self.off = -1


_local = _Thread()
_pack = _RECORD.pack_into
_time_ns = time.time_ns


def _forget() -> None:
    """Start afresh: no file, no slots, no sites (the caches the scopes hold are emptied in place)."""
    global _map, _local, _slots, _seq, _next_site
    _map = None
    _local = _Thread()
    _slots = itertools.count()
    _seq = itertools.count(1)
    _next_site = 1
    for sites in _site_maps.values():
        sites.clear()
    _site_maps.clear()
    _keep.clear()


def reload(environ: dict[str, str] | None = None) -> None:
    """Read ``TRACEKIT_BREADCRUMB_DIR`` again (from ``environ`` if given); closes this process's file, if open."""
    global active, _dir
    env = os.environ if environ is None else environ
    text = (env.get(ENV_DIR) or "").strip()
    with _lock:
        if _map is not None:
            with contextlib.suppress(Exception):
                _map.close()
        _forget()
        _dir = Path(text) if text else None
        active = _dir is not None


def _after_fork() -> None:
    """A forked child writes its own file (its own pid, its own site table), not its parent's."""
    global _lock
    _lock = threading.Lock()
    _forget()  # the parent's mapping stays the parent's; the child opens its own on its next call


os.register_at_fork(after_in_child=_after_fork)


def _open() -> mmap.mmap | None:
    """This process's breadcrumb file, created and mapped on first use; None (and breadcrumbs off) if it
    cannot be. Called with ``_lock`` held."""
    global _map, active
    if _map is not None or not active or _dir is None:
        return _map
    try:
        _dir.mkdir(parents=True, exist_ok=True)
        path = _dir / f"breadcrumb.{os.getpid()}.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, FILE_BYTES)
            mm = mmap.mmap(fd, FILE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        HEADER.pack_into(mm, 0, MAGIC, VERSION, os.getpid(), SLOTS, SLOT_BYTES, SITES, SITE_BYTES)
        _map = mm
    except (OSError, ValueError) as exc:
        active = False
        warnings.warn(
            f"tracekit: breadcrumbs are off: cannot map {_dir}/breadcrumb.{os.getpid()}.bin ({exc})",
            RuntimeWarning,
            stacklevel=5,
        )
    return _map


def fields_for(name: str) -> dict[str, Any]:
    """The breadcrumb fields of a range name: backend, op, M, N, K, dtypes and scale (None where the name has
    none) and the name itself, cut to 200 characters."""
    decoded = decode(name)
    fields = decoded.fields if decoded is not None else {}

    def num(key: str) -> int | None:
        value = fields.get(key)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    return {
        "backend": fields.get("backend"),
        "op": fields.get("op"),
        "m": num("M"),
        "n": num("N"),
        "k": num("K"),
        "dtype_a": fields.get("a"),
        "dtype_b": fields.get("b"),
        "dtype_out": fields.get("out"),
        "scale": fields.get("scale"),
        "range": name[:_RANGE_MAX],
    }


def site_entry(name: str, caller: str, limit: int = SITE_BYTES - _SITE_ID.size - 1) -> bytes:
    """The JSON of a site (range ``name`` called at ``caller``), at most ``limit`` bytes: a long caller path
    keeps its end (file name and line, what a reader wants), then a long range name is cut further."""
    info = fields_for(name)
    info["caller"] = caller
    data = json.dumps(info).encode()
    while len(data) > limit and len(info["caller"]) > 16:
        over = len(data) - limit
        info["caller"] = "..." + info["caller"][max(over + 3, len(info["caller"]) // 8) :]
        data = json.dumps(info).encode()
    while len(data) > limit and len(info["range"]) > 16:
        info["range"] = info["range"][: len(info["range"]) // 2]
        data = json.dumps(info).encode()
    if len(data) > limit:  # field values too long to keep (not a tracekit name): the call is still written
        data = json.dumps({"range": info["range"], "caller": info["caller"]}).encode()[:limit]
    return data


def _site(scope: Any, frame: Any) -> int:
    """The site id of a call of ``scope`` made at ``frame``: written to the site table on the first call from
    that place, then cached on the scope (``scope.crumb``). The cache maps the caller's bytecode offset to
    (code object, site id), which :func:`enter` checks by identity; a second code object calling the scope from
    the same offset, and a call without a frame, are kept under (code object id, offset) and found here."""
    global _next_site
    code = frame.f_code if frame is not None else None
    lasti = frame.f_lasti if frame is not None else -1
    key = (id(code), lasti)
    sites = scope.crumb
    if sites is not None:
        hit = sites.get(key)
        if hit is not None:
            return hit
    with _lock:
        mm = _map if _map is not None else _open()
        if mm is None:
            return 0
        if sites is None:
            sites = scope.crumb = {}
        first = sites.get(lasti)
        if first is not None and first[0] is code:  # another thread wrote it meanwhile
            return first[1]
        hit = sites.get(key)
        if hit is not None:
            return hit
        site = _next_site
        _next_site += 1
        if site > 1 and (site - 1) % SITES == 0:  # a new lap: every cached id is about to be overwritten
            for cached in _site_maps.values():
                cached.clear()
            _site_maps.clear()
            _keep.clear()
        caller = f"{code.co_filename}:{frame.f_lineno}" if code is not None else ""
        entry = _SITE_ID.pack(site) + site_entry(scope.name, caller) + b"\0"
        at = SITES_AT + (site - 1) % SITES * SITE_BYTES
        mm[at : at + len(entry)] = entry
        if first is None and code is not None:
            sites[lasti] = (code, site)
        else:
            sites[key] = site
            _keep.append(code)
        _site_maps[id(sites)] = sites
        return site


def _claim() -> int:
    """This thread's slot offset, taken on its first call (the file is opened on the process's first); -1
    when breadcrumbs are off."""
    with _lock:
        mm = _map if _map is not None else _open()
        if mm is None:
            return -1
        off = SLOTS_AT + (next(_slots) % SLOTS) * SLOT_BYTES
        _SLOT.pack_into(mm, off, 0, 0, 0, 0, threading.get_native_id())
        _local.off = off
        return off


def enter(scope: Any, frame: Any) -> int:
    """Write this thread's slot for a call of ``scope`` made at ``frame``: its offset, or -1 when off. Never
    raises (recording must never break the caller's call)."""
    off = _local.off
    try:
        if off < 0:
            off = _claim()
            if off < 0:
                return -1
        try:
            hit = scope.crumb[frame.f_lasti]
            site = hit[1] if hit[0] is frame.f_code else _site(scope, frame)
        except (KeyError, TypeError, AttributeError):  # first call from here, first of the scope, no frame
            site = _site(scope, frame)
        _pack(_map, off, _CALL, site, next(_seq), _time_ns())
    except Exception:
        return -1
    return off


def done(off: int) -> None:
    """The call written at ``off`` returned."""
    if off >= 0:
        try:  # noqa: SIM105 (contextlib.suppress costs ~0.1 µs a call: this is the hot path)
            _map[off] = _DONE  # type: ignore[index]
        except Exception:  # the file was closed meanwhile (reload): nothing to mark
            pass


def failure_kind(exc: BaseException) -> str:
    """``unsupported`` for a support or capability limit the exception names, else ``error`` (the call raised
    and the process went on: not a crash)."""
    from tracekit.collectors import failures as F

    if F.classify(F.type_name(exc), F.full_message(exc)) == F.UNSUPPORTED:
        return F.UNSUPPORTED
    return F.ERROR


def raised(off: int, scope: Any, exc: BaseException) -> None:
    """The call written at ``off`` raised ``exc``: mark its slot ``R`` and append one failure record to
    ``failures.<pid>.jsonl``. Never raises (the caller re-raises the original exception)."""
    if off >= 0:
        with contextlib.suppress(Exception):
            _map[off] = _RAISED  # type: ignore[index]
    directory = _dir
    if directory is None or not isinstance(exc, Exception):
        return
    try:
        from tracekit.collectors import failures as F
        from tracekit.records import Failure, jsonl_line

        info = fields_for(scope.name)
        record = F.failure_record(
            backend=info.get("backend") or "unknown",
            op=info.get("op"),
            m=info.get("m"),
            n=info.get("n"),
            k=info.get("k"),
            kind=failure_kind(exc),
            error_type=F.type_name(exc),
            message=F.full_message(exc),
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        )
        line = jsonl_line(Failure, record)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / f"failures.{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
            f.write(line)
    except Exception:  # recording must never change what the caller sees
        return


def _site_fields(data: bytes, at: int, site: int, size: int) -> dict[str, Any]:
    """The keys of site entry ``site`` at byte ``at``; all None when the entry is absent, garbled or holds
    another site now (the table was reused)."""
    blank: dict[str, Any] = dict.fromkeys(_SITE_KEYS)
    entry = data[at : at + size]
    if site == 0 or len(entry) <= _SITE_ID.size or _SITE_ID.unpack_from(entry)[0] != site:
        return blank
    try:
        obj = json.loads(entry[_SITE_ID.size :].split(b"\0", 1)[0].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return blank
    if not isinstance(obj, dict):
        return blank
    return {key: obj.get(key) for key in _SITE_KEYS}


def _read_v2(data: bytes, path: Path) -> list[dict[str, Any]]:
    """The used slots of a v2 file, each joined with its site entry (the module docstring has the layout)."""
    if len(data) < HEADER.size:
        return []
    _, version, pid, slots, slot_bytes, sites, site_bytes = HEADER.unpack_from(data, 0)
    if version != VERSION or slot_bytes < _SLOT.size or not sites or site_bytes <= _SITE_ID.size:
        return []
    sites_at = HEADER_BYTES + slots * slot_bytes
    cache: dict[int, dict[str, Any]] = {}
    rows = []
    for start in range(HEADER_BYTES, min(sites_at, len(data) - _SLOT.size + 1), slot_bytes):
        code, site, seq, t_ns, tid = _SLOT.unpack_from(data, start)
        state = _STATES.get(code)
        if state is None or seq == 0:
            continue  # never used, or taken by a thread that has made no call yet
        fields = cache.get(site)
        if fields is None:
            at = sites_at + (site - 1) % sites * site_bytes
            fields = cache[site] = _site_fields(data, at, site, site_bytes)
        row = {"v": version, **fields}
        caller = row.pop("caller")
        row.update(
            seq=seq, t=t_ns // 1000 / 1e6, caller=caller, pid=pid, tid=tid, state=state, file=str(path)
        )
        rows.append(row)
    return rows


def _read_v1(data: bytes, path: Path) -> list[dict[str, Any]]:
    """The readable slots of a v1 file: a state byte, then a JSON object up to the first NUL; empty, garbled
    and torn slots skipped."""
    decoder = json.JSONDecoder()
    rows = []
    for start in range(0, len(data) - 1, V1_SLOT_BYTES):
        slot = data[start : start + V1_SLOT_BYTES]
        state = _STATES.get(slot[0])
        if state is None:
            continue
        body = slot[1:].split(b"\0", 1)[0]
        try:
            obj, _ = decoder.raw_decode(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if not isinstance(obj, dict) or "seq" not in obj:
            continue
        obj["state"] = state
        obj["file"] = str(path)
        rows.append(obj)
    return rows


def read_breadcrumbs(directory: Path) -> list[dict[str, Any]]:
    """Every used slot of every ``breadcrumb.<pid>.bin`` in ``directory`` (format v2, or v1 from older
    captures): a dict with the keys ``v``, ``pid``, ``tid``, ``seq``, ``t`` (seconds), ``backend``, ``op``,
    ``m``, ``n``, ``k``, ``dtype_a``, ``dtype_b``, ``dtype_out``, ``scale``, ``range``, ``caller``, ``state``
    (``call`` | ``done`` | ``raised``) and ``file`` (the path), ordered by file then ``seq``. Unused and garbled
    slots are skipped; a v2 slot whose site entry is lost keeps its row with the site's keys None; a missing
    folder gives an empty list."""
    out: list[dict[str, Any]] = []
    directory = Path(directory)
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("breadcrumb.*.bin")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        rows = _read_v2(data, path) if data.startswith(MAGIC) else _read_v1(data, path)
        rows.sort(key=lambda r: r["seq"] if isinstance(r.get("seq"), int) else 0)
        out.extend(rows)
    return out


reload()
