// Instantiations of the forward kernels with e4m3 operands (the FP8 scheme) for head dim 64,
// O in bf16 or fp16; no per-head rules (supports refuses them).
#include "kernels/hopper/forward_instance.cuh"

namespace gna::hopper {

void launch_e4m3_d64(bool bf16_out, const void* maps, const FwdParams& p, int grid,
                     bool persistent, void* stream) {
  const CUtensorMap* m = static_cast<const CUtensorMap*>(maps);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (bf16_out)
    launch_forward_kernel<64, E4m3Tag<Bf16Tag>, false>(m, p, grid, persistent, st);
  else
    launch_forward_kernel<64, E4m3Tag<F16Tag>, false>(m, p, grid, persistent, st);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: e4m3 forward launch failed: ", cudaGetErrorString(err));
}

}  // namespace gna::hopper
