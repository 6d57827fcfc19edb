// dtypes: names, sizes, and the f16/bf16 conversions against independent oracles: GCC's
// _Float16 (soft-float conversions from libgcc) for f16, and round-to-nearest-even computed with
// frexp/nearbyint in exact double arithmetic for bf16.
#include "ir/dtype.h"

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/tensor_data.h"

namespace kiln::ir {
namespace {

uint16_t Bits(_Float16 h) { return std::bit_cast<uint16_t>(h); }
_Float16 Half(uint16_t bits) { return std::bit_cast<_Float16>(bits); }
float FloatOf(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(DTypeTest, NamesRoundTrip) {
  std::set<std::string> names;
  for (DType d : kAllDTypes) {
    const std::string name = DTypeName(d);
    EXPECT_TRUE(names.insert(name).second) << name;
    ASSERT_TRUE(ParseDType(name).has_value()) << name;
    EXPECT_EQ(*ParseDType(name), d);
  }
  EXPECT_EQ(names, (std::set<std::string>{"f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64",
                                          "u8", "u16", "u32", "u64", "bool"}));
  for (const char* bad : {"", "F32", "float", "f32 ", " f32", "f8", "boolean", "i128", "u1"}) {
    EXPECT_FALSE(ParseDType(bad).has_value()) << bad;
  }
}

TEST(DTypeTest, SizesAndKinds) {
  EXPECT_EQ(DTypeSize(DType::kF32), static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(DTypeSize(DType::kF64), static_cast<int64_t>(sizeof(double)));
  EXPECT_EQ(DTypeSize(DType::kF16), static_cast<int64_t>(sizeof(_Float16)));
  EXPECT_EQ(DTypeSize(DType::kBF16), static_cast<int64_t>(sizeof(uint16_t)));
  EXPECT_EQ(DTypeSize(DType::kI32), static_cast<int64_t>(sizeof(int32_t)));
  EXPECT_EQ(DTypeSize(DType::kI64), static_cast<int64_t>(sizeof(int64_t)));
  EXPECT_EQ(DTypeSize(DType::kU8), static_cast<int64_t>(sizeof(uint8_t)));
  EXPECT_EQ(DTypeSize(DType::kBool), static_cast<int64_t>(sizeof(bool)));
  EXPECT_EQ(DTypeSize(DType::kI8), static_cast<int64_t>(sizeof(int8_t)));
  EXPECT_EQ(DTypeSize(DType::kI16), static_cast<int64_t>(sizeof(int16_t)));
  EXPECT_EQ(DTypeSize(DType::kU16), static_cast<int64_t>(sizeof(uint16_t)));
  EXPECT_EQ(DTypeSize(DType::kU32), static_cast<int64_t>(sizeof(uint32_t)));
  EXPECT_EQ(DTypeSize(DType::kU64), static_cast<int64_t>(sizeof(uint64_t)));
  int floats = 0, integers = 0, bools = 0, signed_integers = 0;
  for (DType d : kAllDTypes) {
    // Each dtype is exactly one kind.
    EXPECT_EQ(IsFloat(d) + IsInteger(d) + IsBool(d), 1) << DTypeName(d);
    floats += IsFloat(d);
    integers += IsInteger(d);
    bools += IsBool(d);
    signed_integers += IsSignedInteger(d);
    EXPECT_EQ(IsInteger(d), IsSignedInteger(d) || IsUnsignedInteger(d)) << DTypeName(d);
  }
  EXPECT_EQ(floats, 4);
  EXPECT_EQ(integers, 8);
  EXPECT_EQ(signed_integers, 4);
  EXPECT_EQ(bools, 1);
}

// ---- f16 ----------------------------------------------------------------------------------------

TEST(DTypeTest, HalfToFloatMatchesFloat16Exhaustively) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float expected = static_cast<float>(Half(static_cast<uint16_t>(bits)));
    const float actual = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(expected)) {
      // NaN payloads are not specified across conversions; NaN-ness and sign are.
      ASSERT_TRUE(std::isnan(actual)) << std::hex << bits;
      ASSERT_EQ(std::signbit(actual), std::signbit(expected)) << std::hex << bits;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected))
          << std::hex << bits;
    }
  }
}

void ExpectFloatToHalf(float value) {
  const uint16_t expected = Bits(static_cast<_Float16>(value));
  const uint16_t actual = FloatToHalf(value);
  if (std::isnan(value)) {
    ASSERT_TRUE(std::isnan(static_cast<float>(Half(actual)))) << value;
    ASSERT_EQ(actual & 0x8000, expected & 0x8000) << value;
  } else {
    ASSERT_EQ(actual, expected) << std::hexfloat << value << " (bits 0x" << std::hex
                                << std::bit_cast<uint32_t>(value) << ")";
  }
}

TEST(DTypeTest, FloatToHalfMatchesFloat16AtEveryRoundingBoundary) {
  // For every finite half and its successor: the half itself, the midpoint between them (a tie,
  // exact in float), the floats on either side of the midpoint and of the half. This covers ties
  // to even and to odd, every subnormal, and the overflow threshold (between 65504 and 2^16).
  for (uint32_t bits = 0; bits <= 0x7bff; ++bits) {
    const float value = static_cast<float>(Half(static_cast<uint16_t>(bits)));
    const float next = bits == 0x7bff ? 65536.0f : static_cast<float>(Half(bits + 1));
    const float mid = (value + next) / 2;
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(value) + next) / 2);  // Exact.
    for (float x : {value, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f),
                    std::nextafter(value, 0.0f), std::nextafter(value, 1e30f)}) {
      ExpectFloatToHalf(x);
      ExpectFloatToHalf(-x);
    }
  }
  for (float x : {0.0f, std::numeric_limits<float>::denorm_min(), 0x1p-25f, 0x1.000002p-25f,
                  0x1p-26f, 0x1.8p-24f, 65519.99f, 65520.0f, 1e10f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()}) {
    ExpectFloatToHalf(x);
    ExpectFloatToHalf(-x);
  }
}

TEST(DTypeTest, FloatToHalfMatchesFloat16OnASweepOfAllFloats) {
  // Every 4099th bit pattern (a prime stride, so all exponents and mantissa bits vary), NaNs
  // with assorted payloads included.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    ExpectFloatToHalf(FloatOf(static_cast<uint32_t>(bits)));
  }
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x7f802000u, 0xff800001u, 0xffc00000u,
                       0xffffffffu}) {
    ExpectFloatToHalf(FloatOf(nan));
  }
}

TEST(DTypeTest, HalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToHalf(value), half) << std::hex << bits;
  }
}

// ---- bf16 ---------------------------------------------------------------------------------------

// bfloat16: 8 significant bits, float's exponent range (subnormal spacing 2^-133), largest
// finite value (2 - 2^-7) * 2^127. Rounds `value` (float or double, both exact in double) to
// the nearest bf16, ties to even, in exact double arithmetic: scale to units of the bf16
// spacing at that magnitude, round with nearbyint, scale back.
double OracleRoundToBFloat16(double value) {
  if (std::isnan(value) || std::isinf(value) || value == 0) return value;
  int exponent = 0;
  std::frexp(std::fabs(value), &exponent);  // |value| in [2^(exponent-1), 2^exponent).
  const int quantum_exponent = std::max(exponent - 1 - 7, -133);
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  const double units = std::nearbyint(std::ldexp(std::fabs(value), -quantum_exponent));
  const double rounded = std::ldexp(units, quantum_exponent);
  // Rounding up past the largest finite value overflows (IEEE: unbounded-exponent rounding).
  if (rounded >= 0x1p128) return std::copysign(std::numeric_limits<double>::infinity(), value);
  return std::copysign(rounded, value);
}

// The bf16 bit pattern of a double that is exactly a bf16 value.
uint16_t BFloat16BitsOf(double exact) {
  const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(exact));
  EXPECT_EQ(bits & 0xffffu, 0u) << exact;
  EXPECT_EQ(static_cast<double>(static_cast<float>(exact)), exact);
  return static_cast<uint16_t>(bits >> 16);
}

// bf16 bits decoded with the format's definition.
double OracleBFloat16Value(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  if (exponent == 0xff) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 127 - 7);
}

TEST(DTypeTest, BFloat16ToFloatMatchesTheDefinitionExhaustively) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const double expected = OracleBFloat16Value(static_cast<uint16_t>(bits));
    const float actual = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(actual)) << std::hex << bits;
      ASSERT_EQ(std::signbit(actual), (bits & 0x8000) != 0) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(actual), expected) << std::hex << bits;
      ASSERT_EQ(std::signbit(actual), (bits & 0x8000) != 0) << std::hex << bits;
    }
  }
}

void ExpectFloatToBFloat16(float value) {
  const uint16_t actual = FloatToBFloat16(value);
  if (std::isnan(value)) {
    ASSERT_TRUE(std::isnan(BFloat16ToFloat(actual))) << value;
    ASSERT_EQ((actual & 0x8000) != 0, std::signbit(value)) << value;
    return;
  }
  ASSERT_EQ(actual, BFloat16BitsOf(OracleRoundToBFloat16(value)))
      << std::hexfloat << value << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(value) << ")";
}

TEST(DTypeTest, FloatToBFloat16MatchesOracleAtEveryRoundingBoundary) {
  for (uint32_t bits = 0; bits <= 0x7f7f; ++bits) {
    const double value = OracleBFloat16Value(static_cast<uint16_t>(bits));
    const double next = bits == 0x7f7f ? 0x1p128 : OracleBFloat16Value(bits + 1);
    const float mid = static_cast<float>((value + next) / 2);
    ASSERT_EQ(static_cast<double>(mid), (value + next) / 2);  // Exact: 9 significant bits.
    const float v = static_cast<float>(value);
    for (float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e38f),
                    std::nextafter(v, 0.0f), std::nextafter(v, 1e38f)}) {
      ExpectFloatToBFloat16(x);
      ExpectFloatToBFloat16(-x);
    }
  }
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    ExpectFloatToBFloat16(FloatOf(static_cast<uint32_t>(bits)));
  }
  ExpectFloatToBFloat16(std::numeric_limits<float>::max());
  ExpectFloatToBFloat16(std::numeric_limits<float>::infinity());
  ExpectFloatToBFloat16(-std::numeric_limits<float>::infinity());
}

// ---- From double: one rounding, not two --------------------------------------------------------

// Doubles just off every f16 and bf16 rounding tie: rounding them to float first lands exactly
// on the tie, and a second rounding then goes the wrong way for half of them.
std::vector<double> DoublesNearTies(DType dtype) {
  std::vector<double> values;
  const uint32_t last = dtype == DType::kF16 ? 0x7bff : 0x7f7f;
  for (uint32_t bits = 0; bits <= last; bits += 7) {
    double value, next;
    if (dtype == DType::kF16) {
      value = static_cast<float>(Half(static_cast<uint16_t>(bits)));
      next = bits == last ? 65536.0 : static_cast<float>(Half(bits + 1));
    } else {
      value = OracleBFloat16Value(static_cast<uint16_t>(bits));
      next = bits == last ? 0x1p128 : OracleBFloat16Value(bits + 1);
    }
    const double mid = (value + next) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300),
                     mid + (next - value) * 0x1p-30, mid - (next - value) * 0x1p-30}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  for (double x : {1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-8 + 0x1p-40, 65520.0 - 1e-9, 0x1p-25 + 0x1p-60,
                   0x1p-134 + 0x1p-170, 1e300, -1e300, 1e-300, 0.1, 1.0 / 3}) {
    values.push_back(x);
  }
  return values;
}

TEST(DTypeTest, DoubleToHalfRoundsOnce) {
  for (double x : DoublesNearTies(DType::kF16)) {
    const uint16_t expected = Bits(static_cast<_Float16>(x));  // libgcc __truncdfhf2.
    ASSERT_EQ(DoubleToHalf(x), expected) << std::hexfloat << x;
    ASSERT_EQ(std::bit_cast<uint64_t>(RoundToDType(x, DType::kF16)),
              std::bit_cast<uint64_t>(static_cast<double>(Half(expected))))
        << std::hexfloat << x;
    TensorData data(DType::kF16, {1});
    data.SetDouble(0, x);
    uint16_t stored;
    std::memcpy(&stored, data.data(), 2);
    ASSERT_EQ(stored, expected) << std::hexfloat << x;
  }
  EXPECT_TRUE(std::isnan(HalfToFloat(DoubleToHalf(std::numeric_limits<double>::quiet_NaN()))));
  EXPECT_EQ(DoubleToHalf(-std::numeric_limits<double>::infinity()), 0xfc00);
}

TEST(DTypeTest, DoubleToBFloat16RoundsOnce) {
  for (double x : DoublesNearTies(DType::kBF16)) {
    const uint16_t expected = BFloat16BitsOf(OracleRoundToBFloat16(x));
    ASSERT_EQ(DoubleToBFloat16(x), expected) << std::hexfloat << x;
    ASSERT_EQ(RoundToDType(x, DType::kBF16), OracleRoundToBFloat16(x)) << std::hexfloat << x;
    TensorData data(DType::kBF16, {1});
    data.SetDouble(0, x);
    uint16_t stored;
    std::memcpy(&stored, data.data(), 2);
    ASSERT_EQ(stored, expected) << std::hexfloat << x;
  }
  // Beyond float's range, but still rounding to the largest bf16 or to infinity.
  EXPECT_EQ(DoubleToBFloat16(0x1.fep127), 0x7f7f);
  EXPECT_EQ(DoubleToBFloat16(0x1.ffp127), 0x7f80);  // The tie rounds to even: overflow.
  EXPECT_EQ(DoubleToBFloat16(-0x1p200), 0xff80);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(DoubleToBFloat16(std::nan("")))));
}

TEST(DTypeTest, RoundToDTypeOfFloatAndDouble) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const double x = std::bit_cast<double>(rng());
    if (std::isnan(x)) continue;
    ASSERT_EQ(std::bit_cast<uint64_t>(RoundToDType(x, DType::kF32)),
              std::bit_cast<uint64_t>(static_cast<double>(static_cast<float>(x))));
    ASSERT_EQ(std::bit_cast<uint64_t>(RoundToDType(x, DType::kF64)), std::bit_cast<uint64_t>(x));
    ASSERT_EQ(DoubleToHalf(x), Bits(static_cast<_Float16>(x))) << std::hexfloat << x;
    ASSERT_EQ(DoubleToBFloat16(x), BFloat16BitsOf(OracleRoundToBFloat16(x))) << std::hexfloat << x;
  }
}

}  // namespace
}  // namespace kiln::ir
