""":class:`MoeSettings`: what ``tracekit bench moe`` runs, as the sweep harness (tracekit.collectors.harness
.run_sweep) reads it (a ``SweepPlan``): the manifest, the cases file and each worker's command."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.harness import LOG_DIR, Case, Options
from tracekit.collectors.worker import MEASUREMENT_KEYS

from .cases import CASES_FILE, CURVE_FILE, MOE_FILE, MOE_KEYS, MoeCase, MoeConfig, build_cases


@dataclass
class MoeSettings(Options):
    """What ``tracekit bench moe`` runs; saved as the run manifest's ``capture``."""

    backends: list[str]
    config: MoeConfig
    tokens: list[int]
    routing: list[str]
    tool: str = field(default="tracekit bench moe", init=False)
    measurements_file: str = field(default=MOE_FILE, init=False, repr=False)
    measurement_keys: tuple[str, ...] = field(default=MOE_KEYS, init=False, repr=False)
    side_files: dict[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=lambda: {"curve": (CURVE_FILE, MEASUREMENT_KEYS)}, init=False, repr=False
    )
    moe_cases: list[MoeCase] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.moe_cases = build_cases(self.config, self.tokens, self.routing, self.seed)

    def manifest(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "backends": list(self.backends),
            "config": asdict(self.config),
            "n": self.config.n,
            "k": self.config.k,
            "tokens": list(self.tokens),
            "routing": list(self.routing),
            "cases": len(self.moe_cases),
            **self.options(),
        }

    @property
    def cases(self) -> list[Case]:
        return [(c.rows, self.config.n, self.config.k, c.case_id) for c in self.moe_cases]

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        cid = next(
            (
                c.case_id
                for c in self.moe_cases
                if c.route == row.get("route") and c.tokens == row.get("tokens")
            ),
            None,
        )
        return (row.get("rows"), row.get("n"), row.get("k"), cid)

    def prepare_run(self, run: Any) -> None:
        """Write the cases (with their counts) where the workers read them."""
        payload = {
            "config": asdict(self.config),
            "cases": [
                {"case_id": c.case_id, "tokens": c.tokens, "route": c.route, "counts": list(c.counts)}
                for c in self.moe_cases
            ],
        }
        logs = run.raw_dir / LOG_DIR  # not imported: the cases are the workers' input, not a record
        logs.mkdir(parents=True, exist_ok=True)
        self._cases_path = logs / CASES_FILE
        self._cases_path.write_text(json.dumps(payload) + "\n", encoding="utf-8")

    def worker_cmd(self, backend: str, cases: Iterable[Case], out: Path) -> list[str]:
        ids = ",".join(str(c[3]) for c in cases)
        case_args = ["--cases", str(self._cases_path), "--ids", ids]
        return self.worker_cmd_for("tracekit.collectors.moe", backend, case_args, out)
