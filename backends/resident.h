// What every device-memory backend's executor does around its compiled program (backends/vulkan.cc,
// backends/cuda.cc): one caching allocator per device, arguments uploaded once, outputs allocated
// from the allocator at the sizes the program binds. The backend keeps only what is its own:
// opening a device, finding the compiled graph, and the call that runs it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/engine.h"
#include "ir/tensor_data.h"
#include "runtime/caching_allocator.h"
#include "runtime/device.h"

namespace kiln::backends {

/// The process's allocators of one backend, one per device index, each created on first use over
/// the device `open(index)` returns. Kept for the process (as the backends keep their devices):
/// tensors may be released during static destruction.
class AllocatorRegistry {
 public:
  using DeviceOpener = std::function<absl::StatusOr<std::shared_ptr<runtime::Device>>(int index)>;
  explicit AllocatorRegistry(DeviceOpener open) : open_(std::move(open)) {}
  /// Over a backend's device lookup (codegen::vulkan::DeviceForIndex, ...).
  template <typename DeviceT>
  explicit AllocatorRegistry(absl::StatusOr<std::shared_ptr<DeviceT>> (*open)(int))
      : open_([open](int index) -> absl::StatusOr<std::shared_ptr<runtime::Device>> {
          absl::StatusOr<std::shared_ptr<DeviceT>> device = open(index);
          if (!device.ok()) return device.status();
          return std::shared_ptr<runtime::Device>(*std::move(device));
        }) {}

  absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> For(int index);

 private:
  DeviceOpener open_;
  std::mutex mutex_;
  std::map<int, std::shared_ptr<runtime::CachingAllocator>> allocators_;
};

/// The buffers of one run: the arguments' (host values uploaded, their buffers stored back into
/// `arguments`) and fresh outputs.
struct ResidentRun {
  std::vector<const runtime::DeviceBuffer*> inputs;
  std::vector<runtime::DeviceBuffer*> outputs;
  std::vector<std::shared_ptr<const runtime::DeviceBuffer>> results;  // owns `outputs`
};

/// Uploads every argument without a buffer, and allocates one buffer per output of
/// max(its type's bytes, executable.output_bytes(k)). InvalidArgument naming `backend` when the
/// argument count differs from `num_parameters`.
absl::StatusOr<ResidentRun> PrepareResidentRun(std::string_view backend,
                                               runtime::CachingAllocator& allocator,
                                               std::span<detail::ResidentValue> arguments,
                                               size_t num_parameters,
                                               std::span<const ir::TensorType> output_types,
                                               const runtime::DeviceExecutable& executable);

/// A device-memory backend's whole run of a compiled graph (`compiled`: its CompiledGraph, with
/// parameter_types, output_types, executable and device, or the error finding it): prepares the
/// run on device `index`'s allocator and runs the executable on the buffers.
template <typename Compiled>
absl::StatusOr<std::vector<std::shared_ptr<const runtime::DeviceBuffer>>> RunResident(
    std::string_view backend, AllocatorRegistry& allocators, int index,
    std::span<detail::ResidentValue> arguments,
    const absl::StatusOr<std::shared_ptr<const Compiled>>& compiled) {
  absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> allocator = allocators.For(index);
  if (!allocator.ok()) return allocator.status();
  if (!compiled.ok()) return compiled.status();
  const Compiled& program = **compiled;
  absl::StatusOr<ResidentRun> run =
      PrepareResidentRun(backend, **allocator, arguments, program.parameter_types.size(),
                         program.output_types, *program.executable);
  if (!run.ok()) return run.status();
  if (absl::Status s = program.device->Run(*program.executable, run->inputs, run->outputs, {});
      !s.ok()) {
    return s;
  }
  return std::move(run->results);
}

}  // namespace kiln::backends
