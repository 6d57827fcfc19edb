// GLSL → SPIR-V in process: shaderc (glslang) compiles, SPIRV-Tools validates (an invalid module
// is a compiler bug: the error carries the GLSL and the disassembly), the SPIRV-Tools performance
// passes optimise, and the result is validated again. Compiled modules are cached in memory by
// the hash of their source (checked against the source itself), since glslang's first compile
// in a process costs ~130-350 ms and each later one a few milliseconds.
//
// shaderc, glslang and SPIRV-Tools are linked statically and stay inside this file's .cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::codegen::vulkan {

struct SpirvModule {
  std::vector<uint32_t> words;
};

struct SpirvCacheStats {
  int64_t compiles = 0;  // shaderc invocations
  int64_t hits = 0;      // served from the cache
};

/// Compiles a GLSL compute shader (entry point main) for Vulkan 1.1 (SPIR-V 1.3). `name` appears
/// in errors. A GLSL error is Internal (the emitter wrote invalid GLSL) with the compiler's
/// message and the numbered source; a validation failure is Internal with the validator's message,
/// the GLSL and the disassembly.
absl::StatusOr<std::shared_ptr<const SpirvModule>> CompileGlslToSpirv(const std::string& glsl,
                                                                      const std::string& name);

/// Runs the SPIRV-Tools validator for Vulkan 1.1 (OK, or InvalidArgument with its message).
absl::Status ValidateSpirv(const std::vector<uint32_t>& words);

/// SPIR-V assembly text (friendly names, indented), or an error text.
std::string DisassembleSpirv(const std::vector<uint32_t>& words);

SpirvCacheStats GetSpirvCacheStats();

}  // namespace kiln::codegen::vulkan
