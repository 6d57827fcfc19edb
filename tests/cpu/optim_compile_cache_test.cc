// Optimizer steps on kiln::Cpu compile once: the learning rate, Adam's bias corrections and
// AdamW's decay factor change every step but enter the graph as realized rank-0 tensors, and
// the state starts as realized zeros, so every step after the first (after the second for SGD
// with momentum, whose buffer starts as the first gradient, as in torch) is a compile-cache hit.
#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using codegen::cpu::GetGraphCacheStats;

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

TEST(OptimCompileCacheTest, SgdMomentumCompilesTwice) {
  optim::Sgd sgd = optim::SgdConfig().with_momentum(0.9).with_nesterov(true).init();
  EXPECT_EQ(CompilesPerStep(sgd, 5), (std::vector<int64_t>{1, 1, 0, 0, 0}));
}

}  // namespace
}  // namespace kiln
