"""The compiled modules and the install without them.

``setup.py`` builds two C modules (``TRACEKIT_NATIVE``: ``auto`` optional, ``require`` a failure where one does
not build, ``skip`` none). CI installs with ``require`` and fails when one is missing (:func:`test_every_native_
module_is_built_where_required`); a user without a compiler gets the pure-Python paths, tested here as such: a
fresh interpreter where importing the two modules fails (as it does where they were never built) imports real
files of both formats, and its frames must equal the native import's.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

ROOT = Path(__file__).resolve().parents[2]
NATIVE = (
    "tracekit.analyzers.readers.kineto._scan",
    "tracekit.analyzers.readers.nsys._pages",
)

HIDDEN = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    class NoNative(MetaPathFinder):
        # as where no C compiler was found at install time: the compiled modules do not exist
        def find_spec(self, name, path=None, target=None):
            if name in {native!r}:
                raise ImportError(f"No module named {{name!r}}")
            return None

    sys.meta_path.insert(0, NoNative())
    from pathlib import Path
    from tracekit.analyzers.importer import import_files
    from tracekit.analyzers.readers.kineto import native
    from tracekit.analyzers.readers.nsys import pages

    assert not native.AVAILABLE and not pages.AVAILABLE
    import_files([Path(p) for p in sys.argv[2:]], Path(sys.argv[1]))
    print("imported without the native modules")
    """
).format(native=NATIVE)


def _setup_modules(mode: str | None, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """The (name, optional) of the extension modules setup.py asks setuptools for under ``TRACEKIT_NATIVE``."""
    import setuptools

    seen: dict[str, object] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: seen.update(kw))
    if mode is None:
        monkeypatch.delenv("TRACEKIT_NATIVE", raising=False)
    else:
        monkeypatch.setenv("TRACEKIT_NATIVE", mode)
    spec = importlib.util.spec_from_file_location("tracekit_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return [(e.name, e.optional) for e in seen["ext_modules"]]  # type: ignore[attr-defined]


def test_setup_builds_the_modules_optional_required_or_not_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _setup_modules(None, monkeypatch) == [(n, True) for n in NATIVE]
    assert _setup_modules("require", monkeypatch) == [(n, False) for n in NATIVE]
    assert _setup_modules("skip", monkeypatch) == []
    with pytest.raises(SystemExit, match="TRACEKIT_NATIVE must be one of"):
        _setup_modules("always", monkeypatch)


def test_every_native_module_is_built_where_required() -> None:
    if os.environ.get("TRACEKIT_NATIVE") != "require":
        pytest.skip(
            "TRACEKIT_NATIVE=require is not set (CI sets it: a module that did not build fails there)"
        )
    for name in NATIVE:
        importlib.import_module(name)  # ImportError fails the test


@pytest.mark.slow
def test_the_pure_python_paths_give_the_native_frames(shared_data: Path, tmp_path: Path) -> None:
    from tracekit.analyzers.importer import import_files
    from tracekit.analyzers.readers.kineto import native
    from tracekit.analyzers.readers.nsys import pages
    from tracekit.analyzers.store import load_frames

    if not pages.AVAILABLE or not native.AVAILABLE:
        pytest.skip("the native modules are not built here: there is nothing to compare the fallback with")
    files = [shared_data / "h200-probe" / "probe.sqlite", shared_data / "h200-probe" / "torch_trace.json.gz"]
    native_run, _ = import_files(files, tmp_path / "native")
    proc = subprocess.run(
        [sys.executable, "-c", HIDDEN, str(tmp_path / "plain"), *map(str, files)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    from tracekit.run import Run

    plain = load_frames(Run.open(tmp_path / "plain"))
    native = load_frames(native_run)
    assert set(plain) == set(native)
    assert native["kernels"].height > 0 and native["ranges"].height > 0
    for name, df in native.items():
        assert_frame_equal(plain[name], df, check_row_order=True)
