// passes::Fuse on the patterns the frontend produces: each test checks the printed plan (groups,
// kinds, decisions and reasons), and that the fused kernels still compute what the interpreter
// computes.
#include "passes/fusion.h"

#include <cmath>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "tests/codegen/pipeline.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;
using ::testing::HasSubstr;
using ::testing::Not;

ir::Graph Build(ir::Builder& b) {
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : ir::Graph();
}

// Runs the graph through the lowering and compares with the interpreter on random arguments.
void ExpectMatchesInterpreter(const ir::Graph& graph, test::Tolerance tolerance = {1e-5, 1e-6},
                              test::PipelineOptions options = {}) {
  std::mt19937_64 rng(7);
  std::vector<ir::TensorData> args;
  for (NodeId p : graph.Parameters()) args.push_back(test::RandomTensor(graph.node(p).type, rng));
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<test::PipelineResult> actual = test::RunLowered(graph, args, options);
  ASSERT_TRUE(actual.ok()) << actual.status();
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], actual->outputs[i], tolerance))
        << "output " << i;
  }
}

// Reduce statements anywhere in a kernel (nested ones mean a reduction recomputed per element).
int CountReduces(const std::vector<codegen::Stmt>& block, int* nested, int depth = 0) {
  int count = 0;
  for (const codegen::Stmt& stmt : block) {
    if (stmt.kind == codegen::StmtKind::kReduce) {
      ++count;
      if (depth > 0) ++*nested;
    }
    count += CountReduces(stmt.body, nested, depth + 1);
  }
  return count;
}

// The softmax the frontend writes: max, subtract, exp, sum, divide, all with broadcasts.
NodeId Softmax(ir::Builder& b, NodeId x) {
  const ir::Shape shape = b.type(x).shape;
  const int64_t last = static_cast<int64_t>(shape.size()) - 1;
  const NodeId max = b.Reduce(Op::kReduceMax, x, {last});
  const NodeId shifted = b.Binary(Op::kSub, x, b.Broadcast(max, shape));
  const NodeId e = b.Unary(Op::kExp, shifted);
  const NodeId sum = b.Reduce(Op::kReduceSum, e, {last});
  return b.Binary(Op::kDiv, e, b.Broadcast(sum, shape));
}

TEST(FusionTest, SoftmaxIsOneReductionKernel) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {4, 8}});
  b.Output(Softmax(b, x), "y");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  ASSERT_EQ(plan.groups.size(), 1u) << text;
  EXPECT_EQ(plan.groups[0].kind, passes::FusionKind::kReduction);
  EXPECT_EQ(plan.groups[0].outer_shape, (ir::Shape{4, 1}));
  EXPECT_EQ(plan.groups[0].inputs, (std::vector<NodeId>{x}));
  EXPECT_THAT(text, HasSubstr("group 0 reduction outer=[4,1] root=%7"));
  EXPECT_THAT(text, HasSubstr("%5 reduce_sum -> %6 broadcast fused: reduction takes its "
                              "elementwise consumers"));
  EXPECT_THAT(text, HasSubstr("%1 reduce_max -> %2 broadcast fused: reduction with the same "
                              "outer shape [4,1]"));
  EXPECT_THAT(text, HasSubstr("%4 exp -> %5 reduce_sum fused: elementwise chain"));
  EXPECT_THAT(text, Not(HasSubstr("refused")));
  for (const passes::FusionDecision& d : plan.decisions) EXPECT_TRUE(d.fused) << d.reason;

  // The kernel computes each row's max and sum once (two Reduce statements at row level) and
  // the stores read the accumulators.
  std::mt19937_64 rng(1);
  std::vector<ir::TensorData> args = {test::RandomTensor(graph.node(x).type, rng)};
  absl::StatusOr<test::PipelineResult> run = test::RunLowered(graph, args);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->kernels.size(), 1u);
  int nested = 0;
  EXPECT_EQ(CountReduces(run->kernels[0].body, &nested), 2)
      << codegen::PrintKernel(run->kernels[0]);
  EXPECT_EQ(nested, 0) << codegen::PrintKernel(run->kernels[0]);
  EXPECT_EQ(run->kernels[0].parallel_extent, 4);
  ExpectMatchesInterpreter(graph);
}

TEST(FusionTest, LayerNormIsOneReductionKernel) {
  ir::Builder b;
  const ir::Shape shape = {6, 16};
  const NodeId x = b.Parameter("x", {DType::kF32, shape});
  const NodeId gamma = b.Parameter("gamma", {DType::kF32, {16}});
  const NodeId beta = b.Parameter("beta", {DType::kF32, {16}});
  const ir::TensorType row{DType::kF32, {6, 1}};
  const NodeId mean = b.Binary(Op::kDiv, b.Reduce(Op::kReduceSum, x, {1}), b.Fill(16, row));
  const NodeId centered = b.Binary(Op::kSub, x, b.Broadcast(mean, shape));
  const NodeId var =
      b.Binary(Op::kDiv, b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, centered, centered), {1}),
               b.Fill(16, row));
  const NodeId rstd = b.Unary(Op::kRsqrt, b.Binary(Op::kAdd, var, b.Fill(1e-5, row)));
  const NodeId normed = b.Binary(Op::kMul, centered, b.Broadcast(rstd, shape));
  const NodeId scaled = b.Binary(Op::kMul, normed, b.Broadcast(b.Reshape(gamma, {1, 16}), shape));
  b.Output(b.Binary(Op::kAdd, scaled, b.Broadcast(b.Reshape(beta, {1, 16}), shape)), "y");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  ASSERT_EQ(plan.groups.size(), 1u) << text;
  EXPECT_EQ(plan.groups[0].kind, passes::FusionKind::kReduction);
  EXPECT_EQ(plan.groups[0].inputs, (std::vector<NodeId>{x, gamma, beta}));
  EXPECT_THAT(text, Not(HasSubstr("refused")));

  std::mt19937_64 rng(2);
  std::vector<ir::TensorData> args;
  for (NodeId p : graph.Parameters()) args.push_back(test::RandomTensor(graph.node(p).type, rng));
  absl::StatusOr<test::PipelineResult> run = test::RunLowered(graph, args);
  ASSERT_TRUE(run.ok()) << run.status();
  int nested = 0;
  EXPECT_EQ(CountReduces(run->kernels[0].body, &nested), 2);
  EXPECT_EQ(nested, 0) << codegen::PrintKernel(run->kernels[0]);
  ExpectMatchesInterpreter(graph, {1e-4, 1e-5});
}

TEST(FusionTest, GeluChainIsOneFlatKernel) {
  ir::Builder b;
  const ir::TensorType type{DType::kF32, {3, 5}};
  const NodeId x = b.Parameter("x", type);
  const auto c = [&](double v) { return b.Fill(v, type); };
  const NodeId cube = b.Binary(Op::kMul, b.Binary(Op::kMul, x, x), x);
  const NodeId inner = b.Binary(Op::kMul, c(std::sqrt(2.0 / std::numbers::pi)),
                                b.Binary(Op::kAdd, x, b.Binary(Op::kMul, c(0.044715), cube)));
  const NodeId gelu = b.Binary(Op::kMul, b.Binary(Op::kMul, c(0.5), x),
                               b.Binary(Op::kAdd, c(1.0), b.Unary(Op::kTanh, inner)));
  b.Output(gelu, "y");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  ASSERT_EQ(plan.groups.size(), 1u) << text;
  EXPECT_EQ(plan.groups[0].kind, passes::FusionKind::kElementwise);
  EXPECT_EQ(plan.groups[0].inputs, (std::vector<NodeId>{x}));  // The fills are immediates.
  EXPECT_THAT(text, Not(HasSubstr("refused")));
  std::mt19937_64 rng(3);
  std::vector<ir::TensorData> args = {test::RandomTensor(type, rng)};
  absl::StatusOr<test::PipelineResult> run = test::RunLowered(graph, args);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->kernels[0].parallel_extent, 15);  // Flat: one gid per element.
  ExpectMatchesInterpreter(graph);
}

TEST(FusionTest, MatMulTakesBiasAndReluAsEpilogue) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {4, 3}});
  const NodeId w = b.Parameter("w", {DType::kF32, {3, 5}});
  const NodeId bias = b.Parameter("b", {DType::kF32, {5}});
  const NodeId mm = b.MatMul(b.Unary(Op::kTanh, x), w);
  const NodeId biased = b.Binary(Op::kAdd, mm, b.Broadcast(b.Reshape(bias, {1, 5}), {4, 5}));
  const NodeId relu = b.Binary(Op::kMax, biased, b.Fill(0, {DType::kF32, {4, 5}}));
  b.Output(relu, "y");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  ASSERT_EQ(plan.groups.size(), 2u) << text;
  const passes::FusionGroup& gemm = plan.groups[1];
  EXPECT_EQ(gemm.kind, passes::FusionKind::kContraction);
  EXPECT_EQ(gemm.root, mm);
  EXPECT_EQ(gemm.outputs, (std::vector<NodeId>{relu}));
  EXPECT_THAT(text, HasSubstr("%4 matmul -> %7 add fused: elementwise epilogue of the matmul"));
  EXPECT_THAT(text, HasSubstr("%6 broadcast -> %7 add fused: movement becomes index arithmetic"));
  EXPECT_THAT(text, HasSubstr("%3 tanh -> %4 matmul refused: consumer is a matmul operand: "
                              "needs a materialized buffer"));
  ExpectMatchesInterpreter(graph, {1e-5, 1e-5});
  ExpectMatchesInterpreter(graph, {1e-5, 1e-5}, {.use_epilogue = true});
}

TEST(FusionTest, LogSoftmaxWithNllTakesTwoKernels) {
  ir::Builder b;
  const ir::Shape shape = {4, 6};
  const NodeId x = b.Parameter("x", {DType::kF32, shape});
  const NodeId target = b.Parameter("target", {DType::kI64, {4, 1}});
  const NodeId max = b.Reduce(Op::kReduceMax, x, {1});
  const NodeId shifted = b.Binary(Op::kSub, x, b.Broadcast(max, shape));
  const NodeId lse = b.Unary(Op::kLog, b.Reduce(Op::kReduceSum, b.Unary(Op::kExp, shifted), {1}));
  const NodeId log_softmax = b.Binary(Op::kSub, shifted, b.Broadcast(lse, shape));
  const NodeId picked = b.Gather(log_softmax, target, 1);
  const NodeId nll = b.Unary(Op::kNeg, b.Reduce(Op::kReduceSum, picked, {0, 1}));
  b.Output(nll, "loss");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  ASSERT_EQ(plan.groups.size(), 2u) << text;
  EXPECT_EQ(plan.groups[0].kind, passes::FusionKind::kReduction);
  EXPECT_EQ(plan.groups[0].outer_shape, (ir::Shape{4, 1}));
  EXPECT_EQ(plan.groups[1].outer_shape, (ir::Shape{1, 1}));
  EXPECT_THAT(text, HasSubstr("refused: reduction outer shapes differ ([4,1] vs [1,1])"));
  EXPECT_THAT(text, HasSubstr("refused: producer has users outside the group"));
  EXPECT_THAT(text, HasSubstr("merged into the consumer's (same iteration space: rows [4,1])"));

  std::mt19937_64 rng(4);
  std::vector<ir::TensorData> args = {
      test::RandomTensor(graph.node(x).type, rng),
      ir::TensorData::FromVector<int64_t>(DType::kI64, {4, 1}, std::vector<int64_t>{0, 5, 2, 3})};
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, args);
  ASSERT_TRUE(expected.ok());
  absl::StatusOr<test::PipelineResult> actual = test::RunLowered(graph, args);
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_TRUE(test::TensorsClose((*expected)[0], actual->outputs[0], {1e-5, 1e-5}));

  // An out-of-range target is reported like the interpreter reports it.
  args[1].SetInt64(2, 6);
  EXPECT_FALSE(ir::Interpret(graph, args).ok());
  absl::StatusOr<test::PipelineResult> bad = test::RunLowered(graph, args);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("%10 = gather ("));
  EXPECT_THAT(bad.status().message(), HasSubstr("index out of range for axis 1 of size 6"));
  EXPECT_THAT(bad.status().message(), HasSubstr("(index 6)"));
}

TEST(FusionTest, RefusalsCarryReasons) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {4, 8}});
  const NodeId e = b.Unary(Op::kExp, x);
  // Two reductions with different outer shapes both read e.
  b.Output(b.Reduce(Op::kReduceSum, e, {0}), "cols");
  b.Output(b.Reduce(Op::kReduceSum, e, {1}), "rows");
  // A window of a window would recompute the inner one per window position.
  ir::Attrs window;
  window.window = {2, 2};
  const NodeId pooled = b.WindowReduce(Op::kWindowMax, x, window);
  b.Output(b.WindowReduce(Op::kWindowSum, pooled, window), "pool2");
  // A gather whose consumer reads only some of its elements keeps its own kernel so that every
  // index is checked.
  const NodeId index = b.Parameter("i", {DType::kI64, {4, 2}});
  b.Output(b.Slice(b.Gather(x, index, 1), {0, 0}, {2, 2}), "picked");
  const ir::Graph graph = Build(b);
  const std::string text = passes::PrintFusionPlan(graph, passes::Fuse(graph));
  EXPECT_THAT(text, HasSubstr("%1 exp -> %2 reduce_sum refused: producer has users outside the "
                              "group (%3)"));
  EXPECT_THAT(text, HasSubstr("%4 window_max -> %5 window_sum refused: producer would be "
                              "recomputed for each window position"));
  EXPECT_THAT(text, HasSubstr("%7 gather -> %8 slice refused: gather's index checks must see "
                              "every element"));
  // Both reductions read e's buffer: they are siblings but their rows differ, so they stay apart.
  EXPECT_THAT(text, Not(HasSubstr("sibling of %2")));
  std::mt19937_64 rng(5);
  std::vector<ir::TensorData> args = {test::RandomTensor(graph.node(x).type, rng),
                                      ir::TensorData(DType::kI64, {4, 2})};
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<test::PipelineResult> actual = test::RunLowered(graph, args);
  ASSERT_TRUE(actual.ok()) << actual.status();
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], actual->outputs[i], {1e-5, 1e-5}));
  }
}

// sort/argsort are kScatter groups: movement producers (the frontend's descending flip) become
// index arithmetic of the rank count; an elementwise producer keeps its own kernel (it would be
// recomputed once per comparison), and a consumer never fuses into the sort.
TEST(FusionTest, SortTakesMovementProducersOnly) {
  ir::Builder b;
  ir::Attrs along;
  along.axes = {1};
  const NodeId x = b.Parameter("x", {DType::kF32, {3, 6}});
  const NodeId flipped = b.Flip(x, {1});
  const NodeId sorted = b.Emit(Op::kSort, {flipped}, along);
  b.Output(b.Flip(sorted, {1}), "descending");
  b.Output(b.Emit(Op::kArgsort, {b.Unary(Op::kExp, x)}, along), "order");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  EXPECT_THAT(text, HasSubstr("%1 flip -> %2 sort fused: movement becomes index arithmetic of "
                              "the sort"));
  EXPECT_THAT(text, HasSubstr("%2 sort -> %3 flip refused: sort does not fuse into its consumers"));
  EXPECT_THAT(text, HasSubstr("%4 exp -> %5 argsort refused: sort fuses only movement producers "
                              "(exp would be recomputed per comparison)"));
  for (const passes::FusionGroup& group : plan.groups) {
    const ir::Op root = graph.node(group.root).op;
    if (root == Op::kSort || root == Op::kArgsort) {
      EXPECT_EQ(group.kind, passes::FusionKind::kScatter) << text;
    }
  }
  ExpectMatchesInterpreter(graph, {0, 0});
}

TEST(FusionTest, SiblingsShareAKernel) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {5, 7}});
  const NodeId y = b.Parameter("y", {DType::kF32, {5, 7}});
  const NodeId s = b.Binary(Op::kAdd, x, y);  // Materialized: two groups read it.
  b.Output(s, "s");
  b.Output(b.Reduce(Op::kReduceMax, b.Unary(Op::kExp, x), {1}), "max");
  b.Output(b.Reduce(Op::kReduceSum, b.Unary(Op::kTanh, x), {1}), "sum");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  const std::string text = passes::PrintFusionPlan(graph, plan);
  EXPECT_THAT(text, HasSubstr("one multi-output kernel")) << text;
  // Everything reads x and has 5 rows of 7: one kernel.
  EXPECT_EQ(plan.groups.size(), 1u) << text;
  ExpectMatchesInterpreter(graph);
}

// A column sum (a bias gradient) of values that another kernel also reads: a long chain gets its
// own kernel (computed once, all elements in parallel) rather than being evaluated twice in the
// reduction's kernel; a short one is still recomputed there.
TEST(FusionTest, LongChainWithOtherUsersIsNotDuplicatedIntoAReduction) {
  for (const int ops : {2, 12}) {
    ir::Builder b;
    const NodeId x = b.Parameter("x", {DType::kF32, {6, 8}});
    NodeId g = x;
    for (int i = 0; i < ops; ++i) g = b.Unary(i % 2 == 0 ? Op::kTanh : Op::kExp, g);
    const NodeId sum = b.Reduce(Op::kReduceSum, g, {0});
    b.Output(sum, "column_sum");
    b.Output(b.Permute(g, {1, 0}), "transposed");
    const ir::Graph graph = Build(b);
    const passes::FusionPlan plan = passes::Fuse(graph);
    const std::string text = passes::PrintFusionPlan(graph, plan);
    const int32_t chain_group = plan.group_of[static_cast<size_t>(g)];
    const int32_t sum_group = plan.group_of[static_cast<size_t>(sum)];
    if (ops > 8) {
      EXPECT_NE(chain_group, sum_group) << text;
      EXPECT_EQ(plan.groups[static_cast<size_t>(chain_group)].kind,
                passes::FusionKind::kElementwise)
          << text;
    } else {
      EXPECT_EQ(chain_group, sum_group) << text;
    }
    ExpectMatchesInterpreter(graph);
  }
}

TEST(FusionTest, ParameterOutputGetsACopyGroup) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {3}});
  b.Output(x, "same");
  b.Output(b.Permute(b.Reshape(x, {3, 1}), {1, 0}), "moved");
  const ir::Graph graph = Build(b);
  const passes::FusionPlan plan = passes::Fuse(graph);
  ASSERT_EQ(plan.groups.size(), 2u) << passes::PrintFusionPlan(graph, plan);
  EXPECT_EQ(plan.groups[0].kind, passes::FusionKind::kCopy);  // Movement only.
  EXPECT_EQ(plan.groups[1].kind, passes::FusionKind::kCopy);  // The parameter itself.
  EXPECT_TRUE(plan.groups[1].nodes.empty());
  EXPECT_EQ(plan.groups[1].outputs, (std::vector<NodeId>{x}));
  ExpectMatchesInterpreter(graph);
}

}  // namespace
}  // namespace kiln
