"""GEMM cases from a timeline (Nsight Systems, the PyTorch profiler): calls (:mod:`.calls`) keyed into cases.

- **tracekit's ranges**: the calls of one ``gemm`` range name under one enclosing range (its step counter
  folded) are one case, named by the range.
- **everything else**: a case is one GEMM as the user ran it, keyed by the innermost user range (index suffixes
  folded: :func:`fold_range`), the GEMM kernel's signature (name, grid, block) and the shape where the profiler
  recorded one. A range holding several GEMMs gives one case per distinct GEMM, named in order of first launch
  (``serve/decode #2 (nvjet_...)``; by the operator and shape where known: ``aten::mm M=16 N=6144 K=6144``); the
  ranges around are the case's ``parents``, not part of its key. GEMM kernels in no range are cases of their own,
  named by kernel (only in a foreign capture without Nsight Compute rows: :func:`timeline_cases` returns them
  apart).

Memsets and memcpys (the ``memops`` frame) join the kernels as rows of class ``memory``, so a call owns the
memory operations under it and they are never idle time.

Calls whose GEMM kernel is missing (a shaped operator or a tracekit range that launched no GEMM kernel: sampled
out, or failed) are counted on the case of the same range and shape, never entered as zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from msgspec.structs import replace

from tracekit.devices import DeviceSpec

from ..analysis.model import AuxKernel, FusionCandidate, KernelRef, Shape, Timing
from ..taxonomy import classify_name, split_name
from ..taxonomy.frames import EVIDENCE_EXEMPT
from .calls import aggregate, tracekit_calls, user_calls
from .case import CaseEvidence, Place, case_id, context_key, is_step
from .graph_replay import NO_SHAPE_NOTE
from .names import name_shape, parse_gemm_name
from .parts import kernel_ref, shape_text
from .ranges import resolve_ranges
from .user_ranges import _GEMM_RANGE, range_key

KERNEL_COLUMNS = (
    "kernel_id", "device", "stream", "name", "start_ns", "end_ns", "duration_ns", "range_id", "grid_x",
    "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "static_smem_bytes",
    "dynamic_smem_bytes", "smem_bytes", "kernel_class", "kernel_family", "correlation_id", "pid", "source",
    "launch_start_ns", "blocks_per_sm", "est_occupancy_pct", "memop_kind", "launch_op",
)  # fmt: skip
_SHAPE = ("m", "n", "k", "batch", "dtype_a", "dtype_b", "dtype_out")
TIMELINE_DETAIL = "timeline: kernel durations and idle time of each call"


def fold_range(name: str | None) -> str | None:
    """A range name as a case's key: a profiler's per-call counters dropped (``aten::addmm, seq = 7`` ->
    ``aten::addmm``) and a step's counter folded (``ProfilerStep#12`` -> ``ProfilerStep``)."""
    if name is None:
        return None
    return context_key(range_key(name))


def _cases_in_launch_order(
    calls: pl.DataFrame, keys: dict[int, tuple], aux_rows: pl.DataFrame, starts: pl.DataFrame
) -> tuple[pl.DataFrame, dict[tuple, int], dict[int, tuple[Timing, list[AuxKernel], list[FusionCandidate]]]]:
    """Calls whose owners share a key (``keys``: owner -> case key) are one case, numbered in the order of the
    case's first launch; returns the calls with their ``case``, the key -> case number map (to count a case's
    calls that launched no kernel) and each case's timing. tracekit's ranges and the user's ranges key their calls
    differently but number and time them alike."""
    order = calls.sort("first")["owner"].to_list()
    case_of: dict[tuple, int] = {}
    for owner in order:
        case_of.setdefault(keys[owner], len(case_of))
    calls = calls.with_columns(
        pl.col("owner")
        .replace_strict({o: case_of[keys[o]] for o in order}, return_dtype=pl.Int64)
        .alias("case")
    )
    return (
        calls,
        case_of,
        aggregate(calls, aux_rows, starts, source="timeline", source_detail=TIMELINE_DETAIL),
    )


@dataclass
class TimelineCases:
    """The timeline's cases: ``cases`` (tracekit's ranges, the user's ranges, shaped operators) and ``loose``
    (GEMM kernels in no range, named by kernel); ``calls`` every call with its case (for tests and ranks)."""

    cases: list[CaseEvidence] = field(default_factory=list)
    loose: list[CaseEvidence] = field(default_factory=list)


class _Names:
    """Range names and parents by id, fetched for the ids asked (with their ancestors): a run may hold millions of
    ranges; the cases need the names of the ranges that hold their calls. :meth:`fetch` loads many ids in one
    pass; an id asked for without it is fetched on its own."""

    def __init__(self, ranges: pl.DataFrame) -> None:
        self.ranges = ranges
        self._name: dict[int, str | None] = {}
        self._parent: dict[int, int | None] = {}

    def fetch(self, ids: pl.Series | list[int | None]) -> None:
        """Load the names and parents of ``ids`` and of every range above them (one filter per level)."""
        todo = pl.Series("range_id", ids, dtype=pl.Int64).drop_nulls().unique()
        for _ in range(64):
            todo = todo.filter(~todo.is_in(pl.Series(list(self._name), dtype=pl.Int64).implode()))
            if todo.len() == 0:
                return
            got = self.ranges.filter(pl.col("range_id").is_in(todo.implode())).select(
                "range_id", "name", "parent_id"
            )
            ids_, names, parents = (got[c].to_list() for c in ("range_id", "name", "parent_id"))
            self._name.update(zip(ids_, names, strict=True))
            self._parent.update(zip(ids_, parents, strict=True))
            for rid in todo.to_list():  # ids no range has: known to have no name
                self._name.setdefault(rid, None)
                self._parent.setdefault(rid, None)
            todo = got["parent_id"].drop_nulls().unique()

    def name(self, rid: int | None) -> str | None:
        if rid is None:
            return None
        if rid not in self._name:
            self.fetch([rid])
        return self._name.get(rid)

    def parents(self, rid: int | None) -> list[str]:
        """Folded names of the user ranges around ``rid``, outermost first (profiler op ranges skipped)."""
        if rid is not None and rid not in self._name:
            self.fetch([rid])
        out: list[str] = []
        cur, depth = self._parent.get(rid) if rid is not None else None, 0
        while cur is not None and depth < 64:
            if cur not in self._name:
                self.fetch([cur])
            name = self._name.get(cur)
            if name and not _op_like(name):
                out.append(fold_range(name))  # type: ignore[arg-type]
            cur, depth = self._parent.get(cur), depth + 1
        return out[::-1]


def _op_like(name: str) -> bool:
    from .user_ranges import is_op_range

    return is_op_range(name)


def _prepared(kernels: pl.DataFrame, res: pl.DataFrame, gemm_names: set[str]) -> pl.DataFrame:
    """The timed kernels with their class (``cls``: the kernels frame's, else the kernel table's), whether each is
    a GEMM (``_gemm``) and where its range sits (``res``: :func:`~.ranges.resolve_ranges`)."""
    cols = [c for c in KERNEL_COLUMNS if c in kernels.columns]
    timed = pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
    ks = kernels.select(cols).filter(timed)
    for c in KERNEL_COLUMNS:
        if c not in ks.columns:
            ks = ks.with_columns(pl.lit(None).alias(c))
    names = ks["name"].drop_nulls().unique().to_list()
    by_name = pl.DataFrame(
        {"name": names, "_cls": [classify_name(n).kernel_class for n in names]},
        schema={"name": pl.String, "_cls": pl.String},
    )
    ks = ks.join(by_name, on="name", how="left").with_columns(
        pl.coalesce(pl.col("kernel_class").cast(pl.String), "_cls").alias("cls"),
        pl.col("kernel_id").cast(pl.Int64),
        pl.col("range_id").cast(pl.Int64),
        pl.col("duration_ns").fill_null(pl.col("end_ns") - pl.col("start_ns")),
    )
    counted = [n for n in names if n in gemm_names]
    # Nsight Compute's tensor math is no GEMM evidence for attention, nor a convolution (by name or by its op)
    conv = (pl.col("kernel_family") == "cudnn-conv").fill_null(False) | pl.col("cls").is_in(
        list(EVIDENCE_EXEMPT)
    ).fill_null(False)
    ks = ks.with_columns(
        ((pl.col("cls") == "gemm").fill_null(False) | (pl.col("name").is_in(counted) & ~conv)).alias("_gemm")
    )
    ks = ks.join(res, on="range_id", how="left")
    return ks.with_columns(
        pl.col("aux_in_gemm").fill_null(False),
        pl.col("blocked").fill_null(False),
    )


def _with_memops(kernels: pl.DataFrame, memops: pl.DataFrame | None) -> pl.DataFrame:
    """The kernels and the timed memsets and memcpys (class ``memory``) in one frame: a memset or a copy inside a
    GEMM's call (cuBLAS zeroing a split-K / stream-K workspace under the operator, a bias copy) is GPU time of the
    call (auxiliary), not idle time, and it starts the call when it runs first. A memory operation gets a kernel
    id after every kernel's (``kernel_id`` orders rows that start together), and its ``memop_kind`` (memcpy,
    memset; null for a kernel)."""
    if memops is None or memops.height == 0 or "start_ns" not in memops.columns:
        return kernels
    top = kernels["kernel_id"].max() if "kernel_id" in kernels.columns else None
    base = int(top) + 1 if top is not None else 0  # type: ignore[arg-type]
    cols = [c for c in ("device", "stream", "name", "start_ns", "end_ns", "duration_ns", "range_id", "pid", "source", "launch_start_ns", "correlation_id") if c in memops.columns]  # fmt: skip
    rows = memops.select(
        (pl.int_range(pl.len(), dtype=pl.Int64) + base).alias("kernel_id"),
        *cols,
        pl.lit("memory").alias("kernel_class"),
        (pl.col("kind") if "kind" in memops.columns else pl.lit(None, pl.String)).alias("memop_kind"),
    )
    return pl.concat([kernels, rows], how="diagonal_relaxed")


def _gemm_named_holders(user: pl.DataFrame, names: _Names) -> pl.DataFrame:
    """A user range named like a GEMM (``sgemm_smem``) whose instances hold no GEMM kernel but kernels the table
    does not know: its kernel with the most time is the GEMM (``simt_kernel``)."""
    holders = user.filter(pl.col("holder").is_not_null())
    if holders.height == 0:
        return user
    names.fetch(holders["holder"].unique())
    with_names = holders.with_columns(
        pl.col("holder")
        .replace_strict(
            {h: fold_range(names.name(h)) or "" for h in holders["holder"].unique().to_list()},
            return_dtype=pl.String,
        )
        .alias("_hn")
    )
    has_gemm = set(with_names.filter(pl.col("_gemm"))["_hn"].unique().to_list())
    candidates = [
        h
        for h in with_names["_hn"].unique().to_list()
        if h and h not in has_gemm and _GEMM_RANGE.search(h) and not is_step(h)
    ]
    if not candidates:
        return user
    kn = with_names["name"].drop_nulls().unique().to_list()
    unknown = [n for n in kn if not classify_name(n).known]
    top = (
        with_names.filter(pl.col("_hn").is_in(candidates) & pl.col("name").is_in(unknown))
        .group_by("_hn", "name")
        .agg(pl.col("duration_ns").sum().alias("_t"))
        .sort("_t", descending=True)
        .group_by("_hn", maintain_order=True)
        .first()
    )
    picks = {(h, n) for h, n in top.select("_hn", "name").iter_rows()}
    if not picks:
        return user
    hn = {h: fold_range(names.name(h)) or "" for h in holders["holder"].unique().to_list()}
    ids = [h for h, n in hn.items() if n in {p[0] for p in picks}]
    pick_names = {p[1] for p in picks}
    return user.with_columns(
        (pl.col("_gemm") | (pl.col("holder").is_in(ids) & pl.col("name").is_in(list(pick_names)))).alias(
            "_gemm"
        )
    )


def _kernel_rows(ks: pl.DataFrame, ids: list[int]) -> dict[int, dict[str, Any]]:
    return {r["kernel_id"]: r for r in ks.filter(pl.col("kernel_id").is_in(ids)).iter_rows(named=True)}


def timeline_cases(
    frames: dict[str, pl.DataFrame],
    device: DeviceSpec | None,
    gemm_names: set[str] | None = None,
    kernel_shapes: dict[int, tuple[str, tuple] | None] | None = None,
    graph_ops: set[int] | None = None,
    launch_counts: dict[tuple, list[float | None]] | None = None,
) -> TimelineCases:
    """The timeline's cases (see the module docstring). ``gemm_names``: kernel names Nsight Compute counted
    tensor math for; ``kernel_shapes``: GEMM kernels replayed from a CUDA graph (graph_replay.py), by kernel id:
    the operator and shape recorded while the graph was captured, or None where no capture matches (the case then
    says ``FLOPs unknown (CUDA graph replay)``); ``graph_ops``: operator ranges recorded while a graph was
    captured (no call lacks its kernel there); ``launch_counts``: Nsight Compute's FLOP count of each profiled
    launch of a user range's GEMM signature, in profiling order, by (range, kernel name, grid, block)
    (:func:`positions`: GEMMs sharing one kernel and launch configuration told apart by their place)."""
    out = TimelineCases()
    kernels, ranges = frames.get("kernels"), frames.get("ranges")
    if kernels is None or kernels.height == 0:
        return out
    if ranges is None:
        ranges = pl.DataFrame(schema={"range_id": pl.Int64, "parent_id": pl.Int64, "name": pl.String})
    ranges = ranges.with_columns(pl.col("range_id").cast(pl.Int64), pl.col("parent_id").cast(pl.Int64))
    if "range_kind" not in ranges.columns:
        ranges = ranges.with_columns(pl.lit(None, pl.String).alias("range_kind"))
    res = resolve_ranges(ranges)  # where each range sits: the kernels' and the missing calls' (computed once)
    ks = _prepared(_with_memops(kernels, frames.get("memops")), res, gemm_names or set())
    if ks.height == 0:
        return out
    names = _Names(ranges)
    starts = ks.select("device", "start_ns")
    out.cases.extend(_tracekit_cases(ks, ranges, names, starts, device))
    held, loose = _user_cases(
        ks, ranges, res, names, starts, device, kernel_shapes or {}, graph_ops or set(), launch_counts or {}
    )
    out.cases.extend(held)
    out.loose.extend(loose)
    return out


# --- tracekit's ranges ----------------------------------------------------------------------------------------------
def _tracekit_cases(
    ks: pl.DataFrame, ranges: pl.DataFrame, names: _Names, starts: pl.DataFrame, device: DeviceSpec | None
) -> list[CaseEvidence]:
    if not ks["tk_gemm"].is_not_null().any():
        return []
    calls, aux_rows = tracekit_calls(ks, ranges)
    if calls.height == 0:
        return []
    cols = [
        c for c in (*_SHAPE, "flops", "name", "parent_id", "backend", "op", "scale") if c in ranges.columns
    ]
    info = ranges.filter(pl.col("range_kind") == "gemm").select("range_id", *cols)
    parent_names = ranges.select(pl.col("range_id").alias("parent_id"), pl.col("name").alias("_pname"))
    info = info.join(parent_names, on="parent_id", how="left")
    own = {n: parse_gemm_name(n) is not None for n in info["name"].drop_nulls().unique().to_list()}
    ctx = {n: context_key(n) for n in info["_pname"].drop_nulls().unique().to_list()}
    keys: dict[int, tuple] = {}
    rows: dict[int, dict[str, Any]] = {}
    for r in info.iter_rows(named=True):
        name = r["name"] or ""
        shape = () if own.get(name) else tuple(r.get(c) for c in _SHAPE)
        keys[r["range_id"]] = (name if own.get(name) else range_key(name), ctx.get(r["_pname"]), shape)
        rows[r["range_id"]] = r
    calls, case_of, timings = _cases_in_launch_order(calls, keys, aux_rows, starts)
    firsts = (
        calls.sort("first")
        .group_by("case", maintain_order=True)
        .agg(
            pl.col("owner").first().alias("rid"),
            pl.col("_top").drop_nulls().first().alias("top"),
            pl.col("owner"),
        )
    )
    tops = _kernel_rows(ks, [t for t in firsts["top"].to_list() if t is not None])
    # calls without a GEMM kernel: instances of the case's range that launched none
    # (a Kineto trace mirrors each record_function range on the GPU as a gpu_user_annotation: when the host's ranges
    # own the calls, their GPU twins are not further calls, and counting them would call every call "sampled out")
    have = set(calls["owner"].to_list())
    gemm_ranges = _gemm_ranges(ranges, ctx, own)
    owner_kinds = {gemm_ranges[rid].get("kind") for rid in have if rid in gemm_ranges}
    empty_counts: dict[int, int] = {}
    for rid, r in gemm_ranges.items():
        key = _tk_key(r, own, ctx)
        if rid not in have and key in case_of and r.get("kind") in owner_kinds:
            empty_counts[case_of[key]] = empty_counts.get(case_of[key], 0) + 1
    out = []
    for ci, rid, top, owners in firsts.iter_rows():
        key = keys[rid]
        r = rows[rid]
        parsed = parse_gemm_name(key[0])
        backend = op = shape = None
        if parsed is not None:
            backend, op = parsed["backend"], parsed["op"]
            shape = name_shape(parsed)
        elif r.get("m") and r.get("n") and r.get("k"):  # a gemm range another reader marked: its row's shape
            shape = Shape(
                m=r["m"],
                n=r["n"],
                k=r["k"],
                batch=r.get("batch"),
                dtype_a=r.get("dtype_a"),
                dtype_b=r.get("dtype_b"),
                dtype_out=r.get("dtype_out"),
                source="range",
            )
        t, aux, fusion = timings[ci]
        case = CaseEvidence(
            origin="range",
            name=key[0],
            range=key[0],
            device=device,
            backend=backend,
            op=op,
            shape=shape,
            profiler_flops=r["flops"] if r.get("flops") else None,
            parents=tuple(p for p in [key[1]] if p),
            kernel=kernel_ref(tops[top]) if top is not None else KernelRef(),
            timing=replace(t, calls_without_kernel=empty_counts.get(ci, 0)),
            aux=tuple(aux),
            fusion=tuple(fusion),
            range_ids=tuple(owners),
            key=("range", *key),
        )
        out.append(case)
    return out


def _tk_key(r: dict[str, Any], own: dict[str, bool], ctx: dict[str, str | None]) -> tuple:
    name = r["name"] or ""
    shape = () if own.get(name) else tuple(r.get(c) for c in _SHAPE)
    return (name if own.get(name) else range_key(name), ctx.get(r["_pname"]), shape)


def _gemm_ranges(ranges: pl.DataFrame, ctx: dict[str, str | None], own: dict[str, bool]) -> dict[int, dict]:
    cols = [c for c in (*_SHAPE, "name", "parent_id", "kind") if c in ranges.columns]
    info = ranges.filter(pl.col("range_kind") == "gemm").select("range_id", *cols)
    parent_names = ranges.select(pl.col("range_id").alias("parent_id"), pl.col("name").alias("_pname"))
    info = info.join(parent_names, on="parent_id", how="left")
    return {r["range_id"]: r for r in info.iter_rows(named=True)}


# --- GEMMs sharing one kernel and launch configuration ---------------------------------------------------------------
def launch_numbers(launches: pl.DataFrame) -> pl.DataFrame:
    """``launches`` (GEMM launches: ``holder``, the user range instance holding each, ``first``, its start, and
    ``owner``) numbered in their instance: ``_nth``, 0-based in order of start; launches in no instance dropped.
    The instance and the order :func:`positions` numbers a :class:`Place` by, and the timeline export finds a
    launch's place by."""
    return (
        launches.filter(pl.col("holder").is_not_null())
        .sort("holder", "first", "owner")
        .with_columns(pl.int_range(pl.len()).over("holder").alias("_nth"))
    )


def positions(
    calls: pl.DataFrame, keys: dict[int, tuple], launch_counts: dict[tuple, list[float | None]]
) -> dict[int, Place]:
    """Calls (``owner`` -> :class:`Place`) of GEMMs that share one kernel and launch configuration in a range,
    told apart by their place in the range's instances. cuBLAS on Hopper runs different shapes with one persistent
    kernel on a grid of one CTA per SM (``nvjet_sm90_tst_* ... grid 132``), so a signature alone merges them.

    Applies to calls without a shape (``keys``: owner -> (range, kernel, grid, block, op, dims)) whose signature
    a range's instance launches more than once, where every instance of the range launches the same sequence of
    GEMM signatures: the n-th launch of a signature in every instance is then one GEMM. Its FLOPs are the count
    Nsight Compute made for that place (``launch_counts``, in profiling order: the j-th profiled launch of the
    signature is slot j mod its launches per instance). Slots that counted the same math (within
    ``COUNT_TOLERANCE``: the same projection in every layer) are one case; slots no launch was profiled for are
    one case together; where no slot was profiled, or every profiled slot counted the same math, nothing says the
    slots are different GEMMs and the calls keep one case (and its key)."""
    from .ncu_evidence import COUNT_TOLERANCE, same_kernel

    owners = [
        o for o in calls["owner"].to_list() if keys[o][0] is not None and not keys[o][5] and not keys[o][4]
    ]
    if not owners or not launch_counts:
        return {}
    frame = (
        calls.filter(pl.col("owner").is_in(owners))
        .select("owner", "holder", "first")
        .with_columns(
            pl.col("owner")
            .replace_strict({o: repr(keys[o][1:4]) for o in owners}, return_dtype=pl.String)
            .alias("_sig"),
            pl.col("owner")
            .replace_strict({o: keys[o][0] for o in owners}, return_dtype=pl.String)
            .alias("_rng"),
        )
    )
    frame = launch_numbers(frame).with_columns(pl.int_range(pl.len()).over("holder", "_sig").alias("_slot"))
    if frame.height == 0:
        return {}
    # ranges whose instances all launch the same sequence of these calls' signatures
    seqs = frame.group_by("_rng", "holder").agg(pl.col("_sig").str.join("\x00").alias("_seq"))
    same = seqs.group_by("_rng").agg(pl.col("_seq").n_unique().alias("_n")).filter(pl.col("_n") == 1)["_rng"]
    frame = frame.filter(pl.col("_rng").is_in(same.implode()))
    total = dict(frame.group_by("_rng").agg((pl.col("_nth").max() + 1).alias("_t")).iter_rows())
    per = frame.group_by("_rng", "_sig").agg((pl.col("_slot").max() + 1).alias("_per"))
    frame = frame.join(per.filter(pl.col("_per") > 1), on=["_rng", "_sig"])
    if frame.height == 0:
        return {}
    out: dict[int, Place] = {}
    for (rng, _sig), group in frame.group_by("_rng", "_sig"):
        kname, grid, block = keys[group["owner"][0]][1:4]
        per_instance = int(group["_per"][0])
        counts = next(
            (
                v
                for (r, n, g, b), v in launch_counts.items()
                if r == rng
                and same_kernel(kname, n)
                and (grid is None or g is None or g == grid)
                and b == block
            ),
            [],
        )
        slot_flops: dict[int, float] = {}
        for j, flops in enumerate(counts):
            if flops:
                slot_flops.setdefault(j % per_instance, flops)
        if not slot_flops:
            continue  # nothing tells the slots apart
        # slots that counted the same math are one GEMM; slots never profiled are one case together
        clusters: list[list[int]] = []
        for slot in sorted(slot_flops, key=lambda j: slot_flops[j]):
            last = clusters[-1] if clusters else None
            if last and slot_flops[slot] - slot_flops[last[0]] <= COUNT_TOLERANCE * slot_flops[slot]:
                last.append(slot)
            else:
                clusters.append([slot])
        if len(clusters) < 2:
            continue  # every profiled place counted the same math: nothing says the places are different GEMMs
        if rest := [j for j in range(per_instance) if j not in slot_flops]:
            clusters.append(rest)
        one = group.filter(pl.col("holder") == group["holder"].min())
        nth_of = dict(one.select("_slot", "_nth").iter_rows())
        place_of: dict[int, Place] = {}
        for members in clusters:
            slots = tuple(sorted(members))
            place = Place(per_instance, slots, tuple(sorted(nth_of[j] + 1 for j in slots)), int(total[rng]))
            place_of.update(dict.fromkeys(slots, place))
        for owner, slot in group.select("owner", "_slot").iter_rows():
            out[owner] = place_of[slot]
    return out


# --- everything else ------------------------------------------------------------------------------------------------
def _user_cases(
    ks: pl.DataFrame,
    ranges: pl.DataFrame,
    res: pl.DataFrame,
    names: _Names,
    starts: pl.DataFrame,
    device: DeviceSpec | None,
    kernel_shapes: dict[int, tuple[str, tuple] | None],
    graph_ops: set[int],
    launch_counts: dict[tuple, list[float | None]],
) -> tuple[list[CaseEvidence], list[CaseEvidence]]:
    user = ks.filter(pl.col("tk_gemm").is_null() & pl.col("free_aux").is_null() & ~pl.col("blocked"))
    if user.height == 0:
        return [], []
    user = _gemm_named_holders(user, names)
    if not user["_gemm"].any():
        return [], []
    calls, aux_rows = user_calls(user)
    if calls.height == 0:
        return [], []
    # what each call's range says: the shaped range's shape, operator and FLOP count; its GEMM kernel's signature
    per_call, sigs = _call_facts(calls, ks, ranges, names)
    keys: dict[int, tuple] = {}
    extra: dict[int, dict[str, Any]] = {}
    for owner, top, holder, si, shaped, rname, flops, hname, _unlinked, *dims in per_call.iter_rows():
        sig = sigs[si] if si is not None else _NO_KERNEL
        op = fold_range(rname) if shaped else None
        dims = tuple(dims) if shaped else ()
        if not (dims and dims[0] and dims[1] and dims[2]):
            dims = ()
        replayed = top is not None and top in kernel_shapes  # its GEMM kernel was replayed from a CUDA graph
        replay = kernel_shapes.get(top) if replayed else None
        if replay is not None and not dims:
            op, dims = replay
        keys[owner] = (hname, sig.name, sig.grid, sig.block, op if (dims or flops) else None, dims)
        extra[owner] = {
            "holder": holder,
            "sig": sig,
            "op": op,
            "dims": dims,
            "flops": flops,
            "replay": replay is not None,
            "replayed": replayed,
        }
    # GEMMs sharing one kernel and launch configuration in a range: told apart by their place in its instances
    placed = positions(calls, keys, launch_counts)
    # (a case keyed by no place keeps the key, and so the id, it had before places existed)
    keys = {owner: (*key, placed[owner]) if owner in placed else key for owner, key in keys.items()}
    # GEMM kernels with no launch event where the trace links others': launched before the profiler's window
    # opened (the previous step's tail) or their runtime events dropped; no operator, so no shape, whatever the
    # profiler recorded
    unlinked = _unlinked_tops(ks, per_call)
    calls, _, timings = _cases_in_launch_order(calls, keys, aux_rows, starts)
    firsts = (
        calls.sort("first")
        .group_by("case", maintain_order=True)
        .agg(pl.col("owner").first(), pl.col("owner").alias("owners"))
    )
    missing = _calls_without_kernel(ranges, res, names, set(calls["owner"].to_list()) | graph_ops)
    names.fetch(per_call.filter(pl.col("owner").is_in(firsts["owner"].implode()))["holder"])
    held: list[CaseEvidence] = []
    loose: list[CaseEvidence] = []
    for ci, first, owners in firsts.iter_rows():
        key, e = keys[first], extra[first]
        hname, _kname, _grid, _block, op, dims = key[:6]
        shape = shaped_op = flops_note = None
        if dims:
            m, n, k, batch, da, db, do = dims
            shape = Shape(
                m=m,
                n=n,
                k=k,
                batch=batch,
                dtype_a=da,
                dtype_b=db,
                dtype_out=do,
                source="captured operator" if e["replay"] else "profiler",
            )
            shaped_op = (op or "").split("::")[-1] or None
        if e["replayed"] and not dims and not e["flops"]:
            flops_note = NO_SHAPE_NOTE
        elif not dims and not e["flops"] and unlinked is not None and set(owners) <= unlinked:
            flops_note = NO_LAUNCH_NOTE
        t, aux, fusion = timings[ci]
        if dims or e["flops"]:
            t = replace(t, calls_without_kernel=missing.pop((hname, op, dims), 0))
        loose_kernel = hname is None and not dims and not e["flops"]
        case = CaseEvidence(
            origin="kernel" if loose_kernel else "range",
            name="",
            range=None if loose_kernel else hname,
            device=device,
            user_range=not loose_kernel,
            kernel=e["sig"],
            parents=tuple(names.parents(e["holder"])) if e["holder"] is not None else (),
            shape=shape,
            op=shaped_op,
            profiler_flops=e["flops"] if e["flops"] and not dims else None,
            graph_replay=e["replayed"],
            flops_note=flops_note,
            timing=t,
            aux=tuple(aux),
            fusion=tuple(fusion),
            range_ids=tuple(o for o in owners if o >= 0),
            key=("range", *key),
            place=placed.get(first),
        )
        (loose if loose_kernel else held).append(case)
    held = _name_cases(held)
    loose = _name_loose(loose)
    return held, loose


NO_LAUNCH_NOTE = (
    "no launch event in the trace (no operator, no shape): the kernels ran before the profiler's window opened,"
    " or their runtime events were dropped; start the window earlier (a profiler schedule with a warmup step),"
    " or count the FLOPs with `tracekit capture --ncu`"
)
"""What a GEMM without a shape says when its kernels' launches are not in the trace (the explainer's note)."""


def _unlinked_tops(ks: pl.DataFrame, per_call: pl.DataFrame) -> set[int] | None:
    """The calls (owners) whose GEMM kernel has no launch event, where the trace links other kernels to theirs;
    None where it links none (a trace without CPU events: nothing to tell apart)."""
    if "launch_start_ns" not in ks.columns or ks["launch_start_ns"].null_count() == ks.height:
        return None
    return set(per_call.filter(pl.col("_top").is_not_null() & pl.col("_unlinked"))["owner"].to_list())


_NO_KERNEL = KernelRef()
"""The signature of a call without a GEMM kernel (read only: each case copies its own)."""
_SIGNATURE = (
    "name", "kernel_family", "kernel_class", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "registers_per_thread", "smem_bytes", "static_smem_bytes", "dynamic_smem_bytes", "blocks_per_sm",
    "est_occupancy_pct",
)  # fmt: skip
"""The kernel columns :func:`.parts.kernel_ref` reads."""


def _call_facts(
    calls: pl.DataFrame, ks: pl.DataFrame, ranges: pl.DataFrame, names: _Names
) -> tuple[pl.DataFrame, list[KernelRef]]:
    """Per call, in ``calls``' order: ``owner``, ``_top`` (its GEMM kernel), ``holder``, ``_sig`` (its kernel's
    signature: a row of the returned list, one :class:`KernelRef` per distinct signature), ``_shaped`` (its owner
    is a range: the shaped range's ``name``, ``flops`` and shape columns follow), ``_hname`` (the holder's folded
    name), ``_unlinked`` (its GEMM kernel has no launch event), then the shape columns (:data:`_SHAPE`). One join
    per source instead of a lookup per call."""
    sig_cols = [c for c in _SIGNATURE if c in ks.columns]
    launch = pl.col("launch_start_ns").is_null() if "launch_start_ns" in ks.columns else pl.lit(False)
    tops = ks.filter(pl.col("kernel_id").is_in(calls["_top"].drop_nulls().implode())).select(
        pl.col("kernel_id").alias("_top"), *sig_cols, launch.alias("_unlinked")
    )
    distinct = tops.select(sig_cols).unique(maintain_order=True).with_row_index("_sig")
    sigs = [kernel_ref(r) for r in distinct.drop("_sig").iter_rows(named=True)]
    tops = tops.join(distinct, on=sig_cols, how="left", nulls_equal=True).select("_top", "_sig", "_unlinked")
    shaped = ranges.filter(pl.col("range_id").is_in(calls["owner"].implode())).select(
        pl.col("range_id").alias("owner"),
        pl.lit(True).alias("_shaped"),
        *[
            (pl.col(c) if c in ranges.columns else pl.lit(None)).alias(f"_r_{c}")
            for c in ("name", "flops", *_SHAPE)
        ],
    )
    holders = calls["holder"].drop_nulls().unique()
    names.fetch(holders)
    held = {h: names.name(h) for h in holders.to_list()}
    folded = {n: fold_range(n) for n in set(held.values()) if n is not None}
    hname = pl.DataFrame(
        {"holder": list(held), "_hname": [folded.get(n) if n is not None else None for n in held.values()]},
        schema={"holder": calls.schema["holder"], "_hname": pl.String},
    )
    per_call = (
        calls.select("owner", "_top", "holder")
        .join(tops, on="_top", how="left", maintain_order="left")
        .join(shaped, on="owner", how="left", maintain_order="left")
        .join(hname, on="holder", how="left", maintain_order="left")
        .select(
            "owner",
            "_top",
            "holder",
            pl.col("_sig").cast(pl.Int64),
            pl.col("_shaped").fill_null(False),
            "_r_name",
            "_r_flops",
            "_hname",
            pl.col("_unlinked").fill_null(False),
            *[f"_r_{c}" for c in _SHAPE],
        )
    )
    return per_call, sigs


def _calls_without_kernel(
    ranges: pl.DataFrame, res: pl.DataFrame, names: _Names, called: set[int]
) -> dict[tuple, int]:
    """Innermost shaped ranges that are no call (their GEMM kernel is missing), counted per (user range,
    operator, shape); ``res``: :func:`~.ranges.resolve_ranges` of ``ranges``."""
    dims = [c for c in ("m", "n", "k") if c in ranges.columns]
    if len(dims) < 3:
        return {}
    shaped = ranges.filter(
        (pl.col("m").fill_null(0) > 0) & (pl.col("n").fill_null(0) > 0) & (pl.col("k").fill_null(0) > 0)
    ).filter(~pl.col("range_kind").is_in(["gemm", "aux", "moe"]).fill_null(False))
    if shaped.height == 0:
        return {}
    # innermost: no shaped range below it (a shaped range's parent resolves its nearest shaped range above)
    up = res.select(pl.col("range_id").alias("parent_id"), pl.col("call").alias("_above"))
    inner = shaped.join(up, on="parent_id", how="left")
    outer = set(inner["_above"].drop_nulls().to_list())
    missing = inner.filter(~pl.col("range_id").is_in(list(outer | called)))
    if missing.height == 0:
        return {}
    holder = res.select("range_id", "holder")
    missing = missing.join(holder, on="range_id", how="left")
    names.fetch(missing["holder"].unique())
    out: dict[tuple, int] = {}
    for r in missing.iter_rows(named=True):
        key = (fold_range(names.name(r["holder"])), fold_range(r["name"]), tuple(r.get(c) for c in _SHAPE))
        out[key] = out.get(key, 0) + 1
    return out


_SHORT = re.compile(r"^(?:void\s+)?")


def kernel_label(name: str | None, width: int = 60) -> str:
    """A kernel's function name, short enough for a case's name (``nvjet_sm90_tst_128x64_...``,
    ``cutlass::Kernel2<cutlass_80_tensorop_...>`` -> its template's first word)."""
    if not name:
        return "(unnamed kernel)"
    fn, args = split_name(name)
    fn = _SHORT.sub("", fn).strip()
    last = fn.rsplit("::", 1)[-1] or fn
    if last in ("Kernel", "Kernel2", "device_kernel") and args:
        inner = re.split(r"[<>,(\s]", args.strip("<> "))[0]
        if inner:
            last = inner.rsplit("::", 1)[-1]
    return last[:width]


def _name_cases(cases: list[CaseEvidence]) -> list[CaseEvidence]:
    """The user-range cases with their names and positions: per range, in order of first launch. A range's only
    GEMM is named by the range; several are ``range #i (kernel)``; a GEMM with the profiler's shape is named by
    its operator and shape; in a step range (``ProfilerStep``) or no range, by kernel. Returned in the order
    given."""
    by_range: dict[str | None, list[int]] = {}
    for i, c in enumerate(cases):  # cases come in order of first launch
        by_range.setdefault(c.range, []).append(i)
    out = list(cases)
    for rng, members in by_range.items():
        several = len(members) > 1
        for i, at in enumerate(members, 1):
            c = cases[at]
            shaped = c.shape is not None or c.profiler_flops
            if shaped:
                opname = c.key[5] or rng or "GEMM"
                name = f"{opname} {shape_text(c.shape)}" if c.shape is not None else str(opname)
            elif rng is None or is_step(rng) or _is_step_name(rng):
                name = kernel_label(c.kernel.name, 200) if c.kernel.name else "GEMM"
            elif several:
                name = f"{rng} #{i} ({kernel_label(c.kernel.name)}{_place_label(c.place)})"
            else:
                name = rng
            out[at] = replace(c, name=name, position=i if several and rng is not None else None)
        for at, named in zip(members, _tell_apart([out[at] for at in members]), strict=True):
            out[at] = named
    return out


def _place_label(place: Place | None) -> str:
    """``, GEMM launch 2 of 8`` for a case told apart by its place in its range's instances (:func:`positions`);
    empty for any other case."""
    if place is None:
        return ""
    nth = ", ".join(str(n) for n in place.nth)
    word = "launch" if len(place.nth) == 1 else "launches"
    return f", GEMM {word} {nth} of {place.launches}"


def _tell_apart(members: list[CaseEvidence]) -> list[CaseEvidence]:
    """Two GEMMs of one name in a range (one shape run by two kernels, dgrad and wgrad): their kernels tell them
    apart, and their grids where the kernels are the same. Returned in the order given."""
    seen: dict[str, list[int]] = {}
    for i, c in enumerate(members):
        seen.setdefault(c.name, []).append(i)
    out = list(members)
    for same in seen.values():
        if len(same) < 2:
            continue
        labels = [kernel_label(members[i].kernel.name) for i in same]
        for i, label in zip(same, labels, strict=True):
            c = members[i]
            grid = f", grid {c.kernel.grid}" if labels.count(label) > 1 and c.kernel.grid else ""
            out[i] = replace(c, name=f"{c.name} ({label}{grid})")
    return out


def _is_step_name(name: str) -> bool:
    return name in ("ProfilerStep", "step")


def _name_loose(cases: list[CaseEvidence]) -> list[CaseEvidence]:
    """GEMM kernels in no range, named by kernel; a kernel launched with several grids, one case per grid."""
    count: dict[str | None, int] = {}
    for c in cases:
        count[c.kernel.name] = count.get(c.kernel.name, 0) + 1
    out = []
    for c in cases:
        name = c.kernel.name or "GEMM"
        if count[c.kernel.name] > 1:
            name += f" (grid {c.kernel.grid}, block {c.kernel.block})"
        out.append(replace(c, name=name))
    return out


__all__ = [
    "Place",
    "TimelineCases",
    "case_id",
    "fold_range",
    "kernel_label",
    "launch_numbers",
    "positions",
    "timeline_cases",
]
