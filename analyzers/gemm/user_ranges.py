"""The user's own ranges as GEMM cases: profiler per-op ranges told apart from the user's ranges, and the
innermost user range that holds a GEMM-like kernel found on a timeline."""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl

from ..taxonomy import classify_name
from .case import _STEP
from .names import is_gemm_kernel

MAX_GEMMS_PER_CASE = 2
"""A user range holding more distinct GEMM kernels than this (a whole model step, a decoder layer) is context, not
one GEMM case: its GEMM kernels are explained by name."""
_OP_RANGE = re.compile(r"^[A-Za-z_]\w*::\w+|, (?:seq|op_id) = \d+")
"""Ranges a profiler writes per operator (PyTorch ``emit_nvtx`` / Kineto ``cpu_op``: ``aten::addmm, seq = 7,
op_id = 12``), as opposed to the user's own ranges."""
_OP_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$")


def is_op_range(name: str | None) -> bool:
    """Whether a range is a profiler's per-operator range rather than one the user named."""
    return bool(name) and bool(_OP_RANGE.search(name))


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


def _user_gemm_ranges(
    ranges: pl.DataFrame,
    kernels: pl.DataFrame,
    tracekit_owner: dict[int, tuple[int, bool]],
    gemm_names: set[str],
) -> dict[int, tuple[int, bool]]:
    """The user's own GEMM ranges (no tracekit kind): range_id -> (case range, is auxiliary) for each case range
    (itself, not auxiliary) and the user ranges under it that are not cases themselves (their kernels are the
    case's auxiliary kernels). A case range is the innermost range a GEMM-like kernel was launched in, or a range
    named like a GEMM holding kernels; a range with only other kernels (elementwise, softmax) is not one, and an
    outer range (``step``, ``model``) holding GEMM ranges is context, not a case."""
    shaped_cols = [c for c in ("m", "flops") if c in ranges.columns]
    step = _NameTest(lambda n: bool(_STEP.fullmatch(n.strip())))
    # a profiler's op range (aten::addmm, seq = 7) is a case only with the shape or FLOPs the profiler recorded;
    # without them its kernels belong to the user's range around it. Name tests run once per distinct name (a
    # million-kernel trace holds a few hundred), the walks over ranges in polars.
    unshaped = ranges.filter(pl.col("range_kind").is_null())
    for c in shaped_cols:  # a null or zero value carries no shape
        unshaped = unshaped.filter(pl.col(c).is_null() | (pl.col(c) == 0))
    op_names = [n for n in unshaped["name"].unique().to_list() if is_op_range(n)]
    transparent_ids = unshaped.filter(pl.col("name").is_in(op_names))["range_id"]

    # the range each kernel is held by: its own, or the user's range around a transparent op range (at most 64
    # levels up), never a training / profiler step (context, not the GEMM's own range)
    ranged = kernels.select("range_id", "name").filter(pl.col("range_id").is_not_null())
    id_type = ranged.schema["range_id"]
    held = (
        ranged.select(pl.col("range_id").unique())
        .filter(~pl.col("range_id").is_in(list(tracekit_owner)))
        .with_columns(pl.col("range_id").alias("holder"))
    )
    up = ranges.filter(pl.col("range_id").is_in(transparent_ids.implode())).select(
        pl.col("range_id").alias("holder"), pl.col("parent_id").alias("_up")
    )
    for _ in range(64):
        held = held.join(up, on="holder", how="left").with_columns(
            pl.when(pl.col("holder").is_in(transparent_ids.implode()))
            .then(pl.col("_up"))
            .otherwise(pl.col("holder"))
            .alias("holder")
        )
        held = held.drop("_up")
        if not held["holder"].is_in(transparent_ids.implode()).any():
            break
    holder_names = pl.DataFrame(
        {"holder": ranges["range_id"], "_name": ranges["name"], "_kind": ranges["range_kind"]},
        schema={"holder": id_type, "_name": pl.String, "_kind": pl.String},
    )
    held = held.join(holder_names, on="holder", how="left")
    steps = step.matching(held["_name"])
    held = held.filter(
        pl.col("holder").is_not_null()
        & ~pl.col("_name").fill_null("").is_in(steps)
        & ~pl.col("holder").is_in(list(tracekit_owner))
        & pl.col("_kind").is_null()
    )
    # the distinct GEMM-like kernel names each holder launched (only GEMM-like launches are looked at)
    gemm_kernels = [n for n in ranged["name"].unique().to_list() if _gemm_like(n, gemm_names)]
    per_holder = (
        ranged.filter(pl.col("name").is_in(gemm_kernels))
        .unique()
        .join(held.select("range_id", "holder"), on="range_id")
        .group_by("holder")
        .agg(pl.col("name").n_unique().alias("gemms"))
    )
    by_kernel = set(
        per_holder.filter((pl.col("gemms") > 0) & (pl.col("gemms") <= MAX_GEMMS_PER_CASE))["holder"].to_list()
    )
    # a range named like a GEMM holding a kernel the kernel table does not know (``sgemm_smem`` around
    # ``simt_kernel``); one holding only kernels it knows to be something else (attention, a norm) is no case
    gemm_named = _NameTest(lambda n: bool(_GEMM_RANGE.search(n)) and not _STEP.fullmatch(n.strip()))
    unknown = [n for n in ranged["name"].unique().to_list() if n and not classify_name(n).known]
    with_unknown = ranged.filter(pl.col("name").is_in(unknown)).select("range_id").unique()
    named = (
        held.join(with_unknown, on="range_id", how="semi")
        .select("holder", pl.col("_name").fill_null(""))
        .unique()
    )
    by_name = set(
        named.filter(pl.col("_name").is_in(gemm_named.matching(named["_name"])))["holder"].to_list()
    )
    by_name -= by_kernel
    if not by_kernel and not by_name:
        return {}
    # the walks below run over the few cases and their ranges; the maps are built only when there are cases
    ids = ranges["range_id"].to_list()
    kind = dict(zip(ids, ranges["range_kind"].to_list(), strict=True))
    parent = dict(zip(ids, ranges["parent_id"].to_list(), strict=True))
    transparent = set(transparent_ids.to_list())
    # a range named like a GEMM is a case for the kernel it names only when no GEMM range sits inside it
    inside: set[int] = set()
    for rid in by_kernel:
        cur, depth = parent.get(rid), 0
        while cur is not None and depth < 64:
            inside.add(cur)
            cur, depth = parent.get(cur), depth + 1
    cases = by_kernel | (by_name - inside)
    out: dict[int, tuple[int, bool]] = {rid: (rid, False) for rid in cases}
    if not cases:
        return out
    # every user range under a case (at most 64 levels down, not crossing a deeper case) belongs to its nearest
    # case: a profiler's op range inside it holds its kernels directly (roles by kernel); a user's own sub-range
    # (a "quantize" step) holds auxiliary kernels
    children: dict[int, list[int]] = {}
    for rid, p in parent.items():
        if p is not None:
            children.setdefault(p, []).append(rid)
    for case in cases:
        frontier, depth = children.get(case, []), 0
        while frontier and depth < 64:
            below = []
            for rid in frontier:
                if rid in cases:
                    continue
                if rid not in tracekit_owner and kind.get(rid) is None and rid not in out:
                    out[rid] = (case, rid not in transparent)
                below.extend(children.get(rid, []))
            frontier, depth = below, depth + 1
    return out


class _NameTest:
    """A test of a range name, run once per distinct name."""

    def __init__(self, test: Callable[[str], bool]) -> None:
        self.test = test
        self.seen: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        hit = self.seen.get(name)
        if hit is None:
            hit = self.seen[name] = self.test(name)
        return hit

    def matching(self, names: pl.Series) -> list[str]:
        """The distinct values of ``names`` the test holds for."""
        return [n for n in names.drop_nulls().unique().to_list() if self(n)]
