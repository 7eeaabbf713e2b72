#include "cli_options.hpp"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "gna/sim/presets.hpp"

namespace gna::sim::cli {

namespace {

const char* kUsage =
    "usage:\n"
    "  gna-sim [simulate] PROBLEM [END-TO-END] [--json]\n"
    "  gna-sim sweep PROBLEM [--all | --block-sparse] [END-TO-END] [--json] [--svg FILE]\n"
    "  gna-sim presets [--json]\n"
    "  gna-sim show PROBLEM --query COORDS [--union] --svg FILE\n"
    "\n"
    "PROBLEM (per-axis values are written AxBxC, one value per layout axis):\n"
    "  --preset NAME          start from a preset (see gna-sim presets); flags override it\n"
    "  --shape AxBxC          layout extents, 1 to 3 axes\n"
    "  --window AxBxC         window (kernel size) per axis\n"
    "  --stride AxBxC         stride per axis (default 1; not with sweep, which tries all)\n"
    "  --dilation AxBxC       dilation per axis (default 1)\n"
    "  --causal AxBxC         0 or 1 per axis (default 0)\n"
    "  --q-tile AxBxC         Q tile shape (with --tiling 1d also a token count)\n"
    "  --kv-tile AxBxC        KV tile shape (with --tiling 1d also a token count)\n"
    "  --tiling multi|1d      multi-dimensional tiles (default) or runs of row-major tokens\n"
    "  --kv-tiling static|dynamic  KV tiles on a fixed grid (default) or placed per Q tile\n"
  "  --kernel NAME          the tiles and KV tiling the kernel chooses for the rule, instead of\n"
  "                         --q-tile, --kv-tile, --tiling and --kv-tiling (hopper-forward,\n"
  "                         hopper-backward, portable-forward, portable-backward, and the\n"
  "                         portable ones on 99 KB devices: portable-forward-99kb,\n"
  "                         portable-backward-99kb; not with sweep)\n"
  "  --head-dim D           head dim of --kernel's choice (default 128)\n"
    "  (--window, --stride, --dilation and --causal also accept one value for every axis)\n"
    "END-TO-END (adds e2e_flop_speedup and e2e_tile_speedup):\n"
    "  --attention-share P    share of the model's runtime spent in attention, in [0, 1]\n"
    "  --dense-steps K        the first K diffusion steps keep dense attention (default 0)\n"
    "  --total-steps N        diffusion steps in all (default 1)\n"
    "OUTPUT:\n"
    "  --json                 one JSON object instead of the table\n"
    "  --svg FILE             sweep: the bounds per stride; show: the picture of the query\n"
    "  --query COORDS         show: the query's coordinates, AxBxC\n"
    "  --union                show: the keys of every query of the query's Q tile\n"
    "  --all                  sweep: every stride, not only those that beat smaller strides\n"
    "  --block-sparse         sweep: the perfectly block-sparse strides\n"
    "  --help                 this text\n";

const std::set<std::string> kValueFlags = {
    "preset",          "shape",       "window",       "stride", "dilation", "causal", "q-tile",
    "kv-tile",         "tiling",      "kv-tiling",    "svg",    "query",    "attention-share",
    "dense-steps",     "total-steps", "kernel",       "head-dim"};
const std::set<std::string> kSwitches = {"json", "union", "all", "block-sparse", "help"};
const std::set<std::string> kProblemFlags = {"preset",    "shape",  "window", "stride",
                                             "dilation",  "causal", "q-tile", "kv-tile",
                                             "tiling",    "kv-tiling", "kernel", "head-dim"};
// Problem flags sweep does not take: it tries every stride, and a kernel's tiles depend on it.
const std::set<std::string> kNotSweepFlags = {"stride", "kernel", "head-dim"};
const std::set<std::string> kEndToEndFlags = {"attention-share", "dense-steps", "total-steps"};

const char* command_name(Command c) {
  switch (c) {
    case Command::simulate: return "simulate";
    case Command::sweep: return "sweep";
    case Command::presets: return "presets";
    case Command::show: return "show";
    case Command::help: return "help";
  }
  return "?";
}

bool allowed(Command c, const std::string& flag) {
  if (flag == "help") return true;
  switch (c) {
    case Command::presets: return flag == "json";
    case Command::simulate:
      return kProblemFlags.count(flag) || kEndToEndFlags.count(flag) || flag == "json";
    case Command::sweep:
      return (kProblemFlags.count(flag) && !kNotSweepFlags.count(flag)) ||
             kEndToEndFlags.count(flag) ||
             flag == "json" || flag == "svg" || flag == "all" || flag == "block-sparse";
    case Command::show:
      return kProblemFlags.count(flag) || flag == "query" || flag == "union" || flag == "svg";
    case Command::help: return true;
  }
  return false;
}

int parse_int(const std::string& flag, const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  const bool digits = !text.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) ||
                                        (s[0] == '-' && text.size() > 1));
  if (!digits || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
    throw UsageError("--" + flag + ": expected an integer, got '" + text + "'");
  return static_cast<int>(v);
}

std::vector<int> parse_list(const std::string& flag, const std::string& text) {
  std::vector<int> values;
  size_t begin = 0;
  while (true) {
    const size_t x = text.find('x', begin);
    const std::string part = text.substr(begin, x == std::string::npos ? std::string::npos
                                                                       : x - begin);
    if (part.empty())
      throw UsageError("--" + flag + ": expected integers separated by 'x' (e.g. 18x24x24), got '" +
                       text + "'");
    values.push_back(parse_int(flag, part));
    if (x == std::string::npos) break;
    begin = x + 1;
  }
  return values;
}

// Flags as given: name -> value ("" for switches).
using FlagMap = std::map<std::string, std::string>;

FlagMap read_flags(int argc, const char* const* argv, int first, Command command) {
  FlagMap flags;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      throw UsageError("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (kValueFlags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
    } else if (kSwitches.count(name)) {
      if (inline_value) throw UsageError("--" + name + " takes no value");
    } else {
      throw UsageError("unknown option '--" + name + "'");
    }
    if (!allowed(command, name))
      throw UsageError("--" + name + " is not an option of " + command_name(command));
    if (flags.count(name)) throw UsageError("--" + name + " given twice");
    flags[name] = value;
  }
  return flags;
}

// A per-axis list: `rank` values, or one value for every axis when broadcast is allowed.
bool axis_values(const FlagMap& flags, const std::string& flag, int rank, bool broadcast,
                 int* out) {
  const auto found = flags.find(flag);
  if (found == flags.end()) return false;
  const std::vector<int> v = parse_list(flag, found->second);
  if (static_cast<int>(v.size()) == rank) {
    for (int a = 0; a < rank; ++a) out[a] = v[a];
  } else if (broadcast && v.size() == 1) {
    for (int a = 0; a < rank; ++a) out[a] = v[0];
  } else {
    throw UsageError("--" + flag + " has " + std::to_string(v.size()) + " values, but --shape has " +
                     std::to_string(rank) + " axes");
  }
  return true;
}

// Tile shapes; with 1-D tiling a single value is a token count.
bool tile_values(const FlagMap& flags, const std::string& flag, int rank, Tiling tiling,
                 int* out) {
  const auto found = flags.find(flag);
  if (found == flags.end()) return false;
  const std::vector<int> v = parse_list(flag, found->second);
  for (int a = 0; a < kMaxRank; ++a) out[a] = 1;
  if (static_cast<int>(v.size()) == rank) {
    for (int a = 0; a < rank; ++a) out[a] = v[a];
  } else if (tiling == Tiling::one_dim && v.size() == 1) {
    out[0] = v[0];
  } else {
    throw UsageError("--" + flag + " has " + std::to_string(v.size()) + " values, but --shape has " +
                     std::to_string(rank) + " axes" +
                     (tiling == Tiling::one_dim ? " (or give one token count)" : ""));
  }
  return true;
}

Config build_config(const FlagMap& flags, std::string* preset_name) {
  Config c;
  bool from_preset = false;
  if (flags.count("preset")) {
    const Preset* p = find_preset(flags.at("preset"));
    if (!p) {
      std::string names;
      for (const Preset& q : presets()) names += (names.empty() ? "" : ", ") + q.name;
      throw UsageError("unknown preset '" + flags.at("preset") + "' (presets: " + names + ")");
    }
    c = p->config;
    *preset_name = p->name;
    from_preset = true;
  }
  if (flags.count("tiling")) {
    const std::string& t = flags.at("tiling");
    if (t == "multi") c.tiling = Tiling::multi_dim;
    else if (t == "1d") c.tiling = Tiling::one_dim;
    else throw UsageError("--tiling: expected multi or 1d, got '" + t + "'");
  }
  if (flags.count("kv-tiling")) {
    const std::string& t = flags.at("kv-tiling");
    if (t == "static") c.kv_tiling = KvTiling::static_tiles;
    else if (t == "dynamic") c.kv_tiling = KvTiling::dynamic_tiles;
    else throw UsageError("--kv-tiling: expected static or dynamic, got '" + t + "'");
  }
  // A shape of another rank than the preset's discards the preset's per-axis values.
  bool keep_axes = from_preset;
  if (flags.count("shape")) {
    const std::vector<int> shape = parse_list("shape", flags.at("shape"));
    if (shape.size() < 1 || shape.size() > static_cast<size_t>(kMaxRank))
      throw UsageError("--shape: expected 1 to 3 axes, got " + std::to_string(shape.size()));
    if (static_cast<int>(shape.size()) != c.rank) keep_axes = false;
    c.rank = static_cast<int>(shape.size());
    for (int a = 0; a < c.rank; ++a) c.axes[a].extent = shape[a];
  } else if (!from_preset) {
    throw UsageError("--shape (or --preset) is required");
  }
  if (!keep_axes) {
    for (int a = 0; a < kMaxRank; ++a) {
      c.axes[a].stride = c.axes[a].dilation = 1;
      c.axes[a].causal = false;
    }
  }
  int values[kMaxRank] = {1, 1, 1};
  if (axis_values(flags, "window", c.rank, true, values)) {
    for (int a = 0; a < c.rank; ++a) c.axes[a].window = values[a];
  } else if (!keep_axes) {
    throw UsageError("--window is required");
  }
  if (axis_values(flags, "stride", c.rank, true, values))
    for (int a = 0; a < c.rank; ++a) c.axes[a].stride = values[a];
  if (axis_values(flags, "dilation", c.rank, true, values))
    for (int a = 0; a < c.rank; ++a) c.axes[a].dilation = values[a];
  if (axis_values(flags, "causal", c.rank, true, values))
    for (int a = 0; a < c.rank; ++a) {
      if (values[a] != 0 && values[a] != 1)
        throw UsageError("--causal: expected 0 or 1 per axis, got '" + flags.at("causal") + "'");
      c.axes[a].causal = values[a] == 1;
    }
  // With --kernel the kernel's choice replaces the tiles (apply_kernel_tiles).
  const bool kernel = flags.count("kernel") > 0;
  if (!tile_values(flags, "q-tile", c.rank, c.tiling, c.q_tile) && !keep_axes && !kernel)
    throw UsageError("--q-tile is required");
  if (!tile_values(flags, "kv-tile", c.rank, c.tiling, c.kv_tile) && !keep_axes && !kernel)
    throw UsageError("--kv-tile is required");
  return c;
}

}  // namespace

const char* usage() { return kUsage; }

Options parse_options(int argc, const char* const* argv) {
  Options o;
  int first = 1;
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (cmd == "simulate") o.command = Command::simulate;
    else if (cmd == "sweep") o.command = Command::sweep;
    else if (cmd == "presets") o.command = Command::presets;
    else if (cmd == "show") o.command = Command::show;
    else if (cmd == "help") o.command = Command::help;
    else throw UsageError("unknown command '" + cmd + "'");
    first = 2;
  }
  const FlagMap flags = read_flags(argc, argv, first, o.command);
  if (o.command == Command::help || flags.count("help")) {
    o.command = Command::help;
    return o;
  }
  o.json = flags.count("json") > 0;
  if (o.command == Command::presets) return o;

  if (flags.count("kernel")) {
    for (const char* f : {"q-tile", "kv-tile", "tiling", "kv-tiling"})
      if (flags.count(f))
        throw UsageError(std::string("--") + f + " and --kernel exclude each other (the kernel " +
                         "chooses the tiles)");
    if (!parse_kernel(flags.at("kernel"), &o.kernel))
      throw UsageError("--kernel: expected one of " + kernel_names() + ", got '" +
                       flags.at("kernel") + "'");
    o.has_kernel = true;
    if (flags.count("head-dim")) o.head_dim = parse_int("head-dim", flags.at("head-dim"));
  } else if (flags.count("head-dim")) {
    throw UsageError("--head-dim needs --kernel");
  }
  o.config = build_config(flags, &o.preset);

  if (flags.count("dense-steps") || flags.count("total-steps") || flags.count("attention-share")) {
    if (!flags.count("attention-share"))
      throw UsageError("--dense-steps and --total-steps need --attention-share");
    const std::string& p = flags.at("attention-share");
    char* end = nullptr;
    const double share = std::strtod(p.c_str(), &end);
    if (p.empty() || *end != '\0')
      throw UsageError("--attention-share: expected a number in [0, 1], got '" + p + "'");
    o.has_end_to_end = true;
    o.end_to_end.attention_share = share;
    if (flags.count("dense-steps"))
      o.end_to_end.dense_steps = parse_int("dense-steps", flags.at("dense-steps"));
    if (flags.count("total-steps"))
      o.end_to_end.total_steps = parse_int("total-steps", flags.at("total-steps"));
  }
  if (flags.count("svg")) {
    o.svg_path = flags.at("svg");
    if (o.svg_path.empty()) throw UsageError("--svg needs a file name");
  }
  if (flags.count("all") && flags.count("block-sparse"))
    throw UsageError("--all and --block-sparse exclude each other");
  if (flags.count("all")) o.selection = Selection::all;
  if (flags.count("block-sparse")) o.selection = Selection::block_sparse;

  if (o.command == Command::show) {
    if (!flags.count("query")) throw UsageError("show needs --query");
    if (o.svg_path.empty()) throw UsageError("show needs --svg FILE");
    const std::vector<int> q = parse_list("query", flags.at("query"));
    if (static_cast<int>(q.size()) != o.config.rank)
      throw UsageError("--query has " + std::to_string(q.size()) + " values, but the layout has " +
                       std::to_string(o.config.rank) + " axes");
    for (int a = 0; a < o.config.rank; ++a) o.query[a] = q[a];
    o.q_tile_union = flags.count("union") > 0;
  }
  return o;
}

void apply_kernel_tiles(Options& o) {
  if (o.has_kernel) o.config = kernel_tiles(o.config, o.kernel, o.head_dim);
}

}  // namespace gna::sim::cli
