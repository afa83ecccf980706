"""The readers: one package per profiler format, each turning a raw file into frames (an ``Extract``).

``protocol.py`` is the seam (a ``Reader``: ``kind``, ``sniff(head)``, ``read(source, options)``), ``registry.py``
the readers in the order their sniffs are tried (a new format is one module and one line there), ``source.py``
the raw file opened once (its content decompressed at most once), ``base.py`` what every reader returns and the
helpers they share. Formats: ``kineto/`` (PyTorch profiler traces), ``nsys/`` (Nsight Systems SQLite exports),
``ncu/`` (Nsight Compute reports and CSV exports), ``jsonl.py`` (tracekit's own records); ``torch_ops.py`` gives
PyTorch GEMM ops their shapes for the two formats that record them. Importing this package imports no reader:
worker processes that import one reader's modules pay for that one only.
"""
