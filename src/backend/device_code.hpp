// Which kernels can run on a device, from its compute capability and the code this library
// embeds (GNA_CUDA_ARCHS), and the shared memory per block the kernels may plan for. Pure host
// functions (no CUDA) so that the choice is tested without a GPU; the backends ask them with
// the device's figures (kernels/common/device_limits.hpp).
#pragma once

#include <string>
#include <vector>

namespace gna {

// Compute capabilities are written as numbers: 86 = 8.6 (sm_86).
enum class KernelFamily {
  sm80,    // mma.sync kernels for every sm_80+ GPU: portable, halo, unfused, gpu_reference
  hopper,  // wgmma + TMA kernels, sm_90a: compute capability 9.0 only
};

// The code a family's kernels carry: SASS per arch and the PTX of one arch.
struct EmbeddedCode {
  std::vector<int> sass;
  int ptx = 0;                 // 0: none
  bool arch_specific = false;  // SASS for sm_XYa, which loads on compute capability X.Y alone
};

// What this library embeds for a family (empty without CUDA kernels).
EmbeddedCode embedded_code(KernelFamily family);

// How the driver loads `code` on a device of compute capability `cc`: the SASS of the newest
// arch of the same major version not newer than it (sm_80 runs on 8.6 and 8.9), else the PTX
// when it is not newer than the device (JIT-compiled at the first launch). Returns the arch it
// loads from (its number) and sets *jit when that is the PTX; 0 when nothing loads.
int loaded_arch(const EmbeddedCode& code, int cc, bool* jit = nullptr);

// Whether `family`'s kernels run on a device of compute capability `cc` given the code they
// carry; otherwise writes why ("device compute capability 7.5 not supported (needs 8.0 or
// newer)", "... no code for it (SASS for sm_80, ...; PTX for compute_120, which JIT-compiles
// on 12.0 and newer)").
bool family_runs_on(KernelFamily family, int cc, const EmbeddedCode& code, std::string* why);

// Whether the sm80 family's e4m3 kernels (mma.sync on e4m3 operands: the portable FP8 forward)
// run on compute capability `cc`: the code loaded there (loaded_arch) must be for sm_89 or newer,
// their body elsewhere being a trap; otherwise writes why.
bool e4m3_mma_runs_on(int cc, const EmbeddedCode& code, std::string* why);

// The family of a registered backend's kernels, by its name (attention backends and the unfused
// operators' "cuda" backend); false for names that are not CUDA backends.
bool backend_family(const std::string& backend, KernelFamily* family);

// The device backends among `backends` (in their order: dispatch's priority order) whose kernels
// run on compute capability `cc` with the given code: the choice dispatch makes by device before
// asking each about the call. Each passed over is added to *refusals as "<name>: <why>".
struct Backend;
std::vector<std::string> device_backends_for(int cc, const std::vector<Backend>& backends,
                                             const EmbeddedCode& sm80, const EmbeddedCode& hopper,
                                             std::vector<std::string>* refusals = nullptr);

// The environment variable that caps the shared memory per block the kernels plan for (to test
// the 163 KB and 99 KB configurations of other GPUs on an H100).
constexpr const char* kSharedMemoryCapVariable = "GNA_MAX_SHARED_MEMORY_BYTES";

// The shared memory per block the kernels may use: the device's opt-in limit, capped by `cap`
// (the variable's value; null or empty: no cap). A cap that is not a positive whole number of
// bytes is an error naming the variable and the value.
int capped_shared_memory(int device_limit, const char* cap);

}  // namespace gna
