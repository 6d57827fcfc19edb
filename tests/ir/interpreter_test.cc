// Tests of the reference interpreter. Every op in kAllOps gets (a) hand-computed small cases and
// (b) seeded random cases checked against an independent implementation written here in a
// different style: linear positions by Horner's rule and repeated division instead of strides,
// reductions by std::accumulate over gathered slices, matmul and conv by nested loops over named
// indices (conv and windows on an explicitly padded and dilated copy of the input). The EveryOp
// suite is parameterized over kAllOps and fails for an op without a case, so a new op cannot go
// untested.
#include "ir/interpreter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <source_location>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/builder.h"
#include "ir/random.h"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;
using Index = std::vector<int64_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kF32 = DType::kF32, kF64 = DType::kF64, kF16 = DType::kF16, kBF16 = DType::kBF16,
                kI32 = DType::kI32, kI64 = DType::kI64, kU8 = DType::kU8, kBool = DType::kBool;
constexpr DType kFloatTypes[] = {kF32, kF64, kF16, kBF16};
constexpr DType kIntTypes[] = {kI32,        kI64,        kU8,         DType::kI8,
                               DType::kI16, DType::kU16, DType::kU32, DType::kU64};

// ---- Running graphs -----------------------------------------------------------------------------

// Builds a graph with parameters p0, p1, ... of the arguments' types, outputs the node `build`
// returns, and interprets it.
using BuildFn = std::function<NodeId(Builder&, const std::vector<NodeId>&)>;

absl::StatusOr<TensorData> TryRun(const std::vector<TensorData>& args, const BuildFn& build) {
  Builder b;
  std::vector<NodeId> params;
  for (size_t i = 0; i < args.size(); ++i) {
    params.push_back(b.Parameter(absl::StrCat("p", i), {args[i].dtype(), args[i].shape()}));
  }
  b.Output(build(b, params));
  absl::StatusOr<Graph> graph = std::move(b).Build();
  if (!graph.ok()) return graph.status();
  absl::StatusOr<std::vector<TensorData>> results = Interpret(*graph, args);
  if (!results.ok()) return results.status();
  return (*results)[0];
}

TensorData RunGraph(const std::vector<TensorData>& args, const BuildFn& build) {
  absl::StatusOr<TensorData> result = TryRun(args, build);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : TensorData();
}

TensorData Data(DType dtype, Shape shape, const std::vector<double>& values) {
  absl::StatusOr<TensorData> data = TensorData::FromDoubles(dtype, std::move(shape), values);
  EXPECT_TRUE(data.ok()) << data.status();
  return data.ok() ? *std::move(data) : TensorData();
}

Attrs AttrsFor(std::function<void(Attrs&)> set) {
  Attrs attrs;
  set(attrs);
  return attrs;
}

// ---- Checking results ---------------------------------------------------------------------------

// Hand-computed values: exact equality (NaN matches NaN).
void ExpectValues(const TensorData& got, DType dtype, const Shape& shape,
                  const std::vector<double>& want) {
  ASSERT_EQ(got.dtype(), dtype) << DTypeName(got.dtype());
  ASSERT_EQ(got.shape(), shape) << ShapeToString(got.shape());
  ASSERT_EQ(static_cast<size_t>(got.num_elements()), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.GetDouble(static_cast<int64_t>(i));
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i << " is " << g;
    } else {
      EXPECT_EQ(g, want[i]) << "element " << i << " of " << DTypeName(dtype);
    }
  }
}

// Unit roundoff and smallest subnormal of a float dtype.
double Epsilon(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 0x1p-52;
    case DType::kF16:
      return 0x1p-10;
    case DType::kBF16:
      return 0x1p-7;
    default:
      return 0x1p-23;
  }
}
double Tiny(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 0x1p-1074;
    case DType::kF16:
      return 0x1p-24;
    case DType::kBF16:
      return 0x1p-133;
    default:
      return 0x1p-149;
  }
}

// An exact integer (|x| < 2^53) modulo 2^bits of an integer dtype, by floating-point remainder
// (i64 holds every such value; a negative one as u64 is 2^64 + x, rounded as GetDouble rounds).
double Wrap(double x, DType dtype) {
  if (dtype == DType::kBool) return x != 0 ? 1 : 0;
  if (dtype == DType::kI64) return x;
  if (dtype == DType::kU64) return x < 0 ? x + 0x1p64 : x;
  const double modulus = std::ldexp(1.0, static_cast<int>(DTypeSize(dtype)) * 8);
  const double m = x - modulus * std::floor(x / modulus);
  return IsSignedInteger(dtype) && m >= modulus / 2 ? m - modulus : m;
}

// The smallest and largest value of an integer dtype (i64's and u64's rounded to doubles).
std::pair<double, double> IntegerRange(DType dtype) {
  if (IsUnsignedInteger(dtype)) {
    return {0.0, std::ldexp(1.0, static_cast<int>(DTypeSize(dtype)) * 8) - 1};
  }
  const double half = std::ldexp(1.0, static_cast<int>(DTypeSize(dtype)) * 8 - 1);
  return {-half, half - 1};
}

// `exact` holds the mathematically exact results (unrounded for floats, unwrapped for integers).
// Floats may differ by the rounding to the dtype, plus the cancellation `magnitude` allows (e.g.
// the sum of |terms| of a sum, whose order of accumulation differs); integers must match exactly
// after wrapping.
void ExpectMatches(const TensorData& got, DType dtype, const Shape& shape,
                   const std::vector<double>& exact, const std::vector<double>& magnitude = {}) {
  ASSERT_EQ(got.dtype(), dtype) << DTypeName(got.dtype());
  ASSERT_EQ(got.shape(), shape) << ShapeToString(got.shape()) << " vs " << ShapeToString(shape);
  ASSERT_EQ(static_cast<size_t>(got.num_elements()), exact.size());
  int failures = 0;
  for (size_t i = 0; i < exact.size() && failures < 5; ++i) {
    const double g = got.GetDouble(static_cast<int64_t>(i));
    const double want = exact[i];
    if (!IsFloat(dtype)) {
      if (g != Wrap(want, dtype)) {
        ADD_FAILURE() << DTypeName(dtype) << ShapeToString(shape) << " element " << i << ": got "
                      << g << ", want " << Wrap(want, dtype) << " (exact " << want << ")";
        ++failures;
      }
      continue;
    }
    bool ok;
    if (std::isnan(want) || std::isinf(want)) {
      ok = std::isnan(want) ? std::isnan(g) : g == want;
    } else {
      const double mag = magnitude.empty() ? 0.0 : magnitude[i];
      ok = std::fabs(g - want) <= 4 * Epsilon(dtype) * (std::fabs(want) + mag) + Tiny(dtype);
    }
    if (!ok) {
      ADD_FAILURE() << DTypeName(dtype) << ShapeToString(shape) << " element " << i << ": got " << g
                    << ", want " << want;
      ++failures;
    }
  }
}

// ---- Independent index arithmetic ---------------------------------------------------------------

// Row-major position by Horner's rule.
int64_t Flat(const Shape& shape, const Index& index) {
  int64_t position = 0;
  for (size_t i = 0; i < shape.size(); ++i) position = position * shape[i] + index[i];
  return position;
}

// The multi-index of a row-major position, by repeated division.
Index Unflat(const Shape& shape, int64_t position) {
  Index index(shape.size());
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    index[i] = position % shape[i];
    position /= shape[i];
  }
  return index;
}

std::vector<double> Values(const TensorData& t) { return t.ToDoubles(); }

// ---- Random data --------------------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double Real(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  int64_t Int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }

 private:
  std::mt19937_64 engine_;
};

// Floats uniform in [lo, hi) (rounded to the dtype), integers uniform in [lo, hi] (u8 clamped to
// [0, 255]), bools fair coins.
TensorData RandomData(Rng& rng, DType dtype, const Shape& shape, double lo = -3, double hi = 3) {
  TensorData data(dtype, shape);
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    if (IsFloat(dtype)) {
      data.SetDouble(i, rng.Real(lo, hi));
    } else if (IsBool(dtype)) {
      data.SetInt64(i, rng.Int(0, 1));
    } else {
      const auto [min, max] = IntegerRange(dtype);
      const auto low = static_cast<int64_t>(std::max(lo, min));
      const auto high = static_cast<int64_t>(std::min(hi, max));
      data.SetInt64(i, rng.Int(low, high));
    }
  }
  return data;
}

// Values from a small set, so that comparisons, argmax and max meet ties.
TensorData TiedData(Rng& rng, DType dtype, const Shape& shape) {
  TensorData data(dtype, shape);
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    const double v = static_cast<double>(rng.Int(0, 4)) - (IsFloat(dtype) ? 2.0 : 0.0);
    data.SetDouble(i, IsFloat(dtype) ? v / 2 : v);
  }
  return data;
}

const std::vector<Shape>& ElementwiseShapes() {
  static const std::vector<Shape> shapes = {{}, {1}, {0}, {7}, {2, 3}, {3, 0, 2}, {2, 1, 4}};
  return shapes;
}

// ---- Per-op reference functions -----------------------------------------------------------------

double ReferenceRoundHalfEven(double x) {
  const double f = std::floor(x);
  const double fraction = x - f;
  if (fraction != 0.5) return fraction < 0.5 ? f : f + 1;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

double ReferenceUnary(Op op, double x) {
  switch (op) {
    case Op::kNeg:
      return 0.0 - x;
    case Op::kAbs:
      return x < 0 ? -x : x;
    case Op::kSign:
      return std::isnan(x) ? x : static_cast<double>((x > 0) - (x < 0));
    case Op::kExp:
      return std::exp(x);
    case Op::kLog:
      return std::log(x);
    case Op::kSqrt:
      return std::sqrt(x);
    case Op::kRsqrt:
      return std::pow(x, -0.5);
    case Op::kSin:
      return std::sin(x);
    case Op::kCos:
      return std::sin(std::numbers::pi / 2 - x);
    case Op::kTanh:
      return std::expm1(2 * x) / (std::exp(2 * x) + 1);
    case Op::kErf:
      return 1 - std::erfc(x);
    case Op::kFloor:
      return std::floor(x);
    case Op::kCeil:
      return -std::floor(-x);
    case Op::kRound:
      return ReferenceRoundHalfEven(x);
    case Op::kReciprocal:
      return std::pow(x, -1.0);
    case Op::kNot:
      return -x - 1;  // Two's complement: ~x == -x - 1.
    default:
      ADD_FAILURE() << "no reference for " << OpName(op);
      return 0;
  }
}

// Floor division and floored modulo by floating point (exact for the small integers used).
double ReferenceFloorDiv(double a, double b) { return b == 0 ? 0 : std::floor(a / b); }
double ReferenceMod(double a, double b) { return b == 0 ? 0 : a - b * std::floor(a / b); }

double ReferenceBinary(Op op, DType dtype, double a, double b) {
  switch (op) {
    case Op::kAdd:
      return a + b;
    case Op::kSub:
      return a - b;
    case Op::kMul:
      return a * b;
    case Op::kDiv:
      return IsFloat(dtype) ? a / b : ReferenceFloorDiv(a, b);
    case Op::kPow:
      return std::exp(b * std::log(a));
    case Op::kMax:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case Op::kMin:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case Op::kMod:
      return ReferenceMod(a, b);
    default:
      ADD_FAILURE() << "no reference for " << OpName(op);
      return 0;
  }
}

// Bitwise ops bit by bit on the 64-bit two's complement pattern.
double ReferenceLogical(Op op, DType dtype, int64_t a, int64_t b) {
  if (IsBool(dtype)) {
    const bool x = a != 0, y = b != 0;
    return op == Op::kAnd ? (x && y) : (op == Op::kOr ? (x || y) : (x != y));
  }
  uint64_t result = 0;
  for (int bit = 0; bit < 64; ++bit) {
    const bool x = (static_cast<uint64_t>(a) >> bit) & 1, y = (static_cast<uint64_t>(b) >> bit) & 1;
    const bool r = op == Op::kAnd ? (x && y) : (op == Op::kOr ? (x || y) : (x != y));
    result |= static_cast<uint64_t>(r) << bit;
  }
  return static_cast<double>(static_cast<int64_t>(result));
}

// The IR's cast of an exact value to `dtype`, by clamping.
double ReferenceCast(double x, DType dtype) {
  if (IsBool(dtype)) return x != 0;  // NaN != 0.
  if (IsFloat(dtype)) return x;      // Rounding is ExpectMatches' tolerance.
  if (std::isnan(x)) return 0;
  const auto [lo, hi] = IntegerRange(dtype);
  return std::clamp(std::trunc(x), lo, hi);
}

// ---- Leaves -------------------------------------------------------------------------------------

void HandLeaf(Op op) {
  switch (op) {
    case Op::kParameter:
      ExpectValues(RunGraph({Data(kF32, {2}, {1, 2})}, [](Builder&, auto p) { return p[0]; }), kF32,
                   {2}, {1, 2});
      break;
    case Op::kConstant:
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Constant(Data(kI32, {3}, {4, 5, 6}));
                            }),
                   kI32, {3}, {4, 5, 6});
      break;
    case Op::kFill:
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Fill(2.5, {kF32, {2, 2}});
                            }),
                   kF32, {2, 2}, {2.5, 2.5, 2.5, 2.5});
      // The value is cast: truncation, saturation, != 0.
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Fill(3.7, {kI32, {1}});
                            }),
                   kI32, {1}, {3});
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Fill(-1, {kU8, {2}});
                            }),
                   kU8, {2}, {0, 0});
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Fill(2, {kBool, {}});
                            }),
                   kBool, {}, {1});
      break;
    case Op::kIota:
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Iota({kI32, {2, 3}}, 1);
                            }),
                   kI32, {2, 3}, {0, 1, 2, 0, 1, 2});
      ExpectValues(RunGraph({},
                            [](Builder& b, auto) {
                              return b.Iota({kF32, {2, 3}}, 0);
                            }),
                   kF32, {2, 3}, {0, 0, 0, 1, 1, 1});
      break;
    case Op::kRandomUniform: {
      const TensorData got = RunGraph({}, [](Builder& b, auto) {
        return b.RandomUniform({kF32, {2, 2}}, 99);
      });
      std::vector<double> want;
      for (uint32_t i = 0; i < 4; ++i) {
        want.push_back(std::ldexp(Philox4x32_10({i, 0, 0, 0}, {99, 0})[0] >> 8, -24));
      }
      ExpectValues(got, kF32, {2, 2}, want);
      break;
    }
    case Op::kRandomNormal: {
      const TensorData got = RunGraph({}, [](Builder& b, auto) {
        return b.RandomNormal({kF64, {3}}, 5);
      });
      std::vector<double> want;
      for (uint32_t i = 0; i < 3; ++i) want.push_back(Normal(5, i, /*wide=*/true));
      ExpectValues(got, kF64, {3}, want);
      break;
    }
    default:
      ADD_FAILURE() << "no hand-computed case for " << OpName(op);
  }
}

void RandomLeaf(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 1);
  const std::vector<Shape> shapes = {{}, {0}, {1}, {3}, {2, 5}, {2, 0, 3}, {3, 2, 4}};
  for (const Shape& shape : shapes) {
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape)));
      const TensorData data = RandomData(rng, dtype, shape, -200, 200);
      switch (op) {
        case Op::kParameter:
          EXPECT_EQ(RunGraph({data}, [](Builder&, auto p) { return p[0]; }), data);
          break;
        case Op::kConstant:
          EXPECT_EQ(RunGraph({}, [&](Builder& b, auto) { return b.Constant(data); }), data);
          break;
        case Op::kFill: {
          const double value = rng.Real(-300, 300);
          const TensorData got = RunGraph({}, [&](Builder& b, auto) {
            return b.Fill(value, {dtype, shape});
          });
          ExpectMatches(got, dtype, shape,
                        std::vector<double>(NumElements(shape), ReferenceCast(value, dtype)));
          break;
        }
        case Op::kIota: {
          if (IsBool(dtype) || shape.empty()) break;
          const int64_t axis = rng.Int(0, static_cast<int64_t>(shape.size()) - 1);
          std::vector<double> want;
          for (int64_t i = 0; i < NumElements(shape); ++i) want.push_back(Unflat(shape, i)[axis]);
          ExpectMatches(RunGraph({},
                                 [&](Builder& b, auto) {
                                   return b.Iota({dtype, shape}, axis);
                                 }),
                        dtype, shape, want);
          break;
        }
        case Op::kRandomUniform:
        case Op::kRandomNormal: {
          if (!IsFloat(dtype)) break;
          const uint64_t seed = static_cast<uint64_t>(rng.Int(0, 1 << 30)) << 20;
          const TensorData got = RunGraph({}, [&](Builder& b, auto) {
            return op == Op::kRandomUniform ? b.RandomUniform({dtype, shape}, seed)
                                            : b.RandomNormal({dtype, shape}, seed);
          });
          std::vector<double> want;
          for (int64_t i = 0; i < NumElements(shape); ++i) {
            const auto u = static_cast<uint64_t>(i);
            want.push_back(op == Op::kRandomUniform ? Uniform(seed, u, dtype)
                                                    : Normal(seed, u, dtype == kF64));
            if (op == Op::kRandomUniform) {
              EXPECT_GE(got.GetDouble(i), 0.0);
              EXPECT_LT(got.GetDouble(i), 1.0);
            }
          }
          ExpectMatches(got, dtype, shape, want);
          break;
        }
        default:
          ADD_FAILURE() << "no random case for " << OpName(op);
          return;
      }
    }
  }
  if (op == Op::kRandomUniform || op == Op::kRandomNormal) {
    // Large samples have the right moments; a different seed gives different values.
    const Shape shape = {200, 100};
    const auto run = [&](uint64_t seed) {
      return RunGraph({}, [&](Builder& b, auto) {
        return op == Op::kRandomUniform ? b.RandomUniform({kF32, shape}, seed)
                                        : b.RandomNormal({kF32, shape}, seed);
      });
    };
    const std::vector<double> v = Values(run(2024));
    const double n = static_cast<double>(v.size());
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
    double variance = 0;
    for (double x : v) variance += (x - mean) * (x - mean);
    variance /= n;
    // 5 standard errors (see random_test.cc for the moments).
    if (op == Op::kRandomUniform) {
      EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
      EXPECT_NEAR(variance, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / n));
    } else {
      EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(1.0 / n));
      EXPECT_NEAR(variance, 1.0, 5 * std::sqrt(2.0 / n));
    }
    EXPECT_NE(run(2024), run(2025));
  }
}

// ---- Elementwise --------------------------------------------------------------------------------

TensorData RunUnary(Op op, const TensorData& x) {
  return RunGraph({x}, [op](Builder& b, auto p) { return b.Unary(op, p[0]); });
}
TensorData RunBinary(Op op, const TensorData& x, const TensorData& y) {
  return RunGraph({x, y}, [op](Builder& b, auto p) { return b.Binary(op, p[0], p[1]); });
}

void HandUnary(Op op) {
  const auto check = [op](DType dtype, const std::vector<double>& in,
                          const std::vector<double>& want) {
    const Shape shape = {static_cast<int64_t>(in.size())};
    ExpectValues(RunUnary(op, Data(dtype, shape, in)), dtype, shape, want);
  };
  switch (op) {
    case Op::kNeg:
      check(kF32, {1, -2, 0}, {-1, 2, 0});
      check(kI32, {5, -2147483648.0}, {-5, -2147483648.0});  // -INT32_MIN wraps.
      check(kU8, {0, 1, 200}, {0, 255, 56});
      break;
    case Op::kAbs:
      check(kF16, {-1.5, 2}, {1.5, 2});
      check(kI64, {-7, 7}, {7, 7});
      break;
    case Op::kSign:
      check(kF32, {-3, 0, 2, kNaN, -kInf}, {-1, 0, 1, kNaN, -1});
      check(kI32, {-3, 0, 9}, {-1, 0, 1});
      check(kU8, {0, 9}, {0, 1});
      break;
    case Op::kExp:
      check(kF64, {0, -kInf}, {1, 0});
      break;
    case Op::kLog:
      check(kF32, {1, 0, -1}, {0, -kInf, kNaN});
      break;
    case Op::kSqrt:
      check(kF32, {4, 9, 0}, {2, 3, 0});
      break;
    case Op::kRsqrt:
      check(kBF16, {4, 0.25}, {0.5, 2});
      break;
    case Op::kSin:
      check(kF64, {0}, {0});
      break;
    case Op::kCos:
      check(kF64, {0}, {1});
      break;
    case Op::kTanh:
      check(kF32, {0, kInf, -kInf}, {0, 1, -1});
      break;
    case Op::kErf:
      check(kF32, {0, kInf, -kInf}, {0, 1, -1});
      break;
    case Op::kFloor:
      check(kF32, {1.5, -1.5, 2}, {1, -2, 2});
      break;
    case Op::kCeil:
      check(kF32, {1.5, -1.5, 2}, {2, -1, 2});
      break;
    case Op::kRound:
      check(kF32, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6}, {0, 2, 2, 0, -2, 2, 3});
      break;
    case Op::kReciprocal:
      check(kF16, {2, 4, 0}, {0.5, 0.25, kInf});
      break;
    case Op::kNot:
      check(kBool, {1, 0}, {0, 1});
      check(kI32, {0, 5}, {-1, -6});
      check(kU8, {0, 255}, {255, 0});
      break;
    default:
      ADD_FAILURE() << "no hand-computed case for " << OpName(op);
  }
}

void RandomUnary(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 100);
  // Domains where the function is finite and well conditioned.
  double lo = -4, hi = 4;
  if (op == Op::kLog || op == Op::kSqrt || op == Op::kRsqrt) lo = 0.125;
  const bool integers_ok = op == Op::kNeg || op == Op::kAbs || op == Op::kSign || op == Op::kNot;
  std::vector<DType> dtypes;
  if (op != Op::kNot) dtypes.assign(std::begin(kFloatTypes), std::end(kFloatTypes));
  if (integers_ok) dtypes.insert(dtypes.end(), std::begin(kIntTypes), std::end(kIntTypes));
  if (op == Op::kNot) dtypes.push_back(kBool);
  for (DType dtype : dtypes) {
    for (const Shape& shape : ElementwiseShapes()) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape)));
      TensorData x =
          RandomData(rng, dtype, shape, IsFloat(dtype) ? lo : -100, IsFloat(dtype) ? hi : 255);
      // Round ties: half-integers in every float dtype.
      if (op == Op::kRound && x.num_elements() > 0) x.SetDouble(0, -2.5);
      std::vector<double> want, magnitude;
      for (double v : Values(x)) {
        want.push_back(IsBool(dtype) ? 1 - v : ReferenceUnary(op, v));
        const bool bounded = op == Op::kSin || op == Op::kCos || op == Op::kTanh || op == Op::kErf;
        magnitude.push_back(bounded ? 1.0 : 0.0);  // Absolute error near their zeros.
      }
      ExpectMatches(RunUnary(op, x), dtype, shape, want, magnitude);
    }
  }
}

void HandBinary(Op op) {
  const auto check = [op](DType dtype, const std::vector<double>& a, const std::vector<double>& b,
                          const std::vector<double>& want) {
    const Shape shape = {static_cast<int64_t>(a.size())};
    ExpectValues(RunBinary(op, Data(dtype, shape, a), Data(dtype, shape, b)),
                 GetOpClass(op) == OpClass::kCompare ? kBool : dtype, shape, want);
  };
  switch (op) {
    case Op::kAdd:
      check(kF32, {1, 2}, {3, 4}, {4, 6});
      check(kU8, {250, 1}, {10, 2}, {4, 3});                      // Wraps modulo 256.
      check(kI32, {2147483647.0}, {1}, {-2147483648.0});          // Wraps modulo 2^32.
      check(kF16, {1, 1}, {0x1p-11, 0x1p-10}, {1, 1 + 0x1p-10});  // Tie to even, exact.
      check(kBF16, {1}, {3 * 0x1p-9}, {1 + 0x1p-7});              // Rounds to nearest.
      break;
    case Op::kSub:
      check(kF64, {5, 1}, {3, 4}, {2, -3});
      check(kU8, {3}, {5}, {254});
      break;
    case Op::kMul:
      check(kI64, {6, -3}, {7, 4}, {42, -12});
      check(kU8, {16}, {17}, {16});  // 272 mod 256.
      break;
    case Op::kDiv:
      check(kF32, {1, 3, 1, -1}, {2, 4, 0, 0}, {0.5, 0.75, kInf, -kInf});
      check(kI32, {7, -7, 7, -7, 5}, {2, 2, -2, -2, 0}, {3, -4, -4, 3, 0});  // Floor; /0 -> 0.
      check(kI32, {-2147483648.0}, {-1}, {-2147483648.0});
      break;
    case Op::kPow:
      check(kF32, {2, 3, 4, -8}, {3, 2, 0.5, 1.0 / 3}, {8, 9, 2, kNaN});
      break;
    case Op::kMax:
      check(kF32, {1, 5, kNaN, 2}, {3, 4, 1, kNaN}, {3, 5, kNaN, kNaN});
      check(kI32, {-1, 7}, {-2, 8}, {-1, 8});
      break;
    case Op::kMin:
      check(kF32, {1, 5, kNaN, 2}, {3, 4, 1, kNaN}, {1, 4, kNaN, kNaN});
      check(kU8, {1, 200}, {3, 100}, {1, 100});
      break;
    case Op::kMod:
      check(kI32, {7, -7, 7, -7, 6, 5}, {3, 3, -3, -3, 3, 0}, {1, 2, -2, -1, 0, 0});
      check(kF32, {5.5, -5.5, 5.5, -5.5}, {2, 2, -2, -2}, {1.5, 0.5, -0.5, -1.5});
      break;
    case Op::kEq:
      check(kF32, {1, 2, kNaN}, {1, 3, kNaN}, {1, 0, 0});
      break;
    case Op::kNe:
      check(kF32, {1, 2, kNaN}, {1, 3, kNaN}, {0, 1, 1});
      break;
    case Op::kLt:
      check(kI32, {1, 2, 3}, {2, 2, 2}, {1, 0, 0});
      break;
    case Op::kLe:
      check(kI32, {1, 2, 3}, {2, 2, 2}, {1, 1, 0});
      break;
    case Op::kGt:
      check(kU8, {1, 2, 3}, {2, 2, 2}, {0, 0, 1});
      break;
    case Op::kGe:
      check(kBool, {0, 1, 1, 0}, {0, 0, 1, 1}, {1, 1, 1, 0});
      break;
    case Op::kAnd:
      check(kBool, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 0, 1});
      check(kI32, {12}, {10}, {8});
      break;
    case Op::kOr:
      check(kBool, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 1, 1});
      check(kU8, {12}, {10}, {14});
      break;
    case Op::kXor:
      check(kBool, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 1, 0});
      check(kI64, {12, -1}, {10, 5}, {6, -6});
      break;
    default:
      ADD_FAILURE() << "no hand-computed case for " << OpName(op);
  }
}

void RandomBinary(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 200);
  const OpClass op_class = GetOpClass(op);
  std::vector<DType> dtypes(std::begin(kFloatTypes), std::end(kFloatTypes));
  if (op != Op::kPow) dtypes.insert(dtypes.end(), std::begin(kIntTypes), std::end(kIntTypes));
  if (op_class == OpClass::kLogical) dtypes = {kBool, kI32, kI64, kU8};
  if (op_class == OpClass::kCompare) dtypes.push_back(kBool);
  for (DType dtype : dtypes) {
    for (const Shape& shape : ElementwiseShapes()) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape)));
      TensorData a, b;
      if (op_class == OpClass::kCompare) {
        a = TiedData(rng, dtype, shape);
        b = TiedData(rng, dtype, shape);
      } else if (op == Op::kPow) {
        a = RandomData(rng, dtype, shape, 0.25, 4);
        b = RandomData(rng, dtype, shape, -2, 2);
      } else {
        a = RandomData(rng, dtype, shape, IsFloat(dtype) ? -8 : -300, 300);
        b = RandomData(rng, dtype, shape, IsFloat(dtype) ? 0.5 : -20, IsFloat(dtype) ? 2 : 20);
        if (IsFloat(dtype) && (op == Op::kDiv || op == Op::kMod)) {
          for (int64_t i = 0; i < b.num_elements(); i += 2) b.SetDouble(i, -b.GetDouble(i));
        }
      }
      const std::vector<double> av = Values(a), bv = Values(b);
      std::vector<double> want, magnitude;
      for (size_t i = 0; i < av.size(); ++i) {
        if (op_class == OpClass::kCompare) {
          const double x = av[i], y = bv[i];
          const bool r = op == Op::kEq   ? !(x < y) && !(y < x)
                         : op == Op::kNe ? (x < y) || (y < x)
                         : op == Op::kLt ? y - x > 0
                         : op == Op::kLe ? !(x > y)
                         : op == Op::kGt ? x - y > 0
                                         : !(x < y);
          want.push_back(r);
        } else if (op_class == OpClass::kLogical) {
          want.push_back(ReferenceLogical(op, dtype, a.GetInt64(i), b.GetInt64(i)));
        } else {
          want.push_back(ReferenceBinary(op, dtype, av[i], bv[i]));
        }
        magnitude.push_back(op == Op::kMod || op == Op::kPow ? std::fabs(av[i]) + std::fabs(bv[i])
                                                             : 0.0);
      }
      ExpectMatches(RunBinary(op, a, b), op_class == OpClass::kCompare ? kBool : dtype, shape, want,
                    magnitude);
    }
  }
}

void HandSelect() {
  const TensorData got =
      RunGraph({Data(kBool, {2}, {1, 0}), Data(kF32, {2}, {1, 2}), Data(kF32, {2}, {3, 4})},
               [](Builder& b, auto p) { return b.Select(p[0], p[1], p[2]); });
  ExpectValues(got, kF32, {2}, {1, 4});
}

void RandomSelect() {
  Rng rng(300);
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : ElementwiseShapes()) {
      const TensorData cond = RandomData(rng, kBool, shape);
      const TensorData x = RandomData(rng, dtype, shape), y = RandomData(rng, dtype, shape);
      std::vector<double> want;
      for (int64_t i = 0; i < cond.num_elements(); ++i) {
        want.push_back(cond.GetDouble(i) == 1 ? x.GetDouble(i) : y.GetDouble(i));
      }
      ExpectMatches(
          RunGraph({cond, x, y}, [](Builder& b, auto p) { return b.Select(p[0], p[1], p[2]); }),
          dtype, shape, want);
    }
  }
}

TensorData RunCast(const TensorData& x, DType dtype) {
  return RunGraph({x}, [dtype](Builder& b, auto p) { return b.Cast(p[0], dtype); });
}

void HandCast() {
  const TensorData floats = Data(kF32, {6}, {1.7, -1.7, kNaN, 1e10, -1e10, 0});
  ExpectValues(RunCast(floats, kI32), kI32, {6},
               {1, -1, 0, 2147483647.0, -2147483648.0, 0});  // Truncate, NaN -> 0, saturate.
  ExpectValues(RunCast(floats, kU8), kU8, {6}, {1, 0, 0, 255, 0, 0});
  ExpectValues(RunCast(floats, kBool), kBool, {6}, {1, 1, 1, 1, 1, 0});  // NaN != 0.
  ExpectValues(RunCast(Data(kI64, {2}, {0x1p40, -300}), kI32), kI32, {2}, {2147483647.0, -300});
  ExpectValues(RunCast(Data(kI32, {3}, {-1, 256, 7}), kU8), kU8, {3}, {0, 255, 7});
  ExpectValues(RunCast(Data(kBool, {2}, {1, 0}), kF16), kF16, {2}, {1, 0});
  // Round to nearest, ties to even.
  ExpectValues(RunCast(Data(kF32, {3}, {1 + 0x1p-10, 1 + 0x1p-11, 1 + 3 * 0x1p-11}), kF16), kF16,
               {3}, {1 + 0x1p-10, 1, 1 + 0x1p-9});
  ExpectValues(RunCast(Data(kF32, {3}, {1 + 0x1p-7, 1 + 0x1p-8, 1 + 3 * 0x1p-8}), kBF16), kBF16,
               {3}, {1 + 0x1p-7, 1, 1 + 0x1p-6});
  ExpectValues(RunCast(Data(kF64, {1}, {65520}), kF16), kF16, {1}, {kInf});
  // i64 values beyond 2^53 convert exactly between integer types.
  TensorData large(kI64, {2});
  large.SetInt64(0, (int64_t{1} << 62) + 1);
  large.SetInt64(1, -(int64_t{1} << 62) - 3);
  EXPECT_EQ(RunCast(large, kI64).ToInt64s(), large.ToInt64s());
}

void RandomCast() {
  Rng rng(400);
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      for (const Shape& shape : {Shape{}, Shape{0}, Shape{40}}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(from), " -> ", DTypeName(to), ShapeToString(shape)));
        TensorData x = RandomData(rng, from, shape, -400, 400);
        if (IsFloat(from) && x.num_elements() > 1) x.SetDouble(1, kNaN);
        std::vector<double> want;
        for (double v : Values(x)) want.push_back(ReferenceCast(v, to));
        ExpectMatches(RunCast(x, to), to, shape, want);
      }
    }
  }
}

// ---- Reductions ---------------------------------------------------------------------------------

TensorData RunReduce(Op op, const TensorData& x, std::vector<int64_t> axes) {
  return RunGraph({x}, [&](Builder& b, auto p) {
    return GetOpClass(op) == OpClass::kArgReduce ? b.ArgReduce(op, p[0], axes[0])
                                                 : b.Reduce(op, p[0], axes);
  });
}

void HandReduce(Op op) {
  const TensorData x = Data(kF32, {2, 2}, {1, 2, 3, 4});
  switch (op) {
    case Op::kReduceSum:
      ExpectValues(RunReduce(op, x, {0}), kF32, {1, 2}, {4, 6});
      ExpectValues(RunReduce(op, x, {1}), kF32, {2, 1}, {3, 7});
      ExpectValues(RunReduce(op, x, {0, 1}), kF32, {1, 1}, {10});
      ExpectValues(RunReduce(op, x, {}), kF32, {2, 2}, {1, 2, 3, 4});
      ExpectValues(RunReduce(op, Data(kF32, {2, 0}, {}), {1}), kF32, {2, 1}, {0, 0});
      ExpectValues(RunReduce(op, Data(kU8, {3}, {200, 100, 1}), {0}), kU8, {1}, {45});  // 301.
      break;
    case Op::kReduceProd:
      ExpectValues(RunReduce(op, x, {1}), kF32, {2, 1}, {2, 12});
      ExpectValues(RunReduce(op, Data(kI32, {0}, {}), {0}), kI32, {1}, {1});
      break;
    case Op::kReduceMax:
      ExpectValues(RunReduce(op, x, {0, 1}), kF32, {1, 1}, {4});
      ExpectValues(RunReduce(op, Data(kF32, {3}, {1, kNaN, 5}), {0}), kF32, {1}, {kNaN});
      ExpectValues(RunReduce(op, Data(kI32, {2}, {-5, -7}), {0}), kI32, {1}, {-5});
      break;
    case Op::kReduceMin:
      ExpectValues(RunReduce(op, x, {0}), kF32, {1, 2}, {1, 2});
      ExpectValues(RunReduce(op, Data(kF32, {3}, {1, 5, kNaN}), {0}), kF32, {1}, {kNaN});
      break;
    case Op::kArgMax:
      ExpectValues(RunReduce(op, Data(kF32, {4}, {3, 1, 3, 2}), {0}), kI64, {1}, {0});  // Tie.
      ExpectValues(RunReduce(op, Data(kF32, {4}, {1, kNaN, 5, kNaN}), {0}), kI64, {1}, {1});
      ExpectValues(RunReduce(op, x, {0}), kI64, {1, 2}, {1, 1});
      break;
    case Op::kArgMin:
      ExpectValues(RunReduce(op, Data(kI32, {4}, {3, 1, 1, 2}), {0}), kI64, {1}, {1});  // Tie.
      ExpectValues(RunReduce(op, Data(kF32, {4}, {1, -5, kNaN, kNaN}), {0}), kI64, {1}, {2});
      ExpectValues(RunReduce(op, x, {1}), kI64, {2, 1}, {0, 0});
      break;
    default:
      ADD_FAILURE() << "no hand-computed case for " << OpName(op);
  }
}

// The elements of x whose index agrees with `at` outside `axes`, in row-major order.
std::vector<double> SliceAt(const TensorData& x, const Index& at,
                            const std::vector<int64_t>& axes) {
  std::vector<double> slice;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const Index index = Unflat(x.shape(), i);
    bool inside = true;
    for (size_t a = 0; a < index.size(); ++a) {
      const bool reduced =
          std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) != axes.end();
      if (!reduced && index[a] != at[a]) inside = false;
    }
    if (inside) slice.push_back(x.GetDouble(i));
  }
  return slice;
}

void RandomReduce(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 500);
  const std::vector<Shape> shapes = {{}, {1}, {6}, {3, 4}, {2, 3, 4}, {2, 0, 3}, {1, 5, 1}};
  std::vector<DType> dtypes(std::begin(kFloatTypes), std::end(kFloatTypes));
  dtypes.insert(dtypes.end(), std::begin(kIntTypes), std::end(kIntTypes));
  const bool arg = GetOpClass(op) == OpClass::kArgReduce;
  for (const Shape& shape : shapes) {
    const auto rank = static_cast<int64_t>(shape.size());
    for (int64_t mask = 0; mask < (int64_t{1} << rank); ++mask) {
      std::vector<int64_t> axes;
      for (int64_t a = 0; a < rank; ++a) {
        if (mask & (int64_t{1} << a)) axes.push_back(a);
      }
      if (arg && axes.size() != 1) continue;
      bool empty_axis = false;
      for (int64_t a : axes) empty_axis |= shape[a] == 0;
      if (empty_axis && op != Op::kReduceSum && op != Op::kReduceProd) continue;
      for (DType dtype : dtypes) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape), " axes mask ", mask));
        // Sums of u8 wrap; products of up to 24 factors of [-3, 3] stay below 2^53.
        const TensorData x = op == Op::kReduceSum    ? RandomData(rng, dtype, shape, -9, 200)
                             : op == Op::kReduceProd ? RandomData(rng, dtype, shape, -3, 3)
                                                     : TiedData(rng, dtype, shape);
        Shape out_shape = shape;
        for (int64_t a : axes) out_shape[a] = 1;
        std::vector<double> want, magnitude;
        for (int64_t i = 0; i < NumElements(out_shape); ++i) {
          const std::vector<double> s = SliceAt(x, Unflat(out_shape, i), axes);
          std::vector<double> abs(s.size());
          std::transform(s.begin(), s.end(), abs.begin(), [](double v) { return std::fabs(v); });
          switch (op) {
            case Op::kReduceSum:
              want.push_back(std::accumulate(s.begin(), s.end(), 0.0));
              magnitude.push_back(std::accumulate(abs.begin(), abs.end(), 0.0));
              break;
            case Op::kReduceProd:
              want.push_back(std::accumulate(s.begin(), s.end(), 1.0, std::multiplies<>()));
              magnitude.push_back(0);
              break;
            case Op::kReduceMax:
              want.push_back(*std::max_element(s.begin(), s.end()));
              break;
            case Op::kReduceMin:
              want.push_back(*std::min_element(s.begin(), s.end()));
              break;
            case Op::kArgMax:
              want.push_back(std::max_element(s.begin(), s.end()) - s.begin());
              break;
            default:
              want.push_back(std::min_element(s.begin(), s.end()) - s.begin());
              break;
          }
        }
        ExpectMatches(RunReduce(op, x, axes), arg ? kI64 : dtype, out_shape, want, magnitude);
      }
    }
  }
}

// ---- Movement -----------------------------------------------------------------------------------

void HandMovement(Op op) {
  const TensorData m = Data(kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const TensorData v = Data(kI32, {10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  switch (op) {
    case Op::kReshape:
      ExpectValues(RunGraph({m},
                            [](Builder& b, auto p) {
                              return b.Reshape(p[0], {3, 2});
                            }),
                   kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
      break;
    case Op::kPermute:
      ExpectValues(RunGraph({m},
                            [](Builder& b, auto p) {
                              return b.Permute(p[0], {1, 0});
                            }),
                   kF32, {3, 2}, {1, 4, 2, 5, 3, 6});
      break;
    case Op::kBroadcast:
      ExpectValues(RunGraph({Data(kU8, {2, 1}, {1, 2})},
                            [](Builder& b, auto p) {
                              return b.Broadcast(p[0], {2, 3});
                            }),
                   kU8, {2, 3}, {1, 1, 1, 2, 2, 2});
      break;
    case Op::kSlice:
      ExpectValues(RunGraph({v}, [](Builder& b, auto p) { return b.Slice(p[0], {1}, {8}, {3}); }),
                   kI32, {3}, {1, 4, 7});
      ExpectValues(RunGraph({m},
                            [](Builder& b, auto p) {
                              return b.Slice(p[0], {1, 1}, {2, 3});
                            }),
                   kF32, {1, 2}, {5, 6});
      break;
    case Op::kPad:
      ExpectValues(RunGraph({Data(kF32, {2}, {1, 2})},
                            [](Builder& b, auto p) { return b.Pad(p[0], {1}, {2}, 9); }),
                   kF32, {5}, {9, 1, 2, 9, 9});
      ExpectValues(RunGraph({Data(kI32, {1, 1}, {5})},
                            [](Builder& b, auto p) {
                              return b.Pad(p[0], {1, 0}, {0, 1}, -1.5);
                            }),
                   kI32, {2, 2}, {-1, -1, 5, -1});
      break;
    case Op::kConcat:
      ExpectValues(RunGraph({Data(kF32, {2}, {1, 2}), Data(kF32, {1}, {3})},
                            [](Builder& b, auto p) {
                              return b.Concat({p[0], p[1]}, 0);
                            }),
                   kF32, {3}, {1, 2, 3});
      ExpectValues(RunGraph({m, Data(kF32, {2, 1}, {7, 8})},
                            [](Builder& b, auto p) {
                              return b.Concat({p[0], p[1]}, 1);
                            }),
                   kF32, {2, 4}, {1, 2, 3, 7, 4, 5, 6, 8});
      break;
    case Op::kFlip:
      ExpectValues(RunGraph({m}, [](Builder& b, auto p) { return b.Flip(p[0], {1}); }), kF32,
                   {2, 3}, {3, 2, 1, 6, 5, 4});
      ExpectValues(RunGraph({m},
                            [](Builder& b, auto p) {
                              return b.Flip(p[0], {0, 1});
                            }),
                   kF32, {2, 3}, {6, 5, 4, 3, 2, 1});
      break;
    default:
      ADD_FAILURE() << "no hand-computed case for " << OpName(op);
  }
}

// A random permutation of 0..n-1.
std::vector<int64_t> RandomPermutation(Rng& rng, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.Int(0, i)]);
  return perm;
}

void RandomMovement(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 600);
  const std::vector<Shape> shapes = {{}, {1}, {5}, {2, 3}, {3, 0, 2}, {2, 3, 4}, {2, 1, 3, 2}};
  for (const Shape& shape : shapes) {
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(absl::StrCat(OpName(op), " ", DTypeName(dtype), ShapeToString(shape)));
      const TensorData x = RandomData(rng, dtype, shape, -50, 200);
      const std::vector<double> xv = Values(x);
      const auto rank = static_cast<int64_t>(shape.size());
      Shape out_shape;
      std::vector<double> want;
      // `source(out_index)` gives the input element an output element copies.
      const auto gather = [&](const Shape& s, const std::function<double(const Index&)>& source) {
        out_shape = s;
        want.clear();
        for (int64_t i = 0; i < NumElements(s); ++i) want.push_back(source(Unflat(s, i)));
      };
      BuildFn build;
      std::vector<TensorData> args = {x};
      switch (op) {
        case Op::kReshape: {
          Shape target = {NumElements(shape)};
          if (NumElements(shape) == 1) target = {1, 1, 1};
          if (NumElements(shape) % 2 == 0 && NumElements(shape) > 0)
            target = {2, NumElements(shape) / 2};
          build = [target](Builder& b, auto p) { return b.Reshape(p[0], target); };
          gather(target, [&](const Index& i) { return xv[Flat(target, i)]; });
          break;
        }
        case Op::kPermute: {
          const std::vector<int64_t> perm = RandomPermutation(rng, rank);
          Shape s(shape.size());
          for (int64_t i = 0; i < rank; ++i) s[i] = shape[perm[i]];
          build = [&, perm](Builder& b, auto p) { return b.Permute(p[0], perm); };
          gather(s, [&](const Index& out) {
            Index in(out.size());
            for (int64_t i = 0; i < rank; ++i) in[perm[i]] = out[i];
            return xv[Flat(shape, in)];
          });
          break;
        }
        case Op::kBroadcast: {
          Shape s = shape;
          for (int64_t& d : s) d = d == 1 ? rng.Int(0, 3) : d;
          build = [&, s](Builder& b, auto p) { return b.Broadcast(p[0], s); };
          gather(s, [&](const Index& out) {
            Index in = out;
            for (int64_t i = 0; i < rank; ++i) in[i] = std::min(out[i], shape[i] - 1);
            return xv[Flat(shape, in)];
          });
          break;
        }
        case Op::kSlice: {
          std::vector<int64_t> starts, limits, strides;
          Shape s;
          for (int64_t d : shape) {
            starts.push_back(rng.Int(0, d));
            limits.push_back(rng.Int(starts.back(), d));
            strides.push_back(rng.Int(1, 3));
            int64_t count = 0;  // Positions start, start + stride, ... below limit.
            for (int64_t p = starts.back(); p < limits.back(); p += strides.back()) ++count;
            s.push_back(count);
          }
          build = [=](Builder& b, auto p) { return b.Slice(p[0], starts, limits, strides); };
          gather(s, [&](const Index& out) {
            Index in(out.size());
            for (int64_t i = 0; i < rank; ++i) in[i] = starts[i] + out[i] * strides[i];
            return xv[Flat(shape, in)];
          });
          break;
        }
        case Op::kPad: {
          std::vector<int64_t> low, high;
          Shape s;
          for (int64_t d : shape) {
            low.push_back(rng.Int(0, 2));
            high.push_back(rng.Int(0, 2));
            s.push_back(low.back() + d + high.back());
          }
          const double value = dtype == kU8 ? 7 : (IsBool(dtype) ? 1 : -2.5);
          build = [=](Builder& b, auto p) { return b.Pad(p[0], low, high, value); };
          gather(s, [&](const Index& out) {
            Index in(out.size());
            for (int64_t i = 0; i < rank; ++i) {
              in[i] = out[i] - low[i];
              if (in[i] < 0 || in[i] >= shape[i]) return ReferenceCast(value, dtype);
            }
            return xv[Flat(shape, in)];
          });
          break;
        }
        case Op::kConcat: {
          if (rank == 0) continue;
          const int64_t axis = rng.Int(0, rank - 1);
          std::vector<int64_t> starts = {0};  // Where each part begins along the axis.
          for (int part = 1; part < 3; ++part) {
            Shape s = shape;
            s[axis] = rng.Int(0, 3);
            args.push_back(RandomData(rng, dtype, s, -50, 200));
            starts.push_back(starts.back() + args[part - 1].shape()[axis]);
          }
          Shape s = shape;
          s[axis] = starts.back() + args.back().shape()[axis];
          build = [axis](Builder& b, auto p) { return b.Concat({p[0], p[1], p[2]}, axis); };
          gather(s, [&](const Index& out) {
            int part = 2;
            while (out[axis] < starts[part]) --part;
            Index in = out;
            in[axis] -= starts[part];
            return args[part].GetDouble(Flat(args[part].shape(), in));
          });
          break;
        }
        case Op::kFlip: {
          std::vector<int64_t> axes;
          for (int64_t a = 0; a < rank; ++a) {
            if (rng.Int(0, 1) == 1) axes.push_back(a);
          }
          build = [axes](Builder& b, auto p) { return b.Flip(p[0], axes); };
          gather(shape, [&](const Index& out) {
            Index in = out;
            for (int64_t a : axes) in[a] = shape[a] - 1 - out[a];
            return xv[Flat(shape, in)];
          });
          break;
        }
        default:
          ADD_FAILURE() << "no random case for " << OpName(op);
          return;
      }
      ExpectMatches(RunGraph(args, build), dtype, out_shape, want);
    }
  }
}

// ---- Indexing -----------------------------------------------------------------------------------

TensorData RunGather(const TensorData& x, const TensorData& index, int64_t axis) {
  return RunGraph({x, index}, [axis](Builder& b, auto p) { return b.Gather(p[0], p[1], axis); });
}
TensorData RunScatterAdd(const TensorData& x, const TensorData& index, const TensorData& src,
                         int64_t axis) {
  return RunGraph({x, index, src},
                  [axis](Builder& b, auto p) { return b.ScatterAdd(p[0], p[1], p[2], axis); });
}

void HandIndex(Op op) {
  if (op == Op::kGather) {
    // torch.gather's documentation example.
    const TensorData x = Data(kF32, {2, 2}, {1, 2, 3, 4});
    ExpectValues(RunGather(x, Data(kI64, {2, 2}, {0, 0, 1, 0}), 1), kF32, {2, 2}, {1, 1, 4, 3});
    ExpectValues(RunGather(x, Data(kI32, {1, 2}, {1, 0}), 0), kF32, {1, 2}, {3, 2});
    return;
  }
  // Repeated indices accumulate.
  ExpectValues(RunScatterAdd(Data(kF32, {3}, {0, 10, 0}), Data(kI64, {3}, {0, 0, 2}),
                             Data(kF32, {3}, {1, 2, 3}), 0),
               kF32, {3}, {3, 10, 3});
  ExpectValues(
      RunScatterAdd(Data(kU8, {2}, {250, 0}), Data(kU8, {2}, {0, 0}), Data(kU8, {2}, {5, 6}), 0),
      kU8, {2}, {5, 0});  // 261 wraps modulo 256.
}

void RandomIndex(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 700);
  const std::vector<Shape> shapes = {{1}, {5}, {3, 4}, {2, 3, 4}, {4, 0}};
  for (const Shape& shape : shapes) {
    const auto rank = static_cast<int64_t>(shape.size());
    for (int64_t axis = 0; axis < rank; ++axis) {
      for (DType dtype : kAllDTypes) {
        if (op == Op::kScatterAdd && IsBool(dtype)) continue;
        SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape), " axis ", axis));
        Shape index_shape = shape;
        for (int64_t a = 0; a < rank; ++a) {
          index_shape[a] = a == axis ? rng.Int(0, 6) : rng.Int(0, shape[a]);
        }
        if (shape[axis] == 0) index_shape[axis] = 0;
        const DType index_dtype = kIntTypes[rng.Int(0, 2)];
        const TensorData index =
            RandomData(rng, index_dtype, index_shape, 0, std::max<int64_t>(0, shape[axis] - 1));
        const TensorData x = RandomData(rng, dtype, shape, -20, 200);
        if (op == Op::kGather) {
          std::vector<double> want;
          for (int64_t i = 0; i < index.num_elements(); ++i) {
            Index at = Unflat(index_shape, i);
            at[axis] = index.GetInt64(i);
            want.push_back(x.GetDouble(Flat(shape, at)));
          }
          ExpectMatches(RunGather(x, index, axis), dtype, index_shape, want);
          continue;
        }
        const TensorData src = RandomData(rng, dtype, index_shape, -20, 200);
        std::vector<double> want = Values(x), magnitude(want.size());
        for (int64_t i = 0; i < index.num_elements(); ++i) {
          Index at = Unflat(index_shape, i);
          at[axis] = index.GetInt64(i);
          want[Flat(shape, at)] += src.GetDouble(i);
          magnitude[Flat(shape, at)] += std::fabs(src.GetDouble(i));
        }
        ExpectMatches(RunScatterAdd(x, index, src, axis), dtype, shape, want, magnitude);
      }
    }
  }
}

// ---- Contractions -------------------------------------------------------------------------------

TensorData RunMatMul(const TensorData& a, const TensorData& b) {
  return RunGraph({a, b}, [](Builder& bld, auto p) { return bld.MatMul(p[0], p[1]); });
}

void HandMatMul() {
  ExpectValues(RunMatMul(Data(kF32, {2, 2}, {1, 2, 3, 4}), Data(kF32, {2, 2}, {5, 6, 7, 8})), kF32,
               {2, 2}, {19, 22, 43, 50});
  ExpectValues(RunMatMul(Data(kI32, {1, 3}, {1, 2, 3}), Data(kI32, {3, 1}, {4, 5, 6})), kI32,
               {1, 1}, {32});
  // An empty contraction is a sum of nothing.
  ExpectValues(RunMatMul(Data(kF32, {2, 0}, {}), Data(kF32, {0, 2}, {})), kF32, {2, 2},
               {0, 0, 0, 0});
  // u8 x i8 accumulated in i32 at the extremes: 255 * -128 * 2 = -65280, 255 * 127 * 2 = 64770,
  // 0 contributes nothing; nothing saturates or wraps.
  ExpectValues(RunGraph({Data(DType::kU8, {2, 2}, {255, 255, 0, 255}),
                         Data(DType::kI8, {2, 2}, {-128, 127, -128, 127})},
                        [](Builder& b, auto p) { return b.IntegerMatMul(p[0], p[1], kI32); }),
               kI32, {2, 2}, {-65280, 64770, -32640, 32385});
}

void RandomMatMul() {
  Rng rng(800);
  struct Case {
    Shape batch;
    int64_t m, k, n;
  };
  const std::vector<Case> cases = {{{}, 1, 1, 1}, {{}, 3, 4, 5},  {{2}, 2, 3, 4}, {{2, 3}, 3, 2, 1},
                                   {{}, 4, 0, 3}, {{0}, 2, 2, 2}, {{}, 1, 17, 9}, {{3}, 5, 1, 2}};
  for (const Case& c : cases) {
    for (DType dtype : {kF32, kF64, kF16, kBF16, kI32, kI64, kU8}) {
      Shape a_shape = c.batch, b_shape = c.batch, out_shape = c.batch;
      a_shape.insert(a_shape.end(), {c.m, c.k});
      b_shape.insert(b_shape.end(), {c.k, c.n});
      out_shape.insert(out_shape.end(), {c.m, c.n});
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(a_shape), ShapeToString(b_shape)));
      const TensorData a = RandomData(rng, dtype, a_shape, -3, 30);
      const TensorData b = RandomData(rng, dtype, b_shape, -3, 30);
      std::vector<double> want(NumElements(out_shape)), magnitude(want.size());
      for (int64_t batch = 0; batch < NumElements(c.batch); ++batch) {
        for (int64_t row = 0; row < c.m; ++row) {
          for (int64_t col = 0; col < c.n; ++col) {
            const int64_t o = (batch * c.m + row) * c.n + col;
            for (int64_t inner = 0; inner < c.k; ++inner) {
              const double term = a.GetDouble((batch * c.m + row) * c.k + inner) *
                                  b.GetDouble((batch * c.k + inner) * c.n + col);
              want[o] += term;
              magnitude[o] += std::fabs(term);
            }
          }
        }
      }
      ExpectMatches(RunMatMul(a, b), dtype, out_shape, want, magnitude);
    }
  }
}

struct ConvCase {
  Shape input, weight;
  std::vector<int64_t> strides = {}, low = {}, high = {}, dilation = {}, input_dilation = {};
  int64_t groups = 1;
};

Attrs ConvAttrs(const ConvCase& c) {
  Attrs attrs;
  attrs.strides = c.strides;
  attrs.low = c.low;
  attrs.high = c.high;
  attrs.dilation = c.dilation;
  attrs.input_dilation = c.input_dilation;
  attrs.groups = c.groups;
  return attrs;
}

// Convolution by the textbook: lift to 3 spatial axes (leading size-1 axes with default
// attributes), materialize the input-dilated and zero-padded input, then correlate with
// explicit loops over named indices.
void ReferenceConv(const TensorData& x, const TensorData& w, const ConvCase& c, Shape* out_shape,
                   std::vector<double>* out, std::vector<double>* magnitude) {
  const size_t spatial = c.input.size() - 2;
  const size_t lift = 3 - spatial;
  const auto attr = [&](const std::vector<int64_t>& v, size_t d, int64_t fallback) {
    return d < lift || v.empty() ? fallback : v[d - lift];
  };
  int64_t in[3], k[3], stride[3], dil[3], padded[3], o[3];
  for (size_t d = 0; d < 3; ++d) {
    in[d] = d < lift ? 1 : c.input[2 + d - lift];
    k[d] = d < lift ? 1 : c.weight[2 + d - lift];
    stride[d] = attr(c.strides, d, 1);
    dil[d] = attr(c.dilation, d, 1);
    const int64_t in_dil = attr(c.input_dilation, d, 1);
    const int64_t dilated = in[d] == 0 ? 0 : (in[d] - 1) * in_dil + 1;
    padded[d] = attr(c.low, d, 0) + dilated + attr(c.high, d, 0);
    o[d] = (padded[d] - ((k[d] - 1) * dil[d] + 1)) / stride[d] + 1;
  }
  const int64_t batch = c.input[0], channels = c.input[1], outs = c.weight[0];
  const int64_t group_channels = c.weight[1], group_outs = outs / c.groups;
  // padded_input[n][ch][z][y][x]
  std::vector<double> p(batch * channels * padded[0] * padded[1] * padded[2], 0.0);
  const auto p_at = [&](int64_t n, int64_t ch, int64_t z, int64_t y, int64_t x_) -> double& {
    return p[(((n * channels + ch) * padded[0] + z) * padded[1] + y) * padded[2] + x_];
  };
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const Index at = Unflat(x.shape(), i);
    int64_t pos[3];
    for (size_t d = 0; d < 3; ++d) {
      const int64_t coordinate = d < lift ? 0 : at[2 + d - lift];
      pos[d] = attr(c.low, d, 0) + coordinate * attr(c.input_dilation, d, 1);
    }
    p_at(at[0], at[1], pos[0], pos[1], pos[2]) = x.GetDouble(i);
  }
  const auto w_at = [&](int64_t oc, int64_t ic, int64_t kz, int64_t ky, int64_t kx) {
    return w.GetDouble((((oc * group_channels + ic) * k[0] + kz) * k[1] + ky) * k[2] + kx);
  };
  *out_shape = {batch, outs};
  for (size_t d = lift; d < 3; ++d) out_shape->push_back(o[d]);
  out->assign(NumElements(*out_shape), 0.0);
  magnitude->assign(out->size(), 0.0);
  int64_t position = 0;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t oc = 0; oc < outs; ++oc)
      for (int64_t oz = 0; oz < o[0]; ++oz)
        for (int64_t oy = 0; oy < o[1]; ++oy)
          for (int64_t ox = 0; ox < o[2]; ++ox, ++position)
            for (int64_t ic = 0; ic < group_channels; ++ic)
              for (int64_t kz = 0; kz < k[0]; ++kz)
                for (int64_t ky = 0; ky < k[1]; ++ky)
                  for (int64_t kx = 0; kx < k[2]; ++kx) {
                    const int64_t ch = oc / group_outs * group_channels + ic;
                    const double term =
                        p_at(n, ch, oz * stride[0] + kz * dil[0], oy * stride[1] + ky * dil[1],
                             ox * stride[2] + kx * dil[2]) *
                        w_at(oc, ic, kz, ky, kx);
                    (*out)[position] += term;
                    (*magnitude)[position] += std::fabs(term);
                  }
}

void CheckConv(const ConvCase& c, DType dtype, Rng& rng) {
  SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " conv ", ShapeToString(c.input), " * ",
                            ShapeToString(c.weight), " groups ", c.groups));
  const TensorData x = RandomData(rng, dtype, c.input, -4, 4);
  const TensorData w = RandomData(rng, dtype, c.weight, -4, 4);
  Shape out_shape;
  std::vector<double> want, magnitude;
  ReferenceConv(x, w, c, &out_shape, &want, &magnitude);
  const TensorData got =
      RunGraph({x, w}, [&](Builder& b, auto p) { return b.Conv(p[0], p[1], ConvAttrs(c)); });
  ExpectMatches(got, dtype, out_shape, want, magnitude);
}

const std::vector<ConvCase>& ConvCases() {
  static const std::vector<ConvCase> cases = {
      // 1-d: plain; strided, padded, dilated and grouped; transposed (input dilation).
      {{1, 1, 5}, {1, 1, 3}},
      {{2, 4, 7}, {6, 2, 3}, {2}, {1}, {2}, {2}, {}, 2},
      {{1, 2, 4}, {3, 2, 3}, {1}, {2}, {2}, {1}, {2}},
      {{2, 3, 6}, {3, 1, 2}, {3}, {0}, {1}, {1}, {3}, 3},  // Depthwise, every attribute.
      // 2-d: plain; every attribute differing per axis; depthwise; depthwise multiplier 2.
      {{1, 3, 5, 6}, {4, 3, 3, 2}},
      {{2, 2, 5, 4}, {4, 2, 2, 3}, {2, 1}, {1, 0}, {0, 2}, {1, 2}, {2, 1}},
      {{2, 4, 5, 5}, {4, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {}, {}, 4},
      {{1, 4, 4, 5}, {8, 1, 3, 3}, {2, 2}, {1, 2}, {1, 0}, {1, 1}, {1, 1}, 4},
      {{1, 6, 3, 3}, {4, 3, 1, 1}, {}, {}, {}, {}, {}, 2},
      // 3-d: plain; every attribute; grouped.
      {{1, 2, 3, 4, 3}, {2, 2, 2, 2, 2}},
      {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {0, 1, 1}, {2, 1, 1}, {1, 1, 2}},
      {{2, 4, 3, 3, 3}, {4, 2, 1, 2, 2}, {2, 1, 1}, {0, 1, 0}, {1, 0, 0}, {1, 1, 2}, {2, 1, 1}, 2},
      // Empty batch; kernel wider than the input, made to fit by padding.
      {{0, 2, 4}, {2, 2, 3}},
      {{1, 1, 2}, {1, 1, 5}, {}, {2}, {1}},
  };
  return cases;
}

void HandConv() {
  // 1-d correlation of [1, 2, 3] with [1, 1], then with a padded, strided, dilated kernel.
  const TensorData x = Data(kF32, {1, 1, 3}, {1, 2, 3});
  const TensorData w = Data(kF32, {1, 1, 2}, {1, 1});
  ExpectValues(RunGraph({x, w}, [](Builder& b, auto p) { return b.Conv(p[0], p[1], {}); }), kF32,
               {1, 1, 2}, {3, 5});
  // Padded input [0, 1, 2, 3, 0], taps 2 apart weighted 1 and 10, stride 2: [0 + 20, 2 + 0].
  const TensorData w10 = Data(kF32, {1, 1, 2}, {1, 10});
  const Attrs padded = AttrsFor([](Attrs& a) {
    a.low = {1};
    a.high = {1};
    a.dilation = {2};
    a.strides = {2};
  });
  ExpectValues(RunGraph({x, w10}, [&](Builder& b, auto p) { return b.Conv(p[0], p[1], padded); }),
               kF32, {1, 1, 2}, {20, 2});
  // Input dilation 2: [1, 0, 2, 0, 3] with [1, 1] -> [1, 2, 2, 3].
  const Attrs dilated = AttrsFor([](Attrs& a) { a.input_dilation = {2}; });
  ExpectValues(RunGraph({x, w}, [&](Builder& b, auto p) { return b.Conv(p[0], p[1], dilated); }),
               kF32, {1, 1, 4}, {1, 2, 2, 3});
  // Two groups of one channel: each output channel sees only its own input channel.
  const TensorData x2 = Data(kI32, {1, 2, 2}, {1, 2, 10, 20});
  const TensorData w2 = Data(kI32, {2, 1, 1}, {3, 5});
  const Attrs grouped = AttrsFor([](Attrs& a) { a.groups = 2; });
  ExpectValues(RunGraph({x2, w2}, [&](Builder& b, auto p) { return b.Conv(p[0], p[1], grouped); }),
               kI32, {1, 2, 2}, {3, 6, 50, 100});
  // u8 input, i8 weight, i32 result: [255, 0, 255] with [-128, 127] -> [-32640, 32385].
  const Attrs integer = AttrsFor([](Attrs& a) { a.accumulate = kI32; });
  ExpectValues(RunGraph({Data(DType::kU8, {1, 1, 3}, {255, 0, 255}),
                         Data(DType::kI8, {1, 1, 2}, {-128, 127})},
                        [&](Builder& b, auto p) { return b.Conv(p[0], p[1], integer); }),
               kI32, {1, 1, 2}, {-32640, 32385});
}

void RandomConv() {
  Rng rng(900);
  for (const ConvCase& c : ConvCases()) {
    for (DType dtype : {kF32, kF64, kF16, kBF16, kI32, kI64, kU8}) CheckConv(c, dtype, rng);
  }
}

// ---- Windows ------------------------------------------------------------------------------------

struct WindowCase {
  Shape input;
  std::vector<int64_t> window, strides, low, high, dilation;
};

// Window reduction by materializing the padded input (padding = identity), then folding each
// window's gathered values.
void ReferenceWindow(Op op, const TensorData& x, const WindowCase& c, Shape* out_shape,
                     std::vector<double>* out, std::vector<double>* magnitude) {
  const size_t rank = c.input.size();
  const auto attr = [](const std::vector<int64_t>& v, size_t d, int64_t fallback) {
    return v.empty() ? fallback : v[d];
  };
  double identity = 0;
  if (op == Op::kWindowMax) {
    identity = IsFloat(x.dtype())
                   ? -kInf
                   : (x.dtype() == kU8 ? 0 : (x.dtype() == kI32 ? -0x1p31 : -0x1p63));
  }
  Shape padded(rank);
  out_shape->assign(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    padded[d] = attr(c.low, d, 0) + c.input[d] + attr(c.high, d, 0);
    const int64_t extent = (c.window[d] - 1) * attr(c.dilation, d, 1) + 1;
    (*out_shape)[d] = (padded[d] - extent) / attr(c.strides, d, 1) + 1;
  }
  std::vector<double> p(NumElements(padded), identity);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    Index at = Unflat(c.input, i);
    for (size_t d = 0; d < rank; ++d) at[d] += attr(c.low, d, 0);
    p[Flat(padded, at)] = x.GetDouble(i);
  }
  out->clear();
  magnitude->clear();
  for (int64_t i = 0; i < NumElements(*out_shape); ++i) {
    const Index at = Unflat(*out_shape, i);
    std::vector<double> values;
    for (int64_t j = 0; j < NumElements(c.window); ++j) {
      const Index offset = Unflat(c.window, j);
      Index q(rank);
      for (size_t d = 0; d < rank; ++d) {
        q[d] = at[d] * attr(c.strides, d, 1) + offset[d] * attr(c.dilation, d, 1);
      }
      values.push_back(p[Flat(padded, q)]);
    }
    if (op == Op::kWindowSum) {
      out->push_back(std::accumulate(values.begin(), values.end(), 0.0));
      magnitude->push_back(std::accumulate(values.begin(), values.end(), 0.0,
                                           [](double s, double v) { return s + std::fabs(v); }));
    } else {
      const bool any_nan =
          std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); });
      out->push_back(any_nan ? kNaN : *std::max_element(values.begin(), values.end()));
      magnitude->push_back(0);
    }
  }
}

Attrs WindowAttrs(const WindowCase& c) {
  Attrs attrs;
  attrs.window = c.window;
  attrs.strides = c.strides;
  attrs.low = c.low;
  attrs.high = c.high;
  attrs.dilation = c.dilation;
  return attrs;
}

void HandWindow(Op op) {
  const auto run = [op](const TensorData& x, const WindowCase& c) {
    return RunGraph({x},
                    [&](Builder& b, auto p) { return b.WindowReduce(op, p[0], WindowAttrs(c)); });
  };
  const WindowCase pairs = {{4}, {2}, {2}, {1}, {1}, {}};  // Padded to [pad, x0..x3, pad].
  if (op == Op::kWindowSum) {
    ExpectValues(run(Data(kF32, {4}, {1, 2, 3, 4}), {{4}, {2}, {2}, {}, {}, {}}), kF32, {2},
                 {3, 7});
    ExpectValues(run(Data(kF32, {4}, {1, 2, 3, 4}), pairs), kF32, {3}, {1, 5, 4});
    ExpectValues(
        run(Data(kI32, {2, 2}, {1, 2, 3, 4}), {{2, 2}, {2, 2}, {1, 2}, {1, 0}, {0, 0}, {}}), kI32,
        {2, 1}, {3, 10});
    return;
  }
  // Padding is -inf (the lowest value for integers), never 0.
  ExpectValues(run(Data(kF32, {4}, {-1, -2, -3, -4}), pairs), kF32, {3}, {-1, -2, -4});
  ExpectValues(run(Data(kF32, {1}, {-5}), {{1}, {1}, {}, {1}, {0}, {}}), kF32, {2}, {-kInf, -5});
  ExpectValues(run(Data(kI32, {1}, {-5}), {{1}, {1}, {}, {1}, {0}, {}}), kI32, {2},
               {-2147483648.0, -5});
  ExpectValues(run(Data(kU8, {1}, {5}), {{1}, {1}, {}, {0}, {1}, {}}), kU8, {2}, {5, 0});
  ExpectValues(run(Data(kF32, {3}, {1, kNaN, 2}), {{3}, {2}, {}, {}, {}, {}}), kF32, {2},
               {kNaN, kNaN});
  // Dilation 2 skips the middle element: max(1, 3) on [1, 9, 3].
  ExpectValues(run(Data(kF32, {3}, {1, 9, 3}), {{3}, {2}, {}, {}, {}, {2}}), kF32, {1}, {3});
}

void RandomWindow(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 1000);
  const std::vector<WindowCase> cases = {
      {{5}, {2}, {}, {}, {}, {}},
      {{7}, {3}, {2}, {1}, {2}, {2}},
      {{4, 5}, {2, 2}, {2, 2}, {0, 1}, {1, 0}, {1, 1}},
      {{2, 3, 6, 6}, {1, 1, 3, 3}, {1, 1, 2, 2}, {0, 0, 1, 1}, {0, 0, 1, 1}, {}},  // Pooling.
      {{3, 4, 5}, {2, 3, 2}, {1, 2, 1}, {2, 0, 1}, {0, 3, 1}, {1, 1, 3}},
      {{0, 3}, {1, 2}, {}, {1, 0}, {0, 0}, {}},  // An empty axis, padded: all identity.
      {{}, {}, {}, {}, {}, {}},
      {{2}, {1}, {}, {2}, {2}, {}},  // Windows entirely in the padding.
  };
  for (const WindowCase& c : cases) {
    for (DType dtype : {kF32, kF64, kF16, kBF16, kI32, kI64, kU8}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(c.input), " window ",
                                ShapeToString(c.window)));
      TensorData x = RandomData(rng, dtype, c.input, -6, 100);
      if (IsFloat(dtype) && x.num_elements() > 3) x.SetDouble(3, kNaN);
      Shape out_shape;
      std::vector<double> want, magnitude;
      ReferenceWindow(op, x, c, &out_shape, &want, &magnitude);
      const TensorData got = RunGraph(
          {x}, [&](Builder& b, auto p) { return b.WindowReduce(op, p[0], WindowAttrs(c)); });
      ExpectMatches(got, dtype, out_shape, want, magnitude);
    }
  }
}

// ---- Sort ---------------------------------------------------------------------------------------

NodeId SortNode(Builder& b, Op op, NodeId x, int64_t axis) {
  Attrs attrs;
  attrs.axes = {axis};
  return b.Emit(op, {x}, attrs);
}

void HandSort(Op op) {
  const bool values = op == Op::kSort;
  const auto run = [&](const TensorData& x, int64_t axis) {
    return RunGraph({x}, [&](Builder& b, auto p) { return SortNode(b, op, p[0], axis); });
  };
  // Ascending; NaN after +inf; ties (0 and -0 included) keep their order.
  const TensorData x = Data(kF32, {6}, {3, kNaN, -kInf, 0, kInf, -0.0});
  if (values) {
    ExpectValues(run(x, 0), kF32, {6}, {-kInf, 0, -0.0, 3, kInf, kNaN});
    EXPECT_TRUE(std::signbit(run(x, 0).GetDouble(2)));
  } else {
    ExpectValues(run(x, 0), kI64, {6}, {2, 3, 5, 0, 4, 1});
  }
  // Along axis 0 of a matrix: each column on its own; equal values by position.
  const TensorData m = Data(kI32, {3, 2}, {5, 1, 5, 0, 2, 1});
  if (values) {
    ExpectValues(run(m, 0), kI32, {3, 2}, {2, 0, 5, 1, 5, 1});
  } else {
    ExpectValues(run(m, 0), kI64, {3, 2}, {2, 1, 0, 0, 1, 2});
  }
  // bool: false before true; an empty fibre axis gives an empty result.
  const TensorData flags = Data(kBool, {4}, {1, 0, 1, 0});
  ExpectValues(run(flags, 0), values ? kBool : kI64, {4},
               values ? std::vector<double>{0, 0, 1, 1} : std::vector<double>{1, 3, 0, 2});
  ExpectValues(run(TensorData(kF32, {2, 0}), 1), values ? kF32 : kI64, {2, 0}, {});
}

// The independent reference: per fibre, std::sort (not stable) of (is NaN, value, position).
void RandomSort(Op op) {
  Rng rng(static_cast<uint64_t>(op) + 2000);
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
           {{9}, 0}, {{4, 6}, 1}, {{5, 3, 4}, 1}, {{3, 4}, 0}, {{2, 1}, 1}, {{2, 0, 3}, 1}}) {
    for (DType dtype : {kF32, kF64, kF16, kBF16, kI32, kI64, kU8, kBool}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape), " axis ", axis));
      TensorData x = IsBool(dtype) ? RandomData(rng, dtype, shape) : TiedData(rng, dtype, shape);
      if (IsFloat(dtype)) {
        for (int64_t i = 0; i < x.num_elements(); i += 5) x.SetDouble(i, i % 2 ? kNaN : -kInf);
      }
      const TensorData got =
          RunGraph({x}, [&](Builder& b, auto p) { return SortNode(b, op, p[0], axis); });
      const int64_t size = shape[static_cast<size_t>(axis)];
      Shape fibres = shape;
      fibres[static_cast<size_t>(axis)] = 1;
      std::vector<double> want(static_cast<size_t>(x.num_elements()));
      for (int64_t f = 0; f < NumElements(fibres); ++f) {
        Index at = Unflat(fibres, f);
        std::vector<std::tuple<bool, double, int64_t>> keys;
        for (int64_t k = 0; k < size; ++k) {
          at[static_cast<size_t>(axis)] = k;
          const double v = x.GetDouble(Flat(shape, at));
          keys.emplace_back(std::isnan(v), std::isnan(v) ? 0.0 : v, k);
        }
        std::sort(keys.begin(), keys.end());
        for (int64_t k = 0; k < size; ++k) {
          at[static_cast<size_t>(axis)] = k;
          const auto& [nan, v, from] = keys[static_cast<size_t>(k)];
          want[static_cast<size_t>(Flat(shape, at))] =
              op == Op::kArgsort ? static_cast<double>(from) : (nan ? kNaN : v);
        }
      }
      ExpectValues(got, op == Op::kArgsort ? kI64 : dtype, shape, want);
    }
  }
}

// ---- Every op -----------------------------------------------------------------------------------

class EveryOp : public testing::TestWithParam<Op> {};

TEST_P(EveryOp, HandComputedCases) {
  const Op op = GetParam();
  switch (GetOpClass(op)) {
    case OpClass::kLeaf:
      HandLeaf(op);
      break;
    case OpClass::kUnary:
      HandUnary(op);
      break;
    case OpClass::kBinary:
    case OpClass::kCompare:
    case OpClass::kLogical:
      HandBinary(op);
      break;
    case OpClass::kSelect:
      HandSelect();
      break;
    case OpClass::kCast:
      HandCast();
      break;
    case OpClass::kReduce:
    case OpClass::kArgReduce:
      HandReduce(op);
      break;
    case OpClass::kMovement:
      HandMovement(op);
      break;
    case OpClass::kIndex:
      HandIndex(op);
      break;
    case OpClass::kContraction:
      op == Op::kMatMul ? HandMatMul() : HandConv();
      break;
    case OpClass::kWindow:
      HandWindow(op);
      break;
    case OpClass::kSort:
      HandSort(op);
      break;
  }
}

TEST_P(EveryOp, RandomCasesMatchIndependentReference) {
  const Op op = GetParam();
  switch (GetOpClass(op)) {
    case OpClass::kLeaf:
      RandomLeaf(op);
      break;
    case OpClass::kUnary:
      RandomUnary(op);
      break;
    case OpClass::kBinary:
    case OpClass::kCompare:
    case OpClass::kLogical:
      RandomBinary(op);
      break;
    case OpClass::kSelect:
      RandomSelect();
      break;
    case OpClass::kCast:
      RandomCast();
      break;
    case OpClass::kReduce:
    case OpClass::kArgReduce:
      RandomReduce(op);
      break;
    case OpClass::kMovement:
      RandomMovement(op);
      break;
    case OpClass::kIndex:
      RandomIndex(op);
      break;
    case OpClass::kContraction:
      op == Op::kMatMul ? RandomMatMul() : RandomConv();
      break;
    case OpClass::kWindow:
      RandomWindow(op);
      break;
    case OpClass::kSort:
      RandomSort(op);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, EveryOp, testing::ValuesIn(kAllOps),
                         [](const testing::TestParamInfo<Op>& info) {
                           return std::string(OpName(info.param));
                         });

// ---- Whole graphs, arguments and errors ---------------------------------------------------------

TEST(Interpret, ChecksArgumentCountDTypeAndShape) {
  Builder b;
  const NodeId x = b.Parameter("x", {kF32, {2, 3}});
  const NodeId w = b.Parameter("w", {kI32, {3}});
  b.Output(x);
  b.Output(w);
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();

  const std::vector<TensorData> too_few = {TensorData(kF32, {2, 3})};
  absl::StatusOr<std::vector<TensorData>> result = Interpret(*graph, too_few);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("1 arguments for 2 parameters (x, w)"));

  const std::vector<TensorData> wrong_shape = {TensorData(kF32, {3, 2}), TensorData(kI32, {3})};
  result = Interpret(*graph, wrong_shape);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("argument 0 for parameter \"x\" is f32[3,2], expected f32[2,3]"));
  EXPECT_THAT(result.status().message(), HasSubstr("%0 = parameter"));

  const std::vector<TensorData> wrong_dtype = {TensorData(kF32, {2, 3}), TensorData(kI64, {3})};
  result = Interpret(*graph, wrong_dtype);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("argument 1 for parameter \"w\" is i64[3], expected i32[3]"));

  const std::vector<TensorData> right = {Data(kF32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                                         Data(kI32, {3}, {7, 8, 9})};
  result = Interpret(*graph, right);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ((*result)[0], right[0]);
  EXPECT_EQ((*result)[1], right[1]);
}

TEST(Interpret, OutOfRangeIndexNamesTheNode) {
  const std::source_location loc = std::source_location::current();
  const auto expect_gather_error = [&](double bad, const std::string& message) {
    Builder b;
    const NodeId x = b.Parameter("x", {kF32, {3}});
    const NodeId index = b.Parameter("index", {kI32, {2}});
    b.Output(b.Gather(x, index, 0, loc));
    absl::StatusOr<Graph> graph = std::move(b).Build();
    ASSERT_TRUE(graph.ok()) << graph.status();
    const std::vector<TensorData> args = {TensorData(kF32, {3}), Data(kI32, {2}, {1, bad})};
    const absl::StatusOr<std::vector<TensorData>> result = Interpret(*graph, args);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().message(), message);
  };
  const std::string where = LocationToString(loc);
  ASSERT_FALSE(where.empty());
  expect_gather_error(
      7, absl::StrCat("%2 = gather (", where, "): index 7 out of range for axis 0 of size 3"));
  expect_gather_error(
      -1, absl::StrCat("%2 = gather (", where, "): index -1 out of range for axis 0 of size 3"));
  Builder b;
  const NodeId x = b.Parameter("x", {kF32, {3}});
  const NodeId index = b.Parameter("index", {kU8, {1}});
  const NodeId src = b.Parameter("src", {kF32, {1}});
  b.Output(b.ScatterAdd(x, index, src, 0, loc));
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<TensorData> args = {TensorData(kF32, {3}), Data(kU8, {1}, {3}),
                                        TensorData(kF32, {1})};
  const absl::StatusOr<std::vector<TensorData>> result = Interpret(*graph, args);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(
      result.status().message(),
      absl::StrCat("%3 = scatter_add (", where, "): index 3 out of range for axis 0 of size 3"));
}

TEST(Interpret, RejectsAnInvalidGraph) {
  Graph graph;
  Node param;
  param.op = Op::kParameter;
  param.attrs.name = "x";
  param.attrs.shape = {2};
  param.type = {kF32, {2}};
  const NodeId x = graph.AddNode(param);
  Node wrong;
  wrong.op = Op::kExp;
  wrong.inputs = {x};
  wrong.type = {kF32, {3}};  // Should be f32[2].
  graph.AddOutput(graph.AddNode(wrong));
  const std::vector<TensorData> args = {TensorData(kF32, {2})};
  const absl::StatusOr<std::vector<TensorData>> result = Interpret(graph, args);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("%1 = exp"));
}

TEST(Interpret, RunsMultiOutputGraphsAndSkipsDeadNodes) {
  Builder b;
  const NodeId x = b.Parameter("x", {kF32, {3}});
  const NodeId bad_index = b.Constant(Data(kI32, {1}, {99}));
  b.Gather(x, bad_index, 0);  // Dead: no output needs it, so its bad index never matters.
  const NodeId doubled = b.Binary(Op::kAdd, x, x);
  const NodeId summed = b.Reduce(Op::kReduceSum, doubled, {0});
  b.Output(summed, "sum");
  b.Output(doubled, "doubled");
  b.Output(x, "x");
  b.Output(summed, "sum_again");
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<TensorData> args = {Data(kF32, {3}, {1, 2, 3})};
  const absl::StatusOr<std::vector<TensorData>> result = Interpret(*graph, args);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 4u);
  ExpectValues((*result)[0], kF32, {1}, {12});
  ExpectValues((*result)[1], kF32, {3}, {2, 4, 6});
  ExpectValues((*result)[2], kF32, {3}, {1, 2, 3});
  ExpectValues((*result)[3], kF32, {1}, {12});
}

// 8- and 16-bit integers wrap at their width, and u64 elements from 2^63 up (which TensorData
// carries as negative int64 bit patterns) order, divide and convert as unsigned values.
TEST(Interpret, NarrowIntegersWrapAndU64OrdersAsUnsigned) {
  Builder b;
  const NodeId a8 = b.Parameter("a8", {DType::kI8, {3}});
  const NodeId b8 = b.Parameter("b8", {DType::kI8, {3}});
  b.Output(b.Binary(Op::kAdd, a8, b8), "i8_add");
  b.Output(b.Binary(Op::kDiv, a8, b8), "i8_div");
  b.Output(b.Unary(Op::kAbs, a8), "i8_abs");
  const NodeId u16 = b.Parameter("u16", {DType::kU16, {2}});
  b.Output(b.Binary(Op::kSub, u16, b.Binary(Op::kAdd, u16, u16)), "u16_neg");
  const NodeId u64 = b.Parameter("u64", {DType::kU64, {3}});
  const NodeId v64 = b.Parameter("v64", {DType::kU64, {3}});
  b.Output(b.Binary(Op::kLt, u64, v64), "u64_lt");
  b.Output(b.Binary(Op::kMax, u64, v64), "u64_max");
  b.Output(b.Binary(Op::kDiv, u64, v64), "u64_div");
  b.Output(b.Reduce(Op::kReduceMax, u64, {0}), "u64_reduce_max");
  b.Output(b.ArgReduce(Op::kArgMin, u64, 0), "u64_argmin");
  b.Output(b.Cast(u64, DType::kI64), "u64_to_i64");
  b.Output(b.Cast(b.Cast(a8, DType::kI64), DType::kU64), "i8_to_u64");
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();

  const int64_t big = std::numeric_limits<int64_t>::min() + 5;  // 2^63 + 5 as a u64
  std::vector<TensorData> args = {Data(DType::kI8, {3}, {127, -128, -7}),
                                  Data(DType::kI8, {3}, {1, -1, 2}),
                                  Data(DType::kU16, {2}, {1, 65535}), TensorData(DType::kU64, {3}),
                                  TensorData(DType::kU64, {3})};
  const int64_t u[] = {big, 7, 3}, v[] = {9, big, -1};  // -1: 2^64 - 1
  for (int64_t i = 0; i < 3; ++i) {
    args[3].SetInt64(i, u[i]);
    args[4].SetInt64(i, v[i]);
  }
  const absl::StatusOr<std::vector<TensorData>> r = Interpret(*graph, args);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToInt64s(), (std::vector<int64_t>{-128, 127, -5}));  // 127 + 1 wraps
  EXPECT_EQ((*r)[1].ToInt64s(), (std::vector<int64_t>{127, -128, -4}));  // -128 / -1 wraps
  EXPECT_EQ((*r)[2].ToInt64s(), (std::vector<int64_t>{127, -128, 7}));   // |-128| wraps
  EXPECT_EQ((*r)[3].ToInt64s(), (std::vector<int64_t>{65535, 1}));       // -x mod 2^16
  EXPECT_EQ((*r)[4].ToInt64s(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ((*r)[5].ToInt64s(), (std::vector<int64_t>{big, big, -1}));
  EXPECT_EQ((*r)[6].ToInt64s(),
            (std::vector<int64_t>{static_cast<int64_t>(static_cast<uint64_t>(big) / 9), 0, 0}));
  EXPECT_EQ((*r)[7].ToInt64s(), (std::vector<int64_t>{big}));
  EXPECT_EQ((*r)[8].ToInt64s(), (std::vector<int64_t>{2}));
  EXPECT_EQ((*r)[9].ToInt64s(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 7, 3}));  // saturates
  EXPECT_EQ((*r)[10].ToInt64s(), (std::vector<int64_t>{127, 0, 0}));  // negatives become 0
}

long PeakResidentKiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(Interpret, FreesIntermediatesAfterTheirLastUse) {
  // A chain of 256 adds on 512 KiB values: 128 MiB if intermediates were kept, ~2 MiB if not.
  const Shape shape = {1 << 17};
  Builder b;
  const NodeId x = b.Parameter("x", {kF32, shape});
  const NodeId one = b.Fill(1, {kF32, shape});
  NodeId value = x;
  for (int i = 0; i < 256; ++i) value = b.Binary(Op::kAdd, value, one);
  b.Output(value);
  absl::StatusOr<Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<TensorData> args = {TensorData(kF32, shape)};
  const long before = PeakResidentKiB();
  const absl::StatusOr<std::vector<TensorData>> result = Interpret(*graph, args);
  const long after = PeakResidentKiB();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ((*result)[0].GetDouble(12345), 256);
#ifndef __SANITIZE_ADDRESS__  // ASan's quarantine keeps freed memory resident on purpose
  EXPECT_LT(after - before, 32 * 1024) << "peak grew by " << (after - before) << " KiB";
#else
  (void)before;
  (void)after;
#endif
}

TEST(Interpret, LargeMatMulAndConvMatchTheDefinition) {
  Rng rng(1234);
  const TensorData a = RandomData(rng, kF32, {256, 256}), c = RandomData(rng, kF32, {256, 256});
  const TensorData product = RunMatMul(a, c);
  const TensorData x = RandomData(rng, kF32, {1, 3, 32, 32});
  const TensorData w = RandomData(rng, kF32, {8, 3, 3, 3});
  const TensorData conv =
      RunGraph({x, w}, [](Builder& b, auto p) { return b.Conv(p[0], p[1], {}); });
  // Spot-check one element of each against the definition.
  double dot = 0;
  for (int64_t k = 0; k < 256; ++k) dot += a.GetDouble(17 * 256 + k) * c.GetDouble(k * 256 + 200);
  EXPECT_NEAR(product.GetDouble(17 * 256 + 200), dot, 1e-4 * (1 + std::fabs(dot)));
  EXPECT_EQ(conv.shape(), (Shape{1, 8, 30, 30}));
}

}  // namespace
}  // namespace kiln::ir
