#include "runtime/device.h"

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {

constexpr DeviceKind kAllKinds[] = {DeviceKind::kReference, DeviceKind::kCpu, DeviceKind::kVulkan,
                                    DeviceKind::kCuda};

// One flag per DeviceKind, set by MarkBackendAvailable: constant-initialised atomics (C++20
// value-initialises std::atomic), so registrations during static initialisation of other
// translation units find them ready.
std::atomic<bool> g_available[std::size(kAllKinds)];

std::string AvailableBackends() {
  std::string names;
  for (DeviceKind kind : kAllKinds) {
    if (!IsBackendAvailable(kind)) continue;
    absl::StrAppend(&names, names.empty() ? "" : ", ", DeviceKindName(kind));
  }
  return names;
}

}  // namespace

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kReference:
      return "reference";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kVulkan:
      return "vulkan";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "?";
}

std::string DeviceId::ToString() const { return absl::StrCat(DeviceKindName(kind), ":", index); }

absl::StatusOr<DeviceId> ParseDeviceId(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  DeviceId id;
  bool found = false;
  for (DeviceKind kind : kAllKinds) {
    if (name == DeviceKindName(kind)) {
      id.kind = kind;
      found = true;
    }
  }
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device \"", std::string(text),
                     "\"; expected one of reference, cpu, vulkan, cuda (optionally with :index)"));
  }
  if (colon != std::string_view::npos) {
    const std::string index_text(text.substr(colon + 1));
    if (!absl::SimpleAtoi(index_text, &id.index) || id.index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device \"", std::string(text), "\": index must be a number >= 0"));
    }
  }
  return id;
}

bool IsBackendAvailable(DeviceKind kind) {
  if (kind == DeviceKind::kReference) return true;
  const size_t k = static_cast<size_t>(kind);
  return k < std::size(g_available) && g_available[k].load(std::memory_order_acquire);
}

void MarkBackendAvailable(DeviceKind kind) {
  const size_t k = static_cast<size_t>(kind);
  if (k < std::size(g_available)) g_available[k].store(true, std::memory_order_release);
}

absl::StatusOr<DeviceId> DeviceFromEnvironment(DeviceId fallback) {
  const char* value = std::getenv("KILN_DEVICE");
  if (value == nullptr || *value == '\0') return fallback;
  absl::StatusOr<DeviceId> id = ParseDeviceId(value);
  if (!id.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("KILN_DEVICE: ", id.status().message()));
  }
  if (!IsBackendAvailable(id->kind)) {
    return absl::UnavailableError(
        absl::StrCat("KILN_DEVICE=", value, ": the ", DeviceKindName(id->kind),
                     " backend is not in this build; available: ", AvailableBackends()));
  }
  return id;
}

TransferStats Device::transfer_stats() const {
  TransferStats stats;
  stats.host_to_device_bytes = host_to_device_bytes_.load(std::memory_order_relaxed);
  stats.device_to_host_bytes = device_to_host_bytes_.load(std::memory_order_relaxed);
  stats.host_to_device_copies = host_to_device_copies_.load(std::memory_order_relaxed);
  stats.device_to_host_copies = device_to_host_copies_.load(std::memory_order_relaxed);
  return stats;
}

void Device::CountHostToDevice(int64_t bytes) {
  host_to_device_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  host_to_device_copies_.fetch_add(1, std::memory_order_relaxed);
}

void Device::CountDeviceToHost(int64_t bytes) {
  device_to_host_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  device_to_host_copies_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::runtime
