"""Ranges for grouped / MoE GEMMs, and the routing sidecar that records how many tokens each expert got.

``tracekit.instrument()`` wraps these entry points where their packages import (see ``moe_targets``):

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
from pathlib import Path
from typing import Any

from tracekit.collectors import ranges
from tracekit.collectors.instrument_targets import Target, arg, dtype_name, shape_of

__all__ = [
    "ENV_ROUTING",
    "RoutingRecorder",
    "counts_from",
    "describe_cutlass_fused_moe",
    "describe_grouped_mm",
    "describe_scaled_grouped_mm",
    "describe_sgl_fp4_group_mm",
    "describe_sgl_fp8_blockwise_grouped",
    "describe_trtllm_fp4_moe",
    "get_recorder",
    "moe_targets",
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


# --- describe: (args, kwargs) -> (cache key, name builder, counts kind, counts tensor, experts) -------------------
Described = tuple[Any, Callable[[], str], str, Any, int]


def _moe_name(
    backend: str,
    op: str,
    e: int,
    m: int | None,
    n: int,
    k: int,
    a: str,
    b: str,
    out: str,
    scale: str | None = None,
    **extra: Any,
) -> Callable[[], str]:
    return lambda: ranges.moe_name(backend, op, e, m, n, k, a, b, out, scale, **extra)  # type: ignore[arg-type]


def describe_grouped_mm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
    """``torch._grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None)``: 2D x 3D (MoE forward) and
    3D x 3D (batched); ragged-K 2D x 2D (weight gradients) is not a MoE launch and is left alone."""
    a, b = arg(args, kwargs, 0, "mat_a"), arg(args, kwargs, 1, "mat_b")
    offs, out_dtype = arg(args, kwargs, 2, "offs"), arg(args, kwargs, 4, "out_dtype")
    sa, sb = shape_of(a), shape_of(b)
    da, db = dtype_name(a.dtype), dtype_name(b.dtype)
    out = dtype_name(out_dtype) if out_dtype is not None else da
    if len(sa) == 2 and len(sb) == 3:
        e, m, k, n = sb[0], sa[0], sa[1], sb[2]
        key = ("grouped_mm", sa, sb, da, db, out)
        return key, _moe_name(f"torch-{da}", "grouped_mm", e, m, n, k, da, db, out), "offsets", offs, e
    if len(sa) == 3 and len(sb) == 3:
        e, mg, k, n = sa[0], sa[1], sa[2], sb[2]
        key = ("grouped_mm3", sa, sb, da, db, out)
        return (
            key,
            _moe_name(f"torch-{da}", "grouped_mm", e, e * mg, n, k, da, db, out),
            "counts",
            [mg] * e,
            e,
        )
    return None


def _grouped_scale(da: str, sa_dtype: str) -> str:
    if da == "e2m1":
        return "mxfp4-1x32" if sa_dtype == "ue8m0" else "nvfp4-1x16"
    if sa_dtype == "ue8m0":
        return "mxfp8-1x32"
    return "rowwise"


def describe_scaled_grouped_mm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
    """``torch._scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None,
    out_dtype=None, use_fast_accum=False)``: fp8 rowwise (fp32 scales), mxfp8 / fp4 block scales."""
    a, b = arg(args, kwargs, 0, "mat_a"), arg(args, kwargs, 1, "mat_b")
    scale_a = arg(args, kwargs, 2, "scale_a")
    offs, out_dtype = arg(args, kwargs, 4, "offs"), arg(args, kwargs, 7, "out_dtype")
    sa, sb = shape_of(a), shape_of(b)
    da, db = dtype_name(a.dtype), dtype_name(b.dtype)
    scale = _grouped_scale(da, dtype_name(scale_a.dtype) if scale_a is not None else "fp32")
    out = dtype_name(out_dtype) if out_dtype is not None else "bf16"
    packed = 2 if da == "e2m1" else 1
    family = "fp4" if da == "e2m1" else ("fp8" if da in ("e4m3", "e5m2") else da)
    if len(sa) == 2 and len(sb) == 3:
        e, m, k, n = sb[0], sa[0], sa[1] * packed, sb[2]
        key = ("scaled_grouped_mm", sa, sb, da, db, out, scale)
        name = _moe_name(f"torch-{family}", "scaled_grouped_mm", e, m, n, k, da, db, out, scale)
        return key, name, "offsets", offs, e
    if len(sa) == 3 and len(sb) == 3:
        e, mg, k, n = sa[0], sa[1], sa[2] * packed, sb[2]
        key = ("scaled_grouped_mm3", sa, sb, da, db, out, scale)
        name = _moe_name(f"torch-{family}", "scaled_grouped_mm", e, e * mg, n, k, da, db, out, scale)
        return key, name, "counts", [mg] * e, e
    return None


def describe_cutlass_fused_moe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
    """FlashInfer ``cutlass_fused_moe(input [T, H], token_selected_experts [T, topk], token_final_scales,
    fc1_expert_weights [E, 2I, H], fc2_expert_weights [E, H, I], output_dtype, quant_scales, ...)``. FP4 / INT4
    weights are packed two to a byte along their last dimension."""
    x = arg(args, kwargs, 0, "input")
    ids = arg(args, kwargs, 1, "token_selected_experts")
    w1, w2 = arg(args, kwargs, 3, "fc1_expert_weights"), arg(args, kwargs, 4, "fc2_expert_weights")
    out_dtype = arg(args, kwargs, 5, "output_dtype")
    s1, s2, sx, si = shape_of(w1), shape_of(w2), shape_of(x), shape_of(ids)
    if len(s1) != 3 or len(s2) != 3 or len(si) != 2:
        return None
    e, n, k = s1[0], s1[1], s2[1]
    packed = s1[2] != k
    inter = s2[2] * (2 if packed else 1)
    t, topk = sx[0], si[1]
    da = dtype_name(x.dtype)
    db = "e2m1" if packed else dtype_name(w1.dtype)
    da = "e2m1" if da == "uint8" else da
    out = dtype_name(out_dtype) if out_dtype is not None else "bf16"
    key = ("cutlass_fused_moe", sx, si, s1, s2, da, db, out)
    name = _moe_name(
        "flashinfer-cutlass", "cutlass_fused_moe", e, t * topk, n, k, da, db, out, T=t, topk=topk, I=inter
    )
    return key, name, "ids", ids, e


def describe_trtllm_fp4_moe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
    """FlashInfer ``trtllm_fp4_block_scale_moe(routing_logits [T, E], routing_bias, hidden_states, ...,
    gemm1_weights [E_local, 2I, H/2], ...)``: routing runs inside the kernel, so only the shape is named (M is the
    routed rows when ``top_k`` is passed by keyword) and the counts are recorded as unknown."""
    logits = arg(args, kwargs, 0, "routing_logits")
    x = arg(args, kwargs, 2, "hidden_states")
    w1 = arg(args, kwargs, 4, "gemm1_weights")
    topk = kwargs.get("top_k")
    sl, sx, s1 = shape_of(logits), shape_of(x), shape_of(w1)
    if len(sl) != 2 or len(s1) != 3:
        return None
    t, e = sl
    e = int(kwargs.get("num_experts") or e)
    n, k = s1[1], s1[2] * 2
    da = "e2m1" if dtype_name(x.dtype) == "uint8" else dtype_name(x.dtype)
    m = t * int(topk) if topk else None
    key = ("trtllm_fp4_moe", sl, sx, s1, topk)
    name = _moe_name(
        "flashinfer-trtllm",
        "trtllm_fp4_block_scale_moe",
        e,
        m,
        n,
        k,
        da,
        "e2m1",
        "bf16",
        "nvfp4-1x16",
        T=t,
        topk=topk,
        I=n // 2,
    )
    return key, name, "counts", None, e


def describe_sgl_fp8_blockwise_grouped(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
    """sgl-kernel ``fp8_blockwise_scaled_grouped_mm(output, [a_ptrs, b_ptrs, out_ptrs, a_scales_ptrs,
    b_scales_ptrs,] a, b, scales_a, scales_b, stride_a, stride_b, stride_c, layout_sfa, layout_sfb, problem_sizes,
    expert_offsets[, workspace])``: the pointer arguments came in later releases, so positions follow the count."""
    newer = len(args) >= 17 or "a_ptrs" in kwargs
    ia, ib, ip = (6, 7, 15) if newer else (1, 2, 10)
    a, b = arg(args, kwargs, ia, "a"), arg(args, kwargs, ib, "b")
    sizes = arg(args, kwargs, ip, "problem_sizes")
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) != 2 or len(sb) != 3:
        return None
    k = sa[1]
    e = sb[0]
    n = sb[2] if sb[1] == k else sb[1]
    key = ("sgl_fp8_blockwise_grouped", sa, sb)
    name = _moe_name(
        "sgl-fp8",
        "fp8_blockwise_scaled_grouped_mm",
        e,
        sa[0],
        n,
        k,
        dtype_name(a.dtype),
        dtype_name(b.dtype),
        "bf16",
        "blockwise-1x128.128x128",
    )
    return key, name, "sizes", sizes, e


def describe_sgl_fp4_group_mm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
    """sgl-kernel ``cutlass_fp4_group_mm(a_fp4 [M, K/2], b_fp4 [E, N, K/2], a_blockscale, b_blockscale, alphas,
    out_dtype, [device,] params)`` with ``params["problem_sizes"]`` (E x 3)."""
    a, b = arg(args, kwargs, 0, "a_fp4"), arg(args, kwargs, 1, "b_fp4")
    out_dtype = arg(args, kwargs, 5, "out_dtype")
    params = kwargs.get("params")
    if params is None:
        params = next((x for x in args[6:] if isinstance(x, dict)), None)
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) != 2 or len(sb) != 3:
        return None
    e, n, k = sb[0], sb[1], sa[1] * 2
    out = dtype_name(out_dtype) if out_dtype is not None else "bf16"
    sizes = params.get("problem_sizes") if isinstance(params, dict) else None
    key = ("sgl_fp4_group_mm", sa, sb, out)
    name = _moe_name("sgl-fp4", "cutlass_fp4_group_mm", e, sa[0], n, k, "e2m1", "e2m1", out, "nvfp4-1x16")
    return key, name, "sizes", sizes, e


def moe_targets() -> tuple[Target, ...]:
    """The MoE entry points as ``instrument`` targets (tracekit.collectors.instrument.TARGETS puts them after the
    dense ones)."""

    def t(package: str, path: str, fn: Callable[..., Described | None], torch_like: bool = False) -> Target:
        return Target(package, path, _naming_only(fn), torch_like=torch_like, record=_recording(fn))

    return (
        t("torch", "_grouped_mm", describe_grouped_mm, True),
        t("torch", "_scaled_grouped_mm", describe_scaled_grouped_mm, True),
        t("flashinfer", "cutlass_fused_moe", describe_cutlass_fused_moe),
        t("flashinfer", "fused_moe.cutlass_fused_moe", describe_cutlass_fused_moe),
        t("flashinfer", "trtllm_fp4_block_scale_moe", describe_trtllm_fp4_moe),
        t("flashinfer", "fused_moe.trtllm_fp4_block_scale_moe", describe_trtllm_fp4_moe),
        t("sgl_kernel", "fp8_blockwise_scaled_grouped_mm", describe_sgl_fp8_blockwise_grouped),
        t("sgl_kernel", "cutlass_fp4_group_mm", describe_sgl_fp4_group_mm),
    )


def _naming_only(fn: Callable[..., Described | None]) -> Callable[..., Any]:
    """Adapts a MoE describe to instrument's (key, name builder) contract."""

    def describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        found = fn(args, kwargs)
        return None if found is None else (found[0], found[1])

    return describe


def _recording(fn: Callable[..., Described | None]) -> Callable[..., None]:
    """After a wrapped launch: hand its counts to the process's recorder (nothing when none is set up)."""

    def record(args: tuple[Any, ...], kwargs: dict[str, Any], scope: Any) -> None:
        recorder = get_recorder()
        if recorder is None:
            return
        found = fn(args, kwargs)
        if found is None:
            return
        _key, _build, kind, tensor, experts = found
        recorder.record(scope.name, kind, tensor, experts)

    return record
