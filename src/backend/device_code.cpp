#include "backend/device_code.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "backend/backend.hpp"
#include "gna/core/error.hpp"

namespace gna {
namespace {

std::string version(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

bool refuse(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return false;
}

std::string describe(const EmbeddedCode& code) {
  std::ostringstream os;
  if (code.sass.empty()) os << "no SASS";
  for (size_t i = 0; i < code.sass.size(); ++i)
    os << (i ? ", sm_" : "SASS for sm_") << code.sass[i] << (code.arch_specific ? "a" : "");
  if (code.ptx > 0)
    os << "; PTX for compute_" << code.ptx << ", which JIT-compiles on " << version(code.ptx)
       << " and newer";
  return os.str();
}

}  // namespace

EmbeddedCode embedded_code(KernelFamily family) {
  EmbeddedCode code;
#ifdef GNA_EMBEDDED_SASS
  if (family == KernelFamily::sm80) {
    code.sass = {GNA_EMBEDDED_SASS};
    code.ptx = GNA_EMBEDDED_PTX;
  }
#endif
#ifdef GNA_EMBEDDED_HOPPER
  if (family == KernelFamily::hopper) {
    code.sass = {90};
    code.arch_specific = true;
  }
#endif
  (void)family;
  return code;
}

int loaded_arch(const EmbeddedCode& code, int cc, bool* jit) {
  if (jit) *jit = false;
  int best = 0;
  for (int arch : code.sass) {
    // SASS is binary compatible within a major version, toward newer minor versions; an
    // arch-specific (sm_XYa) one loads on X.Y alone.
    const bool loads = code.arch_specific ? arch == cc : arch / 10 == cc / 10 && arch <= cc;
    if (loads) best = std::max(best, arch);
  }
  if (best > 0) return best;
  if (code.ptx > 0 && code.ptx <= cc) {
    if (jit) *jit = true;
    return code.ptx;
  }
  return 0;
}

bool family_runs_on(KernelFamily family, int cc, const EmbeddedCode& code, std::string* why) {
  if (family == KernelFamily::hopper && cc != 90)
    return refuse(why, "device compute capability " + version(cc) +
                           " not supported (needs 9.0: wgmma and TMA, sm_90a)");
  if (family == KernelFamily::sm80 && cc < 80)
    return refuse(why, "device compute capability " + version(cc) +
                           " not supported (needs 8.0 or newer)");
  if (loaded_arch(code, cc) > 0) return true;
  return refuse(why, "device compute capability " + version(cc) + ": this library has no code for it (" +
                         describe(code) + "; GNA_CUDA_ARCHS names the archs to build)");
}

bool e4m3_mma_runs_on(int cc, const EmbeddedCode& code, std::string* why) {
  if (cc < 89)
    return refuse(why, "device compute capability " + version(cc) +
                           " has no e4m3 tensor cores (needs 8.9 or newer)");
  if (!family_runs_on(KernelFamily::sm80, cc, code, why)) return false;
  const int arch = loaded_arch(code, cc);
  if (arch < 89)
    return refuse(why, "device compute capability " + version(cc) + " loads this library's sm_" +
                           std::to_string(arch) + " code, which has no e4m3 kernels (" +
                           describe(code) + "; GNA_CUDA_ARCHS needs 89 or newer)");
  return true;
}

bool backend_family(const std::string& backend, KernelFamily* family) {
  if (backend == "hopper") {
    *family = KernelFamily::hopper;
    return true;
  }
  if (backend == "portable" || backend == "halo" || backend == "gpu_reference" || backend == "cuda") {
    *family = KernelFamily::sm80;
    return true;
  }
  return false;
}

std::vector<std::string> device_backends_for(int cc, const std::vector<Backend>& backends,
                                             const EmbeddedCode& sm80, const EmbeddedCode& hopper,
                                             std::vector<std::string>* refusals) {
  std::vector<std::string> names;
  for (const Backend& b : backends) {
    if (!b.device) continue;
    KernelFamily family;
    std::string why = "not a CUDA kernel backend";
    if (backend_family(b.name, &family) &&
        family_runs_on(family, cc, family == KernelFamily::hopper ? hopper : sm80, &why))
      names.push_back(b.name);
    else if (refusals)
      refusals->push_back(b.name + ": " + why);
  }
  return names;
}

int capped_shared_memory(int device_limit, const char* cap) {
  if (!cap || !*cap) return device_limit;
  errno = 0;
  char* end = nullptr;
  const long long bytes = std::strtoll(cap, &end, 10);
  if (errno != 0 || *end != '\0' || bytes <= 0 || bytes > INT_MAX)
    fail_invalid(kSharedMemoryCapVariable, ": must be a positive number of bytes, got '", cap, "'");
  return device_limit > 0 ? std::min<int>(device_limit, static_cast<int>(bytes))
                          : static_cast<int>(bytes);
}

}  // namespace gna
