"""NVTX ranges around GEMM launches and their auxiliary steps, named with tracekit's range-name codec.

Every range is a push/pop range in tracekit's own NVTX domain (``tracekit.naming.DOMAIN``), so Nsight Compute
selects them with ``--nvtx-include regex:tracekit@.+/`` and Nsight Systems shows them under their own domain::

    with gemm_range("torch-bf16", "mm", m, n, k, a="bf16", b="bf16", out="bf16"):
        torch.mm(x, w)

    @aux_range("quantize", backend="flashinfer-fp4", op="nvfp4_quantize", M=m, K=k, a="bf16", out="e2m1")
    def quantize(...): ...

Why the care about cost: ranges wrap every GEMM of a user's model (``tracekit.instrument()``), so a call must
stay well under 2 µs with no profiler attached. Names, registered strings and event attributes are built once per
distinct range and cached; entering a range is a dict lookup, a counter bump and one NVTX call, and the
instrument wrappers skip the counter while no ncu budget is set.

Threads: which ranges are open, and whether warm-up suppression is on, is per thread (:class:`RangeState`), as
NVTX ranges are: a GEMM range open on one thread never mutes the instrument wrappers of another. The sink, the
ncu budget and record_function mode are process-wide. Tests start clean with :func:`reset`.

Environment read at first use (and again by :func:`reload_settings`):

``TRACEKIT_NCU_MAX_PER_RANGE=N``
    set by ``tracekit capture`` under ncu: the (N+1)-th and later launches of the same range name are pushed in
    ``SKIP_DOMAIN`` instead, which the ncu filter does not select, so ncu profiles at most N launches a range.
``TRACEKIT_RECORD_FUNCTION=1``
    set by capture's PyTorch-profiler mode (which records no NVTX): each range also opens
    ``torch.profiler.record_function(name)``.

Without the ``nvtx`` package the ranges fall back to ``torch.cuda.nvtx`` (default domain, no budget domain), and
to nothing when neither exists; each fallback warns once.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from tracekit import naming
from tracekit.naming import DOMAIN, encode

__all__ = [
    "ENV_NCU_MAX_PER_RANGE",
    "ENV_RECORD_FUNCTION",
    "LOCAL",
    "SKIP_DOMAIN",
    "NoopSink",
    "NvtxSink",
    "RangeScope",
    "RangeState",
    "RecordingSink",
    "aux_range",
    "gemm_open",
    "gemm_range",
    "get_sink",
    "local_cache",
    "moe_name",
    "moe_range",
    "range_for",
    "reload_settings",
    "reset",
    "reset_counts",
    "set_sink",
    "suppressed",
    "thread_state",
]

SKIP_DOMAIN = naming.SKIP_DOMAIN
"""NVTX domain for warm-up launches and launches beyond the per-range ncu budget (see tracekit.naming)."""

ENV_NCU_MAX_PER_RANGE = "TRACEKIT_NCU_MAX_PER_RANGE"
ENV_RECORD_FUNCTION = "TRACEKIT_RECORD_FUNCTION"

F = TypeVar("F", bound=Callable[..., Any])


# --- sinks: where a push / pop goes ----------------------------------------------------------------------


class NvtxSink:
    """Pushes through the ``nvtx`` package, one cached Domain and EventAttributes per (domain, name)."""

    kind = "nvtx"

    def __init__(self) -> None:
        import nvtx

        self._nvtx = nvtx

    def handle(self, domain: str, name: str) -> tuple[Callable[..., Any], Any, Callable[[], Any]]:
        """(push, argument, pop) for one range: ``push(argument)`` opens it, ``pop()`` closes it."""
        dom = self._nvtx.get_domain(domain)
        attributes = dom.get_event_attributes(message=name)  # registers the string once
        return dom.push_range, attributes, dom.pop_range


class TorchNvtxSink:
    """Fallback through ``torch.cuda.nvtx``: the default domain only, so budget-skipped launches push nothing."""

    kind = "torch.cuda.nvtx"

    def __init__(self) -> None:
        import torch.cuda.nvtx as tnvtx

        self._nvtx = tnvtx

    def handle(self, domain: str, name: str) -> tuple[Callable[..., Any], Any, Callable[[], Any]]:
        if domain == SKIP_DOMAIN:
            return _noop1, None, _noop0
        return self._nvtx.range_push, name, self._nvtx.range_pop


class NoopSink:
    """No NVTX available at all: ranges cost a counter bump and nothing else."""

    kind = "none"

    def handle(self, domain: str, name: str) -> tuple[Callable[..., Any], Any, Callable[[], Any]]:
        return _noop1, None, _noop0


class RecordingSink:
    """Records every push and pop as tuples, for tests and for checking what a collector would emit."""

    kind = "recording"

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []

    def handle(self, domain: str, name: str) -> tuple[Callable[..., Any], Any, Callable[[], Any]]:
        events = self.events
        return (
            lambda n: events.append(("push", domain, n)),
            name,
            lambda: events.append(("pop", domain, None)),
        )

    def pushes(self) -> list[tuple[str, str]]:
        """(domain, name) of every push, in order."""
        return [(d, n) for kind, d, n in self.events if kind == "push" and n is not None]


def _noop0() -> None:
    return None


def _noop1(_arg: Any) -> None:
    return None


_sink: Any = None


class LocalCache(dict[Any, Any]):
    """A caller's own cache of scopes (an instrument wrapper's per-shape cache): :func:`set_sink` empties it.

    A dict subclass only so it can be held weakly; lookups are plain dict lookups.
    """

    __slots__ = ("__weakref__",)


_LOCAL_CACHES: weakref.WeakValueDictionary[int, LocalCache] = weakref.WeakValueDictionary()
"""id -> cache, held weakly (a WeakSet would compare the dicts by content)."""


def local_cache() -> LocalCache:
    """A new cache of scopes that is emptied whenever the sink changes (see :class:`LocalCache`)."""
    cache = LocalCache()
    _LOCAL_CACHES[id(cache)] = cache
    return cache


def _make_default_sink() -> Any:
    try:
        return NvtxSink()
    except ImportError:
        pass
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        try:
            sink = TorchNvtxSink()
        except Exception:  # a broken torch install must not break the user's program
            sink = None
        if sink is not None:
            warnings.warn(
                "tracekit: the nvtx package is not installed; GEMM ranges go to torch.cuda.nvtx (default "
                "domain, no per-range ncu budget). pip install nvtx for tracekit's own domain.",
                RuntimeWarning,
                stacklevel=3,
            )
            return sink
    warnings.warn(
        "tracekit: neither the nvtx package nor torch is importable; GEMM ranges are not recorded "
        "(pip install nvtx).",
        RuntimeWarning,
        stacklevel=3,
    )
    return NoopSink()


def get_sink() -> Any:
    """The sink in use, chosen on first use: nvtx, else torch.cuda.nvtx, else nothing."""
    global _sink
    if _sink is None:
        _sink = _make_default_sink()
    return _sink


def set_sink(sink: Any) -> Any:
    """Use ``sink`` from now on (``None``: choose again on next use); returns the previous one.

    Cached ranges are dropped so the next use of each builds its handles on the new sink.
    """
    global _sink
    previous = _sink
    _sink = sink
    _CACHE.clear()
    for cache in list(_LOCAL_CACHES.values()):
        cache.clear()
    return previous


# --- settings ----------------------------------------------------------------------------------------------

_budget: int | None = None
_record_function: bool = False
_record_function_factory: Callable[[str], Any] | None = None
_plain = True
"""Process-wide: no ncu budget and no record_function. With the calling thread not suppressed, entering a range
is one NVTX push and nothing else, so the instrument wrappers take their lean path (``RangeScope.main``
directly, no ``with``)."""


class RangeState:
    """What is per thread: GEMM ranges open on this thread (``depth``), whether this thread is inside
    :class:`suppressed`, and the stack of what each open range must undo on exit (its NVTX pop, its
    record_function). NVTX ranges are per thread, so a range open on one thread never mutes the instrument
    wrappers of another (a serving process launches GEMMs from several threads).

    A plain object, one per thread, reached through one ``threading.local`` read (:func:`thread_state`): its
    own attributes then cost what any attribute costs, which keeps the wrapper's hot path lean."""

    __slots__ = ("depth", "stack", "suppressed")

    def __init__(self) -> None:
        self.depth = 0
        self.suppressed = False
        self.stack: list[tuple[Callable[[], Any], Any]] = []


class _Local(threading.local):
    def __init__(self) -> None:
        self.state = RangeState()


LOCAL = _Local()
"""``LOCAL.state`` is the calling thread's :class:`RangeState`; process-wide settings (sink, budget,
record_function) are module globals."""


def thread_state() -> RangeState:
    """The calling thread's range state."""
    return LOCAL.state


def _update_plain() -> None:
    global _plain
    _plain = _budget is None and not _record_function


def _parse_budget(text: str | None) -> int | None:
    if text is None or not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        warnings.warn(
            f"tracekit: {ENV_NCU_MAX_PER_RANGE}={text!r} is not an integer; no per-range budget applied",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return max(value, 0)


def reload_settings(environ: dict[str, str] | None = None) -> None:
    """Read ``TRACEKIT_NCU_MAX_PER_RANGE`` and ``TRACEKIT_RECORD_FUNCTION`` again (from ``environ`` if given)."""
    global _budget, _record_function, _record_function_factory
    env = os.environ if environ is None else environ
    _budget = _parse_budget(env.get(ENV_NCU_MAX_PER_RANGE))
    _record_function = env.get(ENV_RECORD_FUNCTION, "").strip().lower() in ("1", "true", "yes", "on")
    _record_function_factory = None
    _update_plain()


def _record_function_for(name: str) -> Any:
    global _record_function_factory
    if _record_function_factory is None:
        try:
            import torch.profiler

            _record_function_factory = torch.profiler.record_function
        except Exception:
            _record_function_factory = _NullContext
    return _record_function_factory(name)


class _NullContext:
    def __init__(self, _name: str) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


reload_settings()


# --- ranges --------------------------------------------------------------------------------------------------


class suppressed:
    """Within this block every range the calling thread opens goes to ``SKIP_DOMAIN`` and uses none of the ncu
    budget (warm-up runs). Other threads are not affected."""

    def __enter__(self) -> None:
        state = LOCAL.state
        self._previous = state.suppressed
        state.suppressed = True

    def __exit__(self, *exc: object) -> None:
        LOCAL.state.suppressed = self._previous


def gemm_open() -> bool:
    """True while a tracekit GEMM range is open on the calling thread (instrument wrappers then push nothing, so
    a GEMM launched inside a benchmark's own range is not wrapped twice)."""
    return LOCAL.state.depth > 0


class RangeScope:
    """One distinct range name: a reusable context manager (and decorator) with its cached NVTX handles.

    The same object is returned for every use of a name, so entering costs no allocation; what to undo on exit
    (the pop of the domain the push used, the record_function) is kept on the calling thread's stack
    (:class:`RangeState`), which makes nesting and several threads in the same range safe. Only ``count`` (the
    ncu budget) is shared: the budget is per range name, process-wide.
    """

    __slots__ = ("count", "crumb", "is_gemm", "main", "name", "skip")

    def __init__(self, name: str, is_gemm: bool) -> None:
        self.name = name
        self.is_gemm = is_gemm
        self.count = 0
        self.crumb: Any = None
        """The range's breadcrumb site ids by call site, filled on its calls with breadcrumbs on
        (tracekit.collectors.breadcrumb)."""
        sink = get_sink()
        self.main = sink.handle(DOMAIN, name)
        self.skip = sink.handle(SKIP_DOMAIN, name)

    def __enter__(self) -> RangeScope:
        state = LOCAL.state
        if state.suppressed:
            push, arg, pop = self.skip
        else:
            self.count += 1
            push, arg, pop = self.skip if (_budget is not None and self.count > _budget) else self.main
        push(arg)
        rf = None
        if _record_function:
            rf = _record_function_for(self.name)
            rf.__enter__()
        state.stack.append((pop, rf))
        if self.is_gemm:
            state.depth += 1
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        state = LOCAL.state
        if not state.stack:  # entered on another thread: nothing of ours to close
            return
        pop, rf = state.stack.pop()
        if self.is_gemm and state.depth > 0:
            state.depth -= 1
        try:
            if rf is not None:
                rf.__exit__(exc_type, exc, tb)
        finally:
            pop()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


_CACHE: dict[Any, RangeScope] = {}
_CACHE_MAX = 1 << 16


def range_for(key: Any, build: Callable[[], str], *, is_gemm: bool = True) -> RangeScope:
    """A scope for the range identified by ``key``; ``build()`` makes its name on the first use of the key.

    This is the fast path the instrument wrappers use: they key on shapes and dtypes and never encode a name
    twice.
    """
    scope = _CACHE.get(key)
    if scope is None:
        if len(_CACHE) >= _CACHE_MAX:  # dynamic shapes: keep memory bounded, counts restart
            _CACHE.clear()
        scope = RangeScope(build(), is_gemm)
        _CACHE[key] = scope
    return scope


def gemm_range(
    backend: str,
    op: str,
    m: int,
    n: int,
    k: int,
    a: str,
    b: str,
    out: str,
    scale: str | None = None,
    **extra: object,
) -> RangeScope:
    """A ``gemm`` range named ``gemm backend=.. op=.. M=.. N=.. K=.. a=.. b=.. out=.. scale=.. [extra]``."""
    key = (
        ("gemm", backend, op, m, n, k, a, b, out, scale, *extra.items())
        if extra
        else (
            "gemm",
            backend,
            op,
            m,
            n,
            k,
            a,
            b,
            out,
            scale,
        )
    )
    scope = _CACHE.get(key)
    if scope is None:
        return range_for(
            key,
            lambda: encode(
                "gemm", backend=backend, op=op, M=m, N=n, K=k, a=a, b=b, out=out, scale=scale, **extra
            ),
        )
    return scope


def gemm_name(
    backend: str,
    op: str,
    m: int,
    n: int,
    k: int,
    a: str,
    b: str,
    out: str,
    scale: str | None = None,
    **extra: object,
) -> str:
    """The name :func:`gemm_range` pushes for these arguments (what ``measurements.range`` holds)."""
    return encode("gemm", backend=backend, op=op, M=m, N=n, K=k, a=a, b=b, out=out, scale=scale, **extra)


def aux_name(role: str, **fields: object) -> str:
    """The name :func:`aux_range` pushes: ``aux role=.. [fields]``."""
    return encode("aux", role=role, **fields)


def moe_name(
    backend: str,
    op: str,
    experts: int,
    m: int,
    n: int,
    k: int,
    a: str,
    b: str,
    out: str,
    scale: str | None = None,
    **extra: object,
) -> str:
    """The name of a grouped / MoE launch: ``moe backend=.. op=.. E=.. M=.. N=.. K=.. a=.. b=.. out=.. [extra]``.

    ``E`` is the number of experts in the weight tensor, ``M`` the routed rows of the launch (tokens x top-k; the
    sum of the per-expert counts), ``N`` and ``K`` one expert's GEMM. The per-expert counts are not in the name
    (names stay short and filter-safe): the benchmark keeps them in ``raw/moe.jsonl``, ``instrument()`` in the
    routing sidecar (tracekit.collectors.moe_ranges).
    """
    return encode(
        "moe", backend=backend, op=op, E=experts, M=m, N=n, K=k, a=a, b=b, out=out, scale=scale, **extra
    )


def moe_range(
    backend: str,
    op: str,
    experts: int,
    m: int,
    n: int,
    k: int,
    a: str,
    b: str,
    out: str,
    scale: str | None = None,
    **extra: object,
) -> RangeScope:
    """A ``moe`` range (see :func:`moe_name`); it counts as an open GEMM range, so instrument wrappers of the
    per-expert calls inside it push nothing."""
    key = ("moe", backend, op, experts, m, n, k, a, b, out, scale, *extra.items())
    scope = _CACHE.get(key)
    if scope is None:
        return range_for(key, lambda: moe_name(backend, op, experts, m, n, k, a, b, out, scale, **extra))
    return scope


def aux_range(role: str, **fields: object) -> RangeScope:
    """An ``aux`` range (activation quantize, scale swizzle, split-K reduce): ``aux role=.. [fields]``."""
    key = ("aux", role, *fields.items())
    scope = _CACHE.get(key)
    if scope is None:
        return range_for(key, lambda: aux_name(role, **fields), is_gemm=False)
    return scope


def reset_counts() -> None:
    """Forget how often each range was entered (the ncu budget starts again)."""
    for scope in _CACHE.values():
        scope.count = 0


def reset() -> None:
    """Back to a fresh process, for tests: the sink is chosen again on next use, settings are read again from the
    environment, cached scopes and budget counts are dropped, and the calling thread's range state is cleared
    (no range open, not suppressed)."""
    set_sink(None)
    reload_settings()
    LOCAL.state = RangeState()
