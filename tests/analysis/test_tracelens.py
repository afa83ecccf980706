"""tracekit's kernel rate per PyTorch GEMM operator against TraceLens's (AMD-AGI/TraceLens) on the shared Kineto
traces (issue 26 item 4), from TraceLens's own numbers saved in shared/data/peers/tracelens-gemm-ops.json: no
TraceLens needed. The two differ only by definition (analyzers/gemm/tracelens.py, docs/CASES.md): TraceLens adds
the memsets and bias copies under the operator to its time, counts M*N for an ``addmm`` bias and takes the median
of per-call rates. Rated by TraceLens's definition, tracekit's calls give TraceLens's numbers; where TraceLens
adds no time, tracekit's kernel rate is within 2% of TraceLens's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tracelens_compare import PEERS, PRECISE, compare, table, why_beyond  # noqa: E402

TOLERANCE = 0.02


def _peers() -> dict:
    if not PEERS.is_file():
        pytest.skip(f"{PEERS} is absent (../shared/data is not beside this checkout)")
    return json.loads(PEERS.read_text())


TRACES = [
    "b200__eager_trace",
    "h100__Falconsai_nsfw_image_detection__1016002",
    "h100__Qwen_Qwen1.5-0.5B-Chat__1016005",
    "h100__facebook_timesformer-base-finetuned-k400__1016002",
    "h100__gaunernst_bert-small-uncased__1016001",
    "h100__google_owlv2-large-patch14-ensemble__1016001",
    "torch_trace",
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto",
    "negative_queue_length_values_check__rank0",
]


def test_the_peers_file_holds_the_traces_compared() -> None:
    assert list(_peers()["traces"]) == TRACES


@pytest.mark.parametrize("name", TRACES)
def test_kernel_rate_per_op_against_tracelens(name: str) -> None:
    rows = compare(name, _peers()["traces"][name])
    assert rows
    for r in rows:
        what = (name, r["op"], r["m"], r["n"], r["k"], r.get("batch"), r["dtype"])
        # every operator TraceLens rates is one of tracekit's (op, shape, dtype), with the same calls
        assert r["tracekit"] is not None and r["tracekit_calls"] == r["calls"], what
        # FLOPs per call: TraceLens's (GFLOP to 6 decimals) are 2*M*N*K*batch, and M*N more for an addmm's bias
        bias_flops = r["m"] * r["n"] if r["op"] == "aten::addmm" else 0
        assert r["tracekit_flops"] == 2 * r["m"] * r["n"] * r["k"] * (r.get("batch") or 1), what
        assert r["tracekit_flops"] + bias_flops == pytest.approx(r["gflops"] * 1e9, abs=500), what
        tl = r["tflops_median"]
        if r["op"] is None:  # tracekit's own ranges (the H200 probe): the kernel rates agree
            assert r["tracekit"] == pytest.approx(tl, rel=TOLERANCE), what
            continue
        # TraceLens's definition, computed from tracekit's calls: TraceLens's number
        if tl >= PRECISE:
            assert r["tracekit_tl_definition"] == pytest.approx(tl, rel=0.005), what
        else:  # a rate rounded to 4 decimals in the peers file: its last digit
            assert r["tracekit_tl_definition"] == pytest.approx(tl, abs=1e-4), what
        # tracekit's kernel rate: within 2% (TraceLens's M*N for a bias counted in), or apart by a definition only
        why = why_beyond(r)
        assert why in (None, "added", "aggregation"), (what, r)
        if (
            why == "added"
        ):  # TraceLens's time holds memsets or copies besides the GEMM: its rate is the lower one
            assert r["tracekit"] > tl, what
        if why == "aggregation":  # the per-call GEMM times spread: the median call is TraceLens's rate
            assert r["tracekit_median_call"] != pytest.approx(r["tracekit"], rel=TOLERANCE), what


def test_the_table_counts_every_op_beyond_two_percent_by_its_reason() -> None:
    """The docs table (docs/CASES.md): per trace, ops matched and the kernel-rate ratio; every op beyond 2% is
    one where TraceLens adds memsets or copies to the time, or where the median of per-call rates differs from
    sum over sum (HTA's negative_queue addmm 4096x64x100: calls of 12 and 14 µs at the trace's 1 µs resolution)."""
    peers = _peers()
    lines = table(peers)
    assert len(lines) == 2 + len(peers["traces"])
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        ops, matched, beyond, added, aggregation = (int(cells[i]) for i in (1, 2, 6, 7, 8))
        assert matched == ops and beyond == added + aggregation, line
    rows = {(r["m"], r["n"], r["k"]): r for r in compare(TRACES[-1], peers["traces"][TRACES[-1]])}
    (r,) = [rows[(4096, 64, 100)]]
    assert why_beyond(r) == "aggregation" and r["tracekit"] / r["tflops_median"] == pytest.approx(
        1.024, abs=0.002
    )


def test_a_memset_under_a_gemm_operator_is_the_calls_aux_time_not_a_gap(shared_data: Path) -> None:
    """Qwen (TraceLens H100): cuBLAS zeroes a workspace (a 0.8 µs memset) under every ``aten::mm`` /
    ``aten::addmm`` before its segment-K GEMM kernel. The memset is GPU time of the call: auxiliary time in the
    call's span (TraceLens adds it to the kernel time), never idle time counted as a launch gap, and not GEMM time
    (the kernel rate is the GEMM kernel's)."""
    import polars as pl

    from tracekit.analyzers.gemm import build_cases
    from tracekit.analyzers.gemm.ranges import resolve_ranges
    from tracekit.analyzers.importer import combine, read_file

    frames = combine(
        [read_file(shared_data / "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")]
    )
    (c,) = [c for c in build_cases(frames) if c.op == "mm" and (c.m, c.n, c.k) == (8944, 1024, 1024)]
    res = resolve_ranges(frames["ranges"])
    calls = res.filter(pl.col("range_id").is_in(c.range_ids))["call"].unique().implode()
    under = res.filter(pl.col("call").is_in(calls))["range_id"].implode()
    memsets = frames["memops"].filter(pl.col("range_id").is_in(under) & (pl.col("kind") == "memset"))
    kernels = frames["kernels"].filter(pl.col("range_id").is_in(under))
    assert c.timing.calls == 24 and memsets.height == 24 and kernels.height == 24
    assert [u.name for u in c.aux] == ["Memset (Device)"]
    assert c.timing.aux_ns_total == memsets["duration_ns"].sum()
    assert c.timing.gemm_ns_total == kernels["duration_ns"].sum()
    # the call spans the memset to the GEMM kernel's end: its idle time inside is the gap between the two
    first = memsets.sort("start_ns")["start_ns"].to_list()
    ends = kernels.sort("start_ns")["end_ns"].to_list()
    spans = sum(e - s for s, e in zip(first, ends, strict=True))
    assert c.timing.span_ns_total == pytest.approx(spans)


def test_falconsai_addmm_kernel_rate_is_the_kernels_not_a_median_of_parts(shared_data: Path) -> None:
    """Issue 26: TraceLens H100 Falconsai ``addmm 788x768x768`` (48 calls): tracekit said 39.8 TFLOP/s (medians of
    kernel, aux and gap combined); the kernel alone runs at 112.6 (TraceLens 112.7). The kernel rate is FLOPs over
    GEMM time; achieved is FLOPs over the calls' spans, which here hold no aux or gap inside an operator call."""
    from tracekit.analyzers.gemm import build_cases
    from tracekit.analyzers.importer import combine, read_file

    frames = combine(
        [
            read_file(
                shared_data / "thirdparty/tracelens/h100__Falconsai_nsfw_image_detection__1016002.json.gz"
            )
        ]
    )
    (c,) = [c for c in build_cases(frames) if (c.m, c.n, c.k) == (788, 768, 768)]
    t = c.timing
    assert t.calls == 48 and c.range == "ProfilerStep" and c.name == "aten::addmm M=788 N=768 K=768"
    kernels = frames["kernels"].filter(frames["kernels"]["range_id"].is_in(c.range_ids))
    assert kernels.height == 48 and t.gemm_ns_total == kernels["duration_ns"].sum()
    assert c.kernel_tflops == pytest.approx(2 * 788 * 768 * 768 * 48 / kernels["duration_ns"].sum() / 1e3)
    assert c.kernel_tflops == pytest.approx(111.8, abs=0.1)  # TraceLens's median per call: 112.7
    assert c.achieved_tflops == pytest.approx(c.flops * t.calls / t.span_ns_total / 1e3)


@pytest.mark.parametrize("name", TRACES)
def test_achieved_per_op_counts_only_the_kernels_the_op_launched(name: str) -> None:
    """Issue 44 item 3: an operator's call owns the kernels that operator launched. TraceLens's definition
    computed from the kernels each call owns (not from the operator's range) is TraceLens's number on every op
    (its rounding to 4 decimals aside); the next op's activation counted in, as launch order did, put Qwen's
    ``mm 8944x2816x1024`` 20% off. Achieved is those kernels and the gaps between them: with the gaps taken out it
    is within 2% of TraceLens (its bias FLOPs counted in), but where the median of per-call rates differs from sum
    over sum (docs/CASES.md)."""
    beyond = []
    for r in compare(name, _peers()["traces"][name]):
        if r["op"] is None:
            continue
        what = (name, r["op"], r["m"], r["n"], r["k"])
        tl, owned = r["tflops_median"], r["tracekit_owned"]
        if tl >= PRECISE:
            assert owned == pytest.approx(tl, rel=TOLERANCE), what
        else:
            assert owned == pytest.approx(tl, abs=1e-4), what
        flops = r["tracekit_flops"] * r["tracekit_calls"]
        span = flops / r["tracekit_achieved"] / 1e3
        assert r["gap_ns"] < span, what
        busy_rate = flops / (span - r["gap_ns"]) / 1e3
        bias = 1 + 1 / (2 * r["k"]) if r["op"] == "aten::addmm" else 1.0
        if tl >= PRECISE and abs(busy_rate * bias / tl - 1) > TOLERANCE:
            # sum over sum against the median call: the median call's rate is TraceLens's (asserted above)
            beyond.append(what)
        assert r["tracekit_achieved"] <= busy_rate * (1 + 1e-9), what  # the gaps only slow it
    # only HTA's negative_queue trace (1 µs resolution) has calls whose times spread enough to tell the two apart
    assert not beyond or name == "negative_queue_length_values_check__rank0", beyond


def test_the_next_ops_silu_is_a_fusion_candidate_not_the_mms_time(shared_data: Path) -> None:
    """TraceLens H100 Qwen1.5 ``aten::mm 8944x2816x1024`` (the MLP's gate/up projection, 48 calls): TraceLens 610.7
    TFLOP/s. Launch order gave it the ``silu_kernel`` that ``aten::silu`` launched after it (38.5 µs, 24 times), and
    its achieved rate was 481.1. Now the mm's calls own its GEMM kernel and cuBLAS's memset; the SiLU is a fusion
    candidate with its time, and achieved is 596.5 (the rest of TraceLens's 610.7 is 2.0 µs of launch gap per
    call)."""
    from tracekit.analyzers.gemm import build_cases
    from tracekit.analyzers.importer import combine, read_file

    path = shared_data / "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    frames = combine([read_file(path)])
    (c,) = [c for c in build_cases(frames) if c.op == "mm" and (c.m, c.n, c.k) == (8944, 2816, 1024)]
    t = c.timing
    assert t.calls == 48 and [u.name for u in c.aux] == ["Memset (Device)"]
    (silu,) = c.fusion
    assert (silu.op, silu.kernel_class, silu.side, silu.count) == ("aten::silu", "activation", "after", 24)
    assert "silu_kernel" in silu.kernels[0]
    silus = frames["kernels"].filter(frames["kernels"]["launch_op"] == "aten::silu")
    assert silu.time_ns_total == pytest.approx(silus["duration_ns"].sum() * 24 / silus.height, rel=0.2)
    assert c.achieved_tflops == pytest.approx(596.5, abs=0.1)
    assert c.kernel_tflops == pytest.approx(616.6, abs=0.1)


def test_a_fusion_candidate_can_be_the_verdict_named_as_what_it_is(shared_data: Path) -> None:
    """TraceLens H100 owlv2 fc1 (``addmm 5185x4096x1024``, 120 calls): quick_gelu after it (x * sigmoid(1.702 x):
    two multiplies and a sigmoid, each its own operator) was counted in its calls: achieved 252.5 against a
    kernel rate of 758.1. Now achieved is 722.5, and the candidates (12.90 ms) cost more than any factor of the
    GEMM's calls: the verdict names them, in every view (the Analysis, the card, show --json, the report)."""
    from tracekit.analyzers.analysis.api import analyze

    path = shared_data / "thirdparty/tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz"
    a = analyze(path)
    (c,) = [c for c in a.cases if c.op == "addmm" and c.shape and (c.shape.m, c.shape.n) == (5185, 4096)]
    assert c.timing.achieved_tflops == pytest.approx(722.5, abs=0.1)
    assert {(f.op, f.kernel_class, f.side) for f in c.fusion} == {
        ("aten::mul", "gating multiply", "after"),
        ("aten::sigmoid", "activation", "after"),
    }
    total = sum(f.time_ns_total for f in c.fusion)
    assert c.verdict.kind == "fusion" and c.verdict.lost_ns_total == pytest.approx(total)
    assert c.verdict.sentence.startswith("the multiply and sigmoid after this GEMM take 12.90 ms")
    assert max(f.lost_ns_total or 0 for f in c.factors) < total
    from tracekit.analyzers.analysis.headline import top_losses

    # the headline ranks it among the losses (this trace's three largest are its attention bmms', 78-103 ms)
    assert any(x.factor == "fusion candidates" and x.case_id == c.id for x in top_losses(a.cases, n=20))
    from tracekit.analyzers.gemm.fusion import beside_lines
    from tracekit.analyzers.summary import case_row

    row = case_row(c)
    assert row["verdict_kind"] == "fusion" and {f["op"] for f in row["fusion"]} == {
        "aten::mul",
        "aten::sigmoid",
    }
    lines = beside_lines(c)
    assert any(
        line.startswith("fusion candidate: aten::sigmoid after the GEMM (activation") for line in lines
    )
