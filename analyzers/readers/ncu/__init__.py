"""Nsight Compute: reports (.ncu-rep) through NVIDIA's ``ncu_report`` in a child process (``report.py``,
``worker.py``) and CSV exports of the raw or details page (``csv_export.py``); ``columns.py`` names the metrics
behind each column of the ``ncu`` frame."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import FormatReader, ReadOptions

if TYPE_CHECKING:
    from ..base import Extract
    from ..source import Source


class ReportReader(FormatReader):
    """A binary Nsight Compute report, from its magic bytes."""

    kind = "ncu"

    def sniff(self, head: bytes) -> bool:
        from .report import MAGIC

        return head[:4] == MAGIC

    def check(self, source: Source) -> None:
        from .report import check_reader

        check_reader(source.path)  # a missing reader is a missing tool (exit 3), not a damaged file

    def read(self, source: Source, options: ReadOptions) -> Extract:
        from .report import read_ncu_report

        return read_ncu_report(source.file())


class CsvReader(FormatReader):
    """A CSV export (``ncu --csv --page raw|details``), from its header line. Two exports of one report hold the
    same launches: read together, each launch counts once (:meth:`merge`)."""

    kind = "ncu-csv"
    merges = True

    def sniff(self, head: bytes) -> bool:
        from .csv_export import sniff_csv_head

        return sniff_csv_head(head) is not None

    def read(self, source: Source, options: ReadOptions) -> Extract:
        from .csv_export import read_ncu_csv

        return read_ncu_csv(source.file())

    def merge(self, extracts: list[Extract]) -> list[Extract]:
        from .csv_export import drop_repeated_exports

        return drop_repeated_exports(extracts)


REPORT = ReportReader()
CSV = CsvReader()
