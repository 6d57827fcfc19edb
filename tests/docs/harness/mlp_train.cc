// Harness of README.md's training loop: `device`, `train_set` and `test_loader` (small synthetic
// Fashion-MNIST-shaped sets, tests/docs/harness/mlp.h) and the Mlp type; after the fragment, the
// Learner must have written its checkpoint.
#include <filesystem>
#include <iostream>

#include "mlp.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  auto train_set = SyntheticImages(256);
  auto test_loader = kiln::data::DataLoaderConfig(128).init(SyntheticImages(128));
  //@fragment
  if (!std::filesystem::exists("runs/mlp/last.safetensors")) {
    std::cerr << "the Learner wrote no runs/mlp/last.safetensors\n";
    return 1;
  }
  return 0;
}
