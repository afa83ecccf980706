"""The classes ``convolution`` and ``softmax`` in the step breakdown of the shared traces that motivated them:
HTA's V100 ResNet trace (``ns_resolution``: cuDNN convolutions and the ``volta_sgemm`` kernels that
``aten::convolution_backward`` launched, formerly ``other`` 62%), and TraceLens's H100 owlv2 trace (eager
attention's ``cunn_SoftMaxForward``, formerly ``normalization``). Neither class is ever ``other`` or
``normalization``; the times are checked against a sum over the kernels' names and launching ops."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.breakdown import breakdown
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.taxonomy import classify_name

NS_RESOLUTION = "thirdparty/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
OWLV2 = "thirdparty/tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz"


def _shares(frames: dict[str, pl.DataFrame]) -> dict[str, float]:
    (whole,) = breakdown(frames, with_ranges=False).devices
    return {c.cls: c.pct for c in whole.classes}


def test_a_cnn_trace_is_convolution_not_other(shared_data: Path) -> None:
    frames = combine([read_file(shared_data / NS_RESOLUTION)])
    k = frames["kernels"]
    shares = _shares(frames)
    assert round(shares["convolution"], 1) == 62.7
    assert shares.get("other", 0.0) < 1.0
    # every kernel a convolution op launched is the convolution's, GEMM-named ones included; no GEMM kernel is
    under_conv = k.filter(pl.col("launch_op").fill_null("").str.contains("convolution"))
    assert under_conv.height and set(under_conv["kernel_class"].unique().to_list()) <= {
        "convolution",
        "memory",
    }
    sgemm = under_conv.filter(pl.col("name").str.contains("sgemm"))
    assert sgemm.height == 405 and set(sgemm["kernel_class"].to_list()) == {"convolution"}
    # and by name, where no op says so: cuDNN's own families
    named = k.filter(pl.col("launch_op").is_null())["name"].unique().to_list()
    assert all(classify_name(n).kernel_class == "convolution" for n in named if "scudnn" in n)


def test_eager_attention_softmax_is_softmax_not_normalization(shared_data: Path) -> None:
    frames = combine([read_file(shared_data / OWLV2)])
    k = frames["kernels"]
    softmax = k.filter(pl.col("name").str.contains("SoftMax|softmax"))
    assert softmax.height and set(softmax["kernel_class"].to_list()) == {"softmax"}
    ms = softmax.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item() / 1e6
    assert round(ms, 1) == 262.5
    shares = _shares(frames)
    assert round(shares["softmax"], 1) == 24.3
    assert shares.get("normalization", 0.0) < 1.0


@pytest.mark.parametrize("cls", ["convolution", "softmax"])
def test_the_new_classes_are_in_the_breakdown_order_and_the_docs(cls: str) -> None:
    from tracekit.analyzers.breakdown import CLASS_ORDER

    root = Path(__file__).resolve().parents[2]
    assert cls in CLASS_ORDER
    assert f"`{cls}`" in (root / "docs" / "KERNELS.md").read_text()
    assert cls in (root / "docs" / "BREAKDOWN.md").read_text()
