// Harness of docs/training.md's Learner fragment: the names it uses unqualified (Cpu, a module
// Mlp, a Batch with images and labels), `model`, an SGD `optimizer`, and two loaders (a
// loader is anything a range-for walks: here vectors of batches). The run must have saved
// runs/mnist/last.safetensors.
#include <filesystem>
#include <vector>

#include "tiny.h"

using kiln::Cpu;
template <class B>
using Mlp = Tiny<B>;
struct Batch {
  kiln::Tensor<Cpu, 2> images;
  kiln::Tensor<Cpu, 1, kiln::Int> labels;
};

int doc_run() {
  kiln::manual_seed(0);
  Cpu::Device device;
  auto model = TinyModel(device);
  auto optimizer = kiln::optim::SgdConfig().with_lr(0.1).init();
  std::vector<Batch> train_loader(4, Batch{TinyInputs(device), TinyLabels(device)});
  std::vector<Batch> valid_loader(1, Batch{TinyInputs(device), TinyLabels(device)});
  //@fragment
  (void)result;
  return std::filesystem::exists("runs/mnist/last.safetensors") ? 0 : 1;
}
