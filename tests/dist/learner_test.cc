// The Learner's data-parallel mode (LearnerConfig::with_data_parallel, frontend/train/learner.h)
// on 1, 2 and 3 ranks (see collectives_test.cc): R ranks x batch 64 against one process x batch
// 64R through the same Learner, the metrics every rank sees against that process's, files
// written by rank 0 alone, resume from rank 0's checkpoint, and the errors every rank must share
// (the loader check, a failed write on rank 0, a NaN on one rank).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/dist/ddp.h"
#include "frontend/dist/process_group.h"
#include "frontend/error.h"
#include "frontend/train/safetensors.h"
#include "kiln/kiln.h"
#include "tests/dist/synthetic.h"

namespace kiln::dist {
namespace {

namespace fs = std::filesystem;
using B = Reference;
using data::DataLoaderConfig;
using data::DistributedSampler;
using test_util::Mlp;
using test_util::MlpStep;

const ProcessGroup& Pg() { return ProcessGroup::World(); }

constexpr int64_t kBatch = 64;  // per rank
constexpr int64_t kStepsPerEpoch = 5;
constexpr int64_t kEpochs = 2;
constexpr uint64_t kShuffleSeed = 7;

// One directory for the whole job (rank 0's pid in its name), with a subdirectory per rank that
// only that rank's Learner is told about.
std::string JobDir(const std::string& test) {
  ir::TensorData pid = ir::TensorData::Uninitialized(ir::DType::kI64, {1});
  const int64_t mine = ::getpid();
  std::memcpy(pid.data(), &mine, sizeof(mine));
  Pg().broadcast_data(pid, 0);
  int64_t root_pid = 0;
  std::memcpy(&root_pid, pid.data(), sizeof(root_pid));
  return (fs::path(::testing::TempDir()) / ("kiln_dist_" + test + "_" + std::to_string(root_pid) +
                                            "_np" + std::to_string(Pg().world_size())))
      .string();
}

std::string RankDir(const std::string& job, int rank) {
  return job + "/rank" + std::to_string(rank);
}

train::LearnerConfig Quiet() {
  return train::LearnerConfig().with_epochs(kEpochs).with_progress(false).with_summary(nullptr);
}

data::DataLoader ShardedLoader(data::DatasetPtr ds, int64_t batch) {
  return DataLoaderConfig(batch)
      .with_shuffle(kShuffleSeed)
      .with_sampler(DistributedSampler(Pg().world_size(), Pg().rank()))
      .init(std::move(ds));
}

std::vector<std::vector<float>> Params(const Mlp<B>& model) {
  std::vector<std::vector<float>> out;
  model.visit([&](const std::string&, const auto& p) { out.push_back(p.to_vector()); });
  return out;
}

double MaxDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t t = 0; t < std::min(a.size(), b.size()); ++t) {
    EXPECT_EQ(a[t].size(), b[t].size());
    for (size_t i = 0; i < std::min(a[t].size(), b[t].size()); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[t][i] - b[t][i])));
    }
  }
  return diff;
}

// Every rank holds the same values, bit for bit.
void ExpectSameOnEveryRank(const std::vector<double>& values, const std::string& what) {
  ir::TensorData data =
      ir::TensorData::Uninitialized(ir::DType::kF64, {static_cast<int64_t>(values.size())});
  std::memcpy(data.data(), values.data(), values.size() * sizeof(double));
  const ir::TensorData all = Pg().all_gather_data(data);
  const size_t row = values.size() * sizeof(double);
  for (int r = 1; r < Pg().world_size(); ++r) {
    EXPECT_EQ(std::memcmp(all.data(), all.data() + r * row, row), 0) << what << ": rank " << r;
  }
}

std::vector<double> Values(const std::vector<train::MetricRecord>& records) {
  std::vector<double> out;
  for (const auto& r : records) out.push_back(r.value);
  return out;
}

TEST(DistLearner, RanksOfBatch64MatchOneProcessOfTheWholeBatch) {
  const int ws = Pg().world_size();
  const int rank = Pg().rank();
  const std::string job = JobDir("parity");
  auto train_set = test_util::Synthetic(kBatch * ws * kStepsPerEpoch);
  // Divisible by the world size, so the sharded valid loader pads nothing and the reduced
  // metrics count each example once, as the single process does.
  auto valid_set = test_util::Synthetic(30 * ws, 999);

  // Different initial weights on every rank: fit() must start them all from rank 0's.
  Mlp<B> model = test_util::MakeMlp<B>(100 + static_cast<uint64_t>(rank));
  auto opt = optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
  auto train_loader = ShardedLoader(train_set, kBatch);
  auto valid_loader = ShardedLoader(valid_set, 16);
  train::Learner learner(
      model, opt, MlpStep<B>,
      Quiet().with_checkpoint_dir(RankDir(job, rank)).with_data_parallel(data_parallel(Pg())));
  learner.fit(train_loader, valid_loader);

  // The reference, on every rank: one process, rank 0's initial weights, batch 64 x world size
  // over the same shuffle.
  Mlp<B> reference = test_util::MakeMlp<B>(100);
  const auto initial = Params(reference);
  auto ref_opt = optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
  auto ref_train = DataLoaderConfig(kBatch * ws).with_shuffle(kShuffleSeed).init(train_set);
  auto ref_valid = DataLoaderConfig(16 * ws).with_shuffle(kShuffleSeed).init(valid_set);
  train::Learner ref_learner(reference, ref_opt, MlpStep<B>, Quiet());
  ref_learner.fit(ref_train, ref_valid);

  EXPECT_EQ(learner.step(), kEpochs * kStepsPerEpoch);
  EXPECT_EQ(ref_learner.step(), kEpochs * kStepsPerEpoch);
  // f32 tolerance 1e-5: each step's mean gradient is a mean of per-rank means, each summed in its
  // own order, where the single process sums the whole batch in one pass, so the gradients differ
  // by a few f32 roundings (relative ~1e-7); 10 SGD steps (lr 0.1, momentum 0.9) carry that into
  // the weights (|w| < 1) at ~1e-6. Larger differences mean a different batch, shard or average.
  const auto trained = Params(model);
  const double diff = MaxDiff(trained, Params(reference));
  if (rank == 0) std::cout << "world size " << ws << ": max |w - w_ref| " << diff << "\n";
  EXPECT_LE(diff, 1e-5) << "world size " << ws;
  EXPECT_GT(MaxDiff(trained, initial), 1e-2) << "the run did not train";
  std::vector<double> flat;
  for (const auto& t : trained) flat.insert(flat.end(), t.begin(), t.end());
  ExpectSameOnEveryRank(flat, "parameters");

  // Metrics: the reduced figures on every rank equal the single process's.
  const auto& records = learner.records();
  const auto& expected = ref_learner.records();
  ASSERT_EQ(records.size(), expected.size());
  ASSERT_EQ(records.size(), static_cast<size_t>(kEpochs * 4));  // train/valid x loss/accuracy
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(expected[i].split + " " + expected[i].metric + " epoch " +
                 std::to_string(expected[i].epoch));
    EXPECT_EQ(records[i].epoch, expected[i].epoch);
    EXPECT_EQ(records[i].step, expected[i].step);
    EXPECT_EQ(records[i].split, expected[i].split);
    EXPECT_EQ(records[i].metric, expected[i].metric);
    if (records[i].metric == "loss") {
      // The same examples' losses under weights within 1e-5: relative 1e-5.
      EXPECT_NEAR(records[i].value, expected[i].value, 1e-5 * std::abs(expected[i].value));
    } else {
      // Counts of correct argmaxes: equal unless a logit pair within ~1e-6 flips; allow one.
      const double examples =
          static_cast<double>(records[i].split == "train" ? train_set->size() : valid_set->size());
      EXPECT_LE(std::abs(records[i].value - expected[i].value), 1.0 / examples + 1e-12);
    }
  }
  ExpectSameOnEveryRank(Values(records), "metrics");

  // Files: rank 0's directory only, with the global figures and the trained weights.
  Pg().barrier();
  for (int r = 0; r < ws; ++r) {
    const std::string dir = RankDir(job, r);
    if (r == 0) {
      for (const char* file :
           {"last.safetensors", "best.safetensors", "metrics.csv", "metrics.svg"})
        EXPECT_TRUE(fs::exists(dir + "/" + file)) << dir << "/" << file;
    } else {
      EXPECT_FALSE(fs::exists(dir)) << "rank " << r << " wrote " << dir;
    }
  }
  std::ifstream csv(RankDir(job, 0) + "/metrics.csv");
  std::stringstream text;
  text << csv.rdbuf();
  auto parsed = train::ParseMetricsCsv(text.str());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(Values(*parsed), Values(records));
  Mlp<B> loaded = test_util::MakeMlp<B>(5);
  const train::Checkpoint ckpt =
      train::load_checkpoint(RankDir(job, 0) + "/last.safetensors", loaded);
  EXPECT_EQ(ckpt.epoch, kEpochs);
  EXPECT_EQ(ckpt.step, kEpochs * kStepsPerEpoch);
  EXPECT_EQ(MaxDiff(Params(loaded), trained), 0.0);
  Pg().barrier();
  if (rank == 0) fs::remove_all(job);
}

// Resume: only rank 0's directory has the checkpoint; the other ranks get it from rank 0, and the
// resumed run ends bit-identical to an uninterrupted one.
TEST(DistLearner, ResumesFromRankZerosCheckpoint) {
  const int ws = Pg().world_size();
  const int rank = Pg().rank();
  const std::string job = JobDir("resume");
  auto train_set = test_util::Synthetic(kBatch * ws * kStepsPerEpoch);
  auto valid_set = test_util::Synthetic(30 * ws, 999);
  const auto run = [&](int64_t epochs, bool resume, const std::string& dir) {
    Mlp<B> model = test_util::MakeMlp<B>(100 + static_cast<uint64_t>(rank) + (resume ? 50 : 0));
    auto opt = optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
    auto train_loader = ShardedLoader(train_set, kBatch);
    auto valid_loader = ShardedLoader(valid_set, 16);
    train::Learner learner(
        model, opt, MlpStep<B>,
        Quiet().with_checkpoint_dir(dir).with_data_parallel(data_parallel(Pg())));
    EXPECT_EQ(learner.resume(), resume);
    if (resume) {
      EXPECT_EQ(learner.epoch(), 1);
      EXPECT_EQ(learner.step(), kStepsPerEpoch);
      EXPECT_EQ(learner.records().size(), 4u);  // epoch 1's, from rank 0's metrics.csv
    }
    learner.fit(train_loader, valid_loader, epochs);
    std::vector<double> out = Values(learner.records());
    for (const auto& t : Params(model)) out.insert(out.end(), t.begin(), t.end());
    return out;
  };
  const std::vector<double> whole = run(2, false, RankDir(job + "/whole", rank));
  run(1, false, RankDir(job + "/split", rank));
  const std::vector<double> resumed = run(2, true, RankDir(job + "/split", rank));
  EXPECT_EQ(resumed, whole);
  ExpectSameOnEveryRank(resumed, "resumed run");
  Pg().barrier();
  if (rank == 0) fs::remove_all(job);
}

TEST(DistLearner, TrainLoaderWithoutThisRanksShardIsAnErrorOnEveryRank) {
  const int ws = Pg().world_size();
  Mlp<B> model = test_util::MakeMlp<B>(1);
  auto opt = optim::SgdConfig().with_lr(0.1).init();
  auto ds = test_util::Synthetic(64 * ws);
  train::Learner learner(model, opt, MlpStep<B>, Quiet().with_data_parallel(data_parallel(Pg())));
  // Rank 0 is given every rank's loader but its own; the others have none.
  auto loader = Pg().rank() == 0 && ws > 1
                    ? DataLoaderConfig(64).with_sampler(DistributedSampler(ws, ws - 1)).init(ds)
                    : DataLoaderConfig(64).init(ds);
  auto valid = DataLoaderConfig(64).init(ds);
  if (ws == 1) {
    learner.fit(loader, valid, 1);  // one rank reads everything: its shard
    EXPECT_EQ(learner.step(), 1);
    return;
  }
  try {
    learner.fit(loader, valid, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    // Every rank names the first rank's problem (rank 0's wrong sampler).
    EXPECT_NE(what.find("the train loader's DistributedSampler(" + std::to_string(ws) + ", " +
                        std::to_string(ws - 1) + ") is not this rank's"),
              std::string::npos)
        << what;
    if (Pg().rank() != 0) {
      EXPECT_NE(what.find("rank 0 failed: "), std::string::npos) << what;
    }
  }
  EXPECT_EQ(learner.step(), 0);
}

// A failed write on rank 0 (the checkpoint's rename, injected) fails every rank at the same point
// with rank 0's message, instead of the others training on without it.
TEST(DistLearner, FailedWriteOnRankZeroFailsEveryRank) {
  const int ws = Pg().world_size();
  const int rank = Pg().rank();
  const std::string job = JobDir("write");
  auto train_set = test_util::Synthetic(kBatch * ws * 2);
  Mlp<B> model = test_util::MakeMlp<B>(1);
  auto opt = optim::SgdConfig().with_lr(0.1).init();
  auto train_loader = ShardedLoader(train_set, kBatch);
  auto valid_loader = ShardedLoader(train_set, kBatch);
  train::Learner learner(
      model, opt, MlpStep<B>,
      Quiet().with_checkpoint_dir(RankDir(job, rank)).with_data_parallel(data_parallel(Pg())));
  if (rank == 0) {
    train::SetAtomicWriteFailureHookForTesting([](std::string_view step) {
      return step == "rename" ? absl::UnavailableError("injected rename failure")
                              : absl::OkStatus();
    });
  }
  try {
    learner.fit(train_loader, valid_loader);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("injected rename failure"), std::string::npos) << what;
    if (rank != 0) {
      EXPECT_NE(what.find("rank 0 failed: "), std::string::npos) << what;
    }
  }
  train::SetAtomicWriteFailureHookForTesting(nullptr);
  EXPECT_EQ(learner.epoch(), 1);  // the epoch ran; its checkpoint did not land
  Pg().barrier();
  EXPECT_FALSE(fs::exists(RankDir(job, 0) + "/last.safetensors"));
  Pg().barrier();
  if (rank == 0) fs::remove_all(job);
}

// A NaN loss on one rank stops every rank at the same step: the guard reads the ranks' mean.
TEST(DistLearner, NanOnOneRankStopsEveryRankAtTheSameStep) {
  const int ws = Pg().world_size();
  const int rank = Pg().rank();
  const int bad_rank = ws - 1;
  auto train_set = test_util::Synthetic(kBatch * ws * 4);
  Mlp<B> model = test_util::MakeMlp<B>(1);
  auto opt = optim::SgdConfig().with_lr(0.1).init();
  auto train_loader = ShardedLoader(train_set, kBatch);
  auto valid_loader = ShardedLoader(train_set, kBatch);
  int64_t calls = 0;
  auto step = [&](Mlp<B>& m, const data::Batch& batch) {
    train::StepOutput<B> out = MlpStep<B>(m, batch);
    if (++calls == 3 && rank == bad_rank) out.loss = out.loss.mul(std::nan(""));
    return out;
  };
  train::Learner learner(model, opt, step, Quiet().with_data_parallel(data_parallel(Pg())));
  try {
    learner.fit(train_loader, valid_loader);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the loss is NaN at step 3 (epoch 1)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(learner.step(), 3);
}

}  // namespace
}  // namespace kiln::dist
