// codegen::Legalize: the printed kernel IR of each rewrite (like LLVM's pass tests), and its
// results against the reference semantics of the original kernel (kernel_eval) on every edge
// value of every IR dtype: floored division and modulo by 0, -1 and across signs, INT_MIN,
// casts at and beyond the limits, NaN, infinities and signed zeros.
#include "codegen/legalize.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/kernel_eval.h"
#include "codegen/kernel_ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/tensor_data.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// out[gid] = op(in...[gid]) with one input per operand, all of dtype `in_dtype`.
Kernel OneOpKernel(ExprOp op, ir::DType in_dtype, ir::DType out_dtype, int operands, int64_t n) {
  KernelBuilder b(absl::StrCat(ExprOpName(op), "_", ir::DTypeName(in_dtype)));
  std::vector<ArgId> in;
  for (int i = 0; i < operands; ++i) {
    in.push_back(b.AddArg({absl::StrCat("x", i), in_dtype, n, ArgRole::kInput}));
  }
  const ArgId out = b.AddArg({"y", out_dtype, n, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  std::vector<ValueId> x;
  for (ArgId a : in) x.push_back(b.Load(a, gid));
  const ScalarType to = ComputeType(out_dtype);
  const ValueId y = op == ExprOp::kCast ? b.Cast(x[0], to) : b.Binary(op, x[0], x[1]);
  b.Store(out, gid, y);
  return std::move(b).Finish(n);
}

// Runs `kernel` on copies of `inputs` and returns the output buffer.
ir::TensorData Evaluate(const Kernel& kernel, std::vector<ir::TensorData> inputs) {
  const KernelArg& out_arg = kernel.args.back();
  ir::TensorData out(out_arg.dtype, {out_arg.num_elements});
  std::vector<ir::TensorData*> args;
  for (ir::TensorData& t : inputs) args.push_back(&t);
  args.push_back(&out);
  const absl::Status status = EvalKernelOnTensors(kernel, args);
  EXPECT_TRUE(status.ok()) << status << "\n" << PrintKernel(kernel);
  return out;
}

// Bit-for-bit equality of two buffers, naming the first differing element.
void ExpectSameBits(const ir::TensorData& got, const ir::TensorData& want,
                    const std::vector<ir::TensorData>& inputs) {
  ASSERT_EQ(got.num_elements(), want.num_elements());
  const size_t size = static_cast<size_t>(ir::DTypeSize(got.dtype()));
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    if (std::memcmp(got.data() + i * size, want.data() + i * size, size) != 0) {
      std::string operands;
      for (const ir::TensorData& t : inputs) absl::StrAppend(&operands, " ", t.GetDouble(i));
      ADD_FAILURE() << "element " << i << " (operands" << operands << "): legalized "
                    << got.GetDouble(i) << ", reference " << want.GetDouble(i);
      return;
    }
  }
}

std::vector<double> EdgeValues(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kI32:
      return {0,          1,          -1, 2, -2, 3, -3, 7, -7, 100, -100, 2147483647, -2147483648.0,
              2147483646, -2147483647};
    case ir::DType::kI64:
      return {0,
              1,
              -1,
              2,
              -2,
              7,
              -7,
              1e15 + 3,
              -1e15 - 3,
              9223372036854775807.0,
              -9223372036854775808.0};
    case ir::DType::kU8:
      return {0, 1, 2, 3, 7, 100, 127, 128, 254, 255};
    case ir::DType::kBool:
      return {0, 1};
    default: {
      const double inf = std::numeric_limits<double>::infinity();
      return {0.0,           -0.0,
              0.5,           -0.5,
              1.0,           -1.0,
              2.5,           -3.5,
              255.0,         255.5,
              256.0,         -1.5,
              0x1p31,        -0x1p31,
              0x1p32,        0x1p63,
              -0x1p63,       0x1p64,
              1e30,          -1e30,
              inf,           -inf,
              std::nan(""),  2147483520.0,
              -2147483904.0, 9007199254740993.0};
    }
  }
}

constexpr ir::DType kDTypes[] = {ir::DType::kF32,  ir::DType::kF64, ir::DType::kF16,
                                 ir::DType::kBF16, ir::DType::kI32, ir::DType::kI64,
                                 ir::DType::kU8,   ir::DType::kBool};

TEST(LegalizeTest, SignedDivisionPrintsAsUnsignedOps) {
  const Kernel before = OneOpKernel(ExprOp::kDiv, ir::DType::kI32, ir::DType::kI32, 2, 4);
  const Kernel after = Legalize(before);
  const std::string text = PrintKernel(after);
  EXPECT_THAT(PrintKernel(before), HasSubstr("div.i32"));
  EXPECT_THAT(text, Not(HasSubstr("div.i32"))) << text;
  EXPECT_THAT(text, HasSubstr("udiv.u32")) << text;
  EXPECT_THAT(text, HasSubstr("urem.u32")) << text;
  EXPECT_THAT(text, HasSubstr("wrap.u32")) << text;
  EXPECT_THAT(text, HasSubstr("xor.bool")) << text;
  EXPECT_TRUE(VerifyKernel(after).ok()) << VerifyKernel(after);
  EXPECT_FALSE(NeedsLegalization(after));
  // Unsigned division is udiv itself; a kernel with nothing to rewrite comes back unchanged.
  const std::string unsigned_text =
      PrintKernel(Legalize(OneOpKernel(ExprOp::kDiv, ir::DType::kU8, ir::DType::kU8, 2, 4)));
  EXPECT_THAT(unsigned_text, HasSubstr("udiv.u8")) << unsigned_text;
  const Kernel plain = OneOpKernel(ExprOp::kAdd, ir::DType::kI32, ir::DType::kI32, 2, 4);
  EXPECT_FALSE(NeedsLegalization(plain));
  EXPECT_EQ(PrintKernel(Legalize(plain)), PrintKernel(plain));
}

TEST(LegalizeTest, CastsPrintAsConvertClampWrapAndCompares) {
  const auto legal = [](ir::DType from, ir::DType to) {
    return PrintKernel(Legalize(OneOpKernel(ExprOp::kCast, from, to, 1, 4)));
  };
  // float -> int: a range test, convert of the in-range value, the saturated limits.
  const std::string to_int = legal(ir::DType::kF32, ir::DType::kI32);
  EXPECT_THAT(to_int, HasSubstr("convert.i32")) << to_int;
  EXPECT_THAT(to_int, HasSubstr("2147483647:i32")) << to_int;
  EXPECT_THAT(to_int, Not(HasSubstr("cast."))) << to_int;
  // int -> int: clamp in the source type, then wrap.
  const std::string narrow = legal(ir::DType::kI64, ir::DType::kU8);
  EXPECT_THAT(narrow, HasSubstr("max.i64")) << narrow;
  EXPECT_THAT(narrow, HasSubstr("min.i64")) << narrow;
  EXPECT_THAT(narrow, HasSubstr("wrap.u8")) << narrow;
  // Widening needs no clamp; to bool is a compare; i64 -> f32 goes through f64.
  EXPECT_THAT(legal(ir::DType::kI32, ir::DType::kI64), Not(HasSubstr("max.")));
  EXPECT_THAT(legal(ir::DType::kF64, ir::DType::kBool), HasSubstr("ne.bool"));
  const std::string wide = legal(ir::DType::kI64, ir::DType::kF32);
  EXPECT_THAT(wide, HasSubstr("cast.f64")) << wide;
  EXPECT_THAT(wide, HasSubstr("cast.f32")) << wide;
  // One conversion instruction stays a cast.
  EXPECT_FALSE(
      NeedsLegalization(OneOpKernel(ExprOp::kCast, ir::DType::kF32, ir::DType::kF64, 1, 4)));
  EXPECT_FALSE(
      NeedsLegalization(OneOpKernel(ExprOp::kCast, ir::DType::kI32, ir::DType::kF32, 1, 4)));
}

TEST(LegalizeTest, DivisionAndModuloMatchTheReferenceOnEveryPair) {
  for (ir::DType dtype : {ir::DType::kI32, ir::DType::kI64, ir::DType::kU8}) {
    const std::vector<double> edge = EdgeValues(dtype);
    std::vector<double> as, bs;
    for (double a : edge) {
      for (double b : edge) {
        as.push_back(a);
        bs.push_back(b);
      }
    }
    const int64_t n = static_cast<int64_t>(as.size());
    ir::TensorData a(dtype, {n}), b(dtype, {n});
    for (int64_t i = 0; i < n; ++i) {
      // Through int64 so that i64's limits are exact.
      a.SetInt64(
          i, as[i] >= 0x1p63 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(as[i]));
      b.SetInt64(
          i, bs[i] >= 0x1p63 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bs[i]));
    }
    for (ExprOp op : {ExprOp::kDiv, ExprOp::kMod}) {
      SCOPED_TRACE(absl::StrCat(ExprOpName(op), " ", ir::DTypeName(dtype)));
      const Kernel k = OneOpKernel(op, dtype, dtype, 2, n);
      ExpectSameBits(Evaluate(Legalize(k), {a, b}), Evaluate(k, {a, b}), {a, b});
    }
  }
}

TEST(LegalizeTest, CastsMatchTheReferenceForEveryDTypePair) {
  for (ir::DType from : kDTypes) {
    const std::vector<double> edge = EdgeValues(from);
    const int64_t n = static_cast<int64_t>(edge.size());
    ir::TensorData x(from, {n});
    for (int64_t i = 0; i < n; ++i) {
      if (from == ir::DType::kI64 && edge[i] >= 0x1p63) {
        x.SetInt64(i, std::numeric_limits<int64_t>::max());
      } else {
        x.SetDouble(i, edge[i]);
      }
    }
    for (ir::DType to : kDTypes) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(from), " -> ", ir::DTypeName(to)));
      const Kernel k = OneOpKernel(ExprOp::kCast, from, to, 1, n);
      const Kernel legal = Legalize(k);
      EXPECT_TRUE(VerifyKernel(legal).ok()) << VerifyKernel(legal);
      EXPECT_FALSE(NeedsLegalization(legal)) << PrintKernel(legal);
      ExpectSameBits(Evaluate(legal, {x}), Evaluate(k, {x}), {x});
    }
  }
}

}  // namespace
}  // namespace kiln::codegen
