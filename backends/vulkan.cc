// The kiln::Vulkan backend's registration: linking this object (library kiln_backend_vulkan,
// linked whole) makes the frontend's engine run kiln::Vulkan graphs through the Vulkan graph
// compiler (codegen/vulkan/graph_compiler.h) on the device of the DeviceId's index, and marks the
// backend available (runtime::IsBackendAvailable, KILN_DEVICE=vulkan). A program that does not
// link it carries no shaderc, glslang or SPIRV-Tools.
#include <memory>
#include <span>
#include <vector>

#include "codegen/vulkan/graph_compiler.h"
#include "frontend/engine.h"
#include "runtime/device.h"

namespace kiln::backends {
namespace {

// Runs during static initialisation; the engine's registry is constructed on first use. A machine
// without a Vulkan device still registers: running a graph then fails with an error saying so.
[[maybe_unused]] const bool kRegistered = [] {
  detail::RegisterExecutor(
      runtime::DeviceKind::kVulkan,
      [](const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
         runtime::DeviceId device) {
        return codegen::vulkan::CompileAndRun(graph, arguments, device.index);
      });
  return true;
}();

}  // namespace
}  // namespace kiln::backends
