// Shared helpers of the GEMM and convolution tests: the epilogue in double (std::tanh and std::exp,
// independent of the kernel's polynomial exp) and the error bound results are checked against.
#pragma once

#include <cmath>
#include <limits>
#include <numbers>

#include "codegen/cpu/gemm.h"
#include "ir/dtype.h"

namespace kiln::codegen::cpu::testing {

inline double ReferenceActivation(GemmActivation activation, double v) {
  switch (activation) {
    case GemmActivation::kNone:
      return v;
    case GemmActivation::kRelu:
      return v < 0 ? 0.0 : v;
    case GemmActivation::kGeluTanh: {
      const double sqrt_2_over_pi = std::sqrt(2.0 / std::numbers::pi);
      const double z = sqrt_2_over_pi * (v + 0.044715 * v * v * v);
      // 0.5 v (1 + tanh z). For z < 0, 1 + tanh z cancels (it is 1 - 1 in double below z = -19),
      // so there it is computed as 2 / (1 + exp(-2 z)), the same quantity.
      return z >= 0 ? 0.5 * v * (1.0 + std::tanh(z)) : v / (1.0 + std::exp(-2.0 * z));
    }
    case GemmActivation::kSilu:
      return v / (1.0 + std::exp(-v));
    case GemmActivation::kSigmoid:
      return 1.0 / (1.0 + std::exp(-v));
  }
  return v;
}

/// The largest slope of the activation: how much an error in its input can grow.
inline double ActivationSlope(GemmActivation activation) {
  switch (activation) {
    case GemmActivation::kSigmoid:
      return 0.25;
    case GemmActivation::kGeluTanh:
    case GemmActivation::kSilu:
      return 1.2;  // both peak just below 1.13 / 1.1
    default:
      return 1.0;
  }
}

inline double Epsilon(ir::DType dtype) {
  return dtype == ir::DType::kF64 ? std::numeric_limits<double>::epsilon()
                                  : std::numeric_limits<float>::epsilon();
}

/// The error allowed for one output element.
///   abs_dot: sum over k of |alpha a_ik b_kj| (the worst-case rounding of any summation order of
///            k products is (k + 2) eps times it);
///   abs_added: |beta c| + |bias| + |residual added before the activation|;
///   abs_after: |residual added after the activation|; expected: the reference output.
/// The activation's own approximation error is a few ulp of its result, plus an absolute
/// eps-sized term for results near 0 (sigmoid of a large negative number).
inline double ErrorBound(ir::DType dtype, GemmActivation activation, int64_t k, double abs_dot,
                         double abs_added, double abs_after, double expected) {
  const double eps = Epsilon(dtype);
  const double before = (static_cast<double>(k) + 4) * eps * abs_dot + 4 * eps * abs_added;
  return ActivationSlope(activation) * before +
         16 * eps * (std::abs(expected) + abs_after + 1.0) * (activation != GemmActivation::kNone) +
         4 * eps * (std::abs(expected) + abs_after) + 1e-300;
}

}  // namespace kiln::codegen::cpu::testing
