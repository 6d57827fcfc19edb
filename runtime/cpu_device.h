// CpuDevice: the CPU backend's driver. Its memory is host memory from a BufferPool, its queue
// is the calling thread (Run returns when the work is done) and its kernels are the native
// functions of an Executable, split over a ThreadPool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/buffer.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime {

class CpuDevice final : public Device {
 public:
  struct Options {
    int index = 0;  // the N of "cpu:N"
    /// The pool kernels run on. Null: a pool of its own with `num_threads` threads when
    /// num_threads > 0, else DefaultThreadPool().
    ThreadPool* threads = nullptr;
    int num_threads = 0;
    /// Where buffers and run arenas come from. Null: DefaultBufferPool().
    BufferPool* buffers = nullptr;
  };

  /// cpu:0 on the process-wide thread and buffer pools.
  CpuDevice() : CpuDevice(Options{}) {}
  explicit CpuDevice(Options options);
  ~CpuDevice() override;

  /// The process-wide cpu:0 (never destroyed).
  static CpuDevice& Default();

  ThreadPool& threads() const { return *threads_; }
  BufferPool& buffers() const { return *buffers_; }

  DeviceId id() const override { return DeviceId{DeviceKind::kCpu, index_}; }
  /// A buffer whose host_data() is its memory.
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) override;
  absl::Status CopyToDevice(std::span<const std::byte> source, DeviceBuffer& destination,
                            int64_t offset) override;
  absl::Status CopyFromDevice(const DeviceBuffer& source, int64_t offset,
                              std::span<std::byte> destination) override;
  /// `executable` must be a runtime::Executable (DeviceKind::kCpu).
  absl::Status Run(const DeviceExecutable& executable, std::span<const DeviceBuffer* const> inputs,
                   std::span<DeviceBuffer* const> outputs,
                   std::span<const void* const> scalars) override;
  /// Nothing is ever queued: Run returns when its work is done.
  absl::Status Synchronize() override { return absl::OkStatus(); }

  /// Runs `executable` directly on host memory (see Executable::Run), on this device's pools.
  absl::Status RunHost(const Executable& executable, std::span<const void* const> inputs,
                       std::span<void* const> outputs,
                       std::span<const void* const> scalars = {}) const {
    return executable.Run(inputs, outputs, *threads_, scalars, *buffers_);
  }

 private:
  // Checks that `buffer` is one of this device's and that [offset, offset + bytes) fits in it.
  absl::Status CheckRange(const DeviceBuffer& buffer, int64_t offset, int64_t bytes,
                          const char* what) const;

  int index_;
  std::unique_ptr<ThreadPool> owned_threads_;
  ThreadPool* threads_;
  BufferPool* buffers_;
};

}  // namespace kiln::runtime
