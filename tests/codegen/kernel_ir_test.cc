// The kernel IR itself: builder simplification, the verifier, the printer and the evaluator's
// scalar semantics on hand-built kernels.
#include "codegen/kernel_ir.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "codegen/kernel_eval.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/random.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;

TEST(KernelBuilderTest, HashConsesAndFoldsIndexArithmetic) {
  KernelBuilder b("k");
  const ValueId gid = b.Var(kGid);
  EXPECT_EQ(b.IAdd(gid, b.Index(0)), gid);
  EXPECT_EQ(b.IMulConst(gid, 1), gid);
  EXPECT_EQ(b.ConstantInt(b.IMulConst(gid, 0)), 0);
  EXPECT_EQ(b.IMulConst(gid, 7), b.IMulConst(gid, 7));
  EXPECT_EQ(b.ConstantInt(b.IAdd(b.Index(3), b.Index(4))), 7);
  // (gid * 8 + r) / 8 = gid and % 8 = r when r < 8.
  const VarId r = b.BeginLoop(8);
  const ValueId rv = b.Var(r);
  const ValueId linear = b.IAdd(b.IMulConst(gid, 8), rv);
  EXPECT_EQ(b.IDivConst(linear, 8), gid);
  EXPECT_EQ(b.IModConst(linear, 8), rv);
  EXPECT_EQ(b.IModConst(rv, 8), rv);
  EXPECT_EQ(b.ConstantInt(b.IDivConst(rv, 8)), 0);
  // (x / c) * c + x % c = x.
  EXPECT_EQ(b.IAdd(b.IMulConst(b.IDivConst(gid, 5), 5), b.IModConst(gid, 5)), gid);
  // Range-decided comparisons fold; undecided ones do not.
  EXPECT_EQ(b.ConstantInt(b.Binary(ExprOp::kLt, rv, b.Index(8))), 1);
  EXPECT_EQ(b.ConstantInt(b.Binary(ExprOp::kGe, rv, b.Index(0))), 1);
  EXPECT_FALSE(b.ConstantInt(b.Binary(ExprOp::kLt, rv, b.Index(4))).has_value());
  EXPECT_EQ(b.IClamp(rv, 0, 7), rv);
  b.EndLoop();
}

TEST(KernelBuilderTest, ScaleKernelRunsAndPrints) {
  KernelBuilder b("scale");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 4, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 4, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(y, gid, b.Binary(ExprOp::kMul, b.Load(x, gid), b.Float(ScalarType::kF32, 2.0)));
  const Kernel kernel = std::move(b).Finish(4);
  ASSERT_TRUE(VerifyKernel(kernel).ok()) << VerifyKernel(kernel);
  const std::string text = PrintKernel(kernel);
  EXPECT_THAT(text, HasSubstr("kernel scale parallel_extent=4 {"));
  EXPECT_THAT(text, HasSubstr("arg0 in f32[4] \"x\""));
  EXPECT_THAT(text, HasSubstr("v2 = load.f32 arg0[gid]"));
  EXPECT_THAT(text, HasSubstr("v3 = mul.f32 v2, 2:f32"));
  EXPECT_THAT(text, HasSubstr("store arg1[gid] = v3"));

  ir::TensorData in = ir::TensorData::FromVector<float>(ir::DType::kF32, {4}, {1, 2, 3, 4});
  ir::TensorData out(ir::DType::kF32, {4});
  std::vector<ir::TensorData*> args = {&in, &out};
  ASSERT_TRUE(EvalKernelOnTensors(kernel, args).ok());
  EXPECT_EQ(out.ToDoubles(), (std::vector<double>{2, 4, 6, 8}));
  // A sub-range runs only its iterations.
  ir::TensorData part(ir::DType::kF32, {4});
  std::vector<void*> buffers = {in.data(), part.data()};
  ASSERT_TRUE(EvalKernel(kernel, buffers, 1, 3).ok());
  EXPECT_EQ(part.ToDoubles(), (std::vector<double>{0, 4, 6, 0}));
}

TEST(KernelBuilderTest, RowSumWithReduce) {
  // out[row] = sum over 3 columns of x[row, col].
  KernelBuilder b("rowsum");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 6, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 2, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  const VarId r = b.BeginReduce(ReduceKind::kSum, b.Float(ScalarType::kF32, 0), 3);
  const ValueId sum = b.EndReduce(b.Load(x, b.IAdd(b.IMulConst(gid, 3), b.Var(r))));
  b.Store(y, gid, sum);
  const Kernel kernel = std::move(b).Finish(2);
  EXPECT_THAT(PrintKernel(kernel), HasSubstr("acc1 = reduce sum.f32 r1 in [0, 3) init 0:f32 {"));
  ir::TensorData in = ir::TensorData::FromVector<float>(ir::DType::kF32, {6}, {1, 2, 3, 4, 5, 6});
  ir::TensorData out(ir::DType::kF32, {2});
  std::vector<ir::TensorData*> args = {&in, &out};
  ASSERT_TRUE(EvalKernelOnTensors(kernel, args).ok());
  EXPECT_EQ(out.ToDoubles(), (std::vector<double>{6, 15}));
}

TEST(KernelVerifierTest, RejectsScopeAndTypeErrors) {
  {  // A loop variable used after its loop.
    KernelBuilder b("escape");
    const ArgId y = b.AddArg({"y", ir::DType::kI64, 4, ArgRole::kOutput});
    const VarId i = b.BeginLoop(4);
    b.EndLoop();
    b.Store(y, b.Var(i), b.Var(i));
    const absl::Status s = VerifyKernel(std::move(b).Finish(1));
    EXPECT_THAT(s.message(), HasSubstr("outside its scope"));
  }
  {  // A store of the wrong type.
    KernelBuilder b("type");
    const ArgId y = b.AddArg({"y", ir::DType::kF32, 1, ArgRole::kOutput});
    b.Store(y, b.Index(0), b.Index(1));
    EXPECT_THAT(VerifyKernel(std::move(b).Finish(1)).message(), HasSubstr("computes in f32"));
  }
  {  // Args out of ABI order.
    KernelBuilder b("order");
    b.AddArg({"y", ir::DType::kF32, 1, ArgRole::kOutput});
    b.AddArg({"x", ir::DType::kF32, 1, ArgRole::kInput});
    EXPECT_THAT(VerifyKernel(std::move(b).Finish(1)).message(), HasSubstr("breaks the order"));
  }
  {  // A store into an input.
    KernelBuilder b("ro");
    const ArgId x = b.AddArg({"x", ir::DType::kF32, 1, ArgRole::kInput});
    b.Store(x, b.Index(0), b.Float(ScalarType::kF32, 1));
    EXPECT_THAT(VerifyKernel(std::move(b).Finish(1)).message(), HasSubstr("not an output"));
  }
}

TEST(KernelEvalTest, OutOfRangeIndexIsAnError) {
  KernelBuilder b("oob");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 2, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 3, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(y, gid, b.Load(x, gid));
  const Kernel kernel = std::move(b).Finish(3);
  ir::TensorData in(ir::DType::kF32, {2}), out(ir::DType::kF32, {3});
  std::vector<ir::TensorData*> args = {&in, &out};
  EXPECT_THAT(EvalKernelOnTensors(kernel, args).message(),
              HasSubstr("load arg0[2] out of range (2 elements)"));
}

// Evaluates a one-value kernel: y[0] = value (built by `make` from the builder).
template <class Make>
ir::TensorData EvalScalar(ir::DType out_dtype, Make make) {
  KernelBuilder b("scalar");
  const ArgId y = b.AddArg({"y", out_dtype, 1, ArgRole::kOutput});
  b.Store(y, b.Index(0), make(b));
  const Kernel kernel = std::move(b).Finish(1);
  ir::TensorData out(out_dtype, {1});
  std::vector<ir::TensorData*> args = {&out};
  const absl::Status s = EvalKernelOnTensors(kernel, args);
  EXPECT_TRUE(s.ok()) << s << "\n" << PrintKernel(kernel);
  return out;
}

TEST(KernelEvalTest, IntegerSemanticsFollowTheIr) {
  const auto i32 = [](KernelBuilder& b, int64_t v) { return b.Int(ScalarType::kI32, v); };
  const auto binary = [&](ExprOp op, int64_t a, int64_t c) {
    return EvalScalar(ir::DType::kI32,
                      [&](KernelBuilder& b) { return b.Binary(op, i32(b, a), i32(b, c)); })
        .GetInt64(0);
  };
  EXPECT_EQ(binary(ExprOp::kDiv, -7, 2), -4);  // Floor division.
  EXPECT_EQ(binary(ExprOp::kMod, -7, 2), 1);   // Sign of the divisor.
  EXPECT_EQ(binary(ExprOp::kMod, 7, -2), -1);
  EXPECT_EQ(binary(ExprOp::kDiv, 5, 0), 0);
  EXPECT_EQ(binary(ExprOp::kMod, 5, 0), 0);
  EXPECT_EQ(binary(ExprOp::kDiv, std::numeric_limits<int32_t>::min(), -1),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(binary(ExprOp::kAdd, std::numeric_limits<int32_t>::max(), 1),
            std::numeric_limits<int32_t>::min());
  // Saturating cast vs wrapping conversion.
  EXPECT_EQ(EvalScalar(ir::DType::kI32,
                       [](KernelBuilder& b) {
                         return b.Cast(b.Int(ScalarType::kI64, int64_t{1} << 40), ScalarType::kI32);
                       })
                .GetInt64(0),
            std::numeric_limits<int32_t>::max());
  EXPECT_EQ(EvalScalar(ir::DType::kI32,
                       [](KernelBuilder& b) {
                         return b.Wrap(b.Int(ScalarType::kI64, (int64_t{1} << 40) + 5),
                                       ScalarType::kI32);
                       })
                .GetInt64(0),
            5);
  // NaN → 0 and saturation for float → int.
  EXPECT_EQ(EvalScalar(ir::DType::kI32,
                       [](KernelBuilder& b) {
                         return b.Cast(b.Float(ScalarType::kF32, std::nan("")), ScalarType::kI32);
                       })
                .GetInt64(0),
            0);
  EXPECT_EQ(EvalScalar(ir::DType::kU8,
                       [](KernelBuilder& b) {
                         return b.Cast(b.Float(ScalarType::kF32, -3.5), ScalarType::kU8);
                       })
                .GetInt64(0),
            0);
}

TEST(KernelEvalTest, FloatSemanticsFollowTheIr) {
  const auto f32 = [](KernelBuilder& b, double v) { return b.Float(ScalarType::kF32, v); };
  const double nan_max = EvalScalar(ir::DType::kF32, [&](KernelBuilder& b) {
                           return b.Binary(ExprOp::kMax, f32(b, 1), f32(b, std::nan("")));
                         }).GetDouble(0);
  EXPECT_TRUE(std::isnan(nan_max));
  EXPECT_EQ(EvalScalar(ir::DType::kF32,
                       [&](KernelBuilder& b) { return b.Unary(ExprOp::kRound, f32(b, 2.5)); })
                .GetDouble(0),
            2.0);
  EXPECT_EQ(
      EvalScalar(ir::DType::kF32,
                 [&](KernelBuilder& b) { return b.Binary(ExprOp::kMod, f32(b, -1), f32(b, 3)); })
          .GetDouble(0),
      2.0);
  // Bitcast and shifts: 1.0f is 0x3f800000.
  EXPECT_EQ(EvalScalar(ir::DType::kI64,
                       [&](KernelBuilder& b) {
                         return b.Wrap(
                             b.Binary(ExprOp::kShr, b.Bitcast(f32(b, 1), ScalarType::kU32),
                                      b.Int(ScalarType::kU32, 23)),
                             ScalarType::kI64);
                       })
                .GetInt64(0),
            127);
  // Round to f16 from f64 is a single rounding: 1 + 2^-11 + 2^-40 rounds up in one step.
  const double tricky = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(EvalScalar(ir::DType::kF32,
                       [&](KernelBuilder& b) {
                         return b.Cast(
                             b.Unary(ExprOp::kRoundToF16, b.Float(ScalarType::kF64, tricky)),
                             ScalarType::kF32);
                       })
                .GetDouble(0),
            ir::HalfToFloat(ir::DoubleToHalf(tricky)));
  // f16 stores round to nearest even.
  EXPECT_EQ(EvalScalar(ir::DType::kF16, [&](KernelBuilder& b) { return f32(b, 1.0 + 0x1p-11); })
                .GetDouble(0),
            1.0);
}

TEST(KernelEvalTest, ArgMaxTakesTheFirstNaN) {
  KernelBuilder b("argmax");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 5, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kI64, 1, ArgRole::kOutput});
  const VarId r = b.BeginReduce(ReduceKind::kArgMax, kNoValue, 5);
  b.Store(y, b.Index(0), b.EndReduce(b.Load(x, b.Var(r))));
  const Kernel kernel = std::move(b).Finish(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ir::TensorData in = ir::TensorData::FromVector<float>(ir::DType::kF32, {5}, {1, 9, nan, 9, nan});
  ir::TensorData out(ir::DType::kI64, {1});
  std::vector<ir::TensorData*> args = {&in, &out};
  ASSERT_TRUE(EvalKernelOnTensors(kernel, args).ok());
  EXPECT_EQ(out.GetInt64(0), 2);
}

}  // namespace
}  // namespace kiln::codegen
