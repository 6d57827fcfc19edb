// kiln::jit (frontend/jit.h) on the backend under test: replayed calls give the results of the
// same calls run eagerly, bit for bit, without running the function; what is bound on each call
// (arguments, host arrays, state) and what is captured (constants); when a signature records
// again and when it runs eagerly.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

struct Mlp {
  nn::Linear<B> fc1, fc2;
  KILN_MODULE(Mlp, fc1, fc2);
  TF<2> forward(const TF<2>& x) const { return fc2.forward(activation::relu(fc1.forward(x))); }
};

Mlp MakeMlp(uint64_t seed) {
  manual_seed(seed);
  B::Device device;
  return Mlp{nn::LinearConfig(6, 8).init<B>(device), nn::LinearConfig(8, 3).init<B>(device)};
}

TF<2> Inputs(int64_t rows, uint32_t seed) {
  return TF<2>::from_vector(RandomFloats(static_cast<size_t>(rows * 6), seed), {rows, 6},
                            B::Device());
}
TI<1> Labels(int64_t rows, uint32_t seed) {
  return TI<1>::from_vector(RandomInts(static_cast<size_t>(rows), seed, 0, 2), {rows}, B::Device());
}

std::vector<std::vector<float>> Values(const Mlp& model) {
  std::vector<std::vector<float>> out;
  model.visit([&](const std::string&, const auto& t) { out.push_back(t.to_vector()); });
  return out;
}

TEST(Jit, InferenceReplaysWithoutRunningTheFunction) {
  Mlp model = MakeMlp(1);
  int runs = 0;
  auto infer = jit(
      [&](const TF<2>& x) {
        ++runs;
        return model.forward(x);
      },
      model);
  for (uint32_t seed = 0; seed < 4; ++seed) {
    const TF<2> x = Inputs(5, seed);
    const std::vector<float> got = infer(x).to_vector();
    EXPECT_EQ(got, model.forward(x).to_vector()) << "call " << seed;
  }
  EXPECT_EQ(runs, 1);
  const JitStats stats = infer.stats();
  EXPECT_EQ(stats.calls, 4);
  EXPECT_EQ(stats.recordings, 1);
  EXPECT_EQ(stats.replays, 3);
  EXPECT_EQ(stats.eager_calls, 0);
  EXPECT_EQ(stats.signatures, 1);
}

TEST(Jit, ReplayRecordsNoOps) {
  Mlp model = MakeMlp(2);
  auto infer = jit([&](const TF<2>& x) { return model.forward(x); }, model);
  const TF<2> x = Inputs(5, 7);
  (void)infer(x).to_vector();
  // A replay makes the result's node and nothing else: no op is recorded.
  const uint64_t before = detail::NextSerial();
  const TF<2> y = infer(x);
  EXPECT_EQ(detail::NextSerial() - before, 1u);
  EXPECT_TRUE(y.ref()->realized());
}

TEST(Jit, ANewShapeRecordsAgainAndAnOldOneReplays) {
  Mlp model = MakeMlp(3);
  int runs = 0;
  auto infer = jit(
      [&](const TF<2>& x) {
        ++runs;
        return model.forward(x);
      },
      model);
  for (int64_t rows : {4, 4, 9, 9, 4}) {
    const TF<2> x = Inputs(rows, static_cast<uint32_t>(rows));
    EXPECT_EQ(infer(x).to_vector(), model.forward(x).to_vector()) << rows << " rows";
  }
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(infer.stats().signatures, 2);
  EXPECT_EQ(infer.stats().replays, 3);
}

// The same training steps, eagerly (the README's loop) and jitted, give the same parameters and
// losses bit for bit; the optimizer's state, step counts and learning rate are the jit's state.
template <class Optimizer>
void ExpectJittedTrainingMatchesEager(Optimizer eager_opt, Optimizer jit_opt, double lr_step) {
  Mlp eager = MakeMlp(5);
  Mlp jitted = MakeMlp(5);
  ASSERT_EQ(Values(eager), Values(jitted));
  auto step = jit(
      [&](const TF<2>& x, const TI<1>& y) {
        auto loss = nn::cross_entropy(jitted.forward(x), y);
        jit_opt.step(jitted, loss.backward());
        return loss;
      },
      jitted, jit_opt);
  for (uint32_t i = 0; i < 6; ++i) {
    const TF<2> x = Inputs(7, 100 + i);
    const TI<1> y = Labels(7, 200 + i);
    auto loss = nn::cross_entropy(eager.forward(x), y);
    eager_opt.step(eager, loss.backward());
    optim::realize_step(eager, eager_opt, loss);
    const TF<0> jit_loss = step(x, y);
    EXPECT_EQ(jit_loss.item(), loss.item()) << "step " << i;
    EXPECT_EQ(Values(jitted), Values(eager)) << "step " << i;
    EXPECT_FALSE(jit_loss.ref()->tracks_grad);
    // A schedule: the learning rate is state, so changing it changes no recording.
    eager_opt.set_lr(eager_opt.lr() * lr_step);
    jit_opt.set_lr(jit_opt.lr() * lr_step);
  }
  // Step 1 creates the optimizer's buffers (run eagerly: its state grows), step 2 is recorded,
  // the rest replay.
  const JitStats stats = step.stats();
  EXPECT_EQ(stats.recordings, 2);
  EXPECT_EQ(stats.replays, 4);
  EXPECT_EQ(stats.eager_calls, 0);
  EXPECT_EQ(eager_opt.state().values, jit_opt.state().values);
}

TEST(Jit, SgdTrainingMatchesEagerSteps) {
  ExpectJittedTrainingMatchesEager(optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init(),
                                   optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init(), 0.9);
}

TEST(Jit, AdamWTrainingMatchesEagerSteps) {
  ExpectJittedTrainingMatchesEager(optim::AdamWConfig().with_lr(0.01).init(),
                                   optim::AdamWConfig().with_lr(0.01).init(), 0.8);
}

TEST(Jit, StateReplacedBetweenCallsIsUsed) {
  Mlp model = MakeMlp(6);
  auto infer = jit([&](const TF<2>& x) { return model.forward(x); }, model);
  const TF<2> x = Inputs(3, 1);
  (void)infer(x);
  (void)infer(x);
  // As loading a checkpoint does: new values in the module.
  model.fc2.bias = TF<1>::from_vector(std::vector<float>{1, 2, 3}, {3}, B::Device());
  EXPECT_EQ(infer(x).to_vector(), model.forward(x).to_vector());
  EXPECT_EQ(infer.stats().replays, 2);
}

TEST(Jit, HostArrayArgumentsAreInputs) {
  Mlp model = MakeMlp(7);
  auto loss_of = jit(
      [&](const data::Batch& batch) {
        auto x = batch.inputs_as<B, 2>(B::Device());
        auto y = batch.targets_as<B, 1>(B::Device());
        return std::tuple{nn::cross_entropy(model.forward(x), y), y};
      },
      model);
  for (uint32_t i = 0; i < 3; ++i) {
    data::Batch batch{Inputs(4, 10 + i).into_data(), Labels(4, 20 + i).into_data()};
    const auto [loss, labels] = loss_of(batch);
    EXPECT_EQ(loss.item(),
              nn::cross_entropy(model.forward(TF<2>::from_tensor_data(batch.inputs, B::Device())),
                                TI<1>::from_tensor_data(batch.targets, B::Device()))
                  .item());
    EXPECT_EQ(labels.template to_vector<int64_t>(),
              TI<1>::from_tensor_data(batch.targets, B::Device()).template to_vector<int64_t>());
  }
  EXPECT_EQ(loss_of.stats().replays, 2);
}

TEST(Jit, CapturedTensorsAreConstantsOfTheRecording) {
  Mlp model = MakeMlp(8);
  TF<2> offset = TF<2>::full({1, 3}, 1.f, B::Device());
  auto infer = jit([&](const TF<2>& x) { return model.forward(x) + offset; }, model);
  const TF<2> x = Inputs(2, 3);
  const std::vector<float> first = infer(x).to_vector();
  (void)infer(x);
  // As jax.jit's closures: the value the function was recorded with.
  offset = TF<2>::full({1, 3}, 100.f, B::Device());
  EXPECT_EQ(infer(x).to_vector(), first);
}

TEST(Jit, AHostValuedTensorThatChangesRunsEagerly) {
  Mlp model = MakeMlp(9);
  float shift = 0.f;
  int runs = 0;
  auto infer = jit(
      [&](const TF<2>& x) {
        ++runs;
        return model.forward(x) + TF<2>::from_data({{shift, shift, shift}}, B::Device());
      },
      model);
  const TF<2> x = Inputs(2, 4);
  for (int i = 0; i < 4; ++i) {
    shift = static_cast<float>(i);
    if (i == 2) ::testing::internal::CaptureStderr();
    const std::vector<float> got = infer(x).to_vector();
    if (i == 2) {
      EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("makes from host values at"));
    }
    EXPECT_EQ(
        got,
        (model.forward(x) + TF<2>::from_data({{shift, shift, shift}}, B::Device())).to_vector());
  }
  EXPECT_EQ(runs, 4);
  EXPECT_EQ(infer.stats().replays, 0);
  EXPECT_EQ(infer.stats().eager_calls, 2);
}

TEST(Jit, AConstantHostValuedTensorReplays) {
  Mlp model = MakeMlp(10);
  int runs = 0;
  auto infer = jit(
      [&](const TF<2>& x) {
        ++runs;
        return model.forward(x) * TF<2>::from_data({{1.f, 2.f, 3.f}}, B::Device());
      },
      model);
  const TF<2> x = Inputs(2, 5);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(infer(x).to_vector(),
              (model.forward(x) * TF<2>::from_data({{1.f, 2.f, 3.f}}, B::Device())).to_vector());
  }
  // The first call records, the second confirms the literal did not change, the rest replay.
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(infer.stats().replays, 2);
}

TEST(Jit, RealizingInsideRunsEagerly) {
  Mlp model = MakeMlp(11);
  const auto sign_fixed = [&](const TF<2>& x) {
    const TF<2> y = model.forward(x);
    return y.sum().item() > 0 ? y : -y;  // a host branch on a value
  };
  auto jitted = jit(sign_fixed, model);
  for (uint32_t i = 0; i < 4; ++i) {
    const TF<2> x = Inputs(2, 30 + i);
    EXPECT_EQ(jitted(x).to_vector(), sign_fixed(x).to_vector()) << "call " << i;
  }
  EXPECT_EQ(jitted.stats().replays, 0);
  EXPECT_EQ(jitted.stats().eager_calls, 3);
}

TEST(Jit, RandomDrawsRunEagerly) {
  auto noisy = jit([](const TF<2>& x) {
    return x + TF<2>::random_uniform({2, 3}, 0.0, 1.0, B::Device());
  });
  const TF<2> x = TF<2>::zeros({2, 3}, B::Device());
  const std::vector<float> a = noisy(x).to_vector();
  const std::vector<float> b = noisy(x).to_vector();
  EXPECT_NE(a, b);
  EXPECT_EQ(noisy.stats().replays, 0);
}

TEST(Jit, ResultsAreValuesWithoutATape) {
  Mlp model = MakeMlp(12);
  auto infer = jit([&](const TF<2>& x) { return model.forward(x); }, model);
  const TF<2> x = Inputs(2, 6);
  EXPECT_FALSE(infer(x).ref()->tracks_grad);
  EXPECT_FALSE(infer(x).ref()->tracks_grad);
}

}  // namespace
}  // namespace kiln::testing
