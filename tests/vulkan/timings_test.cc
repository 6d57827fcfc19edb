// Timings of a few graphs on kiln::Vulkan (here Mesa's lavapipe, which runs shaders on the CPU)
// beside the CPU backend, for docs/vulkan.md. Prints medians of 5 runs after a warm-up run (which
// compiles); checks the two backends agree, so it is also a test of larger shapes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/graph_compiler.h"
#include "codegen/vulkan/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;
using Args = std::vector<std::shared_ptr<const ir::TensorData>>;
using Runner =
    std::function<absl::StatusOr<std::vector<ir::TensorData>>(const ir::Graph&, const Args&)>;

double MedianMs(const Runner& run, const ir::Graph& graph, const Args& args,
                std::vector<ir::TensorData>* result) {
  absl::StatusOr<std::vector<ir::TensorData>> first = run(graph, args);  // compiles
  EXPECT_TRUE(first.ok()) << first.status();
  if (!first.ok()) return 0;
  *result = *std::move(first);
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<ir::TensorData>> out = run(graph, args);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    EXPECT_TRUE(out.ok());
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

void Time(const std::string& name, const std::function<void(ir::Builder&)>& build, double rtol,
          double atol) {
  ir::Builder b;
  build(b);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  Args args;
  std::mt19937_64 rng(1);
  for (ir::NodeId p : graph->Parameters()) {
    args.push_back(
        std::make_shared<const ir::TensorData>(test::RandomTensor(graph->node(p).type, rng)));
  }
  std::vector<ir::TensorData> cpu_out, vk_out;
  const double cpu =
      MedianMs([](const ir::Graph& g, const Args& a) { return codegen::cpu::CompileAndRun(g, a); },
               *graph, args, &cpu_out);
  const double vk = MedianMs(
      [](const ir::Graph& g, const Args& a) { return codegen::vulkan::CompileAndRun(g, a); },
      *graph, args, &vk_out);
  std::printf("%-34s Cpu %8.2f ms   Vulkan %8.2f ms\n", name.c_str(), cpu, vk);
  ASSERT_EQ(cpu_out.size(), vk_out.size());
  for (size_t i = 0; i < cpu_out.size(); ++i) {
    EXPECT_TRUE(test::TensorsClose(cpu_out[i], vk_out[i], {rtol, atol})) << name;
  }
}

// Both backends sum in f32 in different orders: a dot product of n terms may differ by up to
// n 2^-24 sum |a_i b_i| (about 1e-2 for n = 784 and these values); 1e-3 absolute is far above the
// typical difference (~3e-5 seen) and far below a wrong result.
TEST(VulkanTimings, CommonGraphs) {
  Time(
      "add f32[1M]",
      [](ir::Builder& b) {
        const ir::TensorType t{DType::kF32, {1 << 20}};
        b.Output(b.Binary(ir::Op::kAdd, b.Parameter("x", t), b.Parameter("y", t)));
      },
      0, 0);
  Time(
      "softmax f32[256,1000] (rows)",
      [](ir::Builder& b) {
        const ir::NodeId x = b.Parameter("x", {DType::kF32, {256, 1000}});
        const ir::NodeId max = b.Reduce(ir::Op::kReduceMax, x, {1});
        const ir::NodeId e =
            b.Unary(ir::Op::kExp, b.Binary(ir::Op::kSub, x, b.Broadcast(max, {256, 1000})));
        b.Output(b.Binary(ir::Op::kDiv, e,
                          b.Broadcast(b.Reduce(ir::Op::kReduceSum, e, {1}), {256, 1000})));
      },
      1e-5, 1e-7);
  Time(
      "reduce_sum f32[1M] -> [1]",
      [](ir::Builder& b) {
        b.Output(b.Reduce(ir::Op::kReduceSum, b.Parameter("x", {DType::kF32, {1 << 20}}), {0}));
      },
      1e-4, 1e-2);
  Time(
      "matmul f32[256,256]x[256,256]",
      [](ir::Builder& b) {
        const ir::TensorType t{DType::kF32, {256, 256}};
        b.Output(b.MatMul(b.Parameter("a", t), b.Parameter("b", t)));
      },
      1e-5, 1e-3);
  Time(
      "matmul f32[128,784]x[784,512]",
      [](ir::Builder& b) {
        b.Output(b.MatMul(b.Parameter("a", {DType::kF32, {128, 784}}),
                          b.Parameter("b", {DType::kF32, {784, 512}})));
      },
      1e-5, 1e-3);
}

// Long-row reductions with the device's subgroup arithmetic and with the workgroup-memory tree
// only (DeviceInfo::subgroup_arithmetic = false): medians of 9 runs of each compiled graph
// (docs/vulkan.md), the two forms agreeing.
void TimeCombines(const std::string& name, const std::function<void(ir::Builder&)>& build,
                  double rtol, double atol) {
  ir::Builder b;
  build(b);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  Args args;
  std::mt19937_64 rng(1);
  for (ir::NodeId p : graph->Parameters()) {
    args.push_back(
        std::make_shared<const ir::TensorData>(test::RandomTensor(graph->node(p).type, rng)));
  }
  absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
      codegen::vulkan::DeviceForIndex(0);
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<std::vector<ir::TensorData>> outs;
  std::string line = name;
  for (bool subgroups : {false, true}) {
    runtime::vulkan::DeviceInfo info = (*device)->info();
    if (subgroups && !info.subgroup_arithmetic) continue;
    info.subgroup_arithmetic = subgroups;
    absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
        codegen::vulkan::CompileGraph(*graph, *device, info);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    absl::StatusOr<std::vector<ir::TensorData>> out =
        codegen::vulkan::RunCompiledGraph(**compiled, args);  // warm-up
    ASSERT_TRUE(out.ok()) << out.status();
    outs.push_back(*std::move(out));
    std::vector<double> ms;
    for (int i = 0; i < 9; ++i) {
      const auto start = std::chrono::steady_clock::now();
      EXPECT_TRUE(codegen::vulkan::RunCompiledGraph(**compiled, args).ok());
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    line += absl::StrCat(subgroups ? "   subgroups " : "   shared-memory tree ", ms[4], " ms");
  }
  std::printf("%s\n", line.c_str());
  for (size_t f = 1; f < outs.size(); ++f) {
    ASSERT_EQ(outs[f].size(), outs[0].size());
    for (size_t i = 0; i < outs[0].size(); ++i) {
      EXPECT_TRUE(test::TensorsClose(outs[0][i], outs[f][i], {rtol, atol})) << name;
    }
  }
}

TEST(VulkanTimings, ReductionCombines) {
  for (int64_t cols : {1000, 65536}) {
    const int64_t rows = cols == 1000 ? 256 : 16;
    TimeCombines(
        absl::StrCat("softmax f32[", rows, ",", cols, "] (rows)"),
        [&](ir::Builder& b) {
          const ir::NodeId x = b.Parameter("x", {DType::kF32, {rows, cols}});
          const ir::NodeId max = b.Reduce(ir::Op::kReduceMax, x, {1});
          const ir::NodeId e =
              b.Unary(ir::Op::kExp, b.Binary(ir::Op::kSub, x, b.Broadcast(max, {rows, cols})));
          b.Output(b.Binary(ir::Op::kDiv, e,
                            b.Broadcast(b.Reduce(ir::Op::kReduceSum, e, {1}), {rows, cols})));
        },
        1e-5, 1e-7);
  }
  TimeCombines(
      "reduce_sum f32[1M] -> [1]",
      [](ir::Builder& b) {
        b.Output(b.Reduce(ir::Op::kReduceSum, b.Parameter("x", {DType::kF32, {1 << 20}}), {0}));
      },
      1e-4, 1e-2);
  TimeCombines(
      "reduce_sum f32[64,16384] (rows)",
      [](ir::Builder& b) {
        b.Output(b.Reduce(ir::Op::kReduceSum, b.Parameter("x", {DType::kF32, {64, 16384}}), {1}));
      },
      1e-4, 1e-3);
}

}  // namespace
}  // namespace kiln
