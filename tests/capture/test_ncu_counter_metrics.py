"""The tensor-op counter regex that `tracekit capture --ncu` gives Nsight Compute, checked against the real metric
lists of three chips (``ncu --query-metrics --chip X`` in ../shared/data/ncu-metrics): it must pick every plain
per-source counter of each chip and none of the sparsity / realtime variants (which would double-count)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from tracekit.collectors import tools

METRICS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ncu-metrics"


def _counters(chip: str) -> list[str]:
    path = METRICS / f"query-metrics-{chip}.txt.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data is not beside this checkout)")
    with gzip.open(path, "rt") as fh:
        return [line.split()[0] for line in fh if line.startswith("sm__ops_path_tensor_src_")]


def _picked(chip: str) -> set[str]:
    pattern = re.compile(tools.TENSOR_OPS_METRIC.removeprefix("regex:"))
    return {name for name in _counters(chip) if pattern.match(name + ".sum")}


@pytest.mark.parametrize(
    ("chip", "must"),
    [
        ("gh100", {"sm__ops_path_tensor_src_bf16_dst_fp32", "sm__ops_path_tensor_src_fp8"}),
        (
            "gb202",
            {
                "sm__ops_path_tensor_src_fp4_dst_fp32",
                "sm__ops_path_tensor_src_fp4_fp6_dst_fp32",
                "sm__ops_path_tensor_src_fp8_dst_fp32",
                "sm__ops_path_tensor_src_bf16_dst_fp32",
            },
        ),
        ("gb100", {"sm__ops_path_tensor_src_fp4_fp6_fp8_dst_fp32", "sm__ops_path_tensor_src_bf16_dst_fp32"}),
    ],
)
def test_regex_picks_each_chips_plain_counters(chip: str, must: set[str]) -> None:
    picked = _picked(chip)
    assert must <= picked
    plain = {n for n in _counters(chip) if not re.search(r"sparsity|realtime", n)}
    assert picked == plain, "every plain per-source counter, nothing else"


def test_default_metrics_carry_the_counters() -> None:
    assert tools.TENSOR_OPS_METRIC in tools.DEFAULT_METRICS
    assert set(tools.SIMT_FLOP_METRICS) <= set(tools.DEFAULT_METRICS)
    # ncu splits --metrics on commas: the regex must not hold one
    assert "," not in tools.TENSOR_OPS_METRIC
