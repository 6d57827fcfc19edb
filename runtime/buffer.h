// Host memory for the CPU backend: 64-byte aligned blocks (a cache line, and the widest vector
// load kernels use) handed out by a pool that keeps freed blocks for reuse. Every run of a
// compiled graph allocates its intermediate arena here, so steady-state execution makes no
// calls to the system allocator and touches no fresh pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::runtime {

/// Alignment of every Buffer's data, in bytes (the kernel ABI relies on it).
inline constexpr int64_t kBufferAlignment = 64;

class BufferPool;

/// An owned, 64-byte aligned block of host memory. Move-only; the destructor gives the block back
/// to the pool it came from (or to the system for AllocateAlignedBuffer's blocks). Contents are
/// uninitialised. A default-constructed or zero-byte Buffer has data() == nullptr.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  std::byte* data() const { return data_; }
  /// The bytes asked for.
  int64_t size() const { return size_; }
  /// The bytes actually reserved (the pool's size class, a multiple of kBufferAlignment).
  int64_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }

  /// Releases the block now; the Buffer becomes empty.
  void Reset();

 private:
  friend class BufferPool;
  friend absl::StatusOr<Buffer> AllocateAlignedBuffer(int64_t bytes);

  Buffer(BufferPool* pool, std::byte* data, int64_t size, int64_t capacity)
      : pool_(pool), data_(data), size_(size), capacity_(capacity) {}

  BufferPool* pool_ = nullptr;  // null: the block goes straight back to the system
  std::byte* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
};

/// A block straight from the system, not pooled: for long-lived data such as an executable's
/// constants. ResourceExhausted when the system has no memory.
absl::StatusOr<Buffer> AllocateAlignedBuffer(int64_t bytes);

/// Counters of a BufferPool (bytes are size-class bytes, i.e. capacities).
struct BufferPoolStats {
  int64_t allocations = 0;         // Allocate calls that returned a non-empty buffer
  int64_t reused = 0;              // ... of which were served from a cached block
  int64_t system_allocations = 0;  // blocks obtained from the system
  int64_t system_frees = 0;        // blocks returned to the system (trim, cache limit, pool end)
  int64_t buffers_in_use = 0;
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_cached = 0;  // freed blocks kept for reuse
};

/// A thread-safe cache of aligned blocks in size classes: a request is rounded up to its class
/// (multiples of 64 up to 256 bytes, then four classes per power of two, so at most 25% is
/// wasted) and served from a freed block of that class when one is cached.
class BufferPool {
 public:
  struct Options {
    /// Freed blocks beyond this many cached bytes go back to the system.
    int64_t max_cached_bytes = int64_t{1} << 30;
  };

  BufferPool() : BufferPool(Options{}) {}
  explicit BufferPool(Options options);
  /// Frees the cached blocks. Every Buffer of this pool must be gone: one still alive would
  /// later write into freed memory, so that aborts with a message.
  ~BufferPool();

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// A buffer of `bytes` bytes (an empty Buffer for bytes <= 0). ResourceExhausted when the
  /// system has no memory, or for sizes beyond 2^62 bytes.
  absl::StatusOr<Buffer> Allocate(int64_t bytes);

  /// Returns cached blocks to the system until at most `keep_bytes` stay cached (largest first).
  void Trim(int64_t keep_bytes = 0);

  BufferPoolStats stats() const;

  /// The capacity a request of `bytes` bytes (> 0) gets.
  static int64_t SizeClassBytes(int64_t bytes);

 private:
  friend class Buffer;
  void Release(std::byte* data, int64_t capacity);
  // Counts a handed-out block; mutex_ is held.
  void CountInUse(int64_t capacity);

  const Options options_;
  mutable std::mutex mutex_;
  // free_blocks_[class index]: cached blocks of that class.
  std::vector<std::vector<std::byte*>> free_blocks_;
  BufferPoolStats stats_;
};

/// The process-wide pool, never destroyed (buffers may be released during static destruction).
BufferPool& DefaultBufferPool();

}  // namespace kiln::runtime
