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

// KV tiles of Q tile t on kernel axis a with the launch's placement.
int axis_kv_tiles(const FwdParams& p, int a, int t) {
  return kv_tile_run(p.axes[a], p.axes[a].extent, t, p.q_tile[a], p.kv_tile[a], p.kv_placement)
      .count;
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
  double box = 1;
  for (int a = 0; a < kAxes; ++a) {
    double sum = 0;
    for (int t = 0; t < p.q_tiles[a]; ++t) sum += axis_kv_tiles(p, a, t);
    box *= sum / p.q_tiles[a];
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
  // same for every tile).
  std::vector<int> per_axis[kAxes];
  for (int a = 0; a < kAxes; ++a)
    for (int t = 0; t < p.q_tiles[a]; ++t) per_axis[a].push_back(axis_kv_tiles(p, a, t));
  bool uniform = true;
  for (int a = 0; a < kAxes; ++a)
    for (int v : per_axis[a]) uniform = uniform && v == per_axis[a][0];
  if (uniform) return nullptr;

  using Key = std::vector<int>;
  static std::map<Key, int*> cache;
  Key key{device, static_cast<int>(p.kv_placement)};
  for (int a = 0; a < kAxes; ++a) {
    const AxisRule& r = p.axes[a];
    key.insert(key.end(), {r.extent, r.window, r.stride, r.causal ? 1 : 0, p.q_tile[a],
                           p.kv_tile[a]});
  }
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (capturing(stream)) return nullptr;

  const int n = p.q_tiles_per_image;
  std::vector<int> work(n), order(n);
  for (int t = 0; t < n; ++t) {
    const int t2 = t % p.q_tiles[2], t1 = (t / p.q_tiles[2]) % p.q_tiles[1],
              t0 = t / (p.q_tiles[2] * p.q_tiles[1]);
    work[t] = per_axis[0][t0] * per_axis[1][t1] * per_axis[2][t2];
  }
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return work[a] > work[b]; });
  int* d = nullptr;
  if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) return nullptr;
  if (cudaMemcpy(d, order.data(), n * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return nullptr;
  }
  cache.emplace(key, d);
  return d;
}

}  // namespace gna::hopper
