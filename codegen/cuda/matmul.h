// The CUDA matmul templates: C[b] = A[b] B[b], tiled through shared memory.
//  - kFma: f32 and f64 with fma in k order per element, 64 x 64 tiles (the CUDA C twin of the
//    Vulkan backend's GLSL tiled matmul, codegen/vulkan/graph_compiler.cc).
//  - kMmaF16 / kMmaBf16: tensor cores (`mma.sync.m16n8k16`, sm_80 and later), f16/bf16 operands
//    with f32 accumulation, the result rounded once to the output type.
//  - kMmaTf32: f32 operands rounded to tf32 (`mma.sync.m16n8k8.tf32`) with f32 accumulation, only
//    when the user allows it (AllowTf32 in graph_compiler.h, like PyTorch's
//    `torch.backends.cuda.matmul.allow_tf32`): 10 mantissa bits instead of 23.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/dtype.h"

namespace kiln::codegen::cuda {

enum class MatmulKernel { kFma, kMmaF16, kMmaBf16, kMmaTf32 };

/// "fma", "mma.f16", "mma.bf16", "mma.tf32" (dumps, tests).
const char* MatmulKernelName(MatmulKernel kernel);

/// The template for a `dtype` matmul on compute capability `compute_capability` (80 for sm_80):
/// tensor cores for f16/bf16 from sm_80, and for f32 when `allow_tf32` (also sm_80); fma for f32
/// and f64 otherwise. nullopt when no template fits (integers, f16/bf16 before sm_80: the direct
/// loop nest runs those).
std::optional<MatmulKernel> ChooseMatmulKernel(ir::DType dtype, int compute_capability,
                                               bool allow_tf32);

/// 90 for "sm_90" or "sm_90a"; 0 when `arch` is not of that form.
int ComputeCapability(const std::string& arch);

/// A matmul of `batch` pairs of an M x K matrix A and a K x N matrix B into dense C. Element
/// (i, k) of A[b] is at b * M * K + i * a_row + k * a_col (so a transposed operand is read in
/// place with swapped strides; one of the two strides is 1), likewise B; C[b] is dense,
/// row-major, of the operands' dtype.
struct MatmulShape {
  ir::DType dtype = ir::DType::kF32;
  MatmulKernel kernel = MatmulKernel::kFma;
  int64_t batch = 1, m = 0, k = 0, n = 0;
  int64_t a_row = 0, a_col = 1, b_row = 0, b_col = 1;
};

/// Whether `shape` fits its template: the kernel matches the dtype, element offsets fit 32 bits,
/// and the grid fits (at most 65535 batches and tile rows).
bool MatmulFits(const MatmulShape& shape);

/// The launch of a MatmulCuda kernel: a grid of C tiles (x: columns, y: rows, z: batch) and the
/// block's threads.
struct MatmulLaunch {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
};
MatmulLaunch MatmulLaunchFor(const MatmulShape& shape);

/// The CUDA C source of the matmul, entry point `kiln_matmul(const T* a, const T* b, T* c)`.
std::string MatmulCuda(const std::string& name, const MatmulShape& shape);

}  // namespace kiln::codegen::cuda
