"""tracekit's sitecustomize: instrument GEMM entry points in every Python process started under
``tracekit capture --instrument`` (which puts this folder first on PYTHONPATH).

It chains to the sitecustomize this one shadows (the next one on sys.path), then calls
``tracekit.instrument(lazy=True)``, which wraps torch / flashinfer / sgl_kernel only once the program imports them.
Nothing here may break the user's program: every failure is reported on stderr once and ignored.
Set ``TRACEKIT_INSTRUMENT=0`` to turn it off without changing PYTHONPATH.

Under ``tracekit capture --nsys --crash-flush profiler-stop`` (``TRACEKIT_CRASH_FLUSH=profiler-stop``) it also
installs a C-level handler for SIGSEGV / SIGABRT / SIGBUS / SIGFPE / SIGILL / SIGTERM: Nsight Systems flushes its
CUDA buffers on ``cuProfilerStop`` (``--flush-on-cudaprofilerstop`` is on by default), and a program killed by a
signal otherwise takes its kernels with it. The handler calls ``cuProfilerStop`` (the driver's, only if the
program loaded CUDA), prints the fault handler's ``Fatal Python error`` block with every thread's Python stack,
then restores the default action and re-raises the signal, so the program still dies of it.

Under ``tracekit capture --timeout S`` (``TRACEKIT_HANG_DUMP_S``, a little under S) the fault handler's watchdog
prints every thread's Python stack once that time has passed, so a program hung in native code (where Ctrl-C
does not reach Python) still says where it hung.

Under ``tracekit capture --ncu --ncu-budget S`` (``TRACEKIT_NCU_STOP_AT``, the Unix time the budget runs out) a
daemon thread calls ``cuProfilerStop`` on every active primary CUDA context once that time has passed (and on any
context that becomes active later): Nsight Compute honours cu(da)ProfilerStart/Stop unless told not to, so it
profiles no further launch and the program runs on at its own pace. Each stop is noted as one JSON line in
``TRACEKIT_NCU_BUDGET_LOG`` (the run's raw/ncu_budget.jsonl), which tells the capture it took.
"""

import os
import sys

_FAULT_TEXT = {
    "SIGSEGV": "Segmentation fault",
    "SIGABRT": "Aborted",
    "SIGBUS": "Bus error",
    "SIGFPE": "Floating-point exception",
    "SIGILL": "Illegal instruction",
    "SIGTERM": "Terminated",
}
_KEEP = []  # the ctypes callback must outlive this module's setup


def _profiler_stop() -> str:
    """Call ``cuProfilerStop`` in a process that already loaded the CUDA driver; say what happened."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
        result = lib.cuProfilerStop()
        return f"cuProfilerStop() returned {result}"
    return "no CUDA driver loaded, nothing to stop"


def _stop_profiling(stopped: set, log_path: str) -> None:
    """``cuProfilerStop`` on each active primary context not stopped yet (pushed on this thread for the call:
    the driver acts on the calling thread's current context), noted in ``log_path``. Nothing happens before the
    program has loaded and initialised the CUDA driver."""
    import ctypes
    import json
    import time

    lib = None
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
            break
        except OSError:
            continue
    if lib is None:
        return
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:  # not initialised yet: no context to stop
        return
    for ordinal in range(count.value):
        if ordinal in stopped:
            continue
        dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            continue
        if (
            lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) != 0
            or not active.value
        ):
            continue
        ctx = ctypes.c_void_p()
        if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
            continue
        try:
            pushed = lib.cuCtxPushCurrent_v2(ctx) == 0
            result = lib.cuProfilerStop() if pushed else None
            if pushed:
                lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        finally:
            lib.cuDevicePrimaryCtxRelease_v2(dev)
        stopped.add(ordinal)
        line = {"pid": os.getpid(), "time": time.time(), "device": ordinal, "cuProfilerStop": result}
        try:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:
            pass


def _start_ncu_budget(stop_at: float, log_path: str) -> None:
    """A daemon thread that stops Nsight Compute's profiling at ``stop_at`` (Unix time), then checks each second
    for contexts that became active since (another device, a context made after the budget ran out)."""
    import threading
    import time

    def run() -> None:
        wait = stop_at - time.time()
        if wait > 0:
            time.sleep(wait)
        stopped: set = set()
        while True:
            try:
                _stop_profiling(stopped, log_path)
            except Exception as exc:  # never the program's problem
                sys.stderr.write(f"tracekit ncu-budget: {type(exc).__name__}: {exc}\n")
                return
            time.sleep(1.0)

    threading.Thread(target=run, name="tracekit-ncu-budget", daemon=True).start()


def _install_crash_flush() -> None:
    """Handle the fatal signals at C level (a Python-level handler never runs on a native fault)."""
    import ctypes
    import faulthandler
    import signal
    import time

    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal.restype = ctypes.c_void_p
    reraise = getattr(libc, "raise")
    reraise.argtypes = [ctypes.c_int]
    wait_s = float(os.environ.get("TRACEKIT_CRASH_FLUSH_WAIT_S", "0") or 0)

    @ctypes.CFUNCTYPE(None, ctypes.c_int)
    def handler(signum: int) -> None:
        try:
            name = signal.Signals(signum).name
            said = _profiler_stop()  # first: the timeline is what this handler is for
            if wait_s > 0:
                time.sleep(wait_s)
            os.write(2, f"Fatal Python error: {_FAULT_TEXT.get(name, name)}\n\n".encode())
            faulthandler.dump_traceback(2, all_threads=True)
            os.write(2, f"tracekit crash-flush: {name}: {said}\n".encode())
        except BaseException:  # whatever happens, the program must still die of its signal
            pass
        finally:
            libc.signal(signum, 0)  # SIG_DFL
            reraise(signum)

    _KEEP.append(handler)
    for name in _FAULT_TEXT:
        libc.signal(int(getattr(signal, name)), ctypes.cast(handler, ctypes.c_void_p))


def _chain_previous() -> None:
    """Run the sitecustomize.py that this file shadows, if any."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        try:
            folder = os.path.abspath(entry or os.getcwd())
        except (OSError, TypeError):
            continue
        if folder == here:
            continue
        candidate = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_tracekit_chained_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            return


def _main() -> None:
    try:
        _chain_previous()
    except Exception as exc:
        sys.stderr.write(f"tracekit: the previous sitecustomize failed ({type(exc).__name__}: {exc})\n")
    hang_s = os.environ.get("TRACEKIT_HANG_DUMP_S")
    if hang_s:
        try:  # a program that hangs past capture's --timeout prints every thread's stack just before it is stopped
            import faulthandler

            faulthandler.dump_traceback_later(float(hang_s), exit=False)
        except Exception as exc:
            sys.stderr.write(f"tracekit crash-flush: no hang stack ({type(exc).__name__}: {exc})\n")
    stop_at = os.environ.get("TRACEKIT_NCU_STOP_AT")
    if stop_at:
        try:
            _start_ncu_budget(float(stop_at), os.environ.get("TRACEKIT_NCU_BUDGET_LOG") or os.devnull)
        except Exception as exc:
            sys.stderr.write(f"tracekit ncu-budget: not started ({type(exc).__name__}: {exc})\n")
    if os.environ.get("TRACEKIT_CRASH_FLUSH", "none") == "profiler-stop":
        try:
            _install_crash_flush()
        except Exception as exc:
            sys.stderr.write(f"tracekit crash-flush: not installed ({type(exc).__name__}: {exc})\n")
    if os.environ.get("TRACEKIT_INSTRUMENT", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    try:
        from tracekit.collectors.instrument import instrument

        instrument(lazy=True)
    except Exception as exc:
        sys.stderr.write(f"tracekit: GEMM instrumentation is off ({type(exc).__name__}: {exc})\n")


_main()
