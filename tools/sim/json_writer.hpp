// A small JSON emitter: objects, arrays, numbers that read back exactly, escaped strings.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace gna::sim::cli {

class JsonWriter {
 public:
  // Containers: the key is used inside objects and ignored at top level or inside arrays.
  JsonWriter& begin_object(const char* key = nullptr) { return open(key, '{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array(const char* key = nullptr) { return open(key, '['); }
  JsonWriter& end_array() { return close(']'); }

  JsonWriter& value(const char* key, int64_t v) { return scalar(key, std::to_string(v)); }
  JsonWriter& value(const char* key, int v) { return value(key, static_cast<int64_t>(v)); }
  JsonWriter& value(const char* key, bool v) { return scalar(key, v ? "true" : "false"); }
  JsonWriter& value(const char* key, double v) { return scalar(key, number(v)); }
  JsonWriter& value(const char* key, const std::string& v) { return scalar(key, quote(v)); }
  JsonWriter& value(const char* key, const char* v) { return value(key, std::string(v)); }
  // A short integer array on one line: "shape": [30, 48, 80].
  JsonWriter& array(const char* key, const int* values, int count) {
    std::string text = "[";
    for (int i = 0; i < count; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
    return scalar(key, text + "]");
  }

  std::string str() const { return out_ + "\n"; }

  // Shortest %g form that reads back to the same double; null for NaN and infinities.
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[40];
    for (int precision = 15; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
  }

  static std::string quote(const std::string& s) {
    std::string q = "\"";
    for (unsigned char ch : s) {
      if (ch == '"') q += "\\\"";
      else if (ch == '\\') q += "\\\\";
      else if (ch == '\n') q += "\\n";
      else if (ch < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        q += buf;
      } else {
        q += static_cast<char>(ch);
      }
    }
    return q + "\"";
  }

 private:
  void prefix(const char* key) {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ",";
      first_.back() = false;
      out_ += "\n" + std::string(2 * first_.size(), ' ');
      if (in_object_.back() && key) out_ += quote(key) + ": ";
    }
  }
  JsonWriter& open(const char* key, char bracket) {
    prefix(key);
    out_ += bracket;
    first_.push_back(true);
    in_object_.push_back(bracket == '{');
    return *this;
  }
  JsonWriter& close(char bracket) {
    const bool empty = first_.back();
    first_.pop_back();
    in_object_.pop_back();
    if (!empty) out_ += "\n" + std::string(2 * first_.size(), ' ');
    out_ += bracket;
    return *this;
  }
  JsonWriter& scalar(const char* key, const std::string& text) {
    prefix(key);
    out_ += text;
    return *this;
  }

  std::string out_;
  std::vector<bool> first_;      // per open container: nothing written in it yet
  std::vector<bool> in_object_;  // per open container: object (true) or array
};

}  // namespace gna::sim::cli
