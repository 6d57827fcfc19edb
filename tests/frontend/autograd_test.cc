// Gradients through the frontend: backward() on lazy tensors, checked against closed forms and
// central differences; the tape (realized losses, detach, no-grad scopes); gradients of
// gradients; one graph per training step.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using F64 = TF<1>;

F64 Vec(const std::vector<double>& values) {
  return F64::from_vector(values, {static_cast<int64_t>(values.size())}, B::Device{},
                          ir::DType::kF64);
}

TEST(Autograd, CubeSumGivesThreeXSquared) {
  const std::vector<double> xs = {-1.5, 0.25, 2.0, 3.0};
  F64 x = Vec(xs).require_grad();
  EXPECT_TRUE(x.requires_grad());
  TF<0> y = (x * x * x).sum();
  EXPECT_TRUE(y.tracks_grad());
  Gradients grads = y.backward();
  ASSERT_EQ(grads.size(), 1u);
  std::optional<F64> g = x.grad(grads);
  ASSERT_TRUE(g.has_value());
  const std::vector<double> got = g->to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_DOUBLE_EQ(got[i], 3 * xs[i] * xs[i]);
}

// Central differences of a scalar function of one vector, evaluated through the frontend with
// the tape off.
std::vector<double> NumericGradient(const std::function<TF<0>(const F64&)>& f,
                                    const std::vector<double>& xs, double h = 1e-6) {
  NoGradGuard no_grad;
  std::vector<double> grad(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    std::vector<double> plus = xs, minus = xs;
    plus[i] += h;
    minus[i] -= h;
    grad[i] = (f(Vec(plus)).item() - f(Vec(minus)).item()) / (2 * h);
  }
  return grad;
}

void ExpectGradientMatchesNumeric(const std::function<TF<0>(const F64&)>& f,
                                  const std::vector<double>& xs) {
  F64 x = Vec(xs).require_grad();
  std::optional<F64> g = x.grad(f(x).backward());
  ASSERT_TRUE(g.has_value());
  const std::vector<double> got = g->to_vector<double>();
  const std::vector<double> want = NumericGradient(f, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

const std::vector<double> kInputs = {0.3, -1.2, 0.7, 2.1, -0.4, 1.6};

TEST(Autograd, CompositeOpsMatchFiniteDifferences) {
  // Each composite is built by the frontend from several primitives.
  ExpectGradientMatchesNumeric(
      [](const F64& x) {
        auto w = Vec({0.5, -1.0, 2.0, 0.1, 0.3, -0.7});
        return (activation::softmax(x.reshape<2>({2, 3}), 1).reshape<1>({6}) * w).sum();
      },
      kInputs);
  ExpectGradientMatchesNumeric(
      [](const F64& x) {
        auto w = Vec({0.5, -1.0, 2.0, 0.1, 0.3, -0.7});
        return (activation::log_softmax(x, 0) * w).sum();
      },
      kInputs);
  ExpectGradientMatchesNumeric(
      [](const F64& x) { return activation::gelu(x).sum() + activation::sigmoid(x).prod(); },
      kInputs);
  ExpectGradientMatchesNumeric(
      [](const F64& x) {
        auto m = x.reshape<2>({2, 3});
        auto normed = (m - m.mean(1, keepdim)) / (m.var(1, keepdim, false) + 1e-5).sqrt();
        auto w = TF<2>::from_vector(std::vector<double>{1, 2, -1, 0.5, 3, -2}, {2, 3}, B::Device{},
                                    ir::DType::kF64);
        return (normed * w).sum();
      },
      kInputs);
  ExpectGradientMatchesNumeric(
      [](const F64& x) {
        auto a = x.reshape<2>({2, 3});
        auto b = TF<2>::from_vector(std::vector<double>{1, -2, 0.5, 3, 0.25, -1}, {3, 2},
                                    B::Device{}, ir::DType::kF64);
        // matmul, a broadcast add of a row and a max reduction.
        auto c = a.matmul(b) + a.sum(0).unsqueeze<0>().slice({Range{}, Range{0, 2}});
        return c.max(1).sum() + c.abs().mean();
      },
      kInputs);
}

TEST(Autograd, GradientOfGradient) {
  const std::vector<double> xs = {-0.8, 0.1, 0.9, 1.7};
  F64 x = Vec(xs).require_grad();
  std::optional<F64> g = x.grad(activation::tanh(x).sum().backward());
  ASSERT_TRUE(g.has_value());
  // The first gradient depends on x, so it is taped and differentiable again.
  EXPECT_TRUE(g->tracks_grad());
  std::optional<F64> h = x.grad(g->sum().backward());
  ASSERT_TRUE(h.has_value());
  const std::vector<double> first = g->to_vector<double>(), second = h->to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = std::tanh(xs[i]);
    EXPECT_NEAR(first[i], 1 - t * t, 1e-12);
    EXPECT_NEAR(second[i], -2 * t * (1 - t * t), 1e-12);
  }
}

TEST(Autograd, RealizedLossKeepsItsTape) {
  F64 x = Vec({1.0, 2.0, 3.0}).require_grad();
  TF<0> y = (x * x).sum();
  EXPECT_DOUBLE_EQ(y.item(), 14.0);  // realizes the loss
  std::optional<F64> g = x.grad(y.backward());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->to_vector<double>(), (std::vector<double>{2, 4, 6}));
}

TEST(Autograd, DetachAndNoGradCutTheTape) {
  F64 x = Vec({1.0, -2.0, 3.0}).require_grad();
  // d/dx sum(stop(x) * x) = stop(x) = x.
  std::optional<F64> g = x.grad((x.detach() * x).sum().backward());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->to_vector<double>(), (std::vector<double>{1, -2, 3}));
  // A pending value of every float dtype detaches (an identity node of its own dtype).
  for (ir::DType dtype : {ir::DType::kF64, ir::DType::kF32, ir::DType::kBF16, ir::DType::kF16}) {
    EXPECT_EQ(x.mul(2.0).cast(dtype).detach().cast(ir::DType::kF64).to_vector<double>(),
              (std::vector<double>{2, -4, 6}))
        << ir::DTypeName(dtype);
  }

  NoGradGuard no_grad;
  EXPECT_FALSE(GradEnabled());
  TF<0> y = (x * 2).sum();
  EXPECT_FALSE(y.tracks_grad());
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, OnlyTheLeavesTheLossReaches) {
  F64 used = Vec({1.0, 2.0}).require_grad();
  F64 unused = Vec({3.0, 4.0}).require_grad();
  F64 constant = Vec({5.0, 6.0});
  Gradients grads = (used * constant).sum().backward();
  EXPECT_EQ(grads.size(), 1u);
  EXPECT_TRUE(used.grad(grads).has_value());
  EXPECT_FALSE(unused.grad(grads).has_value());
  EXPECT_FALSE(constant.grad(grads).has_value());
  EXPECT_EQ(used.grad(grads)->to_vector<double>(), (std::vector<double>{5, 6}));
}

TEST(Autograd, SeedForNonScalarOutputs) {
  F64 x = Vec({1.0, 2.0, 3.0}).require_grad();
  F64 y = x * x;
  // Without a seed a non-scalar output is an error that says what to do.
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a seed"), std::string::npos) << e.what();
  }
  std::optional<F64> g = x.grad(y.backward(Vec({1.0, 0.5, -1.0})));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->to_vector<double>(), (std::vector<double>{2, 2, -6}));
}

// A linear model trained with plain SGD: forward, backward and update recorded lazily and
// realized together, so each step runs one graph (and the first one, before it, the parameters'
// initialisation); the loss reaches ~0 on exactly linear data.
TEST(Autograd, TrainingStepIsOneGraph) {
  B::Device device;
  auto xs = TF<2>::from_data({{1, 2}, {3, -1}, {0.5, 0.5}, {-2, 1}}, device);
  auto ys = TF<2>::from_data({{5}, {1}, {1.5}, {0}}, device);  // y = x0 + 2 x1
  auto w = TF<2>::zeros({2, 1}, device).require_grad();
  auto b = TF<1>::zeros({1}, device).require_grad();
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 300; ++step) {
    TF<0> loss = (xs.matmul(w) + b.unsqueeze<0>() - ys).square().mean();
    Gradients grads = loss.backward();
    {
      NoGradGuard no_grad;
      w = (w - 0.1 * *w.grad(grads)).require_grad();
      b = (b - 0.1 * *b.grad(grads)).require_grad();
    }
    const int64_t before = detail::GetEngineStats().graphs_executed;
    realize(w, b, loss);
    // Step 0 first computes the zeros that w and b start as, still pending, in a graph of their
    // own (engine.cc: pending parameters), so that its step graph is the later steps' one.
    EXPECT_EQ(detail::GetEngineStats().graphs_executed - before, step == 0 ? 2 : 1)
        << "step " << step;
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
  }
  EXPECT_GT(first_loss, 1.0);
  EXPECT_LT(last_loss, 1e-6);
  const std::vector<double> weights = w.to_vector<double>();
  EXPECT_NEAR(weights[0], 1.0, 1e-3);
  EXPECT_NEAR(weights[1], 2.0, 1e-3);
}

}  // namespace
}  // namespace kiln::testing
