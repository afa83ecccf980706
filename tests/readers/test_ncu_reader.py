"""Where Nsight Compute's Python reader (``ncu_report``) comes from, and what happens without one.

A GPU host set up by hand often has Nsight Compute but not the PyPI ``ncu-report`` package: the reports are then
read with the ``extras/python`` reader of the install. Where there is no reader at all, the import says so
(a missing tool, exit 3) instead of calling a good report damaged, which it once did.

Each case runs the CLI in a fresh interpreter whose ``sitecustomize`` hides the installed package (the reader
process that tracekit starts inherits it through PYTHONPATH), with ``ncu`` off PATH.
"""

from __future__ import annotations

import glob
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import EXIT_MISSING_TOOL

HIDE = '''
import importlib.machinery, sys
class _NoInstalledReader:
    """The path finder, blind to ncu_report in site-packages (an Nsight Compute extras/python folder still
    counts): find_spec gives None and import raises ModuleNotFoundError, as where it is not installed."""
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if path is None and name.split(".")[0] in ("ncu_report", "_ncu_report"):
            path = [p for p in sys.path if "site-packages" not in p]
        return self.inner.find_spec(name, path, target)
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
PathFinder = importlib.machinery.PathFinder
sys.meta_path[:] = [_NoInstalledReader(f) if f is PathFinder else f for f in sys.meta_path]
'''

pytestmark = pytest.mark.skipif(
    bool(
        glob.glob("/opt/nvidia/nsight-compute/*/extras/python")
        + glob.glob("/usr/local/cuda*/nsight-compute*")
    ),
    reason="this machine has an Nsight Compute install, whose reader tracekit would find",
)


def _report(samples_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ncu.ncu-rep"
    out.write_bytes(lzma.decompress((samples_dir / "h200-capture-gemm/raw/ncu.ncu-rep.xz").read_bytes()))
    return out


def _cli(tmp_path: Path, *args: str, ncu_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE)
    env = dict(os.environ, PYTHONPATH=str(site), PATH=os.path.dirname(sys.executable))
    env.pop("TRACEKIT_NCU", None)
    if ncu_dir is not None:
        env["TRACEKIT_NCU"] = str(ncu_dir / "ncu")
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_without_any_reader_the_import_is_a_missing_tool(samples_dir: Path, tmp_path: Path) -> None:
    rep = _report(samples_dir, tmp_path)
    p = _cli(tmp_path, "import", str(rep), "-o", str(tmp_path / "run"))
    assert p.returncode == EXIT_MISSING_TOOL, p.stderr
    err = p.stderr.strip()
    assert "ncu_report" in err and "pip install ncu-report" in err
    assert "damaged" not in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing is written when no file can be read


def test_the_reader_of_an_nsight_compute_install_is_used(samples_dir: Path, tmp_path: Path) -> None:
    """An install laid out as Nsight Compute's (``ncu`` beside ``extras/python``), found through TRACEKIT_NCU;
    its reader is the installed package's, reached only through that folder."""
    import importlib.util

    spec = importlib.util.find_spec("ncu_report")
    assert spec is not None and spec.origin is not None
    install = tmp_path / "nsight-compute"
    (install / "extras" / "python").mkdir(parents=True)
    (install / "ncu").write_text("#!/bin/sh\nexit 1\n")
    (install / "ncu").chmod(0o755)
    (install / "extras" / "python" / "ncu_report").symlink_to(Path(spec.origin).parent)
    rep = _report(samples_dir, tmp_path)
    hidden = _cli(tmp_path, "import", str(rep), "-o", str(tmp_path / "none"))
    assert hidden.returncode == EXIT_MISSING_TOOL  # the package is hidden indeed ...
    p = _cli(tmp_path, "import", str(rep), "-o", str(tmp_path / "run"), ncu_dir=install)
    assert p.returncode == 0, p.stderr  # ... and the install's reader reads the report
    q = _cli(tmp_path, "show", str(tmp_path / "run"), "--json", ncu_dir=install)
    assert q.returncode == 0, q.stderr
    import json

    summary = json.loads(q.stdout)
    assert summary["ncu_kernel_count"] == 30  # every profiled kernel of the capture
    assert all(src["status"] == "ok" for src in summary["sources"]), summary["sources"]


def test_a_reader_on_the_callers_own_path_reaches_the_reader_process(
    samples_dir: Path, tmp_path: Path
) -> None:
    """A program that puts an install's extras/python on ``sys.path`` itself (as tests/gpu did) imports
    ``ncu_report`` from there; the reader runs in a fresh interpreter, which must be told the folder too."""
    import importlib.util

    spec = importlib.util.find_spec("ncu_report")
    assert spec is not None and spec.origin is not None
    extras = tmp_path / "elsewhere" / "extras" / "python"
    extras.mkdir(parents=True)
    (extras / "ncu_report").symlink_to(Path(spec.origin).parent)
    rep = _report(samples_dir, tmp_path)
    code = (
        f"import sys\nsys.path.append({str(extras)!r})\n"
        "from tracekit.analyzers.readers.ncu.report import read_ncu_report\n"
        f"print(read_ncu_report({str(rep)!r}).frame('ncu').height)\n"
    )
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE)
    env = dict(os.environ, PYTHONPATH=str(site), PATH=os.path.dirname(sys.executable))
    env.pop("TRACEKIT_NCU", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-1] == "30"
