"""A GEMM's launch configuration from every format, and what is unknown said to be unknown, never printed as 0.

Kineto gives a kernel's shared memory only as CUPTI's static + dynamic sum (``"shared memory"``); the GEMM cases
read it there (they read only the static / dynamic split before, so every Kineto GEMM showed "0 KiB of 163 KiB
shared memory per CTA"). A Nsight Compute CSV export made without the LaunchStats section gives no shared memory
per block at all: the explainer says so. Kineto's ``"blocks per SM"`` and ``"est. achieved occupancy %"`` reach
the kernels frame (the estimate null above 48 KiB of shared memory per block, where Kineto writes 0 whatever the
kernel does) and the in-kernel factor, which names them as the PyTorch profiler's estimate."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.support.cases import cases
from tracekit.analyzers.importer import import_files, read_file
from tracekit.analyzers.store import frames_in_memory, load_frames, open_run
from tracekit.devices import lookup_device
from tracekit.run import Run

CONTROL = "thirdparty/hta/trace_diff__control__control.json.gz"
"""A100 Kineto trace: CUTLASS TF32 GEMMs under the user's own ranges, each kernel with its "shared memory"."""
RTX50 = "thirdparty/llm-perf-opt-rtx50"
"""Nsight Compute CSV exports (details and metrics pages) without the LaunchStats section."""
ZERO = re.compile(r"(?<![\d.])0 KiB of|0 KB per block")


def _sentences(waterfalls: list) -> list[str]:
    return [f.sentence for wf in waterfalls for f in wf.factors] + [wf.verdict.sentence for wf in waterfalls]


def test_kineto_shared_memory_reaches_the_gemm_cases(shared_data: Path, tmp_path: Path) -> None:
    trace = json.loads(gzip.decompress((shared_data / CONTROL).read_bytes()))
    smem = {
        e["name"]: e["args"]["shared memory"]
        for e in trace["traceEvents"]
        if e.get("cat") in ("kernel", "Kernel") and "shared memory" in e.get("args", {})
    }
    run, _ = import_files([shared_data / CONTROL], tmp_path / "run")
    waterfalls = cases(load_frames(run), environment=run.manifest.get("environment"))
    assert waterfalls
    checked = 0
    for wf in waterfalls:
        name = wf.kernel.name
        if name in smem:
            assert wf.kernel.smem_bytes == (smem[name] or None), name
            checked += 1
    assert checked >= len(waterfalls) // 2
    said = _sentences(waterfalls)
    assert not [s for s in said if ZERO.search(s)]
    # a 3-stage 128x128x32 TF32 tile holds 96 KiB: one CTA per SM of the A100's 164 KiB
    assert any("96 KiB of 163 KiB shared memory per CTA" in s for s in said)


def test_a_csv_export_without_launch_stats_says_the_shared_memory_is_unknown(
    shared_data: Path, tmp_path: Path
) -> None:
    csvs = sorted((shared_data / RTX50).glob("kernel_*_ncu.*.csv"))
    run, _ = import_files(csvs, tmp_path / "run")
    frames = load_frames(run)
    assert frames["ncu"]["static_smem_bytes"].null_count() == frames["ncu"].height  # not in these exports
    device = lookup_device("rtx-pro-6000")
    waterfalls = cases(frames, environment=run.manifest.get("environment"), device=device)
    said = _sentences(waterfalls)
    assert waterfalls and not [s for s in said if ZERO.search(s)]
    assert any("shared memory per CTA unknown" in s for s in said)


ESTIMATED = [
    CONTROL,
    "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    "thirdparty/tracelens/b200__eager_trace.json.gz",
    "h200-probe/torch_trace.json.gz",
]
"""PyTorch-profiler traces whose kernels carry the launch estimates: A100 2023, a 2021 trace, B200, H200."""
LIMIT = 48 * 1024


def _trace_kernels(path: Path) -> list[dict]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]


@pytest.mark.parametrize("name", ESTIMATED)
def test_kineto_launch_estimates_reach_the_kernels_frame(shared_data: Path, name: str) -> None:
    """Every kernel's ``blocks per SM`` as written; its ``est. achieved occupancy %`` as written up to 48 KiB of
    shared memory per block, null above (Kineto wrote 0 for every one of those)."""
    events = _trace_kernels(shared_data / name)
    assert events and all("blocks per SM" in e["args"] for e in events)
    big = [e for e in events if e["args"]["shared memory"] > LIMIT]
    assert all(e["args"]["est. achieved occupancy %"] == 0 for e in big)
    want = Counter(
        (
            e["args"]["correlation"],
            float(e["args"]["blocks per SM"]),
            None if e["args"]["shared memory"] > LIMIT else float(e["args"]["est. achieved occupancy %"]),
        )
        for e in events
    )
    kernels = read_file(shared_data / name).frames["kernels"]
    assert kernels.schema["blocks_per_sm"] == kernels.schema["est_occupancy_pct"] == pl.Float64
    got = Counter(kernels.select("correlation_id", "blocks_per_sm", "est_occupancy_pct").iter_rows())
    assert got == want
    assert kernels.filter(pl.col("smem_bytes") > LIMIT)["est_occupancy_pct"].null_count() == len(big)


def test_traces_without_the_estimates_leave_them_unknown(shared_data: Path) -> None:
    """AMD's ROCm trace writes neither: null, never 0."""
    kernels = read_file(
        shared_data / "thirdparty/hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    ).frames["kernels"]
    assert kernels.height
    assert (
        kernels["blocks_per_sm"].null_count() == kernels["est_occupancy_pct"].null_count() == kernels.height
    )


def test_the_in_kernel_factor_names_the_profilers_estimate(shared_data: Path, tmp_path: Path) -> None:
    """HTA's A100 trace without Nsight Compute: each case's in-kernel factor carries its main kernel's estimate
    (its value in the trace) and says it is the PyTorch profiler's; a kernel above 48 KiB of shared memory
    carries none and says no occupancy but the theoretical one."""
    estimates: dict[str, set[float]] = {}
    for e in _trace_kernels(shared_data / CONTROL):
        if e["args"]["shared memory"] <= LIMIT:
            estimates.setdefault(e["name"], set()).add(float(e["args"]["est. achieved occupancy %"]))
    run, _ = import_files([shared_data / CONTROL], tmp_path / "run")
    waterfalls = cases(load_frames(run), environment=run.manifest.get("environment"))
    with_estimate = without = 0
    for wf in waterfalls:
        factor = next((f for f in wf.factors if f.name == "in-kernel"), None)
        if factor is None:
            continue
        est = factor.evidence.get("est_occupancy_pct")
        if wf.kernel.name in estimates:
            assert est in estimates[wf.kernel.name], wf.name
            assert f"occupancy {est:.0f}% (estimated by the PyTorch profiler)" in factor.sentence
            with_estimate += 1
        else:
            assert est is None and "estimated by the PyTorch profiler" not in factor.sentence
            assert "achieved_occupancy_pct" not in factor.evidence
            without += 1
    assert with_estimate >= 10 and without >= 10, (with_estimate, without)


def test_a_schema_6_run_reads_without_a_rebuild_the_estimates_unknown(
    shared_data: Path, tmp_path: Path
) -> None:
    """A run imported before the estimates were read (schema 6, its kernels without the two columns) is read by
        migration, not rebuilt: the estimates are null (unknown) and its kernel classes are decided again in memory (frames
    before schema 8 hold an earlier table's classes)."""
    run, _ = import_files([shared_data / "h200-probe" / "torch_trace.json.gz"], tmp_path / "run")
    current = load_frames(open_run(run.path))["kernels"]
    assert current["blocks_per_sm"].null_count() == 0
    path = run.frame_path("kernels")
    pl.read_parquet(path).drop("blocks_per_sm", "est_occupancy_pct").with_columns(
        pl.lit("written", pl.String).alias("class_source")
    ).write_parquet(path)
    assert run.record.frames is not None
    run.set_frames(msgspec.structs.replace(run.record.frames, schema_version=6))
    run.save()
    old = Run.open(run.path)
    assert old.frames_migratable()
    kernels = load_frames(old)["kernels"]
    assert not frames_in_memory(old)
    assert kernels.columns == current.columns
    assert (
        kernels["blocks_per_sm"].null_count() == kernels["est_occupancy_pct"].null_count() == kernels.height
    )
    # classified again, in memory: its classes predate the kernel table of schema 8 (convolution, softmax)
    assert "written" not in kernels["class_source"].to_list()
    assert kernels["kernel_class"].to_list() == current["kernel_class"].to_list()
