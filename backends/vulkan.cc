// The kiln::Vulkan backend's registration: linking this object (library kiln_backend_vulkan,
// linked whole) makes the frontend's engine run kiln::Vulkan graphs through the Vulkan graph
// compiler (codegen/vulkan/graph_compiler.h) on the device of the DeviceId's index, and marks the
// backend available (runtime::IsBackendAvailable, KILN_DEVICE=vulkan). A program that does not
// link it carries no shaderc, glslang or SPIRV-Tools.
//
// Tensors live in device memory: outputs are buffers from the device's caching allocator, and
// shaders read their arguments' buffers in place (runtime::Device::Run on DeviceBuffers). Only a
// host value the graph reads (a batch made with from_data) is copied up, once.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/vulkan/graph_compiler.h"
#include "frontend/engine.h"
#include "runtime/caching_allocator.h"
#include "runtime/device.h"

namespace kiln::backends {
namespace {

using BufferRef = std::shared_ptr<const runtime::DeviceBuffer>;

// One allocator per device, kept for the process (as DeviceForIndex keeps the devices): tensors
// may be released during static destruction.
absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> AllocatorFor(int index) {
  static std::mutex mutex;
  static auto* allocators = new std::map<int, std::shared_ptr<runtime::CachingAllocator>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = allocators->find(index); it != allocators->end()) return it->second;
  absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
      codegen::vulkan::DeviceForIndex(index);
  if (!device.ok()) return device.status();
  std::shared_ptr<runtime::CachingAllocator> allocator = runtime::CachingAllocator::Create(*device);
  (*allocators)[index] = allocator;
  return allocator;
}

absl::StatusOr<std::vector<BufferRef>> Run(const ir::Graph& graph,
                                           std::span<detail::ResidentValue> arguments,
                                           runtime::DeviceId device) {
  absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> allocator = AllocatorFor(device.index);
  if (!allocator.ok()) return allocator.status();
  absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
      codegen::vulkan::FindOrCompile(graph, device.index);
  if (!compiled.ok()) return compiled.status();
  const codegen::vulkan::CompiledGraph& program = **compiled;
  if (arguments.size() != program.parameter_types.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vulkan: the graph takes ",
                                                   program.parameter_types.size(),
                                                   " arguments, got ", arguments.size()));
  }
  std::vector<const runtime::DeviceBuffer*> inputs(arguments.size());
  for (size_t j = 0; j < arguments.size(); ++j) {
    detail::ResidentValue& value = arguments[j];
    if (value.buffer == nullptr) {
      const ir::TensorData& host = *value.host;
      absl::StatusOr<std::shared_ptr<runtime::DeviceBuffer>> buffer =
          (*allocator)->Allocate(host.size_bytes());
      if (!buffer.ok()) return buffer.status();
      const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(host.data()),
                                             static_cast<size_t>(host.size_bytes()));
      if (absl::Status s = (*allocator)->device().CopyToDevice(bytes, **buffer, 0); !s.ok()) {
        return s;
      }
      value.buffer = *std::move(buffer);
    }
    inputs[j] = value.buffer.get();
  }
  std::vector<BufferRef> results;
  std::vector<runtime::DeviceBuffer*> outputs;
  for (size_t k = 0; k < program.output_types.size(); ++k) {
    const ir::TensorType& type = program.output_types[k];
    const int64_t bytes = std::max(type.num_elements() * ir::DTypeSize(type.dtype),
                                   program.executable->output_bytes(static_cast<int>(k)));
    absl::StatusOr<std::shared_ptr<runtime::DeviceBuffer>> buffer = (*allocator)->Allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    outputs.push_back(buffer->get());
    results.push_back(*std::move(buffer));
  }
  if (absl::Status s = program.device->Run(*program.executable, inputs, outputs, {}); !s.ok()) {
    return s;
  }
  return results;
}

// Runs during static initialisation; the engine's registry is constructed on first use. A machine
// without a Vulkan device still registers: running a graph then fails with an error saying so.
[[maybe_unused]] const bool kRegistered = [] {
  detail::RegisterResidentExecutor(runtime::DeviceKind::kVulkan, Run, AllocatorFor);
  return true;
}();

}  // namespace
}  // namespace kiln::backends
