"""The class columns of the ``kernels`` and ``ncu`` frames: decided once per import for the whole run
(:func:`class_table`, the importer's ``enrich_context``) and joined onto its rows (:func:`with_classes`, the
importer's ``enrich``), or in memory on frames of an earlier schema as they are loaded (:func:`classify_frames`,
:func:`classify_on_load`).

Decision order, per kernel:

1. the name table (:func:`.names.classify_name`): class and family, ``class_source`` ``name`` or ``template``;
2. the CPU op that launched it (``kernels.launch_op``: Kineto's innermost ``cpu_op`` on the launching thread;
   else an emit_nvtx op range ``aten::silu, seq = 3`` as the kernel's innermost range; for ``ncu`` rows the
   innermost NVTX range when it is such an op range), for kernels whose name class the op's rule is over (by
   default the generic ``elementwise`` and ``other``; a convolution op's rule is over every compute class:
   cuDNN runs GEMM-named kernels for a convolution, ``volta_sgemm_128x32_nt`` under
   ``aten::cudnn_convolution``; an attention op's over its softmax): the op table's class (and family, where the
   rule names one), ``class_source`` ``op``;
3. evidence, whatever the name says, except for the classes that issue tensor math without being GEMMs
   (:data:`EVIDENCE_EXEMPT`: attention, convolution, by name or by the launching op): Nsight Compute's
   tensor-op counters > 0 (``sm__ops_path_tensor_src_*``, analyzers/flops.py) make it ``gemm`` with
   ``class_source`` ``counters``; else, for names the table does not know, tensor-pipe activity of at least
   :data:`TENSOR_PIPE_MIN_PCT` (``ncu.tensor_pipe_pct``) with ``tensor-pipe``. A kernel the name table puts in
   another class (a Triton template whose name spells its epilogue's ops) needs the counters of its own name
   (:func:`_evidence_of`), and keeps no family then. Evidence found for a profiled kernel holds
   for every launch of the same name on the run's timeline.

Every step runs once per distinct (name, op) pair, joined back in polars: a million launches hold a few hundred.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl

from tracekit.frames import SPECS

from ..flops import counted_flops, is_counter_metric
from .names import classify_name, op_key, op_rule, split_name

__all__ = [
    "CLASSIFIED",
    "CLASS_COLUMNS",
    "EVIDENCE_EXEMPT",
    "TENSOR_PIPE_MIN_PCT",
    "class_table",
    "classify_frames",
    "classify_on_load",
    "evidence_gemm",
    "ncu_evidence",
    "with_classes",
    "with_launch_ops",
]

CLASS_COLUMNS = ("kernel_class", "kernel_family", "class_source")
"""The columns :func:`classify_frames` sets on ``kernels`` and ``ncu``."""

TENSOR_PIPE_MIN_PCT = 5.0
"""Tensor-pipe activity (% of peak, ``ncu.tensor_pipe_pct``) from which a kernel the table does not know counts as
GEMM-like. Kernels issuing no MMA read at most 2.3% in the committed H200 samples and the shared reports (PyTorch
elementwise 2.26%, curand 0.72%, split-K reduce 0.84%); the lowest GEMM, an FP32 SIMT SGEMM, 0.53% (its
FFMA counters, not the tensor pipe, say what it is)."""

EVIDENCE_EXEMPT = frozenset({"attention", "convolution"})
"""Classes whose kernels issue tensor math without being GEMMs (fused attention's QK^T and PV, a convolution's
implicit GEMM): tensor counters or tensor-pipe activity never make one of them ``gemm``."""

_OP_RANGE = re.compile(r"^[A-Za-z_]\w*::\w+|, (?:seq|op_id) = \d+")
"""A profiler's per-operator range name (emit_nvtx ``aten::silu, seq = 3``, Kineto ``aten::mm``)."""

_GENERIC = ("elementwise", "other")
_NONE = "\x00"
"""Stands in for a missing name or op in the join keys."""


def _op_of_range(name: str | None) -> str | None:
    return op_key(name) if name and _OP_RANGE.search(name) else None


def ncu_evidence(frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    """Kernel names (as profiled, and their function names) that Nsight Compute shows doing tensor math:
    name -> ``counters`` (tensor-op counters > 0) or ``tensor-pipe`` (activity >= TENSOR_PIPE_MIN_PCT)."""
    ncu = frames.get("ncu")
    if ncu is None or ncu.height == 0:
        return {}
    per_id: dict[int, dict[str, float]] = {}
    metrics = frames.get("ncu_metrics")
    if metrics is not None and metrics.height:
        counters = [m for m in metrics["metric"].unique().to_list() if m and is_counter_metric(m)]
        if counters:
            for ncu_id, metric, value in (
                metrics.filter(pl.col("metric").is_in(counters) & pl.col("value").is_not_null())
                .select("ncu_id", "metric", "value")
                .iter_rows()
            ):
                per_id.setdefault(ncu_id, {})[metric] = value
    cols = [c for c in ("ncu_id", "name", "demangled_name", "tensor_pipe_pct") if c in ncu.columns]
    out: dict[str, str] = {}
    for row in ncu.select(cols).iter_rows(named=True):
        name = row.get("demangled_name") or row.get("name")
        if not name:
            continue
        got = None
        c = counted_flops(per_id.get(row.get("ncu_id"), {}), name) if per_id else None
        if c is not None and not c.simt and c.flops > 0:
            got = "counters"
        elif (row.get("tensor_pipe_pct") or 0.0) >= TENSOR_PIPE_MIN_PCT:
            got = "tensor-pipe"
        if got is None:
            continue
        for key in {name, row.get("name"), split_name(name)[0]}:
            if key and out.get(key) != "counters":
                out[key] = got
    return out


def _decide(name: str | None, op: str | None, evidence: dict[str, str]) -> tuple[str, str | None, str | None]:
    """(class, family, class_source) of one kernel name launched by ``op``."""
    info = classify_name(name)
    cls, family, source = info.kernel_class, info.family, info.source
    rule = op_rule(op)
    if (
        rule is not None
        and cls in rule.over
        and (rule.kernel_class != cls or (rule.family is not None and family is None))
    ):
        cls, source = rule.kernel_class, "op"
        family = rule.family or family
    if cls in EVIDENCE_EXEMPT or cls == "gemm" or not name:
        return cls, family, source
    how = _evidence_of(name, info.known, evidence)
    if how is not None:
        # the counters outrank the name: a Triton template named for its fused epilogue (``..._mm_mul_silu_...``)
        # or a kernel of one's own does tensor math; the name's family would say otherwise, so none is kept
        return "gemm", None, how
    return cls, family, source


def evidence_gemm(name: str | None, evidence: dict[str, str]) -> bool:
    """Whether Nsight Compute's evidence (:func:`ncu_evidence`) makes the kernel ``name`` a GEMM by its name's
    class alone (no launching op known): it shows tensor math and the name is no attention or convolution."""
    info = classify_name(name)
    if not name or info.kernel_class in EVIDENCE_EXEMPT:
        return False
    return info.kernel_class == "gemm" or _evidence_of(name, info.known, evidence) is not None


def _evidence_of(name: str, known: bool, evidence: dict[str, str]) -> str | None:
    """The evidence that makes ``name`` a GEMM: for a name the table does not know, either kind, found by its
    full name or its function name; for a name the table puts in another class, only the tensor-op counters of
    that very name. Tensor-pipe activity alone is too weak there: PyTorch's bf16 multiply
    (``elementwise_kernel<..., MulFunctor>``) reads up to 6.6% of tensor-pipe cycles with no tensor instruction
    executed in the H100 serving sample, and a shared function name (``at::native::elementwise_kernel``) would
    carry one launch's reading to every kernel of that name."""
    if not known:
        return evidence.get(name) or evidence.get(split_name(name)[0])
    return "counters" if evidence.get(name) == "counters" else None


_KEYS: dict[str, tuple[Callable[[list[str]], pl.Expr], Callable[[list[str]], pl.Expr]]] = {
    "kernels": (lambda cols: pl.col("name"), lambda cols: pl.col("launch_op")),
    "ncu": (
        lambda cols: pl.coalesce("demangled_name", "name") if "demangled_name" in cols else pl.col("name"),
        lambda cols: pl.col("nvtx_range") if "nvtx_range" in cols else pl.lit(None, pl.String),
    ),
}
"""Per classified frame, the expressions of each row's kernel name and of what names its launching op (the
kernels' ``launch_op``; the ncu row's innermost NVTX range, an op where it is a profiler op range), given the
frame's columns."""

CLASSIFIED = tuple(_KEYS)
"""The frames that carry the class columns."""


def _keyed(frame: str, lf: pl.LazyFrame) -> pl.LazyFrame:
    """``lf`` with its rows' (name, op) keys as ``__name`` / ``__op`` (nulls as a key no name holds, so the
    join needs no null-matching option)."""
    cols = lf.collect_schema().names()
    name, op = (key(cols) for key in _KEYS[frame])
    return lf.with_columns(
        name.cast(pl.String).fill_null(_NONE).alias("__name"),
        op.cast(pl.String).fill_null(_NONE).alias("__op"),
    )


def class_table(frame: str, lf: pl.LazyFrame, evidence: dict[str, str]) -> pl.DataFrame:
    """The class columns of ``frame`` (``kernels`` or ``ncu``), decided once per distinct (name, op) key of
    ``lf``'s rows: the lookup :func:`with_classes` joins back. Small (a million launches hold a few hundred keys)
    and picklable: the import decides the whole run's keys once and hands the table to every write task."""
    pairs = _keyed(frame, lf).select("__name", "__op").unique().collect()
    as_op = _op_of_range if frame == "ncu" else (lambda o: o)
    decided = [
        _decide(None if n == _NONE else n, None if o == _NONE else as_op(o), evidence)
        for n, o in pairs.iter_rows()
    ]
    return pairs.with_columns(
        pl.Series("kernel_class", [d[0] for d in decided], dtype=pl.String),
        pl.Series("kernel_family", [d[1] for d in decided], dtype=pl.String),
        pl.Series("class_source", [d[2] for d in decided], dtype=pl.String),
    )


def with_classes(frame: str, lf: pl.LazyFrame, table: pl.DataFrame) -> pl.LazyFrame:
    """``lf`` (rows of ``frame``) with its class columns from ``table`` (:func:`class_table` of rows holding
    these): replaced where the frame has them, in their place, else added last. Holds for any subset of the rows
    the table was decided from (a rank's part of a frame)."""
    cols = lf.collect_schema().names()
    order = [*cols, *(c for c in CLASS_COLUMNS if c not in cols)]
    keyed = _keyed(frame, lf).drop([c for c in CLASS_COLUMNS if c in cols])
    return keyed.join(table.lazy(), on=["__name", "__op"], how="left", maintain_order="left").select(order)


def _launch_ops(kernels: pl.DataFrame, ranges: pl.DataFrame | None) -> pl.Series:
    """Each kernel's launching op: the reader's ``launch_op`` (Kineto), else its innermost range's name when
    that is a profiler op range (emit_nvtx under Nsight Systems), counters stripped."""
    have = (
        kernels["launch_op"]
        if "launch_op" in kernels.columns
        else pl.repeat(None, kernels.height, dtype=pl.String, eager=True)
    )
    if ranges is None or ranges.height == 0 or "range_id" not in kernels.columns:
        return have.cast(pl.String).rename("launch_op")
    kid = kernels["range_id"]
    rid = ranges["range_id"]
    if rid.null_count() == 0 and kid.is_between(0, ranges.height - 1).all() and _is_row_number(rid):
        # the usual case, one file's ranges numbered by row: each kernel's range name found by its address
        named = ranges["name"].gather(kid)
    else:
        # only the ranges some kernel runs in (a tenth of an emit_nvtx trace's ranges) joined by id
        ids = kid.drop_nulls().unique()
        names = ranges.select(pl.col("range_id").cast(kid.dtype), "name").filter(
            pl.col("name").is_not_null() & pl.col("range_id").is_in(ids.implode())
        )
        named = kernels.select("range_id").join(names, on="range_id", how="left", maintain_order="left")[
            "name"
        ]
    # each distinct name of those parsed once (hashing a kernel's name, not every range's)
    distinct = named.drop_nulls().unique().to_list()
    ops = pl.DataFrame(
        {"name": distinct, "__rop": [_op_of_range(n) for n in distinct]},
        schema={"name": pl.String, "__rop": pl.String},
    ).filter(pl.col("__rop").is_not_null())
    if ops.height == 0:
        return have.cast(pl.String).rename("launch_op")
    ranged = named.replace_strict(ops["name"], ops["__rop"], default=None, return_dtype=pl.String)
    return pl.select(pl.coalesce(have.cast(pl.String), ranged)).to_series().rename("launch_op")


def _is_row_number(ids: pl.Series) -> bool:
    """Whether ``ids`` (no nulls) are 0, 1, ... in row order: a range's id is then its row."""
    n = ids.len()
    if n == 0 or ids[0] != 0 or ids[n - 1] != n - 1:
        return False
    return bool((ids.cast(pl.Int64) == pl.int_range(n, dtype=pl.Int64, eager=True)).all())


def with_launch_ops(kernels: pl.DataFrame, ranges: pl.DataFrame | None) -> pl.DataFrame:
    """``kernels`` with ``launch_op`` completed from op ranges (:func:`_launch_ops`): ``ranges`` are those the
    kernels' ``range_id`` points into (one file's, where the import settles each file on its own)."""
    if "name" not in kernels.columns:
        return kernels
    return kernels.with_columns(_launch_ops(kernels, ranges))


def classify_frames(frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """``frames`` with ``kernel_class``, ``kernel_family`` and ``class_source`` on ``kernels`` and ``ncu``, and
    ``kernels.launch_op`` completed from op ranges (see the module docstring). Other frames are returned as
    they are; frames already classified are classified again (the columns are replaced)."""
    out = dict(frames)
    evidence = ncu_evidence(frames)
    kernels = frames.get("kernels")
    if kernels is not None and "name" in kernels.columns:
        out["kernels"] = with_launch_ops(kernels, frames.get("ranges"))
    for frame in CLASSIFIED:
        df = out.get(frame)
        if df is not None and "name" in df.columns:
            lf = df.lazy()
            out[frame] = with_classes(frame, lf, class_table(frame, lf, evidence)).collect()
    return out


CLASS_INPUTS = ("kernels", "ranges", "ncu", "ncu_metrics")
"""The frames the classes are decided from."""


def classify_on_load(
    frames: dict[str, pl.DataFrame], read: Callable[[str], pl.DataFrame]
) -> dict[str, pl.DataFrame]:
    """``frames`` (some of a run's frames, read from an earlier schema) with the class columns computed: the
    frames the decision needs and were not asked for are read with ``read``; only ``frames``' own are returned,
    conformed to this schema."""
    if not {"kernels", "ncu"} & set(frames):
        return frames
    inputs = {name: frames[name] if name in frames else read(name) for name in CLASS_INPUTS}
    done = classify_frames(inputs)
    return {
        name: SPECS[name].conform(done[name]) if name in ("kernels", "ncu") else df
        for name, df in frames.items()
    }
