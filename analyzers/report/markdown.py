"""GitHub-flavoured Markdown from the document blocks, summarised level by level until it fits
:data:`GITHUB_COMMENT_LIMIT`."""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .document import document
from .model import LEVELS, Bullets, Code, Detail, Details, Heading, Image, Inline, Para, Table
from .sections import _summary_text
from .text import _fence, _one_line, md_code, md_text

GITHUB_COMMENT_LIMIT = 65_536
"""GitHub's limit on an issue comment or body, in characters."""


# --- Markdown -----------------------------------------------------------------------------------------------------------
def _md_inline(parts: Inline, *, in_table: bool) -> str:
    out = []
    for kind, text in parts:
        if kind in ("c", "k"):
            out.append(md_code(text, in_table=in_table))
        elif kind in ("b", "i"):
            # the markers hug the words: `**Step: **` is not bold in CommonMark (a space before the closing **)
            mark = "**" if kind == "b" else "*"
            core = text.strip()
            lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
            out.append(f"{lead}{mark}{core}{mark}{trail}" if core else text)
        else:
            out.append(text)
    return "".join(out)


def _md_block(b: Any, image_path: Callable[[str], str | None]) -> str:
    if isinstance(b, Heading):
        return "#" * b.level + " " + _md_inline(b.parts, in_table=False)
    if isinstance(b, Para):
        return _md_inline(b.parts, in_table=False)
    if isinstance(b, Bullets):
        return "\n".join("- " + _md_inline(item, in_table=False) for item in b.items)
    if isinstance(b, Table):
        n = len(b.headers)
        head = "| " + " | ".join(md_text(h) for h in b.headers) + " |"
        align = b.align or ["l"] * n
        sep = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
        lines = [head, sep]
        for row in b.rows:
            cells = [_md_inline(c, in_table=True) or " " for c in row]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    if isinstance(b, Code):
        fence = _fence(b.text)
        return f"{fence}{b.lang}\n{b.text}\n{fence}"
    if isinstance(b, Details):
        summary = html.escape(_summary_text(_one_line(b.summary, 300)), quote=False)
        body = "\n\n".join(_md_block(x, image_path) for x in b.body)
        return f"<details>\n<summary>{summary}</summary>\n\n{body}\n\n</details>"
    if isinstance(b, Image):
        path = image_path(b.key)
        if path is None:
            return ""
        return f"![{md_text(b.alt)}]({urllib.parse.quote(path)})"
    raise TypeError(f"unknown block {b!r}")


@dataclass
class Rendered:
    """A rendered Markdown report: its text, the plots it links (file name -> key), and what was summarised."""

    text: str
    images: dict[str, str]
    summarised: list[str]
    level: str


def render_markdown(
    rep: dict[str, Any],
    *,
    plot_stem: str | None = None,
    limit: int | None = GITHUB_COMMENT_LIMIT,
    levels: Sequence[Detail] = LEVELS,
) -> Rendered:
    """Markdown of ``rep`` at the first detail level that fits ``limit`` characters. Plots are linked as
    ``<plot_stem>-<key>.svg`` beside the Markdown (none when ``plot_stem`` is None)."""
    chosen: Rendered | None = None
    for d in levels:
        images: dict[str, str] = {}

        def image_path(key: str, images: dict[str, str] = images) -> str | None:
            if plot_stem is None:
                return None
            name = f"{plot_stem}-{key}.svg"
            images[name] = key
            return name

        blocks, notes = document(rep, d)
        text = "\n\n".join(s for s in (_md_block(b, image_path) for b in blocks) if s) + "\n"
        chosen = Rendered(text, images, notes, d.name)
        if limit is None or len(text) <= limit:
            return chosen
    assert chosen is not None
    return chosen
