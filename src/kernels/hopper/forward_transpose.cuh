// e4m3 forward (the FP8 scheme): the producer warpgroup's warps 1-3 turn each raw V tile that the
// TMA thread loads ([keys x D] e4m3, D contiguous) into V^T ([D x keys], the K-major B operand
// that 8-bit wgmma needs for O += P V), and put the tile's k_scale values (per key) beside the
// K stage for the consumers' S scaling.
#pragma once

#include <cstdint>

#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/forward_mainloop.cuh"
#include "kernels/hopper/forward_params.hpp"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

// What the transposers need about the KV tile in a raw V stage, written by the TMA thread (once
// the stage is free) and released by its arrival on the stage's vtag_full.
struct VStageTag {
  int kind;           // kSpatialKeys, kAdditionalKeys or kNoMoreKeys
  int origin[kAxes];  // spatial: first key per axis (group coordinates); additional: [0]
  int head_kv;
  int batch;  // batch index in the launch
};
constexpr int kSpatialKeys = 0;
constexpr int kAdditionalKeys = 1;
constexpr int kNoMoreKeys = 2;  // the CTA's KV tiles are done

constexpr int kTransposeThreads = 96;  // warps 1-3 of the producer warpgroup
// k_scale values per transposer thread and KV tile (keys thread and thread + 96).
constexpr int kKeyScalesPerThread = 2;

// k_scale of key r of the tile (0 for keys beyond the image or the additional keys: they are
// masked).
__device__ __forceinline__ float tile_key_scale(const FwdParams& p, const VStageTag& t, int r) {
  const Fp8Scales& f = p.fp8;
  if (t.kind == kAdditionalKeys) {
    const int key = t.origin[0] + r;
    if (key >= p.additional_kv) return 0.f;
    return f.add_k_scale[(p.batch_offset + t.batch) * f.add_k_scale_batch_stride +
                         key * f.add_k_scale_token_stride + t.head_kv * f.add_k_scale_head_stride];
  }
  int local[kAxes];
  tile_local(r, p.kv_tile, local);
  int64_t off = t.batch * f.k_scale.batch_stride + t.head_kv * f.k_scale.head_stride;
#pragma unroll
  for (int a = 0; a < kAxes; ++a) {
    const int c = t.origin[a] + local[a];
    if (c >= p.axes[a].extent) return 0.f;
    off += static_cast<int64_t>(c) * f.k_scale.axis_stride[a];
  }
  return f.k_scale.data[off];
}

// Bytes b of x0..x3 as one word per b (a 4 x 4 byte transpose).
__device__ __forceinline__ void transpose_bytes(uint32_t x0, uint32_t x1, uint32_t x2, uint32_t x3,
                                                uint32_t (&out)[4]) {
  const uint32_t lo01 = __byte_perm(x0, x1, 0x5140), hi01 = __byte_perm(x0, x1, 0x7362);
  const uint32_t lo23 = __byte_perm(x2, x3, 0x5140), hi23 = __byte_perm(x2, x3, 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

// One raw V tile (KvLayout: 128 keys x D bytes, swizzled) into V^T (VtLayout: D rows of 128
// key slots, 128-byte swizzle; key k of a 16-key group in slot vt_key_slot(k)). A warp takes 16
// channels at a time: lane (g, q) loads keys 16 g + {2q, 2q + 1, 2q + 8, 2q + 9} (16 bytes each)
// and stores, per channel, their 4 bytes at slots 16 g + 4q..4q + 3: the warp's 32 stores fill
// one 128-byte row (no bank conflict).
template <int D>
__device__ __forceinline__ void transpose_v_tile(const uint8_t* raw, uint8_t* vt, int warp,
                                                 int lane) {
  using KL = TileLayout<D, kv_tile_tokens(D), 1>;
  constexpr int kWarps = kTransposeThreads / 32;
  const int g = lane / 4, q = lane % 4;
  const int keys[4] = {16 * g + 2 * q, 16 * g + 2 * q + 1, 16 * g + 2 * q + 8, 16 * g + 2 * q + 9};
  // Unrolled (the blocks' loads in flight together); warp w takes blocks w, w + 3, ...
#pragma unroll
  for (int i = 0; i < (D / 16 + kWarps - 1) / kWarps; ++i) {
    const int cb = warp + kWarps * i;
    if (cb >= D / 16) break;
    uint4 x[4];
#pragma unroll
    for (int m = 0; m < 4; ++m)
      x[m] = *reinterpret_cast<const uint4*>(raw + KL::offset(keys[m], cb * 16));
    const uint32_t w[4][4] = {{x[0].x, x[1].x, x[2].x, x[3].x},
                              {x[0].y, x[1].y, x[2].y, x[3].y},
                              {x[0].z, x[1].z, x[2].z, x[3].z},
                              {x[0].w, x[1].w, x[2].w, x[3].w}};
#pragma unroll
    for (int c4 = 0; c4 < 4; ++c4) {
      uint32_t out[4];
      transpose_bytes(w[c4][0], w[c4][1], w[c4][2], w[c4][3], out);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int n = cb * 16 + c4 * 4 + b;  // channel: the V^T row
        *reinterpret_cast<uint32_t*>(vt + n * VtLayout<D>::kRowBytes + ((g ^ (n & 7)) << 4) +
                                     4 * q) = out[b];
      }
    }
  }
}

// The thread's k_scale values of the tile tagged t (global loads, left in flight).
template <int D>
__device__ __forceinline__ void load_key_scales(const FwdParams& p, const VStageTag& t, int thread,
                                                float (&ks)[kKeyScalesPerThread]) {
  static_assert(kKeyScalesPerThread * kTransposeThreads >= kv_tile_tokens(D));
#pragma unroll
  for (int i = 0; i < kKeyScalesPerThread; ++i) {
    const int r = thread + i * kTransposeThreads;
    ks[i] = r < kv_tile_tokens(D) ? tile_key_scale(p, t, r) : 0.f;
  }
}

// The transposers' loop over the CTA's KV tiles (the TMA thread's order), until the tile tagged
// kNoMoreKeys. Per tile: its k_scale values (loaded while the previous tile was transposed) into
// the stage (k_scale_full: the consumers' S scaling); the next tile's tag and k_scale loads; then,
// once the raw V has landed and the consumers have released the V^T stage, the transpose (v_full:
// the consumers' P V); the raw stage goes back to the TMA thread (v_raw_empty). Every transposer
// thread arrives on each (96 arrivals), after its own reads and writes. A k_scale stage is free
// once the TMA thread has reused its K stage (consumers release K after their k_scale reads),
// which precedes its tag's vtag_full.
template <int D, int kStages, typename Storage>
__device__ __forceinline__ void v_transposer(const FwdParams& p, Storage& s, int thread) {
  const int warp = thread / 32, lane = thread % 32;
  mbar_wait(&s.vtag_full[0], 0);
  VStageTag next = s.vtag[0];
  float ks[kKeyScalesPerThread];
  if (next.kind != kNoMoreKeys) load_key_scales<D>(p, next, thread, ks);
  for (int it = 0; next.kind != kNoMoreKeys; ++it) {
    const int stage = it % kStages;
    const uint32_t phase = (it / kStages) & 1;
#pragma unroll
    for (int i = 0; i < kKeyScalesPerThread; ++i) {
      const int r = thread + i * kTransposeThreads;
      if (r < kv_tile_tokens(D)) s.k_scale[stage][r] = ks[i];
    }
    mbar_arrive(&s.k_scale_full[stage]);
    {
      const int n = it + 1;
      mbar_wait(&s.vtag_full[n % kStages], (n / kStages) & 1);
      next = s.vtag[n % kStages];
      if (next.kind != kNoMoreKeys) load_key_scales<D>(p, next, thread, ks);
    }
    mbar_wait(&s.v_raw_full[stage], phase);
    mbar_wait(&s.v_empty[stage], phase ^ 1);
    transpose_v_tile<D>(s.v_raw[stage], s.v[stage], warp, lane);
    // V^T is read by wgmma (the async proxy) after the consumers' wait on v_full.
    fence_proxy_async_smem();
    mbar_arrive(&s.v_full[stage]);
    mbar_arrive(&s.v_raw_empty[stage]);
  }
}

}  // namespace gna::hopper
