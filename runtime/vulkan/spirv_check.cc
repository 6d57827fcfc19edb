#include "runtime/vulkan/spirv_check.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::runtime::vulkan {
namespace {

constexpr uint32_t kMagic = 0x07230203;
constexpr uint32_t kSwappedMagic = 0x03022307;
constexpr uint32_t kOpEntryPoint = 15;
constexpr uint32_t kOpExecutionMode = 16;
constexpr uint32_t kOpCapability = 17;
constexpr uint32_t kExecutionModelGLCompute = 5;
constexpr uint32_t kExecutionModeLocalSize = 17;
constexpr int kHeaderWords = 5;

// SPIR-V capabilities that need a device feature, and the feature's Vulkan name.
struct CapabilityFeature {
  uint32_t capability;
  const char* feature;
};
constexpr CapabilityFeature kCapabilityFeatures[] = {
    {9, "shaderFloat16"},                // Float16
    {10, "shaderFloat64"},               // Float64
    {11, "shaderInt64"},                 // Int64
    {22, "shaderInt16"},                 // Int16
    {39, "shaderInt8"},                  // Int8
    {4433, "storageBuffer16BitAccess"},  // StorageBuffer16BitAccess
    {4448, "storageBuffer8BitAccess"},   // StorageBuffer8BitAccess
};

std::string Hex(uint32_t value) { return absl::StrCat("0x", absl::Hex(value, absl::kZeroPad8)); }

}  // namespace

absl::StatusOr<SpirvInfo> InspectSpirv(std::span<const uint32_t> words) {
  auto error = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (words.size() < kHeaderWords) {
    return error("not SPIR-V: ", words.size(), " words, shorter than the 5-word header");
  }
  if (words[0] == kSwappedMagic) {
    return error("SPIR-V with the opposite byte order (magic ", Hex(words[0]),
                 "): kiln takes SPIR-V words in host order");
  }
  if (words[0] != kMagic) {
    return error("not SPIR-V: word 0 is ", Hex(words[0]), ", not the magic number ", Hex(kMagic));
  }
  const uint32_t version = words[1];
  const uint32_t major = version >> 16 & 0xff, minor = version >> 8 & 0xff;
  if ((version & 0xff0000ff) != 0 || major != 1 || minor > 6) {
    return error("SPIR-V version word ", Hex(version), " is not a version 1.0 .. 1.6");
  }
  if (words[3] == 0) return error("SPIR-V id bound (word 3) is 0");
  if (words[4] != 0) return error("SPIR-V schema (word 4) is ", words[4], ", not 0");

  SpirvInfo info;
  std::vector<std::string> entry_points;
  bool found = false;
  // SPIR-V's logical layout puts every OpEntryPoint before every OpExecutionMode, so main's id
  // is known when its LocalSize comes.
  uint32_t main_id = 0;
  for (size_t at = kHeaderWords; at < words.size();) {
    const uint32_t count = words[at] >> 16;
    const uint32_t opcode = words[at] & 0xffff;
    if (count == 0) {
      return error("the instruction at word ", at, " (opcode ", opcode, ") has word count 0");
    }
    if (count > words.size() - at) {
      return error("the instruction at word ", at, " (opcode ", opcode, ") has ", count,
                   " words but the module ends at word ", words.size());
    }
    if (opcode == kOpEntryPoint) {
      // OpEntryPoint model id "name" interface...: the name is a nul-terminated UTF-8 string
      // packed little-endian into the words from at + 3 on.
      if (count < 4) return error("the OpEntryPoint at word ", at, " has ", count, " words");
      std::string name;
      bool terminated = false;
      for (size_t w = at + 3; w < at + count && !terminated; ++w) {
        for (int byte = 0; byte < 4; ++byte) {
          const char c = static_cast<char>(words[w] >> (8 * byte) & 0xff);
          if (c == '\0') {
            terminated = true;
            break;
          }
          name += c;
        }
      }
      if (!terminated) {
        return error("the OpEntryPoint at word ", at, " has a name without its terminating nul");
      }
      const bool compute = words[at + 1] == kExecutionModelGLCompute;
      if (compute && name == "main" && !found) {
        found = true;
        main_id = words[at + 2];
      }
      entry_points.push_back(absl::StrCat("\"", absl::CHexEscape(name), "\" (",
                                          compute ? "GLCompute" : "execution model ",
                                          compute ? "" : absl::StrCat(words[at + 1]), ")"));
    } else if (opcode == kOpCapability && count == 2) {
      info.capabilities.push_back(words[at + 1]);
    } else if (opcode == kOpExecutionMode && count == 6 &&
               words[at + 2] == kExecutionModeLocalSize && found && words[at + 1] == main_id) {
      for (int d = 0; d < 3; ++d) info.local_size[d] = words[at + 3 + d];
    }
    at += count;
  }
  if (!found) {
    return error("the SPIR-V module has no GLCompute entry point \"main\" (entry points: ",
                 entry_points.empty() ? "none" : absl::StrJoin(entry_points, ", "), ")");
  }
  return info;
}

absl::Status CheckSpirv(std::span<const uint32_t> words) { return InspectSpirv(words).status(); }

const char* VulkanFeatureForCapability(uint32_t capability) {
  for (const CapabilityFeature& c : kCapabilityFeatures) {
    if (c.capability == capability) return c.feature;
  }
  return nullptr;
}

bool IsVulkanFeature(const std::string& name) {
  for (const CapabilityFeature& c : kCapabilityFeatures) {
    if (name == c.feature) return true;
  }
  return false;
}

}  // namespace kiln::runtime::vulkan
