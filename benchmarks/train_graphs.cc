#include "benchmarks/train_graphs.h"

#include <stdexcept>
#include <utility>

#include "ir/builder.h"

namespace kiln::bench {
namespace {

using ir::NodeId;
using ir::Op;

constexpr ir::DType kF32 = ir::DType::kF32;

class StepBuilder {
 public:
  ir::Builder b;
  TrainGraph result;

  NodeId Param(const std::string& name, ir::Shape shape) {
    result.parameter_names.push_back(name);
    return b.Parameter(name, {kF32, std::move(shape)});
  }
  const ir::Shape& Shape(NodeId id) const { return b.type(id).shape; }
  NodeId Fill(double value, NodeId like) { return b.Fill(value, {kF32, Shape(like)}); }
  NodeId Transpose(NodeId x) { return b.Permute(x, {1, 0}); }

  // x [N, in] @ W^T + b, W [out, in].
  NodeId Linear(NodeId x, NodeId w, NodeId bias) {
    const NodeId y = b.MatMul(x, Transpose(w));
    const int64_t out = Shape(w)[0];
    return b.Binary(Op::kAdd, y, b.Broadcast(b.Reshape(bias, {1, out}), Shape(y)));
  }
  NodeId Relu(NodeId x) { return b.Binary(Op::kMax, x, Fill(0.0, x)); }
  NodeId ReluGrad(NodeId pre, NodeId g) {
    return b.Select(b.Binary(Op::kGt, pre, Fill(0.0, pre)), g, Fill(0.0, g));
  }
  // Bias gradient: sum over `axes`, reshaped to the bias's shape.
  NodeId BiasGrad(NodeId dy, std::vector<int64_t> axes, int64_t size) {
    return b.Reshape(b.Reduce(Op::kReduceSum, dy, std::move(axes)), {size});
  }

  // Softmax cross-entropy of logits [N, C] against onehot [N, C]: returns (loss, dlogits).
  std::pair<NodeId, NodeId> CrossEntropy(NodeId logits, NodeId onehot) {
    const ir::Shape shape = Shape(logits);
    const double n = static_cast<double>(shape[0]);
    const NodeId max = b.Reduce(Op::kReduceMax, logits, {1});
    const NodeId shifted = b.Binary(Op::kSub, logits, b.Broadcast(max, shape));
    const NodeId e = b.Unary(Op::kExp, shifted);
    const NodeId sum = b.Reduce(Op::kReduceSum, e, {1});
    const NodeId log_probs =
        b.Binary(Op::kSub, shifted, b.Broadcast(b.Unary(Op::kLog, sum), shape));
    const NodeId picked = b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, log_probs, onehot), {0, 1});
    const NodeId loss = b.Reshape(b.Binary(Op::kMul, picked, Fill(-1.0 / n, picked)), {});
    const NodeId softmax = b.Binary(Op::kDiv, e, b.Broadcast(sum, shape));
    const NodeId dlogits =
        b.Binary(Op::kMul, b.Binary(Op::kSub, softmax, onehot), Fill(1.0 / n, logits));
    return {loss, dlogits};
  }

  // v' = momentum v + g; p' = p - lr v'. Appends both outputs and records which parameter
  // index they update.
  void Sgd(NodeId lr, NodeId p, int p_index, NodeId v, int v_index, NodeId g, double momentum) {
    const NodeId v_new = b.Binary(Op::kAdd, b.Binary(Op::kMul, v, Fill(momentum, v)), g);
    ir::Shape ones(Shape(p).size(), 1);
    const NodeId lr_b = b.Broadcast(b.Reshape(lr, ones), Shape(p));
    const NodeId p_new = b.Binary(Op::kSub, p, b.Binary(Op::kMul, lr_b, v_new));
    b.Output(p_new, "new." + result.parameter_names[p_index]);
    result.update_of_output.push_back(p_index);
    b.Output(v_new, "new." + result.parameter_names[v_index]);
    result.update_of_output.push_back(v_index);
  }

  TrainGraph Finish() && {
    absl::StatusOr<ir::Graph> graph = std::move(b).Build();
    if (!graph.ok()) throw std::runtime_error(std::string(graph.status().message()));
    result.graph = *std::move(graph);
    return std::move(result);
  }
};

struct Layer {
  NodeId w, b, vw, vb;
  int w_index, b_index, vw_index, vb_index;
};

Layer AddLayer(StepBuilder& s, const std::string& name, ir::Shape w_shape, bool with_velocity) {
  Layer l{};
  const int64_t out = w_shape[0];
  l.w_index = static_cast<int>(s.result.parameter_names.size());
  l.w = s.Param("W" + name, w_shape);
  l.b_index = l.w_index + 1;
  l.b = s.Param("b" + name, {out});
  if (with_velocity) {
    l.vw_index = l.w_index + 2;
    l.vw = s.Param("vW" + name, w_shape);
    l.vb_index = l.w_index + 3;
    l.vb = s.Param("vb" + name, {out});
  }
  return l;
}

}  // namespace

TrainGraph MlpTrainStep(int64_t batch, const std::vector<int64_t>& sizes, double momentum) {
  StepBuilder s;
  const NodeId x = s.Param("x", {batch, sizes[0]});
  const NodeId onehot = s.Param("onehot", {batch, sizes.back()});
  const NodeId lr = s.Param("lr", {});
  std::vector<Layer> layers;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layers.push_back(AddLayer(s, std::to_string(i + 1), {sizes[i + 1], sizes[i]}, true));
  }
  // Forward: keep each layer's input and pre-activation.
  std::vector<NodeId> inputs, pre;
  NodeId h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    inputs.push_back(h);
    pre.push_back(s.Linear(h, layers[i].w, layers[i].b));
    h = i + 1 < layers.size() ? s.Relu(pre.back()) : pre.back();
  }
  auto [loss, dy] = s.CrossEntropy(h, onehot);
  s.b.Output(loss, "loss");
  // Backward, last layer first.
  for (size_t i = layers.size(); i-- > 0;) {
    const Layer& l = layers[i];
    const NodeId dw = s.b.MatMul(s.Transpose(dy), inputs[i]);
    const NodeId db = s.BiasGrad(dy, {0}, s.Shape(l.w)[0]);
    if (i > 0) {
      const NodeId dx = s.b.MatMul(dy, l.w);
      s.Sgd(lr, l.w, l.w_index, l.vw, l.vw_index, dw, momentum);
      s.Sgd(lr, l.b, l.b_index, l.vb, l.vb_index, db, momentum);
      dy = s.ReluGrad(pre[i - 1], dx);
    } else {
      s.Sgd(lr, l.w, l.w_index, l.vw, l.vw_index, dw, momentum);
      s.Sgd(lr, l.b, l.b_index, l.vb, l.vb_index, db, momentum);
    }
  }
  return std::move(s).Finish();
}

TrainGraph MlpInference(int64_t batch, const std::vector<int64_t>& sizes) {
  StepBuilder s;
  const NodeId x = s.Param("x", {batch, sizes[0]});
  NodeId h = x;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const Layer l = AddLayer(s, std::to_string(i + 1), {sizes[i + 1], sizes[i]}, false);
    h = s.Linear(h, l.w, l.b);
    if (i + 2 < sizes.size()) h = s.Relu(h);
  }
  s.b.Output(h, "logits");
  return std::move(s).Finish();
}

namespace {

NodeId Conv(StepBuilder& s, NodeId x, NodeId w, int64_t pad = 0) {
  ir::Attrs attrs;
  attrs.low = {pad, pad};
  attrs.high = {pad, pad};
  return s.b.Conv(x, w, attrs);
}

NodeId ConvBias(StepBuilder& s, NodeId x, NodeId w, NodeId bias) {
  const NodeId y = Conv(s, x, w);
  const int64_t out = s.Shape(w)[0];
  return s.b.Binary(Op::kAdd, y, s.b.Broadcast(s.b.Reshape(bias, {1, out, 1, 1}), s.Shape(y)));
}

NodeId MaxPool2(StepBuilder& s, NodeId x) {
  ir::Attrs attrs;
  attrs.window = {1, 1, 2, 2};
  attrs.strides = {1, 1, 2, 2};
  return s.b.WindowReduce(Op::kWindowMax, x, attrs);
}

// [N, C, H, W] -> [N, C, 2H, 2W], each element repeated over its 2x2 window.
NodeId Upsample2(StepBuilder& s, NodeId x) {
  const ir::Shape sh = s.Shape(x);
  const NodeId r = s.b.Reshape(x, {sh[0], sh[1], sh[2], 1, sh[3], 1});
  const NodeId bc = s.b.Broadcast(r, {sh[0], sh[1], sh[2], 2, sh[3], 2});
  return s.b.Reshape(bc, {sh[0], sh[1], 2 * sh[2], 2 * sh[3]});
}

// Gradient of MaxPool2 at x (output `pooled`, incoming gradient g): routed to the elements equal
// to their window's max; rows/columns the pool dropped (odd sizes) get 0.
NodeId MaxPool2Grad(StepBuilder& s, NodeId x, NodeId pooled, NodeId g) {
  const ir::Shape sh = s.Shape(x);
  const ir::Shape ps = s.Shape(pooled);
  NodeId covered = x;
  if (sh[2] != 2 * ps[2] || sh[3] != 2 * ps[3]) {
    covered = s.b.Slice(x, {0, 0, 0, 0}, {sh[0], sh[1], 2 * ps[2], 2 * ps[3]});
  }
  const NodeId mask = s.b.Binary(Op::kEq, covered, Upsample2(s, pooled));
  NodeId dx = s.b.Select(mask, Upsample2(s, g), s.Fill(0.0, covered));
  if (covered != x) {
    dx = s.b.Pad(dx, {0, 0, 0, 0}, {0, 0, sh[2] - 2 * ps[2], sh[3] - 2 * ps[3]});
  }
  return dx;
}

NodeId Permute0213(StepBuilder& s, NodeId x) { return s.b.Permute(x, {1, 0, 2, 3}); }

}  // namespace

TrainGraph CnnTrainStep(int64_t batch, double momentum) {
  StepBuilder s;
  const NodeId x = s.Param("x", {batch, 1, 28, 28});
  const NodeId onehot = s.Param("onehot", {batch, 10});
  const NodeId lr = s.Param("lr", {});
  const Layer c1 = AddLayer(s, "c1", {32, 1, 3, 3}, true);
  const Layer c2 = AddLayer(s, "c2", {64, 32, 3, 3}, true);
  const Layer f1 = AddLayer(s, "f1", {128, 1600}, true);
  const Layer f2 = AddLayer(s, "f2", {10, 128}, true);

  const NodeId y1 = ConvBias(s, x, c1.w, c1.b);  // [N,32,26,26]
  const NodeId a1 = s.Relu(y1);
  const NodeId p1 = MaxPool2(s, a1);              // [N,32,13,13]
  const NodeId y2 = ConvBias(s, p1, c2.w, c2.b);  // [N,64,11,11]
  const NodeId a2 = s.Relu(y2);
  const NodeId p2 = MaxPool2(s, a2);  // [N,64,5,5]
  const NodeId flat = s.b.Reshape(p2, {batch, 1600});
  const NodeId y3 = s.Linear(flat, f1.w, f1.b);
  const NodeId a3 = s.Relu(y3);
  const NodeId logits = s.Linear(a3, f2.w, f2.b);
  auto [loss, dlogits] = s.CrossEntropy(logits, onehot);
  s.b.Output(loss, "loss");

  // f2
  const NodeId dwf2 = s.b.MatMul(s.Transpose(dlogits), a3);
  const NodeId dbf2 = s.BiasGrad(dlogits, {0}, 10);
  const NodeId da3 = s.b.MatMul(dlogits, f2.w);
  s.Sgd(lr, f2.w, f2.w_index, f2.vw, f2.vw_index, dwf2, momentum);
  s.Sgd(lr, f2.b, f2.b_index, f2.vb, f2.vb_index, dbf2, momentum);
  // f1
  const NodeId dy3 = s.ReluGrad(y3, da3);
  const NodeId dwf1 = s.b.MatMul(s.Transpose(dy3), flat);
  const NodeId dbf1 = s.BiasGrad(dy3, {0}, 128);
  const NodeId dflat = s.b.MatMul(dy3, f1.w);
  s.Sgd(lr, f1.w, f1.w_index, f1.vw, f1.vw_index, dwf1, momentum);
  s.Sgd(lr, f1.b, f1.b_index, f1.vb, f1.vb_index, dbf1, momentum);
  // pool 2, relu 2, conv 2
  const NodeId dp2 = s.b.Reshape(dflat, s.Shape(p2));
  const NodeId dy2 = s.ReluGrad(y2, MaxPool2Grad(s, a2, p2, dp2));
  const NodeId dwc2 = Permute0213(s, Conv(s, Permute0213(s, p1), Permute0213(s, dy2)));
  const NodeId dbc2 = s.BiasGrad(dy2, {0, 2, 3}, 64);
  const NodeId dp1 =
      Conv(s, dy2, Permute0213(s, s.b.Flip(c2.w, {2, 3})), /*pad=*/2);  // [N,32,13,13]
  s.Sgd(lr, c2.w, c2.w_index, c2.vw, c2.vw_index, dwc2, momentum);
  s.Sgd(lr, c2.b, c2.b_index, c2.vb, c2.vb_index, dbc2, momentum);
  // pool 1, relu 1, conv 1 (no input gradient)
  const NodeId dy1 = s.ReluGrad(y1, MaxPool2Grad(s, a1, p1, dp1));
  const NodeId dwc1 = Permute0213(s, Conv(s, Permute0213(s, x), Permute0213(s, dy1)));
  const NodeId dbc1 = s.BiasGrad(dy1, {0, 2, 3}, 32);
  s.Sgd(lr, c1.w, c1.w_index, c1.vw, c1.vw_index, dwc1, momentum);
  s.Sgd(lr, c1.b, c1.b_index, c1.vb, c1.vb_index, dbc1, momentum);
  return std::move(s).Finish();
}

}  // namespace kiln::bench
