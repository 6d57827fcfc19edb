// The bad-blob corpus (tests/aot/corpus, written by tools/make_corpus.cc): every damaged file is
// refused with its expected message, through the C++ loader and the C API, and never crashes
// (the asan preset runs this too). valid.kiln parses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/blob.h"
#include "runtime/blob_target.h"
#include "runtime/include/kiln_runtime.h"

namespace {

struct Case {
  std::string file, expected;
};

std::vector<Case> Cases() {
  std::ifstream in(std::string(KILN_CORPUS_DIR) + "/expected.txt");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    cases.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  return cases;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CorpusTest, EveryBadFileGivesItsError) {
  const std::vector<Case> cases = Cases();
  ASSERT_GE(cases.size(), 15u);
  // Vulkan plans are validated by the Vulkan driver (aot_vulkan_test.cc registers it where kiln
  // has Vulkan); a runtime without it keeps them unparsed and loads the blob on the CPU.
  const bool vulkan = kiln::runtime::blob::FindTargetDriver("vulkan") != nullptr;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    if (!vulkan && c.file.rfind("vulkan_", 0) == 0) continue;
    const std::string path = std::string(KILN_CORPUS_DIR) + "/" + c.file;
    const std::string bytes = Read(path);
    if (c.expected.empty()) {
      auto view = kiln::runtime::blob::ParseBlob(std::span<const std::byte>(
          reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
      EXPECT_TRUE(view.ok()) << view.status();
      continue;
    }
    auto model = kiln::runtime::blob::Model::LoadFile(path);
    ASSERT_FALSE(model.ok());
    EXPECT_THAT(std::string(model.status().message()), testing::HasSubstr(c.expected));
    kiln_model* m = reinterpret_cast<kiln_model*>(1);
    const kiln_status status = kiln_model_load_memory(bytes.data(), bytes.size(), &m);
    EXPECT_TRUE(status == KILN_ERROR_BAD_BLOB || status == KILN_ERROR_UNSUPPORTED)
        << kiln_status_string(status);
    EXPECT_EQ(m, nullptr);
    EXPECT_THAT(kiln_last_error(), testing::HasSubstr(c.expected));
  }
}

TEST(CorpusTest, EveryPrefixOfTheValidBlobIsRefused) {
  const std::string bytes = Read(std::string(KILN_CORPUS_DIR) + "/valid.kiln");
  ASSERT_GT(bytes.size(), 64u);
  for (size_t n = 0; n < bytes.size(); n += 1 + n / 16) {
    auto view = kiln::runtime::blob::ParseBlob(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), n));
    EXPECT_FALSE(view.ok()) << n;
  }
}

TEST(CorpusTest, MissingFileIsAnIoError) {
  kiln_model* m = nullptr;
  EXPECT_EQ(kiln_model_load_file("/nonexistent/model.kiln", &m), KILN_ERROR_IO);
  EXPECT_THAT(kiln_last_error(), testing::HasSubstr("cannot open /nonexistent/model.kiln"));
  EXPECT_EQ(kiln_model_load_file(nullptr, &m), KILN_ERROR_INVALID_ARGUMENT);
}

}  // namespace
