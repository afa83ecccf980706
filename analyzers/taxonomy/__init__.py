"""The kernel taxonomy: every kernel of every format gets one class (docs/KERNELS.md)."""

from .names import KernelInfo, classify_name, classify_op, op_key, signature_rate_class, split_name
from .table import CLASSES, load_table

__all__ = [
    "CLASSES",
    "KernelInfo",
    "classify_name",
    "classify_op",
    "load_table",
    "op_key",
    "signature_rate_class",
    "split_name",
]
