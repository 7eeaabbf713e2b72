// Shared memory per CTA of each portable kernel, for the host side (backend.cpp), which decides
// from it whether a kernel fits the device (sm_86 / sm_89 allow 99 KB per block, sm_80 163 KB,
// sm_90 227 KB).
#include "kernels/portable/backward_kernel.cuh"
#include "kernels/portable/forward_kernel.cuh"
#include "kernels/portable/portable.hpp"

namespace gna::portable {
namespace {

template <int D, int DV>
int forward_bytes(int rows_q, int kv_stages) {
  return rows_q > forward_rows_q(1) ? ForwardSmem<D, DV, 2>::bytes(kv_stages)
                                    : ForwardSmem<D, DV, 1>::bytes(kv_stages);
}

}  // namespace

int forward_shared_bytes(int dim_qk, int dim_v, int rows_q, bool e4m3, int kv_stages) {
  if (kv_stages == 1 && !forward_single_stage_kernel(dim_qk, dim_v, rows_q > 64 ? 128 : 64)) return 0;
  if (e4m3) {  // one m-block per warp (Q tiles of at most 64 tokens) whatever rows_q
    if (dim_qk == 64 && dim_v == 64) return ForwardSmem<64, 64, 1, 1>::kBytes;
    if (dim_qk == 128 && dim_v == 128) return ForwardSmem<128, 128, 1, 1>::kBytes;
    return 0;
  }
  if (dim_qk == 32 && dim_v == 32) return forward_bytes<32, 32>(rows_q, kv_stages);
  if (dim_qk == 64 && dim_v == 64) return forward_bytes<64, 64>(rows_q, kv_stages);
  if (dim_qk == 64 && dim_v == 128) return forward_bytes<64, 128>(rows_q, kv_stages);
  if (dim_qk == 128 && dim_v == 64) return forward_bytes<128, 64>(rows_q, kv_stages);
  if (dim_qk == 128 && dim_v == 128) return forward_bytes<128, 128>(rows_q, kv_stages);
  return 0;
}

int backward_shared_bytes(int dim_qk, int dim_v, int rows_kv) {
  constexpr int kSmall = kBackwardRowsKVSmall;
  if (rows_kv == kSmall) {
    if (dim_qk == 64 && dim_v == 64) return BackwardSmem<64, 64, kSmall, 1>::kBytes;
    if (dim_qk == 64 && dim_v == 128) return BackwardSmem<64, 128, kSmall, 1>::kBytes;
    if (dim_qk == 128 && dim_v == 64) return BackwardSmem<128, 64, kSmall, 1>::kBytes;
    if (dim_qk == 128 && dim_v == 128) return BackwardSmem<128, 128, kSmall, 1>::kBytes;
    return 0;
  }
  if (rows_kv != kBackwardRowsKV) return 0;
  if (dim_qk == 32 && dim_v == 32) return BackwardSmem<32, 32>::kBytes;
  if (dim_qk == 64 && dim_v == 64) return BackwardSmem<64, 64>::kBytes;
  if (dim_qk == 64 && dim_v == 128) return BackwardSmem<64, 128>::kBytes;
  if (dim_qk == 128 && dim_v == 64) return BackwardSmem<128, 64>::kBytes;
  if (dim_qk == 128 && dim_v == 128) return BackwardSmem<128, 128>::kBytes;
  return 0;
}

}  // namespace gna::portable
