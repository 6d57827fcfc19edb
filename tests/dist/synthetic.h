// What tests/dist's data-parallel tests train: a small MLP on a synthetic 4-class problem, cheap
// enough on the Reference backend for several runs per test on a shared machine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "kiln/kiln.h"

namespace kiln::dist::test_util {

template <class B>
struct Mlp {
  nn::Linear<B> fc1, fc2;
  KILN_MODULE(Mlp, fc1, fc2);
  Tensor<B, 2> forward(const Tensor<B, 2>& x) const {
    return fc2.forward(activation::relu(fc1.forward(x)));
  }
};

/// Mlp 8-32-4 with kiln's default initialisation, drawn from manual_seed(seed).
template <class B>
Mlp<B> MakeMlp(uint64_t seed) {
  typename B::Device device;
  manual_seed(seed);
  return Mlp<B>{nn::LinearConfig(8, 32).init<B>(device), nn::LinearConfig(32, 4).init<B>(device)};
}

/// Synthetic classification: 8 features in [-1, 1), label = argmax of a fixed linear map. `seed`
/// picks the examples.
inline data::DatasetPtr Synthetic(int64_t n, uint64_t seed = 12345) {
  ir::TensorData inputs(ir::DType::kF32, {n, 8});
  ir::TensorData targets(ir::DType::kI64, {n});
  uint64_t state = seed;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53 * 2 - 1;
  };
  for (int64_t i = 0; i < n; ++i) {
    double score[4] = {0, 0, 0, 0};
    for (int64_t f = 0; f < 8; ++f) {
      const double x = next();
      inputs.SetDouble(i * 8 + f, x);
      for (int c = 0; c < 4; ++c) score[c] += x * ((f + c) % 3 - 1.0);
    }
    targets.SetInt64(i, std::max_element(score, score + 4) - score);
  }
  return std::make_shared<data::InMemoryDataset>(std::move(inputs), std::move(targets));
}

/// The Learner's step function for Mlp: cross-entropy, with logits and labels for accuracy.
template <class B>
train::StepOutput<B> MlpStep(Mlp<B>& model, const data::Batch& batch) {
  typename B::Device device;
  auto x = batch.inputs_as<B, 2>(device);
  auto y = batch.targets_as<B, 1>(device);
  auto logits = model.forward(x);
  return train::StepOutput<B>{nn::cross_entropy(logits, y), logits, y};
}

}  // namespace kiln::dist::test_util
