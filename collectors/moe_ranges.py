"""Ranges for grouped / MoE GEMMs, and the routing sidecar that records how many tokens each expert got.

``tracekit.instrument()`` wraps these entry points where their packages import (one :data:`MOE_TARGETS` row each):

=======================================  ===========================================================================
torch ``_grouped_mm``                    2D x 3D (rows of all experts stacked, ``offs`` = cumulative group ends) and
                                         3D x 3D (batched); bf16
torch ``_scaled_grouped_mm``             the same with fp8 rowwise (fp32 scales) or mx / nv block scales
flashinfer ``cutlass_fused_moe``         the whole expert MLP (fc1 = gate+up, fc2 = down) from ``token_selected_experts``
flashinfer ``trtllm_fp4_block_scale_moe`` routing happens inside the kernel: counts are not known, only the shape
sgl_kernel ``fp8_blockwise_scaled_grouped_mm``, ``cutlass_fp4_group_mm``  counts from ``problem_sizes[:, 0]``
=======================================  ===========================================================================

Each launch gets a ``moe`` range (tracekit.collectors.ranges.moe_name) with E (experts in the weight tensor), M (routed
rows), N, K and dtypes: all read from shapes, no device sync. The per-expert counts live on the GPU (``offs``,
``problem_sizes``, top-k ids), so reading them would stall the stream; instead :class:`RoutingRecorder` copies them
asynchronously into pinned host buffers after the call, records a CUDA event, and writes one JSON line per launch
once the copy is done (at the latest when the process exits)::

    {"range": "moe backend=torch-bf16 op=grouped_mm E=256 M=2048 ...", "instance": 3, "pid": 4242,
     "tool": "nsys", "experts": 256, "counts": [12, 0, 7, ...], "counts_from": "offsets"}

``instance`` is the 1-based count of launches of that range name in this process, so the importer pairs a line with
the n-th range of that name on the process's timeline. The sidecar goes to ``$TRACEKIT_RUN_DIR/raw/moe_routing-<tool>-
<pid>.jsonl`` under ``tracekit capture`` (or to ``$TRACEKIT_MOE_ROUTING``); elsewhere nothing is recorded.
``TRACEKIT_MOE_ROUTING=0`` turns it off. Launches made while a CUDA graph is being captured are written with
``counts: null`` and ``skipped: "cuda-graph-capture"`` (a copy there would be replayed, not run).

Imports neither torch nor polars: torch is taken from ``sys.modules`` when a tensor needs copying.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from tracekit.collectors import ranges
from tracekit.collectors.instrument_targets import FAMILY, Arg, Target, dtype_name, shape_of

__all__ = [
    "ENV_ROUTING",
    "GROUPED_LAYOUTS",
    "MOE_TARGETS",
    "Counts",
    "Grouped",
    "RoutingRecorder",
    "counts_from",
    "get_recorder",
    "moe_entry",
    "read_launch",
    "set_recorder",
]

ENV_ROUTING = "TRACEKIT_MOE_ROUTING"
"""Path of the routing sidecar, or ``0`` to record no counts (default: the capture's raw/ when under capture)."""

FUSED_OPS = ("cutlass_fused_moe", "trtllm_fp4_block_scale_moe")
"""Ops whose range covers both expert GEMMs (fc1 N x K and fc2 K x I): their FLOPs count both."""


# --- counts --------------------------------------------------------------------------------------------------------
def counts_from(kind: str, values: Sequence[Any], experts: int) -> list[int]:
    """Tokens per expert from what a launch holds: ``offsets`` (cumulative group ends, one per expert), ``sizes``
    (``problem_sizes`` rows ``(M_e, N, K)``), ``ids`` (top-k expert ids per token; ids outside ``0..E-1``, e.g. the
    -1 of expert-parallel slots, are left out) or ``counts`` (already per expert)."""
    if kind == "offsets":
        out, prev = [], 0
        for v in values:
            v = int(v)
            out.append(max(v - prev, 0))
            prev = v
        return out
    if kind == "sizes":
        return [int(row[0]) for row in values]
    if kind == "ids":
        counts = [0] * experts
        for row in values:
            for e in row if isinstance(row, list | tuple) else (row,):
                e = int(e)
                if 0 <= e < experts:
                    counts[e] += 1
        return counts
    if kind == "counts":
        return [int(v) for v in values]
    raise ValueError(f"unknown counts kind {kind!r}")


class RoutingRecorder:
    """Writes the per-launch expert counts of ``moe`` ranges to a JSONL sidecar without stalling the GPU."""

    MAX_PENDING = 256

    def __init__(self, path: Path, tool: str | None = None) -> None:
        self.path = Path(path)
        self.tool = tool
        self.pid = os.getpid()
        self.instances: dict[str, int] = {}
        self._pending: list[tuple[str, int, str, int, Any, Any, Any]] = []
        self._pool: dict[tuple[Any, ...], list[Any]] = {}
        self._lock = threading.Lock()
        self._file: Any = None
        self.written = 0

    # -- writing ----------------------------------------------------------------------------------------------------
    def _write(self, obj: dict[str, Any]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()
        self.written += 1

    def _line(
        self, name: str, instance: int, experts: int, counts: list[int] | None, source: str
    ) -> dict[str, Any]:
        return {
            "range": name,
            "instance": instance,
            "pid": self.pid,
            "tool": self.tool,
            "experts": experts,
            "counts": counts,
            "counts_from": source,
        }

    # -- recording --------------------------------------------------------------------------------------------------
    def record(self, name: str, kind: str, tensor: Any, experts: int) -> None:
        """One launch of range ``name``: its counts are in ``tensor`` (``kind`` as in :func:`counts_from`), or
        unknown (``tensor`` None). CPU values are resolved now; CUDA ones are copied asynchronously."""
        with self._lock:
            instance = self.instances.get(name, 0) + 1
            self.instances[name] = instance
            if tensor is None:
                self._write(self._line(name, instance, experts, None, "unknown"))
                return
            if not getattr(tensor, "is_cuda", False):
                values = tensor.tolist() if hasattr(tensor, "tolist") else list(tensor)
                self._write(self._line(name, instance, experts, counts_from(kind, values, experts), kind))
                return
            torch = sys.modules.get("torch")
            if torch is None:
                return
            if torch.cuda.is_current_stream_capturing():
                line = self._line(name, instance, experts, None, kind)
                line["skipped"] = "cuda-graph-capture"
                self._write(line)
                return
            key = (tuple(tensor.shape), tensor.dtype)
            free = self._pool.get(key)
            host = free.pop() if free else torch.empty(key[0], dtype=key[1], pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._pending.append((name, instance, kind, experts, host, event, key))
            if len(self._pending) > self.MAX_PENDING:
                self._drain(block=False)

    def _drain(self, block: bool) -> None:
        done = 0
        for name, instance, kind, experts, host, event, key in self._pending:
            if not block and not event.query():
                break
            event.synchronize()
            counts = counts_from(kind, host.tolist(), experts)
            self._write(self._line(name, instance, experts, counts, kind))
            self._pool.setdefault(key, []).append(host)
            done += 1
        del self._pending[:done]

    def flush(self) -> None:
        """Wait for every pending copy and write its line."""
        with self._lock:
            try:
                self._drain(block=True)
            finally:
                if self._file is not None:
                    self._file.flush()

    def close(self) -> None:
        """Flush, then close the file (called at exit); a later launch opens it again for appending."""
        self.flush()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


_recorder: RoutingRecorder | None = None
_recorder_checked = False


def _default_recorder() -> RoutingRecorder | None:
    value = os.environ.get(ENV_ROUTING, "").strip()
    if value.lower() in ("0", "off", "no", "false"):
        return None
    tool = os.environ.get("TRACEKIT_CAPTURE_TOOL") or None
    if value:
        return RoutingRecorder(Path(value), tool)
    run_dir = os.environ.get("TRACEKIT_RUN_DIR")
    if not run_dir or not (Path(run_dir) / "raw").is_dir():
        return None
    name = f"moe_routing-{tool or 'run'}-{os.getpid()}.jsonl"
    return RoutingRecorder(Path(run_dir) / "raw" / name, tool)


def get_recorder() -> RoutingRecorder | None:
    """The process's recorder, created on first use from the environment (None: counts are not recorded)."""
    global _recorder, _recorder_checked
    if not _recorder_checked:
        _recorder_checked = True
        _recorder = _default_recorder()
        if _recorder is not None:
            atexit.register(_recorder.close)
    return _recorder


def set_recorder(recorder: RoutingRecorder | None) -> RoutingRecorder | None:
    """Use ``recorder`` from now on (tests, or a program choosing its own file); returns the previous one."""
    global _recorder, _recorder_checked
    previous = _recorder
    _recorder, _recorder_checked = recorder, True
    return previous


# --- the table: one row per grouped / MoE entry point ------------------------------------------------------------
@dataclass(frozen=True)
class Counts:
    """Where a launch's tokens per expert are: ``kind`` as in :func:`counts_from` (``offsets``, ``sizes``,
    ``ids``) read from ``arg``, or ``unknown`` (routing happens inside the kernel). With ``key`` the argument is a
    dict holding the tensor under that key; ``dict_from`` is the first position where that dict may sit when the
    call does not pass it by keyword (positions vary between releases)."""

    kind: str
    arg: Arg | None = None
    key: str | None = None
    dict_from: int | None = None


@dataclass(frozen=True)
class ScaleByDtype:
    """The scale layout from the dtype of A's scale (``torch._scaled_grouped_mm``): e8m0 block scales are
    ``mxfp4-1x32`` / ``mxfp8-1x32``, other FP4 scales ``nvfp4-1x16``, anything else ``rowwise``; no scale
    tensor reads as fp32."""

    scale_a: Arg

    def name(self, da: str, sa_dtype: str) -> str:
        if da == "e2m1":
            return "mxfp4-1x32" if sa_dtype == "ue8m0" else "nvfp4-1x16"
        return "mxfp8-1x32" if sa_dtype == "ue8m0" else "rowwise"


class GroupShape(NamedTuple):
    """What a :data:`GROUPED_LAYOUTS` entry reads from the operand shapes: experts, routed rows (None: unknown),
    one expert's N and K, extra name fields, the rows of each expert when all are equal (batched 3D x 3D: the
    counts need no tensor), and B's dtype where the shapes decide it (packed FP4 weights)."""

    e: int
    m: int | None
    n: int
    k: int
    fields: dict[str, Any]
    equal_rows: int | None = None
    b: str | None = None


def _stacked_or_batched(s: dict[str, tuple[int, ...]], da: str, opt: dict[str, Any]) -> GroupShape | None:
    sa, sb = s["a"], s["b"]
    packed = 2 if da == "e2m1" else 1
    if len(sa) == 2 and len(sb) == 3:
        return GroupShape(sb[0], sa[0], sb[2], sa[1] * packed, {})
    if len(sa) == 3 and len(sb) == 3:
        return GroupShape(sa[0], sa[0] * sa[1], sb[2], sa[2] * packed, {}, equal_rows=sa[1])
    return None


def _stacked_b_either(s: dict[str, tuple[int, ...]], da: str, opt: dict[str, Any]) -> GroupShape | None:
    sa, sb = s["a"], s["b"]
    if len(sa) != 2 or len(sb) != 3:
        return None
    k = sa[1]
    return GroupShape(sb[0], sa[0], sb[2] if sb[1] == k else sb[1], k, {})


def _stacked_nk(s: dict[str, tuple[int, ...]], da: str, opt: dict[str, Any]) -> GroupShape | None:
    sa, sb = s["a"], s["b"]
    if len(sa) != 2 or len(sb) != 3:
        return None
    return GroupShape(sb[0], sa[0], sb[1], sa[1] * (2 if da == "e2m1" else 1), {})


def _fused_mlp(s: dict[str, tuple[int, ...]], da: str, opt: dict[str, Any]) -> GroupShape | None:
    s1, s2, sx, si = s["b"], s["w2"], s["a"], s["ids"]
    if len(s1) != 3 or len(s2) != 3 or len(si) != 2:
        return None
    e, n, k = s1[0], s1[1], s2[1]
    packed = s1[2] != k
    t, topk = sx[0], si[1]
    fields = {"T": t, "topk": topk, "I": s2[2] * (2 if packed else 1)}
    return GroupShape(e, t * topk, n, k, fields, b="e2m1" if packed else None)


def _routed_in_kernel(s: dict[str, tuple[int, ...]], da: str, opt: dict[str, Any]) -> GroupShape | None:
    sl, s1 = s["logits"], s["b"]
    if len(sl) != 2 or len(s1) != 3:
        return None
    t, e = sl
    topk = opt.get("topk")
    n = s1[1]
    m = t * int(topk) if topk else None
    return GroupShape(int(opt.get("experts") or e), m, n, s1[2] * 2, {"T": t, "topk": topk, "I": n // 2})


Layout = Callable[[dict[str, tuple[int, ...]], str, dict[str, Any]], GroupShape | None]

GROUPED_LAYOUTS: dict[str, Layout] = {
    "mk,ekn|emk,ekn": _stacked_or_batched,
    "mk,ekn|enk": _stacked_b_either,
    "mk,enk": _stacked_nk,
    "fused-mlp": _fused_mlp,
    "routed-in-kernel": _routed_in_kernel,
}
"""How E, M, N, K come from the operand shapes (each layout returns None for shapes it does not take).
``mk,ekn|emk,ekn``: A [M, K] (all experts' rows stacked) x B [E, K, N], or batched A [E, M_e, K] x B [E, K, N]
(M = E x M_e); ``mk,ekn|enk``: A [M, K] x B [E, K, N] or [E, N, K]; ``mk,enk``: A [M, K] x B [E, N, K];
``fused-mlp``: the whole expert MLP, A [T, H], ``ids`` [T, topk], B (fc1) [E, N = 2I, H], ``w2`` [E, H, I] (FP4 /
INT4 weights packed two to a byte along their last dimension), M = T x topk; ``routed-in-kernel``: ``logits``
[T, E], B [E, N = 2I, K/2], M = T x topk when ``topk`` is known, E overridden by the ``experts`` option. FP4 A
is packed two to a byte: K is twice its stored columns wherever A is ``e2m1``."""


@dataclass(frozen=True)
class Grouped:
    """How one grouped / MoE entry point's arguments name its range (``moe backend=.. op=.. E M N K a b out
    [scale] [T topk I]``, tracekit.collectors.ranges.moe_name) and where its per-expert counts are.

    ``operands`` are the tensors the ``layout`` reads, by role (``a`` and ``b`` always: A's and B's dtypes come
    from them); ``options`` are plain arguments the layout reads (``topk``, ``experts``). ``backend`` is a template
    (``{a}`` A's dtype, ``{family}`` fp4 / fp8 / A's dtype). ``dtypes`` fixes A's or B's dtype name where the
    tensors are packed bytes (None: read it); with ``bytes_fp4`` a uint8 A is FP4 (``e2m1``). The output dtype is
    ``out``'s, else ``out_default`` (``a``: A's dtype). ``shift`` = (by, args, keyword): a later signature with
    ``by`` more leading arguments, recognised by at least ``args`` positional arguments or by ``keyword``."""

    backend: str
    op: str
    operands: tuple[tuple[str, Arg], ...]
    layout: str
    counts: Counts
    options: tuple[tuple[str, Arg], ...] = ()
    dtypes: tuple[str | None, str | None] = (None, None)
    bytes_fp4: bool = False
    out: Arg | None = None
    out_default: str = "bf16"
    scale: str | ScaleByDtype | None = None
    shift: tuple[int, int, str] | None = None

    def __post_init__(self) -> None:
        if self.layout not in GROUPED_LAYOUTS:
            raise ValueError(f"MoE target op {self.op!r}: unknown layout {self.layout!r}")
        if not {"a", "b"} <= {role for role, _arg in self.operands}:
            raise ValueError(f"MoE target op {self.op!r}: operands need the roles 'a' and 'b'")


Launch = tuple[Any, Callable[[], str], str, Any, int]
"""A grouped launch as read: (cache key, name builder, counts kind, counts tensor or list, experts)."""


def _shifted(a: Arg, by: int) -> Arg:
    return a if not by or a.index is None else Arg(a.index + by, a.name, a.default)


def read_launch(spec: Grouped) -> Callable[[tuple[Any, ...], dict[str, Any]], Launch | None]:
    """The reader of one :class:`Grouped` entry: given a call's (args, kwargs), None for a call it does not name
    (shapes its layout does not take, something not a tensor), else the launch (:data:`Launch`)."""
    layout = GROUPED_LAYOUTS[spec.layout]
    fixed_a, fixed_b = spec.dtypes

    def read(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Launch | None:
        by = 0
        if spec.shift is not None:
            n_args, keyword = spec.shift[1], spec.shift[2]
            by = spec.shift[0] if len(args) >= n_args or keyword in kwargs else 0
        tensors = {role: _shifted(a, by).get(args, kwargs) for role, a in spec.operands}
        opt = {name: a.get(args, kwargs) for name, a in spec.options}
        try:
            shapes = {role: shape_of(t) for role, t in tensors.items()}
            da = fixed_a or dtype_name(tensors["a"].dtype)
            if spec.bytes_fp4 and da == "uint8":
                da = "e2m1"
            found = layout(shapes, da, opt)
            if found is None:
                return None
            db = fixed_b or found.b or dtype_name(tensors["b"].dtype)
            out_dtype = spec.out.get(args, kwargs) if spec.out is not None else None
            out = (
                dtype_name(out_dtype)
                if out_dtype is not None
                else (da if spec.out_default == "a" else spec.out_default)
            )
            if isinstance(spec.scale, ScaleByDtype):
                scale_a = spec.scale.scale_a.get(args, kwargs)
                scale = spec.scale.name(da, dtype_name(scale_a.dtype) if scale_a is not None else "fp32")
            else:
                scale = spec.scale
        except AttributeError:
            return None
        backend = spec.backend.format(a=da, family=FAMILY.get(da, da))
        key = (spec.op, backend, tuple(shapes.items()), da, db, out, scale, tuple(opt.values()))
        e, m, n, k, fields = found.e, found.m, found.n, found.k, found.fields

        def build() -> str:
            return ranges.moe_name(backend, spec.op, e, m, n, k, da, db, out, scale, **fields)  # type: ignore[arg-type]

        if found.equal_rows is not None:
            return key, build, "counts", [found.equal_rows] * e, e
        counts = spec.counts
        if counts.kind == "unknown" or counts.arg is None:
            return key, build, "counts", None, e
        tensor = _shifted(counts.arg, by).get(args, kwargs)
        if counts.key is not None:
            if tensor is None and counts.dict_from is not None:
                tensor = next((x for x in args[counts.dict_from :] if isinstance(x, dict)), None)
            tensor = tensor.get(counts.key) if isinstance(tensor, dict) else None
        return key, build, counts.kind, tensor, e

    return read


def moe_entry(package: str, path: str, spec: Grouped, torch_like: bool = False) -> Target:
    """A :data:`MOE_TARGETS` row: the entry point, its table entry, the range name read from it and, after each
    launch, its counts handed to the process's routing recorder."""
    read = read_launch(spec)

    def describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        found = read(args, kwargs)
        return None if found is None else (found[0], found[1])

    def record(args: tuple[Any, ...], kwargs: dict[str, Any], scope: Any) -> None:
        recorder = get_recorder()
        if recorder is None:
            return
        found = read(args, kwargs)
        if found is not None:
            recorder.record(scope.name, found[2], found[3], found[4])

    return Target(package, path, describe, torch_like=torch_like, record=record, spec=spec)


_GROUPED_MM = Grouped(
    "torch-{a}",
    "grouped_mm",
    (("a", Arg(0, "mat_a")), ("b", Arg(1, "mat_b"))),
    "mk,ekn|emk,ekn",
    Counts("offsets", Arg(2, "offs")),
    out=Arg(4, "out_dtype"),
    out_default="a",
)
# _scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None, out_dtype=None,
#                    use_fast_accum=False): fp8 rowwise (fp32 scales), mxfp8 / fp4 block scales
_SCALED_GROUPED_MM = Grouped(
    "torch-{family}",
    "scaled_grouped_mm",
    (("a", Arg(0, "mat_a")), ("b", Arg(1, "mat_b"))),
    "mk,ekn|emk,ekn",
    Counts("offsets", Arg(4, "offs")),
    out=Arg(7, "out_dtype"),
    scale=ScaleByDtype(Arg(2, "scale_a")),
)
# cutlass_fused_moe(input [T, H], token_selected_experts [T, topk], token_final_scales, fc1_expert_weights
#                   [E, 2I, H], fc2_expert_weights [E, H, I], output_dtype, quant_scales, ...)
_CUTLASS_FUSED_MOE = Grouped(
    "flashinfer-cutlass",
    "cutlass_fused_moe",
    (
        ("a", Arg(0, "input")),
        ("ids", Arg(1, "token_selected_experts")),
        ("b", Arg(3, "fc1_expert_weights")),
        ("w2", Arg(4, "fc2_expert_weights")),
    ),
    "fused-mlp",
    Counts("ids", Arg(1, "token_selected_experts")),
    bytes_fp4=True,
    out=Arg(5, "output_dtype"),
)
# trtllm_fp4_block_scale_moe(routing_logits [T, E], routing_bias, hidden_states, ..., gemm1_weights
#                            [E_local, 2I, H/2], ...): routing inside the kernel, M known only with top_k by keyword
_TRTLLM_FP4_MOE = Grouped(
    "flashinfer-trtllm",
    "trtllm_fp4_block_scale_moe",
    (("logits", Arg(0, "routing_logits")), ("a", Arg(2, "hidden_states")), ("b", Arg(4, "gemm1_weights"))),
    "routed-in-kernel",
    Counts("unknown"),
    options=(("topk", Arg(None, "top_k")), ("experts", Arg(None, "num_experts"))),
    dtypes=(None, "e2m1"),
    bytes_fp4=True,
    scale="nvfp4-1x16",
)

MOE_TARGETS: tuple[Target, ...] = (
    moe_entry("torch", "_grouped_mm", _GROUPED_MM, torch_like=True),
    moe_entry("torch", "_scaled_grouped_mm", _SCALED_GROUPED_MM, torch_like=True),
    moe_entry("flashinfer", "cutlass_fused_moe", _CUTLASS_FUSED_MOE),
    moe_entry("flashinfer", "fused_moe.cutlass_fused_moe", _CUTLASS_FUSED_MOE),
    moe_entry("flashinfer", "trtllm_fp4_block_scale_moe", _TRTLLM_FP4_MOE),
    moe_entry("flashinfer", "fused_moe.trtllm_fp4_block_scale_moe", _TRTLLM_FP4_MOE),
    # fp8_blockwise_scaled_grouped_mm(output, [a_ptrs, b_ptrs, out_ptrs, a_scales_ptrs, b_scales_ptrs,] a, b,
    #     scales_a, scales_b, stride_a, stride_b, stride_c, layout_sfa, layout_sfb, problem_sizes, expert_offsets
    #     [, workspace]): the pointer arguments came in later releases
    moe_entry(
        "sgl_kernel",
        "fp8_blockwise_scaled_grouped_mm",
        Grouped(
            "sgl-fp8",
            "fp8_blockwise_scaled_grouped_mm",
            (("a", Arg(1, "a")), ("b", Arg(2, "b"))),
            "mk,ekn|enk",
            Counts("sizes", Arg(10, "problem_sizes")),
            scale="blockwise-1x128.128x128",
            shift=(5, 17, "a_ptrs"),
        ),
    ),
    # cutlass_fp4_group_mm(a_fp4 [M, K/2], b_fp4 [E, N, K/2], a_blockscale, b_blockscale, alphas, out_dtype,
    #     [device,] params) with params["problem_sizes"] (E x 3)
    moe_entry(
        "sgl_kernel",
        "cutlass_fp4_group_mm",
        Grouped(
            "sgl-fp4",
            "cutlass_fp4_group_mm",
            (("a", Arg(0, "a_fp4")), ("b", Arg(1, "b_fp4"))),
            "mk,enk",
            Counts("sizes", Arg(None, "params"), key="problem_sizes", dict_from=6),
            dtypes=("e2m1", "e2m1"),
            out=Arg(5, "out_dtype"),
            scale="nvfp4-1x16",
        ),
    ),
)
"""The grouped / MoE entry points ``instrument()`` knows, in the order it wraps them (after the dense ones:
tracekit.collectors.instrument.TARGETS). A new one is one row: its :class:`Grouped` entry names the arguments,
the layout, the counts and the dtypes."""
