#include "ir/infer.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/conv_shape.h"

namespace kiln::ir {
namespace {

std::string OperandList(std::span<const TensorType> inputs) {
  if (inputs.empty()) return "";
  return absl::StrCat("; operands ",
                      absl::StrJoin(inputs, ", ", [](std::string* out, const TensorType& t) {
                        out->append(TypeToString(t));
                      }));
}

// Builds "op: message; operands ..." errors.
class Checker {
 public:
  Checker(Op op, std::span<const TensorType> inputs) : op_(op), inputs_(inputs) {}

  template <class... Args>
  absl::Status Fail(const Args&... args) const {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op_), ": ", args..., OperandList(inputs_)));
  }

 private:
  Op op_;
  std::span<const TensorType> inputs_;
};

std::string Join(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

absl::Status CheckShape(const Checker& c, const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) return c.Fail("negative dimension in shape ", ShapeToString(shape));
  }
  return absl::OkStatus();
}

// Axes must be in [0, rank), unique; `sorted` additionally requires ascending order.
absl::Status CheckAxes(const Checker& c, const std::vector<int64_t>& axes, int64_t rank,
                       bool sorted) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i];
    if (a < 0 || a >= rank) return c.Fail("axis ", a, " out of range for rank ", rank);
    if (seen[static_cast<size_t>(a)]) return c.Fail("axis ", a, " repeated in ", Join(axes));
    if (sorted && i > 0 && axes[i - 1] > a) return c.Fail("axes ", Join(axes), " not sorted");
    seen[static_cast<size_t>(a)] = true;
  }
  return absl::OkStatus();
}

absl::Status CheckSingleAxis(const Checker& c, const std::vector<int64_t>& axes, int64_t rank) {
  if (axes.size() != 1) return c.Fail("expects exactly one axis, got ", Join(axes));
  return CheckAxes(c, axes, rank, true);
}

// A per-axis attribute must be empty (all defaults) or have one entry per axis.
absl::Status CheckPerAxis(const Checker& c, const char* what, const std::vector<int64_t>& v,
                          size_t n) {
  if (!v.empty() && v.size() != n) {
    return c.Fail(what, " ", Join(v), " needs ", n, " entries");
  }
  return absl::OkStatus();
}

int64_t At(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  return v.empty() ? fallback : v[i];
}

}  // namespace

uint32_t UsedAttrs(Op op) {
  switch (op) {
    case Op::kParameter:
      return kAttrDType | kAttrShape | kAttrName;
    case Op::kConstant:
      return kAttrLiteral;
    case Op::kFill:
      return kAttrDType | kAttrShape | kAttrValue;
    case Op::kIota:
      return kAttrDType | kAttrShape | kAttrAxes;
    case Op::kRandomUniform:
    case Op::kRandomNormal:
      return kAttrDType | kAttrShape | kAttrSeed;
    case Op::kCast:
      return kAttrDType;
    case Op::kReshape:
    case Op::kBroadcast:
      return kAttrShape;
    case Op::kReduceSum:
    case Op::kReduceProd:
    case Op::kReduceMax:
    case Op::kReduceMin:
    case Op::kArgMax:
    case Op::kArgMin:
    case Op::kPermute:
    case Op::kConcat:
    case Op::kFlip:
    case Op::kGather:
    case Op::kScatterAdd:
    case Op::kSort:
    case Op::kArgsort:
      return kAttrAxes;
    case Op::kSlice:
      return kAttrStarts | kAttrLimits | kAttrStrides;
    case Op::kPad:
      return kAttrLow | kAttrHigh | kAttrValue;
    case Op::kMatMul:
      return kAttrAccumulate;
    case Op::kConv:
      return kAttrStrides | kAttrLow | kAttrHigh | kAttrDilation | kAttrInputDilation |
             kAttrGroups | kAttrAccumulate;
    case Op::kWindowSum:
    case Op::kWindowMax:
      return kAttrWindow | kAttrStrides | kAttrLow | kAttrHigh | kAttrDilation;
    default:
      return 0;
  }
}

int NumOperands(Op op) {
  switch (GetOpClass(op)) {
    case OpClass::kLeaf:
      return 0;
    case OpClass::kUnary:
    case OpClass::kCast:
    case OpClass::kReduce:
    case OpClass::kArgReduce:
    case OpClass::kWindow:
    case OpClass::kSort:
      return 1;
    case OpClass::kBinary:
    case OpClass::kCompare:
    case OpClass::kLogical:
    case OpClass::kContraction:
      return 2;
    case OpClass::kSelect:
      return 3;
    case OpClass::kMovement:
      return op == Op::kConcat ? -1 : 1;
    case OpClass::kIndex:
      return op == Op::kGather ? 2 : 3;
  }
  return 0;
}

int64_t WindowOutputSize(int64_t in, int64_t window, int64_t stride, int64_t low, int64_t high,
                         int64_t dilation, int64_t input_dilation) {
  return base::WindowOutputSize(in, window, stride, low, high, dilation, input_dilation);
}

absl::StatusOr<TensorType> InferType(Op op, std::span<const TensorType> inputs,
                                     const Attrs& attrs) {
  const Checker c(op, inputs);
  const int arity = NumOperands(op);
  if (arity >= 0 && static_cast<int>(inputs.size()) != arity) {
    return c.Fail("expects ", arity, " operands, got ", inputs.size());
  }
  if (arity < 0 && inputs.empty()) return c.Fail("expects at least one operand");

  switch (GetOpClass(op)) {
    case OpClass::kLeaf: {
      if (op == Op::kConstant) {
        if (!attrs.literal) return c.Fail("missing literal");
        return TensorType{attrs.literal->dtype(), attrs.literal->shape()};
      }
      if (auto s = CheckShape(c, attrs.shape); !s.ok()) return s;
      if (op == Op::kParameter && attrs.name.empty()) return c.Fail("parameter needs a name");
      if (op == Op::kIota) {
        if (IsBool(attrs.dtype)) return c.Fail("iota of dtype bool");
        if (auto s = CheckSingleAxis(c, attrs.axes, static_cast<int64_t>(attrs.shape.size()));
            !s.ok()) {
          return s;
        }
      }
      if ((op == Op::kRandomUniform || op == Op::kRandomNormal) && !IsFloat(attrs.dtype)) {
        return c.Fail("random values need a float dtype, got ", DTypeName(attrs.dtype));
      }
      return TensorType{attrs.dtype, attrs.shape};
    }

    case OpClass::kUnary: {
      const TensorType& x = inputs[0];
      if (op == Op::kNot) {
        if (!IsBool(x.dtype) && !IsInteger(x.dtype))
          return c.Fail("needs a bool or integer operand");
      } else if (op == Op::kNeg || op == Op::kAbs || op == Op::kSign) {
        if (IsBool(x.dtype)) return c.Fail("needs a numeric operand, got bool");
      } else if (!IsFloat(x.dtype)) {
        return c.Fail("needs a float operand, got ", DTypeName(x.dtype));
      }
      return x;
    }

    case OpClass::kBinary:
    case OpClass::kCompare:
    case OpClass::kLogical: {
      const TensorType& a = inputs[0];
      const TensorType& b = inputs[1];
      if (a.dtype != b.dtype) {
        return c.Fail("operand dtypes differ (", DTypeName(a.dtype), " vs ", DTypeName(b.dtype),
                      ")");
      }
      if (a.shape != b.shape) {
        return c.Fail("operand shapes differ (", ShapeToString(a.shape), " vs ",
                      ShapeToString(b.shape), ")");
      }
      if (GetOpClass(op) == OpClass::kLogical) {
        if (!IsBool(a.dtype) && !IsInteger(a.dtype))
          return c.Fail("needs bool or integer operands");
        return a;
      }
      if (GetOpClass(op) == OpClass::kCompare) return TensorType{DType::kBool, a.shape};
      if (IsBool(a.dtype)) return c.Fail("needs numeric operands, got bool");
      if (op == Op::kPow && !IsFloat(a.dtype)) return c.Fail("needs float operands");
      return a;
    }

    case OpClass::kSelect: {
      const TensorType& cond = inputs[0];
      if (!IsBool(cond.dtype)) return c.Fail("condition must be bool, got ", DTypeName(cond.dtype));
      if (inputs[1].dtype != inputs[2].dtype) return c.Fail("branch dtypes differ");
      if (cond.shape != inputs[1].shape || cond.shape != inputs[2].shape) {
        return c.Fail("operand shapes differ");
      }
      return inputs[1];
    }

    case OpClass::kCast:
      return TensorType{attrs.dtype, inputs[0].shape};

    case OpClass::kReduce: {
      TensorType out = inputs[0];
      if (IsBool(out.dtype)) return c.Fail("cannot reduce bool; cast first");
      if (auto s = CheckAxes(c, attrs.axes, out.rank(), true); !s.ok()) return s;
      for (int64_t a : attrs.axes) {
        if ((op == Op::kReduceMax || op == Op::kReduceMin) && out.shape[a] == 0) {
          return c.Fail("reduction of an empty axis ", a, " has no identity");
        }
        out.shape[a] = 1;
      }
      return out;
    }

    case OpClass::kArgReduce: {
      TensorType out = inputs[0];
      if (IsBool(out.dtype)) return c.Fail("cannot reduce bool; cast first");
      if (auto s = CheckSingleAxis(c, attrs.axes, out.rank()); !s.ok()) return s;
      if (out.shape[attrs.axes[0]] == 0) return c.Fail("empty axis ", attrs.axes[0]);
      out.shape[attrs.axes[0]] = 1;
      out.dtype = DType::kI64;
      return out;
    }

    case OpClass::kMovement: {
      const TensorType& x = inputs[0];
      switch (op) {
        case Op::kReshape: {
          if (auto s = CheckShape(c, attrs.shape); !s.ok()) return s;
          if (NumElements(attrs.shape) != x.num_elements()) {
            return c.Fail("cannot reshape ", x.num_elements(), " elements to ",
                          ShapeToString(attrs.shape));
          }
          return TensorType{x.dtype, attrs.shape};
        }
        case Op::kPermute: {
          if (static_cast<int64_t>(attrs.axes.size()) != x.rank()) {
            return c.Fail("permutation ", Join(attrs.axes), " does not match rank ", x.rank());
          }
          if (auto s = CheckAxes(c, attrs.axes, x.rank(), false); !s.ok()) return s;
          Shape shape(x.shape.size());
          for (size_t i = 0; i < shape.size(); ++i) shape[i] = x.shape[attrs.axes[i]];
          return TensorType{x.dtype, shape};
        }
        case Op::kBroadcast: {
          if (attrs.shape.size() != x.shape.size()) {
            return c.Fail("target ", ShapeToString(attrs.shape), " must have rank ", x.rank(),
                          " (reshape first)");
          }
          for (size_t i = 0; i < x.shape.size(); ++i) {
            if (x.shape[i] != attrs.shape[i] && x.shape[i] != 1) {
              return c.Fail("cannot broadcast axis ", i, " of size ", x.shape[i], " to ",
                            attrs.shape[i]);
            }
          }
          if (auto s = CheckShape(c, attrs.shape); !s.ok()) return s;
          return TensorType{x.dtype, attrs.shape};
        }
        case Op::kSlice: {
          const size_t r = x.shape.size();
          if (attrs.starts.size() != r || attrs.limits.size() != r) {
            return c.Fail("starts ", Join(attrs.starts), " and limits ", Join(attrs.limits),
                          " need ", r, " entries");
          }
          if (auto s = CheckPerAxis(c, "strides", attrs.strides, r); !s.ok()) return s;
          Shape shape(r);
          for (size_t i = 0; i < r; ++i) {
            const int64_t start = attrs.starts[i], limit = attrs.limits[i];
            const int64_t stride = At(attrs.strides, i, 1);
            if (start < 0 || start > limit || limit > x.shape[i] || stride < 1) {
              return c.Fail("slice [", start, ":", limit, ":", stride, "] out of bounds for axis ",
                            i, " of size ", x.shape[i]);
            }
            shape[i] = (limit - start + stride - 1) / stride;
          }
          return TensorType{x.dtype, shape};
        }
        case Op::kPad: {
          const size_t r = x.shape.size();
          if (attrs.low.size() != r || attrs.high.size() != r) {
            return c.Fail("low ", Join(attrs.low), " and high ", Join(attrs.high), " need ", r,
                          " entries");
          }
          Shape shape(r);
          for (size_t i = 0; i < r; ++i) {
            if (attrs.low[i] < 0 || attrs.high[i] < 0) return c.Fail("negative padding");
            shape[i] = x.shape[i] + attrs.low[i] + attrs.high[i];
          }
          return TensorType{x.dtype, shape};
        }
        case Op::kConcat: {
          if (auto s = CheckSingleAxis(c, attrs.axes, x.rank()); !s.ok()) return s;
          const int64_t axis = attrs.axes[0];
          TensorType out = x;
          for (size_t k = 1; k < inputs.size(); ++k) {
            const TensorType& y = inputs[k];
            if (y.dtype != x.dtype) return c.Fail("operand dtypes differ");
            if (y.rank() != x.rank()) return c.Fail("operand ranks differ");
            for (int64_t i = 0; i < x.rank(); ++i) {
              if (i != axis && y.shape[i] != x.shape[i]) {
                return c.Fail("operand ", k, " differs from operand 0 on axis ", i);
              }
            }
            out.shape[axis] += y.shape[axis];
          }
          return out;
        }
        case Op::kFlip: {
          if (auto s = CheckAxes(c, attrs.axes, x.rank(), true); !s.ok()) return s;
          return x;
        }
        default:
          break;
      }
      break;
    }

    case OpClass::kIndex: {
      const TensorType& x = inputs[0];
      const TensorType& index = inputs[1];
      if (!IsInteger(index.dtype)) return c.Fail("index must be an integer tensor");
      if (index.rank() != x.rank()) return c.Fail("index rank must equal operand rank");
      if (auto s = CheckSingleAxis(c, attrs.axes, x.rank()); !s.ok()) return s;
      if (op == Op::kGather) {
        for (int64_t i = 0; i < x.rank(); ++i) {
          if (i != attrs.axes[0] && index.shape[i] > x.shape[i]) {
            return c.Fail("index axis ", i, " (", index.shape[i], ") exceeds operand (", x.shape[i],
                          ")");
          }
        }
        return TensorType{x.dtype, index.shape};
      }
      const TensorType& src = inputs[2];
      if (src.dtype != x.dtype) return c.Fail("source dtype must equal operand dtype");
      if (src.shape != index.shape) return c.Fail("source shape must equal index shape");
      if (IsBool(x.dtype)) return c.Fail("cannot add bool");
      for (int64_t i = 0; i < x.rank(); ++i) {
        if (i != attrs.axes[0] && index.shape[i] > x.shape[i]) {
          return c.Fail("index axis ", i, " (", index.shape[i], ") exceeds operand (", x.shape[i],
                        ")");
        }
      }
      return x;
    }

    case OpClass::kContraction: {
      const TensorType& a = inputs[0];
      const TensorType& b = inputs[1];
      DType result = a.dtype;
      if (attrs.accumulate.has_value()) {
        // An integer contraction accumulating in a wider dtype: every operand value converts to
        // it exactly, so the result is the exact sum of products, wrapped at its width.
        result = *attrs.accumulate;
        if (!IsInteger(result)) {
          return c.Fail("accumulate=", DTypeName(result), " is not an integer dtype");
        }
        for (const TensorType* operand : {&a, &b}) {
          const DType d = operand->dtype;
          if (!IsInteger(d) || DTypeSize(d) >= DTypeSize(result) ||
              (IsUnsignedInteger(result) && !IsUnsignedInteger(d))) {
            return c.Fail("accumulate=", DTypeName(result),
                          " needs integer operands that it holds exactly (narrower",
                          IsUnsignedInteger(result) ? ", unsigned)" : ")");
          }
        }
      } else {
        if (a.dtype != b.dtype) return c.Fail("operand dtypes differ");
        if (IsBool(a.dtype)) return c.Fail("needs numeric operands");
      }
      if (op == Op::kMatMul) {
        if (a.rank() < 2 || a.rank() != b.rank()) {
          return c.Fail("needs operands of equal rank >= 2 (broadcast batch axes first)");
        }
        const int64_t r = a.rank();
        for (int64_t i = 0; i < r - 2; ++i) {
          if (a.shape[i] != b.shape[i]) return c.Fail("batch axis ", i, " differs");
        }
        if (a.shape[r - 1] != b.shape[r - 2]) {
          return c.Fail("contracting dimensions differ (", a.shape[r - 1], " vs ", b.shape[r - 2],
                        ")");
        }
        Shape shape = a.shape;
        shape[r - 1] = b.shape[r - 1];
        return TensorType{result, shape};
      }
      // conv: input [N, C, spatial...], weight [O, C / groups, kernel...]; the rule is the
      // leaf library's, which the runtime's convolution driver shares.
      absl::StatusOr<Shape> shape = base::ConvOutputShape(
          a.shape, b.shape,
          base::ConvGeometry{attrs.strides, attrs.low, attrs.high, attrs.dilation,
                             attrs.input_dilation, attrs.groups});
      if (!shape.ok()) return c.Fail(shape.status().message());
      return TensorType{result, *std::move(shape)};
    }

    case OpClass::kWindow: {
      const TensorType& x = inputs[0];
      if (IsBool(x.dtype)) return c.Fail("cannot reduce bool; cast first");
      const size_t r = x.shape.size();
      if (attrs.window.size() != r) {
        return c.Fail("window ", Join(attrs.window), " needs ", r, " entries");
      }
      for (auto [name, v] : {std::pair{"strides", &attrs.strides},
                             {"low", &attrs.low},
                             {"high", &attrs.high},
                             {"dilation", &attrs.dilation}}) {
        if (auto s = CheckPerAxis(c, name, *v, r); !s.ok()) return s;
      }
      Shape shape(r);
      for (size_t i = 0; i < r; ++i) {
        const int64_t stride = At(attrs.strides, i, 1), dil = At(attrs.dilation, i, 1);
        if (attrs.window[i] < 1 || stride < 1 || dil < 1) {
          return c.Fail("window sizes, strides and dilations must be >= 1");
        }
        const int64_t lo = At(attrs.low, i, 0), hi = At(attrs.high, i, 0);
        if (lo < 0 || hi < 0) return c.Fail("negative padding");
        const int64_t out = WindowOutputSize(x.shape[i], attrs.window[i], stride, lo, hi, dil, 1);
        if (out < 0) {
          return c.Fail("window of size ", attrs.window[i], " does not fit axis ", i, " of size ",
                        x.shape[i]);
        }
        shape[i] = out;
      }
      return TensorType{x.dtype, shape};
    }

    case OpClass::kSort: {
      // Every dtype has the total order sort uses (false < true; NaN above every number).
      const TensorType& x = inputs[0];
      if (auto s = CheckSingleAxis(c, attrs.axes, x.rank()); !s.ok()) return s;
      if (op == Op::kArgsort) return TensorType{DType::kI64, x.shape};
      return x;
    }
  }
  return c.Fail("no type rule");
}

}  // namespace kiln::ir
