#include "backends/resident.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::backends {

absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> AllocatorRegistry::For(int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = allocators_.find(index); it != allocators_.end()) return it->second;
  absl::StatusOr<std::shared_ptr<runtime::Device>> device = open_(index);
  if (!device.ok()) return device.status();
  std::shared_ptr<runtime::CachingAllocator> allocator =
      runtime::CachingAllocator::Create(*std::move(device));
  allocators_[index] = allocator;
  return allocator;
}

absl::StatusOr<ResidentRun> PrepareResidentRun(std::string_view backend,
                                               runtime::CachingAllocator& allocator,
                                               std::span<detail::ResidentValue> arguments,
                                               size_t num_parameters,
                                               std::span<const ir::TensorType> output_types,
                                               const runtime::DeviceExecutable& executable) {
  if (arguments.size() != num_parameters) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(backend), ": the graph takes ",
                                                   num_parameters, " arguments, got ",
                                                   arguments.size()));
  }
  ResidentRun run;
  run.inputs.resize(arguments.size());
  for (size_t j = 0; j < arguments.size(); ++j) {
    detail::ResidentValue& value = arguments[j];
    if (value.buffer == nullptr) {
      const ir::TensorData& host = *value.host;
      absl::StatusOr<std::shared_ptr<runtime::DeviceBuffer>> buffer =
          allocator.Allocate(host.size_bytes());
      if (!buffer.ok()) return buffer.status();
      const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(host.data()),
                                             static_cast<size_t>(host.size_bytes()));
      if (absl::Status s = allocator.device().CopyToDevice(bytes, **buffer, 0); !s.ok()) return s;
      value.buffer = *std::move(buffer);
    }
    run.inputs[j] = value.buffer.get();
  }
  for (size_t k = 0; k < output_types.size(); ++k) {
    const ir::TensorType& type = output_types[k];
    const int64_t bytes = std::max(type.num_elements() * ir::DTypeSize(type.dtype),
                                   executable.output_bytes(static_cast<int>(k)));
    absl::StatusOr<std::shared_ptr<runtime::DeviceBuffer>> buffer = allocator.Allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    run.outputs.push_back(buffer->get());
    run.results.push_back(*std::move(buffer));
  }
  return run;
}

}  // namespace kiln::backends
