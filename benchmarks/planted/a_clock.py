"""Planted cause (a): the clock. A sustained BF16 8192^3 loop drives the H200 to its 700 W cap, where the SM
clock settles near 1470 MHz (DEVICE.md: 665 TFLOP/s, 67% of 989); a single launch after idle runs at whatever
clock the GPU ramped to. Both are recorded with NVML beside them (measurement rows in the run's raw/), and the
timeline shows the same ranges. Expected verdict of the sustained GEMM: clock (power cap). GPU time ~4 s.
"""

from __future__ import annotations

from _common import event_times, gemm_range, measurement, record, sampled, sleep_idle, torch_cuda

from tracekit.collectors.ranges import gemm_name

N = 8192


def main() -> None:
    torch = torch_cuda()
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)
    args = ("torch-bf16", "mm", N, N, N, "bf16", "bf16", "bf16")

    def one() -> None:
        torch.mm(a, b, out=out)

    one()
    torch.cuda.synchronize()
    sleep_idle(2.0)
    with gemm_range(*args, phase="cold"):
        times, sample = sampled(lambda: event_times(torch, one, 1))
    record(measurement(gemm_name(*args, phase="cold"), N, N, N, "bf16", times, sample))

    # Sustained: ~3 s of back-to-back launches; the second half (clock settled under the cap) is measured.
    sustained = gemm_range(*args, phase="sustained")

    def launch() -> None:
        with sustained:
            one()

    event_times(torch, launch, 900)  # ~1.5 s warm-up to the power cap
    times, sample = sampled(lambda: event_times(torch, launch, 900))
    record(measurement(gemm_name(*args, phase="sustained"), N, N, N, "bf16", times, sample))


if __name__ == "__main__":
    main()
