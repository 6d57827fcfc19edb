// Harness of docs/api.md's kiln::jit fragment: `model`, an SGD `optimizer`, `steps` batches
// (`images`, `labels`, tiny.h's shapes); the losses must be finite, and the steps after the
// second must have been replayed.
#include <cmath>
#include <vector>

#include "tiny.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  auto model = TinyModel(device);
  auto optimizer = kiln::optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
  const int steps = 5;
  std::vector<kiln::Tensor<kiln::Cpu, 2>> images;
  std::vector<kiln::Tensor<kiln::Cpu, 1, kiln::Int>> labels;
  for (int i = 0; i < steps; ++i) {
    images.push_back(TinyInputs(device));
    labels.push_back(TinyLabels(device));
  }
  //@fragment
  return std::isfinite(total) && step.stats().replays == steps - 2 ? 0 : 1;
}
