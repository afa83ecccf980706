"""How many workers to start: one rule for the import (files at once, in processes) and the readers (one file's
chunks at once, in threads), so the two never multiply into more workers than cores."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from contextlib import contextmanager

THREADS_MIN_BYTES = 48 << 20
"""A file with more text than this (two chunks and more) is decoded by several worker threads: a thread costs
nothing to start."""
MAX_WORKERS = 8
"""Each worker decoding a file's chunks holds a few chunks and their events (~0.4 GB). On this project's 2-core
machine two workers read 1M Kineto kernels in 10.6-14.5 s against 16-22 s in one process (docs/PERFORMANCE.md)."""

_ONE_PROCESS: list[bool] = []


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_workers(text_bytes: int | None = None) -> int:
    """Workers to start by default.

    For an import of several files (``text_bytes`` None): one per core. For the decode of one file of about
    ``text_bytes`` of text (in threads): none (1: decode here) for a small file (:data:`THREADS_MIN_BYTES`),
    inside a worker process or a task
    (:func:`in_one_process`: whoever runs it already spreads files over the cores) or on one core; else one per
    core, at most :data:`MAX_WORKERS`."""
    if text_bytes is None:
        return cores()
    small = text_bytes < THREADS_MIN_BYTES
    if small or _ONE_PROCESS or multiprocessing.parent_process() is not None:
        return 1
    return min(cores(), MAX_WORKERS)


@contextmanager
def in_one_process() -> Iterator[None]:
    """Within this block, reads decode in the calling process by default. For one file per core run by
    something that is not a ``multiprocessing`` child (a Ray task is started by Ray's own worker pool): a task
    given one CPU must not start one decoding process per core of its node."""
    _ONE_PROCESS.append(True)
    try:
        yield
    finally:
        _ONE_PROCESS.pop()
