"""A kernel's class from its name: the classifier lives in tracekit core (tracekit/kernel_names.py), shared with
the collectors that choose which kernels the ncu pass profiles; re-exported here for the analyzers."""

from tracekit.kernel_names import (
    KernelInfo,
    classify_name,
    classify_op,
    op_key,
    op_rule,
    signature_rate_class,
    split_name,
)

__all__ = [
    "KernelInfo",
    "classify_name",
    "classify_op",
    "op_key",
    "op_rule",
    "signature_rate_class",
    "split_name",
]
