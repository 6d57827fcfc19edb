// A minimal ELF64 (little-endian) reader for tests that check what a built binary links:
// parsed here rather than with readelf, so that those tests need no binutils. Header-only: it
// needs nothing but gtest.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

/// What ReadElf finds in an ELF64 file.
struct ElfFile {
  std::vector<std::string> needed;   ///< the DT_NEEDED entries of .dynamic
  std::vector<std::string> symbols;  ///< the named symbols of .symtab and .dynsym
};

namespace elf_internal {

// A little-endian value at `offset`; zero past the end, so that a truncated file reads as
// empty tables instead of out of bounds.
template <class T>
T At(const std::string& bytes, uint64_t offset) {
  T value{};
  if (offset + sizeof(T) <= bytes.size()) std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

inline std::string StringAt(const std::string& bytes, uint64_t offset) {
  if (offset >= bytes.size()) return "";
  return std::string(bytes.c_str() + offset);
}

}  // namespace elf_internal

/// Reads the file at `path`; a file that is not ELF64 fails the current test (and reads as
/// whatever its bytes give, usually nothing).
inline ElfFile ReadElf(const std::string& path) {
  using elf_internal::At;
  using elf_internal::StringAt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string elf = ss.str();
  ElfFile result;
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

}  // namespace kiln::test
