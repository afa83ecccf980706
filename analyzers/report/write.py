""":func:`write_report`: a report rendered as Markdown, JSON or HTML and written atomically, Markdown's plots
beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .html_page import plot_svg, render_html
from .markdown import Rendered, render_markdown


# --- files -----------------------------------------------------------------------------------------------------------
def write_report(
    rep: dict[str, Any], fmt: str, out: Path | None
) -> tuple[str | None, list[Path], Rendered | None]:
    """Render ``rep`` as ``fmt`` (md | json | html). With ``out``, write it there (Markdown's plots beside it)
    and return ``(None, files, rendered)``; without, return the text to print (Markdown then links no plots)."""
    from tracekit.run import atomic_path

    rendered: Rendered | None = None
    if fmt == "json":
        text = json.dumps(rep, indent=2, default=str, allow_nan=False) + "\n"
    elif fmt == "html":
        text = render_html(rep)
    elif fmt == "md":
        rendered = render_markdown(rep, plot_stem=out.stem if out is not None else None)
        text = rendered.text
    else:
        raise ValueError(f"unknown report format {fmt!r}")
    if out is None:
        return text, [], rendered
    files: list[Path] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    if rendered is not None:
        for name, key in rendered.images.items():
            target = out.parent / name
            with atomic_path(target) as tmp:
                tmp.write_text(plot_svg(rep, key), encoding="utf-8")
                tmp.chmod(0o644)  # a file to share, not mkstemp's private 0600
            files.append(target)
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
    files.insert(0, out)
    return None, files, rendered
