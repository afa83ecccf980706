"""The crash captures of issue 18, made on the H200 with ``tracekit capture --nsys --ncu --instrument`` around
benchmarks/foreign/crash_segv.py (a script that does not import tracekit: good bf16 and FP8 GEMMs, a caught NVFP4
error, then it dies), the seed's flow (`tracekit capture --nsys --ncu -- tracekit bench gemm` over bf16, FP8 and the
FP4 backends), an ``emit_nvtx(record_shapes=True)`` capture and a ``capture --ranges`` capture. Every assertion
reads the committed run through the CLI, as a user would (samples/README.md names the commands)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _show(name: str) -> dict:
    result = CliRunner().invoke(cli, ["show", str(SAMPLES / name), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _crash(data: dict) -> dict:
    (crash,) = [f for f in data["failures"] if f["kind"] in ("crashed", "timeout")]
    return crash


def _gemm(data: dict, backend: str) -> dict:
    """The backend's GEMM case with the most calls (a GEMM called in two ranges is two cases)."""
    rows = [g for g in data["gemms"] if g["backend"] == backend]
    assert rows, backend
    return max(rows, key=lambda g: g["calls"])


def _good_gemms_kept(data: dict) -> None:
    """The GEMMs before the crash keep their numbers; the NVFP4 call that raised is a failure, not a GEMM."""
    assert all(g["kernel_tflops"] > 400 for g in data["gemms"] if g["backend"] == "torch-bf16")
    assert all(g["kernel_tflops"] > 700 for g in data["gemms"] if g["backend"] == "torch-fp8")
    assert _gemm(data, "torch-bf16") and _gemm(data, "torch-fp8")
    nvfp4 = [f for f in data["failures"] if f["backend"] == "torch-fp4"]
    assert [f["kind"] for f in nvfp4] == ["unsupported"]
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in nvfp4[0]["message"]
    assert not [g for g in data["gemms"] if g["backend"] == "torch-fp4"]  # no kernel ran: no case


def test_segfault_in_a_native_call_after_the_gemms() -> None:
    data = _show("h200-crash-segv")
    crash = _crash(data)
    assert crash["kind"] == "crashed" and crash["signal"] == "SIGSEGV"
    assert crash["backend"] is None and crash["caller"] is None  # no GEMM was in flight: the caught NVFP4
    # error before the segfault is not what the program died of
    assert crash["python_stack"].startswith("Fatal Python error: Segmentation fault")
    assert "in native_fault" in crash["python_stack"]
    assert "calling into a native library that faults" in crash["stderr_tail"]
    assert "[2/2]" not in crash["stderr_tail"] and "==PROF==" not in crash["stderr_tail"]
    # the crash flush kept the timeline: every GEMM kernel the program ran before it died
    assert data["kernel_count"] >= 19
    _good_gemms_kept(data)


def test_segfault_inside_a_wrapped_gemm_names_the_call() -> None:
    crash = _crash(_show("h200-crash-segv-in-gemm"))
    assert crash["signal"] == "SIGSEGV"
    assert (crash["backend"], crash["m"], crash["n"], crash["k"]) == ("torch-bf16", 1024, 2048, 6144)
    assert crash["caller"].endswith("benchmarks/foreign/crash_segv.py:184")
    assert "in __torch_function__" in crash["python_stack"]


def test_abort() -> None:
    data = _show("h200-crash-abort")
    crash = _crash(data)
    assert crash["signal"] == "SIGABRT" and crash["python_stack"].startswith("Fatal Python error: Aborted")
    assert crash["stderr_tail"].rstrip().splitlines()[0] == "a native assertion failed: aborting"
    _good_gemms_kept(data)


def test_illegal_address_ends_the_program_with_the_cuda_error() -> None:
    data = _show("h200-crash-illegal")
    crash = _crash(data)
    assert crash["kind"] == "crashed" and crash["signal"] is None
    assert crash["error_type"] == "torch.AcceleratorError"
    assert "an illegal memory access was encountered" in crash["message"]
    assert crash["python_stack"].startswith("Traceback (most recent call last):")
    # the dead context took nsys's buffers: said in the run, and the GEMMs take Nsight Compute's durations
    assert data["kernel_count"] == 0 and "nsys kept no kernels" in data["run"]["incomplete_reason"]
    bf16 = _gemm(data, "torch-bf16")
    assert bf16["timing_source"] == "ncu-replay" and bf16["kernel_tflops"] > 400


def test_hang_past_timeout() -> None:
    data = _show("h200-crash-hang")
    crash = _crash(data)
    assert crash["kind"] == "timeout" and crash["python_stack"].startswith("Timeout (")
    assert "after --timeout 30 s" in crash["message"]
    assert _gemm(data, "torch-fp8")["timing_source"] == "ncu-replay"


def test_segfault_under_the_pytorch_profiler() -> None:
    crash = _crash(_show("h200-crash-segv-torchprof"))
    assert crash["signal"] == "SIGSEGV" and "calling into a native library" in crash["stderr_tail"]


def test_report_and_tui_show_the_crash_whole(tmp_path: Path) -> None:
    out = tmp_path / "ticket.md"
    result = CliRunner().invoke(cli, ["report", str(SAMPLES / "h200-crash-segv-in-gemm"), "-o", str(out)])
    assert result.exit_code in (0, 4), result.output
    text = out.read_text()
    assert "signal: SIGSEGV" in text and "GEMM call in flight:" in text and "crash_segv.py:184" in text
    assert "Fatal Python error: Segmentation fault" in text and "in __torch_function__" in text

    from tracekit.analyzers.store import load_frames, open_run
    from tracekit.tui.screens.failures import failure_content

    frames = load_frames(open_run(SAMPLES / "h200-crash-segv-in-gemm"))
    rows = [r for r in frames["failures"].to_dicts() if r["kind"] == "crashed"]
    plain = failure_content(rows).plain
    assert "signal: SIGSEGV" in plain and "crash_segv.py:184" in plain
    assert "Fatal Python error: Segmentation fault" in plain and "the program's last stderr lines" in plain


def test_the_seeds_flow_in_one_run() -> None:
    data = _show("h200-capture-seed")
    shaped = [g for g in data["gemms"] if g["m"] and g["n"] and g["k"] and g["achieved_tflops"]]
    assert len(shaped) >= 6 and len({g["backend"] for g in shaped}) >= 2
    assert len({g["m"] for g in shaped}) >= 3
    assert data["kernel_count"] > 0 and data["ncu_kernel_count"] > 0
    kinds = {(f["backend"], f["kind"]) for f in data["failures"]}
    assert {("torch-nvfp4", "unsupported"), ("flashinfer-fp4-cutlass", "unsupported")} <= kinds
    assert ("sgl-fp4", "unavailable") in kinds
    fi = next(f for f in data["failures"] if f["backend"] == "flashinfer-fp4-cutlass")
    assert "does not support backend 'cutlass' with capability 90" in fi["message"]


def test_emit_nvtx_shapes_are_explained() -> None:
    result = CliRunner().invoke(cli, ["explain", str(SAMPLES / "h200-emit-nvtx-shapes"), "--json"])
    assert result.exit_code == 0, result.output
    cases = {c["name"]: c for c in json.loads(result.stdout)["cases"]}
    mm = cases["aten::mm M=1024 N=2048 K=6144"]
    assert mm["flops"]["source"] == "shape" and mm["flops"]["per_call"] == 2 * 1024 * 2048 * 6144
    bmm = cases["aten::bmm M=256 N=512 K=1024 batch=8"]
    assert bmm["flops"]["per_call"] == 8 * 2 * 256 * 512 * 1024 and bmm["timing"]["achieved_tflops"] > 0


def test_capture_ranges_profiled_only_the_matching_range() -> None:
    data = _show("h200-ranges-attn")
    run = json.loads((SAMPLES / "h200-ranges-attn/run.json").read_text())
    assert run["capture"]["ncu"]["ranges"] == "attn"
    from tracekit.analyzers.store import load_frames, open_run

    ncu = load_frames(open_run(SAMPLES / "h200-ranges-attn"))["ncu"]
    assert data["ncu_kernel_count"] == 2 and set(ncu["nvtx_range"].to_list()) == {"attn_proj"}


@pytest.mark.parametrize(
    "name", ["h200-crash-segv", "h200-crash-abort", "h200-crash-illegal", "h200-crash-hang"]
)
def test_program_output_is_kept_apart_from_the_profilers(name: str) -> None:
    raw = SAMPLES / name / "raw"
    for tool in ("nsys", "ncu"):
        err = (raw / f"program.{tool}.stderr").read_text()
        assert "==PROF==" not in err and "Generating '" not in err
        out = (raw / f"program.{tool}.stdout").read_text()
        assert "nvfp4_gemm: M=128 N=128 K=256 failed: RuntimeError" in out and "mode " in out
