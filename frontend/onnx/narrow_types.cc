#include "frontend/onnx/narrow_types.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::onnx::internal {
namespace {

// The numbers are TensorProto::DataType's; Debian's onnx headers predate some of their names.
constexpr NarrowType kTypes[] = {
    {.onnx = 17,
     .name = "FLOAT8E4M3FN",
     .held = ir::DType::kF32,
     .bits = 8,
     .is_float = true,
     .exponent_bits = 4,
     .mantissa_bits = 3,
     .min_exponent = -6,
     .max_finite = 448},
    {.onnx = 18,
     .name = "FLOAT8E4M3FNUZ",
     .held = ir::DType::kF32,
     .bits = 8,
     .is_float = true,
     .exponent_bits = 4,
     .mantissa_bits = 3,
     .min_exponent = -7,
     .max_finite = 240,
     .specials = NarrowType::Specials::kFnuz},
    {.onnx = 19,
     .name = "FLOAT8E5M2",
     .held = ir::DType::kF32,
     .bits = 8,
     .is_float = true,
     .exponent_bits = 5,
     .mantissa_bits = 2,
     .min_exponent = -14,
     .max_finite = 57344,
     .specials = NarrowType::Specials::kIeee},
    {.onnx = 20,
     .name = "FLOAT8E5M2FNUZ",
     .held = ir::DType::kF32,
     .bits = 8,
     .is_float = true,
     .exponent_bits = 5,
     .mantissa_bits = 2,
     .min_exponent = -15,
     .max_finite = 57344,
     .specials = NarrowType::Specials::kFnuz},
    {.onnx = 21,
     .name = "UINT4",
     .held = ir::DType::kU8,
     .bits = 4,
     .is_float = false,
     .min_int = 0,
     .max_int = 15},
    {.onnx = 22,
     .name = "INT4",
     .held = ir::DType::kI8,
     .bits = 4,
     .is_float = false,
     .min_int = -8,
     .max_int = 7},
    {.onnx = 23,
     .name = "FLOAT4E2M1",
     .held = ir::DType::kF32,
     .bits = 4,
     .is_float = true,
     .exponent_bits = 2,
     .mantissa_bits = 1,
     .min_exponent = 0,
     .max_finite = 6,
     .specials = NarrowType::Specials::kFiniteOnly},
    {.onnx = 24,
     .name = "FLOAT8E8M0",
     .held = ir::DType::kF32,
     .bits = 8,
     .is_float = true,
     .exponent_bits = 8,
     .mantissa_bits = 0,
     .min_exponent = -127,
     .max_finite = 0x1p127,
     .specials = NarrowType::Specials::kExponentOnly},
    {.onnx = 25,
     .name = "UINT2",
     .held = ir::DType::kU8,
     .bits = 2,
     .is_float = false,
     .min_int = 0,
     .max_int = 3},
    {.onnx = 26,
     .name = "INT2",
     .held = ir::DType::kI8,
     .bits = 2,
     .is_float = false,
     .min_int = -2,
     .max_int = 1},
};

// The value of one float-format bit pattern (the low `t.bits` bits of `code`).
double DecodeNarrowFloat(const NarrowType& t, uint32_t code) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  code &= (1u << t.bits) - 1;
  using S = NarrowType::Specials;
  if (t.specials == S::kExponentOnly) {
    return code == 0xFF ? nan : std::ldexp(1.0, static_cast<int>(code) - 127);
  }
  const uint32_t sign_bit = 1u << (t.bits - 1);
  if (t.specials == S::kFnuz && code == sign_bit) return nan;
  const uint32_t exp_mask = (1u << t.exponent_bits) - 1;
  const uint32_t exponent = (code >> t.mantissa_bits) & exp_mask;
  const uint32_t mantissa = code & ((1u << t.mantissa_bits) - 1);
  double magnitude;
  if (t.specials == S::kIeee && exponent == exp_mask) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : nan;
  } else if (t.specials == S::kFn && (code & ~sign_bit) == sign_bit - 1) {
    magnitude = nan;
  } else if (exponent == 0) {  // subnormal: the smallest normal binade's quantum
    magnitude = std::ldexp(mantissa, t.min_exponent - t.mantissa_bits);
  } else {
    const int e = static_cast<int>(exponent) + t.min_exponent - 1;
    magnitude = std::ldexp((1u << t.mantissa_bits) + mantissa, e - t.mantissa_bits);
  }
  return (code & sign_bit) ? -magnitude : magnitude;
}

}  // namespace

const NarrowType* FindNarrowType(int32_t elem_type) {
  for (const NarrowType& t : kTypes) {
    if (t.onnx == elem_type) return &t;
  }
  return nullptr;
}

int64_t NarrowByteSize(const NarrowType& type, int64_t count) {
  return (count * type.bits + 7) / 8;
}

absl::StatusOr<ir::TensorData> DecodeNarrow(const NarrowType& type, const ir::Shape& shape,
                                            int64_t count, std::span<const uint8_t> bytes,
                                            const std::string& what) {
  const int64_t need = NarrowByteSize(type, count);
  if (static_cast<int64_t>(bytes.size()) != need) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.size(), " bytes, but ", count,
                                                   " elements of ", type.name, " (packed) need ",
                                                   need));
  }
  ir::TensorData t(type.held, shape);
  const int per_byte = 8 / type.bits;
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t code = (bytes[static_cast<size_t>(i / per_byte)] >> (i % per_byte * type.bits)) &
                          ((1u << type.bits) - 1);
    if (type.is_float) {
      t.SetDouble(i, DecodeNarrowFloat(type, code));
    } else {
      // Sign-extend signed codes from their width.
      const int64_t v = type.min_int < 0 && (code >> (type.bits - 1))
                            ? int64_t{code} - (1 << type.bits)
                            : int64_t{code};
      t.SetInt64(i, v);
    }
  }
  return t;
}

}  // namespace kiln::onnx::internal
