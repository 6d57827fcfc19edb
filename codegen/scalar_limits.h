// The value range of the kernel IR's integer scalar types, shared by the passes and emitters
// that saturate or start a reduction at a limit.
#pragma once

#include <cstdint>
#include <limits>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// The smallest and largest value of an integer type, as the bit patterns Expr::int_value holds
/// (so the u64 maximum is -1; cast to uint64_t for an unsigned constant of the type's width).
struct IntLimits {
  int64_t lo_bits;
  int64_t hi_bits;
};

/// The limits of `type`: bool is {0, 1}; a float type, which has no integer limits, gives {0, 0}.
inline IntLimits LimitsOf(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
      return {0, 1};
    case ScalarType::kU8:
      return {0, 255};
    case ScalarType::kI8:
      return {-128, 127};
    case ScalarType::kI16:
      return {-32768, 32767};
    case ScalarType::kU16:
      return {0, 65535};
    case ScalarType::kI32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case ScalarType::kU32:
      return {0, std::numeric_limits<uint32_t>::max()};
    case ScalarType::kI64:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case ScalarType::kU64:
      return {0, -1};
    case ScalarType::kF32:
    case ScalarType::kF64:
      break;
  }
  return {0, 0};
}

}  // namespace kiln::codegen
