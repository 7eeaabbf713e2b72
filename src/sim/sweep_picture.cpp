// The sweep chart: FLOP-wise and tile-wise speedup bounds per stride; see svg.hpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "gna/sim/describe.hpp"
#include "gna/sim/svg.hpp"
#include "svg_writer.hpp"

namespace gna::sim {

namespace {

const char* kFlopFill = "#bdbdbd";
const char* kTileFill = "#3182bd";
const char* kBlockSparseFill = "#31a354";

// A round tick step (1, 2 or 5 times a power of ten) giving at most about 8 ticks.
double tick_step(double top) {
  const double raw = top / 8;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string sweep_svg(const Config& c, const std::vector<SweepEntry>& entries) {
  const int n = static_cast<int>(entries.size());
  const double left = 64, right = 24, top = 92, bottom = 96;
  // Wide enough to read a few dozen strides; thinner bars (at most 1600 px in all) for --all.
  const double group = n > 0 ? std::clamp(720.0 / n, std::min(6.0, 1600.0 / n), 90.0) : 90.0;
  const double plot_w = std::max(1.0, n * group), plot_h = 320;
  const double width = std::max(left + plot_w + right, 820.0);
  SvgWriter svg(width, top + plot_h + bottom);

  svg.text(left, 20, "GNA speedup bounds per stride", "font-size=\"14\" font-weight=\"bold\"");
  svg.text(left, 38, problem_description(c, false));
  svg.text(left, 54, tiling_description(c));

  double y_max = 1.0;
  for (const SweepEntry& e : entries)
    y_max = std::max({y_max, e.result.flop_speedup, e.result.tile_speedup});
  const double step = tick_step(y_max * 1.08);
  y_max = std::ceil(y_max * 1.08 / step) * step;
  auto y_of = [&](double v) { return top + plot_h - v / y_max * plot_h; };

  // Axes and ticks.
  for (double v = 0; v <= y_max + 1e-9; v += step) {
    svg.line(left, y_of(v), left + plot_w, y_of(v), "stroke=\"#e5e5e5\"");
    svg.text(left - 6, y_of(v) + 4, step < 1 ? fixed(v, 1) : fixed(v, 0),
             "text-anchor=\"end\" font-size=\"11\"");
  }
  svg.line(left, top, left, top + plot_h, "stroke=\"#444\"");
  svg.line(left, top + plot_h, left + plot_w, top + plot_h, "stroke=\"#444\"");
  svg.text(16, top + plot_h / 2, "speedup bound (x)",
           "transform=\"rotate(-90 16 " + SvgWriter::num(top + plot_h / 2) +
               ")\" text-anchor=\"middle\" font-size=\"11\"");

  // Bars: FLOP-wise (grey) and tile-wise (blue, green when perfectly block-sparse).
  const int label_every = std::max(1, static_cast<int>(std::ceil(12.0 / group)));
  for (int i = 0; i < n; ++i) {
    const SweepEntry& e = entries[i];
    const double x = left + i * group;
    const double bar = group * 0.38;
    const double flop = e.result.flop_speedup, tile = e.result.tile_speedup;
    svg.rect(x + group * 0.1, y_of(flop), bar, top + plot_h - y_of(flop),
             std::string("fill=\"") + kFlopFill + "\"");
    svg.rect(x + group * 0.1 + bar, y_of(tile), bar, top + plot_h - y_of(tile),
             std::string("fill=\"") + (e.result.block_sparse ? kBlockSparseFill : kTileFill) +
                 "\"");
    if (group >= 24)
      svg.text(x + group * 0.1 + 1.5 * bar, y_of(tile) - 3, fixed(tile, 1),
               "text-anchor=\"middle\" font-size=\"9\"");
    if (i % label_every == 0) {
      const double lx = x + group / 2, ly = top + plot_h + 10;
      svg.text(lx, ly, shape_string(e.stride, c.rank),
               "transform=\"rotate(-55 " + SvgWriter::num(lx) + " " + SvgWriter::num(ly) +
                   ")\" text-anchor=\"end\" font-size=\"10\"");
    }
  }
  svg.text(left + plot_w / 2, top + plot_h + bottom - 8,
           "stride (ordered by the product of strides)", "text-anchor=\"middle\" font-size=\"11\"");

  // Legend.
  double lx = left;
  const double ly = 66;
  auto swatch = [&](const char* fill, const std::string& label) {
    svg.rect(lx, ly, 12, 12, std::string("fill=\"") + fill + "\"");
    svg.text(lx + 16, ly + 10, label, "font-size=\"11\"");
    lx += 30 + 6.0 * label.size();
  };
  swatch(kFlopFill, "FLOP-wise bound: N / keys per query");
  swatch(kTileFill, "tile-wise bound: dense KV tiles / max visited");
  swatch(kBlockSparseFill, "tile-wise, perfectly block-sparse");
  return svg.finish();
}

}  // namespace gna::sim
