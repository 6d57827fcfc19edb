// Optimizer::step and gradient clipping through kiln::Gradients and KILN_MODULE (against the
// same PyTorch fixtures as optim_test.cc), and loss gradients from backward() against torch's
// (tests/frontend/fixtures/loss.json's grad_input).
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frontend/train/learner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

json ReadFixture(const char* path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << ": run from the repository root (ctest does)";
  return json::parse(in);
}
const json& OptimFixture() {
  static const json fixture = ReadFixture("tests/frontend/fixtures/optim.json");
  return fixture;
}
const json& LossFixture() {
  static const json fixture = ReadFixture("tests/frontend/fixtures/loss.json");
  return fixture;
}

template <class Backend>
struct Fc {
  Tensor<Backend, 2> weight;
  Tensor<Backend, 1> bias;
  KILN_MODULE(Fc, weight, bias);
};
/// The fixture's parameters, named "fc.weight" and "fc.bias" like torch's.
template <class Backend>
struct Model {
  Fc<Backend> fc;
  KILN_MODULE(Model, fc);
};

Model<B> MakeModel(const json& c, const Device& device) {
  const json& p = c["params"];
  auto w = TF<2>::from_vector(p["fc.weight"]["values"].get<std::vector<double>>(), {3, 4}, device);
  auto b = TF<1>::from_vector(p["fc.bias"]["values"].get<std::vector<double>>(), {3}, device);
  return Model<B>{Fc<B>{TF<2>(kiln::detail::SetRequireGrad(w.ref(), true, {})),
                        TF<1>(kiln::detail::SetRequireGrad(b.ref(), true, {}))}};
}

/// Gradients as given tensors (json null: no gradient for that parameter).
Gradients MakeGrads(const Model<B>& model, const json& g, const Device& device) {
  Gradients grads;
  if (!g["fc.weight"].is_null()) {
    grads.set(model.fc.weight.ref(),
              TF<2>::from_vector(g["fc.weight"].get<std::vector<double>>(), {3, 4}, device).ref());
  }
  if (!g["fc.bias"].is_null()) {
    grads.set(model.fc.bias.ref(),
              TF<1>::from_vector(g["fc.bias"].get<std::vector<double>>(), {3}, device).ref());
  }
  return grads;
}

std::unique_ptr<optim::Optimizer> MakeOptimizer(const json& c) {
  const std::string kind = c["kind"];
  const json& o = c["config"];
  if (kind == "sgd") {
    return std::make_unique<optim::Sgd>(optim::SgdConfig()
                                            .with_lr(o["lr"])
                                            .with_momentum(o.value("momentum", 0.0))
                                            .with_dampening(o.value("dampening", 0.0))
                                            .with_nesterov(o.value("nesterov", false))
                                            .with_weight_decay(o.value("weight_decay", 0.0))
                                            .init());
  }
  if (kind == "adam" || kind == "adamw") {
    optim::Adam::Options options;
    if (kind == "adamw") options = optim::AdamWConfig().options;
    options.lr = o["lr"];
    options.beta1 = o.value("beta1", options.beta1);
    options.beta2 = o.value("beta2", options.beta2);
    options.eps = o.value("eps", options.eps);
    options.weight_decay = o.value("weight_decay", options.weight_decay);
    options.amsgrad = o.value("amsgrad", false);
    return std::make_unique<optim::Adam>(options, std::source_location::current());
  }
  if (kind == "rmsprop") {
    optim::RmsProp::Options options;
    options.lr = o["lr"];
    options.alpha = o.value("alpha", options.alpha);
    options.eps = o.value("eps", options.eps);
    options.momentum = o.value("momentum", 0.0);
    options.centered = o.value("centered", false);
    options.weight_decay = o.value("weight_decay", 0.0);
    return std::make_unique<optim::RmsProp>(options, std::source_location::current());
  }
  if (kind == "adagrad") {
    optim::AdaGrad::Options options;
    options.lr = o["lr"];
    options.lr_decay = o.value("lr_decay", 0.0);
    options.weight_decay = o.value("weight_decay", 0.0);
    options.initial_accumulator_value = o.value("initial_accumulator_value", 0.0);
    options.eps = o.value("eps", options.eps);
    return std::make_unique<optim::AdaGrad>(options, std::source_location::current());
  }
  ADD_FAILURE() << "unknown optimizer " << kind;
  return nullptr;
}

TEST(OptimizerStepTest, StepOnAModuleMatchesPyTorch) {
  B::Device device;
  for (const json& c : OptimFixture()["optimizers"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(c);
    ASSERT_NE(opt, nullptr);
    Model<B> model = MakeModel(c, device);
    for (size_t step = 0; step < c["expected"].size(); ++step) {
      SCOPED_TRACE("step " + std::to_string(step + 1));
      if (!c["lrs"].is_null()) opt->set_lr(c["lrs"][step]);
      const Gradients grads = MakeGrads(model, c["grads"][step], device);
      const kiln::detail::TensorRef old_bias = model.fc.bias.ref();
      opt->step(model, grads);
      // Updated parameters are pending leaves that require a gradient; one without a gradient
      // is the same tensor as before.
      if (c["grads"][step]["fc.bias"].is_null()) {
        EXPECT_EQ(model.fc.bias.ref(), old_bias);
      } else {
        EXPECT_FALSE(model.fc.bias.ref()->realized());
      }
      EXPECT_TRUE(kiln::detail::RequiresGrad(model.fc.weight.ref()));
      EXPECT_TRUE(kiln::detail::RequiresGrad(model.fc.bias.ref()));
      std::vector<kiln::detail::TensorRef> refs = opt->state_tensors();
      refs.push_back(model.fc.weight.ref());
      refs.push_back(model.fc.bias.ref());
      kiln::detail::Realize(refs, std::source_location::current());
      const json& want = c["expected"][step];
      ExpectAllClose(model.fc.weight.to_vector<double>(),
                     want["fc.weight"].get<std::vector<double>>(), 1e-5, 1e-6);
      ExpectAllClose(model.fc.bias.to_vector<double>(), want["fc.bias"].get<std::vector<double>>(),
                     1e-5, 1e-6);
    }
  }
}

TEST(OptimizerStepTest, AnErrorLeavesParametersAndStateUntouched) {
  B::Device device;
  Model<B> model = MakeModel(OptimFixture()["optimizers"][0], device);
  Gradients grads;
  grads.set(model.fc.weight.ref(), TF<2>::ones({3, 4}, device).ref());
  grads.set(model.fc.bias.ref(), TF<1>::ones({3}, device).ref());
  optim::Sgd sgd = optim::SgdConfig().with_momentum(0.9).init();
  // A checkpoint that does not fit the bias (visited after the weight).
  optim::NamedState checkpoint;
  checkpoint.tensors.emplace("fc.bias.momentum_buffer", ir::TensorData(ir::DType::kF32, {2}));
  sgd.load_state(checkpoint);
  const kiln::detail::TensorRef weight = model.fc.weight.ref();
  try {
    sgd.step(model, grads);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("sgd: loaded state 'fc.bias.momentum_buffer' does not match parameter "
                          "'fc.bias' (state first); operands f32[2], f32[3]"));
  }
  // Checked before anything changed: the weight and its state are untouched.
  EXPECT_EQ(model.fc.weight.ref(), weight);
  const optim::NamedState state = sgd.state();
  ASSERT_EQ(state.tensors.size(), 1u);
  EXPECT_EQ(state.tensors.begin()->first, "fc.bias.momentum_buffer");
  EXPECT_EQ(state.values.count("fc.weight.step"), 0u);
}

TEST(ClipStepTest, ClipGradNormOnGradientsMatchesPyTorch) {
  B::Device device;
  const json& optimizers = OptimFixture()["optimizers"];
  for (const json& c : OptimFixture()["clipping"]) {
    SCOPED_TRACE(c.dump().substr(0, 80));
    Model<B> model = MakeModel(optimizers[0], device);
    Gradients grads = MakeGrads(model, c["grads"], device);
    if (c["kind"] == "norm") {
      const double norm_type =
          c["norm_type"] == "inf" ? optim::kInfNorm : c["norm_type"].get<double>();
      // Both spellings: the backend deduced from Model<B>, and named.
      const TF<0> total = c["max_norm"] == 1.0
                              ? optim::clip_grad_norm<B>(model, grads, c["max_norm"], norm_type)
                              : optim::clip_grad_norm(model, grads, c["max_norm"], norm_type);
      EXPECT_NEAR(total.item(), c["total_norm"].get<double>(),
                  1e-5 * c["total_norm"].get<double>());
    } else {
      optim::clip_grad_value(model, grads, c["clip_value"]);
    }
    ExpectAllClose(TF<2>(grads.get(model.fc.weight.ref())).to_vector<double>(),
                   c["expected"]["fc.weight"].get<std::vector<double>>(), 1e-5, 1e-6);
    ExpectAllClose(TF<1>(grads.get(model.fc.bias.ref())).to_vector<double>(),
                   c["expected"]["fc.bias"].get<std::vector<double>>(), 1e-5, 1e-6);
  }
}

/// The loss of a fixture case as a rank-0 tensor: the scalar itself, or the sum of the
/// unreduced terms (torch's gradient was taken of out.sum()).
kiln::detail::TensorRef LossOf(const json& c, const kiln::detail::TensorRef& input,
                               const Device& device) {
  const std::string loss = c["loss"];
  const std::string reduction = c["reduction"];
  const nn::Reduction r = reduction == "sum" ? nn::Reduction::kSum : nn::Reduction::kMean;
  const bool none = reduction == "none";
  kiln::detail::TensorRef out;
  if (loss == "cross_entropy" || loss == "nll") {
    const TF<2> x(input);
    const TI<1> target =
        TI<1>::from_vector(c["target"]["values"].get<std::vector<int64_t>>(),
                           {static_cast<int64_t>(c["target"]["values"].size())}, device);
    const double s = c["kwargs"].value("label_smoothing", 0.0);
    if (loss == "nll") {
      out = none ? nn::nll_loss_unreduced(x, target).sum().ref() : nn::nll_loss(x, target, r).ref();
    } else {
      out = none ? nn::cross_entropy_unreduced(x, target, s).sum().ref()
                 : nn::cross_entropy(x, target, r, s).ref();
    }
    return out;
  }
  const TF<2> x(input);
  const TF<2> t = TF<2>::from_vector(
      c["target"]["values"].get<std::vector<double>>(),
      {c["target"]["shape"][0].get<int64_t>(), c["target"]["shape"][1].get<int64_t>()}, device);
  if (loss == "mse") {
    return none ? nn::mse_loss_unreduced(x, t).sum().ref() : nn::mse_loss(x, t, r).ref();
  }
  if (loss == "l1") {
    return none ? nn::l1_loss_unreduced(x, t).sum().ref() : nn::l1_loss(x, t, r).ref();
  }
  if (loss == "huber") {
    const double delta = c["kwargs"]["delta"];
    return none ? nn::huber_loss_unreduced(x, t, delta).sum().ref()
                : nn::huber_loss(x, t, delta, r).ref();
  }
  return none ? nn::bce_with_logits_unreduced(x, t).sum().ref()
              : nn::bce_with_logits(x, t, r).ref();
}

TEST(LossGradientTest, BackwardMatchesPyTorch) {
  B::Device device;
  for (const json& c : LossFixture()["losses"]) {
    SCOPED_TRACE(c["loss"].get<std::string>() + " reduction=" + c["reduction"].get<std::string>() +
                 " " + c["kwargs"].dump());
    const json& in = c["input"];
    TF<2> x =
        TF<2>::from_vector(in["values"].get<std::vector<double>>(),
                           {in["shape"][0].get<int64_t>(), in["shape"][1].get<int64_t>()}, device);
    x = TF<2>(kiln::detail::SetRequireGrad(x.ref(), true, {}));
    const kiln::detail::TensorRef loss = LossOf(c, x.ref(), device);
    const Gradients grads = kiln::detail::Backward(loss, nullptr, {});
    const kiln::detail::TensorRef dx = grads.get(x.ref());
    ASSERT_NE(dx, nullptr);
    ExpectAllClose(TF<2>(dx).to_vector<double>(), c["grad_input"].get<std::vector<double>>(), 1e-4,
                   1e-6);
  }
}

TEST(TrainingTest, SgdReducesARegressionLoss) {
  // y = x W^T + b fitted by SGD with momentum: forward, backward and update realized together.
  B::Device device;
  manual_seed(7);
  Model<B> model{Fc<B>{TF<2>::zeros({3, 4}, device), TF<1>::zeros({3}, device)}};
  model.visit([](const std::string&, auto& p) {
    p = std::remove_cvref_t<decltype(p)>(kiln::detail::SetRequireGrad(p.ref(), true, {}));
  });
  const TF<2> x = TF<2>::random_normal({16, 4}, 0, 1, device);
  const TF<2> w_true = TF<2>::random_normal({3, 4}, 0, 1, device);
  const TF<2> y = x.matmul(w_true.transpose());
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.1).with_momentum(0.5).init();
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    const TF<2> pred(nn::detail::LinearForward(x.ref(), model.fc.weight.ref(), model.fc.bias.ref(),
                                               std::source_location::current()));
    const TF<0> loss = nn::mse_loss(pred, y);
    const Gradients grads = kiln::detail::Backward(loss.ref(), nullptr, {});
    sgd.step(model, grads);
    const int64_t graphs = kiln::detail::GetEngineStats().graphs_executed;
    optim::realize_step(model, sgd, loss);
    // (Step 0 computes the pending zeros the parameters start as first, in a graph of their own.)
    EXPECT_EQ(kiln::detail::GetEngineStats().graphs_executed, graphs + (step == 0 ? 2 : 1));
    EXPECT_TRUE(loss.ref()->realized() && model.fc.weight.ref()->realized());
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.01 * first);
}

template <class Backend>
struct WithBuffer {
  Tensor<Backend, 1> weight;
  Buffer<Tensor<Backend, 1>> running;
  KILN_MODULE(WithBuffer, weight, running);
};

TEST(TrainingTest, RealizeStepIncludesBuffers) {
  B::Device device;
  WithBuffer<B> m{TF<1>::ones({2}, device), {TF<1>::zeros({2}, device)}};
  m.weight.require_grad();
  const TF<0> loss = (m.weight * m.weight).sum();
  m.running.value = m.running.value * 0.9f + m.weight.detach() * 0.1f;  // as BatchNorm's update
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.5).init();
  sgd.step(m, loss.backward());
  const int64_t graphs = kiln::detail::GetEngineStats().graphs_executed;
  optim::realize_step(m, sgd, loss);
  // The weight's pending initialisation, then the step with the buffer's update.
  EXPECT_EQ(kiln::detail::GetEngineStats().graphs_executed, graphs + 2);
  EXPECT_TRUE(m.running.value.ref()->realized());
  ExpectAllClose(m.running.value.to_vector<double>(), std::vector<double>{0.1, 0.1});
  // d(sum w^2)/dw = 2w = 2; w - 0.5 * 2 = 0.
  ExpectAllClose(m.weight.to_vector<double>(), std::vector<double>{0.0, 0.0});
}

TEST(TrainingTest, LearnerSavesAndResumesOptimizerState) {
  // train::Learner drives optim::Adam: step(), state() into last.safetensors, load_state() on
  // resume, so a resumed run continues with the same moments and step counts.
  B::Device device;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("kiln_optim_learner_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       "_" + B::Device().ToString());
  std::filesystem::remove_all(dir);
  struct Batch {
    TF<2> x, y;
  };
  manual_seed(3);
  std::vector<Batch> batches;
  for (int i = 0; i < 3; ++i) {
    const TF<2> x = TF<2>::random_normal({8, 4}, 0, 1, device);
    batches.push_back({x, x.matmul(TF<2>::ones({4, 3}, device))});
  }
  const auto step = [](Model<B>& m, const Batch& b) {
    const TF<2> pred(nn::detail::LinearForward(b.x.ref(), m.fc.weight.ref(), m.fc.bias.ref(),
                                               std::source_location::current()));
    return train::StepOutput<B>{nn::mse_loss(pred, b.y), std::nullopt, std::nullopt};
  };
  const auto make_model = [&] {
    Model<B> m{Fc<B>{TF<2>::zeros({3, 4}, device), TF<1>::zeros({3}, device)}};
    m.fc.weight.require_grad();
    m.fc.bias.require_grad();
    return m;
  };
  const train::LearnerConfig config =
      train::LearnerConfig().with_checkpoint_dir(dir.string()).with_progress(false);

  Model<B> model = make_model();
  optim::Adam adam = optim::AdamConfig().with_lr(0.05).init();
  train::Learner learner(model, adam, step, config);
  learner.fit(batches, batches, 2);
  const optim::NamedState saved = adam.state();
  EXPECT_EQ(saved.values.at("fc.weight.step"), "6");

  Model<B> resumed_model = make_model();
  optim::Adam resumed = optim::AdamConfig().with_lr(0.05).init();
  train::Learner again(resumed_model, resumed, step, config);
  ASSERT_TRUE(again.resume());
  const optim::NamedState loaded = resumed.state();
  EXPECT_EQ(loaded.values, saved.values);
  ASSERT_EQ(loaded.tensors.size(), saved.tensors.size());
  for (const auto& [name, data] : saved.tensors) {
    EXPECT_EQ(loaded.tensors.at(name), data) << name;
  }
  // One more epoch on each: identical parameters.
  learner.fit(batches, batches, 3);
  again.fit(batches, batches, 3);
  EXPECT_EQ(model.fc.weight.to_vector<float>(), resumed_model.fc.weight.to_vector<float>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::testing
