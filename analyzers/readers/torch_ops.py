"""GEMM shapes of PyTorch operators, from what the profilers record about each call.

Two formats carry a PyTorch op's input sizes:

* Kineto (``torch.profiler`` with ``record_shapes=True``): each ``cpu_op`` event has ``args["Input Dims"]`` (one
  list of sizes per input, ``[]`` for scalars and ``None``), ``args["Input type"]`` (``"c10::BFloat16"``,
  ``"float"``, ``"Scalar"``, ...) and, with ``with_flops=True``, ``args["flops"]`` for the ops PyTorch counts
  (mm, addmm, bmm, baddbmm: ``torch/csrc/profiler/util.cpp``, ``computeFlops``).
* NVTX ranges written by ``torch.autograd.profiler.emit_nvtx(record_shapes=True)``: the range text is
  ``"<op>, seq = <n>, op_id = <id>, sizes = [[1024, 6144], [6144, 2048]], input_op_ids = [(3,0), (4,0)]"``
  (``getNvtxStr`` and ``shapesToStr`` in ``torch/csrc/profiler/util.cpp``; ``seq``, ``op_id``, ``sizes`` and
  ``input_op_ids`` each appear only when known). It has sizes but no dtypes.

The operand layout per op (PyTorch's signatures; M x K times K x N, ``batch`` independent products):

=====================================  =============================================================================
op                                     inputs
=====================================  =============================================================================
``mm``                                 A [M, K], B [K, N]
``addmm``, ``_addmm_activation``       bias, A [M, K], B [K, N]
``bmm``                                A [b, M, K], B [b, K, N]
``baddbmm``                            bias, A [b, M, K], B [b, K, N]
``addbmm``                             bias, A [b, M, K], B [b, K, N] (the b products are summed)
``matmul``                             A [..., M, K] (or [K]), B [..., K, N] (or [K]); a 2-D B folds A's leading
                                       dims into M (what ``matmul`` itself does), else they broadcast into b
``linear``                             input [..., K], weight [N, K], bias: M = the product of input's leading dims
``_scaled_mm``                         A [M, K], B [K, N] (fp8), scale_a, scale_b, bias, scale_result, out_dtype
``_grouped_mm``, ``_scaled_grouped_mm``  2-D A [sum M, K] with 3-D B [g, K, N] (MoE experts: M is the rows of all
                                       groups, b = 1); 3-D A [g, M, K] with 3-D B [g, K, N] (b = g); 2-D with 2-D
                                       (groups split K: the full K, b = 1)
=====================================  =============================================================================

``m * n * k * batch * 2`` is the op's multiply-add FLOPs; PyTorch's own ``flops`` for addmm / baddbmm assumes
alpha = beta = 1 and, like the shape, leaves the bias add out.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from tracekit import naming

__all__ = ["GEMM_OPS", "OpShape", "gemm_op_name", "is_gemm_op", "nvtx_op_shape", "op_shape"]

GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::_addmm_activation",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
        "aten::_grouped_mm",
        "aten::_scaled_grouped_mm",
    }
)
"""PyTorch operators whose calls are GEMMs: their ``cpu_op`` events (Kineto) and NVTX ranges (emit_nvtx) become
``ranges`` rows with ``range_kind == "gemm-op"``."""

_MAX_DIM = 1 << 62
_BIAS_FIRST = frozenset({"addmm", "_addmm_activation", "baddbmm", "addbmm"})

# c10::ScalarType ordinals that a ``_scaled_mm`` out_dtype concrete input may hold (c10/core/ScalarType.h).
_SCALAR_TYPES = {"5": "fp16", "6": "fp32", "15": "bf16", "23": "e5m2", "24": "e4m3"}
_C_TYPES = {"unsigned char": "uint8", "signed char": "int8", "int": "int32", "long": "int64"}


@dataclass(frozen=True)
class OpShape:
    """One GEMM op call: ``op`` without the ``aten::`` prefix, M, N, K, independent products ``batch``, dtypes."""

    op: str
    m: int | None = None
    n: int | None = None
    k: int | None = None
    batch: int | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None

    @property
    def flops(self) -> float | None:
        """2 x M x N x K x batch, None when a dimension is unknown."""
        if None in (self.m, self.n, self.k):
            return None
        return 2.0 * self.m * self.n * self.k * (self.batch or 1)  # type: ignore[operator]


TRITON_GEMM = re.compile(
    r"^triton_tem_fused_(?:\w*_)?(mm|bmm|addmm|baddbmm|addmv|mm_plus_mm|int_mm|scaled_mm)(?:_|$)"
)
"""torch.compile's GEMM templates (tracekit/data/kernel_classes.json, family ``triton-template-mm``): under the
PyTorch profiler Inductor records each Triton kernel's launch as a ``cpu_op`` of the kernel's name with its
arguments' ``Input Dims`` / ``Input type`` (``kernel_backend: triton``), and no aten GEMM op around it."""


def is_gemm_op(name: object) -> bool:
    """Whether a profiler op (``cpu_op`` name) is a GEMM op with shapes to read: a PyTorch GEMM operator
    (:data:`GEMM_OPS`) or an Inductor GEMM template's launch (:data:`TRITON_GEMM`)."""
    return isinstance(name, str) and (name in GEMM_OPS or TRITON_GEMM.match(name) is not None)


def gemm_op_name(name: object) -> str | None:
    """``"aten::mm"`` -> ``"mm"``; ``"aten::mm, seq = 4, op_id = 9, sizes = ..."`` (emit_nvtx) -> ``"mm"``;
    None when the name is not a GEMM op."""
    if not isinstance(name, str):
        return None
    head = name.split(",", 1)[0].strip()
    if head in GEMM_OPS:
        return head.removeprefix("aten::")
    m = TRITON_GEMM.match(head)
    return m.group(1) if m else None


def _dims(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(d) is int and d >= 0 for d in value):
        return value
    return None


def dtype_name(text: object) -> str | None:
    """A profiler's dtype text (``c10::BFloat16``, ``float``, ``c10::Float8_e4m3fn``) -> tracekit's short name;
    None for non-tensors (``Scalar``, ``""``)."""
    if not isinstance(text, str) or not text or text in ("Scalar", "ScalarList", "TensorList", "GenericList"):
        return None
    text = text.removeprefix("c10::")
    return _C_TYPES.get(text) or naming.canonical_dtype(text)


def op_shape(name: str, dims: Any, types: Any = None, concrete: Any = None) -> OpShape | None:
    """The shape of one call of GEMM op ``name`` from its input sizes (and dtypes, concrete inputs where
    known); None when ``name`` is not a GEMM op. Sizes that do not fit the op's signature give null M, N, K."""
    op = gemm_op_name(name)
    if op is None:
        return None
    dims = dims if isinstance(dims, list) else []
    types = types if isinstance(types, list) else []
    if TRITON_GEMM.match(name):
        return _template_shape(op, dims, types)
    first = 1 if op in _BIAS_FIRST else 0
    a = _dims(dims[first]) if len(dims) > first else None
    b = _dims(dims[first + 1]) if len(dims) > first + 1 else None
    ta = dtype_name(types[first]) if len(types) > first else None
    tb = dtype_name(types[first + 1]) if len(types) > first + 1 else None
    out = ta
    if op in ("_scaled_mm", "_scaled_grouped_mm"):
        out = None
        if isinstance(concrete, list):
            for value in concrete[2:]:  # out_dtype is the only small integer among the trailing arguments
                if isinstance(value, str) and value in _SCALAR_TYPES:
                    out = _SCALAR_TYPES[value]
                    break
        out = out or ta
    shape = OpShape(op=op, dtype_a=ta, dtype_b=tb, dtype_out=out)
    mnkb = _mnkb(op, a, b)
    if mnkb is None or max(mnkb) >= _MAX_DIM:  # a damaged file's sizes must not overflow the Int64 columns
        return shape
    m, n, k, batch = mnkb
    return OpShape(op, m, n, k, batch, ta, tb, out)


def _template_shape(op: str, dims: list[Any], types: list[Any]) -> OpShape:
    """The shape of an Inductor GEMM template's launch from its kernel arguments' sizes. The arguments are the
    template's buffers in the order Inductor names them (prologue and epilogue inputs among them), so the GEMM is
    found by its sizes, not its places: the first A [M, K] and B [K, N] (or B as the weight [N, K]) for which an
    output [M, N] is also among the arguments; with a batch dimension, [b, M, K], [b, K, N] and [b, M, N]."""
    sizes = [(i, d) for i, x in enumerate(dims) if (d := _dims(x)) is not None and len(d) in (2, 3)]
    have = {tuple(d) for _, d in sizes}

    def dtype(i: int) -> str | None:
        return dtype_name(types[i]) if i < len(types) else None

    for ia, a in sizes:
        for ib, b in sizes:
            if ib == ia or len(a) != len(b):
                continue
            lead = a[:-2]
            if lead != b[:-2]:
                continue
            m, k = a[-2], a[-1]
            if b[-2] == k and (*lead, m, b[-1]) in have and (b[-1] != k or ib > ia):
                n = b[-1]
            elif b[-1] == k and (*lead, m, b[-2]) in have and b[-2] != k:
                n = b[-2]  # the weight as stored, [N, K]
            else:
                continue
            if max(m, n, k) >= _MAX_DIM:
                break
            ta, tb = dtype(ia), dtype(ib)
            return OpShape(op, m, n, k, lead[0] if lead else 1, ta, tb, ta)
    return OpShape(op)


def _mnkb(op: str, a: list[int] | None, b: list[int] | None) -> tuple[int, int, int, int] | None:
    if a is None or b is None:
        return None
    if op == "linear":  # weight [N, K]
        if len(b) != 2 or not a or a[-1] != b[1]:
            return None
        return math.prod(a[:-1]), b[0], b[1], 1
    if op in ("mm", "addmm", "_addmm_activation", "_scaled_mm"):
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            return None
        return a[0], b[1], a[1], 1
    if op in ("bmm", "baddbmm", "addbmm"):
        if len(a) != 3 or len(b) != 3 or a[2] != b[1]:
            return None
        return a[1], b[2], a[2], a[0]
    if op in ("_grouped_mm", "_scaled_grouped_mm"):
        if len(a) == 2 and len(b) == 3 and a[1] == b[1]:
            return a[0], b[2], a[1], 1
        if len(a) == 3 and len(b) == 3 and a[2] == b[1]:
            return a[1], b[2], a[2], a[0]
        if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
            return a[0], b[1], a[1], 1
        if len(a) == 3 and len(b) == 2 and a[2] == b[0]:
            return a[0] * a[1], b[1], a[2], 1
        return None
    if op == "matmul":
        if not a or not b:
            return None
        a2 = [1, a[0]] if len(a) == 1 else a
        b2 = [b[0], 1] if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            return None
        if len(b2) == 2:  # A's leading dims fold into M
            return math.prod(a2[:-1]), b2[1], a2[-1], 1
        lead_a, lead_b = a2[:-2], b2[:-2]
        width = max(len(lead_a), len(lead_b))
        lead_a = [1] * (width - len(lead_a)) + lead_a
        lead_b = [1] * (width - len(lead_b)) + lead_b
        batch = 1
        for x, y in zip(lead_a, lead_b, strict=True):
            if x != y and 1 not in (x, y):
                return None
            batch *= max(x, y)
        return a2[-2], b2[-1], a2[-1], batch
    return None


_SIZES = re.compile(r",\s*sizes = \[")


def nvtx_op_shape(text: str) -> OpShape | None:
    """The shape of an emit_nvtx range (``"aten::mm, seq = 3, op_id = 7, sizes = [[16, 32], [32, 8]]"``); a
    GEMM op without ``sizes`` (record_shapes off) gives an OpShape with null M, N, K; None for other ranges."""
    op = gemm_op_name(text)
    if op is None:
        return None
    match = _SIZES.search(text)
    if match is None:
        return OpShape(op=op)
    start = match.end() - 1
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                try:
                    dims = json.loads(text[start : i + 1])
                except ValueError:
                    return OpShape(op=op)
                return op_shape(text.split(",", 1)[0].strip(), dims) or OpShape(op=op)
    return OpShape(op=op)
