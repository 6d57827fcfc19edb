// Every IR op, compiled by the CPU backend (simplify → fuse → lower → LLVM JIT or GEMM → memory
// plan → executable) and run with codegen::cpu::CompileAndRun, matches the reference interpreter
// on the cases of tests/codegen/op_cases.h (shared with the kernel-evaluator lowering test). A
// coverage test checks that the cases use every op in ir::kAllOps.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "tests/codegen/op_cases.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Op;

// The JIT rewrites f32 exp/log/tanh/erf (and the sigmoid pattern) into polynomial expansions
// whose documented maximum error (codegen/math_expand.h, measured over every f32 input by
// tests/codegen/cpu/math_expand_test.cc) against the correctly rounded result is 1.0 ulp (exp,
// log), 1.5 ulp (tanh, erf) and 2.5 ulp (sigmoid), where the interpreter rounds once. One f32 ulp
// is at most 2^-23 of the value, and 2^-149 absolute for subnormal results. f16 and bf16 compute
// in f32 and round on store; their case tolerances (one unit of their own last place) already
// cover a one-f32-ulp difference before that rounding. f64 keeps libm: no widening.
//
// Sum and product reductions may be reassociated by the vectoriser (codegen/kernel_ir.h: "in an
// unspecified order"; codegen/cpu/emitter.h: `reassoc` on reductions), so an f64 reduction is no
// longer bit-exact: reordering n terms changes a sum by at most (n - 1) 2^-53 sum|x_i| and a
// product by (n - 1) 2^-53 of its value. The cases reduce at most 24 values of |x| < ~5, which
// gives the 1e-12 below. (f32 reductions already have an accumulation tolerance.)
test::Tolerance CpuTolerance(const test::Case& c, const ir::Graph& graph) {
  double ulps = 0;
  bool has_exp = false, has_reciprocal = false, f64_reduction = false;
  for (const ir::Node& node : graph.nodes()) {
    if (node.type.dtype == DType::kF64) {
      f64_reduction |= node.op == Op::kReduceSum || node.op == Op::kReduceProd;
      continue;
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
  if (ulps > 0) {
    tolerance.rtol = std::max(tolerance.rtol, ulps * std::ldexp(1.0, -23));
    tolerance.atol = std::max(tolerance.atol, ulps * std::ldexp(1.0, -149));
  }
  return tolerance;
}

class CpuOpTest : public ::testing::TestWithParam<test::Case> {};

TEST_P(CpuOpTest, MatchesInterpreter) {
  const test::Case& c = GetParam();
  absl::StatusOr<test::CaseInstance> instance = test::Instantiate(c);
  ASSERT_TRUE(instance.ok()) << instance.status();
  const ir::Graph& graph = instance->graph;
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, instance->arguments);
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::vector<std::shared_ptr<const ir::TensorData>> arguments;
  for (const ir::TensorData& arg : instance->arguments) {
    arguments.push_back(std::make_shared<const ir::TensorData>(arg));
  }
  absl::StatusOr<std::vector<ir::TensorData>> actual =
      codegen::cpu::CompileAndRun(graph, arguments);
  ASSERT_TRUE(actual.ok()) << actual.status() << "\n" << ir::PrintGraph(graph);
  ASSERT_EQ(actual->size(), expected->size());
  const test::Tolerance tolerance = CpuTolerance(c, graph);
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], tolerance))
        << "output " << i << "\n"
        << ir::PrintGraph(graph);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CpuOpTest, ::testing::ValuesIn(test::Cases()), test::CaseTestName);

TEST(CpuOpCoverageTest, EveryOpHasACase) {
  for (Op op : test::OpsWithoutCase()) ADD_FAILURE() << ir::OpName(op) << " has no case";
}

// Fuse recomputes leaves (fill, iota, random_*) in each group that reads them; a matmul or conv
// operand that is such a leaf still needs a buffer of its own for the GEMM.
TEST(CpuGemmTest, LeafOperandsAreMaterialized) {
  ir::Builder b;
  const ir::NodeId random = b.RandomUniform({DType::kF32, {1, 2, 3}}, 7);
  const ir::NodeId iota = b.Iota({DType::kF32, {1, 3, 4}}, 1);
  const ir::NodeId x = b.Parameter("x", {DType::kF32, {1, 3, 4}});
  b.Output(b.MatMul(random, x));
  b.Output(b.MatMul(random, iota));
  ir::Attrs conv_attrs;
  b.Output(b.Conv(b.Parameter("image", {DType::kF64, {1, 2, 5}}),
                  b.Fill(0.5, {DType::kF64, {3, 2, 2}}), conv_attrs));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::mt19937_64 rng(3);
  std::vector<ir::TensorData> args;
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (ir::NodeId p : graph->Parameters()) {
    args.push_back(test::RandomTensor(graph->node(p).type, rng));
    shared.push_back(std::make_shared<const ir::TensorData>(args.back()));
  }
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(*graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
      codegen::cpu::CompileGraph(*graph);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->num_gemm_steps, 3);
  absl::StatusOr<std::vector<ir::TensorData>> actual =
      codegen::cpu::RunCompiledGraph(**compiled, shared);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->size(), 3u);
  // Sums of three and of four products, accumulated in f32 (f64 for the conv).
  const test::Tolerance tolerances[] = {{1e-6, 1e-6}, {1e-6, 1e-6}, {1e-14, 1e-14}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], tolerances[i])) << "output " << i;
  }
}

}  // namespace
}  // namespace kiln
