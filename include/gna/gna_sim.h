/* The simulator's C ABI (docs/rule.md section 8): plain structs over gna::sim::simulate, for the
 * Python package and any other language. Same status codes as gna.h; the message of a failed
 * gna_sim_* call is read with gna_sim_last_error(). Fields are only ever appended. */
#ifndef GNA_GNA_SIM_H
#define GNA_GNA_SIM_H

#include <stdint.h>

#include "gna/gna.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GNA_SIM_TILING_MULTI 0    /* tiles are boxes of the layout (what a TMA kernel does) */
#define GNA_SIM_TILING_ONE_DIM 1  /* row-major token runs (a 1-D block-sparse kernel) */
#define GNA_SIM_KV_STATIC 0       /* a fixed grid of KV tiles */
#define GNA_SIM_KV_DYNAMIC 1      /* KV tiles start where a Q tile's key windows start */

typedef struct gna_sim_config {
  int32_t rank;
  int32_t extent[GNA_MAX_RANK];
  int32_t window[GNA_MAX_RANK];
  int32_t stride[GNA_MAX_RANK];
  int32_t dilation[GNA_MAX_RANK];
  int32_t causal[GNA_MAX_RANK];
  int32_t q_tile[GNA_MAX_RANK];  /* with one-dim tiling, the tile is the product of these */
  int32_t kv_tile[GNA_MAX_RANK];
  int32_t tiling;    /* GNA_SIM_TILING_* */
  int32_t kv_tiling; /* GNA_SIM_KV_* */
} gna_sim_config;

/* The fields of gna::sim::Result (include/gna/sim/simulator.hpp says what each means). */
typedef struct gna_sim_result {
  int64_t tokens;
  int64_t q_tiles;
  int64_t kv_tiles;
  int64_t dense_kv_tiles;
  int64_t max_kv_tiles;
  double mean_kv_tiles;
  int64_t visited_pairs;
  int64_t attended_pairs;
  double mean_keys_per_query;
  double sparsity;
  double flop_speedup;
  double tile_speedup;
  int64_t empty_pairs;
  int64_t full_pairs;
  int64_t partial_pairs;
  int32_t block_sparse;
  int32_t reserved;
  double wasted_flop_fraction;
} gna_sim_result;

/* Message of the last failed gna_sim_* call on this thread ("" if none). */
const char* gna_sim_last_error(void);

/* Validates (the core's messages) and simulates one configuration. */
gna_status gna_simulate(const gna_sim_config* config, gna_sim_result* result);

/* Tiled kernels of gna_sim_kernel_tiles. */
#define GNA_SIM_KERNEL_HOPPER_FORWARD 0  /* grid or placed KV tiles, whichever is cheaper */
#define GNA_SIM_KERNEL_HOPPER_BACKWARD 1 /* grid KV tiles */
#define GNA_SIM_KERNEL_PORTABLE_FORWARD 2 /* 64- or 128-row Q tiles, grid or placed KV tiles */
#define GNA_SIM_KERNEL_PORTABLE_BACKWARD 3 /* 128- or 64-key KV tiles, grid KV tiles */
/* The portable kernels as devices with 99 KB of shared memory per block run them (sm_86 / sm_89 /
   sm_120): the forward with one K/V stage at head dims 128/128, the backward's 64-key tiles. */
#define GNA_SIM_KERNEL_PORTABLE_FORWARD_99KB 4
#define GNA_SIM_KERNEL_PORTABLE_BACKWARD_99KB 5

/* The tiles a kernel runs for the config's rule: writes *chosen = *config with q_tile, kv_tile
 * (every axis; 1 past the rank), tiling (multi) and kv_tiling (static for grid KV tiles, dynamic
 * for placed ones) set to what the kernel's tile chooser picks at head dim head_dim with default
 * options (the config's own tiles and tilings are ignored). The chooser scores one image and
 * head: batch and heads do not matter. Errors name the kernel id, the head dim the kernel does
 * not run, or the invalid rule. */
gna_status gna_sim_kernel_tiles(const gna_sim_config* config, int32_t kernel, int32_t head_dim,
                                gna_sim_config* chosen);

/* A kernel's predicted speedup (gna::sim::predict): the cost, in dense tile pairs of the kernel,
 * of the config's rule at the tiles the kernel chooses (gna_sim_kernel_tiles), from the kernel's
 * measured cost per full pair, partial pair and work item (include/gna/core/kernel_tiles.hpp),
 * against the cost of dense attention over the same tokens; and the kernel's time per (batch
 * item, head) in nanoseconds where the model's times were measured (head dim 128, an H100). */
typedef struct gna_sim_prediction {
  double cost;
  double dense_cost;
  double speedup;     /* dense_cost / cost */
  double ns_per_head; /* 0 at head dims whose times were not measured */
} gna_sim_prediction;

/* Simulates the config's rule at the kernel's tiles (its own tiles and tilings are ignored) and
 * predicts the kernel's speedup. Errors as gna_sim_kernel_tiles'. */
gna_status gna_sim_predict(const gna_sim_config* config, int32_t kernel, int32_t head_dim,
                           gna_sim_prediction* prediction);

/* One stride tuple of a stride sweep: its result, and whether it beats every smaller stride. */
typedef struct gna_sim_sweep_entry {
  int32_t stride[GNA_MAX_RANK];
  int32_t kept;
  gna_sim_result result;
} gna_sim_sweep_entry;

/* Stride sweep: every stride tuple 1 <= stride <= window (the config's own strides ignored),
 * ordered by the product of strides. Writes the total to *count and the first
 * min(capacity, total) entries to entries (which may be NULL when capacity is 0). */
gna_status gna_sim_sweep(const gna_sim_config* config, gna_sim_sweep_entry* entries,
                         int64_t capacity, int64_t* count);

/* End-to-end model: 1 / ((1 - p) + p * (k/n + (1 - k/n) / op_speedup)). */
gna_status gna_sim_end_to_end(double attention_share, int32_t dense_steps, int32_t total_steps,
                              double op_speedup, double* speedup);

/* One case of the benchmark case table that the simulator's presets, gna-kernel-bench and the
 * Python benchmark read (include/gna/sim/cases.hpp says what each field means). */
typedef struct gna_sim_bench_case {
  char name[64];
  char model[32];
  char sets[96]; /* space-separated */
  char dtype[8]; /* "bf16" or "f16" */
  int32_t rank;
  int32_t extent[GNA_MAX_RANK];
  int32_t window[GNA_MAX_RANK];
  int32_t stride[GNA_MAX_RANK];
  int32_t dilation[GNA_MAX_RANK];
  int32_t causal[GNA_MAX_RANK];
  int32_t batch;
  int32_t heads;
  int32_t head_dim;
  int32_t additional_tokens;
  int32_t flex_tile[GNA_MAX_RANK];
} gna_sim_bench_case;

/* Number of benchmark cases. */
int32_t gna_sim_bench_case_count(void);

/* The index-th benchmark case (0 <= index < gna_sim_bench_case_count()). */
gna_status gna_sim_bench_case_at(int32_t index, gna_sim_bench_case* out);

#ifdef __cplusplus
}
#endif

#endif /* GNA_GNA_SIM_H */
