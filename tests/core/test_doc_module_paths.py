"""Every module path a comment, docstring or doc names exists: a file moved or removed leaves no reference behind.
Paths are read with a regular expression (``name.py``, ``folder/name.py``) from tracekit/, collectors/,
analyzers/, tui/, docs/ and README.md; a path resolves against the checkout (``tracekit/collectors/x.py`` is
``collectors/x.py``, the editable install's mapping), the naming file's folder or one above it, or one of the
packages (README and the docs name ``harness/timing.py`` under their ``collectors/`` paragraph); a bare file name
resolves where a file of that name exists anywhere in the checkout, a ``tests/`` path by its file name (the test
tree moves into subfolders). Files of other projects that the text names are listed in ``FOREIGN``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tracekit", "collectors", "analyzers", "tui", "docs")
PACKAGES = ("tracekit", "collectors", "analyzers", "tui")
PATH = re.compile(r"(?<![\w./-])((?:[a-z_][a-z0-9_]*/)*[a-z_][a-z0-9_*]*\.py)\b")
PACKAGE_DIR = {
    "tracekit/collectors/": "collectors/",
    "tracekit/analyzers/": "analyzers/",
    "tracekit/tui/": "tui/",
}
FOREIGN = {
    "communication_analysis.py": "HTA (HolisticTraceAnalysis)",
    "hta/analyzers/breakdown_analysis.py": "HTA",
    "hta/common/trace.py": "HTA",
    "hta/utils/utils.py": "HTA",
    "trace_parser.py": "HTA",
    "torch/distributed/run.py": "PyTorch (torchrun)",
    "ncu_report.py": "Nsight Compute's Python report module",
    "path/to/file.py": "an example path in a docstring",
    "script.py": "the user's script in usage lines",
    "serve.py": "the user's script in usage lines",
    "serve_step.py": "the user's script in a measurement note",
}


def _files() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in SCANNED:
        found += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.suffix in (".py", ".md") and "__pycache__" not in p.parts
        ]
    return sorted(found)


def _names() -> set[str]:
    skip = {".venv", ".git", "__pycache__", "node_modules"}
    return {p.name for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)}


def _resolves(token: str, where: Path, names: set[str]) -> bool:
    if "/" not in token:
        return token in names or any(p.match(token) for p in where.parent.glob(token))
    if token.startswith("tests/"):
        return any(p.match(Path(token).name) for p in (ROOT / "tests").rglob("*.py"))
    for prefix, folder in PACKAGE_DIR.items():
        if token.startswith(prefix):
            token = folder + token[len(prefix) :]
    bases = [ROOT, *[d for d in where.parents if ROOT in (d, *d.parents)], *(ROOT / p for p in PACKAGES)]
    return any(next(base.glob(token), None) is not None for base in bases)


def test_every_named_module_path_exists() -> None:
    names = _names()
    stale: list[str] = []
    for path in _files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in PATH.finditer(line):
                token = match.group(1)
                if token in FOREIGN or _resolves(token, path, names):
                    continue
                stale.append(f"{path.relative_to(ROOT)}:{number}: {token}")
    assert not stale, "module paths that do not exist (moved or removed?):\n" + "\n".join(stale)


def test_the_check_catches_a_missing_path(tmp_path: Path) -> None:
    """The resolver itself: a path that exists resolves, one that does not is caught (here the flat
    ``analyzers/moe.py`` that became the ``analyzers/moe/`` package)."""
    names = _names()
    where = ROOT / "docs" / "NOTES.md"
    assert _resolves("collectors/env.py", where, names)
    assert _resolves("tracekit/collectors/env.py", where, names)
    assert _resolves("analyzers/moe/launches.py", where, names)
    assert not _resolves("analyzers/moe.py", where, names)
    assert not _resolves("collectors/moe.py", where, names)
    assert not _resolves("no_such_module.py", where, names)
