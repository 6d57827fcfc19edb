// The CUDA driver: runs PTX kernels with a launch plan, the CUDA twin of
// runtime/vulkan/vulkan_device.h. No compiler here (codegen/cuda turns kernel IR into CUDA C and
// NVRTC turns that into PTX; the driver JIT-compiles PTX for the GPU at Load), and no CUDA
// header: the driver library (libcuda.so.1) is opened at run time with dlopen, so a program
// linking this library still starts, and reports a clear error, on a machine without a GPU.
//
// The contract with codegen/cuda:
//   - Every kernel is an `extern "C" __global__` function of one of the spec's PTX modules whose
//     parameters are num_buffers device pointers (8 bytes each), in order.
//   - A launch passes the device address of slot buffer_slots[i] as parameter i, with the
//     launch's grid and block dimensions and dynamic shared memory bytes.
//   - The error-flag slot is 16 bytes, read as two little-endian int64 after the run: [0] a
//     runtime::KernelErrorCode, [1] its detail (the offending index). The runtime zeroes it
//     before each run; each launch binding it gets a 16-byte flag of its own, so an error names
//     the launch that raised it.
//   - Launches run in order on the device's stream (each sees the previous one's writes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/device.h"
#include "runtime/executable.h"

namespace kiln::runtime::cuda {

/// One __global__ function of a PTX module.
struct KernelSpec {
  std::string name;     // the entry point's (extern "C") name in the module
  int module = 0;       // index into CudaExecutableSpec::modules
  int num_buffers = 0;  // parameters: this many device pointers
  /// Dynamic shared memory the kernel may be launched with beyond the default 48 KiB limit (the
  /// runtime raises CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it at Load); 0: none.
  int max_dynamic_shared_bytes = 0;
};

/// One cuLaunchKernel.
struct Launch {
  int kernel = 0;
  std::vector<int> buffer_slots;  // parameter i is the address of slot buffer_slots[i]
  uint32_t grid[3] = {1, 1, 1};   // a 0 skips the launch
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_bytes = 0;  // dynamic shared memory
  std::string name;           // names the launch in errors and dumps
  std::string error_context;  // prefixes a kernel error: the op and user line
};

/// Everything CudaDevice::Load needs.
struct CudaExecutableSpec {
  std::string name = "executable";
  int num_inputs = 0;
  int num_outputs = 0;
  int num_scalars = 0;
  /// runtime::Slot as for the CPU runtime: kInput, kOutput, kScalar (copied to device memory
  /// before each run), kArena (offsets from the memory planner, multiples of
  /// runtime::kBufferAlignment), kConstant (uploaded once at Load), kErrorFlag (16 bytes).
  std::vector<runtime::Slot> slots;
  /// PTX text of each module (an .entry per KernelSpec naming it).
  std::vector<std::string> modules;
  std::vector<KernelSpec> kernels;
  std::vector<Launch> launches;  // in order
};

/// InvalidArgument naming the slot, kernel or launch when `spec` is not well formed: slot kinds
/// and sizes, indices in range, each launch's buffer count equal to its kernel's, block sizes of
/// at most 1024 threads, PTX modules not empty. Needs no device (Load calls it first).
absl::Status CheckSpec(const CudaExecutableSpec& spec);

/// What a CUDA device offers, as the codegen needs it.
struct DeviceInfo {
  int index = 0;  // the CUDA device ordinal (KILN_DEVICE=cuda:<index>)
  std::string name;
  int compute_major = 0, compute_minor = 0;  // compute capability (9.0 on Hopper)
  int multiprocessors = 0;
  int warp_size = 32;
  int max_threads_per_block = 0;
  int max_block[3] = {0, 0, 0};
  int max_grid[3] = {0, 0, 0};
  int max_shared_per_block = 0;        // without opting in (48 KiB)
  int max_shared_per_block_optin = 0;  // with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  int64_t total_memory = 0;
  int driver_version = 0;  // cuDriverGetVersion: 12040 for CUDA 12.4

  /// "sm_90": the architecture NVRTC compiles for.
  std::string Arch() const;
  /// One line: "0: NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0)".
  std::string ToString() const;
};

/// How Open finds the driver. The defaults are what programs want; tests override.
struct OpenOptions {
  /// The driver library dlopen()ed; empty = $KILN_CUDA_DRIVER or "libcuda.so.1".
  std::string driver;
};

/// The devices the driver reports, in ordinal order; empty when there is no driver or no device.
std::vector<DeviceInfo> ListDevices(const OpenOptions& options = {});

/// OK when a driver loads and reports at least one device; otherwise FailedPrecondition saying
/// what is missing (no libcuda.so.1, cuInit's error, no device) and suggesting KILN_DEVICE=cpu.
/// Tests skip with this message.
absl::Status DriverAvailable(const OpenOptions& options = {});

class CudaDevice;

/// A loaded launch plan: modules, functions, constants in device memory; the CUDA driver's
/// runtime::DeviceExecutable. Immutable; CudaDevice::Run may run one executable from several
/// threads at once (each concurrent run takes its own run memory: arena, scalars, flags). Keeps
/// its device alive.
class CudaExecutable final : public runtime::DeviceExecutable {
 public:
  ~CudaExecutable() override;
  CudaExecutable(const CudaExecutable&) = delete;
  CudaExecutable& operator=(const CudaExecutable&) = delete;

  runtime::DeviceKind kind() const override { return runtime::DeviceKind::kCuda; }
  const std::string& name() const override;
  int num_inputs() const override;
  int num_outputs() const override;
  int num_scalars() const override;
  /// The largest slot bound to input k / output k / scalar k (0 when no slot uses it).
  int64_t input_bytes(int k) const override;
  int64_t output_bytes(int k) const override;
  int64_t scalar_bytes(int k) const;
  /// Bytes of the arena (the end of the last arena slot).
  int64_t arena_bytes() const;

  /// A listing for KILN_DUMP:
  ///   cuda executable "f": 2 inputs, 1 output, 0 scalars, arena 256 bytes, 1 module, 2 kernels,
  ///   2 launches
  ///     slot 0: input 0, 64 bytes
  ///     kernel 0: kiln_k0 (module 0, 3 buffers)
  ///     launch 0: add grid [4, 1, 1] block [128, 1, 1] shared 0 slots [0, 1, 2]
  std::string ToString() const;

  struct Impl;

 private:
  friend class CudaDevice;
  explicit CudaExecutable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Measures time on the device's stream with CUDA events (cuEventRecord, cuEventElapsedTime).
class StreamTimer {
 public:
  virtual ~StreamTimer() = default;
  /// Records the start / stop event on the stream (after the work queued so far).
  virtual absl::Status Start() = 0;
  virtual absl::Status Stop() = 0;
  /// Waits for the stop event; the milliseconds between the two events.
  virtual absl::StatusOr<double> ElapsedMilliseconds() = 0;
};

/// One CUDA device (its primary context and one non-blocking stream): the CUDA driver's
/// runtime::Device. Thread-safe: every call makes the context current on the calling thread.
class CudaDevice final : public runtime::Device, public std::enable_shared_from_this<CudaDevice> {
 public:
  /// Opens device `index` (a CUDA ordinal). Errors: no driver / no device (FailedPrecondition,
  /// as DriverAvailable, suggesting KILN_DEVICE=cpu), an index beyond the devices (NotFound,
  /// listing them).
  static absl::StatusOr<std::shared_ptr<CudaDevice>> Open(int index = 0,
                                                          const OpenOptions& options = {});
  ~CudaDevice() override;

  const DeviceInfo& info() const;

  /// Checks the spec (CheckSpec), loads its PTX modules (the driver's JIT compiles them for this
  /// GPU: an error carries the JIT's log), looks up the kernels and uploads the constants.
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> Load(CudaExecutableSpec spec);

  /// Runs every launch once on host memory: copies inputs and scalars in (counted in
  /// transfer_stats()), launches, copies outputs out and waits. Entry counts and sizes as for
  /// the buffer Run. A kernel error is OutOfRange (kKernelIndexOutOfRange) or Internal naming
  /// the launch; outputs are then unspecified.
  absl::Status Run(const CudaExecutable& exe, std::span<const void* const> inputs,
                   std::span<void* const> outputs, std::span<const void* const> scalars = {});

  /// Copies `bytes` bytes from `source` at `source_offset` to `destination` at
  /// `destination_offset`, on the device (cuMemcpyDtoDAsync on the stream; not a host transfer).
  absl::Status CopyBuffer(const runtime::DeviceBuffer& source, int64_t source_offset,
                          runtime::DeviceBuffer& destination, int64_t destination_offset,
                          int64_t bytes);

  /// A timer on this device's stream.
  absl::StatusOr<std::unique_ptr<StreamTimer>> CreateTimer();

  /// Bytes of device memory free and in total (cuMemGetInfo).
  absl::StatusOr<std::pair<int64_t, int64_t>> MemoryInfo();

  // ---- runtime::Device
  /// cuda:<index>.
  runtime::DeviceId id() const override;
  /// Device memory (cuMemAlloc; 256-byte aligned); host_data() is nullptr. ResourceExhausted
  /// when the device is out of memory (the caching allocator then empties its cache and retries).
  absl::StatusOr<std::unique_ptr<runtime::DeviceBuffer>> Allocate(int64_t bytes) override;
  /// Asynchronous copies on the stream (cuMemcpyHtoDAsync: `source` may be reused once the call
  /// returns); CopyFromDevice waits for the copy (and so for the work queued before it).
  absl::Status CopyToDevice(std::span<const std::byte> source, runtime::DeviceBuffer& destination,
                            int64_t offset) override;
  absl::Status CopyFromDevice(const runtime::DeviceBuffer& source, int64_t offset,
                              std::span<std::byte> destination) override;
  /// `executable` must be a CudaExecutable loaded on this device. The kernels read and write the
  /// given buffers in place (no copy: tensors stay in device memory); only scalars go up and the
  /// error flags come back (the run waits for them). An output buffer may not also be an input
  /// (InvalidArgument).
  absl::Status Run(const runtime::DeviceExecutable& executable,
                   std::span<const runtime::DeviceBuffer* const> inputs,
                   std::span<runtime::DeviceBuffer* const> outputs,
                   std::span<const void* const> scalars) override;
  /// cuStreamSynchronize.
  absl::Status Synchronize() override;

  struct Impl;

 private:
  explicit CudaDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::cuda
