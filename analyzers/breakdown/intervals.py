"""Interval arithmetic on one device's GPU activity, in polars: how much of any time window a set of rows covers,
and the time each class owns in a window under a priority order.

A row is one kernel (or memcpy / memset) with ``start_ns`` / ``end_ns`` and a class ``cls``. A set of rows is
merged once into disjoint intervals with the length covered before each (:class:`Cover`); the length it covers in
a window is then two binary searches, so a million rows and thousands of range windows cost a few sorts, not a
join of rows with windows. The time a class owns is a difference of prefix unions: the union of the classes up to
it in the order, minus the union of those before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

__all__ = ["Cover", "window_stats"]


@dataclass(frozen=True)
class Cover:
    """Disjoint intervals ``[s, e)`` in time order, and ``before``: the length the earlier ones cover."""

    s: pl.Series
    e: pl.Series
    before: pl.Series

    @classmethod
    def of(cls, rows: pl.DataFrame) -> Cover:
        """The union of ``rows``' intervals; ``rows`` sorted by ``start_ns``."""
        if rows.height == 0:
            empty = pl.Series([], dtype=pl.Int64)
            return cls(empty, empty, empty)
        starts, ends = rows["start_ns"], rows["end_ns"].cum_max()
        # a row opens an interval where it starts after every earlier row ended; the interval closes at the reach
        # (running max of ends) of the row before the next opening
        opens = (starts > ends.shift(1)).fill_null(True)
        closes = opens.shift(-1).fill_null(True)
        s, e = starts.filter(opens), ends.filter(closes)
        return cls(s, e, (e - s).cum_sum().shift(1, fill_value=0))

    def upto(self, t: pl.Series) -> pl.Series:
        """The length covered before each time of ``t``."""
        if self.s.len() == 0:
            return pl.Series([0] * t.len(), dtype=pl.Int64)
        j = self.s.search_sorted(t, side="right").cast(pl.Int64)  # intervals starting at or before t
        idx = (j - 1).clip(lower_bound=0)
        df = pl.DataFrame(
            {
                "t": t,
                "j": j,
                "s": self.s.gather(idx),
                "e": self.e.gather(idx),
                "b": self.before.gather(idx),
            }
        )
        inside = pl.col("b") + pl.min_horizontal("t", "e") - pl.col("s")
        return df.select(pl.when(pl.col("j") == 0).then(0).otherwise(inside).cast(pl.Int64).alias("v"))["v"]

    def within(self, w0: pl.Series, w1: pl.Series) -> pl.Series:
        """The length covered inside each window ``[w0, w1)``."""
        return self.upto(w1) - self.upto(w0)


def _overlapping(rows: pl.DataFrame, w0: pl.Series, w1: pl.Series) -> pl.Series:
    """How many of ``rows`` overlap each window: start before its end and end after its start."""
    starts = rows["start_ns"].sort()
    ends = rows["end_ns"].sort()
    return (
        starts.search_sorted(w1, side="left").cast(pl.Int64)
        - ends.search_sorted(w0, side="right").cast(pl.Int64)
    ).clip(lower_bound=0)


def window_stats(
    rows: pl.DataFrame, windows: pl.DataFrame, order: Sequence[str], compute: Sequence[str], comm: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """For each window (``w0`` / ``w1`` of ``windows``, numbered ``win`` in their order) on one device's ``rows``:

    - totals: ``win``, ``busy_ns`` (the union of every row), ``compute_ns`` (of the ``compute`` classes),
      ``communication_ns`` (of ``comm``), ``both_ns`` (of compute and communication together), ``kernels``;
    - classes: ``win``, ``cls``, ``time_ns`` (owned under ``order``), ``union_ns`` (its own union), ``kernels``
      (its rows overlapping the window), for each class with rows there.
    """
    present = [c for c in order if c in set(rows["cls"].unique().to_list())]
    rank = {c: i for i, c in enumerate(present)}
    rows = rows.sort("start_ns").with_columns(
        pl.col("cls").replace_strict(rank, return_dtype=pl.Int32).alias("_p")
    )
    w0, w1 = windows["w0"], windows["w1"]
    win = pl.Series("win", range(windows.height), dtype=pl.Int64)
    parts = []
    prev = pl.Series([0] * windows.height, dtype=pl.Int64)
    for i, c in enumerate(present):
        now = Cover.of(rows.filter(pl.col("_p") <= i)).within(w0, w1)
        mine = rows.filter(pl.col("_p") == i)
        parts.append(
            pl.DataFrame(
                {
                    "win": win,
                    "cls": pl.Series([c] * windows.height, dtype=pl.String),
                    "time_ns": now - prev,
                    "union_ns": Cover.of(mine).within(w0, w1),
                    "kernels": _overlapping(mine, w0, w1),
                }
            )
        )
        prev = now
    classes = (
        pl.concat(parts).filter(pl.col("kernels") > 0)
        if parts
        else pl.DataFrame(
            schema={
                "win": pl.Int64,
                "cls": pl.String,
                "time_ns": pl.Int64,
                "union_ns": pl.Int64,
                "kernels": pl.Int64,
            }
        )
    )
    is_compute = pl.col("cls").is_in(list(compute))
    totals = pl.DataFrame(
        {
            "win": win,
            "busy_ns": prev,
            "compute_ns": Cover.of(rows.filter(is_compute)).within(w0, w1),
            "communication_ns": Cover.of(rows.filter(pl.col("cls") == comm)).within(w0, w1),
            "both_ns": Cover.of(rows.filter(is_compute | (pl.col("cls") == comm))).within(w0, w1),
            "kernels": _overlapping(rows, w0, w1),
        }
    )
    return totals, classes
