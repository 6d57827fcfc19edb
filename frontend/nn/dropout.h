// nn::Dropout (torch.nn.Dropout): in training mode each element is zeroed with probability p
// and the rest scaled by 1 / (1 - p); in evaluation mode it is the identity. The mask comes from
// kiln's seeded random stream (kiln::manual_seed; Philox, the same on every backend), so runs
// are reproducible, though not equal to torch's draws.
#pragma once

#include <source_location>

#include "frontend/error.h"
#include "frontend/module.h"
#include "frontend/tensor.h"

namespace kiln::nn {

struct Dropout {
  double p = 0.5;
  bool training = true;
  KILN_MODULE(Dropout);
  void kiln_set_training(bool on) { training = on; }

  template <class B, int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    if (!training || p == 0.0) return x;
    if (p == 1.0) return x.mul(0.0, loc);
    auto u = Tensor<B, R>::random_uniform(x.shape(), 0.0, 1.0, x.device(), x.dtype(), loc);
    return x.mul(1.0 / (1.0 - p), loc).mask_fill(u.lt(p, loc), 0.0, loc);
  }
};

struct DropoutConfig {
  explicit DropoutConfig(double p) : p(p) {}
  Dropout init(std::source_location loc = std::source_location::current()) const {
    if (!(p >= 0.0 && p <= 1.0)) {
      kiln::detail::ThrowOpError("DropoutConfig", "p must be in [0, 1]", {}, loc);
    }
    return Dropout{p};
  }
  double p;
};

}  // namespace kiln::nn
