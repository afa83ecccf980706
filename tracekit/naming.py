"""The names of tracekit's NVTX ranges: one lossless, filter-safe encoding shared by collectors and analyzers.

A range name is a kind followed by ``key=value`` fields, separated by single spaces::

    gemm backend=torch-fp8 op=scaled_mm M=1024 N=2048 K=6144 a=e4m3 b=e4m3 out=bf16 scale=tensorwise
    aux role=quantize backend=flashinfer-fp4 op=fp4_quantize M=1024 K=6144 a=bf16 out=e2m1 of=gemm

Why this shape: Nsight Compute's ``--nvtx-include`` treats ``/`` and ``,`` as syntax (see DEVICE.md), so a name
must contain neither; ranges are pushed in tracekit's own NVTX domain (``DOMAIN``) and selected with
``regex:tracekit@.+/``. Values are restricted to ``[A-Za-z0-9_.+-]``; any other character is percent-escaped
(``%2F`` for ``/``), so ``decode(encode(x)) == x`` for every field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DOMAIN = "tracekit"
"""NVTX domain every tracekit range is pushed in."""

KINDS = ("gemm", "aux", "moe", "step")
"""Range kinds: a GEMM launch, an auxiliary kernel of a GEMM (quantize, reduce, swizzle), a grouped / MoE
launch, and a user step."""

NAME_STARTS = KINDS
"""What every name :func:`decode` or :func:`decode_legacy` parses starts with (its kind; a legacy name is
``gemm/...``): the importer keeps only names that start so before parsing them one by one."""

SKIP_DOMAIN = "tk_unprofiled"
"""Domain for launches that should stay on the timeline but out of ncu (warm-up, launches past the per-range
budget). It must not contain ``tracekit``: ncu matches the domain part of a ``regex:`` filter as an unanchored
search, so a domain ``tracekit_skip`` was profiled by ``regex:tracekit@.+/`` (seen on the H200, 2026-12-02)."""

NCU_FILTER = f"regex:{DOMAIN}@.+/"
"""The ``--nvtx-include`` expression that selects every push/pop range in tracekit's domain."""

_SAFE = re.compile(r"[A-Za-z0-9_.+\-]")


def _escape(value: str) -> str:
    out = []
    for ch in value:
        if _SAFE.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def _unescape(value: str) -> str:
    if "%" not in value:
        return value
    raw = bytearray()
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "%" and re.fullmatch(r"[0-9A-Fa-f]{2}", value[i + 1 : i + 3]):
            raw.append(int(value[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(ch.encode("utf-8"))
            i += 1
    return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class RangeName:
    """A decoded range name: its kind and its ordered fields (all strings)."""

    kind: str
    fields: dict[str, str] = field(default_factory=dict)

    def get_int(self, key: str) -> int | None:
        value = self.fields.get(key)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            return None

    def encode(self) -> str:
        return encode(self.kind, **self.fields)


def encode(kind: str, **fields: object) -> str:
    """Build a range name; ``None`` values are left out, others are turned into escaped strings."""
    if kind not in KINDS:
        raise ValueError(f"unknown range kind {kind!r}; expected one of {KINDS}")
    parts = [kind]
    for key, value in fields.items():
        if value is None:
            continue
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            raise ValueError(f"range field name {key!r} must be an identifier")
        parts.append(f"{key}={_escape(str(value))}")
    return " ".join(parts)


def decode(name: str) -> RangeName | None:
    """Parse a tracekit range name; ``None`` for any name that is not one (user ranges, other tools)."""
    if not name:
        return None
    tokens = name.split(" ")
    if tokens[0] not in KINDS:
        return None
    fields: dict[str, str] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not key:
            return None
        fields[key] = _unescape(value)
    return RangeName(tokens[0], fields)


def decode_legacy(name: str) -> RangeName | None:
    """An older probe's GEMM range name, ``gemm/<dtype>/M=1024,N=2048,K=6144`` (the shared H200 probe's captures
    predate the codec), as the ``gemm`` range it stands for: backend ``torch-<dtype>``, op ``mm``, both operands
    of that dtype, bf16 out for FP8 and FP4, tensorwise-scaled FP8; None for any other name."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != "gemm":
        return None
    dims: dict[str, str] = {}
    for item in parts[2].split(","):
        key, sep, value = item.partition("=")
        if not sep or key not in ("M", "N", "K") or not value.isdecimal():
            return None
        dims[key] = value
    if len(dims) != 3:
        return None
    dtype = canonical_dtype(parts[1])
    dtype = {"fp8": "e4m3"}.get(dtype, dtype)
    fields = {"backend": f"torch-{parts[1]}", "op": "mm", "a": dtype, "b": dtype}
    fields["out"] = "bf16" if dtype in ("e4m3", "e2m1") else dtype
    fields.update(dims)
    if dtype == "e4m3":
        fields["scale"] = "tensorwise"
    return RangeName("gemm", fields)


# --- element types -----------------------------------------------------------------------------------------

DTYPE_BITS: dict[str, float] = {
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,
    "bf16": 16,
    "fp16": 16,
    "e4m3": 8,
    "e5m2": 8,
    "int8": 8,
    "e2m1": 4,
    "int4": 4,
    "ue8m0": 8,
    "ue4m3": 8,
}
"""Storage bits per element of each canonical dtype (FP4 ``e2m1`` is 4 bits; block scales are separate)."""

DTYPE_CLASS: dict[str, str] = {
    "fp64": "fp64",
    "fp32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16",
    "fp16": "fp16",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "int8": "int8",
    "e2m1": "fp4",
    "int4": "int4",
}
"""The tensor-core rate class a GEMM of this input type runs at (a key of the device catalog's peaks)."""

CLASS_BITS: dict[str, float] = {cls: DTYPE_BITS[dtype] for dtype, cls in DTYPE_CLASS.items()}
"""Storage bits per element of a rate class's inputs: a tile's element size where no input type is known."""

_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float64": "fp64",
    "double": "fp64",
    "float8_e4m3fn": "e4m3",
    "float8_e4m3fnuz": "e4m3",
    "fp8_e4m3": "e4m3",
    "float8_e5m2": "e5m2",
    "float8_e5m2fnuz": "e5m2",
    "fp8_e5m2": "e5m2",
    "float4_e2m1fn_x2": "e2m1",
    "fp4": "e2m1",
    "nvfp4": "e2m1",
    "mxfp4": "e2m1",
    "float8_e8m0fnu": "ue8m0",
    "int8": "int8",
    "uint8": "uint8",
}


def canonical_dtype(name: object) -> str:
    """Map a torch dtype (or its string) to tracekit's short name: ``torch.bfloat16`` -> ``bf16``."""
    text = str(name).removeprefix("torch.").lower()
    return _ALIASES.get(text, text)
