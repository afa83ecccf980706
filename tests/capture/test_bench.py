"""The sweep with real worker processes: a worker that really segfaults, one that really hangs, failure
classification on the real error strings from DEVICE.md, and the raw JSONL rows against the frame schemas."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.collectors import failures as F
from tracekit.collectors.bench import (
    GLM5_SHAPES,
    SweepSettings,
    parse_shapes,
    profiled_worker,
    read_rows,
    run_sweep,
)
from tracekit.collectors.failures import FAILURE_KEYS
from tracekit.collectors.worker import MEASUREMENT_KEYS, quantile
from tracekit.errors import BadInputError
from tracekit.run import Run

PLUGINS = Path(__file__).resolve().parents[1] / "support" / "bench_plugins.py"

# Real error texts seen on the H200 (DEVICE.md "FP4 on this GPU: real failures to record").
REAL = [
    (
        "RuntimeError",
        "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmulAlgoGetHeuristic( ltHandle, "
        "computeDesc.descriptor(), Adesc.descriptor(), Bdesc.descriptor(), Cdesc.descriptor(), "
        "Ddesc.descriptor(), preference.descriptor(), 1, &heuristicResult, &returnedResult)",
        F.UNSUPPORTED,
    ),
    ("flashinfer.utils.BackendSupportedError", "No suitable auto backends found for mm_fp4", F.UNSUPPORTED),
    (
        "flashinfer.utils.BackendSupportedError",
        "mm_fp4 does not support backend 'cudnn' with capability 90",
        F.UNSUPPORTED,
    ),
    ("ValueError", "mm_fp4 does not support backend 'cute-dsl' with capability 90", F.UNSUPPORTED),
    (
        "RuntimeError",
        "Invalid scaling configuration. For TensorWise scaling, both scales should be scalar. "
        "For RowWise scaling, scale_a should be (1024, 1) and scale_b should be (1, 2048).",
        F.UNSUPPORTED,
    ),
    ("RuntimeError", "scaled_gemm doesn't support fast accum with 128x128 blockwise scaling", F.UNSUPPORTED),
    ("ModuleNotFoundError", "No module named 'sgl_kernel'", F.UNAVAILABLE),
    ("torch.AcceleratorError", "CUDA error: an illegal memory access was encountered", F.CRASHED),
    ("RuntimeError", "CUDA error: an illegal instruction was encountered", F.CRASHED),
    ("RuntimeError", "shape '[16, 384]' is invalid for input of size 7", F.CRASHED),
]


@pytest.mark.parametrize(("etype", "message", "kind"), REAL)
def test_classify_real_messages(etype, message, kind):
    assert F.classify(etype, message) == kind


def test_poisoned_context_detection():
    assert F.poisons_context("CUDA error: an illegal memory access was encountered")
    assert not F.poisons_context("mm_fp4 does not support backend 'cudnn' with capability 90")


def test_signal_names():
    assert F.signal_name(-11) == "SIGSEGV" and F.signal_name(-9) == "SIGKILL" and F.signal_name(0) is None


def test_keys_match_frame_schemas():
    frames = pytest.importorskip("tracekit.frames")
    assert list(MEASUREMENT_KEYS) == [c.name for c in frames.MEASUREMENTS.columns][1:]
    assert list(FAILURE_KEYS) == [c.name for c in frames.FAILURES.columns][1:]


def test_parse_shapes():
    assert parse_shapes("glm5") == list(GLM5_SHAPES) and len(GLM5_SHAPES) == 12
    assert (16, 768, 6144) in GLM5_SHAPES and (4096, 2048, 6144) in GLM5_SHAPES
    assert parse_shapes("1024x2048x6144, 16X768X6144") == [(1024, 2048, 6144), (16, 768, 6144)]
    for bad in ("", "12x34", "axbxc", "0x1x1"):
        with pytest.raises(BadInputError):
            parse_shapes(bad)


def test_quantile_matches_numpy_linear():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert (
        quantile(xs, 0.5) == 3.0
        and quantile(xs, 0.1) == pytest.approx(1.4)
        and quantile(xs, 0.9) == pytest.approx(4.6)
    )


@pytest.fixture
def plugin_env(monkeypatch):
    monkeypatch.setenv("TRACEKIT_BACKEND_PLUGINS", str(PLUGINS))


def test_sweep_survives_segfault_hang_and_failures(tmp_path, plugin_env):
    shapes = [(1, 8, 8), (2, 8, 8), (3, 8, 8)]
    settings = SweepSettings(
        backends=["test-ok", "test-segv", "test-hang", "test-unsupported", "test-missing"],
        shapes=shapes,
        warmup=1,
        repeats=3,
        timeout=4.0,
    )
    events = []
    result = run_sweep(tmp_path / "run", settings, on_event=events.append)

    run = Run.open(tmp_path / "run")
    assert run.status == "complete" and result.status == "complete"
    assert run.manifest["capture"]["shapes"] == ["1x8x8", "2x8x8", "3x8x8"]
    assert run.manifest["environment"].get("hostname")
    measurements, failures = read_rows(run)
    assert measurements == result.measurements and failures == result.failures

    measured = {(r["backend"], r["m"]) for r in measurements}
    # the segfault and the hang each cost one shape; the worker restarts for the rest
    assert measured == {
        ("test-ok", 1),
        ("test-ok", 2),
        ("test-ok", 3),
        ("test-segv", 1),
        ("test-segv", 3),
        ("test-hang", 1),
        ("test-hang", 3),
    }
    by = {(r["backend"], r["m"]): r for r in failures}
    assert by[("test-segv", 2)]["kind"] == "crashed" and by[("test-segv", 2)]["error_type"] == "SIGSEGV"
    assert (
        "Fatal Python error: Segmentation fault" in by[("test-segv", 2)]["traceback"]
    )  # faulthandler's dump
    assert by[("test-hang", 2)]["kind"] == "timeout"
    for m in (1, 2, 3):
        u = by[("test-unsupported", m)]
        assert u["kind"] == "unsupported" and u["error_type"] == "RuntimeError"
        assert "CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmulAlgoGetHeuristic" in u["message"]
        assert "Traceback (most recent call last)" in u["traceback"]
        assert by[("test-missing", m)]["kind"] == "unavailable"
        assert "tracekit_no_such_module_xyz" in by[("test-missing", m)]["message"]
    assert len(failures) == 8

    for row in measurements:
        assert list(row) == list(MEASUREMENT_KEYS)
        assert row["status"] == "ok" and row["timing"] == "wall" and row["repeats"] == 3
        assert row["time_us_p10"] <= row["time_us"] <= row["time_us_p90"]
        assert row["range"].startswith(f"gemm backend={row['backend']} op=mm M={row['m']} N=8 K=8")
    for row in failures:
        assert list(row) == list(FAILURE_KEYS)

    done = [(e.backend, e.shape, e.data["status"]) for e in events if e.kind == "shape_done"]
    assert len(done) == 15 and len(set(done)) == 15
    assert ("test-segv", (2, 8, 8), "crashed") in done and ("test-hang", (2, 8, 8), "timeout") in done
    assert sum(e.kind == "failure" for e in events) == 8
    assert events[-1].kind == "sweep_done" and events[-1].data["status"] == "complete"
    # when things happened: every worker line is stamped, and run.json says how long each backend took
    lines = [json.loads(x) for x in (run.raw_dir / "logs" / "test-ok.1.jsonl").read_text().splitlines()]
    stamps = [x["time_unix"] for x in lines]
    assert lines[0]["event"] == "hello" and stamps == sorted(stamps)
    took = {e.get("backend"): e.get("wall_s") for e in run.manifest["events"] if "wall_s" in e}
    assert set(took) == set(settings.backends) and took["test-hang"] >= 4.0  # the timeout it sat through


def test_interrupted_sweep_is_marked_incomplete(tmp_path, plugin_env):
    settings = SweepSettings(backends=["test-ok", "test-ok"], shapes=[(1, 8, 8)], warmup=0, repeats=1)
    calls = []

    def on_event(event):
        calls.append(event.kind)
        if event.kind == "backend_done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(tmp_path / "run", settings, on_event=on_event)
    run = Run.open(tmp_path / "run")
    assert run.status == "incomplete" and "interrupted" in run.manifest["incomplete_reason"]
    measurements, _ = read_rows(run)
    assert len(measurements) == 1  # what was measured before Ctrl-C stays


def test_cli_json_on_plugin_backends(tmp_path, plugin_env):
    from click.testing import CliRunner

    from tracekit.cli import cli

    out = tmp_path / "run"
    res = CliRunner().invoke(
        cli,
        [
            "bench",
            "gemm",
            "--backends",
            "test-ok,test-missing",
            "--shapes",
            "4x8x8",
            "-o",
            str(out),
            "--json",
            "--repeats",
            "2",
            "--warmup",
            "0",
        ],
    )
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["status"] == "complete" and payload["run"] == str(out)
    assert [g["backend"] for g in payload["gemms"]] == ["test-ok"]
    assert [f["kind"] for f in payload["failures"]] == ["unavailable"]


def test_cli_rejects_unknown_backend(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli

    res = CliRunner().invoke(cli, ["bench", "gemm", "--backends", "nope", "-o", str(tmp_path / "r")])
    assert res.exit_code != 0 and isinstance(res.exception, BadInputError)
    assert "torch-bf16" in res.exception.hint


def test_no_gpu_exits_3_without_torch_in_the_parent(tmp_path):
    """torch present, no usable GPU: exit 3 with the reason, nothing created, and the check ran in the fingerprint
    worker: the process driving the sweep never imported torch (3-5 s of every sweep on a GPU host)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is usable here")
    code = (
        "import json, sys\n"
        "from tracekit.cli import main\n"
        "try:\n"
        f"    main(['bench', 'gemm', '--backends', 'torch-bf16', '--shapes', '16x768x6144', '-o', {str(tmp_path / 'r')!r}])\n"
        "except SystemExit as exc:\n"
        "    print(json.dumps({'code': exc.code, 'torch': 'torch' in sys.modules}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 3, "torch": False}, proc.stderr
    assert "no CUDA GPU is usable here (torch.cuda.is_available() is False)" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_missing_torch_exits_3(tmp_path, monkeypatch):
    import importlib.util

    from tracekit.cli import main

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "bench",
                "gemm",
                "--backends",
                "torch-bf16",
                "--shapes",
                "16x768x6144",
                "-o",
                str(tmp_path / "r"),
            ]
        )
    assert exc.value.code == 3
    assert not (tmp_path / "r").exists()  # nothing created when the prerequisite is missing


def test_collectors_import_without_polars_textual_rich():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import tracekit.collectors.bench, tracekit.collectors.worker, tracekit.collectors.backends\n"
        "import tracekit.collectors.instrument, tracekit.collectors.ranges, tracekit.collectors.env\n"
        "import tracekit.collectors.nvml\n"
        "bad = [m for m in ('polars', 'textual', 'rich', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_failure_table_shows_messages_as_written() -> None:
    """The end-of-sweep table prints error text as data: ninja's ``[1/2]`` and a bracketed word are not markup."""
    from rich.console import Console

    from tracekit.commands.bench import _failures_table

    msg = "Ninja build failed. [1/2] nvcc [bold]bmm_fp8.cu[/bold]\nsecond line"
    row = {
        "backend": "flashinfer-fp8",
        "m": 16,
        "n": 768,
        "k": 6144,
        "kind": "crashed",
        "error_type": "RuntimeError",
    }
    console = Console(record=True, width=300)
    console.print(_failures_table([{**row, "message": msg}], "M"))
    text = console.export_text()
    assert "RuntimeError: Ninja build failed. [1/2] nvcc [bold]bmm_fp8.cu[/bold]" in text
    assert "second line" not in text


def test_a_worker_is_profiled_only_under_the_torch_profiler(tmp_path: Path) -> None:
    """Under the PyTorch profiler a worker records its traced passes itself (the prefix of its segment files in
    its environment); with TRACEKIT_TRACE_REPEATS=all it runs inside the profiler runner, which records it all."""
    cmd = SweepSettings(backends=["torch-bf16"], shapes=[(16, 768, 6144)], python="py").worker_cmd(
        "torch-bf16", [(16, 768, 6144)], tmp_path / "ev.jsonl"
    )
    trace, fails = tmp_path / "raw" / "torch_trace.torch-bf16.1.json.gz", tmp_path / "f.jsonl"
    assert profiled_worker(cmd, trace, fails, env={}) == (cmd, {})
    profiled = {"TRACEKIT_TORCH_PROFILER": "/r/raw/torch_trace.json.gz"}
    segments = {"TRACEKIT_TRACE_SEGMENTS": str(tmp_path / "raw" / "torch_trace.torch-bf16.1")}
    assert profiled_worker(cmd, trace, fails, env=profiled) == (cmd, segments)
    assert profiled_worker(cmd, trace, fails, env={**profiled, "TRACEKIT_TRACE_REPEATS": "5"}) == (
        cmd,
        segments,
    )
    for ops, recorded in (("shapes", "ranges"), ("ranges", "ranges"), ("all", "all"), (None, "ranges")):
        env = {**profiled, "TRACEKIT_TRACE_REPEATS": "all"}
        if ops:
            env["TRACEKIT_TORCH_OPS"] = ops
        wrapped, extra = profiled_worker(cmd, trace, fails, env=env)
        assert extra == {}
        assert wrapped[:3] == ["py", "-X", "faulthandler"]
        # capture's default, shapes, records ranges only in a worker: its GEMM ranges name their shapes
        assert wrapped[3:13] == [
            "-m",
            "tracekit.collectors.torchprof",
            "--out",
            str(trace),
            "--failures",
            str(fails),
            "--ops",
            recorded,
            "--",
            "-m",
        ]
        assert wrapped[13:] == cmd[4:]  # tracekit.collectors.worker and its arguments, unchanged
    # a worker that records its own traced passes maps the setting alike
    from tracekit.collectors.harness.timing import TraceWindow

    assert [
        TraceWindow.from_env({"TRACEKIT_TORCH_OPS": o}).ops for o in ("shapes", "ranges", "all", "x")
    ] == [
        "ranges",
        "ranges",
        "all",
        "ranges",
    ]


def test_a_worker_in_the_runner_starts_its_profiler_when_it_imports_torch(tmp_path: Path) -> None:
    """The exact command a sweep under the PyTorch profiler gives each worker with --trace-repeats all, run for
    real (a CPU torch is enough; the worker records that CUDA is missing): the runner's profiler starts when the
    worker imports torch, after the backend registry has only probed for it, so the worker's trace is not empty."""
    pytest.importorskip("torch")
    events, trace, fails = tmp_path / "ev.jsonl", tmp_path / "w.json", tmp_path / "f.jsonl"
    cmd = SweepSettings(backends=["torch-bf16"], shapes=[(16, 16, 16)], warmup=1, repeats=2).worker_cmd(
        "torch-bf16", [(16, 16, 16)], events
    )
    env = {"TRACEKIT_TORCH_PROFILER": str(tmp_path / "p.json"), "TRACEKIT_TRACE_REPEATS": "all"}
    wrapped, extra = profiled_worker(cmd, trace, fails, env=env)
    assert extra == {}
    proc = subprocess.run(wrapped, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert "tracekit torchprof (ranges): profiler start" in proc.stderr, proc.stderr[-2000:]
    assert json.loads(trace.read_text())["traceEvents"], "the worker's trace is empty"
    assert [json.loads(x)["event"] for x in events.read_text().splitlines()][-1] == "finished"


def _profiled_cpu_worker(
    tmp_path: Path, trace_repeats: str, *, warmup: int, repeats: int
) -> tuple[dict[str, list[str]], str]:
    """Runs the test-torch-cpu worker over two shapes, for real, as a sweep under the PyTorch profiler starts it
    with TRACEKIT_TRACE_REPEATS=trace_repeats; returns the GEMM ranges (record_function annotations) in each
    trace file it left, by file name, and its stderr."""
    tmp_path.mkdir()
    events, trace, fails = tmp_path / "ev.jsonl", tmp_path / "torch_trace.w.1.json.gz", tmp_path / "f.jsonl"
    shapes = [(8, 8, 8), (4, 4, 4)]
    settings = SweepSettings(backends=["test-torch-cpu"], shapes=shapes, warmup=warmup, repeats=repeats)
    cmd = settings.worker_cmd("test-torch-cpu", shapes, events)
    env = {
        **os.environ,
        "TRACEKIT_TORCH_PROFILER": str(tmp_path / "p.json"),
        "TRACEKIT_BACKEND_PLUGINS": str(PLUGINS),
        "TRACEKIT_RECORD_FUNCTION": "1",
        "TRACEKIT_TRACE_REPEATS": trace_repeats,
    }
    cmd, extra = profiled_worker(cmd, trace, fails, env=env)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, cwd=tmp_path, env={**env, **extra}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    kinds = [json.loads(x)["event"] for x in events.read_text().splitlines()]
    assert kinds.count("measurement") == 2 and kinds[-1] == "finished", kinds
    found = {}
    for path in sorted(tmp_path.glob("torch_trace.w.1*.json.gz")):
        with gzip.open(path, "rt") as f:
            events_ = json.load(f)["traceEvents"]
        found[path.name] = [
            e["name"]
            for e in events_
            if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("gemm ")
        ]
    return found, proc.stderr


def test_a_profiled_worker_records_only_its_traced_passes(tmp_path: Path) -> None:
    """Under the PyTorch profiler a worker records TRACEKIT_TRACE_REPEATS repeats of each measurement, each in a
    segment of its own: the warm-up and the timed repeats run with no profiler, so the profiler's cost no longer
    grows with --repeats. `all` records every call into one trace, as before."""
    pytest.importorskip("torch")
    bounded, err = _profiled_cpu_worker(tmp_path / "two", "2", warmup=4, repeats=10)
    assert list(bounded) == ["torch_trace.w.1.000.json.gz", "torch_trace.w.1.001.json.gz"], bounded
    assert [len(set(names)) for names in bounded.values()] == [1, 1]  # each segment: one shape's range
    assert [len(names) for names in bounded.values()] == [2, 2], bounded
    assert "2 traced passes of 2 repeats" in err, err[-2000:]
    everything, err = _profiled_cpu_worker(tmp_path / "all", "all", warmup=4, repeats=10)
    assert list(everything) == ["torch_trace.w.1.json.gz"]
    assert len(everything["torch_trace.w.1.json.gz"]) == 2 * (4 + 10), everything
    assert "traced passes" not in err


def test_a_sweep_under_the_torch_profiler_imports_its_workers_traced_passes(tmp_path: Path) -> None:
    """`tracekit capture --torch-profiler -- tracekit bench gemm ...`, for real with a CPU torch: each worker's
    traced passes land in the capture's raw/ as segment files, and the import joins them into ranges of the
    measured GEMMs (two shapes x --trace-repeats 3 calls each), beside the sweep's own measurements."""
    pytest.importorskip("torch")
    pl = pytest.importorskip("polars")
    from tracekit.analyzers.store import load_frames
    from tracekit.collectors.capture import capture

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["TRACEKIT_BACKEND_PLUGINS"] = str(PLUGINS)
    cmd = [sys.executable, "-m", "tracekit", "bench", "gemm", "--backends", "test-torch-cpu,test-ok"]
    cmd += ["--shapes", "8x8x8,4x4x4", "--repeats", "10", "--warmup", "4"]
    run = capture(
        cmd, torch_profiler=True, trace_repeats=3, out=tmp_path / "run", env=env, on_output=lambda *a: None
    )
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest.get("incomplete_reason")
    # test-ok never imports torch: nothing of it for the PyTorch profiler to see, so no segment of its own
    segments = sorted(p.name for p in run.raw_dir.glob("torch_trace.*.*.json.gz"))
    assert segments == [
        "torch_trace.test-torch-cpu.1.000.json.gz",
        "torch_trace.test-torch-cpu.1.001.json.gz",
    ]
    frames = load_frames(run)
    gemm = frames["ranges"].filter(pl.col("name").str.starts_with("gemm backend=test-torch-cpu"))
    assert sorted(gemm.group_by("name").len()["len"].to_list()) == [3, 3], gemm
    measured = frames["measurements"]
    assert measured.filter(pl.col("backend") == "test-torch-cpu")["repeats"].to_list() == [10, 10]
    assert measured.filter(pl.col("backend") == "test-ok").height == 2


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "graph"),
        (
            {"TRACEKIT_RECORD_FUNCTION": "1"},
            "events",
        ),  # a worker inside the profiler runner (--trace-repeats all)
        (
            {"TRACEKIT_RECORD_FUNCTION": "1", "TRACEKIT_TRACE_SEGMENTS": "/r/raw/t"},
            "graph",
        ),  # traced passes only
        ({"TRACEKIT_TRACE_SEGMENTS": "/r/raw/t", "NVTX_INJECTION64_PATH": "/x.so"}, "events"),  # nsys too
        ({"TRACEKIT_TRACE_SEGMENTS": "/r/raw/t", "TRACEKIT_TRACE_REPEATS": "all"}, "graph"),
    ],
)
def test_auto_timing_stays_graph_when_only_traced_passes_are_profiled(monkeypatch, env, expected) -> None:
    """With traced passes the profiler runs outside the timed pass, so `auto` times it as a plain sweep does
    (CUDA-graph replay); any profiler that watches the whole worker still gets eager, event-timed launches."""
    from tracekit.collectors.harness import timing

    for key in (*timing.PROFILER_ENV, "TRACEKIT_TRACE_SEGMENTS", "TRACEKIT_TRACE_REPEATS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(timing, "_window", None)
    assert timing.resolve_timing("auto") == expected
    assert timing.resolve_timing("events") == "events"
