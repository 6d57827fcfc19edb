// Every IR op, compiled by the Vulkan backend (simplify → fuse → lower → GLSL → SPIR-V, or the
// tiled matmul → memory plan → VulkanExecutableSpec) and run on the machine's Vulkan device
// (lavapipe in CI), matches the reference interpreter on the cases of tests/codegen/op_cases.h,
// the same rows the CPU backend runs. The device is opened once for the whole binary.
#include <algorithm>
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
#include "ir/printer.h"
#include "tests/codegen/op_cases.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Op;

// Tolerances beyond the case's own (which assume f32 accumulation), each from a documented
// bound:
//  - f32 exp/log/tanh/erf/sigmoid use ExpandMath's polynomials (codegen/math_expand.h: 1.0 ulp
//    exp/log, 1.5 ulp tanh/erf, 2.5 ulp sigmoid), as on the CPU backend.
//  - f32 sin, cos and pow are GLSL built-ins; Vulkan only promises them to 2^-11 absolute on
//    [-pi, pi] (sin/cos) and to the error of exp2(y * log2(x)) (pow). lavapipe compiles them with
//    LLVM's f32 routines; we allow 4 ulp relative plus 2^-21 absolute for sin/cos (cancellation
//    near their zeros) and 8 ulp for pow.
//  - f64 exp, log, sin, cos, tanh, erf and pow (GLSL has none) are kiln's own reductions,
//    polynomials and series (codegen/vulkan/glsl.cc): we allow 4 f64 ulps (16 for pow, which is
//    exp(b log a) and loses |b log a| ulps), plus 2^-50 absolute for sin/cos and
//    random_normal's Box-Muller (cancellation near the zeros of cos).
//  - f32 division and sqrt are correctly rounded on lavapipe (LLVM fdiv/sqrt); no widening.
//  - Sums and products accumulate in a different order (tiled matmul, workgroup reductions):
//    for f64, (n - 1) 2^-53 sum |x| with n <= 24 and |x| < ~5 gives 1e-12.
test::Tolerance VulkanTolerance(const test::Case& c, const ir::Graph& graph) {
  double ulps = 0, atol = 0;
  bool has_exp = false, has_reciprocal = false, f64_reduction = false;
  double f64_ulps = 0, f64_atol = 0;
  for (const ir::Node& node : graph.nodes()) {
    // random_normal computes Box-Muller in f64 (log, cos) for every float dtype.
    if (node.type.dtype == DType::kF64 || node.op == Op::kRandomNormal) {
      f64_reduction |= node.op == Op::kReduceSum || node.op == Op::kReduceProd ||
                       node.op == Op::kMatMul || node.op == Op::kConv;
      switch (node.op) {
        case Op::kExp:
        case Op::kLog:
        case Op::kTanh:
        case Op::kErf:
          f64_ulps = std::max(f64_ulps, 4.0);
          break;
        case Op::kPow:
          f64_ulps = std::max(f64_ulps, 16.0);
          break;
        case Op::kSin:
        case Op::kCos:
        case Op::kRandomNormal:
          f64_ulps = std::max(f64_ulps, 4.0);
          f64_atol = std::max(f64_atol, std::ldexp(1.0, -50));
          break;
        default:
          break;
      }
      if (node.type.dtype == DType::kF64) continue;
    }
    switch (node.op) {
      case Op::kExp:
        has_exp = true;
        [[fallthrough]];
      case Op::kLog:
        ulps = std::max(ulps, 1.0);
        break;
      case Op::kTanh:
      case Op::kErf:
        ulps = std::max(ulps, 1.5);
        break;
      case Op::kSin:
      case Op::kCos:
        ulps = std::max(ulps, 4.0);
        atol = std::max(atol, std::ldexp(1.0, -21));
        break;
      case Op::kPow:
        ulps = std::max(ulps, 8.0);
        break;
      case Op::kReciprocal:
        has_reciprocal = true;
        break;
      default:
        break;
    }
  }
  if (has_exp && has_reciprocal) ulps = std::max(ulps, 2.5);
  test::Tolerance tolerance = c.tolerance;
  if (f64_reduction) {
    tolerance.rtol = std::max(tolerance.rtol, 1e-12);
    tolerance.atol = std::max(tolerance.atol, 1e-12);
  }
  if (f64_ulps > 0) {
    tolerance.rtol = std::max(tolerance.rtol, f64_ulps * std::ldexp(1.0, -52));
    tolerance.atol = std::max(tolerance.atol, f64_atol);
  }
  if (ulps > 0) {
    tolerance.rtol = std::max(tolerance.rtol, ulps * std::ldexp(1.0, -23));
    tolerance.atol = std::max(tolerance.atol, std::max(atol, ulps * std::ldexp(1.0, -149)));
  }
  return tolerance;
}

class VulkanOpTest : public ::testing::TestWithParam<test::Case> {};

TEST_P(VulkanOpTest, MatchesInterpreter) {
  const test::Case& c = GetParam();
  absl::StatusOr<test::CaseInstance> instance = test::Instantiate(c);
  ASSERT_TRUE(instance.ok()) << instance.status();
  const ir::Graph& graph = instance->graph;
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, instance->arguments);
  std::vector<std::shared_ptr<const ir::TensorData>> arguments;
  for (const ir::TensorData& arg : instance->arguments) {
    arguments.push_back(std::make_shared<const ir::TensorData>(arg));
  }
  absl::StatusOr<std::vector<ir::TensorData>> actual =
      codegen::vulkan::CompileAndRun(graph, arguments);
  if (!expected.ok()) {
    // The interpreter rejects the arguments (an out-of-range index): so must the device.
    ASSERT_FALSE(actual.ok()) << "expected an error like: " << expected.status();
    return;
  }
  ASSERT_TRUE(actual.ok()) << actual.status() << "\n" << ir::PrintGraph(graph);
  ASSERT_EQ(actual->size(), expected->size());
  const test::Tolerance tolerance = VulkanTolerance(c, graph);
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], tolerance))
        << "output " << i << "\n"
        << ir::PrintGraph(graph);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, VulkanOpTest, ::testing::ValuesIn(test::Cases()),
                         test::CaseTestName);

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
  std::mt19937_64 rng(5);
  std::vector<ir::TensorData> args;
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (ir::NodeId p : graph->Parameters()) {
    args.push_back(test::RandomTensor(graph->node(p).type, rng));
    shared.push_back(std::make_shared<const ir::TensorData>(args.back()));
  }
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(*graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
      codegen::vulkan::DeviceForIndex(0);
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
      codegen::vulkan::CompileGraph(*graph, *device);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->spec.dispatches.size(), 1u);
  EXPECT_EQ((*compiled)->num_matmuls, 1);
  absl::StatusOr<std::vector<ir::TensorData>> actual =
      codegen::vulkan::RunCompiledGraph(**compiled, shared);
  ASSERT_TRUE(actual.ok()) << actual.status();
  // f32 sums of 70 products in another order than the interpreter's exact sum.
  EXPECT_TRUE(test::TensorsClose((*expected)[0], (*actual)[0], {1e-5, 1e-5}));
}

TEST(VulkanOpCoverageTest, EveryOpHasACase) {
  for (Op op : test::OpsWithoutCase()) ADD_FAILURE() << ir::OpName(op) << " has no case";
}

}  // namespace
}  // namespace kiln
