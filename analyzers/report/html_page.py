"""One self-contained HTML page from the document blocks (inline CSS, plots inlined as SVG, no scripts),
never summarised; :func:`plot_svg` draws a report's plots for either writer."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from typing import Any

from tracekit.text import short_name

from .. import plots as P
from .cases import case_label
from .document import document
from .model import LEVELS, Bullets, Code, Details, Heading, Image, Inline, Para, Table
from .text import _html_attr_safe, _one_line


def _legend(label: str) -> str:
    """A case's name in a plot legend: its short name (:func:`tracekit.text.short_name`), and of a kernel whose
    one template argument names it (``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>``)
    that argument alone, the part that tells the entries apart."""
    short = short_name(label)
    named = re.fullmatch(r"[\w:]*<(\w{12,})>", short)
    return named.group(1) if named else short


# --- plots -----------------------------------------------------------------------------------------------------------
def plot_svg(rep: dict[str, Any], key: str) -> str:
    """The SVG text of plot ``key`` ("tflops" or "waterfall-<n>", n the case's place in GPU-time order)."""
    cases = rep["cases"]
    if key == "tflops":
        groups: dict[str, list[tuple[float, float]]] = {}
        nk: dict[str, set[tuple[Any, Any]]] = {}
        shaped = [c for c in cases if c.get("shape") and c["timing"].get("achieved_tflops")]
        for c in shaped:
            nk.setdefault(_legend(case_label(c)), set()).add((c["shape"]["n"], c["shape"]["k"]))
        peaks: dict[str, float] = {}
        for c in shaped:
            # legends hold short names: 18 `void cutlass::Kernel2<…` entries said nothing
            name = _legend(case_label(c))
            if len(nk[name]) > 1:
                name += f" N={c['shape']['n']} K={c['shape']['k']}"
            groups.setdefault(name, []).append(
                (float(c["shape"]["m"]), float(c["timing"]["achieved_tflops"]))
            )
            peak = c.get("peak")
            if peak and peak.get("dtype_class"):
                peaks[str(peak["dtype_class"])] = float(peak["tflops"])
        series = [P.Series(name, sorted(pts)) for name, pts in sorted(groups.items())]
        gpu = rep["report"]["environment"].get("gpu") or "GPU"
        return P.tflops_vs_m(series[:24], peaks, title=f"TFLOP/s vs M per backend on {gpu}")
    if key.startswith("waterfall-"):
        c = cases[int(key.split("-", 1)[1]) - 1]
        steps = [(str(f["name"]), float(f["value"])) for f in c.get("factors") or []]
        title = f"{short_name(c.get('name'))}: peak to achieved"
        return P.waterfall(float(c["peak"]["tflops"]), steps, title=title)
    raise KeyError(key)


# --- HTML ------------------------------------------------------------------------------------------------------------
# Sized for a window of 1400 px (tests/cli/test_report_formats.py measures it in headless Chromium): text at a
# reading width, tables in a smaller font with tight cells; kernel names are short (their full name on hover).
_CSS = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1340px;margin:2em auto;padding:0 1em;color:#1f2328}
p,ul,pre,details>summary{max-width:1100px}
table{border-collapse:collapse;margin:0.8em 0;font-size:13px}th,td{border:1px solid #d0d7de;padding:2px 5px;vertical-align:top}
th{background:#f6f8fa}td.r{text-align:right}code{background:#f6f8fa;padding:0 3px;border-radius:4px}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap}summary{cursor:pointer}svg{max-width:100%;height:auto}"""


def _unmd(text: str) -> str:
    """Undo md_text's escapes (the HTML writer escapes for HTML instead)."""
    text = text.replace("@\u2060", "@").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub(r"\\(.)", r"\1", text)


_CODE = re.compile(r"`+ ?([^`]+?) ?`+")
"""A code span that md_text kept in a sentence (a hint's command), drawn as <code> in HTML."""


def _text(text: str) -> str:
    """Markdown-escaped text (md_text) as HTML: escapes undone, then HTML-escaped, its code spans as <code>."""
    return _CODE.sub(r"<code>\1</code>", html.escape(_unmd(text)))


def _kernel(name: str) -> str:
    """A kernel or case name: short (demangled form, template arguments elided), the full name on hover, so a
    ``void cutlass::Kernel2<…>(…)`` of 900 characters does not push a table's numbers off the page."""
    short = short_name(name)
    if short == name:
        return f"<code>{html.escape(name)}</code>"
    return f'<code title="{_html_attr_safe(name)}">{html.escape(short)}</code>'


def _html_inline(parts: Inline) -> str:
    out = []
    for kind, text in parts:
        if kind == "c":
            out.append(f"<code>{html.escape(text)}</code>")
        elif kind == "k":
            out.append(_kernel(text))
        elif kind == "b":
            out.append(f"<b>{_text(text)}</b>")
        elif kind == "i":
            out.append(f"<i>{_text(text)}</i>")
        else:
            out.append(_text(text))
    return "".join(out)


def _html_block(b: Any, rep: dict[str, Any]) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{_html_inline(b.parts)}</h{b.level}>"
    if isinstance(b, Para):
        return f"<p>{_html_inline(b.parts)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        align = b.align or ["l"] * len(b.headers)
        head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
        rows = "".join(
            "<tr>"
            + "".join(f'<td class="{a}">{_html_inline(c)}</td>' for a, c in zip(align, row, strict=False))
            + "</tr>"
            for row in b.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(b, Code):
        return f"<pre><code>{html.escape(b.text)}</code></pre>"
    if isinstance(b, Details):
        body = "".join(_html_block(x, rep) for x in b.body)
        return f"<details><summary>{html.escape(_one_line(b.summary, 300))}</summary>{body}</details>"
    if isinstance(b, Image):
        svg = plot_svg(rep, b.key)
        return f'<figure role="img" aria-label="{_html_attr_safe(b.alt)}">{svg}</figure>'
    raise TypeError(f"unknown block {b!r}")


def render_html(rep: dict[str, Any]) -> str:
    """One self-contained HTML page (plots inlined as SVG, no scripts, nothing fetched), never summarised."""
    blocks, _ = document(rep, replace(LEVELS[0], cell_chars=100_000))
    body = "\n".join(_html_block(b, rep) for b in blocks)
    title = html.escape(f"tracekit report: {rep['report']['run']['name']}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
