"""Chunk text through shared memory (analyzers/readers/kineto/shm.py): the ring itself, and reads that use it, fall back from it
(no room, a chunk too big for a slot) and leave nothing behind in /dev/shm.

Worker processes (and so the ring) are the reader's way where the C scanner was not built; where it was, chunks go
to threads. The reads here take the process way either way (``processes``)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal
from test_kineto_stream import _kernel  # the same kernel events as the streaming tests

from tracekit.analyzers.readers.kineto import native
from tracekit.analyzers.readers.kineto import shm as kineto_shm
from tracekit.analyzers.readers.kineto.reader import WHOLE, read_kineto

pytestmark = pytest.mark.skipif(not Path(kineto_shm.SHM_DIR).is_dir(), reason="no /dev/shm on this system")


@pytest.fixture(autouse=True)
def processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes, as where the scanner is not built (the workers may still use it: they import it anew)."""
    monkeypatch.setattr(native, "AVAILABLE", False)


def _blocks() -> set[str]:
    """This process's shared-memory blocks (other programs, other test runs, make their own meanwhile)."""
    return {n for n in os.listdir(kineto_shm.SHM_DIR) if n.startswith(kineto_shm.block_prefix())}


def test_ring_slots_carry_text_and_come_back() -> None:
    ring = kineto_shm.Ring.make(2, 64)
    assert ring is not None
    name = ring.shm.name
    assert (
        name.lstrip("/") in _blocks()
    )  # the block carries this process's prefix, so the checks below see it
    try:
        a = ring.put([b"0123", b"456789"], 8)
        b = ring.put(b"x" * 64, 64)
        assert a is not None and b is not None and a != b
        with kineto_shm.view(a, 8) as v:
            assert v.tobytes() == b"01234567"
        with kineto_shm.view(b, 64) as v:
            assert v.tobytes() == b"x" * 64
        assert ring.put(b"y", 1) is None  # both slots taken
        ring.release(a)
        assert ring.put(b"z" * 65, 65) is None  # larger than a slot
        c = ring.put(b"again", 5)
        assert c == a
        with kineto_shm.view(c, 5) as v:
            assert v.tobytes() == b"again"
    finally:
        ring.close()
    assert name.lstrip("/") not in _blocks()
    assert name not in kineto_shm._OPEN


def test_no_ring_without_room(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A container's /dev/shm is often 64 MB: a ring that does not fit twice over is not made (writing past a
    full tmpfs is a SIGBUS, not an error)."""
    real = os.statvfs(kineto_shm.SHM_DIR)

    class Small:
        f_frsize = real.f_frsize
        f_bavail = (2 * 100 - 1) // real.f_frsize

    monkeypatch.setattr(kineto_shm.os, "statvfs", lambda _p: Small)
    assert kineto_shm.Ring.make(1, 100) is None
    monkeypatch.setattr(kineto_shm, "SHM_DIR", str(tmp_path / "missing"))
    monkeypatch.setattr(kineto_shm.os, "statvfs", os.statvfs)
    assert kineto_shm.Ring.make(1, 100) is None


def _trace(tmp_path: Path, giant_at: int | None = None) -> Path:
    """400 kernels whose names hold the cut pattern ``}, {`` (so some cuts are mended by joining chunks); with
    ``giant_at``, that kernel's name is 20 kB, more than a slot of the 2 kB chunks the tests use."""
    events = []
    for i in range(400):
        name = f'void k<{i}>(S) "}}, {{"' if i % 3 else f"gemm_{i}"
        if i == giant_at:
            name = "g" * 20_000
        events.append(_kernel(i, name))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


class _Spy:
    """Counts what ``Ring.put`` did (the real method runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stored = self.refused = 0
        real = kineto_shm.Ring.put

        def put(ring: kineto_shm.Ring, pieces: Any, length: int) -> Any:
            where = real(ring, pieces, length)
            if where is None:
                self.refused += 1
            else:
                self.stored += 1
            return where

        monkeypatch.setattr(kineto_shm.Ring, "put", put)


def _same(a: Any, b: Any) -> None:
    for name in ("kernels", "ranges", "devices"):
        assert_frame_equal(a.frame(name), b.frame(name))
    assert (a.partial, a.warnings) == (b.partial, b.warnings)


@pytest.mark.parametrize("giant_at", [None, 0, 200, 399])
def test_reads_through_the_ring_match_the_whole_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, giant_at: int | None
) -> None:
    path = _trace(tmp_path, giant_at)
    whole = read_kineto(path, workers=1, chunk_bytes=WHOLE)
    assert whole.frame("kernels").height == 400
    before = _blocks()
    spy = _Spy(monkeypatch)
    _same(whole, read_kineto(path, workers=2, chunk_bytes=2048))
    assert spy.stored > 10  # the text went through shared memory ...
    if giant_at is not None:
        assert spy.refused >= 1  # ... except the chunk too big for a slot, which took the pipe
    assert _blocks() == before and not kineto_shm._OPEN  # nothing left behind


def test_without_shared_memory_the_pipe_gives_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _trace(tmp_path)
    whole = read_kineto(path, workers=1, chunk_bytes=WHOLE)
    monkeypatch.setattr(kineto_shm, "SHM_DIR", str(tmp_path / "missing"))
    spy = _Spy(monkeypatch)
    _same(whole, read_kineto(path, workers=2, chunk_bytes=2048))
    assert spy.stored == spy.refused == 0


def test_a_read_task_decodes_in_its_own_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parallel import's read task (a Ray task is no ``multiprocessing`` child) reads a large trace in its own
    process: it has one core, and one decoding process per core of the node would oversubscribe it."""
    from tracekit.analyzers import workers
    from tracekit.analyzers.parallel import ReadJob, read_task
    from tracekit.analyzers.readers.kineto import stream as kineto_stream

    monkeypatch.setattr(workers, "POOL_MIN_BYTES", 0)  # every file counts as large
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(8)))
    assert workers.default_workers(1) == 8
    with workers.in_one_process():
        assert workers.default_workers(1) == 1
    assert workers.default_workers(1) == 8

    pools: list[int] = []
    real = kineto_stream.Decoder.__init__

    def init(self: Any, workers: int, slot_bytes: int | None = None) -> None:
        pools.append(workers)
        real(self, workers, slot_bytes)

    monkeypatch.setattr(kineto_stream.Decoder, "__init__", init)
    src = _trace(tmp_path)
    raw = tmp_path / "raw" / src.name
    job = ReadJob(0, str(src), str(raw), f"raw/{src.name}", True, stage=str(tmp_path / "stage"))
    (tmp_path / "raw").mkdir()
    res = read_task(job)
    assert res.imported and res.rows["kernels"] == 400
    assert pools == [1]


def test_reads_in_threads_at_once_keep_their_own_text(tmp_path: Path) -> None:
    """Each thread decodes from its own scratch buffer: two reads at once in one process (a thread pool reading
    many traces) give what each gives alone."""
    import threading

    paths = []
    for j in range(3):
        d = tmp_path / str(j)
        d.mkdir()
        paths.append(_trace(d, giant_at=None if j == 0 else 100 * j))
    alone = [read_kineto(p, workers=1, chunk_bytes=2048) for p in paths]
    got: dict[int, Any] = {}

    def read(j: int) -> None:
        for _ in range(3):
            got[j] = read_kineto(paths[j], workers=1, chunk_bytes=2048)

    threads = [threading.Thread(target=read, args=(j,)) for j in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for j in range(3):
        _same(alone[j], got[j])
