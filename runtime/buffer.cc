#include "runtime/buffer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/host_memory.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kMaxBufferBytes = int64_t{1} << 62;
constexpr int kSmallClasses = 4;  // 64, 128, 192, 256 bytes
constexpr int kClassesPerDoubling = 4;
constexpr int kFirstDoublingShift = 8;  // the doublings start above 256 bytes

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

int SizeClassIndex(int64_t bytes) {
  const int64_t size = RoundUp(bytes, kBufferAlignment);
  if (size <= kSmallClasses * kBufferAlignment) {
    return static_cast<int>(size / kBufferAlignment) - 1;
  }
  // size - 1 lies in [2^shift, 2^(shift+1)); that doubling is cut into four classes of `step`.
  const int shift = std::bit_width(static_cast<uint64_t>(size - 1)) - 1;
  const int64_t step = int64_t{1} << (shift - 2);
  const int64_t steps = RoundUp(size, step) / step;  // 5, 6, 7 or 8
  return kSmallClasses + (shift - kFirstDoublingShift) * kClassesPerDoubling +
         static_cast<int>(steps - 5);
}

int64_t ClassBytes(int index) {
  if (index < kSmallClasses) return (index + 1) * kBufferAlignment;
  const int k = index - kSmallClasses;
  const int shift = kFirstDoublingShift + k / kClassesPerDoubling;
  return (5 + k % kClassesPerDoubling) * (int64_t{1} << (shift - 2));
}

std::byte* SystemAllocate(int64_t bytes) {
  return base::AllocateHostBlock(static_cast<size_t>(bytes), kBufferAlignment);
}

void SystemFree(std::byte* data, int64_t bytes) {
  base::FreeHostBlock(data, static_cast<size_t>(bytes), kBufferAlignment);
}

absl::Status OutOfMemory(int64_t bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot allocate a host buffer of ", bytes, " bytes"));
}

}  // namespace

Buffer::Buffer(Buffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void Buffer::Reset() {
  if (data_ != nullptr) {
    if (pool_ != nullptr) {
      pool_->Release(data_, capacity_);
    } else {
      SystemFree(data_, capacity_);
    }
  }
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

absl::StatusOr<Buffer> AllocateAlignedBuffer(int64_t bytes) {
  if (bytes <= 0) return Buffer();
  if (bytes > kMaxBufferBytes) return OutOfMemory(bytes);
  const int64_t capacity = RoundUp(bytes, kBufferAlignment);
  std::byte* data = SystemAllocate(capacity);
  if (data == nullptr) return OutOfMemory(bytes);
  return Buffer(nullptr, data, bytes, capacity);
}

BufferPool::BufferPool(Options options)
    : options_(options), free_blocks_(SizeClassIndex(kMaxBufferBytes) + 1) {}

BufferPool::~BufferPool() {
  if (stats_.buffers_in_use != 0) {
    std::fprintf(stderr,
                 "kiln: a BufferPool was destroyed while %lld of its buffers (%lld bytes) were "
                 "still alive\n",
                 static_cast<long long>(stats_.buffers_in_use),
                 static_cast<long long>(stats_.bytes_in_use));
    std::abort();
  }
  Trim(0);
}

int64_t BufferPool::SizeClassBytes(int64_t bytes) { return ClassBytes(SizeClassIndex(bytes)); }

absl::StatusOr<Buffer> BufferPool::Allocate(int64_t bytes) {
  if (bytes <= 0) return Buffer();
  if (bytes > kMaxBufferBytes) return OutOfMemory(bytes);
  const int index = SizeClassIndex(bytes);
  const int64_t capacity = ClassBytes(index);
  std::byte* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::byte*>& cached = free_blocks_[index];
    if (!cached.empty()) {
      data = cached.back();
      cached.pop_back();
      stats_.bytes_cached -= capacity;
      ++stats_.reused;
      CountInUse(capacity);
    }
  }
  if (data != nullptr) return Buffer(this, data, bytes, capacity);

  // The system call happens outside the lock: other threads keep being served from the cache.
  data = SystemAllocate(capacity);
  if (data == nullptr) return OutOfMemory(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.system_allocations;
  CountInUse(capacity);
  return Buffer(this, data, bytes, capacity);
}

void BufferPool::CountInUse(int64_t capacity) {
  ++stats_.allocations;
  ++stats_.buffers_in_use;
  stats_.bytes_in_use += capacity;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
}

void BufferPool::Release(std::byte* data, int64_t capacity) {
  bool cache = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --stats_.buffers_in_use;
    stats_.bytes_in_use -= capacity;
    cache = stats_.bytes_cached + capacity <= options_.max_cached_bytes;
    if (cache) {
      free_blocks_[SizeClassIndex(capacity)].push_back(data);
      stats_.bytes_cached += capacity;
    } else {
      ++stats_.system_frees;
    }
  }
  if (!cache) SystemFree(data, capacity);
}

void BufferPool::Trim(int64_t keep_bytes) {
  std::vector<std::pair<std::byte*, int64_t>> to_free;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int index = static_cast<int>(free_blocks_.size()) - 1;
         index >= 0 && stats_.bytes_cached > keep_bytes; --index) {
      std::vector<std::byte*>& cached = free_blocks_[index];
      while (!cached.empty() && stats_.bytes_cached > keep_bytes) {
        to_free.emplace_back(cached.back(), ClassBytes(index));
        cached.pop_back();
        stats_.bytes_cached -= ClassBytes(index);
        ++stats_.system_frees;
      }
    }
  }
  for (const auto& [data, bytes] : to_free) SystemFree(data, bytes);
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

BufferPool& DefaultBufferPool() {
  static BufferPool* const pool = new BufferPool();
  return *pool;
}

}  // namespace kiln::runtime
