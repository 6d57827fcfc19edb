// The Vulkan target of `.kiln` blobs: its plan (runtime/blob.h's plan section "vulkan" and
// payload "vulkan:spirv"), parsed and checked, and run on a VulkanDevice. EnableVulkanBlobs()
// registers it with the blob loader (runtime/blob_target.h), so runtime::blob::Model loads
// blobs on "vulkan" devices (docs/deploy.md, docs/vulkan.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/blob.h"
#include "runtime/vulkan/vulkan_device.h"

namespace kiln::runtime::vulkan {

/// The Vulkan plan of a blob (plan section "vulkan", payload "vulkan:spirv"), validated by
/// ParseBlob once EnableVulkanBlobs() registered the driver: every slot, shader and dispatch
/// index in range, SPIR-V inside the payload and walkable (InspectSpirv: header, instruction
/// bounds, a GLCompute entry point "main", LocalSize), constants inside the weights section, and
/// every capability the SPIR-V declares covered by `features`. BlobView::PlanOf<VulkanPlan>
/// ("vulkan") returns it; SpecFromBlob turns it into a VulkanExecutableSpec.
class VulkanPlan final : public blob::TargetPlan {
 public:
  struct Slot {
    std::string kind;  // "input", "output", "arena", "constant", "error_flag"
    int64_t size = 0;
    int64_t index = 0;           // input / output
    int64_t offset = 0;          // arena
    int64_t weights_offset = 0;  // constant: bytes into the weights section
  };
  struct Shader {
    std::string name;
    uint64_t spirv_offset = 0;  // bytes into the SPIR-V payload (a multiple of 4)
    uint64_t spirv_words = 0;
    int num_buffers = 0;
    int push_constant_bytes = 0;
    uint32_t local_size[3] = {1, 1, 1};  // from the module's OpExecutionMode LocalSize
  };
  struct Dispatch {
    int shader = 0;
    std::vector<int> buffers;  // slot indices, binding order
    std::vector<uint8_t> push_constants;
    uint32_t groups[3] = {1, 1, 1};
    std::string name;
    std::string error_context;
  };
  /// Vulkan device features the shaders need ("shaderInt64", "shaderFloat64", "shaderFloat16",
  /// "shaderInt16", "shaderInt8", "storageBuffer8BitAccess", "storageBuffer16BitAccess").
  std::vector<std::string> features;
  uint32_t api_major = 1, api_minor = 1;  // the Vulkan version the SPIR-V needs
  /// Arena offsets are multiples of this; a device whose minStorageBufferOffsetAlignment does not
  /// divide it cannot run the plan.
  int64_t offset_alignment = 256;
  std::vector<Slot> slots;
  std::vector<Shader> shaders;
  std::vector<Dispatch> dispatches;
  int plan_section = -1;
  int spirv_section = -1;  // the payload "vulkan:spirv"

  /// "vulkan plan (section 4, SPIR-V in section 5): Vulkan 1.1, features [...], ..." and one
  /// line per shader.
  std::string Describe() const override;
};

/// Registers the Vulkan target's driver with the blob loader, so ParseBlob validates Vulkan
/// plans and Model::Load with LoadOptions::device "vulkan[:selector]" works. libkiln_runtime.so
/// calls it when it is loaded; C++ programs linking kiln_runtime_vulkan call it once.
/// Idempotent.
void EnableVulkanBlobs();

/// OK when `device` can run `plan`: its Vulkan version, every feature of plan.features, the
/// storage-buffer offset alignment, each shader's workgroup size and buffer count, each dispatch's
/// group counts. Otherwise FailedPrecondition naming the device and what it lacks, e.g.
/// "vulkan device \"llvmpipe\" lacks shaderFloat64, which the blob's Vulkan section requires".
absl::Status CheckDeviceCanRun(const VulkanPlan& plan, const DeviceInfo& device);

/// The plan as a VulkanExecutableSpec: SPIR-V copied out of the blob's SPIR-V payload (and
/// checked with CheckSpirv), constants out of its weights section.
absl::StatusOr<VulkanExecutableSpec> SpecFromBlob(const blob::BlobView& view,
                                                  const VulkanPlan& plan,
                                                  std::span<const std::byte> bytes);

}  // namespace kiln::runtime::vulkan
