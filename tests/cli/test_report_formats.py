"""Report formats as their readers see them: ``-o``'s extension picks the format (any other exits 2), the Markdown
renders as meant (markdown-it-py: code spans and bold), the HTML shows short kernel names with the full name on
hover and fits a 1400 px window (headless Chromium, where installed), and per-rank tables collapse what every rank
shares.

On the committed samples and, where ../shared/data is present, real third-party traces (an HTA Kineto trace of
CUTLASS GEMMs on an A100; a 2-GPU Nsight Systems export). Expected values come from the runs' own frames and
JSON, never written here.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from markdown_it import MarkdownIt

from tracekit.analyzers.breakdown import Breakdown
from tracekit.analyzers.breakdown.table import (
    SAME_PCT_POINTS,
    SAME_SPAN_RATIO,
    WHOLE_RUN,
    breakdown_frame,
    collapse_same_ranges,
)
from tracekit.text import short_name

HTA = "thirdparty/hta/negative_queue_length_values_check__rank0.json.gz"
TWO_GPUS = "thirdparty/nsys-ai/mfu_2gpu_before.sqlite"


def _tracekit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def hta_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Kineto trace of CUTLASS GEMMs (long templated kernel names), imported."""
    shared = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not (shared / HTA).is_file():
        pytest.skip(f"{shared / HTA} is absent (it sits beside the checkout on project machines)")
    out = tmp_path_factory.mktemp("hta") / "run"
    p = _tracekit("import", shared / HTA, "-o", out)
    assert p.returncode == 0, p.stderr
    return out


@pytest.fixture(scope="module")
def two_gpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not (shared / TWO_GPUS).is_file():
        pytest.skip(f"{shared / TWO_GPUS} is absent (it sits beside the checkout on project machines)")
    out = tmp_path_factory.mktemp("two") / "run"
    p = _tracekit("import", shared / TWO_GPUS, "-o", out)
    assert p.returncode == 0, p.stderr
    return out


# --- -o picks the format ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".pdf", ".txt", ""])
def test_an_extension_that_is_no_format_exits_2(samples_dir: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"r{suffix}"
    p = _tracekit("report", samples_dir / "h200-gemm-probe", "-o", out)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert ".md" in p.stderr and ".html" in p.stderr and ".json" in p.stderr
    assert not out.exists()


@pytest.mark.slow
def test_the_extension_picks_the_format(samples_dir: Path, tmp_path: Path) -> None:
    run = samples_dir / "h200-gemm-probe"
    for name in ("r.html", "r.json", "r.md"):
        assert _tracekit("report", run, "-o", tmp_path / name).returncode == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((tmp_path / "r.json").read_text())["report"]["format"]
    assert (tmp_path / "r.md").read_text().startswith("## tracekit report")
    clash = _tracekit("report", run, "-o", tmp_path / "x.md", "--format", "html")
    assert clash.returncode == 2 and not (tmp_path / "x.md").exists()


# --- Markdown renders as meant ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("sample", ["h200-counter-probe", "h200-capture-gemm"])
def test_markdown_code_spans_and_bold_render(samples_dir: Path, sample: str) -> None:
    p = _tracekit("report", samples_dir / sample)
    assert p.returncode == 0, p.stderr
    md = p.stdout
    assert "\\`" not in md  # a hint's command is a code span, not escaped backticks
    rendered = MarkdownIt("gfm-like").render(md)
    text = re.sub(r"<[^>]+>", "", rendered)
    assert "**" not in text  # every bold marker pair became <strong>
    assert rendered.count("<strong>") == md.count("**") // 2
    codes = {html.unescape(c) for c in re.findall(r"<code>([^<]*)</code>", rendered)}
    quoted = set(re.findall(r"(?<![`\\])`(tracekit [^`]+)`", md))
    assert quoted and quoted <= codes  # tracekit's own commands in sentences render as code


def test_the_step_label_is_bold(samples_dir: Path) -> None:
    md = _tracekit("report", samples_dir / "h200-capture-gemm").stdout
    rendered = MarkdownIt("gfm-like").render(md)
    assert re.search(r"<strong>Step[^<]*:</strong>", rendered), [ln for ln in md.splitlines() if "Step" in ln]


# --- HTML ---------------------------------------------------------------------------------------------------------------
def test_html_shows_short_kernel_names_with_the_full_name_on_hover(hta_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert _tracekit("report", hta_run, "-o", out).returncode == 0
    page = out.read_text()
    titled = re.findall(r'<code title="([^"]*)">([^<]*)</code>', page)
    assert titled
    for full, shown in titled:
        full, shown = html.unescape(full), html.unescape(shown)
        assert shown == short_name(full) and len(shown) < len(full) and "(" not in shown.split("::")[-1]
    kernels = json.loads(_tracekit("report", hta_run, "--format", "json").stdout)["cases"]
    longest = max((c["kernel"]["name"] or "" for c in kernels), key=len)
    assert len(longest) > 100 and html.escape(longest) not in re.sub(r'title="[^"]*"', "", page)
    legends = [
        html.unescape(t) for t in re.findall(r'text-anchor="start"[^>]*font-size:10px[^>]*>([^<]*)<', page)
    ]
    assert legends and all(len(t) <= 30 for t in legends)
    kernel_entries = [t for t in legends if "peak" not in t]
    assert len(set(kernel_entries)) == len(kernel_entries)  # each entry tells its kernel apart


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_PROBE = (
    "<script>window.addEventListener('load',()=>{const r=[...document.querySelectorAll('table')]"
    ".map(t=>Math.ceil(t.getBoundingClientRect().right));"
    "document.title='W:'+document.documentElement.scrollWidth+':'+Math.max(0,...r)})</script>"
)


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=180)  # type: ignore[list-item]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_html_report_fits_1400px_in_chromium(hta_run: Path, tmp_path: Path) -> None:
    """A real trace's report in headless Chromium at 1400 px: no table reaches past the window, and a screenshot
    is taken (a PNG of the page, not blank)."""
    out = tmp_path / "r.html"
    assert _tracekit("report", hta_run, "-o", out).returncode == 0
    probe = tmp_path / "probe.html"
    probe.write_text(out.read_text().replace("</body>", _PROBE + "</body>"))
    dom = _chromium("--dump-dom", probe.as_uri()).stdout
    found = re.search(r"<title>W:(\d+):(\d+)</title>", dom)
    assert found, dom[:500]
    page_width, right_edge = map(int, found.groups())
    assert page_width <= 1400 and 0 < right_edge <= 1400
    png = tmp_path / "r.png"
    _chromium(f"--screenshot={png}", out.as_uri())
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# --- per-rank tables -----------------------------------------------------------------------------------------------
def test_ranges_the_same_on_every_rank_collapse(two_gpu_run: Path) -> None:
    data = json.loads(_tracekit("show", two_gpu_run, "--json").stdout)
    b = msgspec.convert(data["breakdown"], Breakdown)
    full = breakdown_frame(b)
    gpus = full.filter(full["scope"] == WHOLE_RUN)["gpu"].to_list()
    assert len(gpus) == 2
    short = collapse_same_ranges(full)
    collapsed = short.filter(short["gpu"].str.starts_with("all "))
    assert collapsed.height > 0 and short.height < full.height
    pct = [c for c in full.columns if c not in ("scope", "gpu", "n", "span_ms")]
    for scope in full["scope"].unique().to_list():
        rows = full.filter(full["scope"] == scope)
        if scope == WHOLE_RUN:
            assert short.filter(short["scope"] == scope).height == 2
            continue
        spans = rows["span_ms"].to_list()
        alike = (
            rows.height == 2
            and max(spans) / min(spans) <= SAME_SPAN_RATIO
            and all(
                (rows[c].null_count() == 2)
                or (rows[c].null_count() == 0 and rows[c].max() - rows[c].min() <= SAME_PCT_POINTS)
                for c in pct
            )
        )
        kept = short.filter(short["scope"] == scope)
        assert kept.height == (1 if alike else rows.height), scope
    report = _tracekit("report", two_gpu_run).stdout
    assert report.count("| all 2 (mean) |") == collapsed.height
