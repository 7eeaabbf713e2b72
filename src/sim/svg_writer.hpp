// A minimal SVG text builder (no third-party code): shapes, text and paths in pixel units.
#pragma once

#include <cstdio>
#include <string>

namespace gna::sim {

class SvgWriter {
 public:
  SvgWriter(double width, double height) : width_(width), height_(height) {}

  static std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    std::string s = buf;  // trim trailing zeros: smaller files, same picture
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s == "-0" ? "0" : s;
  }

  static std::string escape(const std::string& text) {
    std::string out;
    for (char ch : text) {
      if (ch == '&') out += "&amp;";
      else if (ch == '<') out += "&lt;";
      else if (ch == '>') out += "&gt;";
      else if (ch == '"') out += "&quot;";
      else out += ch;
    }
    return out;
  }

  void rect(double x, double y, double w, double h, const std::string& style) {
    body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
             "\" height=\"" + num(h) + "\" " + style + "/>\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string& style) {
    body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) +
             "\" y2=\"" + num(y2) + "\" " + style + "/>\n";
  }
  void path(const std::string& d, const std::string& style) {
    if (!d.empty()) body_ += "<path d=\"" + d + "\" " + style + "/>\n";
  }
  void text(double x, double y, const std::string& t, const std::string& style = "") {
    body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + style + ">" + escape(t) +
             "</text>\n";
  }
  void raw(const std::string& s) { body_ += s; }

  std::string finish() const {
    return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width_) + "\" height=\"" +
           num(height_) + "\" viewBox=\"0 0 " + num(width_) + " " + num(height_) +
           "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n" +
           "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" + body_ + "</svg>\n";
  }

 private:
  double width_, height_;
  std::string body_;
};

}  // namespace gna::sim
