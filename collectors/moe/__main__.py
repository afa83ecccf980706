"""``python -m tracekit.collectors.moe``: the MoE worker (:func:`tracekit.collectors.moe.worker.main`).

It runs the importable package, so plugins register into the same backend registry the worker reads.
"""

import sys

from tracekit.collectors.moe import main

if __name__ == "__main__":
    sys.exit(main())
