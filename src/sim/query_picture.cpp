// The picture of one query (or its Q tile) over the layout; see include/gna/sim/svg.hpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gna/core/error.hpp"
#include "gna/core/tiling.hpp"
#include "gna/sim/describe.hpp"
#include "gna/sim/svg.hpp"
#include "svg_writer.hpp"

namespace gna::sim {

namespace {

struct Coords {
  int v[kMaxRank] = {0, 0, 0};
};

// What the picture needs to know about the query's Q tile: its queries, the keys they attend
// and the KV tiles it visits with their pair classes.
class QTileView {
 public:
  QTileView(const Config& c, const Coords& query) : c_(c), query_(query) {
    if (c.tiling == Tiling::one_dim) init_one_dim(); else init_multi_dim();
  }

  bool is_query(const Coords& k) const {
    for (int a = 0; a < c_.rank; ++a)
      if (k.v[a] != query_.v[a]) return false;
    return true;
  }

  bool in_q_tile(const Coords& k) const {
    if (c_.tiling == Tiling::one_dim) {
      const int64_t f = flat(k);
      return run_begin_ <= f && f < run_end_;
    }
    for (int a = 0; a < c_.rank; ++a) {
      const AxisRule& ax = c_.axes[a];
      if (dilation_group(ax, k.v[a]) != group_[a] ||
          !q_rows_[a].contains(index_in_group(ax, k.v[a])))
        return false;
    }
    return true;
  }

  bool attended(const Coords& k, bool q_tile_union) const {
    if (!q_tile_union) return attends(query_, k);
    if (c_.tiling == Tiling::one_dim) {
      for (const Coords& q : run_queries_)
        if (attends(q, k)) return true;
      return false;
    }
    // Q tiles are products of per-axis rows and the rule is an AND over axes, so "some query
    // of the tile attends k" holds per axis: k lies in the union of the rows' windows.
    for (int a = 0; a < c_.rank; ++a) {
      const AxisRule& ax = c_.axes[a];
      if (dilation_group(ax, k.v[a]) != group_[a] ||
          !union_key_window(ax, n_[a], q_rows_[a]).contains(index_in_group(ax, k.v[a])))
        return false;
    }
    return true;
  }

  // Id of the visited KV tile holding key k (-1 if none) and its pair class.
  int64_t tile_of(const Coords& k, PairClass* cls) {
    if (c_.tiling == Tiling::one_dim) {
      const int64_t kt = flat(k) / kv_volume_;
      const PairClass pc = one_dim_class(kt);
      *cls = pc;
      return pc == PairClass::empty ? -1 : kt;
    }
    int64_t id = 0;
    PairClass combined = PairClass::full;
    for (int a = 0; a < c_.rank; ++a) {
      const AxisRule& ax = c_.axes[a];
      if (dilation_group(ax, k.v[a]) != group_[a]) return -1;
      const int j = index_in_group(ax, k.v[a]);
      // Tile m of the run holds keys [first + m * T, first + (m + 1) * T).
      if (j < kv_run_[a].first) return -1;
      const int slot = (j - kv_run_[a].first) / c_.kv_tile[a];
      if (slot >= kv_run_[a].count) return -1;
      combined = combine(combined, axis_class(a, slot));
      id = id * (n_[a] + 1) + slot;
    }
    *cls = combined;
    return id;
  }

  int64_t visited() const { return visited_; }
  int64_t full() const { return full_; }

 private:
  bool attends(const Coords& q, const Coords& k) const {
    for (int a = 0; a < c_.rank; ++a)
      if (!axis_attends(c_.axes[a], q.v[a], k.v[a])) return false;
    return true;
  }

  int64_t flat(const Coords& k) const {
    int64_t f = 0;
    for (int a = 0; a < c_.rank; ++a) f = f * c_.axes[a].extent + k.v[a];
    return f;
  }

  Coords unflat(int64_t f) const {
    Coords k;
    for (int a = c_.rank - 1; a >= 0; --a) {
      k.v[a] = static_cast<int>(f % c_.axes[a].extent);
      f /= c_.axes[a].extent;
    }
    return k;
  }

  PairClass axis_class(int a, int slot) const {
    return classify_axis_pair(c_.axes[a], n_[a], q_rows_[a],
                              kv_run_[a].first + slot * c_.kv_tile[a], c_.kv_tile[a]);
  }

  void init_multi_dim() {
    visited_ = full_ = 1;
    for (int a = 0; a < c_.rank; ++a) {
      const AxisRule& ax = c_.axes[a];
      group_[a] = dilation_group(ax, query_.v[a]);
      n_[a] = group_length(ax, group_[a]);
      const int qt = index_in_group(ax, query_.v[a]) / c_.q_tile[a];
      q_rows_[a] = tile_rows(n_[a], c_.q_tile[a], qt);
      kv_run_[a] = kv_tile_run(ax, n_[a], qt, c_.q_tile[a], c_.kv_tile[a],
                               kv_placement(c_.kv_tiling));
      int64_t axis_full = 0;
      for (int m = 0; m < kv_run_[a].count; ++m) axis_full += axis_class(a, m) == PairClass::full;
      visited_ *= kv_run_[a].count;
      full_ *= axis_full;
    }
  }

  void init_one_dim() {
    int64_t tokens = 1;
    for (int a = 0; a < c_.rank; ++a) tokens *= c_.axes[a].extent;
    tokens_ = tokens;
    kv_volume_ = kv_tile_volume(c_);
    const int64_t qv = q_tile_volume(c_);
    run_begin_ = flat(query_) / qv * qv;
    run_end_ = std::min(run_begin_ + qv, tokens);
    for (int64_t t = run_begin_; t < run_end_; ++t) run_queries_.push_back(unflat(t));
    visited_ = full_ = 0;
    for (int64_t kt = 0; kt * kv_volume_ < tokens; ++kt) {
      const PairClass pc = one_dim_class(kt);
      visited_ += pc != PairClass::empty;
      full_ += pc == PairClass::full;
    }
  }

  // Class of (the Q run, KV run kt) by enumerating its (query, key) pairs.
  PairClass one_dim_class(int64_t kt) {
    const auto found = one_dim_cache_.find(kt);
    if (found != one_dim_cache_.end()) return found->second;
    const int64_t k0 = kt * kv_volume_, k1 = std::min(k0 + kv_volume_, tokens_);
    int64_t attended = 0;
    for (int64_t j = k0; j < k1; ++j) {
      const Coords k = unflat(j);
      for (const Coords& q : run_queries_) attended += attends(q, k);
    }
    const int64_t pairs = (k1 - k0) * static_cast<int64_t>(run_queries_.size());
    const PairClass pc = attended == 0 ? PairClass::empty
                         : (attended == pairs && k0 + kv_volume_ <= tokens_) ? PairClass::full
                                                                            : PairClass::partial;
    one_dim_cache_[kt] = pc;
    return pc;
  }

  const Config& c_;
  Coords query_;
  // multi-dimensional tiling, per axis
  int group_[kMaxRank] = {0, 0, 0};
  int n_[kMaxRank] = {1, 1, 1};
  Range q_rows_[kMaxRank];
  KvTileRun kv_run_[kMaxRank];  // the visited KV tiles per axis
  // 1-D tiling
  int64_t tokens_ = 0, kv_volume_ = 1, run_begin_ = 0, run_end_ = 0;
  std::vector<Coords> run_queries_;
  std::map<int64_t, PairClass> one_dim_cache_;
  int64_t visited_ = 0, full_ = 0;
};

// A 2-D grid of cells, each showing one key (or no token).
struct Panel {
  std::string title;
  int rows = 1, cols = 1;
  std::function<bool(int, int, Coords&)> key;
};

std::vector<Panel> make_panels(const Config& c, const Coords& q) {
  std::vector<Panel> panels;
  int L[kMaxRank];
  for (int a = 0; a < c.rank; ++a) L[a] = c.axes[a].extent;
  if (c.rank == 1) {
    const int width = std::min(L[0], 256);
    Panel p;
    p.rows = ceil_div(L[0], width);
    p.cols = width;
    p.title = L[0] > width ? "tokens, in rows of " + std::to_string(width) : "tokens";
    p.key = [width, n = L[0]](int r, int col, Coords& k) {
      k.v[0] = r * width + col;
      return k.v[0] < n;
    };
    panels.push_back(p);
  } else if (c.rank == 2) {
    Panel p;
    p.rows = L[0];
    p.cols = L[1];
    p.title = "axis 0 down, axis 1 across";
    p.key = [](int r, int col, Coords& k) {
      k.v[0] = r;
      k.v[1] = col;
      return true;
    };
    panels.push_back(p);
  } else {
    // The three slices through the query: each fixes one axis at the query's coordinate.
    for (int fixed = 0; fixed < 3; ++fixed) {
      const int down = fixed == 0 ? 1 : 0, across = fixed == 2 ? 1 : 2;
      Panel p;
      p.rows = L[down];
      p.cols = L[across];
      p.title = "axis " + std::to_string(fixed) + " = " + std::to_string(q.v[fixed]) +
                " (axis " + std::to_string(down) + " down, axis " + std::to_string(across) +
                " across)";
      p.key = [fixed, down, across, at = q.v[fixed]](int r, int col, Coords& k) {
        k.v[fixed] = at;
        k.v[down] = r;
        k.v[across] = col;
        return true;
      };
      panels.push_back(p);
    }
  }
  return panels;
}

const char* kAttendedFill = "#6baed6";
const char* kQTileFill = "#fb6a4a";
const char* kQueryFill = "#a50f15";
const char* kFullStroke = "#238b45";
const char* kPartialStroke = "#d94801";

// Cells where `on` holds as filled rectangles: horizontal runs, each extended down over the
// rows that repeat it exactly (fewer shapes, no seams between rows).
void fill_runs(SvgWriter& svg, const Panel& p, double x0, double y0, double cell,
               const std::vector<uint8_t>& on, const std::string& style) {
  auto at = [&](int r, int col) { return on[static_cast<size_t>(r) * p.cols + col] != 0; };
  auto run_at = [&](int r, int begin, int end) {  // [begin, end) is a maximal run of row r
    for (int col = begin; col < end; ++col)
      if (!at(r, col)) return false;
    return (begin == 0 || !at(r, begin - 1)) && (end == p.cols || !at(r, end));
  };
  std::vector<uint8_t> done(on.size());
  for (int r = 0; r < p.rows; ++r)
    for (int col = 0; col < p.cols;) {
      if (!at(r, col)) {
        ++col;
        continue;
      }
      int end = col;
      while (end < p.cols && at(r, end)) ++end;
      if (done[static_cast<size_t>(r) * p.cols + col]) {  // drawn with a row above
        col = end;
        continue;
      }
      int last = r + 1;
      while (last < p.rows && !done[static_cast<size_t>(last) * p.cols + col] &&
             run_at(last, col, end))
        ++last;
      for (int rr = r; rr < last; ++rr) done[static_cast<size_t>(rr) * p.cols + col] = 1;
      svg.rect(x0 + col * cell, y0 + r * cell, (end - col) * cell, (last - r) * cell, style);
      col = end;
    }
}

// Outlines of the visited KV tiles: the cell edges where the tile id changes.
void outline_tiles(SvgWriter& svg, const Panel& p, double x0, double y0, double cell,
                   const std::vector<int64_t>& id, const std::vector<PairClass>& cls) {
  auto at = [&](int r, int col) -> int64_t {
    if (r < 0 || col < 0 || r >= p.rows || col >= p.cols) return -1;
    return id[static_cast<size_t>(r) * p.cols + col];
  };
  std::string d_full, d_partial;
  auto add = [&](PairClass pc, double x1, double y1, double x2, double y2) {
    std::string& d = pc == PairClass::full ? d_full : d_partial;
    d += "M" + SvgWriter::num(x1) + " " + SvgWriter::num(y1) + "L" + SvgWriter::num(x2) + " " +
         SvgWriter::num(y2);
  };
  // Horizontal edges (top and bottom of cells), merged along rows.
  for (int side = 0; side < 2; ++side)
    for (int r = 0; r < p.rows; ++r)
      for (int col = 0; col < p.cols;) {
        const int64_t t = at(r, col);
        const int nr = side == 0 ? r - 1 : r + 1;
        if (t < 0 || at(nr, col) == t) {
          ++col;
          continue;
        }
        const PairClass pc = cls[static_cast<size_t>(r) * p.cols + col];
        int end = col + 1;
        while (end < p.cols && at(r, end) >= 0 && at(nr, end) != at(r, end) &&
               cls[static_cast<size_t>(r) * p.cols + end] == pc)
          ++end;
        const double y = y0 + (side == 0 ? r : r + 1) * cell;
        add(pc, x0 + col * cell, y, x0 + end * cell, y);
        col = end;
      }
  // Vertical edges (left and right of cells), merged along columns.
  for (int side = 0; side < 2; ++side)
    for (int col = 0; col < p.cols; ++col)
      for (int r = 0; r < p.rows;) {
        const int64_t t = at(r, col);
        const int nc = side == 0 ? col - 1 : col + 1;
        if (t < 0 || at(r, nc) == t) {
          ++r;
          continue;
        }
        const PairClass pc = cls[static_cast<size_t>(r) * p.cols + col];
        int end = r + 1;
        while (end < p.rows && at(end, col) >= 0 && at(end, nc) != at(end, col) &&
               cls[static_cast<size_t>(end) * p.cols + col] == pc)
          ++end;
        const double x = x0 + (side == 0 ? col : col + 1) * cell;
        add(pc, x, y0 + r * cell, x, y0 + end * cell);
        r = end;
      }
  const std::string width = SvgWriter::num(std::clamp(cell / 4, 0.6, 2.5));
  svg.path(d_partial, std::string("fill=\"none\" stroke=\"") + kPartialStroke +
                          "\" stroke-width=\"" + width + "\" stroke-linecap=\"square\"");
  svg.path(d_full, std::string("fill=\"none\" stroke=\"") + kFullStroke + "\" stroke-width=\"" +
                       width + "\" stroke-linecap=\"square\"");
}

void draw_panel(SvgWriter& svg, const Panel& p, double x0, double y0, double cell,
                QTileView& view, bool q_tile_union) {
  const size_t cells = static_cast<size_t>(p.rows) * p.cols;
  std::vector<uint8_t> token(cells), attended(cells), q_tile(cells), query(cells);
  std::vector<int64_t> tile(cells, -1);
  std::vector<PairClass> cls(cells, PairClass::empty);
  for (int r = 0; r < p.rows; ++r)
    for (int col = 0; col < p.cols; ++col) {
      const size_t i = static_cast<size_t>(r) * p.cols + col;
      Coords k;
      if (!p.key(r, col, k)) continue;
      token[i] = 1;
      attended[i] = view.attended(k, q_tile_union);
      q_tile[i] = view.in_q_tile(k);
      query[i] = view.is_query(k);
      tile[i] = view.tile_of(k, &cls[i]);
    }
  svg.text(x0, y0 - 7, p.title, "font-size=\"11\" fill=\"#444\"");
  fill_runs(svg, p, x0, y0, cell, token, "fill=\"#f4f4f4\" shape-rendering=\"crispEdges\"");
  if (cell >= 6) {
    std::string d;
    for (int r = 0; r <= p.rows; ++r)
      d += "M" + SvgWriter::num(x0) + " " + SvgWriter::num(y0 + r * cell) + "h" +
           SvgWriter::num(p.cols * cell);
    for (int col = 0; col <= p.cols; ++col)
      d += "M" + SvgWriter::num(x0 + col * cell) + " " + SvgWriter::num(y0) + "v" +
           SvgWriter::num(p.rows * cell);
    svg.path(d, "stroke=\"#dddddd\" stroke-width=\"0.5\" fill=\"none\"");
  }
  fill_runs(svg, p, x0, y0, cell, attended,
            std::string("fill=\"") + kAttendedFill +
                "\" fill-opacity=\"0.75\" shape-rendering=\"crispEdges\"");
  fill_runs(svg, p, x0, y0, cell, q_tile,
            std::string("fill=\"") + kQTileFill +
                "\" fill-opacity=\"0.55\" shape-rendering=\"crispEdges\"");
  fill_runs(svg, p, x0, y0, cell, query, std::string("fill=\"") + kQueryFill + "\"");
  outline_tiles(svg, p, x0, y0, cell, tile, cls);
  svg.rect(x0, y0, p.cols * cell, p.rows * cell, "fill=\"none\" stroke=\"#888\" stroke-width=\"0.8\"");
}

// Panels of cells (see make_panels) and, with 1-D tiling, (query, key) pairs enumerated: both
// bounded, so that a picture of a huge layout is refused instead of filling memory.
void check_picture_size(const Config& c, bool q_tile_union) {
  double L[kMaxRank] = {1, 1, 1}, tokens = 1;
  for (int a = 0; a < c.rank; ++a) tokens *= L[a] = c.axes[a].extent;
  const double cells = c.rank == 1 ? L[0] + 256
                       : c.rank == 2 ? L[0] * L[1]
                                     : L[1] * L[2] + L[0] * L[2] + L[0] * L[1];
  if (cells > double(kMaxPictureCells))
    fail_invalid("show: the picture would have ", std::llround(cells), " cells, more than ",
                 kMaxPictureCells, " (pictures are for layouts whose slices have at most that "
                 "many tokens)");
  if (c.tiling == Tiling::one_dim) {
    const double tq = double(q_tile_volume(c));
    const double steps = tokens * tq + (q_tile_union ? cells * tq : 0.0);
    if (steps > kMaxSimulationSteps)
      fail_invalid("show: 1-D tiling would compare about ", std::llround(steps),
                   " (query, key) pairs, more than ", std::llround(kMaxSimulationSteps),
                   " (a smaller Q tile shrinks it)");
  }
}

}  // namespace

std::string query_svg(const Config& c, const int* query, bool q_tile_union) {
  validate(c);
  check_picture_size(c, q_tile_union);
  Coords q;
  for (int a = 0; a < c.rank; ++a) {
    if (query[a] < 0 || query[a] >= c.axes[a].extent)
      fail_invalid("axis ", a, ": query coordinate must be in [0, ", c.axes[a].extent, "), got ",
                   query[a]);
    q.v[a] = query[a];
  }
  QTileView view(c, q);
  const std::vector<Panel> panels = make_panels(c, q);

  int total_cols = 0, max_rows = 0;
  for (const Panel& p : panels) {
    total_cols += p.cols;
    max_rows = std::max(max_rows, p.rows);
  }
  const double gap = 28, margin = 16, header = 98, legend = 34;
  const double cell = std::min({1200.0 / total_cols, 640.0 / max_rows, 24.0});
  double width = 2 * margin + gap * (panels.size() - 1);
  for (const Panel& p : panels) width += p.cols * cell;
  width = std::max(width, 760.0);
  const double height = header + max_rows * cell + legend + margin;
  SvgWriter svg(width, height);

  svg.text(margin, 20, "GNA " + problem_description(c), "font-size=\"13\" font-weight=\"bold\"");
  svg.text(margin, 38, tiling_description(c));
  svg.text(margin, 56,
           std::string(q_tile_union ? "keys attended by any query of the Q tile of query "
                                    : "keys attended by query ") +
               shape_string(query, c.rank) + "; its Q tile visits " +
               std::to_string(view.visited()) + " KV tiles (" + std::to_string(view.full()) +
               " full, " + std::to_string(view.visited() - view.full()) + " partial)");
  bool dilated = false;
  for (int a = 0; a < c.rank; ++a) dilated = dilated || c.axes[a].dilation > 1;
  if (dilated && c.tiling == Tiling::multi_dim)
    svg.text(margin, 72,
             "tiles hold the tokens of one dilation group (every d-th token), so their cells are "
             "outlined one by one",
             "font-size=\"11\" fill=\"#444\"");
  double x = margin;
  for (const Panel& p : panels) {
    draw_panel(svg, p, x, header, cell, view, q_tile_union);
    x += p.cols * cell + gap;
  }

  // Legend.
  const double ly = header + max_rows * cell + 14;
  double lx = margin;
  auto swatch = [&](const std::string& style, const std::string& label) {
    svg.rect(lx, ly, 12, 12, style);
    svg.text(lx + 16, ly + 10, label, "font-size=\"11\"");
    lx += 34 + 5.6 * label.size();
  };
  swatch(std::string("fill=\"") + kQueryFill + "\"", "query");
  swatch(std::string("fill=\"") + kQTileFill + "\" fill-opacity=\"0.55\"", "its Q tile");
  swatch(std::string("fill=\"") + kAttendedFill + "\" fill-opacity=\"0.75\"", "attended keys");
  swatch(std::string("fill=\"none\" stroke=\"") + kFullStroke + "\" stroke-width=\"2\"",
         "visited KV tile, full (no mask)");
  swatch(std::string("fill=\"none\" stroke=\"") + kPartialStroke + "\" stroke-width=\"2\"",
         "visited KV tile, partial (masked)");
  return svg.finish();
}

}  // namespace gna::sim
