// Elementwise ops: unary math, broadcasting binary ops, casts, select and clamp.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

// A user's scalar in an integer dtype wraps around like the integer arithmetic does (torch:
// uint8 + 300 adds 44); a fill would saturate instead.
double WrapToDType(double value, ir::DType dtype) {
  const auto v = static_cast<int64_t>(value);
  switch (dtype) {
    case ir::DType::kU8:
      return static_cast<uint8_t>(v);
    case ir::DType::kI8:
      return static_cast<int8_t>(v);
    case ir::DType::kI16:
      return static_cast<int16_t>(v);
    case ir::DType::kU16:
      return static_cast<uint16_t>(v);
    case ir::DType::kI32:
      return static_cast<int32_t>(v);
    case ir::DType::kU32:
      return static_cast<uint32_t>(v);
    default:
      return value;
  }
}

}  // namespace

TensorRef Unary(ir::Op op, const TensorRef& x, const Loc& loc) {
  return Prim(op, {x}, ir::OpName(op), loc);
}

TensorRef Binary(ir::Op op, const TensorRef& a, const TensorRef& b, const char* name,
                 const Loc& loc) {
  const ir::TensorType& ta = a->type;
  const ir::TensorType& tb = b->type;
  const ir::DType dtype = PromoteDTypes(ta.dtype, tb.dtype, name, {ta, tb}, loc);
  const ir::Shape shape = BroadcastShapes(ta.shape, tb.shape, name, {ta, tb}, loc);
  if (DeviceOf(a) != DeviceOf(b)) {
    ThrowOpError(name,
                 absl::StrCat("operands on different devices (", DeviceOf(a).ToString(), " vs ",
                              DeviceOf(b).ToString(), ")"),
                 {ta, tb}, loc);
  }
  TensorRef x = BroadcastTo(CastTo(a, dtype, name, loc), shape, name, loc);
  TensorRef y = BroadcastTo(CastTo(b, dtype, name, loc), shape, name, loc);
  return Prim(op, {std::move(x), std::move(y)}, name, loc);
}

TensorRef BinaryScalar(ir::Op op, const TensorRef& x, double scalar, bool scalar_first,
                       const char* name, const Loc& loc) {
  TensorRef s = FillOn(x, x->type, WrapToDType(scalar, x->type.dtype), name, loc);
  return scalar_first ? Prim(op, {std::move(s), x}, name, loc)
                      : Prim(op, {x, std::move(s)}, name, loc);
}

TensorRef Cast(const TensorRef& x, ir::DType dtype, const Loc& loc) {
  return CastTo(x, dtype, "cast", loc);
}

TensorRef Where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const char* name,
                const Loc& loc) {
  const ir::TensorType& tc = cond->type;
  const ir::TensorType& ta = a->type;
  const ir::TensorType& tb = b->type;
  if (!ir::IsBool(tc.dtype)) {
    ThrowOpError(name, absl::StrCat("the condition must be bool, got ", ir::DTypeName(tc.dtype)),
                 {tc, ta, tb}, loc);
  }
  const ir::DType dtype = PromoteDTypes(ta.dtype, tb.dtype, name, {tc, ta, tb}, loc);
  const ir::Shape shape =
      BroadcastShapes(BroadcastShapes(tc.shape, ta.shape, name, {tc, ta, tb}, loc), tb.shape, name,
                      {tc, ta, tb}, loc);
  TensorRef c = BroadcastTo(cond, shape, name, loc);
  TensorRef x = BroadcastTo(CastTo(a, dtype, name, loc), shape, name, loc);
  TensorRef y = BroadcastTo(CastTo(b, dtype, name, loc), shape, name, loc);
  return Prim(ir::Op::kSelect, {std::move(c), std::move(x), std::move(y)}, name, loc);
}

TensorRef Clamp(const TensorRef& x, std::optional<double> low, std::optional<double> high,
                const char* name, const Loc& loc) {
  if (low && high && *low > *high) {
    ThrowOpError(name, absl::StrCat("low ", *low, " above high ", *high), {x->type}, loc);
  }
  TensorRef y = x;
  if (low) y = Prim(ir::Op::kMax, {y, FillOn(y, y->type, *low, name, loc)}, name, loc);
  if (high) y = Prim(ir::Op::kMin, {y, FillOn(y, y->type, *high, name, loc)}, name, loc);
  return y;
}

TensorRef Square(const TensorRef& x, const Loc& loc) {
  return Prim(ir::Op::kMul, {x, x}, "square", loc);
}

}  // namespace kiln::detail
