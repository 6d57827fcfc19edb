// End to end on the real data: the demo's MLP (784-512-256-10, SGD lr 0.01 momentum 0.9, batch
// 128, seed 0) trained for one epoch on Fashion-MNIST with kiln::Cpu through the Learner. Checks
// that it learns, that every step after the first two is a compile-cache hit (one executable per
// training step), and that the checkpoint it writes restores the same model.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using B = Cpu;

template <class Backend>
struct Mlp {
  nn::Linear<Backend> fc1, fc2, fc3;
  KILN_MODULE(Mlp, fc1, fc2, fc3);

  Tensor<Backend, 2> forward(const Tensor<Backend, 2>& x) const {
    using activation::relu;
    return fc3.forward(relu(fc2.forward(relu(fc1.forward(x)))));
  }
};

// As examples/fashion_mnist/mlp.cc: He-uniform weights, nn.Linear's default biases.
Mlp<B> MakeMlp(const B::Device& device) {
  const auto he = nn::Initializer::KaimingUniform(nn::FanMode::kFanIn, nn::Gain::Relu());
  return Mlp<B>{nn::LinearConfig(784, 512).with_initializer(he).init<B>(device),
                nn::LinearConfig(512, 256).with_initializer(he).init<B>(device),
                nn::LinearConfig(256, 10).with_initializer(he).init<B>(device)};
}

// As examples/fashion_mnist/common.h: scaled to [0, 1], normalised with the training set's pixel
// mean and population standard deviation.
struct PixelStats {
  float mean, std;
};
PixelStats ComputePixelStats(const data::InMemoryDataset& images) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(images.inputs().data());
  const int64_t n = images.inputs().num_elements();
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = bytes[i] / 255.0;
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / static_cast<double>(n);
  return {static_cast<float>(mean),
          static_cast<float>(std::sqrt(sum_sq / static_cast<double>(n) - mean * mean))};
}

data::DatasetPtr Prepare(data::DatasetPtr images, PixelStats stats) {
  return data::normalize(data::scale_to_unit(std::move(images)), {stats.mean}, {stats.std});
}

double Accuracy(const Mlp<B>& model, const data::DatasetPtr& test, const B::Device& device) {
  NoGradGuard no_grad;
  auto loader = data::DataLoaderConfig(1000).init(test);
  train::Accuracy accuracy;
  for (data::Batch& batch : loader.epoch(0)) {
    auto images = batch.inputs_as<B, 3, Float>(device);
    auto logits = model.forward(images.reshape<2>({images.dim(0), 784}));
    accuracy.update(logits.into_data(), batch.targets);
  }
  return accuracy.value();
}

TEST(FashionMnistMlp, OneEpochLearnsWithOneExecutablePerStep) {
  const std::string dir = ::testing::TempDir() + "/kiln_fashion_mnist_mlp";
  std::filesystem::remove_all(dir);
  manual_seed(0);
  B::Device device;
  const auto train_images = data::FashionMnist::train();
  const PixelStats stats = ComputePixelStats(*train_images);
  // Fashion-MNIST's published statistics are 0.2860 / 0.3530.
  EXPECT_NEAR(stats.mean, 0.2860, 5e-4);
  EXPECT_NEAR(stats.std, 0.3530, 5e-4);
  auto train_set = Prepare(train_images, stats);
  auto test_set = Prepare(data::FashionMnist::test(), stats);
  auto loader = data::DataLoaderConfig(128).with_shuffle(0).with_workers(1).init(train_set);
  auto empty_valid = data::DataLoaderConfig(1000).init(test_set);

  Mlp<B> model = MakeMlp(device);
  auto optimizer = optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
  int64_t steps = 0;
  int64_t compiles_after_two_steps = -1;
  auto step = [&](Mlp<B>& m, const data::Batch& batch) {
    if (++steps == 3) compiles_after_two_steps = codegen::cpu::GetGraphCacheStats().compiles;
    auto images = batch.inputs_as<B, 3, Float>(device);
    auto logits = m.forward(images.reshape<2>({images.dim(0), 784}));
    auto labels = batch.targets_as<B, 1, Int>(device);
    return train::StepOutput<B>{nn::cross_entropy(logits, labels), logits, labels};
  };
  std::ostringstream quiet;
  train::Learner learner(model, optimizer, step,
                         train::LearnerConfig()
                             .with_epochs(1)
                             .with_checkpoint_dir(dir)
                             .with_progress(false)
                             .with_summary(&quiet));
  learner.fit(loader, empty_valid);
  EXPECT_EQ(learner.step(), 469);

  // The last batch is short (60000 = 468 * 128 + 96): its shape compiles once more, and so does
  // validation's forward pass. Every other step is a cache hit.
  const int64_t compiles = codegen::cpu::GetGraphCacheStats().compiles;
  EXPECT_GE(compiles_after_two_steps, 0);
  EXPECT_LE(compiles - compiles_after_two_steps, 6) << "training steps recompiled";

  const double accuracy = Accuracy(model, test_set, device);
  // Issue #4's target after one epoch. The demo's seed 0 reaches 0.854 (seeds 1 and 2: see
  // docs/training.md); a broken gradient or optimizer stays far below this.
  EXPECT_GE(accuracy, 0.84);

  // The checkpoint restores exactly this model.
  manual_seed(123);
  Mlp<B> restored = MakeMlp(device);
  train::load_checkpoint(dir + "/last.safetensors", restored);
  EXPECT_DOUBLE_EQ(Accuracy(restored, test_set, device), accuracy);
}

}  // namespace
}  // namespace kiln
