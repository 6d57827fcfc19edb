// A structural check of SPIR-V before it reaches the Vulkan driver. Shaders may come from an AOT
// blob (untrusted bytes), and drivers do not promise to survive malformed modules, so Load checks
// what a driver reads first: the header, that every instruction lies inside the module, and that
// there is a GLCompute entry point named "main". It is not a validator (SPIRV-Tools is, in
// codegen/vulkan): a well-formed but semantically wrong module still goes to the driver.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace kiln::runtime::vulkan {

/// OK, or InvalidArgument naming the word offset at fault: "not SPIR-V: word 0 is 0x...",
/// "the instruction at word 12 (opcode 15) has 9 words but the module ends at word 17", ...
absl::Status CheckSpirv(std::span<const uint32_t> words);

}  // namespace kiln::runtime::vulkan
