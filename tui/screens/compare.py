"""Two runs side by side, compared as ``tracekit compare`` does (analyzers/compare.py): GEMMs matched on
backend + shape + input dtype, the change in time and TFLOP/s, and a status that knows the repeats' noise
(regression, improvement, within threshold, noise, broken, only in A / B).

Run B is read and compared in a worker (:class:`CompareScreen.RunCompared`); run A comes from the overview."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from tracekit.errors import TracekitError
from tracekit.numbers import formatted
from tracekit.tui.data import Analysis, Comparison, RunData, compare_data, load_run
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.text import clean, time_us
from tracekit.tui.widgets.footer import KeyFooter
from tracekit.tui.widgets.frame_table import Col, FrameTable


def _change(v: Any, r: dict[str, Any]) -> str:
    if v is None:
        return "–"
    return f"{v:+,.0f}%" if abs(v) >= 100 else f"{v:+.1f}%"


def _time_tone(v: Any, r: dict[str, Any]) -> str | None:
    if v is None:
        return "dim"
    return "good" if v <= -2 else "bad" if v >= 2 else None


def _tflops_tone(v: Any, r: dict[str, Any]) -> str | None:
    if v is None:
        return "dim"
    return "good" if v >= 2 else "bad" if v <= -2 else None


def _status_tone(v: Any, r: dict[str, Any]) -> str | None:
    return {"regression": "bad", "broken": "bad", "improvement": "good"}.get(
        v, "dim" if v != "unchanged" else None
    )


def _tflops(v: Any, r: dict[str, Any]) -> str:
    return "–" if v is None else f"{v:,.0f}"


COMPARE_COLUMNS = [
    Col("backend", "backend", 14, grow_to=32, middle=True),
    Col("m", "M", 5, "right"),
    Col("n", "N", 5, "right"),
    Col("k", "K", 5, "right"),
    Col("dtype", "dtype", 5),
    Col("time_a_ns", "A µs", 7, "right", fmt=lambda v, r: time_us(v)),
    Col("time_b_ns", "B µs", 7, "right", fmt=lambda v, r: time_us(v)),
    Col("time_change_pct", "Δtime", 7, "right", fmt=_change, tone=_time_tone),
    Col("tflops_a", "A TF/s", 6, "right", fmt=_tflops, hide_below=100),
    Col("tflops_b", "B TF/s", 6, "right", fmt=_tflops, hide_below=100),
    Col("tflops_change_pct", "ΔTF/s", 7, "right", fmt=_change, tone=_tflops_tone, hide_below=100),
    Col("status", "status", None, tone=_status_tone, min_width=10),
]


def pair_content(d: dict[str, Any], a_name: str, b_name: str) -> Content:
    """One compared GEMM in full: times with their spreads and noise band, TFLOP/s, status, the waterfall
    factors that moved, both verdicts, and the error of a broken GEMM."""

    def us(v: Any) -> str:
        return formatted(v, "{:,.2f} µs")

    def spread(v: Any) -> str:
        if not v or v[0] is None or v[1] is None:
            return ""
        return f"  (p10–p90 {v[0]:,.2f}–{v[1]:,.2f})"

    label = d.get("gemm") or f"{d.get('backend')} {d.get('m')}x{d.get('n')}x{d.get('k')}"
    parts: list[Any] = [(clean(label), "bold $accent"), ("  " + clean(d.get("status")), "bold"), "\n"]
    if d.get("status") in ("only in A", "only in B"):
        run = a_name if d["status"] == "only in A" else b_name
        parts += [
            f"only in {clean(run)}: ",
            us(d.get("time_us")),
            "" if d.get("tflops") is None else f", {d['tflops']:,.1f} TFLOP/s",
            "" if not d.get("verdict") else f", verdict {clean(d['verdict'])}",
            "\n",
        ]
        return Content.assemble(*parts)
    if d.get("error"):
        parts += [("error in B: ", "bold $error"), clean(d["error"]), "\n"]
    parts += [
        ("A ", "bold"),
        f"{clean(a_name)}: {us(d.get('base_time_us'))}{spread(d.get('base_spread_us'))}",
        "" if d.get("base_tflops") is None else f", {d['base_tflops']:,.1f} TFLOP/s",
        "\n",
        ("B ", "bold"),
        f"{clean(b_name)}: {us(d.get('new_time_us'))}{spread(d.get('new_spread_us'))}",
        "" if d.get("new_tflops") is None else f", {d['new_tflops']:,.1f} TFLOP/s",
        "\n",
    ]
    if d.get("time_change_pct") is not None:
        parts.append(f"time {d['time_change_pct']:+.2f}%")
        if d.get("noise_pct") is not None:
            parts.append((f"  (noise band ±{d['noise_pct']:.2f}% from the repeats' spread)", "$text-muted"))
        else:
            parts.append(("  (no repeats' spread recorded: only the threshold applies)", "$text-muted"))
        parts.append("\n")
    moved = d.get("factors_moved") or []
    if moved:
        parts.append(("waterfall factors that moved:\n", "bold"))
        for f in moved:
            b, n = f.get("base"), f.get("new")
            parts.append(
                f"  {clean(f.get('factor')):<14} {'–' if b is None else f'{b:.2f}'} → "
                f"{'–' if n is None else f'{n:.2f}'}\n"
            )
    if d.get("base_verdict") or d.get("new_verdict"):
        parts += [
            ("verdict: ", "bold"),
            f"A {clean(d.get('base_verdict') or '–')}, B {clean(d.get('new_verdict') or '–')}\n",
        ]
    return Content.assemble(*parts)


class CompareScreen(FrameScreen):
    """Run A (the open run) against run B, as ``tracekit compare A B`` sees them; ``enter`` shows one GEMM's
    pair in full (spreads, noise band, factors that moved, verdicts)."""

    class RunCompared(Message):
        """Run B was read and compared with run A."""

        def __init__(
            self, other: RunData | None, comparison: Comparison | None, error: TracekitError | None = None
        ) -> None:
            super().__init__()
            self.other = other
            """Run B (None when it could not be read)."""
            self.comparison = comparison
            """The comparison (tracekit.tui.data.compare_data), or None on error."""
            self.error = error
            """Why run B could not be read."""

    def __init__(self, data: RunData, analysis: Analysis, other: Path) -> None:
        super().__init__(COMPARE_COLUMNS, empty_text=f"reading {clean(other)} …")
        self.data, self.analysis, self.other_path = data, analysis, other
        self.other: RunData | None = None
        self.comparison: Comparison | None = None
        self.title_bar = Static(self._title(), id="screen-title")

    def _title(self) -> Content:
        b = clean(self.other.name if self.other else self.other_path)
        parts: list[Any] = [
            ("compare", "bold $accent"),
            ("  A ", "bold"),
            clean(self.data.name),
            ("  B ", "bold"),
            b,
        ]
        c = self.comparison
        if c is None:
            return Content.assemble(*parts, ("  · reading B …", "$text-muted"))
        r = c.result
        counts = r["counts"]
        shown = [f"{n} {s}" for s, n in counts.items() if n]
        parts += [
            "\n",
            (
                "passes the gate" if r["passed"] else "fails the gate",
                "bold $success" if r["passed"] else "bold $error",
            ),
        ]
        parts += [("  ·  ", "$text-muted"), ", ".join(shown) or "no GEMM in both runs"]
        fails = [
            f"{len(r[k])} {what}"
            for k, what in (
                ("new_failures", "new failures"),
                ("fixed_failures", "fixed"),
                ("changed_failures", "changed"),
            )
            if r.get(k)
        ]
        if fails:
            parts += [("  ·  ", "$text-muted"), (", ".join(fails), "$warning")]
        parts.append((f"  ·  Δ = B vs A, threshold {r['threshold_pct']:g}%", "$text-muted"))
        return Content.assemble(*parts)

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield from self.compose_table()
        yield KeyFooter()

    def on_mount(self) -> None:
        self.table.focus()
        self.load_other()

    @work(thread=True, exclusive=True, group="compare")
    def load_other(self) -> None:
        try:
            other = load_run(self.other_path)
            comparison = compare_data(self.data, other, a_analysis=self.analysis)
        except TracekitError as exc:
            self.post_message(self.RunCompared(None, None, exc))
            return
        self.post_message(self.RunCompared(other, comparison))

    def on_compare_screen_run_compared(self, message: CompareScreen.RunCompared) -> None:
        if message.error is not None:
            from tracekit.tui.screens.dialogs import ErrorScreen

            self.table.empty_text = "run B could not be read"
            self.table.refresh()
            e = message.error
            self.app.push_screen(ErrorScreen(e.title, e.message, e.hint))
            return
        assert message.comparison is not None
        self.other, self.comparison = message.other, message.comparison
        self.title_bar.update(self._title())
        self.table.empty_text = "no GEMMs in either run"
        self.set_base(message.comparison.frame)

    def on_frame_table_row_selected(self, message: FrameTable.RowSelected) -> None:
        if self.comparison is None or message.table is not self.table:
            return
        from tracekit.tui.screens.dialogs import TextScreen

        detail = self.comparison.details[message.row["row"]]
        b_name = self.other.name if self.other else str(self.other_path)
        self.app.push_screen(TextScreen("compared GEMM", pair_content(detail, self.data.name, b_name)))
