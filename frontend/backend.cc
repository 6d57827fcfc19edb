#include "frontend/backend.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "frontend/engine.h"
#include "frontend/error.h"

namespace kiln {

Device Device::Parse(std::string_view name, std::source_location loc) {
  absl::StatusOr<runtime::DeviceId> id = runtime::ParseDeviceId(name);
  if (!id.ok()) detail::ThrowStatus(id.status(), loc);
  return Device(*id);
}

runtime::TransferStats Device::transfer_stats(std::source_location loc) const {
  std::shared_ptr<runtime::CachingAllocator> allocator = detail::AllocatorOf(id_, loc);
  return allocator != nullptr ? allocator->device().transfer_stats() : runtime::TransferStats{};
}

bool Device::is_available(std::string* reason) const {
  if (!runtime::IsBackendAvailable(kind())) {
    if (reason != nullptr) {
      *reason =
          std::string("the ") + runtime::DeviceKindName(kind()) + " backend is not in this build";
    }
    return false;
  }
  try {
    detail::AllocatorOf(id_, std::source_location::current());  // opens the device
  } catch (const Error& e) {
    if (reason != nullptr) *reason = e.what();
    return false;
  }
  return true;
}

runtime::AllocatorStats Device::memory_stats(std::source_location loc) const {
  std::shared_ptr<runtime::CachingAllocator> allocator = detail::AllocatorOf(id_, loc);
  return allocator != nullptr ? allocator->stats() : runtime::AllocatorStats{};
}

void Device::empty_cache(std::source_location loc) const {
  if (std::shared_ptr<runtime::CachingAllocator> allocator = detail::AllocatorOf(id_, loc)) {
    allocator->EmptyCache();
  }
}

Any::Device::Device(std::source_location loc) : ::kiln::Device(runtime::DeviceId{}) {
  absl::StatusOr<runtime::DeviceId> id = runtime::DeviceFromEnvironment();
  if (!id.ok()) detail::ThrowStatus(id.status(), loc);
  static_cast<::kiln::Device&>(*this) = ::kiln::Device(*id);
}

namespace detail {

void CheckDevice(const BackendTraits& traits, const Device& device, const char* op,
                 const std::source_location& loc) {
  if (!traits.any_kind && device.kind() != traits.kind) {
    ThrowOpError(op,
                 absl::StrCat("device ", device.ToString(), " is not a ", traits.name,
                              " device (expected ", runtime::DeviceKindName(traits.kind), ":N)"),
                 {}, loc);
  }
  if (!runtime::IsBackendAvailable(device.kind())) {
    ThrowOpError(
        op,
        absl::StrCat("device ", device.ToString(), ": the ", runtime::DeviceKindName(device.kind()),
                     " backend is not in this build (link kiln_backend_",
                     runtime::DeviceKindName(device.kind()), ", or kiln::kiln for every backend)"),
        {}, loc);
  }
}

}  // namespace detail
}  // namespace kiln
