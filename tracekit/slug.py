"""Names read from files, made safe to use as one component of a path.

A GPU name, a trace's file name or a backend label comes from a file a stranger may have written: it can be
longer than the file system allows in one component (255 bytes on Linux: ``OSError: [Errno 36] File name too
long``), hold control characters, path separators, ``..`` or nothing at all. Every such name goes through
:func:`slug` before it becomes part of a path: the result is short, made only of ``[a-z0-9._-]`` (or
``[A-Za-z0-9._-]`` with ``lower=False``), never starts with a dot, and is never empty. A name that had to be cut
or changed beyond case and spaces keeps a short hash of the original, so two different long names do not share
a path.
"""

from __future__ import annotations

import hashlib
import re

MAX_CHARS = 64
"""The longest slug :func:`slug` returns by default: well under the 255 bytes of one path component, leaving room
for a prefix (a run name's time stamp) and a suffix (``.json``, ``-1``)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._ -]*")
_HASH_CHARS = 8


def slug(name: str, *, limit: int = MAX_CHARS, lower: bool = True, empty: str = "x") -> str:
    """``name`` as a safe path component of at most ``limit`` characters (ASCII, at least 16).

    Runs of characters outside ``[A-Za-z0-9._-]`` (spaces, separators, control characters, non-ASCII) become
    one ``-``; leading dots and dashes go (no hidden file, no ``..``, no option-like name). Where that changed
    more than spaces and case, or the result is longer than ``limit``, it is cut and ends in ``-`` plus 8 hex
    digits of the original's SHA-256. ``empty`` stands for a name with nothing left."""
    if limit < 16:
        raise ValueError(f"limit must be at least 16, not {limit}")
    text = name.lower() if lower else name
    safe = _UNSAFE.sub("-", text).strip("-").lstrip(".-")
    plain = _PLAIN.fullmatch(text) is not None  # nothing but spaces replaced, nothing stripped but at the end
    if plain and safe and len(safe) <= limit:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    head = safe[: limit - _HASH_CHARS - 1].rstrip("-.") or empty
    return f"{head}-{digest}"
