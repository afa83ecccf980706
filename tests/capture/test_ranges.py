"""Range names and the NVTX domain logic of collectors/ranges.py (no GPU, no torch)."""

from __future__ import annotations

import re
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit.collectors import ranges
from tracekit.naming import DOMAIN, NCU_FILTER, decode, encode


@pytest.fixture
def sink():
    rec = ranges.RecordingSink()
    ranges.set_sink(rec)
    ranges.reload_settings({})
    try:
        yield rec
    finally:
        ranges.reset()


_value = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(
    backend=_value,
    op=_value,
    m=st.integers(1, 1 << 20),
    n=st.integers(1, 1 << 20),
    k=st.integers(1, 1 << 20),
    scale=st.one_of(st.none(), _value),
)
def test_gemm_name_roundtrips_and_is_filter_safe(backend, op, m, n, k, scale):
    name = ranges.gemm_name(backend, op, m, n, k, "bf16", "bf16", "bf16", scale)
    assert "/" not in name and "," not in name
    decoded = decode(name)
    assert decoded is not None and decoded.kind == "gemm"
    assert decoded.fields["backend"] == backend and decoded.fields["op"] == op
    assert (decoded.get_int("M"), decoded.get_int("N"), decoded.get_int("K")) == (m, n, k)
    assert decoded.fields.get("scale") == scale
    assert decoded.encode() == name


def test_ncu_filter_semantics():
    # regex:<domain>@<range>/ : the domain part selects tracekit's domain, the range part is `.+`.
    domain_re, range_re = NCU_FILTER.removeprefix("regex:").rstrip("/").split("@")
    names = [
        ranges.gemm_name(
            "torch-fp8-blockwise",
            "scaled_mm",
            16,
            768,
            6144,
            "e4m3",
            "e4m3",
            "bf16",
            "blockwise-1x128.128x128",
        ),
        encode("aux", role="quantize", backend="flashinfer-fp4-auto", op="nvfp4_quantize", M=16, K=6144),
    ]
    for name in names:
        assert re.compile(range_re).fullmatch(name)
    assert re.search(domain_re, DOMAIN)
    # ncu's regex search is unanchored, so the budget domain must not contain "tracekit" at all
    assert re.search(domain_re, ranges.SKIP_DOMAIN) is None


def test_gemm_range_pushes_in_tracekit_domain(sink):
    with ranges.gemm_range("torch-bf16", "mm", 1024, 2048, 6144, "bf16", "bf16", "bf16"):
        assert ranges.gemm_open()
    assert not ranges.gemm_open()
    assert sink.events == [
        ("push", DOMAIN, "gemm backend=torch-bf16 op=mm M=1024 N=2048 K=6144 a=bf16 b=bf16 out=bf16"),
        ("pop", DOMAIN, None),
    ]


def test_decorator_and_aux_range(sink):
    @ranges.aux_range("quantize", backend="x", op="fp8_quantize", M=16, K=64)
    def quantize(v):
        return v * 2

    assert quantize(3) == 6 and quantize(4) == 8
    assert sink.pushes() == [(DOMAIN, "aux role=quantize backend=x op=fp8_quantize M=16 K=64")] * 2
    assert not ranges.gemm_open()  # aux ranges do not count as an open GEMM


def test_ncu_budget_switches_domain(sink):
    ranges.reload_settings({ranges.ENV_NCU_MAX_PER_RANGE: "2"})
    ranges.reset_counts()
    for m in (16, 16, 16, 64, 16):
        with ranges.gemm_range("torch-bf16", "mm", m, 768, 6144, "bf16", "bf16", "bf16"):
            pass
    domains = [(d, decode(n).get_int("M")) for d, n in sink.pushes()]
    assert domains == [
        (DOMAIN, 16),
        (DOMAIN, 16),
        (ranges.SKIP_DOMAIN, 16),
        (DOMAIN, 64),  # the budget is per range name
        (ranges.SKIP_DOMAIN, 16),
    ]
    pops = [d for kind, d, _ in sink.events if kind == "pop"]
    assert pops == [d for d, _ in domains]  # each pop goes to the domain its push used


def test_suppressed_uses_skip_domain_and_no_budget(sink):
    ranges.reload_settings({ranges.ENV_NCU_MAX_PER_RANGE: "1"})
    scope = ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16")
    with ranges.suppressed(), scope:
        pass
    with scope:
        pass
    assert [d for d, _ in sink.pushes()] == [ranges.SKIP_DOMAIN, DOMAIN]


def test_nested_same_range_pops_in_order(sink):
    ranges.reload_settings({ranges.ENV_NCU_MAX_PER_RANGE: "1"})
    scope = ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16")
    with scope, scope:
        pass
    assert [(k, d) for k, d, _ in sink.events] == [
        ("push", DOMAIN),
        ("push", ranges.SKIP_DOMAIN),
        ("pop", ranges.SKIP_DOMAIN),
        ("pop", DOMAIN),
    ]


def test_bad_budget_warns_and_is_ignored(sink):
    with pytest.warns(RuntimeWarning, match="not an integer"):
        ranges.reload_settings({ranges.ENV_NCU_MAX_PER_RANGE: "lots"})
    scope = ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16")
    for _ in range(3):
        with scope:
            pass
    assert [d for d, _ in sink.pushes()] == [DOMAIN] * 3  # no budget: every launch stays selectable


def test_reset_clears_this_threads_state_and_settings(sink):
    ranges.reload_settings({ranges.ENV_NCU_MAX_PER_RANGE: "1"})
    scope = ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16")
    quiet = ranges.suppressed()
    quiet.__enter__()
    scope.__enter__()  # left open, as a failing test would leave it
    assert ranges.gemm_open()
    ranges.reset()
    assert not ranges.gemm_open() and ranges.get_sink() is not sink
    fresh = ranges.RecordingSink()
    ranges.set_sink(fresh)
    scope = ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16")
    for _ in range(2):
        with scope:
            pass
    # not suppressed any more, and the budget of 1 is gone with the settings
    assert [d for d, _ in fresh.pushes()] == [DOMAIN, DOMAIN]


def test_a_range_open_on_one_thread_does_not_mute_another(sink):
    """Range state is per thread: a GEMM range (or a suppressed block) open on one thread changes nothing on
    another, and each thread pops what it pushed."""
    opened, release = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def holder() -> None:
        with ranges.suppressed(), ranges.gemm_range("torch-bf16", "mm", 8, 8, 8, "bf16", "bf16", "bf16"):
            opened.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert opened.wait(10)
        seen["open_here"] = ranges.gemm_open()
        with ranges.gemm_range("torch-bf16", "mm", 16, 16, 16, "bf16", "bf16", "bf16"):
            seen["inside"] = ranges.gemm_open()
    finally:
        release.set()
        t.join(10)
    assert seen == {"open_here": False, "inside": True}
    pushes = sink.pushes()
    # the holder's range was suppressed (its own thread), this thread's was not
    assert (
        ranges.SKIP_DOMAIN,
        ranges.gemm_name("torch-bf16", "mm", 8, 8, 8, "bf16", "bf16", "bf16"),
    ) in pushes
    assert (DOMAIN, ranges.gemm_name("torch-bf16", "mm", 16, 16, 16, "bf16", "bf16", "bf16")) in pushes
    assert not ranges.gemm_open()


def test_record_function_mode_without_torch_is_harmless(sink):
    ranges.reload_settings({ranges.ENV_RECORD_FUNCTION: "1"})
    with ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16"):
        pass
    assert len(sink.pushes()) == 1


def test_real_nvtx_sink_without_a_tool_is_a_noop():
    nvtx = pytest.importorskip("nvtx")
    ranges.set_sink(ranges.NvtxSink())
    try:
        with ranges.gemm_range("torch-bf16", "mm", 8, 8, 8, "bf16", "bf16", "bf16") as scope:
            assert scope.name.startswith("gemm ")
        assert nvtx is not None
    finally:
        ranges.reset()


def test_record_function_scopes_close_on_the_thread_that_opened_them(sink, monkeypatch):
    """Two threads inside the same range, interleaved: each exit closes its own thread's record_function (the
    profiler's ranges are per thread too), never the other's."""
    closed: list[tuple[str, str]] = []

    class Annotation:
        def __init__(self, name: str) -> None:
            self.thread = threading.current_thread().name

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            closed.append((threading.current_thread().name, self.thread))

    ranges.reload_settings({ranges.ENV_RECORD_FUNCTION: "1"})
    monkeypatch.setattr(ranges, "_record_function_factory", Annotation)
    scope = ranges.gemm_range("t", "mm", 1, 2, 3, "bf16", "bf16", "bf16")
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with scope:
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with scope:
            b_in.set()
            a_out.wait(10)

    threads = [threading.Thread(target=a, name="A"), threading.Thread(target=b, name="B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert closed == [("A", "A"), ("B", "B")]
    assert len(sink.pushes()) == 2 and sum(1 for e in sink.events if e[0] == "pop") == 2
