"""Typed capture settings (collectors/capture/settings.py): ``tracekit capture`` turns its options into one frozen
:class:`CaptureSettings` that reaches the passes unchanged; the check fills in what the environment decides; the
flat keywords of ``capture()`` build the same settings. What the passes do with them is tested by the capture tests
(test_capture*.py), which run real passes with stand-in profilers."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracekit.collectors.capture as capture_pkg
from tracekit.cli import cli
from tracekit.collectors import tools
from tracekit.collectors.capture import (
    CaptureSettings,
    NcuSettings,
    NsysSettings,
    TorchSettings,
    capture,
    ranges_filter,
)
from tracekit.collectors.capture.plan import _check_options
from tracekit.naming import NCU_FILTER

PY = sys.executable


class _Given(Exception):
    """Stops the command once capture() has been handed its settings."""


def _cli_settings(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[list[str], CaptureSettings]:
    seen: dict[str, Any] = {}

    def record(cmd: list[str], settings: CaptureSettings, **kw: Any) -> None:
        seen.update(cmd=cmd, settings=settings)
        raise _Given

    monkeypatch.setattr(capture_pkg, "capture", record)
    res = CliRunner().invoke(cli, ["capture", *args])
    assert isinstance(res.exception, _Given), res.output
    return seen["cmd"], seen["settings"]


def test_the_cli_builds_the_settings_it_was_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cmd, got = _cli_settings(
        monkeypatch,
        "--ncu", "--nsys", "--ncu-path", str(tmp_path / "ncu"), "--nsys-path", str(tmp_path / "nsys"),
        "--clock-control", "base", "--sections", "SpeedOfLight, Occupancy", "--metrics", "",
        "--ranges", "attn|mlp", "--max-per-range", "3", "--launch-count", "40", "--ncu-budget", "90",
        "--ncu-arg=--cache-control=none", "--nsys-arg=--cuda-memory-usage=true", "--crash-flush", "none",
        "--torch-ops", "ranges", "--trace-repeats", "all", "--instrument", "--timeout", "600",
        "-o", str(tmp_path / "run"), "--runs-dir", str(tmp_path / "runs"), "--", PY, "bench.py", "--x",
    )  # fmt: skip
    assert cmd == [PY, "bench.py", "--x"]
    assert got == CaptureSettings(
        tools=("nsys", "ncu"),
        ncu=NcuSettings(
            path=tmp_path / "ncu",
            sections=("SpeedOfLight", "Occupancy"),
            metrics=(),
            nvtx_include=NCU_FILTER,
            clock_control="base",
            max_per_range=3,
            launch_count=40,
            budget_s=90.0,
            extra=("--cache-control=none",),
        ),
        nsys=NsysSettings(path=tmp_path / "nsys", extra=("--cuda-memory-usage=true",), crash_flush="none"),
        torch=TorchSettings(ops="ranges", trace_repeats=None),
        instrument=True,
        timeout=600.0,
        ranges="attn|mlp",
        out=tmp_path / "run",
        runs_dir=tmp_path / "runs",
    )


def test_the_cli_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    _, got = _cli_settings(monkeypatch, "--", PY, "bench.py")
    assert got == CaptureSettings(runs_dir=Path("runs"))
    _, every = _cli_settings(monkeypatch, "--torch-profiler", "--all-kernels", "--", PY, "bench.py")
    assert every.tools == ("torch",) and every.ncu.nvtx_include is None and every.ncu.mode == "all-kernels"


def test_settings_are_frozen_and_keep_no_caller_list() -> None:
    extra = ["--a"]
    ncu = NcuSettings(extra=extra, sections=["SpeedOfLight"])
    extra.append("--b")
    assert ncu.extra == ("--a",) and ncu.sections == ("SpeedOfLight",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ncu.max_per_range = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown capture tool"):
        CaptureSettings(tools=("perf",))


def test_the_flat_keywords_build_the_same_settings(tmp_path: Path) -> None:
    flat = CaptureSettings.from_keywords(
        ncu=True, torch_profiler=True, ncu_path="ncu", max_per_range=3, ncu_budget=5.0, ncu_extra=["--x"],
        nsys_extra=["--y"], crash_flush="none", torch_ops="all", trace_repeats=4, timeout=60.0, grace_s=1.0,
        ranges="serve", out=tmp_path,
    )  # fmt: skip
    assert flat == CaptureSettings(
        tools=("torch", "ncu"),
        ncu=NcuSettings(path="ncu", max_per_range=3, budget_s=5.0, extra=("--x",)),
        nsys=NsysSettings(extra=("--y",), crash_flush="none"),
        torch=TorchSettings(ops="all", trace_repeats=4),
        timeout=60.0,
        grace_s=1.0,
        ranges="serve",
        out=tmp_path,
    )
    with pytest.raises(TypeError):
        CaptureSettings.from_keywords(ncu_sections=["x"])
    with pytest.raises(TypeError, match="settings or keywords"):
        capture([PY, "-c", "pass"], CaptureSettings(), timeout=1.0)


def test_the_check_fills_in_the_ncu_filter_and_count(tmp_path: Path) -> None:
    env = {"PATH": "", tools.ENV_MAX_PER_RANGE: "4"}
    given = CaptureSettings(tools=("ncu",), ranges="serve", env=env, cwd=tmp_path)
    opts = _check_options([PY, "-c", "pass"], given)
    ncu = opts.settings.ncu
    assert (ncu.nvtx_include, ncu.max_per_range, ncu.mode, ncu.per_config) == (
        ranges_filter("serve"),
        4,
        "ranges",
        4,
    )
    assert given.ncu == NcuSettings()  # what the caller built is not changed
    own = _check_options(
        [PY, "-c", "pass"], CaptureSettings(env=env, ncu=NcuSettings(launch_count=9))
    ).settings
    assert (own.ncu.mode, own.ncu.max_per_range, own.ncu.per_config) == ("tracekit-ranges", 4, None)
