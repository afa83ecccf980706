// A user's SIMT fp32 GEMM (a plain shared-memory tiled sgemm, no tensor cores) launched twice with the same
// kernel: once asking for ~200 KB of dynamic shared memory it does not use, which caps occupancy at one CTA
// (8 warps) per SM, and once with only the 2 KB its tiles need (8 CTAs, 64 warps per SM).
//
//   sgemm_smem_capped   M=N=K=2048 fp32, 204800 B dynamic shared memory per CTA (occupancy limited by smem)
//   sgemm_smem_control  M=N=K=2048 fp32, 2048 B dynamic shared memory per CTA   (control)
//
// Each range (the user's own NVTX names, default domain) holds one launch; --reps launches per variant run
// inside ranges after one warm-up launch outside them. Prints one line per variant: CTAs per SM (CUDA
// occupancy API), median ms (CUDA events), TFLOP/s, and a spot check against a double-precision host result.
// Build: nvcc -O3 -arch=sm_90 -o simt_smem simt_smem.cu -ldl     Run: ./simt_smem [--reps N]
// Does not use tracekit; NVTX through the header-only NVTX3 that ships with CUDA 12+.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                      \
  do {                                                                                                \
    cudaError_t err_ = (call);                                                                        \
    if (err_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "simt_smem: %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__,          \
                   cudaGetErrorString(err_));                                                         \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

constexpr int TILE = 16;
constexpr int DIM = 2048;
constexpr size_t NEEDED_SMEM = 2 * TILE * TILE * sizeof(float);  // one A tile and one B tile
constexpr size_t CAPPED_SMEM = 200 * 1024;

// C = A * B, row-major, one output element per thread, TILE x TILE threads per CTA; tiles in dynamic shared
// memory so the same kernel can be launched with more shared memory than it uses.
__global__ void sgemm_smem(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                           float* __restrict__ C) {
  extern __shared__ float smem[];
  float* As = smem;
  float* Bs = smem + TILE * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty * TILE + tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
    Bs[ty * TILE + tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TILE; ++kk) acc += As[ty * TILE + kk] * Bs[kk * TILE + tx];
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

static float lcg(unsigned* s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
}

int main(int argc, char** argv) {
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--reps N]   (N >= 1 launches per variant inside its range)\n",
                   argv[0]);
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "simt_smem: --reps must be at least 1\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "simt_smem: needs a CUDA GPU\n");
    return 1;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int M = DIM, N = DIM, K = DIM;
  std::vector<float> hA((size_t)M * K), hB((size_t)K * N), hC((size_t)M * N);
  unsigned seed = 12345u;
  for (auto& v : hA) v = lcg(&seed);
  for (auto& v : hB) v = lcg(&seed);
  float *dA, *dB, *dC;
  CK(cudaMalloc(&dA, hA.size() * sizeof(float)));
  CK(cudaMalloc(&dB, hB.size() * sizeof(float)));
  CK(cudaMalloc(&dC, hC.size() * sizeof(float)));
  CK(cudaMemcpy(dA, hA.data(), hA.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, hB.data(), hB.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(sgemm_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)CAPPED_SMEM));

  const dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  struct Variant {
    const char* range;
    size_t smem;
  } variants[] = {{"sgemm_smem_capped", CAPPED_SMEM}, {"sgemm_smem_control", NEEDED_SMEM}};
  cudaEvent_t start, end;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&end));
  for (const Variant& v : variants) {
    int ctas = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, sgemm_smem, TILE * TILE, v.smem));
    sgemm_smem<<<grid, block, v.smem>>>(M, N, K, dA, dB, dC);  // warm-up, outside the range
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; ++r) {
      nvtxRangePushA(v.range);
      CK(cudaEventRecord(start));
      sgemm_smem<<<grid, block, v.smem>>>(M, N, K, dA, dB, dC);
      CK(cudaGetLastError());
      CK(cudaEventRecord(end));
      nvtxRangePop();
      CK(cudaEventSynchronize(end));
      CK(cudaEventElapsedTime(&ms[r], start, end));
    }
    CK(cudaMemcpy(hC.data(), dC, hC.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int s = 0; s < 16; ++s) {  // spot check 16 elements against a double-precision dot product
      const int i = (s * 977) % M, j = (s * 1231 + 7) % N;
      double ref = 0.0;
      for (int k = 0; k < K; ++k) ref += (double)hA[(size_t)i * K + k] * hB[(size_t)k * N + j];
      worst = std::max(worst, std::fabs(ref - hC[(size_t)i * N + j]));
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[reps / 2];
    std::printf("%s: M=%d N=%d K=%d fp32 SIMT tile %dx%d, %zu B dynamic smem/CTA: "
                "%d CTAs/SM (%d warps of %d) on %d SMs: median %.3f ms, %.2f TFLOP/s, max abs err %.2e\n",
                v.range, M, N, K, TILE, TILE, v.smem, ctas, ctas * TILE * TILE / 32,
                prop.maxThreadsPerMultiProcessor / 32, prop.multiProcessorCount, med,
                2.0 * M * N * K / (med / 1e3) / 1e12, worst);
    std::fflush(stdout);
    if (worst > 1e-2) {
      std::fprintf(stderr, "simt_smem: %s result is wrong (max abs err %.3e)\n", v.range, worst);
      return 1;
    }
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(end));
  CK(cudaFree(dA));
  CK(cudaFree(dB));
  CK(cudaFree(dC));
  return 0;
}
