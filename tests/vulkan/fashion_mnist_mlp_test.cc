// Five training steps of the demo's MLP (784-512-256-10, ReLU, cross-entropy, SGD lr 0.01
// momentum 0.9, batch 128) on real Fashion-MNIST batches, on kiln::Vulkan and on kiln::Cpu from
// the same initial weights: the losses and the final weights agree (both are f32 with different
// summation orders, so to 1e-4 relative / 1e-5 absolute, far below what one wrong gradient or
// update would change).
#include <kiln/kiln.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/vulkan/graph_compiler.h"
#include "frontend/train/safetensors.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 128;
constexpr int kSteps = 5;

template <class Backend>
struct Mlp {
  nn::Linear<Backend> fc1, fc2, fc3;
  KILN_MODULE(Mlp, fc1, fc2, fc3);

  Tensor<Backend, 2> forward(const Tensor<Backend, 2>& x) const {
    using activation::relu;
    return fc3.forward(relu(fc2.forward(relu(fc1.forward(x)))));
  }
};

template <class B>
Mlp<B> MakeMlp(const std::string& init_path) {
  const typename B::Device device;
  Mlp<B> model{nn::LinearConfig(784, 512).init<B>(device),
               nn::LinearConfig(512, 256).init<B>(device),
               nn::LinearConfig(256, 10).init<B>(device)};
  train::load_state_dict(init_path, model);
  return model;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  double seconds_per_step = 0;  // steps 2.. (after the compiles)
};

template <class B>
TrainRun Train(const std::string& init_path, const data::DatasetPtr& images) {
  const typename B::Device device;
  Mlp<B> model = MakeMlp<B>(init_path);
  optim::Sgd optimizer = optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
  TrainRun run;
  std::chrono::steady_clock::time_point start;
  for (int step = 0; step < kSteps; ++step) {
    if (step == 2) start = std::chrono::steady_clock::now();
    std::vector<float> x(kBatch * 784);
    std::vector<int64_t> y(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) {
      images->copy_example(step * kBatch + i, reinterpret_cast<std::byte*>(x.data() + i * 784),
                           reinterpret_cast<std::byte*>(y.data() + i));
    }
    const auto inputs = Tensor<B, 2>::from_vector(x, {kBatch, 784}, device);
    const auto labels = Tensor<B, 1, Int>::from_vector(y, {kBatch}, device);
    const auto loss = nn::cross_entropy(model.forward(inputs), labels);
    const Gradients grads = loss.backward();
    optimizer.step(model, grads);
    optim::realize_step(model, optimizer, loss);
    run.losses.push_back(loss.item());
  }
  run.seconds_per_step =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      (kSteps - 2);
  model.visit([&](const std::string&, const auto& tensor) {
    run.params.push_back(tensor.into_data().ToDoubles());
  });
  return run;
}

TEST(VulkanFashionMnistMlp, FiveStepsMatchTheCpuBackend) {
  const data::DatasetPtr images =
      data::normalize(data::scale_to_unit(data::FashionMnist::train()), {0.2860f}, {0.3530f});
  // One initialisation (seed 0 on Cpu), saved and loaded into both models.
  manual_seed(0);
  const Cpu::Device cpu;
  Mlp<Cpu> initial{nn::LinearConfig(784, 512).init<Cpu>(cpu),
                   nn::LinearConfig(512, 256).init<Cpu>(cpu),
                   nn::LinearConfig(256, 10).init<Cpu>(cpu)};
  train::SafetensorsFile state;
  initial.visit([&](const std::string& name, const auto& tensor) {
    state.tensors[name] = tensor.into_data();
  });
  const std::string path =
      ::testing::TempDir() + "/kiln_vulkan_mlp_init_" + std::to_string(getpid()) + ".safetensors";
  ASSERT_TRUE(train::WriteSafetensors(path, state).ok());

  const TrainRun expected = Train<Cpu>(path, images);
  const TrainRun actual = Train<Vulkan>(path, images);
  std::filesystem::remove(path);
  std::printf("MLP training step (batch 128, after compiling): Cpu %.1f ms, Vulkan %.1f ms\n",
              expected.seconds_per_step * 1e3, actual.seconds_per_step * 1e3);

  ASSERT_EQ(actual.losses.size(), expected.losses.size());
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(actual.losses[step], expected.losses[step], 1e-4 * expected.losses[step])
        << "step " << step;
  }
  // The loss moved: the steps trained something.
  EXPECT_LT(expected.losses.back(), expected.losses.front());
  ASSERT_EQ(actual.params.size(), expected.params.size());
  for (size_t p = 0; p < expected.params.size(); ++p) {
    ASSERT_EQ(actual.params[p].size(), expected.params[p].size());
    double worst = 0;
    for (size_t i = 0; i < expected.params[p].size(); ++i) {
      worst = std::max(worst, std::abs(actual.params[p][i] - expected.params[p][i]));
    }
    EXPECT_LT(worst, 1e-5) << "parameter " << p;
  }
}

}  // namespace
}  // namespace kiln
