// The CPU backend's caches seen from the frontend and the kernel compiler:
//  - realizing the same graph structure again is served by the in-memory compiled-graph cache
//    (GetGraphCacheStats), with the new data;
//  - a scalar passed as a realized rank-0 tensor (a learning rate) is a parameter: changing it
//    needs no recompile, while a literal scalar is part of the structure;
//  - with KILN_CACHE_DIR set, a fresh CpuCompiler (like a new process) loads a kernel from disk
//    instead of running LLVM, and the code computes the same values.
#include <kiln/kiln.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "codegen/cpu/jit.h"
#include "codegen/lower.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "passes/fusion.h"

namespace kiln {
namespace {

using codegen::cpu::GetGraphCacheStats;
using codegen::cpu::GraphCacheStats;

template <int R>
using TF = Tensor<Cpu, R, Float>;

TEST(CpuCompileCacheTest, SameStructureIsACacheHitWithNewData) {
  const Cpu::Device device;
  // A structure no other test of this binary builds: tanh(x * x + x).
  const auto f = [](const TF<2>& x) { return (x * x + x).tanh(); };
  const std::vector<float> a = {0.5f, -1, 2, 0.25f, 3, -0.75f};
  const std::vector<float> b = {1, 2, -3, 0.125f, -0.5f, 4};

  const GraphCacheStats before = GetGraphCacheStats();
  const std::vector<float> first = f(TF<2>::from_vector(a, {2, 3}, device)).to_vector<float>();
  const GraphCacheStats after_first = GetGraphCacheStats();
  EXPECT_EQ(after_first.compiles, before.compiles + 1);
  EXPECT_EQ(after_first.hits, before.hits);

  const std::vector<float> second = f(TF<2>::from_vector(b, {2, 3}, device)).to_vector<float>();
  const GraphCacheStats after_second = GetGraphCacheStats();
  EXPECT_EQ(after_second.compiles, after_first.compiles);
  EXPECT_EQ(after_second.hits, after_first.hits + 1);
  EXPECT_EQ(after_second.entries, after_first.entries);

  ASSERT_EQ(first.size(), a.size());
  ASSERT_EQ(second.size(), b.size());
  // tanh runs as a polynomial accurate to 1.5 ulp (codegen/math_expand.h); the bound below is
  // a few ulp of values in (-1, 1).
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(first[i], std::tanh(double{a[i]} * a[i] + a[i]), 1e-6) << i;
    EXPECT_NEAR(second[i], std::tanh(double{b[i]} * b[i] + b[i]), 1e-6) << i;
  }
}

TEST(CpuCompileCacheTest, RankZeroTensorScalarChangesWithoutRecompiling) {
  const Cpu::Device device;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<float> g = {0.5f, -1, 2, 4, -8, 16};
  const auto step = [&](const TF<0>& lr) {
    const TF<2> weights = TF<2>::from_vector(w, {2, 3}, device);
    const TF<2> grads = TF<2>::from_vector(g, {2, 3}, device);
    return (weights - grads * lr.expand<2>({2, 3})).to_vector<float>();
  };
  int64_t compiles_after_first = -1;
  int64_t hits_after_first = -1;
  // Learning rates that are powers of two keep every product and difference exact.
  const float rates[] = {0.5f, 0.25f, 0.0625f};
  for (float rate : rates) {
    const std::vector<float> updated = step(TF<0>::from_data(rate, device));
    ASSERT_EQ(updated.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(updated[i], w[i] - g[i] * rate) << i;
    const GraphCacheStats stats = GetGraphCacheStats();
    if (compiles_after_first < 0) {
      compiles_after_first = stats.compiles;
      hits_after_first = stats.hits;
    }
    EXPECT_EQ(stats.compiles, compiles_after_first) << "learning rate " << rate;
  }
  EXPECT_EQ(GetGraphCacheStats().hits, hits_after_first + 2);

  // A literal scalar is part of the graph: each new value is a new structure.
  const TF<2> weights = TF<2>::from_vector(w, {2, 3}, device);
  const TF<2> grads = TF<2>::from_vector(g, {2, 3}, device);
  const int64_t before_literals = GetGraphCacheStats().compiles;
  const std::vector<float> half = (weights - grads * 0.5f).to_vector<float>();
  const std::vector<float> quarter = (weights - grads * 0.25f).to_vector<float>();
  EXPECT_EQ(GetGraphCacheStats().compiles, before_literals + 2);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(half[i], w[i] - g[i] * 0.5f) << i;
    EXPECT_EQ(quarter[i], w[i] - g[i] * 0.25f) << i;
  }
}

// Runs a compiled kernel on `inputs` (one per input arg), returning its outputs' bytes.
std::vector<ir::TensorData> RunKernel(const codegen::cpu::CompiledKernel& code,
                                      const codegen::Kernel& kernel,
                                      const std::vector<ir::TensorData>& inputs) {
  std::vector<ir::TensorData> buffers;
  std::vector<void*> args;
  size_t next_input = 0;
  for (const codegen::KernelArg& arg : kernel.args) {
    if (arg.role == codegen::ArgRole::kInput) {
      buffers.push_back(inputs[next_input++]);
    } else {
      buffers.push_back(ir::TensorData(arg.dtype, {arg.num_elements}));
    }
  }
  for (ir::TensorData& buffer : buffers) args.push_back(buffer.data());
  code.fn(args.data(), 0, kernel.parallel_extent);
  std::vector<ir::TensorData> outputs;
  for (size_t i = 0; i < kernel.args.size(); ++i) {
    if (kernel.args[i].role == codegen::ArgRole::kOutput) outputs.push_back(buffers[i]);
  }
  return outputs;
}

TEST(CpuCompileCacheTest, FreshCompilerLoadsKernelsFromTheDiskCache) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_cpu_cache_test_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  ASSERT_EQ(setenv("KILN_CACHE_DIR", dir.c_str(), 1), 0);

  // A softmax row kernel, lowered from a graph as the backend does.
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {4, 33}});
  const ir::NodeId e = b.Unary(
      ir::Op::kExp,
      b.Binary(ir::Op::kSub, x, b.Broadcast(b.Reduce(ir::Op::kReduceMax, x, {1}), {4, 33})));
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(b.Reduce(ir::Op::kReduceSum, e, {1}), {4, 33})));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const passes::FusionPlan plan = passes::Fuse(*graph);
  ASSERT_EQ(plan.groups.size(), 1u) << passes::PrintFusionPlan(*graph, plan);
  absl::StatusOr<codegen::Kernel> kernel = codegen::LowerGroup(*graph, plan.groups[0]);
  ASSERT_TRUE(kernel.ok()) << kernel.status();

  ir::TensorData input(ir::DType::kF32, {4 * 33});
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0, 3);
  for (int64_t i = 0; i < input.num_elements(); ++i) input.SetDouble(i, normal(rng));

  std::vector<ir::TensorData> compiled_outputs;
  {
    codegen::cpu::CpuCompiler first;
    EXPECT_EQ(first.cache_dir(), dir);
    absl::StatusOr<codegen::cpu::CompiledKernel> code = first.Compile(*kernel);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(code->source, codegen::cpu::CodeSource::kCompiled);
    EXPECT_EQ(first.stats().compiles, 1);
    EXPECT_EQ(first.stats().disk_writes, 1);
    compiled_outputs = RunKernel(*code, *kernel, {input});
  }
  // A new instance starts with an empty memory cache, like a new process.
  codegen::cpu::CpuCompiler second;
  absl::StatusOr<codegen::cpu::CompiledKernel> cached = second.Compile(*kernel);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->source, codegen::cpu::CodeSource::kDiskCache);
  const codegen::cpu::CompileStats stats = second.stats();
  EXPECT_EQ(stats.disk_hits, 1);
  EXPECT_EQ(stats.compiles, 0);
  const std::vector<ir::TensorData> cached_outputs = RunKernel(*cached, *kernel, {input});
  ASSERT_EQ(cached_outputs.size(), compiled_outputs.size());
  for (size_t i = 0; i < cached_outputs.size(); ++i) {
    EXPECT_TRUE(cached_outputs[i] == compiled_outputs[i]) << "output " << i;
  }
  // The rows of a softmax sum to 1 (a check that the kernel computed something real).
  for (int64_t row = 0; row < 4; ++row) {
    double sum = 0;
    for (int64_t j = 0; j < 33; ++j) sum += compiled_outputs[0].GetDouble(row * 33 + j);
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << row;
  }

  unsetenv("KILN_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
