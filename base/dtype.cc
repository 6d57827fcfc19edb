#include "base/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace kiln::base {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kBool:
      return "bool";
    case DType::kI8:
      return "i8";
    case DType::kI16:
      return "i16";
    case DType::kU16:
      return "u16";
    case DType::kU32:
      return "u32";
    case DType::kU64:
      return "u64";
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (DType d : kAllDTypes) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
    case DType::kU64:
      return 8;
    case DType::kF32:
    case DType::kI32:
    case DType::kU32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
    case DType::kU16:
      return 2;
    case DType::kU8:
    case DType::kI8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

uint16_t FloatToHalf(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN; keep NaN quiet and non-zero.
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // Rounds to Inf.
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): scale so the float adder does the round-to-nearest-even.
    const float magnitude = std::bit_cast<float>(abs) + 0.5f;  // 0.5 = 2^-1, ulp 2^-24.
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(magnitude) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const uint32_t mantissa_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + mantissa_odd;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x0040u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(f >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

namespace {

// Double to float rounding to odd (truncate toward zero, then set the last mantissa bit when
// inexact). Rounding that float to nearest even at f16 or bf16 precision gives the correctly
// rounded result, since float keeps more than two extra bits in every range (Boldo & Melquiond,
// "When double rounding is odd").
float RoundToOddFloat(double value) {
  if (std::isnan(value) || std::isinf(value)) return static_cast<float>(value);
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (std::fabs(value) > kFloatMax) {
    // Truncates to the largest float, whose last bit is already odd.
    return static_cast<float>(std::copysign(kFloatMax, value));
  }
  float rounded = static_cast<float>(value);
  if (static_cast<double>(rounded) == value) return rounded;
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value)) {
    rounded = std::nextafter(rounded, 0.0f);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(rounded) | 1u);
}

}  // namespace

uint16_t DoubleToHalf(double value) { return FloatToHalf(RoundToOddFloat(value)); }

uint16_t DoubleToBFloat16(double value) { return FloatToBFloat16(RoundToOddFloat(value)); }

double RoundToDType(double value, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(value);
    case DType::kF16:
      return HalfToFloat(DoubleToHalf(value));
    case DType::kBF16:
      return BFloat16ToFloat(DoubleToBFloat16(value));
    default:
      return value;
  }
}

}  // namespace kiln::base
