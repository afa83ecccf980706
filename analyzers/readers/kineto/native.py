"""A chunk of the event array -> a ``Part``, through the C scanner (``_scan.c``) where it is built.

``part.make_part`` needs msgspec to build one Python object per event (11M of them in a 1M-kernel trace) and
Python to sort them; per 216k-event chunk that is 0.24 s of decoding and 0.35 s of sorting and column building,
most of a Kineto import's CPU. The scanner reads the text once and hands back arrays: the kept events'
category, ``ph``, name (an index into the chunk's distinct strings), ``pid`` / ``tid``, times in ns and, from
``args``, the fields the frames use (the encode names of ``part._Args``). ``scanned.py`` turns the arrays into
the columns ``make_part`` builds, so the two give equal frames (tests/readers/test_kineto_native.py).

This module is the seam: whether the scanner is there (``AVAILABLE``: built at install time where a C compiler
was found, and not turned off by ``TRACEKIT_NO_SCANNER``), the call, and the size below which the reader does
not use it (``MIN_BYTES``). The scanner declines (``scan_part`` returns None) whatever it is not sure of (see
``_scan.c``); then ``decode.py`` and ``make_part`` read the text, as they read everything where the scanner
was not built.
"""

from __future__ import annotations

import os

import msgspec

from .decode import Form, Meta
from .part import (
    _BUCKET,
    STEP_CATS,
    Part,
    _Args,
)

DISABLE_ENV = "TRACEKIT_NO_SCANNER"
"""Set (to anything but "" or "0"), every chunk is decoded the general way: to compare the two, or to rule the
scanner out when a result looks wrong. Read at import (worker processes inherit it)."""

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: every chunk goes the general way
    _scan = None
if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
    _scan = None

AVAILABLE = _scan is not None
"""Whether the C scanner was built with this install (and not turned off by ``TRACEKIT_NO_SCANNER``)."""

_CATS = tuple(_BUCKET)
_CAT_BYTES = tuple((c.encode(), c not in STEP_CATS) for c in _CATS)
"""Each kept category, and whether the scanner reads its events' ``args`` (not for ``cpu_op``: a trace holds
millions and the frames use the args of a few, steps' and GEMM ops', which ``part.py`` decodes itself)."""
_FIELDS = {f.name: f.encode_name for f in msgspec.structs.fields(_Args)}
_DIMS = tuple(name for name in _FIELDS if name in ("grid", "block"))
"""The fields holding [x, y, z], in the order the scanner numbers them (that of the keys)."""
_KEYS = tuple((_FIELDS[name].encode(), name in _DIMS) for name in _FIELDS)
"""The ``args`` fields the scanner reads (their JSON names), and whether each holds [x, y, z]."""
_KEY_AT = {name: i for i, name in enumerate(_FIELDS)}
MIN_BYTES = 16 << 20
"""Documents with less text than this are decoded the general way by the reader (``stream.py``): below it the
scanner's saving (about 7 ms per MB) does not pay for importing numpy (0.09 s), which building its columns
needs. ``scan_part`` itself reads any size."""


def scan_part(doc: bytes | bytearray | memoryview, form: Form) -> tuple[Part, int, Meta] | None:
    """The part of a document (``"list"``: a chunk ``[event, ...]``; ``"object"``: a trace with
    ``traceEvents``), its event count and metadata, or None where the scanner is not built or declines the text
    (the caller decodes it the general way, ``decode.decode``)."""
    if _scan is None:
        return None
    got = _scan.scan(doc, _CAT_BYTES, _KEYS, form == "object")
    if got is None:
        return None
    meta = Meta()
    if form == "object":
        # got["meta"]: where deviceProperties, distributedInfo, baseTimeNanoseconds are (Meta's order)
        try:
            found = [msgspec.json.decode(doc[o : o + n]) if o >= 0 else None for o, n in got["meta"]]
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # e.g. an integer past 64 bits: the general way reads it
        meta = Meta(*found)
    from .scanned import build  # numpy: imported by the first read that uses the scanner

    return build(got, doc), got["count"], meta


def release() -> None:
    """Free the memory the scanner keeps for its next chunks' records (``_scan.c``'s pool: reusing it spares the
    page faults of fresh memory for every chunk). Called at the end of each read."""
    if _scan is not None:
        _scan.release()


def environ(scanner: bool) -> dict[str, str]:
    """This process's environment for a child process that reads with the scanner (where it is built) or
    without it (``DISABLE_ENV`` set): to compare the two ways on the same file."""
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    if not scanner:
        env[DISABLE_ENV] = "1"
    return env
