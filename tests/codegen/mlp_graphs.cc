#include "tests/codegen/mlp_graphs.h"

#include "gtest/gtest.h"
#include "ir/builder.h"
#include "tests/codegen/random_graph.h"

namespace kiln::test {
namespace {

ir::TensorType F32(ir::Shape shape) { return ir::TensorType{ir::DType::kF32, std::move(shape)}; }

}  // namespace

MlpCase ConstantMlp(int64_t batch) {
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", F32({batch, 784}));
  const int64_t sizes[] = {784, 128, 64, 10};
  for (int l = 0; l < 3; ++l) {
    ir::NodeId w = b.Constant(RandomTensor(F32({sizes[l], sizes[l + 1]}), 10 + l));
    ir::NodeId bias = b.Constant(RandomTensor(F32({sizes[l + 1]}), 20 + l));
    x = b.Binary(ir::Op::kAdd, b.MatMul(x, w),
                 b.Broadcast(b.Reshape(bias, {1, sizes[l + 1]}), {batch, sizes[l + 1]}));
    if (l < 2) x = b.Binary(ir::Op::kMax, x, b.Fill(0.0, F32({batch, sizes[l + 1]})));
  }
  ir::NodeId m = b.Reduce(ir::Op::kReduceMax, x, {1});
  ir::NodeId e = b.Unary(
      ir::Op::kExp, b.Binary(ir::Op::kSub, x, b.Broadcast(b.Reshape(m, {batch, 1}), {batch, 10})));
  ir::NodeId s = b.Reduce(ir::Op::kReduceSum, e, {1});
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(b.Reshape(s, {batch, 1}), {batch, 10})), "probs");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  EXPECT_TRUE(g.ok()) << g.status();
  return MlpCase{*std::move(g), {RandomTensor(F32({batch, 784}), 1)}, {}};
}

MlpCase WeightBoundMlp(int64_t batch) {
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", F32({batch, 64}));
  ir::NodeId w1 = b.Parameter("w1", F32({64, 96}));
  ir::NodeId b1 = b.Parameter("b1", F32({96}));
  ir::NodeId w2 = b.Parameter("w2", F32({96, 10}));
  ir::NodeId h =
      b.Binary(ir::Op::kAdd, b.MatMul(x, w1), b.Broadcast(b.Reshape(b1, {1, 96}), {batch, 96}));
  h = b.Binary(ir::Op::kMax, h, b.Fill(0.0, F32({batch, 96})));
  ir::NodeId logits = b.MatMul(h, w2);
  ir::NodeId m = b.Reduce(ir::Op::kReduceMax, logits, {1});
  ir::NodeId e =
      b.Unary(ir::Op::kExp,
              b.Binary(ir::Op::kSub, logits, b.Broadcast(b.Reshape(m, {batch, 1}), {batch, 10})));
  ir::NodeId s = b.Reduce(ir::Op::kReduceSum, e, {1});
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(b.Reshape(s, {batch, 1}), {batch, 10})), "probs");
  b.Output(logits, "logits");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  EXPECT_TRUE(g.ok()) << g.status();
  MlpCase c{*std::move(g), {RandomTensor(F32({batch, 64}), 1)}, {}};
  uint64_t seed = 2;
  for (const char* name : {"w1", "b1", "w2"}) {
    const ir::TensorType& type = c.graph.node(c.graph.FindParameter(name)).type;
    c.weights.emplace_back(name, std::make_shared<ir::TensorData>(RandomTensor(type, seed++)));
  }
  return c;
}

std::vector<ir::TensorData> AllArguments(const ir::Graph& graph,
                                         const std::vector<ir::TensorData>& inputs,
                                         const NamedWeights& weights) {
  std::vector<ir::TensorData> args;
  size_t next_input = 0;
  for (ir::NodeId p : graph.Parameters()) {
    const std::string& name = graph.node(p).attrs.name;
    bool bound = false;
    for (const auto& [weight, value] : weights) {
      if (weight == name) {
        args.push_back(*value);
        bound = true;
      }
    }
    if (!bound) args.push_back(inputs.at(next_input++));
  }
  return args;
}

}  // namespace kiln::test
