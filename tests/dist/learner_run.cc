// The program tests/dist/learner_fault_test.sh and netns_test.sh launch: the Learner in
// data-parallel mode on tests/dist/synthetic.h's MLP, with hooks that make one rank die, and
// checks of what the runs leave on disk.
//
//   learner_run train --dir D [--epochs 3] [--global-batch 96] [--examples 384]
//                     [--kill-rank R --kill-step K] [--throw-rank R --throw-step K]
//       Trains (resuming D/last.safetensors when present) with global batch G split over the
//       ranks (G / world size each). In training step K (1-based, counting every step of the
//       run, resumed ones included), rank R raises SIGKILL on itself (--kill-*) or throws from its
//       step function (--throw-*). Prints "rank R of N on HOST" (stderr), "resumed at epoch E
//       step S on N ranks" and "done: epoch E step S on N ranks" (rank 0, stdout).
//   learner_run check FILE --epoch E
//       Loads FILE as the MLP's checkpoint (the whole file is parsed and checked); fails unless
//       it holds epoch E.
//   learner_run compare A B --tol T
//       Fails unless checkpoints A and B hold the same epoch and parameters within T (max abs),
//       and A's parameters moved from the initial ones by more than 1e-2 (it trained).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "frontend/dist/ddp.h"
#include "frontend/dist/process_group.h"
#include "kiln/kiln.h"
#include "tests/dist/synthetic.h"

namespace {

using B = kiln::Reference;
using kiln::dist::test_util::MakeMlp;
using kiln::dist::test_util::Mlp;

constexpr uint64_t kInitSeed = 100;

[[noreturn]] void Usage(const std::string& problem) {
  std::cerr << "learner_run: " << problem
            << "\nusage: learner_run train --dir D [--epochs N] [--global-batch N] [--examples N]"
               " [--kill-rank R --kill-step K] [--throw-rank R --throw-step K]\n"
               "       learner_run check FILE --epoch E\n"
               "       learner_run compare A B --tol T\n";
  std::exit(2);
}

void Say(const std::string& line) {
  const std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

std::map<std::string, std::string> Flags(int argc, char** argv, int first) {
  std::map<std::string, std::string> flags;
  for (int i = first; i < argc; i += 2) {
    const std::string name = argv[i];
    if (!name.starts_with("--") || i + 1 >= argc) Usage("bad argument " + name);
    flags[name.substr(2)] = argv[i + 1];
  }
  return flags;
}

int64_t Int(const std::map<std::string, std::string>& flags, const std::string& name,
            int64_t fallback) {
  const auto it = flags.find(name);
  return it == flags.end() ? fallback : std::stoll(it->second);
}

int Train(int argc, char** argv) {
  auto& pg = kiln::dist::ProcessGroup::Init(&argc, &argv);
  const auto flags = Flags(argc, argv, 2);
  if (!flags.count("dir")) Usage("train needs --dir");
  const int64_t epochs = Int(flags, "epochs", 3);
  const int64_t global_batch = Int(flags, "global-batch", 96);
  const int64_t examples = Int(flags, "examples", 384);
  const int64_t kill_rank = Int(flags, "kill-rank", -1), kill_step = Int(flags, "kill-step", -1);
  const int64_t throw_rank = Int(flags, "throw-rank", -1),
                throw_step = Int(flags, "throw-step", -1);
  if (global_batch % pg.world_size() != 0) {
    Usage("--global-batch " + std::to_string(global_batch) + " is not a multiple of the " +
          std::to_string(pg.world_size()) + " ranks");
  }
  // Whole lines in one write each: mpirun interleaves the ranks' stderr at write() granularity.
  Say("rank " + std::to_string(pg.rank()) + " of " + std::to_string(pg.world_size()) + " on " +
      pg.host());
  // A different initialisation on every rank: the Learner starts them all from rank 0's.
  Mlp<B> model = MakeMlp<B>(kInitSeed + static_cast<uint64_t>(pg.rank()));
  auto opt = kiln::optim::SgdConfig().with_lr(0.1).with_momentum(0.9).init();
  const kiln::data::DistributedSampler shard(pg.world_size(), pg.rank());
  auto train = kiln::data::DataLoaderConfig(global_batch / pg.world_size())
                   .with_shuffle(3)
                   .with_sampler(shard)
                   .init(kiln::dist::test_util::Synthetic(examples));
  auto valid = kiln::data::DataLoaderConfig(32).with_sampler(shard).init(
      kiln::dist::test_util::Synthetic(24 * pg.world_size(), 999));
  // The step function cannot tell training from validation, but validation runs with the step
  // counter at an epoch's last step, so "counter == K - 1" is inside training step K whenever
  // K - 1 is not a multiple of the steps per epoch (the scripts pick such a K).
  std::function<int64_t()> steps_done;
  auto step = [&](Mlp<B>& m, const kiln::data::Batch& batch) {
    const int64_t step = steps_done() + 1;
    if (pg.rank() == kill_rank && step == kill_step) {
      Say("rank " + std::to_string(pg.rank()) + ": SIGKILL in step " + std::to_string(step));
      std::raise(SIGKILL);
    }
    if (pg.rank() == throw_rank && step == throw_step) {
      throw kiln::Error("learner_run: rank " + std::to_string(pg.rank()) + " throws in step " +
                        std::to_string(step));
    }
    return kiln::dist::test_util::MlpStep<B>(m, batch);
  };
  kiln::train::Learner learner(model, opt, step,
                               kiln::train::LearnerConfig()
                                   .with_epochs(epochs)
                                   .with_checkpoint_dir(flags.at("dir"))
                                   .with_progress(false)
                                   .with_data_parallel(kiln::dist::data_parallel(pg)));
  steps_done = [&learner] { return learner.step(); };
  if (learner.resume() && pg.rank() == 0) {
    std::cout << "resumed at epoch " << learner.epoch() << " step " << learner.step() << " on "
              << pg.world_size() << " ranks" << std::endl;
  }
  learner.fit(train, valid);
  if (pg.rank() == 0) {
    std::cout << "done: epoch " << learner.epoch() << " step " << learner.step() << " on "
              << pg.world_size() << " ranks" << std::endl;
  }
  return 0;
}

std::vector<std::vector<float>> Load(const std::string& file, int64_t* epoch) {
  Mlp<B> model = MakeMlp<B>(1);
  const kiln::train::Checkpoint ckpt = kiln::train::load_checkpoint(file, model);
  *epoch = ckpt.epoch.value_or(-1);
  std::vector<std::vector<float>> out;
  model.visit([&](const std::string&, const auto& p) { out.push_back(p.to_vector()); });
  return out;
}

double MaxDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double diff = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    for (size_t i = 0; i < a[t].size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[t][i] - b[t][i])));
    }
  }
  return diff;
}

int Check(int argc, char** argv) {
  if (argc < 3) Usage("check needs a file");
  const auto flags = Flags(argc, argv, 3);
  int64_t epoch = 0;
  Load(argv[2], &epoch);
  const int64_t want = Int(flags, "epoch", -1);
  std::cout << argv[2] << ": a complete checkpoint of epoch " << epoch << std::endl;
  if (epoch != want) {
    std::cerr << argv[2] << " holds epoch " << epoch << ", expected " << want << std::endl;
    return 1;
  }
  return 0;
}

int Compare(int argc, char** argv) {
  if (argc < 4) Usage("compare needs two files");
  const auto flags = Flags(argc, argv, 4);
  if (!flags.count("tol")) Usage("compare needs --tol");
  const double tol = std::stod(flags.at("tol"));
  int64_t epoch_a = 0, epoch_b = 0;
  const auto a = Load(argv[2], &epoch_a);
  const auto b = Load(argv[3], &epoch_b);
  std::vector<std::vector<float>> initial;
  MakeMlp<B>(kInitSeed).visit(
      [&](const std::string&, const auto& p) { initial.push_back(p.to_vector()); });
  const double diff = MaxDiff(a, b), moved = MaxDiff(a, initial);
  std::cout << argv[2] << " (epoch " << epoch_a << ") vs " << argv[3] << " (epoch " << epoch_b
            << "): max |difference| " << diff << " (tolerance " << tol
            << "); moved from the initial weights by " << moved << std::endl;
  if (epoch_a != epoch_b || !(diff <= tol) || !(moved > 1e-2)) {
    std::cerr << "compare: FAILED" << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage("no command");
  const std::string command = argv[1];
  try {
    if (command == "train") return Train(argc, argv);
    if (command == "check") return Check(argc, argv);
    if (command == "compare") return Compare(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "learner_run " << command << ": error: " << e.what() << std::endl;
    return 1;
  }
  Usage("unknown command " + command);
}
