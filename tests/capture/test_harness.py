"""The sweep harness (collectors/harness.py) with a third benchmark family defined here: no torch, its own case,
backends and row keys. It runs through the same worker loop and sweep driver as ``bench gemm`` and ``bench moe``
and yields measurement rows, failure rows (an exception, a missing package, an unknown backend, a real SIGSEGV)
and logs."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tracekit.collectors import failures as F
from tracekit.collectors.failures import FAILURE_KEYS
from tracekit.collectors.harness import (
    BenchBackend,
    Case,
    CaseContext,
    Family,
    Options,
    SweepPlan,
    add_worker_options,
    run_sweep,
    run_worker,
)
from tracekit.collectors.harness.timing import Timing, time_calls
from tracekit.run import Run

TINY_KEYS = ("backend", "op", "n", "time_us", "repeats", "timing", "status", "torch_loaded")
CRASH, RAISE = 666, 13
CUBLAS = "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmulAlgoGetHeuristic"


@dataclass
class Summer:
    """A backend of the tiny family: ``sum(range(n))``; ``missing`` names a module that is not installed."""

    name: str
    missing: str | None = None
    op: str = "sum"
    packages: tuple[str, ...] = ()
    timer: str = "wall"

    def available(self) -> tuple[bool, str]:
        return (False, f"{self.missing} not installed") if self.missing else (True, "")


def tiny_row(backend: Summer, n: int, t: Timing) -> dict[str, Any]:
    """The tiny family's one measurement row."""
    return {
        "backend": backend.name,
        "op": backend.op,
        "n": n,
        "time_us": t.median,
        "repeats": len(t.times),
        "timing": t.how,
        "status": "ok",
        "torch_loaded": "torch" in sys.modules,
    }


class TinyFamily:
    """Cases are integers n, named (n, 1, 1) to the sweep; n = 13 raises cuBLAS's NVFP4 error, n = 666 dies by a
    real SIGSEGV."""

    BACKENDS: ClassVar[dict[str, Summer]] = {
        "tiny": Summer("tiny"),
        "tiny-missing": Summer("tiny-missing", "no_such_xyz"),
    }

    def cases(self, args: argparse.Namespace) -> list[int]:
        return [int(s) for s in args.sizes.split(",")]

    def key(self, case: int) -> list[int]:
        return [case, 1, 1]

    def backend(self, name: str) -> Summer:
        if name not in self.BACKENDS:
            raise KeyError(f"unknown tiny backend {name!r}; known: {', '.join(self.BACKENDS)}")
        return self.BACKENDS[name]

    def setup(self, backend: Summer, timer: Any, seed: int) -> None:
        assert timer is None  # a wall backend gets no CUDA timer

    def measure(self, backend: Summer, case: int, ctx: CaseContext) -> tuple[dict[str, Any], str]:
        if case == RAISE:
            raise RuntimeError(CUBLAS)
        if case == CRASH:
            os.kill(os.getpid(), signal.SIGSEGV)
        t = time_calls(ctx.timer, [lambda: sum(range(case))], ctx.warmup, ctx.repeats)
        return tiny_row(backend, case, t), ""


def worker_main(argv: list[str] | None = None) -> int:
    """The tiny family's worker process."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--sizes", required=True)
    add_worker_options(parser)
    return run_worker(TinyFamily(), parser.parse_args(argv))


@dataclass
class TinyPlan(Options):
    """The tiny family's sweep plan."""

    backends: list[str]
    sizes: list[int]
    tool: str = field(default="tracekit bench tiny", init=False)
    measurements_file: str = field(default="tiny.jsonl", init=False)
    measurement_keys: tuple[str, ...] = field(default=TINY_KEYS, init=False)
    side_files: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict, init=False)

    @property
    def cases(self) -> list[Case]:
        return [(n, 1, 1) for n in self.sizes]

    def manifest(self) -> dict[str, Any]:
        return {"tool": self.tool, "backends": self.backends, "sizes": self.sizes}

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return (row.get("n"), 1, 1)

    def worker_cmd(self, backend: str, cases: Iterable[Case], out: Path) -> list[str]:
        boot = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_harness as t; "
        boot += "sys.exit(t.worker_main())"
        sizes = ",".join(str(c[0]) for c in cases)
        head = [self.python, "-X", "faulthandler", "-c", boot, "--backend", backend, "--sizes", sizes]
        return [*head, *self.worker_args(out)]

    def prepare_run(self, run: Run) -> None:
        return None


def test_the_three_families_and_their_plans_speak_the_protocols() -> None:
    from tracekit.collectors.backends import get_backend
    from tracekit.collectors.bench import SweepSettings
    from tracekit.collectors.moe import GLM5, MOE_BACKENDS, MoeFamily, MoeSettings
    from tracekit.collectors.worker import GemmFamily

    for family in (GemmFamily(), MoeFamily(), TinyFamily()):
        assert isinstance(family, Family), family
    for backend in (
        get_backend("torch-bf16"),
        MOE_BACKENDS["torch-bf16-grouped"],
        TinyFamily.BACKENDS["tiny"],
    ):
        assert isinstance(backend, BenchBackend), backend
    plans = (
        SweepSettings(backends=["torch-bf16"], shapes=[(1, 2, 3)]),
        MoeSettings(backends=["torch-bf16-grouped"], config=GLM5, tokens=[4], routing=["uniform"]),
        TinyPlan(backends=["tiny"], sizes=[1]),
    )
    for plan in plans:
        assert isinstance(plan, SweepPlan), plan
        assert plan.manifest()["tool"].startswith("tracekit bench ")
    assert not isinstance(object(), Family) and not isinstance(object(), SweepPlan)


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _worker(tmp_path: Path, backend: str, sizes: str) -> tuple[int, list[dict[str, Any]]]:
    out = tmp_path / f"{backend}.jsonl"
    args = ["--backend", backend, "--sizes", sizes, "--out", str(out), "--warmup", "1", "--repeats", "3"]
    rc = worker_main(args)
    return rc, _events(out)


def test_a_third_family_runs_through_the_worker_loop(tmp_path: Path) -> None:
    rc, events = _worker(tmp_path, "tiny", f"5,{RAISE},7")
    assert rc == 0
    assert [e["event"] for e in events] == [
        "hello",
        *("start", "measurement", "done"),
        *("start", "failure", "done"),
        *("start", "measurement", "done"),
        "finished",
    ]
    rows = [e["row"] for e in events if e["event"] == "measurement"]
    assert [(r["n"], r["repeats"], r["timing"], r["status"]) for r in rows] == [
        (5, 3, "wall", "ok"),
        (7, 3, "wall", "ok"),
    ]
    assert all(r["time_us"] > 0 for r in rows)
    (failure,) = [e for e in events if e["event"] == "failure"]
    assert failure["shape"] == [RAISE, 1, 1] and failure["poisoned"] is False
    row = failure["row"]
    assert tuple(row) == FAILURE_KEYS
    assert (row["backend"], row["op"], row["m"], row["kind"]) == ("tiny", "sum", RAISE, F.UNSUPPORTED)
    assert row["error_type"] == "RuntimeError" and CUBLAS in row["message"]
    assert "test_harness.py" in row["traceback"]  # the full traceback, from the family's own code


def test_setup_failures_fail_every_case_of_the_worker(tmp_path: Path) -> None:
    rc, events = _worker(tmp_path, "tiny-missing", "1,2")
    assert rc == 0
    rows = [e["row"] for e in events if e["event"] == "failure"]
    assert [(r["m"], r["kind"], r["message"]) for r in rows] == [
        (1, F.UNAVAILABLE, "no_such_xyz not installed"),
        (2, F.UNAVAILABLE, "no_such_xyz not installed"),
    ]
    rc, events = _worker(tmp_path, "nope", "3")
    (row,) = [e["row"] for e in events if e["event"] == "failure"]
    assert (row["backend"], row["op"], row["kind"], row["error_type"]) == (
        "nope",
        None,
        F.UNAVAILABLE,
        "KeyError",
    )
    assert row["message"] == "unknown tiny backend 'nope'; known: tiny, tiny-missing"


def test_a_third_family_runs_through_the_sweep_with_a_real_crash(tmp_path: Path) -> None:
    plan = TinyPlan(backends=["tiny", "tiny-missing"], sizes=[3, CRASH, 4], warmup=1, repeats=2, timeout=60)
    events = []
    result = run_sweep(tmp_path / "run", plan, on_event=events.append)
    run = Run.open(tmp_path / "run")
    assert run.status == "complete" and result.status == "complete"
    assert run.manifest["capture"] == {
        "tool": "tracekit bench tiny",
        "backends": plan.backends,
        "sizes": plan.sizes,
    }

    lines = [json.loads(x) for x in (run.raw_dir / "tiny.jsonl").read_text().splitlines()]
    assert [tuple(r) for r in lines] == [TINY_KEYS, TINY_KEYS]
    assert [(r["backend"], r["n"]) for r in lines] == [("tiny", 3), ("tiny", 4)]  # a fresh worker took case 4
    assert not any(r["torch_loaded"] for r in lines), (
        "the harness imported torch for a family that needs none"
    )

    failures = [json.loads(x) for x in (run.raw_dir / "failures.jsonl").read_text().splitlines()]
    assert [(f["backend"], f["m"], f["kind"]) for f in failures] == [
        ("tiny", CRASH, F.CRASHED),
        ("tiny-missing", 3, F.UNAVAILABLE),
        ("tiny-missing", CRASH, F.UNAVAILABLE),
        ("tiny-missing", 4, F.UNAVAILABLE),
    ]
    crash = failures[0]
    assert crash["error_type"] == "SIGSEGV" and crash["message"].startswith(
        f"worker died by SIGSEGV on {CRASH}x1x1"
    )
    assert "Fatal Python error: Segmentation fault" in crash["traceback"]  # the worker's stderr, in full
    assert result.failures == failures

    done = [(e.backend, e.shape, e.data["status"]) for e in events if e.kind == "shape_done"]
    assert done[:3] == [
        ("tiny", (3, 1, 1), "ok"),
        ("tiny", (CRASH, 1, 1), F.CRASHED),
        ("tiny", (4, 1, 1), "ok"),
    ]
    logs = sorted(p.name for p in (run.raw_dir / "logs").iterdir())
    assert {"tiny.1.jsonl", "tiny.1.stderr.txt", "tiny.2.jsonl", "tiny-missing.1.jsonl"} <= set(logs)
    assert {s["path"] for s in run.manifest["sources"]} == {"raw/tiny.jsonl", "raw/failures.jsonl"}
