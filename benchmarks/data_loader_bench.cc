// data_loader_bench: batches/s of the DataLoader on Fashion-MNIST's training set (60000 images,
// Debian's dataset-fashion-mnist) at batch 128, shuffled, scale_to_unit + normalize, with 0, 1
// and 2 worker threads; each batch is also turned into a Tensor<Cpu, 3> as a training loop does.
//   data_loader_bench [epochs (default 3)] [dir]
// The figures are in docs/training.md, section "Data".
#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "frontend/data/data.h"

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  namespace data = kiln::data;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::string dir = argc > 2 ? argv[2] : data::FashionMnist::kDebianDir;

  const auto t0 = Clock::now();
  auto train = data::FashionMnist::train(dir);
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("load train set (gunzip + parse, %lld images): %.3f s\n",
              static_cast<long long>(train->size()), load_s);
  auto dataset = data::normalize(data::scale_to_unit(train), {0.2860f}, {0.3530f});

  kiln::Cpu::Device device;
  for (int workers : {0, 1, 2}) {
    data::DataLoader loader =
        data::DataLoaderConfig(128).with_shuffle(1).with_workers(workers).init(dataset);
    int64_t batches = 0;
    double checksum = 0;
    const auto start = Clock::now();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (data::Batch& batch : loader.epoch(epoch)) {
        auto x = std::move(batch).inputs_as<kiln::Cpu, 3>(device);
        checksum += static_cast<double>(x.dim(0));
        ++batches;
      }
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("workers %d: %lld batches of 128 in %.3f s = %.0f batches/s (%.0f images/s)\n",
                workers, static_cast<long long>(batches), s, static_cast<double>(batches) / s,
                checksum / s);
  }
  return 0;
}
