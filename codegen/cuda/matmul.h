// The CUDA matmul template: C[b] = A[b] B[b] for f32 and f64, tiled through shared memory (the
// CUDA C twin of the Vulkan backend's GLSL tiled matmul, codegen/vulkan/graph_compiler.cc).
#pragma once

#include <cstdint>
#include <string>

#include "ir/dtype.h"

namespace kiln::codegen::cuda {

/// A matmul of `batch` pairs of an M x K matrix A and a K x N matrix B into dense C. Element
/// (i, k) of A[b] is at b * M * K + i * a_row + k * a_col (so a transposed operand is read in
/// place with swapped strides), likewise B; C[b] is dense, row-major.
struct MatmulShape {
  ir::DType dtype = ir::DType::kF32;  // f32 or f64
  int64_t batch = 1, m = 0, k = 0, n = 0;
  int64_t a_row = 0, a_col = 1, b_row = 0, b_col = 1;
};

/// The launch of a MatmulCuda kernel: blocks of 16 x 16 threads, each computing a 64 x 64 tile
/// of C (4 x 4 per thread), one grid z per batch.
constexpr int kMatmulTile = 64;
constexpr int kMatmulThreads = 16;

/// Whether `shape` fits the template (f32/f64, 32-bit element offsets, at most 65535 batches).
bool MatmulFits(const MatmulShape& shape);

/// The CUDA C source of the matmul, entry point `kiln_matmul(const T* a, const T* b, T* c)`.
/// Products accumulate with fma in k order per element (like the GLSL template).
std::string MatmulCuda(const std::string& name, const MatmulShape& shape);

}  // namespace kiln::codegen::cuda
