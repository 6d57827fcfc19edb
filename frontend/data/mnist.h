// MNIST and Fashion-MNIST as InMemoryDatasets: inputs u8 [28, 28] (0..255), targets i64 []
// (the class, 0..9). Chain data::scale_to_unit / data::normalize for f32 inputs.
//
// Debian's package dataset-fashion-mnist installs Fashion-MNIST in
// /usr/share/datasets/fashion-mnist ({train,t10k}-{images-idx3,labels-idx1}-ubyte.gz).
#pragma once

#include <memory>
#include <source_location>
#include <string>

#include "frontend/data/dataset.h"

namespace kiln::data {

/// MNIST-layout IDX files in a directory: train-images-idx3-ubyte, train-labels-idx1-ubyte,
/// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each raw or with a .gz suffix.
class Mnist {
 public:
  /// The 60000 training examples in `dir`. A missing file throws kiln::Error naming it (and
  /// `install_hint` when given); corrupt files name the file and the byte offset.
  static std::shared_ptr<InMemoryDataset> train(
      const std::string& dir, const std::string& install_hint = "",
      std::source_location loc = std::source_location::current());
  /// The 10000 test examples in `dir`.
  static std::shared_ptr<InMemoryDataset> test(
      const std::string& dir, const std::string& install_hint = "",
      std::source_location loc = std::source_location::current());
  /// `prefix` is "train" or "t10k": images `<dir>/<prefix>-images-idx3-ubyte[.gz]` and labels.
  /// Images must be u8 [N, H, W] and labels u8 [N] with values 0..9.
  static std::shared_ptr<InMemoryDataset> load(
      const std::string& dir, const std::string& prefix, const std::string& install_hint = "",
      std::source_location loc = std::source_location::current());
};

/// Fashion-MNIST (10 classes of clothing; same layout as MNIST).
class FashionMnist {
 public:
  /// Where Debian's dataset-fashion-mnist puts the files.
  static constexpr const char* kDebianDir = "/usr/share/datasets/fashion-mnist";
  static std::shared_ptr<InMemoryDataset> train(
      const std::string& dir = kDebianDir,
      std::source_location loc = std::source_location::current());
  static std::shared_ptr<InMemoryDataset> test(
      const std::string& dir = kDebianDir,
      std::source_location loc = std::source_location::current());
};

}  // namespace kiln::data
