// The simulator's C ABI: plain structs to gna::sim::Config and back, exceptions to status codes
// plus a message for gna_sim_last_error().
#include "gna/gna_sim.h"

#include <cstdio>
#include <exception>
#include <string>

#include "api/c_status.hpp"
#include "gna/core/error.hpp"
#include "gna/sim/cases.hpp"
#include "gna/sim/kernel_tiles.hpp"
#include "gna/sim/simulator.hpp"
#include "gna/sim/sweep.hpp"

namespace {

thread_local std::string sim_last_error;

template <typename F>
gna_status guarded(F f) {
  return gna::c_abi::guarded(sim_last_error, f);
}

gna::sim::Config to_config(const gna_sim_config* c) {
  if (c == nullptr) gna::fail_invalid("simulator config: required, got NULL");
  if (c->rank < 1 || c->rank > GNA_MAX_RANK)
    gna::fail_invalid("rank must be 1, 2 or 3, got ", c->rank);
  if (c->tiling != GNA_SIM_TILING_MULTI && c->tiling != GNA_SIM_TILING_ONE_DIM)
    gna::fail_invalid("tiling must be 0 (multi) or 1 (1d), got ", c->tiling);
  if (c->kv_tiling != GNA_SIM_KV_STATIC && c->kv_tiling != GNA_SIM_KV_DYNAMIC)
    gna::fail_invalid("kv_tiling must be 0 (static) or 1 (dynamic), got ", c->kv_tiling);
  gna::sim::Config s;
  s.rank = c->rank;
  for (int a = 0; a < c->rank; ++a) {
    s.axes[a].extent = c->extent[a];
    s.axes[a].window = c->window[a];
    s.axes[a].stride = c->stride[a];
    s.axes[a].dilation = c->dilation[a];
    s.axes[a].causal = c->causal[a] != 0;
    s.q_tile[a] = c->q_tile[a];
    s.kv_tile[a] = c->kv_tile[a];
  }
  s.tiling = static_cast<gna::sim::Tiling>(c->tiling);
  s.kv_tiling = static_cast<gna::sim::KvTiling>(c->kv_tiling);
  return s;
}

void to_result(const gna::sim::Result& r, gna_sim_result* out) {
  *out = gna_sim_result{};
  out->tokens = r.tokens;
  out->q_tiles = r.q_tiles;
  out->kv_tiles = r.kv_tiles;
  out->dense_kv_tiles = r.dense_kv_tiles;
  out->max_kv_tiles = r.max_kv_tiles;
  out->mean_kv_tiles = r.mean_kv_tiles;
  out->visited_pairs = r.visited_pairs;
  out->attended_pairs = r.attended_pairs;
  out->mean_keys_per_query = r.mean_keys_per_query;
  out->sparsity = r.sparsity;
  out->flop_speedup = r.flop_speedup;
  out->tile_speedup = r.tile_speedup;
  out->empty_pairs = r.pairs.empty;
  out->full_pairs = r.pairs.full;
  out->partial_pairs = r.pairs.partial;
  out->block_sparse = r.block_sparse ? 1 : 0;
  out->wasted_flop_fraction = r.wasted_flop_fraction;
}

template <size_t N>
void copy_text(char (&to)[N], const char* from) {
  std::snprintf(to, N, "%s", from);
}

void to_bench_case(const gna::sim::BenchCase& c, gna_sim_bench_case* out) {
  *out = gna_sim_bench_case{};
  copy_text(out->name, c.name);
  copy_text(out->model, c.model);
  copy_text(out->sets, c.sets);
  copy_text(out->dtype, c.dtype);
  out->rank = c.rank;
  for (int a = 0; a < GNA_MAX_RANK; ++a) {
    out->extent[a] = c.extent[a];
    out->window[a] = c.window[a];
    out->stride[a] = c.stride[a];
    out->dilation[a] = c.dilation[a];
    out->causal[a] = c.causal[a] ? 1 : 0;
    out->flex_tile[a] = c.flex_tile[a];
  }
  out->batch = c.batch;
  out->heads = c.heads;
  out->head_dim = c.head_dim;
  out->additional_tokens = c.additional_tokens;
}

}  // namespace

extern "C" {

const char* gna_sim_last_error(void) { return sim_last_error.c_str(); }

gna_status gna_simulate(const gna_sim_config* config, gna_sim_result* result) {
  return guarded([&] {
    if (result == nullptr) gna::fail_invalid("simulator result: required, got NULL");
    to_result(gna::sim::simulate(to_config(config)), result);
  });
}

gna_status gna_sim_kernel_tiles(const gna_sim_config* config, int32_t kernel, int32_t head_dim,
                                gna_sim_config* chosen) {
  return guarded([&] {
    if (config == nullptr) gna::fail_invalid("simulator config: required, got NULL");
    if (chosen == nullptr) gna::fail_invalid("kernel tiles: output required, got NULL");
    if (kernel < GNA_SIM_KERNEL_HOPPER_FORWARD || kernel > GNA_SIM_KERNEL_PORTABLE_BACKWARD_99KB)
      gna::fail_invalid("kernel must be ", GNA_SIM_KERNEL_HOPPER_FORWARD, " (hopper forward), ",
                        GNA_SIM_KERNEL_HOPPER_BACKWARD, " (hopper backward), ",
                        GNA_SIM_KERNEL_PORTABLE_FORWARD, " (portable forward), ",
                        GNA_SIM_KERNEL_PORTABLE_BACKWARD, " (portable backward), ",
                        GNA_SIM_KERNEL_PORTABLE_FORWARD_99KB, " (portable forward, 99 KB) or ",
                        GNA_SIM_KERNEL_PORTABLE_BACKWARD_99KB, " (portable backward, 99 KB), got ",
                        kernel);
    gna_sim_config rule = *config;  // the tiles and tilings are the kernel's
    rule.tiling = GNA_SIM_TILING_MULTI;
    rule.kv_tiling = GNA_SIM_KV_STATIC;
    const gna::sim::Config c = gna::sim::kernel_tiles(
        to_config(&rule), static_cast<gna::sim::TiledKernel>(kernel), head_dim);
    gna_sim_config out = *config;
    for (int a = 0; a < GNA_MAX_RANK; ++a) {
      out.q_tile[a] = a < c.rank ? c.q_tile[a] : 1;
      out.kv_tile[a] = a < c.rank ? c.kv_tile[a] : 1;
    }
    out.tiling = GNA_SIM_TILING_MULTI;
    out.kv_tiling = c.kv_tiling == gna::sim::KvTiling::dynamic_tiles ? GNA_SIM_KV_DYNAMIC
                                                                      : GNA_SIM_KV_STATIC;
    *chosen = out;
  });
}

gna_status gna_sim_predict(const gna_sim_config* config, int32_t kernel, int32_t head_dim,
                           gna_sim_prediction* prediction) {
  gna_sim_config chosen{};
  const gna_status status = gna_sim_kernel_tiles(config, kernel, head_dim, &chosen);
  if (status != GNA_STATUS_OK) return status;
  return guarded([&] {
    if (prediction == nullptr) gna::fail_invalid("prediction: output required, got NULL");
    const gna::sim::Config tiles = to_config(&chosen);
    const gna::sim::KernelPrediction p = gna::sim::predict(
        tiles, gna::sim::simulate(tiles), static_cast<gna::sim::TiledKernel>(kernel), head_dim);
    *prediction = gna_sim_prediction{p.cost, p.dense_cost, p.speedup, p.ns_per_head};
  });
}

gna_status gna_sim_sweep(const gna_sim_config* config, gna_sim_sweep_entry* entries,
                         int64_t capacity, int64_t* count) {
  return guarded([&] {
    if (count == nullptr) gna::fail_invalid("sweep: count output required, got NULL");
    if (capacity < 0) gna::fail_invalid("sweep: capacity must be >= 0, got ", capacity);
    if (capacity > 0 && entries == nullptr)
      gna::fail_invalid("sweep: entries must not be NULL when capacity is ", capacity);
    const gna::sim::Config c = to_config(config);
    const std::vector<gna::sim::SweepEntry> all = gna::sim::sweep(c);
    *count = static_cast<int64_t>(all.size());
    for (int64_t i = 0; i < capacity && i < *count; ++i) {
      gna_sim_sweep_entry e{};
      for (int a = 0; a < GNA_MAX_RANK; ++a) e.stride[a] = all[i].stride[a];
      e.kept = all[i].kept ? 1 : 0;
      to_result(all[i].result, &e.result);
      entries[i] = e;
    }
  });
}

gna_status gna_sim_end_to_end(double attention_share, int32_t dense_steps, int32_t total_steps,
                              double op_speedup, double* speedup) {
  return guarded([&] {
    if (speedup == nullptr) gna::fail_invalid("end-to-end speedup: output required, got NULL");
    if (!(op_speedup > 0.0))
      gna::fail_invalid("operator speedup must be > 0, got ", op_speedup);
    gna::sim::EndToEnd e;
    e.attention_share = attention_share;
    e.dense_steps = dense_steps;
    e.total_steps = total_steps;
    *speedup = gna::sim::end_to_end_speedup(e, op_speedup);
  });
}

int32_t gna_sim_bench_case_count(void) {
  return static_cast<int32_t>(gna::sim::bench_cases().size());
}

gna_status gna_sim_bench_case_at(int32_t index, gna_sim_bench_case* out) {
  return guarded([&] {
    const auto& cases = gna::sim::bench_cases();
    if (out == nullptr) gna::fail_invalid("benchmark case: output required, got NULL");
    if (index < 0 || index >= static_cast<int32_t>(cases.size()))
      gna::fail_invalid("benchmark case index must be in [0, ", cases.size(), "), got ", index);
    to_bench_case(cases[index], out);
  });
}

}  // extern "C"
