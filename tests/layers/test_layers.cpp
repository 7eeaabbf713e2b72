// The layering of src/ (CMakeLists.txt): core -> backend -> reference, kernels -> api, with ops
// and sim on core alone. Each test scans one folder's sources for #include "..." lines naming a
// folder of a layer above it. A scan that finds no file or no include fails, so that a moved
// folder cannot make a test pass without checking anything.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Scan {
  int files = 0;
  int includes = 0;
  std::vector<std::string> violations;  // "path:line includes \"header\""
};

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".hpp" || ext == ".cpp" || ext == ".cu" || ext == ".cuh" || ext == ".h";
}

Scan scan(const std::string& folder, const std::vector<std::string>& forbidden) {
  Scan s;
  const fs::path source_dir(GNA_SOURCE_DIR);
  const std::regex include_line(R"(^\s*#\s*include\s*"([^"]+)\")");
  for (const auto& entry : fs::recursive_directory_iterator(source_dir / "src" / folder)) {
    if (!entry.is_regular_file() || !is_source(entry.path())) continue;
    ++s.files;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      ++s.includes;
      const std::string header = m[1];
      for (const std::string& prefix : forbidden)
        if (header.compare(0, prefix.size(), prefix) == 0)
          s.violations.push_back(fs::relative(entry.path(), source_dir).string() + ":" +
                                 std::to_string(n) + " includes \"" + header + "\"");
    }
  }
  return s;
}

void expect_clean(const std::string& folder, const std::vector<std::string>& forbidden) {
  const Scan s = scan(folder, forbidden);
  EXPECT_GT(s.files, 0) << "src/" << folder << ": no source file found";
  EXPECT_GT(s.includes, 0) << "src/" << folder << ": no #include \"...\" found";
  for (const std::string& v : s.violations) ADD_FAILURE() << v;
}

TEST(Layers, ApiIncludesNoKernel) { expect_clean("api", {"kernels/"}); }

TEST(Layers, KernelsIncludeNoApi) { expect_clean("kernels", {"api/"}); }

TEST(Layers, ReferenceIncludesNeitherKernelsNorApi) {
  expect_clean("reference", {"kernels/", "api/"});
}

TEST(Layers, BackendIncludesNoLayerAbove) {
  expect_clean("backend", {"reference/", "kernels/", "api/"});
}

TEST(Layers, CoreOpsAndSimIncludeNoLayerAbove) {
  for (const char* folder : {"core", "ops", "sim"})
    expect_clean(folder, {"backend/", "reference/", "kernels/", "api/"});
}

// The scanner sees what it must reject: dispatch includes the backend interface.
TEST(Layers, ScanFindsAnIncludeOfALowerLayer) {
  const Scan s = scan("api", {"backend/"});
  EXPECT_FALSE(s.violations.empty());
}

}  // namespace
