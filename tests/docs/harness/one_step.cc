// Harness of docs/training.md's one-step fragment: `model`, `x`, `labels` (tiny.h) and an SGD
// `optimizer`; the step must realize a finite loss.
#include <cmath>

#include "tiny.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  auto model = TinyModel(device);
  auto x = TinyInputs(device);
  auto labels = TinyLabels(device);
  auto optimizer = kiln::optim::SgdConfig().with_lr(0.1).init();
  //@fragment
  return std::isfinite(loss.item()) ? 0 : 1;
}
