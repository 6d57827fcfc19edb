// Linking only what you use: the seed example (kiln::Reference, linked with kiln_frontend alone)
// and the reference-only test program carry no compiler. Neither their DT_NEEDED entries nor
// their symbol tables (.symtab and .dynsym: defined and undefined symbols) name LLVM, shaderc,
// glslang or SPIRV-Tools. The program linking kiln_backend_cpu (and kiln_backend_vulkan) is the
// control: the same checks find LLVM (and shaderc) there. Paths come from CMake; the ELF is
// parsed by tests/util/elf_reader.h, so the test needs no binutils.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/util/elf_reader.h"

namespace {

using kiln::test::ElfFile;
using kiln::test::ReadElf;

bool Contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// LLVM's C++ (namespace llvm, mangled "4llvm") and C (LLVM*) symbols, its shared library.
bool IsLlvm(const std::string& name) {
  return Contains(name, "4llvm") || name.rfind("LLVM", 0) == 0;
}
// shaderc, glslang and SPIRV-Tools (C++ namespaces, the C APIs shaderc_* and spv*).
bool IsShaderCompiler(const std::string& name) {
  return Contains(name, "shaderc") || Contains(name, "7glslang") || Contains(name, "8spvtools") ||
         (name.rfind("spv", 0) == 0 && name.size() > 3 && name[3] >= 'A' && name[3] <= 'Z');
}
bool IsCompilerLibrary(const std::string& needed) {
  for (const char* banned : {"LLVM", "llvm", "shaderc", "glslang", "SPIRV", "spirv"}) {
    if (Contains(needed, banned)) return true;
  }
  return false;
}

void ExpectNoCompiler(const std::string& path) {
  const ElfFile elf = ReadElf(path);
  EXPECT_FALSE(elf.needed.empty()) << path << ": no DT_NEEDED entries (not a dynamic ELF?)";
  // A stripped binary would pass the symbol checks vacuously.
  ASSERT_GT(elf.symbols.size(), 1000u) << path << ": no symbol table";
  for (const std::string& lib : elf.needed) {
    EXPECT_FALSE(IsCompilerLibrary(lib)) << path << " needs " << lib;
  }
  int reported = 0;
  for (const std::string& name : elf.symbols) {
    if ((IsLlvm(name) || IsShaderCompiler(name)) && reported++ < 10) {
      ADD_FAILURE() << path << " has the compiler symbol " << name;
    }
  }
}

TEST(BackendsElfTest, SeedExampleLinksNoCompiler) { ExpectNoCompiler(KILN_SEED_BINARY); }

TEST(BackendsElfTest, ReferenceOnlyProgramLinksNoCompiler) {
  ExpectNoCompiler(KILN_REFERENCE_ONLY_BINARY);
}

// The checks work: the program linking the backends does have LLVM (and shaderc).
TEST(BackendsElfTest, DetectsTheLinkedBackends) {
  const ElfFile elf = ReadElf(KILN_LINKED_BINARY);
  EXPECT_THAT(elf.needed, testing::Contains(testing::HasSubstr("LLVM")));
  EXPECT_THAT(elf.symbols, testing::Contains(testing::Truly(IsLlvm)));
  if (KILN_TEST_HAVE_VULKAN) {
    EXPECT_THAT(elf.symbols, testing::Contains(testing::Truly(IsShaderCompiler)));
  }
}

}  // namespace
