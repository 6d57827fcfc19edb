// The Learner loop (frontend/train/learner.h) on linear regression with plain SGD. Gradients come
// from the test's own policy (the closed-form gradient of the mean squared error), so the loop is
// tested independently of autograd: training lowers the loss, a run stopped after 2 epochs and
// resumed ends bit-identical to an uninterrupted one, early stopping, best/last checkpoints, the
// metrics files, and the NaN guard stopping a diverging run with a message naming the step.
#include "frontend/train/learner.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "frontend/train/safetensors.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using namespace kiln::train;  // NOLINT

template <class Backend>
struct Regressor {
  nn::Linear<Backend> fc;
  KILN_MODULE(Regressor, fc);
};

struct Batch {
  TF<2> x;
  TF<2> y;
  TI<1> labels;  // which output is larger: gives the accuracy metric something to count
};

struct Grads {
  TF<2> weight;
  TF<1> bias;
};

// The step function leaves the closed-form gradient here; the policy hands it to the optimizer.
std::optional<Grads>& Stash() {
  static std::optional<Grads> grads;
  return grads;
}

struct ClosedFormPolicy {
  static Grads backward(const TF<0>&, const std::source_location&) { return *Stash(); }
  struct NoGrad {};
};

StepOutput<B> Step(Regressor<B>& model, const Batch& batch) {
  const TF<2> pred = model.fc.forward(batch.x);
  const TF<2> diff = pred.sub(batch.y);
  // d mean(diff^2) / d pred = 2 diff / numel.
  const TF<2> dpred = diff.mul(2.0 / static_cast<double>(diff.num_elements()));
  Stash() = Grads{dpred.transpose().matmul(batch.x), dpred.sum(0)};
  return StepOutput<B>{diff.square().mean(), pred, batch.labels};
}

struct Sgd {
  double lr;
  int64_t steps = 0;
  void step(Regressor<B>& model, const Grads& g) {
    model.fc.weight = model.fc.weight.sub(g.weight.mul(lr)).realize();
    model.fc.bias = model.fc.bias->sub(g.bias.mul(lr)).realize();
    ++steps;
  }
  double learning_rate() const { return lr; }
  NamedState state() const {
    NamedState s;
    s.values["lr"] = absl::StrFormat("%.17g", lr);
    s.values["steps"] = std::to_string(steps);
    return s;
  }
  void load_state(const NamedState& s) {
    lr = std::stod(s.values.at("lr"));
    steps = std::stoll(s.values.at("steps"));
  }
};

using TestLearner = Learner<Regressor<B>, Sgd, decltype(&Step), ClosedFormPolicy>;

// The same loss for the default policy (frontend/autograd.h), and SGD on kiln::Gradients.
StepOutput<B> AutogradStep(Regressor<B>& model, const Batch& batch) {
  const TF<2> pred = model.fc.forward(batch.x);
  return StepOutput<B>{pred.sub(batch.y).square().mean(), pred, batch.labels};
}

struct AutogradSgd {
  double lr;
  int64_t steps = 0;
  void step(Regressor<B>& model, const Gradients& grads) {
    NoGradGuard no_grad;
    model.visit([&](const std::string&, auto& t) {
      if (auto g = t.grad(grads)) {
        t = t.sub(g->mul(lr)).detach();
        t.require_grad();
      }
    });
    ++steps;
  }
  NamedState state() const {
    NamedState s;
    s.values["steps"] = std::to_string(steps);
    return s;
  }
  void load_state(const NamedState& s) { steps = std::stoll(s.values.at("steps")); }
};

std::vector<Batch> MakeBatches(int count, uint32_t seed) {
  const B::Device device;
  const std::vector<float> a = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};  // the true [2, 3] map
  std::vector<Batch> batches;
  for (int b = 0; b < count; ++b) {
    const std::vector<float> x = RandomFloats(16 * 3, seed + b);
    std::vector<float> y(16 * 2);
    std::vector<int64_t> labels(16);
    for (int i = 0; i < 16; ++i) {
      for (int o = 0; o < 2; ++o) {
        for (int k = 0; k < 3; ++k) y[i * 2 + o] += a[o * 3 + k] * x[i * 3 + k];
      }
      labels[i] = y[i * 2 + 1] > y[i * 2] ? 1 : 0;
    }
    batches.push_back(Batch{TF<2>::from_vector(x, {16, 3}, device),
                            TF<2>::from_vector(y, {16, 2}, device),
                            TI<1>::from_vector(labels, {16}, device)});
  }
  return batches;
}

Regressor<B> MakeModel() {
  manual_seed(3);
  return Regressor<B>{nn::LinearConfig(3, 2).init<B>(B::Device())};
}

std::string TempDir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kiln_learner_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<double> Values(const std::vector<MetricRecord>& records, const std::string& split,
                           const std::string& metric) {
  std::vector<double> out;
  for (const MetricRecord& r : records) {
    if (r.split == split && r.metric == metric) out.push_back(r.value);
  }
  return out;
}

TEST(Learner, TrainsAndWritesCheckpointsAndMetrics) {
  const std::vector<Batch> train = MakeBatches(4, 100);
  const std::vector<Batch> valid = MakeBatches(2, 200);
  const std::string dir = TempDir("fit");
  Regressor<B> model = MakeModel();
  Sgd sgd{0.1};
  std::ostringstream progress;
  TestLearner learner(
      model, sgd, &Step,
      LearnerConfig().with_epochs(5).with_checkpoint_dir(dir).with_top_k({2}).with_progress(
          true, &progress));
  const FitResult result = learner.fit(train, valid);
  EXPECT_EQ(result.last_epoch, 5);
  EXPECT_EQ(result.epochs_run, 5);
  EXPECT_FALSE(result.stopped_early);
  EXPECT_EQ(learner.step(), 20);
  EXPECT_EQ(sgd.steps, 20);

  const std::vector<double> train_loss = Values(learner.records(), "train", "loss");
  const std::vector<double> valid_loss = Values(learner.records(), "valid", "loss");
  ASSERT_EQ(train_loss.size(), 5u);
  ASSERT_EQ(valid_loss.size(), 5u);
  for (size_t i = 1; i < 5; ++i) EXPECT_LT(valid_loss[i], valid_loss[i - 1]) << i;
  EXPECT_EQ(Values(learner.records(), "valid", "accuracy").size(), 5u);
  // Top-2 of 2 classes is always right.
  for (double v : Values(learner.records(), "train", "top2_accuracy")) EXPECT_EQ(v, 1.0);
  // The best epoch is the last (the loss kept falling).
  EXPECT_EQ(result.best_epoch, 5);
  EXPECT_EQ(result.best, valid_loss.back());

  // Files: metrics.csv matches the records, the SVG exists, last and best checkpoints hold the
  // final model with the optimizer state.
  EXPECT_EQ(ReadAll(dir + "/metrics.csv"), MetricsCsv(learner.records()));
  EXPECT_NE(ReadAll(dir + "/metrics.svg").find("<polyline"), std::string::npos);
  for (const char* file : {"/last.safetensors", "/best.safetensors"}) {
    const Checkpoint ckpt = ReadCheckpoint(dir + file);
    EXPECT_EQ(ckpt.epoch, 5) << file;
    EXPECT_EQ(ckpt.step, 20) << file;
    EXPECT_EQ(ckpt.optimizer.values.at("steps"), "20") << file;
    EXPECT_TRUE(ckpt.model.at("fc.weight") == model.fc.weight.into_data()) << file;
  }
  // Plain progress lines (not a terminal): one per epoch and split at least.
  EXPECT_NE(progress.str().find("train 1/5: 4/4 (100%)"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("valid 5/5: 2/2 (100%)"), std::string::npos) << progress.str();
  EXPECT_EQ(progress.str().find('\r'), std::string::npos);
}

TEST(Learner, ResumeMatchesAnUninterruptedRun) {
  const std::vector<Batch> train = MakeBatches(3, 300);
  const std::vector<Batch> valid = MakeBatches(1, 400);
  const auto config = LearnerConfig().with_progress(false);

  const std::string full_dir = TempDir("full");
  Regressor<B> full = MakeModel();
  Sgd full_sgd{0.05};
  TestLearner(full, full_sgd, &Step, config.with_checkpoint_dir(full_dir)).fit(train, valid, 4);

  // Two epochs, then a new process's worth of objects resumes to four.
  const std::string dir = TempDir("resumed");
  {
    Regressor<B> model = MakeModel();
    Sgd sgd{0.05};
    TestLearner first(model, sgd, &Step, config.with_checkpoint_dir(dir));
    EXPECT_FALSE(first.resume());  // nothing to resume yet
    first.fit(train, valid, 2);
  }
  manual_seed(12345);
  Regressor<B> model{nn::LinearConfig(3, 2).init<B>(B::Device())};  // different weights
  Sgd sgd{999};                                                     // state comes from the file
  TestLearner second(model, sgd, &Step, config.with_checkpoint_dir(dir));
  ASSERT_TRUE(second.resume());
  EXPECT_EQ(second.epoch(), 2);
  EXPECT_EQ(second.step(), 6);
  EXPECT_EQ(sgd.lr, 0.05);
  const FitResult result = second.fit(train, valid, 4);
  EXPECT_EQ(result.epochs_run, 2);
  EXPECT_EQ(result.last_epoch, 4);

  EXPECT_TRUE(model.fc.weight.into_data() == full.fc.weight.into_data());
  EXPECT_TRUE(model.fc.bias->into_data() == full.fc.bias->into_data());
  EXPECT_EQ(ReadAll(dir + "/metrics.csv"), ReadAll(full_dir + "/metrics.csv"));
  EXPECT_EQ(ReadCheckpoint(dir + "/last.safetensors").rng_state,
            ReadCheckpoint(full_dir + "/last.safetensors").rng_state);
}

// The default policy (autograd) trains the same as the closed-form gradient, and resuming keeps
// the parameters' require_grad mark.
TEST(Learner, AutogradPolicyMatchesClosedFormGradients) {
  const std::vector<Batch> train = MakeBatches(3, 900);
  const std::vector<Batch> valid = MakeBatches(1, 901);
  const auto config = LearnerConfig().with_progress(false);

  Regressor<B> closed = MakeModel();
  Sgd sgd{0.05};
  TestLearner(closed, sgd, &Step, config).fit(train, valid, 3);

  const std::string dir = TempDir("autograd");
  Regressor<B> model = MakeModel();
  model.visit([](const std::string&, auto& t) { t.require_grad(); });
  AutogradSgd autograd_sgd{0.05};
  {
    Learner learner(model, autograd_sgd, &AutogradStep, config.with_checkpoint_dir(dir));
    learner.fit(train, valid, 2);
  }
  Regressor<B> resumed = MakeModel();
  resumed.visit([](const std::string&, auto& t) { t.require_grad(); });
  AutogradSgd resumed_sgd{0.05};
  Learner learner(resumed, resumed_sgd, &AutogradStep, config.with_checkpoint_dir(dir));
  ASSERT_TRUE(learner.resume());
  EXPECT_TRUE(resumed.fc.weight.requires_grad());
  EXPECT_TRUE(resumed.fc.bias->requires_grad());
  learner.fit(train, valid, 3);
  EXPECT_EQ(resumed_sgd.steps, 9);

  const std::vector<double> want_w = closed.fc.weight.into_data().ToDoubles();
  const std::vector<double> got_w = resumed.fc.weight.into_data().ToDoubles();
  ASSERT_EQ(got_w.size(), want_w.size());
  for (size_t i = 0; i < want_w.size(); ++i) EXPECT_NEAR(got_w[i], want_w[i], 1e-5) << i;
  const std::vector<double> want_b = closed.fc.bias->into_data().ToDoubles();
  const std::vector<double> got_b = resumed.fc.bias->into_data().ToDoubles();
  for (size_t i = 0; i < want_b.size(); ++i) EXPECT_NEAR(got_b[i], want_b[i], 1e-5) << i;
}

TEST(Learner, EarlyStoppingStopsAfterPatience) {
  const std::vector<Batch> train = MakeBatches(2, 500);
  const std::vector<Batch> valid = MakeBatches(1, 600);
  Regressor<B> model = MakeModel();
  Sgd sgd{0.0};  // nothing changes, so the valid loss never improves after epoch 1
  TestLearner learner(model, sgd, &Step,
                      LearnerConfig().with_epochs(10).with_progress(false).with_early_stopping(
                          EarlyStoppingConfig().with_patience(2)));
  const FitResult result = learner.fit(train, valid);
  EXPECT_TRUE(result.stopped_early);
  EXPECT_EQ(result.epochs_run, 3);
  EXPECT_EQ(result.best_epoch, 1);
}

TEST(Learner, NanGuardStopsADivergingRun) {
  const std::vector<Batch> train = MakeBatches(4, 700);
  const std::vector<Batch> valid = MakeBatches(1, 800);
  const std::string dir = TempDir("diverge");
  Regressor<B> model = MakeModel();
  Sgd sgd{1e6};
  TestLearner learner(
      model, sgd, &Step,
      LearnerConfig().with_epochs(50).with_checkpoint_dir(dir).with_progress(false));
  std::string error;
  try {
    learner.fit(train, valid);
  } catch (const Error& e) {
    error = e.what();
  }
  ASSERT_FALSE(error.empty()) << "the run did not diverge";
  EXPECT_NE(error.find("at step " + std::to_string(learner.step())), std::string::npos) << error;
  EXPECT_NE(error.find("lower learning rate (now 1e+06)"), std::string::npos) << error;
  EXPECT_NE(error.find("gradient clipping"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln::testing

namespace kiln::testing {
namespace {

// The step function of the precision tests: AutogradStep, noting the dtype its product had.
ir::DType& SeenDType() {
  static ir::DType dtype = ir::DType::kF32;
  return dtype;
}
StepOutput<B> NotingStep(Regressor<B>& model, const Batch& batch) {
  const TF<2> pred = model.fc.forward(batch.x);
  SeenDType() = pred.dtype();
  return StepOutput<B>{pred.sub(batch.y).square().mean(), pred, batch.labels};
}

// bf16 autocast trains the regression as f32 does, within bf16's resolution, and the
// parameters stay f32.
TEST(LearnerPrecision, Bf16AutocastsTheStepAndTrainsLikeF32) {
  const std::vector<Batch> train = MakeBatches(4, 700);
  const std::vector<Batch> valid = MakeBatches(2, 701);
  const auto config = LearnerConfig().with_progress(false).with_summary(nullptr);
  std::vector<double> losses[2];
  for (amp::Precision precision : {amp::Precision::kF32, amp::Precision::kBF16}) {
    Regressor<B> model = MakeModel();
    model.visit([](const std::string&, auto& t) { t.require_grad(); });
    optim::Sgd sgd = optim::SgdConfig().with_lr(0.05).init();
    Learner learner(model, sgd, &NotingStep, config.with_precision(precision));
    learner.fit(train, valid, 4);
    EXPECT_EQ(SeenDType(), precision == amp::Precision::kF32 ? ir::DType::kF32 : ir::DType::kBF16);
    EXPECT_EQ(model.fc.weight.dtype(), ir::DType::kF32);
    EXPECT_EQ(learner.grad_scaler(), nullptr);
    losses[precision == amp::Precision::kBF16] = Values(learner.records(), "valid", "loss");
  }
  ASSERT_EQ(losses[1].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 0.02 * losses[0][0]) << i;
    if (i > 0) {
      EXPECT_LT(losses[1][i], losses[1][i - 1]) << i;
    }
  }
}

// f16 with a first scale so large that the f16 backward pass overflows: those steps are
// skipped and the scale halves until the gradients fit; then training proceeds. The scale, its
// growth tracker and the skip count are logged and survive a resume.
TEST(LearnerPrecision, F16ScalesTheLossSkipsOverflowsAndResumes) {
  const std::vector<Batch> train = MakeBatches(4, 800);
  const std::vector<Batch> valid = MakeBatches(2, 801);
  const std::string dir = TempDir("f16");
  const auto scaling =
      amp::GradScalerConfig().with_init_scale(std::ldexp(1.0, 24)).with_growth_interval(5);
  const auto config = LearnerConfig()
                          .with_progress(false)
                          .with_summary(nullptr)
                          .with_checkpoint_dir(dir)
                          .with_precision(amp::Precision::kF16, scaling);
  Regressor<B> model = MakeModel();
  model.visit([](const std::string&, auto& t) { t.require_grad(); });
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.05).init();
  Learner learner(model, sgd, &NotingStep, config);
  learner.fit(train, valid, 3);
  EXPECT_EQ(SeenDType(), ir::DType::kF16);
  ASSERT_NE(learner.grad_scaler(), nullptr);
  const amp::GradScaler& scaler = *learner.grad_scaler();
  EXPECT_GE(scaler.skipped_steps(), 1);
  EXPECT_LT(scaler.scale(), std::ldexp(1.0, 24));
  const std::vector<double> skipped = Values(learner.records(), "train", "skipped_steps");
  const std::vector<double> scales = Values(learner.records(), "train", "loss_scale");
  ASSERT_EQ(skipped.size(), 3u);
  ASSERT_EQ(scales.size(), 3u);
  EXPECT_EQ(skipped[0] + skipped[1] + skipped[2], static_cast<double>(scaler.skipped_steps()));
  EXPECT_EQ(scales[2], scaler.scale());
  EXPECT_EQ(sgd.state().values.at("fc.weight.step"),
            std::to_string(learner.step() - scaler.skipped_steps()));
  const std::vector<double> valid_loss = Values(learner.records(), "valid", "loss");
  EXPECT_LT(valid_loss.back(), valid_loss.front());

  Regressor<B> resumed = MakeModel();
  resumed.visit([](const std::string&, auto& t) { t.require_grad(); });
  optim::Sgd resumed_sgd = optim::SgdConfig().with_lr(0.05).init();
  Learner again(resumed, resumed_sgd, &NotingStep, config);
  ASSERT_TRUE(again.resume());
  EXPECT_EQ(again.grad_scaler()->scale(), scaler.scale());
  EXPECT_EQ(again.grad_scaler()->skipped_steps(), scaler.skipped_steps());
  EXPECT_EQ(again.grad_scaler()->growth_tracker(), scaler.growth_tracker());
}

}  // namespace
}  // namespace kiln::testing
