"""The compiled modules: the Kineto reader's C scanner (analyzers/readers/kineto/_scan.c), the nsys reader's
page reader (analyzers/readers/nsys/_pages.c) and the nesting sweep of the range join (analyzers/_nest.c).

Everything else about the package is in pyproject.toml; this file exists because pyproject's own table for
extension modules is still experimental in setuptools. ``optional=True``: where no C compiler is found the
install goes on without them: the Kineto reader decodes with msgspec, the nsys reader reads through SQLite and
the join counts with polars (same frames, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.analyzers.readers.kineto._scan",
            sources=["analyzers/readers/kineto/_scan.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "tracekit.analyzers.readers.nsys._pages",
            sources=["analyzers/readers/nsys/_pages.c"],
            depends=["analyzers/_arrow.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "tracekit.analyzers._nest",
            sources=["analyzers/_nest.c"],
            depends=["analyzers/_arrow.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
    ]
)
