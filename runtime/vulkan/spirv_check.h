// The runtime's one SPIR-V walker: a structural check of SPIR-V before it reaches the Vulkan
// driver, and the facts the blob loader and the AOT writer read from a module (capabilities,
// workgroup size). Shaders may come from an AOT blob (untrusted bytes), and drivers do not
// promise to survive malformed modules, so Load checks what a driver reads first: the header,
// that every instruction lies inside the module, and that there is a GLCompute entry point named
// "main". It is not a validator (SPIRV-Tools is, in codegen/vulkan): a well-formed but
// semantically wrong module still goes to the driver.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime::vulkan {

/// What one walk over a module found.
struct SpirvInfo {
  std::vector<uint32_t> capabilities;  // every OpCapability, in order
  /// OpExecutionMode LocalSize of the "main" entry point; all 0 when the module has none.
  uint32_t local_size[3] = {0, 0, 0};
};

/// Walks `words` once (never past them): the header, every instruction, the GLCompute entry
/// point "main". InvalidArgument naming the word offset at fault: "not SPIR-V: word 0 is
/// 0x...", "the instruction at word 12 (opcode 15) has 9 words but the module ends at word 17",
/// "the SPIR-V module has no GLCompute entry point \"main\" (entry points: ...)".
absl::StatusOr<SpirvInfo> InspectSpirv(std::span<const uint32_t> words);

/// InspectSpirv's verdict alone.
absl::Status CheckSpirv(std::span<const uint32_t> words);

/// The Vulkan device feature a SPIR-V capability needs (Float64 → "shaderFloat64", Int64,
/// Float16, Int16, Int8, StorageBuffer8/16BitAccess); nullptr for the others (Shader, ...).
const char* VulkanFeatureForCapability(uint32_t capability);
/// True for the feature names VulkanFeatureForCapability returns.
bool IsVulkanFeature(const std::string& name);

}  // namespace kiln::runtime::vulkan
