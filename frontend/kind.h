// Tensor kinds: the compile-time element category of Tensor<B, R, K>. A kind admits several
// dtypes (a Float tensor may hold f32, f64, f16 or bf16); binary ops between dtypes of one kind
// promote to the wider (f16/bf16 -> f32 -> f64, u8 -> i32 -> i64), like torch. Crossing kinds is
// explicit: to_float(), to_int(), to_bool().
#pragma once

#include <cstdint>
#include <type_traits>

#include "ir/dtype.h"

namespace kiln {

enum class KindId { kFloat, kInt, kBool };

/// Floating point: f32 (default), f64, f16, bf16.
struct Float {
  static constexpr KindId kId = KindId::kFloat;
  static constexpr ir::DType kDefaultDType = ir::DType::kF32;
  static constexpr const char* kName = "Float";
  /// The element type of to_vector() by default, and of from_data's initializer lists.
  using Native = float;
  using Element = double;
  /// What item() returns (exact for every Float dtype).
  using Scalar = double;
};

/// Integers: i64 (default), i32, u8.
struct Int {
  static constexpr KindId kId = KindId::kInt;
  static constexpr ir::DType kDefaultDType = ir::DType::kI64;
  static constexpr const char* kName = "Int";
  using Native = int64_t;
  using Element = int64_t;
  using Scalar = int64_t;
};

/// Booleans: bool.
struct Bool {
  static constexpr KindId kId = KindId::kBool;
  static constexpr ir::DType kDefaultDType = ir::DType::kBool;
  static constexpr const char* kName = "Bool";
  using Native = bool;
  using Element = bool;
  using Scalar = bool;
};

template <class K>
inline constexpr bool kIsKind =
    std::is_same_v<K, Float> || std::is_same_v<K, Int> || std::is_same_v<K, Bool>;

/// True when `dtype` belongs to kind `kind`.
constexpr bool DTypeInKind(ir::DType dtype, KindId kind) {
  switch (kind) {
    case KindId::kFloat:
      return ir::IsFloat(dtype);
    case KindId::kInt:
      return ir::IsInteger(dtype);
    case KindId::kBool:
      return ir::IsBool(dtype);
  }
  return false;
}

}  // namespace kiln
