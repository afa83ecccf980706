"""tracekit's sitecustomize: instrument GEMM entry points in every Python process started under
``tracekit capture --instrument`` (which puts this folder first on PYTHONPATH).

It chains to the sitecustomize this one shadows (the next one on sys.path), then calls
``tracekit.instrument(lazy=True)``, which wraps torch / flashinfer / sgl_kernel only once the program imports them.
Nothing here may break the user's program: every failure is reported on stderr once and ignored.
Set ``TRACEKIT_INSTRUMENT=0`` to turn it off without changing PYTHONPATH.
"""

import os
import sys


def _chain_previous() -> None:
    """Run the sitecustomize.py that this file shadows, if any."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        try:
            folder = os.path.abspath(entry or os.getcwd())
        except (OSError, TypeError):
            continue
        if folder == here:
            continue
        candidate = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_tracekit_chained_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            return


def _main() -> None:
    try:
        _chain_previous()
    except Exception as exc:
        sys.stderr.write(f"tracekit: the previous sitecustomize failed ({type(exc).__name__}: {exc})\n")
    if os.environ.get("TRACEKIT_INSTRUMENT", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    try:
        from tracekit.collectors.instrument import instrument

        instrument(lazy=True)
    except Exception as exc:
        sys.stderr.write(f"tracekit: GEMM instrumentation is off ({type(exc).__name__}: {exc})\n")


_main()
