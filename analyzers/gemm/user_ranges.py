"""What a range name says about the user's own ranges: a profiler's per-operator range told apart from a range
the user named (:func:`is_op_range`), the per-call counters a profiler adds dropped (:func:`range_key`), and a
range named like a GEMM (its unknown kernel is the GEMM: ``sgemm_smem`` around ``simt_kernel``)."""

from __future__ import annotations

import re

from .names import is_gemm_kernel

_OP_RANGE = re.compile(
    r"^[A-Za-z_]\w*::\w+|, (?:seq|op_id) = \d+"
    r"|^## Call CompiledFxGraph \w+ ##$|^Torch-Compiled Region: [\d/]+$|^CompiledFunction$"
)
"""Ranges a profiler or framework writes per operator or per compiled graph, as opposed to the user's own ranges:
PyTorch ``emit_nvtx`` / Kineto ``cpu_op`` (``aten::addmm, seq = 7, op_id = 12``), and torch.compile's
``record_function`` around each call of a compiled graph (Inductor's ``## Call CompiledFxGraph <hash> ##``,
Dynamo's ``Torch-Compiled Region: 0/0``, AOTAutograd's ``CompiledFunction``): a compiled block's GEMMs belong to
the user's range around the call (``block/compiled``), not to the graph's hash."""
_OP_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$")


def is_op_range(name: str | None) -> bool:
    """Whether a range is a profiler's per-operator range rather than one the user named."""
    return bool(name) and bool(_OP_RANGE.search(name))  # type: ignore[arg-type]


def range_key(name: str) -> str:
    """A range name without the per-call counters a profiler adds (``aten::addmm, seq = 7, op_id = 12`` ->
    ``aten::addmm``): every call of one op is an instance of one range."""
    return _OP_SUFFIX.sub("", name).strip()


_GEMM_RANGE = re.compile(
    r"gemm|matmul|(?<![a-z])(?:mm|bmm|addmm|linear|mma|dot|fc|proj)(?![a-z])", re.IGNORECASE
)
"""A user range whose name says it runs a GEMM: its longest kernel is the GEMM even when the kernel's name does
not say so (a SIMT kernel ``simt_kernel`` inside a range ``sgemm_smem``)."""


def _gemm_like(name: str | None, gemm_names: set[str]) -> bool:
    """A GEMM kernel by Nsight Compute's counters (tensor math > 0: ``gemm_names``) or by its name."""
    return bool(name) and (name in gemm_names or is_gemm_kernel(name))
