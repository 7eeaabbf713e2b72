#include "report.hpp"

#include <cstdio>

#include "gna/sim/describe.hpp"
#include "gna/sim/presets.hpp"
#include "json_writer.hpp"

namespace gna::sim::cli {

namespace {

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// 1234567 -> "1,234,567"
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string line(const std::string& name, const std::string& value) {
  std::string padded = "  " + name;
  padded.resize(std::max<size_t>(padded.size() + 1, 34), ' ');
  return padded + value + "\n";
}

void write_config(JsonWriter& j, const Options& o) {
  const Config& c = o.config;
  int extent[kMaxRank], window[kMaxRank], stride[kMaxRank], dilation[kMaxRank], causal[kMaxRank];
  for (int a = 0; a < c.rank; ++a) {
    extent[a] = c.axes[a].extent;
    window[a] = c.axes[a].window;
    stride[a] = c.axes[a].stride;
    dilation[a] = c.axes[a].dilation;
    causal[a] = c.axes[a].causal ? 1 : 0;
  }
  j.begin_object("config");
  if (!o.preset.empty()) j.value("preset", o.preset);
  if (o.has_kernel) j.value("kernel", kernel_name(o.kernel)).value("head_dim", o.head_dim);
  j.array("shape", extent, c.rank).array("window", window, c.rank);
  if (o.command != Command::sweep) j.array("stride", stride, c.rank);
  j.array("dilation", dilation, c.rank).array("causal", causal, c.rank);
  j.array("q_tile", c.q_tile, c.rank).array("kv_tile", c.kv_tile, c.rank);
  j.value("q_tile_tokens", q_tile_volume(c)).value("kv_tile_tokens", kv_tile_volume(c));
  j.value("tiling", tiling_name(c.tiling)).value("kv_tiling", kv_tiling_name(c.kv_tiling));
  if (o.has_end_to_end) {
    j.value("attention_share", o.end_to_end.attention_share)
        .value("dense_steps", o.end_to_end.dense_steps)
        .value("total_steps", o.end_to_end.total_steps);
  }
  j.end_object();
}

void write_result_fields(JsonWriter& j, const Options& o, const Result& r) {
  j.value("tokens", r.tokens)
      .value("q_tiles", r.q_tiles)
      .value("kv_tiles", r.kv_tiles)
      .value("dense_kv_tiles", r.dense_kv_tiles)
      .value("max_kv_tiles", r.max_kv_tiles)
      .value("mean_kv_tiles", r.mean_kv_tiles)
      .value("visited_pairs", r.visited_pairs)
      .value("attended_pairs", r.attended_pairs)
      .value("mean_keys_per_query", r.mean_keys_per_query)
      .value("sparsity", r.sparsity)
      .value("flop_speedup", r.flop_speedup)
      .value("tile_speedup", r.tile_speedup);
  j.begin_object("pairs")
      .value("empty", r.pairs.empty)
      .value("full", r.pairs.full)
      .value("partial", r.pairs.partial)
      .end_object();
  j.value("block_sparse", r.block_sparse).value("wasted_flop_fraction", r.wasted_flop_fraction);
  if (o.has_kernel) {
    const KernelPrediction p = predict(o.config, r, o.kernel, o.head_dim);
    j.value("predicted_cost", p.cost)
        .value("predicted_dense_cost", p.dense_cost)
        .value("predicted_speedup", p.speedup)
        .value("predicted_ms_per_head", p.ns_per_head * 1e-6);
  }
  if (o.has_end_to_end) {
    j.value("e2e_flop_speedup", end_to_end_speedup(o.end_to_end, r.flop_speedup))
        .value("e2e_tile_speedup", end_to_end_speedup(o.end_to_end, r.tile_speedup));
  }
}

std::string header(const Options& o) {
  std::string s;
  if (!o.preset.empty()) s += line("preset", o.preset);
  s += line("problem", problem_description(o.config, o.command != Command::sweep));
  if (o.has_kernel)
    s += line("kernel", std::string(kernel_name(o.kernel)) + ", head dim " +
                            std::to_string(o.head_dim) + " (the tiles it chooses)");
  s += line("tiling", tiling_description(o.config));
  return s;
}

}  // namespace

std::string result_table(const Options& o, const Result& r) {
  std::string s = header(o) + "\n";
  s += line("tokens", grouped(r.tokens));
  s += line("Q tiles", grouped(r.q_tiles));
  s += line("dense KV tiles (per Q tile)", grouped(r.dense_kv_tiles));
  s += line("KV tiles visited per Q tile",
            "max " + grouped(r.max_kv_tiles) + ", mean " + format("%.2f", r.mean_kv_tiles));
  s += line("keys per query (mean)", format("%.2f", r.mean_keys_per_query));
  s += line("sparsity", format("%.2f%%", 100 * r.sparsity));
  s += line("FLOP-wise speedup bound", format("%.2fx", r.flop_speedup));
  s += line("tile-wise speedup bound", format("%.2fx", r.tile_speedup));
  s += line("(Q tile, KV tile) pairs", "empty " + grouped(r.pairs.empty) + ", full " +
                                           grouped(r.pairs.full) + ", partial " +
                                           grouped(r.pairs.partial));
  s += line("perfectly block-sparse", r.block_sparse ? "yes" : "no");
  s += line("wasted FLOP fraction", format("%.2f%%", 100 * r.wasted_flop_fraction));
  if (o.has_kernel) {
    const KernelPrediction p = predict(o.config, r, o.kernel, o.head_dim);
    s += line("predicted speedup", format("%.2fx", p.speedup) +
                                       " against dense attention (the kernel's cost model: " +
                                       format("%.0f", p.cost) + " against " +
                                       format("%.0f", p.dense_cost) + " tile pairs)");
    if (p.ns_per_head > 0)
      s += line("predicted time", format("%.4f", p.ns_per_head * 1e-6) +
                                      " ms per (batch item, head) on an H100");
  }
  if (o.has_end_to_end) {
    const EndToEnd& e = o.end_to_end;
    s += line("end-to-end speedup",
              format("FLOP-wise %.2fx", end_to_end_speedup(e, r.flop_speedup)) +
                  format(", tile-wise %.2fx", end_to_end_speedup(e, r.tile_speedup)) +
                  format(" (attention %.0f%% of runtime, ", 100 * e.attention_share) +
                  std::to_string(e.dense_steps) + " of " + std::to_string(e.total_steps) +
                  " steps dense)");
  }
  return s;
}

std::string result_json(const Options& o, const Result& r) {
  JsonWriter j;
  j.begin_object();
  write_config(j, o);
  write_result_fields(j, o, r);
  j.end_object();
  return j.str();
}

const char* selection_name(Selection s) {
  switch (s) {
    case Selection::pruned: return "pruned";
    case Selection::all: return "all";
    case Selection::block_sparse: return "block_sparse";
  }
  return "?";
}

std::string sweep_table(const Options& o, const SweepRun& run) {
  std::string s = header(o);
  s += line("strides simulated", std::to_string(run.simulated) +
                                     format(" in %.1f ms", 1e3 * run.seconds));
  s += line("beat every smaller stride", std::to_string(run.kept));
  s += line("perfectly block-sparse", std::to_string(run.block_sparse));
  s += line("shown", o.selection == Selection::pruned
                         ? "strides that beat every smaller stride (tile-wise bound)"
                         : o.selection == Selection::all ? "every stride"
                                                         : "perfectly block-sparse strides");
  s += "\n";
  char row[256];
  std::snprintf(row, sizeof row, "  %-12s %8s %10s %10s %10s %13s %14s%s\n", "stride", "max KV",
                "mean KV", "tile-wise", "FLOP-wise", "block-sparse", "partial pairs",
                o.has_end_to_end ? "   e2e tile   e2e FLOP" : "");
  s += row;
  for (const SweepEntry& e : run.shown) {
    const Result& r = e.result;
    std::string e2e;
    if (o.has_end_to_end)
      e2e = format("  %8.2fx", end_to_end_speedup(o.end_to_end, r.tile_speedup)) +
            format("  %8.2fx", end_to_end_speedup(o.end_to_end, r.flop_speedup));
    std::snprintf(row, sizeof row, "  %-12s %8lld %10.2f %9.2fx %9.2fx %13s %14s%s\n",
                  shape_string(e.stride, o.config.rank).c_str(),
                  static_cast<long long>(r.max_kv_tiles), r.mean_kv_tiles, r.tile_speedup,
                  r.flop_speedup, r.block_sparse ? "yes" : "no", grouped(r.pairs.partial).c_str(),
                  e2e.c_str());
    s += row;
  }
  return s;
}

std::string sweep_json(const Options& o, const SweepRun& run) {
  JsonWriter j;
  j.begin_object();
  write_config(j, o);
  j.value("strides_simulated", static_cast<int64_t>(run.simulated))
      .value("strides_kept", static_cast<int64_t>(run.kept))
      .value("strides_block_sparse", static_cast<int64_t>(run.block_sparse))
      .value("seconds", run.seconds)
      .value("selection", selection_name(o.selection));
  j.begin_array("entries");
  for (const SweepEntry& e : run.shown) {
    j.begin_object();
    j.array("stride", e.stride, o.config.rank).value("kept", e.kept);
    write_result_fields(j, o, e.result);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

std::string presets_table() {
  std::string s;
  char row[512];
  std::snprintf(row, sizeof row, "  %-8s %-12s %-10s %-8s %-8s %s\n", "name", "shape", "window",
                "Q tile", "KV tile", "use case");
  s += row;
  for (const Preset& p : presets()) {
    const Config& c = p.config;
    int extent[kMaxRank], window[kMaxRank];
    for (int a = 0; a < c.rank; ++a) {
      extent[a] = c.axes[a].extent;
      window[a] = c.axes[a].window;
    }
    std::snprintf(row, sizeof row, "  %-8s %-12s %-10s %-8s %-8s %s\n", p.name.c_str(),
                  shape_string(extent, c.rank).c_str(), shape_string(window, c.rank).c_str(),
                  shape_string(c.q_tile, c.rank).c_str(), shape_string(c.kv_tile, c.rank).c_str(),
                  p.description.c_str());
    s += row;
  }
  return s;
}

std::string presets_json() {
  JsonWriter j;
  j.begin_object();
  j.begin_array("presets");
  for (const Preset& p : presets()) {
    Options o;
    o.config = p.config;
    j.begin_object().value("name", p.name).value("description", p.description);
    write_config(j, o);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace gna::sim::cli
