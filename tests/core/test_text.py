"""tracekit/text.py: the one sanitizer of untrusted text, and its users (the TUI, bundles) agreeing with it."""

from __future__ import annotations

import unicodedata

import pytest

from tracekit.text import CONTROL, clean, has_control
from tracekit.tui.text import clean as tui_clean

# A kernel name from a stranger's trace: an ANSI colour, a terminal bell, a clear-screen in 8-bit CSI (C1).
HOSTILE = "\x1b[31mvoid gemm<float>\x1b[0m\x07\x9b2J\r\x00done"


def test_every_control_character_is_shown_and_nothing_else() -> None:
    """Unicode's own category Cc (C0, DEL, C1) is exactly what is made visible, on the BMP's first 0x3000."""
    for cp in range(0x3000):
        ch = chr(cp)
        control = unicodedata.category(ch) == "Cc"
        assert (clean(ch) == f"\\x{cp:02x}") is control, hex(cp)
        assert (clean(ch) == ch) is not control, hex(cp)
        assert has_control(ch) is control


def test_clean_hostile_name() -> None:
    assert clean(HOSTILE) == "\\x1b[31mvoid gemm<float>\\x1b[0m\\x07\\x9b2J\\x0d\\x00done"
    assert CONTROL.search(clean(HOSTILE)) is None
    # markup and wide characters are data, left alone; a carriage return never survives
    assert clean("[bold]é 中 🚀[/]") == "[bold]é 中 🚀[/]"
    assert clean(None) == "" and clean(42) == "42"


@pytest.mark.parametrize("keep", [False, True])
def test_newlines_and_tabs(keep: bool) -> None:
    text = "Traceback:\n\tFile x\r\n"
    got = clean(text, keep_newlines=keep)
    assert got == ("Traceback:\n\tFile x\\x0d\n" if keep else "Traceback:\\x0a\\x09File x\\x0d\\x0a")


def test_tui_clean_is_the_same_sanitizer() -> None:
    """The TUI draws through tracekit.text.clean; it only widens tabs, which a table cell cannot show."""
    assert tui_clean(HOSTILE) == clean(HOSTILE)
    assert tui_clean("a\n\tb\x1b", keep_newlines=True) == "a\n    b\\x1b"
    assert tui_clean("a\tb") == "a\\x09b"
