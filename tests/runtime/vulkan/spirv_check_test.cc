// CheckSpirv on the test shaders (glslangValidator output) and on damaged copies of them.
#include "runtime/vulkan/spirv_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/runtime/vulkan/add.spv.h"
#include "tests/runtime/vulkan/axpy.spv.h"
#include "tests/runtime/vulkan/gather.spv.h"

namespace kiln::runtime::vulkan {
namespace {

using ::testing::HasSubstr;

std::vector<uint32_t> Add() {
  return std::vector<uint32_t>(std::begin(kaddSpirv), std::end(kaddSpirv));
}

// The word offset of the first instruction with `opcode`.
size_t Find(const std::vector<uint32_t>& words, uint32_t opcode) {
  for (size_t at = 5; at < words.size(); at += words[at] >> 16) {
    if ((words[at] & 0xffff) == opcode) return at;
  }
  ADD_FAILURE() << "no opcode " << opcode;
  return 0;
}

void ExpectInvalid(const std::vector<uint32_t>& words, const std::string& words_in_message) {
  absl::Status status = CheckSpirv(words);
  ASSERT_FALSE(status.ok()) << words_in_message;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(words_in_message));
}

TEST(CheckSpirv, AcceptsCompiledShaders) {
  EXPECT_TRUE(CheckSpirv(Add()).ok());
  EXPECT_TRUE(CheckSpirv(std::vector<uint32_t>(std::begin(kaxpySpirv), std::end(kaxpySpirv))).ok());
  EXPECT_TRUE(
      CheckSpirv(std::vector<uint32_t>(std::begin(kgatherSpirv), std::end(kgatherSpirv))).ok());
}

TEST(CheckSpirv, RejectsABadHeader) {
  ExpectInvalid({}, "shorter than the 5-word header");
  std::vector<uint32_t> words = Add();
  words[0] = 0xdeadbeef;
  ExpectInvalid(words, "word 0 is 0xdeadbeef");
  words = Add();
  words[0] = __builtin_bswap32(words[0]);
  ExpectInvalid(words, "opposite byte order");
  words = Add();
  words[1] = 0x00020000;
  ExpectInvalid(words, "version word 0x00020000");
  words = Add();
  words[3] = 0;
  ExpectInvalid(words, "id bound");
  words = Add();
  words[4] = 7;
  ExpectInvalid(words, "schema");
}

TEST(CheckSpirv, RejectsInstructionsOutsideTheModule) {
  std::vector<uint32_t> words = Add();
  const size_t entry = Find(words, 15);
  words[entry] &= 0xffff;  // word count 0
  ExpectInvalid(
      words, "the instruction at word " + std::to_string(entry) + " (opcode 15) has word count 0");
  words = Add();
  words.resize(entry + 2);  // the module ends inside the OpEntryPoint
  ExpectInvalid(words, "the instruction at word " + std::to_string(entry) + " (opcode 15) has " +
                           std::to_string(Add()[entry] >> 16) +
                           " words but the module ends at word " + std::to_string(entry + 2));
}

TEST(CheckSpirv, NeedsAComputeEntryPointNamedMain) {
  std::vector<uint32_t> words = Add();
  const size_t entry = Find(words, 15);
  words[entry + 3] ^= 0x100;  // "main" -> "m`in"
  ExpectInvalid(words, "no GLCompute entry point \"main\" (entry points: \"m`in\" (GLCompute))");
  words = Add();
  words[entry + 1] = 4;  // Fragment
  ExpectInvalid(words, "(execution model 4)");
  words = Add();
  // A name that fills the instruction without its nul: replace the nul-holding word.
  const uint32_t count = words[entry] >> 16;
  for (size_t w = entry + 3; w < entry + count; ++w) words[w] = 0x41414141;
  ExpectInvalid(words, "without its terminating nul");
}

}  // namespace
}  // namespace kiln::runtime::vulkan
