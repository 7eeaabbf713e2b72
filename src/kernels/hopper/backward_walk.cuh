// The work of one backward CTA (KV tile, KV head, batch, the box of Q tiles it visits) and the
// walk over its visits: for each query head of the KV head's GQA group, every Q tile of the box,
// starting at a per-CTA rotation and wrapping around. The walk is an odometer, so that a step
// costs a few adds instead of the divisions of decoding a visit index.
#pragma once

#include "gna/core/tiling.hpp"
#include "kernels/hopper/backward_params.hpp"

namespace gna::hopper::bwd {

struct Work {
  int kt[kAxes];     // KV tile per axis (spatial); kt[2] = additional tile (additional mode)
  int head_kv, batch;
  int q_begin[kAxes], q_size[kAxes];
  int q_count;       // Q tiles per query head
  int rotation;      // visit index (inside a head) the walk starts at
};

__device__ __forceinline__ Work make_work(const BwdParams& p) {
  Work w;
  int work = blockIdx.x;
  const int tile = work % p.kv_tiles_per_image;
  work /= p.kv_tiles_per_image;
  w.head_kv = work % p.heads_kv;
  w.batch = work / p.heads_kv;
  if (p.additional) {
    w.kt[0] = w.kt[1] = 0;
    w.kt[2] = tile;
  } else if (p.kv_outer_axis_fastest) {
    // CTAs running together then hold KV tiles of a compact block whose Q boxes overlap (along
    // the outermost axis, typically video time, a few tiles often share one box), so that the
    // Q, dO and dQ tiles they visit stay in L2; in row order they span whole planes of the image.
    w.kt[0] = tile % p.kv_tiles[0];
    w.kt[1] = (tile / p.kv_tiles[0]) % p.kv_tiles[1];
    w.kt[2] = tile / (p.kv_tiles[0] * p.kv_tiles[1]);
  } else {
    w.kt[2] = tile % p.kv_tiles[2];
    w.kt[1] = (tile / p.kv_tiles[2]) % p.kv_tiles[1];
    w.kt[0] = tile / (p.kv_tiles[2] * p.kv_tiles[1]);
  }
  w.q_count = 1;
#pragma unroll
  for (int a = 0; a < kAxes; ++a) {
    if (p.additional) {
      w.q_begin[a] = 0;
      w.q_size[a] = p.q_tiles[a];
    } else {
      const Range r = q_tiles_for_kv_tile(p.axes[a], p.axes[a].extent, w.kt[a], p.q_tile[a],
                                          p.kv_tile[a]);
      w.q_begin[a] = r.begin;
      w.q_size[a] = max_i(r.end - r.begin, 0);
    }
    w.q_count *= w.q_size[a];
  }
  // Outside deterministic mode (no turns) each CTA starts its walk at a different Q tile, so
  // that CTAs running together add into different dQ rows instead of contending for the same
  // ones.
  w.rotation = p.turns == nullptr && w.q_count > 1 ? tile % w.q_count : 0;
  return w;
}

struct QWalk {
  int qt[kAxes];     // Q tile of the current visit
  int first[kAxes];  // the Q tile every head's walk starts at
  int head;          // query head of the current visit
  int left;          // visits left in this head, the current one included
  int changed;       // lowest axis whose Q tile changed at the last step (0 after a head change)

  __device__ __forceinline__ void begin(const Work& w, int head0) {
    head = head0;
    left = w.q_count;
    changed = 0;
    if (w.q_count == 0) return;
    int i = w.rotation;
    first[2] = w.q_begin[2] + i % w.q_size[2];
    i /= w.q_size[2];
    first[1] = w.q_begin[1] + i % w.q_size[1];
    first[0] = w.q_begin[0] + i / w.q_size[1];
#pragma unroll
    for (int a = 0; a < kAxes; ++a) qt[a] = first[a];
  }

  __device__ __forceinline__ void next(const Work& w) {
    if (--left == 0) {
      ++head;
      left = w.q_count;
      changed = 0;
#pragma unroll
      for (int a = 0; a < kAxes; ++a) qt[a] = first[a];
      return;
    }
    changed = 2;
    if (++qt[2] == w.q_begin[2] + w.q_size[2]) {
      qt[2] = w.q_begin[2];
      changed = 1;
      if (++qt[1] == w.q_begin[1] + w.q_size[1]) {
        qt[1] = w.q_begin[1];
        changed = 0;
        if (++qt[0] == w.q_begin[0] + w.q_size[0]) qt[0] = w.q_begin[0];
      }
    }
  }
};

}  // namespace gna::hopper::bwd
