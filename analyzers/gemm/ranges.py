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

Computed by pointer doubling (each round looks twice as far up) over row positions, with numpy gathers: a
round over 5M ranges is a few gathers, where a join per round took seconds; range names are tested once per
distinct name.
"""

from __future__ import annotations

import numpy as np
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


def _positions(ids: np.ndarray, parents: np.ndarray, has_parent: np.ndarray) -> np.ndarray:
    """Each range's parent as a row position (-1: none, or a parent id that is no range of the frame); int32
    (fresh memory is paid in page faults: half the bytes, half the faults)."""
    n = len(ids)
    low = int(ids.min())
    rows = np.arange(n, dtype=np.int32)
    if int(ids.max()) - low + 1 == n:  # ids 0..n-1 in some order (every reader numbers them so): a direct map
        row_of = np.full(n, -1, dtype=np.int32)
        row_of[ids - low] = rows
        if (row_of >= 0).all():  # no id twice
            at = np.clip(parents - low, 0, n - 1)
            return np.where(has_parent & (parents >= low) & (parents - low < n), row_of[at], -1).astype(
                np.int32
            )
    order = np.argsort(ids, kind="stable").astype(np.int32)
    sorted_ids = ids[order]
    at = np.minimum(np.searchsorted(sorted_ids, parents), n - 1)
    return np.where(has_parent & (sorted_ids[at] == parents), order[at], -1).astype(np.int32)


def _nearest(parent: np.ndarray, targets: dict[str, tuple[np.ndarray, bool]]) -> dict[str, np.ndarray]:
    """For each ``out -> (flag, farthest)``: the row of the nearest (or farthest) range at or above each range
    whose ``flag`` holds (-1: none), by pointer doubling over the parent rows (``parent``, -1 at a root): each
    round looks twice as far up, by gathers over the rows."""
    rows = np.arange(len(parent), dtype=np.int32)
    outs = {out: np.where(flag, rows, np.int32(-1)) for out, (flag, _) in targets.items()}
    jumps = parent.copy()  # each row's jump (-1: past the root); rows past the root are done
    act = np.flatnonzero(jumps >= 0)
    for _ in range(_MAX_ROUNDS):
        if act.size == 0:
            break
        jump = jumps[act]
        new = {}
        for out, (_, far) in targets.items():  # every row from the values before this round
            cur = outs[out]
            up, mine = cur[jump], cur[act]
            new[out] = np.where(up >= 0, up, mine) if far else np.where(mine >= 0, mine, up)
        for out, values in new.items():
            outs[out][act] = values
        jumps[act] = jumps[jump]
        act = act[jumps[act] >= 0]
    return outs


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
    has_id = flags["range_id"].is_not_null().to_numpy()
    ids = flags["range_id"].fill_null(0).to_numpy()
    parent = _positions(
        ids, flags["parent_id"].fill_null(0).to_numpy(), flags["parent_id"].is_not_null().to_numpy()
    )
    parent = np.where(has_id[np.maximum(parent, 0)], parent, -1)  # a row without an id is nobody's parent

    def flag(name: str) -> np.ndarray:
        return flags[name].fill_null(False).to_numpy() & has_id

    near = _nearest(
        parent,
        {
            "tk_gemm": (flag("_is_gemm"), False),
            "near_aux": (flag("_is_aux"), False),
            "far_aux": (flag("_is_aux"), True),
            "call": (flag("_is_call"), False),
            "opr": (flag("_is_op"), False),
            "not_op": (flag("_not_op"), False),
        },
    )
    gemm, near_aux, not_op = near["tk_gemm"], near["near_aux"], near["not_op"]
    aux_gemm = np.where(near_aux >= 0, gemm[np.maximum(near_aux, 0)], -1)
    user = (not_op >= 0) & flags["_is_user"].to_numpy()[np.maximum(not_op, 0)]

    def id_of(pos: np.ndarray) -> pl.Series:
        found = pos >= 0
        return pl.select(pl.when(pl.Series(found)).then(pl.Series(ids[np.maximum(pos, 0)]))).to_series()

    out = pl.DataFrame(
        {
            "range_id": flags["range_id"],
            "tk_gemm": id_of(gemm),
            "aux_in_gemm": (gemm >= 0) & (near_aux >= 0) & (aux_gemm == gemm),
            "free_aux": id_of(np.where(gemm < 0, near["far_aux"], -1)),
            "call": id_of(near["call"]),
            "opr": id_of(near["opr"]),
            "holder": id_of(np.where(user, not_op, -1)),
            "blocked": (not_op >= 0) & ~user,
        }
    )
    return out.cast(schema)  # type: ignore[arg-type]
