#include "frontend/data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "frontend/error.h"

namespace kiln::data {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

// One epoch's shared state between the consumer and the workers. Workers claim batch numbers
// in order (next_claim) but only up to next_yield + prefetch, and park finished batches (or
// the exception that stopped them) in `ready` until the consumer takes them in order.
struct DataLoader::State {
  std::vector<int64_t> order;
  int64_t num_batches = 0;
  int64_t prefetch = 1;

  std::mutex mutex;
  std::condition_variable work_cv;   // workers wait for room or stop
  std::condition_variable ready_cv;  // the consumer waits for its batch
  int64_t next_claim = 0;
  int64_t next_yield = 0;
  bool stop = false;
  std::map<int64_t, Batch> ready;
  std::map<int64_t, std::exception_ptr> failed;
  std::vector<std::thread> threads;
};

DataLoader DataLoaderConfig::init(DatasetPtr dataset, std::source_location loc) const {
  return DataLoader(std::move(dataset), *this, loc);
}

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderConfig config, std::source_location loc)
    : dataset_(std::move(dataset)), config_(config) {
  const auto fail = [&](const std::string& message) {
    kiln::detail::ThrowStatus(
        absl::InvalidArgumentError(absl::StrCat("data: DataLoader: ", message)), loc);
  };
  if (!dataset_) fail("the dataset is null");
  if (config_.batch_size < 1)
    fail(absl::StrCat("batch_size ", config_.batch_size, " must be >= 1"));
  if (config_.workers < 0) fail(absl::StrCat("workers ", config_.workers, " must be >= 0"));
  if (config_.prefetch < 0) fail(absl::StrCat("prefetch ", config_.prefetch, " must be >= 0"));
  if (config_.prefetch == 0) config_.prefetch = 2 * std::max(config_.workers, 1);
  if (config_.sampler) {
    const DistributedSampler& s = *config_.sampler;
    if (s.num_replicas < 1) {
      fail(absl::StrCat("DistributedSampler: num_replicas ", s.num_replicas, " must be >= 1"));
    }
    if (s.rank < 0 || s.rank >= s.num_replicas) {
      fail(absl::StrCat("DistributedSampler: rank ", s.rank, " is not in [0, ", s.num_replicas,
                        ")"));
    }
  }
}

DataLoader::~DataLoader() { Stop(); }
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&& other) noexcept {
  if (this != &other) {
    Stop();
    dataset_ = std::move(other.dataset_);
    config_ = other.config_;
    state_ = std::move(other.state_);
  }
  return *this;
}

std::vector<int64_t> DistributedSampler::shard(const std::vector<int64_t>& order) const {
  const auto n = static_cast<int64_t>(order.size());
  std::vector<int64_t> out;
  if (n == 0) return out;
  const int64_t per_rank = shard_size(n);
  out.reserve(static_cast<size_t>(per_rank));
  // Index i of the padded order is order[i % n]: torch's padding, which repeats the order from
  // its start as often as needed (several times when n < num_replicas).
  for (int64_t k = 0; k < per_rank; ++k) {
    out.push_back(order[static_cast<size_t>((rank + k * num_replicas) % n)]);
  }
  return out;
}

int64_t DataLoader::num_batches() const {
  const int64_t n =
      config_.sampler ? config_.sampler->shard_size(dataset_->size()) : dataset_->size();
  return config_.drop_last ? n / config_.batch_size
                           : (n + config_.batch_size - 1) / config_.batch_size;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_->size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (config_.shuffle) {
    // Fisher-Yates driven by splitmix64 of (seed, epoch): the same permutation on every
    // platform (std::shuffle's algorithm is implementation-defined).
    uint64_t state = config_.seed;
    SplitMix64(state);
    state ^= static_cast<uint64_t>(epoch) * 0xd1b54a32d192ed03ULL;
    for (size_t i = order.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(SplitMix64(state) % i);
      std::swap(order[i - 1], order[j]);
    }
  }
  if (config_.sampler) return config_.sampler->shard(order);
  return order;
}

Batch DataLoader::BuildBatch(const Dataset& dataset, int64_t batch_size,
                             const std::vector<int64_t>& order, int64_t batch) {
  const int64_t begin = batch * batch_size;
  const int64_t end = std::min<int64_t>(begin + batch_size, static_cast<int64_t>(order.size()));
  const int64_t rows = end - begin;
  const ExampleSpec& spec = dataset.spec();
  ir::Shape input_shape{rows};
  input_shape.insert(input_shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  ir::Shape target_shape{rows};
  target_shape.insert(target_shape.end(), spec.target_shape.begin(), spec.target_shape.end());
  Batch out{ir::TensorData::Uninitialized(spec.input_dtype, std::move(input_shape)),
            ir::TensorData::Uninitialized(spec.target_dtype, std::move(target_shape))};
  const int64_t in_bytes = spec.input_bytes();
  const int64_t tgt_bytes = spec.target_bytes();
  for (int64_t r = 0; r < rows; ++r) {
    dataset.copy_example(order[static_cast<size_t>(begin + r)], out.inputs.data() + r * in_bytes,
                         out.targets.data() + r * tgt_bytes);
  }
  return out;
}

void DataLoader::Stop() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  for (std::thread& t : state_->threads) t.join();
  state_.reset();
}

void DataLoader::start_epoch(int64_t epoch) {
  Stop();
  state_ = std::make_unique<State>();
  State& s = *state_;
  s.order = order(epoch);
  s.num_batches = num_batches();
  s.prefetch = config_.prefetch;
  for (int w = 0; w < config_.workers; ++w) {
    // Workers capture the dataset and the state, never `this` (a DataLoader can be moved).
    s.threads.emplace_back([dataset = dataset_, batch_size = config_.batch_size, &s] {
      while (true) {
        int64_t batch;
        {
          std::unique_lock<std::mutex> lock(s.mutex);
          s.work_cv.wait(lock, [&] {
            return s.stop || s.next_claim >= s.num_batches ||
                   s.next_claim < s.next_yield + s.prefetch;
          });
          if (s.stop || s.next_claim >= s.num_batches) return;
          batch = s.next_claim++;
        }
        std::optional<Batch> built;
        std::exception_ptr error;
        try {
          built = BuildBatch(*dataset, batch_size, s.order, batch);
        } catch (...) {
          error = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(s.mutex);
          if (error) {
            s.failed.emplace(batch, error);
          } else {
            s.ready.emplace(batch, std::move(*built));
          }
        }
        s.ready_cv.notify_all();
      }
    });
  }
}

std::optional<Batch> DataLoader::next() {
  if (!state_) return std::nullopt;
  State& s = *state_;
  if (s.next_yield >= s.num_batches) return std::nullopt;
  const int64_t batch = s.next_yield;
  if (s.threads.empty()) {
    s.next_yield++;
    try {
      return BuildBatch(*dataset_, config_.batch_size, s.order, batch);
    } catch (...) {
      s.next_yield = s.num_batches;  // the epoch ends with the error
      throw;
    }
  }
  std::exception_ptr error;
  std::optional<Batch> out;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    // Workers claim batches in order and record every one (built or failed), so the batch
    // the consumer waits for is always recorded eventually.
    s.ready_cv.wait(lock, [&] { return s.ready.count(batch) > 0 || s.failed.count(batch) > 0; });
    if (auto it = s.ready.find(batch); it != s.ready.end()) {
      out = std::move(it->second);
      s.ready.erase(it);
      s.next_yield++;
    } else {
      error = s.failed.at(batch);
    }
  }
  if (error) {
    Stop();  // the epoch ends with the error
    std::rethrow_exception(error);
  }
  s.work_cv.notify_all();
  return out;
}

}  // namespace kiln::data
