// What the Fashion-MNIST examples share: command-line flags, the data pipeline and the training
// loop around kiln::train::Learner. Each example (mlp.cc, cnn.cc, transformer.cc) defines only its
// model and how a batch enters it.
#pragma once

#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Built with kiln_dist (MPI found): --ddp trains data-parallel over the ranks mpirun starts.
#if KILN_HAVE_DIST
#include "frontend/dist/ddp.h"
#include "frontend/dist/process_group.h"
#endif

namespace fashion_mnist {

struct Flags {
  int64_t epochs = 5;
  /// The global batch: with --ddp each of the R ranks takes batch_size / R.
  int64_t batch_size = 128;
  double lr = 0.01;
  int64_t workers = 1;
  /// Seeds the initialisation (kiln::manual_seed) and the shuffle.
  uint64_t seed = 0;
  /// Where checkpoints and metrics go.
  std::string dir;
  /// Where the Fashion-MNIST IDX files are (Debian's dataset-fashion-mnist by default).
  std::string data_dir = kiln::data::FashionMnist::kDebianDir;
  /// Stop after this many training batches per epoch (0: all); for quick checks.
  int64_t limit_batches = 0;
  /// Data-parallel over the processes of an mpirun job (one process without mpirun).
  bool ddp = false;
  /// f32, bf16 (autocast) or f16 (autocast and loss scaling): LearnerConfig::with_precision.
  kiln::amp::Precision precision = kiln::amp::Precision::kF32;
  /// After training: quantize the model to int8 (kiln::quant::quantize), compare its test
  /// accuracy and inference time with the f32 model's (EvaluateInt8).
  bool int8 = false;
  /// The batch EvaluateInt8 times inference at (0: batch_size).
  int64_t infer_batch = 0;
  /// --int8 with 7-bit weights (QuantConfig::reduce_range): the u8 x i8 GEMMs on pmaddubsw.
  bool reduce_range = false;
};

/// Parses --epochs N, --batch-size N, --lr X, --seed N, --workers N, --dir D, --data-dir D,
/// --precision P, --ddp, --int8, --infer-batch N and --reduce-range; exits with a usage message on
/// anything else.
inline Flags ParseFlags(int argc, char** argv, Flags defaults) {
  Flags flags = defaults;
  const auto usage = [&](const std::string& problem) {
    std::cerr
        << argv[0] << ": " << problem << "\n"
        << "usage: " << argv[0]
        << " [--epochs N] [--batch-size N] [--lr X] [--seed N] [--workers N] [--dir DIR]"
           " [--data-dir DIR] [--precision f32|bf16|f16] [--ddp]"
           " [--int8 [--infer-batch N] [--reduce-range]]\n"
        << "  --int8: after training, quantize to int8 and compare test accuracy and inference"
           " time at --infer-batch (default --batch-size) with f32; --reduce-range: 7-bit"
           " weights\n"
        << "  --ddp: data-parallel on the processes of `mpirun -np R " << argv[0]
        << " --ddp`; --batch-size is the global batch (batch-size / R per rank)\n";
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") usage("train on Fashion-MNIST with kiln's CPU backend");
    if (arg == "--ddp") {
      flags.ddp = true;
      continue;
    }
    if (arg == "--int8") {
      flags.int8 = true;
      continue;
    }
    if (arg == "--reduce-range") {
      flags.reduce_range = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + std::string(arg));
    const std::string value = argv[++i];
    try {
      if (arg == "--epochs") {
        flags.epochs = std::stoll(value);
      } else if (arg == "--batch-size") {
        flags.batch_size = std::stoll(value);
      } else if (arg == "--lr") {
        flags.lr = std::stod(value);
      } else if (arg == "--seed") {
        flags.seed = std::stoull(value);
      } else if (arg == "--workers") {
        flags.workers = std::stoll(value);
      } else if (arg == "--dir") {
        flags.dir = value;
      } else if (arg == "--data-dir") {
        flags.data_dir = value;
      } else if (arg == "--infer-batch") {
        flags.infer_batch = std::stoll(value);
      } else if (arg == "--precision") {
        const std::optional<kiln::amp::Precision> precision = kiln::amp::ParsePrecision(value);
        if (!precision) usage("--precision takes f32, bf16 or f16, not " + value);
        flags.precision = *precision;
      } else {
        usage("unknown flag " + std::string(arg));
      }
    } catch (const std::logic_error&) {
      usage("bad value '" + value + "' for " + std::string(arg));
    }
  }
  return flags;
}

/// The mean and (population) standard deviation of every pixel of `images` (u8 [N, H, W])
/// scaled to [0, 1]: torchvision's Normalize statistics, computed from the data.
struct PixelStats {
  float mean = 0, std = 1;
};
inline PixelStats ComputePixelStats(const kiln::data::InMemoryDataset& images) {
  const kiln::ir::TensorData& pixels = images.inputs();
  const auto* bytes = reinterpret_cast<const uint8_t*>(pixels.data());
  double sum = 0, sum_sq = 0;
  const int64_t n = pixels.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const double x = bytes[i] / 255.0;
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / static_cast<double>(n);
  return {static_cast<float>(mean),
          static_cast<float>(std::sqrt(sum_sq / static_cast<double>(n) - mean * mean))};
}

/// Pixels scaled to [0, 1] and normalised with the training set's statistics (`stats`), as
/// torchvision's ToTensor + Normalize do.
inline kiln::data::DatasetPtr Prepare(kiln::data::DatasetPtr images, PixelStats stats) {
  return kiln::data::normalize(kiln::data::scale_to_unit(std::move(images)), {stats.mean},
                               {stats.std});
}

/// Trains `model` with SGD (momentum 0.9) on Fashion-MNIST, validating on the test set after each
/// epoch (the summary line shows its accuracy) and checkpointing into flags.dir. `to_logits`
/// maps (model, batch) to logits [N, 10]. Returns the final test accuracy.
template <class B, class Model, class ToLogits>
double Train(Model& model, const Flags& flags, ToLogits to_logits) {
  using kiln::data::Batch;
  typename B::Device device;
  // Data-parallel: every rank builds the same pipeline and reads its shard of each epoch (one
  // shuffle seed everywhere); the Learner starts every rank from rank 0's weights, averages the
  // gradients and reduces the metrics; rank 0 prints and writes flags.dir.
  std::shared_ptr<const kiln::train::DataParallel> dp;
  int rank = 0, world_size = 1;
  if (flags.ddp) {
#if KILN_HAVE_DIST
    const auto& pg = kiln::dist::ProcessGroup::World();
    rank = pg.rank();
    world_size = pg.world_size();
    dp = kiln::dist::data_parallel(pg);
#else
    throw kiln::Error(
        "--ddp: this program was built without MPI (kiln_dist); apt-get install "
        "libopenmpi-dev openmpi-bin and rebuild");
#endif
  }
  if (flags.batch_size % world_size != 0) {
    throw kiln::Error("--batch-size " + std::to_string(flags.batch_size) +
                      " (the global batch) is not a multiple of the " + std::to_string(world_size) +
                      " ranks");
  }
  const bool lead = rank == 0;
  const auto train_images = kiln::data::FashionMnist::train(flags.data_dir);
  const PixelStats stats = ComputePixelStats(*train_images);
  auto train = Prepare(train_images, stats);
  auto test = Prepare(kiln::data::FashionMnist::test(flags.data_dir), stats);
  auto train_config = kiln::data::DataLoaderConfig(flags.batch_size / world_size)
                          .with_shuffle(flags.seed)
                          .with_workers(flags.workers);
  auto test_config = kiln::data::DataLoaderConfig(1000).with_workers(flags.workers);
  if (dp) {
    // The 10000 test images split evenly on 2, 4 or 5 ranks; on others the sampler repeats a
    // few to even the shards, and those count twice in the test metrics.
    train_config.with_sampler(kiln::data::DistributedSampler(world_size, rank));
    test_config.with_sampler(kiln::data::DistributedSampler(world_size, rank));
  }
  auto train_loader = train_config.init(train);
  auto test_loader = test_config.init(test);

  if (lead) {
    std::cout << "model: " << Model::kModuleName << ", " << model.num_params() << " parameters; "
              << train->size() << " training and " << test->size() << " test images; batch "
              << flags.batch_size << ", " << kiln::amp::PrecisionName(flags.precision);
    if (world_size > 1) {
      std::cout << " (" << world_size << " ranks x " << flags.batch_size / world_size << ")";
    }
    std::cout << "; pixels normalised with the training set's mean " << stats.mean << ", std "
              << stats.std << "\n";
  }
  auto optimizer = kiln::optim::SgdConfig().with_lr(flags.lr).with_momentum(0.9).init();
  auto step = [&](Model& m, const Batch& batch) {
    auto logits = to_logits(m, batch.inputs_as<B, 3, kiln::Float>(device));
    auto labels = batch.targets_as<B, 1, kiln::Int>(device);
    return kiln::train::StepOutput<B>{kiln::nn::cross_entropy(logits, labels), logits, labels};
  };
  kiln::train::Learner learner(model, optimizer, step,
                               kiln::train::LearnerConfig()
                                   .with_epochs(flags.epochs)
                                   .with_checkpoint_dir(flags.dir)
                                   .with_data_parallel(dp)
                                   .with_precision(flags.precision));
  if (learner.resume() && lead) {
    std::cout << "resumed from " << flags.dir << "/last.safetensors at epoch " << learner.epoch()
              << "\n";
  }
  learner.fit(train_loader, test_loader);
  double accuracy = 0;
  for (const auto& record : learner.records()) {
    if (record.split == "valid" && record.metric == "accuracy") accuracy = record.value;
  }
  if (!lead) return accuracy;
  std::cout << "test accuracy: " << accuracy << "\n";
  if (!flags.dir.empty()) {
    std::cout << "checkpoint: " << flags.dir << "/last.safetensors; metrics: " << flags.dir
              << "/metrics.csv, " << flags.dir << "/metrics.svg\n";
  }
  return accuracy;
}

/// The fraction of `loader`'s examples whose argmax of to_logits(model, images) is the label.
template <class B, class Model, class ToLogits>
double TestAccuracy(const Model& model, kiln::data::DataLoader& loader, ToLogits to_logits) {
  typename B::Device device;
  int64_t right = 0, total = 0;
  for (kiln::data::Batch& batch : loader.epoch(0)) {
    const std::vector<int64_t> predicted =
        to_logits(model, batch.inputs_as<B, 3, kiln::Float>(device))
            .argmax(1)
            .template to_vector<int64_t>();
    const std::vector<int64_t> labels =
        batch.targets_as<B, 1, kiln::Int>(device).template to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) right += predicted[i] == labels[i];
    total += static_cast<int64_t>(labels.size());
  }
  return total == 0 ? 0.0 : static_cast<double>(right) / static_cast<double>(total);
}

/// Milliseconds per call of to_logits(model, images) realized: the best of 5 rounds of at least
/// 0.2 s each, after one call that compiles.
template <class B, class Model, class ToLogits>
double InferenceMs(const Model& model, const kiln::Tensor<B, 3>& images, ToLogits to_logits) {
  using Clock = std::chrono::steady_clock;
  auto call = [&] { to_logits(model, images).template to_vector<float>(); };
  call();
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    int64_t calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      call();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < 0.2);
    best = std::min(best, 1e3 * elapsed / static_cast<double>(calls));
  }
  return best;
}

/// --int8: quantizes `model` with kiln::quant::quantize (calibrated on 8 shuffled training
/// batches of flags.batch_size, min-max; 7-bit weights with --reduce-range), then prints the f32
/// and int8 test accuracies and inference times per batch of flags.infer_batch (the Fashion-MNIST
/// test images), and returns the int8 accuracy.
template <class B, class Model, class ToLogits>
double EvaluateInt8(const Model& model, const Flags& flags, ToLogits to_logits) {
  typename B::Device device;
  const auto train_images = kiln::data::FashionMnist::train(flags.data_dir);
  const PixelStats stats = ComputePixelStats(*train_images);
  auto calibration = kiln::data::DataLoaderConfig(flags.batch_size)
                         .with_shuffle(flags.seed)
                         .init(Prepare(train_images, stats));
  auto test_set = Prepare(kiln::data::FashionMnist::test(flags.data_dir), stats);
  auto test_loader = kiln::data::DataLoaderConfig(1000).init(test_set);
  const Model int8_model = kiln::quant::quantize(
      model, calibration,
      [&](const Model& m, const kiln::data::Batch& batch) {
        return to_logits(m, batch.inputs_as<B, 3, kiln::Float>(device));
      },
      kiln::quant::QuantConfig().with_batches(8).with_reduce_range(flags.reduce_range));
  const double f32_accuracy = TestAccuracy<B>(model, test_loader, to_logits);
  const double int8_accuracy = TestAccuracy<B>(int8_model, test_loader, to_logits);
  std::cout << "int8" << (flags.reduce_range ? " (7-bit weights)" : "")
            << ": calibrated on 8 training batches of " << flags.batch_size
            << " (min-max); test accuracy f32 " << f32_accuracy << ", int8 " << int8_accuracy
            << " (drop " << 100.0 * (f32_accuracy - int8_accuracy) << " points)\n";
  const int64_t batch = flags.infer_batch > 0 ? flags.infer_batch : flags.batch_size;
  auto timing_loader = kiln::data::DataLoaderConfig(batch).init(test_set);
  const auto images =
      timing_loader.epoch(0).begin().operator*().template inputs_as<B, 3, kiln::Float>(device);
  const double f32_ms = InferenceMs<B>(model, images, to_logits);
  const double int8_ms = InferenceMs<B>(int8_model, images, to_logits);
  std::cout << "inference, batch " << batch << ": f32 " << f32_ms << " ms, int8 " << int8_ms
            << " ms (int8 " << f32_ms / int8_ms << "x as fast)\n";
  return int8_accuracy;
}

}  // namespace fashion_mnist
