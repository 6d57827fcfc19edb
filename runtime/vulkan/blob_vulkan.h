// Runs a `.kiln` blob's Vulkan section (runtime/blob.h VulkanPlan) on a VulkanDevice: the
// runtime::blob::Model side of "vulkan" devices (docs/deploy.md, docs/vulkan.md).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/blob.h"
#include "runtime/vulkan/vulkan_device.h"

namespace kiln::runtime::vulkan {

/// Installs the Vulkan runner into runtime::blob (SetVulkanRunnerFactory), so Model::Load with
/// LoadOptions::device "vulkan[:selector]" works. libkiln_runtime.so calls it when it is loaded;
/// C++ programs linking kiln_runtime_vulkan call it once. Idempotent.
void EnableVulkanBlobs();

/// OK when `device` can run `plan`: its Vulkan version, every feature of plan.features, the
/// storage-buffer offset alignment, each shader's workgroup size and buffer count, each dispatch's
/// group counts. Otherwise FailedPrecondition naming the device and what it lacks, e.g.
/// "vulkan device \"llvmpipe\" lacks shaderFloat64, which the blob's Vulkan section requires".
absl::Status CheckDeviceCanRun(const blob::VulkanPlan& plan, const DeviceInfo& device);

/// The plan as a VulkanExecutableSpec: SPIR-V copied out of the blob's SPIR-V section (and
/// checked with CheckSpirv), constants out of its weights section.
absl::StatusOr<VulkanExecutableSpec> SpecFromBlob(const blob::BlobView& view,
                                                  std::span<const std::byte> bytes);

}  // namespace kiln::runtime::vulkan
