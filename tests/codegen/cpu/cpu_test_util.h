// Helpers shared by the CPU codegen tests: 64-byte aligned kernel buffers (as the runtime
// allocates them), random fills per dtype, running a compiled kernel in chunks, and element
// comparisons that treat every NaN as equal.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "codegen/kernel_eval.h"
#include "codegen/kernel_ir.h"
#include "ir/dtype.h"
#include "runtime/executable.h"

namespace kiln::codegen::cpu::testing {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

/// One buffer per kernel arg, 64-byte aligned and zeroed.
class KernelBuffers {
 public:
  explicit KernelBuffers(const Kernel& kernel) : kernel_(&kernel) {
    for (const KernelArg& arg : kernel.args) {
      const size_t bytes = static_cast<size_t>(arg.num_elements * ir::DTypeSize(arg.dtype));
      const size_t rounded = (bytes + 63) / 64 * 64 + 64;
      void* p = std::aligned_alloc(64, rounded);
      std::memset(p, 0, rounded);
      storage_.emplace_back(p);
      pointers_.push_back(p);
    }
  }

  KernelBuffers Clone() const {
    KernelBuffers copy(*kernel_);
    for (size_t i = 0; i < pointers_.size(); ++i) {
      std::memcpy(copy.pointers_[i], pointers_[i], bytes(i));
    }
    return copy;
  }

  size_t bytes(size_t arg) const {
    const KernelArg& a = kernel_->args[arg];
    return static_cast<size_t>(a.num_elements * ir::DTypeSize(a.dtype));
  }
  void* const* args() const { return pointers_.data(); }
  void* data(size_t arg) const { return pointers_[arg]; }
  template <typename T>
  T* as(size_t arg) const {
    return static_cast<T*>(pointers_[arg]);
  }

 private:
  const Kernel* kernel_;
  std::vector<std::unique_ptr<void, AlignedFree>> storage_;
  std::vector<void*> pointers_;
};

template <class T>
double LoadAsDouble(const std::byte* bytes, int64_t i) {
  T v;
  std::memcpy(&v, bytes + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return static_cast<double>(v);
}

template <class T>
void StoreValue(std::byte* bytes, int64_t i, T v) {
  std::memcpy(bytes + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

/// Element i of a buffer of `dtype` as a double (f16/bf16 decoded, bool 0/1).
inline double ElementAsDouble(const void* data, ir::DType dtype, int64_t i) {
  const auto* bytes = static_cast<const std::byte*>(data);
  switch (dtype) {
    case ir::DType::kF32: {
      float v;
      std::memcpy(&v, bytes + i * 4, 4);
      return v;
    }
    case ir::DType::kF64: {
      double v;
      std::memcpy(&v, bytes + i * 8, 8);
      return v;
    }
    case ir::DType::kF16:
    case ir::DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, bytes + i * 2, 2);
      return dtype == ir::DType::kF16 ? ir::HalfToFloat(v) : ir::BFloat16ToFloat(v);
    }
    case ir::DType::kI32: {
      int32_t v;
      std::memcpy(&v, bytes + i * 4, 4);
      return v;
    }
    case ir::DType::kI64: {
      int64_t v;
      std::memcpy(&v, bytes + i * 8, 8);
      return static_cast<double>(v);
    }
    case ir::DType::kU8:
    case ir::DType::kBool:
      return static_cast<double>(static_cast<uint8_t>(bytes[i]));
    case ir::DType::kI8:
      return static_cast<double>(static_cast<int8_t>(bytes[i]));
    case ir::DType::kI16:
      return LoadAsDouble<int16_t>(bytes, i);
    case ir::DType::kU16:
      return LoadAsDouble<uint16_t>(bytes, i);
    case ir::DType::kU32:
      return LoadAsDouble<uint32_t>(bytes, i);
    case ir::DType::kU64:
      return LoadAsDouble<uint64_t>(bytes, i);
  }
  return 0;
}

/// Random values of integer type T for FillRandom: mostly small ones, with 0, ±1, shift widths
/// and the type's limits.
template <class T>
T RandomInteger(int choice, std::mt19937_64& rng) {
  constexpr int bits = static_cast<int>(sizeof(T)) * 8;
  const T limits[] = {T(0),
                      T(1),
                      static_cast<T>(-1),
                      T(2),
                      T(7),
                      std::numeric_limits<T>::min(),
                      std::numeric_limits<T>::max(),
                      T(bits - 1),
                      T(bits),
                      T(100)};
  if (choice >= 8) return limits[rng() % std::size(limits)];
  const int64_t small = static_cast<int64_t>(rng() % 2001) - 1000;
  return static_cast<T>(std::is_signed_v<T> ? small : (small < 0 ? -small : small));
}

/// Fills `data` (n elements of `dtype`) with random values mixed with the special values of the
/// type (±0, ±inf, NaN, subnormals; 0, ±1, the limits for integers).
inline void FillRandom(void* data, ir::DType dtype, int64_t n, std::mt19937_64& rng) {
  auto* bytes = static_cast<std::byte*>(data);
  std::uniform_real_distribution<double> real(-8.0, 8.0);
  std::uniform_int_distribution<int> pick(0, 15);
  const double specials[] = {0.0,
                             -0.0,
                             1.0,
                             -1.0,
                             0.5,
                             2.5,
                             -2.5,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             1e-40,
                             -3e38,
                             65504.0,
                             1e6};
  for (int64_t i = 0; i < n; ++i) {
    const int choice = pick(rng);
    const double value = choice < 14 && choice >= 8 ? specials[rng() % std::size(specials)]
                                                    : real(rng) * (choice == 15 ? 1000 : 1);
    switch (dtype) {
      case ir::DType::kF32: {
        const float v = static_cast<float>(value);
        std::memcpy(bytes + i * 4, &v, 4);
        break;
      }
      case ir::DType::kF64:
        std::memcpy(bytes + i * 8, &value, 8);
        break;
      case ir::DType::kF16: {
        const uint16_t v = ir::DoubleToHalf(value);
        std::memcpy(bytes + i * 2, &v, 2);
        break;
      }
      case ir::DType::kBF16: {
        const uint16_t v = ir::DoubleToBFloat16(value);
        std::memcpy(bytes + i * 2, &v, 2);
        break;
      }
      case ir::DType::kI32: {
        const int32_t limits[] = {0,
                                  1,
                                  -1,
                                  2,
                                  -2,
                                  7,
                                  -7,
                                  std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int32_t>::max(),
                                  31,
                                  32,
                                  100};
        const int32_t v = choice >= 8 ? limits[rng() % std::size(limits)]
                                      : static_cast<int32_t>(rng() % 2001) - 1000;
        std::memcpy(bytes + i * 4, &v, 4);
        break;
      }
      case ir::DType::kI64: {
        const int64_t limits[] = {0,
                                  1,
                                  -1,
                                  2,
                                  -2,
                                  7,
                                  -7,
                                  std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max(),
                                  63,
                                  64,
                                  1LL << 40};
        const int64_t v = choice >= 8 ? limits[rng() % std::size(limits)]
                                      : static_cast<int64_t>(rng() % 2001) - 1000;
        std::memcpy(bytes + i * 8, &v, 8);
        break;
      }
      case ir::DType::kU8:
        bytes[i] = static_cast<std::byte>(choice >= 12 ? (choice == 12 ? 0 : 255) : rng() % 256);
        break;
      case ir::DType::kBool:
        bytes[i] = static_cast<std::byte>(rng() % 2);
        break;
      case ir::DType::kI8:
        StoreValue(bytes, i, RandomInteger<int8_t>(choice, rng));
        break;
      case ir::DType::kI16:
        StoreValue(bytes, i, RandomInteger<int16_t>(choice, rng));
        break;
      case ir::DType::kU16:
        StoreValue(bytes, i, RandomInteger<uint16_t>(choice, rng));
        break;
      case ir::DType::kU32:
        StoreValue(bytes, i, RandomInteger<uint32_t>(choice, rng));
        break;
      case ir::DType::kU64:
        StoreValue(bytes, i, RandomInteger<uint64_t>(choice, rng));
        break;
    }
  }
}

/// Runs `fn` over [0, extent) in a few uneven chunks, as the runtime's thread pool would.
inline void RunChunked(runtime::KernelFn fn, void* const* args, int64_t extent) {
  const int64_t cuts[] = {0, extent / 3, extent / 3 + 1, extent};
  for (int c = 0; c + 1 < 4; ++c) {
    const int64_t begin = std::min(cuts[c], extent), end = std::min(cuts[c + 1], extent);
    if (begin < end) fn(args, begin, end);
  }
}

/// True when element i of two buffers of `dtype` hold the same value (bitwise, except that any
/// NaN equals any NaN).
inline bool SameElement(const void* a, const void* b, ir::DType dtype, int64_t i) {
  const double x = ElementAsDouble(a, dtype, i), y = ElementAsDouble(b, dtype, i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  const size_t size = static_cast<size_t>(ir::DTypeSize(dtype));
  return std::memcmp(static_cast<const std::byte*>(a) + i * static_cast<int64_t>(size),
                     static_cast<const std::byte*>(b) + i * static_cast<int64_t>(size), size) == 0;
}

/// y[i] = x[i] * a + 0.25 over f32[4096] ("axpb"): vectorises, and contracts to an fma where the
/// target has one, so its assembly shows the vector width and FMA use of the JIT's target.
inline Kernel AxpbKernel() {
  constexpr int64_t n = 4096;
  KernelBuilder b("axpb");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, n, ArgRole::kInput});
  const ArgId a = b.AddArg({"a", ir::DType::kF32, 1, ArgRole::kInput});
  const ArgId out = b.AddArg({"y", ir::DType::kF32, n, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(out, gid,
          b.Binary(ExprOp::kAdd, b.Binary(ExprOp::kMul, b.Load(x, gid), b.Load(a, b.Index(0))),
                   b.Float(ScalarType::kF32, 0.25)));
  return std::move(b).Finish(n);
}

}  // namespace kiln::codegen::cpu::testing
