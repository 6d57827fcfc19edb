// MultiHeadAttention, TransformerEncoder(Layer) and positional encodings against PyTorch
// (tests/frontend/fixtures/make_nn_fixtures.py). Parameters load by torch's names through each
// module's visit(), which checks the layouts match torch's state dict.
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/frontend/nn_fixture.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

/// A mask from the fixture: Bool when stored as "bool", Float otherwise; rank R.
template <int R>
nn::AttentionMask Mask(const nlohmann::json& c, const char* key, const Device& device) {
  if (!c.contains(key)) return {};
  const nlohmann::json& m = c.at(key);
  if (m.contains("bool")) return FixtureBoolTensor<R>(m, device);
  return FixtureTensor<R>(m, device);
}

nn::AttentionMask AttnMask(const nlohmann::json& c, const Device& device) {
  if (!c.contains("attn_mask")) return {};
  return c["attn_mask"]["shape"].size() == 2 ? Mask<2>(c, "attn_mask", device)
                                             : Mask<3>(c, "attn_mask", device);
}

class MhaFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(MhaFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  auto mha = nn::MultiHeadAttentionConfig(c["config"]["embed_dim"], c["config"]["num_heads"])
                 .init<B>(device);
  EXPECT_EQ(mha.num_params(), c.at("num_params").get<int64_t>());
  LoadTorchParams(mha, c["params"], device);
  const auto result = mha.forward(FixtureTensor<3>(c["inputs"][0], device),
                                  FixtureTensor<3>(c["inputs"][1], device),
                                  FixtureTensor<3>(c["inputs"][2], device),
                                  Mask<2>(c, "key_padding_mask", device), AttnMask(c, device));
  ExpectMatches(result.output, c["output"]);
  ExpectMatches(result.weights, c["weights"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, MhaFixture,
                         ::testing::Values("mha_self", "mha_cross", "mha_bool_masks",
                                           "mha_float_attn_mask", "mha_float_key_padding_mask"));

class EncoderFixture : public ::testing::TestWithParam<std::string> {};
TEST_P(EncoderFixture, MatchesTorch) {
  B::Device device;
  const nlohmann::json& c = NnCase(GetParam());
  const nlohmann::json& cfg = c.at("config");
  const auto layer = nn::TransformerEncoderLayerConfig(cfg["d_model"], cfg["nhead"])
                         .with_dim_feedforward(cfg["dim_feedforward"])
                         .with_activation(cfg["activation"] == "gelu" ? nn::Activation::kGelu
                                                                      : nn::Activation::kRelu)
                         .with_norm_first(cfg["norm_first"]);
  auto enc = nn::TransformerEncoderConfig(layer, cfg["num_layers"])
                 .with_final_norm(cfg["final_norm"])
                 .init<B>(device);
  EXPECT_EQ(enc.num_params(), c.at("num_params").get<int64_t>());
  LoadTorchParams(enc, c["params"], device);
  // Dropout (0.1 by default) is off in eval mode; torch's fixture ran with dropout 0.
  enc.eval();
  ExpectMatches(enc.forward(FixtureTensor<3>(c["inputs"][0], device), AttnMask(c, device),
                            Mask<2>(c, "key_padding_mask", device)),
                c["output"]);
}
INSTANTIATE_TEST_SUITE_P(Nn, EncoderFixture,
                         ::testing::Values("encoder_post_norm_relu", "encoder_pre_norm_gelu"));

TEST(NnAttention, SinusoidalPositionalEncodingMatchesTorchRecipe) {
  B::Device device;
  const nlohmann::json& c = NnCase("sinusoidal_positional_encoding");
  ExpectMatches(
      nn::sinusoidal_positional_encoding<B>(c["config"]["length"], c["config"]["d_model"], device),
      c["output"]);
}

TEST(NnAttention, DropoutOnWeightsOnlyInTraining) {
  B::Device device;
  manual_seed(3);
  auto mha = nn::MultiHeadAttentionConfig(8, 2).with_dropout(0.5).init<B>(device);
  const auto x = TF<3>::random_normal({2, 4, 8}, 0, 1, device);
  mha.eval();
  const std::vector<float> a = mha.attend(x, x, x).to_vector<float>();
  const std::vector<float> b = mha.attend(x, x, x).to_vector<float>();
  EXPECT_EQ(a, b);
  mha.train();
  EXPECT_NE(mha.attend(x, x, x).to_vector<float>(), a);
}

TEST(NnAttention, BadShapesThrow) {
  B::Device device;
  const auto mha = nn::MultiHeadAttentionConfig(8, 2).init<B>(device);
  const auto x = TF<3>::zeros({2, 4, 8}, device);
  EXPECT_THROW(mha.attend(x, x, TF<3>::zeros({2, 5, 8}, device)), Error);
  EXPECT_THROW(mha.attend(x, x, x, TB<2>::full({2, 3}, false, device)), Error);
  EXPECT_THROW(nn::MultiHeadAttentionConfig(8, 3).init<B>(device), Error);
}

}  // namespace
}  // namespace kiln::testing
