"""The harness's settings and the sweep's side of a family: :class:`Options` (every family's run settings and
the worker options they become), the :class:`SweepPlan` protocol, and the files and exit status the sweep and
its workers share."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tracekit.run import Run

FAILURES_FILE = "failures.jsonl"
LOG_DIR = "logs"
EXIT_POISONED = 3
"""A worker's exit status after a fault that poisons the CUDA context (the fault is already recorded)."""

Case = tuple[int, ...]
"""A case as the sweep sees it: (M, N, K) first (named in failure rows and messages), then the family's own."""


@dataclass(kw_only=True)
class Options:
    """How every family runs its cases: warm-up and timed repeats, the per-case timeout of a worker, the timing
    mode (``harness.timing``), the CUDA device, the seed of the inputs and the worker's interpreter."""

    warmup: int = 10
    repeats: int = 25
    timeout: float = 300.0
    timing: str = "auto"
    device: int = 0
    seed: int = 0
    python: str = field(default_factory=lambda: sys.executable)

    def options(self) -> dict[str, Any]:
        """These settings for the run manifest's ``capture``, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(Options)}

    def worker_cmd_for(self, module: str, backend: str, case_args: list[str], out: Path) -> list[str]:
        """``python -X faulthandler -m MODULE --backend B <case_args> --out OUT <the options>``."""
        head = [self.python, "-X", "faulthandler", "-m", module, "--backend", backend]
        return [*head, *case_args, *self.worker_args(out)]

    def worker_args(self, out: Path) -> list[str]:
        """The options every worker takes (:func:`add_worker_options` reads them)."""
        return [
            "--out",
            str(out),
            "--warmup",
            str(self.warmup),
            "--repeats",
            str(self.repeats),
            "--timing",
            self.timing,
            "--device",
            str(self.device),
            "--seed",
            str(self.seed),
        ]


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """The worker side of :meth:`Options.worker_args`."""
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--timing", choices=("auto", "graph", "events"), default="auto")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)


@runtime_checkable
class SweepPlan(Protocol):
    """What :func:`run_sweep` reads of a family's settings (``bench.SweepSettings``, ``moe.MoeSettings``)."""

    backends: list[str]
    timeout: float
    device: int
    python: str
    tool: str
    measurements_file: str
    """The raw file of the family's measurement rows (``measurements.jsonl``, ``moe.jsonl``)."""
    measurement_keys: tuple[str, ...]
    side_files: dict[str, tuple[str, tuple[str, ...]]]
    """Worker events other than ``measurement`` / ``failure`` and where their rows go (event -> (file, keys))."""

    @property
    def cases(self) -> list[Case]: ...

    def manifest(self) -> dict[str, Any]:
        """The run manifest's ``capture``."""
        ...

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        """The case a measurement row belongs to."""
        ...

    def worker_cmd(self, backend: str, cases: Iterable[Case], out: Path) -> list[str]:
        """The command of a worker running ``backend`` over ``cases``, writing events to ``out``."""
        ...

    def prepare_run(self, run: Run) -> None:
        """Anything the workers read from the new run before they start (the MoE cases file)."""
        ...
