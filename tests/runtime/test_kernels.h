// Hand-written kernels with the CPU kernel ABI (runtime::KernelFn), standing in for JIT-compiled
// ones in the runtime's tests.
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/executable.h"

namespace kiln::runtime::testing {

// Set by the kernels below when a buffer argument breaks the ABI's 64-byte alignment.
inline std::atomic<int> misaligned_arguments{0};

inline void CheckAligned(const void* pointer) {
  if (reinterpret_cast<uintptr_t>(pointer) % kBufferAlignment != 0) {
    misaligned_arguments.fetch_add(1);
  }
}

// out[i] = in[i] * *scale. args: in (f32), out (f32), scale (f32 scalar).
inline void ScaleKernel(void* const* args, int64_t begin, int64_t end) {
  const auto* in = static_cast<const float*>(args[0]);
  auto* out = static_cast<float*>(args[1]);
  const float scale = *static_cast<const float*>(args[2]);
  CheckAligned(in);
  CheckAligned(out);
  for (int64_t i = begin; i < end; ++i) out[i] = in[i] * scale;
}

// out[i] = a[i] + b[i]. args: a, b, out (f32).
inline void AddKernel(void* const* args, int64_t begin, int64_t end) {
  const auto* a = static_cast<const float*>(args[0]);
  const auto* b = static_cast<const float*>(args[1]);
  auto* out = static_cast<float*>(args[2]);
  CheckAligned(a);
  CheckAligned(b);
  CheckAligned(out);
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

// out[i] = data[index[i]] with data of *size elements; an index outside [0, size) stores
// kKernelIndexOutOfRange into the error flag and 0 into out[i].
// args: data (f32), index (i64), out (f32), size (i64 constant), error flag (KernelErrorFlag).
inline void GatherKernel(void* const* args, int64_t begin, int64_t end) {
  const auto* data = static_cast<const float*>(args[0]);
  const auto* index = static_cast<const int64_t*>(args[1]);
  auto* out = static_cast<float*>(args[2]);
  const int64_t size = *static_cast<const int64_t*>(args[3]);
  auto* error = static_cast<int64_t*>(args[4]);
  for (int64_t i = begin; i < end; ++i) {
    if (index[i] < 0 || index[i] >= size) {
      std::atomic_ref<int64_t>(error[0]).store(kKernelIndexOutOfRange, std::memory_order_relaxed);
      std::atomic_ref<int64_t>(error[1]).store(index[i], std::memory_order_relaxed);
      out[i] = 0.0f;
    } else {
      out[i] = data[index[i]];
    }
  }
}

}  // namespace kiln::runtime::testing
