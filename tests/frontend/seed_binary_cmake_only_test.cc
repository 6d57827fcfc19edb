// Runs the seed example binary (path from CMake: KILN_SEED_BINARY) and checks that it prints the
// seed program's output, computed here independently with plain loops over the parameters.
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

#ifndef KILN_SEED_BINARY
#error "KILN_SEED_BINARY must name the seed example binary"
#endif

namespace kiln::testing {
namespace {

std::string RunSeed() {
  std::string out;
  FILE* pipe = popen(KILN_SEED_BINARY, "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0);
  return out;
}

// The numbers inside the first "[...]" of the line that starts with `label`.
std::vector<double> NumbersAfter(const std::string& text, const std::string& label) {
  const size_t at = text.find(label);
  if (at == std::string::npos) return {};
  const size_t end = text.find("shape=", at);
  const std::string values = text.substr(at + label.size(), end - at - label.size());
  std::vector<double> numbers;
  const std::regex number(R"(-?\d+\.\d+)");
  for (auto it = std::sregex_iterator(values.begin(), values.end(), number);
       it != std::sregex_iterator(); ++it) {
    numbers.push_back(std::stod(it->str()));
  }
  return numbers;
}

TEST(SeedBinaryTest, PrintsTheSeedProgramsOutput) {
  // The seed program's computation, done here.
  manual_seed(0);
  B::Device device;
  auto layer = nn::LinearConfig(4, 2).init<B>(device);
  const std::vector<float> w = layer.weight.to_vector();
  const std::vector<float> b = layer.bias->to_vector();
  std::vector<double> expected(2);
  for (int o = 0; o < 2; ++o) {
    expected[o] = b[o];
    for (int i = 0; i < 4; ++i) expected[o] += (i + 1.0) * w[o * 4 + i];
  }

  const std::string out = RunSeed();
  SCOPED_TRACE(out);
  const std::vector<double> printed = NumbersAfter(out, "output: ");
  ASSERT_EQ(printed.size(), 2u);
  for (int o = 0; o < 2; ++o) EXPECT_NEAR(printed[o], expected[o], 6e-5);  // 4 decimals
  EXPECT_NE(out.find("shape=[1, 2], dtype=f32"), std::string::npos);

  const std::vector<double> weights = NumbersAfter(out, "fc.weight: ");
  ASSERT_EQ(weights.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(weights[i], w[i], 6e-5);
  const std::vector<double> biases = NumbersAfter(out, "fc.bias: ");
  ASSERT_EQ(biases.size(), 2u);
  for (int o = 0; o < 2; ++o) EXPECT_NEAR(biases[o], b[o], 6e-5);
}

}  // namespace
}  // namespace kiln::testing
