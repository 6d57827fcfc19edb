// A one-layer module (4 features, 3 classes) and a batch for it: what the training fragments of
// docs/training.md and docs/api.md call `model`, `x` and `labels`, small so they run in a second.
#pragma once

#include <kiln/kiln.h>

template <class B>
struct Tiny {
  kiln::nn::Linear<B> fc;
  KILN_MODULE(Tiny, fc);
  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 2>& x) const { return fc.forward(x); }
};

inline Tiny<kiln::Cpu> TinyModel(const kiln::Cpu::Device& device) {
  return Tiny<kiln::Cpu>{kiln::nn::LinearConfig(4, 3).init<kiln::Cpu>(device)};
}
inline kiln::Tensor<kiln::Cpu, 2> TinyInputs(const kiln::Cpu::Device& device) {
  return kiln::Tensor<kiln::Cpu, 2>::random_normal({8, 4}, 0, 1, device);
}
inline kiln::Tensor<kiln::Cpu, 1, kiln::Int> TinyLabels(const kiln::Cpu::Device& device) {
  return kiln::Tensor<kiln::Cpu, 1, kiln::Int>::from_data({0, 1, 2, 0, 1, 2, 0, 1}, device);
}
