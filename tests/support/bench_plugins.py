"""Test-only GEMM backends, loaded by the benchmark worker through TRACEKIT_BACKEND_PLUGINS=<this file>.

They use the wall-clock timer (no torch, except test-torch-cpu: a real CPU matmul for the PyTorch profiler to
record) and fail in real ways: a real SIGSEGV, a real hang, a real exception carrying the cuBLAS error text the
H200 gives for NVFP4 (DEVICE.md)."""

from __future__ import annotations

import os
import signal
import time

from tracekit.collectors.backends import Backend, register

CUBLAS_NVFP4 = (
    "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmulAlgoGetHeuristic( ltHandle, "
    "computeDesc.descriptor(), Adesc.descriptor(), Bdesc.descriptor(), Cdesc.descriptor(), "
    "Ddesc.descriptor(), preference.descriptor(), 1, &heuristicResult, &returnedResult)"
)


class _Cpu(Backend):
    timer = "wall"
    requires = ()
    packages = ()
    op = "mm"
    dtype = "bf16"

    def prepare(self, m, n, k, device, seed):
        return (m, n, k)

    def run(self, state):
        return sum(range(200))

    def reference(self, state):
        return None


class Ok(_Cpu):
    name = "test-ok"


class Segv(_Cpu):
    name = "test-segv"

    def run(self, state):
        if state[0] == 2:
            os.kill(os.getpid(), signal.SIGSEGV)
        return 0


class Hang(_Cpu):
    name = "test-hang"

    def run(self, state):
        if state[0] == 2:
            time.sleep(120)
        return 0


class Unsupported(_Cpu):
    name = "test-unsupported"
    op = "scaled_mm"
    dtype = "e2m1"

    def run(self, state):
        raise RuntimeError(CUBLAS_NVFP4)


class Missing(_Cpu):
    name = "test-missing"
    requires = ("tracekit_no_such_module_xyz",)
    packages = ("tracekit-no-such-package",)


class TorchCpu(_Cpu):
    """A real torch matmul on the CPU inside its tracekit range (a ``record_function`` range under the PyTorch
    profiler): what a profiled worker records can be counted on a machine without a GPU."""

    name = "test-torch-cpu"
    requires = ("torch",)
    packages = ("torch",)

    def prepare(self, m, n, k, device, seed):
        import torch

        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        return {"a": a, "b": b, "range": self.gemm_scope(m, n, k)}

    def run(self, state):
        with state["range"]:
            return state["a"] @ state["b"]


for cls in (Ok, Segv, Hang, Unsupported, Missing, TorchCpu):
    register(cls())


# --- MoE test backends (wall-clock, no torch): `tracekit bench moe` with real worker processes -----------------
from tracekit.collectors.moe import MoeBackend, register_moe  # noqa: E402


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


class _CpuMoe(MoeBackend):
    timer = "wall"
    requires = ()
    packages = ()
    op = "grouped_mm"

    def prepare_weights(self, config, device, seed):
        return {"experts": config.experts}

    def prepare(self, config, case, weights, device, seed):
        return {"counts": case.counts}

    def run(self, state):
        # cost of a grouped launch: one 64-row tile per started 64 rows of each active expert
        _spin(20 * sum(-(-c // 64) for c in state["counts"] if c))
        return 0

    def reference(self, state):
        return None


class MoeGrouped(_CpuMoe):
    name = "test-moe-grouped"


class MoeLoop(_CpuMoe):
    name = "test-moe-loop"
    op = "loop_mm"
    per_expert = True

    def expert_fns(self, config, weights, m, count, device, seed):
        return [lambda m=m: _spin(30 + m * 0.5) for _ in range(count)]

    def tile(self, config, case):
        return None, None, None


class MoeSegv(_CpuMoe):
    name = "test-moe-segv"

    def run(self, state):
        if sum(state["counts"]) == 16:  # 2 tokens x top-8
            os.kill(os.getpid(), signal.SIGSEGV)
        return 0


class MoeMissing(_CpuMoe):
    name = "test-moe-missing"
    requires = ("tracekit_no_such_module_xyz",)
    packages = ("tracekit-no-such-package",)


for _moe_cls in (MoeGrouped, MoeLoop, MoeSegv, MoeMissing):
    register_moe(_moe_cls())
