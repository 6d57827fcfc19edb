// Losses against PyTorch (tests/frontend/fixtures/loss.json, made by make_optim_fixtures.py),
// their numerical stability, and their errors.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using json = nlohmann::json;

const json& Fixture() {
  static const json fixture = [] {
    std::ifstream in("tests/frontend/fixtures/loss.json");
    EXPECT_TRUE(in.good()) << "run from the repository root (ctest does)";
    return json::parse(in);
  }();
  return fixture;
}

template <int R>
TF<R> FloatTensor(const json& entry, const Device& device) {
  const std::vector<double> values = entry["values"].get<std::vector<double>>();
  const std::vector<int64_t> shape = entry["shape"].get<std::vector<int64_t>>();
  std::array<int64_t, R> dims{};
  for (int i = 0; i < R; ++i) dims[i] = shape.at(i);
  return TF<R>::from_vector(values, dims, device);
}

/// The loss of one fixture case: reduction "mean"/"sum" give rank 0, "none" the elementwise
/// terms (flattened for the comparison).
std::vector<double> Compute(const json& c, const Device& device) {
  const std::string loss = c["loss"];
  const std::string reduction = c["reduction"];
  const bool none = reduction == "none";
  const nn::Reduction r = reduction == "sum" ? nn::Reduction::kSum : nn::Reduction::kMean;
  if (loss == "cross_entropy" || loss == "nll") {
    const TF<2> input = FloatTensor<2>(c["input"], device);
    const TI<1> target =
        TI<1>::from_vector(c["target"]["values"].get<std::vector<int64_t>>(),
                           {static_cast<int64_t>(c["target"]["values"].size())}, device);
    if (loss == "nll") {
      return none ? nn::nll_loss_unreduced(input, target).to_vector<double>()
                  : nn::nll_loss(input, target, r).to_vector<double>();
    }
    const double smoothing = c["kwargs"].value("label_smoothing", 0.0);
    return none ? nn::cross_entropy_unreduced(input, target, smoothing).to_vector<double>()
                : nn::cross_entropy(input, target, r, smoothing).to_vector<double>();
  }
  const TF<2> input = FloatTensor<2>(c["input"], device);
  const TF<2> target = FloatTensor<2>(c["target"], device);
  if (loss == "mse") {
    return none ? nn::mse_loss_unreduced(input, target).to_vector<double>()
                : nn::mse_loss(input, target, r).to_vector<double>();
  }
  if (loss == "l1") {
    return none ? nn::l1_loss_unreduced(input, target).to_vector<double>()
                : nn::l1_loss(input, target, r).to_vector<double>();
  }
  if (loss == "huber") {
    const double delta = c["kwargs"]["delta"];
    return none ? nn::huber_loss_unreduced(input, target, delta).to_vector<double>()
                : nn::huber_loss(input, target, delta, r).to_vector<double>();
  }
  if (loss == "bce_with_logits") {
    return none ? nn::bce_with_logits_unreduced(input, target).to_vector<double>()
                : nn::bce_with_logits(input, target, r).to_vector<double>();
  }
  ADD_FAILURE() << "unknown loss " << loss;
  return {};
}

TEST(LossTest, MatchesPyTorch) {
  B::Device device;
  const json& cases = Fixture()["losses"];
  ASSERT_GE(cases.size(), 20u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["loss"].get<std::string>() + " reduction=" + c["reduction"].get<std::string>() +
                 " " + c["kwargs"].dump());
    const std::vector<double> expected = c["output"]["values"].get<std::vector<double>>();
    ExpectAllClose(Compute(c, device), expected, 1e-5, 1e-6);
  }
}

TEST(LossTest, ResultRanks) {
  B::Device device;
  const TF<2> x = TF<2>::ones({3, 4}, device);
  static_assert(decltype(nn::mse_loss(x, x))::rank() == 0);
  static_assert(decltype(nn::mse_loss_unreduced(x, x))::rank() == 2);
  EXPECT_EQ(nn::mse_loss(x, x).item(), 0.0);
  EXPECT_EQ(nn::mse_loss_unreduced(x, x).shape(), (std::array<int64_t, 2>{3, 4}));
}

TEST(LossTest, CrossEntropyIsStableForHugeLogits) {
  B::Device device;
  // log_softmax subtracts the max: exp(1e4) would overflow.
  const TF<2> logits = TF<2>::from_data({{1e4f, 0.f, -1e4f}, {0.f, 0.f, 0.f}}, device);
  const TI<1> target = TI<1>::from_data({1, 2}, device);
  const std::vector<double> got = nn::cross_entropy_unreduced(logits, target).to_vector<double>();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], 1e4, 1e-1);
  EXPECT_NEAR(got[1], std::log(3.0), 1e-6);
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LossTest, ErrorsNameTheLossAndShapes) {
  B::Device device;
  const TF<2> a = TF<2>::zeros({4, 3}, device);
  const TF<2> b = TF<2>::zeros({4, 1}, device);
  EXPECT_THAT(ErrorOf([&] { (void)nn::mse_loss(a, b); }),
              AllOf(HasSubstr("mse_loss: input [4,3] and target [4,1] must have the same shape"),
                    HasSubstr("loss_test.cc")));
  EXPECT_THAT(ErrorOf([&] { (void)nn::huber_loss(a, b); }), HasSubstr("huber_loss"));
  EXPECT_THAT(ErrorOf([&] { (void)nn::huber_loss(a, a, 0.0); }),
              HasSubstr("huber_loss: delta 0 must be positive"));
  EXPECT_THAT(ErrorOf([&] { (void)nn::bce_with_logits(a, b); }), HasSubstr("bce_with_logits"));
  const TI<1> five = TI<1>::from_data({0, 1, 2, 0, 1}, device);
  EXPECT_THAT(ErrorOf([&] { (void)nn::cross_entropy(a, five); }),
              AllOf(HasSubstr("cross_entropy: input has N = 4 rows but targets has 5 entries"),
                    HasSubstr("f32[4,3]"), HasSubstr("i64[5]")));
  const TI<1> out_of_range = TI<1>::from_data({0, 1, 3, 0}, device);
  EXPECT_THAT(ErrorOf([&] { (void)nn::nll_loss(a, out_of_range); }),
              HasSubstr("nll_loss: target 3 at index 2 is not a class index in [0, 3)"));
  const TI<1> four = TI<1>::from_data({0, 1, 2, 0}, device);
  EXPECT_THAT(ErrorOf([&] { (void)nn::cross_entropy(a, four, nn::Reduction::kMean, 1.5); }),
              HasSubstr("label_smoothing 1.5 must be in [0, 1]"));
}

TEST(LossTest, ConfigModulesMatchTheFunctions) {
  B::Device device;
  const TF<2> logits = TF<2>::from_vector(RandomFloats(12, 1), {4, 3}, device);
  const TF<2> other = TF<2>::from_vector(RandomFloats(12, 2), {4, 3}, device);
  const TF<2> probs = TF<2>::from_vector(RandomFloats(12, 3, 0.f, 1.f), {4, 3}, device);
  const TI<1> labels = TI<1>::from_data({2, 0, 1, 2}, device);
  const nn::CrossEntropyLoss ce = nn::CrossEntropyLossConfig()
                                      .with_label_smoothing(0.2)
                                      .with_reduction(nn::Reduction::kSum)
                                      .init();
  EXPECT_EQ(ce.forward(logits, labels).item(),
            nn::cross_entropy(logits, labels, nn::Reduction::kSum, 0.2).item());
  const nn::HuberLoss huber = nn::HuberLossConfig().with_delta(0.3).init();
  EXPECT_EQ(huber.forward(logits, other).item(), nn::huber_loss(logits, other, 0.3).item());
  EXPECT_EQ(nn::MseLoss{nn::Reduction::kSum}.forward(logits, other).item(),
            nn::mse_loss(logits, other, nn::Reduction::kSum).item());
  EXPECT_EQ(nn::L1Loss{}.forward(logits, other).item(), nn::l1_loss(logits, other).item());
  EXPECT_EQ(nn::BceWithLogitsLoss{}.forward(logits, probs).item(),
            nn::bce_with_logits(logits, probs).item());
  EXPECT_THAT(ErrorOf([] { (void)nn::CrossEntropyLossConfig().with_label_smoothing(-0.1).init(); }),
              AllOf(HasSubstr("cross_entropy: label_smoothing -0.1 must be in [0, 1]"),
                    HasSubstr("loss_test.cc")));
  EXPECT_THAT(ErrorOf([] { (void)nn::HuberLossConfig().with_delta(-1).init(); }),
              HasSubstr("huber_loss: delta -1 must be positive and finite"));
}

}  // namespace
}  // namespace kiln::testing
