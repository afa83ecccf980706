"""The kernel-class table (tracekit/data/kernel_classes.json) loaded and compiled once (in tracekit core: the
analyzers classify with it, and the capture chooses which kernels its ncu pass profiles): library families with
their name and template-argument patterns, the dtype code tables of the name decoders, and the launching-op table.

The JSON is the single place patterns live (docs/KERNELS.md explains each); this module only turns it into
compiled regular expressions and small frozen records, and checks that every entry names a known class and
decoder, so a mistyped table fails at import with the entry's name rather than classifying silently wrong.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

CLASSES = (
    "gemm",
    "attention",
    "convolution",
    "communication",
    "normalization",
    "softmax",
    "activation",
    "quantize",
    "splitk-reduce",
    "layout",
    "rng",
    "memory",
    "reduction",
    "elementwise",
    "other",
)
"""Every kernel class, in the order the table documents them."""

DECODERS = ("nvjet", "xmma", "mnemonic", "trtllm", "tensile", "cublas", "types")
"""Name decoders a family's ``dtype`` may name (tracekit/kernel_names.py)."""


@dataclass(frozen=True)
class Family:
    """One library family of the table: a class and the patterns that select it."""

    family: str
    kernel_class: str
    library: str
    name: re.Pattern[str] | None
    args: re.Pattern[str] | None
    not_name: re.Pattern[str] | None
    not_args: re.Pattern[str] | None
    dtype: tuple[str, ...]
    """Decoders tried in order, or one fixed canonical dtype (``("fp32",)``), or empty: no rate class."""
    examples: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class OpRule:
    """A launching CPU op pattern (``aten::silu``, ``nccl:all_reduce``) and the class it gives to the kernels
    whose name class is one of ``over`` (by default the generic ``elementwise`` and ``other``; a convolution op
    takes every kernel it launched, the GEMM-named ones cuDNN runs for it included; an attention op its softmax). ``family``: the family such a kernel gets (null: the
    name's)."""

    op: re.Pattern[str]
    kernel_class: str
    source: str
    over: tuple[str, ...] = ("elementwise", "other")
    family: str | None = None


@dataclass(frozen=True)
class Table:
    """The compiled table."""

    version: int
    classes: dict[str, str]
    """class -> definition"""
    families: tuple[Family, ...]
    ops: tuple[OpRule, ...]
    nvjet_letters: dict[str, str]
    xmma_types: dict[str, str]
    mnemonic_elements: dict[str, str]
    mnemonic_shapes: dict[str, str | dict[str, str]]
    mnemonic_simt: dict[str, str]
    trtllm_types: dict[str, str]
    tensile_types: dict[str, str]
    type_words: tuple[tuple[str, str], ...]
    """(pattern, canonical dtype), in order: combined into one alternation by the ``types`` decoder."""
    raw: dict[str, Any]


def _compile(pattern: str | None, case: bool) -> re.Pattern[str] | None:
    if not pattern:
        return None
    return re.compile(pattern, 0 if case else re.IGNORECASE)


def _family(entry: dict[str, Any]) -> Family:
    name = entry.get("family") or "?"
    cls = entry.get("class")
    if cls not in CLASSES:
        raise ValueError(f"kernel_classes.json: family {name!r} has unknown class {cls!r}")
    if not entry.get("name") and not entry.get("args"):
        raise ValueError(f"kernel_classes.json: family {name!r} has neither a name nor an args pattern")
    dtype = entry.get("dtype") or ()
    dtype = (dtype,) if isinstance(dtype, str) else tuple(dtype)
    case = bool(entry.get("case"))
    try:
        return Family(
            family=name,
            kernel_class=cls,
            library=entry.get("library") or "",
            name=_compile(entry.get("name"), case),
            args=_compile(entry.get("args"), case),
            not_name=_compile(entry.get("not_name"), case),
            not_args=_compile(entry.get("not_args"), case),
            dtype=dtype,
            examples=tuple(entry.get("examples") or ()),
            source=entry.get("source") or "",
        )
    except re.error as exc:
        raise ValueError(f"kernel_classes.json: family {name!r} has a bad pattern ({exc})") from exc


def _op(entry: dict[str, Any]) -> OpRule:
    cls = entry.get("class")
    if cls not in CLASSES:
        raise ValueError(f"kernel_classes.json: op {entry.get('op')!r} has unknown class {cls!r}")
    over = tuple(entry.get("over") or ("elementwise", "other"))
    if bad := [c for c in over if c not in CLASSES]:
        raise ValueError(f"kernel_classes.json: op {entry.get('op')!r} is over unknown classes {bad}")
    return OpRule(
        re.compile(entry["op"], re.IGNORECASE),
        cls,
        entry.get("source") or "",
        over,
        entry.get("family") or None,
    )


@functools.cache
def load_table() -> Table:
    """The table shipped with tracekit, compiled (once per process)."""
    text = resources.files("tracekit.data").joinpath("kernel_classes.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    classes = {c["class"]: c["definition"] for c in raw["classes"]}
    if tuple(classes) != CLASSES:
        raise ValueError(f"kernel_classes.json: classes {tuple(classes)} differ from {CLASSES}")
    mn = raw["mnemonics"]
    families = tuple(_family(e) for e in raw["families"])
    ops = tuple(_op(e) for e in raw["ops"])
    known = {f.family for f in families}
    if bad := [o.family for o in ops if o.family is not None and o.family not in known]:
        raise ValueError(f"kernel_classes.json: ops name unknown families {bad}")
    return Table(
        version=int(raw["version"]),
        classes=classes,
        families=families,
        ops=ops,
        nvjet_letters=dict(raw["nvjet_letters"]["letters"]),
        xmma_types=dict(raw["xmma_types"]["types"]),
        mnemonic_elements=dict(mn["elements"]),
        mnemonic_shapes=dict(mn["shapes"]),
        mnemonic_simt=dict(mn["simt"]),
        trtllm_types=dict(raw["trtllm_types"]["types"]),
        tensile_types=dict(raw["tensile_types"]["types"]),
        type_words=tuple((p, d) for p, d in raw["type_words"]["words"]),
        raw=raw,
    )
