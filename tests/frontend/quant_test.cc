// kiln::quant::quantize (frontend/quant/): calibration, the int8 layer state, and the int8 forward
// against a hand computation of the documented scheme (per-channel symmetric int8 weights,
// per-tensor symmetric activations, u8 when the calibration saw no negative input), on every
// backend of the suite.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

template <class Backend>
struct OneLinear {
  nn::Linear<Backend> fc;
  KILN_MODULE(OneLinear, fc);
  Tensor<Backend, 2> forward(const Tensor<Backend, 2>& x) const { return fc.forward(x); }
};

template <class Backend>
struct TwoLinears {
  nn::Linear<Backend> fc1, fc2;
  KILN_MODULE(TwoLinears, fc1, fc2);
  Tensor<Backend, 2> forward(const Tensor<Backend, 2>& x) const {
    return fc2.forward(activation::relu(fc1.forward(x)));
  }
};

template <class Backend>
struct SmallCnn {
  nn::Conv2d<Backend> conv;
  nn::Linear<Backend> fc;
  KILN_MODULE(SmallCnn, conv, fc);
  Tensor<Backend, 2> forward(const Tensor<Backend, 4>& x) const {
    auto h = activation::relu(conv.forward(x));
    return fc.forward(h.template reshape<2>({h.dim(0), h.dim(1) * h.dim(2) * h.dim(3)}));
  }
};

// `n` examples of `shape` uniform in [low, high] (seeded), as a loader of batch `batch`.
data::DataLoader Loader(int64_t n, std::vector<int64_t> shape, double low, double high,
                        int64_t batch, uint32_t seed) {
  std::vector<int64_t> dims = {n};
  dims.insert(dims.end(), shape.begin(), shape.end());
  ir::TensorData inputs(ir::DType::kF32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  for (int64_t i = 0; i < inputs.num_elements(); ++i) inputs.SetDouble(i, uniform(rng));
  ir::TensorData targets(ir::DType::kI64, {n});
  return data::DataLoaderConfig(batch).init(
      std::make_shared<data::InMemoryDataset>(std::move(inputs), std::move(targets)));
}

template <class Model, int R>
auto Runner(const Device& device) {
  return [device](const Model& m, const data::Batch& batch) {
    return m.forward(batch.inputs_as<B, R, Float>(device));
  };
}

// levels: 127, or 64 for QuantConfig::reduce_range (7-bit weights).
void CheckLinearScheme(bool reduce_range) {
  const double levels = reduce_range ? 64 : 127;
  B::Device device;
  manual_seed(3);
  const OneLinear<B> model{nn::LinearConfig(24, 7).init<B>(device)};
  data::DataLoader calibration = Loader(64, {24}, 0.0, 1.5, 16, 1);
  const OneLinear<B> q = quant::quantize(model, calibration, Runner<OneLinear<B>, 2>(device),
                                         quant::QuantConfig().with_reduce_range(reduce_range));
  ASSERT_TRUE(q.fc.int8.has_value());
  EXPECT_FALSE(model.fc.int8.has_value());  // the original is left float
  const quant::Int8Layer<B, 2>& state = *q.fc.int8;
  ASSERT_TRUE(state.weight.has_value() && state.dequant_scale.has_value());
  EXPECT_EQ(state.weight->value.dtype(), ir::DType::kI8);
  EXPECT_TRUE(state.unsigned_input);           // the calibration inputs are >= 0
  EXPECT_EQ(q.named_parameters().size(), 2u);  // fc.weight, fc.bias: the int8 state is buffers
  EXPECT_EQ(q.named_buffers().size(), 2u);     // fc.int8.weight, fc.int8.dequant_scale

  // The scheme by hand: s_x = max x / 255 over the calibration inputs; per output channel
  // s_w = max |w| / levels, w_q = round(w / s_w); y = (sum x_q w_q) * (s_x s_w) + b.
  double max_x = 0;
  for (data::Batch& batch : calibration.epoch(0)) {
    for (float v : batch.inputs_as<B, 2, Float>(device).to_vector<float>()) {
      max_x = std::max<double>(max_x, v);
    }
  }
  const float s_x = static_cast<float>(max_x / 255);
  EXPECT_EQ(state.input_scale, s_x);
  const std::vector<float> w = model.fc.weight.to_vector<float>();
  const std::vector<float> bias = model.fc.bias->to_vector<float>();
  const std::vector<int64_t> w_q = state.weight->value.to_vector<int64_t>();
  data::DataLoader test = Loader(9, {24}, -0.2, 1.7, 9, 2);  // some inputs out of range: clamped
  const auto x = test.epoch(0).begin().operator*().inputs_as<B, 2, Float>(device);
  const std::vector<float> xs = x.to_vector<float>();
  const std::vector<float> got = q.forward(x).to_vector<float>();
  for (int64_t o = 0; o < 7; ++o) {
    double largest = 0;
    for (int64_t i = 0; i < 24; ++i) largest = std::max<double>(largest, std::abs(w[o * 24 + i]));
    const float s_w = static_cast<float>(largest / levels);
    int64_t largest_q = 0;
    for (int64_t i = 0; i < 24; ++i) {
      EXPECT_EQ(w_q[o * 24 + i], std::lround(std::nearbyint(w[o * 24 + i] / s_w)));
      largest_q = std::max<int64_t>(largest_q, std::abs(w_q[o * 24 + i]));
    }
    EXPECT_EQ(largest_q, static_cast<int64_t>(levels)) << "channel " << o;
    for (int64_t r = 0; r < 9; ++r) {
      int64_t sum = 0;
      for (int64_t i = 0; i < 24; ++i) {
        const double x_q = std::clamp<double>(std::nearbyint(xs[r * 24 + i] / s_x), 0.0, 255.0);
        sum += static_cast<int64_t>(x_q) * w_q[o * 24 + i];
      }
      const double want = static_cast<double>(sum) * s_x * s_w + bias[o];
      EXPECT_NEAR(got[r * 7 + o], want, 1e-5 * (1 + std::abs(want))) << r << ", " << o;
    }
  }
}

TEST(Quantize, LinearFollowsTheDocumentedScheme) { CheckLinearScheme(/*reduce_range=*/false); }

// 7-bit weights (what the CPU's u8 x i8 GEMM runs on pmaddubsw): the same scheme with 64 levels.
TEST(Quantize, ReduceRangeQuantizesWeightsToSevenBits) { CheckLinearScheme(/*reduce_range=*/true); }

TEST(Quantize, Int8NetworksStayCloseToFloat) {
  B::Device device;
  manual_seed(5);
  {
    const TwoLinears<B> model{nn::LinearConfig(32, 48).init<B>(device),
                              nn::LinearConfig(48, 10).init<B>(device)};
    data::DataLoader calibration = Loader(128, {32}, -1.0, 1.0, 32, 3);
    const TwoLinears<B> q = quant::quantize(model, calibration, Runner<TwoLinears<B>, 2>(device));
    EXPECT_FALSE(q.fc1.int8->unsigned_input);  // signed inputs: i8
    EXPECT_TRUE(q.fc2.int8->unsigned_input);   // after the relu: u8
    const auto x = calibration.epoch(0).begin().operator*().inputs_as<B, 2, Float>(device);
    const std::vector<float> want = model.forward(x).to_vector<float>();
    const std::vector<float> got = q.forward(x).to_vector<float>();
    double scale = 0, error = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max<double>(scale, std::abs(want[i]));
      error = std::max<double>(error, std::abs(got[i] - want[i]));
    }
    // Two layers of 8-bit rounding: a few hundredths of the output's range.
    EXPECT_LT(error, 0.03 * scale);
  }
  {
    const SmallCnn<B> model{nn::Conv2dConfig(2, 6, {3, 3}).with_padding({1, 1}).init<B>(device),
                            nn::LinearConfig(6 * 5 * 5, 4).init<B>(device)};
    data::DataLoader calibration = Loader(16, {2, 5, 5}, 0.0, 1.0, 8, 4);
    const SmallCnn<B> q = quant::quantize(model, calibration, Runner<SmallCnn<B>, 4>(device),
                                          quant::QuantConfig().with_batches(2));
    ASSERT_TRUE(q.conv.int8.has_value() && q.fc.int8.has_value());
    EXPECT_EQ(q.conv.int8->weight->value.shape(), (std::array<int64_t, 4>{6, 2, 3, 3}));
    const auto x = calibration.epoch(0).begin().operator*().inputs_as<B, 4, Float>(device);
    const std::vector<float> want = model.forward(x).to_vector<float>();
    const std::vector<float> got = q.forward(x).to_vector<float>();
    double scale = 0, error = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max<double>(scale, std::abs(want[i]));
      error = std::max<double>(error, std::abs(got[i] - want[i]));
    }
    EXPECT_LT(error, 0.03 * scale);
  }
}

TEST(Quantize, PercentileCalibrationClipsOutliers) {
  B::Device device;
  manual_seed(7);
  const OneLinear<B> model{nn::LinearConfig(8, 3).init<B>(device)};
  // Inputs in [0, 1] and one of 1000.
  ir::TensorData inputs(ir::DType::kF32, {256, 8});
  for (int64_t i = 0; i < inputs.num_elements(); ++i) inputs.SetDouble(i, (i % 97) / 96.0);
  inputs.SetDouble(100, 1000.0);
  data::DataLoader loader = data::DataLoaderConfig(64).init(std::make_shared<data::InMemoryDataset>(
      std::move(inputs), ir::TensorData(ir::DType::kI64, {256})));
  const auto run = Runner<OneLinear<B>, 2>(device);
  const OneLinear<B> by_range = quant::quantize(model, loader, run);
  const OneLinear<B> clipped = quant::quantize(
      model, loader, run, quant::QuantConfig().with_percentile(99.9).with_batches(0));
  EXPECT_FLOAT_EQ(by_range.fc.int8->input_scale, 1000.0f / 255);
  EXPECT_FLOAT_EQ(clipped.fc.int8->input_scale, 1.0f / 255);
}

TEST(Quantize, RejectsBadCalls) {
  B::Device device;
  const OneLinear<B> model{nn::LinearConfig(4, 2).init<B>(device)};
  const auto run = Runner<OneLinear<B>, 2>(device);
  data::DataLoader loader = Loader(8, {4}, 0.0, 1.0, 4, 5);
  EXPECT_THROW(quant::quantize(model, loader, run, quant::QuantConfig().with_percentile(40)),
               Error);
  const OneLinear<B> q = quant::quantize(model, loader, run);
  EXPECT_THROW(quant::quantize(q, loader, run), Error);  // already int8
  // A run that never calls the layer leaves it without a range.
  EXPECT_THROW(quant::quantize(model, loader, [](const OneLinear<B>&, const data::Batch&) {}),
               Error);
}

}  // namespace
}  // namespace kiln::testing
