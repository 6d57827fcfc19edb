// Harness of the docs/training.md fragments that take a `loss` already recorded: `model`, an SGD
// `optimizer` and `loss` (cross-entropy of the tiny model, tiny.h); afterwards the loss must have
// been realized to a finite value.
#include <cmath>

#include "tiny.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  auto model = TinyModel(device);
  auto optimizer = kiln::optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
  kiln::Tensor<kiln::Cpu, 0> loss =
      kiln::nn::cross_entropy(model.forward(TinyInputs(device)), TinyLabels(device));
  //@fragment
  return std::isfinite(loss.item()) ? 0 : 1;
}
