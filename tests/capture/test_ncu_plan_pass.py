"""The planning pass (collectors/capture/plan.py ``_plan_pass``): ``--ncu`` without ``--nsys``, choosing its GEMMs
from a timeline, runs nsys first with the nsys pass's own command line, and the ncu pass profiles the GEMMs that
timeline shows, exactly as under ``--nsys --ncu``; where no nsys is usable, or with ``--no-plan-pass``, the ncu
pass runs as bounded and says why. Stand-in tools: an nsys that writes the H100 serving sample's real export and
records its command line, an ncu that records its own."""

from __future__ import annotations

import lzma
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.serve_sample import SERVE_GEMMS, SERVE_NSYS
from tracekit.collectors.capture import CaptureSettings, NcuSettings, capture
from tracekit.collectors.capture.passes import PLANNING_SAID
from tracekit.collectors.capture.plan import _plan
from tracekit.naming import NCU_FILTER
from tracekit.run import Run

PY = sys.executable
SAMPLE = SERVE_NSYS
GEMMS = SERVE_GEMMS
OUT_OF = 'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Tools:
    """Stand-in nsys and ncu in ``tmp``; each writes its command line, one argument a line, beside itself."""

    def __init__(self, tmp: Path, timeline: Path | None, nsys_exit: int = 0) -> None:
        self.nsys_argv, self.ncu_argv = tmp / "nsys.argv", tmp / "ncu.argv"
        writes = (
            f'printf rep > "$out.nsys-rep"\ncp {timeline} "$out.sqlite"\n' if timeline is not None else ""
        )
        self.nsys = _exe(
            tmp / "bin/nsys",
            'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
            f'printf "%s\\n" "$@" > {self.nsys_argv}\n' + OUT_OF + writes + f"exit {nsys_exit}\n",
        )
        self.ncu = _exe(
            tmp / "bin/ncu",
            'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
            f'printf "%s\\n" "$@" > {self.ncu_argv}\n' + OUT_OF + 'printf report > "$out.ncu-rep"\nexit 0\n',
        )

    def env(self, nsys: str | None) -> dict[str, str]:
        """The program's environment: no tool on PATH; ``$TRACEKIT_NSYS`` names ``nsys`` where given."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
        env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
        if nsys is not None:
            env["TRACEKIT_NSYS"] = nsys
        return env


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nsys") / "nsys.sqlite"
    out.write_bytes(lzma.decompress(SAMPLE.read_bytes()))
    return out


def _capture(
    tmp_path: Path, stand_in: Tools, env: dict[str, str], events: list[tuple[str, str]], **kw
) -> Run:
    return capture(
        [PY, "-c", "pass"], ncu=True, ncu_path=stand_in.ncu, ranges="serve", runs_dir=tmp_path / "runs",
        env=env, on_output=lambda *a: None, on_event=lambda ev: events.append((ev.phase, ev.message)), **kw,
    )  # fmt: skip


def test_ncu_alone_runs_a_planning_pass_whose_timeline_chooses_the_gemms(
    tmp_path: Path, timeline: Path
) -> None:
    stand_in = Tools(tmp_path, timeline)
    events: list[tuple[str, str]] = []
    run = _capture(tmp_path, stand_in, stand_in.env(str(stand_in.nsys)), events)
    raw = run.path.absolute() / "raw"
    # the nsys pass's own command line: CUDA + NVTX, no CPU sampling or context switches, graph nodes, SQLite
    assert stand_in.nsys_argv.read_text().splitlines() == [
        "profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "--cuda-graph-trace=node",
        "--export=sqlite", "-o", str(raw / "nsys"), "--force-overwrite", "true", PY, "-c", "pass",
    ]  # fmt: skip
    # the ncu pass profiles the GEMMs of that timeline, each place once, as under --nsys --ncu
    assert stand_in.ncu_argv.read_text().splitlines() == [
        "--nvtx", "--nvtx-include", "regex:.*(?:serve).*/",
        *[a for s in NcuSettings().sections for a in ("--section", s)],
        "--metrics", ",".join(NcuSettings().metrics),
        "--clock-control", "none", "--target-processes", "all",
        "--kernel-name-base", "function",
        "--kernel-name", "regex:^(?:" + "|".join([*GEMMS, "splitKreduce_kernel"]) + ")$",
        "--filter-mode", "per-launch-config", "--launch-count", "6",
        "-o", str(raw / "ncu"), "--force-overwrite", PY, "-c", "pass",
    ]  # fmt: skip
    # said before each pass starts: what the planning pass is for, then what ncu profiles and from what
    said = [m for _, m in events]
    assert said.index(PLANNING_SAID) < next(i for i, m in enumerate(said) if m.startswith("nsys pass:"))
    bound = next(m for p, m in events if p == "ncu" and m.startswith("ncu profiles"))
    assert "from the planning pass's timeline: 6 GEMM kernel(s)" in bound
    assert said.index(bound) < next(i for i, m in enumerate(said) if m.startswith("ncu pass:"))
    # run.json: the nsys pass is the planning pass, with its wall time; the ncu pass says its launches came from it
    cap = Run.open(run.path).manifest["capture"]
    assert run.status == "complete" and cap["tools"] == ["nsys", "ncu"]
    assert cap["nsys"]["role"] == "plan" and cap["nsys"]["found_via"] == "$TRACEKIT_NSYS"
    assert cap["ncu"]["plan_pass"] is True
    planning, ncu_pass = cap["passes"]
    assert planning["tool"] == "nsys" and planning["role"] == "plan" and "role" not in ncu_pass
    assert {"raw/nsys.sqlite", "raw/nsys.nsys-rep"} <= set(planning["files"])
    plan = ncu_pass["ncu"]["plan"]
    assert plan == {
        "ran": True, "tool": "nsys", "wall_s": planning["wall_s"], "status": "ok", "chose_launches": True,
    }  # fmt: skip
    assert plan["wall_s"] > 0
    assert ncu_pass["ncu"]["selection"]["source"] == "planning pass's timeline"
    assert ncu_pass["ncu"]["selection"]["gemm_kernels"] == GEMMS


def test_the_planning_pass_timeline_is_imported_as_a_timeline(tmp_path: Path, timeline: Path) -> None:
    from tracekit.analyzers.importer import import_into
    from tracekit.analyzers.store import load_frames

    stand_in = Tools(tmp_path, timeline)
    run = _capture(tmp_path, stand_in, stand_in.env(str(stand_in.nsys)), [])
    import_into(Run.open(run.path))
    run = Run.open(run.path)
    nsys = [s for s in run.manifest["sources"] if s["path"] == "raw/nsys.sqlite"]
    assert nsys and nsys[0].get("status", "ok") == "ok", run.manifest["sources"]
    kernels = load_frames(run)["kernels"]
    assert kernels.height > 4000
    assert kernels.filter(kernels["name"].str.starts_with("nvjet_sm90_tst_256x128")).height > 0


def test_without_a_usable_nsys_the_ncu_pass_falls_back_and_says_why(tmp_path: Path, timeline: Path) -> None:
    stand_in = Tools(tmp_path, timeline)
    missing = str(tmp_path / "no-such-nsys")
    events: list[tuple[str, str]] = []
    run = _capture(tmp_path, stand_in, stand_in.env(missing), events)
    assert not stand_in.nsys_argv.exists()
    argv = stand_in.ncu_argv.read_text().splitlines()
    assert "--kernel-name" not in argv
    assert argv[argv.index("--filter-mode") :][:4] == [
        "--filter-mode",
        "per-launch-config",
        "--launch-count",
        "2",
    ]
    why = f"no nsys for a planning pass: $TRACEKIT_NSYS names {missing}, which is not an executable nsys"
    bound = next(m for p, m in events if p == "ncu" and m.startswith("ncu profiles"))
    assert (
        f"every kernel, not only GEMMs: no timeline to choose them from ({why}; --nsys-path PATH names one)"
        in bound
    )
    assert PLANNING_SAID not in [m for _, m in events]
    cap = Run.open(run.path).manifest["capture"]
    assert run.status == "complete" and cap["tools"] == ["ncu"] and "nsys" not in cap
    (ncu_pass,) = cap["passes"]
    assert ncu_pass["ncu"]["plan"] == {"ran": False, "reason": why}
    assert "selection" not in ncu_pass["ncu"] and ncu_pass["ncu"]["bound"] == bound


def test_no_plan_pass_skips_it_from_the_command_line(tmp_path: Path, timeline: Path) -> None:
    from tracekit.cli import cli

    stand_in = Tools(tmp_path, timeline)
    result = CliRunner().invoke(
        cli,
        ["capture", "--ncu", "--ncu-path", str(stand_in.ncu), "--ranges", "serve", "--no-plan-pass",
         "--no-import", "-o", str(tmp_path / "run"), "--", PY, "-c", "pass"],
        env=stand_in.env(str(stand_in.nsys)),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert not stand_in.nsys_argv.exists() and "--kernel-name" not in stand_in.ncu_argv.read_text()
    cap = Run.open(tmp_path / "run").manifest["capture"]
    assert cap["ncu"]["plan_pass"] is False and cap["tools"] == ["ncu"]
    assert cap["passes"][0]["ncu"]["plan"] == {"ran": False, "reason": "--no-plan-pass"}
    assert "no timeline to choose them from (--no-plan-pass)" in cap["passes"][0]["ncu"]["bound"]


def test_a_failed_planning_pass_leaves_the_ncu_pass_bounded(tmp_path: Path) -> None:
    stand_in = Tools(tmp_path, None, nsys_exit=1)  # nsys fails and writes nothing
    events: list[tuple[str, str]] = []
    run = _capture(tmp_path, stand_in, stand_in.env(str(stand_in.nsys)), events)
    assert "--kernel-name" not in stand_in.ncu_argv.read_text()
    bound = next(m for p, m in events if p == "ncu" and m.startswith("ncu profiles"))
    assert "the planning pass's timeline is missing (no raw/nsys.sqlite)" in bound
    cap = Run.open(run.path).manifest["capture"]
    planning, ncu_pass = cap["passes"]
    assert planning["role"] == "plan" and planning["status"] == "incomplete"
    assert (
        ncu_pass["ncu"]["plan"]["status"] == "incomplete"
        and ncu_pass["ncu"]["plan"]["chose_launches"] is False
    )
    # the run holds what the planning pass left: it is marked as incomplete as an --nsys pass would be
    assert run.status == "incomplete"


@pytest.mark.parametrize(
    ("tools", "ncu", "ranks", "planning"),
    [
        (("ncu",), NcuSettings(nvtx_include="regex:.*(?:serve).*/"), False, True),
        (("ncu",), NcuSettings(nvtx_include=None), False, True),  # --all-kernels
        (("nsys", "ncu"), NcuSettings(nvtx_include=None), False, False),  # the --nsys pass chooses
        (("ncu",), NcuSettings(nvtx_include=NCU_FILTER), False, False),  # tracekit's ranges: one call each
        (("ncu",), NcuSettings(nvtx_include=None, kernels="all"), False, False),
        (("ncu",), NcuSettings(nvtx_include=None, launch_count=5), False, False),
        (("ncu",), NcuSettings(nvtx_include=None, extra=("--kernel-name=regex:nvjet",)), False, False),
        (("ncu",), NcuSettings(nvtx_include=None), True, False),  # ranks: no selection
    ],
)
def test_when_a_planning_pass_runs(
    tmp_path: Path, tools: tuple[str, ...], ncu: NcuSettings, ranks: bool, planning: bool
) -> None:
    stand_in = Tools(tmp_path, None)
    settings = CaptureSettings(tools=tools, ncu=NcuSettings(**{**ncu.__dict__, "path": stand_in.ncu}))
    if ranks:
        from tracekit.collectors.ranks import plan_ranks

        settings = CaptureSettings(
            tools=tools,
            ncu=settings.ncu,
            ranks=plan_ranks([PY, "-c", "pass"], launcher="mpirun -np 2", rank_env=None),
        )
    plan = _plan([PY, "-c", "pass"], settings, stand_in.env(str(stand_in.nsys)))
    assert plan.planning is planning
    assert ("nsys" in plan.passes) is (planning or "nsys" in tools)
    assert plan.passes[-1] == "ncu" and plan.no_planning is None
