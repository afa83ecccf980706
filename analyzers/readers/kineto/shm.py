"""Shared memory that carries chunk text from the process inflating a trace to the processes decoding it.

Sent through a pipe, each 32 MB chunk was pickled, written in 64 KiB pieces, read back and unpickled: on a
1M-kernel trace (2.2 GB of text) the two workers of a 2-core machine spent about a third of their CPU time in
``read`` and in page faults on the fresh buffers, and two workers were barely faster than one process
(docs/PERFORMANCE.md). Here the reading process copies each chunk
into a slot of a ``Ring`` (one shared block, faulted in once) and sends only the slot's name and offset; the
worker copies the text out into its own reused buffer and decodes it there.

A slot is taken when a chunk is submitted and given back when its result has been taken, so the ring needs one
slot per job in flight. A chunk that does not fit a slot, or a machine without room in ``/dev/shm`` (a container's
default is 64 MB), falls back to the pipe: slower, never wrong.
"""

from __future__ import annotations

import os
import secrets
from contextlib import suppress
from multiprocessing.shared_memory import SharedMemory

SHM_DIR = "/dev/shm"
HEADROOM = 2
"""The ring is made only where ``/dev/shm`` has this many times its size free: writing past what a tmpfs holds
kills the process with SIGBUS instead of raising an error."""

_OPEN: dict[str, SharedMemory] = {}
"""Blocks this process has made or attached, by name (a worker attaches each once)."""


def block_name(pid: int | None = None) -> str:
    """A new block's name, ``tk<pid>_<8 hex>`` (short enough for macOS' 31 characters): a block left in /dev/shm
    names the process that made it, and a test can tell its own blocks from other programs' ``psm_*`` ones."""
    return f"{block_prefix(pid)}{secrets.token_hex(4)}"


def block_prefix(pid: int | None = None) -> str:
    """The name prefix of every block the process ``pid`` (default: this one) makes."""
    return f"tk{os.getpid() if pid is None else pid}_"


class Ring:
    """``slots`` slots of ``slot_bytes`` each in one shared-memory block (made by ``Ring.make``)."""

    def __init__(self, shm: SharedMemory, slots: int, slot_bytes: int) -> None:
        self.shm = shm
        self.slot_bytes = slot_bytes
        self.free = list(range(slots - 1, -1, -1))
        _OPEN[shm.name] = shm

    @classmethod
    def make(cls, slots: int, slot_bytes: int) -> Ring | None:
        """A ring, or None where shared memory is missing or too small (the caller then uses the pipe)."""
        size = slots * slot_bytes
        try:
            st = os.statvfs(SHM_DIR)
        except (OSError, AttributeError):  # no such folder (macOS), no statvfs (Windows)
            return None
        if st.f_bavail * st.f_frsize < HEADROOM * size:
            return None
        try:
            shm = SharedMemory(name=block_name(), create=True, size=size)
        except (OSError, ValueError):  # FileExistsError included: the pipe carries the text instead
            return None
        return cls(shm, slots, slot_bytes)

    def put(self, pieces: list[bytes] | bytes, length: int) -> tuple[str, int] | None:
        """Copy the first ``length`` bytes of ``pieces`` into a free slot; returns (block name, offset), or None
        when it does not fit or no slot is free."""
        if length > self.slot_bytes or not self.free:
            return None
        at = self.free.pop() * self.slot_bytes
        copy_into(self.shm.buf[at : at + length], pieces)
        return self.shm.name, at

    def release(self, where: tuple[str, int]) -> None:
        """Give a slot back (its chunk's result has been taken)."""
        self.free.append(where[1] // self.slot_bytes)

    def close(self) -> None:
        """Unmap and remove the block (the workers' mappings go with their processes)."""
        _OPEN.pop(self.shm.name, None)
        with suppress(BufferError):  # a view still open somewhere: the mapping goes when the process does
            self.shm.close()
        with suppress(FileNotFoundError):
            self.shm.unlink()


def copy_into(dst: memoryview, pieces: list[bytes] | bytes) -> None:
    """Fill ``dst`` with the first ``len(dst)`` bytes of ``pieces`` (one string or the blocks it spans)."""
    at, end = 0, len(dst)
    for p in pieces if isinstance(pieces, list) else [pieces]:
        if at >= end:
            break
        take = min(len(p), end - at)
        dst[at : at + take] = p if take == len(p) else memoryview(p)[:take]
        at += take


def view(where: tuple[str, int], length: int) -> memoryview:
    """``length`` bytes at a slot (attaching the block on first use in this process)."""
    name, at = where
    shm = _OPEN.get(name)
    if shm is None:
        shm = _OPEN[name] = SharedMemory(name=name)
    return shm.buf[at : at + length]
