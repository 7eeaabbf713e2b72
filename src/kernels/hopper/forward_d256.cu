// Instantiations of the forward kernel for head dim 256 (bf16 and fp16; one CTA per item).
#include "kernels/hopper/forward_instance.cuh"

namespace gna::hopper {

void launch_d256(bool bf16, const void* maps, const FwdParams& p, int grid, bool persistent,
                void* stream) {
  if (bf16)
    launch_forward_kernel<256, Bf16Tag>(maps, p, grid, persistent, stream);
  else
    launch_forward_kernel<256, F16Tag>(maps, p, grid, persistent, stream);
}

}  // namespace gna::hopper
