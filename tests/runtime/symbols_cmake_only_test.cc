// The deployable runtime knows nothing of the compiler: libkiln_runtime.so and every object of
// the static kiln_runtime archive (libkiln_runtime_core.a) define and reference no kiln::ir::
// symbol, and kiln_ir is not in the link of either (the transitive link closure CMake resolved,
// written by tests/runtime/CMakeLists.txt). Symbols come from `nm -C` (binutils); paths from CMake.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The lines of `nm -C <flags> <path>` that name a kiln::ir:: entity, defined or undefined.
std::vector<std::string> IrSymbols(const std::string& flags, const std::string& path,
                                   int* lines_read) {
  const std::string command = "nm -C " + flags + " '" + path + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  std::vector<std::string> found;
  *lines_read = 0;
  if (pipe == nullptr) return found;
  std::array<char, 4096> line;
  while (fgets(line.data(), line.size(), pipe) != nullptr) {
    ++*lines_read;
    const std::string text(line.data());
    if (text.find("kiln::ir::") != std::string::npos) found.push_back(text);
  }
  EXPECT_EQ(pclose(pipe), 0) << command;
  return found;
}

void ExpectNoIr(const std::string& flags, const std::string& path) {
  int lines = 0;
  const std::vector<std::string> found = IrSymbols(flags, path, &lines);
  // A library with no symbols at all would pass vacuously: these all define kiln:: code.
  EXPECT_GT(lines, 10) << path << ": nm listed almost nothing";
  EXPECT_THAT(found, testing::IsEmpty()) << path << " (nm -C " << flags << ")";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(RuntimeSymbolsTest, SharedLibraryHasNoIrSymbols) {
  ExpectNoIr("", KILN_RUNTIME_SO);    // .symtab: every symbol, local ones included
  ExpectNoIr("-D", KILN_RUNTIME_SO);  // .dynsym: what it exports and imports
}

TEST(RuntimeSymbolsTest, StaticArchiveHasNoIrSymbols) { ExpectNoIr("", KILN_RUNTIME_ARCHIVE); }

TEST(RuntimeSymbolsTest, LinkHasNoKilnIr) {
  for (const char* path : {KILN_RUNTIME_LINK_FILE, KILN_RUNTIME_SHARED_LINK_FILE}) {
    const std::string closure = ReadFile(path);
    EXPECT_THAT(closure, testing::HasSubstr("kiln_base")) << path;
    EXPECT_THAT(closure, testing::Not(testing::HasSubstr("kiln_ir"))) << path;
  }
}

// The checks themselves work: kiln_ir's archive does define kiln::ir:: symbols, and the link
// closure of a library built on the IR (kiln_passes) names kiln_ir.
TEST(RuntimeSymbolsTest, DetectsIr) {
  int lines = 0;
  EXPECT_THAT(IrSymbols("", KILN_IR_ARCHIVE, &lines), testing::Not(testing::IsEmpty()));
  EXPECT_THAT(ReadFile(KILN_PASSES_LINK_FILE), testing::HasSubstr("kiln_ir"));
}

}  // namespace
