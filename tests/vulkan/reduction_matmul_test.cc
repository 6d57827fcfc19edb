// The Vulkan backend's own shader forms against the reference interpreter: long-row reductions
// with subgroup arithmetic and with the workgroup-memory tree, blobs' portable reductions, and the
// tiled matmul reading transposed operands in place. (Every op case against the interpreter is the
// conformance suite's, tests/conformance/op_test.cc.) The device is opened once for the binary.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/vulkan/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Op;

// Long rows (one workgroup per row) of sum (f32, f64, i32, u8), max, min, argmax and argmin
// (f32, i32) with NaNs and ties, on
// the device with its subgroup arithmetic (lavapipe has it) and with it forced off (the
// workgroup-memory tree): both match the interpreter, argmax/argmin exactly (first index, NaN
// first). Prints the time of each form for docs/vulkan.md.
TEST(VulkanReductionTest, SubgroupAndSharedMemoryCombinesMatchTheInterpreter) {
  constexpr int64_t kRows = 16, kCols = 8192;
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {DType::kF32, {kRows, kCols}});
  const ir::NodeId n = b.Parameter("n", {DType::kI32, {kRows, kCols}});
  b.Output(b.Reduce(Op::kReduceSum, x, {1}));
  b.Output(b.Reduce(Op::kReduceMax, x, {1}));
  b.Output(b.Reduce(Op::kReduceMin, x, {1}));
  b.Output(b.ArgReduce(Op::kArgMax, x, 1));
  b.Output(b.ArgReduce(Op::kArgMin, x, 1));
  b.Output(b.ArgReduce(Op::kArgMax, n, 1));
  b.Output(b.ArgReduce(Op::kArgMin, n, 1));
  b.Output(b.Reduce(Op::kReduceSum, n, {1}));
  b.Output(b.Reduce(Op::kReduceMax, n, {1}));
  // u8 sums wrap modulo 256; f64 sums go through subgroupAdd on doubles too.
  b.Output(b.Reduce(Op::kReduceSum, b.Cast(n, DType::kU8), {1}));
  b.Output(b.Reduce(Op::kReduceSum, b.Cast(x, DType::kF64), {1}));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::mt19937_64 rng(11);
  ir::TensorData xs = test::RandomTensor(graph->node(graph->Parameters()[0]).type, rng);
  ir::TensorData ns = test::RandomTensor(graph->node(graph->Parameters()[1]).type, rng);
  float* xf = reinterpret_cast<float*>(xs.data());
  int32_t* ni = reinterpret_cast<int32_t*>(ns.data());
  for (int64_t r = 0; r < kRows; ++r) {
    float* row = xf + r * kCols;
    int32_t* irow = ni + r * kCols;
    for (int64_t c = 0; c < kCols; ++c) irow[c] = static_cast<int32_t>(rng() % 50) - 25;
    // Ties of the extreme in several invocations and subgroups (row r: at r*37+5 and later).
    const int64_t first = (r * 37 + 5) % kCols;
    for (int64_t c = first; c < kCols; c += 613) {
      row[c] = 100.0f;
      irow[c] = 1000;
    }
    for (int64_t c = first + 7; c < kCols; c += 911) {
      row[c] = -100.0f;
      irow[c] = -1000;
    }
    if (r % 4 == 1) row[(r * 101) % kCols] = NAN;  // NaN wins argmax/argmin and max/min
    if (r % 4 == 2) {                              // two NaNs: the first wins
      row[kCols - 3] = NAN;
      row[(r * 53) % 4000] = -NAN;
    }
    if (r == 3) {  // all equal: index 0
      for (int64_t c = 0; c < kCols; ++c) row[c] = -INFINITY;
    }
  }
  absl::StatusOr<std::vector<ir::TensorData>> expected =
      ir::Interpret(*graph, std::vector<ir::TensorData>{xs, ns});
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::vector<std::shared_ptr<const ir::TensorData>> shared = {
      std::make_shared<const ir::TensorData>(xs), std::make_shared<const ir::TensorData>(ns)};
  absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
      codegen::vulkan::DeviceForIndex(0);
  ASSERT_TRUE(device.ok()) << device.status();
  for (bool subgroups : {false, true}) {
    runtime::vulkan::DeviceInfo info = (*device)->info();
    if (subgroups && !info.subgroup_arithmetic) continue;  // the device lacks them
    info.subgroup_arithmetic = subgroups;
    absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
        codegen::vulkan::CompileGraph(*graph, *device, info);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    bool any_subgroup = false;
    for (const std::string& glsl : (*compiled)->glsl) {
      any_subgroup |= glsl.find("subgroupAdd(") != std::string::npos;
    }
    EXPECT_EQ(any_subgroup, subgroups);
    absl::StatusOr<std::vector<ir::TensorData>> actual =
        codegen::vulkan::RunCompiledGraph(**compiled, shared);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ASSERT_EQ(actual->size(), expected->size());
    for (size_t i = 0; i < expected->size(); ++i) {
      // Sums of 8192 f32/f64 in another order; everything else is exact.
      const test::Tolerance tolerance = i == 0    ? test::Tolerance{1e-4, 1e-3}
                                        : i == 10 ? test::Tolerance{1e-12, 1e-9}
                                                  : test::Tolerance{0, 0};
      EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], tolerance))
          << "output " << i << " subgroups " << subgroups;
    }
    const auto start = std::chrono::steady_clock::now();
    constexpr int kRuns = 20;
    for (int run = 0; run < kRuns; ++run) {
      ASSERT_TRUE(codegen::vulkan::RunCompiledGraph(**compiled, shared).ok());
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        kRuns;
    std::printf("long rows [%lld, %lld], 11 reductions, %s: %.3f ms per run\n",
                static_cast<long long>(kRows), static_cast<long long>(kCols),
                subgroups ? "subgroup arithmetic" : "shared-memory tree", ms);
  }
}

// Blobs (codegen/aot) compile for PortableDeviceInfo(): no subgroup operations, so a blob needs
// no subgroup feature (its recorded features cover what its SPIR-V uses).
TEST(VulkanReductionTest, PortableBlobsKeepTheSharedMemoryTree) {
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {DType::kF32, {4, 4096}});
  b.Output(b.Reduce(Op::kReduceSum, x, {1}));
  b.Output(b.ArgReduce(Op::kArgMax, x, 1));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_FALSE(codegen::vulkan::PortableDeviceInfo().subgroup_arithmetic);
  absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
      codegen::vulkan::CompileSpec(*graph, codegen::vulkan::PortableDeviceInfo());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_FALSE((*compiled)->glsl.empty());
  for (const std::string& glsl : (*compiled)->glsl) {
    EXPECT_EQ(glsl.find("subgroup"), std::string::npos) << glsl;
    EXPECT_NE(glsl.find("barrier();"), std::string::npos) << glsl;  // the cooperative tree
  }
}

// Permutes of the last two axes feeding a matmul are not copied: the tiled matmul reads the
// sources with swapped strides (one dispatch in all), batched, with tile edges inside and
// outside the matrices.
TEST(VulkanMatmulTest, TransposedOperandsAreReadInPlace) {
  ir::Builder b;
  const ir::NodeId a = b.Parameter("a", {DType::kF32, {3, 70, 37}});  // a^T: [3, 37, 70]
  const ir::NodeId w = b.Parameter("w", {DType::kF32, {3, 65, 70}});  // w^T: [3, 70, 65]
  b.Output(b.MatMul(b.Permute(a, {0, 2, 1}), b.Permute(w, {0, 2, 1})));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<test::ReferenceRun> reference = test::RunReference(*graph, /*seed=*/5);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
      codegen::vulkan::DeviceForIndex(0);
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
      codegen::vulkan::CompileGraph(*graph, *device);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->spec.dispatches.size(), 1u);
  EXPECT_EQ((*compiled)->num_matmuls, 1);
  absl::StatusOr<std::vector<ir::TensorData>> actual =
      codegen::vulkan::RunCompiledGraph(**compiled, reference->arguments);
  ASSERT_TRUE(actual.ok()) << actual.status();
  // f32 sums of 70 products in another order than the interpreter's exact sum.
  EXPECT_TRUE(test::TensorsClose(reference->expected[0], (*actual)[0], {1e-5, 1e-5}));
}

}  // namespace
}  // namespace kiln
