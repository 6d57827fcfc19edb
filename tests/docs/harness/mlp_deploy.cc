// Harness of README.md's deploy fragment: the MLP `model` (784-512-256-10) and `example_images`
// (one image, [1, 784]); the fragment's `status` must be OK and mlp.kiln written (README's C
// program my_app.c runs it next).
#include <filesystem>
#include <iostream>

#include "mlp.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  Mlp<kiln::Cpu> model{kiln::nn::LinearConfig(784, 512).init<kiln::Cpu>(device),
                       kiln::nn::LinearConfig(512, 256).init<kiln::Cpu>(device),
                       kiln::nn::LinearConfig(256, 10).init<kiln::Cpu>(device)};
  auto example_images = kiln::Tensor<kiln::Cpu, 2>::zeros({1, 784}, device);
  //@fragment
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  return std::filesystem::exists("mlp.kiln") ? 0 : 1;
}
