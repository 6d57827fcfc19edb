// codegen::ReuseReducedValues: the printed kernel IR of the rewrite (a softmax row's exp computed
// once and stored by the sum), its results against the original kernel on kernel_eval (bit for
// bit: the value loaded back is the one computed), the lowered softmax of a graph, and every case
// in which it must leave a kernel alone.
#include "codegen/reuse_reduced.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernel_eval.h"
#include "codegen/kernel_ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/tensor_data.h"
#include "tests/codegen/pipeline.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct SoftmaxOptions {
  ir::DType out_dtype = ir::DType::kF32;
  // The store loop's value: exp(x - max) / sum (softmax), or x - max - log(sum) (log-softmax,
  // nothing transcendental in common with the sum's value).
  bool log_softmax = false;
  // A store to the output between the sum and the store loop.
  bool store_between = false;
  // The store loop also loads the output (as an in-place kernel does).
  bool reads_output = false;
  // The store loop's store is predicated.
  bool predicated = false;
  // The store loop runs over another extent than the sum.
  bool other_extent = false;
};

// The softmax of each row of x: max, sum of exp(x - max), then a store loop.
Kernel SoftmaxKernel(int64_t rows, int64_t cols, const SoftmaxOptions& options = {}) {
  KernelBuilder b("softmax");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, rows * cols, ArgRole::kInput});
  const ArgId out = b.AddArg({"y", options.out_dtype, rows * cols, ArgRole::kOutput});
  constexpr ScalarType t = ScalarType::kF32;
  const ValueId row_base = b.IMulConst(b.Var(kGid), cols);
  const VarId r1 = b.BeginReduce(ReduceKind::kMax, b.Float(t, -INFINITY), cols);
  const ValueId max = b.EndReduce(b.Load(x, b.IAdd(row_base, b.Var(r1))));
  const VarId r2 = b.BeginReduce(ReduceKind::kSum, b.Float(t, 0), cols);
  const ValueId sum = b.EndReduce(
      b.Unary(ExprOp::kExp, b.Binary(ExprOp::kSub, b.Load(x, b.IAdd(row_base, b.Var(r2))), max)));
  if (options.store_between) b.Store(out, row_base, sum);
  const VarId c = b.BeginLoop(options.other_extent ? cols - 1 : cols);
  const ValueId index = b.IAdd(row_base, b.Var(c));
  const ValueId shifted = b.Binary(ExprOp::kSub, b.Load(x, index), max);
  ValueId value = options.log_softmax ? b.Binary(ExprOp::kSub, shifted, b.Unary(ExprOp::kLog, sum))
                                      : b.Binary(ExprOp::kDiv, b.Unary(ExprOp::kExp, shifted), sum);
  if (options.reads_output) value = b.Binary(ExprOp::kAdd, value, b.Load(out, index));
  const ValueId predicate =
      options.predicated ? b.Binary(ExprOp::kGt, shifted, b.Float(t, -1)) : kNoValue;
  b.Store(out, index, value, predicate);
  b.EndLoop();
  return std::move(b).Finish(rows);
}

// Runs `kernel` on `x` (the output starts zeroed) and returns the output.
ir::TensorData Evaluate(const Kernel& kernel, const ir::TensorData& x) {
  ir::TensorData in = x;
  const KernelArg& out_arg = kernel.args.back();
  ir::TensorData out(out_arg.dtype, {out_arg.num_elements});
  std::vector<ir::TensorData*> args{&in, &out};
  const absl::Status status = EvalKernelOnTensors(kernel, args);
  EXPECT_TRUE(status.ok()) << status << "\n" << PrintKernel(kernel);
  return out;
}

ir::TensorData RandomRows(ir::Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  values[3] = -INFINITY;  // exp(-inf - max) = 0 on the way through
  return ir::TensorData::FromVector(ir::DType::kF32, std::move(shape), values);
}

void ExpectSameBits(const ir::TensorData& got, const ir::TensorData& want) {
  ASSERT_EQ(got.num_elements(), want.num_elements());
  ASSERT_EQ(got.dtype(), want.dtype());
  const size_t size = static_cast<size_t>(ir::DTypeSize(got.dtype()));
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    ASSERT_EQ(std::memcmp(got.data() + i * size, want.data() + i * size, size), 0)
        << "element " << i << ": rewritten " << got.GetDouble(i) << ", original "
        << want.GetDouble(i);
  }
}

TEST(ReuseReducedValuesTest, SoftmaxStoresTheSumsExpAndLoadsItBack) {
  const Kernel original = SoftmaxKernel(5, 37);
  const Kernel rewritten = ReuseReducedValues(original);
  ASSERT_TRUE(VerifyKernel(rewritten).ok()) << VerifyKernel(rewritten);
  const std::string before = PrintKernel(original);
  const std::string after = PrintKernel(rewritten);
  EXPECT_EQ(Count(before, "= exp.f32"), 2) << before;
  EXPECT_EQ(Count(after, "= exp.f32"), 1) << after;
  // The sum stores its exp (inside the reduce, before its yield); the loop loads the output.
  const size_t reduce_sum = after.find("reduce sum");
  ASSERT_NE(reduce_sum, std::string::npos) << after;
  const size_t early_store = after.find("store arg1", reduce_sum);
  ASSERT_NE(early_store, std::string::npos) << after;
  EXPECT_LT(early_store, after.find("} yield", reduce_sum)) << after;
  EXPECT_THAT(after, HasSubstr("load.f32 arg1[")) << after;

  const ir::TensorData x = RandomRows({5 * 37}, 1);
  ExpectSameBits(Evaluate(rewritten, x), Evaluate(original, x));
}

TEST(ReuseReducedValuesTest, LoweredSoftmaxOfAGraphTakesOneExp) {
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {6, 50}});
  const ir::NodeId max = b.Reduce(ir::Op::kReduceMax, x, {1});
  const ir::NodeId e = b.Unary(ir::Op::kExp, b.Binary(ir::Op::kSub, x, b.Broadcast(max, {6, 50})));
  const ir::NodeId sum = b.Reduce(ir::Op::kReduceSum, e, {1});
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(sum, {6, 50})));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const ir::TensorData input = RandomRows({6, 50}, 2);
  absl::StatusOr<test::PipelineResult> lowered = test::RunLowered(*graph, {&input, 1});
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  ASSERT_EQ(lowered->kernels.size(), 1u);
  const Kernel& original = lowered->kernels[0];
  const Kernel rewritten = ReuseReducedValues(original);
  ASSERT_TRUE(VerifyKernel(rewritten).ok()) << VerifyKernel(rewritten);
  EXPECT_EQ(Count(PrintKernel(original), "= exp.f32"), 2) << PrintKernel(original);
  EXPECT_EQ(Count(PrintKernel(rewritten), "= exp.f32"), 1) << PrintKernel(rewritten);
  ir::TensorData flat = ir::TensorData::Uninitialized(ir::DType::kF32, {300});
  std::memcpy(flat.data(), input.data(), static_cast<size_t>(input.size_bytes()));
  ExpectSameBits(Evaluate(rewritten, flat), Evaluate(original, flat));
}

TEST(ReuseReducedValuesTest, OneValueIsReusedPerOutput) {
  // Two reductions each compute what the store loop needs (exp(x), log(x)): only one of them can
  // keep its values in the output until the loop reads them back.
  constexpr int64_t kRows = 3, kCols = 9;
  KernelBuilder b("two_sums");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, kRows * kCols, ArgRole::kInput});
  const ArgId out = b.AddArg({"y", ir::DType::kF32, kRows * kCols, ArgRole::kOutput});
  constexpr ScalarType t = ScalarType::kF32;
  const ValueId row_base = b.IMulConst(b.Var(kGid), kCols);
  auto at = [&](VarId var) { return b.Load(x, b.IAdd(row_base, b.Var(var))); };
  const VarId r1 = b.BeginReduce(ReduceKind::kSum, b.Float(t, 0), kCols);
  const ValueId exps = b.EndReduce(b.Unary(ExprOp::kExp, at(r1)));
  const VarId r2 = b.BeginReduce(ReduceKind::kSum, b.Float(t, 0), kCols);
  const ValueId logs = b.EndReduce(b.Unary(ExprOp::kLog, b.Unary(ExprOp::kAbs, at(r2))));
  const VarId c = b.BeginLoop(kCols);
  const ValueId v = at(c);
  b.Store(out, b.IAdd(row_base, b.Var(c)),
          b.Binary(ExprOp::kDiv,
                   b.Binary(ExprOp::kMul, b.Unary(ExprOp::kExp, v),
                            b.Unary(ExprOp::kLog, b.Unary(ExprOp::kAbs, v))),
                   b.Binary(ExprOp::kAdd, exps, logs)));
  b.EndLoop();
  const Kernel original = std::move(b).Finish(kRows);
  const Kernel rewritten = ReuseReducedValues(original);
  ASSERT_TRUE(VerifyKernel(rewritten).ok()) << VerifyKernel(rewritten);
  const std::string after = PrintKernel(rewritten);
  EXPECT_EQ(Count(after, "store arg1"), 2) << after;
  EXPECT_EQ(Count(after, "= exp.f32") + Count(after, "= log.f32"), 3) << after;
  const ir::TensorData input = RandomRows({kRows * kCols}, 3);
  ExpectSameBits(Evaluate(rewritten, input), Evaluate(original, input));
}

struct LeftAlone {
  const char* name;
  SoftmaxOptions options;
};

class ReuseReducedLeftAloneTest : public ::testing::TestWithParam<LeftAlone> {};

TEST_P(ReuseReducedLeftAloneTest, KernelIsUnchanged) {
  const Kernel original = SoftmaxKernel(3, 16, GetParam().options);
  const Kernel rewritten = ReuseReducedValues(original);
  EXPECT_EQ(PrintKernel(rewritten), PrintKernel(original));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ReuseReducedLeftAloneTest,
    ::testing::Values(
        // A bf16 store rounds: the value loaded back would not be the one computed.
        LeftAlone{"bf16_output", {.out_dtype = ir::DType::kBF16}},
        // x - max - log(sum): what the loop shares with the sum (x - max) is cheaper to
        // recompute than to store and load.
        LeftAlone{"log_softmax", {.log_softmax = true}},
        LeftAlone{"store_between", {.store_between = true}},
        LeftAlone{"reads_output", {.reads_output = true}},
        LeftAlone{"predicated_store", {.predicated = true}},
        LeftAlone{"other_extent", {.other_extent = true}}),
    [](const ::testing::TestParamInfo<LeftAlone>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln::codegen
