// Gradient graphs (passes::GradientPass) compile and run on the CPU backend: each f32 graph's
// loss and gradients from codegen::cpu::CompileAndRun match the reference interpreter on the
// same graph. The gradients use the patterns the rules produce (transposed and weight convs
// with input dilation and sliced negative padding, interleaving reshape/pad/slice chains,
// window_max's per-offset masks, scatter_add into zeros, matmuls of permuted operands).
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;
using ir::TensorData;

constexpr DType kF32 = DType::kF32;

struct GradGraph {
  std::string name;
  // Builds a function of f32 parameters and returns its (any-shaped) result y.
  std::function<NodeId(ir::Builder&)> build;
};

void PrintTo(const GradGraph& c, std::ostream* os) { *os << c.name; }

ir::Attrs ConvAttrs(std::vector<int64_t> strides, std::vector<int64_t> low,
                    std::vector<int64_t> high, std::vector<int64_t> dilation,
                    std::vector<int64_t> input_dilation, int64_t groups) {
  ir::Attrs a;
  a.strides = std::move(strides);
  a.low = std::move(low);
  a.high = std::move(high);
  a.dilation = std::move(dilation);
  a.input_dilation = std::move(input_dilation);
  a.groups = groups;
  return a;
}

ir::Attrs WindowAttrs(std::vector<int64_t> window, std::vector<int64_t> strides,
                      std::vector<int64_t> low, std::vector<int64_t> high) {
  ir::Attrs a;
  a.window = std::move(window);
  a.strides = std::move(strides);
  a.low = std::move(low);
  a.high = std::move(high);
  return a;
}

std::vector<GradGraph> Graphs() {
  return {
      {"conv stride pad dilation groups",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {2, 4, 9, 8}});
         const NodeId w = b.Parameter("w", {kF32, {6, 2, 3, 2}});
         return b.Conv(x, w, ConvAttrs({2, 2}, {1, 2}, {2, 0}, {2, 1}, {}, 2));
       }},
      {"conv input_dilation wide padding",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {1, 2, 4, 3}});
         const NodeId w = b.Parameter("w", {kF32, {3, 2, 2, 2}});
         return b.Conv(x, w, ConvAttrs({1, 2}, {3, 1}, {1, 3}, {1, 1}, {2, 3}, 1));
       }},
      {"conv net with pooling",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {2, 1, 8, 8}});
         const NodeId w = b.Parameter("w", {kF32, {4, 1, 3, 3}});
         const NodeId c = b.Conv(x, w, ConvAttrs({}, {1, 1}, {1, 1}, {}, {}, 1));
         const NodeId r = b.Binary(Op::kMax, c, b.Fill(0.0, b.type(c)));
         return b.WindowReduce(Op::kWindowMax, r, WindowAttrs({1, 1, 2, 2}, {1, 1, 2, 2}, {}, {}));
       }},
      {"window_max overlapping padded",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {2, 3, 7, 6}});
         return b.WindowReduce(Op::kWindowMax, x,
                               WindowAttrs({1, 1, 3, 3}, {1, 1, 2, 2}, {0, 0, 1, 1}, {0, 0, 1, 1}));
       }},
      // max_pool2d 2x2 stride 2 (the split-axes rule) where rows 2k and 2k+1 are equal, so every
      // window has tied maxima and only the first may take the gradient.
      {"window_max tiled ties",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {2, 3, 3, 1, 8}});
         const NodeId rows = b.Reshape(b.Broadcast(x, {2, 3, 3, 2, 8}), {2, 3, 6, 8});
         return b.WindowReduce(Op::kWindowMax, rows,
                               WindowAttrs({1, 1, 2, 2}, {1, 1, 2, 2}, {}, {}));
       }},
      // max_pool2d 2x2 on 5 x 7 (the CNN's 11 x 11 case): the last row and column get no
      // gradient; the split-axes rule runs on the covered part and pads.
      {"window_max tiled remainder",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {2, 3, 5, 7}});
         return b.WindowReduce(Op::kWindowMax, x, WindowAttrs({1, 1, 2, 2}, {1, 1, 2, 2}, {}, {}));
       }},
      {"window_sum strided",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {2, 7, 6}});
         return b.WindowReduce(Op::kWindowSum, x,
                               WindowAttrs({1, 3, 2}, {1, 2, 2}, {0, 1, 0}, {0, 2, 1}));
       }},
      {"mlp batched matmul",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {3, 4, 5}});
         const NodeId w1 = b.Parameter("w1", {kF32, {3, 5, 6}});
         const NodeId w2 = b.Parameter("w2", {kF32, {3, 6, 2}});
         const NodeId h = b.Unary(Op::kTanh, b.MatMul(x, w1));
         return b.MatMul(h, w2);
       }},
      {"strided slice gather scatter_add",
       [](ir::Builder& b) {
         const NodeId x = b.Parameter("x", {kF32, {7, 6}});
         const NodeId s = b.Slice(x, {1, 0}, {7, 5}, {2, 2});  // [3, 3]
         const NodeId index = b.Constant(TensorData::FromVector(
             DType::kI64, {3, 3}, std::vector<int64_t>{2, 0, 2, 1, 1, 0, 0, 2, 2}));
         const NodeId gathered = b.Gather(s, index, 0);
         return b.ScatterAdd(s, index, b.Unary(Op::kSin, gathered), 1);
       }},
  };
}

// sum(w * y) with random w, as one element: output 0 of the graph, the pass's loss.
NodeId WeightedSum(ir::Builder& b, NodeId y, std::mt19937_64& rng) {
  const ir::TensorType type = b.type(y);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  TensorData w(type.dtype, type.shape);
  for (int64_t i = 0; i < w.num_elements(); ++i) w.SetDouble(i, unit(rng));
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < type.rank(); ++i) axes.push_back(i);
  return b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, y, b.Constant(std::move(w))), axes);
}

class AutodiffCpuTest : public ::testing::TestWithParam<GradGraph> {};

TEST_P(AutodiffCpuTest, GradientGraphMatchesInterpreter) {
  const GradGraph& c = GetParam();
  std::mt19937_64 rng(std::hash<std::string>()(c.name));
  ir::Builder b;
  const NodeId y = c.build(b);
  b.Output(WeightedSum(b, y, rng), "loss");
  absl::StatusOr<ir::Graph> forward = std::move(b).Build();
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::GradientPass pass;
  absl::StatusOr<ir::Graph> graph = pass.Run(*forward);
  ASSERT_TRUE(graph.ok()) << graph.status();

  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<TensorData> args;
  std::vector<std::shared_ptr<const TensorData>> shared;
  for (NodeId p : graph->Parameters()) {
    TensorData t(graph->node(p).type.dtype, graph->node(p).type.shape);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.SetDouble(i, unit(rng));
    args.push_back(t);
    shared.push_back(std::make_shared<const TensorData>(std::move(t)));
  }
  absl::StatusOr<std::vector<TensorData>> expected = ir::Interpret(*graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::vector<TensorData>> actual = codegen::cpu::CompileAndRun(*graph, shared);
  ASSERT_TRUE(actual.ok()) << actual.status() << "\n" << ir::PrintGraph(*graph);
  ASSERT_EQ(actual->size(), expected->size());
  // f32 with f32 accumulation (GEMM, reductions) and the JIT's tanh expansion against the
  // interpreter's double accumulation rounded once.
  const test::Tolerance tolerance{1e-4, 1e-5};
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], tolerance))
        << c.name << ": output " << i << " (" << graph->outputs()[i].name << ")";
  }
}

// Gradients of gradients compile too: a Hessian-vector product of a conv + tanh + pooling net,
// d/dθ <dL/dθ, v>, whose graph differentiates the transposed and weight convolutions again.
TEST(AutodiffCpu, HessianVectorProductOfConvNet) {
  std::mt19937_64 rng(17);
  ir::Builder b;
  const NodeId x = b.Parameter("x", {kF32, {2, 2, 6, 5}});
  const NodeId w = b.Parameter("w", {kF32, {4, 1, 3, 2}});
  const NodeId c = b.Conv(x, w, ConvAttrs({2, 1}, {1, 0}, {1, 1}, {1, 2}, {}, 2));
  const NodeId pooled = b.WindowReduce(Op::kWindowSum, b.Unary(Op::kTanh, c),
                                       WindowAttrs({1, 1, 2, 2}, {1, 1, 1, 2}, {}, {}));
  const NodeId loss = WeightedSum(b, pooled, rng);
  absl::StatusOr<ir::Graph> forward = std::move(b).Build();
  ASSERT_TRUE(forward.ok()) << forward.status();
  const std::vector<NodeId> params = forward->Parameters();
  absl::StatusOr<passes::GradientGraph> first = passes::AppendGradients(*forward, loss, params);
  ASSERT_TRUE(first.ok()) << first.status();
  ir::Builder b2(first->graph);
  const NodeId z = b2.Binary(Op::kAdd, WeightedSum(b2, first->gradients[0], rng),
                             WeightedSum(b2, first->gradients[1], rng));
  absl::StatusOr<ir::Graph> with_z = std::move(b2).Build();
  ASSERT_TRUE(with_z.ok()) << with_z.status();
  absl::StatusOr<passes::GradientGraph> second = passes::AppendGradients(*with_z, z, params);
  ASSERT_TRUE(second.ok()) << second.status();
  ir::Graph graph = std::move(second->graph);
  graph.mutable_outputs().clear();
  graph.AddOutput(z, "z");
  for (NodeId g : second->gradients) graph.AddOutput(g);

  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<TensorData> args;
  std::vector<std::shared_ptr<const TensorData>> shared;
  for (NodeId p : graph.Parameters()) {
    TensorData t(graph.node(p).type.dtype, graph.node(p).type.shape);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.SetDouble(i, unit(rng));
    args.push_back(t);
    shared.push_back(std::make_shared<const TensorData>(std::move(t)));
  }
  absl::StatusOr<std::vector<TensorData>> expected = ir::Interpret(graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::vector<TensorData>> actual = codegen::cpu::CompileAndRun(graph, shared);
  ASSERT_TRUE(actual.ok()) << actual.status();
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], {1e-4, 1e-5})) << "output " << i;
  }
}

std::string Name(const ::testing::TestParamInfo<GradGraph>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Gradients, AutodiffCpuTest, ::testing::ValuesIn(Graphs()), Name);

}  // namespace
}  // namespace kiln
