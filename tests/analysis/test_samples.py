"""The committed sample runs (captured on the lent H200 with tracekit's own capture), checked without ../shared.

Each sample's frames are rebuilt from its raw files and must match the committed frames; the numbers asserted
below are what those captures hold (samples/README.md says how each was made).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.support.cases import cases
from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import load_frames, open_run
from tracekit.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.glob("*/run.json"))


def _show(run: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    main(["show", str(run), "--json"])
    return json.loads(capsys.readouterr().out)


def test_samples_are_committed() -> None:
    names = {p.name for p in RUNS}
    assert {"h200-capture-gemm", "h200-bench-gemm", "h200-gemm-probe"} <= names


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_sample_frames_rebuild_from_raw(run: Path, tmp_path: Path) -> None:
    """The committed frames are what the importer makes of the committed raw files today."""
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "frames")
    result = import_into(open_run(copy))
    assert not result.get("failed"), result
    committed = load_frames(open_run(run))
    rebuilt = load_frames(open_run(copy))
    for name in ("kernels", "ranges", "ncu", "measurements", "failures"):
        assert rebuilt[name].height == committed[name].height, name
    # the same status as the committed run: complete, or incomplete for a capture of a program that died
    assert open_run(copy).manifest["status"] == open_run(run).manifest["status"]
    assert open_run(copy).manifest["status"] == "complete" or run.name.startswith("h200-crash-")


def test_capture_sample_holds_nsys_ncu_and_the_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    """`tracekit capture --nsys --ncu -- tracekit bench gemm` of bf16 and fp8 at M = 16 and 4096 (N, K = 2048, 6144)."""
    run = SAMPLES / "h200-capture-gemm"
    manifest = open_run(run).manifest
    assert manifest["capture"]["tools"] == ["nsys", "ncu"]
    assert manifest["capture"]["ncu"]["clock_control"] == "none"
    assert {"SpeedOfLight", "Occupancy", "WarpStateStats"} <= set(manifest["capture"]["ncu"]["sections"])
    fr = load_frames(open_run(run))
    gemm_ranges = fr["ranges"].filter(pl.col("range_kind") == "gemm")
    assert set(gemm_ranges["m"].unique().to_list()) == {16, 4096}
    # every GEMM kernel (cuBLAS nvjet_*) launched inside a GEMM range is joined to it
    nvjet = fr["kernels"].filter(pl.col("name").str.starts_with("nvjet_"))
    assert nvjet.height > 0 and nvjet["range_id"].null_count() == 0
    assert fr["ncu"].height == 30
    assert fr["ncu"]["device_name"].unique().to_list() == ["NVIDIA H200"]
    assert fr["ncu"]["compute_capability"].unique().to_list() == ["9.0"]
    # ncu ran with clocks uncontrolled: kernels ran above the 1830 MHz base clock's neighbourhood floor
    assert fr["ncu"]["sm_clock_hz"].median() > 1.5e9
    show = _show(run, capsys)
    assert show["device"] == {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}
    assert {(g["backend"], g["m"]) for g in show["gemms"]} == {
        (b, m) for b in ("torch-bf16", "torch-fp8-tensorwise") for m in (16, 4096)
    }


def test_bench_sample_records_every_fp4_failure_in_full(capsys: pytest.CaptureFixture[str]) -> None:
    """`tracekit bench gemm --backends all --shapes glm5` on the H200: bf16 and fp8 measured, FP4 unsupported."""
    show = _show(SAMPLES / "h200-bench-gemm", capsys)
    measured = {g["backend"] for g in show["gemms"]}
    assert {"torch-bf16", "torch-fp8-tensorwise", "torch-fp8-rowwise", "torch-fp8-blockwise"} <= measured
    assert len(show["gemms"]) == 48  # 4 backends x 12 glm5 shapes
    kinds = {(f["backend"], f["kind"]) for f in show["failures"]}
    assert ("torch-nvfp4", "unsupported") in kinds
    assert ("flashinfer-fp4-cutlass", "unsupported") in kinds
    assert ("sgl-fp4", "unavailable") in kinds
    by_backend = {f["backend"]: f for f in show["failures"]}
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in by_backend["torch-nvfp4"]["message"]
    assert by_backend["flashinfer-fp4-cutlass"]["message"] == (
        "mm_fp4 does not support backend 'cutlass' with capability 90"
    )
    # the whole message is kept, chained cause included: FlashInfer's JIT build failed (only its Python files
    # could be carried to the GPU machine), and the ninja error and the failing command are both there
    jit = by_backend["flashinfer-fp8"]["message"]
    assert "ninja: error:" in jit and "caused by subprocess.CalledProcessError" in jit
    assert all(f["traceback"] for f in show["failures"] if f["kind"] != "unavailable")
    # the plateau of DEVICE.md: bf16 at 4096x2048x6144 well above 600 TFLOP/s, fp8 faster still
    tf = {(g["backend"], g["m"], g["n"]): g["kernel_tflops"] for g in show["gemms"]}
    assert 600 < tf[("torch-bf16", 4096, 2048)] < 989.4
    assert tf[("torch-fp8-tensorwise", 4096, 2048)] > tf[("torch-bf16", 4096, 2048)]
    assert all(g["pct_of_peak"] is not None for g in show["gemms"])


def _per_range_kernel_ns(
    frames: dict[str, pl.DataFrame], name_part: str, kind: str, kernel_prefix: str = ""
) -> pl.Series:
    """Kernel time summed per range instance (ranges of ``kind`` whose name holds ``name_part``), by SQL-like
    polars on the frames: an independent route to the numbers the explainer reports."""
    ranges = frames["ranges"].filter(
        (pl.col("range_kind") == kind) & pl.col("name").str.contains(name_part, literal=True)
    )
    per = (
        frames["kernels"]
        .filter(pl.col("name").str.starts_with(kernel_prefix))
        .join(ranges.select("range_id"), on="range_id")
        .group_by("range_id")
        .agg(pl.col("duration_ns").sum())
    )
    return per["duration_ns"]


def test_capture_sample_explained_from_its_timeline() -> None:
    """The sweep ran under nsys with CUDA events, so host overhead entered each timed launch; the explainer takes
    the GPU's own record instead: every call (a GEMM range instance) with its kernels, the quantize step that
    feeds it (an ``aux`` range right before it, same backend, M and K) and its idle time, summed over calls. The
    cases' GPU time is the calls' time: never more than the timeline's kernels and gaps (before, medians times
    calls gave 36.9 ms of case time on a 28.8 ms timeline)."""
    from tests.support.cases import factor

    run = open_run(SAMPLES / "h200-capture-gemm")
    fr = load_frames(run)
    wfs = {w.name: w for w in cases(fr, environment=run.manifest.get("environment"))}
    # only the four GEMMs: the quantize kernels ncu profiled inside aux ranges are not GEMMs of their own
    assert len(wfs) == 4 and all(n.startswith("gemm ") for n in wfs)
    kernel_ns = fr["kernels"]["duration_ns"].sum() + fr["memops"]["duration_ns"].sum()
    assert sum(w.timing.gemm_ns_total + w.timing.aux_ns_total for w in wfs.values()) <= kernel_ns
    fp8 = next(w for n, w in wfs.items() if "fp8" in n and " M=4096 " in n)
    gemm = _per_range_kernel_ns(fr, "torch-fp8-tensorwise op=scaled_mm M=4096 ", "gemm")
    t = fp8.timing
    assert t.calls == gemm.len() == 40 and t.gemm_ns_total == pytest.approx(gemm.sum())
    assert t.gemm_ns.median == pytest.approx(gemm.median())
    assert t.source_detail is not None and t.source_detail.startswith("timeline")
    # the quantize instances a call owns: those whose next GEMM call of the same backend, M and K is that call
    ranges = fr["ranges"]
    ks = fr["kernels"].join(ranges.select("range_id", "name", "range_kind"), on="range_id")
    # a quantize instance: its kernels and the memsets it issues (the quantizer zeroing its amax)
    mem = fr["memops"].join(ranges.select("range_id", "name"), on="range_id")
    inst = (
        pl.concat(
            [
                ks.select("range_id", "name_right", "end_ns", "duration_ns"),
                mem.select("range_id", "name_right", "end_ns", "duration_ns"),
            ]
        )
        .filter(pl.col("name_right").str.contains("op=fp8_quantize M=4096 K=6144", literal=True))
        .group_by("range_id")
        .agg(pl.col("end_ns").max(), pl.col("duration_ns").sum())
    )
    firsts = sorted(
        ks.filter(pl.col("name_right").str.contains("op=scaled_mm M=4096 ", literal=True))
        .group_by("range_id")
        .agg(pl.col("start_ns").min())["start_ns"]
        .to_list()
    )
    before = [
        d for end, d in inst.select("end_ns", "duration_ns").iter_rows() if any(f >= end for f in firsts)
    ]
    # the quantize ran 21 times (12 kernels and a memset, 387-392 us each): 3 in the setup (one per input buffer)
    # and the rest in the benchmark's own aux timing loop, after the GEMM calls; no GEMM call ran one. Joined to the
    # next call, the 3 setup runs were charged to the 40 calls ("29.3 us per call"); now the step is none's, and
    # the card gives its median run (docs/CASES.md, "h200-bench-gemm against h200-capture-gemm")
    assert 0 < len(before) < inst.height == 21
    assert t.aux_ns_total == 0 and not fp8.aux
    assert any("ran 21 times apart from the 40 calls" in n for n in fp8.notes)
    assert fp8.verdict.factor != "aux kernels" and fp8.complete
    bf16 = next(w for n, w in wfs.items() if "backend=torch-bf16 " in n and " M=16 " in n)
    nvjet = _per_range_kernel_ns(fr, "torch-bf16 op=mm M=16 ", "gemm", "nvjet_")
    reduce = _per_range_kernel_ns(fr, "torch-bf16 op=mm M=16 ", "gemm", "void cublasLt::splitKreduce")
    # cuBLAS split K at M = 16: its reduce kernel is GEMM time (the kernel rate includes it), said apart
    tb = bf16.timing
    assert tb.gemm_ns_total == pytest.approx(nvjet.sum() + reduce.sum())
    assert tb.splitk_ns_total == pytest.approx(reduce.sum()) and tb.aux_ns_total == 0
    assert factor(bf16, "split-K reduce") is not None
    # the cold first launch (13.7 ms idle in its range) is a pause, counted apart, not a launch gap
    assert tb.pauses == 1 and tb.paused_ns_total > 13e6 and tb.gap_ns.median < 50_000


def test_capture_sample_ncu_alone_keeps_quantize_kernels_auxiliary() -> None:
    """From the ncu report alone (no timeline, no measurements): the profiled quantize kernels of the fp8
    GEMMs' aux ranges are that GEMM's auxiliary time, not GEMMs of their own."""
    from tracekit.frames import SPECS

    fr = load_frames(open_run(SAMPLES / "h200-capture-gemm"))
    only = {
        name: (df if name.startswith("ncu") or name == "devices" else SPECS[name].empty())
        for name, df in fr.items()
    }
    wfs = cases(only)
    assert {w.origin for w in wfs} == {"ncu"} and len(wfs) == 4
    ncu = fr["ncu"]
    fp8 = next(w for w in wfs if "fp8" in w.name and w.shape and w.shape.m == 4096)
    quant = ncu.filter(pl.col("nvtx_range").str.contains("fp8_quantize M=4096", literal=True))
    instances = quant["name"].value_counts()["count"].max()  # each instance launches each of its kernels once
    per_call = fp8.timing.aux_ns_total / fp8.timing.calls
    assert per_call == pytest.approx(quant["duration_ns"].sum() / instances)
    assert set(quant["demangled_name"].to_list()) <= {u.name for u in fp8.aux}
    bf16 = next(w for w in wfs if "backend=torch-bf16" in w.name and w.shape and w.shape.m == 4096)
    assert bf16.timing.aux_ns_total == 0


def test_reader_that_stops_early_is_not_an_error() -> None:
    """`tracekit explain RUN | head`: the reader closes the pipe before tracekit writes; exit 0, nothing on stderr
    (exit 1 is documented as an internal error)."""
    import subprocess
    import sys

    run = Path(__file__).resolve().parents[2] / "samples" / "h200-capture-gemm"
    with subprocess.Popen(
        [sys.executable, "-m", "tracekit", "explain", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # before the first write: it meets a closed pipe
        err = proc.stderr.read().decode()
        rc = proc.wait(timeout=60)
    assert rc == 0, err
    assert "Traceback" not in err and "internal error" not in err


def test_instrumented_script_under_the_torch_profiler_counts_each_call_once() -> None:
    """h200-instrument-torchprof: `capture --torch-profiler --instrument` of a script that never imports tracekit
    (three torch.mm calls, tests/gpu/test_instrument_gpu.py's script). Kineto mirrors each wrapper's
    record_function range on the GPU as a gpu_user_annotation of the same name: the host ranges own the calls (the
    kernel joins to the aten::mm op inside), and their GPU twins are not three more calls "whose GEMM kernel is
    missing"."""
    import tracekit

    run = SAMPLES / "h200-instrument-torchprof"
    frames = load_frames(open_run(run))
    gemm = frames["ranges"].filter(pl.col("range_kind") == "gemm")
    assert gemm["kind"].value_counts().sort("kind").rows() == [("annotation", 3), ("gpu_annotation", 3)]
    (case,) = tracekit.load(run).analyze().cases
    assert (case.shape.m, case.shape.n, case.shape.k) == (256, 384, 512)
    assert case.timing.calls == 3
    assert case.timing.calls_without_kernel == 0
    assert case.kernel.name.startswith("nvjet_sm90")
