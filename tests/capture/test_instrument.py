"""tracekit.instrument() on stand-in torch / flashinfer / sgl_kernel modules: the wrapped callables see the right
range name and M/N/K, uninstrument restores them, lazy mode wraps a package on its first import."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest

from tracekit.collectors import instrument as I
from tracekit.collectors import ranges
from tracekit.naming import DOMAIN, decode


class DType:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


BF16, FP16, FP32 = DType("bfloat16"), DType("float16"), DType("float32")
E4M3, FP4, U8, E8M0 = (
    DType("float8_e4m3fn"),
    DType("float4_e2m1fn_x2"),
    DType("uint8"),
    DType("float8_e8m0fnu"),
)


class T:
    """Stand-in tensor: shape, dtype, is_cuda, numel."""

    def __init__(self, *shape: int, dtype: DType = BF16, cuda: bool = True) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        self.is_cuda = cuda

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def T(self):
        return T(*reversed(self.shape), dtype=self.dtype, cuda=self.is_cuda)


SEEN: list[str | None] = []
"""The innermost open range name each stand-in entry point saw when it ran (None: no range)."""


def _seen(*_a, **_k):
    pushes = ranges.get_sink().pushes()
    SEEN.append(pushes[-1][1] if ranges.gemm_open() and pushes else None)
    return "result"


def _fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    for name, dt in (("bfloat16", BF16), ("float16", FP16), ("float32", FP32)):
        setattr(torch, name, dt)
    for fn in ("matmul", "mm", "addmm", "bmm", "_scaled_mm"):
        setattr(torch, fn, _seen)
    torch.nn = types.SimpleNamespace(functional=types.SimpleNamespace(linear=_seen))
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False)

    class Tensor:
        def __matmul__(self, other):
            return _seen(self, other)

    torch.Tensor = Tensor
    return torch


@pytest.fixture
def sink():
    rec = ranges.RecordingSink()
    previous = ranges.set_sink(rec)
    ranges.reload_settings({})
    SEEN.clear()
    try:
        yield rec
    finally:
        I.uninstrument()
        ranges.set_sink(previous)
        ranges.reset()


@pytest.fixture
def fake_torch(monkeypatch, sink):
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def _fields(name: str | None) -> dict[str, str]:
    assert name is not None, "the entry point ran outside a tracekit range"
    decoded = decode(name)
    assert decoded is not None and decoded.kind == "gemm"
    return decoded.fields


def test_torch_entry_points_get_ranges_with_mnk(fake_torch, sink):
    originals = {n: getattr(fake_torch, n) for n in ("matmul", "mm", "addmm", "bmm", "_scaled_mm")}
    wrapped = I.instrument(flashinfer=False, sgl=False)
    assert wrapped == [
        "torch.matmul",
        "torch.Tensor.__matmul__",
        "torch.mm",
        "torch.addmm",
        "torch.bmm",
        "torch.nn.functional.linear",
        "torch._scaled_mm",
    ]
    assert I.instrument(flashinfer=False, sgl=False) == wrapped  # idempotent
    assert getattr(fake_torch.mm, I._MARK) is originals["mm"]  # wrapped once, not twice

    fake_torch.mm(T(1024, 6144), T(6144, 2048))
    f = _fields(SEEN[-1])
    assert (f["backend"], f["op"], f["M"], f["N"], f["K"]) == ("torch-bf16", "mm", "1024", "2048", "6144")

    fake_torch.nn.functional.linear(T(4, 64, 6144, dtype=FP16), T(768, 6144, dtype=FP16))
    f = _fields(SEEN[-1])
    assert (f["backend"], f["op"], f["M"], f["N"], f["K"], f["a"]) == (
        "torch-fp16",
        "linear",
        "256",
        "768",
        "6144",
        "fp16",
    )

    fake_torch.addmm(T(2048), T(16, 6144), T(6144, 2048))
    assert _fields(SEEN[-1])["M"] == "16"

    fake_torch.bmm(T(8, 128, 64), T(8, 64, 32))
    f = _fields(SEEN[-1])
    assert (f["M"], f["N"], f["K"], f["batch"]) == ("128", "32", "64", "8")

    fake_torch.matmul(T(2, 512, 6144), T(6144, 768))  # leading dims fold into M
    f = _fields(SEEN[-1])
    assert (f["M"], f["N"], f["K"]) == ("1024", "768", "6144") and "batch" not in f

    fake_torch.Tensor().__matmul__(T(3, 3))  # not a tensor with a shape: straight through, no range
    assert SEEN[-1] is None

    fake_torch.mm(T(16, 64, dtype=FP32), T(64, 64, dtype=FP32))  # fp32: not named
    fake_torch.mm(T(16, 64, cuda=False), T(64, 64, cuda=False))  # CPU: not named
    assert SEEN[-2:] == [None, None]
    assert all(d == DOMAIN for d, _ in sink.pushes())

    restored = I.uninstrument()
    assert sorted(restored) == sorted(wrapped)
    for n, fn in originals.items():
        assert getattr(fake_torch, n) is fn
    assert fake_torch.nn.functional.linear is _seen
    assert I.instrumented() == []


@pytest.mark.parametrize(
    ("a", "b", "sa", "sb", "expect"),
    [
        (
            T(1024, 6144, dtype=E4M3),
            T(6144, 2048, dtype=E4M3),
            T(dtype=FP32),
            T(dtype=FP32),
            ("6144", "tensorwise", "e4m3"),
        ),
        (
            T(1024, 6144, dtype=E4M3),
            T(6144, 2048, dtype=E4M3),
            T(1024, 1, dtype=FP32),
            T(1, 2048, dtype=FP32),
            ("6144", "rowwise", "e4m3"),
        ),
        (
            T(1024, 6144, dtype=E4M3),
            T(6144, 2048, dtype=E4M3),
            T(1024, 48, dtype=FP32),
            T(48, 16, dtype=FP32),
            ("6144", "blockwise-1x128.128x128", "e4m3"),
        ),
        (
            T(1024, 6144, dtype=E4M3),
            T(6144, 2048, dtype=E4M3),
            T(1024, 48, dtype=FP32),
            T(48, 2048, dtype=FP32),
            ("6144", "blockwise-1x128", "e4m3"),
        ),
        # nvfp4: packed K/2 columns, swizzled e4m3 1x16 scales (flattened)
        (
            T(128, 3072, dtype=FP4),
            T(3072, 256, dtype=FP4),
            T(128 * 384, dtype=E4M3),
            T(256 * 384, dtype=E4M3),
            ("6144", "nvfp4-1x16", "e2m1"),
        ),
        (
            T(128, 3072, dtype=FP4),
            T(3072, 256, dtype=FP4),
            T(128 * 192, dtype=E8M0),
            T(256 * 192, dtype=E8M0),
            ("6144", "mxfp4-1x32", "e2m1"),
        ),
    ],
)
def test_scaled_mm_dtype_and_scale_layout(fake_torch, sink, a, b, sa, sb, expect):
    I.instrument(flashinfer=False, sgl=False)
    fake_torch._scaled_mm(a, b, sa, sb, out_dtype=BF16)
    f = _fields(SEEN[-1])
    assert (f["K"], f["scale"], f["a"]) == expect
    assert f["M"] == str(a.shape[0]) and f["N"] == str(b.shape[1]) and f["out"] == "bf16"
    assert f["backend"] == ("torch-fp4" if expect[2] == "e2m1" else "torch-fp8")


def test_flashinfer_and_sgl_entry_points(monkeypatch, sink):
    fi = types.ModuleType("flashinfer")
    fi.gemm = types.SimpleNamespace(mm_fp4=_seen, bmm_fp8=_seen)
    fi.mm_fp4, fi.bmm_fp8, fi.gemm_fp8_nt_groupwise = _seen, _seen, _seen
    sgl = types.ModuleType("sgl_kernel")
    sgl.cutlass_scaled_fp4_mm, sgl.fp8_scaled_mm = _seen, _seen
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    monkeypatch.setitem(sys.modules, "sgl_kernel", sgl)
    wrapped = I.instrument(torch=False)
    assert "flashinfer.mm_fp4" in wrapped and "flashinfer.gemm.mm_fp4" in wrapped
    assert (
        "sgl_kernel.cutlass_scaled_fp4_mm" in wrapped and "flashinfer.mm_fp8" not in wrapped
    )  # absent: skipped

    # mm_fp4(a [M, K/2], b.T [K/2, N], ...) with backend= keyword
    a, b = T(16, 3072, dtype=U8), T(768, 3072, dtype=U8)
    fi.mm_fp4(
        a,
        b.T,
        T(128, 384, dtype=E4M3),
        T(768, 384, dtype=E4M3).T,
        T(dtype=FP32),
        BF16,
        None,
        backend="cutlass",
    )
    f = _fields(SEEN[-1])
    assert (f["backend"], f["M"], f["N"], f["K"], f["a"], f["scale"]) == (
        "flashinfer-fp4-cutlass",
        "16",
        "768",
        "6144",
        "e2m1",
        "nvfp4-1x16",
    )
    fi.gemm.bmm_fp8(
        T(1, 64, 6144, dtype=E4M3), T(1, 6144, 2048, dtype=E4M3), T(dtype=FP32), T(dtype=FP32), BF16
    )
    f = _fields(SEEN[-1])
    assert (f["op"], f["M"], f["N"], f["K"], f["batch"]) == ("bmm_fp8", "64", "2048", "6144", "1")
    fi.gemm_fp8_nt_groupwise(T(256, 6144, dtype=E4M3), T(768, 6144, dtype=E4M3), T(256, 48), T(6, 48))
    f = _fields(SEEN[-1])
    assert (f["M"], f["N"], f["K"], f["scale"]) == ("256", "768", "6144", "blockwise-1x128.128x128")

    # sgl-kernel: a [M, K/2], b [N, K/2] packed uint8
    sgl.cutlass_scaled_fp4_mm(T(512, 3072, dtype=U8), T(2048, 3072, dtype=U8), T(1), T(1), T(1), BF16)
    f = _fields(SEEN[-1])
    assert (f["backend"], f["M"], f["N"], f["K"]) == ("sgl-fp4", "512", "2048", "6144")
    sgl.fp8_scaled_mm(T(4096, 6144, dtype=E4M3), T(6144, 768, dtype=E4M3), T(4096), T(768), BF16)
    f = _fields(SEEN[-1])
    assert (f["backend"], f["M"], f["N"], f["K"], f["scale"]) == ("sgl-fp8", "4096", "768", "6144", "rowwise")

    I.uninstrument()
    assert fi.mm_fp4 is _seen and fi.gemm.mm_fp4 is _seen and sgl.fp8_scaled_mm is _seen


def test_no_double_range_inside_an_open_gemm_range(fake_torch, sink):
    I.instrument(flashinfer=False, sgl=False)
    with ranges.gemm_range("torch-bf16", "mm", 8, 8, 8, "bf16", "bf16", "bf16"):
        fake_torch.mm(T(1024, 64), T(64, 64))
    assert len(sink.pushes()) == 1  # only the bench's own range
    assert _fields(SEEN[-1])["M"] == "8"


def test_cached_scope_per_shape_stays_right_across_dtypes_modes_and_sinks(fake_torch, sink):
    """The torch wrappers cache one scope per shape; the cache must never hand out a wrong or stale range."""
    I.instrument(flashinfer=False, sgl=False)
    # A mismatched pair (torch refuses it) is named as seen but not cached: the matching pair after it, same
    # shapes, gets its own name.
    fake_torch.mm(T(64, 128), T(128, 32, dtype=FP16))
    assert _fields(SEEN[-1])["b"] == "fp16"
    fake_torch.mm(T(64, 128), T(128, 32))
    assert _fields(SEEN[-1])["b"] == "bf16"

    # ncu budget of 1 launch a range: the wrapper leaves its lean path, the second launch goes to SKIP_DOMAIN.
    ranges.reload_settings({ranges.ENV_NCU_MAX_PER_RANGE: "1"})
    ranges.reset_counts()
    fake_torch.mm(T(16, 256), T(256, 48))
    fake_torch.mm(T(16, 256), T(256, 48))
    assert [d for d, _ in sink.pushes()[-2:]] == [DOMAIN, ranges.SKIP_DOMAIN]
    ranges.reload_settings({})
    with ranges.suppressed():
        fake_torch.mm(T(16, 256), T(256, 48))
    assert sink.pushes()[-1][0] == ranges.SKIP_DOMAIN
    fake_torch.mm(T(16, 256), T(256, 48))
    assert sink.pushes()[-1][0] == DOMAIN

    # A new sink: cached scopes of the old one are dropped, the next call pushes into the new one.
    fresh = ranges.RecordingSink()
    ranges.set_sink(fresh)
    fake_torch.mm(T(16, 256), T(256, 48))
    assert [decode(n).fields["M"] for _, n in fresh.pushes()] == ["16"]
    pushes = sum(1 for e in fresh.events if e[0] == "push")
    assert pushes == sum(1 for e in fresh.events if e[0] == "pop") == 1


def test_no_range_while_torch_compile_traces(monkeypatch, fake_torch, sink):
    """Under torch.compile's tracing (is_compiling() True, torch._dynamo imported) the wrapper adds nothing;
    before torch._dynamo is imported nothing can be tracing and the check is skipped."""
    monkeypatch.setattr(fake_torch.compiler, "is_compiling", lambda: True)
    I.instrument(flashinfer=False, sgl=False)
    monkeypatch.setitem(sys.modules, "torch._dynamo", types.ModuleType("torch._dynamo"))
    fake_torch.mm(T(64, 128), T(128, 32))
    assert SEEN[-1] is None and sink.pushes() == []
    monkeypatch.delitem(sys.modules, "torch._dynamo")
    fake_torch.mm(T(64, 128), T(128, 32))
    assert _fields(SEEN[-1])["M"] == "64"


def test_a_raising_gemm_closes_its_range(monkeypatch, fake_torch, sink):
    def boom(*_a, **_k):
        raise RuntimeError("CUDA error: an illegal instruction was encountered")

    monkeypatch.setattr(fake_torch, "mm", boom)
    I.instrument(flashinfer=False, sgl=False)
    for _ in range(2):  # first call builds the scope, second takes the cached lean path
        with pytest.raises(RuntimeError, match="illegal instruction"):
            fake_torch.mm(T(32, 64), T(64, 64))
        assert not ranges.gemm_open()
    kinds = [e[0] for e in sink.events]
    assert kinds == ["push", "pop", "push", "pop"]


def test_lazy_wraps_on_first_import(tmp_path, monkeypatch, sink):
    pkg = tmp_path / "flashinfer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from tracekit.collectors import ranges
            calls = []

            def mm_fp4(*args, **kwargs):
                calls.append(ranges.get_sink().pushes()[-1][1] if ranges.gemm_open() else None)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    assert I.instrument(torch=False, sgl=False, lazy=True) == []  # installed but not imported: nothing yet
    import flashinfer

    assert "flashinfer.mm_fp4" in I.instrumented()
    flashinfer.mm_fp4(T(16, 3072, dtype=U8), T(3072, 768, dtype=U8), None, None, None, BF16)
    assert _fields(flashinfer.calls[-1])["N"] == "768"
    I.uninstrument()
    assert I._FINDER is None
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)


def test_site_dir_holds_sitecustomize():
    assert (I.site_dir() / "sitecustomize.py").is_file()


def test_quantize_steps_get_aux_ranges_that_the_explainer_joins(monkeypatch, sink):
    """An instrumented ``flashinfer.fp4_quantize`` / ``sgl_kernel.scaled_fp4_quant`` pushes an ``aux`` range named
    with the backend family and the activation's M, K; the explainer's join takes it as the auxiliary step of the
    GEMM of that family, M and K that follows, and of no other."""
    from tracekit.analyzers.gemm import CaseEvidence, Shape, _gemm_key, _serves, aux_key

    fi = types.ModuleType("flashinfer")
    fi.fp4_quantize, fi.mm_fp4 = _seen, _seen
    sgl = types.ModuleType("sgl_kernel")
    sgl.scaled_fp4_quant, sgl.sgl_per_token_group_quant_fp8 = _seen, _seen
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    monkeypatch.setitem(sys.modules, "sgl_kernel", sgl)
    wrapped = I.instrument(torch=False)
    assert {"flashinfer.fp4_quantize", "sgl_kernel.scaled_fp4_quant"} <= set(wrapped)

    fi.fp4_quantize(T(2, 8, 6144), T(dtype=FP32))  # [..., K]: M counts every leading row
    fi.fp4_quantize(T(2, 8, 6144), T(dtype=FP32))
    sgl.sgl_per_token_group_quant_fp8(T(16, 6144), T(16, 6144, dtype=E4M3), T(16, 48, dtype=FP32), 128)
    names = [n for _, n in sink.pushes()]
    assert len(names) == 3 and not ranges.gemm_open()
    fi_aux = decode(names[0])
    assert fi_aux is not None and fi_aux.kind == "aux"
    assert (fi_aux.fields["role"], fi_aux.fields["backend"], fi_aux.fields["M"], fi_aux.fields["K"]) == (
        "quantize",
        "flashinfer-fp4",
        "16",
        "6144",
    )
    gemm = CaseEvidence(
        origin="range", name="g", backend="flashinfer-fp4-cutlass", shape=Shape(m=16, n=2048, k=6144)
    )
    assert _serves(aux_key(names[0]), _gemm_key(gemm))
    other = CaseEvidence(
        origin="range", name="g", backend="flashinfer-fp4-cutlass", shape=Shape(m=32, n=2048, k=6144)
    )
    assert not _serves(aux_key(names[0]), _gemm_key(other))
    assert not _serves(aux_key(names[2]), _gemm_key(gemm))  # sgl-fp8 feeds no FlashInfer GEMM
    # aux ranges do not count as GEMM ranges: a GEMM launched inside one still gets its own range
    scope = ranges.range_for(("quantize", "flashinfer-fp4"), lambda: names[0], is_gemm=False)
    with scope:
        assert not ranges.gemm_open()


def test_a_range_open_on_another_thread_does_not_mute_this_threads_wrapper(fake_torch, sink):
    """A GEMM range held open on one thread (a benchmark's own range, a serving thread mid-launch) must not stop
    the wrappers of another thread from naming their GEMMs; on the holding thread the wrapper stays quiet."""
    import threading

    I.instrument(flashinfer=False, sgl=False)
    opened, release = threading.Event(), threading.Event()

    def holder() -> None:
        with ranges.gemm_range("torch-bf16", "mm", 8, 8, 8, "bf16", "bf16", "bf16"):
            fake_torch.mm(T(1024, 64), T(64, 64))  # inside its own range: not wrapped twice
            opened.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert opened.wait(10)
        fake_torch.mm(T(32, 64), T(64, 128))
    finally:
        release.set()
        t.join(10)
    assert _fields(SEEN[0])["M"] == "8"  # the holder's call saw only the holder's range
    f = _fields(SEEN[1])
    assert (f["M"], f["N"], f["K"]) == ("32", "128", "64")
    names = [decode(n).fields["M"] for _, n in sink.pushes()]
    assert sorted(names) == ["32", "8"]
