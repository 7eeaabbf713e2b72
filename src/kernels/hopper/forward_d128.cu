// Instantiations of the forward kernels for head dim 128 (bf16 and fp16).
#include "kernels/hopper/forward_instance.cuh"

namespace gna::hopper {

void launch_d128(bool bf16, const void* maps, const FwdParams& p, int grid, bool persistent,
               void* stream) {
  if (bf16)
    launch_forward_kernel<128, Bf16Tag>(maps, p, grid, persistent, stream);
  else
    launch_forward_kernel<128, F16Tag>(maps, p, grid, persistent, stream);
}

}  // namespace gna::hopper
