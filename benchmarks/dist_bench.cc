// dist_bench: kiln::dist's figures (issue #16), one JSON document on rank 0's stdout:
//
//   all_reduce   f32 sum of 4 KiB ... --max-bytes (powers of 4) through ProcessGroup::all_reduce
//                on a kiln::Cpu tensor (the kiln path: into_data's host copy, the call-check
//                header, MPI_Allreduce in place, from_tensor_data) and a plain MPI_Allreduce loop
//                on a raw buffer of the same size (Open MPI's own figure), interleaved per size.
//                Per call: the mean over a loop, the slowest rank's, best of 3 loops (the
//                machine is shared: other work only adds time).
//   train        the Fashion-MNIST MLP 784-512-256-10 step (global batch 128) and the CNN step
//                (global batch 64) of benchmarks/frontend_workloads.h, each rank taking
//                global / world_size examples: forward + backward realized, then
//                kiln::dist::all_reduce_gradients, then the SGD update, each phase timed. On one
//                process the plain single-graph step (FrontendTrainStep, as the Learner runs it
//                without data parallelism) is timed too: the reference of the scaling efficiency.
//
//   dist_bench [--part all_reduce|train|all] [--min-time SECONDS] [--max-bytes N]
//   mpirun -np 2 dist_bench ...          (benchmarks/peers/dist_peers.py runs both configurations)
//
// The thread count is the runtime's (KILN_NUM_THREADS); the JSON records it.

// MPI's C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx, which MPI::MPI_C
// does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "benchmarks/frontend_workloads.h"
#include "codegen/cpu/graph_compiler.h"
#include "frontend/dist/ddp.h"
#include "frontend/dist/process_group.h"
#include "kiln/kiln.h"

namespace {

using B = kiln::Cpu;
using Clock = std::chrono::steady_clock;
using kiln::bench::HostBatch;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The largest of every rank's value: a collective's time is its slowest rank's.
double MaxOverRanks(double value) {
  double out = value;
  MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Every rank must run the same number of iterations (each one is a collective), so rank 0's
// estimate is sent to the others.
int64_t Agree(int64_t value) {
  MPI_Bcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return value;
}

// Iterations so that a loop lasts about `seconds`, from one call's time.
int64_t Iterations(double seconds, double one_call, int64_t at_least) {
  const double n = std::ceil(seconds / std::max(one_call, 1e-7));
  return Agree(std::max<int64_t>(at_least, static_cast<int64_t>(std::min(n, 1e6))));
}

// ---- all_reduce -----------------------------------------------------------------------------

struct AllReduceRow {
  int64_t bytes = 0;
  int64_t iterations = 0;
  double kiln_s = 0, mpi_s = 0;
  // Rank 0's minor page faults per call: what a path's fresh host buffers cost beyond the copy.
  double kiln_faults = 0, mpi_faults = 0;
};

int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

AllReduceRow TimeAllReduce(const kiln::dist::ProcessGroup& pg, int64_t bytes, double min_time) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  B::Device device;
  const auto x = kiln::Tensor<B, 1>::from_vector(kiln::bench::RandomValues(n, 7), {n}, device);
  // Zeros: summed in place again and again they stay finite (random values would double towards
  // inf on 2 ranks), and a sum's cost does not depend on the values.
  std::vector<float> raw(static_cast<size_t>(n), 0.f);
  const auto kiln_call = [&] { (void)pg.all_reduce(x, kiln::dist::ReduceOp::kSum); };
  const auto mpi_call = [&] {
    MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  double faults = 0;  // of the last loop
  const auto loop = [&](const auto& call, int64_t iterations) {
    pg.barrier();
    const int64_t faults_before = MinorFaults();
    const auto start = Clock::now();
    for (int64_t i = 0; i < iterations; ++i) call();
    const double seconds = Seconds(start);
    faults = static_cast<double>(MinorFaults() - faults_before) / static_cast<double>(iterations);
    return MaxOverRanks(seconds / static_cast<double>(iterations));
  };
  loop(kiln_call, 2);  // warm-up: first-touch pages, Open MPI's shared-memory segments
  loop(mpi_call, 2);
  AllReduceRow row;
  row.bytes = bytes;
  // A third of the time per loop: three loops of each path.
  row.iterations = Iterations(min_time / 3, loop(kiln_call, 1), 3);
  std::vector<double> kiln_s, mpi_s;
  for (int repeat = 0; repeat < 3; ++repeat) {
    kiln_s.push_back(loop(kiln_call, row.iterations));
    row.kiln_faults = faults;
    mpi_s.push_back(loop(mpi_call, row.iterations));
    row.mpi_faults = faults;
  }
  row.kiln_s = *std::min_element(kiln_s.begin(), kiln_s.end());
  row.mpi_s = *std::min_element(mpi_s.begin(), mpi_s.end());
  return row;
}

// ---- training steps -------------------------------------------------------------------------

struct StepTimes {
  double compute = 0, all_reduce = 0, update = 0, total = 0;
};

// One data-parallel step on this rank's batch. The gradients are realized here rather than inside
// all_reduce_gradients (which realizes whatever is pending, then sends) so that compute and
// communication are timed apart; the graph is the same one all_reduce_gradients would run.
template <class Net, class Optimizer>
StepTimes DdpStep(const kiln::dist::ProcessGroup& pg, Net& model, Optimizer& sgd,
                  const HostBatch& batch, kiln::dist::GradientSyncStats* stats) {
  const auto start = Clock::now();
  B::Device device;
  const auto images =
      kiln::Tensor<B, 3>::from_vector(batch.images, {batch.n, int64_t{28}, int64_t{28}}, device);
  const auto labels = kiln::Tensor<B, 1, kiln::Int>::from_vector(batch.labels, {batch.n}, device);
  const auto loss = kiln::nn::cross_entropy(model.logits(images), labels);
  kiln::Gradients grads = loss.backward();
  std::vector<kiln::detail::TensorRef> pending{loss.ref()};
  model.visit([&](const std::string&, const auto& p) {
    if (kiln::detail::TensorRef g = grads.get(p.ref())) pending.push_back(g);
  });
  kiln::detail::Realize(pending, std::source_location::current());
  StepTimes t;
  t.compute = Seconds(start);
  const auto sent = Clock::now();
  *stats = kiln::dist::all_reduce_gradients(pg, model, grads, {});
  t.all_reduce = Seconds(sent);
  const auto updated = Clock::now();
  sgd.step(model, grads);
  kiln::optim::realize_step(model, sgd);
  t.update = Seconds(updated);
  t.total = Seconds(start);
  return t;
}

struct TrainRow {
  std::string model;
  std::string mode;  // "ddp" or "single"
  int64_t global_batch = 0, rank_batch = 0, steps = 0;
  StepTimes median;
  kiln::dist::GradientSyncStats sync;
  std::string error;
};

template <template <class> class Net>
void TimeTraining(const kiln::dist::ProcessGroup& pg, const std::string& name, int64_t global,
                  double min_time, std::vector<TrainRow>& rows) {
  const int64_t world = pg.world_size();
  const int64_t per_rank = global / world;
  // Each rank its own examples, as a DistributedSampler's shard would be.
  const HostBatch batch =
      kiln::bench::MakeHostBatch(per_rank, 11 + static_cast<uint32_t>(pg.rank()));
  TrainRow row{name, "ddp", global, per_rank, 0, {}, {}, ""};
  {
    kiln::manual_seed(0);  // the same initial weights on every rank, as broadcast_parameters makes
    Net<B> model = Net<B>::Make();
    auto sgd = kiln::optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
    StepTimes last;
    for (int step = 0; step < 3; ++step) last = DdpStep(pg, model, sgd, batch, &row.sync);
    row.steps = Iterations(min_time, last.total, 10);
    const int64_t compiles = kiln::codegen::cpu::GetGraphCacheStats().compiles;
    std::vector<double> compute, all_reduce, update, total;
    pg.barrier();
    for (int64_t step = 0; step < row.steps; ++step) {
      const StepTimes t = DdpStep(pg, model, sgd, batch, &row.sync);
      compute.push_back(t.compute);
      all_reduce.push_back(t.all_reduce);
      update.push_back(t.update);
      total.push_back(t.total);
    }
    // Rank 0's phases (the all-reduce ends the ranks' steps together).
    row.median = {Median(compute), Median(all_reduce), Median(update), Median(total)};
    if (kiln::codegen::cpu::GetGraphCacheStats().compiles != compiles) {
      row.error = "a timed step recompiled (not the cache-hit path)";
    }
  }
  rows.push_back(row);
  if (world != 1) return;

  // One process: the step without data parallelism, one graph (the reference).
  TrainRow single{name, "single", global, global, 0, {}, {}, ""};
  {
    kiln::manual_seed(0);
    Net<B> model = Net<B>::Make();
    auto sgd = kiln::optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
    const auto step = [&] {
      const auto start = Clock::now();
      kiln::bench::FrontendTrainStep<B>(model, sgd, batch);
      return Seconds(start);
    };
    double last = 0;
    for (int i = 0; i < 3; ++i) last = step();
    single.steps = Iterations(min_time, last, 10);
    const int64_t compiles = kiln::codegen::cpu::GetGraphCacheStats().compiles;
    std::vector<double> total;
    for (int64_t i = 0; i < single.steps; ++i) total.push_back(step());
    single.median.total = Median(total);
    if (kiln::codegen::cpu::GetGraphCacheStats().compiles != compiles) {
      single.error = "a timed step recompiled (not the cache-hit path)";
    }
  }
  rows.push_back(single);
}

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

[[noreturn]] void Usage(const char* argv0, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--part all_reduce|train|all] [--min-time SECONDS] "
               "[--max-bytes N]\n",
               argv0, problem.c_str(), argv0);
  std::exit(2);
}

int Run(const kiln::dist::ProcessGroup& pg, int argc, char** argv) {
  std::string part = "all";
  double min_time = 1.0;
  int64_t max_bytes = int64_t{64} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage(argv[0], "missing value after " + arg);
    const std::string value = argv[++i];
    if (arg == "--part") {
      part = value;
    } else if (arg == "--min-time") {
      min_time = std::stod(value);
    } else if (arg == "--max-bytes") {
      max_bytes = std::stoll(value);
    } else {
      Usage(argv[0], "unknown flag " + arg);
    }
  }
  if (part != "all" && part != "all_reduce" && part != "train") Usage(argv[0], "bad --part");

  std::vector<AllReduceRow> reduce_rows;
  if (part != "train") {
    for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      reduce_rows.push_back(TimeAllReduce(pg, bytes, min_time));
    }
  }
  std::vector<TrainRow> train_rows;
  if (part != "all_reduce") {
    TimeTraining<kiln::bench::FrontendMlp>(pg, "mlp_784-512-256-10", 128, min_time, train_rows);
    TimeTraining<kiln::bench::FrontendCnn>(pg, "cnn_mnist", 64, min_time, train_rows);
  }
  if (pg.rank() != 0) return 0;

  const double world = pg.world_size();
  const char* threads = std::getenv("KILN_NUM_THREADS");
  std::printf("{\n  \"world_size\": %d,\n  \"kiln_num_threads\": %s,\n  \"all_reduce\": [",
              pg.world_size(), Quoted(threads ? threads : "").c_str());
  for (size_t i = 0; i < reduce_rows.size(); ++i) {
    const AllReduceRow& r = reduce_rows[i];
    // NCCL-tests' conventions: algorithm bandwidth = bytes / time; bus bandwidth scales it by
    // 2(n-1)/n, the share of the bytes each rank sends and receives in a ring all-reduce.
    const double bus = 2 * (world - 1) / world;
    const double b = static_cast<double>(r.bytes);
    std::printf(
        "%s\n    {\"bytes\": %lld, \"iterations\": %lld, \"kiln_s\": %.9g, \"mpi_s\": %.9g, "
        "\"kiln_algbw_GBps\": %.6g, \"mpi_algbw_GBps\": %.6g, \"kiln_busbw_GBps\": %.6g, "
        "\"mpi_busbw_GBps\": %.6g, \"kiln_faults_per_call\": %.4g, \"mpi_faults_per_call\": %.4g}",
        i ? "," : "", static_cast<long long>(r.bytes), static_cast<long long>(r.iterations),
        r.kiln_s, r.mpi_s, b / r.kiln_s / 1e9, b / r.mpi_s / 1e9, bus * b / r.kiln_s / 1e9,
        bus * b / r.mpi_s / 1e9, r.kiln_faults, r.mpi_faults);
  }
  std::printf("\n  ],\n  \"train\": [");
  for (size_t i = 0; i < train_rows.size(); ++i) {
    const TrainRow& r = train_rows[i];
    std::printf(
        "%s\n    {\"model\": %s, \"mode\": %s, \"global_batch\": %lld, \"rank_batch\": %lld, "
        "\"steps\": %lld, \"step_s\": %.9g, \"compute_s\": %.9g, \"all_reduce_s\": %.9g, "
        "\"update_s\": %.9g, \"grad_bytes\": %lld, \"buckets\": %lld, \"error\": %s}",
        i ? "," : "", Quoted(r.model).c_str(), Quoted(r.mode).c_str(),
        static_cast<long long>(r.global_batch), static_cast<long long>(r.rank_batch),
        static_cast<long long>(r.steps), r.median.total, r.median.compute, r.median.all_reduce,
        r.median.update, static_cast<long long>(r.sync.bytes),
        static_cast<long long>(r.sync.buckets), Quoted(r.error).c_str());
  }
  std::printf("\n  ]\n}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto& pg = kiln::dist::ProcessGroup::Init(&argc, &argv);
  try {
    return Run(pg, argc, argv);
  } catch (const std::exception& error) {
    // An error on one rank would leave the others waiting in their next collective.
    pg.abort(error.what());
  }
}
