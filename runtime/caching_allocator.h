// A caching allocator for one device's memory, as PyTorch's CUDA caching allocator: a buffer that
// its last owner drops goes back to a cache instead of to the driver, and a later request of the
// same size class takes it from there. Steady-state work (a training loop) then makes no driver
// allocations at all, and device memory stays bounded by the peak of one step. The size classes
// are BufferPool's (four per power of two), so at most 25% of a buffer is rounding.
//
// Works on any runtime::Device (it only calls Allocate): the Vulkan backend keeps one per device
// for its tensors (backends/vulkan.cc); a CUDA driver can use it as it is.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "runtime/buffer.h"
#include "runtime/device.h"

namespace kiln::runtime {

/// Counters of a CachingAllocator: BufferPool's, where "system" is the device's driver
/// (system_allocations: Device::Allocate calls; system_frees: buffers given back to it) and bytes
/// are size-class bytes.
using AllocatorStats = BufferPoolStats;

/// Thread-safe. Buffers it hands out keep it (and their device) alive.
class CachingAllocator {
 public:
  struct Options {
    /// Freed buffers beyond this many cached bytes go back to the driver (largest first).
    int64_t max_cached_bytes = int64_t{1} << 32;
  };

  static std::shared_ptr<CachingAllocator> Create(std::shared_ptr<Device> device) {
    return Create(std::move(device), Options{});
  }
  static std::shared_ptr<CachingAllocator> Create(std::shared_ptr<Device> device, Options options);

  /// Cached buffers go back to the driver now, buffers still in use when they are dropped.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  Device& device() const { return *device_; }

  /// A buffer of at least `bytes` bytes (its size() is the size class), from the cache when one
  /// of that class is there, else from Device::Allocate. When the driver is out of memory, the
  /// cache is emptied and the allocation tried once more.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> Allocate(int64_t bytes);

  /// Gives every cached buffer back to the driver (torch.cuda.empty_cache()).
  void EmptyCache();

  AllocatorStats stats() const;

 private:
  struct State;
  CachingAllocator(std::shared_ptr<Device> device, Options options);
  // Takes back a buffer whose last owner is gone.
  static void Release(const std::shared_ptr<State>& state, DeviceBuffer* buffer);

  std::shared_ptr<Device> device_;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::runtime
