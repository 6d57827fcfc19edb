// Optimizer steps on kiln::Cpu compile once: the learning rate and the step counts change every
// step but are state held in tensors (Adam's bias corrections and AdamW's decay factor are
// computed from them in the graph), and the state starts as realized zeros, so every step after
// the first (after the second for SGD with momentum, whose buffer starts as the first gradient,
// as in torch) is a compile-cache hit.
#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/graph_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using codegen::cpu::GetGraphCacheStats;
using ::testing::HasSubstr;

template <int R>
using TF = Tensor<Cpu, R, Float>;

/// Runs `steps` updates of a [5, 7] weight and a [7] bias with a new lr each step; returns
/// the number of graphs compiled at each step.
std::vector<int64_t> CompilesPerStep(optim::Optimizer& opt, int steps) {
  const Cpu::Device device;
  TF<2> w = TF<2>::random_normal({5, 7}, 0, 1, device);
  TF<1> b = TF<1>::random_normal({7}, 0, 1, device);
  realize(w, b);
  std::vector<int64_t> compiles;
  for (int step = 0; step < steps; ++step) {
    const TF<2> gw = TF<2>::random_normal({5, 7}, 0, 1, device);
    const TF<1> gb = TF<1>::random_normal({7}, 0, 1, device);
    realize(gw, gb);
    opt.set_lr(0.01 * (step + 1));
    const int64_t before = GetGraphCacheStats().compiles;
    w = opt.updated("w", w, gw);
    b = opt.updated("b", b, gb);
    std::vector<kiln::detail::TensorRef> refs = opt.state_tensors();
    refs.push_back(w.ref());
    refs.push_back(b.ref());
    kiln::detail::Realize(refs, std::source_location::current());
    compiles.push_back(GetGraphCacheStats().compiles - before);
  }
  return compiles;
}

TEST(OptimCompileCacheTest, AdamCompilesOnce) {
  optim::Adam adam = optim::AdamConfig().with_amsgrad(true).init();
  EXPECT_EQ(CompilesPerStep(adam, 5), (std::vector<int64_t>{1, 0, 0, 0, 0}));
}

TEST(OptimCompileCacheTest, AdamWRmsPropAdaGradCompileOnce) {
  // Distinct hyperparameters from the Adam test keep their graphs distinct (literal constants
  // are structure), so the first step of each compiles.
  optim::Adam adamw = optim::AdamWConfig().with_weight_decay(0.05).init();
  EXPECT_EQ(CompilesPerStep(adamw, 4), (std::vector<int64_t>{1, 0, 0, 0}));
  optim::RmsProp rmsprop = optim::RmsPropConfig().with_momentum(0.9).with_centered(true).init();
  EXPECT_EQ(CompilesPerStep(rmsprop, 4), (std::vector<int64_t>{1, 0, 0, 0}));
  optim::AdaGrad adagrad = optim::AdaGradConfig().with_lr_decay(0.1).init();
  EXPECT_EQ(CompilesPerStep(adagrad, 4), (std::vector<int64_t>{1, 0, 0, 0}));
}

template <class B>
struct TwoLayer {
  nn::Linear<B> fc1, fc2;
  KILN_MODULE(TwoLayer, fc1, fc2);
};

// A freshly built model's parameters are still pending (lazy random initialisation); the first
// step realizes them in a graph of their own, so the step's graph is the same from the first step
// on and compiles once.
TEST(OptimCompileCacheTest, FirstTrainingStepCompilesTheStepOnce) {
  const Cpu::Device device;
  manual_seed(7);
  TwoLayer<Cpu> model{nn::LinearConfig(9, 13).init<Cpu>(device),
                      nn::LinearConfig(13, 3).init<Cpu>(device)};
  optim::Adam adam = optim::AdamConfig().with_lr(0.0123).init();
  const TF<2> x = TF<2>::random_normal({6, 9}, 0, 1, device);
  const TF<2> y = TF<2>::random_normal({6, 3}, 0, 1, device);
  realize(x, y);
  std::vector<int64_t> compiles, graphs;
  for (int step = 0; step < 4; ++step) {
    const int64_t before = GetGraphCacheStats().compiles;
    const int64_t graphs_before = kiln::detail::GetEngineStats().graphs_executed;
    TF<0> loss = nn::mse_loss(model.fc2.forward(activation::relu(model.fc1.forward(x))), y);
    Gradients grads = loss.backward();
    adam.step(model, grads);
    optim::realize_step(model, adam, loss);
    compiles.push_back(GetGraphCacheStats().compiles - before);
    graphs.push_back(kiln::detail::GetEngineStats().graphs_executed - graphs_before);
  }
  // Step 1: the parameters' initialisation, then the step; later steps: the cached step.
  EXPECT_EQ(graphs, (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(compiles, (std::vector<int64_t>{2, 0, 0, 0}));
}

// Realizations at one line that keep compiling new graphs (here: a new shape each time) warn once,
// naming the line; a loop that compiles once does not.
TEST(OptimCompileCacheTest, RecompilingCallSitesWarnOnce) {
  const Cpu::Device device;
  ::testing::internal::CaptureStderr();
  int line = 0;
  for (int i = 0; i < 12; ++i) {
    const TF<1> x = TF<1>::full({3 + i}, 0.5, device);
    line = __LINE__ + 1;
    (x * 3.25 + 1.0).to_vector<float>();
  }
  for (int i = 0; i < 12; ++i) {  // the same graph each time: no warning
    const TF<1> x = TF<1>::from_vector(std::vector<double>(5, 0.5 + i), {5}, device);
    (x * 2.75).to_vector<float>();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string site = absl::StrCat(__FILE__, ":", line, ": ");
  EXPECT_THAT(err, HasSubstr(site + "realizations here have compiled 8 different graphs"));
  EXPECT_THAT(err, HasSubstr("kiln::optim::realize_step(model, optimizer, loss)"));
  EXPECT_EQ(err.find("kiln: warning:"), err.rfind("kiln: warning:")) << err;  // once
}

TEST(OptimCompileCacheTest, SgdMomentumCompilesTwice) {
  optim::Sgd sgd = optim::SgdConfig().with_momentum(0.9).with_nesterov(true).init();
  EXPECT_EQ(CompilesPerStep(sgd, 5), (std::vector<int64_t>{1, 1, 0, 0, 0}));
}

}  // namespace
}  // namespace kiln
