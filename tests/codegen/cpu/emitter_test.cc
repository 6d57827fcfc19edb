// The CPU emitter against the kernel-IR evaluator (codegen/kernel_eval.h, the oracle): every
// scalar op on every dtype, casts between all types, the three kernel shapes (elementwise,
// broadcast inner loop, row reduction), every reduce kind, predicated stores, the error flag, and
// proof that the inner loops really are vectorised.
#include "codegen/cpu/emitter.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/jit.h"
#include "codegen/kernel_eval.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "passes/dump.h"
#include "passes/fusion.h"
#include "tests/codegen/cpu/cpu_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using testing::ElementAsDouble;
using testing::FillRandom;
using testing::KernelBuffers;
using testing::RunChunked;
using testing::SameElement;

using ir::kAllDTypes;

CpuCompiler& Compiler() {
  static CpuCompiler* compiler = new CpuCompiler(CpuCompiler::Options{.cache_dir = ""});
  return *compiler;
}

// Compiles `kernel`, runs it (in chunks) and kernel_eval on copies of `inputs`, and returns the
// two sets of buffers.
struct Outcome {
  KernelBuffers jit;
  KernelBuffers oracle;
};

Outcome RunBoth(const Kernel& kernel, const KernelBuffers& inputs, bool expand_math = false) {
  CompileOptions options;
  options.expand_math = expand_math;
  absl::StatusOr<CompiledKernel> compiled = Compiler().Compile(kernel, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  Outcome outcome{inputs.Clone(), inputs.Clone()};
  if (!compiled.ok()) return outcome;
  RunChunked(compiled->fn, outcome.jit.args(), kernel.parallel_extent);
  std::vector<void*> pointers(outcome.oracle.args(), outcome.oracle.args() + kernel.args.size());
  const absl::Status status = EvalKernel(kernel, pointers);
  EXPECT_TRUE(status.ok()) << status;
  return outcome;
}

// Expects every output buffer to match the oracle exactly (NaNs equal), naming the output.
void ExpectOutputsIdentical(const Kernel& kernel, const Outcome& outcome,
                            const std::vector<std::string>& labels, const KernelBuffers& inputs) {
  for (size_t a = 0; a < kernel.args.size(); ++a) {
    const KernelArg& arg = kernel.args[a];
    if (arg.role == ArgRole::kInput) continue;
    int reported = 0;
    for (int64_t i = 0; i < arg.num_elements && reported < 3; ++i) {
      if (!SameElement(outcome.jit.data(a), outcome.oracle.data(a), arg.dtype, i)) {
        ++reported;
        ADD_FAILURE() << kernel.name << ": output " << arg.name << " ("
                      << (a < labels.size() ? labels[a] : "") << ") element " << i << ": jit "
                      << ElementAsDouble(outcome.jit.data(a), arg.dtype, i) << ", oracle "
                      << ElementAsDouble(outcome.oracle.data(a), arg.dtype, i) << "; inputs "
                      << ElementAsDouble(inputs.data(0), kernel.args[0].dtype, i) << ", "
                      << ElementAsDouble(inputs.data(1), kernel.args[1].dtype, i);
      }
    }
  }
}

// ---- Every scalar op on every dtype -------------------------------------------------------------

// Whether the JIT's target has a fused multiply-add (the kernel IR's fma rounds once there).
bool TargetHasFma() { return CpuCompiler::Host()->features.find("+fma") != std::string::npos; }

struct OpCase {
  std::string label;
  // Builds the stored value from the loads of a, b (both of the dtype under test) and c (bool).
  std::function<ValueId(KernelBuilder&, ValueId a, ValueId b, ValueId c)> make;
};

std::vector<OpCase> CasesFor(ScalarType type) {
  std::vector<OpCase> cases;
  const bool is_float = IsFloatType(type);
  const bool is_bool = type == ScalarType::kBool;
  auto unary = [&](ExprOp op) {
    cases.push_back({ExprOpName(op), [op](KernelBuilder& b, ValueId x, ValueId, ValueId) {
                       return b.Unary(op, x);
                     }});
  };
  auto binary = [&](ExprOp op) {
    cases.push_back({ExprOpName(op), [op](KernelBuilder& b, ValueId x, ValueId y, ValueId) {
                       return b.Binary(op, x, y);
                     }});
  };
  if (!is_bool) {
    for (ExprOp op : {ExprOp::kNeg, ExprOp::kAbs, ExprOp::kSign}) unary(op);
    for (ExprOp op : {ExprOp::kAdd, ExprOp::kSub, ExprOp::kMul, ExprOp::kDiv, ExprOp::kMax,
                      ExprOp::kMin, ExprOp::kMod}) {
      binary(op);
    }
  }
  if (is_float) {
    for (ExprOp op :
         {ExprOp::kExp, ExprOp::kLog, ExprOp::kSqrt, ExprOp::kRsqrt, ExprOp::kSin, ExprOp::kCos,
          ExprOp::kTanh, ExprOp::kErf, ExprOp::kFloor, ExprOp::kCeil, ExprOp::kRound,
          ExprOp::kReciprocal, ExprOp::kTrunc, ExprOp::kRoundToF16, ExprOp::kRoundToBF16}) {
      unary(op);
    }
    binary(ExprOp::kPow);
    if (TargetHasFma()) {  // without, it rounds twice: EmitterTest.FmaRoundsOnceOnlyWithFma
      cases.push_back({"fma", [](KernelBuilder& b, ValueId x, ValueId y, ValueId) {
                         return b.Fma(x, y, b.Unary(ExprOp::kNeg, x));
                       }});
    }
    cases.push_back({"bitcast round trip", [](KernelBuilder& b, ValueId x, ValueId y, ValueId) {
                       const ScalarType bits =
                           b.type(x) == ScalarType::kF32 ? ScalarType::kI32 : ScalarType::kI64;
                       // Flip the sign bit through the integer view.
                       ValueId i = b.Bitcast(x, bits);
                       ValueId sign =
                           b.Binary(ExprOp::kShl, b.Int(bits, 1), b.Int(bits, BitWidth(bits) - 1));
                       return b.Bitcast(b.Binary(ExprOp::kXor, i, sign), b.type(y));
                     }});
  } else {
    unary(ExprOp::kNot);
    for (ExprOp op : {ExprOp::kAnd, ExprOp::kOr, ExprOp::kXor}) binary(op);
  }
  if (!is_float && !is_bool) {
    for (ExprOp op : {ExprOp::kShl, ExprOp::kShr, ExprOp::kUDiv, ExprOp::kURem}) binary(op);
  }
  cases.push_back({"select", [](KernelBuilder& b, ValueId x, ValueId y, ValueId c) {
                     return b.Select(c, x, y);
                   }});
  return cases;
}

std::vector<OpCase> ComparisonCases() {
  std::vector<OpCase> cases;
  for (ExprOp op : {ExprOp::kEq, ExprOp::kNe, ExprOp::kLt, ExprOp::kLe, ExprOp::kGt, ExprOp::kGe}) {
    cases.push_back({ExprOpName(op), [op](KernelBuilder& b, ValueId x, ValueId y, ValueId) {
                       return b.Binary(op, x, y);
                     }});
  }
  return cases;
}

class EveryOpTest : public ::testing::TestWithParam<ir::DType> {};

TEST_P(EveryOpTest, MatchesKernelEvalExactly) {
  const ir::DType dtype = GetParam();
  const ScalarType type = ComputeType(dtype);
  constexpr int64_t n = 1000;
  KernelBuilder b(absl::StrCat("every_op_", ir::DTypeName(dtype)));
  const ArgId a_arg = b.AddArg({"a", dtype, n, ArgRole::kInput});
  const ArgId b_arg = b.AddArg({"b", dtype, n, ArgRole::kInput});
  const ArgId c_arg = b.AddArg({"c", ir::DType::kBool, n, ArgRole::kInput});
  std::vector<OpCase> cases = CasesFor(type);
  const size_t num_value_cases = cases.size();
  for (OpCase& c : ComparisonCases()) cases.push_back(std::move(c));
  std::vector<std::string> labels = {"a", "b", "c"};
  std::vector<ArgId> outputs;
  for (size_t k = 0; k < cases.size(); ++k) {
    // Value ops store in the dtype under test (f16/bf16 round on store); comparisons in bool.
    const ir::DType out = k < num_value_cases ? dtype : ir::DType::kBool;
    outputs.push_back(b.AddArg({absl::StrCat("out", k), out, n, ArgRole::kOutput}));
    labels.push_back(cases[k].label);
  }
  const ValueId gid = b.Var(kGid);
  const ValueId x = b.Load(a_arg, gid), y = b.Load(b_arg, gid), c = b.Load(c_arg, gid);
  for (size_t k = 0; k < cases.size(); ++k) {
    ValueId value = cases[k].make(b, x, y, c);
    b.Store(outputs[k], gid, value);
  }
  Kernel kernel = std::move(b).Finish(n);

  KernelBuffers inputs(kernel);
  std::mt19937_64 rng(42 + static_cast<int>(dtype));
  FillRandom(inputs.data(0), dtype, n, rng);
  FillRandom(inputs.data(1), dtype, n, rng);
  FillRandom(inputs.data(2), ir::DType::kBool, n, rng);
  const Outcome outcome = RunBoth(kernel, inputs);
  ExpectOutputsIdentical(kernel, outcome, labels, inputs);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, EveryOpTest, ::testing::ValuesIn(kAllDTypes),
                         [](const auto& info) { return std::string(ir::DTypeName(info.param)); });

// The kernel IR's fma is one fma instruction where the target has one, and a multiply and an add
// (vectorised) where it does not: each element of a T kernel is checked against that rounding.
template <class T>
void ExpectFmaRoundsAsTheTargetDoes(ir::DType dtype) {
  constexpr int64_t n = 4000;
  const bool fused = TargetHasFma();
  KernelBuilder b(absl::StrCat("fma_", ir::DTypeName(dtype)));
  const ArgId a_arg = b.AddArg({"a", dtype, n, ArgRole::kInput});
  const ArgId b_arg = b.AddArg({"b", dtype, n, ArgRole::kInput});
  const ArgId c_arg = b.AddArg({"c", dtype, n, ArgRole::kInput});
  const ArgId out = b.AddArg({"out", dtype, n, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(out, gid, b.Fma(b.Load(a_arg, gid), b.Load(b_arg, gid), b.Load(c_arg, gid)));
  Kernel kernel = std::move(b).Finish(n);
  KernelBuffers buffers(kernel);
  T* const x = static_cast<T*>(buffers.data(0));
  T* const y = static_cast<T*>(buffers.data(1));
  T* const z = static_cast<T*>(buffers.data(2));
  // x and y finite; z = -(x y) rounded, or half of it: the fused and the unfused results then
  // differ in most elements.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-100, 100);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<T>(uniform(rng));
    y[i] = static_cast<T>(uniform(rng));
    z[i] = -(x[i] * y[i]) * static_cast<T>(i % 2 == 0 ? 1.0 : 0.5);
  }
  absl::StatusOr<CompiledKernel> compiled = Compiler().Compile(kernel, CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  RunChunked(compiled->fn, buffers.args(), n);
  const T* const got = static_cast<const T*>(buffers.data(3));
  int differing = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T product = x[i] * y[i];
    const T once = std::fma(x[i], y[i], z[i]), twice = product + z[i];
    differing += once != twice;
    ASSERT_EQ(got[i], fused ? once : twice) << ir::DTypeName(dtype) << " element " << i
                                            << (fused ? " (fused)" : " (multiply, then add)");
  }
  EXPECT_GT(differing, n / 4) << "the inputs do not tell one rounding from two";
}

TEST(EmitterTest, FmaRoundsOnceOnlyWithFma) {
  ExpectFmaRoundsAsTheTargetDoes<float>(ir::DType::kF32);
  ExpectFmaRoundsAsTheTargetDoes<double>(ir::DType::kF64);
}

// ---- Casts between all types --------------------------------------------------------------------

TEST(EmitterTest, CastsWrapsAndUnsignedIntermediatesMatchKernelEval) {
  constexpr int64_t n = 600;
  for (ir::DType from : kAllDTypes) {
    KernelBuilder b(absl::StrCat("casts_from_", ir::DTypeName(from)));
    const ArgId in = b.AddArg({"x", from, n, ArgRole::kInput});
    const ArgId shift = b.AddArg({"s", ir::DType::kI64, n, ArgRole::kInput});
    std::vector<std::string> labels = {"x", "s"};
    std::vector<std::pair<ArgId, std::function<ValueId(KernelBuilder&, ValueId, ValueId)>>> outs;
    const ScalarType from_type = ComputeType(from);
    for (ir::DType to : kAllDTypes) {
      const ScalarType to_type = ComputeType(to);
      outs.push_back(
          {b.AddArg({absl::StrCat("to_", ir::DTypeName(to)), to, n, ArgRole::kOutput}),
           [to_type](KernelBuilder& k, ValueId x, ValueId) { return k.Cast(x, to_type); }});
      labels.push_back(absl::StrCat("cast to ", ir::DTypeName(to)));
    }
    // Through the unsigned 32/64-bit types (no buffers of their own): cast, then back to i64.
    for (ScalarType mid : {ScalarType::kU32, ScalarType::kU64}) {
      outs.push_back({b.AddArg({absl::StrCat("via_", ScalarTypeName(mid)), ir::DType::kF64, n,
                                ArgRole::kOutput}),
                      [mid](KernelBuilder& k, ValueId x, ValueId) {
                        return k.Cast(k.Cast(x, mid), ScalarType::kF64);
                      }});
      labels.push_back(absl::StrCat("cast via ", ScalarTypeName(mid)));
    }
    if (!IsFloatType(from_type)) {
      for (ScalarType to : {ScalarType::kU8, ScalarType::kI32, ScalarType::kU32, ScalarType::kI64,
                            ScalarType::kU64}) {
        outs.push_back({b.AddArg({absl::StrCat("wrap_", ScalarTypeName(to)), ir::DType::kI64, n,
                                  ArgRole::kOutput}),
                        [to](KernelBuilder& k, ValueId x, ValueId s) {
                          // Wrap, shift by an arbitrary amount (also out of range), widen back.
                          ValueId w = k.Wrap(x, to);
                          ValueId amount = k.Wrap(s, to);
                          ValueId shifted =
                              k.Binary(ExprOp::kShr, k.Binary(ExprOp::kShl, w, amount), amount);
                          return k.Wrap(shifted, ScalarType::kI64);
                        }});
        labels.push_back(absl::StrCat("wrap/shift via ", ScalarTypeName(to)));
      }
    }
    const ValueId gid = b.Var(kGid);
    const ValueId x = b.Load(in, gid), s = b.Load(shift, gid);
    for (auto& [arg, make] : outs) b.Store(arg, gid, make(b, x, s));
    Kernel kernel = std::move(b).Finish(n);
    ASSERT_EQ(ComputeType(from), from_type);

    KernelBuffers inputs(kernel);
    std::mt19937_64 rng(7 + static_cast<int>(from));
    FillRandom(inputs.data(0), from, n, rng);
    // Also huge values for the saturating float -> integer casts.
    if (IsFloatType(from_type) && from != ir::DType::kF16 && from != ir::DType::kBF16) {
      for (int64_t i = 0; i < n; i += 7) {
        const double huge[] = {3e9, -3e9, 1e19, -1e19, 4294967295.5, 255.9, -0.99, 2e38};
        const double v = huge[(i / 7) % 8];
        if (from == ir::DType::kF32) {
          inputs.as<float>(0)[i] = static_cast<float>(v);
        } else {
          inputs.as<double>(0)[i] = v;
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) inputs.as<int64_t>(1)[i] = static_cast<int64_t>(rng() % 80) - 8;
    const Outcome outcome = RunBoth(kernel, inputs);
    ExpectOutputsIdentical(kernel, outcome, labels, inputs);
  }
}

// ---- Integer semantics without UB ---------------------------------------------------------------

TEST(EmitterTest, IntegerDivModEdgeCases) {
  // INT_MIN / -1 wraps, division by zero gives 0, floor semantics for mixed signs.
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const std::vector<std::pair<int64_t, int64_t>> pairs = {
      {7, 2},  {-7, 2},   {7, -2},   {-7, -2},   {kMin, -1}, {kMin, 1}, {5, 0},  {0, 0},
      {-1, 0}, {kMin, 0}, {kMin, 2}, {kMin, -2}, {6, 3},     {-6, 3},   {1, -1}, {0, -5}};
  const int64_t n = static_cast<int64_t>(pairs.size());
  KernelBuilder b("divmod");
  const ArgId a = b.AddArg({"a", ir::DType::kI64, n, ArgRole::kInput});
  const ArgId d = b.AddArg({"d", ir::DType::kI64, n, ArgRole::kInput});
  const ArgId q = b.AddArg({"q", ir::DType::kI64, n, ArgRole::kOutput});
  const ArgId r = b.AddArg({"r", ir::DType::kI64, n, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(q, gid, b.Binary(ExprOp::kDiv, b.Load(a, gid), b.Load(d, gid)));
  b.Store(r, gid, b.Binary(ExprOp::kMod, b.Load(a, gid), b.Load(d, gid)));
  Kernel kernel = std::move(b).Finish(n);
  absl::StatusOr<CompiledKernel> compiled = Compiler().Compile(kernel);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelBuffers buffers(kernel);
  for (int64_t i = 0; i < n; ++i) {
    buffers.as<int64_t>(0)[i] = pairs[i].first;
    buffers.as<int64_t>(1)[i] = pairs[i].second;
  }
  compiled->fn(buffers.args(), 0, n);
  const std::vector<int64_t> want_q = {3, -4, -4,       3,           kMin, kMin, 0,  0,
                                       0, 0,  kMin / 2, -(kMin / 2), 2,    -2,   -1, 0};
  const std::vector<int64_t> want_r = {1, 1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(buffers.as<int64_t>(2)[i], want_q[i]) << pairs[i].first << " / " << pairs[i].second;
    EXPECT_EQ(buffers.as<int64_t>(3)[i], want_r[i]) << pairs[i].first << " % " << pairs[i].second;
  }
}

// ---- Kernel shapes ------------------------------------------------------------------------------

// out[r, c] = x[r, c] * scale + bias[c]: the bias load broadcasts along the inner loop.
Kernel BiasAddKernel(int64_t rows, int64_t cols) {
  KernelBuilder b("bias_add");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, rows * cols, ArgRole::kInput});
  const ArgId bias = b.AddArg({"bias", ir::DType::kF32, cols, ArgRole::kInput});
  const ArgId out = b.AddArg({"out", ir::DType::kF32, rows * cols, ArgRole::kOutput});
  const ValueId row_base = b.IMulConst(b.Var(kGid), cols);
  const VarId c = b.BeginLoop(cols);
  const ValueId index = b.IAdd(row_base, b.Var(c));
  b.Store(out, index,
          b.Binary(ExprOp::kAdd,
                   b.Binary(ExprOp::kMul, b.Load(x, index), b.Float(ScalarType::kF32, 1.5)),
                   b.Load(bias, b.Var(c))));
  b.EndLoop();
  return std::move(b).Finish(rows);
}

// The softmax of each row: max, sum of exp(x - max), then a store loop.
Kernel SoftmaxKernel(int64_t rows, int64_t cols, ir::DType dtype) {
  KernelBuilder b("softmax");
  const ArgId x = b.AddArg({"x", dtype, rows * cols, ArgRole::kInput});
  const ArgId out = b.AddArg({"y", dtype, rows * cols, ArgRole::kOutput});
  const ScalarType t = ComputeType(dtype);
  const ValueId row_base = b.IMulConst(b.Var(kGid), cols);
  const VarId r1 = b.BeginReduce(ReduceKind::kMax, b.Float(t, -INFINITY), cols);
  const ValueId max = b.EndReduce(b.Load(x, b.IAdd(row_base, b.Var(r1))));
  const VarId r2 = b.BeginReduce(ReduceKind::kSum, b.Float(t, 0), cols);
  const ValueId sum = b.EndReduce(
      b.Unary(ExprOp::kExp, b.Binary(ExprOp::kSub, b.Load(x, b.IAdd(row_base, b.Var(r2))), max)));
  const VarId c = b.BeginLoop(cols);
  const ValueId index = b.IAdd(row_base, b.Var(c));
  b.Store(out, index,
          b.Binary(ExprOp::kDiv,
                   b.Unary(ExprOp::kExp, b.Binary(ExprOp::kSub, b.Load(x, index), max)), sum));
  b.EndLoop();
  return std::move(b).Finish(rows);
}

TEST(EmitterTest, BroadcastInnerLoopMatchesKernelEval) {
  Kernel kernel = BiasAddKernel(37, 45);
  KernelBuffers inputs(kernel);
  std::mt19937_64 rng(3);
  FillRandom(inputs.data(0), ir::DType::kF32, 37 * 45, rng);
  FillRandom(inputs.data(1), ir::DType::kF32, 45, rng);
  const Outcome outcome = RunBoth(kernel, inputs);
  // x * 1.5 + bias may be contracted into one fma, which skips the rounding of the product:
  // the results may differ by half an ulp of the product (plus the final rounding).
  for (int64_t i = 0; i < 37 * 45; ++i) {
    const float jit = outcome.jit.as<float>(2)[i], want = outcome.oracle.as<float>(2)[i];
    const double product = std::abs(static_cast<double>(inputs.as<float>(0)[i]) * 1.5);
    // A product beyond FLT_MAX overflows when rounded on its own but not inside an fma.
    if (product > std::numeric_limits<float>::max()) continue;
    if (std::isnan(want) || std::isinf(want)) {
      EXPECT_TRUE(SameElement(&jit, &want, ir::DType::kF32, 0)) << i;
    } else {
      EXPECT_NEAR(jit, want, product * 0x1p-24 + std::abs(want) * 0x1p-23 + 1e-45) << i;
    }
  }
}

// Softmax over `rows` rows of `cols` against the evaluator, for each of `dtypes`, with and
// without ExpandMath. With `long_rows` the tolerance also allows for the two sums of `cols`
// positive terms in different orders (each within (cols - 1) units of roundoff of the exact sum).
void ExpectSoftmaxMatchesKernelEval(int64_t rows, int64_t cols,
                                    std::initializer_list<ir::DType> dtypes, bool long_rows) {
  for (ir::DType dtype : dtypes) {
    for (bool expand : {false, true}) {
      Kernel kernel = SoftmaxKernel(rows, cols, dtype);
      KernelBuffers inputs(kernel);
      std::mt19937_64 rng(11);
      std::normal_distribution<double> normal(0.0, 3.0);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const double v = normal(rng);
        if (dtype == ir::DType::kF32) inputs.as<float>(0)[i] = static_cast<float>(v);
        if (dtype == ir::DType::kF64) inputs.as<double>(0)[i] = v;
        if (dtype == ir::DType::kBF16) inputs.as<uint16_t>(0)[i] = ir::DoubleToBFloat16(v);
      }
      const Outcome outcome = RunBoth(kernel, inputs, expand);
      // Reassociated sums and (with expand) the polynomial exp: a few ulps of the type; bf16
      // results may round to a neighbouring value.
      const double roundoff = dtype == ir::DType::kF64 ? 0x1p-53 : 0x1p-24;
      const double tolerance = (dtype == ir::DType::kF64   ? 1e-13
                                : dtype == ir::DType::kF32 ? 2e-6
                                                           : 1e-2) +
                               (long_rows ? 2.0 * static_cast<double>(cols - 1) * roundoff : 0.0);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const double jit = ElementAsDouble(outcome.jit.data(1), dtype, i);
        const double want = ElementAsDouble(outcome.oracle.data(1), dtype, i);
        ASSERT_NEAR(jit, want, want * tolerance + 1e-30)
            << ir::DTypeName(dtype) << " expand=" << expand << " element " << i;
      }
    }
  }
}

TEST(EmitterTest, SoftmaxRowReductionMatchesKernelEval) {
  ExpectSoftmaxMatchesKernelEval(13, 77, {ir::DType::kF32, ir::DType::kF64, ir::DType::kBF16},
                                 /*long_rows=*/false);
}

// From 4 MiB of input the exp-and-sum pass runs in 256-byte blocks, each prefetching the same
// block of the next row and summed before it joins the row's total: 2100 columns leave a
// remainder after the last whole block (f32: 64 per block, f64: 32, bf16: 128).
TEST(EmitterTest, PrefetchingRowKernelsMatchKernelEval) {
  ExpectSoftmaxMatchesKernelEval(512, 2100, {ir::DType::kF32, ir::DType::kF64}, /*long_rows=*/true);
  ExpectSoftmaxMatchesKernelEval(1024, 2100, {ir::DType::kBF16}, /*long_rows=*/true);
}

// Reductions over each row of every kind, on data with NaNs (whole rows and single elements),
// infinities and ties. max/min/argmax/argmin and integer sums are exact.
TEST(EmitterTest, EveryReduceKindMatchesKernelEval) {
  constexpr int64_t rows = 24, cols = 41;
  for (ir::DType dtype : {ir::DType::kF32, ir::DType::kF64, ir::DType::kI32, ir::DType::kI64,
                          ir::DType::kU8, ir::DType::kF16}) {
    const ScalarType t = ComputeType(dtype);
    KernelBuilder b(absl::StrCat("reduce_", ir::DTypeName(dtype)));
    const ArgId x = b.AddArg({"x", dtype, rows * cols, ArgRole::kInput});
    std::vector<ArgId> outs;
    const ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kProd,   ReduceKind::kMax,
                                ReduceKind::kMin, ReduceKind::kArgMax, ReduceKind::kArgMin};
    for (ReduceKind kind : kinds) {
      const bool arg = kind == ReduceKind::kArgMax || kind == ReduceKind::kArgMin;
      outs.push_back(
          b.AddArg({ReduceKindName(kind), arg ? ir::DType::kI64 : dtype, rows, ArgRole::kOutput}));
    }
    const ValueId gid = b.Var(kGid);
    const ValueId row_base = b.IMulConst(gid, cols);
    for (size_t k = 0; k < std::size(kinds); ++k) {
      const ReduceKind kind = kinds[k];
      ValueId init = kNoValue;
      if (kind == ReduceKind::kSum) init = b.ConstantOf(t, 0);
      if (kind == ReduceKind::kProd) init = b.ConstantOf(t, 1);
      if (kind == ReduceKind::kMax) {
        init = IsFloatType(t) ? b.Float(t, -INFINITY) : b.ConstantOf(t, -1e300);
      }
      if (kind == ReduceKind::kMin) {
        init = IsFloatType(t) ? b.Float(t, INFINITY) : b.ConstantOf(t, 1e300);
      }
      const VarId r = b.BeginReduce(kind, init, cols);
      const ValueId acc = b.EndReduce(b.Load(x, b.IAdd(row_base, b.Var(r))));
      b.Store(outs[k], gid, acc);
    }
    Kernel kernel = std::move(b).Finish(rows);

    KernelBuffers inputs(kernel);
    std::mt19937_64 rng(5);
    FillRandom(inputs.data(0), dtype, rows * cols, rng);
    if (IsFloatType(t)) {
      // Products of random data overflow; keep magnitudes near 1 for them to be meaningful, and
      // avoid zeros (the sign of a zero max depends on the unspecified order).
      for (int64_t i = 0; i < rows * cols; ++i) {
        const double v = ElementAsDouble(inputs.data(0), dtype, i);
        double w = std::isnan(v) ? v : (std::isinf(v) ? v : 0.75 + std::fmod(std::abs(v), 0.5));
        if (i % 5 == 0) w = -w;
        if (i / cols == 3) w = NAN;              // a row of NaNs
        if (i / cols == 4) w = (i % 2) ? 2 : 1;  // ties
        if (dtype == ir::DType::kF32) inputs.as<float>(0)[i] = static_cast<float>(w);
        if (dtype == ir::DType::kF64) inputs.as<double>(0)[i] = w;
        if (dtype == ir::DType::kF16) inputs.as<uint16_t>(0)[i] = ir::DoubleToHalf(w);
      }
    }
    const Outcome outcome = RunBoth(kernel, inputs);
    for (size_t k = 0; k < std::size(kinds); ++k) {
      const ArgId out = outs[k];
      const ir::DType out_dtype = kernel.args[static_cast<size_t>(out)].dtype;
      const bool float_sum =
          IsFloatType(t) && (kinds[k] == ReduceKind::kSum || kinds[k] == ReduceKind::kProd);
      for (int64_t row = 0; row < rows; ++row) {
        const double jit = ElementAsDouble(outcome.jit.data(out), out_dtype, row);
        const double want = ElementAsDouble(outcome.oracle.data(out), out_dtype, row);
        if (float_sum && std::isfinite(want)) {
          // Reassociated: equal up to the rounding of the summation order.
          const double relative = out_dtype == ir::DType::kF64   ? 1e-13
                                  : out_dtype == ir::DType::kF32 ? 1e-5
                                                                 : 2e-3;
          EXPECT_NEAR(jit, want, std::abs(want) * relative)
              << ir::DTypeName(dtype) << " " << ReduceKindName(kinds[k]) << " row " << row;
        } else {
          EXPECT_TRUE(SameElement(outcome.jit.data(out), outcome.oracle.data(out), out_dtype, row))
              << ir::DTypeName(dtype) << " " << ReduceKindName(kinds[k]) << " row " << row
              << ": jit " << jit << ", oracle " << want;
        }
      }
    }
  }
}

// A gather: reads an index, checks it, loads at the clamped index and reports an out-of-range
// one through the error flag with predicated stores; a scatter-add reads back its output.
TEST(EmitterTest, PredicatedStoresErrorFlagAndReadBackOfOutputs) {
  constexpr int64_t n = 50, size = 8;
  KernelBuilder b("gather_scatter");
  const ArgId data = b.AddArg({"data", ir::DType::kF32, size, ArgRole::kInput});
  const ArgId index = b.AddArg({"index", ir::DType::kI64, n, ArgRole::kInput});
  const ArgId gathered = b.AddArg({"gathered", ir::DType::kF32, n, ArgRole::kOutput});
  const ArgId scattered = b.AddArg({"scattered", ir::DType::kF32, size, ArgRole::kOutput});
  const ArgId flag = b.AddArg({"flag", ir::DType::kI64, 2, ArgRole::kErrorFlag});
  const ValueId gid = b.Var(kGid);
  const ValueId i = b.Load(index, gid);
  const ValueId bad = b.Binary(ExprOp::kOr, b.Binary(ExprOp::kLt, i, b.Index(0)),
                               b.Binary(ExprOp::kGe, i, b.Index(size)));
  const ValueId clamped = b.IClamp(i, 0, size - 1);
  b.Store(gathered, gid, b.Load(data, clamped));
  b.Store(flag, b.Index(0), b.Index(1), bad);
  b.Store(flag, b.Index(1), i, bad);
  const ValueId old = b.Load(scattered, clamped);
  b.Let(old);
  b.Store(scattered, clamped, b.Binary(ExprOp::kAdd, old, b.Cast(gid, ScalarType::kF32)));
  Kernel kernel = std::move(b).Finish(n);

  KernelBuffers inputs(kernel);
  for (int64_t k = 0; k < size; ++k) inputs.as<float>(0)[k] = static_cast<float>(k * 10);
  for (int64_t k = 0; k < n; ++k) inputs.as<int64_t>(1)[k] = (k * 5) % 9;  // 8 is out of range
  const Outcome outcome = RunBoth(kernel, inputs);
  ExpectOutputsIdentical(kernel, outcome, {}, inputs);
  EXPECT_EQ(outcome.jit.as<int64_t>(4)[0], 1);
  EXPECT_EQ(outcome.jit.as<int64_t>(4)[1], 8);
  // Every element k of `scattered` received the gids whose (clamped) index is k, in order.
  float sum = 0;
  for (int64_t k = 0; k < size; ++k) sum += outcome.jit.as<float>(3)[k];
  EXPECT_EQ(sum, static_cast<float>(n * (n - 1) / 2));
}

TEST(EmitterTest, EmptyRangesAndZeroExtents) {
  KernelBuilder b("empty");
  const ArgId out = b.AddArg({"out", ir::DType::kF32, 4, ArgRole::kOutput});
  const VarId r = b.BeginReduce(ReduceKind::kSum, b.Float(ScalarType::kF32, 2.5), 0);
  const ValueId sum = b.EndReduce(b.Cast(b.Var(r), ScalarType::kF32));
  const VarId c = b.BeginLoop(0);
  b.Store(out, b.Var(c), b.Float(ScalarType::kF32, 9));
  b.EndLoop();
  b.Store(out, b.Var(kGid), sum);
  Kernel kernel = std::move(b).Finish(4);
  absl::StatusOr<CompiledKernel> compiled = Compiler().Compile(kernel);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelBuffers buffers(kernel);
  compiled->fn(buffers.args(), 2, 2);  // nothing
  EXPECT_EQ(buffers.as<float>(0)[2], 0.0f);
  compiled->fn(buffers.args(), 1, 3);
  EXPECT_EQ(buffers.as<float>(0)[0], 0.0f);
  EXPECT_EQ(buffers.as<float>(0)[1], 2.5f);  // the init of an empty reduce
  EXPECT_EQ(buffers.as<float>(0)[2], 2.5f);
  EXPECT_EQ(buffers.as<float>(0)[3], 0.0f);
}

TEST(EmitterTest, InvalidKernelIsRejectedWithItsName) {
  KernelBuilder b("broken");
  const ArgId out = b.AddArg({"out", ir::DType::kF32, 4, ArgRole::kOutput});
  b.Store(out, b.Var(kGid), b.Float(ScalarType::kF64, 1.0));  // f64 into an f32 buffer
  Kernel kernel = std::move(b).Finish(4);
  absl::StatusOr<CompiledKernel> compiled = Compiler().Compile(kernel);
  ASSERT_FALSE(compiled.ok());
  EXPECT_NE(std::string(compiled.status().message()).find("broken"), std::string::npos)
      << compiled.status();
}

// ---- Vectorisation ------------------------------------------------------------------------------

// The widest `<N x float>` in the text, 0 if none.
int WidestFloatVector(const std::string& text) {
  static const std::regex vector_type(R"(<(\d+) x float>)");
  int widest = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), vector_type);
       it != std::sregex_iterator(); ++it) {
    widest = std::max(widest, std::stoi((*it)[1].str()));
  }
  return widest;
}

// 8 lanes with AVX (ymm), 4 with SSE/NEON.
int ExpectedLanes() {
  absl::StatusOr<HostTarget> host = CpuCompiler::Host();
  return host.ok() && host->features.find("+avx") != std::string::npos ? 8 : 4;
}

CompiledKernel CompileDumped(const Kernel& kernel, const std::string& dir) {
  absl::StatusOr<passes::DumpSession> session = passes::DumpSession::Create(dir, "vector");
  EXPECT_TRUE(session.ok()) << session.status();
  CompileOptions options;
  options.dump = &*session;
  options.dump_name = kernel.name;
  absl::StatusOr<CompiledKernel> compiled = Compiler().Compile(kernel, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : CompiledKernel{};
}

TEST(EmitterTest, ElementwiseF32InnerLoopIsVectorised) {
  const Kernel kernel = testing::AxpbKernel();
  const std::string dir = ::testing::TempDir() + "/kiln_vector_dump";
  const CompiledKernel compiled = CompileDumped(kernel, dir);
  EXPECT_GE(WidestFloatVector(compiled.llvm_ir), ExpectedLanes()) << compiled.llvm_ir;
  // The multiply-add is contracted into one fma instruction where the host has FMA.
  if (TargetHasFma()) {
    EXPECT_NE(compiled.assembly.find("vfmadd"), std::string::npos) << compiled.assembly;
  }
  if (ExpectedLanes() == 8) {
    EXPECT_TRUE(compiled.assembly.find("%ymm") != std::string::npos ||
                compiled.assembly.find("%zmm") != std::string::npos)
        << compiled.assembly;
  }
}

// The vector loads in the main vector loop's block of `llvm_ir` (optimised IR): one per vector
// iteration in flight for a one-input elementwise kernel.
int VectorLoadsInVectorBody(const std::string& llvm_ir) {
  const size_t start = llvm_ir.find("\nvector.body");
  if (start == std::string::npos) return 0;
  const std::string block = llvm_ir.substr(start, llvm_ir.find("\n\n", start + 1) - start);
  int loads = 0;
  for (size_t at = block.find("= load <"); at != std::string::npos;
       at = block.find("= load <", at + 1)) {
    ++loads;
  }
  return loads;
}

// A division by a Reduce's result (softmax's row sum) becomes one reciprocal per row and a
// multiply per element, as PyTorch's softmax computes it; a division by anything else (a
// QuantizeLinear's x / scale, whose rounding must be exact) stays a division.
TEST(EmitterTest, DivisionByARowSumBecomesOneReciprocalPerRow) {
  const CompiledKernel softmax = CompileDumped(SoftmaxKernel(64, 256, ir::DType::kF32),
                                               ::testing::TempDir() + "/kiln_reciprocal");
  EXPECT_EQ(softmax.llvm_ir.find("fdiv <"), std::string::npos) << softmax.llvm_ir;
  EXPECT_NE(softmax.llvm_ir.find("fdiv"), std::string::npos) << softmax.llvm_ir;

  KernelBuilder b("quantize");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 4096, ArgRole::kInput});
  const ArgId scale = b.AddArg({"scale", ir::DType::kF32, 1, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 4096, ArgRole::kOutput});
  const ValueId zero = b.Index(0);
  b.Store(
      y, b.Var(kGid),
      b.Unary(ExprOp::kRound, b.Binary(ExprOp::kDiv, b.Load(x, b.Var(kGid)), b.Load(scale, zero))));
  const CompiledKernel quantize =
      CompileDumped(std::move(b).Finish(4096), ::testing::TempDir() + "/kiln_reciprocal_q");
  EXPECT_NE(quantize.llvm_ir.find("fdiv <"), std::string::npos) << quantize.llvm_ir;
  EXPECT_EQ(quantize.llvm_ir.find("arcp"), std::string::npos) << quantize.llvm_ir;
}

TEST(EmitterTest, LongElementwiseBodiesKeepFourVectorIterationsInFlight) {
  // tanh's expansion is a long chain of dependent ops: the emitter asks LLVM to interleave four
  // vector iterations (llvm.loop.interleave.count); a short body is left to LLVM's own choice.
  KernelBuilder b("tanh");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 4096, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 4096, ArgRole::kOutput});
  b.Store(y, b.Var(kGid), b.Unary(ExprOp::kTanh, b.Load(x, b.Var(kGid))));
  const Kernel long_body = std::move(b).Finish(4096);
  const CompiledKernel compiled =
      CompileDumped(long_body, ::testing::TempDir() + "/kiln_interleave");
  EXPECT_EQ(VectorLoadsInVectorBody(compiled.llvm_ir), 4) << compiled.llvm_ir;
  const CompiledKernel short_body =
      CompileDumped(testing::AxpbKernel(), ::testing::TempDir() + "/kiln_interleave_short");
  EXPECT_GE(VectorLoadsInVectorBody(short_body.llvm_ir), 1) << short_body.llvm_ir;
}

// How many `load <N x float>` the optimised IR holds: copies of a vector loop body show up as
// multiples of its loads.
int VectorFloatLoads(const std::string& llvm_ir) {
  static const std::regex vector_load(R"(= load <\d+ x float>)");
  return static_cast<int>(std::distance(
      std::sregex_iterator(llvm_ir.begin(), llvm_ir.end(), vector_load), std::sregex_iterator()));
}

// PrepareKernel moves a gather's index checks out of the loops they do not vary in
// (HoistInvariantChecks): the lowering checks a row gather's (index_select's) row index at every
// element of the row, and the flag stores, relaxed atomics behind a branch, keep LLVM from
// vectorising a loop it cannot unswitch (BERT's head gather, three gathers and a transposed
// output in one kernel, ran 12-22% faster without them; docs/performance.md).
TEST(EmitterTest, PrepareKernelChecksARowGathersIndexOncePerRow) {
  constexpr int64_t kRows = 64, kCols = 384, kPicked = 32;
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {kRows, kCols}});
  const ir::NodeId idx = b.Parameter("idx", {ir::DType::kI64, {kPicked}});
  b.Output(b.Gather(x, b.Broadcast(b.Reshape(idx, {kPicked, 1}), {kPicked, kCols}), 0));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const passes::FusionPlan plan = passes::Fuse(*graph);
  ASSERT_EQ(plan.groups.size(), size_t{1});
  absl::StatusOr<Kernel> kernel = LowerGroup(*graph, plan.groups[0], "row_gather");
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const std::string flag_store = "store arg" + std::to_string(kernel->args.size() - 1) + "[";
  auto in_loop = [&](const Kernel& k) {
    const std::string text = PrintKernel(k);
    return text.substr(std::min(text.size(), text.find(" for i")));
  };
  EXPECT_NE(in_loop(*kernel).find(flag_store), std::string::npos) << PrintKernel(*kernel);
  const Kernel prepared = PrepareKernel(*kernel);
  EXPECT_EQ(in_loop(prepared).find(flag_store), std::string::npos) << PrintKernel(prepared);
  const CompiledKernel compiled = CompileDumped(*kernel, ::testing::TempDir() + "/kiln_row_gather");
  // The row copy: a memcpy (or, with an op on the way, a vector loop).
  EXPECT_TRUE(VectorFloatLoads(compiled.llvm_ir) >= 1 ||
              compiled.llvm_ir.find("@llvm.memcpy") != std::string::npos)
      << compiled.llvm_ir;
}

TEST(EmitterTest, MapLoopsAreVectorisedButNotUnrolled) {
  // A GEMM epilogue's shape: rows of 256 elements. The vector loop of a 256-element row runs a
  // constant 8 times; LLVM's full unroll would copy its body 8 times (and the row loop's runtime
  // unroll twice more), which costs LLVM time and no speed, so map loops carry
  // llvm.loop.unroll.disable. One vector body of x and bias loads, at most the vectoriser's
  // interleave of four, and its remainder loop.
  const CompiledKernel compiled =
      CompileDumped(BiasAddKernel(16, 256), ::testing::TempDir() + "/kiln_map_unroll");
  EXPECT_GE(WidestFloatVector(compiled.llvm_ir), ExpectedLanes()) << compiled.llvm_ir;
  EXPECT_NE(compiled.llvm_ir.find("llvm.loop.unroll.disable"), std::string::npos)
      << compiled.llvm_ir;
  EXPECT_LE(VectorFloatLoads(compiled.llvm_ir), 2 * 4 + 2) << compiled.llvm_ir;
  // Reductions keep LLVM's unrolling (softmax and layer norm rows are faster with it): the same
  // row as a sum is unrolled past one interleaved vector body.
  KernelBuilder b("row_sum");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 16 * 256, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 16, ArgRole::kOutput});
  const VarId r = b.BeginReduce(ReduceKind::kSum, b.Float(ScalarType::kF32, 0), 256);
  const ValueId sum = b.EndReduce(b.Load(x, b.IAdd(b.IMulConst(b.Var(kGid), 256), b.Var(r))));
  b.Store(y, b.Var(kGid), sum);
  const CompiledKernel reduction =
      CompileDumped(std::move(b).Finish(16), ::testing::TempDir() + "/kiln_reduce_unroll");
  EXPECT_GT(VectorFloatLoads(reduction.llvm_ir), 2 * 4 + 2) << reduction.llvm_ir;
}

TEST(EmitterTest, ExpandedMathAndReductionsVectorise) {
  // A softmax row: the max, the sum of exp and the store loop all run on vectors once
  // ExpandMath has replaced exp, and no libm call is left.
  const Kernel kernel = SoftmaxKernel(64, 1024, ir::DType::kF32);
  const CompiledKernel compiled = CompileDumped(kernel, ::testing::TempDir() + "/kiln_vec2");
  EXPECT_GE(WidestFloatVector(compiled.llvm_ir), ExpectedLanes());
  EXPECT_EQ(compiled.llvm_ir.find("@exp"), std::string::npos) << compiled.llvm_ir;
  EXPECT_EQ(compiled.llvm_ir.find("llvm.exp."), std::string::npos) << compiled.llvm_ir;
  // The float max reduction is vectorised too (a vector maxnum reduction).
  EXPECT_NE(compiled.llvm_ir.find("llvm.vector.reduce.fmax"), std::string::npos)
      << compiled.llvm_ir;
  EXPECT_NE(compiled.llvm_ir.find("llvm.vector.reduce.fadd"), std::string::npos)
      << compiled.llvm_ir;
}

TEST(EmitterTest, RowKernelsOverLargeInputsPrefetchTheNextRow) {
  // A softmax over 4 MiB prefetches the next row in its exp-and-sum pass, which still runs on
  // vectors; over 256 KiB, which stays in cache, it does not.
  const CompiledKernel large = CompileDumped(SoftmaxKernel(1024, 1024, ir::DType::kF32),
                                             ::testing::TempDir() + "/kiln_prefetch_large");
  EXPECT_NE(large.llvm_ir.find("@llvm.prefetch"), std::string::npos) << large.llvm_ir;
  EXPECT_GE(WidestFloatVector(large.llvm_ir), ExpectedLanes()) << large.llvm_ir;
  const CompiledKernel small = CompileDumped(SoftmaxKernel(64, 1024, ir::DType::kF32),
                                             ::testing::TempDir() + "/kiln_prefetch_small");
  EXPECT_EQ(small.llvm_ir.find("@llvm.prefetch"), std::string::npos) << small.llvm_ir;
  // One pass over each row (a sum of exp): the hardware prefetcher streams it already.
  KernelBuilder b("row_sum_exp");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 1024 * 1024, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 1024, ArgRole::kOutput});
  const VarId r = b.BeginReduce(ReduceKind::kSum, b.Float(ScalarType::kF32, 0), 1024);
  const ValueId sum = b.EndReduce(
      b.Unary(ExprOp::kExp, b.Load(x, b.IAdd(b.IMulConst(b.Var(kGid), 1024), b.Var(r)))));
  b.Store(y, b.Var(kGid), sum);
  const CompiledKernel one_pass =
      CompileDumped(std::move(b).Finish(1024), ::testing::TempDir() + "/kiln_prefetch_one_pass");
  EXPECT_EQ(one_pass.llvm_ir.find("@llvm.prefetch"), std::string::npos) << one_pass.llvm_ir;
}

}  // namespace
}  // namespace kiln::codegen::cpu
