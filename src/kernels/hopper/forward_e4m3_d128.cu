// Instantiations of the forward kernels with e4m3 operands (the FP8 scheme) for head dim 128,
// O in bf16 or fp16.
#include "kernels/hopper/forward_instance.cuh"

namespace gna::hopper {

void launch_e4m3_d128(bool bf16_out, const void* maps, const FwdParams& p, int grid,
                      bool persistent, void* stream) {
  if (bf16_out)
    launch_forward_kernel<128, E4m3Tag<Bf16Tag>>(maps, p, grid, persistent, stream);
  else
    launch_forward_kernel<128, E4m3Tag<F16Tag>>(maps, p, grid, persistent, stream);
}

}  // namespace gna::hopper
