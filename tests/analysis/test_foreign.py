"""The foreign workloads (benchmarks/foreign: programs that do not import tracekit, each GEMM in the program's own
NVTX range) captured on the H200 with `tracekit capture` (samples/h200-foreign-*): each range is a case named by
the range, its FLOPs match the known shape within 2% with no shape anywhere in the capture, each planted cause is
the verdict, and the controls do not get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cases import blamed, cases, factor
from tracekit.analyzers.analysis import Case
from tracekit.analyzers.store import load_frames, open_run

SAMPLES = Path(__file__).resolve().parents[2] / "samples"

# run -> range -> (M, N, K, dtype class, verdict: "X" must be the verdict's factor, "not X" must not be)
EXPECTED: dict[str, dict[str, tuple[int, int, int, str, str | None]]] = {
    "h200-foreign-triton_waves": {
        "triton_waves_bad": (896, 2432, 16384, "bf16", "waves"),
        "triton_waves_control": (1408, 1536, 16384, "bf16", "not waves"),
    },
    "h200-foreign-simt_smem": {
        "sgemm_smem_capped": (2048, 2048, 2048, "fp32", "ncu finding"),  # ncu's occupancy finding
        "sgemm_smem_control": (2048, 2048, 2048, "fp32", "in-kernel"),
    },
    "h200-foreign-cublas_small_m": {
        "decode_gemm_m16": (16, 2048, 6144, "bf16", "memory"),
        "prefill_gemm_m4096": (4096, 2048, 6144, "bf16", "not memory"),
    },
    "h200-foreign-fp8_eager_quant": {
        "fp8_linear": (256, 2048, 6144, "fp8", "aux kernels"),
        "fp8_linear_prequant": (256, 2048, 6144, "fp8", "not aux kernels"),
    },
    "h200-foreign-eager_host_gaps": {
        "eager_loop": (64, 2048, 6144, "bf16", "launch gaps"),
        "graph_loop": (64, 2048, 6144, "bf16", "not launch gaps"),
    },
    "h200-foreign-base_clock": {"big_gemm": (8192, 8192, 8192, "bf16", "clock")},
    "h200-foreign-base_clock_none": {"big_gemm": (8192, 8192, 8192, "bf16", None)},
}


def _explain(run_name: str) -> dict[str, Case]:
    path = SAMPLES / run_name
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the foreign captures are committed on main)")
    run = open_run(path)
    return _user_ranges(cases(load_frames(run), environment=run.manifest.get("environment")))


def _user_ranges(found: list[Case]) -> dict[str, Case]:
    """The cases of the program's own NVTX ranges, by name."""
    return {c.name: c for c in found if c.range is not None and c.origin in ("timeline", "ncu")}


@pytest.mark.parametrize("run_name", sorted(EXPECTED))
def test_each_user_range_is_a_case_with_counted_flops_and_its_verdict(run_name: str) -> None:
    wfs = _explain(run_name)
    assert set(wfs) == set(EXPECTED[run_name]), sorted(wfs)
    for name, (m, n, k, cls, want) in EXPECTED[run_name].items():
        c = wfs[name]
        assert c.shape is None and c.flops.source == "ncu-counters", name  # no shape anywhere in the capture
        assert c.flops.per_call == pytest.approx(2 * m * n * k, rel=0.02), name
        assert c.rate.dtype_class == cls and c.rate.source == "ncu-counters", name
        assert c.peak and c.timing.achieved_tflops and c.complete, name
        v = blamed(c)
        if want is None:
            continue
        if want.startswith("not "):
            assert v is None or v.name != want[4:], (name, v and v.name)
        else:
            assert v is not None and v.name == want, (name, [(f.name, round(f.value, 3)) for f in c.factors])


def test_smem_capped_simt_kernel_is_occupancy_and_its_control_is_not() -> None:
    wfs = _explain("h200-foreign-simt_smem")
    capped, control = blamed(wfs["sgemm_smem_capped"]), blamed(wfs["sgemm_smem_control"])
    assert capped is not None and capped.cause == "occupancy limited by shared memory"
    assert capped.evidence["occupancy_limited_by"] == "shared memory: 200 KB per block"
    assert capped.evidence["ctas_per_sm"] == 1 and capped.evidence["theoretical_occupancy_pct"] == 12.5
    assert control is not None and "occupancy" not in (control.cause or "")
    # the capped kernel is the slower one, by the factor the program measures (about 3x here, 4.8x unprofiled)
    slow, fast = wfs["sgemm_smem_capped"].timing, wfs["sgemm_smem_control"].timing
    assert slow.gemm_ns_total / slow.calls > 2 * fast.gemm_ns_total / fast.calls


def test_quantizer_kernels_are_auxiliary_with_the_quantize_remedy() -> None:
    wfs = _explain("h200-foreign-fp8_eager_quant")
    c = wfs["fp8_linear"]
    assert "_scaled_mm" not in c.name and "nvjet" in (c.kernel.name or "")
    aux = blamed(c)
    assert aux is not None and aux.evidence["aux_class"] == "quantize"
    classes = aux.evidence["aux_classes"]
    # amax, abs, divide, scale, cast; and cuBLAS's workspace memset inside the call's range
    assert {c for n, c in classes.items() if n != "[CUDA memset]"} == {"quantize"}
    assert classes.get("[CUDA memset]") in (None, "memory")
    assert "split-K" not in (aux.remedy or "") and "quantiz" in (aux.remedy or "")
    assert len(c.aux) >= 3  # amax, divide, cast: none is a case of its own


def test_launch_gap_sentence_only_where_the_host_is_slow() -> None:
    wfs = _explain("h200-foreign-eager_host_gaps")
    eager, graph = wfs["eager_loop"], wfs["graph_loop"]
    assert eager.timing.launches == 200 and graph.timing.launches == 200
    assert "host does not launch fast enough" in eager.verdict.sentence
    assert all("host does not launch" not in f.sentence for f in graph.factors)


def test_base_clock_costs_more_than_unlocked_clocks() -> None:
    locked = _explain("h200-foreign-base_clock")["big_gemm"]
    free = _explain("h200-foreign-base_clock_none")["big_gemm"]
    f_locked, f_free = factor(locked, "clock"), factor(free, "clock")
    assert f_free is not None and f_locked is not None and f_free.value > f_locked.value
    assert "--clock-control none" in (f_locked.remedy or "")


def _frames_without(run_name: str, *drop: str) -> tuple[dict, dict]:
    from tracekit.frames import SPECS

    path = SAMPLES / run_name
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the foreign captures are committed on main)")
    run = open_run(path)
    fr = dict(load_frames(run))
    for name in drop:
        fr[name] = SPECS[name].empty()
    return fr, run.manifest.get("environment") or {}


def test_nsys_only_eager_loop_is_launch_bound_without_any_flop_count() -> None:
    fr, env = _frames_without("h200-foreign-eager_host_gaps", "ncu", "ncu_metrics", "ncu_rules")
    wfs = _user_ranges(cases(fr, environment=env))
    eager, graph = wfs["eager_loop"], wfs["graph_loop"]
    assert eager.flops.per_call is None and eager.timing.launches == 200
    assert eager.verdict.factor == "launch gaps"
    assert graph.verdict.factor != "launch gaps"


@pytest.mark.parametrize(
    ("run_name", "verdicts"),
    [
        ("h200-foreign-cublas_small_m", {"decode_gemm_m16": "memory", "prefill_gemm_m4096": "not memory"}),
        ("h200-foreign-triton_waves", {"triton_waves_bad": "waves", "triton_waves_control": "not waves"}),
    ],
)
def test_ncu_only_gives_the_same_cases_and_verdicts(run_name: str, verdicts: dict[str, str]) -> None:
    """(The fp8 capture's ncu pass profiled GEMM-named kernels only: its quantizer is on the timeline alone.)"""
    fr, env = _frames_without(run_name, "kernels", "ranges")
    wfs = _user_ranges(cases(fr, environment=env))
    assert set(wfs) == set(verdicts)
    for name, want in verdicts.items():
        v = blamed(wfs[name])
        assert wfs[name].origin == "ncu" and wfs[name].flops.source == "ncu-counters"
        if want.startswith("not "):
            assert v is None or v.name != want[4:], name
        else:
            assert v is not None and v.name == want, (
                name,
                [(f.name, round(f.value, 3)) for f in wfs[name].factors],
            )


def test_explain_json_says_where_flops_came_from() -> None:
    import json

    from click.testing import CliRunner

    from tracekit.cli import cli

    path = SAMPLES / "h200-foreign-cublas_small_m"
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the foreign captures are committed on main)")
    res = CliRunner().invoke(cli, ["explain", str(path), "--json"])
    assert res.exit_code == 0, res.output
    cases = {c["range"]: c for c in json.loads(res.stdout)["cases"]}
    small = cases["decode_gemm_m16"]
    assert small["flops"]["source"] == "ncu-counters" and small["rate"]["source"] == "ncu-counters"
    assert small["flops"]["per_call"] == pytest.approx(2 * 16 * 2048 * 6144, rel=0.02)
    assert small["flops"]["counters"] == ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
    assert small["verdict"]["factor"] == "memory"
    big = cases["prefill_gemm_m4096"]["flops"]
    assert big["source"] == "ncu-counters" and big["counted_per_call"] == big["per_call"]


def test_show_json_lists_the_user_ranges_of_a_foreign_run() -> None:
    import json

    from click.testing import CliRunner

    from tracekit.cli import cli

    path = SAMPLES / "h200-foreign-simt_smem"
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the foreign captures are committed on main)")
    res = CliRunner().invoke(cli, ["show", str(path), "--json"])
    assert res.exit_code == 0, res.output
    rows = {g["range"]: g for g in json.loads(res.stdout)["gemms"]}
    assert set(rows) == {"sgemm_smem_capped", "sgemm_smem_control"}
    capped = rows["sgemm_smem_capped"]
    assert capped["verdict"] == "ncu finding: occupancy limited by shared memory"
    assert capped["flops_source"] == "ncu-counters" and capped["dtype"] == "fp32"
    assert capped["kernel_tflops"] == pytest.approx(
        2 * 2048**3 / (capped["gemm_time_us"] * 1e-6) / 1e12, rel=0.02
    )
    assert capped["achieved_tflops"] == pytest.approx(
        2 * 2048**3 / (capped["time_us"] * 1e-6) / 1e12, rel=0.02
    )


def test_nsys_only_smem_capped_kernel_says_its_occupancy_cap() -> None:
    fr, env = _frames_without("h200-foreign-simt_smem", "ncu", "ncu_metrics", "ncu_rules")
    wfs = _user_ranges(cases(fr, environment=env))
    capped, control = wfs["sgemm_smem_capped"], wfs["sgemm_smem_control"]
    assert capped.flops.per_call is None and (capped.kernel.name or "").startswith("sgemm_smem")
    assert any(
        "occupancy capped at 12.5% (1 CTA/SM), limited by shared memory: 200 KB" in n for n in capped.notes
    )
    assert not any("occupancy capped" in n for n in control.notes)
