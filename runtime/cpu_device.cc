#include "runtime/cpu_device.h"

#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {

class CpuDeviceBuffer final : public DeviceBuffer {
 public:
  CpuDeviceBuffer(Device& device, Buffer storage)
      : DeviceBuffer(device, storage.size()), storage_(std::move(storage)) {}

  std::byte* host_data() const override { return storage_.data(); }

 private:
  Buffer storage_;
};

}  // namespace

CpuDevice::CpuDevice(Options options)
    : index_(options.index),
      owned_threads_(options.threads == nullptr && options.num_threads > 0
                         ? std::make_unique<ThreadPool>(options.num_threads)
                         : nullptr),
      threads_(options.threads != nullptr  ? options.threads
               : owned_threads_ != nullptr ? owned_threads_.get()
                                           : &DefaultThreadPool()),
      buffers_(options.buffers != nullptr ? options.buffers : &DefaultBufferPool()) {}

CpuDevice::~CpuDevice() = default;

CpuDevice& CpuDevice::Default() {
  static CpuDevice* const device = new CpuDevice();
  return *device;
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CpuDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": cannot allocate ", bytes, " bytes"));
  }
  absl::StatusOr<Buffer> storage = buffers_->Allocate(bytes);
  if (!storage.ok()) return storage.status();
  return std::make_unique<CpuDeviceBuffer>(*this, *std::move(storage));
}

absl::Status CpuDevice::CheckRange(const DeviceBuffer& buffer, int64_t offset, int64_t bytes,
                                   const char* what) const {
  if (&buffer.device() != this) {
    return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": ", what,
                                                   " got a buffer of another device (",
                                                   buffer.device().id().ToString(), ")"));
  }
  if (offset < 0 || bytes < 0 || offset > buffer.size() - bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": ", what, " of ", bytes, " bytes at offset ", offset,
                     " does not fit a buffer of ", buffer.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToDevice(std::span<const std::byte> source, DeviceBuffer& destination,
                                     int64_t offset) {
  const auto bytes = static_cast<int64_t>(source.size());
  if (absl::Status status = CheckRange(destination, offset, bytes, "CopyToDevice"); !status.ok()) {
    return status;
  }
  if (bytes > 0) {
    std::memcpy(destination.host_data() + offset, source.data(), source.size());
    CountHostToDevice(bytes);
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyFromDevice(const DeviceBuffer& source, int64_t offset,
                                       std::span<std::byte> destination) {
  const auto bytes = static_cast<int64_t>(destination.size());
  if (absl::Status status = CheckRange(source, offset, bytes, "CopyFromDevice"); !status.ok()) {
    return status;
  }
  if (bytes > 0) {
    std::memcpy(destination.data(), source.host_data() + offset, destination.size());
    CountDeviceToHost(bytes);
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::Run(const DeviceExecutable& device_executable,
                            std::span<const DeviceBuffer* const> inputs,
                            std::span<DeviceBuffer* const> outputs,
                            std::span<const void* const> scalars) {
  const auto* cpu_executable = dynamic_cast<const Executable*>(&device_executable);
  if (cpu_executable == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": executable \"", device_executable.name(), "\" is a ",
                     DeviceKindName(device_executable.kind()), " executable"));
  }
  const Executable& executable = *cpu_executable;
  if (inputs.size() != static_cast<size_t>(executable.num_inputs()) ||
      outputs.size() != static_cast<size_t>(executable.num_outputs())) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": executable \"", executable.name(), "\" takes ",
                     executable.num_inputs(), " inputs and ", executable.num_outputs(),
                     " outputs, got ", inputs.size(), " and ", outputs.size()));
  }
  auto check = [&](const DeviceBuffer* buffer, const char* what, int k,
                   int64_t needed) -> absl::Status {
    const std::string name = absl::StrCat("executable \"", executable.name(), "\" ", what, " ", k);
    if (buffer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": ", name, " is null"));
    }
    return CheckRange(*buffer, 0, needed, name.c_str());
  };
  absl::InlinedVector<const void*, 8> input_ptrs(inputs.size());
  absl::InlinedVector<void*, 8> output_ptrs(outputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int index = static_cast<int>(k);
    if (absl::Status status = check(inputs[k], "input", index, executable.input_bytes(index));
        !status.ok()) {
      return status;
    }
    input_ptrs[k] = inputs[k]->host_data();
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int index = static_cast<int>(k);
    if (absl::Status status = check(outputs[k], "output", index, executable.output_bytes(index));
        !status.ok()) {
      return status;
    }
    output_ptrs[k] = outputs[k]->host_data();
  }
  return RunHost(executable, input_ptrs, output_ptrs, scalars);
}

}  // namespace kiln::runtime
