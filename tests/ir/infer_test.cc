// Type inference (every op's rule, typical and edge cases, and its error messages), the
// builder's deferred, located errors, and the verifier on hand-broken graphs.
#include "ir/infer.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/verifier.h"

// The cases set a few Attrs fields with designated initializers and rely on the defaults for the
// rest, which is exactly what -Wmissing-field-initializers complains about.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TensorType T(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }
TensorType F32(Shape shape) { return T(DType::kF32, std::move(shape)); }

std::string Message(const absl::Status& status) { return std::string(status.message()); }

std::shared_ptr<const TensorData> Literal(DType dtype, Shape shape) {
  return std::make_shared<const TensorData>(dtype, std::move(shape));
}

// One application of a type rule: the result type, or an error whose message (after the op
// name) is `error`; the operand list the message must end with is derived from `inputs`.
struct Case {
  Op op;
  std::vector<TensorType> inputs;
  Attrs attrs;
  std::optional<TensorType> result;
  std::string error;
};

Case Ok(Op op, std::vector<TensorType> inputs, Attrs attrs, TensorType result) {
  return Case{op, std::move(inputs), std::move(attrs), std::move(result), ""};
}
Case Err(Op op, std::vector<TensorType> inputs, Attrs attrs, std::string error) {
  return Case{op, std::move(inputs), std::move(attrs), std::nullopt, std::move(error)};
}

std::vector<Case> Cases() {
  const TensorType f23 = F32({2, 3});
  std::vector<Case> cases = {
      // ---- Leaves.
      Ok(Op::kParameter, {}, {.dtype = DType::kI64, .shape = {2, 0}, .name = "p"},
         T(DType::kI64, {2, 0})),
      Ok(Op::kParameter, {}, {.name = "scalar"}, F32({})),
      Err(Op::kParameter, {}, {.shape = {2}}, "parameter needs a name"),
      Err(Op::kParameter, {}, {.shape = {2, -1}, .name = "p"},
          "negative dimension in shape [2,-1]"),
      Ok(Op::kConstant, {}, {.literal = Literal(DType::kI32, {2})}, T(DType::kI32, {2})),
      Ok(Op::kConstant, {}, {.literal = Literal(DType::kBool, {})}, T(DType::kBool, {})),
      Err(Op::kConstant, {}, {}, "missing literal"),
      Err(Op::kConstant, {F32({})}, {.literal = Literal(DType::kF32, {})},
          "expects 0 operands, got 1"),
      Ok(Op::kFill, {}, {.dtype = DType::kF16, .shape = {3}, .value = 2}, T(DType::kF16, {3})),
      Ok(Op::kFill, {}, {.dtype = DType::kBool}, T(DType::kBool, {})),
      Err(Op::kFill, {}, {.shape = {-3}}, "negative dimension in shape [-3]"),
      Ok(Op::kIota, {}, {.dtype = DType::kI32, .shape = {2, 3}, .axes = {1}},
         T(DType::kI32, {2, 3})),
      Ok(Op::kIota, {}, {.dtype = DType::kF64, .shape = {0}, .axes = {0}}, T(DType::kF64, {0})),
      Err(Op::kIota, {}, {.dtype = DType::kBool, .shape = {2}, .axes = {0}}, "iota of dtype bool"),
      Err(Op::kIota, {}, {.shape = {2, 3}, .axes = {2}}, "axis 2 out of range for rank 2"),
      Err(Op::kIota, {}, {.shape = {2, 3}}, "expects exactly one axis, got []"),
      Err(Op::kIota, {}, {.shape = {}, .axes = {0}}, "axis 0 out of range for rank 0"),
      Ok(Op::kRandomUniform, {}, {.shape = {4}, .seed = 1}, F32({4})),
      Err(Op::kRandomUniform, {}, {.dtype = DType::kI32, .shape = {4}},
          "random values need a float dtype, got i32"),
      Ok(Op::kRandomNormal, {}, {.dtype = DType::kBF16, .shape = {2, 2}}, T(DType::kBF16, {2, 2})),
      Err(Op::kRandomNormal, {}, {.dtype = DType::kBool},
          "random values need a float dtype, got bool"),

      // ---- Unary.
      Ok(Op::kNeg, {T(DType::kI32, {4})}, {}, T(DType::kI32, {4})),
      Err(Op::kNeg, {T(DType::kBool, {4})}, {}, "needs a numeric operand, got bool"),
      Ok(Op::kAbs, {T(DType::kI64, {})}, {}, T(DType::kI64, {})),
      Err(Op::kAbs, {f23, f23}, {}, "expects 1 operands, got 2"),
      Ok(Op::kSign, {T(DType::kU8, {0})}, {}, T(DType::kU8, {0})),
      Err(Op::kSign, {T(DType::kBool, {2})}, {}, "needs a numeric operand, got bool"),
      Ok(Op::kNot, {T(DType::kBool, {2})}, {}, T(DType::kBool, {2})),
      Ok(Op::kNot, {T(DType::kU8, {2})}, {}, T(DType::kU8, {2})),
      Err(Op::kNot, {F32({})}, {}, "needs a bool or integer operand"),
      Err(Op::kNot, {}, {}, "expects 1 operands, got 0"),

      // ---- Binary, compare, logical, select.
      Ok(Op::kAdd, {f23, f23}, {}, f23),
      Ok(Op::kAdd, {F32({}), F32({})}, {}, F32({})),
      Err(Op::kAdd, {F32({2}), T(DType::kF64, {2})}, {}, "operand dtypes differ (f32 vs f64)"),
      Err(Op::kSub, {F32({2}), F32({3})}, {}, "operand shapes differ ([2] vs [3])"),
      Err(Op::kSub, {F32({1}), F32({})}, {}, "operand shapes differ ([1] vs [])"),
      Ok(Op::kMul, {T(DType::kU8, {0, 2}), T(DType::kU8, {0, 2})}, {}, T(DType::kU8, {0, 2})),
      Err(Op::kMul, {T(DType::kBool, {2}), T(DType::kBool, {2})}, {},
          "needs numeric operands, got bool"),
      Ok(Op::kDiv, {T(DType::kI32, {3}), T(DType::kI32, {3})}, {}, T(DType::kI32, {3})),
      Err(Op::kDiv, {T(DType::kI32, {3})}, {}, "expects 2 operands, got 1"),
      Ok(Op::kPow, {T(DType::kF16, {3}), T(DType::kF16, {3})}, {}, T(DType::kF16, {3})),
      Err(Op::kPow, {T(DType::kI32, {3}), T(DType::kI32, {3})}, {}, "needs float operands"),
      Ok(Op::kMax, {T(DType::kI64, {1}), T(DType::kI64, {1})}, {}, T(DType::kI64, {1})),
      Err(Op::kMax, {T(DType::kBool, {}), T(DType::kBool, {})}, {},
          "needs numeric operands, got bool"),
      Ok(Op::kMin, {f23, f23}, {}, f23),
      Err(Op::kMin, {f23, F32({3, 2})}, {}, "operand shapes differ ([2,3] vs [3,2])"),
      Ok(Op::kMod, {T(DType::kI32, {2}), T(DType::kI32, {2})}, {}, T(DType::kI32, {2})),
      Err(Op::kMod, {T(DType::kI32, {2}), T(DType::kI64, {2})}, {},
          "operand dtypes differ (i32 vs i64)"),
      Ok(Op::kEq, {f23, f23}, {}, T(DType::kBool, {2, 3})),
      Ok(Op::kNe, {T(DType::kBool, {2}), T(DType::kBool, {2})}, {}, T(DType::kBool, {2})),
      Ok(Op::kLt, {T(DType::kI64, {}), T(DType::kI64, {})}, {}, T(DType::kBool, {})),
      Ok(Op::kLe, {T(DType::kF64, {0}), T(DType::kF64, {0})}, {}, T(DType::kBool, {0})),
      Ok(Op::kGt, {T(DType::kU8, {1}), T(DType::kU8, {1})}, {}, T(DType::kBool, {1})),
      Ok(Op::kGe, {T(DType::kBF16, {3}), T(DType::kBF16, {3})}, {}, T(DType::kBool, {3})),
      Err(Op::kEq, {F32({2}), T(DType::kI32, {2})}, {}, "operand dtypes differ (f32 vs i32)"),
      Err(Op::kGe, {F32({2}), F32({2, 1})}, {}, "operand shapes differ ([2] vs [2,1])"),
      Ok(Op::kAnd, {T(DType::kBool, {2}), T(DType::kBool, {2})}, {}, T(DType::kBool, {2})),
      Ok(Op::kOr, {T(DType::kI32, {2}), T(DType::kI32, {2})}, {}, T(DType::kI32, {2})),
      Ok(Op::kXor, {T(DType::kU8, {}), T(DType::kU8, {})}, {}, T(DType::kU8, {})),
      Err(Op::kXor, {F32({2}), F32({2})}, {}, "needs bool or integer operands"),
      Err(Op::kAnd, {T(DType::kBool, {2}), T(DType::kU8, {2})}, {},
          "operand dtypes differ (bool vs u8)"),
      Ok(Op::kSelect, {T(DType::kBool, {2}), F32({2}), F32({2})}, {}, F32({2})),
      Ok(Op::kSelect, {T(DType::kBool, {}), T(DType::kI64, {}), T(DType::kI64, {})}, {},
         T(DType::kI64, {})),
      Err(Op::kSelect, {F32({2}), F32({2}), F32({2})}, {}, "condition must be bool, got f32"),
      Err(Op::kSelect, {T(DType::kBool, {2}), F32({2}), T(DType::kF64, {2})}, {},
          "branch dtypes differ"),
      Err(Op::kSelect, {T(DType::kBool, {3}), F32({2}), F32({2})}, {}, "operand shapes differ"),

      // ---- Cast.
      Ok(Op::kCast, {f23}, {.dtype = DType::kI64}, T(DType::kI64, {2, 3})),
      Ok(Op::kCast, {T(DType::kU8, {})}, {.dtype = DType::kBool}, T(DType::kBool, {})),
      Err(Op::kCast, {}, {.dtype = DType::kI64}, "expects 1 operands, got 0"),

      // ---- Reductions.
      Ok(Op::kReduceSum, {T(DType::kI32, {2, 3, 4})}, {.axes = {0, 2}}, T(DType::kI32, {1, 3, 1})),
      Ok(Op::kReduceSum, {f23}, {}, f23),
      Ok(Op::kReduceSum, {F32({})}, {}, F32({})),
      Err(Op::kReduceSum, {f23}, {.axes = {2}}, "axis 2 out of range for rank 2"),
      Ok(Op::kReduceProd, {F32({0, 3})}, {.axes = {0}}, F32({1, 3})),
      Err(Op::kReduceProd, {T(DType::kBool, {2})}, {.axes = {0}}, "cannot reduce bool; cast first"),
      Ok(Op::kReduceMax, {f23}, {.axes = {0, 1}}, F32({1, 1})),
      Err(Op::kReduceMax, {F32({0, 3})}, {.axes = {0}},
          "reduction of an empty axis 0 has no identity"),
      Ok(Op::kReduceMin, {T(DType::kU8, {4, 0})}, {.axes = {0}}, T(DType::kU8, {1, 0})),
      Err(Op::kReduceMin, {f23}, {.axes = {1, 0}}, "axes [1,0] not sorted"),
      Err(Op::kReduceMin, {f23}, {.axes = {1, 1}}, "axis 1 repeated in [1,1]"),
      Err(Op::kReduceMin, {f23}, {.axes = {-1}}, "axis -1 out of range for rank 2"),
      Ok(Op::kArgMax, {f23}, {.axes = {1}}, T(DType::kI64, {2, 1})),
      Ok(Op::kArgMax, {T(DType::kU8, {5})}, {.axes = {0}}, T(DType::kI64, {1})),
      Err(Op::kArgMax, {F32({0, 3})}, {.axes = {0}}, "empty axis 0"),
      Ok(Op::kArgMin, {T(DType::kI32, {2, 0})}, {.axes = {0}}, T(DType::kI64, {1, 0})),
      Err(Op::kArgMin, {f23}, {.axes = {0, 1}}, "expects exactly one axis, got [0,1]"),
      Err(Op::kArgMin, {T(DType::kBool, {2})}, {.axes = {0}}, "cannot reduce bool; cast first"),

      // ---- Movement.
      Ok(Op::kReshape, {f23}, {.shape = {3, 2}}, F32({3, 2})),
      Ok(Op::kReshape, {F32({1, 1})}, {}, F32({})),
      Ok(Op::kReshape, {F32({0, 3})}, {.shape = {5, 0}}, F32({5, 0})),
      Err(Op::kReshape, {f23}, {.shape = {4}}, "cannot reshape 6 elements to [4]"),
      Err(Op::kReshape, {f23}, {.shape = {-2, -3}}, "negative dimension in shape [-2,-3]"),
      Ok(Op::kPermute, {F32({2, 3, 4})}, {.axes = {2, 0, 1}}, F32({4, 2, 3})),
      Ok(Op::kPermute, {F32({})}, {}, F32({})),
      Err(Op::kPermute, {f23}, {.axes = {0}}, "permutation [0] does not match rank 2"),
      Err(Op::kPermute, {f23}, {.axes = {1, 1}}, "axis 1 repeated in [1,1]"),
      Ok(Op::kBroadcast, {F32({1, 3})}, {.shape = {4, 3}}, F32({4, 3})),
      Ok(Op::kBroadcast, {F32({2, 1})}, {.shape = {2, 0}}, F32({2, 0})),
      Err(Op::kBroadcast, {F32({1, 3})}, {.shape = {3}},
          "target [3] must have rank 2 (reshape first)"),
      Err(Op::kBroadcast, {F32({2, 3})}, {.shape = {2, 4}},
          "cannot broadcast axis 1 of size 3 to 4"),
      Ok(Op::kSlice, {F32({5, 6})}, {.starts = {1, 0}, .limits = {4, 6}, .strides = {2, 3}},
         F32({2, 2})),
      Ok(Op::kSlice, {F32({5, 6})}, {.starts = {2, 6}, .limits = {2, 6}}, F32({0, 0})),
      Ok(Op::kSlice, {F32({})}, {}, F32({})),
      Err(Op::kSlice, {F32({5, 6})}, {.starts = {3, 0}, .limits = {2, 6}},
          "slice [3:2:1] out of bounds for axis 0 of size 5"),
      Err(Op::kSlice, {F32({5, 6})}, {.starts = {0, 0}, .limits = {5, 7}},
          "slice [0:7:1] out of bounds for axis 1 of size 6"),
      Err(Op::kSlice, {F32({5, 6})}, {.starts = {0, 0}, .limits = {5, 6}, .strides = {1, 0}},
          "slice [0:6:0] out of bounds for axis 1 of size 6"),
      Err(Op::kSlice, {F32({5, 6})}, {.starts = {0}, .limits = {1}},
          "starts [0] and limits [1] need 2 entries"),
      Err(Op::kSlice, {F32({5, 6})}, {.starts = {0, 0}, .limits = {5, 6}, .strides = {1}},
          "strides [1] needs 2 entries"),
      Ok(Op::kPad, {f23}, {.low = {1, 0}, .high = {0, 2}}, F32({3, 5})),
      Ok(Op::kPad, {F32({0})}, {.low = {2}, .high = {0}, .value = 1}, F32({2})),
      Err(Op::kPad, {f23}, {.low = {1, -1}, .high = {0, 0}}, "negative padding"),
      Err(Op::kPad, {f23}, {.low = {1}, .high = {0}}, "low [1] and high [0] need 2 entries"),
      Ok(Op::kConcat, {f23, F32({2, 1}), F32({2, 0})}, {.axes = {1}}, F32({2, 4})),
      Ok(Op::kConcat, {f23}, {.axes = {0}}, f23),
      Err(Op::kConcat, {}, {.axes = {0}}, "expects at least one operand"),
      Err(Op::kConcat, {f23, T(DType::kF64, {2, 3})}, {.axes = {0}}, "operand dtypes differ"),
      Err(Op::kConcat, {f23, F32({2})}, {.axes = {0}}, "operand ranks differ"),
      Err(Op::kConcat, {f23, F32({3, 3})}, {.axes = {1}},
          "operand 1 differs from operand 0 on axis 0"),
      Err(Op::kConcat, {F32({})}, {.axes = {0}}, "axis 0 out of range for rank 0"),
      Ok(Op::kFlip, {f23}, {.axes = {0, 1}}, f23),
      Ok(Op::kFlip, {F32({})}, {}, F32({})),
      Err(Op::kFlip, {f23}, {.axes = {2}}, "axis 2 out of range for rank 2"),

      // ---- Indexing.
      Ok(Op::kGather, {F32({3, 4}), T(DType::kI64, {2, 4})}, {.axes = {0}}, F32({2, 4})),
      Ok(Op::kGather, {F32({3, 4}), T(DType::kI32, {5, 2})}, {.axes = {0}}, F32({5, 2})),
      Err(Op::kGather, {F32({3, 4}), F32({2, 4})}, {.axes = {0}},
          "index must be an integer tensor"),
      Err(Op::kGather, {F32({3, 4}), T(DType::kI64, {2})}, {.axes = {0}},
          "index rank must equal operand rank"),
      Err(Op::kGather, {F32({3, 4}), T(DType::kI64, {2, 5})}, {.axes = {0}},
          "index axis 1 (5) exceeds operand (4)"),
      Err(Op::kGather, {F32({3, 4}), T(DType::kI64, {2, 4})}, {},
          "expects exactly one axis, got []"),
      Ok(Op::kScatterAdd, {F32({3, 4}), T(DType::kI64, {2, 4}), F32({2, 4})}, {.axes = {0}},
         F32({3, 4})),
      Ok(Op::kScatterAdd, {T(DType::kI32, {3}), T(DType::kU8, {7}), T(DType::kI32, {7})},
         {.axes = {0}}, T(DType::kI32, {3})),
      Err(Op::kScatterAdd, {F32({3, 4}), T(DType::kI64, {2, 4}), T(DType::kF64, {2, 4})},
          {.axes = {0}}, "source dtype must equal operand dtype"),
      Err(Op::kScatterAdd, {F32({3, 4}), T(DType::kI64, {2, 4}), F32({2, 3})}, {.axes = {0}},
          "source shape must equal index shape"),
      Err(Op::kScatterAdd, {T(DType::kBool, {3}), T(DType::kI64, {2}), T(DType::kBool, {2})},
          {.axes = {0}}, "cannot add bool"),
      Err(Op::kScatterAdd, {F32({3, 4}), T(DType::kI64, {2, 5}), F32({2, 5})}, {.axes = {0}},
          "index axis 1 (5) exceeds operand (4)"),

      // ---- Contractions.
      Ok(Op::kMatMul, {f23, F32({3, 5})}, {}, F32({2, 5})),
      Ok(Op::kMatMul, {T(DType::kI32, {7, 2, 3}), T(DType::kI32, {7, 3, 4})}, {},
         T(DType::kI32, {7, 2, 4})),
      Ok(Op::kMatMul, {F32({2, 0}), F32({0, 3})}, {}, F32({2, 3})),
      Err(Op::kMatMul, {f23, F32({4, 5})}, {}, "contracting dimensions differ (3 vs 4)"),
      Err(Op::kMatMul, {F32({7, 2, 3}), F32({6, 3, 4})}, {}, "batch axis 0 differs"),
      Err(Op::kMatMul, {F32({3}), F32({3})}, {},
          "needs operands of equal rank >= 2 (broadcast batch axes first)"),
      Err(Op::kMatMul, {F32({2, 3}), F32({1, 3, 4})}, {},
          "needs operands of equal rank >= 2 (broadcast batch axes first)"),
      Err(Op::kMatMul, {T(DType::kBool, {2, 2}), T(DType::kBool, {2, 2})}, {},
          "needs numeric operands"),
      Err(Op::kMatMul, {f23, T(DType::kF64, {3, 5})}, {}, "operand dtypes differ"),
      // Integer contractions accumulating in a wider dtype (ONNX MatMulInteger / ConvInteger).
      Ok(Op::kMatMul, {T(DType::kU8, {2, 3}), T(DType::kI8, {3, 5})}, {.accumulate = DType::kI32},
         T(DType::kI32, {2, 5})),
      Ok(Op::kMatMul, {T(DType::kI16, {2, 3}), T(DType::kU8, {3, 5})}, {.accumulate = DType::kI32},
         T(DType::kI32, {2, 5})),
      Ok(Op::kMatMul, {T(DType::kU8, {2, 3}), T(DType::kU16, {3, 5})}, {.accumulate = DType::kU32},
         T(DType::kU32, {2, 5})),
      Ok(Op::kConv, {T(DType::kU8, {1, 3, 5, 5}), T(DType::kI8, {8, 3, 3, 3})},
         {.accumulate = DType::kI32}, T(DType::kI32, {1, 8, 3, 3})),
      Err(Op::kMatMul, {T(DType::kU8, {2, 3}), T(DType::kI8, {3, 5})}, {.accumulate = DType::kF32},
          "accumulate=f32 is not an integer dtype"),
      Err(Op::kMatMul, {T(DType::kI32, {2, 3}), T(DType::kI8, {3, 5})}, {.accumulate = DType::kI32},
          "accumulate=i32 needs integer operands that it holds exactly (narrower)"),
      Err(Op::kMatMul, {T(DType::kU8, {2, 3}), T(DType::kI8, {3, 5})}, {.accumulate = DType::kU32},
          "accumulate=u32 needs integer operands that it holds exactly (narrower, unsigned)"),
      Err(Op::kConv, {F32({1, 3, 5, 5}), F32({8, 3, 3, 3})}, {.accumulate = DType::kI64},
          "accumulate=i64 needs integer operands that it holds exactly (narrower)"),
      Err(Op::kMatMul, {T(DType::kU8, {2, 3}), T(DType::kI8, {4, 5})}, {.accumulate = DType::kI32},
          "contracting dimensions differ (3 vs 4)"),
      Ok(Op::kConv, {F32({1, 3, 5, 5}), F32({8, 3, 3, 3})}, {}, F32({1, 8, 3, 3})),
      // (5 + 1 + 1 - 3) / 2 + 1 = 3 per axis.
      Ok(Op::kConv, {F32({1, 3, 5, 5}), F32({8, 3, 3, 3})},
         {.strides = {2, 2}, .low = {1, 1}, .high = {1, 1}}, F32({1, 8, 3, 3})),
      Ok(Op::kConv, {F32({2, 4, 6}), F32({6, 2, 3})}, {.groups = 2}, F32({2, 6, 4})),
      // Dilated kernel spans 5: 7 - 5 + 1 = 3.
      Ok(Op::kConv, {F32({1, 1, 7}), F32({1, 1, 3})}, {.dilation = {2}}, F32({1, 1, 3})),
      // Dilated input spans 7: 7 - 3 + 1 = 5.
      Ok(Op::kConv, {F32({1, 1, 4}), F32({1, 1, 3})}, {.input_dilation = {2}}, F32({1, 1, 5})),
      Err(Op::kConv, {F32({1, 3, 5, 5}), F32({8, 3, 6, 3})}, {},
          "kernel of size 6 does not fit spatial axis 0 of size 5"),
      Err(Op::kConv, {F32({1, 3, 5}), F32({4, 1, 3})}, {.groups = 2},
          "groups 2 must divide input channels 3 and output channels 4"),
      Err(Op::kConv, {F32({1, 3, 5}), F32({4, 2, 3})}, {},
          "weight has 2 input channels per group, input has 3 channels in 1 groups"),
      Err(Op::kConv, {F32({1, 3, 5, 5}), F32({8, 3, 3, 3})}, {.strides = {1}},
          "strides [1] needs 2 entries"),
      Err(Op::kConv, {F32({1, 3, 5}), F32({8, 3, 3})}, {.strides = {0}},
          "strides and dilations must be >= 1"),
      Err(Op::kConv, {f23, f23}, {},
          "needs input [N,C,...] and weight [O,C/groups,...] of equal rank >= 3"),
      Ok(Op::kWindowSum, {F32({4, 6})}, {.strides = {2, 2}, .window = {2, 2}}, F32({2, 3})),
      // (4 + 1 + 1 - 3) / 1 + 1 = 4.
      Ok(Op::kWindowSum, {F32({4, 6})}, {.low = {1, 0}, .high = {1, 0}, .window = {3, 1}},
         F32({4, 6})),
      Err(Op::kWindowSum, {F32({4, 6})}, {.window = {5, 1}},
          "window of size 5 does not fit axis 0 of size 4"),
      Err(Op::kWindowSum, {F32({4, 6})}, {.low = {-1, 0}, .window = {1, 1}}, "negative padding"),
      // Dilated window spans 3: 4 - 3 + 1 = 2.
      Ok(Op::kWindowMax, {T(DType::kI32, {4, 6})}, {.dilation = {2, 1}, .window = {2, 1}},
         T(DType::kI32, {2, 6})),
      Err(Op::kWindowMax, {F32({4, 6})}, {.window = {2}}, "window [2] needs 2 entries"),
      Err(Op::kWindowMax, {T(DType::kBool, {4})}, {.window = {2}},
          "cannot reduce bool; cast first"),
      Err(Op::kWindowMax, {F32({4})}, {.window = {0}},
          "window sizes, strides and dilations must be >= 1"),
      Ok(Op::kSort, {T(DType::kBF16, {2, 5})}, {.axes = {1}}, T(DType::kBF16, {2, 5})),
      Ok(Op::kSort, {T(DType::kBool, {0, 3})}, {.axes = {0}}, T(DType::kBool, {0, 3})),
      Err(Op::kSort, {F32({2, 5})}, {.axes = {0, 1}}, "expects exactly one axis, got [0,1]"),
      Ok(Op::kArgsort, {T(DType::kU8, {4, 3})}, {.axes = {0}}, T(DType::kI64, {4, 3})),
      Err(Op::kArgsort, {F32({4})}, {.axes = {1}}, "axis 1 out of range for rank 1"),
  };
  // The float-only unary ops share one rule.
  for (Op op : {Op::kExp, Op::kLog, Op::kSqrt, Op::kRsqrt, Op::kSin, Op::kCos, Op::kTanh, Op::kErf,
                Op::kFloor, Op::kCeil, Op::kRound, Op::kReciprocal}) {
    cases.push_back(Ok(op, {f23}, {}, f23));
    cases.push_back(Ok(op, {T(DType::kBF16, {})}, {}, T(DType::kBF16, {})));
    cases.push_back(Err(op, {T(DType::kI32, {3})}, {}, "needs a float operand, got i32"));
    cases.push_back(Err(op, {T(DType::kBool, {3})}, {}, "needs a float operand, got bool"));
  }
  // So do the arithmetic binary ops and the comparisons.
  for (Op op : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kMax, Op::kMin, Op::kMod}) {
    cases.push_back(
        Ok(op, {T(DType::kI64, {2, 0}), T(DType::kI64, {2, 0})}, {}, T(DType::kI64, {2, 0})));
    cases.push_back(Err(op, {T(DType::kBool, {2}), T(DType::kBool, {2})}, {},
                        "needs numeric operands, got bool"));
  }
  for (Op op : {Op::kEq, Op::kNe, Op::kLt, Op::kLe, Op::kGt, Op::kGe}) {
    cases.push_back(
        Ok(op, {T(DType::kF64, {2, 0}), T(DType::kF64, {2, 0})}, {}, T(DType::kBool, {2, 0})));
    cases.push_back(
        Err(op, {F32({2}), T(DType::kF16, {2})}, {}, "operand dtypes differ (f32 vs f16)"));
    cases.push_back(Err(op, {F32({2})}, {}, "expects 2 operands, got 1"));
  }
  for (Op op : {Op::kAnd, Op::kOr, Op::kXor}) {
    cases.push_back(Ok(op, {T(DType::kI64, {3}), T(DType::kI64, {3})}, {}, T(DType::kI64, {3})));
    cases.push_back(Err(op, {T(DType::kBF16, {3}), T(DType::kBF16, {3})}, {},
                        "needs bool or integer operands"));
  }
  return cases;
}

std::string OperandSuffix(const std::vector<TensorType>& inputs) {
  if (inputs.empty()) return "";
  return absl::StrCat("; operands ",
                      absl::StrJoin(inputs, ", ", [](std::string* out, const TensorType& t) {
                        out->append(TypeToString(t));
                      }));
}

TEST(InferTest, EveryCase) {
  for (const Case& c : Cases()) {
    const std::string what = absl::StrCat(OpName(c.op), OperandSuffix(c.inputs), " -> ",
                                          c.result ? TypeToString(*c.result) : c.error);
    absl::StatusOr<TensorType> type = InferType(c.op, c.inputs, c.attrs);
    if (c.result) {
      ASSERT_TRUE(type.ok()) << what << ": " << type.status();
      EXPECT_EQ(*type, *c.result) << what << ": got " << TypeToString(*type);
    } else {
      ASSERT_FALSE(type.ok()) << what << ": got " << TypeToString(*type);
      EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
      // "<op>: <rule>; operands <types>".
      EXPECT_EQ(Message(type.status()),
                absl::StrCat(OpName(c.op), ": ", c.error, OperandSuffix(c.inputs)));
    }
  }
}

TEST(InferTest, EveryOpHasPassingAndFailingCases) {
  std::map<Op, int> passing, failing;
  for (const Case& c : Cases()) ++(c.result ? passing : failing)[c.op];
  for (Op op : kAllOps) {
    EXPECT_GT(passing[op], 0) << OpName(op) << " has no passing case";
    EXPECT_GT(failing[op], 0) << OpName(op) << " has no failing case";
  }
}

TEST(InferTest, NumOperandsAgreesWithTheCases) {
  for (const Case& c : Cases()) {
    if (!c.result) continue;
    const int arity = NumOperands(c.op);
    if (c.op == Op::kConcat) {
      EXPECT_EQ(arity, -1);
    } else {
      EXPECT_EQ(arity, static_cast<int>(c.inputs.size())) << OpName(c.op);
    }
  }
}

TEST(InferTest, MatmulMessageNamesOpAndOperandTypes) {
  const std::vector<TensorType> inputs = {F32({2, 3}), F32({4, 5})};
  absl::StatusOr<TensorType> type = InferType(Op::kMatMul, inputs, {});
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(Message(type.status()),
            "matmul: contracting dimensions differ (3 vs 4); operands f32[2,3], f32[4,5]");
}

TEST(InferTest, WindowOutputSize) {
  // floor((dilated_in + low + high - dilated_window) / stride) + 1, evident cases.
  EXPECT_EQ(WindowOutputSize(5, 3, 1, 0, 0, 1, 1), 3);
  EXPECT_EQ(WindowOutputSize(5, 3, 2, 0, 0, 1, 1), 2);
  EXPECT_EQ(WindowOutputSize(5, 3, 2, 1, 1, 1, 1), 3);
  EXPECT_EQ(WindowOutputSize(5, 5, 1, 0, 0, 1, 1), 1);
  EXPECT_EQ(WindowOutputSize(5, 6, 1, 0, 0, 1, 1), -1);
  EXPECT_EQ(WindowOutputSize(7, 3, 1, 0, 0, 2, 1), 3);   // Window spans 5.
  EXPECT_EQ(WindowOutputSize(4, 3, 1, 0, 0, 1, 2), 5);   // Input spans 7.
  EXPECT_EQ(WindowOutputSize(0, 1, 1, 0, 0, 1, 1), -1);  // Nothing to cover.
  EXPECT_EQ(WindowOutputSize(0, 1, 1, 1, 0, 1, 1), 1);   // Only padding.
  EXPECT_EQ(WindowOutputSize(5, 1, 0, 0, 0, 1, 1), -1);  // Stride 0.
}

// ---- Builder --------------------------------------------------------------------------------

TEST(BuilderTest, ErrorsCarryTheCallersLine) {
  Builder b;
  const NodeId a = b.Parameter("a", F32({2, 3}));
  const NodeId c = b.Parameter("c", F32({4, 5}));
  const int line = __LINE__ + 1;
  const NodeId product = b.MatMul(a, c);
  EXPECT_EQ(product, kInvalidNode);
  EXPECT_EQ(Message(b.status()),
            absl::StrCat(__FILE__, ":", line,
                         ": matmul: contracting dimensions differ (3 vs 4); operands f32[2,3], "
                         "f32[4,5]"));
}

TEST(BuilderTest, ErrorsAreDeferredAndTheFirstIsKept) {
  Builder b;
  const NodeId x = b.Parameter("x", F32({2}));
  const NodeId y = b.Parameter("y", F32({3}));
  const int first_line = __LINE__ + 1;
  const NodeId bad = b.Binary(Op::kAdd, x, y);
  EXPECT_EQ(bad, kInvalidNode);
  // Later ops, valid or not, are skipped and do not replace the first error.
  EXPECT_EQ(b.Unary(Op::kExp, x), kInvalidNode);
  EXPECT_EQ(b.Unary(Op::kExp, bad), kInvalidNode);
  EXPECT_EQ(b.Reduce(Op::kReduceSum, x, {5}), kInvalidNode);
  EXPECT_EQ(b.Parameter("x", F32({})), kInvalidNode);
  b.Output(x);
  EXPECT_EQ(b.graph().num_nodes(), 2);
  EXPECT_TRUE(b.graph().outputs().empty());
  const std::string expected = absl::StrCat(__FILE__, ":", first_line,
                                            ": add: operand shapes differ ([2] vs [3]); "
                                            "operands f32[2], f32[3]");
  EXPECT_EQ(Message(b.status()), expected);
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(Message(graph.status()), expected);
}

TEST(BuilderTest, MissingOperandsDuplicateParametersAndBadOutputs) {
  {
    Builder b;
    const int line = __LINE__ + 1;
    b.Unary(Op::kNeg, 7);
    EXPECT_EQ(Message(b.status()),
              absl::StrCat(__FILE__, ":", line, ": neg: operand %7 does not exist"));
  }
  {
    Builder b;
    b.Parameter("x", F32({}));
    const int line = __LINE__ + 1;
    b.Parameter("x", F32({2}));
    EXPECT_EQ(Message(b.status()),
              absl::StrCat(__FILE__, ":", line, ": parameter: name \"x\" already used"));
  }
  {
    Builder b;
    b.Output(3);
    EXPECT_EQ(Message(b.status()), "output: node %3 does not exist");
  }
  {
    // Output names must be unique: the builder leaves that to Verify, which Build runs.
    Builder b;
    const NodeId x = b.Parameter("x", F32({}));
    b.Output(x, "y");
    b.Output(x, "y");
    EXPECT_TRUE(b.status().ok());
    absl::StatusOr<Graph> graph = std::move(b).Build();
    ASSERT_FALSE(graph.ok());
    EXPECT_EQ(Message(graph.status()), "output name \"y\" used twice");
  }
}

TEST(BuilderTest, BuildsAndRecordsTypesAttrsAndLocations) {
  Builder b;
  const NodeId x = b.Parameter("x", F32({2, 3}));
  const int line = __LINE__ + 1;
  const NodeId sum = b.Reduce(Op::kReduceSum, x, {1});
  const NodeId wide = b.Broadcast(sum, {2, 4});
  b.Output(wide, "out");
  EXPECT_EQ(b.type(sum), F32({2, 1}));
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->num_nodes(), 3);
  EXPECT_EQ(graph->node(sum).attrs.axes, std::vector<int64_t>{1});
  EXPECT_EQ(graph->node(wide).attrs.shape, Shape({2, 4}));
  EXPECT_EQ(graph->node(wide).inputs, std::vector<NodeId>{sum});
  EXPECT_EQ(LocationToString(graph->node(sum).loc), absl::StrCat(__FILE__, ":", line));
  EXPECT_EQ(graph->outputs(), (std::vector<Output>{{wide, "out"}}));
  EXPECT_EQ(graph->Parameters(), std::vector<NodeId>{x});
  EXPECT_EQ(graph->FindParameter("x"), x);
  EXPECT_EQ(graph->FindParameter("nope"), kInvalidNode);

  // A builder can extend an existing graph.
  Builder more(*std::move(graph));
  const NodeId neg = more.Unary(Op::kNeg, wide);
  more.Output(neg);
  absl::StatusOr<Graph> extended = std::move(more).Build();
  ASSERT_TRUE(extended.ok()) << extended.status();
  EXPECT_EQ(extended->num_nodes(), 4);
  EXPECT_EQ(extended->outputs().size(), 2u);
}

// ---- Verifier -------------------------------------------------------------------------------

Graph Valid() {
  Builder b;
  const NodeId x = b.Parameter("x", F32({2}));
  const NodeId y = b.Parameter("y", F32({2}));
  b.Output(b.Binary(Op::kAdd, x, y), "sum");
  absl::StatusOr<Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok());
  return *std::move(graph);
}

TEST(VerifierTest, AcceptsValidGraphs) {
  EXPECT_TRUE(Verify(Valid()).ok());
  EXPECT_TRUE(Verify(Graph()).ok());
}

TEST(VerifierTest, CatchesAWrongResultType) {
  Graph graph = Valid();
  graph.mutable_node(2).type = F32({3});
  const absl::Status status = Verify(graph);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(Message(status), StartsWith("%2 = add ("));  // With the builder's location.
  EXPECT_THAT(Message(status), HasSubstr("infer_test.cc:"));
  EXPECT_THAT(Message(status), HasSubstr(": result type f32[3] should be f32[2]"));
}

TEST(VerifierTest, CatchesForwardAndDanglingReferences) {
  Graph graph;
  Node neg;
  neg.op = Op::kNeg;
  neg.inputs = {1};
  neg.type = F32({});
  graph.AddNode(neg);
  Node fill;
  fill.op = Op::kFill;
  fill.type = F32({});
  graph.AddNode(fill);
  EXPECT_EQ(Message(Verify(graph)), "%0 = neg: operand %1 is not an earlier node");
  graph.mutable_node(0).inputs = {-1};
  EXPECT_EQ(Message(Verify(graph)), "%0 = neg: operand %-1 is not an earlier node");
  graph.mutable_node(0).inputs = {0};  // Itself.
  EXPECT_EQ(Message(Verify(graph)), "%0 = neg: operand %0 is not an earlier node");
}

TEST(VerifierTest, CatchesUnusedAttributes) {
  Graph graph = Valid();
  graph.mutable_node(2).attrs.axes = {0};
  EXPECT_THAT(Message(Verify(graph)),
              HasSubstr(absl::StrCat(": sets attributes the op does not use (mask 0x",
                                     absl::Hex(kAttrAxes), ")")));
  graph = Valid();
  graph.mutable_node(2).attrs.seed = 1;
  graph.mutable_node(2).attrs.name = "n";
  EXPECT_THAT(Message(Verify(graph)),
              HasSubstr(absl::StrCat("(mask 0x", absl::Hex(kAttrSeed | kAttrName), ")")));
}

TEST(VerifierTest, CatchesDuplicateNamesAndBadOutputs) {
  Graph graph = Valid();
  graph.mutable_node(1).attrs.name = "x";
  EXPECT_THAT(Message(Verify(graph)), HasSubstr(": parameter name \"x\" used twice"));
  EXPECT_THAT(Message(Verify(graph)), StartsWith("%1 = parameter"));

  graph = Valid();
  graph.AddOutput(9);
  EXPECT_EQ(Message(Verify(graph)), "output %9 does not name a node");
  graph = Valid();
  graph.AddOutput(0, "sum");
  EXPECT_EQ(Message(Verify(graph)), "output name \"sum\" used twice");
  graph = Valid();
  graph.AddOutput(0);
  graph.AddOutput(1);  // Unnamed outputs may repeat... names only need to be unique when set.
  EXPECT_TRUE(Verify(graph).ok());
}

TEST(VerifierTest, CatchesTypeRuleViolations) {
  Graph graph = Valid();
  graph.mutable_node(1).attrs.dtype = DType::kF64;
  graph.mutable_node(1).type = T(DType::kF64, {2});
  const std::string message = Message(Verify(graph));
  EXPECT_THAT(message, StartsWith("%2 = add"));
  EXPECT_THAT(message,
              HasSubstr("add: operand dtypes differ (f32 vs f64); operands f32[2], f64[2]"));
}

}  // namespace
}  // namespace kiln::ir
