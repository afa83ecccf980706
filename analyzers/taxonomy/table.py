"""The kernel-class table: its loader lives in tracekit core (tracekit/kernel_table.py), shared with the collectors
that choose which kernels the ncu pass profiles; re-exported here for the analyzers."""

from tracekit.kernel_table import CLASSES, DECODERS, Family, OpRule, Table, load_table

__all__ = ["CLASSES", "DECODERS", "Family", "OpRule", "Table", "load_table"]
