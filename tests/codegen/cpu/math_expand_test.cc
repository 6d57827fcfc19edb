// ExpandMath (codegen/math_expand.h): the rewrite itself, and the accuracy of every expansion
// measured against libm in double over a dense sweep of f32 inputs, both as JIT-compiled code
// (with fma contraction, what production runs) and through kernel_eval (each op rounded to f32,
// no contraction). The bounds asserted here are the ones documented in math_expand.h.
#include "codegen/math_expand.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/jit.h"
#include "codegen/kernel_eval.h"
#include "codegen/kernel_ir.h"
#include "gtest/gtest.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include "tests/codegen/cpu/cpu_test_util.h"

namespace kiln::codegen {
namespace {

using cpu::testing::KernelBuffers;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One function under test: how to build it in kernel IR, its double reference and its bound.
struct MathFunction {
  const char* name;
  std::function<ValueId(KernelBuilder&, ValueId)> build;
  double (*reference)(double);
  double max_ulps;  // documented in math_expand.h
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// 1 + tanh(x) without the cancellation of double's tanh near -1.
double OnePlusTanh(double x) { return 2.0 * Sigmoid(2.0 * x); }

std::vector<MathFunction> Functions() {
  auto unary = [](ExprOp op) {
    return [op](KernelBuilder& b, ValueId x) { return b.Unary(op, x); };
  };
  return {
      {"exp", unary(ExprOp::kExp), [](double x) { return std::exp(x); }, 1.5},
      {"log", unary(ExprOp::kLog), [](double x) { return std::log(x); }, 1.5},
      {"tanh", unary(ExprOp::kTanh), [](double x) { return std::tanh(x); }, 2.0},
      {"erf", unary(ExprOp::kErf), [](double x) { return std::erf(x); }, 2.0},
      // The frontend's sigmoid: reciprocal(exp(-x) + 1).
      {"sigmoid",
       [](KernelBuilder& b, ValueId x) {
         return b.Unary(ExprOp::kReciprocal,
                        b.Binary(ExprOp::kAdd, b.Unary(ExprOp::kExp, b.Unary(ExprOp::kNeg, x)),
                                 b.Float(ScalarType::kF32, 1.0)));
       },
       Sigmoid, 3.0},
      // gelu_tanh's 1 + tanh(u).
      {"1+tanh",
       [](KernelBuilder& b, ValueId x) {
         return b.Binary(ExprOp::kAdd, b.Unary(ExprOp::kTanh, x), b.Float(ScalarType::kF32, 1.0));
       },
       OnePlusTanh, 3.0},
  };
}

Kernel UnaryKernel(const MathFunction& f, int64_t n) {
  KernelBuilder b(absl::StrCat("math_", f.name));
  const ArgId in = b.AddArg({"x", ir::DType::kF32, n, ArgRole::kInput});
  const ArgId out = b.AddArg({"y", ir::DType::kF32, n, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(out, gid, f.build(b, b.Load(in, gid)));
  return std::move(b).Finish(n);
}

// Error of `got` in units in the last place of the float format at the exact value `want`
// (subnormal spacing 2^-149 below FLT_MIN). Where `want` rounds to ±inf, `got` must be that
// infinity; an overflow of `got` to inf where `want` is still a float counts as the value 2^128
// (one ulp past FLT_MAX), not as an infinite error. NaN must match NaN.
double UlpError(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : kInf;
  if (std::isnan(got)) return kInf;
  if (std::isinf(static_cast<float>(want))) {
    return std::isinf(got) && std::signbit(got) == std::signbit(want) ? 0 : kInf;
  }
  const double value = std::isinf(got) ? std::copysign(0x1p128, got) : got;
  int exponent = 0;
  std::frexp(want, &exponent);  // |want| in [2^(exponent-1), 2^exponent)
  const double ulp = want == 0 ? 0x1p-149 : std::max(std::ldexp(1.0, exponent - 24), 0x1p-149);
  return std::abs(value - want) / ulp;
}

// Dense inputs: every 1021st float of each sign (all binades, subnormals, ±0, ±inf, NaN), every
// float (or every few) in the ranges where each function changes behaviour, and boundary values.
std::vector<float> SweepInputs(const char* name) {
  std::vector<float> inputs;
  auto bits_to_float = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  for (uint64_t bits = 0; bits <= 0x7f800000u; bits += 1021) {
    inputs.push_back(bits_to_float(static_cast<uint32_t>(bits)));
    inputs.push_back(-bits_to_float(static_cast<uint32_t>(bits)));
  }
  // Floats in increasing order are the integers ..., -(bits of |x|), ..., bits of x, ...
  auto order = [](float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    return (bits >> 31) ? -static_cast<int64_t>(bits & 0x7fffffffu) : static_cast<int64_t>(bits);
  };
  auto every_float = [&](float lo, float hi, int stride) {
    for (int64_t k = order(lo); k <= order(hi); k += stride) {
      const float magnitude = bits_to_float(static_cast<uint32_t>(k < 0 ? -k : k));
      inputs.push_back(k < 0 ? -magnitude : magnitude);
    }
  };
  const std::string f = name;
  if (f == "exp" || f == "sigmoid" || f == "1+tanh") {
    every_float(85.0f, 90.0f, 1);     // overflow threshold (88.7228)
    every_float(-105.0f, -85.0f, 7);  // the subnormal results and underflow to 0
    every_float(-1.0f, 1.0f, 1021);
  }
  if (f == "log") {
    every_float(0x1p-149f, 0x1p-126f, 31);  // subnormal inputs
    every_float(0.5f, 2.0f, 23);            // around 1, where log is small
  }
  if (f == "tanh" || f == "erf" || f == "sigmoid" || f == "1+tanh") {
    every_float(-6.0f, 6.0f, 509);  // the branch points 0.625 / 0.875 and the saturation
    every_float(-0x1p-20f, 0x1p-20f, 9973);
  }
  for (float special :
       {0.0f,         -0.0f,       INFINITY,  -INFINITY,  NAN,       FLT_MAX,    -FLT_MAX,
        FLT_MIN,      -FLT_MIN,    0x1p-149f, -0x1p-149f, 88.72283f, 88.722839f, -87.33655f,
        -103.972084f, -103.97208f, 0.625f,    -0.625f,    0.875f,    4.0f,       -4.0f,
        9.0f,         44.0f,       1e10f,     -1e10f}) {
    inputs.push_back(special);
  }
  return inputs;
}

struct Measured {
  double max_ulps = 0;
  float worst_input = 0;
  int64_t count = 0;
};

Measured Measure(const MathFunction& f, const std::vector<float>& inputs,
                 const std::vector<float>& outputs) {
  Measured m;
  m.count = static_cast<int64_t>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double error = UlpError(outputs[i], f.reference(inputs[i]));
    if (error > m.max_ulps || std::isnan(error)) {
      m.max_ulps = error;
      m.worst_input = inputs[i];
    }
  }
  return m;
}

// ---- The rewrite --------------------------------------------------------------------------------

int CountOps(const Kernel& kernel, ExprOp op, ScalarType type) {
  int count = 0;
  for (const Expr& e : kernel.exprs) count += e.op == op && e.type == type;
  return count;
}

TEST(MathExpandTest, ReplacesF32TranscendentalsAndKeepsF64) {
  KernelBuilder b("mixed");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 8, ArgRole::kInput});
  const ArgId d = b.AddArg({"d", ir::DType::kF64, 8, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 8, ArgRole::kOutput});
  const ArgId z = b.AddArg({"z", ir::DType::kF64, 8, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  const ValueId v = b.Load(x, gid);
  ValueId sum = b.Unary(ExprOp::kExp, v);
  for (ExprOp op : {ExprOp::kLog, ExprOp::kTanh, ExprOp::kErf, ExprOp::kSin}) {
    sum = b.Binary(ExprOp::kAdd, sum, b.Unary(op, v));
  }
  b.Store(y, gid, sum);
  b.Store(z, gid, b.Unary(ExprOp::kExp, b.Load(d, gid)));
  const Kernel kernel = std::move(b).Finish(8);
  ASSERT_TRUE(NeedsMathExpansion(kernel));
  const Kernel expanded = ExpandMath(kernel);
  ASSERT_TRUE(VerifyKernel(expanded).ok()) << VerifyKernel(expanded);
  for (ExprOp op : {ExprOp::kExp, ExprOp::kLog, ExprOp::kTanh, ExprOp::kErf}) {
    EXPECT_EQ(CountOps(expanded, op, ScalarType::kF32), 0) << ExprOpName(op);
  }
  EXPECT_EQ(CountOps(expanded, ExprOp::kSin, ScalarType::kF32), 1);  // stays a libm call
  EXPECT_EQ(CountOps(expanded, ExprOp::kExp, ScalarType::kF64), 1);  // f64 keeps libm
  EXPECT_GT(CountOps(expanded, ExprOp::kFma, ScalarType::kF32), 20);
  EXPECT_FALSE(NeedsMathExpansion(expanded));
  EXPECT_EQ(expanded.args.size(), kernel.args.size());
  EXPECT_EQ(expanded.parallel_extent, kernel.parallel_extent);
}

TEST(MathExpandTest, KernelWithoutTranscendentalsIsUnchanged) {
  KernelBuilder b("plain");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 8, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 8, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(y, gid, b.Unary(ExprOp::kSqrt, b.Load(x, gid)));
  const Kernel kernel = std::move(b).Finish(8);
  EXPECT_FALSE(NeedsMathExpansion(kernel));
  const Kernel expanded = ExpandMath(kernel);
  EXPECT_EQ(PrintKernel(expanded), PrintKernel(kernel));
  EXPECT_EQ(expanded.exprs.size(), kernel.exprs.size());
}

TEST(MathExpandTest, SigmoidPatternBecomesOneExpWithoutReciprocal) {
  const MathFunction sigmoid = Functions()[4];
  const Kernel kernel = UnaryKernel(sigmoid, 8);
  const Kernel expanded = ExpandMath(kernel);
  ASSERT_TRUE(VerifyKernel(expanded).ok());
  EXPECT_EQ(CountOps(expanded, ExprOp::kReciprocal, ScalarType::kF32), 0);
  EXPECT_EQ(CountOps(expanded, ExprOp::kDiv, ScalarType::kF32), 1);
  // One exp expansion: its polynomial's first coefficient appears once.
  int exp_polynomials = 0;
  for (const Expr& e : expanded.exprs) {
    exp_polynomials +=
        e.op == ExprOp::kConst && e.float_value == static_cast<float>(1.9875691500E-4);
  }
  EXPECT_EQ(exp_polynomials, 1);
}

TEST(MathExpandTest, OnePlusTanhBecomesOneExpWithoutTanhsPolynomial) {
  const MathFunction one_plus_tanh = Functions()[5];
  const Kernel expanded = ExpandMath(UnaryKernel(one_plus_tanh, 8));
  ASSERT_TRUE(VerifyKernel(expanded).ok());
  EXPECT_EQ(CountOps(expanded, ExprOp::kDiv, ScalarType::kF32), 1);
  int exp_polynomials = 0, tanh_polynomials = 0;
  for (const Expr& e : expanded.exprs) {
    if (e.op != ExprOp::kConst) continue;
    exp_polynomials += e.float_value == static_cast<float>(1.9875691500E-4);
    tanh_polynomials += e.float_value == static_cast<float>(-5.70498872745E-3);
  }
  EXPECT_EQ(exp_polynomials, 1);
  EXPECT_EQ(tanh_polynomials, 0);
}

// gelu_tanh as the frontend writes it, (y / 2)(1 + tanh(u)) with u = c (y + 0.044715 y^3),
// becomes y sigmoid(u (2c)): the same bits from kernel_eval as the expansion with y / 2 and u
// loaded (where neither fold applies), for every y whose products stay normal.
TEST(MathExpandTest, GeluTanhFoldsItsHalvingAndDoublingWithoutChangingBits) {
  constexpr int64_t n = 4096;
  constexpr float kC = 0.7978846f;
  KernelBuilder b("gelu");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, n, ArgRole::kInput});
  const ArgId gelu_out = b.AddArg({"gelu", ir::DType::kF32, n, ArgRole::kOutput});
  const ArgId u_out = b.AddArg({"u", ir::DType::kF32, n, ArgRole::kOutput});
  const ValueId y = b.Load(x, b.Var(kGid));
  const ValueId cube = b.Binary(ExprOp::kMul, b.Binary(ExprOp::kMul, y, y), y);
  const ValueId inner =
      b.Binary(ExprOp::kAdd, y, b.Binary(ExprOp::kMul, cube, b.Float(ScalarType::kF32, 0.044715)));
  const ValueId u = b.Binary(ExprOp::kMul, inner, b.Float(ScalarType::kF32, kC));
  const ValueId half = b.Binary(ExprOp::kMul, y, b.Float(ScalarType::kF32, 0.5));
  const ValueId one_plus_tanh =
      b.Binary(ExprOp::kAdd, b.Unary(ExprOp::kTanh, u), b.Float(ScalarType::kF32, 1.0));
  b.Store(gelu_out, b.Var(kGid), b.Binary(ExprOp::kMul, half, one_plus_tanh));
  b.Store(u_out, b.Var(kGid), u);
  const Kernel folded = ExpandMath(std::move(b).Finish(n));
  ASSERT_TRUE(VerifyKernel(folded).ok()) << VerifyKernel(folded);

  KernelBuilder c("gelu_loaded");
  const ArgId half_in = c.AddArg({"half", ir::DType::kF32, n, ArgRole::kInput});
  const ArgId u_in = c.AddArg({"u", ir::DType::kF32, n, ArgRole::kInput});
  const ArgId out = c.AddArg({"gelu", ir::DType::kF32, n, ArgRole::kOutput});
  c.Store(out, c.Var(kGid),
          c.Binary(ExprOp::kMul, c.Load(half_in, c.Var(kGid)),
                   c.Binary(ExprOp::kAdd, c.Unary(ExprOp::kTanh, c.Load(u_in, c.Var(kGid))),
                            c.Float(ScalarType::kF32, 1.0))));
  const Kernel loaded = ExpandMath(std::move(c).Finish(n));

  // The folds happened: the doubled constant is there, and y / 2 is not.
  int doubled = 0, halved = 0;
  for (const Expr& e : folded.exprs) {
    doubled += e.op == ExprOp::kConst && e.float_value == static_cast<float>(2.0 * kC);
    halved += e.op == ExprOp::kMul && (folded.expr(e.operands[0]).op == ExprOp::kLoad ||
                                       folded.expr(e.operands[1]).op == ExprOp::kLoad);
  }
  EXPECT_EQ(doubled, 1);
  EXPECT_EQ(halved, 3);  // y y, (y y) y and y sigmoid(...): no y 0.5

  std::vector<float> ys(n), gelu(n), us(n), halves(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    ys[i] = -12.0f + 24.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  }
  std::vector<void*> folded_args = {ys.data(), gelu.data(), us.data()};
  ASSERT_TRUE(EvalKernel(folded, folded_args).ok());
  for (int64_t i = 0; i < n; ++i) halves[i] = 0.5f * ys[i];
  std::vector<void*> loaded_args = {halves.data(), us.data(), want.data()};
  ASSERT_TRUE(EvalKernel(loaded, loaded_args).ok());
  for (int64_t i = 0; i < n; ++i) {
    if (std::abs(ys[i]) < 1e-30f) continue;  // y / 2 or y^3 would leave the normal range
    uint32_t got_bits, want_bits;
    std::memcpy(&got_bits, &gelu[i], 4);
    std::memcpy(&want_bits, &want[i], 4);
    ASSERT_EQ(got_bits, want_bits) << "y = " << ys[i] << ": " << gelu[i] << " vs " << want[i];
  }
}

TEST(MathExpandTest, ExpansionsInsideReductionsKeepScopes) {
  // exp inside a Reduce body and after it (using the accumulator): the rewritten values must
  // stay in their scopes.
  KernelBuilder b("scoped");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 12, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 3, ArgRole::kOutput});
  const ValueId base = b.IMulConst(b.Var(kGid), 4);
  const VarId r = b.BeginReduce(ReduceKind::kSum, b.Float(ScalarType::kF32, 0), 4);
  const ValueId sum = b.EndReduce(b.Unary(ExprOp::kExp, b.Load(x, b.IAdd(base, b.Var(r)))));
  b.Store(y, b.Var(kGid), b.Unary(ExprOp::kLog, sum));
  const Kernel kernel = std::move(b).Finish(3);
  const Kernel expanded = ExpandMath(kernel);
  ASSERT_TRUE(VerifyKernel(expanded).ok()) << VerifyKernel(expanded);
  std::vector<float> in(12), out_eval(3), out_ref(3);
  for (int i = 0; i < 12; ++i) in[i] = 0.1f * static_cast<float>(i) - 0.5f;
  std::vector<void*> args = {in.data(), out_eval.data()};
  ASSERT_TRUE(EvalKernel(expanded, args).ok());
  for (int row = 0; row < 3; ++row) {
    double s = 0;
    for (int k = 0; k < 4; ++k) s += std::exp(static_cast<double>(in[row * 4 + k]));
    EXPECT_NEAR(out_eval[row], std::log(s), 4e-7 * std::abs(std::log(s)) + 1e-7) << row;
  }
}

// ---- Accuracy -----------------------------------------------------------------------------------

// Measures `f` compiled by the JIT on `inputs`, `chunk` values at a time.
void MeasureChunk(const MathFunction& f, runtime::KernelFn fn, KernelBuffers& buffers,
                  const float* inputs, int64_t count, Measured& m) {
  std::memcpy(buffers.data(0), inputs, static_cast<size_t>(count) * sizeof(float));
  fn(buffers.args(), 0, count);
  const float* outputs = buffers.as<float>(1);
  for (int64_t i = 0; i < count; ++i) {
    const double error = UlpError(outputs[i], f.reference(inputs[i]));
    if (error > m.max_ulps || std::isnan(error)) {
      m.max_ulps = error;
      m.worst_input = inputs[i];
    }
  }
  m.count += count;
}

// With KILN_MATH_EXHAUSTIVE=1 every one of the 2^32 f32 inputs is checked (minutes per
// function); otherwise the dense sweep of SweepInputs.
TEST(MathExpandTest, JitAccuracyOverDenseSweep) {
  const char* exhaustive_env = std::getenv("KILN_MATH_EXHAUSTIVE");
  const bool exhaustive = exhaustive_env != nullptr && std::string(exhaustive_env) == "1";
  constexpr int64_t kChunk = 1 << 20;
  cpu::CpuCompiler compiler(cpu::CpuCompiler::Options{.cache_dir = ""});
  std::printf("%-8s %12s %14s %16s\n", "function", "inputs", "max ulp (JIT)", "worst input");
  for (const MathFunction& f : Functions()) {
    const Kernel kernel = UnaryKernel(f, kChunk);
    absl::StatusOr<cpu::CompiledKernel> compiled = compiler.Compile(kernel);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    KernelBuffers buffers(kernel);
    Measured m;
    if (exhaustive) {
      std::vector<float> chunk(kChunk);
      for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kChunk) {
        for (int64_t i = 0; i < kChunk; ++i) {
          const auto bits = static_cast<uint32_t>(start + static_cast<uint64_t>(i));
          std::memcpy(&chunk[static_cast<size_t>(i)], &bits, 4);
        }
        MeasureChunk(f, compiled->fn, buffers, chunk.data(), kChunk, m);
      }
    } else {
      const std::vector<float> inputs = SweepInputs(f.name);
      const auto n = static_cast<int64_t>(inputs.size());
      for (int64_t start = 0; start < n; start += kChunk) {
        MeasureChunk(f, compiled->fn, buffers, inputs.data() + start, std::min(kChunk, n - start),
                     m);
      }
    }
    std::printf("%-8s %12lld %14.3f %16.9g\n", f.name, static_cast<long long>(m.count), m.max_ulps,
                m.worst_input);
    EXPECT_LE(m.max_ulps, f.max_ulps) << f.name << " at x = " << m.worst_input;
  }
}

TEST(MathExpandTest, KernelEvalAccuracyWithoutContraction) {
  // kernel_eval rounds every op to f32 and never contracts: the expansions must meet the same
  // bounds in strict f32 arithmetic (6000 of the sweep's inputs: kernel_eval interprets).
  for (const MathFunction& f : Functions()) {
    std::vector<float> strided;
    const std::vector<float> all = SweepInputs(f.name);
    for (size_t i = 0; i < all.size(); i += all.size() / 6000) strided.push_back(all[i]);
    const auto n = static_cast<int64_t>(strided.size());
    const Kernel expanded = ExpandMath(UnaryKernel(f, n));
    std::vector<float> outputs(strided.size());
    std::vector<void*> args = {strided.data(), outputs.data()};
    ASSERT_TRUE(EvalKernel(expanded, args).ok());
    const Measured m = Measure(f, strided, outputs);
    std::printf("%-8s %12lld inputs, max ulp (kernel_eval) %.3f at %.9g\n", f.name,
                static_cast<long long>(m.count), m.max_ulps, m.worst_input);
    EXPECT_LE(m.max_ulps, f.max_ulps) << f.name << " at x = " << m.worst_input;
  }
}

TEST(MathExpandTest, SpecialValues) {
  cpu::CpuCompiler compiler(cpu::CpuCompiler::Options{.cache_dir = ""});
  const std::vector<float> x = {0.0f,  -0.0f,     INFINITY,   -INFINITY, NAN,    100.0f, -100.0f,
                                -1.0f, 0x1p-149f, -0x1p-149f, 1.0f,      200.0f, -200.0f};
  const auto n = static_cast<int64_t>(x.size());
  std::vector<std::vector<float>> results;
  for (const MathFunction& f : Functions()) {
    const Kernel kernel = UnaryKernel(f, n);
    absl::StatusOr<cpu::CompiledKernel> compiled = compiler.Compile(kernel);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    KernelBuffers buffers(kernel);
    std::memcpy(buffers.data(0), x.data(), x.size() * sizeof(float));
    compiled->fn(buffers.args(), 0, n);
    results.emplace_back(buffers.as<float>(1), buffers.as<float>(1) + n);
  }
  const std::vector<float>& exp = results[0];
  const std::vector<float>& log = results[1];
  const std::vector<float>& tanh = results[2];
  const std::vector<float>& erf = results[3];
  const std::vector<float>& sigmoid = results[4];
  const std::vector<float>& one_plus_tanh = results[5];
  EXPECT_EQ(exp[0], 1.0f);
  EXPECT_EQ(exp[1], 1.0f);
  EXPECT_EQ(exp[2], INFINITY);
  EXPECT_EQ(exp[3], 0.0f);
  EXPECT_TRUE(std::isnan(exp[4]));
  EXPECT_EQ(exp[5], INFINITY);
  EXPECT_EQ(exp[6], expf(-100.0f));  // subnormal result
  EXPECT_EQ(exp[11], INFINITY);
  EXPECT_EQ(exp[12], 0.0f);
  EXPECT_EQ(log[0], -INFINITY);
  EXPECT_EQ(log[1], -INFINITY);
  EXPECT_EQ(log[2], INFINITY);
  EXPECT_TRUE(std::isnan(log[3]));
  EXPECT_TRUE(std::isnan(log[4]));
  EXPECT_TRUE(std::isnan(log[7]));
  EXPECT_NEAR(log[8], std::log(0x1p-149), 1e-5);  // the smallest subnormal
  EXPECT_TRUE(std::isnan(log[9]));
  EXPECT_EQ(log[10], 0.0f);
  for (const std::vector<float>* odd : {&tanh, &erf}) {
    const std::vector<float>& r = *odd;
    EXPECT_EQ(r[0], 0.0f);
    EXPECT_TRUE(std::signbit(r[1])) << "f(-0) keeps the sign";
    EXPECT_EQ(r[2], 1.0f);
    EXPECT_EQ(r[3], -1.0f);
    EXPECT_TRUE(std::isnan(r[4]));
    EXPECT_EQ(r[5], 1.0f);
    EXPECT_EQ(r[6], -1.0f);
    EXPECT_EQ(r[10] > 0.76f, true);
  }
  EXPECT_EQ(sigmoid[0], 0.5f);
  EXPECT_EQ(sigmoid[1], 0.5f);
  EXPECT_EQ(sigmoid[2], 1.0f);
  EXPECT_EQ(sigmoid[3], 0.0f);
  EXPECT_TRUE(std::isnan(sigmoid[4]));
  EXPECT_EQ(sigmoid[5], 1.0f);
  // exp(100) overflows, but sigmoid(-100) = 3.7e-44 is still a (subnormal) float.
  EXPECT_NEAR(sigmoid[6], static_cast<float>(Sigmoid(-100.0)), 0x1p-149);
  EXPECT_GT(sigmoid[6], 0.0f);
  EXPECT_EQ(one_plus_tanh[0], 1.0f);
  EXPECT_EQ(one_plus_tanh[1], 1.0f);
  EXPECT_EQ(one_plus_tanh[2], 2.0f);
  EXPECT_EQ(one_plus_tanh[3], 0.0f);
  EXPECT_TRUE(std::isnan(one_plus_tanh[4]));
  EXPECT_EQ(one_plus_tanh[5], 2.0f);
  // 1 + tanh(-100) = 2 sigmoid(-200) = 2.8e-87 underflows to 0.
  EXPECT_EQ(one_plus_tanh[6], 0.0f);
}

#if defined(__x86_64__)
// exp of x far below -104 (an attention mask's -3.4e38 or -1e4 added to a score, where a padded
// batch has most of its elements) must give 0 without rounding a tiny product: an x86 core
// produces a subnormal or underflowing result in a microcode assist of about a hundred cycles,
// which made all-MiniLM-L6-v2's softmax take as long as its largest GEMM. MXCSR's sticky
// underflow flag records any such product; the kernel runs on this thread.
TEST(MathExpandTest, FarNegativeExpMultipliesZerosWithoutUnderflow) {
  cpu::CpuCompiler compiler(cpu::CpuCompiler::Options{.cache_dir = ""});
  const std::vector<float> x = {-FLT_MAX, -3.0e38f, -1.0e4f, -1000.0f, -200.0f, -177.0f, -INFINITY};
  const auto n = static_cast<int64_t>(x.size());
  for (const MathFunction& f : Functions()) {
    const std::string name = f.name;
    // sigmoid and 1 + tanh take exp(-|x|) (the one-scale path), exp the two-scale one; log, tanh
    // and erf have results far from underflow here.
    if (name != "exp" && name != "sigmoid" && name != "1+tanh") continue;
    const Kernel kernel = UnaryKernel(f, n);
    absl::StatusOr<cpu::CompiledKernel> compiled = compiler.Compile(kernel);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    KernelBuffers buffers(kernel);
    std::memcpy(buffers.data(0), x.data(), x.size() * sizeof(float));
    constexpr unsigned kUnderflowFlag = 0x10;  // MXCSR.UE
    _mm_setcsr(_mm_getcsr() & ~kUnderflowFlag);
    compiled->fn(buffers.args(), 0, n);
    const bool underflowed = (_mm_getcsr() & kUnderflowFlag) != 0;
    EXPECT_FALSE(underflowed) << name << " rounded a tiny product for x far below -104";
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(buffers.as<float>(1)[i], 0.0f) << name << "(" << x[static_cast<size_t>(i)] << ")";
    }
  }
  // Between -104 (where exp(x) < 2^-150 rounds to 0) and the clamps, the products underflow
  // (slowly, but rarely met) to the same 0 that the old clamp at -104 gave.
  std::vector<float> between;
  for (float v = -104.0f; v > -177.0f; v -= 0.37f) between.push_back(v);
  const Kernel kernel = UnaryKernel(Functions()[0], static_cast<int64_t>(between.size()));
  absl::StatusOr<cpu::CompiledKernel> compiled = compiler.Compile(kernel);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelBuffers buffers(kernel);
  std::memcpy(buffers.data(0), between.data(), between.size() * sizeof(float));
  compiled->fn(buffers.args(), 0, static_cast<int64_t>(between.size()));
  for (size_t i = 0; i < between.size(); ++i) {
    EXPECT_EQ(buffers.as<float>(1)[i], 0.0f) << "exp(" << between[i] << ")";
  }
}
#endif

}  // namespace
}  // namespace kiln::codegen
