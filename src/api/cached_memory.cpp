// gna::release_cached_memory and its C entry point: the GPU backends' scratch pool.
#include "gna/gna.hpp"

#if GNA_HAVE_CUDA
#include "kernels/common/scratch.hpp"
#endif

namespace gna {

void release_cached_memory() {
#if GNA_HAVE_CUDA
  cuda::scratch_release();
#endif
}

}  // namespace gna
