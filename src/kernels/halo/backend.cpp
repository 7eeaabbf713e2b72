// Registers the halo kernels as backend "halo" (priority 150, device tensors): what they
// support, with the refusal naming the parameter and the limit, and the rule (plan.hpp) by
// which automatic dispatch prefers them over the tile kernels.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/registration.hpp"
#include "gna/core/error.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/common/support_checks.hpp"
#include "kernels/halo/halo.hpp"

namespace gna::halo {
namespace {

using cuda::str;

bool refuse(std::string* why, const std::string& reason) {
  return cuda::refuse(why, "halo", reason);
}

// Plans are kept per rule and side: dispatch asks for every call.
const Plan& cached_plan(const Problem& p, Side side) {
  std::vector<int> key = rule_signature(p);
  key.push_back(side == Side::keys_of_queries ? 0 : 1);
  static std::mutex mu;
  static std::map<std::vector<int>, Plan> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::move(key), make_plan(p, side)).first;
  return it->second;
}

bool cached_preferred(const Problem& p, std::string* why) {
  static std::mutex mu;
  static std::map<std::vector<int>, std::pair<bool, std::string>> cache;
  const std::vector<int> key = rule_signature(p);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      if (why && !it->second.first) *why = it->second.second;
      return it->second.first;
    }
  }
  std::string reason;
  const bool yes = preferred(p, &reason);
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, std::make_pair(yes, reason));
  if (why && !yes) *why = reason;
  return yes;
}

// A plan of the pass that fits the device: the whole halo, or slabs of it where that does not fit
// (the launcher may choose smaller slabs, launch_plan).
Plan device_plan(const Problem& p, Side side, Pass pass, int device) {
  return pass_plan(cached_plan(p, side), pass, p.dim_qk,
                   cuda::shared_memory_per_block(device));
}

bool aligned_rows(const TensorRef& t, const char* name, std::string* why) {
  return cuda::aligned_rows(t, name, "halo", why);
}

// The kernels keep element offsets inside a (batch item, head) slice in int32.
bool slice_fits(const TensorRef& t, int rank, const char* name, std::string* why) {
  int64_t span = 0;
  for (int i = 1; i <= rank + 1 && i < t.rank; ++i)
    span += (t.shape[i] - 1) * (t.strides[i] < 0 ? -t.strides[i] : t.strides[i]);
  if (span + 64 < (int64_t(1) << 31)) return true;
  return refuse(why, str(name, ": a batch item spans ", span, " elements (at most 2^31 - 65)"));
}

// The plan's halo fits the kernel: 10-bit coordinates, 16-bit halo rows, shared memory.
bool plan_fits(const Problem& p, const Plan& plan, int bytes, const char* pass, int device,
               std::string* why) {
  for (int a = 0; a < p.rank; ++a)
    if (plan.halo[a] > kMaxHaloSide)
      return refuse(why, str("axis ", a, ": halo of ", plan.halo[a], " tokens exceeds ", kMaxHaloSide));
  if (plan.halo_rows > 65535)
    return refuse(why, str("halo of ", plan.halo_rows, " tokens exceeds 65535"));
  const int limit = cuda::shared_memory_per_block(device);
  if (limit > 0 && bytes > limit)
    return refuse(why, str(pass, " needs ", bytes, " bytes of shared memory per block for a halo of ",
                           plan.halo_rows, " tokens at head dim ", p.dim_qk,
                           ", ", cuda::shared_memory_allowance(device)));
  return true;
}

bool supports_problem(const Problem& p, const AttentionTensors& in, const KernelOptions& opt,
                      std::string* why) {
  if (!cuda::half_tensors_supported(p, in.q, "halo", why)) return false;
  if (p.dim_qk != p.dim_v || (p.dim_qk != 32 && p.dim_qk != 64))
    return refuse(why, str("head dims ", p.dim_qk, "/", p.dim_v, " (qk/v) not supported (32/32, 64/64)"));
  if (p.additional_kv > 0)
    return refuse(why, str("additional_kv ", p.additional_kv, " not supported (0)"));
  if (opt.q_tile.size[0] != 0 || opt.kv_tile.size[0] != 0)
    return refuse(why, "forced tile shapes are for the tile kernels");
  if (!cuda::sm80_supported(in.q.device, "halo", why)) return false;
  if (p.batch > 65535) return refuse(why, str("batch ", p.batch, " exceeds 65535"));
  if (p.heads_q > 65535) return refuse(why, str("heads ", p.heads_q, " exceed 65535"));
  int64_t blocks = 1;
  const BoxShape shape = box_shape(p);
  for (int a = 0; a < p.rank; ++a)
    blocks *= int64_t(tiles_along(group_length(p.axes[a], 0), shape.cta[a])) * p.axes[a].dilation;
  if (blocks > 0x7fffffff) return refuse(why, str("boxes x dilation groups ", blocks, " exceed 2^31 - 1"));
  return aligned_rows(in.q, "query", why) && aligned_rows(in.k, "key", why) &&
         aligned_rows(in.v, "value", why) && slice_fits(in.q, p.rank, "query", why) &&
         slice_fits(in.k, p.rank, "key", why) && slice_fits(in.v, p.rank, "value", why);
}

bool supports_forward(const ForwardCall& call, std::string* why) {
  const Problem& p = call.problem;
  if (!supports_problem(p, call.in, call.options, why) || !aligned_rows(call.out, "out", why) ||
      !slice_fits(call.out, p.rank, "out", why) || (call.lse && !slice_fits(*call.lse, p.rank, "lse", why)))
    return false;
  const Plan plan = device_plan(p, Side::keys_of_queries, Pass::forward, call.in.q.device);
  return plan_fits(p, plan, forward_shared_bytes(plan, p.dim_qk), "forward", call.in.q.device, why);
}

bool supports_backward(const BackwardCall& call, std::string* why) {
  const Problem& p = call.problem;
  if (!supports_problem(p, call.in, call.options, why)) return false;
  if (!aligned_rows(call.out, "out", why) || !aligned_rows(call.d_out, "d_out", why) ||
      !aligned_rows(call.dq, "dq", why) || !aligned_rows(call.dk, "dk", why) ||
      !aligned_rows(call.dv, "dv", why))
    return false;
  for (const auto& [t, name] : {std::pair<const TensorRef*, const char*>{&call.out, "out"}, {&call.d_out, "d_out"},
                               {&call.lse, "lse"}, {&call.dq, "dq"}, {&call.dk, "dk"}, {&call.dv, "dv"}})
    if (!slice_fits(*t, p.rank, name, why)) return false;
  const int device = call.in.q.device;
  const Plan keys = device_plan(p, Side::keys_of_queries, Pass::dq, device);
  const Plan queries = device_plan(p, Side::queries_of_keys, Pass::dkdv, device);
  return plan_fits(p, keys, dq_shared_bytes(keys, p.dim_qk), "dQ pass", device, why) &&
         plan_fits(p, queries, dkdv_shared_bytes(queries, p.dim_qk), "dK/dV pass", device, why);
}

void forward(const ForwardCall& call) {
  const Plan& plan = cached_plan(call.problem, Side::keys_of_queries);
  if (call.problem.dim_qk == 32)
    launch_forward_for_dtype<32>(call, plan);
  else
    launch_forward_for_dtype<64>(call, plan);
}

void backward(const BackwardCall& call) {
  const Plan& keys = cached_plan(call.problem, Side::keys_of_queries);
  const Plan& queries = cached_plan(call.problem, Side::queries_of_keys);
  if (call.problem.dim_qk == 32)
    launch_backward_for_dtype<32>(call, keys, queries);
  else
    launch_backward_for_dtype<64>(call, keys, queries);
}

}  // namespace

Launched launched_plan(const Problem& p, const Plan& whole, Pass pass, int device) {
  if (pass == Pass::forward)
    return p.dim_qk == 32 ? forward_launched_for_dtype<32>(p, whole, device) : forward_launched_for_dtype<64>(p, whole, device);
  return p.dim_qk == 32 ? backward_launched_for_dtype<32>(p, whole, pass, device)
                        : backward_launched_for_dtype<64>(p, whole, pass, device);
}

namespace {

Backend make_backend() {
  Backend b =
      backend_from("halo", 150, true, supports_forward, forward, supports_backward, backward);
  b.preferred = cached_preferred;
  b.release_memory = cuda::scratch_release;  // the backward's scratch
  return b;
}

}  // namespace

GNA_REGISTER_BACKEND(make_backend);

}  // namespace gna::halo
