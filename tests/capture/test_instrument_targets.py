"""The declarative table of instrument targets (collectors/instrument_targets.py): one describe reads every entry;
an entry that names an argument the call lacks is a clear failure, and so is an entry that cannot be read."""

from __future__ import annotations

import pytest
from test_instrument import E4M3, FP32, T  # the stand-in tensors and dtypes

from tracekit.collectors import instrument as I
from tracekit.collectors import instrument_targets as IT
from tracekit.collectors.instrument_targets import Arg, Gemm, MissingArgument, Quantize
from tracekit.naming import decode


def _target(label: str) -> IT.Target:
    return next(t for t in I.TARGETS if t.label == label)


def _fields(described: IT.Described | None) -> dict[str, str]:
    assert described is not None
    decoded = decode(described[1]())
    assert decoded is not None
    return decoded.fields


def test_a_call_lacking_an_argument_its_entry_reads_is_a_clear_failure() -> None:
    scaled = _target("torch._scaled_mm")
    a, b = T(128, 256, dtype=E4M3), T(256, 512, dtype=E4M3)
    with pytest.raises(MissingArgument) as err:
        scaled.describe((a, b, T(1, dtype=FP32)), {})
    assert str(err.value) == (
        "torch._scaled_mm: the call has no argument 'scale_b' (position 3 or keyword), which its table entry reads"
    )
    with pytest.raises(MissingArgument, match=r"^torch\.mm: the call has no argument 'mat2' \(position 1 "):
        _target("torch.mm").describe((a,), {"other": b})
    with pytest.raises(MissingArgument, match=r"^flashinfer\.bmm_fp8: the call has no argument 'A' "):
        _target("flashinfer.bmm_fp8").describe((), {"B": b})
    with pytest.raises(MissingArgument, match=r"^sgl_kernel\.sgl_per_token_quant_fp8: .* 'input' "):
        _target("sgl_kernel.sgl_per_token_quant_fp8").describe((), {"x": a})
    # the same call with the argument, by keyword, is named
    f = _fields(scaled.describe((a, b, T(1, dtype=FP32)), {"scale_b": T(1, dtype=FP32)}))
    assert (f["M"], f["N"], f["K"], f["scale"], f["backend"]) == (
        "128",
        "512",
        "256",
        "tensorwise",
        "torch-fp8",
    )


def test_the_wrapper_calls_straight_through_when_an_argument_is_missing() -> None:
    """Naming never breaks the user's call: the missing argument is the library's to report."""
    calls = []

    def scaled_mm(*args, **kwargs):
        calls.append(len(args))
        return "result"

    wrapper = I.make_wrapper(scaled_mm, _target("torch._scaled_mm"), object())
    assert wrapper(T(16, 32, dtype=E4M3), T(32, 64, dtype=E4M3)) == "result"
    assert calls == [2]


def test_an_entry_that_cannot_be_read_fails_when_the_table_is_built() -> None:
    with pytest.raises(ValueError, match=r"op 'mm': unknown layout 'km,kn' \(mk,kn, "):
        Gemm("torch-{a}", "mm", Arg(0, "input"), Arg(1, "mat2"), "km,kn")
    with pytest.raises(ValueError, match="op 'mm_fp4': names its implementation but has no impl argument"):
        Gemm("flashinfer-fp4-{impl}", "mm_fp4", Arg(0, "a"), Arg(1, "b"), "mk,kn")


def test_every_dense_entry_is_a_table_row_read_by_the_one_describe() -> None:
    for target in IT.GEMM_TARGETS:
        assert isinstance(target.spec, Gemm | Quantize), target.label
        assert target.describe.__qualname__.startswith(("describe.", "_quantize_reader.")), target.label
        assert target.gemm is isinstance(target.spec, Gemm)


@pytest.mark.parametrize(
    ("label", "args", "kwargs", "expect"),
    [
        ("torch.nn.functional.linear", (T(4, 8, 256), T(512, 256)), {}, ("32", "512", "256", None)),
        ("torch.matmul", (T(3, 2, 16, 64), T(64, 32)), {}, ("96", "32", "64", None)),
        ("torch.matmul", (T(3, 16, 64), T(3, 64, 32)), {}, ("16", "32", "64", "3")),
        ("torch.bmm", (T(5, 16, 64), T(5, 64, 32)), {}, ("16", "32", "64", "5")),
        ("torch.addmm", (T(32), T(16, 64), T(64, 32)), {}, ("16", "32", "64", None)),
        (
            "flashinfer.mm_fp8",
            (T(16, 256, dtype=E4M3), T(2, 512, 128, dtype=E4M3)),
            {},
            ("16", "512", "256", None),
        ),
        (
            "flashinfer.gemm_fp8_nt_groupwise",
            (T(16, 256, dtype=E4M3), T(512, 256, dtype=E4M3)),
            {},
            ("16", "512", "256", None),
        ),
    ],
)
def test_layouts_give_m_n_k_and_batch(label, args, kwargs, expect) -> None:
    f = _fields(_target(label).describe(args, kwargs))
    assert (f["M"], f["N"], f["K"], f.get("batch")) == expect
