// The Device conformance suite (tests/runtime/device_conformance.h) on the CUDA driver: device 0,
// with a second CudaDevice opened on the same GPU as the "other" device (its buffers are foreign
// to the first). Every case skips with DriverAvailable()'s message where there is no GPU.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/cuda/cuda_device.h"
#include "tests/runtime/cuda/test_kernels_ptx.h"
#include "tests/runtime/device_conformance.h"

namespace kiln::runtime::conformance {
namespace {

using cuda::CudaDevice;

// Device "slot" 0 or 1, opened once per process and never destroyed.
CudaDevice* Opened(int slot) {
  static std::mutex mutex;
  static auto* devices = new std::map<int, std::shared_ptr<CudaDevice>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<CudaDevice>& device = (*devices)[slot];
  if (device == nullptr) {
    absl::StatusOr<std::shared_ptr<CudaDevice>> opened = CudaDevice::Open(0);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return nullptr;
    device = *opened;
  }
  return device.get();
}

DeviceUnderTest CudaUnderTest() {
  DeviceUnderTest under_test;
  under_test.name = "cuda";
  under_test.kind = DeviceKind::kCuda;
  under_test.available = [] { return cuda::DriverAvailable(); };
  under_test.device = [] { return Opened(0); };
  under_test.other = [] { return Opened(1); };
  under_test.make_add = [](Device& device,
                           int64_t n) -> absl::StatusOr<std::shared_ptr<const DeviceExecutable>> {
    auto& cuda_device = dynamic_cast<CudaDevice&>(device);
    cuda::CudaExecutableSpec spec;
    spec.name = "add";
    spec.num_inputs = 2;
    spec.num_outputs = 1;
    std::vector<std::byte> count(sizeof(int64_t));
    std::memcpy(count.data(), &n, sizeof(n));
    spec.slots = {Slot::Input(0, n * 4), Slot::Input(1, n * 4), Slot::Output(0, n * 4),
                  Slot::Constant(std::move(count))};
    spec.modules = {cuda::testing::kTestKernelsPtx};
    spec.kernels = {
        {.name = "kiln_add", .module = 0, .num_buffers = 4, .max_dynamic_shared_bytes = 0}};
    const auto blocks = static_cast<uint32_t>((n + 127) / 128);
    spec.launches = {{.kernel = 0,
                      .buffer_slots = {0, 1, 2, 3},
                      .grid = {blocks, 1, 1},
                      .block = {128, 1, 1},
                      .shared_bytes = 0,
                      .name = "add",
                      .error_context = {}}};
    absl::StatusOr<std::shared_ptr<const cuda::CudaExecutable>> exe =
        cuda_device.Load(std::move(spec));
    if (!exe.ok()) return exe.status();
    return std::shared_ptr<const DeviceExecutable>(*std::move(exe));
  };
  return under_test;
}

INSTANTIATE_TEST_SUITE_P(Cuda, DeviceConformance, ::testing::Values(CudaUnderTest()), Name);

}  // namespace
}  // namespace kiln::runtime::conformance
