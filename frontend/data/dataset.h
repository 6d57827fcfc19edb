// kiln::data: datasets of fixed-shape examples held in host memory, and transforms on them.
//
//   auto train = data::FashionMnist::train();          // u8 [28,28] images, i64 labels
//   auto scaled = data::normalize(data::scale_to_unit(train), {0.286f}, {0.353f});
//   auto loader = data::DataLoaderConfig(128).with_shuffle(42).with_workers(2).init(scaled);
//
// A Dataset is read by the DataLoader's worker threads at the same time, so every method is
// const and must be thread-safe. Every example of a dataset has the same shapes and dtypes
// (spec()), so a batch is a stack of rows copied with memcpy (copy_example), with no per-example
// allocation on the hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "ir/tensor_data.h"

namespace kiln::data {

/// One example: an input (e.g. an image [28,28]) and its target (e.g. a scalar label), without
/// a batch dim.
struct Example {
  ir::TensorData input;
  ir::TensorData target;
};

/// The dtype and shape of every example's input and target.
struct ExampleSpec {
  ir::DType input_dtype = ir::DType::kF32;
  ir::Shape input_shape;
  ir::DType target_dtype = ir::DType::kI64;
  ir::Shape target_shape;

  /// Bytes of one input / target row.
  int64_t input_bytes() const;
  int64_t target_bytes() const;
  /// "input f32[784], target i64[]": for error messages.
  std::string ToString() const;
  bool operator==(const ExampleSpec& other) const = default;
};

/// A random-access collection of examples of one spec.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// The shapes and dtypes every example has.
  virtual const ExampleSpec& spec() const = 0;
  /// Example `index` (0 <= index < size(); otherwise kiln::Error).
  virtual Example get(int64_t index) const = 0;
  /// Writes example `index` into `input` (spec().input_bytes() bytes) and `target`
  /// (spec().target_bytes() bytes). The DataLoader's hot path: the default calls get() and
  /// copies; datasets that hold their examples contiguously override it with two memcpy.
  virtual void copy_example(int64_t index, std::byte* input, std::byte* target) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

/// A dataset of two host tensors: inputs [N, ...] and targets [N, ...] (row i is example i).
class InMemoryDataset : public Dataset {
 public:
  /// The leading dims must agree (kiln::Error otherwise) and both ranks must be >= 1.
  InMemoryDataset(ir::TensorData inputs, ir::TensorData targets,
                  std::source_location loc = std::source_location::current());

  int64_t size() const override { return size_; }
  const ExampleSpec& spec() const override { return spec_; }
  Example get(int64_t index) const override;
  void copy_example(int64_t index, std::byte* input, std::byte* target) const override;

  /// All inputs [N, ...] / targets [N, ...].
  const ir::TensorData& inputs() const { return inputs_; }
  const ir::TensorData& targets() const { return targets_; }

 private:
  ir::TensorData inputs_;
  ir::TensorData targets_;
  ExampleSpec spec_;
  int64_t size_ = 0;
};

/// The same dataset with `fn` applied to every example when it is read. Every result must have
/// one spec (that of fn(example 0)); a different one throws kiln::Error naming the index. `fn`
/// runs on the loader's worker threads, so it must be thread-safe.
DatasetPtr map(DatasetPtr dataset, std::function<Example(Example)> fn,
               std::source_location loc = std::source_location::current());

/// Inputs converted to f32 and normalised: (x - mean[c]) / std[c], where c is the index along
/// the input's last dim (per channel / per feature), or one mean/std for every element when the
/// vectors have one entry. Any real or integer input dtype; targets untouched.
DatasetPtr normalize(DatasetPtr dataset, std::vector<float> mean, std::vector<float> std,
                     std::source_location loc = std::source_location::current());

/// Images u8 in [0, 255] to f32 in [0, 1] (x / 255). The input dtype must be u8.
DatasetPtr scale_to_unit(DatasetPtr dataset,
                         std::source_location loc = std::source_location::current());

namespace detail {
/// Throws kiln::Error "<loc>: data: <op>: index <i> out of range for a dataset of <n> examples".
void CheckIndex(const char* op, int64_t index, int64_t size);
}  // namespace detail

}  // namespace kiln::data
