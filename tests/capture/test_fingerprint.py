"""One environment fingerprint: ``tracekit capture`` (in its own process) and ``tracekit bench`` (in a worker
running the user's python) write the same keys in the same order for the same machine, with torch absent and
with a CPU build of torch; a worker that never answers and a step that raises keep that shape; and the committed
H200 / H100 runs hold exactly those keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tracekit.collectors import env as E
from tracekit.collectors.capture.common import _fingerprint
from tracekit.collectors.harness import take_fingerprint

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = 'raise ImportError("torch hidden for this test")\n'


def _no_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch unimportable here (``sys.modules`` entry None) and in the worker (a ``torch`` package that raises,
    first on its PYTHONPATH)."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(NO_TORCH)
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))


def _both(tmp_path: Path) -> tuple[dict, dict]:
    capture = json.loads(json.dumps(_fingerprint(), default=str))  # as run.json holds it
    bench = take_fingerprint(sys.executable, 0, tmp_path / "logs" / "fingerprint.jsonl")
    return capture, bench


def _same_machine(capture: dict, bench: dict) -> None:
    assert list(capture) == list(bench)
    for key in (*E.HOST_FIELDS, "versions", "cuda_available", "device_count", "cuda_runtime", "nvml"):
        assert capture[key] == bench[key], key


def test_capture_and_bench_agree_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_torch(tmp_path, monkeypatch)
    capture, bench = _both(tmp_path)
    assert "fingerprint_error" not in bench, bench.get("fingerprint_error")  # the worker answered
    _same_machine(capture, bench)
    assert list(capture) == [*E.DEVICE_FIELDS, "torch_error", *E.DRIVER_FIELDS, "versions", *E.HOST_FIELDS]
    assert capture["torch_error"].startswith("ModuleNotFoundError") and "torch hidden" in bench["torch_error"]
    assert capture["cuda_available"] is False and capture["gpu_name"] is None


def test_capture_and_bench_agree_with_cpu_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: this checks the CPU case")
    capture, bench = _both(tmp_path)
    assert "fingerprint_error" not in bench, bench.get("fingerprint_error")
    _same_machine(capture, bench)
    assert list(capture) == list(E.FIELDS)
    assert capture["versions"]["torch"] == torch.__version__


def test_a_worker_that_never_answers_keeps_the_keys(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-python")
    got = take_fingerprint(missing, 0, tmp_path / "fingerprint.jsonl")
    assert list(got) == [*E.FIELDS, "fingerprint_error"]
    assert "no-such-python" in got["fingerprint_error"] and got["gpu_name"] is None
    crashed = tmp_path / "crash.sh"
    crashed.write_text("#!/bin/sh\necho 'worker went away' >&2\nexit 3\n")
    crashed.chmod(0o755)
    got = take_fingerprint(str(crashed), 0, tmp_path / "crash" / "fingerprint.jsonl")
    assert list(got) == [*E.FIELDS, "fingerprint_error"] and "worker went away" in got["fingerprint_error"]


def test_a_step_that_raises_leaves_its_fields_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(device: int = 0) -> dict:
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(E, "device_info", broken)
    got = _fingerprint()
    assert list(got) == [*E.FIELDS, "fingerprint_error"]
    assert all(got[k] is None for k in E.DEVICE_FIELDS)
    assert got["fingerprint_error"] == "device: RuntimeError: driver exploded" and got["hostname"]


def test_committed_runs_hold_exactly_the_fingerprint_keys() -> None:
    """Every captured or benchmarked sample run (real H200 / H100 machines) wrote :data:`FIELDS`, in order."""
    seen = 0
    for path in sorted((ROOT / "samples").glob("*/run.json")):
        env = json.loads(path.read_text()).get("environment")
        if env:
            assert list(env) == list(E.FIELDS), path.parent.name
            seen += 1
    assert seen >= 20
