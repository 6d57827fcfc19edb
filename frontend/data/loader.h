// DataLoader: batches of a Dataset, optionally shuffled, built by worker threads ahead of the
// consumer.
//
//   auto loader = data::DataLoaderConfig(128).with_shuffle(/*seed=*/42).with_workers(2)
//                     .init(dataset);
//   for (int64_t epoch = 0; epoch < 10; ++epoch) {
//     for (data::Batch& batch : loader.epoch(epoch)) {
//       auto x = batch.inputs_as<Cpu, 2>(device);          // f32 [128, 784]
//       auto y = batch.targets_as<Cpu, 1, Int>(device);    // i64 [128]
//     }
//   }
//
// The order of an epoch depends only on (seed, epoch): the same on every run, whatever the
// number of workers. Batches come out in order. Workers build at most `prefetch` batches ahead
// of the consumer (a bounded queue). An exception thrown while building a batch (by the dataset
// or a map function) is rethrown by the consumer's next() for that batch, unchanged. Destroying
// the loader (or starting another epoch) mid-epoch stops and joins the workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <source_location>
#include <utility>
#include <vector>

#include "frontend/data/dataset.h"
#include "frontend/tensor.h"

namespace kiln::data {

/// One batch as host tensors: inputs [b, ...input shape], targets [b, ...target shape].
struct Batch {
  ir::TensorData inputs;
  ir::TensorData targets;
  /// Number of examples (b; the last batch may be short unless drop_last).
  int64_t size() const { return inputs.rank() > 0 ? inputs.shape()[0] : 0; }

  /// The inputs as a Tensor<B, R, K> on `device` (R = 1 + the example's rank; K must admit the
  /// dtype: scale_to_unit / normalize give f32 for Float). Copies; `std::move(batch).inputs_as`
  /// moves the data instead.
  template <class B, int R, class K = Float>
  Tensor<B, R, K> inputs_as(const Device& device,
                            std::source_location loc = std::source_location::current()) const& {
    return Tensor<B, R, K>::from_tensor_data(inputs, device, loc);
  }
  template <class B, int R, class K = Float>
  Tensor<B, R, K> inputs_as(const Device& device,
                            std::source_location loc = std::source_location::current()) && {
    return Tensor<B, R, K>::from_tensor_data(std::move(inputs), device, loc);
  }
  /// The targets as a tensor, e.g. targets_as<B, 1, Int>(device) for class labels.
  template <class B, int R, class K = Int>
  Tensor<B, R, K> targets_as(const Device& device,
                             std::source_location loc = std::source_location::current()) const& {
    return Tensor<B, R, K>::from_tensor_data(targets, device, loc);
  }
  template <class B, int R, class K = Int>
  Tensor<B, R, K> targets_as(const Device& device,
                             std::source_location loc = std::source_location::current()) && {
    return Tensor<B, R, K>::from_tensor_data(std::move(targets), device, loc);
  }
};

class DataLoader;

/// Which part of an epoch one process of a data-parallel job reads (torch's DistributedSampler):
/// every rank draws the same permutation of the dataset from (seed, epoch), pads it to a
/// multiple of `num_replicas` by repeating its first indices (or, with drop_last, cuts it to the
/// largest multiple), and takes every num_replicas-th index starting at `rank`. Every rank thus
/// reads the same number of examples, the shards of one epoch are disjoint up to the padding,
/// and together they cover the dataset. The sampler holds no MPI state: pass
/// ProcessGroup::rank() and world_size() (frontend/dist).
struct DistributedSampler {
  DistributedSampler(int64_t num_replicas, int64_t rank) : num_replicas(num_replicas), rank(rank) {}
  /// Cut the epoch to a multiple of num_replicas instead of padding it.
  DistributedSampler& with_drop_last(bool value = true) {
    drop_last = value;
    return *this;
  }
  /// Examples per rank for a dataset of `n`.
  int64_t shard_size(int64_t n) const {
    return drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
  }
  /// This rank's indices, in order, from one epoch's order of the whole dataset.
  std::vector<int64_t> shard(const std::vector<int64_t>& order) const;

  int64_t num_replicas;
  int64_t rank;
  bool drop_last = false;
};

/// DataLoader settings: DataLoaderConfig(batch_size).with_*(...).init(dataset).
struct DataLoaderConfig {
  explicit DataLoaderConfig(int64_t batch_size) : batch_size(batch_size) {}

  /// Shuffle every epoch with a permutation drawn from (seed, epoch). Default: no shuffle.
  DataLoaderConfig& with_shuffle(uint64_t seed) {
    shuffle = true;
    this->seed = seed;
    return *this;
  }
  /// Leave out the last batch when it is short.
  DataLoaderConfig& with_drop_last(bool value = true) {
    drop_last = value;
    return *this;
  }
  /// Read only this rank's shard of every epoch (data-parallel training). The shuffle (if any)
  /// is drawn from (seed, epoch) before sharding, so give every rank the same seed.
  DataLoaderConfig& with_sampler(DistributedSampler value) {
    sampler = value;
    return *this;
  }
  /// Worker threads building batches (0: the consumer builds each batch in next()).
  DataLoaderConfig& with_workers(int value) {
    workers = value;
    return *this;
  }
  /// Most batches built ahead of the consumer (>= 1; default 2 per worker).
  DataLoaderConfig& with_prefetch(int value) {
    prefetch = value;
    return *this;
  }
  /// Checks the settings (kiln::Error naming the bad one) and makes the loader.
  DataLoader init(DatasetPtr dataset,
                  std::source_location loc = std::source_location::current()) const;

  int64_t batch_size;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  int workers = 0;
  int prefetch = 0;  // 0: 2 * max(workers, 1)
  std::optional<DistributedSampler> sampler;
};

class DataLoader {
 public:
  DataLoader(DatasetPtr dataset, DataLoaderConfig config,
             std::source_location loc = std::source_location::current());
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch.
  int64_t num_batches() const;
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderConfig& config() const { return config_; }

  /// The example indices of `epoch`, in the order they are batched (identity when not
  /// shuffled; drop_last's left-out tail included). With a sampler: this rank's shard.
  std::vector<int64_t> order(int64_t epoch) const;

  /// Starts `epoch` (stopping an epoch in progress) and starts the workers.
  void start_epoch(int64_t epoch);
  /// The next batch of the current epoch, nullopt at its end (or before start_epoch). Rethrows
  /// an exception a worker caught while building this batch; the epoch then ends.
  std::optional<Batch> next();

  /// A range over one epoch's batches (calls start_epoch):
  /// `for (Batch& b : loader.epoch(e))`.
  class EpochRange;
  EpochRange epoch(int64_t epoch);

 private:
  struct State;
  void Stop();
  static Batch BuildBatch(const Dataset& dataset, int64_t batch_size,
                          const std::vector<int64_t>& order, int64_t batch);

  DatasetPtr dataset_;
  DataLoaderConfig config_;
  std::unique_ptr<State> state_;
};

class DataLoader::EpochRange {
 public:
  class iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    Batch& operator*() { return *current_; }
    iterator& operator++() {
      current_ = loader_->next();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  explicit EpochRange(DataLoader* loader) : loader_(loader) {}
  iterator begin() { return iterator(loader_); }
  std::default_sentinel_t end() { return {}; }

 private:
  DataLoader* loader_;
};

inline DataLoader::EpochRange DataLoader::epoch(int64_t epoch) {
  start_epoch(epoch);
  return EpochRange(this);
}

}  // namespace kiln::data
