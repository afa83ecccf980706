"""The compiled modules: the Kineto reader's C scanner (analyzers/readers/kineto/_scan.c) and the nsys reader's
page reader (analyzers/readers/nsys/_pages.c).

Everything else about the package is in pyproject.toml; this file exists because pyproject's own table for
extension modules is still experimental in setuptools. ``optional=True``: where no C compiler is found the
install goes on without them: the Kineto reader decodes with msgspec and the nsys reader reads through SQLite
(same frames, slower).
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
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
    ]
)
