// The reference interpreter. Every op is a few plain loops over multi-indices, written for
// clarity: it is the oracle the backends are tested against, not a fast path.
//
// Numeric conventions (docs/ir.md):
//  - Float ops compute in double and store through TensorData::SetDouble, which rounds to the
//    dtype. Reductions, matmul, conv, window_sum and scatter_add accumulate in double and round
//    once at the end.
//  - Integer ops compute in 64 bits and the result wraps modulo 2^bits of the dtype (two's
//    complement), as native integer arithmetic does on every backend; the arithmetic itself is
//    done on uint64_t so that it never overflows a signed type. Integer div is floor division and
//    mod is floored (sign of the divisor); both give 0 for a zero divisor. u64 elements travel
//    as int64 bit patterns (TensorData::GetInt64); ordered ops (compares, max, min, sort, u64
//    division) go through OrderKey or unsigned arithmetic.
//  - Casts use TensorData's conversion rules (float -> integer truncates toward zero and
//    saturates, NaN -> 0), except that -> bool is value != 0, so NaN -> true.
//  - Only the nodes the outputs depend on run, and each intermediate value is freed right after
//    its last user has run, so memory stays bounded by the graph's live set.

#include "ir/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/random.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

using Index = std::vector<int64_t>;

// ---- Multi-index helpers ------------------------------------------------------------------------

// Calls fn(index, linear) for every multi-index of `shape` in row-major order.
template <class Fn>
void ForEachIndex(const Shape& shape, Fn&& fn) {
  if (NumElements(shape) == 0) return;
  Index index(shape.size(), 0);
  for (int64_t linear = 0;; ++linear) {
    fn(static_cast<const Index&>(index), linear);
    int64_t axis = static_cast<int64_t>(shape.size()) - 1;
    for (; axis >= 0; --axis) {
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
    }
    if (axis < 0) return;
  }
}

int64_t Dot(const Index& index, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t i = 0; i < index.size(); ++i) offset += index[i] * strides[i];
  return offset;
}

int64_t AttrAt(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  return v.empty() ? fallback : v[i];
}

void CopyElement(const TensorData& from, int64_t from_index, TensorData& to, int64_t to_index) {
  const int64_t size = DTypeSize(from.dtype());
  std::memcpy(to.data() + to_index * size, from.data() + from_index * size,
              static_cast<size_t>(size));
}

// ---- Scalar conventions -------------------------------------------------------------------------

// Stores an integer result modulo 2^bits of the dtype (bool: non-zero is true).
void StoreWrapped(TensorData& out, int64_t i, uint64_t value) {
  switch (out.dtype()) {
    case DType::kI8:
      out.SetInt64(i, static_cast<int8_t>(static_cast<uint8_t>(value)));
      return;
    case DType::kI16:
      out.SetInt64(i, static_cast<int16_t>(static_cast<uint16_t>(value)));
      return;
    case DType::kI32:
      out.SetInt64(i, static_cast<int32_t>(static_cast<uint32_t>(value)));
      return;
    case DType::kU8:
      out.SetInt64(i, static_cast<int64_t>(value & 0xffu));
      return;
    case DType::kU16:
      out.SetInt64(i, static_cast<int64_t>(value & 0xffffu));
      return;
    case DType::kU32:
      out.SetInt64(i, static_cast<int64_t>(value & 0xffffffffu));
      return;
    case DType::kBool:
      out.SetInt64(i, value != 0 ? 1 : 0);
      return;
    default:
      out.SetInt64(i, static_cast<int64_t>(value));
      return;
  }
}

// Accumulators: double for float dtypes; uint64_t (wrapping) for integer sums and products;
// int64_t (ordered) for integer max and min.
template <class T>
std::vector<T> Load(const TensorData& t) {
  std::vector<T> values(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if constexpr (std::is_same_v<T, double>) {
      values[i] = t.GetDouble(i);
    } else {
      values[i] = static_cast<T>(t.GetInt64(i));
    }
  }
  return values;
}

template <class T>
void Store(TensorData& out, int64_t i, T value) {
  if constexpr (std::is_same_v<T, double>) {
    out.SetDouble(i, value);
  } else {
    StoreWrapped(out, i, static_cast<uint64_t>(value));
  }
}

template <class T>
TensorData StoreAll(const std::vector<T>& values, const TensorType& type) {
  TensorData out(type.dtype, type.shape);
  for (int64_t i = 0; i < out.num_elements(); ++i) Store(out, i, values[i]);
  return out;
}

// max/min that propagate a NaN from either side (from `a` when both are NaN).
double MaxNaN(double a, double b) { return std::isnan(a) || b <= a ? a : b; }
double MinNaN(double a, double b) { return std::isnan(a) || b >= a ? a : b; }

// A u64 element's int64 bit pattern with the sign bit flipped: int64's order on keys is u64's
// order on values. Other integer elements are their own keys.
int64_t OrderKey(DType dtype, int64_t value) {
  return dtype == DType::kU64 ? value ^ std::numeric_limits<int64_t>::min() : value;
}

// The smallest and largest element of an integer dtype as GetInt64 gives them: the identities
// of max and min.
int64_t Lowest(DType dtype) {
  if (IsUnsignedInteger(dtype)) return 0;
  switch (dtype) {
    case DType::kI8:
      return std::numeric_limits<int8_t>::min();
    case DType::kI16:
      return std::numeric_limits<int16_t>::min();
    case DType::kI32:
      return std::numeric_limits<int32_t>::min();
    default:
      return std::numeric_limits<int64_t>::min();
  }
}
int64_t Highest(DType dtype) {
  switch (dtype) {
    case DType::kU64:
      return -1;  // 2^64 - 1
    case DType::kI8:
      return std::numeric_limits<int8_t>::max();
    case DType::kI16:
      return std::numeric_limits<int16_t>::max();
    case DType::kI32:
      return std::numeric_limits<int32_t>::max();
    case DType::kU8:
      return std::numeric_limits<uint8_t>::max();
    case DType::kU16:
      return std::numeric_limits<uint16_t>::max();
    case DType::kU32:
      return std::numeric_limits<uint32_t>::max();
    default:
      return std::numeric_limits<int64_t>::max();
  }
}

// max / min of two elements of an integer dtype.
int64_t IntMax(DType dtype, int64_t a, int64_t b) {
  return OrderKey(dtype, b) > OrderKey(dtype, a) ? b : a;
}
int64_t IntMin(DType dtype, int64_t a, int64_t b) {
  return OrderKey(dtype, b) < OrderKey(dtype, a) ? b : a;
}

// ---- Elementwise ----------------------------------------------------------------------------

double UnaryFloat(Op op, double x) {
  switch (op) {
    case Op::kNeg:
      return -x;
    case Op::kAbs:
      return std::fabs(x);
    case Op::kSign:
      return x > 0 ? 1.0 : (x < 0 ? -1.0 : (std::isnan(x) ? x : 0.0));
    case Op::kExp:
      return std::exp(x);
    case Op::kLog:
      return std::log(x);
    case Op::kSqrt:
      return std::sqrt(x);
    case Op::kRsqrt:
      return 1.0 / std::sqrt(x);
    case Op::kSin:
      return std::sin(x);
    case Op::kCos:
      return std::cos(x);
    case Op::kTanh:
      return std::tanh(x);
    case Op::kErf:
      return std::erf(x);
    case Op::kFloor:
      return std::floor(x);
    case Op::kCeil:
      return std::ceil(x);
    case Op::kRound:
      return std::nearbyint(x);  // Default rounding mode: half to even.
    case Op::kReciprocal:
      return 1.0 / x;
    default:
      return std::nan("");
  }
}

uint64_t UnaryInt(Op op, DType dtype, int64_t x) {
  const auto u = static_cast<uint64_t>(x);
  if (IsUnsignedInteger(dtype) && (op == Op::kAbs || op == Op::kSign)) {
    return op == Op::kAbs ? u : (u != 0 ? 1 : 0);
  }
  switch (op) {
    case Op::kNeg:
      return 0 - u;
    case Op::kAbs:
      return x < 0 ? 0 - u : u;
    case Op::kSign:
      return x > 0 ? 1 : (x < 0 ? ~uint64_t{0} : 0);
    case Op::kNot:
      return IsBool(dtype) ? (x == 0 ? 1 : 0) : ~u;
    default:
      return 0;
  }
}

double BinaryFloat(Op op, double a, double b) {
  switch (op) {
    case Op::kAdd:
      return a + b;
    case Op::kSub:
      return a - b;
    case Op::kMul:
      return a * b;
    case Op::kDiv:
      return a / b;
    case Op::kPow:
      return std::pow(a, b);
    case Op::kMax:
      return MaxNaN(a, b);
    case Op::kMin:
      return MinNaN(a, b);
    case Op::kMod: {  // Python's float %: the result has the divisor's sign.
      double r = std::fmod(a, b);
      if (r == 0) return std::copysign(0.0, b);
      return (r < 0) != (b < 0) ? r + b : r;
    }
    default:
      return std::nan("");
  }
}

uint64_t BinaryInt(Op op, DType dtype, int64_t a, int64_t b) {
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  if (dtype == DType::kU64 && (op == Op::kDiv || op == Op::kMod)) {
    if (ub == 0) return 0;
    return op == Op::kDiv ? ua / ub : ua % ub;
  }
  switch (op) {
    case Op::kAdd:
      return ua + ub;
    case Op::kSub:
      return ua - ub;
    case Op::kMul:
      return ua * ub;
    case Op::kMax:
      return static_cast<uint64_t>(IntMax(dtype, a, b));
    case Op::kMin:
      return static_cast<uint64_t>(IntMin(dtype, a, b));
    case Op::kDiv: {
      if (b == 0) return 0;
      if (b == -1) return 0 - ua;  // INT64_MIN / -1 wraps instead of trapping.
      const int64_t q = a / b;
      return static_cast<uint64_t>(a % b != 0 && (a < 0) != (b < 0) ? q - 1 : q);
    }
    case Op::kMod: {
      if (b == 0 || b == -1) return 0;
      const int64_t r = a % b;
      return static_cast<uint64_t>(r != 0 && (r < 0) != (b < 0) ? r + b : r);
    }
    default:
      return 0;
  }
}

bool Compare(Op op, auto a, auto b) {
  switch (op) {
    case Op::kEq:
      return a == b;
    case Op::kNe:
      return a != b;
    case Op::kLt:
      return a < b;
    case Op::kLe:
      return a <= b;
    case Op::kGt:
      return a > b;
    case Op::kGe:
      return a >= b;
    default:
      return false;
  }
}

uint64_t Logical(Op op, DType dtype, int64_t a, int64_t b) {
  if (IsBool(dtype)) {
    a = a != 0;
    b = b != 0;
  }
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  return op == Op::kAnd ? (ua & ub) : (op == Op::kOr ? (ua | ub) : (ua ^ ub));
}

// Integer to integer, saturating (docs/ir.md), u64 sources and targets included.
void CastInteger(const TensorData& in, int64_t i, TensorData& out) {
  const int64_t value = in.GetInt64(i);
  if (value < 0 && in.dtype() == DType::kU64) {  // 2^63 or more
    out.SetInt64(i, out.dtype() == DType::kU64 ? value : std::numeric_limits<int64_t>::max());
  } else if (value < 0 && out.dtype() == DType::kU64) {
    out.SetInt64(i, 0);
  } else {
    out.SetInt64(i, value);
  }
}

TensorData EvalElementwise(const Node& node, const std::vector<const TensorData*>& in) {
  TensorData out(node.type.dtype, node.type.shape);
  const DType dtype = in[0]->dtype();
  const bool is_float = IsFloat(dtype);
  const OpClass op_class = GetOpClass(node.op);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    switch (op_class) {
      case OpClass::kUnary:
        if (is_float) {
          out.SetDouble(i, UnaryFloat(node.op, in[0]->GetDouble(i)));
        } else {
          StoreWrapped(out, i, UnaryInt(node.op, dtype, in[0]->GetInt64(i)));
        }
        break;
      case OpClass::kBinary:
        if (is_float) {
          out.SetDouble(i, BinaryFloat(node.op, in[0]->GetDouble(i), in[1]->GetDouble(i)));
        } else {
          StoreWrapped(out, i, BinaryInt(node.op, dtype, in[0]->GetInt64(i), in[1]->GetInt64(i)));
        }
        break;
      case OpClass::kCompare:
        out.SetInt64(i, is_float ? Compare(node.op, in[0]->GetDouble(i), in[1]->GetDouble(i))
                                 : Compare(node.op, OrderKey(dtype, in[0]->GetInt64(i)),
                                           OrderKey(dtype, in[1]->GetInt64(i))));
        break;
      case OpClass::kLogical:
        StoreWrapped(out, i, Logical(node.op, dtype, in[0]->GetInt64(i), in[1]->GetInt64(i)));
        break;
      case OpClass::kSelect:
        CopyElement(*in[in[0]->GetInt64(i) != 0 ? 1 : 2], i, out, i);
        break;
      case OpClass::kCast:
        if (IsBool(out.dtype())) {  // value != 0, so NaN is true.
          out.SetInt64(i, is_float ? in[0]->GetDouble(i) != 0 : in[0]->GetInt64(i) != 0);
        } else if (is_float) {
          out.SetDouble(i, in[0]->GetDouble(i));
        } else {
          CastInteger(*in[0], i, out);
        }
        break;
      default:
        break;
    }
  }
  return out;
}

// ---- Leaves -------------------------------------------------------------------------------------

TensorData EvalLeaf(const Node& node) {
  TensorData out(node.type.dtype, node.type.shape);
  const Attrs& attrs = node.attrs;
  switch (node.op) {
    case Op::kFill:
      for (int64_t i = 0; i < out.num_elements(); ++i) out.SetDouble(i, attrs.value);
      break;
    case Op::kIota:
      ForEachIndex(out.shape(), [&](const Index& index, int64_t linear) {
        out.SetInt64(linear, index[attrs.axes[0]]);
      });
      break;
    case Op::kRandomUniform:
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        out.SetDouble(i, Uniform(attrs.seed, static_cast<uint64_t>(i), out.dtype()));
      }
      break;
    case Op::kRandomNormal:
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        out.SetDouble(i, Normal(attrs.seed, static_cast<uint64_t>(i), out.dtype() == DType::kF64));
      }
      break;
    default:
      break;
  }
  return out;
}

// ---- Reductions ---------------------------------------------------------------------------------

template <class T, class Combine>
TensorData ReduceAs(const TensorData& x, const TensorType& type, const std::vector<int64_t>& axes,
                    T identity, Combine combine) {
  std::vector<T> acc(static_cast<size_t>(type.num_elements()), identity);
  const std::vector<T> values = Load<T>(x);
  std::vector<int64_t> to_output = RowMajorStrides(type.shape);
  for (int64_t axis : axes) to_output[axis] = 0;
  ForEachIndex(x.shape(), [&](const Index& index, int64_t linear) {
    T& slot = acc[Dot(index, to_output)];
    slot = combine(slot, values[linear]);
  });
  return StoreAll(acc, type);
}

TensorData EvalReduce(const Node& node, const TensorData& x) {
  const auto& axes = node.attrs.axes;
  const TensorType& type = node.type;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const DType dtype = x.dtype();
  const auto int_max = [dtype](int64_t a, int64_t b) { return IntMax(dtype, a, b); };
  const auto int_min = [dtype](int64_t a, int64_t b) { return IntMin(dtype, a, b); };
  const bool is_float = IsFloat(dtype);
  switch (node.op) {
    case Op::kReduceSum:
      return is_float ? ReduceAs<double>(x, type, axes, 0.0, std::plus<>())
                      : ReduceAs<uint64_t>(x, type, axes, 0, std::plus<>());
    case Op::kReduceProd:
      return is_float ? ReduceAs<double>(x, type, axes, 1.0, std::multiplies<>())
                      : ReduceAs<uint64_t>(x, type, axes, 1, std::multiplies<>());
    case Op::kReduceMax:
      return is_float ? ReduceAs<double>(x, type, axes, -kInf, MaxNaN)
                      : ReduceAs<int64_t>(x, type, axes, Lowest(dtype), int_max);
    default:
      return is_float ? ReduceAs<double>(x, type, axes, kInf, MinNaN)
                      : ReduceAs<int64_t>(x, type, axes, Highest(dtype), int_min);
  }
}

// Index of the first extreme along the axis; a NaN is more extreme than any number.
TensorData EvalArgReduce(const Node& node, const TensorData& x) {
  TensorData out(node.type.dtype, node.type.shape);
  const int64_t axis = node.attrs.axes[0];
  const bool want_max = node.op == Op::kArgMax;
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  ForEachIndex(out.shape(), [&](const Index& index, int64_t linear) {
    const int64_t base = Dot(index, strides);
    int64_t best = 0;
    for (int64_t k = 1; k < x.shape()[axis]; ++k) {
      const int64_t a = base + best * strides[axis], b = base + k * strides[axis];
      bool better;
      if (IsFloat(x.dtype())) {
        const double va = x.GetDouble(a), vb = x.GetDouble(b);
        better = !std::isnan(va) && (std::isnan(vb) || (want_max ? vb > va : vb < va));
      } else {
        const int64_t va = OrderKey(x.dtype(), x.GetInt64(a));
        const int64_t vb = OrderKey(x.dtype(), x.GetInt64(b));
        better = want_max ? vb > va : vb < va;
      }
      if (better) best = k;
    }
    out.SetInt64(linear, best);
  });
  return out;
}

// ---- Sort ---------------------------------------------------------------------------------------

// A stable sort of every fibre along the axis, ascending, NaN above every number (after +inf):
// `sort` writes the values in that order, `argsort` the axis positions they came from.
TensorData EvalSort(const Node& node, const TensorData& x) {
  TensorData out(node.type.dtype, node.type.shape);
  const int64_t axis = node.attrs.axes[0];
  const int64_t size = x.shape()[axis];
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  Shape fibres = x.shape();
  fibres[axis] = 1;
  const bool is_float = IsFloat(x.dtype());
  std::vector<int64_t> order(static_cast<size_t>(size));
  ForEachIndex(fibres, [&](const Index& index, int64_t) {
    const int64_t base = Dot(index, strides);
    const auto at = [&](int64_t k) { return base + k * strides[axis]; };
    for (int64_t k = 0; k < size; ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if (!is_float) {
        return OrderKey(x.dtype(), x.GetInt64(at(a))) < OrderKey(x.dtype(), x.GetInt64(at(b)));
      }
      const double va = x.GetDouble(at(a)), vb = x.GetDouble(at(b));
      return va < vb || (std::isnan(vb) && !std::isnan(va));
    });
    for (int64_t k = 0; k < size; ++k) {
      if (node.op == Op::kArgsort) {
        out.SetInt64(at(k), order[k]);
      } else {
        CopyElement(x, at(order[k]), out, at(k));
      }
    }
  });
  return out;
}

// ---- Movement -----------------------------------------------------------------------------------

// out[index] = x[source(index)] for every output index.
template <class Source>
TensorData Gathered(const TensorData& x, const TensorType& type, Source source) {
  TensorData out(type.dtype, type.shape);
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  ForEachIndex(type.shape, [&](const Index& index, int64_t linear) {
    CopyElement(x, Dot(source(index), strides), out, linear);
  });
  return out;
}

TensorData EvalMovement(const Node& node, const std::vector<const TensorData*>& in) {
  const TensorData& x = *in[0];
  const Attrs& attrs = node.attrs;
  const Shape& in_shape = x.shape();
  switch (node.op) {
    case Op::kReshape: {
      TensorData out(node.type.dtype, node.type.shape);
      std::memcpy(out.data(), x.data(), static_cast<size_t>(x.size_bytes()));
      return out;
    }
    case Op::kPermute:
      return Gathered(x, node.type, [&](const Index& index) {
        Index source(index.size());
        for (size_t i = 0; i < index.size(); ++i) source[attrs.axes[i]] = index[i];
        return source;
      });
    case Op::kBroadcast:
      return Gathered(x, node.type, [&](Index index) {
        for (size_t i = 0; i < index.size(); ++i) index[i] = in_shape[i] == 1 ? 0 : index[i];
        return index;
      });
    case Op::kSlice:
      return Gathered(x, node.type, [&](Index index) {
        for (size_t i = 0; i < index.size(); ++i) {
          index[i] = attrs.starts[i] + index[i] * AttrAt(attrs.strides, i, 1);
        }
        return index;
      });
    case Op::kFlip:
      return Gathered(x, node.type, [&](Index index) {
        for (int64_t axis : attrs.axes) index[axis] = in_shape[axis] - 1 - index[axis];
        return index;
      });
    default:
      break;
  }
  // pad and concat scatter their input(s) into the output instead.
  TensorData out(node.type.dtype, node.type.shape);
  const std::vector<int64_t> out_strides = RowMajorStrides(out.shape());
  if (node.op == Op::kPad) {
    for (int64_t i = 0; i < out.num_elements(); ++i) out.SetDouble(i, attrs.value);
    ForEachIndex(in_shape, [&](const Index& index, int64_t linear) {
      CopyElement(x, linear, out, Dot(index, out_strides) + Dot(attrs.low, out_strides));
    });
    return out;
  }
  const int64_t axis = attrs.axes[0];
  int64_t offset = 0;
  for (const TensorData* part : in) {
    ForEachIndex(part->shape(), [&](const Index& index, int64_t linear) {
      CopyElement(*part, linear, out, Dot(index, out_strides) + offset * out_strides[axis]);
    });
    offset += part->shape()[axis];
  }
  return out;
}

// ---- Indexing -----------------------------------------------------------------------------------

// The operand position an index element names, or an error naming the node.
absl::StatusOr<Index> IndexedPosition(const std::string& label, const Index& at,
                                      const TensorData& index, int64_t linear, int64_t axis,
                                      const Shape& x_shape) {
  const int64_t k = index.GetInt64(linear);
  if (k < 0 || k >= x_shape[axis]) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": index ", k, " out of range for axis ",
                                                   axis, " of size ", x_shape[axis]));
  }
  Index position = at;
  position[axis] = k;
  return position;
}

absl::StatusOr<TensorData> EvalGather(const std::string& label, const Node& node,
                                      const TensorData& x, const TensorData& index) {
  TensorData out(node.type.dtype, node.type.shape);
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  absl::Status status;
  ForEachIndex(index.shape(), [&](const Index& at, int64_t linear) {
    absl::StatusOr<Index> p =
        IndexedPosition(label, at, index, linear, node.attrs.axes[0], x.shape());
    if (!p.ok()) {
      status.Update(p.status());
    } else if (status.ok()) {
      CopyElement(x, Dot(*p, strides), out, linear);
    }
  });
  if (!status.ok()) return status;
  return out;
}

template <class T>
absl::StatusOr<TensorData> ScatterAddAs(const std::string& label, const Node& node,
                                        const TensorData& x, const TensorData& index,
                                        const TensorData& src) {
  std::vector<T> acc = Load<T>(x);
  const std::vector<T> values = Load<T>(src);
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  absl::Status status;
  ForEachIndex(index.shape(), [&](const Index& at, int64_t linear) {
    absl::StatusOr<Index> p =
        IndexedPosition(label, at, index, linear, node.attrs.axes[0], x.shape());
    if (!p.ok()) {
      status.Update(p.status());
    } else {
      acc[Dot(*p, strides)] += values[linear];
    }
  });
  if (!status.ok()) return status;
  return StoreAll(acc, node.type);
}

// ---- Contractions and windows -------------------------------------------------------------------

template <class T>
TensorData MatMulAs(const TensorData& a, const TensorData& b, const TensorType& type) {
  const int64_t r = a.rank(), m_size = a.shape()[r - 2], k_size = a.shape()[r - 1];
  const int64_t n_size = b.shape()[r - 1];
  const int64_t batches = m_size * k_size == 0 ? 0 : a.num_elements() / (m_size * k_size);
  const std::vector<T> av = Load<T>(a), bv = Load<T>(b);
  std::vector<T> out(static_cast<size_t>(type.num_elements()), T{0});
  for (int64_t batch = 0; batch < batches; ++batch) {
    const T* a_batch = av.data() + batch * m_size * k_size;
    const T* b_batch = bv.data() + batch * k_size * n_size;
    for (int64_t m = 0; m < m_size; ++m) {
      T* row = out.data() + (batch * m_size + m) * n_size;
      for (int64_t k = 0; k < k_size; ++k) {
        for (int64_t n = 0; n < n_size; ++n)
          row[n] += a_batch[m * k_size + k] * b_batch[k * n_size + n];
      }
    }
  }
  return StoreAll(out, type);
}

// Input [N, C, S...], weight [O, C/groups, K...]. Output position p and kernel position k read
// the input at q = p * stride + k * dilation - low in the zero-padded, input-dilated operand,
// which is a real element only when q is a multiple of the input dilation.
template <class T>
TensorData ConvAs(const TensorData& x, const TensorData& w, const Attrs& attrs,
                  const TensorType& type) {
  const std::vector<T> xv = Load<T>(x), wv = Load<T>(w);
  const std::vector<int64_t> xs = RowMajorStrides(x.shape()), ws = RowMajorStrides(w.shape());
  const Shape kernel(w.shape().begin() + 2, w.shape().end());
  const std::vector<int64_t> kernel_strides(ws.begin() + 2, ws.end());
  const int64_t channels_per_group = w.shape()[1];
  const int64_t outputs_per_group = w.shape()[0] / attrs.groups;
  std::vector<T> out(static_cast<size_t>(type.num_elements()), T{0});
  ForEachIndex(type.shape, [&](const Index& p, int64_t linear) {
    const int64_t group = p[1] / outputs_per_group;
    ForEachIndex(kernel, [&](const Index& k, int64_t) {
      int64_t x_offset = p[0] * xs[0];
      for (size_t d = 0; d < kernel.size(); ++d) {
        const int64_t q = p[2 + d] * AttrAt(attrs.strides, d, 1) +
                          k[d] * AttrAt(attrs.dilation, d, 1) - AttrAt(attrs.low, d, 0);
        const int64_t input_dilation = AttrAt(attrs.input_dilation, d, 1);
        if (q < 0 || q % input_dilation != 0 || q / input_dilation >= x.shape()[2 + d]) return;
        x_offset += q / input_dilation * xs[2 + d];
      }
      const int64_t w_offset = p[1] * ws[0] + Dot(k, kernel_strides);
      for (int64_t c = 0; c < channels_per_group; ++c) {
        out[linear] +=
            xv[x_offset + (group * channels_per_group + c) * xs[1]] * wv[w_offset + c * ws[1]];
      }
    });
  });
  return StoreAll(out, type);
}

// Output position p and window position k read x at p * stride + k * dilation - low along each
// axis; positions in the padding contribute `identity`.
template <class T, class Combine>
TensorData WindowAs(const TensorData& x, const Attrs& attrs, const TensorType& type, T identity,
                    Combine combine) {
  const std::vector<T> xv = Load<T>(x);
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  std::vector<T> out(static_cast<size_t>(type.num_elements()), identity);
  ForEachIndex(type.shape, [&](const Index& p, int64_t linear) {
    ForEachIndex(attrs.window, [&](const Index& k, int64_t) {
      int64_t offset = 0;
      for (size_t d = 0; d < k.size(); ++d) {
        const int64_t q = p[d] * AttrAt(attrs.strides, d, 1) + k[d] * AttrAt(attrs.dilation, d, 1) -
                          AttrAt(attrs.low, d, 0);
        if (q < 0 || q >= x.shape()[d]) return;
        offset += q * xs[d];
      }
      out[linear] = combine(out[linear], xv[offset]);
    });
  });
  return StoreAll(out, type);
}

TensorData EvalContraction(const Node& node, const TensorData& a, const TensorData& b) {
  const bool is_float = IsFloat(a.dtype());
  if (node.op == Op::kMatMul) {
    return is_float ? MatMulAs<double>(a, b, node.type) : MatMulAs<uint64_t>(a, b, node.type);
  }
  return is_float ? ConvAs<double>(a, b, node.attrs, node.type)
                  : ConvAs<uint64_t>(a, b, node.attrs, node.type);
}

TensorData EvalWindow(const Node& node, const TensorData& x) {
  const bool is_float = IsFloat(x.dtype());
  if (node.op == Op::kWindowSum) {
    return is_float ? WindowAs<double>(x, node.attrs, node.type, 0.0, std::plus<>())
                    : WindowAs<uint64_t>(x, node.attrs, node.type, 0, std::plus<>());
  }
  const DType dtype = x.dtype();
  const auto int_max = [dtype](int64_t a, int64_t b) { return IntMax(dtype, a, b); };
  return is_float ? WindowAs<double>(x, node.attrs, node.type,
                                     -std::numeric_limits<double>::infinity(), MaxNaN)
                  : WindowAs<int64_t>(x, node.attrs, node.type, Lowest(x.dtype()), int_max);
}

// ---- The graph ----------------------------------------------------------------------------------

std::string NodeLabel(const Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  std::string label = absl::StrCat("%", id, " = ", OpName(node.op));
  if (std::string where = LocationToString(node.loc); !where.empty()) {
    absl::StrAppend(&label, " (", where, ")");
  }
  return label;
}

absl::StatusOr<TensorData> Evaluate(const Graph& graph, NodeId id,
                                    const std::vector<const TensorData*>& in) {
  const Node& node = graph.node(id);
  switch (GetOpClass(node.op)) {
    case OpClass::kLeaf:
      return EvalLeaf(node);
    case OpClass::kReduce:
      return EvalReduce(node, *in[0]);
    case OpClass::kArgReduce:
      return EvalArgReduce(node, *in[0]);
    case OpClass::kMovement:
      return EvalMovement(node, in);
    case OpClass::kIndex:
      if (node.op == Op::kGather) return EvalGather(NodeLabel(graph, id), node, *in[0], *in[1]);
      return IsFloat(in[0]->dtype())
                 ? ScatterAddAs<double>(NodeLabel(graph, id), node, *in[0], *in[1], *in[2])
                 : ScatterAddAs<uint64_t>(NodeLabel(graph, id), node, *in[0], *in[1], *in[2]);
    case OpClass::kContraction:
      return EvalContraction(node, *in[0], *in[1]);
    case OpClass::kWindow:
      return EvalWindow(node, *in[0]);
    case OpClass::kSort:
      return EvalSort(node, *in[0]);
    default:
      return EvalElementwise(node, in);
  }
}

absl::Status CheckArguments(const Graph& graph, const std::vector<NodeId>& parameters,
                            std::span<const TensorData> arguments) {
  if (parameters.size() != arguments.size()) {
    std::string names;
    for (NodeId id : parameters) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", graph.node(id).attrs.name);
    }
    return absl::InvalidArgumentError(absl::StrCat("interpret: got ", arguments.size(),
                                                   " arguments for ", parameters.size(),
                                                   " parameters (", names, ")"));
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Node& node = graph.node(parameters[i]);
    const TensorType given{arguments[i].dtype(), arguments[i].shape()};
    if (given != node.type) {
      return absl::InvalidArgumentError(absl::StrCat(
          NodeLabel(graph, parameters[i]), ": argument ", i, " for parameter \"", node.attrs.name,
          "\" is ", TypeToString(given), ", expected ", TypeToString(node.type)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorData>> Interpret(const Graph& graph,
                                                  std::span<const TensorData> arguments) {
  if (absl::Status status = Verify(graph); !status.ok()) return status;
  const std::vector<NodeId> parameters = graph.Parameters();
  if (absl::Status status = CheckArguments(graph, parameters, arguments); !status.ok()) {
    return status;
  }

  // Liveness: a node runs only if an output needs it; its value is dropped after its last user.
  const NodeId n = graph.num_nodes();
  std::vector<bool> needed(static_cast<size_t>(n), false);
  std::vector<NodeId> last_use(static_cast<size_t>(n), -1);
  for (const Output& output : graph.outputs()) {
    needed[output.node] = true;
    last_use[output.node] = n;  // Outputs live to the end.
  }
  for (NodeId id = n - 1; id >= 0; --id) {
    if (!needed[id]) continue;
    for (NodeId input : graph.node(id).inputs) {
      needed[input] = true;
      last_use[input] = std::max(last_use[input], id);
    }
  }

  std::vector<std::optional<TensorData>> owned(static_cast<size_t>(n));
  std::vector<const TensorData*> values(static_cast<size_t>(n), nullptr);
  for (size_t i = 0; i < parameters.size(); ++i) values[parameters[i]] = &arguments[i];
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (!needed[id] || node.op == Op::kParameter) continue;
    if (node.op == Op::kConstant) {
      values[id] = node.attrs.literal.get();
      continue;
    }
    std::vector<const TensorData*> in;
    for (NodeId input : node.inputs) in.push_back(values[input]);
    absl::StatusOr<TensorData> result = Evaluate(graph, id, in);
    if (!result.ok()) return result.status();
    owned[id] = *std::move(result);
    values[id] = &*owned[id];
    for (NodeId input : node.inputs) {
      if (last_use[input] == id) {
        owned[input].reset();
        values[input] = nullptr;
      }
    }
  }

  std::vector<TensorData> results;
  results.reserve(graph.outputs().size());
  for (const Output& output : graph.outputs()) results.push_back(*values[output.node]);
  return results;
}

}  // namespace kiln::ir
