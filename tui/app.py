"""The Textual app of ``tracekit view`` and its factory, shared by the CLI and the tests.

``make_app(run, compare=..., theme=...)`` decides the first screen without reading any frame: a run folder (or
bundle) opens its overview; a folder of runs opens the picker over it; no argument opens the picker over ./runs
and the bundled samples when ./runs holds runs, else the newest bundled sample. Frames are read by the screens'
workers, never here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tracekit.errors import RunNotFoundError
from tracekit.run import MANIFEST
from tracekit.tui.data import default_run_dirs, find_runs, newest_sample

THEMES = {"dark": "textual-dark", "light": "textual-light"}


class TracekitApp(App[None]):
    """Browse tracekit runs: GEMMs, their waterfalls, kernels, failures, plots, comparisons."""

    CSS_PATH = "tracekit.tcss"
    TITLE = "tracekit"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help"),
        Binding("escape", "back", "Back"),
        Binding("t", "toggle_theme", "Theme", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        first: Screen[None] | None = None,
        *,
        compare_path: Path | None = None,
        theme: str | None = None,
    ) -> None:
        super().__init__()
        self.first = first
        self.compare_path = compare_path
        self.initial_theme = THEMES.get(theme or "", theme) if theme else None

    def on_mount(self) -> None:
        if self.initial_theme:
            self.theme = self.initial_theme
        if self.first is not None:
            self.push_screen(self.first)

    def action_help(self) -> None:
        from tracekit.tui.screens.dialogs import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_back(self) -> None:
        from tracekit.tui.screens.base import FrameScreen

        screen = self.screen
        if isinstance(screen, FrameScreen) and screen.clear_filter():
            return
        if len(self.screen_stack) > 2:
            self.pop_screen()
        else:
            self.notify("q quits", timeout=2)

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"


def _is_run(path: Path) -> bool:
    return (path / MANIFEST).is_file() or (path.is_file() and path.suffix == ".zip")


def first_screen(run: Path | None, *, compare: Path | None = None) -> Screen[None]:
    """The screen ``tracekit view [RUN]`` opens on (see the module docstring)."""
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.picker import RunPickerScreen

    if compare is not None and not compare.exists():
        raise RunNotFoundError(f"{compare} does not exist", "give --compare a run folder or bundle")
    if run is not None:
        if not run.exists():
            raise RunNotFoundError(
                f"{run} does not exist", "give a run folder, a bundle, or a folder of runs"
            )
        if _is_run(run):
            return OverviewScreen(run, compare_with=compare)
        if run.is_dir():
            return RunPickerScreen([run])
        raise RunNotFoundError(
            f"{run} is a file, not a run", f"make a run from it first: `tracekit import {run} -o runs/NAME`"
        )
    local = Path("runs")
    if find_runs([local]):
        return RunPickerScreen(default_run_dirs())
    sample = newest_sample()
    if sample is not None:
        return OverviewScreen(sample, compare_with=compare)
    return RunPickerScreen(default_run_dirs())


def make_app(
    run: Path | str | None = None,
    *,
    compare: Path | str | None = None,
    theme: str | None = None,
) -> TracekitApp:
    """The app for ``tracekit view [RUN] [--compare OTHER]`` (tests build theirs here too)."""
    run_path = Path(run) if run is not None else None
    compare_path = Path(compare) if compare is not None else None
    theme = theme or os.environ.get("TRACEKIT_THEME")
    return TracekitApp(first_screen(run_path, compare=compare_path), compare_path=compare_path, theme=theme)
