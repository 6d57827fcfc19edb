// Element types of kiln tensors and the scalar conversions every backend shares. A leaf (no
// other kiln library): the compiler (ir/dtype.h re-exports it as ir::DType) and the runtime
// (blob signatures, GEMM dtypes) both use it, so libkiln_runtime needs no kiln_ir.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::base {

/// Element type of a tensor. The order is part of the blob format: append, never reorder.
enum class DType : uint8_t {
  kF32,
  kF64,
  kF16,
  kBF16,
  kI32,
  kI64,
  kU8,
  kBool,
  kI8,
  kI16,
  kU16,
  kU32,
  kU64,
};

inline constexpr DType kAllDTypes[] = {
    DType::kF32,  DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8,
    DType::kBool, DType::kI8,  DType::kI16, DType::kU16,  DType::kU32, DType::kU64};

/// Text name used by the IR printer and in error messages: "f32", "bf16", "i8", "u16", "bool", ...
const char* DTypeName(DType dtype);
/// Inverse of DTypeName; nullopt for an unknown name.
std::optional<DType> ParseDType(std::string_view name);
/// Size of one element in bytes (bool is one byte holding 0 or 1).
int64_t DTypeSize(DType dtype);

inline constexpr bool IsFloat(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}
/// i8, i16, i32, i64: two's complement, arithmetic wraps around modulo 2^bits.
inline constexpr bool IsSignedInteger(DType d) {
  return d == DType::kI8 || d == DType::kI16 || d == DType::kI32 || d == DType::kI64;
}
/// u8, u16, u32, u64: arithmetic wraps around modulo 2^bits.
inline constexpr bool IsUnsignedInteger(DType d) {
  return d == DType::kU8 || d == DType::kU16 || d == DType::kU32 || d == DType::kU64;
}
inline constexpr bool IsInteger(DType d) { return IsSignedInteger(d) || IsUnsignedInteger(d); }
inline constexpr bool IsBool(DType d) { return d == DType::kBool; }

/// IEEE binary16 and bfloat16 conversions, round to nearest even (NaN stays NaN).
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

/// Double to binary16 / bfloat16 with a single round to nearest even (NaN stays NaN). Not the
/// same as FloatToHalf(static_cast<float>(value)): rounding to float first can land exactly on a
/// tie and then round the wrong way.
uint16_t DoubleToHalf(double value);
uint16_t DoubleToBFloat16(double value);

/// Rounds a double to the precision of a float dtype (f64 is returned unchanged), with a single
/// rounding. This is what storing a value into a tensor of that dtype does.
double RoundToDType(double value, DType dtype);

}  // namespace kiln::base
