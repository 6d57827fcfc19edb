// Optimizers, gradient clipping and LR schedulers against PyTorch
// (tests/frontend/fixtures/optim.json, made by make_optim_fixtures.py), their state round trip
// and their errors.
#include <array>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
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
    std::ifstream in("tests/frontend/fixtures/optim.json");
    EXPECT_TRUE(in.good()) << "run from the repository root (ctest does)";
    return json::parse(in);
  }();
  return fixture;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// The optimizer a fixture case describes, built with the public config builders.
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
  if (kind == "adam") {
    return std::make_unique<optim::Adam>(
        optim::AdamConfig()
            .with_lr(o["lr"])
            .with_betas(o.value("beta1", 0.9), o.value("beta2", 0.999))
            .with_eps(o.value("eps", 1e-8))
            .with_weight_decay(o.value("weight_decay", 0.0))
            .with_amsgrad(o.value("amsgrad", false))
            .init());
  }
  if (kind == "adamw") {
    // Only the options the case sets: AdamW's defaults (weight decay 0.01) are under test too.
    optim::AdamWConfig config = optim::AdamWConfig().with_lr(o["lr"]);
    if (o.contains("beta1")) config = config.with_betas(o["beta1"], o["beta2"]);
    if (o.contains("eps")) config = config.with_eps(o["eps"]);
    if (o.contains("weight_decay")) config = config.with_weight_decay(o["weight_decay"]);
    if (o.contains("amsgrad")) config = config.with_amsgrad(o["amsgrad"]);
    return std::make_unique<optim::Adam>(config.init());
  }
  if (kind == "rmsprop") {
    optim::RmsPropConfig config = optim::RmsPropConfig().with_lr(o["lr"]);
    if (o.contains("alpha")) config = config.with_alpha(o["alpha"]);
    if (o.contains("eps")) config = config.with_eps(o["eps"]);
    if (o.contains("momentum")) config = config.with_momentum(o["momentum"]);
    if (o.contains("centered")) config = config.with_centered(o["centered"]);
    if (o.contains("weight_decay")) config = config.with_weight_decay(o["weight_decay"]);
    return std::make_unique<optim::RmsProp>(config.init());
  }
  if (kind == "adagrad") {
    optim::AdaGradConfig config = optim::AdaGradConfig().with_lr(o["lr"]);
    if (o.contains("lr_decay")) config = config.with_lr_decay(o["lr_decay"]);
    if (o.contains("weight_decay")) config = config.with_weight_decay(o["weight_decay"]);
    if (o.contains("initial_accumulator_value")) {
      config = config.with_initial_accumulator_value(o["initial_accumulator_value"]);
    }
    if (o.contains("eps")) config = config.with_eps(o["eps"]);
    return std::make_unique<optim::AdaGrad>(config.init());
  }
  ADD_FAILURE() << "unknown optimizer " << kind;
  return nullptr;
}

/// The fixture's two parameters, "fc.weight" [3, 4] and "fc.bias" [3], as one module.
struct Params {
  TF<2> weight;
  TF<1> bias;
};

Params InitialParams(const json& c, const Device& device) {
  const json& p = c["params"];
  return Params{
      TF<2>::from_vector(p["fc.weight"]["values"].get<std::vector<double>>(), {3, 4}, device),
      TF<1>::from_vector(p["fc.bias"]["values"].get<std::vector<double>>(), {3}, device)};
}

/// Runs steps [first, last) of case `c` through Optimizer::updated, checking each step's
/// parameters against torch's.
void RunSteps(const json& c, optim::Optimizer& opt, Params& params, int first, int last,
              const Device& device) {
  for (int step = first; step < last; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    if (!c["lrs"].is_null()) opt.set_lr(c["lrs"][step]);
    const json& g = c["grads"][step];
    if (!g["fc.weight"].is_null()) {
      params.weight = opt.updated(
          "fc.weight", params.weight,
          TF<2>::from_vector(g["fc.weight"].get<std::vector<double>>(), {3, 4}, device));
    }
    if (!g["fc.bias"].is_null()) {
      params.bias =
          opt.updated("fc.bias", params.bias,
                      TF<1>::from_vector(g["fc.bias"].get<std::vector<double>>(), {3}, device));
    }
    // Parameters and state in one graph, as a training loop realizes them.
    std::vector<kiln::detail::TensorRef> refs = opt.state_tensors();
    refs.push_back(params.weight.ref());
    refs.push_back(params.bias.ref());
    kiln::detail::Realize(refs, std::source_location::current());
    const json& want = c["expected"][step];
    ExpectAllClose(params.weight.to_vector<double>(), want["fc.weight"].get<std::vector<double>>(),
                   1e-5, 1e-6);
    ExpectAllClose(params.bias.to_vector<double>(), want["fc.bias"].get<std::vector<double>>(),
                   1e-5, 1e-6);
  }
}

TEST(OptimizerTest, MatchesPyTorch) {
  B::Device device;
  const json& cases = Fixture()["optimizers"];
  ASSERT_GE(cases.size(), 15u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(c);
    ASSERT_NE(opt, nullptr);
    Params params = InitialParams(c, device);
    RunSteps(c, *opt, params, 0, static_cast<int>(c["expected"].size()), device);
  }
}

TEST(OptimizerTest, StateRoundTripResumesExactly) {
  B::Device device;
  for (const json& c : Fixture()["optimizers"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::unique_ptr<optim::Optimizer> first = MakeOptimizer(c);
    Params params = InitialParams(c, device);
    RunSteps(c, *first, params, 0, 2, device);
    const optim::NamedState state = first->state();
    // A fresh optimizer (as after a restart) continues where the first one stopped.
    std::unique_ptr<optim::Optimizer> second = MakeOptimizer(c);
    second->load_state(state);
    Params restored{TF<2>::from_tensor_data(params.weight.into_data(), device),
                    TF<1>::from_tensor_data(params.bias.into_data(), device)};
    RunSteps(c, *second, restored, 2, static_cast<int>(c["expected"].size()), device);
    EXPECT_EQ(second->state().tensors.size(), state.tensors.size());
    EXPECT_EQ(second->state().values.size(), state.values.size());
  }
}

TEST(OptimizerTest, StateNamesFollowTorch) {
  B::Device device;
  optim::Adam adam = optim::AdamConfig().with_amsgrad(true).init();
  TF<1> p = TF<1>::ones({2}, device);
  p = adam.updated("layer.bias", p, TF<1>::ones({2}, device));
  const optim::NamedState state = adam.state();
  std::vector<std::string> names;
  for (const auto& [name, data] : state.tensors) names.push_back(name);
  EXPECT_THAT(names, ::testing::ElementsAre("layer.bias.exp_avg", "layer.bias.exp_avg_sq",
                                            "layer.bias.max_exp_avg_sq"));
  EXPECT_THAT(state.values, ::testing::ElementsAre(::testing::Pair("layer.bias.step", "1"),
                                                   ::testing::Pair("lr", "0.001"),
                                                   ::testing::Pair("optimizer", "adam")));
}

TEST(OptimizerTest, UpdateIsLazyAndLrIsAParameter) {
  B::Device device;
  optim::Sgd sgd = optim::SgdConfig().with_lr(0.5).init();
  TF<1> p = TF<1>::from_data({1.f, 2.f}, device);
  const TF<1> g = TF<1>::from_data({2.f, -2.f}, device);
  const int64_t graphs_before = kiln::detail::GetEngineStats().graphs_executed;
  p = sgd.updated("p", p, g);
  EXPECT_FALSE(p.ref()->realized());
  EXPECT_EQ(kiln::detail::GetEngineStats().graphs_executed, graphs_before);
  // The learning rate enters as a realized rank-0 operand, not as a fill (a literal).
  bool lr_operand = false;
  std::function<void(const kiln::detail::TensorRef&)> walk = [&](const auto& n) {
    if (n->realized() && n->type.rank() == 0 && n->data->GetDouble(0) == 0.5) lr_operand = true;
    for (const auto& in : n->inputs) walk(in);
  };
  walk(p.ref());
  EXPECT_TRUE(lr_operand);
  ExpectAllClose(p.to_vector<double>(), std::vector<double>{0.0, 3.0});
}

TEST(OptimizerTest, ConfigErrors) {
  EXPECT_THAT(ErrorOf([] { (void)optim::SgdConfig().with_nesterov(true).init(); }),
              AllOf(HasSubstr("sgd: Nesterov momentum requires a momentum > 0"),
                    HasSubstr("optim_test.cc")));
  EXPECT_THAT(ErrorOf([] { (void)optim::AdamConfig().with_betas(0.9, 1.0).init(); }),
              HasSubstr("adam: beta2 1 must be in [0, 1)"));
  EXPECT_THAT(ErrorOf([] { (void)optim::AdamWConfig().with_lr(-1).init(); }),
              HasSubstr("adamw: lr -1 must be finite and >= 0"));
  EXPECT_THAT(ErrorOf([] { (void)optim::RmsPropConfig().with_alpha(1.5).init(); }),
              HasSubstr("rmsprop: alpha 1.5 must be in [0, 1)"));
  EXPECT_THAT(ErrorOf([] { (void)optim::AdaGradConfig().with_eps(-1).init(); }),
              HasSubstr("adagrad: eps -1"));
}

TEST(OptimizerTest, GradientAndStateMismatchErrors) {
  B::Device device;
  optim::Adam adam = optim::AdamConfig().init();
  const TF<1> p = TF<1>::ones({3}, device);
  EXPECT_THAT(ErrorOf([&] { (void)adam.updated("w", p, TF<1>::ones({2}, device)); }),
              AllOf(HasSubstr("adam: the gradient of parameter 'w' does not match its type"),
                    HasSubstr("f32[3], f32[2]")));
  const auto with_tensor = [](const char* name, ir::TensorData data) {
    optim::NamedState state;
    state.tensors.emplace(name, std::move(data));
    return state;
  };
  const auto with_value = [](const char* name, const char* value) {
    optim::NamedState state;
    state.values[name] = value;
    return state;
  };
  EXPECT_THAT(
      ErrorOf([&] {
        adam.load_state(with_tensor("w.momentum_buffer", ir::TensorData(ir::DType::kF32, {3})));
      }),
      AllOf(HasSubstr("adam: load_state: unknown tensor 'w.momentum_buffer'"),
            HasSubstr("<parameter>.exp_avg, <parameter>.exp_avg_sq")));
  EXPECT_THAT(ErrorOf([&] { adam.load_state(with_value("w.step", "1.5")); }),
              HasSubstr("'w.step' = '1.5' is not a step count >= 0"));
  EXPECT_THAT(ErrorOf([&] { adam.load_state(with_value("optimizer", "sgd")); }),
              HasSubstr("adam: load_state: the state is of optimizer 'sgd', not adam"));
  EXPECT_THAT(ErrorOf([&] { adam.load_state(with_value("momentum", "0.9")); }),
              HasSubstr("unknown value 'momentum'"));
  adam.load_state(with_value("lr", "0.25"));
  EXPECT_EQ(adam.lr(), 0.25);
  adam.load_state(with_tensor("w.exp_avg", ir::TensorData(ir::DType::kF32, {2})));
  EXPECT_THAT(ErrorOf([&] { (void)adam.updated("w", p, p); }),
              AllOf(HasSubstr("loaded state 'w.exp_avg' does not match parameter 'w'"),
                    HasSubstr("f32[2], f32[3]")));
}

// ---- Clipping -----------------------------------------------------------------------------------

TEST(ClipTest, MatchesPyTorch) {
  B::Device device;
  for (const json& c : Fixture()["clipping"]) {
    SCOPED_TRACE(c.dump().substr(0, 80));
    std::vector<kiln::detail::TensorRef> grads = {
        TF<2>::from_vector(c["grads"]["fc.weight"].get<std::vector<double>>(), {3, 4}, device)
            .ref(),
        TF<1>::from_vector(c["grads"]["fc.bias"].get<std::vector<double>>(), {3}, device).ref()};
    if (c["kind"] == "norm") {
      const double norm_type =
          c["norm_type"] == "inf" ? optim::kInfNorm : c["norm_type"].get<double>();
      const TF<0> total(optim::detail::ClipGradNorm(grads, c["max_norm"], norm_type, grads[0],
                                                    std::source_location::current()));
      EXPECT_NEAR(total.item(), c["total_norm"].get<double>(),
                  1e-5 * c["total_norm"].get<double>());
    } else {
      optim::detail::ClipGradValue(grads, c["clip_value"], std::source_location::current());
    }
    ExpectAllClose(TF<2>(grads[0]).to_vector<double>(),
                   c["expected"]["fc.weight"].get<std::vector<double>>(), 1e-5, 1e-6);
    ExpectAllClose(TF<1>(grads[1]).to_vector<double>(),
                   c["expected"]["fc.bias"].get<std::vector<double>>(), 1e-5, 1e-6);
  }
}

TEST(ClipTest, Errors) {
  B::Device device;
  std::vector<kiln::detail::TensorRef> grads = {TF<1>::ones({2}, device).ref()};
  EXPECT_THAT(ErrorOf([&] {
                optim::detail::ClipGradNorm(grads, 1.0, 0.5, grads[0],
                                            std::source_location::current());
              }),
              HasSubstr("clip_grad_norm: norm_type 0.5 must be >= 1"));
  EXPECT_THAT(
      ErrorOf([&] { optim::detail::ClipGradValue(grads, -1.0, std::source_location::current()); }),
      HasSubstr("clip_grad_value: clip_value -1 must be >= 0"));
}

// ---- Schedulers ---------------------------------------------------------------------------------

optim::LrScheduler MakeScheduler(const json& c) {
  const std::string kind = c["kind"];
  const json& o = c["config"];
  const double base = c["base_lr"];
  if (kind == "step") return optim::StepLr(base, o["step_size"], o["gamma"]);
  if (kind == "exponential") return optim::ExponentialLr(base, o["gamma"]);
  if (kind == "cosine") return optim::CosineAnnealingLr(base, o["t_max"], o["eta_min"]);
  if (kind == "linear") {
    return optim::LinearLr(base, o["start_factor"], o["end_factor"], o["total_iters"]);
  }
  if (kind == "sequential_warmup_cosine") {
    return optim::SequentialLr({optim::LinearLr(base, o["start_factor"], 1.0, o["warmup"]),
                                optim::CosineAnnealingLr(base, o["t_max"], o["eta_min"])},
                               {o["warmup"].get<int64_t>()});
  }
  if (kind == "chained_step_exponential") {
    return optim::ChainedLr({optim::StepLr(base, o["step_size"], o["step_gamma"]),
                             optim::ExponentialLr(base, o["exp_gamma"])});
  }
  ADD_FAILURE() << "unknown scheduler " << kind;
  return optim::ExponentialLr(base, 1.0);
}

TEST(SchedulerTest, MatchesPyTorch) {
  const json& cases = Fixture()["schedulers"];
  ASSERT_GE(cases.size(), 8u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["kind"].get<std::string>() + " " + c["config"].dump());
    const std::vector<double> want = c["lrs"].get<std::vector<double>>();
    optim::LrScheduler s = MakeScheduler(c);
    std::vector<double> pure, stateful;
    for (size_t t = 0; t < want.size(); ++t) pure.push_back(s.lr(static_cast<int64_t>(t)));
    for (size_t t = 0; t < want.size(); ++t) {
      stateful.push_back(s.current());
      s.step();
    }
    ExpectAllClose(pure, want, 1e-9, 1e-12);
    ExpectAllClose(stateful, want, 1e-9, 1e-12);
    // A restored counter resumes the schedule.
    optim::LrScheduler restored = MakeScheduler(c);
    optim::LrScheduler seven = MakeScheduler(c);
    seven.set_last_step(7);
    restored.load_state(seven.state());
    EXPECT_EQ(restored.current(), s.lr(7));
    EXPECT_EQ(restored.step(), s.lr(8));
    EXPECT_EQ(restored.last_step(), 8);
    EXPECT_EQ(restored.state().values.at("last_step"), "8");
  }
}

TEST(SchedulerTest, Errors) {
  EXPECT_THAT(ErrorOf([] { (void)optim::StepLr(0.1, 0); }),
              AllOf(HasSubstr("step_lr: step_size 0 must be >= 1"), HasSubstr("optim_test.cc")));
  EXPECT_THAT(ErrorOf([] { (void)optim::CosineAnnealingLr(-0.1, 10); }),
              HasSubstr("cosine_annealing_lr: base_lr -0.1"));
  EXPECT_THAT(ErrorOf([] {
                (void)optim::SequentialLr(
                    {optim::ExponentialLr(0.1, 0.9), optim::ExponentialLr(0.1, 0.5)}, {});
              }),
              HasSubstr("sequential_lr: needs one milestone fewer than schedulers"));
  EXPECT_THAT(ErrorOf([] { (void)optim::ExponentialLr(0.1, 0.9).lr(-1); }),
              HasSubstr("step -1 must be >= 0"));
  optim::LrScheduler s = optim::ExponentialLr(0.1, 0.9);
  EXPECT_THAT(ErrorOf([&] { s.set_last_step(-2); }), HasSubstr("step -2 is negative"));
  EXPECT_THAT(ErrorOf([&] { s.load_state(optim::NamedState{}); }),
              HasSubstr("load_state: no 'last_step' value"));
  optim::NamedState bad;
  bad.values["last_step"] = "x";
  EXPECT_THAT(ErrorOf([&] { s.load_state(bad); }),
              HasSubstr("load_state: last_step 'x' is not a step count >= 0"));
}

}  // namespace
}  // namespace kiln::testing
