"""Breadcrumbs: the GEMM call each thread has in flight, kept where a crash cannot take it away.

Before every GEMM call an instrument wrapper makes (``tracekit.instrument()``), the call's backend, op, M, N, K,
dtypes, scale, range name, the caller's ``file:line``, pid, tid and a per-process sequence number are copied into
a slot of a memory-mapped file; when the call returns the slot's state byte turns from ``C`` to ``D`` (``R`` when
it raised). The mapping is a shared file mapping, so the page cache keeps every write when the process dies by
SIGSEGV, SIGABRT, SIGKILL or a CUDA fault, and a call costs no system call. After the crash,
:func:`read_breadcrumbs` names the call that was in flight.

Active only when ``TRACEKIT_BREADCRUMB_DIR`` is set (``tracekit capture`` sets it to ``<run>/raw/breadcrumbs``);
otherwise the wrappers check one module attribute (``active``) and do nothing else.

File format (the contract the capture / import side reads):

- one file per process, ``<dir>/breadcrumb.<pid>.bin``: :data:`SLOTS` (64) slots of :data:`SLOT_BYTES` (512)
  bytes, 32 KiB, created at the process's first wrapped call;
- a thread takes the next slot on its first call (slot = per-process thread index mod 64) and reuses it;
- slot byte 0: ``C`` call in flight, ``D`` returned, ``R`` raised, NUL never used; bytes 1..511: a UTF-8 (ASCII)
  JSON object, then a NUL (what follows the first NUL is padding, possibly left from a longer earlier record);
- JSON keys: ``v`` (1), ``pid``, ``tid``, ``seq`` (per-process counter, from 1), ``t`` (``time.time()`` at the
  call), ``backend``, ``op``, ``m``, ``n``, ``k``, ``dtype_a``, ``dtype_b``, ``dtype_out``, ``scale``, ``range``,
  ``caller`` (``path/to/file.py:123``); ``range`` and ``caller`` are shortened so the object fits.

A wrapped call that raises is also written as one failure record (the keys of
``tracekit.collectors.failures.failure_record``) to ``<dir>/failures.<pid>.jsonl``, whether or not the caller
catches the exception; the import reads those files as failures.

Cost: the JSON of everything but seq, t and caller is built once per range (cached on the range's scope, beside
its name), so a call costs one bytes format (integers only: formatting a float costs more than all the rest), a
copy into the mapping and the caller lookup (cached per call site). ``benchmarks/bench_instrument.py
--breadcrumbs`` measures it: about 1.3-1.9 µs on top of the wrapper's own ~0.5 µs on a loaded 2-core CPU.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import mmap
import os
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
    "SLOTS",
    "SLOT_BYTES",
    "active",
    "failure_kind",
    "read_breadcrumbs",
    "reload",
]

ENV_DIR = "TRACEKIT_BREADCRUMB_DIR"
SLOTS = 64
SLOT_BYTES = 512
FILE_BYTES = SLOTS * SLOT_BYTES
VERSION = 1

_CALL, _DONE, _RAISED = ord("C"), ord("D"), ord("R")
_STATES = {_CALL: "call", _DONE: "done", _RAISED: "raised"}
_RANGE_MAX = 200
"""Longest range name kept in a slot: with the fixed keys and a caller it leaves room for ~150 path bytes."""

_encode_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]

active = False
"""True while breadcrumbs are recorded (``TRACEKIT_BREADCRUMB_DIR`` set and its file usable)."""
_dir: Path | None = None
_map: mmap.mmap | None = None
_lock = threading.Lock()
_slots = itertools.count()
_seq = itertools.count(1)


class _Thread(threading.local):
    """This thread's slot: byte offset in the mapping (-1 until its first call) and the JSON tail of its ids."""

    def __init__(self) -> None:
        self.off = -1
        self.tail = b""


_local = _Thread()
_callers: dict[tuple[int, int], tuple[Any, bytes]] = {}
_time_ns = time.time_ns


def reload(environ: dict[str, str] | None = None) -> None:
    """Read ``TRACEKIT_BREADCRUMB_DIR`` again (from ``environ`` if given); closes this process's file, if open."""
    global active, _dir, _map, _local, _slots, _seq
    env = os.environ if environ is None else environ
    text = (env.get(ENV_DIR) or "").strip()
    with _lock:
        if _map is not None:
            with contextlib.suppress(Exception):
                _map.close()
        _map = None
        _dir = Path(text) if text else None
        active = _dir is not None
        _local = _Thread()
        _slots = itertools.count()
        _seq = itertools.count(1)


def _after_fork() -> None:
    """A forked child writes its own file (its own pid), not its parent's."""
    global _map, _local, _slots, _seq, _lock
    _lock = threading.Lock()
    _map = None  # the parent's mapping stays the parent's; the child opens its own on its next call
    _local = _Thread()
    _slots = itertools.count()
    _seq = itertools.count(1)


os.register_at_fork(after_in_child=_after_fork)


def _open() -> mmap.mmap | None:
    """This process's breadcrumb file, created and mapped on first use; None (and breadcrumbs off) if it cannot be."""
    global _map, active
    with _lock:
        if _map is not None or not active or _dir is None:
            return _map
        try:
            _dir.mkdir(parents=True, exist_ok=True)
            path = _dir / f"breadcrumb.{os.getpid()}.bin"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, FILE_BYTES)
                _map = mmap.mmap(fd, FILE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:
            active = False
            warnings.warn(
                f"tracekit: breadcrumbs are off: cannot map {_dir}/breadcrumb.{os.getpid()}.bin ({exc})",
                RuntimeWarning,
                stacklevel=4,
            )
        return _map


def prefix_for(name: str) -> tuple[bytes, dict[str, Any]]:
    """The JSON of a range's fixed fields (ASCII bytes, without the closing brace) and those fields, for a range
    name."""
    decoded = decode(name)
    fields = decoded.fields if decoded is not None else {}

    def num(key: str) -> int | None:
        value = fields.get(key)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    info: dict[str, Any] = {
        "v": VERSION,
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
    return json.dumps(info)[:-1].encode(), info


def _caller(frame: Any) -> bytes:
    """``"path/file.py:123"`` of ``frame``, JSON-encoded, cached per call site: keyed on the code object's id and
    the frame's bytecode offset (hashing a code object hashes its contents, and ``f_lineno`` scans the line
    table), checked against the code object itself."""
    if frame is None:
        return b'""'
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    hit = _callers.get(key)
    if hit is not None and hit[0] is code:
        return hit[1]
    if len(_callers) > 4096:
        _callers.clear()
    text = _encode_str(f"{code.co_filename}:{frame.f_lineno}").encode()
    _callers[key] = (code, text)
    return text


def enter(scope: Any, frame: Any) -> int:
    """Write the slot of this thread for a call of ``scope`` made at ``frame``; its offset, or -1 when off."""
    local = _local
    off = local.off
    mm = _map
    if off < 0 or mm is None:
        mm = _map if _map is not None else _open()
        if mm is None:
            return -1
        off = local.off = (next(_slots) % SLOTS) * SLOT_BYTES
        local.tail = f',"pid":{os.getpid()},"tid":{threading.get_native_id()}}}\0'.encode()
    crumb = scope.crumb
    if crumb is None:
        crumb = scope.crumb = prefix_for(scope.name)
    caller = _caller(frame)
    sec, usec = divmod(_time_ns() // 1000, 1_000_000)
    data = b'C%s,"seq":%d,"t":%d.%06d,"caller":%s%s' % (crumb[0], next(_seq), sec, usec, caller, local.tail)
    if len(data) > SLOT_BYTES:  # a long path: keep its end (file name and line), it is what a reader wants
        over = len(data) - SLOT_BYTES + 4
        short = _encode_str("..." + json.loads(caller)[over:]).encode()
        data = data.replace(b'"caller":' + caller, b'"caller":' + short)
        if len(data) > SLOT_BYTES:
            return -1
    mm[off : off + len(data)] = data
    return off


def done(off: int) -> None:
    """The call written at ``off`` returned."""
    mm = _map
    if off >= 0 and mm is not None:
        mm[off] = _DONE


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
    mm = _map
    if off >= 0 and mm is not None:
        mm[off] = _RAISED
    directory = _dir
    if directory is None or not isinstance(exc, Exception):
        return
    try:
        from tracekit.collectors import failures as F

        crumb = scope.crumb
        if crumb is None:
            crumb = scope.crumb = prefix_for(scope.name)
        info = crumb[1]
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
        line = json.dumps(record, default=str) + "\n"
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / f"failures.{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
            f.write(line)
    except Exception:  # recording must never change what the caller sees
        return


def read_breadcrumbs(directory: Path) -> list[dict[str, Any]]:
    """Every non-empty slot of every ``breadcrumb.<pid>.bin`` in ``directory``: the slot's JSON object with
    ``state`` (``call`` | ``done`` | ``raised``) and ``file`` (the path) added, ordered by file then ``seq``.
    Slots that are empty, garbled or cut short are skipped; a missing folder gives an empty list."""
    out: list[dict[str, Any]] = []
    directory = Path(directory)
    if not directory.is_dir():
        return out
    decoder = json.JSONDecoder()
    for path in sorted(directory.glob("breadcrumb.*.bin")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        rows = []
        for start in range(0, len(data) - 1, SLOT_BYTES):
            slot = data[start : start + SLOT_BYTES]
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
        rows.sort(key=lambda r: r["seq"] if isinstance(r.get("seq"), int) else 0)
        out.extend(rows)
    return out


reload()
