// Helpers shared by the frontend tests: the backend under test, random inputs and independent
// reference implementations (plain loops over std::vector) of broadcasting.
#pragma once

#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::testing {

// The backend under test. The conformance suite (frontend_backend_test) is compiled with
// -DKILN_TEST_BACKEND=Any, so one binary runs on whichever device KILN_DEVICE names: the
// interpreter in tests/frontend, the CPU and Vulkan backends in tests/cpu and tests/vulkan.
// The other frontend tests use the reference backend.
#ifndef KILN_TEST_BACKEND
#define KILN_TEST_BACKEND Reference
#endif
using B = kiln::KILN_TEST_BACKEND;
// Short names (also keep commas out of gtest macro arguments).
template <int R>
using TF = Tensor<B, R, Float>;
template <int R>
using TI = Tensor<B, R, Int>;
template <int R>
using TB = Tensor<B, R, Bool>;
using Shape = std::vector<int64_t>;

inline int64_t Count(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// Row-major multi-index of a linear index.
inline std::vector<int64_t> Unravel(int64_t index, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    idx[i] = index % shape[i];
    index /= shape[i];
  }
  return idx;
}

/// Linear index of a multi-index.
inline int64_t Ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t index = 0;
  for (size_t i = 0; i < shape.size(); ++i) index = index * shape[i] + idx[i];
  return index;
}

/// The element of an input of `in_shape` that numpy broadcasting reads for output element
/// `out_index` of `out_shape` (shapes right-aligned, size-1 dims repeat).
inline int64_t BroadcastSource(int64_t out_index, const Shape& out_shape, const Shape& in_shape) {
  const std::vector<int64_t> out_idx = Unravel(out_index, out_shape);
  const size_t offset = out_shape.size() - in_shape.size();
  std::vector<int64_t> in_idx(in_shape.size());
  for (size_t i = 0; i < in_shape.size(); ++i) {
    in_idx[i] = in_shape[i] == 1 ? 0 : out_idx[i + offset];
  }
  return Ravel(in_idx, in_shape);
}

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float low = -2.f,
                                       float high = 2.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<int64_t> RandomInts(size_t n, uint32_t seed, int64_t low, int64_t high) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(low, high);
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = dist(gen);
  return v;
}

/// Element-wise |actual - expected| <= atol + rtol * |expected| (NaNs must match).
template <class T, class U>
void ExpectAllClose(const std::vector<T>& actual, const std::vector<U>& expected,
                    double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    const double e = static_cast<double>(expected[i]);
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << "element " << i << ": " << a << " vs nan";
    } else if (std::isinf(e)) {
      EXPECT_EQ(a, e) << "element " << i;
    } else {
      EXPECT_NEAR(a, e, atol + rtol * std::fabs(e)) << "element " << i;
    }
  }
}

}  // namespace kiln::testing
