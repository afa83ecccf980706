"""A built wheel holds every module of the checkout, mapped into the ``tracekit.`` namespace.

The editable install that development uses imports through a path finder and hides a package missing from
pyproject.toml's ``packages`` list; a wheel built from the same file would lack it. This builds the wheel and
compares its contents with the folders it is made from.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPING = {"tracekit": "tracekit", "collectors": "tracekit/collectors", "analyzers": "tracekit/analyzers"}
MAPPING["tui"] = "tracekit/tui"
DATA_SUFFIXES = {".py", ".json", ".tcss", ".typed", ".zip"}


def _expected_members() -> set[str]:
    want: set[str] = set()
    for folder, target in MAPPING.items():
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix not in DATA_SUFFIXES:
                continue
            rel = path.relative_to(ROOT / folder).as_posix()
            if folder == "tracekit" and rel.split("/")[0] in {"collectors", "analyzers", "tui"}:
                continue
            want.add(f"{target}/{rel}")
    return want


@pytest.mark.slow
def test_wheel_holds_every_module(tmp_path: Path) -> None:
    pytest.importorskip(
        "setuptools", minversion="77", reason="building the wheel needs setuptools>=77 (.[dev])"
    )
    src = tmp_path / "src"  # built from a copy: setuptools leaves build/ behind in the tree it builds
    for name in MAPPING:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    proc = subprocess.run([*pip, "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # setuptools still ships a package missing from ``packages`` but warns that it will stop doing so
    assert "would be ignored" not in proc.stderr, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("tracekit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_expected_members() - names)
    assert not missing, f"the wheel lacks {missing}"
    assert any(n.endswith("entry_points.txt") for n in names)
    # the wheel imports from a plain folder with none of the checkout on sys.path
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import sys; sys.path[:0] = [sys.argv[1]];"
        "import tracekit.tui.screens.overview, tracekit.tui.widgets.frame_table, tracekit.analyzers.rules.waves;"
        "import tracekit.collectors.capture as c, tracekit.devices as d;"
        "assert (c.SITE_DIR / 'sitecustomize.py').is_file();"
        "assert d.load_catalog()[1];"
        "assert tracekit.__file__.startswith(sys.argv[1]), tracekit.__file__"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-c", code, str(site)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
