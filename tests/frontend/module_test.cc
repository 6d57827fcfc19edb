// KILN_MODULE registration, visiting and naming; nn::Linear initialisation and forward.
#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;

template <class Backend>
struct Block {
  nn::Linear<Backend> fc;
  KILN_MODULE(Block, fc);
};

template <class Backend>
struct Net {
  Block<Backend> block;
  std::vector<nn::Linear<Backend>> layers;
  std::optional<Tensor<Backend, 1>> scale;
  std::optional<Tensor<Backend, 1>> shift;
  Tensor<Backend, 2> embedding;
  KILN_MODULE(Net, block, layers, scale, shift, embedding);
};

Net<B> MakeNet(const Device& device) {
  return Net<B>{
      Block<B>{nn::LinearConfig(3, 2).init<B>(device)},
      {nn::LinearConfig(2, 4).init<B>(device),
       nn::LinearConfig(4, 1).with_bias(false).init<B>(device)},
      std::nullopt,
      TF<1>::ones({5}, device),
      TF<2>::zeros({7, 3}, device),
  };
}

TEST(ModuleTest, NamesInFieldOrder) {
  B::Device device;
  const Net<B> net = MakeNet(device);
  std::vector<std::string> names;
  net.visit([&](const std::string& name, const auto&) { names.push_back(name); });
  EXPECT_THAT(names, ElementsAre("block.fc.weight", "block.fc.bias", "layers.0.weight",
                                 "layers.0.bias", "layers.1.weight", "shift", "embedding"));
  // 3*2 + 2 + 2*4 + 4 + 4*1 + 5 + 7*3
  EXPECT_EQ(net.num_params(), 6 + 2 + 8 + 4 + 4 + 5 + 21);
  const auto params = net.named_parameters();
  ASSERT_EQ(params.size(), 7u);
  EXPECT_EQ(params[2].name, "layers.0.weight");
  EXPECT_EQ(params[2].type, (ir::TensorType{ir::DType::kF32, {4, 2}}));
  EXPECT_EQ(params[6].device, device);
  EXPECT_STREQ(Net<B>::kModuleName, "Net");
}

TEST(ModuleTest, PrefixAndMutableVisit) {
  B::Device device;
  Block<B> block{nn::LinearConfig(2, 2).init<B>(device)};
  std::vector<std::string> names;
  block.visit([&](const std::string& name, const auto&) { names.push_back(name); }, "model.");
  EXPECT_THAT(names, ElementsAre("model.fc.weight", "model.fc.bias"));
  // A visitor may replace parameters.
  block.visit([](const std::string&, auto& param) { param = ones_like(param); });
  auto y = block.fc.forward(TF<1>::from_data({1.f, 2.f}, device));
  EXPECT_THAT(y.to_vector(), ElementsAre(4, 4));
}

TEST(ModuleTest, ToMovesEveryParameter) {
  B::Device device;
  Net<B> net = MakeNet(device);
  const B::Device other(1);
  net.to(other);
  for (const ParameterInfo& p : net.named_parameters()) EXPECT_EQ(p.device, other) << p.name;
  auto y = net.block.fc.forward(TF<1>::ones({3}, other));
  EXPECT_EQ(y.device(), other);
}

TEST(LinearTest, InitialisationLikeTorch) {
  B::Device device;
  manual_seed(5);
  auto layer = nn::LinearConfig(16, 3).init<B>(device);
  EXPECT_EQ(layer.weight.shape(), (std::array<int64_t, 2>{3, 16}));
  ASSERT_TRUE(layer.bias.has_value());
  EXPECT_EQ(layer.bias->shape(), (std::array<int64_t, 1>{3}));
  const double bound = 1 / std::sqrt(16.0);
  for (float w : layer.weight.to_vector()) {
    EXPECT_GE(w, -bound);
    EXPECT_LT(w, bound);
  }
  for (float b : layer.bias->to_vector()) {
    EXPECT_GE(b, -bound);
    EXPECT_LT(b, bound);
  }
  // Weight first, then bias, from the seeded stream.
  manual_seed(5);
  auto w = TF<2>::random_uniform({3, 16}, -bound, bound, device);
  auto b = TF<1>::random_uniform({3}, -bound, bound, device);
  EXPECT_EQ(layer.weight.to_vector(), w.to_vector());
  EXPECT_EQ(layer.bias->to_vector(), b.to_vector());

  auto no_bias = nn::LinearConfig(16, 3).with_bias(false).init<B>(device);
  EXPECT_FALSE(no_bias.bias.has_value());
  EXPECT_EQ(no_bias.num_params(), 48);
  EXPECT_EQ(layer.num_params(), 51);
}

// y[..., o] = sum_i x[..., i] * w[o][i] + b[o], for every leading index.
std::vector<double> LinearLoops(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& b, int64_t d_in, int64_t d_out) {
  std::vector<double> y;
  for (size_t row = 0; row < x.size() / static_cast<size_t>(d_in); ++row) {
    for (int64_t o = 0; o < d_out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < d_in; ++i) s += x[row * d_in + i] * w[o * d_in + i];
      y.push_back(s);
    }
  }
  return y;
}

TEST(LinearTest, ForwardForEveryRankMatchesLoops) {
  B::Device device;
  auto layer = nn::LinearConfig(4, 3).init<B>(device);
  const auto w = layer.weight.to_vector();
  const auto b = layer.bias->to_vector();
  auto v1 = RandomFloats(4, 71);
  auto y1 = layer.forward(TF<1>::from_vector(v1, {4}, device));
  EXPECT_EQ(y1.shape(), (std::array<int64_t, 1>{3}));
  ExpectAllClose(y1.to_vector(), LinearLoops(v1, w, b, 4, 3), 1e-5, 1e-6);
  auto v3 = RandomFloats(2 * 5 * 4, 72);
  auto y3 = layer.forward(TF<3>::from_vector(v3, {2, 5, 4}, device));
  EXPECT_EQ(y3.shape(), (std::array<int64_t, 3>{2, 5, 3}));
  ExpectAllClose(y3.to_vector(), LinearLoops(v3, w, b, 4, 3), 1e-5, 1e-6);
  auto no_bias = nn::LinearConfig(4, 2).with_bias(false).init<B>(device);
  auto y2 = no_bias.forward(TF<2>::from_vector(v3, {10, 4}, device));
  ExpectAllClose(y2.to_vector(), LinearLoops(v3, no_bias.weight.to_vector(), {}, 4, 2), 1e-5, 1e-6);
}

}  // namespace
}  // namespace kiln::testing
