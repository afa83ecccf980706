"""A GEMM's launch configuration from every format, and what is unknown said to be unknown, never printed as 0.

Kineto gives a kernel's shared memory only as CUPTI's static + dynamic sum (``"shared memory"``); the GEMM cases
read it there (they read only the static / dynamic split before, so every Kineto GEMM showed "0 KiB of 163 KiB
shared memory per CTA"). A Nsight Compute CSV export made without the LaunchStats section gives no shared memory
per block at all: the explainer says so."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from tracekit.analyzers.explain import explain
from tracekit.analyzers.importer import import_files
from tracekit.analyzers.store import load_frames
from tracekit.devices import lookup_device

CONTROL = "thirdparty/hta/trace_diff__control__control.json.gz"
"""A100 Kineto trace: CUTLASS TF32 GEMMs under the user's own ranges, each kernel with its "shared memory"."""
RTX50 = "thirdparty/llm-perf-opt-rtx50"
"""Nsight Compute CSV exports (details and metrics pages) without the LaunchStats section."""
ZERO = re.compile(r"(?<![\d.])0 KiB of|0 KB per block")


def _sentences(waterfalls: list) -> list[str]:
    return [f.sentence for wf in waterfalls for f in wf.factors] + [
        wf.verdict.sentence for wf in waterfalls if wf.verdict
    ]


def test_kineto_shared_memory_reaches_the_gemm_cases(shared_data: Path, tmp_path: Path) -> None:
    trace = json.loads(gzip.decompress((shared_data / CONTROL).read_bytes()))
    smem = {
        e["name"]: e["args"]["shared memory"]
        for e in trace["traceEvents"]
        if e.get("cat") in ("kernel", "Kernel") and "shared memory" in e.get("args", {})
    }
    run, _ = import_files([shared_data / CONTROL], tmp_path / "run")
    waterfalls = explain(load_frames(run), environment=run.manifest.get("environment"))
    assert waterfalls
    checked = 0
    for wf in waterfalls:
        name = wf.case.main_kernel
        if name in smem:
            assert wf.case.smem_per_block_bytes == (smem[name] or None), name
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
    waterfalls = explain(frames, environment=run.manifest.get("environment"), device=device)
    said = _sentences(waterfalls)
    assert waterfalls and not [s for s in said if ZERO.search(s)]
    assert any("shared memory per CTA unknown" in s for s in said)
