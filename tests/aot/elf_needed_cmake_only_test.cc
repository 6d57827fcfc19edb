// The deployable runtime carries no compiler: the DT_NEEDED entries of libkiln_runtime.so and of
// the C example linked against it (paths from CMake) name no LLVM, MLIR, NVRTC, shaderc, glslang
// or SPIR-V library. The ELF is parsed here (64-bit little-endian), not with readelf, so the test
// needs no binutils.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

template <class T>
T At(const std::string& bytes, uint64_t offset) {
  T value{};
  if (offset + sizeof(T) <= bytes.size()) std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// DT_NEEDED strings of an ELF64 shared object or executable.
std::vector<std::string> Needed(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string elf = ss.str();
  EXPECT_GE(elf.size(), 64u) << path;
  EXPECT_EQ(elf.substr(0, 4),
            "\x7f"
            "ELF")
      << path;
  EXPECT_EQ(elf[4], 2) << path << " is not ELF64";
  const uint64_t shoff = At<uint64_t>(elf, 0x28);
  const uint16_t shentsize = At<uint16_t>(elf, 0x3a), shnum = At<uint16_t>(elf, 0x3c);
  std::vector<std::string> needed;
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t sh = shoff + static_cast<uint64_t>(i) * shentsize;
    if (At<uint32_t>(elf, sh + 4) != 6) continue;  // SHT_DYNAMIC
    const uint64_t offset = At<uint64_t>(elf, sh + 0x18), size = At<uint64_t>(elf, sh + 0x20);
    const uint32_t link = At<uint32_t>(elf, sh + 0x28);
    const uint64_t strtab =
        At<uint64_t>(elf, shoff + static_cast<uint64_t>(link) * shentsize + 0x18);
    for (uint64_t d = offset; d + 16 <= offset + size; d += 16) {
      const int64_t tag = At<int64_t>(elf, d);
      if (tag == 0) break;
      if (tag == 1) needed.emplace_back(elf.c_str() + strtab + At<uint64_t>(elf, d + 8));
    }
  }
  return needed;
}

void ExpectNoCompiler(const std::string& path) {
  const std::vector<std::string> needed = Needed(path);
  EXPECT_FALSE(needed.empty()) << path << ": no DT_NEEDED entries found (not a dynamic ELF?)";
  for (const std::string& lib : needed) {
    std::string lower = lib;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    for (const char* banned : {"llvm", "mlir", "nvrtc", "shaderc", "glslang", "spirv", "clang"}) {
      EXPECT_EQ(lower.find(banned), std::string::npos) << path << " needs " << lib;
    }
  }
}

TEST(ElfNeededTest, RuntimeLibraryNeedsNoCompiler) { ExpectNoCompiler(KILN_RUNTIME_SO); }

TEST(ElfNeededTest, CExampleNeedsNoCompiler) {
  ExpectNoCompiler(KILN_C_EXAMPLE);
  EXPECT_THAT(Needed(KILN_C_EXAMPLE), testing::Contains("libkiln_runtime.so"));
}

// The check itself works: the compiler library does name LLVM.
TEST(ElfNeededTest, DetectsLlvm) {
  EXPECT_THAT(Needed(KILN_LLVM_SO), testing::Contains(testing::HasSubstr("LLVM")));
}

}  // namespace
