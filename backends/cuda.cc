// The kiln::Cuda backend's registration: linking this object (library kiln_backend_cuda,
// linked whole) makes the frontend's engine run kiln::Cuda graphs through the CUDA graph
// compiler (codegen/cuda/graph_compiler.h) on the device of the DeviceId's index, and marks the
// backend available (runtime::IsBackendAvailable, KILN_DEVICE=cuda). A program that does not
// link it carries no NVRTC code (and no program links anything of CUDA: NVRTC and the driver
// are dlopen()ed when first used).
//
// Tensors live in device memory: outputs are buffers from the device's caching allocator, and
// kernels read their arguments' buffers in place (runtime::Device::Run on DeviceBuffers). Only a
// host value the graph reads (a batch made with from_data) is copied up, once (resident.h).
#include <memory>
#include <span>
#include <vector>

#include "backends/resident.h"
#include "codegen/cuda/graph_compiler.h"
#include "frontend/engine.h"
#include "runtime/device.h"

namespace kiln::backends {
namespace {

AllocatorRegistry& Allocators() {
  static auto* registry = new AllocatorRegistry(&codegen::cuda::DeviceForIndex);
  return *registry;
}

absl::StatusOr<std::vector<std::shared_ptr<const runtime::DeviceBuffer>>> Run(
    const ir::Graph& graph, std::span<detail::ResidentValue> arguments, runtime::DeviceId device) {
  return RunResident("cuda", Allocators(), device.index, arguments,
                     codegen::cuda::FindOrCompile(graph, device.index));
}

// Runs during static initialisation; the engine's registry is constructed on first use. A machine
// without a CUDA driver or device still registers: running a graph then fails with an error
// saying so.
[[maybe_unused]] const bool kRegistered = [] {
  detail::RegisterResidentExecutor(runtime::DeviceKind::kCuda, Run,
                                   [](int index) { return Allocators().For(index); });
  detail::RegisterCompileCounter(runtime::DeviceKind::kCuda,
                                 [] { return codegen::cuda::GetGraphCacheStats().compiles; });
  return true;
}();

}  // namespace
}  // namespace kiln::backends
