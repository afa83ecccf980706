"""The waves factor's two models (a CTA slot of 1/k SM, pessimistic; an SM as fast with fewer CTAs, optimistic), a
persistent grid smaller than the SM count, and the stage model of a 2-CTA MMA kernel: on the files they were seen
on. The expected launch numbers (grid, SMs, shared memory) are read from the raw trace here, not from tracekit."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tracekit
from tests.support.explain_data import make_case
from tracekit.analyzers.rules.kernel import kernel
from tracekit.devices import match_device

ROOT = Path(__file__).resolve().parents[2]
TRACELENS = "thirdparty/tracelens"
FALCONSAI = f"{TRACELENS}/h100__Falconsai_nsfw_image_detection__1016002.json.gz"
B200 = f"{TRACELENS}/b200__eager_trace.json.gz"


def _raw(path: Path) -> dict[str, Any]:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    with gzip.open(path) as f:
        return json.load(f)


def _launch(raw: dict[str, Any], name_part: str) -> dict[str, Any]:
    """The launch arguments of the kernels whose name holds ``name_part`` (all launches must agree)."""
    args = {
        json.dumps({k: e["args"][k] for k in ("grid", "block", "shared memory")})
        for e in raw["traceEvents"]
        if e.get("cat") == "kernel" and name_part in e["name"]
    }
    assert len(args) == 1, args
    return json.loads(args.pop())


def _case(a: Any, m: int, n: int, k: int) -> Any:
    return next(c for c in a.cases if c.shape and (c.shape.m, c.shape.n, c.shape.k) == (m, n, k))


def _factor(case: Any, name: str) -> Any:
    return next(f for f in case.factors if f.name == name)


def test_a_persistent_grid_smaller_than_the_gpu_counts_its_idle_sms(shared_data: Path) -> None:
    """TraceLens's Falconsai H100 trace: aten::addmm M=788 N=3072 K=768 runs
    sm90_xmma_..._tilesize128x128x64 on a grid of [14, 7, 1] = 98 CTAs (one per SM: 231,424 B of shared memory of
    the SM's 233,472) over 7 x 24 = 168 tiles of 128x128. Two rounds of tiles on 98 of the 132 SMs: the waves factor
    read 168 / (2 x 98) x padding = 0.754, leaving out the 34 SMs that hold no CTA for the whole kernel. Both
    models (one CTA per SM) give 168 / (2 x 132) x 788 x 3072 / (168 x 128 x 128) = 0.5597."""
    path = shared_data / FALCONSAI
    raw = _raw(path)
    sms = raw["deviceProperties"][0]["numSms"]
    smem_sm = raw["deviceProperties"][0]["sharedMemPerMultiprocessor"]
    launch = _launch(raw, "tilesize128x128x64")
    grid = math.prod(launch["grid"])
    assert (sms, grid) == (132, 98) and launch["shared memory"] * 2 > smem_sm  # one CTA per SM
    tiles = math.ceil(788 / 128) * math.ceil(3072 / 128)
    assert tiles == 168
    useful = 788 * 3072 / (tiles * 128 * 128)
    expected = tiles / (math.ceil(tiles / grid) * sms) * useful

    c = _case(tracekit.load(path).analyze(), 788, 3072, 768)
    w = _factor(c, "waves")
    assert w.value == pytest.approx(expected) == pytest.approx(0.5597, abs=1e-4)
    assert (
        w.evidence["persistent"] is True and w.evidence["grid_size"] == grid and w.evidence["tiles"] == tiles
    )
    assert w.evidence["idle_sms"] == sms - grid == 34
    assert w.evidence["sm_model"] == w.evidence["slot_model"]  # one CTA per SM: the models agree
    assert "98 persistent CTAs on 132 SMs" in w.sentence and "34 SMs get no CTA" in w.sentence
    assert "132 CTAs, not 98" in (w.remedy or "")
    # the in-kernel cause says the same grid: 98 CTAs for 132 slots
    assert "98 CTAs for 132 slots: the grid bounds it" in _factor(c, "in-kernel").sentence


def test_several_ctas_per_sm_claim_no_slot_loss_as_fact(samples_dir: Path) -> None:
    """samples/h200-foreign-simt_smem's control SGEMM: 16,384 CTAs, 8 per SM on 132 SMs (1,056 slots). The slot
    model (each CTA 1/8 of an SM) gives 16384 / (16 x 1056) = 0.970 ("the last wave runs 52% full"); an SM as fast
    with fewer CTAs gives 16384 / (132 x 125) = 0.993. The trace cannot tell which holds: the factor takes the loss
    both models agree on, and the sentence says both and how to learn which."""
    path = samples_dir / "h200-foreign-simt_smem"
    if not (path / "run.json").is_file():
        pytest.skip(f"{path} is absent")
    a = tracekit.load(path).analyze()
    control = next(c for c in a.cases if c.name == "sgemm_smem_control")
    w = _factor(control, "waves")
    grid, sms, per_sm = w.evidence["grid_size"], w.evidence["sm_count"], w.evidence["ctas_per_sm"]
    assert (grid, sms, per_sm) == (16384, 132, 8)
    assert w.evidence["slot_model"] == pytest.approx(
        grid / (math.ceil(grid / (sms * per_sm)) * sms * per_sm), 1e-3
    )
    assert w.value == pytest.approx(grid / (sms * math.ceil(grid / sms)))
    assert "last wave runs" not in w.sentence
    assert "99%" in w.sentence and "97%" in w.sentence and "Nsight Compute's achieved occupancy" in w.sentence
    # one CTA per SM (the capped twin): the models agree and the sentence is the wave count
    capped = _factor(next(c for c in a.cases if c.name == "sgemm_smem_capped"), "waves")
    assert (
        capped.evidence["sm_model"] == capped.evidence["slot_model"] and "last wave runs" in capped.sentence
    )


def test_a_two_cta_mma_kernel_holds_half_the_b_tile_per_cta(shared_data: Path) -> None:
    """TraceLens's B200 trace, aten::addmm M=888 N=640 K=2880 on nvjet_tst_64x64_64x16_2x1_2cta (grid 140 = the
    14 x 10 output tiles of 64x64, 213,656 B of shared memory per CTA): the stage model said 16 stages of 16 KiB
    (64 x (64 + 64) x 2 B), 262,144 B, more than the kernel has. Two CTAs of a 2-CTA MMA share the B tile, each
    holding half: 64 x (64 + 32) x 2 = 12,288 B a stage, 196,608 B for 16, leaving 17,048 B, the same as its
    64x16 twin (M=888 N=128: 64 x (64 + 8) x 2 x 16 = 147,456 of 164,504)."""
    path = shared_data / B200
    raw = _raw(path)
    a = tracekit.load(path).analyze()
    for (m, n, k), name, tn in (
        ((888, 640, 2880), "64x64_64x16_2x1_2cta", 64),
        ((888, 128, 2880), "64x16_64x16_2x4_2cta", 16),
    ):
        smem = _launch(raw, name)["shared memory"]
        ev = _factor(_case(a, m, n, k), "in-kernel").evidence
        assert ev["smem_per_block_bytes"] == smem and ev["stages"] == 16 and ev["mma_ctas"] == 2
        assert ev["stage_bytes"] == 64 * (64 + tn // 2) * 2
        assert smem - ev["stages"] * ev["stage_bytes"] == 17_048
        # the 17,048 B beside the stages stay whatever the stage count: 17 stages of 64x64 fit, not 18 (23 of
        # 64x16, not 25)
        assert ev["non_stage_smem_bytes"] == 17_048 and "stages_that_fit_is_bound" not in ev
        limit = ev["smem_per_block_limit_bytes"]
        assert ev["stages_that_fit"] == (limit - 17_048) // ev["stage_bytes"] >= ev["stages"]
        assert ev["stages_that_fit"] < limit // ev["stage_bytes"]


def test_stages_never_exceed_the_kernels_shared_memory(shared_data: Path, samples_dir: Path) -> None:
    """Every stage model tracekit states fits the shared memory its kernel was launched with: the FP8 nvjet kernels
    without a shape (h200-foreign-fp8_eager_quant's 64x64_128x13, 13 x 32 KiB > 229,772 B) were sized as 2-byte
    tiles; the B200 2-CTA kernels as if each CTA held the whole B tile."""
    runs = [
        samples_dir / d
        for d in ("h200-foreign-fp8_eager_quant", "h100-serve-nsys-ncu", "h200-emit-nvtx-shapes")
    ]
    runs.append(shared_data / B200)
    checked = 0
    for path in runs:
        if not path.exists():
            continue
        for c in tracekit.load(path).analyze().cases:
            for f in c.factors:
                ev = f.evidence
                if "stage_bytes" in ev and "stages" in ev and ev.get("smem_per_block_bytes"):
                    assert ev["stages"] * ev["stage_bytes"] <= ev["smem_per_block_bytes"], (
                        path.name,
                        c.name,
                        ev,
                    )
                    checked += 1
    if not checked:
        pytest.skip("no run with a stage model is present")
    assert checked >= 5


def test_a_stage_model_that_does_not_fit_says_unknown() -> None:
    """A name whose stages of the modelled size exceed the launch's shared memory gets no stage size or count, and
    says so: cuDNN's wgrad kernel in HTA's nccl_parser_config trace (A100, grid [4, 8, 4], 17,408 B) names
    tilesize128x128x16 and stage4, 4 x 16 x (128 + 128) x 4 B = 65,536 B for fp32 operands. CUTLASS's
    s1688gemm_256x128_32x3 of HTA's trace_diff (147,456 B) is exactly 3 x 32 x (256 + 128) x 4 B: its model holds."""
    a100 = match_device("NVIDIA A100-SXM4-80GB", "8.0", 108)
    wgrad = (
        "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_"
        "warpsize2x2x1_g1_tensor16x8x8_execute_split_k_kernel_cudnn_train"
    )
    case = make_case(
        main_kernel=wgrad, m=4096, n=4096, k=4096, dtype_a="fp32", device=a100, grid=128, block=128,
        registers=96, smem=17_408,
    )  # fmt: skip
    ev = kernel(case, 0.5).evidence
    assert "stage_bytes" not in ev and "stages_that_fit" not in ev
    assert ev["stage_model"].startswith("unknown: 4 stages of 16 KiB (65,536 B) exceed the kernel's 17,408 B")
    case = msgspec.structs.replace(
        case,
        kernel=msgspec.structs.replace(
            case.kernel, name="cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align4", smem_bytes=147_456
        ),
    )
    ev = kernel(case, 0.5).evidence
    assert "stage_model" not in ev and ev["stage_bytes"] * ev["stages"] == 147_456


def test_a_wave_loss_the_models_disagree_on_is_listed_as_unknown(
    shared_data: Path, samples_dir: Path
) -> None:
    """HTA's df_index_resolver (a V100 Kineto trace, no profile): SGEMMs of several CTAs per SM on grids that leave
    slots empty. Their wave loss is a range; the run's Unknown list counts them and says how to learn which model
    holds. A run with an Nsight Compute profile (the SIMT sample) has its occupancy on the card: no such line."""
    path = shared_data / "thirdparty" / "hta" / "df_index_resolver__df_index_resolver.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    a = tracekit.load(path).analyze()
    ranged = [
        c
        for c in a.cases
        for f in c.factors
        if f.name == "waves" and f.evidence["sm_model"] - f.evidence["slot_model"] >= 0.005
    ]
    assert len(ranged) > 10
    (line,) = [u for u in a.summary.unknowns if u.what.startswith("wave loss of")]
    assert line.cases == len(ranged) and f"wave loss of {len(ranged)} case(s)" in line.what
    assert "tracekit capture --ncu" in line.how and "occupancy" in line.how
    simt = samples_dir / "h200-foreign-simt_smem"
    if (simt / "run.json").is_file():
        assert not [
            u for u in tracekit.load(simt).analyze().summary.unknowns if u.what.startswith("wave loss")
        ]
