// Mixed precision (frontend/amp): the autocast policy on the ops it names, its values against
// the f32 computation rounded the way the policy says, f32 master weights for bf16/f16
// parameters, and dynamic loss scaling. Part of the backend suite, so the casts and the
// half-precision kernels run on every backend.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "frontend/amp/autocast.h"
#include "frontend/amp/grad_scaler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ir::DType;
using ::testing::HasSubstr;
namespace act = kiln::activation;

float RoundTo(DType dtype, double v) { return static_cast<float>(base::RoundToDType(v, dtype)); }

template <class Backend>
struct Net {
  nn::Linear<Backend> fc1;
  nn::Linear<Backend> fc2;
  KILN_MODULE(Net, fc1, fc2);
};

TEST(Autocast, ThePolicyDecidesEachOpsDType) {
  const B::Device device;
  manual_seed(1);
  auto fc = nn::LinearConfig(4, 3).init<B>(device);
  auto norm = nn::LayerNormConfig(3).init<B>(device);
  const TF<2> x = TF<2>::from_vector(RandomFloats(8, 1), {2, 4}, device);
  const TI<1> labels = TI<1>::from_vector(std::vector<int64_t>{0, 2}, {2}, device);
  const TF<2> x64 = x.cast(DType::kF64);
  for (DType low : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(ir::DTypeName(low));
    amp::AutocastGuard autocast(low);
    EXPECT_EQ(amp::AutocastDType(), low);
    const TF<2> y = fc.forward(x);  // matmul and bias in the narrow dtype
    EXPECT_EQ(y.dtype(), low);
    EXPECT_EQ(x.matmul(x.transpose()).dtype(), low);
    EXPECT_EQ(act::relu(y).dtype(), low);  // elementwise ops keep their operands' dtype
    EXPECT_EQ(y.add(x.slice(1, 0, 3)).dtype(), DType::kF32);  // ... and promote as usual
    EXPECT_EQ(act::softmax(y, 1).dtype(), DType::kF32);
    EXPECT_EQ(act::log_softmax(y, 1).dtype(), DType::kF32);
    EXPECT_EQ(nn::cross_entropy(y, labels).dtype(), DType::kF32);
    EXPECT_EQ(nn::mse_loss(y, act::relu(y)).dtype(), DType::kF32);
    EXPECT_EQ(norm.forward(y).dtype(), DType::kF32);
    EXPECT_EQ(y.sum().dtype(), DType::kF32);
    EXPECT_EQ(y.max().dtype(), low);
    EXPECT_EQ(x64.matmul(x64.transpose()).dtype(), DType::kF64);  // f64 is left alone
    {
      amp::AutocastGuard off(std::nullopt);
      EXPECT_FALSE(amp::AutocastDType().has_value());
      EXPECT_EQ(fc.forward(x).dtype(), DType::kF32);
    }
    EXPECT_EQ(amp::AutocastDType(), low);
  }
  EXPECT_FALSE(amp::AutocastDType().has_value());
  EXPECT_EQ(fc.forward(x).dtype(), DType::kF32);
  EXPECT_EQ(fc.weight.dtype(), DType::kF32);  // the parameters are never cast in place
}

TEST(Autocast, RejectsADTypeItCannotComputeIn) {
  try {
    amp::AutocastGuard autocast(DType::kF64);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("autocast: computes in bf16 or f16, not f64"));
  }
}

// A bf16/f16 matmul is each operand rounded to the narrow dtype, multiplied and summed in f32
// (or wider) and the sum rounded once: within one rounding step of the exact product of the
// rounded operands.
TEST(Autocast, MatmulValuesAreTheRoundedOperandsProductRoundedOnce) {
  const B::Device device;
  const int64_t m = 5, k = 37, n = 6;
  const std::vector<float> a = RandomFloats(m * k, 11), b = RandomFloats(k * n, 12);
  const TF<2> ta = TF<2>::from_vector(a, {m, k}, device),
              tb = TF<2>::from_vector(b, {k, n}, device);
  for (DType low : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(ir::DTypeName(low));
    std::vector<float> got;
    {
      amp::AutocastGuard autocast(low);
      got = ta.matmul(tb).cast(DType::kF32).to_vector<float>();
    }
    const double step = low == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double term =
              static_cast<double>(RoundTo(low, a[i * k + p])) * RoundTo(low, b[p * n + j]);
          exact += term;
          magnitude += std::abs(term);
        }
        // One rounding of the result, plus f32 accumulation error on the way.
        const double bound = std::abs(exact) * step + magnitude * 1e-6 + 1e-30;
        EXPECT_NEAR(got[i * n + j], exact, bound) << i << "," << j;
      }
    }
  }
}

// Backward differentiates through autocast's casts: the parameters' gradients are f32 and close
// to the f32 run's.
TEST(Autocast, GradientsReachTheF32ParametersThroughTheCasts) {
  const B::Device device;
  manual_seed(7);
  Net<B> net{nn::LinearConfig(6, 8).init<B>(device), nn::LinearConfig(8, 3).init<B>(device)};
  const TF<2> x = TF<2>::from_vector(RandomFloats(4 * 6, 3), {4, 6}, device);
  const TI<1> labels = TI<1>::from_vector(std::vector<int64_t>{0, 1, 2, 1}, {4}, device);
  auto loss_of = [&] {
    return nn::cross_entropy(net.fc2.forward(act::relu(net.fc1.forward(x))), labels);
  };
  const Gradients f32 = loss_of().backward();
  Gradients bf16;
  {
    amp::AutocastGuard autocast(DType::kBF16);
    bf16 = loss_of().backward();
  }
  int checked = 0;
  net.visit([&](const std::string& name, const auto& param) {
    SCOPED_TRACE(name);
    const auto want = param.grad(f32);
    const auto got = param.grad(bf16);
    ASSERT_TRUE(want && got);
    EXPECT_EQ(got->dtype(), DType::kF32);
    const std::vector<float> w = want->template to_vector<float>();
    const std::vector<float> g = got->template to_vector<float>();
    double scale = 0;
    for (float v : w) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], 0.03 * scale + 1e-6) << i;
    ++checked;
  });
  EXPECT_EQ(checked, 4);
}

// p = 1 in bf16 and a step of 1e-3: the bf16 spacing at 1 is 2^-7, so without an f32 copy every
// update would round back to 1. With one, the parameter follows the f32 trajectory rounded.
TEST(MasterWeights, SmallUpdatesOfAHalfParameterAccumulate) {
  const B::Device device;
  for (DType half : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(ir::DTypeName(half));
    TF<1> p = TF<1>::from_vector(std::vector<float>{1.0f, -2.0f}, {2}, device).cast(half);
    p.require_grad();
    const TF<1> g = TF<1>::from_vector(std::vector<float>{1e-3f, -2e-3f}, {2}, device).cast(half);
    optim::Sgd sgd = optim::SgdConfig().with_lr(1.0).init();
    std::vector<float> master = {1.0f, -2.0f};
    const std::vector<float> grad = {RoundTo(half, 1e-3), RoundTo(half, -2e-3)};
    for (int step = 0; step < 20; ++step) {
      NoGradGuard no_grad;
      p = sgd.updated("p", p, g).realize();
      for (size_t i = 0; i < 2; ++i) master[i] = master[i] - grad[i];
    }
    EXPECT_EQ(p.dtype(), half);
    const std::vector<float> got = p.cast(DType::kF32).to_vector<float>();
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(got[i], RoundTo(half, master[i])) << i;
    EXPECT_NE(got[0], 1.0f);
    // The copy is state: f32, saved and restored with the rest.
    const optim::NamedState state = sgd.state();
    ASSERT_TRUE(state.tensors.contains("p.master"));
    const ir::TensorData& saved = state.tensors.at("p.master");
    EXPECT_EQ(saved.dtype(), DType::kF32);
    EXPECT_FLOAT_EQ(saved.GetDouble(0), master[0]);
    optim::Sgd resumed = optim::SgdConfig().with_lr(1.0).init();
    resumed.load_state(state);
    NoGradGuard no_grad;
    const TF<1> next = resumed.updated("p", p, g);
    EXPECT_EQ(next.cast(DType::kF32).to_vector<float>()[0], RoundTo(half, master[0] - grad[0]));
  }
}

TEST(MasterWeights, AdamKeepsItsMomentsInF32ForABf16Parameter) {
  const B::Device device;
  const std::vector<float> init = RandomFloats(6, 5), grads = RandomFloats(6, 6);
  TF<1> half = TF<1>::from_vector(init, {6}, device).cast(DType::kBF16);
  TF<1> wide = half.cast(DType::kF32);  // the same start
  const TF<1> g_half = TF<1>::from_vector(grads, {6}, device).cast(DType::kBF16);
  const TF<1> g_wide = g_half.cast(DType::kF32);
  optim::Adam a = optim::AdamConfig().with_lr(1e-2).init();
  optim::Adam b = optim::AdamConfig().with_lr(1e-2).init();
  NoGradGuard no_grad;
  for (int step = 0; step < 5; ++step) {
    half = a.updated("p", half, g_half).realize();
    wide = b.updated("p", wide, g_wide).realize();
  }
  // The bf16 parameter is the f32 run rounded: its moments and copy are the f32 run's.
  const std::vector<float> got = half.cast(DType::kF32).to_vector<float>();
  const std::vector<float> want = wide.to_vector<float>();
  // Fused differently, the two runs may contract a multiply-add differently: one bf16 step.
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], RoundTo(DType::kBF16, want[i]), std::abs(want[i]) * std::ldexp(1.0, -7))
        << i;
  }
  const optim::NamedState state = a.state();
  EXPECT_EQ(state.tensors.at("p.exp_avg").dtype(), DType::kF32);
  EXPECT_EQ(state.tensors.at("p.master").dtype(), DType::kF32);
}

template <class Backend>
struct Scalar {
  Tensor<Backend, 1> w;
  KILN_MODULE(Scalar, w);
};

TEST(GradScaler, SkipsOverflowingStepsAndAdaptsTheScale) {
  const B::Device device;
  Scalar<B> model{TF<1>::from_vector(std::vector<float>{1.0f, 2.0f}, {2}, device)};
  model.w.require_grad();
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.5).init();
  amp::GradScaler scaler =
      amp::GradScalerConfig().with_init_scale(1024.0).with_growth_interval(2).init();
  const TF<1> x = TF<1>::from_vector(std::vector<float>{3.0f, -1.0f}, {2}, device);

  // loss = sum(w * x): the gradient is x; scaled, it is 1024 x, unscaled x again.
  auto step = [&](const TF<1>& input) {
    const TF<1> w = model.w;  // step() replaces model.w; the gradients stay keyed by this one
    Gradients grads = scaler.scale(w.mul(input).sum()).backward();
    const bool stepped = scaler.step(sgd, model, grads);
    const std::optional<TF<1>> unscaled = w.grad(grads);
    EXPECT_TRUE(unscaled.has_value());
    if (stepped && unscaled) {
      EXPECT_EQ(unscaled->to_vector<float>(), input.to_vector<float>());
    }
    return stepped;
  };
  const TF<0> loss = model.w.mul(x).sum();
  EXPECT_FLOAT_EQ(scaler.scale(loss).item(), loss.item() * 1024.0f);
  EXPECT_TRUE(step(x));
  EXPECT_THAT(model.w.to_vector<float>(), ::testing::ElementsAre(1.0f - 1.5f, 2.0f + 0.5f));
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_TRUE(step(x));  // the second finite step in a row doubles the scale
  EXPECT_EQ(scaler.scale(), 2048.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  // An infinite gradient: no step, the scale halves, the skip is counted.
  const std::vector<float> before = model.w.to_vector<float>();
  const TF<1> huge =
      TF<1>::from_vector(std::vector<float>{std::numeric_limits<float>::max(), 1.0f}, {2}, device);
  EXPECT_FALSE(step(huge));
  EXPECT_EQ(model.w.to_vector<float>(), before);
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(sgd.state().values.at("w.step"), "2");  // the optimizer never saw the skipped step
  const TF<1> nan = TF<1>::from_vector(
      std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 1.0f}, {2}, device);
  EXPECT_FALSE(step(nan));
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.scale(), 512.0);

  amp::GradScaler restored = amp::GradScalerConfig().init();
  restored.load_state(scaler.state());
  EXPECT_EQ(restored.scale(), 512.0);
  EXPECT_EQ(restored.skipped_steps(), 2);
  EXPECT_EQ(restored.growth_tracker(), 0);
}

TEST(GradScaler, RefusesF16GradientsAndBadKnobs) {
  const B::Device device;
  Scalar<B> model{TF<1>::from_vector(std::vector<float>{1.0f}, {1}, device).cast(DType::kF16)};
  model.w.require_grad();
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.5).init();
  amp::GradScaler scaler;
  const TF<0> scaled = scaler.scale(model.w.sum());
  EXPECT_EQ(scaled.dtype(), DType::kF32);  // the scale is f32, so an f16 loss is promoted
  Gradients grads = scaled.backward();
  try {
    scaler.step(sgd, model, grads);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter 'w' has an f16 gradient"));
  }
  EXPECT_THROW(amp::GradScalerConfig().with_backoff_factor(1.5).init(), Error);
  EXPECT_THROW(amp::GradScalerConfig().with_growth_factor(1.0).init(), Error);
  EXPECT_THROW(amp::GradScalerConfig().with_init_scale(0.0).init(), Error);
  EXPECT_THROW(amp::GradScalerConfig().with_growth_interval(0).init(), Error);
  EXPECT_THROW(scaler.load_state({{"scale", "-1"}}), Error);
  EXPECT_THROW(scaler.load_state({{"bogus", "1"}}), Error);
}

}  // namespace
}  // namespace kiln::testing
