"""Where each range sits for the GEMM cases: for every range of the ``ranges`` frame, the ranges around it that
decide what a kernel launched in it belongs to (:func:`resolve_ranges`).

- ``tk_gemm``: the nearest tracekit ``gemm`` range at or above it (a kernel under one is part of that GEMM call);
  ``aux_in_gemm``: an ``aux`` range lies between it and that GEMM range (the kernel is the GEMM's auxiliary);
- ``free_aux``: the outermost tracekit ``aux`` range around it when no GEMM range is (a quantize step launched
  before a GEMM: assigned to the GEMM call it feeds);
- ``call``: the nearest *shaped* range at or above it that is not tracekit's: a profiler's per-operator range with
  the shape or FLOP count it recorded (``aten::addmm`` with ``Input Dims``, emit_nvtx ``sizes``), or a user range
  carrying one: every instance is one call of that GEMM;
- ``opr``: the nearest profiler per-operator range at or above it (shaped or not);
- ``holder``: the innermost user range at or above it, profiler per-operator ranges skipped (they are
  transparent): the range a GEMM "ran in" as the user sees it. ``blocked`` when the nearest range that is no
  per-operator range is one tracekit named for something else (a MoE launch): such kernels are no user case.

Computed in polars by pointer doubling (each round looks twice as far up), so a million ranges nested a few
dozen deep take a handful of joins; range names are tested once per distinct name.
"""

from __future__ import annotations

import polars as pl

from .user_ranges import is_op_range

_MAX_ROUNDS = 8
"""Doubling rounds: ranges nested up to 2**8 = 256 deep are resolved (readers cap nesting well below that)."""


def _flags(ranges: pl.DataFrame) -> pl.DataFrame:
    kind = pl.col("range_kind")
    names = ranges["name"].drop_nulls().unique().to_list()
    op_names = [n for n in names if is_op_range(n)]
    is_op = (kind == "gemm-op").fill_null(False) | pl.col("name").is_in(op_names).fill_null(False)
    tracekit = kind.is_in(["gemm", "aux", "moe"]).fill_null(False)
    dims = [c for c in ("m", "n", "k") if c in ranges.columns]
    shaped = pl.lit(len(dims) == 3)
    for c in dims:
        shaped = shaped & (pl.col(c).fill_null(0) > 0)
    if "flops" in ranges.columns:
        shaped = shaped | (pl.col("flops").fill_null(0) > 0)
    return ranges.select(
        "range_id",
        "parent_id",
        (kind == "gemm").fill_null(False).alias("_is_gemm"),
        (kind == "aux").fill_null(False).alias("_is_aux"),
        is_op.alias("_is_op"),
        (shaped & ~tracekit).alias("_is_call"),
        (~is_op).alias("_not_op"),
        (~is_op & ~tracekit).alias("_is_user"),
    )


def _nearest(df: pl.DataFrame, targets: dict[str, tuple[str, bool]]) -> pl.DataFrame:
    """For each ``out -> (flag, farthest)``: the nearest (or farthest) range at or above each range whose
    ``flag`` holds, by pointer doubling over ``parent_id``."""
    id_type = df.schema["range_id"]
    cur = df.select(
        "range_id",
        pl.col("parent_id").alias("_jump"),
        *[pl.when(pl.col(flag)).then(pl.col("range_id")).alias(out) for out, (flag, _) in targets.items()],
    )
    for _ in range(_MAX_ROUNDS):
        if cur["_jump"].null_count() == cur.height:
            break
        up = cur.select(
            pl.col("range_id").alias("_jump"),
            pl.col("_jump").alias("_jump2"),
            *[pl.col(out).alias(f"{out}_up") for out in targets],
        )
        cur = cur.join(up, on="_jump", how="left").select(
            "range_id",
            pl.col("_jump2").cast(id_type).alias("_jump"),
            *[
                (pl.coalesce(f"{out}_up", out) if far else pl.coalesce(out, f"{out}_up")).alias(out)
                for out, (_, far) in targets.items()
            ],
        )
    return cur.drop("_jump")


def resolve_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    """Per range: ``tk_gemm``, ``aux_in_gemm``, ``free_aux``, ``call``, ``opr``, ``holder``, ``blocked`` (see
    the module docstring). Empty without ranges."""
    schema = {
        "range_id": pl.Int64,
        "tk_gemm": pl.Int64,
        "aux_in_gemm": pl.Boolean,
        "free_aux": pl.Int64,
        "call": pl.Int64,
        "opr": pl.Int64,
        "holder": pl.Int64,
        "blocked": pl.Boolean,
    }
    if ranges is None or ranges.height == 0:
        return pl.DataFrame(schema=schema)
    flags = _flags(ranges.with_columns(pl.col("range_id").cast(pl.Int64), pl.col("parent_id").cast(pl.Int64)))
    near = _nearest(
        flags,
        {
            "tk_gemm": ("_is_gemm", False),
            "near_aux": ("_is_aux", False),
            "far_aux": ("_is_aux", True),
            "call": ("_is_call", False),
            "opr": ("_is_op", False),
            "not_op": ("_not_op", False),
        },
    )
    is_user = flags.select("range_id", "_is_user")
    gemm_of = near.select(pl.col("range_id").alias("near_aux"), pl.col("tk_gemm").alias("_aux_gemm"))
    out = (
        near.join(gemm_of, on="near_aux", how="left")
        .join(is_user.rename({"range_id": "not_op", "_is_user": "_user"}), on="not_op", how="left")
        .select(
            "range_id",
            "tk_gemm",
            (
                pl.col("tk_gemm").is_not_null()
                & pl.col("near_aux").is_not_null()
                & (pl.col("_aux_gemm") == pl.col("tk_gemm")).fill_null(False)
            ).alias("aux_in_gemm"),
            pl.when(pl.col("tk_gemm").is_null()).then(pl.col("far_aux")).alias("free_aux"),
            "call",
            "opr",
            pl.when(pl.col("_user").fill_null(False)).then(pl.col("not_op")).alias("holder"),
            (pl.col("not_op").is_not_null() & ~pl.col("_user").fill_null(False)).alias("blocked"),
        )
    )
    return out.cast(schema)  # type: ignore[arg-type]
