// Compiled into libkiln_runtime.so only (runtime/CMakeLists.txt): installs the CUDA runner for
// blobs when the library is loaded, so C programs need no extra call to run on "cuda".
#include "runtime/cuda/blob_cuda.h"

namespace {
[[maybe_unused]] const bool installed = (kiln::runtime::cuda::EnableCudaBlobs(), true);
}  // namespace
