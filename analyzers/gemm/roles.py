"""Which GEMM call owns each auxiliary kernel of a range (issue 26 item 3): by launch order within the range
instance, on one stream.

A range instance's kernels on one stream, in launch order (start time; the profiled order for Nsight Compute
rows), form a sequence. Kernels that are part of a call (its GEMM kernel, or any kernel of the profiler's operator
range around it) are the call's; every other kernel is *free* and belongs to a call only by its role:

- **before** a call: the run of free kernels right before its first kernel, back to the previous call or to a
  kernel of another role. Its quantize kernels are the call's, and, when the run holds one, the quantizer's
  other steps: the kernels from the quantizer's amax (its ``abs``, else its max reduce) to the call, when the
  run ends in an unbroken chain of quantizer steps (abs, max, scale multiply or divide, reciprocal, clamp, copy,
  fill) that holds one; without an amax (a static or delayed scale), only the divide, reciprocal, clamp and fill
  kernels right before the call. What comes before the quantizer's first step (the RMSNorm's float copy, pow,
  mean, rsqrt and multiplies, the residual add) is the norm's, however the run joins them: on the H100 serve
  sample it was 445 of the 695 us per call charged to the FP8 gate_up GEMM until 2026-12-06.
  A memset (the CUDA API's, not a fill kernel) right before the call, with no other kernel between, is the
  call's: the GEMM library zeroing its workspace (cuBLAS before its split-K / stream-K kernels). Unowned, it sat
  between two calls of a loop and hid the idle time between them (samples/h200-foreign-base_clock_none).
  A layout copy or a fill kernel alone before a GEMM (``torch.cat`` of its input) is an operation of its own.
- **after** a call: the run of free kernels right after its last kernel, up to the next call or a kernel of
  another role. Its split-K reduce kernels (GEMM time) and activations (an epilogue candidate) are the call's, and
  the multiply of a gated activation (SwiGLU's ``silu(gate) * up``) when the run holds an activation.

Everything else (attention, a norm, a residual add, communication) is its own operation: no GEMM's auxiliary, it
is counted in the step breakdown. :func:`assign` works on any frame of ordered rows, so the timeline and Nsight
Compute rows share it.
"""

from __future__ import annotations

import re

import polars as pl

BEFORE = ("quantize", "layout", "memory", "elementwise", "reduction")
"""Classes a before-run may hold (kernels of any other class end it)."""
BEFORE_OWNED = ("quantize",)
AFTER = ("splitk-reduce", "activation", "elementwise")
"""Classes an after-run may hold."""
AFTER_OWNED = ("splitk-reduce", "activation")
_STEP = re.compile(
    r"AbsFunctor|abs_kernel|MaxOps|MaxNanFunctor|amax|absmax|DivFunctor|div_true|MulFunctor|reciprocal|clamp|"
    r"direct_copy|copy_kernel",
    re.IGNORECASE,
)
"""A step of an FP8 / FP4 activation quantize (abs, amax, scale, reciprocal, clamp, a copy), by kernel name."""
_AMAX_ABS = re.compile(r"AbsFunctor|abs_kernel|amax|absmax", re.IGNORECASE)
_AMAX_MAX = re.compile(r"MaxOps|MaxNanFunctor", re.IGNORECASE)
"""The quantizer's first step: the ``abs`` of its amax (else its max reduce): it reads the input the norm wrote."""
_STRICT = re.compile(r"DivFunctor|div_true|reciprocal|clamp", re.IGNORECASE)
"""The steps of a quantize with a given scale (no amax): divide, reciprocal, clamp."""
_GATE_MUL = re.compile(r"MulFunctor|mul_kernel|(?<![a-z])mul(?![a-z])", re.IGNORECASE)
"""The multiply of a gated activation (SwiGLU: silu(gate) * up), beside an activation kernel."""


def assign(rows: pl.DataFrame, group: list[str], order: list[str]) -> pl.DataFrame:
    """``rows`` with an ``owner`` column: the call a row belongs to. ``rows`` hold ``call_of`` (the call of a
    row that is part of one, null for a free row), ``cls`` (kernel class), ``name`` and, where memory operations
    are among them, ``memop_kind`` (the memops frame's ``kind``: a CUDA-API memset right before a call is the
    call's); ``group`` are the columns of one sequence (range instance, device, stream), ``order`` its launch
    order."""
    cls, free = pl.col("cls"), pl.col("call_of").is_null()
    names = rows["name"].drop_nulls().unique().to_list()
    gate = [n for n in names if _GATE_MUL.search(n)]
    df = rows.sort([*group, *order]).with_columns(pl.int_range(pl.len()).over(group).alias("_pos"))
    pos = pl.col("_pos")
    call_pos = pl.when(~free).then(pos)
    breaks_before = pl.when(free & ~cls.is_in(BEFORE).fill_null(False)).then(pos)
    breaks_after = pl.when(free & ~cls.is_in(AFTER).fill_null(False)).then(pos)
    df = df.with_columns(
        pl.col("call_of").backward_fill().over(group).alias("_next"),
        call_pos.backward_fill().over(group).alias("_next_pos"),
        pl.col("call_of").forward_fill().over(group).alias("_prev"),
        call_pos.forward_fill().over(group).alias("_prev_pos"),
        breaks_before.backward_fill().over(group).alias("_bb"),
        breaks_after.forward_fill().over(group).alias("_ba"),
    )
    in_before = (
        free
        & pl.col("_next").is_not_null()
        & (pl.col("_bb").is_null() | (pl.col("_bb") > pl.col("_next_pos")))
    )
    in_after = (
        free
        & pl.col("_prev").is_not_null()
        & (pl.col("_ba").is_null() | (pl.col("_ba") < pl.col("_prev_pos")))
    )
    df = df.with_columns(in_before.alias("_in_b"), in_after.alias("_in_a"))
    quant = (cls == "quantize").fill_null(False)
    act = (cls == "activation").fill_null(False)
    df = df.with_columns(
        (quant & pl.col("_in_b")).any().over([*group, "_next"]).alias("_run_q"),
        (act & pl.col("_in_a")).any().over([*group, "_prev"]).alias("_run_a"),
    )
    df = _quantizer_steps(df, group, names)
    # a CUDA-API memset (the memops frame's, not a fill kernel) right before the call
    memset = (
        (pl.col("memop_kind") == "memset").fill_null(False) if "memop_kind" in rows.columns else pl.lit(False)
    )
    adjacent_memset = memset & (pos == pl.col("_next_pos") - 1)
    owned_before = pl.col("_in_b") & (
        cls.is_in(BEFORE_OWNED).fill_null(False) | (pl.col("_qstep") & pl.col("_run_q")) | adjacent_memset
    )
    owned_after = pl.col("_in_a") & (
        cls.is_in(AFTER_OWNED).fill_null(False)
        | ((cls == "elementwise").fill_null(False) & pl.col("name").is_in(gate) & pl.col("_run_a"))
    )
    return df.with_columns(
        pl.when(~free)
        .then(pl.col("call_of"))
        .when(owned_after)
        .then(pl.col("_prev"))
        .when(owned_before)
        .then(pl.col("_next"))
        .alias("owner")
    ).drop(
        "_next",
        "_next_pos",
        "_prev",
        "_prev_pos",
        "_bb",
        "_ba",
        "_in_b",
        "_in_a",
        "_run_q",
        "_run_a",
        "_qstep",
    )


def _quantizer_steps(df: pl.DataFrame, group: list[str], names: list[str]) -> pl.DataFrame:
    """``df`` with ``_qstep``: the free row is a step of the quantizer right before its call (see the module
    docstring). The chain is the run's unbroken tail of quantizer steps; in it, the quantizer starts at its last
    ``abs`` (else its last max reduce); a chain without one holds only divide, reciprocal, clamp and fill kernels
    from the call back. A norm's multiplies and copies before the amax are never the quantizer's."""
    cls, pos, run = pl.col("cls"), pl.col("_pos"), [*group, "_next"]
    in_b = pl.col("_in_b")
    step = [n for n in names if _STEP.search(n)]
    by_abs = [n for n in names if _AMAX_ABS.search(n)]
    by_max = [n for n in names if _AMAX_MAX.search(n)]
    strict = [n for n in names if _STRICT.search(n)]
    quant = (cls == "quantize").fill_null(False)
    fill = (cls == "memory").fill_null(False)
    is_step = quant | fill | pl.col("name").is_in(step)
    is_strict = quant | fill | pl.col("name").is_in(strict)

    def last(cond: pl.Expr) -> pl.Expr:
        """The position of the run's last row where ``cond`` holds."""
        return pl.when(in_b & cond).then(pos).max().over(run)

    df = df.with_columns(last(~is_step).alias("_brk"), last(~is_strict).alias("_sbrk"))
    chain = in_b & (pl.col("_brk").is_null() | (pos > pl.col("_brk")))
    df = df.with_columns(
        pl.when(chain & pl.col("name").is_in(by_abs)).then(pos).max().over(run).alias("_qa"),
        pl.when(chain & pl.col("name").is_in(by_max)).then(pos).max().over(run).alias("_qm"),
    )
    start = pl.coalesce("_qa", "_qm")
    anchored = chain & start.is_not_null() & (pos >= start)
    unanchored = in_b & start.is_null() & (pl.col("_sbrk").is_null() | (pos > pl.col("_sbrk")))
    return df.with_columns((anchored | unanchored).alias("_qstep")).drop("_brk", "_sbrk", "_qa", "_qm")
