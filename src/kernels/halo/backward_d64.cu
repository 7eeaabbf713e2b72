// Halo backward (dQ pass, then dK / dV pass) at head dim 64 (fp16 and bf16).
#include "kernels/halo/launch.cuh"

namespace gna::halo {

template void launch_backward_for_dtype<64>(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan);
template Launched backward_launched_for_dtype<64>(const Problem& p, const Plan& whole, Pass pass, int device);

}  // namespace gna::halo
