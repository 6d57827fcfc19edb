// The deployable runtime carries no compiler: the DT_NEEDED entries of libkiln_runtime.so and of
// the C example linked against it (paths from CMake) name no LLVM, MLIR, NVRTC, shaderc, glslang
// or SPIR-V library. The ELF is parsed by tests/util/elf_reader.h, not with readelf, so the test
// needs no binutils.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "tests/util/elf_reader.h"

namespace {

// DT_NEEDED strings of an ELF64 shared object or executable.
std::vector<std::string> Needed(const std::string& path) {
  return kiln::test::ReadElf(path).needed;
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
