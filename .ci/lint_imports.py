"""Checks the import-linter contracts of pyproject.toml ([tool.importlinter]) against the installed layout.

The source folders map into the ``tracekit.`` namespace through setuptools' ``package-dir`` (``analyzers/`` is
``tracekit.analyzers``), which import-linter cannot follow: it walks the folder of the root package only. So the
packages are laid out as installed (``tracekit/analyzers/...``) in a temporary folder, and lint-imports runs on
that copy with it first on the path. Run from anywhere: ``python .ci/lint_imports.py``; exit code as lint-imports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI_MODULES = {"__init__", "__main__", "cli"}
"""Modules of tracekit/ outside the core contract: the CLI, its entry points and the package's lazy shims."""


def stage(dest: Path) -> None:
    """Copies every package folder of pyproject's ``package-dir`` under ``dest`` at its dotted location."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    # Parents first, so a child package (tracekit.analyzers) lands inside its parent's copy.
    for package, folder in sorted(setuptools["package-dir"].items(), key=lambda item: item[0].count(".")):
        shutil.copytree(
            ROOT / folder,
            dest.joinpath(*package.split(".")),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            dirs_exist_ok=True,
        )


def unlisted_core_modules(pyproject: dict) -> list[str]:
    """Modules of tracekit/ that the ``core`` contract does not name: a new core module must be listed there
    (import-linter cannot say "tracekit.* but the CLI" in a forbidden contract)."""
    folder = ROOT / pyproject["tool"]["setuptools"]["package-dir"]["tracekit"]
    core = next(c for c in pyproject["tool"]["importlinter"]["contracts"] if c["id"] == "core")
    listed = set(core["source_modules"])
    return sorted(
        f"tracekit.{p.stem}"
        for p in folder.glob("*.py")
        if p.stem not in CLI_MODULES and f"tracekit.{p.stem}" not in listed
    )


def lint_imports() -> str | None:
    """The lint-imports of this Python's environment (else of the PATH), None when import-linter is absent."""
    return shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")


def check(staged: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """lint-imports run on the packages laid out in ``staged`` (see :func:`stage`), its output captured."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(staged), os.environ.get("PYTHONPATH")])),
    }
    cmd = [lint_imports() or "lint-imports", "--no-cache", "--no-logo", str(ROOT / "pyproject.toml"), *args]
    return subprocess.run(cmd, env=env, cwd=staged, capture_output=True, text=True)


def main() -> int:
    lint = lint_imports()
    if lint is None:
        print("lint-imports not found: pip install -e '.[dev]' (it brings import-linter)", file=sys.stderr)
        return 3
    missing = unlisted_core_modules(tomllib.loads((ROOT / "pyproject.toml").read_text()))
    if missing:
        print(
            f"the core contract of pyproject.toml does not list {', '.join(missing)}: add them to its source_modules",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="tracekit-lint-imports-") as tmp:
        stage(Path(tmp))
        done = check(Path(tmp), *sys.argv[1:])
        print(done.stdout, end="")
        print(done.stderr, end="", file=sys.stderr)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
