// kiln::jit on kiln::Cpu (frontend/jit.h): a replayed training step goes straight to the compiled
// program (no compile and no cache lookup), updates the parameters and the optimizer's buffers in
// place through buffer donation, and the Learner's jitted steps train as its eager ones do.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using codegen::cpu::GetGraphCacheStats;
template <int R>
using TF = Tensor<Cpu, R, Float>;

struct Mlp {
  nn::Linear<Cpu> fc1, fc2;
  KILN_MODULE(Mlp, fc1, fc2);
  TF<2> forward(const TF<2>& x) const { return fc2.forward(activation::relu(fc1.forward(x))); }
};

Mlp MakeMlp() {
  manual_seed(3);
  const Cpu::Device device;
  return Mlp{nn::LinearConfig(16, 32).init<Cpu>(device), nn::LinearConfig(32, 4).init<Cpu>(device)};
}

// The addresses of the parameters' buffers.
std::vector<const void*> Buffers(const Mlp& model) {
  std::vector<const void*> out;
  model.visit([&](const std::string&, const auto& t) { out.push_back(t.ref()->data->data()); });
  return out;
}

TEST(JitReplay, SkipsTheCompileCacheAndUpdatesInPlace) {
  Mlp model = MakeMlp();
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.05).with_momentum(0.9).init();
  auto step = jit(
      [&](const TF<2>& x, const Tensor<Cpu, 1, Int>& y) {
        auto loss = nn::cross_entropy(model.forward(x), y);
        sgd.step(model, loss.backward());
        return loss;
      },
      model, sgd);
  const Cpu::Device device;
  const TF<2> x = TF<2>::random_normal({8, 16}, 0, 1, device);
  const auto y =
      Tensor<Cpu, 1, Int>::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8}, device);
  realize(x, y);
  for (int i = 0; i < 3; ++i) (void)step(x, y);  // eager (state grows), recorded, replayed
  ASSERT_EQ(step.stats().replays, 1);

  const codegen::GraphCacheStats cache = GetGraphCacheStats();
  const int64_t donated = detail::GetEngineStats().arguments_donated;
  const std::vector<const void*> buffers = Buffers(model);
  double last = 0;
  for (int i = 0; i < 5; ++i) last = step(x, y).item();
  EXPECT_EQ(step.stats().replays, 6);
  // No compile, and not even a cache lookup: the replay runs the program it holds.
  EXPECT_EQ(GetGraphCacheStats().compiles, cache.compiles);
  EXPECT_EQ(GetGraphCacheStats().hits, cache.hits);
  // Every parameter, momentum buffer and the step count were handed over each step (4 + 4 + 1),
  // and the parameters stayed in their buffers.
  EXPECT_EQ(detail::GetEngineStats().arguments_donated - donated, 5 * 9);
  EXPECT_EQ(Buffers(model), buffers);
  EXPECT_TRUE(std::isfinite(last));
}

TEST(JitReplay, AParameterTheUserStillHoldsIsNotOverwritten) {
  Mlp model = MakeMlp();
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.05).init();
  auto step = jit(
      [&](const TF<2>& x) {
        auto loss = model.forward(x).square().mean();
        sgd.step(model, loss.backward());
        return loss;
      },
      model, sgd);
  const TF<2> x = TF<2>::random_normal({4, 16}, 0, 1, Cpu::Device());
  for (int i = 0; i < 3; ++i) (void)step(x);
  const TF<1> held = *model.fc2.bias;  // the user keeps this step's value
  const std::vector<float> value = held.to_vector();
  (void)step(x);
  EXPECT_EQ(held.to_vector(), value);
  EXPECT_NE(model.fc2.bias->to_vector(), value);
}

// The Learner runs its steps through kiln::jit by default; with_jit(false) is the eager loop. Both
// train the same model to the same bits.
TEST(JitReplay, LearnerJittedAndEagerTrainAlike) {
  const auto train = [](bool use_jit) {
    Mlp model = MakeMlp();
    optim::Adam adam = optim::AdamConfig().with_lr(0.01).init();
    const Cpu::Device device;
    std::vector<data::Batch> batches;
    manual_seed(11);
    for (int i = 0; i < 6; ++i) {
      data::Batch batch;
      batch.inputs = TF<2>::random_normal({8, 16}, 0, 1, device).into_data();
      std::vector<int64_t> labels;
      for (int k = 0; k < 8; ++k) labels.push_back((i + k) % 4);
      batch.targets = Tensor<Cpu, 1, Int>::from_vector(labels, {8}, device).into_data();
      batches.push_back(std::move(batch));
    }
    auto step_fn = [&](Mlp& m, const data::Batch& batch) {
      auto logits = m.forward(batch.inputs_as<Cpu, 2>(device));
      auto labels = batch.targets_as<Cpu, 1>(device);
      return train::StepOutput<Cpu>{nn::cross_entropy(logits, labels), logits, labels};
    };
    train::Learner learner(
        model, adam, step_fn,
        train::LearnerConfig().with_epochs(2).with_progress(false).with_summary(nullptr).with_jit(
            use_jit));
    learner.fit(batches, batches);
    std::vector<std::vector<float>> values;
    model.visit([&](const std::string&, const auto& t) { values.push_back(t.to_vector()); });
    return std::pair{values, learner.records()};
  };
  const auto [jit_values, jit_records] = train(true);
  const auto [eager_values, eager_records] = train(false);
  EXPECT_EQ(jit_values, eager_values);
  ASSERT_EQ(jit_records.size(), eager_records.size());
  for (size_t i = 0; i < jit_records.size(); ++i) {
    EXPECT_EQ(jit_records[i].metric, eager_records[i].metric);
    EXPECT_EQ(jit_records[i].value, eager_records[i].value) << jit_records[i].metric;
  }
}

}  // namespace
}  // namespace kiln
