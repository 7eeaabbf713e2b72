// Random malformed calls through the C ABI, each in a forked child: every call must return a
// status (with a message when it is not GNA_STATUS_OK) and never crash or hang. A case starts
// from a valid host call (attention, attention with per-head rules, attention with per-batch
// counts of additional keys, or an unfused neighborhood operator) and applies one to three
// random mutations (tensors, parameters, head rules, options, the entry point's own arguments).
//
// Runs for GNA_FUZZ_SECONDS (default 8) from seed GNA_FUZZ_SEED (default: fresh, printed);
// prints the number of calls, distinct cases (entry point, mutation kinds, status) and distinct
// messages, and appends that line to the file GNA_FUZZ_REPORT when it is set.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gna/gna.h"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

constexpr int kChildSeconds = 10;  // a call still running after this is a hang

// Tensors of one call: inputs q, k, v, additional k / v; outputs; gradients; the per-batch
// counts of additional keys (int32 [B], passed by the _counts entry points only).
enum Slot { Q, K, V, AK, AV, OUT, LSE, DOUT, DQ, DK, DV, DAK, DAV, CNT, kSlots };
const char* const kSlotNames[kSlots] = {"q",  "k",  "v",  "ak",  "av",  "out", "lse",
                                        "do", "dq", "dk", "dv", "dak", "dav", "cnt"};

struct Buffer {
  std::vector<double> storage;  // 8-byte aligned
  size_t bytes = 0;
};

// One call: the C structs handed to the library, and for each tensor the buffer its data
// pointer really points into (to know whether the library could safely run it).
struct Case {
  gna_params params{};
  gna_options options{};
  bool use_options = false;
  gna_tensor t[kSlots]{};
  bool present[kSlots]{};   // passed (else NULL)
  int buffer_of[kSlots]{};  // index into buffers, -1: none
  std::vector<Buffer> buffers;
  std::vector<std::string> mutations;
  int entry = 0;  // an index into kEntries
  int32_t capacity = 32;
  bool null_name = false;
  int32_t count = 1;
  int32_t sta[3][3] = {{8, 12, 16}, {2, 4, 4}, {6, 4, 12}};  // extent, tile, window per axis
  bool sta_null = false;
  // Per-head rules (the _heads entry points): NULL unless use_rules. The map always holds
  // GNA_MAX_HEADS_WITH_RULES entries, so any `heads` the library accepts is readable.
  gna_head_rules rules{};
  bool use_rules = false;
  std::vector<int32_t> group_map = std::vector<int32_t>(GNA_MAX_HEADS_WITH_RULES, 0);
};

const char* const kEntries[] = {"validate", "select_backend", "forward", "backward", "merge",
                                "sta_params", "na_qk", "na_av", "na_qk_backward",
                                "na_av_backward", "validate_heads", "select_backend_heads",
                                "forward_heads", "backward_heads", "forward_counts",
                                "backward_counts", "select_backend_counts"};
constexpr int kFusedEntries = 6;
constexpr int kHeadsEntries = 10;  // the _heads entry points: kHeadsEntries + plain entry
constexpr int kCountsEntries = 14;  // forward, backward, select_backend with counts
bool unfused_entry(int e) { return e >= kFusedEntries && e < kHeadsEntries; }

int64_t pick64(std::mt19937_64& rng, std::initializer_list<int64_t> values) {
  std::vector<int64_t> v(values);
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

// A random valid problem with host float32 / float64 tensors.
Case valid_case(std::mt19937_64& rng) {
  Case c;
  const int rank = rand_int(rng, 1, 3);
  const bool f64 = rand_int(rng, 0, 1) == 1;
  c.params.rank = rank;
  std::vector<int64_t> spatial;
  for (int a = 0; a < rank; ++a) {
    const int extent = rand_int(rng, 3, rank == 3 ? 5 : 8);
    const int window = rand_int(rng, 2, extent);
    spatial.push_back(extent);
    c.params.window[a] = window;
    c.params.stride[a] = rand_int(rng, 1, window);
    c.params.dilation[a] = window * 2 <= extent ? rand_int(rng, 1, 2) : 1;
    c.params.causal[a] = rand_int(rng, 0, 3) == 0;
  }
  const int batch = rand_int(rng, 1, 2), hkv = rand_int(rng, 1, 2), hq = hkv * rand_int(rng, 1, 2);
  const int d = rand_int(rng, 1, 8), dv = rand_int(rng, 1, 8), extra = rand_int(rng, 0, 2);
  auto token = [&](int heads, int dim) {
    std::vector<int64_t> s{batch};
    s.insert(s.end(), spatial.begin(), spatial.end());
    s.push_back(heads);
    s.push_back(dim);
    return s;
  };
  std::vector<int64_t> shapes[kSlots] = {
      token(hq, d), token(hkv, d), token(hkv, dv), {batch, extra, hkv, d}, {batch, extra, hkv, dv},
      token(hq, dv), token(hq, 1), token(hq, dv), token(hq, d), token(hkv, d), token(hkv, dv),
      {batch, extra, hkv, d}, {batch, extra, hkv, dv}, {batch}};
  shapes[LSE].pop_back();
  for (int s = 0; s < kSlots; ++s) {
    gna_tensor& t = c.t[s];
    t.dtype = f64 ? GNA_DTYPE_F64 : GNA_DTYPE_F32;
    if (s == LSE && !f64) t.dtype = GNA_DTYPE_F32;
    t.rank = static_cast<int32_t>(shapes[s].size());
    t.device = -1;
    int64_t stride = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      t.shape[i] = shapes[s][i];
      t.strides[i] = stride;
      stride *= shapes[s][i];
    }
    Buffer b;
    b.bytes = static_cast<size_t>(stride) * (f64 ? 8 : 4);
    b.storage.assign(b.bytes / 8 + 1, 0.5);
    c.buffers.push_back(std::move(b));
    c.buffer_of[s] = s;
    t.data = c.buffers[s].storage.data();
    c.present[s] = extra > 0 || (s != AK && s != AV && s != DAK && s != DAV);
  }
  // Counts: any int32 value (outside [0, extra] too: clamped), passed only by valid_counts_case.
  c.t[CNT].dtype = GNA_DTYPE_I32;
  int32_t* counts = reinterpret_cast<int32_t*>(c.buffers[CNT].storage.data());
  for (int b = 0; b < batch; ++b) counts[b] = rand_int(rng, -3, extra + 3);
  c.present[CNT] = false;
  c.params.scale = 0.f;
  c.entry = static_cast<int>(pick64(rng, {0, 1, 2, 2, 2, 3, 3, 3, 4, 5}));
  return c;
}

// A random valid attention call with per-head rules: up to GNA_MAX_HEAD_GROUPS groups, each a
// valid rule of the layout, and a group for each query head.
Case valid_heads_case(std::mt19937_64& rng) {
  Case c = valid_case(rng);
  const int rank = c.params.rank;
  const int heads = static_cast<int>(c.t[Q].shape[rank + 1]);
  gna_head_rules& r = c.rules;
  r.groups = rand_int(rng, 1, std::min(GNA_MAX_HEAD_GROUPS, heads + 1));
  r.heads = heads;
  for (int g = 0; g < r.groups; ++g)
    for (int a = 0; a < rank; ++a) {
      const int extent = static_cast<int>(c.t[Q].shape[1 + a]);
      r.window[g][a] = rand_int(rng, 2, extent);
      r.stride[g][a] = rand_int(rng, 1, r.window[g][a]);
      r.dilation[g][a] = r.window[g][a] * 2 <= extent ? rand_int(rng, 1, 2) : 1;
      r.causal[g][a] = rand_int(rng, 0, 3) == 0;
    }
  for (int h = 0; h < heads; ++h) c.group_map[h] = rand_int(rng, 0, r.groups - 1);
  r.group_of_head = c.group_map.data();
  c.use_rules = true;
  c.entry = static_cast<int>(pick64(rng, {10, 11, 12, 12, 12, 13, 13, 13}));
  return c;
}

// A random valid attention call with per-batch counts of additional keys (which it has; per-head
// rules on half of them).
Case valid_counts_case(std::mt19937_64& rng) {
  Case c;
  do {
    c = rand_int(rng, 0, 1) ? valid_heads_case(rng) : valid_case(rng);
  } while (c.t[AK].shape[1] == 0);
  c.present[CNT] = true;
  c.entry = static_cast<int>(
      pick64(rng, {kCountsEntries, kCountsEntries, kCountsEntries + 1, kCountsEntries + 1,
                   kCountsEntries + 2}));
  return c;
}

// Slots of the unfused operators (heads-first tensors): q, k, v, out, their gradients, and
// the window weights and relative positional bias in the additional-token slots.
constexpr int ATTN = AK, RPB = AV, D_ATTN = DAK, D_RPB = DAV;

// A random valid call of an unfused operator: stride 1, tokens [B, H, X.., D], weights
// [B, H, X.., prod(window)], bias [H, 2 window - 1 ..].
Case valid_unfused_case(std::mt19937_64& rng) {
  Case c = valid_case(rng);
  const int rank = c.params.rank;
  const int64_t batch = c.t[Q].shape[0], heads = c.t[Q].shape[rank + 1];
  const int64_t d = c.t[Q].shape[rank + 2];
  int64_t slots = 1;
  std::vector<int64_t> spatial, rpb{heads};
  for (int a = 0; a < rank; ++a) {
    c.params.stride[a] = 1;
    spatial.push_back(c.t[Q].shape[1 + a]);
    slots *= c.params.window[a];
    rpb.push_back(2 * int64_t{c.params.window[a]} - 1);
  }
  auto tokens = [&](int64_t last) {
    std::vector<int64_t> v{batch, heads};
    v.insert(v.end(), spatial.begin(), spatial.end());
    v.push_back(last);
    return v;
  };
  const bool f64 = c.t[Q].dtype == GNA_DTYPE_F64;
  c.buffers.clear();
  for (int s = 0; s < kSlots; ++s) {
    const std::vector<int64_t> shape = s == ATTN || s == D_ATTN ? tokens(slots)
                                       : s == RPB || s == D_RPB ? rpb
                                                                : tokens(d);
    gna_tensor& t = c.t[s];
    t = gna_tensor{};
    t.dtype = f64 ? GNA_DTYPE_F64 : GNA_DTYPE_F32;
    t.device = -1;
    t.rank = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      t.shape[i] = shape[i];
      t.strides[i] = stride;
      stride *= shape[i];
    }
    Buffer b;
    b.bytes = static_cast<size_t>(stride) * (f64 ? 8 : 4);
    b.storage.assign(b.bytes / 8 + 1, 0.25);
    c.buffers.push_back(std::move(b));
    c.buffer_of[s] = s;
    t.data = c.buffers[s].storage.data();
    c.present[s] = s != RPB || rand_int(rng, 0, 1) == 1;
  }
  c.entry = rand_int(rng, kFusedEntries, kFusedEntries + 3);
  return c;
}

// Applies one random mutation and records its kind.
void mutate(Case& c, std::mt19937_64& rng) {
  const int s = rand_int(rng, 0, kSlots - 1);
  gna_tensor& t = c.t[s];
  const int dim = rand_int(rng, 0, GNA_MAX_TENSOR_RANK - 1);
  const int axis = rand_int(rng, 0, GNA_MAX_RANK - 1);
  const int64_t big = pick64(rng, {-1, 0, 1, 2, INT32_MAX, int64_t{1} << 31, (int64_t{1} << 32) + 3,
                                    int64_t{1} << 40, int64_t{1} << 62, INT64_MAX, INT64_MIN});
  const int32_t small = static_cast<int32_t>(
      pick64(rng, {INT32_MIN, -7, -1, 0, 1, 2, 3, 64, 1 << 20, INT32_MAX}));
  std::string kind;
  // The head-rule mutations (23-28) only where a case has rules to change.
  switch (rand_int(rng, 0, c.entry >= kHeadsEntries ? 28 : 22)) {
    case 0: c.present[s] = false; kind = "tensor NULL"; break;
    case 1: t.data = nullptr; c.buffer_of[s] = -1; kind = "data NULL"; break;
    case 2: t.data = static_cast<char*>(t.data) + rand_int(rng, 1, 3); kind = "data misaligned"; break;
    case 3: t.rank = static_cast<int32_t>(pick64(rng, {-3, -1, 0, 1, 4, 7, 8, 9, 1 << 30})); kind = "rank"; break;
    case 4: t.dtype = static_cast<int32_t>(pick64(rng, {-1, 0, 1, 2, 3, 4, 99})); kind = "dtype"; break;
    case 5: t.device = static_cast<int32_t>(pick64(rng, {-7, -1, 0, 1, 1 << 20})); kind = "device"; break;
    case 6: case 7: t.shape[dim] = big; kind = "shape"; break;
    case 8: t.strides[dim] = big; kind = "stride"; break;
    case 9: {  // data of another tensor (outputs aliasing inputs and the like)
      const int other = rand_int(rng, 0, kSlots - 1);
      t.data = c.t[other].data;
      c.buffer_of[s] = c.buffer_of[other];
      kind = "alias";
      break;
    }
    case 10: c.params.rank = static_cast<int32_t>(pick64(rng, {-1, 0, 1, 2, 3, 4, 100})); kind = "params rank"; break;
    case 11: c.params.window[axis] = small; kind = "window"; break;
    case 12: c.params.stride[axis] = small; kind = "params stride"; break;
    case 13: c.params.dilation[axis] = small; kind = "dilation"; break;
    case 14: c.params.causal[axis] = small; kind = "causal"; break;
    case 15:
      c.params.scale = std::vector<float>{NAN, INFINITY, -INFINITY, -1.f, 0.f, 1e-45f, 3e38f,
                                          -0.f}[rand_int(rng, 0, 7)];
      kind = "scale";
      break;
    case 23: c.rules.groups = small; kind = "head rules groups"; break;
    case 24: c.rules.heads = small; kind = "head rules heads"; break;
    case 25: c.rules.group_of_head = nullptr; kind = "head rules map NULL"; break;
    case 26:
      c.group_map[rand_int(rng, 0, GNA_MAX_HEADS_WITH_RULES - 1)] = small;
      kind = "head rules map entry";
      break;
    case 27: {
      const int g = rand_int(rng, 0, GNA_MAX_HEAD_GROUPS - 1);
      (std::vector<int32_t*>{c.rules.window[g], c.rules.stride[g], c.rules.dilation[g],
                             c.rules.causal[g]}[rand_int(rng, 0, 3)])[axis] = small;
      kind = "head rules value";
      break;
    }
    case 28: c.use_rules = false; kind = "head rules NULL"; break;
    case 16:
      c.use_options = true;
      c.options.backend = std::vector<const char*>{nullptr, "", "auto", "reference", "portable",
                                                   "hopper", "gpu_reference", "nope"}[rand_int(rng, 0, 7)];
      kind = "backend";
      break;
    case 17:
      c.use_options = true;
      (rand_int(rng, 0, 1) ? c.options.q_tile : c.options.kv_tile)[axis] = small;
      c.options.autotune = rand_int(rng, 0, 1);
      c.options.deterministic = small;
      kind = "options tiles";
      break;
    case 18: c.capacity = static_cast<int32_t>(pick64(rng, {INT32_MIN, -1, 0, 1, 2})); kind = "capacity"; break;
    case 19: c.null_name = true; kind = "name NULL"; break;
    case 20: c.count = static_cast<int32_t>(pick64(rng, {INT32_MIN, -1, 0, 1})); kind = "merge count"; break;
    case 21:
      for (auto& row : c.sta)
        for (auto& x : row) x = static_cast<int32_t>(pick64(rng, {INT32_MIN, -1, 0, 1, 2, 3, 4, 8, 9, INT32_MAX}));
      kind = "sta values";
      break;
    default: c.sta_null = true; kind = "sta NULL"; break;
  }
  c.mutations.push_back(kind);
}

// Whether the library could read and write every tensor of the call without leaving the
// buffers they point into (host memory, spans inside the buffer, no overflow). Cases that
// could not are only validated: a valid call on a view past its memory is the caller's bug.
bool memory_safe(const Case& c, std::initializer_list<int> slots) {
  for (int s : slots) {
    if (!c.present[s]) continue;
    const gna_tensor& t = c.t[s];
    if (t.device >= 0) return false;  // host pointers described as device memory
    if (t.rank < 0 || t.rank > GNA_MAX_TENSOR_RANK) continue;  // refused before any access
    if ((t.dtype < GNA_DTYPE_F32 || t.dtype > GNA_DTYPE_BF16) && t.dtype != GNA_DTYPE_I32)
      continue;
    int64_t count = 1, last = 0;
    bool overflow = false, negative = false;
    for (int i = 0; i < t.rank && !negative; ++i) {
      // Refused if the entry reads this tensor; the other tensors must still be checked (an
      // entry that does not take this slot goes on with them).
      if (t.shape[i] < 0 || t.strides[i] < 0) negative = true;
      overflow |= __builtin_mul_overflow(count, t.shape[i], &count);
      int64_t step = 0;
      if (t.shape[i] > 0)
        overflow |= __builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &step) ||
                    __builtin_add_overflow(last, step, &last);
    }
    if (negative || overflow || count == 0) continue;
    if (c.buffer_of[s] < 0 || t.data == nullptr) continue;
    const Buffer& b = c.buffers[c.buffer_of[s]];
    const size_t element =
        t.dtype == GNA_DTYPE_F64 ? 8 : t.dtype == GNA_DTYPE_F32 || t.dtype == GNA_DTYPE_I32 ? 4 : 2;
    const auto begin = reinterpret_cast<uintptr_t>(b.storage.data());
    const auto at = reinterpret_cast<uintptr_t>(t.data);
    if (at < begin) return false;
    const double end = double(at - begin) + (double(last) + 1) * double(element);
    if (end > double(b.bytes)) return false;
  }
  return true;
}

const gna_tensor* ptr(const Case& c, int s) { return c.present[s] ? &c.t[s] : nullptr; }
gna_tensor* mut(Case& c, int s) { return c.present[s] ? &c.t[s] : nullptr; }

// Runs the call (in the child); the entry actually called may be downgraded to validate.
int32_t run_case(Case& c, int* entry) {
  const gna_options* o = c.use_options ? &c.options : nullptr;
  const gna_head_rules* rules = c.use_rules ? &c.rules : nullptr;
  *entry = c.entry;
  const int counted[] = {2, 3, 1};  // the plain entry of each _counts entry point
  const int plain = c.entry >= kCountsEntries  ? counted[c.entry - kCountsEntries]
                    : c.entry >= kHeadsEntries ? c.entry - kHeadsEntries
                                               : c.entry;
  if ((plain == 2 && !memory_safe(c, {Q, K, V, AK, AV, OUT, LSE, CNT})) ||
      (plain == 3 &&
       !memory_safe(c, {Q, K, V, AK, AV, OUT, LSE, DOUT, DQ, DK, DV, DAK, DAV, CNT})) ||
      (plain == 4 && (c.count > 2 || !memory_safe(c, {OUT, LSE, DOUT}))) ||
      (unfused_entry(c.entry) &&
       !memory_safe(c, {Q, K, V, OUT, DOUT, DQ, DK, DV, ATTN, RPB, D_ATTN, D_RPB})))
    *entry = unfused_entry(c.entry) ? -1 : c.entry >= kHeadsEntries ? kHeadsEntries : 0;
  switch (*entry) {
    case kCountsEntries:
      return gna_forward_counts(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK),
                                ptr(c, AV), ptr(c, CNT), mut(c, OUT), mut(c, LSE), o);
    case kCountsEntries + 1:
      return gna_backward_counts(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK),
                                 ptr(c, AV), ptr(c, CNT), ptr(c, OUT), ptr(c, LSE), ptr(c, DOUT),
                                 mut(c, DQ), mut(c, DK), mut(c, DV), mut(c, DAK), mut(c, DAV), o);
    case kCountsEntries + 2: {
      char name[32];
      return gna_select_backend_counts(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V),
                                       ptr(c, AK), ptr(c, AV), ptr(c, CNT), 1, o,
                                       c.null_name ? nullptr : name,
                                       std::min<int32_t>(c.capacity, sizeof name));
    }
    case kHeadsEntries:
      return gna_validate_heads(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK),
                                ptr(c, AV));
    case kHeadsEntries + 1: {
      char name[32];
      return gna_select_backend_heads(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V),
                                      ptr(c, AK), ptr(c, AV), 1, o,
                                      c.null_name ? nullptr : name,
                                      std::min<int32_t>(c.capacity, sizeof name));
    }
    case kHeadsEntries + 2:
      return gna_forward_heads(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK),
                               ptr(c, AV), mut(c, OUT), mut(c, LSE), o);
    case kHeadsEntries + 3:
      return gna_backward_heads(&c.params, rules, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK),
                                ptr(c, AV), ptr(c, OUT), ptr(c, LSE), ptr(c, DOUT), mut(c, DQ),
                                mut(c, DK), mut(c, DV), mut(c, DAK), mut(c, DAV), o);
    case 1: {
      char name[32];
      return gna_select_backend(&c.params, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK),
                                ptr(c, AV), 0, o, c.null_name ? nullptr : name,
                                std::min<int32_t>(c.capacity, sizeof name));
    }
    case 2:
      return gna_forward(&c.params, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK), ptr(c, AV),
                         mut(c, OUT), mut(c, LSE), o);
    case 3:
      return gna_backward(&c.params, ptr(c, Q), ptr(c, K), ptr(c, V), ptr(c, AK), ptr(c, AV),
                          ptr(c, OUT), ptr(c, LSE), ptr(c, DOUT), mut(c, DQ), mut(c, DK),
                          mut(c, DV), mut(c, DAK), mut(c, DAV), o);
    case 4: {  // merge (d_out, lse) with itself into out
      gna_tensor outputs[2] = {c.t[DOUT], c.t[DOUT]}, lses[2] = {c.t[LSE], c.t[LSE]};
      const int32_t count = c.count == 1 ? 2 : c.count;
      return gna_merge_attentions(count, c.present[DOUT] ? outputs : nullptr,
                                  c.present[LSE] ? lses : nullptr, mut(c, OUT), nullptr);
    }
    case 5: {
      gna_params out{};
      return gna_sta_params(c.params.rank, c.sta_null ? nullptr : c.sta[0], c.sta[1], c.sta[2],
                            c.sta_null ? nullptr : &out);
    }
    case 6:
      return gna_na_qk(&c.params, ptr(c, Q), ptr(c, K), ptr(c, RPB), mut(c, ATTN), o);
    case 7:
      return gna_na_av(&c.params, ptr(c, ATTN), ptr(c, V), mut(c, OUT), o);
    case 8:
      return gna_na_qk_backward(&c.params, ptr(c, Q), ptr(c, K), ptr(c, D_ATTN), mut(c, DQ),
                                mut(c, DK), mut(c, D_RPB), o);
    case 9:
      return gna_na_av_backward(&c.params, ptr(c, ATTN), ptr(c, V), ptr(c, DOUT), mut(c, D_ATTN),
                                mut(c, DV), o);
    case -1:  // an unfused call that could leave its buffers: validated as attention instead
      *entry = 0;
      [[fallthrough]];
    default:
      return gna_validate(c.params.rank == 100 ? nullptr : &c.params, ptr(c, Q), ptr(c, K),
                          ptr(c, V), ptr(c, AK), ptr(c, AV));
  }
}

std::string describe(const Case& c) {
  std::ostringstream os;
  os << kEntries[c.entry] << " after";
  for (const auto& m : c.mutations) os << " [" << m << "]";
  return os.str();
}

// Digits replaced by '#': messages that differ only in values count once.
std::string message_kind(const std::string& m) {
  std::string k;
  for (char ch : m) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      if (k.empty() || k.back() != '#') k += '#';
    } else {
      k += ch;
    }
  }
  return k;
}

TEST(CAbiFuzz, MalformedCallsNeverCrashOrHang) {
  const char* pinned = std::getenv("GNA_FUZZ_SEED");
  const uint64_t seed = pinned ? uint64_t{std::strtoull(pinned, nullptr, 10)} : fresh_seed();
  const double seconds = std::getenv("GNA_FUZZ_SECONDS") ? std::atof(std::getenv("GNA_FUZZ_SECONDS")) : 8.0;
  std::mt19937_64 rng(seed);
  std::set<std::string> cases, messages;
  std::map<int, int> statuses;
  std::map<std::string, int> per_entry;  // "entry ok/refused" counts
  int calls = 0, failures = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    const int kind = rand_int(rng, 0, 6);
    Case c = kind == 0   ? valid_unfused_case(rng)
             : kind <= 2 ? valid_heads_case(rng)
             : kind == 3 ? valid_counts_case(rng)
                         : valid_case(rng);
    const int n = rand_int(rng, 1, 3);
    for (int i = 0; i < n; ++i) mutate(c, rng);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // child: one call, then status, entry and message through the pipe
      close(fds[0]);
      alarm(kChildSeconds);
      int entry = 0;
      const int32_t status = run_case(c, &entry);
      const std::string msg = status == GNA_STATUS_OK ? "" : gna_last_error();
      const std::string line = std::to_string(status) + " " + std::to_string(entry) + " " + msg;
      if (write(fds[1], line.data(), line.size()) < 0) _exit(5);
      _exit(status < 0 || status > 3 || (status != 0 && msg.empty()) ? 4 : 0);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(got));
    close(fds[0]);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    ++calls;
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      ++failures;
      ADD_FAILURE() << describe(c) << " (seed " << seed << ", call " << calls << "): "
                    << (WIFSIGNALED(wstatus)
                            ? (WTERMSIG(wstatus) == SIGALRM ? std::string("hang")
                                                            : "signal " + std::to_string(WTERMSIG(wstatus)))
                            : "exit " + std::to_string(WEXITSTATUS(wstatus)) + " (bad status or empty message)")
                    << "; child said: " << out;
      if (failures >= 10) break;
      continue;
    }
    std::istringstream is(out);
    int status = -1, entry = -1;
    is >> status >> entry;
    std::string msg;
    std::getline(is, msg);
    ++statuses[status];
    if (entry < 0 || entry >= int(sizeof kEntries / sizeof kEntries[0])) {
      ADD_FAILURE() << "child reported entry " << entry << ": " << out;
      continue;
    }
    ++per_entry[std::string(kEntries[entry]) + (status == 0 ? " ok" : " refused")];
    std::set<std::string> kinds(c.mutations.begin(), c.mutations.end());
    std::string key = std::string(kEntries[entry]) + "/" + std::to_string(status);
    for (const auto& k : kinds) key += "/" + k;
    cases.insert(key);
    if (!msg.empty()) messages.insert(message_kind(msg));
    // A call refused for its head rules alone says so.
    bool rules_only = true;
    for (const auto& k : kinds) rules_only &= k.rfind("head rules", 0) == 0 && k != "head rules NULL";
    if (status == GNA_STATUS_INVALID_ARGUMENT && rules_only && msg.find("head rules") == std::string::npos)
      ADD_FAILURE() << describe(c) << " (seed " << seed << "): the message does not name the head "
                    << "rules: " << msg;
  }
  std::ostringstream summary;
  summary << "c_abi fuzz: " << calls << " calls in forked children (seed " << seed << "): "
          << cases.size() << " distinct cases (entry point, status, mutation kinds), "
          << messages.size() << " distinct messages; statuses ok " << statuses[0] << ", invalid "
          << statuses[1] << ", unsupported " << statuses[2] << ", runtime " << statuses[3]
          << "; crashes or hangs " << failures << "; by entry point:";
  for (const auto& [name, n] : per_entry) summary << " " << name << " " << n << ",";
  std::string line = summary.str();
  if (line.back() == ',') line.pop_back();
  std::cout << line << "\n";
  if (const char* report = std::getenv("GNA_FUZZ_REPORT")) std::ofstream(report, std::ios::app) << line << "\n";
  EXPECT_GT(calls, 100) << "too few calls to mean anything";
  EXPECT_GT(cases.size(), 50u);
}

}  // namespace
}  // namespace gna::test
