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
