"""GPU names as the tools spell them, and whether a name is a catalog alias.

Nsight Compute, Nsight Systems, the PyTorch profiler and ROCm each print the name the driver gives
(``"NVIDIA GeForce RTX 4060 Ti"``, ``"Tesla V100-SXM2-32GB"``, ``"NVIDIA H100 80GB HBM3"``, ``"AMD Instinct MI250X /
MI250"``). A name matches an alias when the alias's words appear in it, in order and side by side, and every other
word of the name says nothing about which part it is: a vendor or brand word, a memory type, or a memory size (which
must then agree with the entry's). Any other left-over word is a different part: ``"H100 NVL"`` is not ``"H100"``,
``"RTX 4060 Ti"`` is not ``"RTX 4060"``; and words are compared whole, so ``"A10"`` never matches ``"A100"``.

Pure functions on strings; the catalog itself is :mod:`tracekit.devices`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "NEUTRAL_WORDS",
    "AliasMatch",
    "is_amd_name",
    "match_alias",
    "memory_fits",
    "normalize_name",
]

NEUTRAL_WORDS = frozenset({"nvidia", "amd", "geforce", "tesla", "instinct"})
"""Words that name the vendor or brand, not the part."""

MEMORY_TYPES = frozenset({"hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"})
_MEMORY_SIZE = re.compile(r"^(\d+(?:\.\d+)?)gb?$")
MEMORY_TOLERANCE = 0.12
"""How far a stated or reported memory size may sit from the datasheet's: drivers report a little less than the
marketed size (an 80 GB A100 reports 79.2 GiB, a 141 GB H200 139.8 GiB), while sibling parts differ by 2x."""


def normalize_name(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``"a100 sxm4 80gb"``: lower case, no ``nvidia``, no parenthesised text,
    ``- _ / , : ;`` as spaces, single spaces."""
    text = name.lower()
    text = re.sub(r"\(.*?\)", " ", text)
    text = re.sub(r"[-_/,:;]+", " ", text)
    text = re.sub(r"\bnvidia\b", " ", text)
    return " ".join(text.split())


def is_amd_name(words: Sequence[str]) -> bool:
    """Whether a normalized name is an AMD GPU's (``amd``, ``radeon``, ``instinct`` or a ``gfx`` target)."""
    return any(w in ("amd", "radeon", "instinct") or re.fullmatch(r"gfx\d+[a-z]?", w) for w in words)


@dataclass(frozen=True)
class AliasMatch:
    """An alias found in a name: ``score`` grows with the alias's length (the more specific alias wins) and is
    highest when the alias is the whole name; ``memory_gb`` are the memory sizes the other words state."""

    score: int
    memory_gb: tuple[float, ...]


def match_alias(alias: Sequence[str], name: Sequence[str]) -> AliasMatch | None:
    """Where the words of ``alias`` occur side by side in ``name`` and every other word of ``name`` is neutral
    (:data:`NEUTRAL_WORDS`, a memory type or a memory size); None otherwise."""
    n = len(alias)
    if not n or n > len(name):
        return None
    for start in range(len(name) - n + 1):
        if list(name[start : start + n]) != list(alias):
            continue
        sizes: list[float] = []
        for word in (*name[:start], *name[start + n :]):
            size = _MEMORY_SIZE.match(word)
            if size:
                sizes.append(float(size.group(1)))
            elif word not in NEUTRAL_WORDS and word not in MEMORY_TYPES:
                return None
        exact = n == len(name)
        return AliasMatch(score=10 * n + (1000 if exact else 0), memory_gb=tuple(sizes))
    return None


def memory_fits(datasheet_gb: Sequence[float], stated_gb: float) -> bool:
    """Whether a stated or reported size (GB or GiB alike) is one of the datasheet's sizes, within
    :data:`MEMORY_TOLERANCE`."""
    return any(abs(stated_gb - gb) <= MEMORY_TOLERANCE * gb for gb in datasheet_gb)
