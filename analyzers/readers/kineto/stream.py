"""A Kineto trace's event array, cut into chunks at event boundaries and decoded in worker threads, in order.

The text is never held whole. Its head (everything before ``"traceEvents": [``) is decoded for the metadata it
holds; the event array is cut every ``chunk_bytes`` at an event's closing brace followed by a comma and the
next event's opening brace (``}, {``), and each chunk is decoded on its own (``[`` + its events + ``]``) into a
compact ``Part``. The last chunk also holds the array's end and the metadata after it (``baseTimeNanoseconds``
...), decoded as ``{"traceEvents": [`` + the rest of the file.

A cut is found by a byte pattern, so it may fall inside a string or a nested value; then the chunk before it does
not decode (it ends inside that string or value) and is decoded again joined with the next one: the text itself
says which cuts were right. A chunk that does not decode for any other reason is damage: its complete events
before the damage are kept (``decode.salvage``), the rest of the file is not read, and the result is
partial, as a file cut short is.

Each chunk (of 16 MB of text and more) is read by the C scanner (``native.py``, the fast path), which releases
the GIL while it scans, so the workers are threads of this process: no process to start, no imports, no text or
frames copied between processes. Where the scanner was not built (no C compiler at install time), or declines a
chunk (text outside the plain form it is sure of), msgspec decodes it in the same thread (the fallback): correct,
only not in parallel. (Spawned worker processes for msgspec were a third path until the paths were measured
against each other: docs/PERFORMANCE.md, "One fast path and one fallback per format".)

Plain files are read by the workers themselves (each its own byte range); gzipped ones are inflated by the
calling thread, which hands each chunk's text to a worker as it is. Each thread decodes from one reused buffer
(``_scratch``). A file of one chunk, or ``workers=1``, is decoded in the calling thread.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from . import native
from .decode import Form, Meta, NotATrace, Notes, Undecodable, decode, first_byte, gc_paused, salvage
from .part import Part, make_part
from .text import TraceText

CHUNK_BYTES = 32 << 20
"""Text per chunk: a worker holds a few of these and their decoded events at a time."""
BLOCK_BYTES = 4 << 20
"""Text read (or inflated) per step: a chunk is cut in the block that takes it past ``CHUNK_BYTES``, so a chunk
holds less than the two together."""
_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_ARRAY_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_CUT_TRIES = 4096
_WINDOW = 1 << 20
_OBJECT_PREFIX = b'{"traceEvents":['


@dataclass
class Chunk:
    """Part of the event array: ``length`` bytes of the text from ``offset``; its events end at ``body`` (the
    rest is the comma and blanks before the next chunk). ``data`` holds at least ``length`` bytes of text (one
    string, or the list of blocks it spans), or is None for a plain file (the decoder reads the range). The last
    chunk runs to the end of the file."""

    offset: int
    length: int
    body: int
    last: bool
    data: bytes | list[bytes] | None = None

    def text(self) -> bytes | None:
        """The chunk's text (with maybe some bytes after it), or None for a plain file."""
        return b"".join(self.data) if isinstance(self.data, list) else self.data

    def joined(self, nxt: Chunk) -> Chunk:
        """This chunk and the next one as one chunk."""
        data = None
        mine, theirs = self.text(), nxt.text()
        if mine is not None and theirs is not None:
            data = mine[: self.length] + theirs[: nxt.length]
        gap = nxt.offset - self.offset
        return Chunk(self.offset, gap + nxt.length, gap + nxt.body, nxt.last, data)


@dataclass
class Job:
    """What a worker needs to decode one chunk."""

    chunk: Chunk
    path: str
    form: Form
    whole: bool = False
    """The chunk is the whole file (no event array was found in it): decoded as it is."""


@dataclass
class Result:
    """One decoded chunk: its part (None if nothing could be kept), or why it failed."""

    part: Part | None = None
    count: int = 0
    notes: Notes = field(default_factory=Notes)
    meta: Meta = field(default_factory=Meta)
    failed: bool = False
    at_end: bool = False
    """Failed at its very end: the next chunk's text may mend it."""
    kept: int = 0
    """Bytes of the chunk's text whose events are in ``part`` (all of them unless it failed)."""
    not_a_trace: str | None = None
    no_events: bool = False


def decode_job(job: Job) -> Result:
    """Decode one chunk (in a worker thread or in the caller); on damage, keep its complete events."""
    with gc_paused():
        return _decode_job(job)


def _decode_job(job: Job) -> Result:
    c = job.chunk
    if job.whole:
        prefix, form, end = b"", job.form, c.length
    elif c.last:
        prefix, form, end = (_OBJECT_PREFIX if job.form == "object" else b"["), job.form, c.length
    else:
        prefix, form, end = b"[", "list", c.body
    doc = _doc(c, job.path, prefix, end, b"" if c.last or job.whole else b"]")
    if len(doc) >= native.MIN_BYTES and (scanned := native.scan_part(doc, form)) is not None:
        part, count, meta = scanned
        return Result(part, count, meta=meta, kept=end)
    try:
        out = decode(doc, form)
    except NotATrace as exc:
        return Result(failed=True, not_a_trace=str(exc))
    except Undecodable as exc:
        if exc.at_end and not c.last:
            return Result(failed=True, at_end=True)  # the next chunk's text may mend it: no salvage yet
        saved = salvage(doc, form, exc.damage_at)
        res = Result(failed=True)
        if saved is not None:
            events, meta, kept = saved
            res.part, res.count, res.meta, res.kept = make_part(events), len(events), meta, kept - len(prefix)
        return res
    if out.events is None:
        return Result(no_events=True, meta=out.meta, notes=out.notes)
    pins = _BUFFERS.pins
    if not pins:
        pins.extend(out.events[::PIN_EVERY])
    return Result(make_part(out.events), out.count, out.notes, out.meta, kept=end)


def _doc(c: Chunk, path: str, prefix: bytes, end: int, suffix: bytes) -> memoryview:
    """``prefix`` + the chunk's first ``end`` bytes + ``suffix``, copied once into this process's scratch buffer
    (``_scratch``), which every chunk reuses."""
    size = len(prefix) + end + len(suffix)
    buf = _scratch(size)
    buf[: len(prefix)] = prefix
    body = buf[len(prefix) : len(prefix) + end]
    if c.data is None:
        with open(path, "rb") as f:
            f.seek(c.offset)
            got = f.readinto(body)
        if got < end:  # the file shrank since it was first read: what is missing decodes as damage
            body[got:] = bytes(end - got)
    else:
        _copy_into(body, c.data)
    buf[len(prefix) + end :] = suffix
    return buf


def _copy_into(out: memoryview, data: bytes | list[bytes]) -> None:
    """The first ``len(out)`` bytes of ``data`` (one string, or the blocks a chunk spans) into ``out``."""
    at, end = 0, len(out)
    for p in data if isinstance(data, list) else [data]:
        if at >= end:
            break
        take = min(len(p), end - at)
        out[at : at + take] = p if take == len(p) else memoryview(p)[:take]
        at += take


class _Buffers(threading.local):
    """This thread's scratch buffer and pinned events (per thread: reads may run in several threads at once)."""

    def __init__(self) -> None:
        self.scratch: bytearray | None = None
        self.pins: list[object] = []


_BUFFERS = _Buffers()


def _scratch(size: int) -> memoryview:
    """``size`` bytes of a buffer this thread keeps for chunk text. A fresh 32 MB buffer per chunk is faulted in
    page by page each time it is written (the allocator hands such sizes back to the system on free); reused, it
    is faulted in once. On a 1M-kernel trace that alone took two workers' page faults from 3.5M to 2.9M, and one
    process's from 2.2M to 1.7M."""
    mine = _BUFFERS
    if mine.scratch is None or len(mine.scratch) < size:
        mine.scratch = None  # let the old one go before the new one is made
        mine.scratch = bytearray(size + size // 8)
    return memoryview(mine.scratch)[:size]


PIN_EVERY = 64
"""Every this many events of the first chunk a process decodes stay alive until the end of the read. CPython's
small-object allocator unmaps a 1 MiB arena as soon as its last object dies; a chunk's ~100 MB of events all die
together, so each chunk mapped and faulted its arenas afresh: in two workers on a 1M-kernel trace, 1.6M page
faults and 4.8 s of system time. With one live event in each arena they stay mapped and the next chunks reuse
them: 0.4M faults and 1.2 s (docs/PERFORMANCE.md). The pins cost ~1/64 of one chunk's events."""


def release_scratch() -> None:
    """Let this process's scratch buffer, pinned events and the scanner's kept record memory go (at the end of a
    read)."""
    mine = _BUFFERS
    mine.scratch = None
    mine.pins.clear()
    native.release()


# -- finding the event array and the cuts ------------------------------------------------------------------------
@dataclass
class Head:
    """Where the event array starts (``start``: the byte after its ``[``) and what the text before it says."""

    form: Form
    start: int
    meta: Meta
    notes: Notes
    text: bytes
    """The text read so far (from the start of the file)."""


def find_array(text: bytes) -> Head | None:
    """The event array's start in ``text`` (the first bytes of the file), or None if more text is needed (or, at
    the end of the file, if there is no array: the caller then decodes the file whole)."""
    fb = first_byte(text)
    if fb == b"[":
        return Head("list", text.index(b"[") + 1, Meta(), Notes(), text)
    if fb != b"{":
        return None  # not JSON, or only blanks so far
    for m in _ARRAY_KEY.finditer(text):
        try:
            out = decode(text[: m.end()] + b"]}", "object")
        except (Undecodable, NotATrace):
            continue  # the key is inside a string or a nested object: look further
        if out.events == []:
            return Head("object", m.end(), out.meta, out.notes, text)
    return None


def _last_cut(data: bytes, lo: int, hi: int) -> tuple[int, int] | None:
    """The last ``}, {`` whose ``}`` lies in ``data[lo:hi]``: (end of the events before it, start of the next)."""
    pos = hi
    for _ in range(_CUT_TRIES):
        c = data.rfind(b"}", lo, pos)
        if c < 0:
            return None
        m = _CUT.match(data, c)
        if m:
            return c + 1, m.end() - 1
        pos = c
    m = _CUT.search(data, lo, hi)  # a long stretch without a cut: take the first one instead
    return (m.start() + 1, m.end() - 1) if m else None


def stream_chunks(first: bytes, offset: int, blocks: Iterator[bytes], chunk_bytes: int) -> Iterator[Chunk]:
    """Chunks of the text that follows the array start: ``first`` (already read, at ``offset``), then
    ``blocks``. A chunk is cut in its last block and handed on as the list of its blocks, so the text is not
    copied here (the decoder joins it); only the few bytes after the cut are, to start the next chunk."""
    pieces, size = [first], len(first)
    for block in blocks:
        pieces.append(block)
        size += len(block)
        if size < chunk_bytes:
            continue
        cut = _last_cut(block, 0, len(block))
        if cut is None:
            continue  # no event ends in this block: the chunk grows by the next one
        before = size - len(block)
        body, nxt = before + cut[0], before + cut[1]
        yield Chunk(offset, nxt, body, False, pieces)
        offset += nxt
        tail = block[cut[1] :]
        pieces, size = [tail], len(tail)
    rest = b"".join(pieces)
    yield Chunk(offset, len(rest), len(rest), True, rest)


def range_chunks(text: TraceText, offset: int, chunk_bytes: int) -> Iterator[Chunk]:
    """Chunks of a plain file from ``offset`` (the array start): only a window around each cut is read here."""
    size = text.size
    start = offset
    with open(text.path, "rb") as f:
        while size - start > chunk_bytes:
            at = start + chunk_bytes
            window = b""
            cut = None
            while cut is None and at + len(window) < size:
                f.seek(at + len(window))
                window += f.read(max(_WINDOW, len(window)))
                m = _CUT.search(window)
                cut = (m.start() + 1, m.end() - 1) if m else None
            if cut is None:
                break
            body, nxt = at + cut[0], at + cut[1]
            yield Chunk(start, nxt - start, body - start, False)
            start = nxt
    yield Chunk(start, size - start, size - start, True)


# -- decoding chunks in order ----------------------------------------------------------------------------------
class Decoder:
    """Decodes jobs in order: in ``workers`` threads (the C scanner reads the chunks without the GIL; msgspec, where
    it reads them, holds it), or here when ``workers`` is 1. At most two jobs per worker are in flight, so memory
    is bounded by the workers, not by the file."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool: ThreadPoolExecutor | None = None
        self.queue: deque[tuple[Job, Future[Result] | None]] = deque()
        self.in_flight = 2 * workers
        """Jobs queued at most (two per worker: one decoding, one ready for it)."""

    def submit(self, job: Job) -> Iterator[tuple[Job, Result]]:
        """Queue ``job``; yields the jobs (with results) that had to finish to make room."""
        if self.workers <= 1:
            yield job, decode_job(job)
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tracekit-kineto")
        self.queue.append((job, self.pool.submit(decode_job, job)))
        while len(self.queue) > self.in_flight:
            yield self._pop()

    def drain(self) -> Iterator[tuple[Job, Result]]:
        while self.queue:
            yield self._pop()

    def _pop(self) -> tuple[Job, Result]:
        job, fut = self.queue.popleft()
        assert fut is not None
        return job, fut.result()

    def close(self) -> None:
        """Let the workers go (the jobs not started are cancelled)."""
        if self.pool is None:
            return
        self.queue.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = None


@dataclass
class Collected:
    """What the chunks of one file gave, in file order."""

    parts: list[Part] = field(default_factory=list)
    meta: Meta = field(default_factory=Meta)
    notes: list[tuple[int, Notes]] = field(default_factory=list)
    """Each chunk's notes, with the number of events before it."""
    events: int = 0
    good_end: int = 0
    """The end of the last event read in full, as a byte offset in the text."""
    cut_at: int | None = None
    """Set when the text broke off (cut short or damaged): the bytes whose events were read."""
    not_a_trace: str | None = None
    no_events: bool = False


def collect(
    jobs: Iterator[Job], decoder: Decoder, on_chunk: Callable[[int], None] | None = None
) -> Collected:
    """Decode ``jobs`` in order, joining a chunk that broke at its end with the next one, and stop at damage.
    ``on_chunk``: called with the end of each chunk taken (a byte offset in the text), for progress."""
    out = Collected()
    carry: Job | None = None
    try:
        for job in jobs:
            if out.cut_at is not None or out.not_a_trace or out.no_events:
                continue  # the rest of the text is not read, only counted
            for done, res in decoder.submit(job):
                carry = _settle(out, done, res, carry, on_chunk)
        for done, res in decoder.drain():
            carry = _settle(out, done, res, carry, on_chunk)
    finally:
        decoder.close()
        release_scratch()
    return out


def _settle(
    out: Collected,
    job: Job,
    res: Result,
    carry: Job | None,
    on_chunk: Callable[[int], None] | None,
) -> Job | None:
    """``_take``, then say how far the text is decoded."""
    waiting = _take(out, job, res, carry)
    if on_chunk is not None:
        on_chunk(job.chunk.offset + job.chunk.length)
    return waiting


def _take(out: Collected, job: Job, res: Result, carry: Job | None) -> Job | None:
    """Add one chunk's result to ``out``; returns the job still waiting for the next chunk's text, if any."""
    if out.cut_at is not None or out.not_a_trace or out.no_events:
        return None
    if carry is not None:  # the previous chunk broke at its end: decode it again with this one
        job = Job(carry.chunk.joined(job.chunk), job.path, job.form)
        res = decode_job(job)
    if res.failed and res.at_end:
        return job
    c = job.chunk
    if res.not_a_trace:
        out.not_a_trace = res.not_a_trace
        return None
    if res.no_events:
        out.no_events = True
    out.meta = out.meta.merged(res.meta)
    if res.part is not None:
        out.parts.append(res.part)
        out.notes.append((out.events, res.notes))
        out.events += res.count
    if res.failed:
        out.cut_at = c.offset + res.kept if res.part is not None else out.good_end
    else:
        out.good_end = c.offset + res.kept
    return None
