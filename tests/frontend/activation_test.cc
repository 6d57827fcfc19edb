// Activations against scalar formulas evaluated in double, and their numerical stability.
#include <cmath>
#include <functional>
#include <numbers>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

namespace act = kiln::activation;
using ::testing::ElementsAre;

struct Case {
  const char* name;
  std::function<TF<2>(const TF<2>&)> op;
  std::function<double(double)> reference;
};

TEST(ActivationTest, RandomMatchesFormulas) {
  const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
  const std::vector<Case> cases = {
      {"relu", [](auto& x) { return act::relu(x); }, [](double v) { return v > 0 ? v : 0; }},
      {"leaky_relu", [](auto& x) { return act::leaky_relu(x, 0.1); },
       [](double v) { return v > 0 ? v : 0.1 * v; }},
      {"gelu", [](auto& x) { return act::gelu(x); },
       [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }},
      {"gelu_tanh", [](auto& x) { return act::gelu_tanh(x); },
       [&](double v) {
         return 0.5 * v * (1 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
       }},
      {"sigmoid", [](auto& x) { return act::sigmoid(x); },
       [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"tanh", [](auto& x) { return act::tanh(x); }, [](double v) { return std::tanh(v); }},
      {"silu", [](auto& x) { return act::silu(x); },
       [](double v) { return v / (1 + std::exp(-v)); }},
      {"softplus", [](auto& x) { return act::softplus(x); },
       [](double v) { return std::log1p(std::exp(v)); }},
      {"softplus beta 2", [](auto& x) { return act::softplus(x, 2.0); },
       [](double v) { return std::log1p(std::exp(2 * v)) / 2; }},
  };
  B::Device device;
  auto values = RandomFloats(20, 61, -4, 4);
  auto x = TF<2>::from_vector(values, {4, 5}, device);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<double> expected;
    for (float v : values) expected.push_back(c.reference(v));
    // Composites round to f32 after every primitive: a few ulps.
    ExpectAllClose(c.op(x).to_vector(), expected, 2e-6, 1e-6);
  }
}

TEST(ActivationTest, ExtremeInputsStayFinite) {
  B::Device device;
  auto x = TF<1>::from_data({-1000.f, -50.f, 0.f, 50.f, 1000.f}, device);
  auto sig = act::sigmoid(x).to_vector();
  EXPECT_THAT(sig, ElementsAre(0, ::testing::FloatNear(0, 1e-20), 0.5, 1, 1));
  auto sp = act::softplus(x).to_vector();
  EXPECT_EQ(sp[0], 0);
  EXPECT_FLOAT_EQ(sp[2], std::log(2.0f));
  EXPECT_EQ(sp[4], 1000);
  auto sm = act::softmax(x, 0).to_vector();
  EXPECT_EQ(sm[4], 1);
  EXPECT_EQ(sm[0], 0);
  auto lsm = act::log_softmax(x, 0).to_vector();
  EXPECT_EQ(lsm[4], 0);
  EXPECT_EQ(lsm[0], -2000);
}

TEST(ActivationTest, RandomSoftmaxMatchesLoops) {
  B::Device device;
  auto values = RandomFloats(12, 62, -5, 5);
  auto x = TF<2>::from_vector(values, {3, 4}, device);
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    const int64_t d = dim < 0 ? dim + 2 : dim;
    std::vector<double> soft(12), log_soft(12);
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        double denom = 0;
        for (int64_t k = 0; k < (d == 0 ? 3 : 4); ++k) {
          denom += std::exp(values[d == 0 ? k * 4 + j : i * 4 + k]);
        }
        soft[i * 4 + j] = std::exp(values[i * 4 + j]) / denom;
        log_soft[i * 4 + j] = values[i * 4 + j] - std::log(denom);
      }
    }
    ExpectAllClose(act::softmax(x, dim).to_vector(), soft, 2e-6, 1e-7);
    ExpectAllClose(act::log_softmax(x, dim).to_vector(), log_soft, 2e-6, 2e-6);
    auto sums = act::softmax(x, dim).sum(dim).to_vector();
    for (float s : sums) EXPECT_NEAR(s, 1, 1e-6);
  }
  EXPECT_THROW(act::softmax(x, 2), Error);
}

}  // namespace
}  // namespace kiln::testing
