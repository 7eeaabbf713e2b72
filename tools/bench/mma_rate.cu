// Throughput of mma.sync on this GPU: bf16 m16n8k16 against e4m3 m16n8k32 (f32 accumulate),
// 8 independent accumulators per warp, 16 warps per SM, B operands changing every iteration
// (docs/fp8.md, "Portable e4m3 forward"). e4m3 needs sm_89 or newer; not part of the CMake
// build (its sm_80 / sm_86 code could not hold the e4m3 MMA). Built and run by hand:
//   nvcc -O3 -arch=sm_90 -o mma_rate tools/bench/mma_rate.cu && ./mma_rate
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <bool E4M3>
__global__ void rate(float* out, uint32_t seed, int iters) {
  float acc[8][4] = {};
  uint32_t a[4] = {seed ^ threadIdx.x, seed * 3u, seed * 5u, seed * 7u};
  uint32_t b0 = seed * 11u, b1 = seed * 13u;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (E4M3) {
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      }
    }
    b0 += 1; b1 ^= i;  // operands change per iteration (no hoisted conversions)
  }
  float s = 0;
  for (int j = 0; j < 8; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* out;
  cudaMalloc(&out, sms * 4 * 512 * sizeof(float));
  const int iters = 20000;
  for (int e = 0; e < 2; ++e) {
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    for (int rep = 0; rep < 2; ++rep) {
      cudaEventRecord(t0);
      if (e) rate<true><<<sms * 4, 128>>>(out, 12345u, iters);
      else rate<false><<<sms * 4, 128>>>(out, 12345u, iters);
      cudaEventRecord(t1);
      cudaEventSynchronize(t1);
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    const double k = e ? 32 : 16;
    const double flops = 2.0 * 16 * 8 * k * 8 * double(iters) * (sms * 4 * 4);
    std::printf("mma.sync %s: %.3f ms, %.1f TFLOP/s (%s)\n", e ? "e4m3 m16n8k32" : "bf16 m16n8k16", ms,
                flops / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
