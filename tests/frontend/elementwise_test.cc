// Elementwise ops: arithmetic with tensors and scalars, broadcasting, promotion, math, compare,
// logical, where/mask_fill, clamp, casts. Random cases are checked against plain loops.
#include <algorithm>
#include <cmath>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;

TEST(ArithmeticTest, HandComputed) {
  B::Device device;
  auto a = TF<1>::from_data({1.f, 2.f}, device);
  auto b = TF<1>::from_data({3.f, 4.f}, device);
  EXPECT_THAT((a + b).to_vector(), ElementsAre(4, 6));
  EXPECT_THAT((a - b).to_vector(), ElementsAre(-2, -2));
  EXPECT_THAT((a * b).to_vector(), ElementsAre(3, 8));
  EXPECT_THAT((b / a).to_vector(), ElementsAre(3, 2));
  EXPECT_THAT((b % a).to_vector(), ElementsAre(0, 0));
  EXPECT_THAT((-a).to_vector(), ElementsAre(-1, -2));
  EXPECT_THAT(a.pow(b).to_vector(), ElementsAre(1, 16));
  EXPECT_THAT(a.maximum(b).to_vector(), ElementsAre(3, 4));
  EXPECT_THAT(a.minimum(b).to_vector(), ElementsAre(1, 2));
}

TEST(ArithmeticTest, Scalars) {
  B::Device device;
  auto a = TF<1>::from_data({1.f, 2.f, 4.f}, device);
  EXPECT_THAT((a + 1).to_vector(), ElementsAre(2, 3, 5));
  EXPECT_THAT((1.5 + a).to_vector(), ElementsAre(2.5, 3.5, 5.5));
  EXPECT_THAT((a - 1).to_vector(), ElementsAre(0, 1, 3));
  EXPECT_THAT((1 - a).to_vector(), ElementsAre(0, -1, -3));
  EXPECT_THAT((a * 2).to_vector(), ElementsAre(2, 4, 8));
  EXPECT_THAT((a / 2).to_vector(), ElementsAre(0.5, 1, 2));
  EXPECT_THAT((8 / a).to_vector(), ElementsAre(8, 4, 2));
  EXPECT_THAT((a % 3).to_vector(), ElementsAre(1, 2, 1));
  EXPECT_THAT((5 % a).to_vector(), ElementsAre(0, 1, 1));
  EXPECT_THAT(a.pow(2).to_vector(), ElementsAre(1, 4, 16));
  EXPECT_THAT(a.rpow(2).to_vector(), ElementsAre(2, 4, 16));
  EXPECT_THAT(a.square().to_vector(), ElementsAre(1, 4, 16));
}

TEST(ArithmeticTest, CompoundAssignment) {
  B::Device device;
  auto a = TF<1>::from_data({1.f, 2.f}, device);
  auto original = a;
  a += 1;
  a *= TF<1>::from_data({2.f, 3.f}, device);
  a -= 0.5;
  a /= 2;
  EXPECT_THAT(a.to_vector(), ElementsAre(1.75, 4.25));  // ((1 + 1) * 2 - 0.5) / 2, ...
  // Tensors are values: the first handle still sees the old node.
  EXPECT_THAT(original.to_vector(), ElementsAre(1, 2));
}

TEST(ArithmeticTest, IntegerFloorDivisionAndRemainder) {
  B::Device device;
  auto a = TI<1>::from_data({7, -7, 7, -7, 5}, device);
  auto b = TI<1>::from_data({2, 2, -2, -2, 0}, device);
  // Python semantics: floor division, remainder has the divisor's sign; x / 0 gives 0.
  EXPECT_THAT((a / b).to_vector(), ElementsAre(3, -4, -4, 3, 0));
  EXPECT_THAT((a % b).to_vector(), ElementsAre(1, 1, -1, -1, 0));
  EXPECT_THAT((a % 3).to_vector(), ElementsAre(1, 2, 1, 2, 2));
  EXPECT_THAT(a.abs().to_vector(), ElementsAre(7, 7, 7, 7, 5));
  EXPECT_THAT(b.sign().to_vector(), ElementsAre(1, 1, -1, -1, 0));
}

// A random binary case with broadcasting, checked against loops.
void CheckBroadcastBinary(const Shape& sa, const Shape& sb, const Shape& out, uint32_t seed,
                          const std::function<TF<3>(const TF<3>&, const TF<3>&)>& op,
                          const std::function<double(double, double)>& reference) {
  B::Device device;
  auto va = RandomFloats(Count(sa), seed, 0.5f, 3.f);
  auto vb = RandomFloats(Count(sb), seed + 1, 0.5f, 3.f);
  auto a = TF<3>::from_vector(va, {sa[0], sa[1], sa[2]}, device);
  auto b = TF<3>::from_vector(vb, {sb[0], sb[1], sb[2]}, device);
  auto c = op(a, b);
  const auto shape = c.shape();
  EXPECT_EQ(Shape(shape.begin(), shape.end()), out);
  std::vector<double> expected(Count(out));
  for (int64_t i = 0; i < Count(out); ++i) {
    expected[i] = static_cast<float>(
        reference(va[BroadcastSource(i, out, sa)], vb[BroadcastSource(i, out, sb)]));
  }
  ExpectAllClose(c.to_vector(), expected, 1e-6, 1e-6);
}

TEST(ArithmeticTest, RandomBroadcastingMatchesLoops) {
  const Shape sa = {3, 1, 4}, sb = {1, 2, 1}, out = {3, 2, 4};
  CheckBroadcastBinary(
      sa, sb, out, 1, [](auto& a, auto& b) { return a + b; },
      [](double x, double y) { return x + y; });
  CheckBroadcastBinary(
      sa, sb, out, 2, [](auto& a, auto& b) { return a - b; },
      [](double x, double y) { return x - y; });
  CheckBroadcastBinary(
      sa, sb, out, 3, [](auto& a, auto& b) { return a * b; },
      [](double x, double y) { return x * y; });
  CheckBroadcastBinary(
      sa, sb, out, 4, [](auto& a, auto& b) { return a / b; },
      [](double x, double y) { return x / y; });
  CheckBroadcastBinary(
      sa, sb, out, 5, [](auto& a, auto& b) { return a.pow(b); },
      [](double x, double y) { return std::pow(x, y); });
  CheckBroadcastBinary(
      sa, sb, out, 6, [](auto& a, auto& b) { return a % b; },
      [](double x, double y) {
        const double r = std::fmod(x, y);
        return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
      });
  CheckBroadcastBinary(
      {2, 3, 1}, {2, 3, 5}, {2, 3, 5}, 7, [](auto& a, auto& b) { return a.maximum(b); },
      [](double x, double y) { return std::max(x, y); });
  CheckBroadcastBinary(
      {1, 1, 1}, {4, 1, 2}, {4, 1, 2}, 8, [](auto& a, auto& b) { return a.minimum(b); },
      [](double x, double y) { return std::min(x, y); });
}

TEST(ArithmeticTest, BroadcastMismatchThrows) {
  B::Device device;
  auto a = TF<2>::zeros({2, 3}, device);
  auto b = TF<2>::zeros({4, 3}, device);
  EXPECT_THROW(a + b, Error);
}

TEST(ArithmeticTest, PromotionWithinKind) {
  B::Device device;
  auto f16 = TF<1>::ones({2}, device, ir::DType::kF16);
  auto bf16 = TF<1>::ones({2}, device, ir::DType::kBF16);
  auto f32 = TF<1>::ones({2}, device);
  auto f64 = TF<1>::ones({2}, device, ir::DType::kF64);
  EXPECT_EQ((f16 + f32).dtype(), ir::DType::kF32);
  EXPECT_EQ((f32 * f64).dtype(), ir::DType::kF64);
  EXPECT_EQ((f16 - bf16).dtype(), ir::DType::kF32);
  EXPECT_EQ((f16 + f16).dtype(), ir::DType::kF16);
  EXPECT_EQ((f16 + 1.0).dtype(), ir::DType::kF16);  // scalars take the tensor's dtype
  auto u8 = TI<1>::ones({2}, device, ir::DType::kU8);
  auto i32 = TI<1>::ones({2}, device, ir::DType::kI32);
  auto i64 = TI<1>::ones({2}, device);
  EXPECT_EQ((u8 + i32).dtype(), ir::DType::kI32);
  EXPECT_EQ((i32 + i64).dtype(), ir::DType::kI64);
  EXPECT_THAT((u8 + i32).to_vector(), ElementsAre(2, 2));
  EXPECT_EQ(f16.lt(f64).dtype(), ir::DType::kBool);
  // Integer scalars wrap into the tensor's dtype like its arithmetic (torch: 1 + 300 = 45).
  EXPECT_THAT((u8 + 300).to_vector(), ElementsAre(45, 45));
  EXPECT_THAT((u8 * 255 + 2).to_vector(), ElementsAre(1, 1));
  // Mixed signedness promotes to the narrowest signed dtype that holds both, as torch does.
  auto i8 = TI<1>::from_data({-128, 127}, device).cast(ir::DType::kI8);
  auto u16 = TI<1>::from_data({65535, 1}, device).cast(ir::DType::kU16);
  EXPECT_EQ((u8 + i8).dtype(), ir::DType::kI16);
  EXPECT_THAT((u8 + i8).to_vector(), ElementsAre(-127, 128));
  EXPECT_EQ((u16 - i8).dtype(), ir::DType::kI32);
  EXPECT_THAT((u16 - i8).to_vector(), ElementsAre(65663, -126));
  EXPECT_THAT((i8 + 1).to_vector(), ElementsAre(-127, -128));  // i8 arithmetic wraps
  auto u64 = TI<1>::ones({2}, device).cast(ir::DType::kU64);
  EXPECT_THROW(u64 + i8, Error);  // no integer dtype holds both
}

struct UnaryCase {
  const char* name;
  std::function<TF<2>(const TF<2>&)> op;
  std::function<double(double)> reference;
  float low, high;
};

TEST(MathTest, RandomUnaryMatchesStd) {
  const std::vector<UnaryCase> cases = {
      {"exp", [](auto& x) { return x.exp(); }, [](double v) { return std::exp(v); }, -3, 3},
      {"log", [](auto& x) { return x.log(); }, [](double v) { return std::log(v); }, 0.01f, 5},
      {"sqrt", [](auto& x) { return x.sqrt(); }, [](double v) { return std::sqrt(v); }, 0, 5},
      {"rsqrt", [](auto& x) { return x.rsqrt(); }, [](double v) { return 1 / std::sqrt(v); }, 0.1f,
       5},
      {"sin", [](auto& x) { return x.sin(); }, [](double v) { return std::sin(v); }, -4, 4},
      {"cos", [](auto& x) { return x.cos(); }, [](double v) { return std::cos(v); }, -4, 4},
      {"tanh", [](auto& x) { return x.tanh(); }, [](double v) { return std::tanh(v); }, -4, 4},
      {"erf", [](auto& x) { return x.erf(); }, [](double v) { return std::erf(v); }, -3, 3},
      {"abs", [](auto& x) { return x.abs(); }, [](double v) { return std::fabs(v); }, -3, 3},
      {"neg", [](auto& x) { return x.neg(); }, [](double v) { return -v; }, -3, 3},
      {"sign", [](auto& x) { return x.sign(); },
       [](double v) { return static_cast<double>((v > 0) - (v < 0)); }, -3, 3},
      {"floor", [](auto& x) { return x.floor(); }, [](double v) { return std::floor(v); }, -9, 9},
      {"ceil", [](auto& x) { return x.ceil(); }, [](double v) { return std::ceil(v); }, -9, 9},
      {"round", [](auto& x) { return x.round(); }, [](double v) { return std::nearbyint(v); }, -9,
       9},
      {"reciprocal", [](auto& x) { return x.reciprocal(); }, [](double v) { return 1 / v; }, 0.2f,
       4},
      {"square", [](auto& x) { return x.square(); }, [](double v) { return v * v; }, -3, 3},
      {"pow 3", [](auto& x) { return x.pow(3); }, [](double v) { return v * v * v; }, -3, 3},
  };
  B::Device device;
  uint32_t seed = 100;
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = RandomFloats(12, seed++, c.low, c.high);
    auto x = TF<2>::from_vector(v, {3, 4}, device);
    std::vector<double> expected;
    for (float f : v) expected.push_back(static_cast<float>(c.reference(f)));
    ExpectAllClose(c.op(x).to_vector(), expected, 1e-6, 1e-6);
  }
}

TEST(MathTest, RoundHalfToEven) {
  B::Device device;
  auto x = TF<1>::from_data({0.5f, 1.5f, 2.5f, -0.5f, -1.5f}, device);
  EXPECT_THAT(x.round().to_vector(), ElementsAre(0, 2, 2, -0.0f, -2));
}

TEST(CompareTest, OperatorsAndNamed) {
  B::Device device;
  auto a = TF<1>::from_data({1.f, 2.f, 3.f}, device);
  auto b = TF<1>::from_data({3.f, 2.f, 1.f}, device);
  EXPECT_THAT((a < b).to_vector(), ElementsAre(true, false, false));
  EXPECT_THAT((a <= b).to_vector(), ElementsAre(true, true, false));
  EXPECT_THAT((a > b).to_vector(), ElementsAre(false, false, true));
  EXPECT_THAT((a >= b).to_vector(), ElementsAre(false, true, true));
  EXPECT_THAT(a.eq(b).to_vector(), ElementsAre(false, true, false));
  EXPECT_THAT(a.ne(b).to_vector(), ElementsAre(true, false, true));
  EXPECT_THAT((a > 1.5).to_vector(), ElementsAre(false, true, true));
  EXPECT_THAT((2 < a).to_vector(), ElementsAre(false, false, true));
  EXPECT_THAT((2 >= a).to_vector(), ElementsAre(true, true, false));
  EXPECT_THAT(a.eq(2).to_vector(), ElementsAre(false, true, false));
}

TEST(CompareTest, RandomBroadcastMatchesLoops) {
  B::Device device;
  auto va = RandomInts(6, 11, -2, 2);
  auto vb = RandomInts(4, 12, -2, 2);
  auto a = TI<2>::from_vector(va, {6, 1}, device);
  auto b = TI<2>::from_vector(vb, {1, 4}, device);
  auto lt = a.lt(b).to_vector();
  auto ge = (a >= b).to_vector();
  auto eq = a.eq(b).to_vector();
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(lt[i * 4 + j], va[i] < vb[j]);
      EXPECT_EQ(ge[i * 4 + j], va[i] >= vb[j]);
      EXPECT_EQ(eq[i * 4 + j], va[i] == vb[j]);
    }
  }
}

TEST(LogicalTest, BoolAndIntBitwise) {
  B::Device device;
  auto p = TB<1>::from_data({true, true, false, false}, device);
  auto q = TB<1>::from_data({true, false, true, false}, device);
  EXPECT_THAT((p & q).to_vector(), ElementsAre(true, false, false, false));
  EXPECT_THAT((p | q).to_vector(), ElementsAre(true, true, true, false));
  EXPECT_THAT((p ^ q).to_vector(), ElementsAre(false, true, true, false));
  EXPECT_THAT((!p).to_vector(), ElementsAre(false, false, true, true));
  EXPECT_THAT(p.logical_and(q).to_vector(), ElementsAre(true, false, false, false));
  auto i = TI<1>::from_data({12, 10}, device);
  auto j = TI<1>::from_data({10, 6}, device);
  EXPECT_THAT((i & j).to_vector(), ElementsAre(8, 2));
  EXPECT_THAT((i | j).to_vector(), ElementsAre(14, 14));
  EXPECT_THAT((i ^ j).to_vector(), ElementsAre(6, 12));
  EXPECT_THAT((~i).to_vector(), ElementsAre(~int64_t{12}, ~int64_t{10}));
}

TEST(SelectTest, WhereAndMaskFill) {
  B::Device device;
  auto cond = TB<2>::from_data({{true}, {false}}, device);  // [2, 1] broadcasts over columns
  auto a = TF<2>::from_data({{1.f, 2.f, 3.f}}, device);     // [1, 3]
  auto b = TF<2>::from_data({{10.f, 20.f, 30.f}, {40.f, 50.f, 60.f}}, device);
  EXPECT_THAT(where(cond, a, b).to_vector(), ElementsAre(1, 2, 3, 40, 50, 60));
  EXPECT_THAT(where(cond, a, -1.0).to_vector(), ElementsAre(1, 2, 3, -1, -1, -1));
  EXPECT_THAT(where(cond, 7.0, b).to_vector(), ElementsAre(7, 7, 7, 40, 50, 60));
  EXPECT_THAT(b.mask_fill(b > 35, 0).to_vector(), ElementsAre(10, 20, 30, 0, 0, 0));
}

TEST(SelectTest, RandomWhereMatchesLoops) {
  B::Device device;
  auto vx = RandomFloats(20, 21);
  auto vy = RandomFloats(20, 22);
  auto x = TF<2>::from_vector(vx, {4, 5}, device);
  auto y = TF<2>::from_vector(vy, {4, 5}, device);
  auto got = where(x > y, x * 2, y).to_vector();
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(got[i], vx[i] > vy[i] ? vx[i] * 2 : vy[i]);
}

TEST(ClampTest, ClampAndNaN) {
  B::Device device;
  auto x = TF<1>::from_data({-2.f, 0.5f, 3.f, NAN}, device);
  auto c = x.clamp(0, 1).to_vector();
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 0.5);
  EXPECT_EQ(c[2], 1);
  EXPECT_TRUE(std::isnan(c[3]));
  EXPECT_THAT(x.clamp_min(0).slice(0, 0, 3).to_vector(), ElementsAre(0, 0.5, 3));
  EXPECT_THAT(x.clamp_max(0).slice(0, 0, 3).to_vector(), ElementsAre(-2, 0, 0));
  EXPECT_THROW(x.clamp(1, 0), Error);
  auto m = x.maximum(zeros_like(x)).to_vector();
  EXPECT_TRUE(std::isnan(m[3]));
  auto i = TI<1>::from_data({-5, 5}, device);
  EXPECT_THAT(i.clamp(-1, 2).to_vector(), ElementsAre(-1, 2));
}

TEST(ClampTest, RandomMatchesLoops) {
  B::Device device;
  auto values = RandomFloats(30, 23, -3, 3);
  auto x = TF<1>::from_vector(values, {30}, device);
  auto both = x.clamp(-1, 1.5).to_vector();
  auto low = x.clamp_min(0.25).to_vector();
  auto high = x.clamp_max(-0.5).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(both[i], std::clamp(values[i], -1.f, 1.5f));
    EXPECT_EQ(low[i], std::max(values[i], 0.25f));
    EXPECT_EQ(high[i], std::min(values[i], -0.5f));
  }
}

TEST(LogicalTest, RandomMatchesLoops) {
  B::Device device;
  auto a = RandomInts(40, 24, 0, 1);
  auto b = RandomInts(40, 25, 0, 1);
  auto p = TI<1>::from_vector(a, {40}, device).to_bool();
  auto q = TI<1>::from_vector(b, {40}, device).to_bool();
  auto conj = (p & q).to_vector(), disj = (p | q).to_vector(), excl = (p ^ q).to_vector(),
       neg = (!p).to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(conj[i], a[i] && b[i]);
    EXPECT_EQ(disj[i], a[i] || b[i]);
    EXPECT_EQ(excl[i], a[i] != b[i]);
    EXPECT_EQ(neg[i], !a[i]);
  }
}

TEST(CastTest, RandomMatchesLoops) {
  B::Device device;
  auto values = RandomFloats(30, 26, -1e3f, 1e3f);
  auto x = TF<1>::from_vector(values, {30}, device);
  auto ints = x.to_int(ir::DType::kI32).to_vector();
  auto doubles = x.cast(ir::DType::kF64).to_vector<double>();
  auto bf16 = x.cast(ir::DType::kBF16).to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(ints[i], static_cast<int64_t>(std::trunc(values[i])));
    EXPECT_EQ(doubles[i], static_cast<double>(values[i]));
    EXPECT_EQ(bf16[i], ir::BFloat16ToFloat(ir::FloatToBFloat16(values[i])));
  }
}

TEST(CastTest, KindConversionsAndCast) {
  B::Device device;
  auto x = TF<1>::from_data({-1.7f, 0.f, 2.9f}, device);
  auto i = x.to_int();
  EXPECT_EQ(i.dtype(), ir::DType::kI64);
  EXPECT_THAT(i.to_vector(), ElementsAre(-1, 0, 2));  // truncation toward zero
  EXPECT_THAT(x.to_bool().to_vector(), ElementsAre(true, false, true));
  EXPECT_THAT(x.to_bool().to_float().to_vector(), ElementsAre(1, 0, 1));
  EXPECT_THAT(i.to_float(ir::DType::kF64).to_vector<double>(), ElementsAre(-1, 0, 2));
  auto h = x.cast(ir::DType::kF16);
  EXPECT_EQ(h.dtype(), ir::DType::kF16);
  EXPECT_EQ(h.to_vector<double>()[0], ir::HalfToFloat(ir::FloatToHalf(-1.7f)));
  EXPECT_THROW(x.cast(ir::DType::kI32), Error);
  EXPECT_THROW(x.to_int(ir::DType::kF32), Error);
  EXPECT_THAT(TI<1>::from_data({300, -4}, device).cast(ir::DType::kU8).to_vector(),
              ElementsAre(255, 0));  // saturating
}

}  // namespace
}  // namespace kiln::testing
