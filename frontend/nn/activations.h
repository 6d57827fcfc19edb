// Activation modules (torch.nn.ReLU, GELU, ...): parameter-free wrappers of frontend/activation.h
// so activations can be fields of a KILN_MODULE and chosen by config.
#pragma once

#include <cstdint>
#include <source_location>

#include "frontend/activation.h"
#include "frontend/module.h"

namespace kiln::nn {

#define KILN_NN_ACTIVATION(Name, call)                                                       \
  struct Name {                                                                              \
    KILN_MODULE(Name);                                                                       \
    template <class B, int R>                                                                \
    Tensor<B, R> forward(const Tensor<B, R>& x,                                              \
                         std::source_location loc = std::source_location::current()) const { \
      return call;                                                                           \
    }                                                                                        \
  }

KILN_NN_ACTIVATION(ReLU, activation::relu(x, loc));
KILN_NN_ACTIVATION(GELU, activation::gelu(x, loc));
KILN_NN_ACTIVATION(SiLU, activation::silu(x, loc));
KILN_NN_ACTIVATION(Tanh, activation::tanh(x, loc));
KILN_NN_ACTIVATION(Sigmoid, activation::sigmoid(x, loc));
#undef KILN_NN_ACTIVATION

struct LeakyReLU {
  double negative_slope = 0.01;
  KILN_MODULE(LeakyReLU);
  template <class B, int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    return activation::leaky_relu(x, negative_slope, loc);
  }
};

struct Softmax {
  int64_t dim = -1;
  KILN_MODULE(Softmax);
  template <class B, int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    return activation::softmax(x, dim, loc);
  }
};

}  // namespace kiln::nn
