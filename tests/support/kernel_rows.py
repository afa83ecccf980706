"""Small kernels frames for the classifier's tests: rows 10 ns apart, 5 ns long, the given columns, conformed to
the kernels schema."""

from __future__ import annotations

import polars as pl

from tracekit.frames import SPECS


def kernels(**cols: list) -> pl.DataFrame:
    """A kernels frame of ``len(any column)`` rows: ``kernel_id`` 0.., ``start_ns`` every 10 ns, 5 ns long, plus
    ``cols``; every other column of the schema null."""
    n = len(next(iter(cols.values())))
    base = {"kernel_id": list(range(n)), "start_ns": [i * 10 for i in range(n)], "duration_ns": [5] * n}
    return SPECS["kernels"].conform(pl.DataFrame({**base, **cols}))
