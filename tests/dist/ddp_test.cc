// Data-parallel training (frontend/dist/ddp.h) and the DistributedSampler (frontend/data), on
// 1, 2 and 3 ranks (see collectives_test.cc).
#include "frontend/dist/ddp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "frontend/dist/process_group.h"
#include "frontend/error.h"
#include "kiln/kiln.h"
#include "tests/dist/synthetic.h"

namespace kiln::dist {
namespace {

using data::DataLoaderConfig;
using data::DistributedSampler;

const ProcessGroup& Pg() { return ProcessGroup::World(); }

// ---- DistributedSampler (no MPI: every rank checks every rank's shard) ------------------------

// torch.utils.data.DistributedSampler.__iter__, written as in torch: pad the order by repeating
// it (indices += (indices * ceil(padding / n))[:padding]) or cut it, then take
// indices[rank:total:num_replicas].
std::vector<int64_t> TorchShard(std::vector<int64_t> indices, int64_t replicas, int64_t rank,
                                bool drop_last) {
  const auto n = static_cast<int64_t>(indices.size());
  const int64_t num_samples = drop_last ? n / replicas : (n + replicas - 1) / replicas;
  const int64_t total = num_samples * replicas;
  if (!drop_last) {
    const int64_t padding = total - n;
    std::vector<int64_t> repeated;
    const int64_t copies = (padding + n - 1) / n;
    for (int64_t c = 0; c < copies; ++c)
      repeated.insert(repeated.end(), indices.begin(), indices.end());
    indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding);
  } else {
    indices.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> out;
  for (int64_t i = rank; i < total; i += replicas) out.push_back(indices[static_cast<size_t>(i)]);
  return out;
}

data::DatasetPtr Rows(int64_t n) {
  ir::TensorData inputs(ir::DType::kF32, {n, 2});
  ir::TensorData targets(ir::DType::kI64, {n});
  for (int64_t i = 0; i < n; ++i) {
    inputs.SetDouble(2 * i, static_cast<double>(i));
    inputs.SetDouble(2 * i + 1, -static_cast<double>(i));
    targets.SetInt64(i, i);
  }
  return std::make_shared<data::InMemoryDataset>(std::move(inputs), std::move(targets));
}

TEST(DistributedSampler, ShardsLikeTorchPaddedOrCut) {
  for (int64_t n : {1, 2, 7, 10, 12, 1001}) {
    for (int64_t replicas : {1, 2, 3, 5}) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < replicas) continue;  // torch would give empty shards
        for (uint64_t seed : {0, 9}) {
          SCOPED_TRACE("n " + std::to_string(n) + ", replicas " + std::to_string(replicas) +
                       (drop_last ? ", drop_last" : "") + ", seed " + std::to_string(seed));
          auto whole = DataLoaderConfig(4).with_shuffle(seed).init(Rows(n));
          std::multiset<int64_t> seen;
          for (int64_t rank = 0; rank < replicas; ++rank) {
            const auto sampler = DistributedSampler(replicas, rank).with_drop_last(drop_last);
            auto loader =
                DataLoaderConfig(4).with_shuffle(seed).with_sampler(sampler).init(Rows(n));
            for (int64_t epoch : {0, 3}) {
              const std::vector<int64_t> shard = loader.order(epoch);
              EXPECT_EQ(shard, TorchShard(whole.order(epoch), replicas, rank, drop_last));
              EXPECT_EQ(static_cast<int64_t>(shard.size()), sampler.shard_size(n));
              if (epoch == 0) seen.insert(shard.begin(), shard.end());
            }
            // The batches hold exactly the shard's examples, in order.
            EXPECT_EQ(loader.num_batches(), (sampler.shard_size(n) + 3) / 4);
            std::vector<int64_t> labels;
            for (data::Batch& b : loader.epoch(3)) {
              const auto t = b.targets.ToInt64s();
              labels.insert(labels.end(), t.begin(), t.end());
            }
            EXPECT_EQ(labels, loader.order(3));
          }
          // Together the shards cover the dataset (each example once, plus the padding).
          for (int64_t i = 0; i < n && !drop_last; ++i) EXPECT_GE(seen.count(i), 1u) << i;
          EXPECT_EQ(
              static_cast<int64_t>(seen.size()),
              replicas * DistributedSampler(replicas, 0).with_drop_last(drop_last).shard_size(n));
        }
      }
    }
  }
}

TEST(DistributedSampler, BadRankIsAnError) {
  try {
    DataLoaderConfig(4).with_sampler(DistributedSampler(2, 2)).init(Rows(3));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DistributedSampler: rank 2 is not in [0, 2)"),
              std::string::npos)
        << e.what();
  }
}

// ---- Parity: R ranks x batch b == 1 process x batch R*b ---------------------------------------

using test_util::Mlp;
using test_util::Synthetic;

template <class B, class Loader>
void Train(Mlp<B>& model, Loader& loader, bool ddp, GradientSyncStats* stats) {
  typename B::Device device;
  auto opt = optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
  int64_t steps = 0;
  for (data::Batch& batch : loader.epoch(1)) {
    auto x = std::move(batch).template inputs_as<B, 2>(device);
    auto y = std::move(batch).template targets_as<B, 1>(device);
    auto loss = nn::cross_entropy(model.forward(x), y);
    {
      Gradients grads = loss.backward();
      if (ddp) {
        // 1 KiB buckets: fc1.weight (32x8 f32, 1024 bytes) alone, then fc1.bias, fc2.weight and
        // fc2.bias (128 + 512 + 16 bytes) together.
        *stats = all_reduce_gradients(Pg(), model, grads,
                                      DdpConfig().with_bucket_cap_mb(1.0 / 1024), loss);
      }
      opt.step(model, grads);
    }
    loss = loss.detach();
    optim::realize_step(model, opt, loss);
    ++steps;
  }
  EXPECT_EQ(steps, 10);
}

template <class B>
void CheckParity() {
  typename B::Device device;
  const int ws = Pg().world_size();
  const int64_t batch = 64;
  const int64_t steps = 10;
  auto dataset = Synthetic(batch * ws * steps);
  // Different initial weights on every rank: broadcast_parameters must make them rank 0's.
  manual_seed(100 + static_cast<uint64_t>(Pg().rank()));
  Mlp<B> model{nn::LinearConfig(8, 32).init<B>(device), nn::LinearConfig(32, 4).init<B>(device)};
  broadcast_parameters(Pg(), model);
  model.visit([](const std::string& name, const auto& p) {
    EXPECT_TRUE(p.requires_grad()) << name;
    const auto all = Pg().all_gather(p).into_data();
    const int64_t row = p.num_elements() * ir::DTypeSize(p.dtype());
    for (int r = 1; r < Pg().world_size(); ++r) {
      EXPECT_EQ(std::memcmp(all.data(), all.data() + r * row, static_cast<size_t>(row)), 0)
          << name << " differs on rank " << r;
    }
  });
  Mlp<B> reference = model.clone();

  // The same seed everywhere: one permutation per epoch, sharded.
  auto shard = DataLoaderConfig(batch)
                   .with_shuffle(7)
                   .with_sampler(DistributedSampler(ws, Pg().rank()))
                   .init(dataset);
  GradientSyncStats stats;
  Train(model, shard, /*ddp=*/true, &stats);
  EXPECT_EQ(stats.buckets, 2);
  EXPECT_EQ(stats.tensors, 4);
  EXPECT_EQ(stats.bytes, (32 * 8 + 32 + 4 * 32 + 4) * 4);

  auto whole = DataLoaderConfig(batch * ws).with_shuffle(7).init(dataset);
  Train(reference, whole, /*ddp=*/false, nullptr);

  // f32 tolerance: the global mean gradient is a mean of ws per-rank means, each summed in its own
  // order, where one process sums the batch in one pass; each step's gradient differs by a few
  // f32 roundings (relative 1e-7), which 10 steps of SGD with momentum 0.9 and lr 0.1 carry into
  // the weights (|w| < 1) at well under 1e-5.
  std::vector<std::vector<float>> trained, expected;
  model.visit([&](const std::string&, const auto& p) { trained.push_back(p.to_vector()); });
  reference.visit([&](const std::string&, const auto& p) { expected.push_back(p.to_vector()); });
  ASSERT_EQ(trained.size(), expected.size());
  double max_diff = 0, max_change = 0;
  for (size_t t = 0; t < trained.size(); ++t) {
    for (size_t i = 0; i < trained[t].size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(trained[t][i] - expected[t][i])));
    }
  }
  EXPECT_LE(max_diff, 1e-5) << "world size " << ws;
  // The run trained (so the comparison is not of two untouched models).
  manual_seed(100);
  Mlp<B> rank0_init{nn::LinearConfig(8, 32).init<B>(device),
                    nn::LinearConfig(32, 4).init<B>(device)};
  const std::vector<float> w0 = rank0_init.fc1.weight.to_vector();
  for (size_t i = 0; i < w0.size(); ++i) {
    max_change = std::max(max_change, static_cast<double>(std::abs(trained[0][i] - w0[i])));
  }
  EXPECT_GT(max_change, 1e-2);
  // Every rank ends with the same weights (bit for bit: the same reduced gradients).
  for (const std::vector<float>& w : trained) {
    auto t = Tensor<B, 1>::from_vector(w, {static_cast<int64_t>(w.size())}, device);
    auto all = Pg().all_gather(t).into_data();
    const auto row = static_cast<size_t>(w.size() * sizeof(float));
    for (int r = 1; r < ws; ++r) EXPECT_EQ(std::memcmp(all.data(), all.data() + r * row, row), 0);
  }
}

TEST(DistDdp, RanksOfBatch64MatchOneProcessOfTheWholeBatchOnReference) { CheckParity<Reference>(); }

TEST(DistDdp, BadBucketCapIsAnError) {
  Reference::Device device;
  manual_seed(1);
  Mlp<Reference> model{nn::LinearConfig(2, 2).init<Reference>(device),
                       nn::LinearConfig(2, 2).init<Reference>(device)};
  Gradients grads;
  try {
    all_reduce_gradients(Pg(), model, grads, DdpConfig().with_bucket_cap_mb(0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bucket_cap_mb 0 must be > 0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::dist
