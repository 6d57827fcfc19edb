#include "codegen/vulkan/spirv.h"

#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "shaderc/shaderc.hpp"
#include "spirv-tools/libspirv.hpp"
#include "spirv-tools/optimizer.hpp"
#include "xxhash.h"

namespace kiln::codegen::vulkan {
namespace {

constexpr spv_target_env kTargetEnv = SPV_ENV_VULKAN_1_1;

std::string Numbered(const std::string& source) {
  std::string out;
  int line = 1;
  for (absl::string_view text : absl::StrSplit(source, '\n')) {
    absl::StrAppend(&out, line++, ": ", text, "\n");
  }
  return out;
}

struct Cache {
  std::mutex mutex;
  // Hash of the GLSL → (source, module); a collision costs a compile, never a wrong module.
  std::unordered_multimap<uint64_t, std::pair<std::string, std::shared_ptr<const SpirvModule>>>
      entries;
  SpirvCacheStats stats;
  shaderc::Compiler* compiler = nullptr;
};

Cache& GetCache() {
  static Cache* cache = new Cache();
  return *cache;
}

// Runs `tools` on `words`, collecting the messages it reports.
template <typename F>
absl::Status WithMessages(spvtools::SpirvTools& tools, F&& run) {
  std::string messages;
  tools.SetMessageConsumer(
      [&](spv_message_level_t, const char*, const spv_position_t& position, const char* message) {
        absl::StrAppend(&messages, "word ", position.index, ": ", message, "\n");
      });
  if (!run()) return absl::InvalidArgumentError(messages.empty() ? "failed" : messages);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSpirv(const std::vector<uint32_t>& words) {
  spvtools::SpirvTools tools(kTargetEnv);
  spvtools::ValidatorOptions options;
  // std430 layouts in storage buffers are what glslang emits; nothing to relax.
  return WithMessages(tools, [&] { return tools.Validate(words.data(), words.size(), options); });
}

std::string DisassembleSpirv(const std::vector<uint32_t>& words) {
  spvtools::SpirvTools tools(kTargetEnv);
  std::string text;
  absl::Status status = WithMessages(tools, [&] {
    return tools.Disassemble(
        words, &text, SPV_BINARY_TO_TEXT_OPTION_FRIENDLY_NAMES | SPV_BINARY_TO_TEXT_OPTION_INDENT);
  });
  if (!status.ok()) return absl::StrCat("; disassembly failed: ", status.message());
  return text;
}

absl::StatusOr<std::shared_ptr<const SpirvModule>> CompileGlslToSpirv(const std::string& glsl,
                                                                      const std::string& name) {
  Cache& cache = GetCache();
  const uint64_t key = XXH3_64bits(glsl.data(), glsl.size());
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto [begin, end] = cache.entries.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    if (it->second.first == glsl) {
      ++cache.stats.hits;
      return it->second.second;
    }
  }
  ++cache.stats.compiles;
  if (cache.compiler == nullptr) cache.compiler = new shaderc::Compiler();
  shaderc::CompileOptions options;
  options.SetTargetEnvironment(shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
  options.SetTargetSpirv(shaderc_spirv_version_1_3);
  options.SetSourceLanguage(shaderc_source_language_glsl);
  // SPIRV-Tools' performance passes run below, after validating glslang's output as it is.
  options.SetOptimizationLevel(shaderc_optimization_level_zero);
  shaderc::SpvCompilationResult result =
      cache.compiler->CompileGlslToSpv(glsl, shaderc_compute_shader, name.c_str(), options);
  if (result.GetCompilationStatus() != shaderc_compilation_status_success) {
    return absl::InternalError(absl::StrCat("vulkan: GLSL of kernel ", name,
                                            " does not compile (a kiln bug):\n",
                                            result.GetErrorMessage(), "\n", Numbered(glsl)));
  }
  std::vector<uint32_t> words(result.cbegin(), result.cend());
  if (absl::Status s = ValidateSpirv(words); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("vulkan: SPIR-V of kernel ", name, " is invalid (a kiln bug): ", s.message(),
                     "\nGLSL:\n", Numbered(glsl), "\nSPIR-V:\n", DisassembleSpirv(words)));
  }
  spvtools::Optimizer optimizer(kTargetEnv);
  std::string opt_messages;
  optimizer.SetMessageConsumer(
      [&](spv_message_level_t, const char*, const spv_position_t&, const char* message) {
        absl::StrAppend(&opt_messages, message, "\n");
      });
  optimizer.RegisterPerformancePasses();
  std::vector<uint32_t> optimized;
  if (!optimizer.Run(words.data(), words.size(), &optimized)) {
    return absl::InternalError(absl::StrCat("vulkan: the SPIR-V optimiser failed on kernel ", name,
                                            ": ", opt_messages, "\nSPIR-V:\n",
                                            DisassembleSpirv(words)));
  }
  if (absl::Status s = ValidateSpirv(optimized); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("vulkan: optimised SPIR-V of kernel ", name, " is invalid: ", s.message(),
                     "\nGLSL:\n", Numbered(glsl), "\nSPIR-V:\n", DisassembleSpirv(optimized)));
  }
  auto module = std::make_shared<const SpirvModule>(SpirvModule{std::move(optimized)});
  cache.entries.emplace(key, std::make_pair(glsl, module));
  return module;
}

SpirvCacheStats GetSpirvCacheStats() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.stats;
}

}  // namespace kiln::codegen::vulkan
