"""How the benchmark workers time a GEMM: CUDA graphs or events on the GPU, the wall clock for CPU-only backends,
NVML sampled beside each timed pass, and the PyTorch profiler's traced pass between warm-up and timing.

Timing: ``warmup`` passes, then ``repeats`` timed samples. Each sample runs the GEMM once on every one of
``buffers`` input sets (enough distinct inputs to exceed twice the L2, so no sample reads warm operands) and
counts sample time / buffers. ``graph`` captures one pass in a CUDA graph and times replays with CUDA events (no
launch overhead); ``events`` times eager passes with CUDA events (what you get under a profiler, and the
fallback when capture fails). ``auto`` is ``graph`` unless a profiler is attached (TRACEKIT_NCU_MAX_PER_RANGE,
TRACEKIT_RECORD_FUNCTION or NVTX_INJECTION64_PATH set), where eager launches keep one NVTX range per kernel.
Under the PyTorch profiler a *traced pass* (``TRACEKIT_TRACE_REPEATS`` eager passes, default 3) runs between the
warm-up and the timed samples in a profiler session of its own, and only it is recorded (``TraceWindow``); the
timed samples then run unprofiled, so ``auto`` stays ``graph`` there.

Every benchmark family (tracekit.collectors.harness) times through :func:`time_calls`, which gives a
:class:`Timing` whose :meth:`Timing.columns` are the timing columns of a measurement row. torch is imported only
inside :class:`CudaTimer` and :func:`check_output`.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors import failures as F
from tracekit.collectors import ranges
from tracekit.collectors.torchprof import (
    DEFAULT_TRACE_REPEATS,
    ENV_RECORD_FUNCTION,
    ENV_TORCH_OPS,
    ENV_TRACE_REPEATS,
    ENV_TRACE_SEGMENTS,
    OPS_CHOICES,
    parse_trace_repeats,
    worker_ops,
)

PROFILER_ENV = (
    "TRACEKIT_NCU_MAX_PER_RANGE",
    "TRACEKIT_RECORD_FUNCTION",
    "NVTX_INJECTION64_PATH",
    "TRACEKIT_PROFILER",
)
MAX_BUFFERS = 64


class TraceWindow:
    """What a benchmark worker records under the PyTorch profiler: one *traced pass* per measurement.

    Recording a whole worker made the profiler's cost grow with warm-up x repeats x rotated input sets (810
    kernel records for one small fp8 shape), and its stop and export time with it. So, as ncu's
    ``--max-per-range`` bounds what Nsight Compute profiles, a worker of a sweep under ``tracekit capture
    --torch-profiler`` runs no profiler during the warm-up and the timed repeats; between them it runs a traced
    pass (``repeats`` eager rotations over the input sets, every GEMM inside its range, so the timeline holds
    each kernel, its launch gap and its auxiliary kernels) inside a short profiler session of its own, exported
    to ``PREFIX.NNN.json.gz``. The timed pass then runs exactly as in a plain sweep.

    Pausing one long session (``torch._C._autograd._toggle_collection_dynamic``) looked cheaper, but on torch
    2.11 with CUDA any CUDA toggle left the trace with no kernels at all, even those recorded before the pause
    (benchmarks/toggle_probe.py, run on the H200).

    Inactive (no session, nothing imported) unless ``TRACEKIT_TRACE_SEGMENTS`` names the prefix
    (``collectors.bench.profiled_worker`` sets it) and ``TRACEKIT_TRACE_REPEATS`` is not ``all``."""

    def __init__(self, repeats: int | None, prefix: str | None, ops: str = "ranges") -> None:
        self.repeats = repeats
        self.prefix = prefix
        self.ops = ops
        self.sessions = 0
        self.start_s = self.stop_s = self.export_s = 0.0
        self.bytes = 0
        self.error: str | None = None  # why recording stopped, once it has

    @property
    def active(self) -> bool:
        return self.prefix is not None and self.repeats is not None and self.error is None

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> TraceWindow:
        env = os.environ if environ is None else environ
        try:
            repeats = parse_trace_repeats(env.get(ENV_TRACE_REPEATS))
        except ValueError as exc:
            print(f"tracekit worker: {exc}; using {DEFAULT_TRACE_REPEATS}", file=sys.stderr)
            repeats = DEFAULT_TRACE_REPEATS
        ops = env.get(ENV_TORCH_OPS) or "ranges"
        return cls(
            repeats, env.get(ENV_TRACE_SEGMENTS) or None, worker_ops(ops if ops in OPS_CHOICES else "ranges")
        )

    def traced_pass(self, run_pass: Callable[[int], Any], cuda: bool) -> None:
        """``run_pass(repeats)`` inside a profiler session of its own (CUDA activity too with ``cuda``), exported
        to the next segment file; nothing when inactive. A profiler that cannot start or export is reported once
        and the rest of the worker runs unrecorded: its measurements do not depend on the trace."""
        if not self.active or self.repeats is None or self.prefix is None:
            return
        if "torch" not in sys.modules:  # a backend that never imports torch has nothing this profiler can see
            return
        from tracekit.collectors.torchprof import export_trace, new_profiler, start_profiler

        path = Path(f"{self.prefix}.{self.sessions:03d}.json.gz")
        t0 = time.perf_counter()
        try:
            prof = new_profiler(cuda)
            start_profiler(prof, self.ops)
        except Exception as exc:
            self._fail(f"could not start the PyTorch profiler ({type(exc).__name__}: {exc})")
            return
        t1 = time.perf_counter()
        try:
            run_pass(self.repeats)
        finally:
            t2 = time.perf_counter()
            try:
                prof.__exit__(None, None, None)
                t3 = time.perf_counter()
                export_trace(prof, path)
                self.bytes += path.stat().st_size
            except Exception as exc:
                self._fail(f"could not write {path.name} ({type(exc).__name__}: {exc})")
            else:
                self.sessions += 1
                self.start_s += t1 - t0
                self.stop_s += t3 - t2
                self.export_s += time.perf_counter() - t3

    def _fail(self, why: str) -> None:
        self.error = why
        print(f"tracekit worker: {why}; the rest of this worker runs unrecorded", file=sys.stderr)

    def summary(self) -> str | None:
        """One line for the worker's stderr log: what was recorded and what the profiler sessions cost."""
        if self.prefix is None or self.repeats is None:
            return None
        return (
            f"tracekit worker: {self.sessions} traced passes of {self.repeats} repeats "
            f"({ENV_TRACE_REPEATS}) -> {Path(self.prefix).name}.NNN.json.gz, {self.bytes / 1e6:.2f} MB; "
            f"profiler start {self.start_s:.2f} s, stop {self.stop_s:.2f} s, export {self.export_s:.2f} s"
            + (f"; stopped recording: {self.error}" if self.error else "")
        )


_window: TraceWindow | None = None


def trace_window() -> TraceWindow:
    """This process's trace window (read from the environment once)."""
    global _window
    if _window is None:
        _window = TraceWindow.from_env()
    return _window


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), ``q`` in [0, 1]."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def resolve_timing(timing: str) -> str:
    """``auto`` made concrete: ``events`` when a profiler is attached (eager launches keep one range per kernel),
    else ``graph``; any other value as given."""
    if timing != "auto":
        return timing
    attached = [k for k in PROFILER_ENV if os.environ.get(k)]
    if trace_window().active:
        # the PyTorch profiler runs in the traced passes only (eager by design): the timed pass is a plain one
        attached = [k for k in attached if k != ENV_RECORD_FUNCTION]
    return "events" if attached else "graph"


def _finite(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return x


def tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of the distinct CUDA tensors reachable in a prepared state (dicts, lists, tuples)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if hasattr(obj, "untyped_storage") and hasattr(obj, "is_cuda"):
        try:
            storage = obj.untyped_storage()
            key = storage.data_ptr()
            if key in seen:
                return 0
            seen.add(key)
            return int(storage.nbytes()) if obj.is_cuda else 0
        except Exception:
            return 0
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    return 0


# --- the torch / CUDA timer --------------------------------------------------------------------------------


class CudaTimer:
    """Times a backend on one CUDA device with graphs or events, NVML sampled beside each timing."""

    def __init__(self, device: int, timing: str) -> None:
        import torch

        from tracekit.collectors.env import device_info
        from tracekit.collectors.nvml import Nvml

        self.torch = torch
        if not torch.cuda.is_available():
            raise NoCudaError("CUDA is not available to torch here (no GPU, or a CPU-only torch build)")
        torch.cuda.set_device(device)
        self.device = torch.device("cuda", device)
        self.info = device_info(device)
        self.l2 = int(self.info.get("l2_bytes") or 50 * 2**20)
        self.nvml = Nvml(index=device, uuid=self.info.get("gpu_uuid"), pci_bus_id=self.info.get("pci_bus_id"))
        self.timing = resolve_timing(timing)

    def buffers_for(self, set_bytes: int) -> int:
        torch = self.torch
        if set_bytes <= 0:
            return 2
        wanted = math.ceil(2 * self.l2 / set_bytes) + 1
        try:
            free, _total = torch.cuda.mem_get_info(self.device)
            wanted = min(wanted, max(1, int(0.5 * free // set_bytes)))
        except Exception:
            pass
        return max(2, min(MAX_BUFFERS, wanted))

    def _events_pass(self, fns: list[Callable[[], Any]], repeats: int) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for r in range(repeats):
            starts[r].record()
            for fn in fns:
                fn()
            ends[r].record()
        torch.cuda.synchronize()
        return [starts[r].elapsed_time(ends[r]) * 1000.0 / len(fns) for r in range(repeats)]

    def _graph_pass(self, fns: list[Callable[[], Any]], repeats: int) -> list[float]:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for fn in fns:
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for fn in fns:
                fn()
        graph.replay()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for r in range(repeats):
            starts[r].record()
            graph.replay()
            ends[r].record()
        torch.cuda.synchronize()
        times = [starts[r].elapsed_time(ends[r]) * 1000.0 / len(fns) for r in range(repeats)]
        del graph
        return times

    def time(self, fns: list[Callable[[], Any]], warmup: int, repeats: int) -> tuple[list[float], str, Any]:
        """(per-GEMM times in µs, how it was timed, NVML sample)."""
        from tracekit.collectors.nvml import Sampler

        torch = self.torch
        with ranges.suppressed():  # warm-up launches never use the ncu budget
            for _ in range(max(warmup, 1)):
                for fn in fns:
                    fn()
        torch.cuda.synchronize()
        trace_window().traced_pass(lambda r: self._events_pass(fns, r), cuda=True)  # PyTorch profiler only
        sampler = Sampler(self.nvml)
        how = self.timing
        if how == "graph":
            try:
                sampler.start()
                times = self._graph_pass(fns, repeats)
                return times, "cuda-graph", sampler.stop()
            except Exception as exc:
                sampler.stop()
                if F.poisons_context(F.full_message(exc)):
                    raise
                torch.cuda.synchronize()
                how = "events"
        sampler.start()
        times = self._events_pass(fns, repeats)
        return times, "events", sampler.stop()


class NoCudaError(Exception):
    """The worker cannot run CUDA backends here at all (no GPU)."""


# --- correctness and timing, for every family -------------------------------------------------------------


def check_output(out: Any, ref: Any, tolerance: float, dtype: str) -> tuple[float | None, str, str]:
    """(rel_error, status, why) comparing an output with its fp32 reference: ``wrong`` for NaN / Inf, an all-zero
    output or a relative error over ``tolerance`` (named with the input ``dtype``)."""
    import torch

    from tracekit.collectors.torch_quant import rel_error

    outf = out.float()
    if not bool(torch.isfinite(outf).all()):
        return None, F.WRONG, "output holds NaN or Inf"
    if not bool((outf != 0).any()):
        return 0.0 if not bool((ref != 0).any()) else 1.0, F.WRONG, "output is all zeros"
    err = rel_error(outf, ref)
    if not math.isfinite(err) or err > tolerance:
        return _finite(err), F.WRONG, f"relative error {err:.4g} exceeds the {dtype} tolerance {tolerance}"
    return err, "ok", ""


def wall_times(fns: list[Callable[[], Any]], warmup: int, repeats: int) -> list[float]:
    """Per-call wall-clock times in µs of ``repeats`` passes over ``fns`` after ``warmup`` passes (with a traced
    pass between them under the PyTorch profiler, as ``CudaTimer.time``)."""

    def passes(count: int) -> None:
        for _ in range(count):
            for fn in fns:
                fn()

    passes(warmup)
    trace_window().traced_pass(passes, cuda=False)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for fn in fns:
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / len(fns))
    return times


NO_NVML: dict[str, Any] = dict.fromkeys(
    ("sm_clock_hz", "power_w", "power_limit_w", "temperature_c", "throttle_reasons")
)
"""The NVML columns of a row timed without a GPU."""


@dataclass
class Timing:
    """One timed pass: per-call times in µs, how they were taken (``cuda-graph``, ``events``, ``wall``) and the
    NVML columns sampled beside it."""

    times: list[float]
    how: str
    nvml: dict[str, Any]

    @property
    def median(self) -> float:
        return quantile(self.times, 0.5)

    def tflops(self, flops: float) -> float | None:
        """TFLOP/s of ``flops`` per call at the median time (None for a zero time)."""
        med = self.median
        return flops / (med * 1e-6) / 1e12 if med > 0 else None

    def columns(self) -> dict[str, Any]:
        """The timing columns of a measurement row: time_us (median), p10, p90, repeats, NVML, timing."""
        return {
            "time_us": self.median,
            "time_us_p10": quantile(self.times, 0.1),
            "time_us_p90": quantile(self.times, 0.9),
            "repeats": len(self.times),
            **self.nvml,
            "timing": self.how,
        }


def time_calls(timer: CudaTimer | None, fns: list[Callable[[], Any]], warmup: int, repeats: int) -> Timing:
    """Time ``fns`` with the CUDA timer, or the wall clock when there is none (CPU-only backends)."""
    if timer is None:
        return Timing(wall_times(fns, warmup, repeats), "wall", dict(NO_NVML))
    times, how, sample = timer.time(fns, warmup, repeats)
    return Timing(times, how, sample.as_columns())


def report_trace_window() -> None:
    """The trace window's one-line summary on stderr (the sweep keeps it in the worker's log), if it was used."""
    line = trace_window().summary()
    if line:
        print(line, file=sys.stderr)


def free(timer: CudaTimer | None) -> None:
    """Between cases: collect garbage and return torch's cached blocks, so one case's buffers never crowd the
    next (nothing without a CUDA timer)."""
    if timer is None:
        return
    try:
        import gc

        gc.collect()
        timer.torch.cuda.empty_cache()
    except Exception:
        pass
