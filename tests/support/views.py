"""What the view tests share: a sample's or an imported trace's run and its Analysis, each command's output as a
user gets it, and the verdict as the views name it (one helper each, instead of a copy per test file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
SHARED = ROOT.parent / "shared" / "data"

__all__ = [
    "ROOT",
    "SAMPLES",
    "SHARED",
    "analysis_of",
    "cli",
    "imported_run",
    "sample_analysis",
    "verdict_label",
]


def analysis_of(run: Path | str, **options: Any) -> Any:
    """The Analysis of the run folder ``run``, built from its frames (``analyze_run``: what a read builds when
    no stored one fits), with ``options`` (``device``, ``calibration``, ``breakdown``)."""
    from tracekit.analyzers.analysis import analyze_run
    from tracekit.analyzers.store import open_run

    return analyze_run(open_run(Path(run)), **options)


def sample_analysis(name: str, **options: Any) -> Any:
    """The Analysis of the committed sample ``samples/<name>`` (:func:`analysis_of`)."""
    return analysis_of(SAMPLES / name, **options)


def imported_run(source: Path, out: Path, *, skip_unreadable: bool = False) -> Path:
    """``source`` (a profiler file) imported into the run folder ``out``; with ``skip_unreadable`` a file that
    is no profile tracekit reads (a README, a CSV of notes) skips the test, saying why."""
    from tracekit.analyzers.importer import import_files
    from tracekit.errors import TracekitError

    try:
        import_files([source], out)
    except TracekitError as exc:
        if not skip_unreadable:
            raise
        pytest.skip(f"{source.name}: not a run ({exc.one_line()})")
    return out


def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str, columns: int = 120
) -> str:
    """``tracekit ARGS``'s stdout, run through the CLI's entry point at ``columns`` without colour; a non-zero
    exit fails the test with the command's stderr."""
    from tracekit.cli import main

    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    try:
        main(list(args))
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def verdict_label(verdict: Any) -> str | None:
    """A verdict (the model's or its JSON dict) as show and the TUI name it: ``factor: cause``, else the kind;
    None at no loss."""
    get = verdict.get if isinstance(verdict, dict) else lambda key: getattr(verdict, key)
    if get("factor"):
        return get("factor") + (f": {get('cause')}" if get("cause") else "")
    return None if get("kind") == "no-loss" else str(get("kind"))
