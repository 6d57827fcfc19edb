// Activations, composed from primitives so that autodiff and fusion need no rules for them.
#include <cmath>
#include <numbers>

#include "frontend/amp/autocast.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

// Small builders that keep the formulas below readable; every node records `name`.
class Composer {
 public:
  Composer(const char* name, const Loc& loc) : name_(name), loc_(loc) {}

  TensorRef Scalar(const TensorRef& like, double value) const {
    return FillOn(like, like->type, value, name_, loc_);
  }
  TensorRef Op(ir::Op op, const TensorRef& x) const { return Prim(op, {x}, name_, loc_); }
  TensorRef Op(ir::Op op, const TensorRef& a, const TensorRef& b) const {
    return Prim(op, {a, b}, name_, loc_);
  }
  TensorRef Op(ir::Op op, const TensorRef& a, double b) const { return Op(op, a, Scalar(a, b)); }
  TensorRef Op(ir::Op op, double a, const TensorRef& b) const { return Op(op, Scalar(b, a), b); }
  TensorRef Broadcast(const TensorRef& x, const ir::Shape& shape) const {
    return BroadcastTo(x, shape, name_, loc_);
  }
  void RequireFloat(const TensorRef& x) const {
    if (!ir::IsFloat(x->type.dtype)) ThrowOpError(name_, "needs a float tensor", {x->type}, loc_);
  }

 private:
  const char* name_;
  const Loc& loc_;
};

// exp(x - max) and the broadcast max, along `dim`: the stable core of softmax and log_softmax.
struct Shifted {
  TensorRef shifted;  // x - max
  int64_t axis;
};

Shifted ShiftByMax(const Composer& c, const TensorRef& x, int64_t dim, const char* name,
                   const Loc& loc) {
  const int64_t axis = NormalizeDim(dim, x->type.rank(), name, x->type, loc);
  const TensorRef max = ReduceKeep(ir::Op::kReduceMax, x, {axis}, name, loc);
  return {c.Op(ir::Op::kSub, x, c.Broadcast(max, x->type.shape)), axis};
}

}  // namespace

TensorRef Relu(const TensorRef& x, const Loc& loc) {
  const Composer c("relu", loc);
  return c.Op(ir::Op::kMax, x, 0.0);
}

TensorRef LeakyRelu(const TensorRef& x, double slope, const Loc& loc) {
  const Composer c("leaky_relu", loc);
  c.RequireFloat(x);
  const TensorRef positive = c.Op(ir::Op::kGt, x, 0.0);
  return Prim(ir::Op::kSelect, {positive, x, c.Op(ir::Op::kMul, x, slope)}, "leaky_relu", loc);
}

TensorRef Gelu(const TensorRef& x, bool tanh_approximation, const Loc& loc) {
  const Composer c("gelu", loc);
  c.RequireFloat(x);
  TensorRef inner;
  if (tanh_approximation) {
    // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
    const TensorRef cube = c.Op(ir::Op::kMul, c.Op(ir::Op::kMul, x, x), x);
    const TensorRef poly = c.Op(ir::Op::kAdd, x, c.Op(ir::Op::kMul, cube, 0.044715));
    inner = c.Op(ir::Op::kTanh, c.Op(ir::Op::kMul, poly, std::sqrt(2.0 / std::numbers::pi)));
  } else {
    inner = c.Op(ir::Op::kErf, c.Op(ir::Op::kMul, x, 1.0 / std::numbers::sqrt2));
  }
  // 0.5 x (1 + inner)
  return c.Op(ir::Op::kMul, c.Op(ir::Op::kMul, x, 0.5), c.Op(ir::Op::kAdd, inner, 1.0));
}

TensorRef Sigmoid(const TensorRef& x, const Loc& loc) {
  const Composer c("sigmoid", loc);
  c.RequireFloat(x);
  // 1 / (1 + exp(-x)): exp overflows to inf for very negative x, giving the correct 0.
  return c.Op(ir::Op::kReciprocal,
              c.Op(ir::Op::kAdd, c.Op(ir::Op::kExp, c.Op(ir::Op::kNeg, x)), 1.0));
}

TensorRef Silu(const TensorRef& x, const Loc& loc) {
  const Composer c("silu", loc);
  c.RequireFloat(x);
  return c.Op(ir::Op::kMul, x, Sigmoid(x, loc));
}

TensorRef Softplus(const TensorRef& x, double beta, const Loc& loc) {
  const Composer c("softplus", loc);
  c.RequireFloat(x);
  // log(1 + exp(b x)) / b = (max(b x, 0) + log(1 + exp(-|b x|))) / b: never overflows.
  const TensorRef bx = beta == 1.0 ? x : c.Op(ir::Op::kMul, x, beta);
  const TensorRef tail =
      c.Op(ir::Op::kLog,
           c.Op(ir::Op::kAdd, c.Op(ir::Op::kExp, c.Op(ir::Op::kNeg, c.Op(ir::Op::kAbs, bx))), 1.0));
  const TensorRef sum = c.Op(ir::Op::kAdd, c.Op(ir::Op::kMax, bx, 0.0), tail);
  return beta == 1.0 ? sum : c.Op(ir::Op::kDiv, sum, beta);
}

TensorRef Softmax(const TensorRef& x_in, int64_t dim, const Loc& loc) {
  const TensorRef x = AutocastToF32(x_in, "softmax", loc);
  const Composer c("softmax", loc);
  c.RequireFloat(x);
  const Shifted s = ShiftByMax(c, x, dim, "softmax", loc);
  const TensorRef e = c.Op(ir::Op::kExp, s.shifted);
  const TensorRef sum = ReduceKeep(ir::Op::kReduceSum, e, {s.axis}, "softmax", loc);
  return c.Op(ir::Op::kDiv, e, c.Broadcast(sum, x->type.shape));
}

TensorRef LogSoftmax(const TensorRef& x_in, int64_t dim, const Loc& loc) {
  const TensorRef x = AutocastToF32(x_in, "log_softmax", loc);
  const Composer c("log_softmax", loc);
  c.RequireFloat(x);
  const Shifted s = ShiftByMax(c, x, dim, "log_softmax", loc);
  const TensorRef sum =
      ReduceKeep(ir::Op::kReduceSum, c.Op(ir::Op::kExp, s.shifted), {s.axis}, "log_softmax", loc);
  return c.Op(ir::Op::kSub, s.shifted, c.Broadcast(c.Op(ir::Op::kLog, sum), x->type.shape));
}

}  // namespace kiln::detail
