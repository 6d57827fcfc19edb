// Checks and small building blocks shared by every op.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

const char* KindName(KindId kind) {
  switch (kind) {
    case KindId::kFloat:
      return "Float";
    case KindId::kInt:
      return "Int";
    case KindId::kBool:
      return "Bool";
  }
  return "?";
}

// Rank of a float dtype, for promotion.
int FloatWidth(ir::DType d) {
  switch (d) {
    case ir::DType::kF32:
      return 1;
    case ir::DType::kF64:
      return 2;
    default:  // f16, bf16
      return 0;
  }
}

// The signed integer dtype of `bits` bits (8 to 64).
ir::DType SignedOfBits(int64_t bits) {
  switch (bits) {
    case 8:
      return ir::DType::kI8;
    case 16:
      return ir::DType::kI16;
    case 32:
      return ir::DType::kI32;
    default:
      return ir::DType::kI64;
  }
}

KindId KindOf(ir::DType d) {
  if (ir::IsFloat(d)) return KindId::kFloat;
  if (ir::IsInteger(d)) return KindId::kInt;
  return KindId::kBool;
}

}  // namespace

std::string DimsToString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

void CheckDTypeInKind(ir::DType dtype, KindId kind, const char* op, const Loc& loc) {
  if (!DTypeInKind(dtype, kind)) {
    ThrowOpError(op,
                 absl::StrCat("dtype ", ir::DTypeName(dtype), " is not of kind ", KindName(kind)),
                 {}, loc);
  }
}

void CheckHandle(const TensorRef& ref, int64_t rank, KindId kind, const Loc& loc) {
  if (ref == nullptr) ThrowOpError("tensor", "null handle", {}, loc);
  if (ref->type.rank() != rank || !DTypeInKind(ref->type.dtype, kind)) {
    ThrowOpError("tensor",
                 absl::StrCat("a handle of type ", ir::TypeToString(ref->type),
                              " cannot be a tensor of rank ", rank, " and kind ", KindName(kind)),
                 {}, loc);
  }
}

int64_t NormalizeDim(int64_t dim, int64_t rank, const char* op, const ir::TensorType& type,
                     const Loc& loc) {
  if (dim < -rank || dim >= rank) {
    ThrowOpError(op,
                 absl::StrCat("dim ", dim, " out of range for rank ", rank, " (expected [", -rank,
                              ", ", rank - 1, "])"),
                 {type}, loc);
  }
  return dim < 0 ? dim + rank : dim;
}

std::vector<int64_t> NormalizeDims(const std::vector<int64_t>& dims, int64_t rank, const char* name,
                                   const ir::TensorType& type, const Loc& loc) {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (int64_t d : dims) {
    const int64_t n = NormalizeDim(d, rank, name, type, loc);
    if (std::find(out.begin(), out.end(), n) != out.end()) {
      ThrowOpError(name, absl::StrCat("dim ", d, " repeated in ", DimsToString(dims)), {type}, loc);
    }
    out.push_back(n);
  }
  return out;
}

TensorRef Prim(ir::Op op, std::vector<TensorRef> inputs, const char* name, const Loc& loc,
               ir::Attrs attrs) {
  return Record(name, op, std::move(inputs), std::move(attrs), loc);
}

TensorRef ReshapeTo(const TensorRef& x, ir::Shape shape, const char* name, const Loc& loc) {
  if (x->type.shape == shape) return x;
  ir::Attrs attrs;
  attrs.shape = std::move(shape);
  return Record(name, ir::Op::kReshape, {x}, std::move(attrs), loc);
}

TensorRef BroadcastTo(const TensorRef& x, const ir::Shape& shape, const char* name,
                      const Loc& loc) {
  if (x->type.shape == shape) return x;
  TensorRef y = x;
  const size_t rank = shape.size();
  if (x->type.shape.size() < rank) {
    ir::Shape padded(rank - x->type.shape.size(), 1);
    padded.insert(padded.end(), x->type.shape.begin(), x->type.shape.end());
    y = ReshapeTo(x, std::move(padded), name, loc);
  }
  if (y->type.shape == shape) return y;
  ir::Attrs attrs;
  attrs.shape = shape;
  return Record(name, ir::Op::kBroadcast, {y}, std::move(attrs), loc);
}

TensorRef CastTo(const TensorRef& x, ir::DType dtype, const char* name, const Loc& loc) {
  if (x->type.dtype == dtype) return x;
  ir::Attrs attrs;
  attrs.dtype = dtype;
  return Record(name, ir::Op::kCast, {x}, std::move(attrs), loc);
}

TensorRef FillOn(const TensorRef& device_of, const ir::TensorType& type, double value,
                 const char* name, const Loc& loc) {
  ir::Attrs attrs;
  attrs.dtype = type.dtype;
  attrs.shape = type.shape;
  attrs.value = value;
  return RecordLeaf(name, ir::Op::kFill, std::move(attrs), DeviceOf(device_of), loc);
}

TensorRef ReduceKeep(ir::Op op, const TensorRef& x, std::vector<int64_t> axes, const char* name,
                     const Loc& loc) {
  std::sort(axes.begin(), axes.end());
  ir::Attrs attrs;
  attrs.axes = std::move(axes);
  return Record(name, op, {x}, std::move(attrs), loc);
}

ir::Shape BroadcastShapes(const ir::Shape& a, const ir::Shape& b, const char* name,
                          OperandTypes operands, const Loc& loc) {
  const size_t rank = std::max(a.size(), b.size());
  ir::Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right.
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      ThrowOpErrorByRef(name,
                        absl::StrCat("cannot broadcast ", ir::ShapeToString(a), " with ",
                                     ir::ShapeToString(b), " (dim ", i, ": ", da, " vs ", db, ")"),
                        operands, loc);
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

ir::DType PromoteDTypes(ir::DType a, ir::DType b, const char* name, OperandTypes operands,
                        const Loc& loc) {
  if (a == b) return a;
  if (KindOf(a) != KindOf(b)) {
    ThrowOpErrorByRef(name,
                      absl::StrCat("operands of different kinds (", ir::DTypeName(a), " vs ",
                                   ir::DTypeName(b), "); convert one first"),
                      operands, loc);
  }
  if (ir::IsInteger(a)) {
    // The narrowest integer dtype that holds every value of both (torch's and numpy's rule).
    const int64_t bits_a = ir::DTypeSize(a) * 8, bits_b = ir::DTypeSize(b) * 8;
    if (ir::IsSignedInteger(a) == ir::IsSignedInteger(b)) return bits_a >= bits_b ? a : b;
    const ir::DType s = ir::IsSignedInteger(a) ? a : b, u = ir::IsSignedInteger(a) ? b : a;
    if (ir::DTypeSize(s) > ir::DTypeSize(u)) return s;
    if (u == ir::DType::kU64) {
      ThrowOpErrorByRef(name,
                        absl::StrCat("no integer dtype holds every value of both u64 and ",
                                     ir::DTypeName(s), "; convert one first"),
                        operands, loc);
    }
    return SignedOfBits(ir::DTypeSize(u) * 16);
  }
  const int wa = FloatWidth(a), wb = FloatWidth(b);
  if (wa == wb) {
    // f16 with bf16: neither holds the other, f32 holds both (as in torch).
    return ir::DType::kF32;
  }
  return wa > wb ? a : b;
}

}  // namespace kiln::detail
