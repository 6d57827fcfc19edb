// Kernel IR → CUDA C++ source for NVRTC (the CUDA dialect of the shared C-style renderer,
// codegen/c_render.h), the CUDA twin of codegen/vulkan/glsl.h:
//
//   typedef long long int64_t; ...                          (no headers: NVRTC has none here)
//   __shared__ float red_v3[8];                             (cooperative reductions)
//   extern "C" __global__ void __launch_bounds__(256) kiln_kernel(const float* a0, float* a1) {
//     int64_t gid = (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * 256ll + threadIdx.x;
//     if (gid < EXTENT) { <body> }
//   }
//
// Parameter i is kernel arg i, a pointer to its elements: f32 float, f64 double, i32 int, i64
// int64_t, u8/bool uint8_t, f16/bf16 uint16_t (converted by integer bit operations, exact,
// ties to even, as on every backend). One thread per gid in blocks of CudaKernel::block_size, or
// for long reductions one block per gid (RenderOptions::cooperative) whose partial results combine
// within each warp with __shfl_xor_sync, then across the block's warps through shared memory.
// f32 exp/log/tanh/erf go through ExpandMath's polynomials (codegen/math_expand.h) as on the CPU
// and Vulkan; other math is CUDA's (sqrt and division correctly rounded: NVRTC's --prec-sqrt and
// --prec-div). Shapes are static: extents are constants in the source.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"

namespace kiln::codegen::cuda {

/// What the generated source may use.
struct CudaTarget {
  /// Combine cooperative reductions within warps (__shfl_xor_sync) before shared memory; false
  /// keeps the shared-memory tree (tests compare both).
  bool warp_shuffles = true;
  /// Threads per block of thread-per-gid kernels, and of cooperative ones (a power of two, at
  /// least the warp size).
  int block_size = 256;
  /// The device's grid limits (blocks per dimension).
  int64_t max_grid_x = (int64_t{1} << 31) - 1;
  int64_t max_grid_y = 65535;
};

/// One kernel as CUDA C.
struct CudaKernel {
  std::string source;
  /// The __global__ function's name in the source (and so in its PTX).
  std::string entry = "kiln_kernel";
  int block_size = 256;
  /// Blocks to launch (x, y, z).
  std::array<uint32_t, 3> grid = {1, 1, 1};
  bool cooperative = false;
};

/// Renders `kernel`. Fails with ResourceExhausted when the parallel extent exceeds the grid
/// limits, or Unimplemented for an op the dialect cannot express (named by the renderer).
absl::StatusOr<CudaKernel> KernelToCuda(const Kernel& kernel, const CudaTarget& target = {});

/// The typedefs and helper overloads every generated source starts with (the matmul templates
/// use them too).
const std::string& CudaPrelude();

}  // namespace kiln::codegen::cuda
