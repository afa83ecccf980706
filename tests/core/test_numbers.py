"""tracekit.numbers: the formatters every view shares."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tracekit.numbers import flop_amount, share_of_kernel_time

_UNIT = {"MFLOP": 1e6, "GFLOP": 1e9, "TFLOP": 1e12}


@given(st.floats(min_value=1e3, max_value=1e18))
def test_flop_amount_reads_back_to_three_figures_without_exponents(flops: float) -> None:
    """A 1.1 TFLOP GEMM once read '1.1e+03 GFLOP per call': the amount is a plain number in one of three units,
    and it reads back to within the rounding of three significant figures."""
    text = flop_amount(flops)
    number, unit = text.split(" ")
    assert "e" not in number
    assert abs(float(number.replace(",", "")) * _UNIT[unit] - flops) <= 0.005 * flops


def test_share_of_kernel_time_only_where_comparable() -> None:
    assert share_of_kernel_time(25.0, 100.0) == 25.0
    assert share_of_kernel_time(100.005, 100.0) is not None  # the sums' rounding
    assert share_of_kernel_time(120.0, 100.0) is None  # replay times, not on the timeline
    assert share_of_kernel_time(0.0, 100.0) is None and share_of_kernel_time(5.0, None) is None
