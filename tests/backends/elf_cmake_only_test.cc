// Linking only what you use: the seed example (kiln::Reference, linked with kiln_frontend alone)
// and the reference-only test program carry no compiler. Neither their DT_NEEDED entries nor
// their symbol tables (.symtab and .dynsym: defined and undefined symbols) name LLVM, shaderc,
// glslang or SPIRV-Tools. The program linking kiln_backend_cpu (and kiln_backend_vulkan) is the
// control: the same checks find LLVM (and shaderc) there. Paths come from CMake; the ELF is
// parsed here (64-bit little-endian), so the test needs no binutils.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Elf {
  std::vector<std::string> needed;   // DT_NEEDED
  std::vector<std::string> symbols;  // .symtab and .dynsym names
};

template <class T>
T At(const std::string& bytes, uint64_t offset) {
  T value{};
  if (offset + sizeof(T) <= bytes.size()) std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::string StringAt(const std::string& bytes, uint64_t offset) {
  if (offset >= bytes.size()) return "";
  return std::string(bytes.c_str() + offset);
}

Elf Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string elf = ss.str();
  Elf result;
  EXPECT_GE(elf.size(), 64u) << path;
  EXPECT_EQ(elf.substr(0, 4),
            "\x7f"
            "ELF")
      << path;
  EXPECT_EQ(elf[4], 2) << path << " is not ELF64";
  const uint64_t shoff = At<uint64_t>(elf, 0x28);
  const uint16_t shentsize = At<uint16_t>(elf, 0x3a), shnum = At<uint16_t>(elf, 0x3c);
  const auto section = [&](uint32_t i) { return shoff + static_cast<uint64_t>(i) * shentsize; };
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t sh = section(i);
    const uint32_t type = At<uint32_t>(elf, sh + 4);
    const uint64_t offset = At<uint64_t>(elf, sh + 0x18), size = At<uint64_t>(elf, sh + 0x20);
    const uint64_t strtab = At<uint64_t>(elf, section(At<uint32_t>(elf, sh + 0x28)) + 0x18);
    if (type == 6) {  // SHT_DYNAMIC: 16-byte entries (tag, value)
      for (uint64_t d = offset; d + 16 <= offset + size; d += 16) {
        const int64_t tag = At<int64_t>(elf, d);
        if (tag == 0) break;
        if (tag == 1) result.needed.push_back(StringAt(elf, strtab + At<uint64_t>(elf, d + 8)));
      }
    } else if (type == 2 || type == 11) {  // SHT_SYMTAB, SHT_DYNSYM: 24-byte Elf64_Sym
      for (uint64_t s = offset; s + 24 <= offset + size; s += 24) {
        const uint32_t name = At<uint32_t>(elf, s);
        if (name != 0) result.symbols.push_back(StringAt(elf, strtab + name));
      }
    }
  }
  return result;
}

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
  const Elf elf = Read(path);
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
  const Elf elf = Read(KILN_LINKED_BINARY);
  EXPECT_THAT(elf.needed, testing::Contains(testing::HasSubstr("LLVM")));
  EXPECT_THAT(elf.symbols, testing::Contains(testing::Truly(IsLlvm)));
  if (KILN_TEST_HAVE_VULKAN) {
    EXPECT_THAT(elf.symbols, testing::Contains(testing::Truly(IsShaderCompiler)));
  }
}

}  // namespace
