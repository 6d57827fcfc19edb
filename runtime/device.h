// Device identity (which backend runs a computation and which of its devices) and the small
// driver interface every backend implements, modelled on IREE's HAL: a Device allocates buffers
// in its memory, copies bytes in and out, runs DeviceExecutables (its own loaded programs) on
// its buffers, and synchronises. The drivers: runtime/cpu_device.h (CpuDevice) and
// runtime/vulkan/vulkan_device.h (VulkanDevice); tests/runtime/device_conformance.inc checks
// both against this contract. The reference interpreter needs no driver.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime {

/// The backends kiln knows. Order is part of the blob format: append, never reorder.
enum class DeviceKind {
  kReference,  // ir's reference interpreter: plain loops, f64 accumulation; the test oracle
  kCpu,
  kVulkan,
  kCuda,
};

/// "reference", "cpu", "vulkan", "cuda".
const char* DeviceKindName(DeviceKind kind);

/// A backend and the index of one of its devices.
struct DeviceId {
  DeviceKind kind = DeviceKind::kReference;
  int index = 0;

  bool operator==(const DeviceId&) const = default;
  /// "cpu:0"; the form ParseDeviceId reads.
  std::string ToString() const;
};

/// Parses "reference", "cpu", "cuda:1", ... (index defaults to 0). Errors list the valid names.
absl::StatusOr<DeviceId> ParseDeviceId(std::string_view text);

/// True when this program can run computations on `kind`: kReference always; another kind once
/// its backend registered itself (MarkBackendAvailable), which a backend library (kiln_backend_cpu,
/// kiln_backend_vulkan) does when it is linked into the program.
bool IsBackendAvailable(DeviceKind kind);

/// Records that the backend of `kind` is linked into this program (called by the frontend's
/// executor registration, during static initialisation). Thread-safe.
void MarkBackendAvailable(DeviceKind kind);

/// The device named by the KILN_DEVICE environment variable, or `fallback` when it is unset.
/// A set but unknown or unavailable name is an error that says which backends this build has.
absl::StatusOr<DeviceId> DeviceFromEnvironment(DeviceId fallback = {});

class Device;

/// A program loaded for one driver (IREE: an executable): the CPU's runtime::Executable (native
/// kernels and a launch plan), Vulkan's vulkan::VulkanExecutable (pipelines and dispatches). How
/// one is made is the driver's (its spec types); what runs it is Device::Run. Immutable and safe
/// to run from several threads at once.
class DeviceExecutable {
 public:
  virtual ~DeviceExecutable() = default;

  /// The driver that runs it (Device::Run of another driver refuses it).
  virtual DeviceKind kind() const = 0;
  virtual const std::string& name() const = 0;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  virtual int num_scalars() const = 0;
  /// Bytes input k / output k must hold (the largest slot bound to it; 0 when none is).
  virtual int64_t input_bytes(int k) const = 0;
  virtual int64_t output_bytes(int k) const = 0;

 protected:
  DeviceExecutable() = default;
  DeviceExecutable(const DeviceExecutable&) = default;
  DeviceExecutable& operator=(const DeviceExecutable&) = default;
};

/// A block of one device's memory. Destroying it frees the memory; it must not outlive its
/// Device.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// The device that owns the memory (and copies it: Device::CopyFromDevice).
  Device& device() const { return *device_; }
  int64_t size() const { return size_; }
  /// The memory as host-addressable bytes (64-byte aligned), or nullptr when the device's memory
  /// is not mapped into the host; Device::CopyToDevice / CopyFromDevice work for every buffer.
  virtual std::byte* host_data() const = 0;

 protected:
  DeviceBuffer(Device& device, int64_t size) : device_(&device), size_(size) {}

 private:
  Device* device_;
  int64_t size_;
};

/// Bytes a driver moved between host memory and its device's memory: CopyToDevice /
/// CopyFromDevice, and a host-pointer run's inputs and outputs (VulkanDevice::Run with host
/// pointers). Tests assert with it that device-resident tensors stay on the device; the frontend
/// prints it at exit under KILN_TIME_PASSES.
struct TransferStats {
  int64_t host_to_device_bytes = 0;
  int64_t device_to_host_bytes = 0;
  int64_t host_to_device_copies = 0;
  int64_t device_to_host_copies = 0;
};

/// One device of a backend. Calls may come from several threads at once. Work may be queued:
/// results are visible to the host once Synchronize (or a CopyFromDevice, which waits for the
/// work before it) returns.
class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceId id() const = 0;

  /// `bytes` bytes of this device's memory (uninitialised).
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) = 0;

  /// Copies `source` into `destination` at byte `offset`. InvalidArgument when the range does
  /// not fit or the buffer belongs to another device.
  virtual absl::Status CopyToDevice(std::span<const std::byte> source, DeviceBuffer& destination,
                                    int64_t offset) = 0;
  /// Copies bytes [offset, offset + destination.size()) of `source` into `destination`.
  virtual absl::Status CopyFromDevice(const DeviceBuffer& source, int64_t offset,
                                      std::span<std::byte> destination) = 0;

  /// Runs `executable` (one of this driver's kind) on buffers of this device: inputs[k] /
  /// outputs[k] hold at least executable.input_bytes(k) / output_bytes(k) bytes; scalars[k]
  /// points at a host value that is read before Run returns. InvalidArgument for an executable
  /// of another driver or device, wrong counts, a null, small or foreign buffer; a kernel's error
  /// as the driver reports it (OutOfRange for an index out of range).
  virtual absl::Status Run(const DeviceExecutable& executable,
                           std::span<const DeviceBuffer* const> inputs,
                           std::span<DeviceBuffer* const> outputs,
                           std::span<const void* const> scalars) = 0;

  /// Waits until all work queued on this device has finished.
  virtual absl::Status Synchronize() = 0;

  /// What this device's copies have moved so far (see TransferStats).
  TransferStats transfer_stats() const;

 protected:
  Device() = default;
  /// Drivers count each copy between host memory and the device's memory here.
  void CountHostToDevice(int64_t bytes);
  void CountDeviceToHost(int64_t bytes);

 private:
  std::atomic<int64_t> host_to_device_bytes_{0}, device_to_host_bytes_{0};
  std::atomic<int64_t> host_to_device_copies_{0}, device_to_host_copies_{0};
};

}  // namespace kiln::runtime
