// The CUDA driver (cuda_device.h) on the CUDA driver API, loaded with dlopen (cuda_loader.h).
//
// A CudaDevice is one GPU's primary context (retained at Open, released by the destructor) and
// one stream created with CU_STREAM_NON_BLOCKING, so that nothing else in the process that uses
// the legacy default stream serialises with kiln's work. Every copy, memset and launch goes onto
// that stream in call order, which is what orders a run's launches after the copies before it
// and a CopyFromDevice after the runs before it; only CopyFromDevice, the host-pointer Run, a Run
// with error flags or scalars to read back, the timers and Synchronize wait for it. Every public
// call first makes the context current on the calling thread (cuCtxSetCurrent), since any thread
// may call.
//
// Device memory comes from cuMemAlloc (256-byte aligned), one allocation per DeviceBuffer; the
// caching allocator (runtime/caching_allocator.h) is what keeps that off the hot path.
//
// A CudaExecutable holds its PTX modules (JIT-compiled by the driver at Load), one CUfunction per
// kernel and one device allocation for all constant slots. Each concurrent run takes a run
// context from the executable's pool: one device allocation laid out as
//   [scalars][error flags: 16 bytes per launch binding the error-flag slot][arena]
// (each region 256-byte aligned), plus, for the host-pointer Run only, a second allocation for
// the inputs and outputs. A launch's parameters are the device addresses of its slots, passed to
// cuLaunchKernel as an array of pointers to CUdeviceptr values (the driver copies them at the
// call).
#include "runtime/cuda/cuda_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/buffer.h"
#include "runtime/cuda/cuda_loader.h"

namespace kiln::runtime::cuda {

using internal::CallError;
using internal::CUcontext;
using internal::CudaApi;
using internal::CUdevice;
using internal::CUdeviceptr;
using internal::CUevent;
using internal::CUfunction;
using internal::CUmodule;
using internal::CUresult;
using internal::CUstream;
using internal::kCudaSuccess;

// Calls api.fn(...) and returns CallError("fn", result) from the enclosing function on failure.
#define KILN_CU(api, fn, ...)                                                         \
  do {                                                                                \
    const CUresult kiln_cu_result = (api).fn(__VA_ARGS__);                            \
    if (kiln_cu_result != kCudaSuccess) return CallError((api), #fn, kiln_cu_result); \
  } while (false)

namespace {

// cuMemAlloc's alignment, and that of every region of the run memory and the constants.
constexpr int64_t kDeviceAlignment = 256;
// The dynamic shared memory every kernel may use without opting in.
constexpr int64_t kDefaultSharedBytes = 48 * 1024;
constexpr int64_t kMaxThreadsPerBlock = 1024;

int64_t AlignUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string Plural(int64_t count, const char* noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

std::string Dims(const uint32_t dims[3]) {
  return absl::StrCat("[", dims[0], ", ", dims[1], ", ", dims[2], "]");
}

constexpr char kUseCpu[] = "Use KILN_DEVICE=cpu to run on the CPU";

// DeviceInfo of ordinal `index` from the driver's attributes.
absl::StatusOr<DeviceInfo> QueryDevice(const CudaApi& api, int index) {
  DeviceInfo info;
  info.index = index;
  CUdevice device = 0;
  KILN_CU(api, cuDeviceGet, &device, index);
  char name[256] = {};
  KILN_CU(api, cuDeviceGetName, name, static_cast<int>(sizeof(name) - 1), device);
  info.name = name;
  const std::pair<internal::CUdevice_attribute, int*> attributes[] = {
      {internal::kAttributeComputeCapabilityMajor, &info.compute_major},
      {internal::kAttributeComputeCapabilityMinor, &info.compute_minor},
      {internal::kAttributeMultiprocessorCount, &info.multiprocessors},
      {internal::kAttributeWarpSize, &info.warp_size},
      {internal::kAttributeMaxThreadsPerBlock, &info.max_threads_per_block},
      {internal::kAttributeMaxBlockDimX, &info.max_block[0]},
      {internal::kAttributeMaxBlockDimY, &info.max_block[1]},
      {internal::kAttributeMaxBlockDimZ, &info.max_block[2]},
      {internal::kAttributeMaxGridDimX, &info.max_grid[0]},
      {internal::kAttributeMaxGridDimY, &info.max_grid[1]},
      {internal::kAttributeMaxGridDimZ, &info.max_grid[2]},
      {internal::kAttributeMaxSharedMemoryPerBlock, &info.max_shared_per_block},
      {internal::kAttributeMaxSharedMemoryPerBlockOptin, &info.max_shared_per_block_optin},
  };
  for (const auto& [attribute, value] : attributes) {
    KILN_CU(api, cuDeviceGetAttribute, value, attribute, device);
  }
  size_t total = 0;
  KILN_CU(api, cuDeviceTotalMem_v2, &total, device);
  info.total_memory = static_cast<int64_t>(total);
  KILN_CU(api, cuDriverGetVersion, &info.driver_version);
  return info;
}

absl::StatusOr<std::vector<DeviceInfo>> QueryDevices(const CudaApi& api) {
  int count = 0;
  KILN_CU(api, cuDeviceGetCount, &count);
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<DeviceInfo> info = QueryDevice(api, i);
    if (!info.ok()) return info.status();
    devices.push_back(*std::move(info));
  }
  return devices;
}

absl::Status NoDeviceError(const CudaApi& api) {
  int version = 0;
  api.cuDriverGetVersion(&version);
  return absl::FailedPreconditionError(
      absl::StrCat("kiln::Cuda: the CUDA driver (", api.library, ", CUDA ", version / 1000, ".",
                   version % 1000 / 10, ") reports no device. ", kUseCpu));
}

}  // namespace

// ---- DeviceInfo, ListDevices, DriverAvailable --------------------------------------------------

std::string DeviceInfo::Arch() const { return absl::StrCat("sm_", compute_major, compute_minor); }

std::string DeviceInfo::ToString() const {
  const int64_t tenths_gib = std::llround(static_cast<double>(total_memory) * 10.0 /
                                          static_cast<double>(int64_t{1} << 30));
  return absl::StrCat(index, ": ", name, " (", Arch(), ", ", multiprocessors, " SMs, ",
                      tenths_gib / 10, ".", tenths_gib % 10, " GiB, driver ", driver_version / 1000,
                      ".", driver_version % 1000 / 10, ")");
}

std::vector<DeviceInfo> ListDevices(const OpenOptions& options) {
  absl::StatusOr<const CudaApi*> api = internal::LoadDriver(options.driver);
  if (!api.ok()) return {};
  absl::StatusOr<std::vector<DeviceInfo>> devices = QueryDevices(**api);
  if (!devices.ok()) return {};
  return *std::move(devices);
}

absl::Status DriverAvailable(const OpenOptions& options) {
  absl::StatusOr<const CudaApi*> api = internal::LoadDriver(options.driver);
  if (!api.ok()) return api.status();
  int count = 0;
  if (const CUresult result = (*api)->cuDeviceGetCount(&count); result != kCudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kiln::Cuda: ", CallError(**api, "cuDeviceGetCount", result).message(), ". ", kUseCpu));
  }
  if (count == 0) return NoDeviceError(**api);
  return absl::OkStatus();
}

// ---- CheckSpec ---------------------------------------------------------------------------------

absl::Status CheckSpec(const CudaExecutableSpec& spec) {
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda executable \"", spec.name, "\": ", parts...));
  };
  if (spec.num_inputs < 0 || spec.num_outputs < 0 || spec.num_scalars < 0) {
    return invalid("negative input, output or scalar count");
  }
  std::vector<bool> output_bound(spec.num_outputs, false);
  for (size_t i = 0; i < spec.slots.size(); ++i) {
    const Slot& slot = spec.slots[i];
    const std::string slot_name = absl::StrCat("slot ", i, " (", DescribeSlot(slot), ")");
    if (slot.size_bytes < 0) return invalid(slot_name, ": negative size");
    auto in_range = [&](int count) { return slot.index >= 0 && slot.index < count; };
    switch (slot.kind) {
      case SlotKind::kInput:
        if (!in_range(spec.num_inputs)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_inputs, "input"));
        }
        break;
      case SlotKind::kOutput:
        if (!in_range(spec.num_outputs)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_outputs, "output"));
        }
        output_bound[slot.index] = true;
        break;
      case SlotKind::kScalar:
        if (!in_range(spec.num_scalars)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_scalars, "scalar"));
        }
        break;
      case SlotKind::kArena:
        if (slot.offset < 0 || slot.offset % kBufferAlignment != 0) {
          return invalid(slot_name, ": arena offsets must be non-negative multiples of ",
                         kBufferAlignment);
        }
        break;
      case SlotKind::kConstant:
        // From `external` (a blob's mapped weights) or `constant`; uploaded at Load either way.
        if (slot.external == nullptr &&
            static_cast<int64_t>(slot.constant.size()) != slot.size_bytes) {
          return invalid(slot_name, ": holds ", slot.constant.size(), " bytes");
        }
        break;
      case SlotKind::kErrorFlag:
        if (slot.size_bytes != static_cast<int64_t>(sizeof(KernelErrorFlag))) {
          return invalid(slot_name, ": the error flag is two int64 (16 bytes)");
        }
        break;
    }
  }
  for (int k = 0; k < spec.num_outputs; ++k) {
    if (!output_bound[k]) {
      return invalid("output ", k, " is bound to no slot, so no launch would write it");
    }
  }
  for (size_t m = 0; m < spec.modules.size(); ++m) {
    if (spec.modules[m].empty()) return invalid("module ", m, " has no PTX");
  }
  for (size_t k = 0; k < spec.kernels.size(); ++k) {
    const KernelSpec& kernel = spec.kernels[k];
    const std::string kernel_name = absl::StrCat("kernel ", k, " (", kernel.name, ")");
    if (kernel.name.empty()) return invalid("kernel ", k, " has no name");
    if (kernel.module < 0 || kernel.module >= static_cast<int>(spec.modules.size())) {
      return invalid(kernel_name, ": module ", kernel.module, " does not exist (",
                     Plural(static_cast<int64_t>(spec.modules.size()), "module"), ")");
    }
    if (kernel.num_buffers < 0) return invalid(kernel_name, ": negative buffer count");
    if (kernel.max_dynamic_shared_bytes < 0) {
      return invalid(kernel_name, ": negative max_dynamic_shared_bytes");
    }
  }
  for (size_t l = 0; l < spec.launches.size(); ++l) {
    const Launch& launch = spec.launches[l];
    const std::string launch_name = absl::StrCat("launch ", l, " (", launch.name, ")");
    if (launch.kernel < 0 || launch.kernel >= static_cast<int>(spec.kernels.size())) {
      return invalid(launch_name, ": kernel ", launch.kernel, " does not exist (",
                     Plural(static_cast<int64_t>(spec.kernels.size()), "kernel"), ")");
    }
    const KernelSpec& kernel = spec.kernels[launch.kernel];
    if (static_cast<int>(launch.buffer_slots.size()) != kernel.num_buffers) {
      return invalid(launch_name, ": passes ", launch.buffer_slots.size(), " buffers, kernel \"",
                     kernel.name, "\" takes ", kernel.num_buffers);
    }
    for (int slot : launch.buffer_slots) {
      if (slot < 0 || slot >= static_cast<int>(spec.slots.size())) {
        return invalid(launch_name, ": slot ", slot, " does not exist (",
                       Plural(static_cast<int64_t>(spec.slots.size()), "slot"), ")");
      }
    }
    const int64_t threads = int64_t{launch.block[0]} * launch.block[1] * launch.block[2];
    if (threads < 1 || threads > kMaxThreadsPerBlock) {
      return invalid(launch_name, ": block ", Dims(launch.block), " has ", threads,
                     " threads; a block has 1 to ", kMaxThreadsPerBlock);
    }
    const int64_t allowed_shared =
        std::max<int64_t>(kDefaultSharedBytes, kernel.max_dynamic_shared_bytes);
    if (launch.shared_bytes > allowed_shared) {
      return invalid(launch_name, ": ", launch.shared_bytes,
                     " bytes of dynamic shared memory; kernel \"", kernel.name, "\" allows ",
                     allowed_shared, " (raise its max_dynamic_shared_bytes)");
    }
  }
  return absl::OkStatus();
}

// ---- CudaDevice::Impl --------------------------------------------------------------------------

struct CudaDevice::Impl {
  const CudaApi* api = nullptr;
  DeviceInfo info;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;

  ~Impl() {
    if (context == nullptr) return;
    api->cuCtxSetCurrent(context);
    if (stream != nullptr) {
      api->cuStreamSynchronize(stream);
      api->cuStreamDestroy_v2(stream);
    }
    api->cuDevicePrimaryCtxRelease_v2(device);
  }

  // The context on the calling thread: the first thing every public call does.
  absl::Status MakeCurrent() const {
    KILN_CU(*api, cuCtxSetCurrent, context);
    return absl::OkStatus();
  }
  absl::Status Synchronize() const {
    KILN_CU(*api, cuStreamSynchronize, stream);
    return absl::OkStatus();
  }
  absl::StatusOr<CUdeviceptr> Allocate(int64_t bytes) const {
    CUdeviceptr pointer = 0;
    KILN_CU(*api, cuMemAlloc_v2, &pointer, static_cast<size_t>(std::max(bytes, kDeviceAlignment)));
    return pointer;
  }
  // Frees device memory that queued work may still use: waits for the stream first (cuMemFree
  // is documented to *maybe* synchronise).
  void Free(CUdeviceptr pointer) const {
    if (pointer == 0) return;
    api->cuCtxSetCurrent(context);
    api->cuStreamSynchronize(stream);
    api->cuMemFree_v2(pointer);
  }
};

CudaDevice::CudaDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaDevice::~CudaDevice() = default;
const DeviceInfo& CudaDevice::info() const { return impl_->info; }
DeviceId CudaDevice::id() const { return DeviceId{DeviceKind::kCuda, impl_->info.index}; }

absl::StatusOr<std::shared_ptr<CudaDevice>> CudaDevice::Open(int index,
                                                             const OpenOptions& options) {
  absl::StatusOr<const CudaApi*> loaded = internal::LoadDriver(options.driver);
  if (!loaded.ok()) return loaded.status();
  const CudaApi& api = **loaded;
  absl::StatusOr<std::vector<DeviceInfo>> devices = QueryDevices(api);
  if (!devices.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kiln::Cuda: ", devices.status().message(), ". ", kUseCpu));
  }
  if (devices->empty()) return NoDeviceError(api);
  if (index < 0 || index >= static_cast<int>(devices->size())) {
    std::vector<std::string> lines;
    for (const DeviceInfo& device : *devices) lines.push_back(device.ToString());
    return absl::NotFoundError(absl::StrCat("kiln::Cuda: no CUDA device ", index,
                                            ": the devices are ", absl::StrJoin(lines, "; ")));
  }
  auto impl = std::make_unique<Impl>();
  impl->api = &api;
  impl->info = (*devices)[index];
  KILN_CU(api, cuDeviceGet, &impl->device, index);
  CUcontext context = nullptr;
  KILN_CU(api, cuDevicePrimaryCtxRetain, &context, impl->device);
  impl->context = context;  // released by ~Impl from here on
  if (absl::Status status = impl->MakeCurrent(); !status.ok()) return status;
  KILN_CU(api, cuStreamCreate, &impl->stream, internal::kStreamNonBlocking);
  return std::shared_ptr<CudaDevice>(new CudaDevice(std::move(impl)));
}

// ---- Buffers -----------------------------------------------------------------------------------

namespace {

// Device memory of a CudaDevice, handed out through runtime::Device::Allocate.
class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(Device& device, const CudaDevice::Impl* impl, CUdeviceptr pointer, int64_t size)
      : DeviceBuffer(device, size), impl_(impl), pointer_(pointer) {}
  ~CudaBuffer() override { impl_->Free(pointer_); }

  std::byte* host_data() const override { return nullptr; }
  CUdeviceptr pointer() const { return pointer_; }

 private:
  const CudaDevice::Impl* impl_;
  CUdeviceptr pointer_;
};

CUdeviceptr PointerOf(const DeviceBuffer& buffer) {
  return static_cast<const CudaBuffer&>(buffer).pointer();
}

// Checks that `buffer` is one of `device`'s and that [offset, offset + bytes) fits in it.
absl::Status CheckRange(const CudaDevice& device, const DeviceBuffer& buffer, int64_t offset,
                        int64_t bytes, const std::string& what) {
  if (&buffer.device() != &device) {
    return absl::InvalidArgumentError(absl::StrCat(device.id().ToString(), ": ", what,
                                                   " got a buffer of another device (",
                                                   buffer.device().id().ToString(), ")"));
  }
  if (offset < 0 || bytes < 0 || offset > buffer.size() - bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.id().ToString(), ": ", what, " of ", bytes, " bytes at offset ", offset,
                     " does not fit a buffer of ", buffer.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": cannot allocate ", bytes, " bytes"));
  }
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  absl::StatusOr<CUdeviceptr> pointer = impl_->Allocate(bytes);
  if (!pointer.ok()) {
    return absl::Status(pointer.status().code(),
                        absl::StrCat(id().ToString(), ": cannot allocate ", bytes,
                                     " bytes: ", pointer.status().message()));
  }
  return std::make_unique<CudaBuffer>(*this, impl_.get(), *pointer, bytes);
}

absl::Status CudaDevice::CopyToDevice(std::span<const std::byte> source, DeviceBuffer& destination,
                                      int64_t offset) {
  const auto bytes = static_cast<int64_t>(source.size());
  if (absl::Status s = CheckRange(*this, destination, offset, bytes, "CopyToDevice"); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  // From pageable memory the driver stages the bytes before it returns, so `source` may be
  // reused at once (cuda_device.h); the device-side copy is ordered on the stream.
  KILN_CU(*impl_->api, cuMemcpyHtoDAsync_v2, PointerOf(destination) + offset, source.data(),
          source.size(), impl_->stream);
  CountHostToDevice(bytes);
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyFromDevice(const DeviceBuffer& source, int64_t offset,
                                        std::span<std::byte> destination) {
  const auto bytes = static_cast<int64_t>(destination.size());
  if (absl::Status s = CheckRange(*this, source, offset, bytes, "CopyFromDevice"); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  KILN_CU(*impl_->api, cuMemcpyDtoHAsync_v2, destination.data(), PointerOf(source) + offset,
          destination.size(), impl_->stream);
  if (absl::Status status = impl_->Synchronize(); !status.ok()) return status;
  CountDeviceToHost(bytes);
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyBuffer(const DeviceBuffer& source, int64_t source_offset,
                                    DeviceBuffer& destination, int64_t destination_offset,
                                    int64_t bytes) {
  if (absl::Status s = CheckRange(*this, source, source_offset, bytes, "CopyBuffer source");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRange(*this, destination, destination_offset, bytes, "CopyBuffer destination");
      !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  // cuMemcpyDtoD's result is undefined for overlapping ranges.
  if (&source == &destination && source_offset < destination_offset + bytes &&
      destination_offset < source_offset + bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        id().ToString(), ": CopyBuffer of ", bytes, " bytes from offset ", source_offset,
        " to offset ", destination_offset, " of one buffer: the ranges overlap"));
  }
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  KILN_CU(*impl_->api, cuMemcpyDtoDAsync_v2, PointerOf(destination) + destination_offset,
          PointerOf(source) + source_offset, static_cast<size_t>(bytes), impl_->stream);
  return absl::OkStatus();
}

absl::Status CudaDevice::Synchronize() {
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  return impl_->Synchronize();
}

absl::StatusOr<std::pair<int64_t, int64_t>> CudaDevice::MemoryInfo() {
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  size_t free = 0, total = 0;
  KILN_CU(*impl_->api, cuMemGetInfo_v2, &free, &total);
  return std::pair<int64_t, int64_t>(static_cast<int64_t>(free), static_cast<int64_t>(total));
}

// ---- Timers ------------------------------------------------------------------------------------

namespace {

class CudaStreamTimer final : public StreamTimer {
 public:
  CudaStreamTimer(std::shared_ptr<CudaDevice> owner, const CudaDevice::Impl* device)
      : owner_(std::move(owner)), device_(device) {}
  ~CudaStreamTimer() override {
    device_->api->cuCtxSetCurrent(device_->context);
    if (start_ != nullptr) device_->api->cuEventDestroy_v2(start_);
    if (stop_ != nullptr) device_->api->cuEventDestroy_v2(stop_);
  }

  absl::Status Create() {
    if (absl::Status status = device_->MakeCurrent(); !status.ok()) return status;
    KILN_CU(*device_->api, cuEventCreate, &start_, internal::kEventDefault);
    KILN_CU(*device_->api, cuEventCreate, &stop_, internal::kEventDefault);
    return absl::OkStatus();
  }
  absl::Status Start() override { return Record(start_); }
  absl::Status Stop() override { return Record(stop_); }
  absl::StatusOr<double> ElapsedMilliseconds() override {
    if (absl::Status status = device_->MakeCurrent(); !status.ok()) return status;
    KILN_CU(*device_->api, cuEventSynchronize, stop_);
    float milliseconds = 0;
    KILN_CU(*device_->api, cuEventElapsedTime_v2, &milliseconds, start_, stop_);
    return static_cast<double>(milliseconds);
  }

 private:
  absl::Status Record(CUevent event) {
    if (absl::Status status = device_->MakeCurrent(); !status.ok()) return status;
    KILN_CU(*device_->api, cuEventRecord, event, device_->stream);
    return absl::OkStatus();
  }

  std::shared_ptr<CudaDevice> owner_;  // keeps the context alive
  const CudaDevice::Impl* device_;
  CUevent start_ = nullptr;
  CUevent stop_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StreamTimer>> CudaDevice::CreateTimer() {
  auto timer = std::make_unique<CudaStreamTimer>(shared_from_this(), impl_.get());
  if (absl::Status status = timer->Create(); !status.ok()) return status;
  return timer;
}

// ---- Executables -------------------------------------------------------------------------------

namespace {

// What one concurrent run holds.
struct RunContext {
  CUdeviceptr memory = 0;  // [scalars][flags][arena]
  CUdeviceptr io = 0;      // the host-pointer Run's inputs and outputs; made on its first use
  std::vector<std::byte> host_scalars;  // the scalars region, assembled on the host
  std::vector<int64_t> host_flags;      // the flags region, read back
  std::vector<CUdeviceptr> arguments;   // every launch's parameter values, back to back
  std::vector<void*> parameters;        // &arguments[i]: cuLaunchKernel's kernelParams
};

}  // namespace

struct CudaExecutable::Impl {
  std::shared_ptr<CudaDevice> owner;  // first member: destroyed last
  const CudaDevice::Impl* device = nullptr;

  std::string name;
  int num_scalars = 0;
  std::vector<Slot> slots;  // constant bytes dropped
  size_t num_modules = 0;
  std::vector<KernelSpec> kernels;
  std::vector<Launch> launches;
  std::vector<CUmodule> modules;
  std::vector<CUfunction> functions;  // per kernel

  std::vector<int64_t> input_bytes, output_bytes, scalar_bytes;
  int64_t arena_bytes = 0;

  // The run memory's layout.
  std::vector<int64_t> scalar_offset;
  int64_t scalars_bytes = 0;         // scalars: [0, scalars_bytes)
  std::vector<int64_t> flag_offset;  // per launch; only for those binding the error flag
  std::vector<int> flag_launches;    // launches binding the error flag, in order
  int64_t flags_begin = 0, flags_end = 0;
  int64_t arena_offset = 0;
  int64_t run_bytes = 0;
  // The host-pointer Run's io memory: inputs then outputs.
  std::vector<int64_t> input_offset, output_offset;
  int64_t io_bytes = 0;
  // Where launch l's parameters start in RunContext::arguments.
  std::vector<size_t> argument_begin;

  CUdeviceptr constants = 0;
  std::vector<int64_t> constant_offset;  // per slot

  std::mutex contexts_mutex;
  std::vector<std::unique_ptr<RunContext>> idle_contexts;

  ~Impl() {
    for (auto& context : idle_contexts) DestroyContext(*context);
    device->Free(constants);
    device->api->cuCtxSetCurrent(device->context);
    for (CUmodule module : modules) device->api->cuModuleUnload(module);
  }

  absl::StatusOr<std::unique_ptr<RunContext>> CreateContext() const {
    auto context = std::make_unique<RunContext>();
    absl::StatusOr<CUdeviceptr> memory = device->Allocate(run_bytes);
    if (!memory.ok()) return memory.status();
    context->memory = *memory;
    context->host_scalars.resize(static_cast<size_t>(scalars_bytes));
    context->host_flags.resize(static_cast<size_t>((flags_end - flags_begin) / 8));
    size_t arguments = 0;
    for (const Launch& launch : launches) arguments += launch.buffer_slots.size();
    context->arguments.resize(arguments);
    context->parameters.resize(arguments);
    for (size_t i = 0; i < arguments; ++i) context->parameters[i] = &context->arguments[i];
    return context;
  }

  void DestroyContext(RunContext& context) const {
    device->Free(context.io);
    device->Free(context.memory);
    context = RunContext{};
  }
};

CudaExecutable::CudaExecutable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaExecutable::~CudaExecutable() = default;
const std::string& CudaExecutable::name() const { return impl_->name; }
int CudaExecutable::num_inputs() const { return static_cast<int>(impl_->input_bytes.size()); }
int CudaExecutable::num_outputs() const { return static_cast<int>(impl_->output_bytes.size()); }
int CudaExecutable::num_scalars() const { return impl_->num_scalars; }
int64_t CudaExecutable::input_bytes(int k) const { return impl_->input_bytes[k]; }
int64_t CudaExecutable::output_bytes(int k) const { return impl_->output_bytes[k]; }
int64_t CudaExecutable::scalar_bytes(int k) const { return impl_->scalar_bytes[k]; }
int64_t CudaExecutable::arena_bytes() const { return impl_->arena_bytes; }

std::string CudaExecutable::ToString() const {
  const Impl& e = *impl_;
  std::string text = absl::StrCat(
      "cuda executable \"", e.name, "\": ", Plural(num_inputs(), "input"), ", ",
      Plural(num_outputs(), "output"), ", ", Plural(e.num_scalars, "scalar"), ", arena ",
      e.arena_bytes, " bytes, ", Plural(static_cast<int64_t>(e.num_modules), "module"), ", ",
      Plural(static_cast<int64_t>(e.kernels.size()), "kernel"), ", ", e.launches.size(),
      e.launches.size() == 1 ? " launch" : " launches", "\n");
  for (size_t i = 0; i < e.slots.size(); ++i) {
    absl::StrAppend(&text, "  slot ", i, ": ", DescribeSlot(e.slots[i]), "\n");
  }
  for (size_t k = 0; k < e.kernels.size(); ++k) {
    const KernelSpec& kernel = e.kernels[k];
    absl::StrAppend(&text, "  kernel ", k, ": ", kernel.name, " (module ", kernel.module, ", ",
                    Plural(kernel.num_buffers, "buffer"));
    if (kernel.max_dynamic_shared_bytes > 0) {
      absl::StrAppend(&text, ", up to ", kernel.max_dynamic_shared_bytes, " dynamic shared bytes");
    }
    absl::StrAppend(&text, ")\n");
  }
  for (size_t l = 0; l < e.launches.size(); ++l) {
    const Launch& launch = e.launches[l];
    absl::StrAppend(&text, "  launch ", l, ": ", launch.name, " grid ", Dims(launch.grid),
                    " block ", Dims(launch.block), " shared ", launch.shared_bytes, " slots [",
                    absl::StrJoin(launch.buffer_slots, ", "), "]\n");
  }
  return text;
}

// ---- Load --------------------------------------------------------------------------------------

absl::StatusOr<std::shared_ptr<const CudaExecutable>> CudaDevice::Load(CudaExecutableSpec spec) {
  if (absl::Status status = CheckSpec(spec); !status.ok()) return status;
  const DeviceInfo& info = impl_->info;
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda executable \"", spec.name, "\": ", parts...));
  };
  auto failed = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("cuda executable \"", spec.name, "\": ", status.message()));
  };
  // What this GPU allows beyond CheckSpec's device-independent limits.
  for (size_t k = 0; k < spec.kernels.size(); ++k) {
    const KernelSpec& kernel = spec.kernels[k];
    if (kernel.max_dynamic_shared_bytes > kDefaultSharedBytes &&
        kernel.max_dynamic_shared_bytes > info.max_shared_per_block_optin) {
      return invalid("kernel ", k, " (", kernel.name, "): ", kernel.max_dynamic_shared_bytes,
                     " bytes of dynamic shared memory; ", info.name, " allows ",
                     info.max_shared_per_block_optin);
    }
  }
  for (size_t l = 0; l < spec.launches.size(); ++l) {
    const Launch& launch = spec.launches[l];
    for (int axis = 0; axis < 3; ++axis) {
      if (static_cast<int64_t>(launch.grid[axis]) > info.max_grid[axis] ||
          static_cast<int64_t>(launch.block[axis]) > info.max_block[axis]) {
        return invalid("launch ", l, " (", launch.name, "): grid ", Dims(launch.grid), " block ",
                       Dims(launch.block), "; ", info.name, " allows grids up to [",
                       absl::StrJoin(info.max_grid, ", "), "] and blocks up to [",
                       absl::StrJoin(info.max_block, ", "), "]");
      }
    }
  }
  if (absl::Status status = impl_->MakeCurrent(); !status.ok()) return status;
  const CudaApi& api = *impl_->api;

  auto e = std::make_unique<CudaExecutable::Impl>();
  e->owner = shared_from_this();
  e->device = impl_.get();
  e->name = spec.name;
  e->num_scalars = spec.num_scalars;
  e->input_bytes.assign(spec.num_inputs, 0);
  e->output_bytes.assign(spec.num_outputs, 0);
  e->scalar_bytes.assign(spec.num_scalars, 0);
  e->constant_offset.assign(spec.slots.size(), 0);
  int64_t constants_bytes = 0;
  for (size_t i = 0; i < spec.slots.size(); ++i) {
    const Slot& slot = spec.slots[i];
    switch (slot.kind) {
      case SlotKind::kInput:
        e->input_bytes[slot.index] = std::max(e->input_bytes[slot.index], slot.size_bytes);
        break;
      case SlotKind::kOutput:
        e->output_bytes[slot.index] = std::max(e->output_bytes[slot.index], slot.size_bytes);
        break;
      case SlotKind::kScalar:
        e->scalar_bytes[slot.index] = std::max(e->scalar_bytes[slot.index], slot.size_bytes);
        break;
      case SlotKind::kArena:
        e->arena_bytes = std::max(e->arena_bytes, slot.offset + slot.size_bytes);
        break;
      case SlotKind::kConstant:
        e->constant_offset[i] = constants_bytes;
        constants_bytes = AlignUp(constants_bytes + slot.size_bytes, kDeviceAlignment);
        break;
      case SlotKind::kErrorFlag:
        break;
    }
  }

  // The run memory: [scalars][flags][arena], each piece aligned.
  int64_t cursor = 0;
  auto place = [&](int64_t bytes) {
    const int64_t offset = cursor;
    cursor = AlignUp(cursor + bytes, kDeviceAlignment);
    return offset;
  };
  for (int64_t bytes : e->scalar_bytes) e->scalar_offset.push_back(place(bytes));
  e->scalars_bytes = cursor;
  e->flag_offset.assign(spec.launches.size(), 0);
  size_t arguments = 0;
  for (size_t l = 0; l < spec.launches.size(); ++l) {
    const Launch& launch = spec.launches[l];
    e->argument_begin.push_back(arguments);
    arguments += launch.buffer_slots.size();
    if (std::any_of(launch.buffer_slots.begin(), launch.buffer_slots.end(),
                    [&](int slot) { return spec.slots[slot].kind == SlotKind::kErrorFlag; })) {
      e->flag_launches.push_back(static_cast<int>(l));
    }
  }
  e->flags_begin = cursor;
  for (size_t f = 0; f < e->flag_launches.size(); ++f) {
    // Back to back, so one memset clears and one copy reads them all.
    e->flag_offset[e->flag_launches[f]] =
        e->flags_begin + static_cast<int64_t>(f * sizeof(KernelErrorFlag));
  }
  e->flags_end =
      e->flags_begin + static_cast<int64_t>(e->flag_launches.size() * sizeof(KernelErrorFlag));
  cursor = AlignUp(e->flags_end, kDeviceAlignment);
  e->arena_offset = place(e->arena_bytes);
  e->run_bytes = cursor;
  cursor = 0;
  for (int64_t bytes : e->input_bytes) e->input_offset.push_back(place(bytes));
  for (int64_t bytes : e->output_bytes) e->output_offset.push_back(place(bytes));
  e->io_bytes = cursor;

  // Modules (the driver JIT-compiles the PTX for this GPU) and their kernels. The executable's
  // destructor unloads what was loaded if a later step fails.
  for (size_t m = 0; m < spec.modules.size(); ++m) {
    std::string error_log(16384, '\0');
    std::string info_log(16384, '\0');
    internal::CUjit_option options[] = {
        internal::kJitErrorLogBuffer, internal::kJitErrorLogBufferSizeBytes,
        internal::kJitInfoLogBuffer, internal::kJitInfoLogBufferSizeBytes};
    // The size options' values are the sizes themselves; the buffer keeps a NUL at its end.
    void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size() - 1),
                      info_log.data(), reinterpret_cast<void*>(info_log.size() - 1)};
    CUmodule module = nullptr;
    const CUresult result =
        api.cuModuleLoadDataEx(&module, spec.modules[m].c_str(), 4, options, values);
    if (result != kCudaSuccess) {
      error_log.resize(std::strlen(error_log.c_str()));
      info_log.resize(std::strlen(info_log.c_str()));
      const absl::Status error = CallError(api, "cuModuleLoadDataEx", result);
      std::vector<std::string> logs;
      for (const std::string* log : {&error_log, &info_log}) {
        if (!log->empty()) logs.push_back(*log);
      }
      return absl::Status(
          error.code(),
          absl::StrCat("cuda executable \"", spec.name, "\": module ", m, ": ", error.message(),
                       logs.empty() ? "" : ": ", absl::StrJoin(logs, "\n")));
    }
    e->modules.push_back(module);
  }
  e->num_modules = spec.modules.size();
  for (size_t k = 0; k < spec.kernels.size(); ++k) {
    const KernelSpec& kernel = spec.kernels[k];
    CUfunction function = nullptr;
    CUresult result =
        api.cuModuleGetFunction(&function, e->modules[kernel.module], kernel.name.c_str());
    if (result != kCudaSuccess) {
      return invalid("kernel ", k, " (", kernel.name, "): module ", kernel.module,
                     " has no .entry ", kernel.name, " (",
                     CallError(api, "cuModuleGetFunction", result).message(), ")");
    }
    if (kernel.max_dynamic_shared_bytes > kDefaultSharedBytes) {
      result = api.cuFuncSetAttribute(function, internal::kFuncAttributeMaxDynamicSharedSizeBytes,
                                      kernel.max_dynamic_shared_bytes);
      if (result != kCudaSuccess) {
        return failed(absl::Status(
            absl::StatusCode::kInternal,
            absl::StrCat("kernel ", k, " (", kernel.name,
                         "): ", CallError(api, "cuFuncSetAttribute", result).message())));
      }
    }
    e->functions.push_back(function);
  }

  // Constants, uploaded once (and waited for: the spec's bytes go away with it).
  if (constants_bytes > 0) {
    absl::StatusOr<CUdeviceptr> constants = impl_->Allocate(constants_bytes);
    if (!constants.ok()) return failed(constants.status());
    e->constants = *constants;
    for (size_t i = 0; i < spec.slots.size(); ++i) {
      const Slot& slot = spec.slots[i];
      if (slot.kind != SlotKind::kConstant || slot.size_bytes == 0) continue;
      const void* bytes = slot.external != nullptr ? slot.external : slot.constant.data();
      const CUresult result =
          api.cuMemcpyHtoDAsync_v2(e->constants + e->constant_offset[i], bytes,
                                   static_cast<size_t>(slot.size_bytes), impl_->stream);
      if (result != kCudaSuccess) return failed(CallError(api, "cuMemcpyHtoDAsync_v2", result));
    }
    if (absl::Status status = impl_->Synchronize(); !status.ok()) return failed(status);
  }

  e->slots = std::move(spec.slots);
  for (Slot& slot : e->slots) {
    std::vector<std::byte>().swap(slot.constant);
    slot.external = nullptr;
  }
  e->kernels = std::move(spec.kernels);
  e->launches = std::move(spec.launches);

  // One run context up front: Load reports what a run would run out of, and the first run is
  // as fast as the next.
  absl::StatusOr<std::unique_ptr<RunContext>> context = e->CreateContext();
  if (!context.ok()) return failed(context.status());
  e->idle_contexts.push_back(*std::move(context));
  return std::shared_ptr<const CudaExecutable>(new CudaExecutable(std::move(e)));
}

// ---- Run ---------------------------------------------------------------------------------------

namespace {

// Where a run's inputs and outputs are: host memory (copied through the context's io memory) or
// the caller's device buffers (passed to the kernels in place).
struct RunBinding {
  std::span<const void* const> host_inputs;
  std::span<void* const> host_outputs;
  std::vector<CUdeviceptr> device_inputs, device_outputs;
  bool on_device = false;
};

// Bytes of each host <-> device copy a run made.
struct Transfers {
  std::vector<int64_t> host_to_device, device_to_host;
};

// Both Runs: takes a run context, queues the copies and launches, waits when there is something
// to read back, and checks the error flags. Records the host transfers it made in `transfers`
// (Device's counters are the caller's to bump).
absl::Status Execute(const CudaDevice::Impl& device, CudaExecutable::Impl& e,
                     const RunBinding& binding, std::span<const void* const> scalars,
                     Transfers& transfers) {
  if (scalars.size() != e.scalar_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cuda executable \"", e.name, "\" takes ",
                                                   e.scalar_bytes.size(), " scalars, got ",
                                                   scalars.size()));
  }
  for (size_t k = 0; k < scalars.size(); ++k) {
    if (scalars[k] == nullptr && e.scalar_bytes[k] > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda executable \"", e.name, "\": scalar ", k, " is null"));
    }
  }
  if (absl::Status status = device.MakeCurrent(); !status.ok()) return status;

  std::unique_ptr<RunContext> context;
  {
    std::lock_guard<std::mutex> lock(e.contexts_mutex);
    if (!e.idle_contexts.empty()) {
      context = std::move(e.idle_contexts.back());
      e.idle_contexts.pop_back();
    }
  }
  if (context == nullptr) {  // another run holds every context: make one more
    absl::StatusOr<std::unique_ptr<RunContext>> made = e.CreateContext();
    if (!made.ok()) {
      return absl::Status(made.status().code(), absl::StrCat("cuda executable \"", e.name,
                                                             "\": ", made.status().message()));
    }
    context = *std::move(made);
  }
  const bool on_host = !binding.on_device;
  // A failed driver call leaves the context's memory in an unknown state: it is freed, not
  // reused.
  auto fail = [&](absl::Status status) {
    e.DestroyContext(*context);
    return absl::Status(status.code(),
                        absl::StrCat("cuda executable \"", e.name, "\": ", status.message()));
  };
  const CudaApi& api = *device.api;
  const CUstream stream = device.stream;
#define KILN_CU_RUN(fn, ...)                             \
  do {                                                   \
    const CUresult kiln_cu_result = api.fn(__VA_ARGS__); \
    if (kiln_cu_result != kCudaSuccess) {                \
      return fail(CallError(api, #fn, kiln_cu_result));  \
    }                                                    \
  } while (false)

  if (on_host && context->io == 0 && e.io_bytes > 0) {
    absl::StatusOr<CUdeviceptr> io = device.Allocate(e.io_bytes);
    if (!io.ok()) return fail(io.status());
    context->io = *io;
  }
  const CUdeviceptr memory = context->memory;
  if (e.flags_end > e.flags_begin) {
    KILN_CU_RUN(cuMemsetD8Async, memory + e.flags_begin, 0,
                static_cast<size_t>(e.flags_end - e.flags_begin), stream);
  }
  if (e.scalars_bytes > 0) {
    for (size_t k = 0; k < scalars.size(); ++k) {
      if (e.scalar_bytes[k] == 0) continue;
      std::memcpy(context->host_scalars.data() + e.scalar_offset[k], scalars[k],
                  static_cast<size_t>(e.scalar_bytes[k]));
    }
    KILN_CU_RUN(cuMemcpyHtoDAsync_v2, memory, context->host_scalars.data(),
                static_cast<size_t>(e.scalars_bytes), stream);
    for (int64_t bytes : e.scalar_bytes) {
      if (bytes > 0) transfers.host_to_device.push_back(bytes);
    }
  }
  if (on_host) {
    for (size_t k = 0; k < binding.host_inputs.size(); ++k) {
      if (e.input_bytes[k] == 0) continue;
      KILN_CU_RUN(cuMemcpyHtoDAsync_v2, context->io + e.input_offset[k], binding.host_inputs[k],
                  static_cast<size_t>(e.input_bytes[k]), stream);
      transfers.host_to_device.push_back(e.input_bytes[k]);
    }
  }

  // Each launch's parameters: the device address of each slot it passes.
  for (size_t l = 0; l < e.launches.size(); ++l) {
    const Launch& launch = e.launches[l];
    CUdeviceptr* arguments = context->arguments.data() + e.argument_begin[l];
    for (size_t i = 0; i < launch.buffer_slots.size(); ++i) {
      const int slot_number = launch.buffer_slots[i];
      const Slot& slot = e.slots[slot_number];
      CUdeviceptr address = 0;
      switch (slot.kind) {
        case SlotKind::kInput:
          address = on_host ? context->io + e.input_offset[slot.index]
                            : binding.device_inputs[slot.index];
          break;
        case SlotKind::kOutput:
          address = on_host ? context->io + e.output_offset[slot.index]
                            : binding.device_outputs[slot.index];
          break;
        case SlotKind::kScalar:
          address = memory + e.scalar_offset[slot.index];
          break;
        case SlotKind::kArena:
          address = memory + e.arena_offset + slot.offset;
          break;
        case SlotKind::kConstant:
          address = e.constants + e.constant_offset[slot_number];
          break;
        case SlotKind::kErrorFlag:
          address = memory + e.flag_offset[l];
          break;
      }
      arguments[i] = address;
    }
    if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0) continue;
    void** parameters =
        launch.buffer_slots.empty() ? nullptr : context->parameters.data() + e.argument_begin[l];
    const CUresult result = api.cuLaunchKernel(
        e.functions[launch.kernel], launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
        launch.block[1], launch.block[2], launch.shared_bytes, stream, parameters, nullptr);
    if (result != kCudaSuccess) {
      const absl::Status error = CallError(api, "cuLaunchKernel", result);
      return fail(absl::Status(
          error.code(), absl::StrCat("launch ", l, " (", launch.name, "): ", error.message())));
    }
  }

  if (e.flags_end > e.flags_begin) {
    KILN_CU_RUN(cuMemcpyDtoHAsync_v2, context->host_flags.data(), memory + e.flags_begin,
                static_cast<size_t>(e.flags_end - e.flags_begin), stream);
  }
  if (on_host) {
    // Copied whether or not a kernel fails (outputs are then unspecified): one wait for all.
    for (size_t k = 0; k < binding.host_outputs.size(); ++k) {
      if (e.output_bytes[k] == 0) continue;
      KILN_CU_RUN(cuMemcpyDtoHAsync_v2, binding.host_outputs[k], context->io + e.output_offset[k],
                  static_cast<size_t>(e.output_bytes[k]), stream);
      transfers.device_to_host.push_back(e.output_bytes[k]);
    }
  }
  // A run on device buffers with nothing to read back stays queued (the Device contract); the
  // flags, the host outputs and the host copy of the scalars (reused by the context's next run)
  // need the wait.
  if (on_host || e.flags_end > e.flags_begin || e.scalars_bytes > 0) {
    KILN_CU_RUN(cuStreamSynchronize, stream);
  }
#undef KILN_CU_RUN

  absl::Status result = absl::OkStatus();
  for (size_t f = 0; f < e.flag_launches.size(); ++f) {
    const int64_t code = context->host_flags[2 * f];
    const int64_t detail = context->host_flags[2 * f + 1];
    if (code == kKernelOk) continue;
    const int l = e.flag_launches[f];
    const Launch& launch = e.launches[l];
    result = absl::Status(
        code == kKernelIndexOutOfRange ? absl::StatusCode::kOutOfRange
                                       : absl::StatusCode::kInternal,
        absl::StrCat("cuda executable \"", e.name, "\": launch ", l, " (", launch.name,
                     "): ", launch.error_context.empty() ? "" : launch.error_context + ": ",
                     KernelErrorMessage(static_cast<int32_t>(code)), " (kernel error code ", code,
                     code == kKernelIndexOutOfRange ? ", index " : ", detail ", detail, ")"));
    break;
  }
  std::lock_guard<std::mutex> lock(e.contexts_mutex);
  e.idle_contexts.push_back(std::move(context));
  return result;
}

}  // namespace

absl::Status CudaDevice::Run(const CudaExecutable& exe, std::span<const void* const> inputs,
                             std::span<void* const> outputs, std::span<const void* const> scalars) {
  const CudaExecutable::Impl& e = *exe.impl_;
  if (e.device != impl_.get()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda executable \"", e.name, "\" was loaded on another device"));
  }
  auto count_error = [&](const char* what, size_t expected, size_t got) {
    return absl::InvalidArgumentError(absl::StrCat("cuda executable \"", e.name, "\" takes ",
                                                   expected, " ", what, ", got ", got));
  };
  if (inputs.size() != e.input_bytes.size()) {
    return count_error("inputs", e.input_bytes.size(), inputs.size());
  }
  if (outputs.size() != e.output_bytes.size()) {
    return count_error("outputs", e.output_bytes.size(), outputs.size());
  }
  auto null_error = [&](const char* what, size_t k) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda executable \"", e.name, "\": ", what, " ", k, " is null"));
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k] == nullptr && e.input_bytes[k] > 0) return null_error("input", k);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] == nullptr && e.output_bytes[k] > 0) return null_error("output", k);
  }
  RunBinding binding;
  binding.host_inputs = inputs;
  binding.host_outputs = outputs;
  Transfers transfers;
  absl::Status status = Execute(*impl_, *exe.impl_, binding, scalars, transfers);
  for (int64_t bytes : transfers.host_to_device) CountHostToDevice(bytes);
  for (int64_t bytes : transfers.device_to_host) CountDeviceToHost(bytes);
  return status;
}

absl::Status CudaDevice::Run(const DeviceExecutable& device_executable,
                             std::span<const DeviceBuffer* const> inputs,
                             std::span<DeviceBuffer* const> outputs,
                             std::span<const void* const> scalars) {
  const auto* executable = dynamic_cast<const CudaExecutable*>(&device_executable);
  if (executable == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": executable \"", device_executable.name(), "\" is a ",
                     DeviceKindName(device_executable.kind()), " executable"));
  }
  const CudaExecutable& exe = *executable;
  if (exe.impl_->device != impl_.get()) {
    return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": cuda executable \"",
                                                   exe.name(), "\" was loaded on another device"));
  }
  if (inputs.size() != static_cast<size_t>(exe.num_inputs()) ||
      outputs.size() != static_cast<size_t>(exe.num_outputs())) {
    return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": executable \"", exe.name(),
                                                   "\" takes ", exe.num_inputs(), " inputs and ",
                                                   exe.num_outputs(), " outputs, got ",
                                                   inputs.size(), " and ", outputs.size()));
  }
  auto check = [&](const DeviceBuffer* buffer, const char* what, size_t k,
                   int64_t needed) -> absl::Status {
    const std::string name = absl::StrCat("executable \"", exe.name(), "\" ", what, " ", k);
    if (buffer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": ", name, " is null"));
    }
    return CheckRange(*this, *buffer, 0, needed, name);
  };
  RunBinding binding;
  binding.on_device = true;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (absl::Status s = check(inputs[k], "input", k, exe.input_bytes(static_cast<int>(k)));
        !s.ok()) {
      return s;
    }
    binding.device_inputs.push_back(PointerOf(*inputs[k]));
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (absl::Status s = check(outputs[k], "output", k, exe.output_bytes(static_cast<int>(k)));
        !s.ok()) {
      return s;
    }
    const CUdeviceptr pointer = PointerOf(*outputs[k]);
    // Launches read inputs after earlier ones wrote outputs: aliasing would be a race.
    if (std::find(binding.device_inputs.begin(), binding.device_inputs.end(), pointer) !=
        binding.device_inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": executable \"", exe.name(),
                                                     "\" output ", k,
                                                     " is also one of its inputs"));
    }
    binding.device_outputs.push_back(pointer);
  }
  Transfers transfers;
  absl::Status status = Execute(*impl_, *exe.impl_, binding, scalars, transfers);
  for (int64_t bytes : transfers.host_to_device) CountHostToDevice(bytes);
  return status;
}

}  // namespace kiln::runtime::cuda
