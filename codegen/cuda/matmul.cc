#include "codegen/cuda/matmul.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_c.h"

namespace kiln::codegen::cuda {

bool MatmulFits(const MatmulShape& s) {
  if (s.dtype != ir::DType::kF32 && s.dtype != ir::DType::kF64) return false;
  const int64_t limit = int64_t{1} << 31;
  return s.batch >= 1 && s.batch <= 65535 && s.batch * s.m * s.k < limit &&
         s.batch * s.k * s.n < limit && s.batch * s.m * s.n < limit;
}

// Per step of 16 along K a block stages a 64 x 16 tile of A and a 16 x 64 tile of B in shared
// memory (each thread loads 4 elements of each), then every thread accumulates a 4 x 4 block of
// C in registers (rows ty + 16 i, columns tx + 16 j): each pair of shared reads feeds 4 fmas.
std::string MatmulCuda(const std::string& name, const MatmulShape& s) {
  const std::string t = s.dtype == ir::DType::kF64 ? "double" : "float";
  const std::string zero = s.dtype == ir::DType::kF64 ? "0.0" : "0.0f";
  return absl::StrCat(
      "// kiln matmul ", name, ": ", s.batch, " x [", s.m, " x ", s.k, "] x [", s.k, " x ", s.n,
      "]\n", CudaPrelude(),
      "extern \"C\" __global__ void __launch_bounds__(256) kiln_matmul(const ", t, "* a, const ", t,
      "* b, ", t, "* c) {\n",
      // [k][row], padded against bank conflicts.
      "  __shared__ ", t, " tile_a[16][65];\n", "  __shared__ ", t, " tile_b[16][65];\n",
      "  const uint32_t M = ", s.m, "u, K = ", s.k, "u, N = ", s.n, "u;\n",
      "  const uint32_t tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16u + tx;\n",
      "  const uint32_t row0 = blockIdx.y * 64u, col0 = blockIdx.x * 64u, batch = blockIdx.z;\n",
      "  const uint32_t a_base = batch * (M * K), b_base = batch * (K * N);\n", "  ", t,
      " acc[4][4];\n", "#pragma unroll\n", "  for (int i = 0; i < 4; ++i)\n", "#pragma unroll\n",
      "    for (int j = 0; j < 4; ++j) acc[i][j] = ", zero, ";\n",
      "  for (uint32_t k0 = 0u; k0 < K; k0 += 16u) {\n",
      "    for (uint32_t e = tid; e < 1024u; e += 256u) {\n",
      "      uint32_t r = e >> 4u, ka = k0 + (e & 15u);\n",
      "      tile_a[e & 15u][r] = (row0 + r < M && ka < K) ? a[a_base + (row0 + r) * ", s.a_row,
      "u + ka * ", s.a_col, "u] : ", zero, ";\n",
      "      uint32_t kb = k0 + (e >> 6u), col = e & 63u;\n",
      "      tile_b[e >> 6u][col] = (kb < K && col0 + col < N) ? b[b_base + kb * ", s.b_row,
      "u + (col0 + col) * ", s.b_col, "u] : ", zero, ";\n", "    }\n", "    __syncthreads();\n",
      "#pragma unroll\n", "    for (int kk = 0; kk < 16; ++kk) {\n", "      ", t,
      " av[4], bv[4];\n", "#pragma unroll\n",
      "      for (int i = 0; i < 4; ++i) av[i] = tile_a[kk][ty + 16u * i];\n", "#pragma unroll\n",
      "      for (int j = 0; j < 4; ++j) bv[j] = tile_b[kk][tx + 16u * j];\n", "#pragma unroll\n",
      "      for (int i = 0; i < 4; ++i)\n", "#pragma unroll\n",
      "        for (int j = 0; j < 4; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);\n", "    }\n",
      "    __syncthreads();\n", "  }\n", "#pragma unroll\n", "  for (int i = 0; i < 4; ++i) {\n",
      "    uint32_t row = row0 + ty + 16u * i;\n", "#pragma unroll\n",
      "    for (int j = 0; j < 4; ++j) {\n", "      uint32_t col = col0 + tx + 16u * j;\n",
      "      if (row < M && col < N) c[batch * (M * N) + row * N + col] = acc[i][j];\n", "    }\n",
      "  }\n", "}\n");
}

}  // namespace kiln::codegen::cuda
