// Instantiations of the backward kernel for head dim 128 (bf16 and fp16; grid and placed Q tiles).
#include "kernels/hopper/backward_instance.cuh"

namespace gna::hopper {

void launch_backward_d128(bool bf16, KvPlacement q_placement, const void* maps,
                          const BwdParams& p, int grid, void* stream) {
  if (bf16)
    launch_backward_kernel<128, Bf16Tag>(q_placement, maps, p, grid, stream);
  else
    launch_backward_kernel<128, F16Tag>(q_placement, maps, p, grid, stream);
}

}  // namespace gna::hopper
