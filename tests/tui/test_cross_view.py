"""Every view of every case of every sample and shared trace says the same numbers, under the same labels.

For each run, one Analysis is built (the commands and the TUI obtain theirs through ``analyze_frames``, which is
wrapped here to build each run's once) and every view is rendered as a user renders it: ``explain`` (text cards,
``--json``), ``show --json``, ``report`` (Markdown and ``--format json``), the TUI's overview table, each case's
screen and the failures screen (Textual's Pilot). For every case each view must show the same calls, the same
per-call figure (the median call's span and parts, labelled "median call": analyzers/analysis/figures.py), the
achieved and kernel rates, the % of peak and the verdict. A view that prints another figure, or the same figure
unlabelled, fails here (issue: the Qwen1.5 trace's case #1 read 89.2 µs in explain, 108 in the TUI's table and
medians of each part on its case screen)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_tui import run_async, wait_loaded

from tests.support.views import ROOT, cli, imported_run, verdict_label
from tracekit.analyzers.analysis import build
from tracekit.analyzers.analysis.figures import median_call, median_call_text

SAMPLES = sorted(p.name for p in (ROOT / "samples").iterdir() if (p / "run.json").is_file())
SHARED = ROOT.parent / "shared" / "data" / "thirdparty"
TRACES = (
    sorted(
        str(p.relative_to(SHARED))
        for p in SHARED.rglob("*")
        if p.is_file() and p.suffix in (".gz", ".json", ".sqlite", ".ncu-rep", ".csv")
    )
    if SHARED.is_dir()
    else []
)

pytestmark = pytest.mark.slow
OPENED = 12
"""Cases per run whose TUI screen the test opens through the pilot (every case's summary is checked)."""


@pytest.fixture(scope="module")
def one_analysis() -> Any:
    """``analyze_frames`` built once per run and options: every command and the TUI then render that one."""
    real = build.analyze_frames
    cache: dict[tuple[Any, ...], Any] = {}

    def once(frames: Any, **kw: Any) -> Any:
        run = kw.get("run")
        key = (str(run.path) if run is not None else kw.get("path"), kw.get("device"), kw.get("breakdown"))
        if key not in cache:
            cache[key] = real(frames, **kw)
        return cache[key]

    build.analyze_frames = once
    yield cache
    build.analyze_frames = real


def _flat(text: str) -> str:
    """A card's text as one line: box borders gone, wrapped lines joined, runs of spaces made one."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", text))


def _run_of(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if name in SAMPLES:
        return ROOT / "samples" / name
    return imported_run(SHARED / name, tmp_path_factory.mktemp("cross") / "run", skip_unreadable=True)


def _check_text_views(run: Path, capsys: Any, monkeypatch: Any) -> Any:
    """explain, show --json and the report against the Analysis; returns it."""
    explained = json.loads(cli(capsys, monkeypatch, "explain", str(run), "--json"))
    from tracekit.analyzers.analysis import Analysis

    a = Analysis.from_json(json.dumps(explained))
    if not a.cases:
        return a
    shown = json.loads(cli(capsys, monkeypatch, "show", str(run), "--json"))
    cards = cli(capsys, monkeypatch, "explain", str(run), "--all").split("╭─ #")[1:]
    reported = json.loads(cli(capsys, monkeypatch, "report", str(run), "--format", "json", "--all"))
    md = cli(capsys, monkeypatch, "report", str(run), "--all", "--format", "md")
    md_cards = re.split(r"\n#### (?=\d+\. )", md)[1:]
    assert len(cards) == len(shown["gemms"]) == len(reported["cases"]) == len(a.cases)
    # compare (the run against itself): one row per case, each with the case's median call, achieved and verdict
    compared = json.loads(cli(capsys, monkeypatch, "compare", str(run), str(run), "--json"))
    rows = Counter((g["base_time_us"], g["base_tflops"], g["base_verdict"]) for g in compared["gemms"])
    want = Counter(
        (
            m.span_ns / 1e3 if (m := median_call(c.timing)) else None,
            c.timing.achieved_tflops,
            c.verdict.factor,
        )
        for c in a.cases
    )
    assert rows == want
    assert reported["failure_groups"] == explained["failure_groups"] == shown["failure_groups"]
    # the run's tables (ranges and kernels by name, the Nsight Compute kernels): the Analysis' in every view
    assert shown["tables"] == explained["tables"] == reported["tables"]
    assert explained["tables"] is not None
    for i, (c, g, card) in enumerate(zip(a.cases, shown["gemms"], cards, strict=True), 1):
        t, mid = c.timing, median_call(c.timing)
        assert reported["cases"][i - 1] == explained["cases"][i - 1]
        # show --json: the same calls, median call, rates, % of peak, verdict
        assert (g["id"], g["calls"], g["pct_of_peak"], g["verdict"]) == (
            c.id,
            t.calls,
            c.pct_of_peak,
            verdict_label(c.verdict),
        )
        assert (g["achieved_tflops"], g["kernel_tflops"]) == (t.achieved_tflops, t.kernel_tflops)
        assert g["time_us"] == (pytest.approx(mid.span_ns / 1e3) if mid else None)
        # explain's card
        text = _flat(card)
        assert text.startswith(f"{i} "), text[:80]
        if t.calls:
            assert f"{t.calls:,} call{'s' if t.calls != 1 else ''} in " in text
            assert median_call_text(t) in text, (median_call_text(t), text)
        if t.achieved_tflops is not None:
            assert f"achieved {t.achieved_tflops:,.1f} TFLOP/s" in text
        if t.kernel_tflops is not None:
            assert f"kernel rate {t.kernel_tflops:,.1f} TFLOP/s" in text
        if c.pct_of_peak is not None:
            assert f"→ {c.pct_of_peak:.0f}%" in text
        assert (f"verdict: {c.verdict.factor}" if c.verdict.factor else f"verdict: {c.verdict.kind}") in text
        # a time per call is labelled: "median call ..." or "... mean per call", never a bare "20.1 µs per call"
        assert not re.search(r"[\d.,]+ (ns|µs|ms|s) per call", text), text
        # the report's card (Markdown; a report summarised to fit a comment keeps the first cards)
        found = next((m for m in md_cards if m.startswith(f"{i}. ")), None)
        if found is None:
            assert i > 1 and md_cards, "the report has no waterfall card"
            continue
        cardmd = _flat(found)
        if t.calls:
            assert median_call_text(t) in cardmd, (median_call_text(t), cardmd[:300])
        if t.achieved_tflops is not None:
            assert f"{t.achieved_tflops:,.1f} TFLOP/s" in cardmd
        if t.kernel_tflops is not None:
            assert f"kernel rate {t.kernel_tflops:,.1f}" in cardmd
        if c.pct_of_peak is not None and c.peak is not None:
            assert f"= {c.pct_of_peak:.0f}%" in cardmd
        if c.verdict.factor:
            assert f"Verdict: {c.verdict.factor}" in cardmd.replace("**", "")
    return a


async def _check_tui(run: Path, a: Any) -> None:
    """The TUI's overview table, every case's screen and the failures screen against the Analysis."""
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.failures import FailuresScreen
    from tracekit.tui.screens.gemm import GemmScreen

    app = make_app(run)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_loaded(pilot)
        overview = app.screen
        assert [c.id for c in overview.analysis.cases] == [c.id for c in a.cases]
        table = overview.table
        assert table.row_count == len(a.cases)
        for r in range(table.row_count):
            row = table.row(r)
            c = a.cases[row["gemm_id"]]
            t, mid = c.timing, median_call(c.timing)
            assert row["time_ns"] == (mid.span_ns if mid else None)
            assert (row["tflops"], row["kernel_tflops"]) == (t.achieved_tflops, t.kernel_tflops)
            assert (row["calls"], row["pct_of_peak"], row["verdict"]) == (
                t.calls,
                c.pct_of_peak,
                verdict_label(c.verdict),
            )
        for i, c in enumerate(a.cases, 1):
            # the first cases' screens are opened through the pilot; the others' summary is the same method the
            # screen composes from (opening hundreds of screens, each reading its kernels, takes minutes)
            opened = i <= OPENED
            if opened:
                app.push_screen(GemmScreen(overview.data.frames, c, i))
                await pilot.pause()
                summary = _flat(str(app.screen.query_one("#gemm-summary").render()))
            else:
                summary = _flat(str(GemmScreen(overview.data.frames, c, i)._summary()))
            t = c.timing
            if t.calls:
                assert median_call_text(t) in summary, (median_call_text(t), summary)
            if t.achieved_tflops is not None:
                assert f"achieved {t.achieved_tflops:,.0f} TFLOP/s" in summary
            if t.kernel_tflops is not None:
                assert f"kernel rate {t.kernel_tflops:,.0f} TFLOP/s" in summary
            if c.pct_of_peak is not None:
                assert f"= {c.pct_of_peak:.0f}%" in summary
            if opened:
                verdict = _flat(str(app.screen.query_one(".note").render()))
                assert (c.verdict.factor or f"verdict: {c.verdict.kind}") in verdict
                app.pop_screen()
                await pilot.pause()
        if a.failures:
            await pilot.press("f")
            await wait_loaded(pilot)
            screen = app.screen
            assert isinstance(screen, FailuresScreen)
            for (backend, shape), tflops in screen.matrix.tflops.items():
                same = [
                    x.timing.achieved_tflops
                    for x in a.cases
                    if x.backend == backend and x.shape and (x.shape.m, x.shape.n, x.shape.k) == shape
                ]
                assert tflops == next(v for v in same if v is not None)  # the overview's first row of it


@pytest.mark.parametrize("name", SAMPLES + TRACES)
def test_every_view_agrees(
    name: str,
    one_analysis: Any,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _run_of(name, tmp_path_factory)
    a = _check_text_views(run, capsys, monkeypatch)
    if a.cases:
        run_async(_check_tui)(run, a)
