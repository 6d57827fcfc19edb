// The frontend workloads kiln_bench (CPU) and cuda_bench (GPU) time the same way: the Fashion-MNIST
// MLP and CNN as examples/fashion_mnist builds them, a host batch of their inputs, one training
// step as the Learner runs it, and the checks of a backend's parameters against kiln::Reference's.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::bench {

/// `count` values uniform in [low, high), deterministic in `seed`.
inline std::vector<float> RandomValues(int64_t count, uint32_t seed, float low = -3.f,
                                       float high = 3.f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = distribution(engine);
  return values;
}

template <class Backend>
struct FrontendMlp {
  kiln::nn::Linear<Backend> fc1, fc2, fc3;
  KILN_MODULE(FrontendMlp, fc1, fc2, fc3);

  static FrontendMlp Make() {
    typename Backend::Device device;
    return FrontendMlp{kiln::nn::LinearConfig(784, 512).init<Backend>(device),
                       kiln::nn::LinearConfig(512, 256).init<Backend>(device),
                       kiln::nn::LinearConfig(256, 10).init<Backend>(device)};
  }
  kiln::Tensor<Backend, 2> forward(const kiln::Tensor<Backend, 2>& x) const {
    using kiln::activation::relu;
    return fc3.forward(relu(fc2.forward(relu(fc1.forward(x)))));
  }
  // As examples/fashion_mnist/mlp.cc: images [N, 28, 28] flattened.
  kiln::Tensor<Backend, 2> logits(const kiln::Tensor<Backend, 3>& images) const {
    return forward(images.template reshape<2>({images.dim(0), 784}));
  }
};

template <class Backend>
struct FrontendCnn {
  kiln::nn::Conv2d<Backend> conv1, conv2;
  kiln::nn::Linear<Backend> fc1, fc2;
  KILN_MODULE(FrontendCnn, conv1, conv2, fc1, fc2);

  static FrontendCnn Make() {
    typename Backend::Device device;
    return FrontendCnn{kiln::nn::Conv2dConfig(1, 32, {3, 3}).init<Backend>(device),
                       kiln::nn::Conv2dConfig(32, 64, {3, 3}).init<Backend>(device),
                       kiln::nn::LinearConfig(1600, 128).init<Backend>(device),
                       kiln::nn::LinearConfig(128, 10).init<Backend>(device)};
  }
  // As examples/fashion_mnist/cnn.cc.
  kiln::Tensor<Backend, 2> logits(const kiln::Tensor<Backend, 3>& images) const {
    using kiln::activation::relu;
    auto h = kiln::nn::max_pool2d(relu(conv1.forward(images.template unsqueeze<1>())), {2, 2});
    h = kiln::nn::max_pool2d(relu(conv2.forward(h)), {2, 2});
    return fc2.forward(relu(fc1.forward(h.template reshape<2>({h.dim(0), 1600}))));
  }
};

// A fixed batch of normalised-looking images ([-0.81, 2.02], the range Fashion-MNIST's pixels
// take after the examples' normalisation) and labels 0..9.
struct HostBatch {
  int64_t n = 0;
  std::vector<float> images;
  std::vector<int64_t> labels;
};
inline HostBatch MakeHostBatch(int64_t n, uint32_t seed) {
  HostBatch batch{n, RandomValues(n * 784, seed, -0.81f, 2.02f), {}};
  std::mt19937 engine(seed + 1);
  std::uniform_int_distribution<int64_t> label(0, 9);
  for (int64_t i = 0; i < n; ++i) batch.labels.push_back(label(engine));
  return batch;
}

// One training step as the Learner runs it; returns the loss.
template <class Backend, class Model, class Optimizer>
double FrontendTrainStep(Model& model, Optimizer& sgd, const HostBatch& batch,
                         kiln::amp::Precision precision = kiln::amp::Precision::kF32) {
  typename Backend::Device device;
  const auto images = kiln::Tensor<Backend, 3>::from_vector(
      batch.images, {batch.n, int64_t{28}, int64_t{28}}, device);
  const auto labels =
      kiln::Tensor<Backend, 1, kiln::Int>::from_vector(batch.labels, {batch.n}, device);
  kiln::amp::AutocastGuard autocast(kiln::amp::AutocastDTypeOf(precision));
  const auto logits = model.logits(images);
  const auto loss = kiln::nn::cross_entropy(logits, labels);
  sgd.step(model, loss.backward());
  kiln::optim::realize_step(model, sgd, loss, logits);
  return static_cast<double>(loss.item());
}

template <class Model>
std::vector<ir::TensorData> Parameters(const Model& model) {
  std::vector<ir::TensorData> out;
  model.visit(
      [&out](const std::string&, const auto& tensor) { out.push_back(tensor.into_data()); });
  return out;
}

// "" when every element of `got` is within tolerance of `want`.
inline std::string CompareParameters(const std::vector<ir::TensorData>& got,
                                     const std::vector<ir::TensorData>& want) {
  if (got.size() != want.size()) return "parameter count differs";
  for (size_t k = 0; k < got.size(); ++k) {
    if (got[k].num_elements() != want[k].num_elements()) return "parameter shape differs";
    for (int64_t i = 0; i < got[k].num_elements(); ++i) {
      const double w = want[k].GetDouble(i), v = got[k].GetDouble(i);
      if (!(std::abs(v - w) <= 1e-5 + 1e-4 * std::abs(w))) {
        return "parameter " + std::to_string(k) + " element " + std::to_string(i) + ": got " +
               std::to_string(v) + ", reference " + std::to_string(w);
      }
    }
  }
  return "";
}

}  // namespace kiln::bench
