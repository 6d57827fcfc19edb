// ONNX element types narrower than every kiln dtype: the float8s, float4 E2M1, float8 E8M0 and the
// 4- and 2-bit integers. kiln holds their values exactly in a wider dtype (float32 for the floats,
// int8 or uint8 for the integers), so a model that reads, moves, casts and (de)quantizes them
// imports without a dtype of its own per format: what makes them narrow is the rounding of the
// casts and quantizations that produce them (import_ops.cc), and their packed bytes (here).
// Internal to the importer; no protobuf here.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "ir/tensor_data.h"

namespace kiln::onnx::internal {

/// One narrow ONNX element type and the values it holds.
struct NarrowType {
  int32_t onnx;      ///< TensorProto::DataType number (17 to 26).
  const char* name;  ///< The ONNX name, e.g. "FLOAT8E4M3FN".
  ir::DType held;    ///< The kiln dtype holding its values: kF32, kI8 or kU8.
  int bits;          ///< Storage width: 8, 4 or 2 (4- and 2-bit values are packed, low bits first).
  bool is_float;
  // Floats. The values are sign * m * 2^(e - mantissa_bits) on the grid of `mantissa_bits`
  // fraction bits, exponents from `min_exponent` (the smallest normal one; below it the quantum
  // stays 2^(min_exponent - mantissa_bits): subnormals) up to `max_finite`.
  int exponent_bits = 0;
  int mantissa_bits = 0;
  int min_exponent = 0;
  double max_finite = 0;
  /// Where a float format keeps NaN and infinity.
  enum class Specials {
    kFiniteOnly,   ///< FLOAT4E2M1: no NaN, no inf (the reference casts NaN to -0).
    kFn,           ///< E4M3FN: S.1111.111 is NaN; no inf (overflow is NaN, or saturates).
    kFnuz,         ///< E4M3FNUZ, E5M2FNUZ: 0x80 ("-0") is NaN; one zero, no inf.
    kIeee,         ///< E5M2: IEEE's top binade (inf, NaN).
    kExponentOnly  ///< FLOAT8E8M0: 2^(code - 127), no sign, no zero; 0xFF is NaN.
  };
  Specials specials = Specials::kFn;
  // Integers: the range.
  int64_t min_int = 0, max_int = 0;
};

/// The narrow type of an ONNX elem_type, or null for every other type.
const NarrowType* FindNarrowType(int32_t elem_type);

/// Bytes that `count` packed elements take: ceil(count * bits / 8).
int64_t NarrowByteSize(const NarrowType& type, int64_t count);

/// Decodes `count` elements from their packed little-endian bytes (raw_data, external data, or
/// int32_data's one byte per entry) into a tensor of `type.held`; `what` names it in errors.
absl::StatusOr<ir::TensorData> DecodeNarrow(const NarrowType& type, const ir::Shape& shape,
                                            int64_t count, std::span<const uint8_t> bytes,
                                            const std::string& what);

}  // namespace kiln::onnx::internal
