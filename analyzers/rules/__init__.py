"""Rules: one small function per cause of a GEMM's gap to peak, each returning a :class:`Factor` (or None when it
has nothing to say). Rules read the parts of a :class:`tracekit.analyzers.gemm.GemmCase` (its shape, kernel, timing, Nsight Compute
evidence, clock and device) and never print or plot; :mod:`tracekit.analyzers.explain` multiplies their factors into the waterfall.

=================  ===========================================================================================
rule               cause
=================  ===========================================================================================
``clock``          SM clock below the clock the datasheet peak is quoted at (power / thermal cap, ncu lock)
``waves``          wave quantization: tiles (or CTAs) do not fill a whole number of waves, or leave SMs idle
``memory``         roofline: bytes / bandwidth exceed FLOPs / compute peak
``kernel``         in-kernel efficiency: the rest, with tensor-pipe, stall, occupancy and shared-memory evidence
``splitk``         the split-K reduce kernels a call adds to its GEMM time
``aux``            auxiliary kernels a call owns (quantize before it, activation after it, layout copies)
``gaps``           idle GPU time inside a call and between back-to-back calls (launch overhead)
=================  ===========================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NO_LOSS", "Factor"]


NO_LOSS = 0.995
"""A factor at or above this value costs nothing worth naming: it gets no remedy and is never the verdict."""


@dataclass
class Factor:
    """One multiplicative step of the waterfall.

    ``value`` is in (0, 1] (1 = no loss); ``evidence`` maps metric names to the values the rule used;
    ``sentence`` says in plain words what happened; ``remedy`` what to try; ``cause`` a short sub-cause for the
    in-kernel factor (e.g. ``occupancy limited by shared memory``).
    """

    name: str
    value: float
    sentence: str
    evidence: dict[str, Any] = field(default_factory=dict)
    remedy: str | None = None
    cause: str | None = None

    def __post_init__(self) -> None:
        if self.value >= NO_LOSS:
            self.remedy = None  # a factor of x1.000 has nothing to remedy

    @property
    def loss(self) -> float:
        return 1.0 - self.value

    @property
    def gain_pct(self) -> float:
        """Speed-up if this loss were removed, %."""
        return (1.0 / self.value - 1.0) * 100.0 if self.value > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "sentence": self.sentence,
            "evidence": self.evidence,
            "remedy": self.remedy,
            "cause": self.cause,
            "gain_pct": self.gain_pct,
        }
