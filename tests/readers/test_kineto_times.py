"""The Kineto reader's time parse (``part.times_ns``): microsecond texts to integer ns, exactly.

Kineto writes times as microseconds: whole numbers in older traces (HTA's test traces), three decimals in newer
ones. The reader parses the number's text, never a float, so a time 1.7e15 us after the epoch keeps every ns.
The oracle here is Python's ``Decimal``: the text rounded half up at the third decimal, times 1000, and null
where that does not fit an Int64. Lists mix the forms, so each of the parse's paths (whole numbers only, three
decimals at most, anything else) is exercised alone and beside the others.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import msgspec
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analyzers.readers.kineto.part import times_ns

INT64 = (-(2**63), 2**63 - 1)


def expected_ns(text: str) -> int | None:
    ns = int(Decimal(text.strip('"')).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP) * 1000)
    return ns if INT64[0] <= ns <= INT64[1] else None


def parsed(texts: list[str]) -> list[int | None]:
    return times_ns([msgspec.Raw(t.encode()) for t in texts]).to_list()


whole = st.integers(-(10**20), 10**20).map(str)
"""Up to 21 digits: past an Int64 once in ns (9.2e15 us), and past an Int64 as a number (17+ digits)."""
epoch_us = st.integers(-(2**63 // 1000) - 2, 2**63 // 1000 + 2).map(str)
"""Around the edge of what fits: 9,223,372,036,854,775 us is the last whole microsecond an Int64 of ns holds."""
decimal = st.builds(
    lambda sign, w, frac: f"{sign}{w}.{frac}",
    st.sampled_from(["", "-"]),
    st.integers(0, 10**18),
    st.text("0123456789", min_size=0, max_size=6),
)
"""Three decimals as Kineto writes them, fewer, and more (which round half up)."""
quoted = whole.map(lambda t: f'"{t}"')


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(whole, epoch_us), min_size=1, max_size=30))
def test_whole_microseconds_are_exact_or_null(texts: list[str]) -> None:
    assert parsed(texts) == [expected_ns(t) for t in texts]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(whole, epoch_us, decimal, quoted), min_size=1, max_size=30))
def test_any_mix_of_number_texts_is_exact_or_null(texts: list[str]) -> None:
    assert parsed(texts) == [expected_ns(t) for t in texts]


def test_the_edges_of_an_int64() -> None:
    last = str((2**63 - 1) // 1000)  # 9223372036854775
    assert parsed([last, "-" + last]) == [int(last) * 1000, -int(last) * 1000]
    assert parsed([str(int(last) + 1)]) == [None]  # its ns do not fit: null, not a wrapped number
    assert parsed(["99999999999999999", "1"]) == [None, 1000]  # 17 digits: wrapped around an Int64 before
    assert parsed([last + ".807", last + ".8074", last + ".8076"]) == [2**63 - 1, 2**63 - 1, None]


def test_no_times_give_an_empty_int64_column() -> None:
    out = times_ns([])
    assert out.len() == 0 and out.dtype == pl.Int64
