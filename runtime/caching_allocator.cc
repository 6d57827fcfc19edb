#include "runtime/caching_allocator.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kiln::runtime {

// Shared by the allocator and the deleters of the buffers it handed out, so a buffer may outlive
// the allocator object (it then returns to the driver).
struct CachingAllocator::State {
  std::shared_ptr<Device> device;
  Options options;
  std::mutex mutex;
  std::multimap<int64_t, std::unique_ptr<DeviceBuffer>> free;  // by size class
  AllocatorStats stats;
  bool closed = false;  // the allocator is gone: released buffers go straight back

  // Hands back cached buffers, largest first, until at most `keep` bytes stay; mutex is held.
  // Returns them, so that they are destroyed after the lock is dropped.
  std::vector<std::unique_ptr<DeviceBuffer>> TrimLocked(int64_t keep) {
    std::vector<std::unique_ptr<DeviceBuffer>> dropped;
    while (stats.bytes_cached > keep && !free.empty()) {
      auto largest = std::prev(free.end());
      stats.bytes_cached -= largest->first;
      ++stats.system_frees;
      dropped.push_back(std::move(largest->second));
      free.erase(largest);
    }
    return dropped;
  }
};

CachingAllocator::CachingAllocator(std::shared_ptr<Device> device, Options options)
    : device_(std::move(device)), state_(std::make_shared<State>()) {
  state_->device = device_;
  state_->options = options;
}

CachingAllocator::~CachingAllocator() {
  std::vector<std::unique_ptr<DeviceBuffer>> dropped;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->closed = true;
  dropped = state_->TrimLocked(0);
}

std::shared_ptr<CachingAllocator> CachingAllocator::Create(std::shared_ptr<Device> device,
                                                           Options options) {
  return std::shared_ptr<CachingAllocator>(new CachingAllocator(std::move(device), options));
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> CachingAllocator::Allocate(int64_t bytes) {
  const int64_t size = BufferPool::SizeClassBytes(std::max<int64_t>(bytes, 1));
  std::unique_ptr<DeviceBuffer> buffer;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (auto it = state_->free.find(size); it != state_->free.end()) {
      buffer = std::move(it->second);
      state_->free.erase(it);
      state_->stats.bytes_cached -= size;
      ++state_->stats.reused;
    }
  }
  if (buffer == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> made = device_->Allocate(size);
    if (!made.ok() && made.status().code() == absl::StatusCode::kResourceExhausted) {
      EmptyCache();
      made = device_->Allocate(size);
    }
    if (!made.ok()) return made.status();
    buffer = *std::move(made);
    std::lock_guard<std::mutex> lock(state_->mutex);
    ++state_->stats.system_allocations;
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    AllocatorStats& stats = state_->stats;
    ++stats.allocations;
    ++stats.buffers_in_use;
    stats.bytes_in_use += size;
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
  }
  return std::shared_ptr<DeviceBuffer>(
      buffer.release(), [state = state_](DeviceBuffer* released) { Release(state, released); });
}

void CachingAllocator::Release(const std::shared_ptr<State>& state, DeviceBuffer* buffer) {
  std::unique_ptr<DeviceBuffer> owned(buffer);
  std::vector<std::unique_ptr<DeviceBuffer>> dropped;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    AllocatorStats& stats = state->stats;
    --stats.buffers_in_use;
    stats.bytes_in_use -= owned->size();
    if (state->closed) {
      ++stats.system_frees;
    } else {
      stats.bytes_cached += owned->size();
      const int64_t size = owned->size();
      state->free.emplace(size, std::move(owned));
      dropped = state->TrimLocked(state->options.max_cached_bytes);
    }
  }
  // `owned` and `dropped` go back to the driver here, outside the lock.
}

void CachingAllocator::EmptyCache() {
  std::vector<std::unique_ptr<DeviceBuffer>> dropped;
  std::lock_guard<std::mutex> lock(state_->mutex);
  dropped = state_->TrimLocked(0);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace kiln::runtime
