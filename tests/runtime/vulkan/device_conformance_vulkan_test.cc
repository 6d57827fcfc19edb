// The Device conformance suite (tests/runtime/device_conformance.h) on the Vulkan driver, in
// both memory modes: unified (buffers mapped, host_data() set) and staging (every copy through a
// staging buffer and a submitted vkCmdCopyBuffer), as lavapipe runs them.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/vulkan/vulkan_device.h"
#include "tests/runtime/device_conformance.h"
#include "tests/runtime/vulkan/add.spv.h"

namespace kiln::runtime::conformance {
namespace {

using vulkan::VulkanDevice;

// The device of one staging mode and slot ("device" or "other"), opened once per process and
// never destroyed (as in vulkan_device_test.cc).
VulkanDevice* Opened(int staging, int slot) {
  static std::mutex mutex;
  static auto* devices = new std::map<std::pair<int, int>, std::shared_ptr<VulkanDevice>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<VulkanDevice>& device = (*devices)[{staging, slot}];
  if (device == nullptr) {
    absl::StatusOr<std::shared_ptr<VulkanDevice>> opened =
        VulkanDevice::Open("", {.loader = {}, .staging = staging});
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return nullptr;
    device = *opened;
  }
  return device.get();
}

DeviceUnderTest VulkanUnderTest(int staging) {
  DeviceUnderTest vulkan;
  vulkan.name = staging == 1 ? "vulkan_staging" : "vulkan";
  vulkan.kind = DeviceKind::kVulkan;
  vulkan.device = [staging] { return Opened(staging, 0); };
  vulkan.other = [staging] { return Opened(staging, 1); };
  vulkan.make_add = [](Device& device,
                       int64_t n) -> absl::StatusOr<std::shared_ptr<const DeviceExecutable>> {
    auto& vulkan_device = dynamic_cast<VulkanDevice&>(device);
    vulkan::VulkanExecutableSpec spec;
    spec.name = "add";
    spec.num_inputs = 2;
    spec.num_outputs = 1;
    spec.slots = {Slot::Input(0, n * 4), Slot::Input(1, n * 4), Slot::Output(0, n * 4)};
    spec.shaders = {{.name = "add",
                     .spirv = std::vector<uint32_t>(std::begin(kaddSpirv), std::end(kaddSpirv)),
                     .num_buffers = 3,
                     .push_constant_bytes = 4}};
    const auto count = static_cast<uint32_t>(n);
    std::vector<std::byte> push(4);
    std::memcpy(push.data(), &count, 4);
    spec.dispatches = {{.shader = 0,
                        .buffer_slots = {0, 1, 2},
                        .push_constants = push,
                        .groups = {(count + 63) / 64, 1, 1},
                        .name = "add",
                        .error_context = {}}};
    absl::StatusOr<std::shared_ptr<const vulkan::VulkanExecutable>> exe =
        vulkan_device.Load(std::move(spec));
    if (!exe.ok()) return exe.status();
    return std::shared_ptr<const DeviceExecutable>(*std::move(exe));
  };
  return vulkan;
}

INSTANTIATE_TEST_SUITE_P(Vulkan, DeviceConformance,
                         ::testing::Values(VulkanUnderTest(0), VulkanUnderTest(1)), Name);

}  // namespace
}  // namespace kiln::runtime::conformance
