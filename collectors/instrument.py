"""``tracekit.instrument()``: put a tracekit GEMM range around every GEMM entry point a program calls.

Wrapped, where their packages import (an entry point a package lacks is skipped):

========================  ==================================================================================
torch                     ``torch.matmul``, ``torch.mm``, ``torch.addmm``, ``torch.bmm``, ``Tensor.__matmul__``,
                          ``torch.nn.functional.linear`` (bf16 / fp16 CUDA operands only), ``torch._scaled_mm``
                          (fp8 tensorwise / rowwise / blockwise, nvfp4 1x16 e4m3, mxfp4 / mxfp8 1x32 e8m0)
flashinfer                ``mm_fp4``, ``bmm_fp8``, ``mm_fp8``, ``gemm_fp8_nt_groupwise`` (as ``flashinfer.X`` and
                          ``flashinfer.gemm.X``)
sgl_kernel                ``cutlass_scaled_fp4_mm``, ``fp8_scaled_mm``
quantize steps (aux)      ``flashinfer.fp4_quantize`` / ``nvfp4_quantize`` / ``mxfp4_quantize``,
                          ``sgl_kernel.scaled_fp4_quant`` / ``sgl_per_token_quant_fp8`` / ``sgl_per_tensor_quant_fp8``
                          / ``sgl_per_token_group_quant_fp8``: an ``aux role=quantize`` range named with the
                          backend family and the M, K of the activation, which the explainer counts as the
                          auxiliary kernels of the GEMM of that family, M and K
grouped / MoE             ``torch._grouped_mm``, ``torch._scaled_grouped_mm``, FlashInfer ``cutlass_fused_moe``,
                          ``trtllm_fp4_block_scale_moe``, sgl-kernel ``fp8_blockwise_scaled_grouped_mm``,
                          ``cutlass_fp4_group_mm``: ``moe`` ranges, per-expert counts in a sidecar
                          (tracekit.collectors.moe_ranges)
========================  ==================================================================================

M, N, K come from the operand shapes (FP4 operands are packed two to a byte: K is twice the stored columns),
dtypes and scale layout from the dtypes and scale shapes. Only the package namespaces are patched, never the
module that defines a function: FlashInfer's ``mm_fp4`` reads attributes off its own module-level name, which
must stay the original.

Cost: a torch wrapper keys its cached range on the operands' shapes, dtype and device, so after the first call
of a shape it adds about 0.6 µs on a desktop-class CPU and about 1 µs on a GPU server's host (the key's attribute
reads are half of it; ``benchmarks/bench_instrument.py --torch`` measures it, docs/PERFORMANCE.md has the numbers).
Inside an open tracekit GEMM range (``tracekit bench gemm``) and while torch.compile traces, wrappers call
straight through.

Under ``tracekit capture --torch-profiler`` the ranges also open ``record_function`` (collectors/ranges.py,
``TRACEKIT_RECORD_FUNCTION``), so they reach the Kineto trace. With ``TRACEKIT_BREADCRUMB_DIR`` set (capture sets
it) each call also leaves a breadcrumb, and a call that raises a failure record (collectors/breadcrumb.py).
``TRACEKIT_INSTRUMENT_CPU=1`` names bf16 / fp16 GEMMs on CPU tensors too (CPU-only checks).

``instrument(lazy=True)`` (what ``collectors/site/sitecustomize.py`` uses) wraps packages already imported and
arranges for the others to be wrapped right after their first import, so a process that never imports torch
never pays for it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracekit.collectors import breadcrumb as _B
from tracekit.collectors import ranges
from tracekit.collectors.instrument_targets import GEMM_TARGETS, Target
from tracekit.collectors.instrument_targets import scale_layout as scale_layout  # public here too
from tracekit.collectors.moe_ranges import MOE_TARGETS

TARGETS: tuple[Target, ...] = GEMM_TARGETS + MOE_TARGETS
"""Every entry point ``instrument()`` knows, in the order it wraps them: the dense table
(tracekit.collectors.instrument_targets), then the grouped / MoE table (tracekit.collectors.moe_ranges.MOE_TARGETS)."""

__all__ = ["TARGETS", "instrument", "instrumented", "site_dir", "uninstrument"]

_MARK = "__tracekit_wrapped__"

# --- wrapping ---------------------------------------------------------------------------------------------


def _is_compiling_fn(module: Any) -> Callable[[], bool]:
    compiler = getattr(module, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    return fn if callable(fn) else (lambda: False)


_MISS = object()
_DYNAMO = "torch._dynamo"
_modules = sys.modules


def _same_kind(a: Any, b: Any) -> bool:
    """Both operands share dtype and device, so a cache key holding only ``a``'s stands for the pair."""
    try:
        return bool(a.dtype == b.dtype and a.is_cuda == b.is_cuda)
    except Exception:
        return False


_getframe = sys._getframe


def _traced(
    fn: Callable[..., Any], scope: Any, args: tuple[Any, ...], kwargs: dict[str, Any], state: Any
) -> Any:
    """A wrapped call with breadcrumbs on: the slot is written before the call and marked after it; a call that
    raises is recorded as a failure and its exception re-raised unchanged (collectors/breadcrumb.py). ``state``
    is the calling thread's ``ranges.LOCAL.state``, which the wrapper has already read."""
    off = _B.enter(scope, _getframe(2))  # 2: the wrapper's caller
    try:
        if scope.is_gemm and ranges._plain and not state.suppressed:  # the lean path: one push, one pop
            push, arg, pop = scope.main
            state.depth += 1
            push(arg)
            try:
                result = fn(*args, **kwargs)
            finally:
                state.depth -= 1
                pop()
        else:
            with scope:
                result = fn(*args, **kwargs)
    except BaseException as exc:
        _B.raised(off, scope, exc)
        raise
    _B.done(off)
    return result


def make_wrapper(fn: Callable[..., Any], target: Target, package: Any) -> Callable[..., Any]:
    """Wrap one callable: the range opens around the call when ``target.describe`` names the GEMM."""
    describe = target.describe
    range_for = ranges.range_for
    R = ranges
    local = ranges.LOCAL  # local.state: this thread's open GEMM ranges and suppression
    B = _B
    compiling = _is_compiling_fn(package) if target.torch_like else (lambda: False)

    def scope_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            described = describe(args, kwargs)
            return None if described is None else range_for(described[0], described[1], is_gemm=target.gemm)
        except Exception:  # naming must never break the user's call
            return None

    if target.operands is not None:
        ia, ib = target.operands
        cache = R.local_cache()  # emptied by ranges.set_sink

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # The hot path of every instrumented torch GEMM: keep it to attribute reads, one dict lookup and
            # one NVTX push/pop (benchmarks/bench_instrument.py). The key holds one operand's dtype and device:
            # torch refuses operands that differ in either, and such a pair is never cached (below).
            state = local.state
            if state.depth:  # a GEMM range is open on this thread: the launch is already named
                return fn(*args, **kwargs)
            try:
                a, b = args[ia], args[ib]
                key = (a.shape, b.shape, a.dtype, a.is_cuda)
            except (IndexError, AttributeError, TypeError):
                key = None
            if key is None:
                scope = scope_for(args, kwargs)
            else:
                scope = cache.get(key, _MISS)
                if scope is _MISS:
                    scope = scope_for(args, kwargs)
                    if _same_kind(a, b):
                        cache[key] = scope
            # torch.compile folds is_compiling() to True while it traces; until torch._dynamo is imported
            # nothing can be tracing, and the check's ~70 ns are skipped.
            if scope is None or (_DYNAMO in _modules and compiling()):
                return fn(*args, **kwargs)
            if B.active:
                return _traced(fn, scope, args, kwargs, state)
            if R._plain and not state.suppressed:  # no ncu budget, no record_function: one push, one pop
                push, arg, pop = scope.main
                state.depth += 1
                push(arg)
                try:
                    return fn(*args, **kwargs)
                finally:
                    state.depth -= 1
                    pop()
            with scope:
                return fn(*args, **kwargs)

    else:
        record = target.record

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if local.state.depth or compiling():
                return fn(*args, **kwargs)
            scope = scope_for(args, kwargs)
            if scope is None:
                return fn(*args, **kwargs)
            if B.active:
                result = _traced(fn, scope, args, kwargs, local.state)
            else:
                with scope:
                    result = fn(*args, **kwargs)
            if record is not None:
                with contextlib.suppress(Exception):  # recording must never break the user's call
                    record(args, kwargs, scope)
            return result

    with contextlib.suppress(AttributeError, TypeError):  # builtins lacking some attributes
        functools.update_wrapper(wrapper, fn, updated=())
    setattr(wrapper, _MARK, fn)
    return wrapper


_LOCK = threading.RLock()
_WRAPPED: dict[str, tuple[Any, str, Any]] = {}
"""label -> (owner object, attribute, original) for everything wrapped now."""
_PENDING: set[str] = set()


def _resolve(package: Any, path: str) -> tuple[Any, str] | None:
    owner = package
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    if not hasattr(owner, parts[-1]):
        return None
    return owner, parts[-1]


def _wrap_package(name: str) -> list[str]:
    """Wrap every target of the already-imported package ``name``; returns labels wrapped now."""
    package = sys.modules.get(name)
    if package is None:
        return []
    done = []
    with _LOCK:
        for target in TARGETS:
            if target.package != name or target.label in _WRAPPED:
                continue
            found = _resolve(package, target.path)
            if found is None:
                continue
            owner, attr = found
            original = getattr(owner, attr)
            if getattr(original, _MARK, None) is not None:  # wrapped by another copy of us
                continue
            try:
                setattr(owner, attr, make_wrapper(original, target, package))
            except (AttributeError, TypeError):
                continue
            _WRAPPED[target.label] = (owner, attr, original)
            done.append(target.label)
    return done


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps a target package right after its first import finishes (``instrument(lazy=True)``)."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PENDING or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _WrappingLoader(spec.loader, fullname)
        return spec


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        with _LOCK:
            _PENDING.discard(self._name)
        _wrap_package(self._name)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._loader, item)


_FINDER: _PostImportFinder | None = None


def instrument(
    *, torch: bool = True, flashinfer: bool = True, sgl: bool = True, lazy: bool = False
) -> list[str]:
    """Wrap the GEMM entry points of the chosen packages; returns the labels wrapped (e.g. ``torch.mm``).

    Idempotent: a second call wraps nothing twice. A package that is not installed is skipped silently. With
    ``lazy=True`` a package not yet imported is not imported now: it is wrapped just after the program first
    imports it (its labels then appear in :func:`instrumented`).
    """
    global _FINDER
    chosen = [name for name, on in (("torch", torch), ("flashinfer", flashinfer), ("sgl_kernel", sgl)) if on]
    for name in chosen:
        if name in sys.modules:
            _wrap_package(name)
            continue
        try:
            installed = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            installed = False
        if not installed:
            continue
        if lazy:
            with _LOCK:
                _PENDING.add(name)
                if _FINDER is None:
                    _FINDER = _PostImportFinder()
                    sys.meta_path.insert(0, _FINDER)
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a broken optional package must not stop the user's program
            continue
        _wrap_package(name)
    return instrumented()


def instrumented() -> list[str]:
    """Labels of the entry points wrapped right now, in ``TARGETS`` order."""
    with _LOCK:
        return [t.label for t in TARGETS if t.label in _WRAPPED]


def uninstrument() -> list[str]:
    """Restore every wrapped entry point and cancel pending lazy wrapping; returns the labels restored."""
    global _FINDER
    with _LOCK:
        restored = []
        for label, (owner, attr, original) in list(_WRAPPED.items()):
            try:
                setattr(owner, attr, original)
            except (AttributeError, TypeError):
                continue
            restored.append(label)
            del _WRAPPED[label]
        _PENDING.clear()
        if _FINDER is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(_FINDER)
            _FINDER = None
    return restored


def site_dir() -> Path:
    """Folder holding tracekit's ``sitecustomize.py``: put it first on PYTHONPATH to instrument a program."""
    return Path(__file__).resolve().parent / "site"
