"""``tracekit bench moe``: grouped (MoE) expert GEMMs over tokens per step and routing distributions.

One expert GEMM is ``rows_e x N x K`` where ``rows_e`` is how many of the step's tokens the router sent to expert
``e``; a grouped launch runs all experts' GEMMs at once. The defaults are GLM-5's expert MLP: hidden 6144, expert
intermediate 2048, 256 experts, top-8; ``--proj gate_up`` times the fused gate+up projection (N = 2 x 2048,
K = 6144), ``--proj down`` the down projection (N = 6144, K = 2048).

Routing (``--routing``, comma-separated, each is a set of cases):

``uniform``
    every token picks ``topk`` distinct experts uniformly at random (seeded).
``zipf:S``
    distinct experts drawn with probability proportional to ``rank^-S`` (expert 0 is the hottest; S = 1.2 is
    a plausible skew, larger is more skewed).
``file:PATH``
    a routing the user captured, JSON lines (format in docs/MOE.md)::

        {"format": "tracekit-moe-routing", "experts": 256, "topk": 8}          optional header
        {"step": "decode-17", "counts": [3, 0, 12, ...]}                         tokens per expert, or
        {"step": "decode-18", "topk_ids": [[4, 17, ...], [0, 9, ...], ...]}      each token's experts

    Each step is one case (its tokens = sum(counts) / topk); ``--tokens`` does not apply to file steps.

Backends (each in its own worker process, failures recorded as in ``bench gemm``):
``torch-bf16-grouped`` (``torch._grouped_mm``), ``torch-fp8-grouped`` (``torch._scaled_grouped_mm``, e4m3 with
rowwise scales), ``torch-bf16-loop`` / ``torch-fp8-loop`` (one ``torch.mm`` / ``torch._scaled_mm`` per active
expert: the reference path), ``flashinfer-cutlass-moe`` (``flashinfer.fused_moe.cutlass_fused_moe`` bf16: both
expert GEMMs and the activation, where FlashInfer imports).

Per-expert time: a grouped launch is one kernel, so its experts are not timed apart here; the launch time is
attributed to experts by the analyzer (analyzers/moe.py: in proportion to each expert's CTA tiles). The loop
backends time each distinct per-expert row count on its own (a dense ``m x N x K`` GEMM on a cold expert weight,
rotated over enough experts to defeat the L2), which is both each expert's measured time and the time-vs-M curve
the what-if analysis reads; those curve points are written to ``raw/moe_curve.jsonl`` (the keys of a GEMM measurement).

Worker: ``python -m tracekit.collectors.moe --backend NAME --cases raw/moe_cases.json --ids 0,1 --out EVENTS``
speaks the event protocol of tracekit.collectors.worker; measurement rows go to ``raw/moe.jsonl``
(:data:`MOE_KEYS`), curve rows to ``raw/moe_curve.jsonl``, failures to ``raw/failures.jsonl``. Imports no polars;
torch only inside the backends.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import sys
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tracekit.collectors import failures as F
from tracekit.collectors import ranges
from tracekit.collectors.worker import (
    MEASUREMENT_KEYS,
    CudaTimer,
    Emitter,
    NoCudaError,
    quantile,
    report_trace_window,
    wall_times,
)
from tracekit.errors import BadInputError

__all__ = [
    "GLM5",
    "MOE_KEYS",
    "MoeBackend",
    "MoeCase",
    "MoeConfig",
    "MoeSettings",
    "all_moe_backends",
    "build_cases",
    "parse_routing",
    "parse_tokens",
    "read_routing_file",
    "register_moe",
    "route_counts",
    "tile_rule",
]

MOE_FILE = "moe.jsonl"
CURVE_FILE = "moe_curve.jsonl"
CASES_FILE = "moe_cases.json"
ROUTING_FORMAT = "tracekit-moe-routing"

MOE_KEYS = (
    "range",
    "backend",
    "op",
    "proj",
    "route",
    "tokens",
    "topk",
    "experts",
    "active",
    "rows",
    "n",
    "k",
    "inter",
    "dtype",
    "dtype_b",
    "dtype_out",
    "scale",
    "time_us",
    "time_us_p10",
    "time_us_p90",
    "repeats",
    "tflops",
    "rel_error",
    "status",
    "sm_clock_hz",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "throttle_reasons",
    "timing",
    "counts",
    "expert_time_us",
    "expert_time_source",
    "tile_m",
    "tile_n",
    "tile_source",
)
"""Keys of a ``raw/moe.jsonl`` line: the columns of ``tracekit.frames.MOE`` minus ``moe_id`` (``counts`` and
``expert_time_us`` are lists here, JSON text in the frame)."""


@dataclass(frozen=True)
class MoeConfig:
    """The expert MLP: hidden size, expert intermediate size, experts, experts per token, which projection."""

    hidden: int = 6144
    inter: int = 2048
    experts: int = 256
    topk: int = 8
    proj: str = "gate_up"

    @property
    def n(self) -> int:
        return 2 * self.inter if self.proj == "gate_up" else self.hidden

    @property
    def k(self) -> int:
        return self.hidden if self.proj == "gate_up" else self.inter


GLM5 = MoeConfig()
"""GLM-5's routed experts: hidden 6144, expert intermediate 2048, 256 experts, top-8."""

DEFAULT_TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


# --- routing ------------------------------------------------------------------------------------------------------
def route_counts(tokens: int, experts: int, topk: int, dist: str, seed: int = 0) -> list[int]:
    """Tokens per expert for one step: each of ``tokens`` tokens picks ``topk`` distinct experts.

    ``dist`` is ``uniform`` or ``zipf:S`` (probability of expert ``e`` proportional to ``(e + 1)^-S``). Seeded and
    pure Python, so the sweep, the tests and the worker agree on the same counts.
    """
    if topk > experts:
        raise BadInputError(f"top-k {topk} is larger than the {experts} experts", "lower --topk")
    rng = random.Random(f"{seed}:{tokens}:{experts}:{topk}:{dist}")
    kind, _, param = dist.partition(":")
    if kind == "uniform":
        weights = [1.0] * experts
    elif kind == "zipf":
        s = float(param or 1.2)
        weights = [(e + 1) ** -s for e in range(experts)]
    else:
        raise BadInputError(
            f"routing {dist!r} is not uniform or zipf:S", "use uniform, zipf:1.2 or file:PATH"
        )
    cum, total = [], 0.0
    for w in weights:
        total += w
        cum.append(total)
    counts = [0] * experts
    for _ in range(tokens):
        chosen: set[int] = set()
        draws = 0
        while len(chosen) < topk and draws < 64 * topk:
            chosen.add(min(bisect.bisect_left(cum, rng.random() * total), experts - 1))
            draws += 1
        e = 0
        while len(chosen) < topk:  # extreme skew: fill with the next hottest experts
            chosen.add(e)
            e += 1
        for e in chosen:
            counts[e] += 1
    return counts


def read_routing_file(path: Path, experts: int, topk: int) -> list[tuple[str, list[int]]]:
    """(step label, counts) for every step of a routing file (format in the module docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(
            f"cannot read routing file {path} ({exc})", "give a JSON-lines routing file"
        ) from exc
    steps: list[tuple[str, list[int]]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise BadInputError(
                f"{path}:{i} is not JSON ({exc.args[0]})", "one JSON object per line (see docs/MOE.md)"
            ) from None
        if not isinstance(obj, dict):
            raise BadInputError(
                f"{path}:{i} is not a JSON object", "one JSON object per line (see docs/MOE.md)"
            )
        if obj.get("format") == ROUTING_FORMAT:
            if obj.get("experts") not in (None, experts) or obj.get("topk") not in (None, topk):
                raise BadInputError(
                    f"{path} was captured with {obj.get('experts')} experts, top-{obj.get('topk')}; "
                    f"the benchmark is set to {experts} experts, top-{topk}",
                    "pass --experts / --topk to match the file",
                )
            continue
        label = str(obj.get("step", len(steps)))
        if "counts" in obj:
            counts = obj["counts"]
            if (
                not isinstance(counts, list)
                or len(counts) != experts
                or not all(isinstance(c, int) and c >= 0 for c in counts)
            ):
                raise BadInputError(
                    f"{path}:{i}: counts must be {experts} non-negative integers", "one count per expert"
                )
        elif "topk_ids" in obj:
            ids = obj["topk_ids"]
            if not isinstance(ids, list) or not all(isinstance(r, list) and len(r) == topk for r in ids):
                raise BadInputError(
                    f"{path}:{i}: topk_ids must be a list of {topk}-expert lists", "see docs/MOE.md"
                )
            if any(not isinstance(e, int) or not 0 <= e < experts for r in ids for e in r):
                raise BadInputError(
                    f"{path}:{i}: an expert id is outside 0..{experts - 1}", "check --experts"
                )
            counts = [0] * experts
            for r in ids:
                for e in r:
                    counts[e] += 1
        else:
            raise BadInputError(f"{path}:{i} has neither counts nor topk_ids", "see docs/MOE.md")
        if sum(counts) == 0:
            raise BadInputError(f"{path}:{i} routes no tokens", "drop empty steps")
        steps.append((label, counts))
    if not steps:
        raise BadInputError(f"{path} holds no routing steps", "see docs/MOE.md for the format")
    return steps


@dataclass(frozen=True)
class MoeCase:
    """One step to time: its routing label, tokens per step and tokens per expert."""

    case_id: int
    tokens: int
    route: str
    counts: tuple[int, ...]

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def active(self) -> int:
        return sum(1 for c in self.counts if c)


def parse_tokens(text: str) -> list[int]:
    """``1,16,256`` or ``glm5`` (1..4096) into token counts."""
    text = (text or "").strip().lower()
    if text in ("", "glm5", "default"):
        return list(DEFAULT_TOKENS)
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise BadInputError(
            f"--tokens {text!r} is not a list of integers", "e.g. --tokens 1,16,256,4096"
        ) from None
    if not values or min(values) < 1:
        raise BadInputError("--tokens needs positive integers", "e.g. --tokens 1,16,256,4096")
    return values


def parse_routing(text: str) -> list[str]:
    """``uniform,zipf:1.2,file:PATH`` into routing specs (checked, not yet expanded)."""
    specs = [s.strip() for s in (text or "").split(",") if s.strip()]
    if not specs:
        raise BadInputError("no routing given", "use --routing uniform,zipf:1.2 (or file:PATH)")
    for s in specs:
        kind, _, param = s.partition(":")
        if kind == "zipf":
            try:
                if float(param or 1.2) <= 0:
                    raise ValueError
            except ValueError:
                raise BadInputError(
                    f"routing {s!r}: the Zipf exponent must be a positive number", "e.g. zipf:1.2"
                ) from None
        elif kind == "file":
            if not Path(param).is_file():
                raise BadInputError(
                    f"routing file {param!r} does not exist", "give file:PATH to a JSON-lines file"
                )
        elif kind != "uniform":
            raise BadInputError(
                f"routing {s!r} is not uniform, zipf:S or file:PATH", "see tracekit bench moe --help"
            )
    return specs


def build_cases(
    config: MoeConfig, tokens: Iterable[int], routing: Iterable[str], seed: int = 0
) -> list[MoeCase]:
    """Every (routing, tokens) case; a routing file contributes one case per step."""
    cases: list[MoeCase] = []
    for spec in routing:
        kind, _, param = spec.partition(":")
        if kind == "file":
            path = Path(param)
            for label, counts in read_routing_file(path, config.experts, config.topk):
                t = max(1, round(sum(counts) / config.topk))
                cases.append(MoeCase(len(cases), t, f"file:{path.stem}#{label}", tuple(counts)))
            continue
        route = "uniform" if kind == "uniform" else f"zipf{float(param or 1.2):g}"
        for t in tokens:
            counts = route_counts(
                t, config.experts, config.topk, spec if kind != "zipf" else f"zipf:{param or 1.2}", seed
            )
            cases.append(MoeCase(len(cases), t, route, tuple(counts)))
    return cases


# --- tiles --------------------------------------------------------------------------------------------------------
def tile_rule(
    op: str, rows: int, experts: int, n: int, k: int, fast_accum: bool = True
) -> tuple[int, int] | None:
    """The CTA tile (M, N) PyTorch's SM90 grouped kernels pick, as their dispatch reads (aten GroupMM.cu and
    ScaledGroupMM.cu, torch 2.8-2.11): it looks at the mean rows per group over *all* groups. None for ops whose
    tile tracekit does not know (the kernel name, when a timeline has it, is used instead)."""
    m = rows // max(experts, 1)
    small = m <= 128 or n <= 128
    if op == "grouped_mm":
        return (64, 128) if small else (128, 256)
    if op == "scaled_grouped_mm":
        if small:
            return (64, 128)
        large = (m >= 2048 and k >= 2048) or (m >= 2048 and n >= 2048) or (k >= 2048 and n >= 2048)
        if large:
            return (256, 128) if fast_accum else (128, 128)
        return (128, 256)
    return None


# --- backends -----------------------------------------------------------------------------------------------------
def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class MoeBackend:
    """A grouped-GEMM implementation. ``prepare_weights`` runs once per worker (all experts' weights), ``prepare``
    once per case (activations, offsets), ``run`` is what is timed, ``reference`` an fp32 result from the same
    (dequantized) operands. ``expert_fns`` (loop backends) returns callables that each run one expert's GEMM of
    ``m`` rows on a different expert, for the per-expert curve."""

    name: ClassVar[str] = ""
    op: ClassVar[str] = ""
    dtype: ClassVar[str] = "bf16"
    dtype_out: ClassVar[str] = "bf16"
    scale: ClassVar[str | None] = None
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    packages: ClassVar[tuple[str, ...]] = ("torch",)
    tolerance: ClassVar[float] = 0.02
    timer: ClassVar[str] = "cuda"
    per_expert: ClassVar[bool] = False
    """True when each expert's GEMM is timed on its own (the loop backends)."""
    fused: ClassVar[bool] = False
    """True when the launch runs both expert GEMMs (fc1 and fc2): FLOPs count both."""
    description: ClassVar[str] = ""

    def available(self) -> tuple[bool, str]:
        missing = [m for m in self.requires if not _has(m)]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install {' '.join(self.packages)})"
        return True, ""

    def name_fields(self, config: MoeConfig, case: MoeCase) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments of this case's ``moe`` range name (ranges.moe_name / moe_range)."""
        args = (self.name, self.op, config.experts, case.rows, config.n, config.k)
        args += (self.dtype, self.dtype, self.dtype_out, self.scale)
        return args, {"T": case.tokens, "topk": config.topk, "route": case.route}

    def range_name(self, config: MoeConfig, case: MoeCase) -> str:
        args, extra = self.name_fields(config, case)
        return ranges.moe_name(*args, **extra)

    def scope(self, config: MoeConfig, case: MoeCase) -> Any:
        args, extra = self.name_fields(config, case)
        return ranges.moe_range(*args, **extra)

    def _expert_args(self, config: MoeConfig, m: int) -> tuple[Any, ...]:
        return (
            self.name,
            "expert",
            m,
            config.n,
            config.k,
            self.dtype,
            self.dtype,
            self.dtype_out,
            self.scale,
        )

    def curve_name(self, config: MoeConfig, m: int) -> str:
        """The ``gemm`` range name of one expert's GEMM of ``m`` rows (the loop backends' curve points)."""
        return ranges.gemm_name(*self._expert_args(config, m), of="moe")

    def expert_scope(self, config: MoeConfig, m: int) -> Any:
        """The range :meth:`curve_name` names, to open around each per-expert launch."""
        return ranges.gemm_range(*self._expert_args(config, m), of="moe")

    def tile(self, config: MoeConfig, case: MoeCase) -> tuple[int | None, int | None, str | None]:
        t = tile_rule(self.op, case.rows, config.experts, config.n, config.k)
        if t is None:
            return None, None, None
        return (
            t[0],
            t[1],
            "dispatch rule of torch's SM90 grouped kernels (aten GroupMM.cu / ScaledGroupMM.cu)",
        )

    def flops(self, config: MoeConfig, case: MoeCase) -> float:
        per_row = config.n * config.k + (config.k * config.inter if self.fused else 0)
        return 2.0 * case.rows * per_row

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> Any:
        raise NotImplementedError

    def prepare(self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int) -> Any:
        raise NotImplementedError

    def run(self, state: Any) -> Any:
        raise NotImplementedError

    def reference(self, state: Any) -> Any:
        raise NotImplementedError

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        raise NotImplementedError


def _torch() -> Any:
    import torch

    return torch


def _randn(shape: tuple[int, ...], device: Any, seed: int, salt: int, scale: float = 1.0) -> Any:
    torch = _torch()
    g = torch.Generator(device=device)
    g.manual_seed(seed * 1000003 + salt)
    x = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=g)
    return x.mul_(scale) if scale != 1.0 else x


def _offsets(counts: tuple[int, ...], device: Any) -> Any:
    torch = _torch()
    ends, total = [], 0
    for c in counts:
        total += c
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device)


def _rowwise_fp8(x: Any) -> tuple[Any, Any]:
    from tracekit.collectors.backends import _fp8_rowwise

    return _fp8_rowwise(x)


class TorchBf16Grouped(MoeBackend):
    name = "torch-bf16-grouped"
    op = "grouped_mm"
    tolerance = 0.01
    description = "torch._grouped_mm, bf16: all experts in one CUTLASS grouped launch"

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> dict[str, Any]:
        # (E, N, K) row-major, as nn.Linear stores them; K^-1/2 keeps outputs O(1)
        w = _randn((config.experts, config.n, config.k), device, seed, 2, config.k**-0.5)
        return {"w": w}

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        x = _randn((case.rows, config.k), device, seed, 1000 + case.case_id)
        return {
            "x": x,
            "w": weights["w"],
            "offs": _offsets(case.counts, device),
            "counts": case.counts,
            "range": self.scope(config, case),
        }

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        with state["range"]:
            return torch._grouped_mm(state["x"], state["w"].transpose(-2, -1), offs=state["offs"])

    def _operands(self, state: dict[str, Any], e: int) -> tuple[Any, Any]:
        return state["x"], state["w"][e]

    def reference(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        x, counts = state["x"], state["counts"]
        out = torch.empty((x.shape[0], state["w"].shape[1]), device=x.device, dtype=torch.float32)
        start = 0
        for e, c in enumerate(counts):
            if c:
                a, w = self._ref_operands(state, e, start, start + c)
                out[start : start + c] = a @ w.t()
            start += c
        return out

    def _ref_operands(self, state: dict[str, Any], e: int, lo: int, hi: int) -> tuple[Any, Any]:
        return state["x"][lo:hi].float(), state["w"][e].float()

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        raise NotImplementedError


class TorchFp8Grouped(TorchBf16Grouped):
    name = "torch-fp8-grouped"
    op = "scaled_grouped_mm"
    dtype = "e4m3"
    scale = "rowwise"
    tolerance = 0.08
    description = "torch._scaled_grouped_mm, e4m3 with rowwise fp32 scales (tokens x 1, experts x N)"

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> dict[str, Any]:
        torch = _torch()
        qw = torch.empty((config.experts, config.n, config.k), device=device, dtype=torch.float8_e4m3fn)
        sw = torch.empty((config.experts, config.n), device=device, dtype=torch.float32)
        for e in range(config.experts):  # one expert at a time: the fp32 copy of all experts would not fit
            w = _randn((config.n, config.k), device, seed, 10_000 + e, config.k**-0.5)
            q, s = _rowwise_fp8(w)
            qw[e], sw[e] = q, s.reshape(-1)
        return {"qw": qw, "sw": sw}

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        x = _randn((case.rows, config.k), device, seed, 1000 + case.case_id)
        qx, sx = _rowwise_fp8(x)
        return {
            "qx": qx,
            "sx": sx.reshape(-1).contiguous(),
            "qw": weights["qw"],
            "sw": weights["sw"],
            "w": weights["qw"],
            "offs": _offsets(case.counts, device),
            "counts": case.counts,
            "x": qx,
            "range": self.scope(config, case),
        }

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        with state["range"]:
            return torch._scaled_grouped_mm(
                state["qx"],
                state["qw"].transpose(-2, -1),
                state["sx"],
                state["sw"],
                offs=state["offs"],
                out_dtype=torch.bfloat16,
                use_fast_accum=True,
            )

    def _ref_operands(self, state: dict[str, Any], e: int, lo: int, hi: int) -> tuple[Any, Any]:
        a = state["qx"][lo:hi].float() * state["sx"][lo:hi].unsqueeze(1)
        return a, state["qw"][e].float() * state["sw"][e].unsqueeze(1)


class TorchBf16Loop(TorchBf16Grouped):
    name = "torch-bf16-loop"
    op = "loop_mm"
    per_expert = True
    description = "one torch.mm per active expert, bf16 (the reference path; each expert timed on its own)"

    def tile(self, config: MoeConfig, case: MoeCase) -> tuple[int | None, int | None, str | None]:
        return None, None, None  # one cuBLAS GEMM per expert: no shared tile

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        x, w = state["x"], state["w"]
        out = state.get("out")
        if out is None:
            out = state["out"] = torch.empty((x.shape[0], w.shape[1]), device=x.device, dtype=torch.bfloat16)
        with state["range"]:
            for e, lo, hi in state["spans"]:
                torch.mm(x[lo:hi], w[e].t(), out=out[lo:hi])
        return out

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        state = super().prepare(config, case, weights, device, seed)
        state["spans"] = _spans(case.counts)
        return state

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        torch = _torch()
        w = weights["w"]
        x = _randn((m, config.k), device, seed, 7)
        scope = self.expert_scope(config, m)

        def one(e: int) -> Any:
            def fn() -> Any:
                with scope:
                    return torch.mm(x, w[e].t())

            return fn

        return [one(e % config.experts) for e in range(count)]


class TorchFp8Loop(TorchFp8Grouped):
    name = "torch-fp8-loop"
    op = "loop_scaled_mm"
    per_expert = True
    description = "one torch._scaled_mm per active expert, e4m3 rowwise (the fp8 reference path)"

    def tile(self, config: MoeConfig, case: MoeCase) -> tuple[int | None, int | None, str | None]:
        return None, None, None

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        state = super().prepare(config, case, weights, device, seed)
        state["spans"] = _spans(case.counts)
        state["sx2"] = state["sx"].reshape(-1, 1)
        return state

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        qx, qw, sx, sw = state["qx"], state["qw"], state["sx2"], state["sw"]
        outs = []
        with state["range"]:
            for e, lo, hi in state["spans"]:
                outs.append(
                    torch._scaled_mm(
                        qx[lo:hi],
                        qw[e].t(),
                        sx[lo:hi],
                        sw[e].reshape(1, -1),
                        out_dtype=torch.bfloat16,
                        use_fast_accum=True,
                    )
                )
        return torch.cat(outs) if outs else qx.new_empty((0, qw.shape[1]), dtype=torch.bfloat16)

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        torch = _torch()
        qx, sx = _rowwise_fp8(_randn((m, config.k), device, seed, 7))
        scope = self.expert_scope(config, m)
        qw, sw = weights["qw"], weights["sw"]

        def one(e: int) -> Any:
            def fn() -> Any:
                with scope:
                    return torch._scaled_mm(
                        qx, qw[e].t(), sx, sw[e].reshape(1, -1), out_dtype=torch.bfloat16, use_fast_accum=True
                    )

            return fn

        return [one(e % config.experts) for e in range(count)]


class FlashinferCutlassMoe(MoeBackend):
    """``flashinfer.fused_moe.cutlass_fused_moe`` in bf16: fc1 (gate+up, SwiGLU) and fc2 (down) of every expert."""

    name = "flashinfer-cutlass-moe"
    op = "cutlass_fused_moe"
    requires = ("torch", "flashinfer")
    packages = ("torch", "flashinfer-python")
    tolerance = 0.03
    fused = True
    description = (
        "flashinfer cutlass_fused_moe, bf16: both expert GEMMs + SwiGLU in one call (FLOPs count both)"
    )

    def name_fields(self, config: MoeConfig, case: MoeCase) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = (self.name, self.op, config.experts, case.rows, 2 * config.inter, config.hidden)
        args += ("bf16", "bf16", "bf16", None)
        return args, {"T": case.tokens, "topk": config.topk, "route": case.route, "I": config.inter}

    def flops(self, config: MoeConfig, case: MoeCase) -> float:
        return 2.0 * case.rows * (2 * config.inter * config.hidden + config.hidden * config.inter)

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> dict[str, Any]:
        w1 = _randn((config.experts, 2 * config.inter, config.hidden), device, seed, 2, config.hidden**-0.5)
        w2 = _randn((config.experts, config.hidden, config.inter), device, seed, 3, config.inter**-0.5)
        return {"w1": w1, "w2": w2}

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        torch = _torch()
        ids = []
        for e, c in enumerate(case.counts):  # token t's experts: spread the counts over tokens round-robin
            ids.extend([e] * c)
        t = case.tokens
        table = [[] for _ in range(t)]  # type: list[list[int]]
        for i, e in enumerate(sorted(ids, key=lambda e: -case.counts[e])):
            table[i % t].append(e)
        ids_t = torch.tensor(table, dtype=torch.int32, device=device)
        x = _randn((t, config.hidden), device, seed, 1000 + case.case_id)
        scales = torch.full((t, config.topk), 1.0 / config.topk, device=device, dtype=torch.float32)
        return {"x": x, "ids": ids_t, "scales": scales, **weights, "range": self.scope(config, case)}

    def run(self, state: dict[str, Any]) -> Any:
        from flashinfer.fused_moe import cutlass_fused_moe

        torch = _torch()
        with state["range"]:
            out = cutlass_fused_moe(
                state["x"], state["ids"], state["scales"], state["w1"], state["w2"], torch.bfloat16, []
            )
        return out[0] if isinstance(out, list | tuple) else out

    def reference(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        x, ids, scales = state["x"].float(), state["ids"], state["scales"]
        out = torch.zeros_like(x)
        for slot in range(ids.shape[1]):
            for e in ids[:, slot].unique().tolist():
                rows = (ids[:, slot] == e).nonzero().flatten()
                h = x[rows] @ state["w1"][e].float().t()
                gate, up = h.chunk(2, dim=-1)
                act = torch.nn.functional.silu(gate) * up  # TRT-LLM's Swiglu: silu(first half) * second half
                out[rows] += scales[rows, slot : slot + 1] * (act @ state["w2"][e].float().t())
        return out


def _spans(counts: tuple[int, ...]) -> list[tuple[int, int, int]]:
    spans, lo = [], 0
    for e, c in enumerate(counts):
        if c:
            spans.append((e, lo, lo + c))
        lo += c
    return spans


MOE_BACKENDS: dict[str, MoeBackend] = {}


def register_moe(backend: MoeBackend) -> MoeBackend:
    """Add (or replace) a MoE backend; plugins named in TRACEKIT_BACKEND_PLUGINS may call this."""
    if not backend.name:
        raise ValueError("a backend needs a name")
    MOE_BACKENDS[backend.name] = backend
    return backend


for _cls in (TorchBf16Grouped, TorchFp8Grouped, TorchBf16Loop, TorchFp8Loop, FlashinferCutlassMoe):
    register_moe(_cls())
BUILTIN_MOE = tuple(MOE_BACKENDS)
DEFAULT_BACKENDS = ("torch-bf16-grouped", "torch-fp8-grouped", "torch-bf16-loop")


def all_moe_backends() -> dict[str, MoeBackend]:
    from tracekit.collectors.backends import load_plugins

    load_plugins()
    return MOE_BACKENDS


# --- settings for the sweep driver (tracekit.collectors.bench.run_sweep) ------------------------------------------
@dataclass
class MoeSettings:
    """What ``tracekit bench moe`` runs; saved as the run manifest's ``capture``."""

    backends: list[str]
    config: MoeConfig
    tokens: list[int]
    routing: list[str]
    warmup: int = 10
    repeats: int = 25
    timeout: float = 300.0
    timing: str = "auto"
    device: int = 0
    seed: int = 0
    python: str = field(default_factory=lambda: sys.executable)
    tool: str = field(default="tracekit bench moe", init=False)
    measurements_file: str = field(default=MOE_FILE, init=False, repr=False)
    measurement_keys: tuple[str, ...] = field(default=MOE_KEYS, init=False, repr=False)
    side_files: dict[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=lambda: {"curve": (CURVE_FILE, MEASUREMENT_KEYS)}, init=False, repr=False
    )
    moe_cases: list[MoeCase] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.moe_cases = build_cases(self.config, self.tokens, self.routing, self.seed)

    def manifest(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "backends": list(self.backends),
            "config": asdict(self.config),
            "n": self.config.n,
            "k": self.config.k,
            "tokens": list(self.tokens),
            "routing": list(self.routing),
            "cases": len(self.moe_cases),
            "warmup": self.warmup,
            "repeats": self.repeats,
            "timeout": self.timeout,
            "timing": self.timing,
            "device": self.device,
            "seed": self.seed,
            "python": self.python,
        }

    @property
    def cases(self) -> list[tuple[int, ...]]:
        return [(c.rows, self.config.n, self.config.k, c.case_id) for c in self.moe_cases]

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        cid = next(
            (
                c.case_id
                for c in self.moe_cases
                if c.route == row.get("route") and c.tokens == row.get("tokens")
            ),
            None,
        )
        return (row.get("rows"), row.get("n"), row.get("k"), cid)

    def prepare_run(self, run: Any) -> None:
        """Write the cases (with their counts) where the workers read them."""
        payload = {
            "config": asdict(self.config),
            "cases": [
                {"case_id": c.case_id, "tokens": c.tokens, "route": c.route, "counts": list(c.counts)}
                for c in self.moe_cases
            ],
        }
        logs = (
            run.raw_dir / "logs"
        )  # raw/logs/ is not imported: the cases are the workers' input, not a record
        logs.mkdir(parents=True, exist_ok=True)
        self._cases_path = logs / CASES_FILE
        self._cases_path.write_text(json.dumps(payload) + "\n", encoding="utf-8")

    def worker_cmd(self, backend: str, cases: Iterable[tuple[int, ...]], out: Path) -> list[str]:
        return [
            self.python,
            "-X",
            "faulthandler",
            "-m",
            "tracekit.collectors.moe",
            "--backend",
            backend,
            "--cases",
            str(self._cases_path),
            "--ids",
            ",".join(str(c[3]) for c in cases),
            "--out",
            str(out),
            "--warmup",
            str(self.warmup),
            "--repeats",
            str(self.repeats),
            "--timing",
            self.timing,
            "--device",
            str(self.device),
            "--seed",
            str(self.seed),
        ]


# --- the worker ---------------------------------------------------------------------------------------------------
def _check(tolerance: float, dtype: str, out: Any, ref: Any) -> tuple[float | None, str, str]:
    from tracekit.collectors.worker import _check as check_gemm

    class _B:  # the GEMM worker's check wants .tolerance and .dtype
        pass

    b = _B()
    b.tolerance, b.dtype = tolerance, dtype  # type: ignore[attr-defined]
    return check_gemm(b, out, ref)


def _row(
    backend: MoeBackend,
    config: MoeConfig,
    case: MoeCase,
    times: list[float],
    how: str,
    nv: dict[str, Any],
    rel: float | None,
    status: str,
) -> dict[str, Any]:
    med = quantile(times, 0.5)
    tile_m, tile_n, tile_src = backend.tile(config, case)
    inter = config.inter if backend.fused else None
    return {
        "range": backend.range_name(config, case),
        "backend": backend.name,
        "op": backend.op,
        "proj": "fused" if backend.fused else config.proj,
        "route": case.route,
        "tokens": case.tokens,
        "topk": config.topk,
        "experts": config.experts,
        "active": case.active,
        "rows": case.rows,
        "n": 2 * config.inter if backend.fused else config.n,
        "k": config.hidden if backend.fused else config.k,
        "inter": inter,
        "dtype": backend.dtype,
        "dtype_b": backend.dtype,
        "dtype_out": backend.dtype_out,
        "scale": backend.scale,
        "time_us": med,
        "time_us_p10": quantile(times, 0.1),
        "time_us_p90": quantile(times, 0.9),
        "repeats": len(times),
        "tflops": backend.flops(config, case) / (med * 1e-6) / 1e12 if med > 0 else None,
        "rel_error": rel,
        "status": status,
        **nv,
        "timing": how,
        "counts": list(case.counts),
        "expert_time_us": None,
        "expert_time_source": None,
        "tile_m": tile_m,
        "tile_n": tile_n,
        "tile_source": tile_src,
    }


def _curve_row(
    backend: MoeBackend, config: MoeConfig, m: int, times: list[float], how: str, nv: dict[str, Any]
) -> dict[str, Any]:
    med = quantile(times, 0.5)
    return {
        "range": backend.curve_name(config, m),
        "backend": backend.name,
        "op": "expert",
        "m": m,
        "n": config.n,
        "k": config.k,
        "dtype": backend.dtype,
        "dtype_out": backend.dtype_out,
        "scale": backend.scale,
        "time_us": med,
        "time_us_p10": quantile(times, 0.1),
        "time_us_p90": quantile(times, 0.9),
        "repeats": len(times),
        "tflops": 2.0 * m * config.n * config.k / (med * 1e-6) / 1e12 if med > 0 else None,
        "aux_time_us": None,
        "rel_error": None,
        "status": "ok",
        **nv,
        "timing": how,
    }


_NO_NVML = {
    "sm_clock_hz": None,
    "power_w": None,
    "power_limit_w": None,
    "temperature_c": None,
    "throttle_reasons": None,
}


def measure_case(
    backend: MoeBackend,
    timer: CudaTimer | None,
    config: MoeConfig,
    case: MoeCase,
    weights: Any,
    curve: dict[int, tuple[float, dict[str, Any]]],
    emit: Any,
    *,
    warmup: int,
    repeats: int,
    seed: int,
) -> tuple[dict[str, Any], str]:
    """Time one case (and, for loop backends, every per-expert row count not yet on the curve)."""
    device = timer.device if timer is not None else None
    state = backend.prepare(config, case, weights, device, seed)
    rel, status, why = None, "ok", ""
    if timer is not None:
        torch = timer.torch
        with ranges.suppressed():
            out = backend.run(state)
        torch.cuda.synchronize()
        ref = backend.reference(state)
        rel, status, why = _check(backend.tolerance, backend.dtype, out, ref)
        del out, ref
        times, how, nv_sample = timer.time([lambda: backend.run(state)], warmup, repeats)
        nv = nv_sample.as_columns()
    else:
        times, how, nv = wall_times([lambda: backend.run(state)], warmup, repeats), "wall", dict(_NO_NVML)
    row = _row(backend, config, case, times, how, nv, rel, status)
    if backend.per_expert:
        for m in sorted({c for c in case.counts if c} - set(curve)):
            if timer is not None:
                count = timer.buffers_for(config.n * config.k * _bytes(backend.dtype))
                fns = backend.expert_fns(config, weights, m, count, device, seed)
                t, h, s = timer.time(fns, max(1, warmup // 2), repeats)
                cnv = s.as_columns()
            else:
                fns = backend.expert_fns(config, weights, m, 2, device, seed)
                t, h, cnv = wall_times(fns, max(1, warmup // 2), repeats), "wall", dict(_NO_NVML)
            crow = _curve_row(backend, config, m, t, h, cnv)
            curve[m] = (crow["time_us"], crow)
            emit("curve", shape=[case.rows, config.n, config.k, case.case_id], row=crow)
        row["expert_time_us"] = [curve[c][0] if c else None for c in case.counts]
        row["expert_time_source"] = "measured: each distinct per-expert row count timed as its own GEMM"
    return row, why


def _bytes(dtype: str) -> int:
    return 1 if dtype in ("e4m3", "e5m2") else 2


def run_worker(args: argparse.Namespace) -> int:
    emit = Emitter(args.out)
    emit("hello", backend=args.backend, pid=os.getpid(), python=sys.version.split()[0])
    from tracekit.collectors.env import versions_json

    spec = json.loads(Path(args.cases).read_text(encoding="utf-8"))
    config = MoeConfig(**spec["config"])
    by_id = {
        c["case_id"]: MoeCase(c["case_id"], c["tokens"], c["route"], tuple(c["counts"]))
        for c in spec["cases"]
    }
    cases = [by_id[int(i)] for i in args.ids.split(",") if i.strip()]
    backends = all_moe_backends()
    backend = backends.get(args.backend)
    device_name = cc = None
    versions = None

    def fail(case: MoeCase, kind: str, etype: str, msg: str, tb: str, poisoned: bool = False) -> None:
        row = F.failure_record(
            backend=args.backend,
            op=backend.op if backend else None,
            m=case.rows,
            n=config.n,
            k=config.k,
            kind=kind,
            error_type=etype,
            message=msg,
            traceback=tb,
            device_name=device_name,
            compute_capability=cc,
            versions=versions,
        )
        emit("failure", shape=[case.rows, config.n, config.k, case.case_id], row=row, poisoned=poisoned)

    setup_error: tuple[str, str, str, str] | None = None
    timer: CudaTimer | None = None
    if backend is None:
        setup_error = (
            F.UNAVAILABLE,
            "KeyError",
            f"unknown MoE backend {args.backend!r}; known: {', '.join(backends)}",
            "",
        )
    else:
        versions = versions_json((*backend.packages, "triton"))
        ok, reason = backend.available()
        if not ok:
            setup_error = (F.UNAVAILABLE, "tracekit.collectors.backends.BackendUnavailable", reason, "")
        elif backend.timer == "cuda":
            try:
                timer = CudaTimer(args.device, args.timing)
                device_name, cc = timer.info.get("gpu_name"), timer.info.get("compute_capability")
            except NoCudaError as exc:
                setup_error = (F.UNAVAILABLE, F.type_name(exc), str(exc), "")
            except Exception as exc:
                msg = F.full_message(exc)
                setup_error = (
                    F.classify(F.type_name(exc), msg),
                    F.type_name(exc),
                    msg,
                    traceback.format_exc(),
                )
    weights = None
    if setup_error is None:
        try:
            weights = backend.prepare_weights(config, timer.device if timer else None, args.seed)  # type: ignore[union-attr]
        except Exception as exc:
            msg = F.full_message(exc)
            kind = F.UNAVAILABLE if isinstance(exc, ImportError) else F.classify(F.type_name(exc), msg)
            setup_error = (kind, F.type_name(exc), msg, traceback.format_exc())
    curve: dict[int, tuple[float, dict[str, Any]]] = {}
    for case in cases:
        shape = [case.rows, config.n, config.k, case.case_id]
        emit("start", shape=shape)
        if setup_error is not None:
            fail(case, *setup_error)
            emit("done", shape=shape)
            continue
        try:
            row, why = measure_case(
                backend,
                timer,
                config,
                case,
                weights,
                curve,
                emit,  # type: ignore[arg-type]
                warmup=args.warmup,
                repeats=args.repeats,
                seed=args.seed,
            )
        except Exception as exc:
            msg = F.full_message(exc)
            etype = F.type_name(exc)
            poisoned = F.poisons_context(msg)
            kind = F.UNAVAILABLE if isinstance(exc, ImportError) else F.classify(etype, msg)
            fail(case, kind, etype, msg, traceback.format_exc(), poisoned)
            if poisoned:
                emit("poisoned", shape=shape)
                emit.close()
                return 3
            emit("done", shape=shape)
            continue
        emit("measurement", shape=shape, row=row)
        if row["status"] != "ok":
            fail(case, F.WRONG, "tracekit.WrongResult", why, "")
        emit("done", shape=shape)
    emit("finished")
    emit.close()
    report_trace_window()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tracekit.collectors.moe", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--backend", required=True)
    parser.add_argument("--cases", required=True, help="moe_cases.json written by the sweep")
    parser.add_argument("--ids", required=True, help="comma-separated case ids to run")
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--timing", choices=("auto", "graph", "events"), default="auto")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    return run_worker(parser.parse_args(argv))


if __name__ == "__main__":
    # Run in the importable module, not __main__: plugins register into tracekit.collectors.moe's registry.
    from tracekit.collectors.moe import main as _main

    sys.exit(_main())
