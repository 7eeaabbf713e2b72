// Which kernels run on a device, by compute capability and the code the library embeds, and the
// shared-memory cap: pure functions, tested without a GPU.
#include <gtest/gtest.h>

#include "backend/backend.hpp"
#include "backend/device_code.hpp"
#include "gna/core/error.hpp"

namespace gna {
namespace {

// The default build (GNA_CUDA_ARCHS 80;86;89;90;100;120): SASS per arch, PTX of the newest.
const EmbeddedCode kDefault{{80, 86, 89, 90, 100, 120}, 120, false};
const EmbeddedCode kHopper{{90}, 0, true};
// A build narrowed to GNA_CUDA_ARCHS=90.
const EmbeddedCode kNarrow{{90}, 90, false};

TEST(DeviceCode, LoadsNativeCodeOnEveryDefaultArch) {
  for (int cc : {80, 86, 89, 90, 100, 120}) {
    bool jit = true;
    EXPECT_EQ(loaded_arch(kDefault, cc, &jit), cc) << cc;
    EXPECT_FALSE(jit) << cc;
  }
}

TEST(DeviceCode, LoadsOlderMinorSassOrPtx) {
  bool jit = true;
  EXPECT_EQ(loaded_arch(kDefault, 87, &jit), 86);  // Orin: sm_86 SASS
  EXPECT_FALSE(jit);
  EXPECT_EQ(loaded_arch(kDefault, 103, &jit), 100);  // B300: sm_100 SASS
  EXPECT_FALSE(jit);
  EXPECT_EQ(loaded_arch(kDefault, 121, &jit), 120);
  EXPECT_FALSE(jit);
  EXPECT_EQ(loaded_arch(kDefault, 130, &jit), 120);  // a newer major version: the PTX
  EXPECT_TRUE(jit);
  // SASS never crosses a major version, PTX never runs on an older arch.
  EXPECT_EQ(loaded_arch(kDefault, 110, &jit), 0);
  EXPECT_EQ(loaded_arch(kDefault, 75, &jit), 0);
  EXPECT_EQ(loaded_arch(kNarrow, 86, &jit), 0);
  EXPECT_EQ(loaded_arch(kNarrow, 100, &jit), 90);
  EXPECT_TRUE(jit);
  // sm_90a loads on 9.0 alone.
  EXPECT_EQ(loaded_arch(kHopper, 90, &jit), 90);
  EXPECT_EQ(loaded_arch(kHopper, 100, &jit), 0);
}

TEST(DeviceCode, E4m3KernelsOnSm89AndNewerCode) {
  std::string why;
  for (int cc : {89, 90, 100, 120}) EXPECT_TRUE(e4m3_mma_runs_on(cc, kDefault, &why)) << cc << ": " << why;
  EXPECT_TRUE(e4m3_mma_runs_on(90, kNarrow, &why)) << why;
  EXPECT_FALSE(e4m3_mma_runs_on(86, kDefault, &why));
  EXPECT_EQ(why, "device compute capability 8.6 has no e4m3 tensor cores (needs 8.9 or newer)");
  // sm_89 loading sm_80 SASS (a build without 89) gets the e4m3 kernels' trap bodies: refused.
  const EmbeddedCode ampere_hopper{{80, 90}, 90, false};
  EXPECT_FALSE(e4m3_mma_runs_on(89, ampere_hopper, &why));
  EXPECT_EQ(why, "device compute capability 8.9 loads this library's sm_80 code, which has no e4m3 "
                 "kernels (SASS for sm_80, sm_90; PTX for compute_90, which JIT-compiles on 9.0 "
                 "and newer; GNA_CUDA_ARCHS needs 89 or newer)");
  EXPECT_FALSE(e4m3_mma_runs_on(100, kHopper, &why));  // no sm80-family code for it at all
}

TEST(DeviceCode, FamiliesByComputeCapability) {
  std::string why;
  for (int cc : {80, 86, 89, 90, 100, 120}) {
    EXPECT_TRUE(family_runs_on(KernelFamily::sm80, cc, kDefault, &why)) << cc << ": " << why;
    EXPECT_EQ(family_runs_on(KernelFamily::hopper, cc, kHopper, &why), cc == 90) << cc;
  }
  EXPECT_FALSE(family_runs_on(KernelFamily::hopper, 100, kHopper, &why));
  EXPECT_EQ(why, "device compute capability 10.0 not supported (needs 9.0: wgmma and TMA, sm_90a)");
  EXPECT_FALSE(family_runs_on(KernelFamily::sm80, 75, kDefault, &why));
  EXPECT_EQ(why, "device compute capability 7.5 not supported (needs 8.0 or newer)");
  EXPECT_FALSE(family_runs_on(KernelFamily::sm80, 86, kNarrow, &why));
  EXPECT_EQ(why, "device compute capability 8.6: this library has no code for it (SASS for sm_90; "
                 "PTX for compute_90, which JIT-compiles on 9.0 and newer; GNA_CUDA_ARCHS names "
                 "the archs to build)");
  EXPECT_FALSE(family_runs_on(KernelFamily::sm80, 110, kDefault, &why));
  EXPECT_NE(why.find("11.0: this library has no code for it"), std::string::npos) << why;
}

// Dispatch's order among backends as registered (priority order), hopper on 9.0 alone.
TEST(DeviceCode, BackendsByComputeCapability) {
  std::vector<Backend> backends(5);
  const char* names[] = {"halo", "hopper", "portable", "gpu_reference", "reference"};
  for (int i = 0; i < 5; ++i) {
    backends[i].name = names[i];
    backends[i].device = i < 4;
  }
  const std::vector<std::string> all = {"halo", "hopper", "portable", "gpu_reference"};
  const std::vector<std::string> sm80 = {"halo", "portable", "gpu_reference"};
  for (int cc : {80, 86, 89, 90, 100, 120})
    EXPECT_EQ(device_backends_for(cc, backends, kDefault, kHopper), cc == 90 ? all : sm80) << cc;
  std::vector<std::string> refusals;
  EXPECT_TRUE(device_backends_for(75, backends, kDefault, kHopper, &refusals).empty());
  ASSERT_EQ(refusals.size(), 4u);
  EXPECT_EQ(refusals[0], "halo: device compute capability 7.5 not supported (needs 8.0 or newer)");
  // A narrow build runs on its own arch, and by PTX on newer ones.
  EXPECT_EQ(device_backends_for(90, backends, kNarrow, kHopper), all);
  EXPECT_EQ(device_backends_for(120, backends, kNarrow, kHopper), sm80);
  EXPECT_TRUE(device_backends_for(89, backends, kNarrow, kHopper).empty());
}

// Every device backend this library registers has a kernel family, so the choice covers it.
TEST(DeviceCode, RegisteredBackendsHaveAFamily) {
  for (const Backend& b : registered_backends()) {
    KernelFamily family;
    if (b.device) {
      EXPECT_TRUE(backend_family(b.name, &family)) << b.name;
    }
  }
  KernelFamily family;
  EXPECT_TRUE(backend_family("cuda", &family));  // the unfused operators' device backend
  EXPECT_EQ(family, KernelFamily::sm80);
  EXPECT_FALSE(backend_family("reference", &family));
}

TEST(DeviceCode, SharedMemoryCap) {
  EXPECT_EQ(capped_shared_memory(232448, nullptr), 232448);
  EXPECT_EQ(capped_shared_memory(232448, ""), 232448);
  EXPECT_EQ(capped_shared_memory(232448, "101376"), 101376);
  EXPECT_EQ(capped_shared_memory(232448, "166912"), 166912);
  EXPECT_EQ(capped_shared_memory(101376, "166912"), 101376);  // never above the device's
  EXPECT_EQ(capped_shared_memory(0, "101376"), 101376);       // device not asked
  for (const char* bad : {"0", "-1", "99k", "abc", "1e5", "99999999999"}) {
    try {
      capped_shared_memory(232448, bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("GNA_MAX_SHARED_MEMORY_BYTES: must be a "
                                                       "positive number of bytes, got '") +
                                           bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace gna
