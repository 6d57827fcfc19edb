// bf16 and f16 GEMMs and convolutions: stored narrow, computed in f32. The operands are widened
// into f32 copies (a strided operand is gathered, a broadcast batch dimension stays broadcast),
// the f32 driver runs with its micro-kernels and epilogue, and the f32 result is rounded to the
// output's dtype once, to nearest even. The copies cost O(MK + KN + MN) next to the product's
// O(MNK), and the result is exactly the f32 GEMM of the widened operands, rounded: on every CPU
// level, since widening is exact and the f32 driver is the one every level runs. f16 converts
// with F16C where the process may use it; bf16 is a shift one way and integer rounding the
// other, which vectorizes on any x86-64.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::runtime::cpu::gemm_internal {
namespace {

using base::DType;

#if defined(__x86_64__)
bool HostHasF16c() {
  static const bool has = CpuAllows("f16c") && CpuAllows("avx");
  return has;
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const uint16_t* src, float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = base::HalfToFloat(src[i]);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* src, uint16_t* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = base::FloatToHalf(src[i]);
}
#endif

// n contiguous narrow elements to f32.
void Widen(DType dtype, const uint16_t* src, float* dst, int64_t n) {
  if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(&dst[i], &bits, sizeof(float));
    }
    return;
  }
#if defined(__x86_64__)
  if (HostHasF16c()) return HalfToFloatF16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = base::HalfToFloat(src[i]);
}

// n contiguous f32 values rounded to the narrow dtype (nearest even; NaN stays NaN).
void Narrow(DType dtype, const float* src, uint16_t* dst, int64_t n) {
  if (dtype == DType::kBF16) {
    // base::FloatToBFloat16, branch-free so that the loop vectorizes.
    for (int64_t i = 0; i < n; ++i) {
      uint32_t f;
      std::memcpy(&f, &src[i], sizeof(f));
      const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
      const uint32_t quiet_nan = (f >> 16) | 0x40u;
      dst[i] = static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    }
    return;
  }
#if defined(__x86_64__)
  if (HostHasF16c()) return FloatToHalfF16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = base::FloatToHalf(src[i]);
}

// The source offsets of the batch entries of `batch` that `strides` tells apart, in dense order:
// a dimension of stride 0 (broadcast) contributes one entry.
std::vector<int64_t> DistinctBatchOffsets(const std::vector<int64_t>& batch,
                                          const std::vector<int64_t>& strides) {
  std::vector<int64_t> offsets = {0};
  for (size_t d = 0; d < batch.size(); ++d) {
    if (strides[d] == 0) continue;
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(batch[d]));
    for (int64_t base : offsets) {
      for (int64_t i = 0; i < batch[d]; ++i) next.push_back(base + i * strides[d]);
    }
    offsets = std::move(next);
  }
  return offsets;
}

// Runs fn(begin, end) over [0, rows) on `pool` when the rows hold enough elements to share.
void ForRows(runtime::ThreadPool* pool, int64_t rows, int64_t cols,
             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  constexpr int64_t kElementsPerChunk = 16 * 1024;
  if (pool == nullptr || rows * cols <= kElementsPerChunk) return fn(0, rows);
  pool->ParallelFor(rows, std::max<int64_t>(kElementsPerChunk / std::max<int64_t>(cols, 1), 1), fn);
}

// The f32 copy of a strided narrow matrix view (rows x cols per batch entry): dense rows, the
// batch strides of `view` with the broadcast ones kept 0.
struct WideMatrix {
  std::unique_ptr<float[]> data;
  MatrixView view;
};

// Uninitialized: every element is written before it is read.
std::unique_ptr<float[]> Floats(int64_t n) {
  return std::unique_ptr<float[]>(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]);
}

WideMatrix WidenMatrix(DType dtype, const MatrixView& view, const std::vector<int64_t>& batch,
                       int64_t rows, int64_t cols, runtime::ThreadPool* pool) {
  WideMatrix wide;
  const std::vector<int64_t> strides =
      view.batch_strides.empty() ? std::vector<int64_t>(batch.size(), 0) : view.batch_strides;
  std::vector<int64_t> dense_strides(batch.size(), 0);
  int64_t entries = 1;
  for (size_t d = batch.size(); d-- > 0;) {
    if (strides[d] == 0) continue;
    dense_strides[d] = entries * rows * cols;
    entries *= batch[d];
  }
  const std::vector<int64_t> offsets = DistinctBatchOffsets(batch, strides);
  wide.data = Floats(entries * rows * cols);
  const auto* src = static_cast<const uint16_t*>(view.data);
  float* out = wide.data.get();
  ForRows(pool, entries * rows, cols, [&](int64_t begin, int64_t end) {
    std::vector<uint16_t> gathered(view.col_stride == 1 ? 0 : static_cast<size_t>(cols));
    for (int64_t i = begin; i < end; ++i) {
      const uint16_t* in =
          src + offsets[static_cast<size_t>(i / rows)] + (i % rows) * view.row_stride;
      if (view.col_stride != 1) {
        for (int64_t c = 0; c < cols; ++c) gathered[c] = in[c * view.col_stride];
        in = gathered.data();
      }
      Widen(dtype, in, out + i * cols, cols);
    }
  });
  wide.view = MatrixView{wide.data.get(), cols, 1,
                         view.batch_strides.empty() ? std::vector<int64_t>{} : dense_strides};
  return wide;
}

std::unique_ptr<float[]> WidenDense(DType dtype, const void* data, int64_t n,
                                    runtime::ThreadPool* pool = nullptr) {
  std::unique_ptr<float[]> out = Floats(n);
  const auto* src = static_cast<const uint16_t*>(data);
  ForRows(pool, n, 1, [&](int64_t begin, int64_t end) {
    Widen(dtype, src + begin, out.get() + begin, end - begin);
  });
  return out;
}

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

bool IsHalf(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

absl::Status ExecuteHalfGemm(const GemmParams& params, const MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool) {
  const DType dtype = params.dtype;
  bool malformed = params.m < 0 || params.n < 0 || params.k < 0;
  for (int64_t d : params.batch) malformed = malformed || d < 0;
  for (const MatrixView* view : {&params.a, &params.b, &params.c, &params.epilogue.residual}) {
    malformed = malformed ||
                (!view->batch_strides.empty() && view->batch_strides.size() != params.batch.size());
  }
  if (malformed) {
    // The f32 driver checks the shapes before it reads anything and names the bad field.
    GemmParams wide = params;
    wide.dtype = DType::kF32;
    return ExecuteGemm(wide, kernels, pool);
  }
  for (size_t d = 0; d < params.c.batch_strides.size(); ++d) {
    if (params.c.batch_strides[d] == 0 && params.batch[d] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("gemm: c.batch_strides[", d, "] is 0: every batch entry needs its own C"));
    }
  }
  if (Count(params.batch) == 0 || params.m == 0 || params.n == 0) return absl::OkStatus();
  if (params.c.data == nullptr || params.c.col_stride != 1 ||
      (params.k > 0 && (params.a.data == nullptr || params.b.data == nullptr))) {
    GemmParams wide = params;
    wide.dtype = DType::kF32;
    return ExecuteGemm(wide, kernels, pool);  // its error names the field
  }
  GemmParams wide = params;
  wide.dtype = DType::kF32;
  WideMatrix a, b, residual;
  if (params.k > 0) {
    a = WidenMatrix(dtype, params.a, params.batch, params.m, params.k, pool);
    b = WidenMatrix(dtype, params.b, params.batch, params.k, params.n, pool);
    wide.a = a.view;
    wide.b = b.view;
  }
  // C is written through its own strides; the f32 result is dense with every batch entry.
  std::vector<int64_t> c_strides(params.batch.size(), 0);
  int64_t entries = 1;
  for (size_t d = params.batch.size(); d-- > 0;) {
    c_strides[d] = entries * params.m * params.n;
    entries *= params.batch[d];
  }
  std::unique_ptr<float[]> c;
  if (params.beta != 0.0) {
    // Every batch entry of C is distinct (an output), so the copy is dense like `c` would be.
    c = WidenMatrix(dtype, params.c, params.batch, params.m, params.n, pool).data;
  } else {
    c = Floats(entries * params.m * params.n);
  }
  wide.c = MatrixView{c.get(), params.n, 1, c_strides};
  std::unique_ptr<float[]> column_bias, row_bias;
  if (params.epilogue.column_bias != nullptr) {
    column_bias = WidenDense(dtype, params.epilogue.column_bias, params.n);
    wide.epilogue.column_bias = column_bias.get();
  }
  if (params.epilogue.row_bias != nullptr) {
    row_bias = WidenDense(dtype, params.epilogue.row_bias, params.m);
    wide.epilogue.row_bias = row_bias.get();
  }
  if (params.epilogue.residual.data != nullptr) {
    residual = WidenMatrix(dtype, params.epilogue.residual, params.batch, params.m, params.n, pool);
    wide.epilogue.residual = residual.view;
  }
  if (absl::Status s = ExecuteGemm(wide, kernels, pool); !s.ok()) return s;
  auto* out = static_cast<uint16_t*>(const_cast<void*>(params.c.data));
  const std::vector<int64_t> c_offsets = DistinctBatchOffsets(
      params.batch, params.c.batch_strides.empty() ? c_strides : params.c.batch_strides);
  ForRows(pool, entries * params.m, params.n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Narrow(
          dtype, c.get() + i * params.n,
          out + c_offsets[static_cast<size_t>(i / params.m)] + (i % params.m) * params.c.row_stride,
          params.n);
    }
  });
  return absl::OkStatus();
}

absl::Status ExecuteHalfConv(const ConvParams& params, const MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool) {
  const DType dtype = params.dtype;
  ConvParams wide = params;
  wide.dtype = DType::kF32;
  absl::StatusOr<Dims> output_shape = ConvOutputShape(params);
  if (!output_shape.ok()) return output_shape.status();
  const int64_t output_elements = Count(*output_shape);
  if (output_elements <= 0) return absl::OkStatus();
  if (params.output == nullptr || params.input == nullptr || params.weight == nullptr) {
    return ExecuteConv(wide, kernels, pool);  // its error names the operand
  }
  const std::unique_ptr<float[]> input =
      WidenDense(dtype, params.input, Count(params.input_shape), pool);
  const std::unique_ptr<float[]> weight =
      WidenDense(dtype, params.weight, Count(params.weight_shape), pool);
  const std::unique_ptr<float[]> output = Floats(output_elements);
  std::unique_ptr<float[]> bias, residual;
  wide.input = input.get();
  wide.weight = weight.get();
  wide.output = output.get();
  if (params.bias != nullptr) {
    bias = WidenDense(dtype, params.bias, params.weight_shape.at(0));
    wide.bias = bias.get();
  }
  if (params.residual != nullptr) {
    residual = WidenDense(dtype, params.residual, output_elements, pool);
    wide.residual = residual.get();
  }
  if (absl::Status s = ExecuteConv(wide, kernels, pool); !s.ok()) return s;
  auto* out = static_cast<uint16_t*>(params.output);
  ForRows(pool, output_elements, 1, [&](int64_t begin, int64_t end) {
    Narrow(dtype, output.get() + begin, out + begin, end - begin);
  });
  return absl::OkStatus();
}

}  // namespace kiln::runtime::cpu::gemm_internal
