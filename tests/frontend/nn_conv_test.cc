// Convolution and pooling layers against PyTorch (tests/frontend/fixtures/make_nn_fixtures.py):
// each case builds the layer through its config, loads torch's parameters into the fields and
// must reproduce torch's output within 1e-5.
#include <array>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/frontend/nn_fixture.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

template <size_t N>
std::array<int64_t, N> Dims(const nlohmann::json& j) {
  const std::vector<int64_t> v = j.get<std::vector<int64_t>>();
  EXPECT_EQ(v.size(), N);
  std::array<int64_t, N> out{};
  for (size_t i = 0; i < N && i < v.size(); ++i) out[i] = v[i];
  return out;
}

class Conv1dFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(Conv1dFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const nlohmann::json& cfg = c.at("config");
  auto conv = nn::Conv1dConfig(cfg["in"], cfg["out"], Dims<1>(cfg["kernel"]))
                  .with_stride(Dims<1>(cfg["stride"]))
                  .with_padding(Dims<1>(cfg["padding"]))
                  .with_dilation(Dims<1>(cfg["dilation"]))
                  .with_groups(cfg["groups"])
                  .with_bias(cfg["bias"])
                  .init<B>(device);
  EXPECT_EQ(conv.num_params(), c.at("num_params").get<int64_t>());
  conv.weight = FixtureTensor<3>(c["params"]["weight"], device);
  if (cfg["bias"]) conv.bias = FixtureTensor<1>(c["params"]["bias"], device);
  ExpectMatches(conv.forward(FixtureTensor<3>(c["inputs"][0], device)), c["output"]);
  // The function form, with the same settings.
  ExpectMatches(
      nn::conv1d(FixtureTensor<3>(c["inputs"][0], device), conv.weight, conv.bias, conv.options),
      c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, Conv1dFixture,
                         ::testing::Values("conv1d_basic", "conv1d_stride_pad_dil"));

class Conv2dFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(Conv2dFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const nlohmann::json& cfg = c.at("config");
  auto conv = nn::Conv2dConfig(cfg["in"], cfg["out"], Dims<2>(cfg["kernel"]))
                  .with_stride(Dims<2>(cfg["stride"]))
                  .with_padding(Dims<2>(cfg["padding"]))
                  .with_dilation(Dims<2>(cfg["dilation"]))
                  .with_groups(cfg["groups"])
                  .with_bias(cfg["bias"])
                  .init<B>(device);
  EXPECT_EQ(conv.num_params(), c.at("num_params").get<int64_t>());
  // torch's layout: the fixture's parameters have the shapes init() made.
  EXPECT_EQ(conv.weight.shape(), FixtureTensor<4>(c["params"]["weight"], device).shape());
  conv.weight = FixtureTensor<4>(c["params"]["weight"], device);
  if (cfg["bias"]) conv.bias = FixtureTensor<1>(c["params"]["bias"], device);
  ExpectMatches(conv.forward(FixtureTensor<4>(c["inputs"][0], device)), c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, Conv2dFixture,
                         ::testing::Values("conv2d_basic", "conv2d_stride_pad",
                                           "conv2d_dilation_groups_nobias", "conv2d_depthwise"));

class ConvTranspose2dFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(ConvTranspose2dFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const nlohmann::json& cfg = c.at("config");
  auto conv = nn::ConvTranspose2dConfig(cfg["in"], cfg["out"], Dims<2>(cfg["kernel"]))
                  .with_stride(Dims<2>(cfg["stride"]))
                  .with_padding(Dims<2>(cfg["padding"]))
                  .with_output_padding(Dims<2>(cfg["output_padding"]))
                  .with_dilation(Dims<2>(cfg["dilation"]))
                  .with_groups(cfg["groups"])
                  .with_bias(cfg["bias"])
                  .init<B>(device);
  EXPECT_EQ(conv.num_params(), c.at("num_params").get<int64_t>());
  EXPECT_EQ(conv.weight.shape(), FixtureTensor<4>(c["params"]["weight"], device).shape());
  conv.weight = FixtureTensor<4>(c["params"]["weight"], device);
  if (cfg["bias"]) conv.bias = FixtureTensor<1>(c["params"]["bias"], device);
  ExpectMatches(conv.forward(FixtureTensor<4>(c["inputs"][0], device)), c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, ConvTranspose2dFixture,
                         ::testing::Values("conv_transpose2d_basic",
                                           "conv_transpose2d_stride_pad_outpad",
                                           "conv_transpose2d_dilation_bigpad"));

class MaxPool2dFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(MaxPool2dFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const nlohmann::json& cfg = c.at("config");
  const auto pool = nn::MaxPool2dConfig(Dims<2>(cfg["kernel"]))
                        .with_stride(Dims<2>(cfg["stride"]))
                        .with_padding(Dims<2>(cfg["padding"]))
                        .with_dilation(Dims<2>(cfg["dilation"]))
                        .with_ceil_mode(cfg["ceil_mode"])
                        .init();
  EXPECT_EQ(pool.num_params(), 0);
  ExpectMatches(pool.forward(FixtureTensor<4>(c["inputs"][0], device)), c["output"]);
  ExpectMatches(nn::max_pool2d(FixtureTensor<4>(c["inputs"][0], device), pool.kernel, pool.options),
                c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, MaxPool2dFixture,
                         ::testing::Values("max_pool2d_basic", "max_pool2d_pad_stride",
                                           "max_pool2d_dilation_ceil"));

class AvgPool2dFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(AvgPool2dFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const nlohmann::json& cfg = c.at("config");
  const auto pool = nn::AvgPool2dConfig(Dims<2>(cfg["kernel"]))
                        .with_stride(Dims<2>(cfg["stride"]))
                        .with_padding(Dims<2>(cfg["padding"]))
                        .with_ceil_mode(cfg["ceil_mode"])
                        .with_count_include_pad(cfg["count_include_pad"])
                        .init();
  ExpectMatches(pool.forward(FixtureTensor<4>(c["inputs"][0], device)), c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, AvgPool2dFixture,
                         ::testing::Values("avg_pool2d_basic", "avg_pool2d_pad_include",
                                           "avg_pool2d_pad_exclude", "avg_pool2d_ceil_include",
                                           "avg_pool2d_ceil_exclude"));

class AdaptiveAvgPool2dFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(AdaptiveAvgPool2dFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const auto pool = nn::AdaptiveAvgPool2dConfig(Dims<2>(c["config"]["output_size"])).init();
  ExpectMatches(pool.forward(FixtureTensor<4>(c["inputs"][0], device)), c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, AdaptiveAvgPool2dFixture,
                         ::testing::Values("adaptive_avg_pool2d_global",
                                           "adaptive_avg_pool2d_divisible",
                                           "adaptive_avg_pool2d_uneven"));

TEST(NnConv, InitIsTorchDefaultUniform) {
  B::Device device;
  manual_seed(7);
  const auto conv = nn::Conv2dConfig(4, 8, {3, 3}).with_groups(2).init<B>(device);
  // fan_in = (4 / 2) * 3 * 3 = 18: U(-1/sqrt(18), 1/sqrt(18)) for weight and bias.
  const double bound = 1.0 / std::sqrt(18.0);
  for (const auto& values : {conv.weight.to_vector<float>(), conv.bias->to_vector<float>()}) {
    float lo = 1, hi = -1;
    for (float v : values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    // Spread over most of the interval (the weight has 144 draws, the bias 8).
    EXPECT_LT(lo, values.size() > 100 ? -0.8 * bound : 0.0);
    EXPECT_GT(hi, values.size() > 100 ? 0.8 * bound : 0.0);
  }
}

TEST(NnConv, BadShapesThrowNamingTheOp) {
  B::Device device;
  const auto conv = nn::Conv2dConfig(3, 4, {3, 3}).init<B>(device);
  try {
    conv.forward(TF<4>::zeros({1, 2, 5, 5}, device));
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conv2d"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("channels"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nn_conv_test.cc"), std::string::npos) << e.what();
  }
  EXPECT_THROW(conv.forward(TF<4>::zeros({1, 3, 2, 2}, device)), Error);  // kernel too large
  EXPECT_THROW(nn::Conv2dConfig(3, 4, {3, 3}).with_groups(2).init<B>(device), Error);
  nn::PoolOptions too_much_padding;
  too_much_padding.padding = {2};
  EXPECT_THROW(nn::max_pool2d(TF<4>::zeros({1, 1, 4, 4}, device), {2, 2}, too_much_padding), Error);
}

}  // namespace
}  // namespace kiln::testing
