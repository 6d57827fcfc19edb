// Normalisation, embedding, dropout and activation modules against PyTorch
// (tests/frontend/fixtures/make_nn_fixtures.py), and dropout's statistics.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/frontend/nn_fixture.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

template <class Bn, int R>
void CheckBatchNorm(Bn bn, const nlohmann::json& c, const Device& device) {
  EXPECT_EQ(bn.num_params(), c.at("num_params").get<int64_t>());
  if (c["config"]["affine"]) {
    bn.weight = FixtureTensor<1>(c["params"]["weight"], device);
    bn.bias = FixtureTensor<1>(c["params"]["bias"], device);
  }
  bn.running_mean.value = FixtureTensor<1>(c["buffers_before"]["running_mean"], device);
  bn.running_var.value = FixtureTensor<1>(c["buffers_before"]["running_var"], device);
  ExpectMatches(bn.forward(FixtureTensor<R>(c["inputs"][0], device)), c["output"]);
  ExpectMatches(bn.running_mean.value, c["buffers_after"]["running_mean"]);
  ExpectMatches(bn.running_var.value, c["buffers_after"]["running_var"]);
}

class BatchNormFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(BatchNormFixture, MatchesTorch) {
  B::Device device;
  const std::string name = GetParam();
  const nlohmann::json& c = NnCase(name);
  const nlohmann::json& cfg = c.at("config");
  const bool train = name.find("train") != std::string::npos;
  const size_t rank = c["inputs"][0]["shape"].size();
  if (name.starts_with("batch_norm1d")) {
    auto bn = nn::BatchNorm1dConfig(cfg["features"])
                  .with_momentum(cfg["momentum"])
                  .with_affine(cfg["affine"])
                  .init<B>(device);
    bn.train(train);
    if (rank == 2) {
      CheckBatchNorm<decltype(bn), 2>(bn, c, device);
    } else {
      CheckBatchNorm<decltype(bn), 3>(bn, c, device);
    }
  } else {
    auto bn = nn::BatchNorm2dConfig(cfg["features"])
                  .with_momentum(cfg["momentum"])
                  .with_affine(cfg["affine"])
                  .init<B>(device);
    bn.train(train);
    CheckBatchNorm<decltype(bn), 4>(bn, c, device);
  }
}
INSTANTIATE_TEST_SUITE_P(Nn, BatchNormFixture,
                         ::testing::Values("batch_norm1d_train_2d", "batch_norm1d_train_3d",
                                           "batch_norm1d_eval_3d", "batch_norm2d_train",
                                           "batch_norm2d_train_no_affine", "batch_norm2d_eval"));

TEST(NnNorm, BatchNormInitLikeTorch) {
  B::Device device;
  const auto bn = nn::BatchNorm2dConfig(3).init<B>(device);
  EXPECT_EQ(bn.weight->to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.bias->to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(bn.running_mean.value.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(bn.running_var.value.to_vector<float>(), std::vector<float>(3, 1.0f));
  std::vector<std::string> buffers;
  for (const ParameterInfo& b : bn.named_buffers()) buffers.push_back(b.name);
  EXPECT_EQ(buffers, (std::vector<std::string>{"running_mean", "running_var"}));
  EXPECT_EQ(bn.num_params(), 6);  // buffers are not parameters
}

TEST(NnNorm, LayerNormMatchesTorch) {
  B::Device device;
  {
    const nlohmann::json& c = NnCase("layer_norm_last");
    auto ln = nn::LayerNormConfig(6).with_eps(c["config"]["eps"]).init<B>(device);
    EXPECT_EQ(ln.num_params(), c.at("num_params").get<int64_t>());
    ln.weight = FixtureTensor<1>(c["params"]["weight"], device);
    ln.bias = FixtureTensor<1>(c["params"]["bias"], device);
    ExpectMatches(ln.forward(FixtureTensor<3>(c["inputs"][0], device)), c["output"]);
  }
  {
    const nlohmann::json& c = NnCase("layer_norm_last2");
    auto ln = nn::LayerNormConfigT<2>({3, 4}).with_eps(c["config"]["eps"]).init<B>(device);
    ln.weight = FixtureTensor<2>(c["params"]["weight"], device);
    ln.bias = FixtureTensor<2>(c["params"]["bias"], device);
    ExpectMatches(ln.forward(FixtureTensor<3>(c["inputs"][0], device)), c["output"]);
  }
}

TEST(NnNorm, GroupNormMatchesTorch) {
  B::Device device;
  {
    const nlohmann::json& c = NnCase("group_norm_2groups");
    auto gn = nn::GroupNormConfig(2, 6).init<B>(device);
    EXPECT_EQ(gn.num_params(), c.at("num_params").get<int64_t>());
    gn.weight = FixtureTensor<1>(c["params"]["weight"], device);
    gn.bias = FixtureTensor<1>(c["params"]["bias"], device);
    ExpectMatches(gn.forward(FixtureTensor<4>(c["inputs"][0], device)), c["output"]);
  }
  {
    const nlohmann::json& c = NnCase("group_norm_per_channel");
    auto gn = nn::GroupNormConfig(3, 3).init<B>(device);
    gn.weight = FixtureTensor<1>(c["params"]["weight"], device);
    gn.bias = FixtureTensor<1>(c["params"]["bias"], device);
    ExpectMatches(gn.forward(FixtureTensor<3>(c["inputs"][0], device)), c["output"]);
  }
  EXPECT_THROW(nn::GroupNormConfig(4, 6).init<B>(device), Error);
}

TEST(NnNorm, RmsNormMatchesTorchDefinition) {
  B::Device device;
  const nlohmann::json& c = NnCase("rms_norm");
  auto norm = nn::RMSNormConfig(8).init<B>(device);
  norm.weight = FixtureTensor<1>(c["params"]["weight"], device);
  ExpectMatches(norm.forward(FixtureTensor<3>(c["inputs"][0], device)), c["output"]);
}

TEST(NnEmbedding, MatchesTorchAndZeroesThePaddingRow) {
  B::Device device;
  const nlohmann::json& c = NnCase("embedding_padding_idx");
  auto emb = nn::EmbeddingConfig(10, 4).with_padding_idx(2).init<B>(device);
  EXPECT_EQ(emb.num_params(), c.at("num_params").get<int64_t>());
  const std::vector<float> w = emb.weight.to_vector<float>();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(w[2 * 4 + j], 0.0f);
  emb.weight = FixtureTensor<2>(c["params"]["weight"], device);
  ExpectMatches(emb.forward(FixtureIntTensor<2>(c["inputs"][0], device)), c["output"]);
  EXPECT_THROW(nn::EmbeddingConfig(10, 4).with_padding_idx(10).init<B>(device), Error);
}

TEST(NnActivation, ModulesMatchTorch) {
  B::Device device;
  auto input = [&](const char* name) {
    return FixtureTensor<2>(NnCase(name)["inputs"][0], device);
  };
  auto want = [&](const char* name) -> const nlohmann::json& { return NnCase(name)["output"]; };
  ExpectMatches(nn::ReLU{}.forward(input("act_relu")), want("act_relu"));
  ExpectMatches(nn::GELU{}.forward(input("act_gelu")), want("act_gelu"));
  ExpectMatches(nn::SiLU{}.forward(input("act_silu")), want("act_silu"));
  ExpectMatches(nn::Tanh{}.forward(input("act_tanh")), want("act_tanh"));
  ExpectMatches(nn::Sigmoid{}.forward(input("act_sigmoid")), want("act_sigmoid"));
  ExpectMatches(nn::LeakyReLU{0.2}.forward(input("act_leaky_relu")), want("act_leaky_relu"));
  ExpectMatches(nn::Softmax{0}.forward(input("act_softmax")), want("act_softmax"));
}

TEST(NnDropout, ZeroesAboutPAndScalesTheRest) {
  B::Device device;
  manual_seed(11);
  const auto drop = nn::DropoutConfig(0.3).init();
  const auto x = TF<2>::random_uniform({64, 64}, 1.0, 2.0, device);
  const std::vector<float> in = x.to_vector<float>();
  const std::vector<float> out = drop.forward(x).to_vector<float>();
  int zeros = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (out[i] == 0.0f) {
      ++zeros;
    } else {
      EXPECT_NEAR(out[i], in[i] / 0.7f, 1e-6);
    }
  }
  // 4096 Bernoulli(0.3) draws: mean 1229, std 29; 6 std either side.
  EXPECT_GT(zeros, 1229 - 6 * 29);
  EXPECT_LT(zeros, 1229 + 6 * 29);
  // Seeded: the same seed gives the same mask.
  manual_seed(11);
  const auto x2 = TF<2>::random_uniform({64, 64}, 1.0, 2.0, device);
  EXPECT_EQ(drop.forward(x2).to_vector<float>(), out);
  EXPECT_THROW(nn::DropoutConfig(1.5).init(), Error);
}

}  // namespace
}  // namespace kiln::testing
