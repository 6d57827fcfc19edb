// kiln_bench: the CPU backend's steady-state performance on the workloads of issue #3, timed
// through the public Tensor API on kiln::Cpu (Google Benchmark; `--benchmark_format=json`).
//
// Each iteration builds the lazy expression and realizes it, so the time includes recording the
// nodes, building the ir::Graph, the compiled-graph cache lookup and the run (the executable's
// kernels on the runtime's thread pool, KILN_NUM_THREADS). Before timing, one realization
// compiles the graph and its result is checked against a host computation of a sample of the
// elements, so a fast wrong kernel reports an error instead of a time.
//
// compile/mlp_step times a cold compile: the graph cache has no clear API, so each iteration uses
// a different batch size (the shapes are part of the graph's and every kernel's cache key), and
// the benchmark fails unless every iteration really compiled. Run it without KILN_CACHE_DIR, or
// the disk cache would serve a later process.
//
// real/<name>: the user's path, as examples/fashion_mnist/{mlp,cnn}.cc and the Learner train:
// nn::Linear / nn::Conv2d modules, model.forward -> nn::cross_entropy on integer labels ->
// loss.backward() (the autodiff pass builds the gradient graph) -> optim::Sgd (lr 0.01, momentum
// 0.9) step, the whole step a kiln::jit function of the batch's tensors with the model and the
// optimizer as its state (recorded once, then replayed: no ops recorded per step), then
// loss.item(). The batch is fixed random data, uploaded each step as the data loader's batch is.
// Before timing, two steps run on kiln::Cpu and on kiln::Reference (the interpreter) from the
// same seed, and their losses and updated parameters must agree; warm-up steps reach the replay
// (or cache-hit) path, and the benchmark fails if a timed step recompiles or runs eagerly.
// real/infer/... is the same MLP's forward (jitted) at batch 1 and 256 under NoGradGuard.
// lazy/<name>: the same steps without kiln::jit: each step records its ops and realizes them
// as one graph (optim::realize_step), found in the compile cache by its structural hash: the
// plain lazy path. dispatch/cache_hit and dispatch/jit: 10 ops on 16 elements, lazily and jitted.
//
// diag/kernel_only/<name> (not targets, diagnostics): the same graph compiled once and run
// through runtime::Executable::Run into output buffers allocated once, so the time is the
// kernels' alone, without recording, graph building, the cache lookup or the fresh output
// allocation (whose first-touch page faults dominate 64 MiB outputs on this machine).
//
// Counters: bytes_per_second (bytes read + written once by an ideal kernel) for the memory-bound
// workloads, FLOP/s for matmul, graph_nodes (nodes of the realized graph, parameters included).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "benchmarks/frontend_workloads.h"
#include "benchmarks/train_graphs.h"
#include "codegen/cpu/graph_compiler.h"
#include "frontend/activation.h"
#include "frontend/backend.h"
#include "frontend/engine.h"
#include "frontend/tensor.h"
#include "ir/interpreter.h"
#include "kiln/kiln.h"
#include "runtime/thread_pool.h"

namespace {

namespace ir = kiln::ir;
using kiln::bench::CompareParameters;
using kiln::bench::FrontendCnn;
using kiln::bench::FrontendMlp;
using kiln::bench::FrontendTrainStep;
using kiln::bench::HostBatch;
using kiln::bench::MakeHostBatch;
using kiln::bench::Parameters;
using kiln::bench::RandomValues;
using B = kiln::Cpu;
using Tensor1 = kiln::Tensor<B, 1>;
using Tensor2 = kiln::Tensor<B, 2>;

constexpr int64_t kEltwiseSize = 16777216;
constexpr float kAffineScale = 0.75f;
constexpr float kAffineShift = 0.25f;
constexpr float kLayerNormEps = 1e-5f;

// Realized input tensors: from_vector stores the data, so they enter every graph as parameters.
Tensor1 RandomVector(int64_t count, uint32_t seed) {
  return Tensor1::from_vector(RandomValues(count, seed), {count}, B::Device{});
}
Tensor2 RandomMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  return Tensor2::from_vector(RandomValues(rows * cols, seed), {rows, cols}, B::Device{});
}

double GeluTanh(double x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

// Compares every k-th element of `actual` with `expected(i)`, k = min(stride_hint, n / 997 + 1),
// so at least ~1000 elements spread over the whole tensor; returns "" or a description of the
// first mismatch. Both sides are multiplied by `scale` first (softmax's probabilities are ~1/row
// length: scaled, the tolerance is relative to their size).
template <class Expected>
std::string CheckSample(const ir::TensorData& actual, int64_t stride_hint, double tolerance,
                        Expected expected, double scale = 1.0) {
  const int64_t n = actual.num_elements();
  const int64_t step = std::max<int64_t>(1, std::min(stride_hint, n / 997 + 1));
  for (int64_t i = 0; i < n; i += step) {
    const double want = expected(i) * scale;
    const double got = actual.GetDouble(i) * scale;
    if (!(std::abs(got - want) <= tolerance * (1.0 + std::abs(want)))) {
      return "element " + std::to_string(i) + ": got " + std::to_string(got) + ", expected " +
             std::to_string(want);
    }
  }
  return "";
}

// Runs `body` once (compile + check), then times it. `check` returns "" when the result is right.
template <class Body, class Check>
void RunRealized(benchmark::State& state, Body body, Check check) {
  try {
    const auto before = kiln::detail::GetEngineStats();
    const std::string problem = check(body().into_data());
    const auto after = kiln::detail::GetEngineStats();
    if (!problem.empty()) {
      state.SkipWithError(("wrong result: " + problem).c_str());
      return;
    }
    state.counters["graph_nodes"] =
        static_cast<double>(after.nodes_executed - before.nodes_executed);
    for (auto _ : state) {
      auto result = body();
      result.realize();
      benchmark::DoNotOptimize(result);
    }
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

void SetBytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// y = gelu_tanh(x * a + b), a and b scalars (constants of the graph).
void BM_GeluAffine(benchmark::State& state) {
  const std::vector<float> host = RandomValues(kEltwiseSize, 1);
  const Tensor1 x = Tensor1::from_vector(host, {kEltwiseSize}, B::Device{});
  RunRealized(
      state, [&] { return kiln::activation::gelu_tanh(x * kAffineScale + kAffineShift); },
      [&](const ir::TensorData& y) {
        return CheckSample(y, 4099, 1e-4, [&](int64_t i) {
          return GeluTanh(static_cast<double>(host[static_cast<size_t>(i)]) * kAffineScale +
                          kAffineShift);
        });
      });
  SetBytes(state, 8.0 * kEltwiseSize);
}

// y = x * sigmoid(x).
void BM_Silu(benchmark::State& state) {
  const std::vector<float> host = RandomValues(kEltwiseSize, 2);
  const Tensor1 x = Tensor1::from_vector(host, {kEltwiseSize}, B::Device{});
  RunRealized(
      state, [&] { return x * kiln::activation::sigmoid(x); },
      [&](const ir::TensorData& y) {
        return CheckSample(y, 4099, 1e-4, [&](int64_t i) {
          const double v = host[static_cast<size_t>(i)];
          return v / (1.0 + std::exp(-v));
        });
      });
  SetBytes(state, 8.0 * kEltwiseSize);
}

// Softmax over the rows of a 4096 x 4096 matrix.
void BM_SoftmaxRows(benchmark::State& state) {
  constexpr int64_t kRows = 4096, kCols = 4096;
  const std::vector<float> host = RandomValues(kRows * kCols, 3);
  const Tensor2 x = Tensor2::from_vector(host, {kRows, kCols}, B::Device{});
  // Host reference of sampled rows, computed on demand in f64.
  auto expected = [&](int64_t i) {
    const int64_t row = i / kCols;
    const float* r = host.data() + row * kCols;
    const double m = *std::max_element(r, r + kCols);
    double sum = 0;
    for (int64_t j = 0; j < kCols; ++j) sum += std::exp(r[j] - m);
    return std::exp(r[i % kCols] - m) / sum;
  };
  RunRealized(
      state, [&] { return kiln::activation::softmax(x, 1); },
      [&](const ir::TensorData& y) { return CheckSample(y, 40961, 1e-4, expected, kCols); });
  SetBytes(state, 8.0 * kRows * kCols);
}

// Layer norm over the last dim of 4096 x 1024, eps 1e-5, biased variance, no affine parameters
// (torch.nn.functional.layer_norm(x, (1024,), eps=1e-5) without weight and bias).
void BM_LayerNorm(benchmark::State& state) {
  constexpr int64_t kRows = 4096, kCols = 1024;
  const std::vector<float> host = RandomValues(kRows * kCols, 4);
  const Tensor2 x = Tensor2::from_vector(host, {kRows, kCols}, B::Device{});
  auto expected = [&](int64_t i) {
    const float* r = host.data() + (i / kCols) * kCols;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < kCols; ++j) mean += r[j];
    mean /= kCols;
    for (int64_t j = 0; j < kCols; ++j) var += (r[j] - mean) * (r[j] - mean);
    var /= kCols;
    return (r[i % kCols] - mean) / std::sqrt(var + kLayerNormEps);
  };
  RunRealized(
      state,
      [&] {
        const Tensor2 centered = x - x.mean(1, kiln::keepdim);
        const Tensor2 variance = (centered * centered).mean(1, kiln::keepdim);
        return centered * (variance + kLayerNormEps).rsqrt();
      },
      [&](const ir::TensorData& y) { return CheckSample(y, 10243, 1e-4, expected); });
  SetBytes(state, 8.0 * kRows * kCols);
}

// C = A B, square f32.
template <int64_t n>
void BM_Matmul(benchmark::State& state) {
  const std::vector<float> a_host = RandomValues(n * n, 5, -1.f, 1.f);
  const std::vector<float> b_host = RandomValues(n * n, 6, -1.f, 1.f);
  const Tensor2 a = Tensor2::from_vector(a_host, {n, n}, B::Device{});
  const Tensor2 b = Tensor2::from_vector(b_host, {n, n}, B::Device{});
  auto expected = [&](int64_t i) {
    const int64_t row = i / n, col = i % n;
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += static_cast<double>(a_host[static_cast<size_t>(row * n + k)]) *
             b_host[static_cast<size_t>(k * n + col)];
    }
    return sum;
  };
  // f32 accumulation over n terms of magnitude <= 1: the error grows like sqrt(n) * 2^-24.
  RunRealized(
      state, [&] { return a.matmul(b); },
      [&](const ir::TensorData& c) { return CheckSample(c, n * 7 + 3, 1e-4, expected); });
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n) * n * n,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// Row sums of a 4096 x 4096 matrix.
void BM_SumRows(benchmark::State& state) {
  constexpr int64_t kRows = 4096, kCols = 4096;
  const std::vector<float> host = RandomValues(kRows * kCols, 7);
  const Tensor2 x = Tensor2::from_vector(host, {kRows, kCols}, B::Device{});
  auto expected = [&](int64_t row) {
    double sum = 0;
    for (int64_t j = 0; j < kCols; ++j) sum += host[static_cast<size_t>(row * kCols + j)];
    return sum;
  };
  RunRealized(
      state, [&] { return x.sum(1); },
      // Sums of 4096 values in [-3, 3]: compare with an absolute tolerance scaled to the row.
      [&](const ir::TensorData& y) { return CheckSample(y, 41, 2e-3, expected); });
  SetBytes(state, 4.0 * kRows * kCols + 4.0 * kRows);
}

// A ~50-node graph: a 3-layer MLP forward (matmul + bias + activation), log-softmax and an
// NLL-like loss against one-hot targets. Each iteration uses a new batch size
// so neither the graph cache nor the kernel cache can serve it: every iteration compiles.
void BM_CompileMlpStep(benchmark::State& state) {
  constexpr int64_t kIn = 64, kHidden = 128, kOut = 16;
  try {
    const Tensor2 w1 = RandomMatrix(kIn, kHidden, 11), w2 = RandomMatrix(kHidden, kHidden, 12),
                  w3 = RandomMatrix(kHidden, kOut, 13);
    const Tensor2 b1 = RandomMatrix(1, kHidden, 14), b2 = RandomMatrix(1, kHidden, 15),
                  b3 = RandomMatrix(1, kOut, 16);
    auto step = [&](const Tensor2& x, const Tensor2& targets) {
      const Tensor2 h1 = kiln::activation::relu(x.matmul(w1) + b1);
      const Tensor2 h2 = kiln::activation::gelu_tanh(h1.matmul(w2) + b2);
      const Tensor2 h3 = kiln::activation::silu(h2.matmul(w3) + b3);
      const Tensor2 logits = (h3 - h3.mean(1, kiln::keepdim)) * 0.5f;
      const Tensor2 log_probs = kiln::activation::log_softmax(logits, 1);
      return -(log_probs * targets).sum(1).mean();
    };
    // Shared by every run of this benchmark (Google Benchmark repeats it), so no batch size, and
    // so no graph, is ever seen twice.
    static int64_t batch = 8;
    auto inputs = [&](int64_t rows) {
      std::vector<float> onehot(static_cast<size_t>(rows * kOut), 0.f);
      for (int64_t r = 0; r < rows; ++r) onehot[static_cast<size_t>(r * kOut + r % kOut)] = 1.f;
      return std::pair<Tensor2, Tensor2>(RandomMatrix(rows, kIn, 17),
                                         Tensor2::from_vector(onehot, {rows, kOut}, B::Device{}));
    };
    int64_t nodes = 0;
    for (auto _ : state) {
      state.PauseTiming();
      auto [x, targets] = inputs(batch++);
      const auto cache_before = kiln::codegen::cpu::GetGraphCacheStats();
      const auto engine_before = kiln::detail::GetEngineStats();
      state.ResumeTiming();
      benchmark::DoNotOptimize(step(x, targets).item());
      state.PauseTiming();
      const auto cache_after = kiln::codegen::cpu::GetGraphCacheStats();
      nodes = kiln::detail::GetEngineStats().nodes_executed - engine_before.nodes_executed;
      state.ResumeTiming();
      if (cache_after.compiles != cache_before.compiles + 1) {
        state.SkipWithError("an iteration did not compile exactly one graph");
        break;
      }
    }
    state.counters["graph_nodes"] = static_cast<double>(nodes);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

// A cache-hit realize of a 10-op elementwise graph (12 nodes with its 2 parameters) on a tiny
// tensor: the fixed cost per realization (graph building, hashing, cache lookup, launch).
// 10 elementwise ops on two tensors (12 graph nodes; no scalar constants, which would add fill
// nodes), realized: the per-call cost of a small graph. `jitted`: through kiln::jit (x is its
// argument, y a constant), so no op is recorded.
void RunDispatch(benchmark::State& state, bool jitted) {
  const std::vector<float> host = RandomValues(16, 21, -1.f, 1.f);
  const Tensor1 x = Tensor1::from_vector(host, {16}, B::Device{});
  const Tensor1 y = RandomVector(16, 22);
  const auto ops = [&](const Tensor1& input) {
    const Tensor1 a = input * y;
    const Tensor1 b = (a - y).tanh();
    const Tensor1 c = b * a + y.exp();
    return c / (y.abs() + input.abs());
  };
  auto jitted_ops = kiln::jit(ops);
  auto body = [&] { return jitted ? jitted_ops(x) : ops(x); };
  RunRealized(state, body, [&](const ir::TensorData& out) {
    const std::vector<float> yv = y.to_vector<float>();
    return CheckSample(out, 1, 1e-5, [&](int64_t i) {
      const double xi = host[static_cast<size_t>(i)], yi = yv[static_cast<size_t>(i)];
      const double a = xi * yi, b = std::tanh(a - yi), c = b * a + std::exp(yi);
      return c / (std::abs(yi) + std::abs(xi));
    });
  });
}
void BM_DispatchCacheHit(benchmark::State& state) { RunDispatch(state, false); }
void BM_DispatchJit(benchmark::State& state) { RunDispatch(state, true); }

// ---- Training (issue #4): hand-built step graphs on codegen::cpu::CompileAndRun ----------------

// Arguments for a TrainGraph: x uniform in [0, 1), one-hot targets of random classes, weights
// uniform in +-1/sqrt(fan_in) (torch's default init), biases and velocities small, lr = 0.01.
std::vector<std::shared_ptr<const ir::TensorData>> TrainArguments(const kiln::bench::TrainGraph& g,
                                                                  uint32_t seed) {
  std::vector<std::shared_ptr<const ir::TensorData>> args;
  std::mt19937 engine(seed);
  const std::vector<ir::NodeId> params = g.graph.Parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    const ir::TensorType& type = g.graph.node(params[k]).type;
    const std::string& name = g.parameter_names[k];
    const int64_t n = type.num_elements();
    std::vector<float> values(static_cast<size_t>(n));
    if (name == "lr") {
      values[0] = 0.01f;
    } else if (name == "onehot") {
      const int64_t classes = type.shape.back();
      std::uniform_int_distribution<int64_t> label(0, classes - 1);
      for (int64_t r = 0; r < n / classes; ++r) {
        values[static_cast<size_t>(r * classes + label(engine))] = 1.f;
      }
    } else {
      float bound = 1.f;
      if (name == "x") {
        std::uniform_real_distribution<float> d(0.f, 1.f);
        for (float& v : values) v = d(engine);
        args.push_back(std::make_shared<const ir::TensorData>(
            ir::TensorData::FromVector(ir::DType::kF32, type.shape, values)));
        continue;
      }
      if (name[0] == 'W' || name[0] == 'b') {
        // Fan-in of the layer: the weight's elements per output.
        const ir::TensorType& w = g.graph.node(params[name[0] == 'W' ? k : k - 1]).type;
        bound = 1.f / std::sqrt(static_cast<float>(w.num_elements() / w.shape[0]));
      } else {
        bound = 1e-3f;  // velocities
      }
      std::uniform_real_distribution<float> d(-bound, bound);
      for (float& v : values) v = d(engine);
    }
    args.push_back(std::make_shared<const ir::TensorData>(
        ir::TensorData::FromVector(ir::DType::kF32, type.shape, values)));
  }
  return args;
}

// Every output of the compiled graph against the reference interpreter (f64 math), elementwise,
// relative to the output's largest magnitude. Returns "" or the first mismatch.
std::string CheckAgainstInterpreter(const kiln::bench::TrainGraph& g,
                                    const std::vector<std::shared_ptr<const ir::TensorData>>& args,
                                    const std::vector<ir::TensorData>& got) {
  std::vector<ir::TensorData> plain;
  for (const auto& a : args) plain.push_back(*a);
  absl::StatusOr<std::vector<ir::TensorData>> want = ir::Interpret(g.graph, plain);
  if (!want.ok()) return "interpreter: " + std::string(want.status().message());
  if (want->size() != got.size()) return "output count differs";
  for (size_t k = 0; k < got.size(); ++k) {
    double scale = 0;
    for (int64_t i = 0; i < (*want)[k].num_elements(); ++i) {
      scale = std::max(scale, std::abs((*want)[k].GetDouble(i)));
    }
    for (int64_t i = 0; i < got[k].num_elements(); ++i) {
      const double w = (*want)[k].GetDouble(i), v = got[k].GetDouble(i);
      if (!(std::abs(v - w) <= 1e-4 * (scale + 1e-6) + 1e-5 * std::abs(w))) {
        return g.graph.outputs()[k].name + " element " + std::to_string(i) + ": got " +
               std::to_string(v) + ", expected " + std::to_string(w);
      }
    }
  }
  return "";
}

// Checks one run against the interpreter, then times CompileAndRun on the cache-hit path. A
// training step feeds its updated parameters and velocities back as the next step's arguments.
void RunTrainGraph(benchmark::State& state, const kiln::bench::TrainGraph& g) {
  std::vector<std::shared_ptr<const ir::TensorData>> args = TrainArguments(g, 42);
  absl::StatusOr<std::vector<ir::TensorData>> first =
      kiln::codegen::cpu::CompileAndRun(g.graph, args);
  if (!first.ok()) {
    state.SkipWithError(std::string(first.status().message()).c_str());
    return;
  }
  if (const std::string problem = CheckAgainstInterpreter(g, args, *first); !problem.empty()) {
    state.SkipWithError(("wrong result: " + problem).c_str());
    return;
  }
  state.counters["graph_nodes"] = static_cast<double>(g.graph.num_nodes());
  for (auto _ : state) {
    absl::StatusOr<std::vector<ir::TensorData>> out =
        kiln::codegen::cpu::CompileAndRun(g.graph, args);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      break;
    }
    for (size_t k = 0; k < g.update_of_output.size(); ++k) {
      args[static_cast<size_t>(g.update_of_output[k])] =
          std::make_shared<const ir::TensorData>(std::move((*out)[k + 1]));
    }
    benchmark::DoNotOptimize(out);
  }
}

void BM_MlpTrainStep(benchmark::State& state) {
  static const kiln::bench::TrainGraph g = kiln::bench::MlpTrainStep(128, {784, 512, 256, 10});
  RunTrainGraph(state, g);
}
void BM_MlpInference(benchmark::State& state) {
  static const kiln::bench::TrainGraph g = kiln::bench::MlpInference(1, {784, 512, 256, 10});
  RunTrainGraph(state, g);
}
void BM_CnnTrainStep(benchmark::State& state) {
  static const kiln::bench::TrainGraph g = kiln::bench::CnnTrainStep(64);
  RunTrainGraph(state, g);
}

// ---- The real frontend path (examples/fashion_mnist)
// ---------------------------------------------

// `precision`: the step under autocast (bf16 matmuls and convolutions, f32 master weights); the
// interpreter runs the same policy, and bf16's 8-bit significand loosens the loss check.
// `jitted`: the steps run through kiln::jit, as the Learner runs them (the user's path); otherwise
// each step records its ops and realizes them (FrontendTrainStep, the plain lazy path).
template <template <class> class Net>
void RunFrontendTrain(benchmark::State& state, int64_t batch_size, bool jitted,
                      kiln::amp::Precision precision = kiln::amp::Precision::kF32) {
  try {
    const HostBatch batch = MakeHostBatch(batch_size, 11);
    kiln::manual_seed(0);
    Net<kiln::Reference> reference = Net<kiln::Reference>::Make();
    kiln::manual_seed(0);
    Net<B> model = Net<B>::Make();
    auto reference_sgd = kiln::optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
    auto sgd = kiln::optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
    auto jitted_step = kiln::jit(
        [&](const kiln::Tensor<B, 3>& images, const kiln::Tensor<B, 1, kiln::Int>& labels) {
          kiln::amp::AutocastGuard autocast(kiln::amp::AutocastDTypeOf(precision));
          const auto loss = kiln::nn::cross_entropy(model.logits(images), labels);
          sgd.step(model, loss.backward());
          return loss;
        },
        model, sgd);
    // One step as the data loader's batch arrives: uploaded, then the step.
    const auto step = [&] {
      if (!jitted) return FrontendTrainStep<B>(model, sgd, batch, precision);
      const B::Device device;
      const auto images = kiln::Tensor<B, 3>::from_vector(
          batch.images, {batch.n, int64_t{28}, int64_t{28}}, device);
      const auto labels =
          kiln::Tensor<B, 1, kiln::Int>::from_vector(batch.labels, {batch.n}, device);
      return static_cast<double>(jitted_step(images, labels).item());
    };
    // Two steps: the second reads the first's velocities, so the whole update is checked.
    const double tolerance = precision == kiln::amp::Precision::kF32 ? 1e-4 : 1e-2;
    for (int i = 0; i < 2; ++i) {
      const double want =
          FrontendTrainStep<kiln::Reference>(reference, reference_sgd, batch, precision);
      const double got = step();
      if (!(std::abs(got - want) <= tolerance * (1.0 + std::abs(want)))) {
        state.SkipWithError(("wrong loss at step " + std::to_string(i) + ": " +
                             std::to_string(got) + ", reference " + std::to_string(want))
                                .c_str());
        return;
      }
    }
    if (const std::string problem = CompareParameters(Parameters(model), Parameters(reference));
        !problem.empty()) {
      state.SkipWithError(("wrong update: " + problem).c_str());
      return;
    }
    step();  // the steady state's graph (jitted: its first replay)
    const auto before = kiln::detail::GetEngineStats();
    step();
    const auto after = kiln::detail::GetEngineStats();
    state.counters["graph_nodes"] =
        static_cast<double>(after.nodes_executed - before.nodes_executed);
    const int64_t compiles = kiln::codegen::cpu::GetGraphCacheStats().compiles;
    for (auto _ : state) benchmark::DoNotOptimize(step());
    if (kiln::codegen::cpu::GetGraphCacheStats().compiles != compiles) {
      state.SkipWithError("a timed step recompiled (not the cache-hit path)");
    }
    if (jitted && jitted_step.stats().eager_calls != 0) {
      state.SkipWithError("the jitted step ran eagerly");
    }
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

void BM_RealMlpTrainStep(benchmark::State& state) {
  RunFrontendTrain<FrontendMlp>(state, 128, /*jitted=*/true);
}
void BM_RealCnnTrainStep(benchmark::State& state) {
  RunFrontendTrain<FrontendCnn>(state, 64, /*jitted=*/true);
}
void BM_RealMlpTrainStepBf16(benchmark::State& state) {
  RunFrontendTrain<FrontendMlp>(state, 128, /*jitted=*/true, kiln::amp::Precision::kBF16);
}
void BM_RealCnnTrainStepBf16(benchmark::State& state) {
  RunFrontendTrain<FrontendCnn>(state, 64, /*jitted=*/true, kiln::amp::Precision::kBF16);
}
void BM_LazyMlpTrainStep(benchmark::State& state) {
  RunFrontendTrain<FrontendMlp>(state, 128, /*jitted=*/false);
}
void BM_LazyCnnTrainStep(benchmark::State& state) {
  RunFrontendTrain<FrontendCnn>(state, 64, /*jitted=*/false);
}

// Inference at `batch_size`: the forward pass under NoGradGuard, realized, checked against the
// interpreter; `jitted` as for RunFrontendTrain.
void RunFrontendInference(benchmark::State& state, int64_t batch_size, bool jitted) {
  try {
    kiln::NoGradGuard no_grad;
    const std::vector<float> sample = RandomValues(batch_size * 784, 12, -0.81f, 2.02f);
    kiln::manual_seed(0);
    const auto reference = FrontendMlp<kiln::Reference>::Make();
    kiln::manual_seed(0);
    auto model = FrontendMlp<B>::Make();
    const auto x = Tensor2::from_vector(sample, {batch_size, int64_t{784}}, B::Device{});
    const ir::TensorData want =
        reference
            .forward(kiln::Tensor<kiln::Reference, 2>::from_vector(
                sample, {batch_size, int64_t{784}}, kiln::Reference::Device{}))
            .into_data();
    auto jitted_forward =
        kiln::jit([&](const Tensor2& input) { return model.forward(input); }, model);
    const auto forward = [&] {
      Tensor2 logits = jitted ? jitted_forward(x) : model.forward(x);
      logits.realize();
      return logits;
    };
    const ir::TensorData got = forward().into_data();
    if (const std::string problem = CompareParameters({got}, {want}); !problem.empty()) {
      state.SkipWithError(("wrong logits: " + problem).c_str());
      return;
    }
    // The first call's graph also held the parameters' lazy initialisation; this one is the
    // steady state's.
    forward();
    const int64_t compiles = kiln::codegen::cpu::GetGraphCacheStats().compiles;
    for (auto _ : state) benchmark::DoNotOptimize(forward());
    if (kiln::codegen::cpu::GetGraphCacheStats().compiles != compiles) {
      state.SkipWithError("a timed call recompiled (not the cache-hit path)");
    }
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}
void BM_RealMlpInference(benchmark::State& state) { RunFrontendInference(state, 1, true); }
void BM_RealMlpInference256(benchmark::State& state) { RunFrontendInference(state, 256, true); }
void BM_LazyMlpInference(benchmark::State& state) { RunFrontendInference(state, 1, false); }

// ---- Diagnostics: kernel time alone -------------------------------------------------------------

// The graph and arguments of the next realization on kiln::Cpu, caught by a wrapping executor
// that is installed only while a diagnostic captures (so the timed benchmarks run the engine's
// own executor).
struct CapturedGraph {
  std::optional<ir::Graph> graph;
  std::vector<std::shared_ptr<const ir::TensorData>> arguments;
};

void RegisterCpuExecutor(CapturedGraph* capture) {
  kiln::detail::RegisterExecutor(
      kiln::runtime::DeviceKind::kCpu,
      [capture](const ir::Graph& graph,
                std::span<const std::shared_ptr<const ir::TensorData>> arguments,
                kiln::runtime::DeviceId) {
        if (capture != nullptr) {
          capture->graph = graph;
          capture->arguments.assign(arguments.begin(), arguments.end());
        }
        return kiln::codegen::cpu::CompileAndRun(graph, arguments);
      });
}

template <class Body>
void RunKernelOnly(benchmark::State& state, Body body) {
  CapturedGraph capture;
  RegisterCpuExecutor(&capture);
  try {
    body().realize();
  } catch (const std::exception& error) {
    RegisterCpuExecutor(nullptr);
    state.SkipWithError(error.what());
    return;
  }
  RegisterCpuExecutor(nullptr);
  if (!capture.graph.has_value()) {
    state.SkipWithError("no graph was realized");
    return;
  }
  absl::StatusOr<std::shared_ptr<const kiln::codegen::cpu::CompiledGraph>> compiled =
      kiln::codegen::cpu::CompileGraph(*capture.graph);
  if (!compiled.ok()) {
    state.SkipWithError(std::string(compiled.status().message()).c_str());
    return;
  }
  std::vector<const void*> inputs;
  for (const auto& argument : capture.arguments) inputs.push_back(argument->data());
  std::vector<ir::TensorData> results;
  std::vector<void*> outputs;
  results.reserve((*compiled)->output_types.size());
  for (const ir::TensorType& type : (*compiled)->output_types) {
    results.push_back(ir::TensorData::Uninitialized(type.dtype, type.shape));
    outputs.push_back(results.back().data());
  }
  state.counters["kernels"] = (*compiled)->num_kernels;
  for (auto _ : state) {
    if (absl::Status s =
            (*compiled)->executable.Run(inputs, outputs, kiln::runtime::DefaultThreadPool());
        !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
}

void BM_KernelOnlyGeluAffine(benchmark::State& state) {
  const Tensor1 x = RandomVector(kEltwiseSize, 1);
  RunKernelOnly(state,
                [&] { return kiln::activation::gelu_tanh(x * kAffineScale + kAffineShift); });
  SetBytes(state, 8.0 * kEltwiseSize);
}
void BM_KernelOnlySilu(benchmark::State& state) {
  const Tensor1 x = RandomVector(kEltwiseSize, 2);
  RunKernelOnly(state, [&] { return x * kiln::activation::sigmoid(x); });
  SetBytes(state, 8.0 * kEltwiseSize);
}
// Two more long elementwise bodies (gelu with erf, tanh after an affine map) beside gelu_tanh:
// how far apart independent iterations are interleaved is chosen by body length (emitter.cc).
void BM_KernelOnlyGeluErf(benchmark::State& state) {
  const Tensor1 x = RandomVector(kEltwiseSize, 5);
  RunKernelOnly(state, [&] { return kiln::activation::gelu(x * kAffineScale + kAffineShift); });
  SetBytes(state, 8.0 * kEltwiseSize);
}
void BM_KernelOnlyTanh(benchmark::State& state) {
  const Tensor1 x = RandomVector(kEltwiseSize, 6);
  RunKernelOnly(state, [&] { return kiln::activation::tanh(x * kAffineScale + kAffineShift); });
  SetBytes(state, 8.0 * kEltwiseSize);
}
void BM_KernelOnlySoftmax(benchmark::State& state) {
  const Tensor2 x = RandomMatrix(4096, 4096, 3);
  RunKernelOnly(state, [&] { return kiln::activation::softmax(x, 1); });
  SetBytes(state, 8.0 * 4096 * 4096);
}
void BM_KernelOnlyLayerNorm(benchmark::State& state) {
  const Tensor2 x = RandomMatrix(4096, 1024, 4);
  RunKernelOnly(state, [&] {
    const Tensor2 centered = x - x.mean(1, kiln::keepdim);
    const Tensor2 variance = (centered * centered).mean(1, kiln::keepdim);
    return centered * (variance + kLayerNormEps).rsqrt();
  });
  SetBytes(state, 8.0 * 4096 * 1024);
}

}  // namespace

BENCHMARK(BM_GeluAffine)
    ->Name("eltwise/gelu_affine/16777216")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Silu)->Name("eltwise/silu/16777216")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SoftmaxRows)
    ->Name("softmax/rows/4096x4096")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayerNorm)->Name("layernorm/4096x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matmul<256>)->Name("matmul/f32/256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matmul<512>)->Name("matmul/f32/512")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matmul<1024>)->Name("matmul/f32/1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matmul<2048>)->Name("matmul/f32/2048")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SumRows)
    ->Name("reduce/sum_rows/4096x4096")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileMlpStep)
    ->Name("compile/mlp_step")
    ->UseRealTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DispatchCacheHit)
    ->Name("dispatch/cache_hit")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DispatchJit)->Name("dispatch/jit")->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_MlpTrainStep)
    ->Name("train/mlp_step/784-512-256-10/b128")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MlpInference)
    ->Name("infer/mlp/784-512-256-10/b1")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CnnTrainStep)
    ->Name("train/cnn_step/mnist/b64")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_RealMlpTrainStep)
    ->Name("real/train/mlp_step/784-512-256-10/b128")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LazyMlpTrainStep)
    ->Name("lazy/train/mlp_step/784-512-256-10/b128")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LazyCnnTrainStep)
    ->Name("lazy/train/cnn_step/mnist/b64")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LazyMlpInference)
    ->Name("lazy/infer/mlp/784-512-256-10/b1")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RealMlpInference256)
    ->Name("real/infer/mlp/784-512-256-10/b256")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RealMlpInference)
    ->Name("real/infer/mlp/784-512-256-10/b1")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RealCnnTrainStep)
    ->Name("real/train/cnn_step/mnist/b64")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RealMlpTrainStepBf16)
    ->Name("real/train/mlp_step/784-512-256-10/b128/bf16")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RealCnnTrainStepBf16)
    ->Name("real/train/cnn_step/mnist/b64/bf16")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_KernelOnlyGeluAffine)
    ->Name("diag/kernel_only/eltwise/gelu_affine/16777216")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelOnlySilu)
    ->Name("diag/kernel_only/eltwise/silu/16777216")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelOnlyGeluErf)
    ->Name("diag/kernel_only/eltwise/gelu_erf_affine/16777216")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelOnlyTanh)
    ->Name("diag/kernel_only/eltwise/tanh_affine/16777216")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelOnlySoftmax)
    ->Name("diag/kernel_only/softmax/rows/4096x4096")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelOnlyLayerNorm)
    ->Name("diag/kernel_only/layernorm/4096x1024")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
