// Harness of docs/quantization.md's fragment: the MLP `model` (784-512-256-10, mlp.h), `device`,
// `calibration` (a loader of random [N, 784] "images" in [0, 1]) and `images` (a batch of 4);
// the fragment quantizes, runs and compiles the int8 model, and the blob must exist with the
// int8 logits close to the f32 ones.
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>

#include "codegen/aot/aot.h"
#include "mlp.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  Mlp<kiln::Cpu> model{kiln::nn::LinearConfig(784, 512).init<kiln::Cpu>(device),
                       kiln::nn::LinearConfig(512, 256).init<kiln::Cpu>(device),
                       kiln::nn::LinearConfig(256, 10).init<kiln::Cpu>(device)};
  kiln::ir::TensorData pixels(kiln::ir::DType::kF32, {256, 784});
  std::mt19937 rng(1);
  for (int64_t i = 0; i < pixels.num_elements(); ++i) pixels.SetDouble(i, (rng() % 256) / 255.0);
  auto calibration =
      kiln::data::DataLoaderConfig(64).init(std::make_shared<kiln::data::InMemoryDataset>(
          pixels, kiln::ir::TensorData(kiln::ir::DType::kI64, {256})));
  auto images = kiln::Tensor<kiln::Cpu, 2>::random_uniform({4, 784}, 0.0, 1.0, device);
  //@fragment
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  const std::vector<float> want = model.forward(images).to_vector();
  const std::vector<float> got = logits.to_vector();
  float range = 0, error = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    range = std::max(range, std::abs(want[i]));
    error = std::max(error, std::abs(got[i] - want[i]));
  }
  return std::filesystem::exists("mlp_int8.kiln") && error < 0.05f * range ? 0 : 1;
}
