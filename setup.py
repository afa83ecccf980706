"""The compiled modules: the Kineto reader's C scanner (analyzers/readers/kineto/_scan.c) and the nsys reader's
page reader (analyzers/readers/nsys/_pages.c), each the fast path of its format (docs/PERFORMANCE.md).

Everything else about the package is in pyproject.toml; this file exists because pyproject's own table for
extension modules is still experimental in setuptools.

``TRACEKIT_NATIVE`` (read at build time) chooses what a build does with them:

- unset or ``auto``: built where a C compiler is found, else left out (``optional=True``) and the install goes on
  without them: the Kineto reader decodes with msgspec and the nsys reader reads through SQLite (same frames,
  slower; tests/core/test_native_fallback.py compares the two);
- ``require``: a module that does not build fails the install (CI builds this way, .ci/run);
- ``skip``: none is built (to install or test the pure-Python paths on a machine that has a compiler).
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

MODES = ("auto", "require", "skip")
FLAGS = ["-O2", "-std=c11"]


def native_modules(mode: str) -> list[Extension]:
    """The extension modules a build with ``TRACEKIT_NATIVE=mode`` makes (``optional`` unless required)."""
    if mode not in MODES:
        raise SystemExit(f"TRACEKIT_NATIVE must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "skip":
        return []
    optional = mode == "auto"
    return [
        Extension(
            "tracekit.analyzers.readers.kineto._scan",
            sources=["analyzers/readers/kineto/_scan.c"],
            optional=optional,
            extra_compile_args=FLAGS,
        ),
        Extension(
            "tracekit.analyzers.readers.nsys._pages",
            sources=["analyzers/readers/nsys/_pages.c"],
            depends=["analyzers/_arrow.h"],
            optional=optional,
            extra_compile_args=FLAGS,
        ),
    ]


setup(ext_modules=native_modules(os.environ.get("TRACEKIT_NATIVE", "auto") or "auto"))
