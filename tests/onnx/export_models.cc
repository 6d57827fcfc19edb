#include "tests/onnx/export_models.h"

#include <random>
#include <string>
#include <utility>

#include "ir/builder.h"
#include "tests/codegen/random_graph.h"

namespace kiln::test {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;

// y = x + broadcast(reshape(b)) for a bias b over axis `axis` of x.
NodeId AddBias(ir::Builder& b, NodeId x, NodeId bias, int64_t axis) {
  ir::Shape shape(b.type(x).shape.size(), 1);
  shape[static_cast<size_t>(axis)] = b.type(bias).shape[0];
  return b.Binary(Op::kAdd, x, b.Broadcast(b.Reshape(bias, shape), b.type(x).shape));
}

NodeId Relu(ir::Builder& b, NodeId x) { return b.Binary(Op::kMax, x, b.Fill(0, b.type(x))); }

// softmax over the last axis, as the frontend composes it.
NodeId Softmax(ir::Builder& b, NodeId x) {
  const ir::TensorType t = b.type(x);
  const int64_t last = t.rank() - 1;
  const NodeId m = b.Broadcast(b.Reduce(Op::kReduceMax, x, {last}), t.shape);
  const NodeId e = b.Unary(Op::kExp, b.Binary(Op::kSub, x, m));
  const NodeId s = b.Broadcast(b.Reduce(Op::kReduceSum, e, {last}), t.shape);
  return b.Binary(Op::kDiv, e, s);
}

ExportModel Finish(std::string name, ir::Builder&& b) {
  ExportModel m{std::move(name), *std::move(b).Build(), {}, {}};
  std::mt19937_64 rng(7);
  for (NodeId p : m.graph.Parameters()) {
    const ir::Node& n = m.graph.node(p);
    m.arguments.push_back(RandomTensor(n.type, rng));
    if (n.attrs.name != "x") m.weights[n.attrs.name] = m.arguments.back();
  }
  return m;
}

// cast(clamp(round(x / scale), 0, 255), u8): an int8 layer's input quantization.
NodeId QuantizeU8(ir::Builder& b, NodeId x, double scale) {
  const ir::TensorType t = b.type(x);
  NodeId q = b.Unary(Op::kRound, b.Binary(Op::kDiv, x, b.Fill(scale, t)));
  q = b.Binary(Op::kMin, b.Binary(Op::kMax, q, b.Fill(0, t)), b.Fill(255, t));
  return b.Cast(q, DType::kU8);
}

// An int8 Linear (frontend/quant/int8_layer.h): u8 input x i8 weight [out, in] -> i32, scaled
// per output column to f32, plus the bias.
NodeId Int8Linear(ir::Builder& b, NodeId xq, const std::string& name, int64_t in, int64_t out) {
  const NodeId w = b.Parameter(name + ".int8.weight", {DType::kI8, {out, in}});
  const NodeId acc = b.IntegerMatMul(xq, b.Permute(w, {1, 0}), DType::kI32);
  const NodeId scale = b.Parameter(name + ".int8.dequant_scale", {DType::kF32, {out}});
  const ir::Shape shape = b.type(acc).shape;
  NodeId y =
      b.Binary(Op::kMul, b.Cast(acc, DType::kF32), b.Broadcast(b.Reshape(scale, {1, out}), shape));
  return AddBias(b, y, b.Parameter(name + ".bias", {DType::kF32, {out}}), 1);
}

}  // namespace

std::vector<ExportModel> ExportModels() {
  std::vector<ExportModel> models;
  {
    // What kiln::quant::quantize makes of a two-layer MLP: MatMulInteger in ONNX.
    ir::Builder b;
    const NodeId x = b.Parameter("x", {DType::kF32, {4, 8}});
    NodeId h = Relu(b, Int8Linear(b, QuantizeU8(b, x, 0.02), "fc1", 8, 16));
    b.Output(Int8Linear(b, QuantizeU8(b, h, 0.5), "fc2", 16, 3), "logits");
    models.push_back(Finish("quantized_mlp", std::move(b)));
  }
  {
    ir::Builder b;
    const NodeId x = b.Parameter("x", {DType::kF32, {4, 8}});
    NodeId h = b.MatMul(x, b.Parameter("fc1.weight", {DType::kF32, {8, 16}}));
    h = Relu(b, AddBias(b, h, b.Parameter("fc1.bias", {DType::kF32, {16}}), 1));
    h = b.MatMul(h, b.Parameter("fc2.weight", {DType::kF32, {16, 3}}));
    h = AddBias(b, h, b.Parameter("fc2.bias", {DType::kF32, {3}}), 1);
    b.Output(Softmax(b, h), "probs");
    models.push_back(Finish("mlp", std::move(b)));
  }
  {
    ir::Builder b;
    const NodeId x = b.Parameter("x", {DType::kF32, {2, 3, 8, 8}});
    ir::Attrs conv;
    conv.low = {1, 1};
    conv.high = {1, 1};
    NodeId h = b.Conv(x, b.Parameter("conv.weight", {DType::kF32, {4, 3, 3, 3}}), conv);
    h = Relu(b, AddBias(b, h, b.Parameter("conv.bias", {DType::kF32, {4}}), 1));
    ir::Attrs pool;
    pool.window = {1, 1, 2, 2};
    pool.strides = {1, 1, 2, 2};
    h = b.WindowReduce(Op::kWindowMax, h, pool);
    h = b.Reshape(h, {2, 4 * 4 * 4});
    h = b.MatMul(h, b.Parameter("fc.weight", {DType::kF32, {64, 5}}));
    b.Output(AddBias(b, h, b.Parameter("fc.bias", {DType::kF32, {5}}), 1), "logits");
    b.Output(b.ArgReduce(Op::kArgMax, h, 1), "class");
    models.push_back(Finish("conv_net", std::move(b)));
  }
  {
    // layer_norm(x) * gamma + beta over the last axis (eps 1e-5), then GELU (erf form).
    ir::Builder b;
    const ir::TensorType t{DType::kF32, {3, 10}};
    const NodeId x = b.Parameter("x", t);
    const NodeId n = b.Fill(10, t);
    const NodeId mean =
        b.Binary(Op::kDiv, b.Broadcast(b.Reduce(Op::kReduceSum, x, {1}), t.shape), n);
    const NodeId c = b.Binary(Op::kSub, x, mean);
    const NodeId var = b.Binary(
        Op::kDiv, b.Broadcast(b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, c, c), {1}), t.shape), n);
    const NodeId inv = b.Unary(Op::kRsqrt, b.Binary(Op::kAdd, var, b.Fill(1e-5, t)));
    NodeId y = b.Binary(Op::kMul, c, inv);
    const NodeId gamma = b.Parameter("ln.weight", {DType::kF32, {10}});
    const NodeId beta = b.Parameter("ln.bias", {DType::kF32, {10}});
    y = b.Binary(Op::kMul, y, b.Broadcast(b.Reshape(gamma, {1, 10}), t.shape));
    y = AddBias(b, y, beta, 1);
    const NodeId erf = b.Unary(Op::kErf, b.Binary(Op::kMul, y, b.Fill(0.7071067811865476, t)));
    const NodeId gelu = b.Binary(Op::kMul, b.Binary(Op::kMul, y, b.Fill(0.5, t)),
                                 b.Binary(Op::kAdd, erf, b.Fill(1, t)));
    b.Output(gelu, "y");
    b.Output(Softmax(b, gelu));
    models.push_back(Finish("layer_norm", std::move(b)));
  }
  return models;
}

}  // namespace kiln::test
