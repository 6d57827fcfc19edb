// The Fashion-MNIST MLP of README.md (examples/fashion_mnist/mlp.cc), shared by the harnesses of
// README's training and deploy fragments, and small synthetic datasets of its input shape.
#pragma once

#include <kiln/kiln.h>

#include <cstdint>

template <class B>
struct Mlp {
  kiln::nn::Linear<B> fc1, fc2, fc3;
  KILN_MODULE(Mlp, fc1, fc2, fc3);

  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 2>& x) const {
    using kiln::activation::relu;
    return fc3.forward(relu(fc2.forward(relu(fc1.forward(x)))));
  }
};

// `n` images f32 [28, 28] in [0, 1) and labels 0..9: Fashion-MNIST's shapes, so the fragments run
// in seconds instead of training on 60,000 images (which `make demo` and tests/cpu do).
inline kiln::data::DatasetPtr SyntheticImages(int64_t n) {
  kiln::ir::TensorData images(kiln::ir::DType::kF32, {n, 28, 28});
  kiln::ir::TensorData labels(kiln::ir::DType::kI64, {n});
  for (int64_t i = 0; i < images.num_elements(); ++i) {
    images.SetDouble(i, static_cast<double>((i * 7919) % 1000) / 1000.0);
  }
  for (int64_t i = 0; i < n; ++i) labels.SetDouble(i, static_cast<double>(i % 10));
  return std::make_shared<kiln::data::InMemoryDataset>(std::move(images), std::move(labels));
}
