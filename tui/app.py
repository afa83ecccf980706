"""The Textual app of ``tracekit view`` and its factory, shared by the CLI and the tests.

``make_app(run, compare=..., theme=...)`` decides the first screen without reading any frame: a run folder (or
bundle) opens its overview; a folder of runs opens the picker over it; no argument opens the picker over ./runs
and the bundled samples when ./runs holds runs, else the bundled sample (samples/h200-gemm-probe, or its copy
inside the package). Frames are read by the screens' workers, never here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tracekit.devices import DeviceSpec
from tracekit.tui.data import Prefetch
from tracekit.tui.runs import first_target

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
        device: DeviceSpec | None = None,
    ) -> None:
        super().__init__()
        self.first = first
        self.compare_path = compare_path
        self.device = device  # ``--device``: replaces the GPU a run names, for every run opened
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide ``esc Back`` on the first screen when there is nothing to go back from (the footer of the
        overview then fits 80 columns)."""
        if action == "back" and len(self.screen_stack) <= 2:
            from tracekit.tui.screens.base import FrameScreen

            screen = self.screen
            return isinstance(screen, FrameScreen) and bool(
                screen.filter_query or screen.has_class("filtering")
            )
        return True

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


def first_screen(
    run: Path | None, *, compare: Path | None = None, prefetch: Prefetch | None = None
) -> Screen[None]:
    """The screen ``tracekit view [RUN]`` opens on (tracekit.tui.runs.first_target decides)."""
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.picker import RunPickerScreen

    kind, target = first_target(run, compare)
    if kind == "run":
        return OverviewScreen(target, compare_with=compare, prefetch=prefetch)
    return RunPickerScreen(target)


def make_app(
    run: Path | str | None = None,
    *,
    compare: Path | str | None = None,
    theme: str | None = None,
    prefetch: Prefetch | None = None,
    device: DeviceSpec | None = None,
) -> TracekitApp:
    """The app for ``tracekit view [RUN] [--compare OTHER]`` (tests build theirs here too). ``prefetch``: a
    :class:`tracekit.tui.data.Prefetch` already reading the run (the CLI starts one before importing Textual)."""
    run_path = Path(run) if run is not None else None
    compare_path = Path(compare) if compare is not None else None
    theme = theme or os.environ.get("TRACEKIT_THEME")
    screen = first_screen(run_path, compare=compare_path, prefetch=prefetch)
    return TracekitApp(screen, compare_path=compare_path, theme=theme, device=device)
