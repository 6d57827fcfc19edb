// libFuzzer target for runtime::vulkan::CheckSpirv, the check that stands between SPIR-V from an
// AOT blob (untrusted bytes) and the Vulkan driver. Input: the bytes as little-endian words (a
// trailing partial word is dropped, as a blob reader would refuse it).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/vulkan/spirv_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint32_t> words(size / 4);
  if (!words.empty()) std::memcpy(words.data(), data, words.size() * 4);
  (void)kiln::runtime::vulkan::CheckSpirv(words).ok();
  return 0;
}
