"""One environment fingerprint, taken in a worker process: ``tracekit capture`` (its worker in tracekit's own
python, started with the capture) and ``tracekit bench`` (its worker in the user's python) write the same keys in
the same order for the same machine, the keys and values this process's own ``fingerprint()`` gives, with torch
absent and with a CPU build of torch; a worker that fails, hangs, never answers or is interrupted by Ctrl-C keeps
that shape, says why in ``fingerprint_error``, leaves no process behind, and never costs the capture; and the
committed H200 / H100 runs hold exactly those keys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracekit.collectors import env as E
from tracekit.collectors.capture import capture
from tracekit.collectors.harness import take_fingerprint
from tracekit.run import Run

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
NO_TORCH = 'raise ImportError("torch hidden for this test")\n'
HANGS = "import time\ntime.sleep(300)\n"
CRASHES = "import os, sys\nsys.stderr.write('torch crashed on import\\n')\nsys.stderr.flush()\nos._exit(3)\n"


def _shadow_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A ``torch`` package running ``body`` on import, first on the PYTHONPATH of every process started from here
    (the fingerprint workers) and first on this process's path; returns its folder, which names the processes
    that inherit it."""
    shadow = tmp_path / "shadow"
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text(body)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.syspath_prepend(str(shadow))
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    return shadow


def _no_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """torch unimportable, the same way, here and in every worker."""
    return _shadow_torch(tmp_path, monkeypatch, NO_TORCH)


def _tools_off() -> dict[str, str]:
    """The program's environment with no profiler on the PATH: a plain pass."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
    return env


def _captured(tmp_path: Path, code: str = "pass", **kw) -> Run:
    """A real capture of ``python -c code`` (plain pass), reopened from its run.json."""
    run = capture(
        [PY, "-c", code], runs_dir=tmp_path / "runs", env=_tools_off(), on_output=lambda *a: None, **kw
    )
    return Run.open(run.path)


def _holding(marker: Path) -> list[int]:
    """Processes still alive whose environment names ``marker`` (Linux /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if str(marker).encode() in (proc / "environ").read_bytes():
                stat = (proc / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


def _both(tmp_path: Path) -> tuple[dict, dict]:
    capture_env = _captured(tmp_path).manifest["environment"]  # as run.json holds it
    bench = take_fingerprint(sys.executable, 0, tmp_path / "logs" / "fingerprint.jsonl")
    return capture_env, bench


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
    assert capture["torch_error"] == "ImportError: torch hidden for this test" == bench["torch_error"]
    assert capture["cuda_available"] is False and capture["gpu_name"] is None


def test_capture_records_what_its_own_process_would_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker changes where the fingerprint is taken, not what run.json holds: the same keys, in the same
    order, with the same values as :func:`fingerprint` called here (as capture did before it had a worker)."""
    _no_torch(tmp_path, monkeypatch)
    run = _captured(tmp_path)
    here = json.loads(json.dumps(E.fingerprint(), default=str))
    assert run.manifest["environment"] == here
    assert list(run.manifest["environment"]) == list(here)
    assert run.record.environment.torch_error == "ImportError: torch hidden for this test"
    assert run.status == "complete"
    assert [e["message"] for e in run.manifest["events"] if e["phase"] == "environment"] == [
        "environment recorded"
    ]


def test_a_hung_fingerprint_worker_times_out_and_the_capture_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = _shadow_torch(tmp_path, monkeypatch, HANGS)
    monkeypatch.setenv(E.ENV_TIMEOUT, "2")
    marker = tmp_path / "ran"
    run = _captured(tmp_path, f"import pathlib; pathlib.Path({str(marker)!r}).touch()")
    assert marker.exists() and run.status == "complete", run.manifest["incomplete_reason"]
    env = run.manifest["environment"]
    assert list(env) == [*E.FIELDS, "fingerprint_error"]
    assert env["fingerprint_error"] == "the fingerprint worker did not answer within 2 s"
    assert env["gpu_name"] is None and env["hostname"] and env["versions"]["tracekit"]
    warnings = [e["message"] for e in run.manifest["events"] if e["level"] == "warning"]
    assert "environment fingerprint incomplete: the fingerprint worker did not answer within 2 s" in warnings
    assert _holding(shadow) == []


def test_a_crashed_fingerprint_worker_says_why_and_the_capture_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = _shadow_torch(tmp_path, monkeypatch, CRASHES)
    run = _captured(tmp_path)
    assert run.status == "complete"
    env = run.manifest["environment"]
    assert list(env) == [*E.FIELDS, "fingerprint_error"]
    assert env["fingerprint_error"] == "torch crashed on import"
    assert run.record.environment.fingerprint_error == "torch crashed on import"
    assert _holding(shadow) == []


def test_ctrl_c_while_the_fingerprint_worker_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (SIGINT to tracekit) while the program runs and the fingerprint worker is still inside ``import
    torch``: exit 130, the run incomplete with the environment tracekit's process can read and why the rest is
    missing, and the worker stopped by tracekit, not left behind."""
    shadow = _shadow_torch(tmp_path, monkeypatch, HANGS)
    runs = tmp_path / "runs"
    ready = tmp_path / "ready"
    program = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    env = {**_tools_off(), "PYTHONPATH": str(shadow)}
    cmd = [PY, "-m", "tracekit", "capture", "--runs-dir", str(runs), "--no-import", "--json", "--", PY, "-c"]
    proc = subprocess.Popen(
        [*cmd, program], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), (
            proc.stderr.read().decode() if proc.poll() is not None else "the program never ran"
        )
        assert _holding(shadow), "the fingerprint worker is not running beside the program"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err.decode()
    assert json.loads(out)["interrupted"] is True
    (folder,) = runs.iterdir()
    run = Run.open(folder)
    assert run.status == "incomplete" and "interrupted (Ctrl-C)" in run.manifest["incomplete_reason"]
    environment = run.manifest["environment"]
    assert list(environment) == [*E.FIELDS, "fingerprint_error"] and environment["hostname"]
    assert environment["gpu_name"] is None
    assert environment["fingerprint_error"] == "the capture was interrupted before the fingerprint answered"
    assert _holding(shadow) == []


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
    got = E.fingerprint()
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
