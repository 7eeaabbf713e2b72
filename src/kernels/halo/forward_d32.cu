// Halo forward at head dim 32 (fp16 and bf16).
#include "kernels/halo/launch.cuh"

namespace gna::halo {

template void launch_forward_for_dtype<32>(const ForwardCall& call, const Plan& keys_plan);
template Launched forward_launched_for_dtype<32>(const Problem& p, const Plan& keys_whole, int device);

}  // namespace gna::halo
