// End-to-end training trajectory against PyTorch: the same initial weights, the same batches of
// real Fashion-MNIST and the same optimizer give the same loss at every step and the same final
// weights. The oracle is tests/frontend/fixtures/trajectory.safetensors, written by
// make_trajectory_fixture.py (torch 1.13): an MLP 784-32-10 trained 20 steps with
// SGD(lr=0.01, momentum=0.9) and cross-entropy at batch 32 on the first 640 training images,
// batches in the order of the fixture's permutation.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "frontend/data/dataset.h"
#include "frontend/data/mnist.h"
#include "frontend/optim/optimizer.h"
#include "frontend/train/checkpoint.h"
#include "frontend/train/safetensors.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBatch = 32;
constexpr const char* kFixture = "tests/frontend/fixtures/trajectory.safetensors";
const char* const kParams[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

template <class Backend>
struct Mlp {
  nn::Linear<Backend> fc1, fc2;
  KILN_MODULE(Mlp, fc1, fc2);

  Tensor<Backend, 2> forward(const Tensor<Backend, 2>& x) const {
    return fc2.forward(activation::relu(fc1.forward(x)));
  }
};

/// The fixture's tensor `name` (the test fails if it is missing).
const ir::TensorData& Get(const train::SafetensorsFile& file, const std::string& name) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) ADD_FAILURE() << kFixture << " has no tensor " << name;
  return it->second;
}

/// The model with torch's initial weights, loaded through train::load_state_dict (the fixture
/// keeps them as exact F16 values; they are widened to the module's f32 in a temporary file).
Mlp<B> InitialModel(const train::SafetensorsFile& fixture) {
  const B::Device device;
  Mlp<B> model{nn::LinearConfig(784, 32).init<B>(device), nn::LinearConfig(32, 10).init<B>(device)};
  train::SafetensorsFile state;
  for (const char* name : kParams) {
    const ir::TensorData& init = Get(fixture, std::string("init.") + name);
    state.tensors[name] =
        ir::TensorData::FromVector(ir::DType::kF32, init.shape(), init.ToDoubles());
  }
  const fs::path path = fs::path(::testing::TempDir()) /
                        ("kiln_trajectory_init_" + std::to_string(getpid()) + ".safetensors");
  const absl::Status written = train::WriteSafetensors(path.string(), state);
  EXPECT_TRUE(written.ok()) << written;
  train::load_state_dict(path.string(), model);
  fs::remove(path);
  return model;
}

TEST(Trajectory, SgdMomentumOnFashionMnistMatchesTorchStepByStep) {
  absl::StatusOr<train::SafetensorsFile> fixture = train::ReadSafetensors(kFixture);
  ASSERT_TRUE(fixture.ok()) << fixture.status() << " (run from the repository root; ctest does)";
  const std::vector<double> torch_losses = Get(*fixture, "losses").ToDoubles();
  const std::vector<double> perm = Get(*fixture, "permutation").ToDoubles();
  const int64_t steps = static_cast<int64_t>(torch_losses.size());
  ASSERT_EQ(steps, 20);
  ASSERT_EQ(static_cast<int64_t>(perm.size()), steps * kBatch);

  // The images exactly as the fixture's script prepares them: x / 255, then (x - mean) / std.
  const data::DatasetPtr images =
      data::normalize(data::scale_to_unit(data::FashionMnist::train()), {0.2860f}, {0.3530f});
  ASSERT_EQ(images->spec().input_bytes(), 784 * 4);
  ASSERT_EQ(images->spec().target_bytes(), 8);

  Mlp<B> model = InitialModel(*fixture);
  optim::Sgd optimizer = optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
  const B::Device device;
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<float> x(kBatch * 784);
    std::vector<int64_t> y(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) {
      const auto index = static_cast<int64_t>(perm[step * kBatch + i]);
      images->copy_example(index, reinterpret_cast<std::byte*>(x.data() + i * 784),
                           reinterpret_cast<std::byte*>(y.data() + i));
    }
    const auto inputs = TF<2>::from_vector(x, {kBatch, 784}, device);
    const auto labels = TI<1>::from_vector(y, {kBatch}, device);
    const auto loss = nn::cross_entropy(model.forward(inputs), labels);
    const Gradients grads = loss.backward();
    optimizer.step(model, grads);
    optim::realize_step(model, optimizer, loss);
    losses.push_back(loss.item());
  }

  // Every step's loss within 1e-4 relative of torch's (all steps reported, so a failure shows
  // where the trajectories part).
  for (int64_t step = 0; step < steps; ++step) {
    EXPECT_NEAR(losses[step], torch_losses[step], 1e-4 * std::abs(torch_losses[step]))
        << "step " << step;
  }
  // The final weights within 1e-4 absolute: initial + torch's change (fc1.weight's change is
  // stored as F16, whose rounding error |delta| * 2^-11 is about 1.5e-5 here).
  std::vector<std::string> names;
  std::vector<std::vector<double>> got;
  model.visit([&](const std::string& name, const auto& tensor) {
    names.push_back(name);
    got.push_back(tensor.into_data().ToDoubles());
  });
  ASSERT_EQ(names, std::vector<std::string>(std::begin(kParams), std::end(kParams)));
  for (size_t p = 0; p < names.size(); ++p) {
    const std::string& name = names[p];
    const std::vector<double> init = Get(*fixture, "init." + name).ToDoubles();
    const std::vector<double> delta = Get(*fixture, "delta." + name).ToDoubles();
    ASSERT_EQ(got[p].size(), init.size()) << name;
    int64_t mismatches = 0;
    double worst = 0;
    for (size_t i = 0; i < init.size(); ++i) {
      const double diff = std::abs(got[p][i] - (init[i] + delta[i]));
      worst = std::max(worst, diff);
      if (diff > 1e-4 && mismatches++ < 5) {
        ADD_FAILURE() << name << "[" << i << "]: kiln " << got[p][i] << ", torch "
                      << init[i] + delta[i];
      }
    }
    EXPECT_EQ(mismatches, 0) << name << ": largest difference " << worst;
  }
}

}  // namespace
}  // namespace kiln::testing
