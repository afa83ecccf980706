"""The range-name codec: lossless, and free of the characters ncu's NVTX filter treats as syntax."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit import naming

values = st.text(min_size=0, max_size=40)
keys = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True)


@given(kind=st.sampled_from(naming.KINDS), fields=st.dictionaries(keys, values, max_size=8))
def test_roundtrip_is_lossless(kind: str, fields: dict[str, str]) -> None:
    name = naming.encode(kind, **fields)
    assert "/" not in name and "," not in name and "@" not in name
    decoded = naming.decode(name)
    assert decoded is not None
    assert decoded.kind == kind
    assert decoded.fields == fields


def test_gemm_name_reads_well_and_matches_the_ncu_filter() -> None:
    name = naming.encode(
        "gemm", backend="torch-fp8", op="scaled_mm", M=1024, N=2048, K=6144, a="e4m3", scale=None
    )
    assert name == "gemm backend=torch-fp8 op=scaled_mm M=1024 N=2048 K=6144 a=e4m3"
    # ncu evaluates `regex:tracekit@.+/` as domain regex "tracekit" and range regex ".+"
    assert re.search(".+", name)
    assert naming.decode(name).get_int("M") == 1024


def test_skip_domain_does_not_match_the_profiled_domain_regex() -> None:
    # ncu searches the domain regex unanchored: a skip domain containing "tracekit" would be profiled.
    assert not re.search(naming.DOMAIN, naming.SKIP_DOMAIN)


@pytest.mark.parametrize("name", ["", "gemm/bf16/M=1,N=2,K=3", "ProfilerStep#3", "gemm M", "other k=v"])
def test_foreign_names_are_not_decoded(name: str) -> None:
    assert naming.decode(name) is None


def test_canonical_dtypes() -> None:
    assert naming.canonical_dtype("torch.bfloat16") == "bf16"
    assert naming.canonical_dtype("torch.float8_e4m3fn") == "e4m3"
    assert naming.canonical_dtype("torch.float4_e2m1fn_x2") == "e2m1"
    assert naming.DTYPE_BITS["e2m1"] == 4


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("gemm/bf16/M=1024,N=2048,K=6144", {"a": "bf16", "out": "bf16", "M": "1024", "scale": None}),
        ("gemm/fp8/M=16,N=6144,K=6144", {"a": "e4m3", "out": "bf16", "K": "6144", "scale": "tensorwise"}),
        ("gemm/fp4/M=1,N=2,K=3", {"a": "e2m1", "out": "bf16", "scale": None}),
        ("gemm/bf16/M=1,N=2", None),
        ("gemm/bf16/M=1,N=2,K=x", None),
        ("gemm/bf16/M=1,N=2,K=3,B=4", None),
        ("gemm bf16 M=1", None),
    ],
)
def test_one_legacy_parser_for_the_importer_and_the_explainer(name: str, fields: dict | None) -> None:
    """The shared probe's older range names: the ranges frame (importer) and the GEMM cases (explainer) read
    them through the same parser, so the frame's dtypes and scale are the ones the cases use."""
    import polars as pl

    from tracekit.analyzers.gemm.names import parse_gemm_name
    from tracekit.analyzers.importer import parse_range_names
    from tracekit.frames import RANGES

    decoded = naming.decode_legacy(name)
    if fields is None:
        assert decoded is None and parse_gemm_name(name) is None
        return
    assert decoded is not None and decoded.kind == "gemm"
    assert {k: decoded.fields.get(k) for k in fields} == fields
    row = parse_range_names(RANGES.conform(pl.DataFrame({"range_id": [0], "name": [name]}))).row(
        0, named=True
    )
    case = parse_gemm_name(name)
    assert case is not None
    for key in ("backend", "op", "m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "scale"):
        assert row[key] == case[key], key


def test_legacy_name_with_a_digit_int_refuses_is_not_one() -> None:
    """A size like "²" is a Unicode digit but no number (``int`` refuses it): the name is no legacy GEMM name,
    instead of a GEMM whose size the readers after it fail to read."""
    assert naming.decode_legacy("gemm/bf16/M=\u00b2,N=2,K=3") is None


def test_gemm_name_with_a_digit_int_refuses_has_no_size() -> None:
    """A size like "²" (a Unicode digit ``int`` refuses) raised ValueError out of ``parse_gemm_name``: it is no
    size, and the name's other fields still read."""
    from tracekit.analyzers.gemm.names import parse_gemm_name

    case = parse_gemm_name("gemm backend=torch-bf16 op=mm M=\u00b2 N=2 K=3")
    assert case is not None and case["backend"] == "torch-bf16"
    assert (case["m"], case["n"], case["k"]) == (None, 2, 3)


def test_range_names_with_a_digit_int_refuses_have_no_size() -> None:
    """A size like "²" or "-¹" (Unicode digits ``int`` refuses) raised ValueError and stopped the whole import in
    ``parse_range_names``: it is no size, and the range is still a GEMM range."""
    import polars as pl

    from tracekit.analyzers.importer import parse_range_names
    from tracekit.frames import RANGES

    name = "gemm backend=torch-bf16 op=mm M=\u00b2 N=-\u00b9 K=3"
    ranges = RANGES.conform(pl.DataFrame({"range_id": [0], "name": [name]}))
    row = parse_range_names(ranges).row(0, named=True)
    assert row["range_kind"] == "gemm" and row["backend"] == "torch-bf16"
    assert (row["m"], row["n"], row["k"]) == (None, None, 3)


@given(
    head=st.sampled_from(["", " ", "gem", "Gemm", "xgemm", *naming.KINDS, *(f"{k}/" for k in naming.KINDS)]),
    tail=st.sampled_from(["", " ", "/bf16/M=1,N=2,K=3", " M=1 N=2", " op=mm", "/fp8/M=16,N=6144,K=6144"]),
    noise=st.text(max_size=6),
)
def test_every_name_the_codec_parses_starts_as_the_importer_prefilters(
    head: str, tail: str, noise: str
) -> None:
    # the importer tests names with NAME_STARTS before parsing them: a parsed name outside it would be lost
    for name in (head + tail, head + tail + noise, head + noise + tail):
        if naming.decode(name) or naming.decode_legacy(name):
            assert name.startswith(naming.NAME_STARTS), name


def test_name_shape_is_the_range_names_sizes_and_dtypes() -> None:
    """The one shape a GEMM range name gives (the timeline's and the ncu-only cases both read it): M, N, K,
    dtypes and scale from the name, ``source`` "range name"; a name without every size gives none, so a case
    never gets a shape with a size missing."""
    from tracekit.analyzers.analysis.model import Shape
    from tracekit.analyzers.gemm.names import name_shape, parse_gemm_name
    from tracekit.collectors.ranges import gemm_name

    name = gemm_name(
        "torch-fp8", "scaled_mm", 128, 4096, 2048, "fp8_e4m3", "fp8_e4m3", "bf16", scale="tensor"
    )
    assert name_shape(parse_gemm_name(name)) == Shape(
        m=128,
        n=4096,
        k=2048,
        dtype_a="fp8_e4m3",
        dtype_b="fp8_e4m3",
        dtype_out="bf16",
        scale="tensor",
        source="range name",
    )
    assert name_shape(parse_gemm_name("gemm backend=torch-bf16 op=mm M=\u00b2 N=2 K=3")) is None
    assert name_shape(parse_gemm_name("aten::mm")) is None
