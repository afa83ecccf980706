"""The layer contracts (pyproject.toml [tool.importlinter], checked by .ci/lint_imports.py in CI's lint step) are
kept today, and they catch what they are for: a function-level (lazy) import across a layer breaks them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lint() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lint_imports", ROOT / ".ci" / "lint_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.lint_imports() is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    return module


def test_contracts_kept(lint: ModuleType, tmp_path: Path) -> None:
    lint.stage(tmp_path)
    assert (tmp_path / "tracekit" / "analyzers" / "__init__.py").is_file()  # laid out as installed
    done = lint.check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        (
            "tui/data.py",
            "from tracekit.commands.explain import device_notes",
            "tui imports no tracekit.commands",
        ),
        ("analyzers/flops.py", "import textual", "analyzers import neither"),
        ("collectors/env.py", "from tracekit.analyzers import summary", "collectors import neither"),
        ("tracekit/devices.py", "from tracekit.analyzers.importer import open_run", "core (tracekit"),
        ("tracekit/schema.py", "import polars", "the frame schemas and typed records import no polars"),
        ("tracekit/records.py", "from tracekit.frames import SPECS", "the frame schemas and typed records"),
    ],
)
def test_a_lazy_import_across_a_layer_breaks_its_contract(
    lint: ModuleType, tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    lint.stage(tmp_path)
    package, _, rest = module.partition("/")
    target = tmp_path / "tracekit" / ("" if package == "tracekit" else package) / rest
    with target.open("a") as f:
        f.write(f"\n\ndef _sneaky() -> None:\n    {statement}  # noqa\n")
    done = lint.check(tmp_path)
    assert done.returncode != 0
    broken = done.stdout.split("Broken contracts", 1)[1]
    assert contract in broken, broken


def test_every_core_module_is_in_the_core_contract(lint: ModuleType) -> None:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert lint.unlisted_core_modules(pyproject) == []
    core = next(c for c in pyproject["tool"]["importlinter"]["contracts"] if c["id"] == "core")
    core["source_modules"].remove("tracekit.text")
    assert lint.unlisted_core_modules(pyproject) == ["tracekit.text"]


def test_runs_as_ci_does() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "lint_imports.py")], capture_output=True, text=True, check=False
    )
    if "lint-imports not found" in done.stderr:
        pytest.skip("import-linter is not installed")
    assert done.returncode == 0, done.stdout + done.stderr
