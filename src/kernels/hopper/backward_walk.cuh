// The work of one backward CTA (KV tile, KV head, batch, the box of Q tiles it visits) and the
// walk over its visits: for each query head of the KV head's GQA group, every Q tile of the box,
// starting at a per-CTA rotation and wrapping around. The walk is an odometer, so that a step
// costs a few adds instead of the divisions of decoding a visit index. The box is a Q tile run
// per axis (the core's q_tile_run): the grid kernels (kPlacedQ false) walk grid Q tiles qt, first
// query qt * q_tile; the placed kernels walk the run's tiles 0.. whose first query is
// qt * q_tile + q_shift, the run's first query. Everything placed is under `if constexpr`, so
// that the grid kernels compile the walk without placement.
#pragma once

#include <type_traits>

#include "gna/core/tiling.hpp"
#include "kernels/hopper/backward_params.hpp"
#include "kernels/hopper/device_util.cuh"

namespace gna::hopper::bwd {

struct Work {
  int kt[kAxes];     // KV tile per axis (spatial); kt[2] = additional tile (additional mode)
  int head_kv, batch;
  int q_begin[kAxes], q_size[kAxes];  // per axis the walked Q tiles [q_begin, q_begin + q_size)
  int q_shift[kAxes];  // placed kernels: per axis the query added to qt * q_tile (run.first)
  int q_count;       // Q tiles per query head
  int rotation;      // visit index (inside a head) the walk starts at
};

// The box of Q tiles whose queries attend KV tile w.kt under the rules `axes`, grid or placed
// (every grid Q tile in additional mode, which the placed kernels never run), cut to the Q tiles
// meeting the query rows (rows.q_begin..q_end: on a slab its own queries; otherwise the cut
// changes nothing), and the walk's rotation; `tile` is the KV tile's index in the launch. On a
// slab, and for an additional KV tile past its batch item's count, the box may be empty: then
// the CTA writes zero dK and dV.
template <bool kPlacedQ>
__device__ __forceinline__ void set_q_box(const BwdParams& p, const AxisRule* axes, int tile,
                                          Work& w) {
  w.q_count = 1;
#pragma unroll
  for (int a = 0; a < kAxes; ++a) {
    if (p.additional) {
      w.q_begin[a] = p.rows.q_first_tile[a];
      if constexpr (kPlacedQ) w.q_shift[a] = 0;
      w.q_size[a] = p.q_tiles[a];
    } else if constexpr (kPlacedQ) {
      const QTileRun run = clip_tile_run(
          q_tile_run(axes[a], p.axes[a].extent, w.kt[a], p.q_tile[a], p.kv_tile[a],
                     KvPlacement::placed),
          p.q_tile[a], Range{p.rows.q_begin[a], p.rows.q_end[a]});
      w.q_begin[a] = 0;
      w.q_shift[a] = run.first;
      w.q_size[a] = max_i(run.count, 0);
    } else {
      const Range r = q_tiles_for_kv_tile(axes[a], p.axes[a].extent, w.kt[a], p.q_tile[a],
                                          p.kv_tile[a]);
      const int begin = max_i(r.begin, p.rows.q_first_tile[a]);
      const int end = min_i(r.end, p.rows.q_first_tile[a] + p.q_tiles[a]);
      w.q_begin[a] = begin;
      w.q_size[a] = max_i(end - begin, 0);
    }
    w.q_count *= w.q_size[a];
  }
  // An additional KV tile wholly past its batch item's count of additional keys: no visit.
  if (p.additional &&
      w.kt[2] * kBwdKvRows >=
          additional_keys_of_batch(p.counts, p.additional_kv, p.batch_offset + w.batch)) {
#pragma unroll
    for (int a = 0; a < kAxes; ++a) w.q_size[a] = 0;
    w.q_count = 0;
  }
  // Outside deterministic mode (no turns) each CTA starts its walk at a different Q tile, so
  // that CTAs running together add into different dQ rows instead of contending for the same
  // ones.
  w.rotation = p.turns == nullptr && w.q_count > 1 ? tile % w.q_count : 0;
}

template <bool kPlacedQ>
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
    w.kt[0] = tile % p.kv_tiles[0] + p.rows.k_first_tile[0];
    w.kt[1] = (tile / p.kv_tiles[0]) % p.kv_tiles[1] + p.rows.k_first_tile[1];
    w.kt[2] = tile / (p.kv_tiles[0] * p.kv_tiles[1]) + p.rows.k_first_tile[2];
  } else {
    w.kt[2] = tile % p.kv_tiles[2] + p.rows.k_first_tile[2];
    w.kt[1] = (tile / p.kv_tiles[2]) % p.kv_tiles[1] + p.rows.k_first_tile[1];
    w.kt[0] = tile / (p.kv_tiles[2] * p.kv_tiles[1]) + p.rows.k_first_tile[0];
  }
  set_q_box<kPlacedQ>(p, p.axes, tile, w);  // with head rules each head's box replaces it (HeadBoxes)
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

// Head rules: the Q box of every group for the CTA's KV tile, computed once per CTA into shared
// memory, and the visits of the CTA (summed over the query heads of its KV head). Every key is
// attended by some query under every rule, so no head's box is empty.
struct QBox {
  int begin[kAxes], end[kAxes];  // the walked Q tiles per axis (Work::q_begin, q_size)
  int first[kAxes];  // the Q tile the walk starts at (QWalk::begin: the rotation decoded)
  int count;
  // Per axis the walked Q tiles whose pair with the KV tile is full (the others partial), so
  // that a visit's class is read here instead of computed from the rules in the walk.
  int full_begin[kAxes], full_end[kAxes];
};
// The box of the placed kernels: with the query its tiles are shifted by (Work::q_shift).
struct PlacedQBox : QBox {
  int q_shift[kAxes];
};
template <bool kPlacedQ>
struct HeadBoxes {
  using Box = std::conditional_t<kPlacedQ, PlacedQBox, QBox>;
  Box box[kMaxHeadGroups];
  int visits;
};

template <bool kPlacedQ>
__device__ __forceinline__ void set_head_boxes(const BwdParams& p, const Work& w,
                                               HeadBoxes<kPlacedQ>& hb) {
  const int tile = blockIdx.x % p.kv_tiles_per_image;
  for (int g = 0; g < p.rules.groups; ++g) {
    Work t = w;
    set_q_box<kPlacedQ>(p, p.rules.axes[g], tile, t);
    QWalk walk;
    walk.begin(t, 0);
    auto& b = hb.box[g];
#pragma unroll
    for (int a = 0; a < kAxes; ++a) {
      b.begin[a] = t.q_begin[a];
      b.end[a] = t.q_begin[a] + t.q_size[a];
      b.first[a] = walk.first[a];
      if constexpr (kPlacedQ) {  // tiles 0.. of the run (q_begin 0)
        b.q_shift[a] = t.q_shift[a];
        const Range full = full_q_tiles_of_run(p.rules.axes[g][a], p.axes[a].extent, w.kt[a],
                                               p.q_tile[a], p.kv_tile[a],
                                               QTileRun{t.q_shift[a], t.q_size[a]});
        b.full_begin[a] = full.begin;
        b.full_end[a] = full.end;
      } else {
        const Range full = full_q_tiles_of_kv_tile(p.rules.axes[g][a], p.axes[a].extent,
                                                   w.kt[a], p.q_tile[a], p.kv_tile[a]);
        b.full_begin[a] = full.begin;
        b.full_end[a] = full.end;
      }
    }
    b.count = t.q_count;
  }
  int visits = 0;
  for (int h = w.head_kv * p.heads_per_kv; h < (w.head_kv + 1) * p.heads_per_kv; ++h)
    visits += hb.box[p.rules.group_of_head[h]].count;
  hb.visits = visits;
}

// Head rules: the walk over the CTA's visits, each query head over its group's box (QWalk's
// order inside a box). The box stays in shared memory, read at a head change and where a step
// wraps an axis, so that the walk holds no more registers than QWalk.
template <bool kPlacedQ>
struct BoxWalk {
  int qt[kAxes];  // Q tile of the current visit
  int head;       // query head of the current visit
  int left;       // visits left in this head, the current one included
  int changed;    // lowest axis whose Q tile changed at the last step (0 after a head change)
  const typename HeadBoxes<kPlacedQ>::Box* box;  // the current head's

  __device__ __forceinline__ void start_head(const BwdParams& p, const HeadBoxes<kPlacedQ>& hb) {
    box = &hb.box[p.rules.group_of_head[head]];
    left = box->count;
    changed = 0;
#pragma unroll
    for (int a = 0; a < kAxes; ++a) qt[a] = box->first[a];
  }

  __device__ __forceinline__ void begin(const BwdParams& p, const HeadBoxes<kPlacedQ>& hb,
                                        int head0) {
    head = head0;
    start_head(p, hb);
  }

  // Past the last head (the step after the last visit) it reads a box that no visit uses
  // (group_of_head has an entry there).
  __device__ __forceinline__ void next(const BwdParams& p, const HeadBoxes<kPlacedQ>& hb) {
    if (--left == 0) {
      ++head;
      start_head(p, hb);
      return;
    }
    changed = 2;
    if (++qt[2] == box->end[2]) {
      qt[2] = box->begin[2];
      changed = 1;
      if (++qt[1] == box->end[1]) {
        qt[1] = box->begin[1];
        changed = 0;
        if (++qt[0] == box->end[0]) qt[0] = box->begin[0];
      }
    }
  }
};

// Every role (the producer, the consumers, the dQ writer) walks the CTA's visits in the same
// order: body(it, head, qt, stage, phase) for each, with the visit's index, query head and Q tile
// and its slot in the ring of kStages Q / dO stages with the parity of that slot's barrier phase.
// Role: begin() starts the walk and returns the visits, next() steps, walk holds the current
// visit (the kernel's RoleWalk).
template <int kStages, typename Role, typename Body>
__device__ __forceinline__ void for_each_visit(Role& role, Body&& body) {
  const int total = role.begin();
  for (int it = 0; it < total; ++it, role.next())
    body(it, role.walk.head, role.walk.qt, it % kStages, static_cast<uint32_t>((it / kStages) & 1));
}

// The KV tile's tensor-map coordinates after the head: rows and the two outer axes (batches
// folded into the outermost axis; less the key tensor's first row, rows.k_begin), or in
// additional mode the tile's rows and the batch's row of the additional tensors.
struct KvTileCoords {
  int c2, c3, c4;
};

__device__ __forceinline__ KvTileCoords kv_tile_coords(const BwdParams& p, const Work& w) {
  KvTileCoords c;
  if (p.additional) {
    c.c2 = w.kt[2] * kBwdKvRows;
    c.c3 = p.batch_offset + w.batch;
    c.c4 = 0;
  } else {
    c.c2 = w.kt[2] * p.kv_tile[2] - p.rows.k_begin[2];
    c.c3 = w.kt[1] * p.kv_tile[1] - p.rows.k_begin[1];
    c.c4 = w.batch * p.axes[0].extent + w.kt[0] * p.kv_tile[0] - p.rows.k_begin[0];
  }
  return c;
}

// Placed kernels: adds to `off` the offset of row r of the Q tile whose first query per axis is
// `row` in the [B, tokens, Hq] row scratch (query rows [rows.q_begin, rows.q_end)); false when
// the row lies outside them (edge tiles, placed tiles running past the group, the next batch
// where batches are folded into axis 0, or rows outside a slab). The grid kernels use
// tile_row_offset.
__device__ __forceinline__ bool q_row_offset(const BwdParams& p, const int (&row)[kAxes], int r,
                                             int64_t& off) {
  int local[kAxes];
  tile_local(r, p.q_tile, local);
  bool valid = true;
#pragma unroll
  for (int a = 0; a < kAxes; ++a) {
    const int c = row[a] + local[a];
    valid = valid && c >= p.rows.q_begin[a] && c < p.rows.q_end[a];
    off += static_cast<int64_t>(c - p.rows.q_begin[a]) * p.row_axis_stride[a];
  }
  return valid;
}

}  // namespace gna::hopper::bwd
