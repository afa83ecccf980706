"""Run a Python script under the PyTorch profiler and always leave a Chrome trace.

Usage::

    python -m tracekit.collectors.torchprof --out trace.json.gz -- script.py args...
    python -m tracekit.collectors.torchprof --out trace.json.gz -- -m package.module args...

The script runs in this process (``runpy``, with ``sys.argv`` set as if it had been started directly) inside the
PyTorch profiler (Kineto, CPU and CUDA activities). The profiler starts the moment the script's own
``import torch`` completes (before torch can run anything), so a process that never imports torch (a
benchmark's parent whose workers do the GEMMs and profile themselves) pays neither the import, 3-5 s on a GPU
host, nor the profiler; its trace is written empty, and stderr says why. By default (``--ops ranges``) the CPU side records only
``record_function`` ranges, not every ATen operator: tracekit's analysis joins kernels to ranges through their
launch calls (CUPTI runtime events, recorded either way), and the per-operator events were half of a GEMM sweep's
trace and most of the profiler's stop and export time. ``--ops shapes`` (``tracekit capture``'s default) keeps
every operator with its input shapes (``record_shapes``): GEMM operators then carry M, N, K, so a program whose
GEMMs sit in no tracekit range gets FLOPs; ``--ops all`` (``TRACEKIT_TORCH_OPS=all``) keeps every operator without
shapes, as ``torch.profiler.profile`` does. If it raises, exits non-zero or is interrupted (SIGINT or SIGTERM),
the trace of what ran is still exported and one line is appended to ``failures.jsonl`` (kind ``crashed``; the
columns of tracekit's ``failures`` frame). ``TRACEKIT_RECORD_FUNCTION=1`` is set so tracekit ranges also open
``record_function`` annotations: NVTX ranges do not appear in Kineto traces.

This file imports only the standard library at the top, so ``tracekit capture`` can also start it by path with an
interpreter that has torch but not tracekit. Exit status: the script's own (1 for an exception, 130 if
interrupted), 3 if torch is missing, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.abc
import importlib.util
import json
import os
import platform
import runpy
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any


def _failures_module() -> Any:
    """tracekit.collectors.failures, or, where this file was started by path with an interpreter that lacks
    tracekit, its sibling failures.py loaded from this folder (it imports only the standard library)."""
    try:
        from tracekit.collectors import failures
    except ImportError:
        path = Path(__file__).resolve().with_name("failures.py")
        spec = importlib.util.spec_from_file_location("_tracekit_failures", path)
        if spec is None or spec.loader is None:
            raise
        failures = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(failures)
    return failures


_F = _failures_module()
FAILURE_KEYS: tuple[str, ...] = _F.FAILURE_KEYS
"""The columns of ``tracekit.frames.FAILURES`` minus ``failure_id`` (a test keeps the two in step)."""

ENV_RECORD_FUNCTION = "TRACEKIT_RECORD_FUNCTION"
ENV_RUN_DIR = "TRACEKIT_RUN_DIR"
ENV_TORCH_OPS = "TRACEKIT_TORCH_OPS"
"""``ranges`` (default here), ``shapes`` (``tracekit capture``'s default) or ``all``: which CPU events the profiler
records (``--ops``); inherited by the profiled worker processes of a tracekit benchmark."""
OPS_CHOICES = ("ranges", "shapes", "all")
"""``ranges``: ``record_function`` ranges only. ``shapes``: those and every ATen operator with its input shapes
(``record_shapes``), so GEMM operators (``aten::mm``, ``addmm``, ``_scaled_mm``, ...) carry ``Input Dims`` and
their kernels get M, N, K and FLOPs (analyzers/readers/torch_ops.py); also the GEMM operators a CUDA graph recorded while
it was captured, whose shapes its replayed kernels take. ``all``: every operator, without shapes."""


def worker_ops(ops: str) -> str:
    """What a tracekit benchmark's own worker records for ``ops``: its GEMMs run inside tracekit ranges whose
    names carry M, N, K and dtypes, so ``shapes`` would add only per-operator events (half a GEMM sweep's trace,
    docs/PERFORMANCE.md): ``ranges`` instead. Anything unknown is ``ranges`` too."""
    return "all" if ops == "all" else "ranges"


ENV_TRACE_REPEATS = "TRACEKIT_TRACE_REPEATS"
"""How many repeats of each measurement a tracekit benchmark's worker records under the PyTorch profiler:
a positive integer, or ``all`` for every launch. Set by ``tracekit capture --trace-repeats``; read by the
benchmark's workers (``tracekit.collectors.harness.timing.TraceWindow``, ``collectors.harness.profiled_worker``)."""
DEFAULT_TRACE_REPEATS = 3
ENV_TRACE_SEGMENTS = "TRACEKIT_TRACE_SEGMENTS"
"""Set on each worker of a tracekit benchmark that runs under this profiler (a path prefix in the run's raw/): the
worker records its traced passes itself, one profiler session each, into ``PREFIX.NNN.json.gz``."""
ENV_TORCH_PROFILER = "TRACEKIT_TORCH_PROFILER"
"""Set to the trace path while a program runs under this profiler: a tracekit benchmark's workers then record their
own traced passes (or, with ``TRACEKIT_TRACE_REPEATS=all``, each runs under a runner of its own): the parent's
profiler does not see other processes' kernels."""


def parse_trace_repeats(text: str | None) -> int | None:
    """``TRACEKIT_TRACE_REPEATS``: None for ``all``; the default when unset; raises ValueError for anything but
    ``all`` or a positive integer."""
    if text is None or not text.strip():
        return DEFAULT_TRACE_REPEATS
    text = text.strip().lower()
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{ENV_TRACE_REPEATS}={text!r} is not a positive integer or all") from None
    if value < 1:
        raise ValueError(f"{ENV_TRACE_REPEATS}={text} must be at least 1, or all")
    return value


def failure_record(
    *,
    kind: str,
    error_type: str,
    message: str,
    traceback_text: str | None = None,
    device_name: str | None = None,
    compute_capability: str | None = None,
    versions: dict[str, Any] | None = None,
    backend: str | None = None,
    op: str | None = None,
) -> dict[str, Any]:
    """One ``failures.jsonl`` record, keyed exactly like the failures frame (ids are given by the importer): the
    row of tracekit.collectors.failures.failure_record, with no shape and ``versions`` an object."""
    return _F.failure_record(
        backend=backend,
        op=op,
        m=None,
        n=None,
        k=None,
        kind=kind,
        error_type=error_type,
        message=message,
        traceback=traceback_text,  # type: ignore[arg-type]
        device_name=device_name,
        compute_capability=compute_capability,
        versions=versions or {},  # type: ignore[arg-type]
    )


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line (one ``write`` of one line, so concurrent writers do not interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, default=str) + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(line)


def _default_failures(out: Path) -> Path:
    run_dir = os.environ.get(ENV_RUN_DIR)
    return Path(run_dir) / "raw" / "failures.jsonl" if run_dir else out.parent / "failures.jsonl"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tracekit.collectors.torchprof",
        description="Run a Python script under torch.profiler and export a Chrome trace, even if it fails.",
    )
    parser.add_argument("--out", required=True, type=Path, help="trace file to write (.json or .json.gz)")
    parser.add_argument(
        "--failures",
        type=Path,
        help="failures.jsonl to append to (default: $TRACEKIT_RUN_DIR/raw or beside --out)",
    )
    parser.add_argument("--record-shapes", action="store_true", help="record operator input shapes (slower)")
    parser.add_argument(
        "--ops",
        choices=OPS_CHOICES,
        default=os.environ.get(ENV_TORCH_OPS) or "ranges",
        help=f"CPU events to record: ranges = record_function ranges only (default, or ${ENV_TORCH_OPS}), "
        "shapes = every ATen operator too, with its input shapes (record_shapes), all = every operator",
    )
    parser.add_argument(
        "target", nargs=argparse.REMAINDER, help="-- script.py args... | -- -m module args..."
    )
    ns = parser.parse_args(argv)
    if ns.ops not in OPS_CHOICES:  # argparse checks choices on the command line, not on a default
        parser.error(f"{ENV_TORCH_OPS}={ns.ops!r} is not one of: {', '.join(OPS_CHOICES)}")
    target = list(ns.target)
    if target and target[0] == "--":
        target = target[1:]
    if not target or (target[0] == "-m" and len(target) < 2):
        parser.error("give the script to run after --, e.g. -- bench.py --size 1024")
    ns.target = target
    return ns


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so the trace is still exported."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def _run_target(target: list[str]) -> None:
    if target[0] == "-m":
        module, args = target[1], target[2:]
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = target[0], target[1:]
        sys.argv = [script, *args]
        sys.path.insert(0, str(Path(script).resolve().parent))
        runpy.run_path(script, run_name="__main__")


def export_trace(prof: Any, out: Path) -> None:
    """Export the Chrome trace to ``out`` through a temporary file (gzip if ``out`` ends in .gz)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".json", dir=out.parent)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        if out.name.endswith(".gz"):
            gz = tmp + ".gz"
            with (
                open(tmp, "rb") as fin,
                gzip.open(gz, "wb", compresslevel=1) as fout,
            ):  # level 1: 0.3 s for 131 MB of trace JSON here, where the default 9 took 2.3 s (9 MB vs 6 MB)
                shutil.copyfileobj(fin, fout)
            os.replace(gz, out)
        else:
            os.replace(tmp, out)
    finally:
        for leftover in (tmp, tmp + ".gz"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def start_profiler(prof: Any, ops: str) -> str:
    """Start ``prof`` (a ``torch.autograd.profiler.profile``); with ``ops="ranges"`` its RecordFunction callbacks
    see only user scopes (``record_function``, ``ProfilerStep#N``), so no ATen operator becomes an event; with
    ``shapes`` or ``all`` every operator does (``shapes`` needs ``prof`` made with ``record_shapes``: see
    :func:`new_profiler`).

    The profiler class has no option for this; its ``_start_trace`` calls the module-level ``_enable_profiler``,
    whose ``scopes`` argument does it, so that name is wrapped for the one call. If this torch lacks either, the
    profiler starts recording every operator, and the returned text says so."""
    if ops == "ranges":
        try:
            import torch.autograd.profiler as autograd_profiler
            from torch._C._profiler import RecordScope

            enable = autograd_profiler._enable_profiler
        except (ImportError, AttributeError) as exc:
            why = f"this torch cannot limit the recorded scopes ({exc})"
        else:

            def enable_ranges_only(config: Any, activities: Any, *args: Any, **kwargs: Any) -> Any:
                if not args and "scopes" not in kwargs:
                    kwargs["scopes"] = {RecordScope.USER_SCOPE}
                return enable(config, activities, *args, **kwargs)

            autograd_profiler._enable_profiler = enable_ranges_only  # type: ignore[assignment]
            try:
                prof.__enter__()
                return "ranges"
            except TypeError as exc:  # an _enable_profiler without scopes
                why = f"this torch cannot limit the recorded scopes ({exc})"
                prof.entered = False
            finally:
                autograd_profiler._enable_profiler = enable  # type: ignore[assignment]
        print(f"tracekit torchprof: {why}; recording every operator", file=sys.stderr)
    prof.__enter__()
    return "shapes" if ops == "shapes" and getattr(prof, "record_shapes", False) else "all"


def new_profiler(cuda: bool, *, record_shapes: bool = False) -> Any:
    """A Kineto profiler of CPU events and, with ``cuda``, CUDA activity (not started).

    The autograd-level profiler that ``torch.profiler.profile`` wraps: the wrapper's start runs
    ``hasattr(torch, "_inductor")``, which imports TorchInductor (and Triton) in every profiled process, 1 s and
    more per process, for a setting tracekit never uses. The trace written is the same."""
    from torch.autograd.profiler import profile

    return profile(
        use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True, record_shapes=record_shapes
    )


class _StartOnImport(importlib.abc.MetaPathFinder):
    """Calls ``start()`` right after the program's first ``import torch`` finishes executing torch.

    The spec and loader are torch's own (found by the other finders); only that loader instance's ``exec_module``
    is wrapped, so ``torch.__loader__`` and ``__spec__`` stay what they would have been. A spec asked for without an
    import (``importlib.util.find_spec("torch")``, as availability checks do) is never executed, so the finder
    stays in place until an import really runs torch."""

    def __init__(self, start: Any) -> None:
        self._start = start
        self._looking = False
        self.fired = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or self._looking or self.fired:
            return None
        self._looking = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        run_torch = loader.exec_module

        def exec_module(module: Any) -> None:
            del loader.exec_module  # back to the class's method for anyone else
            if self.fired:
                run_torch(module)
                return
            self.fired = True
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            run_torch(module)
            self._start()

        loader.exec_module = exec_module
        return spec


def _write_empty_trace(out: Path, why: str) -> None:
    """A valid Kineto trace with no events, so the run still has this process's file and says why it is empty."""
    data = json.dumps({"schemaVersion": 1, "traceEvents": [], "traceName": str(out), "tracekit_note": why})
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.name.endswith(".gz"):
        with gzip.open(out, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        out.write_text(data, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ns = _parse(sys.argv[1:] if argv is None else argv)
    out: Path = ns.out.absolute()
    failures: Path = (ns.failures or _default_failures(out)).absolute()
    os.environ[ENV_RECORD_FUNCTION] = "1"
    os.environ[ENV_TORCH_PROFILER] = str(out)
    # Under `capture --instrument` tracekit's sitecustomize imported the ranges module before this line, so it
    # read its settings without TRACEKIT_RECORD_FUNCTION: read them again, or its ranges never reach the trace.
    ranges_module = sys.modules.get("tracekit.collectors.ranges")
    if ranges_module is not None:
        ranges_module.reload_settings()
    if importlib.util.find_spec("torch") is None:
        print(
            f"tracekit torchprof: torch cannot be imported by {sys.executable} (no module named 'torch'); "
            "install torch in that environment or run the capture with --nsys / --ncu instead",
            file=sys.stderr,
        )
        return 3

    # Filled in when the program imports torch (_StartOnImport): the profiler, and what failure records need.
    state: dict[str, Any] = {"prof": None, "torch": None, "cuda": False, "ops": None, "start_s": None}
    versions: dict[str, Any] = {"torch": None, "cuda": None, "python": platform.python_version()}
    t0 = time.perf_counter()

    def start() -> None:
        t_import = time.perf_counter()
        try:
            import torch

            # asks the driver for a device count; starts no CUDA context
            cuda = bool(torch.cuda.is_available())
            versions["torch"] = getattr(torch, "__version__", None)
            versions["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
            prof = new_profiler(cuda, record_shapes=ns.record_shapes or ns.ops == "shapes")
            state["ops"] = start_profiler(prof, ns.ops)
        except Exception as exc:  # the program goes on unprofiled rather than dying inside its own import
            print(
                f"tracekit torchprof: could not start the profiler ({type(exc).__name__}: {exc})",
                file=sys.stderr,
            )
            return
        state.update(prof=prof, torch=torch, cuda=cuda, start_s=time.perf_counter() - t_import)

    def device() -> dict[str, Any]:
        """The device fields of a failure record, read only when one is written: asking for the device's name
        starts a CUDA context, which a program that never touches the GPU (a benchmark's parent process whose
        workers do the GEMMs) should not pay for or hold."""
        fields: dict[str, Any] = {"device_name": None, "compute_capability": None, "versions": versions}
        torch = state["torch"]
        if state["cuda"] and torch is not None:
            with contextlib.suppress(Exception):  # a broken device still gets its trace and failure line
                fields["device_name"] = torch.cuda.get_device_name(0)
                major, minor = torch.cuda.get_device_capability(0)
                fields["compute_capability"] = f"{major}.{minor}"
        return fields

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    status = 0
    record: dict[str, Any] | None = None
    hook = _StartOnImport(start)
    sys.meta_path.insert(0, hook)
    try:
        _run_target(ns.target)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            print(code, file=sys.stderr)
            status = 1
        if status != 0:
            record = failure_record(
                kind="crashed",
                error_type="SystemExit",
                message=f"the script exited with status {status}",
                **device(),
            )
    except (KeyboardInterrupt, _Terminated) as exc:
        status = 130 if isinstance(exc, KeyboardInterrupt) else 128 + signal.SIGTERM
        name = "KeyboardInterrupt" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
        record = failure_record(
            kind="crashed",
            error_type=name,
            message=f"the script was interrupted ({name})",
            traceback_text=traceback.format_exc(),
            **device(),
        )
        print(f"tracekit torchprof: interrupted ({name}); exporting the trace so far", file=sys.stderr)
    except BaseException as exc:
        status = 1
        text = traceback.format_exc()
        sys.stderr.write(text)
        record = failure_record(
            kind="crashed",
            error_type=f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
            message=str(exc),
            traceback_text=text,
            **device(),
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
        prof, torch = state["prof"], state["torch"]
        if state["cuda"] and torch is not None and torch.cuda.is_initialized():
            # synchronize() would start CUDA in a process that never did; the script's own CUDA error must not
            # cost the trace
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
        try:
            t_ran = time.perf_counter()
            if prof is None:
                why = (
                    "the program never imported torch: nothing ran under the profiler in this process"
                    if torch is None and "torch" not in sys.modules
                    else "the profiler did not start (see above)"
                )
                _write_empty_trace(out, why)
                print(
                    f"tracekit torchprof: {why}; program {t_ran - t0:.2f} s -> {out.name} (empty)",
                    file=sys.stderr,
                )
            else:
                prof.__exit__(None, None, None)
                t_stopped = time.perf_counter()
                export_trace(prof, out)
                # where the profiler's own time goes, for whoever wonders why a profiled run is slower
                print(
                    f"tracekit torchprof ({state['ops']}): profiler start {state['start_s']:.2f} s, "
                    f"program {t_ran - t0:.2f} s, stop {t_stopped - t_ran:.2f} s, "
                    f"export {time.perf_counter() - t_stopped:.2f} s "
                    f"({out.stat().st_size / 1e6:.1f} MB) -> {out.name}",
                    file=sys.stderr,
                )
        except Exception as exc:
            print(f"tracekit torchprof: could not export the trace to {out}: {exc}", file=sys.stderr)
            status = status or 1
        if record is not None:
            append_jsonl(failures, record)
    return status


if __name__ == "__main__":
    sys.exit(main())
