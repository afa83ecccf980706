"""``tracekit report`` on real runs: well-formed GitHub Markdown, plots that exist and parse, escaping that holds
against hostile error texts, GitHub's 65,536-character limit, and the JSON / HTML forms."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from tests.support.report_data import (
    FAILURE_TEXTS,
    HOSTILE_TRACEBACK,
    bench_rows,
    bench_run,
    failure,
    measurement,
    probe_run,
    sample_runs,
)
from tracekit.analyzers.report import GITHUB_COMMENT_LIMIT, build_report, md_code, md_text, write_report
from tracekit.analyzers.store import load_frames
from tracekit.cli import main

MD = MarkdownIt("commonmark").enable("table")


def _cells(line: str) -> int:
    """Cells of a GFM table row, splitting on pipes not escaped with a backslash."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return len(re.split(r"(?<!\\)\|", body))


def check_markdown(path: Path) -> list:
    """Parse the Markdown: every table has the same cell count on every source row and in every parsed row;
    every image links a file beside it that is a valid SVG. Returns the tokens."""
    text = path.read_text()
    tokens = MD.parse(text)
    lines = text.split("\n")
    tables = 0
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            tables += 1
            start, end = tok.map
            widths = {_cells(ln) for ln in lines[start:end] if ln.strip()}
            assert len(widths) == 1, f"table at line {start + 1} has rows of {sorted(widths)} cells"
            parsed = []
            count = 0
            for t in tokens[i:]:
                if t.type in ("th_open", "td_open"):
                    count += 1
                elif t.type == "tr_close":
                    parsed.append(count)
                    count = 0
                elif t.type == "table_close":
                    break
            assert set(parsed) == widths, (parsed, widths)
    images = [c for t in tokens if t.type == "inline" for c in t.children or [] if c.type == "image"]
    for img in images:
        src = img.attrs["src"]
        assert not src.startswith(("/", "http")), src
        svg = path.parent / src
        assert svg.is_file(), f"{src} is linked but missing"
        root = ET.parse(svg).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert tables >= 1
    return tokens


@pytest.fixture(scope="module")
def probe(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    return probe_run(shared_data, tmp_path_factory.mktemp("probe") / "run")


@pytest.fixture(scope="module")
def bench(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    rows = bench_rows(shared_data)
    fails = [failure(i, *t) for i, t in enumerate(FAILURE_TEXTS)]
    fails.append(
        failure(
            9,
            "flashinfer-fp4|cute`dsl",
            "mm_fp4",
            "crashed",
            "RuntimeError",
            "kernel <b>|crashed|</b> `oops`",
            HOSTILE_TRACEBACK,
        )
    )
    return bench_run(tmp_path_factory.mktemp("bench") / "run", [measurement(r) for r in rows], fails)


def test_probe_report_is_well_formed_and_holds_the_real_numbers(probe, tmp_path: Path) -> None:
    out = tmp_path / "ticket.md"
    rep = build_report(probe, load_frames(probe))
    _, files, rendered = write_report(rep, "md", out)
    tokens = check_markdown(out)
    text = out.read_text()
    assert len(text) <= GITHUB_COMMENT_LIMIT and not rendered.summarised
    # environment from the real files: the ncu report says H200, CC 9.0, 132 SMs, clock control none
    assert "NVIDIA H200 (CC 9.0, 132 SMs)" in text
    assert "| ncu clock control | `none`" in text
    # the bf16 1024x2048x6144 GEMM ran 35.01 us = 736 TFLOP/s (nsys timeline), 74% of the 989.4 datasheet peak
    n, row = next(
        (i, c)
        for i, c in enumerate(rep["cases"], 1)
        if c["shape"] and c["shape"]["m"] == 1024 and c["shape"]["dtype_a"] == "bf16"
    )
    assert row["timing"]["span_ns"]["median"] / 1e3 == pytest.approx(35.01, abs=0.01)
    assert row["timing"]["achieved_tflops"] == pytest.approx(736.13, abs=0.1)
    assert re.search(
        rf"\| {n} \| `torch-bf16` \| `mm` \| 1024×2048×6144 \| bf16 \| \d+ \| [^|]+ \| 35\.01 \|", text
    )
    # one waterfall plot per GEMM with a peak (numbered by time in calls), plus TFLOP/s vs M; all exist and parse
    assert sorted(f.name for f in files[1:]) == [
        "ticket-tflops.svg",
        *[f"ticket-waterfall-{i}.svg" for i in range(1, 6)],
    ]
    wf_svg = (tmp_path / f"ticket-waterfall-{n}.svg").read_text()
    assert "989" in wf_svg and "736" in wf_svg
    # ncu's findings are there, its link markup resolved, its optional-metric notes left out
    assert "TheoreticalOccupancy" in text and "@section:" not in text
    assert "optional metric" not in text
    # the verdict renders as bold, not as literal asterisks
    html = MD.render(text)
    assert "<strong>Verdict:</strong> in-kernel (near the tensor-pipe limit)" in html
    assert any(t.type == "fence" and t.info == "sh" and "tracekit import" in t.content for t in tokens)


def test_gemm_filter_selects_waterfalls(probe, tmp_path: Path) -> None:
    rep = build_report(probe, load_frames(probe), gemm_filter="M=8192")
    numbers = {c["id"]: i for i, c in enumerate(rep["cases"], 1)}
    (only,) = rep["report"]["waterfalls"]
    assert rep["cases"][numbers[only] - 1]["shape"]["m"] == 8192
    _, files, _ = write_report(rep, "md", tmp_path / "one.md")
    check_markdown(tmp_path / "one.md")
    assert [f.name for f in files[1:]] == ["one-tflops.svg", f"one-waterfall-{numbers[only]}.svg"]


def test_bench_report_failures_and_escaping(bench, tmp_path: Path) -> None:
    out = tmp_path / "bench.md"
    rep = build_report(bench, load_frames(bench))
    write_report(rep, "md", out)
    tokens = check_markdown(out)
    text = out.read_text()
    assert "| driver | `580.159.04` |" in text and "| torch | `2.11.0+cu130` |" in text
    assert "tracekit bench gemm --shapes glm5" in text
    # p10-p90 of a real measurement: bf16 16x768x6144 ran 7.14 us with a 0.5% spread
    assert "| `torch-bf16` | `mm` | 16×768×6144 | bf16 | 1 | 7.1 µs | 7.14 | 7.12–7.16 |" in text
    # every failure's full text sits in a fence; the hostile traceback stays inside its fence
    fences = [t.content for t in tokens if t.type == "fence"]
    for _, _, _, _, message in FAILURE_TEXTS:
        assert any(message in f for f in fences)
    hostile = [f for f in fences if "alert(1)" in f]
    assert len(hostile) == 1 and "</details>" in hostile[0] and "RuntimeError: CUDA error" in hostile[0]
    rendered = MD.render(text)
    assert "<script>" not in rendered
    assert rendered.count("<details>") == rendered.count("</details>") == len(FAILURE_TEXTS) + 1
    # a backend name with | and ` stays one cell
    assert md_code("flashinfer-fp4|cute`dsl") in text


def test_escaping_helpers() -> None:
    # a quoted part stays a code span (its content inert there: a hint's `tracekit …` command renders as code)
    assert md_text("a|b<i>`c`</i> *x* @user $y$") == "a\\|b&lt;i&gt;`c`&lt;/i&gt; \\*x\\* @\u2060user \\$y\\$"
    assert md_text("x `<img src=x>|y` z") == "x `<img src=x>\\|y` z"
    assert "<img" not in MD.render(md_text("x `<img src=x>|y` z"))
    lone = md_text("a ` b")  # an unpaired backtick is escaped
    assert lone == "a \\` b"
    assert md_code("a`b|c") == "`` a`b\\|c ``"
    html = MD.render("| x |\n|---|\n| " + md_text("<img src=x onerror=1> | evil") + " |\n")
    assert "<img" not in html and html.count("<td>") == 1


def _big_run(shared: Path, path: Path):
    """A sweep far too large for one comment: every real measurement x 12 N values, and 400 failures."""
    rows = bench_rows(shared)
    meas = []
    for j in range(12):
        for r in rows:
            # the time grows with N, so each made-up GEMM keeps the real one's rate (never above the peak)
            rec = measurement(r, scale_time=(int(r["N"]) + 64 * j) / int(r["N"]))
            rec["n"] = rec["n"] + 64 * j
            rec["range"] = rec["range"].replace(f"N={r['N']}", f"N={rec['n']}")
            meas.append(rec)
    fails = []
    for i in range(400):
        backend, op, kind, etype, msg = FAILURE_TEXTS[i % len(FAILURE_TEXTS)]
        if i % 5 == 0:
            msg = f"{msg} (shape {i})"  # distinct first lines: more groups
        tb = "Traceback (most recent call last):\n" + "".join(
            f'  File "/site-packages/flashinfer/gemm.py", line {100 + j}, in mm_fp4\n    x = f{j}(a, b)\n'
            for j in range(40)
        )
        fails.append(failure(i, backend, op, kind, etype, msg, tb + f"{etype}: {msg}\n"))
    return bench_run(path, meas, fails)


def test_large_run_fits_github_limit_by_summarising(shared_data: Path, tmp_path: Path) -> None:
    run = _big_run(shared_data, tmp_path / "big")
    rep = build_report(run, load_frames(run))
    counts = rep["report"]["counts"]
    assert counts["gemms"] == 12 * len(bench_rows(shared_data)) and counts["failures"] == 400
    out = tmp_path / "big.md"
    _, _, rendered = write_report(rep, "md", out)
    text = out.read_text()
    assert len(text) <= GITHUB_COMMENT_LIMIT
    assert rendered.summarised and "**Summarised** to fit GitHub's 65,536-character comment limit" in text
    assert any("failure" in s for s in rendered.summarised)
    check_markdown(out)
    # grouped failures keep one full example per shown group, each inside its own details block
    html = MD.render(text)
    assert html.count("<details>") == html.count("</details>") >= 1
    # JSON is never summarised
    data = json.loads(write_report(rep, "json", None)[0])
    assert len(data["failures"]) == 400 and len(data["cases"]) == counts["gemms"]
    assert all(c["factors"] for c in data["cases"])


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)


def test_html_is_self_contained(bench, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    write_report(build_report(bench, load_frames(bench)), "html", out)
    page = out.read_text()
    p = _Tags()
    p.feed(page)
    assert "script" not in p.tags and "svg" in p.tags and "details" in p.tags
    assert not any(k in ("src", "href") for k, _ in p.attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert list(tmp_path.iterdir()) == [out]


def test_cli_report_formats_and_exit_codes(probe, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["report", str(probe.path), "--format", "json", "--gemm", "M=16,"])
    data = json.loads(capsys.readouterr().out)
    assert data["report"]["format"] == "tracekit-report"
    shown = [c for c in data["cases"] if c["id"] in data["report"]["waterfalls"]]
    assert [c["shape"]["m"] for c in shown] == [16]
    main(["report", str(probe.path), "-o", str(tmp_path / "t.md")])
    assert "wrote" in capsys.readouterr().err and (tmp_path / "t-tflops.svg").is_file()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "missing")])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_samples_report(samples_dir: Path, tmp_path: Path) -> None:
    runs = sample_runs(samples_dir)
    if not runs:
        pytest.skip("no sample runs under samples/ yet")
    from tracekit.analyzers.store import open_run

    for path in runs:
        run = open_run(path)
        out = tmp_path / f"{path.name}.md"
        write_report(build_report(run, load_frames(run)), "md", out)
        check_markdown(out)
        assert len(out.read_text()) <= GITHUB_COMMENT_LIMIT


def test_analyzers_import_no_ui() -> None:
    code = (
        "import sys, tracekit.analyzers.report, tracekit.analyzers.plots, tracekit.analyzers.compare;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('rich', 'textual')]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the committed samples (no ../shared needed) ----------------------------------------------------------------------
def test_bench_sample_report_holds_every_fp4_failure_in_full(samples_dir: Path, tmp_path: Path) -> None:
    """The glm5 sweep on the H200: 48 GEMMs and 120 failures (FP4 unsupported on SM 9.0, FlashInfer's JIT build
    failing). The Markdown fits one GitHub comment by grouping the failures and showing the slowest GEMMs'
    waterfalls, never by cutting an error text or a table row."""
    from tracekit.analyzers.store import open_run

    run = open_run(samples_dir / "h200-bench-gemm")
    frames = load_frames(run)
    out = tmp_path / "bench.md"
    rep = build_report(run, frames)
    _, files, rendered = write_report(rep, "md", out)
    tokens = check_markdown(out)
    text = out.read_text()
    assert len(text) <= GITHUB_COMMENT_LIMIT
    assert rendered.summarised and not any("cut" in s for s in rendered.summarised)
    assert "120 failures grouped into" in text and "more characters" not in text
    # the GEMM table keeps all 48 rows (one per line, as many cells as its header: check_markdown)
    gemm_rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "` | `" in ln and "×" in ln]
    assert len(gemm_rows) >= 48
    # each failure group's example in a <details> block holds its whole message and traceback
    html = MD.render(text)
    details = re.findall(r"<details>(.*?)</details>", html, flags=re.S)
    fences = [t.content for t in tokens if t.type == "fence" and t.info == "text"]
    groups = rep["report"]["failure_groups"]
    assert len(details) == len(groups) == len(fences) == 10
    for g in groups:
        ex = rep["failures"][g["example"]]
        body = next(f for f in fences if f.startswith(ex["message"].rstrip()))
        assert (ex["traceback"] or "").rstrip() in body
    assert {g["backend"] for g in groups} >= {
        "torch-nvfp4",
        "torch-mxfp4",
        "flashinfer-fp4-cutlass",
        "sgl-fp4",
    }
    assert any("CUBLAS_STATUS_NOT_SUPPORTED" in f for f in fences)
    assert any("ninja: error:" in f for f in fences)
    assert {f.name for f in files} >= {"bench.md", "bench-tflops.svg"}


def test_capture_sample_report_environment_and_reproduce(samples_dir: Path, tmp_path: Path) -> None:
    """`tracekit capture --nsys --ncu -- tracekit bench gemm ...`: the report says how to capture it again, the
    ncu settings (clock control none), the versions, and ncu's findings with its link markup as words."""
    from tracekit.analyzers.store import open_run

    run = open_run(samples_dir / "h200-capture-gemm")
    out = tmp_path / "cap.md"
    write_report(build_report(run, load_frames(run)), "md", out)
    tokens = check_markdown(out)
    text = out.read_text()
    assert len(text) <= GITHUB_COMMENT_LIMIT
    assert "| ncu clock control | `none`" in text and "NVIDIA H200 (CC 9.0, 132 SMs)" in text
    assert "| torch | `2.11.0` |" in text and "| driver | `580.159.04` |" in text
    (cmd,) = [t.content for t in tokens if t.type == "fence" and t.info == "sh"]
    assert cmd.startswith("tracekit capture") and "--ncu" in cmd and "--nsys" in cmd
    assert "tracekit bench gemm --backends torch-bf16,torch-fp8-tensorwise" in cmd
    assert "### Nsight Compute findings" in text and "@section:" not in text and "section section" not in text
    html = tmp_path / "cap.html"
    write_report(build_report(run, load_frames(run)), "html", html)
    assert "<svg" in html.read_text() and "<script" not in html.read_text()


def test_ncu_link_markup_as_words() -> None:
    from tracekit.analyzers.report import ncu_noise, ncu_text

    assert (
        ncu_text("See @section:LaunchStats:Launch Statistics@ and the @section:X:Warp State@ section.")
        == "See Launch Statistics section and the Warp State section."
    )
    assert ncu_text("@url:Guide:https://docs.nvidia.com/x@") == "Guide (https://docs.nvidia.com/x)"
    assert ncu_noise("OK", "fine") and ncu_noise("WARNING", "The optional metric x could not be found.")
    assert not ncu_noise("OPTIMIZATION", "Small Grid")
