// The largest finite value of each float dtype, for code that saturates to a dtype's range or
// tells finite values from inf and NaN (|x| <= it is false for both). A header of its own so that
// base/dtype.h, which every file includes, does not change for it.
#pragma once

#include <limits>

#include "base/dtype.h"

namespace kiln::base {

/// f16 65504, bf16 (2 - 2^-7) * 2^127, f32 and f64 their numeric_limits max; for a dtype that is
/// not a float, f64's.
inline double LargestFinite(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 65504.0;
    case DType::kBF16:
      return static_cast<double>(BFloat16ToFloat(0x7f7f));
    case DType::kF32:
      return std::numeric_limits<float>::max();
    default:
      return std::numeric_limits<double>::max();
  }
}

}  // namespace kiln::base
