// The demo's MLP (784-512-256-10, ReLU, cross-entropy, SGD lr 0.01 momentum 0.9, batch 128) on
// real Fashion-MNIST, on the backend under test (kiln::Any on Backend().device):
//  - FiveStepsMatchTheReference: five training steps from one initialisation give the losses and
//    final weights of the same steps on kiln::Reference (the interpreter), to 1e-4 relative /
//    1e-5 absolute (f32 with other summation orders; far below what one wrong gradient or update
//    changes).
//  - LearnsWithOneExecutablePerStep: an epoch through the Learner (of the backend's
//    mlp_train_examples) reaches the backend's mlp_min_accuracy on (mlp_test_examples of) the
//    test set, every step
//    after the first two is a compile-cache hit, and the checkpoint it writes restores the same
//    model.
#include <kiln/kiln.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/train/safetensors.h"
#include "gtest/gtest.h"
#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {
namespace {

using B = Any;
constexpr int64_t kBatch = 128;

struct Mlp {
  nn::Linear<B> fc1, fc2, fc3;
  KILN_MODULE(Mlp, fc1, fc2, fc3);

  Tensor<B, 2> forward(const Tensor<B, 2>& x) const {
    using activation::relu;
    return fc3.forward(relu(fc2.forward(relu(fc1.forward(x)))));
  }
};

B::Device BackendDevice() { return B::Device(kiln::Device::Parse(Backend().device)); }

// As examples/fashion_mnist/mlp.cc: He-uniform weights, nn.Linear's default biases.
Mlp MakeMlp(const B::Device& device) {
  const auto he = nn::Initializer::KaimingUniform(nn::FanMode::kFanIn, nn::Gain::Relu());
  return Mlp{nn::LinearConfig(784, 512).with_initializer(he).init<B>(device),
             nn::LinearConfig(512, 256).with_initializer(he).init<B>(device),
             nn::LinearConfig(256, 10).with_initializer(he).init<B>(device)};
}

// ---- Five steps against the interpreter.

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  double seconds_per_step = 0;  // steps 2.. (after the compiles)
};

TrainRun TrainFiveSteps(const B::Device& device, const std::string& init_path,
                        const data::DatasetPtr& images) {
  constexpr int kSteps = 5;
  Mlp model = MakeMlp(device);
  train::load_state_dict(init_path, model);
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

TEST(ConformanceMlpTest, FiveStepsMatchTheReference) {
  const data::DatasetPtr images =
      data::normalize(data::scale_to_unit(data::FashionMnist::train()), {0.2860f}, {0.3530f});
  // One initialisation (seed 0 on the interpreter), saved and loaded into both models.
  manual_seed(0);
  const B::Device reference(kiln::Device::Parse("reference"));
  const Mlp initial = MakeMlp(reference);
  train::SafetensorsFile state;
  initial.visit([&](const std::string& name, const auto& tensor) {
    state.tensors[name] = tensor.into_data();
  });
  const std::string path = ::testing::TempDir() + "/kiln_conformance_mlp_init_" +
                           std::to_string(getpid()) + ".safetensors";
  ASSERT_TRUE(train::WriteSafetensors(path, state).ok());

  const TrainRun expected = TrainFiveSteps(reference, path, images);
  const TrainRun actual = TrainFiveSteps(BackendDevice(), path, images);
  std::filesystem::remove(path);
  std::printf("MLP training step (batch 128, after compiling): reference %.1f ms, %s %.1f ms\n",
              expected.seconds_per_step * 1e3, Backend().name.c_str(),
              actual.seconds_per_step * 1e3);

  ASSERT_EQ(actual.losses.size(), expected.losses.size());
  for (size_t step = 0; step < expected.losses.size(); ++step) {
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

// ---- An epoch through the Learner.

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

// The first `size` examples of a dataset.
class FirstExamples final : public data::Dataset {
 public:
  FirstExamples(data::DatasetPtr dataset, int64_t size)
      : dataset_(std::move(dataset)), size_(std::min(size, dataset_->size())) {}
  int64_t size() const override { return size_; }
  const data::ExampleSpec& spec() const override { return dataset_->spec(); }
  data::Example get(int64_t index) const override {
    data::detail::CheckIndex("first_examples", index, size_);
    return dataset_->get(index);
  }
  void copy_example(int64_t index, std::byte* input, std::byte* target) const override {
    data::detail::CheckIndex("first_examples", index, size_);
    dataset_->copy_example(index, input, target);
  }

 private:
  data::DatasetPtr dataset_;
  int64_t size_;
};

data::DatasetPtr Prepare(data::DatasetPtr images, PixelStats stats) {
  return data::normalize(data::scale_to_unit(std::move(images)), {stats.mean}, {stats.std});
}

double Accuracy(const Mlp& model, const data::DatasetPtr& test, const B::Device& device) {
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

TEST(ConformanceMlpTest, LearnsWithOneExecutablePerStep) {
  const BackendUnderTest& backend = Backend();
  const std::string dir = ::testing::TempDir() + "/kiln_conformance_mlp_" + backend.name;
  std::filesystem::remove_all(dir);
  manual_seed(0);
  const B::Device device = BackendDevice();
  const auto train_images = data::FashionMnist::train();
  const PixelStats stats = ComputePixelStats(*train_images);
  // Fashion-MNIST's published statistics are 0.2860 / 0.3530.
  EXPECT_NEAR(stats.mean, 0.2860, 5e-4);
  EXPECT_NEAR(stats.std, 0.3530, 5e-4);
  auto train_set =
      std::make_shared<FirstExamples>(Prepare(train_images, stats), backend.mlp_train_examples);
  data::DatasetPtr test_set = std::make_shared<FirstExamples>(
      Prepare(data::FashionMnist::test(), stats), backend.mlp_test_examples);
  auto loader = data::DataLoaderConfig(kBatch).with_shuffle(0).with_workers(1).init(train_set);
  auto empty_valid = data::DataLoaderConfig(1000).init(test_set);

  Mlp model = MakeMlp(device);
  auto optimizer = optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
  int64_t steps = 0;
  int64_t compiles_after_two_steps = -1;
  auto step = [&](Mlp& m, const data::Batch& batch) {
    if (++steps == 3) compiles_after_two_steps = backend.graph_compiles();
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
  EXPECT_EQ(learner.step(), (train_set->size() + kBatch - 1) / kBatch);

  // A short last batch (60000 = 468 * 128 + 96) compiles its shape once more, and so does
  // validation's forward pass. Every other step is a cache hit.
  const int64_t compiles = backend.graph_compiles();
  EXPECT_GE(compiles_after_two_steps, 0);
  EXPECT_LE(compiles - compiles_after_two_steps, 6) << "training steps recompiled";

  const double accuracy = Accuracy(model, test_set, device);
  std::printf("%s: accuracy %.4f on %lld test images after one epoch of %lld\n",
              backend.name.c_str(), accuracy, static_cast<long long>(test_set->size()),
              static_cast<long long>(train_set->size()));
  // Issue #4's target after one full epoch is 0.84: the demo's seed 0 reaches 0.854 (seeds 1
  // and 2: see docs/training.md); a broken gradient or optimizer stays far below the backend's
  // threshold.
  EXPECT_GE(accuracy, backend.mlp_min_accuracy) << train_set->size() << " training examples";

  // The checkpoint restores exactly this model.
  manual_seed(123);
  Mlp restored = MakeMlp(device);
  train::load_checkpoint(dir + "/last.safetensors", restored);
  EXPECT_DOUBLE_EQ(Accuracy(restored, test_set, device), accuracy);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::conformance
