#include "kernels/hopper/forward_schedule.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "gna/core/tiling.hpp"

namespace gna::hopper {
namespace {

std::mutex mu;

// KV tiles of the launch's Q tile t (counted from rows.q_first_tile) on kernel axis a under the
// rules `axes` with the launch's placement.
int axis_kv_tiles(const FwdParams& p, const AxisRule* axes, int a, int t) {
  return kv_tile_run(axes[a], p.axes[a].extent, t + p.rows.q_first_tile[a], p.q_tile[a],
                     p.kv_tile[a], p.kv_placement)
      .count;
}

// The rules of each group the launch's items follow: the launch's axes without head rules.
std::vector<const AxisRule*> item_rules(const FwdParams& p) {
  if (p.rules.groups == 0) return {p.axes};
  std::vector<const AxisRule*> out;
  for (int g = 0; g < p.rules.groups; ++g) out.push_back(p.rules.axes[g]);
  return out;
}

bool capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

int sm_count(int device) {
  static std::map<int, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n < 1)
    n = 1;
  cache.emplace(device, n);
  return n;
}

double mean_kv_tiles(const FwdParams& p) {
  const std::vector<const AxisRule*> rules = item_rules(p);
  std::vector<double> group_box;
  for (const AxisRule* axes : rules) {
    double box = 1;
    for (int a = 0; a < kAxes; ++a) {
      double sum = 0;
      for (int t = 0; t < p.q_tiles[a]; ++t) sum += axis_kv_tiles(p, axes, a, t);
      box *= sum / p.q_tiles[a];
    }
    group_box.push_back(box);
  }
  double box = group_box[0];
  if (p.rules.groups > 0) {  // the mean over heads
    box = 0;
    for (int h = 0; h < p.heads_q; ++h) box += group_box[p.rules.group_of_head[h]];
    box /= p.heads_q;
  }
  return box + (p.additional_kv + kTileTokens - 1) / kTileTokens;
}

int* work_counter(int device, void* stream) {
  static std::map<std::pair<int, void*>, int*> counters;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(device, stream);
  auto it = counters.find(key);
  if (it != counters.end()) return it->second;
  if (capturing(stream)) return nullptr;
  int* c = nullptr;
  if (cudaMalloc(&c, 2 * sizeof(int)) != cudaSuccess) return nullptr;
  if (cudaMemset(c, 0, 2 * sizeof(int)) != cudaSuccess) {
    cudaFree(c);
    return nullptr;
  }
  counters.emplace(key, c);
  return c;
}

const int* longest_first_order(const FwdParams& p, int device, void* stream) {
  // Work of a tile: the product of its per-axis KV tile counts (the additional tiles are the
  // same for every tile). With head rules one order per group (a row each), since the groups'
  // tiles differ in work; items stay heads outer, so concurrent CTAs still share K/V.
  const std::vector<const AxisRule*> rules = item_rules(p);
  const int groups = static_cast<int>(rules.size());
  std::vector<std::vector<int>> per_axis(groups * kAxes);
  bool uniform = true;
  for (int g = 0; g < groups; ++g)
    for (int a = 0; a < kAxes; ++a) {
      std::vector<int>& counts = per_axis[g * kAxes + a];
      for (int t = 0; t < p.q_tiles[a]; ++t) counts.push_back(axis_kv_tiles(p, rules[g], a, t));
      for (int v : counts) uniform = uniform && v == counts[0];
    }
  if (uniform) return nullptr;

  using Key = std::vector<int>;
  static std::map<Key, int*> cache;
  Key key{device, static_cast<int>(p.kv_placement), groups};
  for (int a = 0; a < kAxes; ++a)
    key.insert(key.end(), {p.axes[a].extent, p.q_tile[a], p.kv_tile[a], p.rows.q_first_tile[a],
                           p.q_tiles[a]});
  for (const AxisRule* axes : rules)
    for (int a = 0; a < kAxes; ++a) {
      const AxisRule& r = axes[a];
      key.insert(key.end(), {r.window, r.stride, r.causal ? 1 : 0});
    }
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (capturing(stream)) return nullptr;

  const int n = p.q_tiles_per_image;
  std::vector<int> order(static_cast<size_t>(groups) * n);
  for (int g = 0; g < groups; ++g) {
    const std::vector<int>* axis = &per_axis[g * kAxes];
    std::vector<int> work(n);
    for (int t = 0; t < n; ++t) {
      const int t2 = t % p.q_tiles[2], t1 = (t / p.q_tiles[2]) % p.q_tiles[1],
                t0 = t / (p.q_tiles[2] * p.q_tiles[1]);
      work[t] = axis[0][t0] * axis[1][t1] * axis[2][t2];
    }
    int* row = order.data() + static_cast<size_t>(g) * n;
    std::iota(row, row + n, 0);
    std::stable_sort(row, row + n, [&](int a, int b) { return work[a] > work[b]; });
  }
  int* d = nullptr;
  const size_t bytes = order.size() * sizeof(int);
  if (cudaMalloc(&d, bytes) != cudaSuccess) return nullptr;
  if (cudaMemcpy(d, order.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return nullptr;
  }
  cache.emplace(key, d);
  return d;
}

}  // namespace gna::hopper
