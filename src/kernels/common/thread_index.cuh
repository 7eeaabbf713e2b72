// threadIdx.x read with a volatile instruction, for kernels at the edge of their registers.
#pragma once

namespace gna::cuda {

// Values derived from it are recomputed where used rather than hoisted and held in registers
// across a loop.
__device__ __forceinline__ int thread_index() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}

}  // namespace gna::cuda
