// Every IR op, lowered through Fuse + LowerGroup and run by the kernel evaluator, matches the
// reference interpreter on the cases of tests/codegen/op_cases.h: several dtypes, shapes with
// broadcasts, size-1 and size-0 dims, and the attribute variants. A coverage test checks that the
// cases use every op in ir::kAllOps.
#include "codegen/lower.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "passes/fusion.h"
#include "tests/codegen/op_cases.h"
#include "tests/codegen/pipeline.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;

class LowerOpTest : public ::testing::TestWithParam<test::Case> {};

TEST_P(LowerOpTest, MatchesInterpreter) {
  const test::Case& c = GetParam();
  absl::StatusOr<test::CaseInstance> instance = test::Instantiate(c);
  ASSERT_TRUE(instance.ok()) << instance.status();
  const ir::Graph* graph = &instance->graph;
  const std::vector<ir::TensorData>& args = instance->arguments;
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(*graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (bool epilogue : {false, true}) {
    absl::StatusOr<test::PipelineResult> actual =
        test::RunLowered(*graph, args, {.use_epilogue = epilogue});
    ASSERT_TRUE(actual.ok()) << actual.status() << "\n" << ir::PrintGraph(*graph);
    std::string kernels;
    for (const codegen::Kernel& k : actual->kernels) kernels += codegen::PrintKernel(k);
    for (size_t i = 0; i < expected->size(); ++i) {
      EXPECT_TRUE(test::TensorsClose((*expected)[i], actual->outputs[i], c.tolerance))
          << "output " << i << (epilogue ? " (epilogue path)" : "") << "\n"
          << ir::PrintGraph(*graph) << kernels;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, LowerOpTest, ::testing::ValuesIn(test::Cases()),
                         test::CaseTestName);

TEST(LowerCoverageTest, EveryOpHasACase) {
  for (Op op : test::OpsWithoutCase()) ADD_FAILURE() << ir::OpName(op) << " has no case";
}

TEST(LowerTest, RowKernelShapeForBroadcastAlongLeadingAxes) {
  // x + broadcast(bias) runs rows of the last axis: the bias load uses the inner loop variable
  // directly (no division per element).
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {8, 16}});
  const NodeId bias = b.Parameter("bias", {DType::kF32, {1, 16}});
  b.Output(b.Binary(Op::kAdd, x, b.Broadcast(bias, {8, 16})));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const passes::FusionPlan plan = passes::Fuse(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  absl::StatusOr<codegen::Kernel> kernel = codegen::LowerGroup(*graph, plan.groups[0]);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->parallel_extent, 8);
  const std::string text = codegen::PrintKernel(*kernel);
  EXPECT_THAT(text, ::testing::HasSubstr("load.f32 arg1[i1]")) << text;
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("udiv"))) << text;
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("urem"))) << text;
}

// Runs a one-output-list graph through Fuse + LowerGroup + the kernel evaluator against the
// interpreter; returns the kernels' text.
std::string ExpectLoweredMatches(const ir::Graph& graph, const std::vector<ir::TensorData>& args,
                                 test::Tolerance tolerance) {
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, args);
  EXPECT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<test::PipelineResult> actual = test::RunLowered(graph, args, {});
  EXPECT_TRUE(actual.ok()) << actual.status();
  if (!expected.ok() || !actual.ok()) return "";
  std::string kernels;
  for (const codegen::Kernel& k : actual->kernels) kernels += codegen::PrintKernel(k);
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], actual->outputs[i], tolerance))
        << "output " << i << "\n"
        << kernels;
  }
  return kernels;
}

std::vector<ir::TensorData> RandomArgs(const ir::Graph& graph) {
  std::vector<ir::TensorData> args;
  int seed = 1;
  for (NodeId p : graph.Parameters()) {
    const ir::TensorType& type = graph.node(p).type;
    std::vector<double> values(static_cast<size_t>(type.num_elements()));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<double>((i * 37 + static_cast<size_t>(seed) * 11) % 23) / 7.0 - 1.5;
    }
    args.push_back(*ir::TensorData::FromDoubles(type.dtype, type.shape, values));
    ++seed;
  }
  return args;
}

TEST(LowerTest, SumOverAxesAroundAKeptOneNestsAContiguousInnerLoop) {
  // A bias gradient: [N, C, H, W] summed over N, H, W. The inner reduction runs over the
  // contiguous H * W with no division of its counter; the outer one over N.
  for (Op op : {Op::kReduceSum, Op::kReduceMax}) {
    ir::Builder b;
    const NodeId x = b.Parameter("x", {DType::kF32, {3, 4, 5, 6}});
    b.Output(b.Reduce(op, x, {0, 2, 3}));
    absl::StatusOr<ir::Graph> graph = std::move(b).Build();
    ASSERT_TRUE(graph.ok());
    const std::string text = ExpectLoweredMatches(*graph, RandomArgs(*graph), {1e-5, 1e-6});
    EXPECT_THAT(text, ::testing::HasSubstr("in [0, 3)")) << text;   // outer: N
    EXPECT_THAT(text, ::testing::HasSubstr("in [0, 30)")) << text;  // inner: H * W
    EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("udiv"))) << text;
  }
}

TEST(LowerTest, PermutedCopyOfAnOutputIsStoredNotRecomputed) {
  // y = exp(x) * 2 and permute(y) (autodiff's N/C-swapped gradient for a weight-gradient conv):
  // exp is evaluated once per element and stored at both places.
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {2, 3, 4, 5}});
  const NodeId y =
      b.Binary(Op::kMul, b.Unary(Op::kExp, x), b.Fill(2.0, {DType::kF32, {2, 3, 4, 5}}));
  b.Output(y);
  b.Output(b.Reshape(b.Permute(y, {1, 0, 2, 3}), {3, 2, 20}));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const passes::FusionPlan plan = passes::Fuse(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  const std::string text = ExpectLoweredMatches(*graph, RandomArgs(*graph), {1e-6, 1e-6});
  size_t exps = 0;
  for (size_t at = text.find("exp.f32"); at != std::string::npos;
       at = text.find("exp.f32", at + 1)) {
    ++exps;
  }
  EXPECT_EQ(exps, 1u) << text;
}

TEST(LowerTest, SortIsARankCountThenOneStoreAtTheRank) {
  // One gid per element: a Reduce sum over its fibre of 5 counts who sorts first (NaN found by
  // x != x), then one store at that rank; no statement kind a backend would need to add.
  ir::Builder b;
  ir::Attrs along;
  along.axes = {1};
  b.Output(b.Emit(Op::kSort, {b.Parameter("x", {DType::kF32, {4, 5}})}, along));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const std::string text = ExpectLoweredMatches(*graph, RandomArgs(*graph), {0, 0});
  EXPECT_THAT(text, ::testing::HasSubstr("parallel_extent=20")) << text;
  EXPECT_THAT(text, ::testing::HasSubstr("reduce sum.i64 r1 in [0, 5) init 0:i64")) << text;
  EXPECT_THAT(text, ::testing::HasSubstr("ne.bool")) << text;
  size_t stores = 0;
  for (size_t at = text.find("store "); at != std::string::npos; at = text.find("store ", at + 1)) {
    ++stores;
  }
  EXPECT_EQ(stores, 1u) << text;
}

TEST(LowerTest, EpilogueExposesCoordinatesAndTheContractionValue) {
  ir::Builder b;
  const NodeId a = b.Parameter("a", {DType::kF32, {2, 3}});
  const NodeId w = b.Parameter("w", {DType::kF32, {3, 4}});
  const NodeId bias = b.Parameter("bias", {DType::kF32, {4}});
  const NodeId mm = b.MatMul(a, w);
  const NodeId out = b.Binary(Op::kAdd, mm, b.Broadcast(b.Reshape(bias, {1, 4}), {2, 4}));
  b.Output(out);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const passes::FusionPlan plan = passes::Fuse(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  absl::StatusOr<codegen::Epilogue> epilogue = codegen::LowerEpilogue(*graph, plan.groups[0]);
  ASSERT_TRUE(epilogue.ok()) << epilogue.status();
  EXPECT_EQ(epilogue->contraction, mm);
  EXPECT_EQ(epilogue->coords.size(), 2u);
  EXPECT_EQ(epilogue->coords[0], codegen::kGid);
  EXPECT_EQ(epilogue->outputs, (std::vector<NodeId>{out}));
  const codegen::Kernel& k = epilogue->kernel;
  // Args: the matmul result, then the bias (not a or w), then the output.
  ASSERT_EQ(k.args.size(), 3u);
  EXPECT_EQ(k.args[0].node, mm);
  EXPECT_EQ(k.args[1].node, bias);
  EXPECT_EQ(k.args[2].role, codegen::ArgRole::kOutput);
  EXPECT_EQ(k.expr(epilogue->contraction_value).op, codegen::ExprOp::kLoad);
  EXPECT_EQ(k.expr(epilogue->output_values[0]).op, codegen::ExprOp::kAdd);
  EXPECT_EQ(k.parallel_extent, 2);
  EXPECT_FALSE(codegen::LowerEpilogue(*graph, passes::FusionGroup{}).ok());
}

}  // namespace
}  // namespace kiln
