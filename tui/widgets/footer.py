"""The key-hint footer of every screen, compact (no padding between keys) below 110 columns so that the hints
of the busiest screen, the overview, fit in 80."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer

COMPACT_BELOW = 110


class KeyFooter(Footer):
    """Textual's Footer that turns compact in narrow terminals."""

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW
