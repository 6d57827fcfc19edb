#include "codegen/cuda/matmul.h"

#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_c.h"

namespace kiln::codegen::cuda {
namespace {

constexpr int64_t kFmaTile = 64;
constexpr int64_t kMmaTile = 128;

bool IsMma(MatmulKernel kernel) { return kernel != MatmulKernel::kFma; }

// Per step of 16 along K a block stages a 64 x 16 tile of A and a 16 x 64 tile of B in shared
// memory (each thread loads 4 elements of each), then every thread accumulates a 4 x 4 block of
// C in registers (rows ty + 16 i, columns tx + 16 j): each pair of shared reads feeds 4 fmas.
std::string FmaMatmul(const std::string& name, const MatmulShape& s) {
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

// The tensor-core kernel's fixed part; MmaMatmul prepends the shape's constants (M, N, K, the
// operands' strides, vector widths) and the element type's fragment loads and mma.
//
// A block of 8 warps computes a 128 x 128 tile of C: warp w owns rows 64 (w / 4) .. +64 and
// columns 32 (w % 4) .. +32, i.e. 4 x 4 mma tiles of 16 x 8 whose accumulators (4 floats per
// thread each) stay in registers. Per step of 32 along K the block stages A's 128 x 32 tile and
// B's 32 x 128 tile in shared memory, both as [m or n][k] with k contiguous, which is the order
// the mma fragments read (two k-adjacent 16-bit elements are one 32-bit register). Rows are
// padded so that a warp's fragment reads hit 32 distinct banks. The next step's tiles are read
// from global memory into registers while the tensor cores work on this one. Global reads go
// along each operand's contiguous axis, VEC elements at a time where the shape allows.
constexpr char kMmaBody[] = R"cuda(
constexpr uint32_t BM = 128u, BN = 128u, BK = 32u, THREADS = 256u;

template <int W> struct __align__(W * sizeof(elem_t)) Vec { elem_t v[W]; };

// A 128 x 32 operand tile, rows m (or n) by columns k; element (mn, k) of the operand is at
// base[mn * MN_STRIDE + k * K_STRIDE], EXTENT rows in all.
template <uint32_t EXTENT, uint32_t MN_STRIDE, uint32_t K_STRIDE, int W> struct TileStage {
  static constexpr bool k_inner = K_STRIDE == 1u;
  static constexpr uint32_t per_row = (k_inner ? BK : BM) / W;  // vectors per contiguous row
  static constexpr int count = int(BM * BK / W / THREADS);
  Vec<W> regs[count];

  // The tile coordinates of vector v. Where k is contiguous, a warp's lanes read along rows.
  // Otherwise the tile is stored transposed: single elements still go along rows (coalesced), but
  // vectors go 16 lanes down k per column, so that their stores hit 16 distinct banks while each
  // row's two vectors still fill one 32-byte sector.
  __device__ static void coords(uint32_t v, uint32_t& mn, uint32_t& k) {
    if (k_inner) {
      mn = v / per_row;
      k = (v % per_row) * W;
    } else if (W == 1) {
      k = v / per_row;
      mn = v % per_row;
    } else {
      const uint32_t rest = v / 16u;
      k = (rest / per_row) * 16u + v % 16u;
      mn = (rest % per_row) * W;
    }
  }

  __device__ void load(const elem_t* base, uint32_t mn0, uint32_t k0, uint32_t tid) {
#pragma unroll
    for (int i = 0; i < count; ++i) {
      uint32_t mn, k;
      coords(tid + uint32_t(i) * THREADS, mn, k);
      mn += mn0;
      k += k0;
      if (mn < EXTENT && k < K) {
        regs[i] = *reinterpret_cast<const Vec<W>*>(base + mn * MN_STRIDE + k * K_STRIDE);
      } else {
#pragma unroll
        for (int j = 0; j < W; ++j) regs[i].v[j] = elem_t(0);
      }
    }
  }

  __device__ void store(elem_t (*tile)[LD], uint32_t tid) const {
#pragma unroll
    for (int i = 0; i < count; ++i) {
      uint32_t mn, k;
      coords(tid + uint32_t(i) * THREADS, mn, k);
      if (k_inner) {
        *reinterpret_cast<Vec<W>*>(&tile[mn][k]) = regs[i];
      } else {
#pragma unroll
        for (int j = 0; j < W; ++j) tile[mn + uint32_t(j)][k] = regs[i].v[j];
      }
    }
  }
};

extern "C" __global__ void __launch_bounds__(256) kiln_matmul(const elem_t* __restrict__ a,
                                                              const elem_t* __restrict__ b,
                                                              out_t* __restrict__ c) {
  __shared__ __align__(16) elem_t tile_a[BM][LD];
  __shared__ __align__(16) elem_t tile_b[BN][LD];
  const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5u;
  const uint32_t g = lane >> 2u, t = lane & 3u;  // the mma fragments' groupID, threadID_in_group
  const uint32_t wm = (warp >> 2u) * 64u, wn = (warp & 3u) * 32u;
  const uint32_t row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, batch = blockIdx.z;
  const elem_t* a_batch = a + batch * (M * K);
  const elem_t* b_batch = b + batch * (K * N);
  TileStage<M, A_ROW, A_COL, A_VEC> stage_a;
  TileStage<N, B_COL, B_ROW, B_VEC> stage_b;
  float acc[4][4][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

  stage_a.load(a_batch, row0, 0u, tid);
  stage_b.load(b_batch, col0, 0u, tid);
  stage_a.store(tile_a, tid);
  stage_b.store(tile_b, tid);
  __syncthreads();
  for (uint32_t k0 = 0u; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
    if (more) {
      stage_a.load(a_batch, row0, k0 + BK, tid);
      stage_b.load(b_batch, col0, k0 + BK, tid);
    }
#pragma unroll
    for (uint32_t ks = 0u; ks < BK; ks += KSTEP) {
      uint32_t fa[4][4], fb[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) load_a(fa[mi], tile_a, wm + uint32_t(mi) * 16u + g, ks, t);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) load_b(fb[ni], tile_b, wn + uint32_t(ni) * 8u + g, ks, t);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma(acc[mi][ni], fa[mi], fb[ni]);
    }
    if (more) {
      __syncthreads();
      stage_a.store(tile_a, tid);
      stage_b.store(tile_b, tid);
      __syncthreads();
    }
  }
  // Accumulator e of an mma tile: row g (+8 for e >= 2), column 2t (+1 for odd e).
  out_t* c_batch = c + batch * (M * N);
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t row = row0 + wm + uint32_t(mi) * 16u + g + (e >= 2 ? 8u : 0u);
        const uint32_t col = col0 + wn + uint32_t(ni) * 8u + 2u * t + uint32_t(e & 1);
        if (row < M && col < N) c_batch[row * N + col] = to_out(acc[mi][ni][e]);
      }
    }
  }
}
)cuda";

// Fragment loads and the mma for 16-bit operands (m16n8k16): A's registers hold (row g, k 2t),
// (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8), two k-adjacent elements each, the lower k in the low
// half; B's (k 2t, column g) and (2t + 8, g).
constexpr char kMma16[] = R"cuda(
constexpr uint32_t KSTEP = 16u, LD = 40u;  // 20 words per row: fragment reads are conflict-free
__device__ inline uint32_t pair(const elem_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ inline void load_a(uint32_t* f, const elem_t (*tile)[LD], uint32_t r, uint32_t k,
                              uint32_t t) {
  f[0] = pair(&tile[r][k + 2u * t]);
  f[1] = pair(&tile[r + 8u][k + 2u * t]);
  f[2] = pair(&tile[r][k + 2u * t + 8u]);
  f[3] = pair(&tile[r + 8u][k + 2u * t + 8u]);
}
__device__ inline void load_b(uint32_t* f, const elem_t (*tile)[LD], uint32_t n, uint32_t k,
                              uint32_t t) {
  f[0] = pair(&tile[n][k + 2u * t]);
  f[1] = pair(&tile[n][k + 2u * t + 8u]);
}
__device__ inline void mma(float* d, const uint32_t* a, const uint32_t* b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.TYPE.TYPE.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline out_t to_out(float x) {
  uint16_t y;
  asm("cvt.rn.TYPE.f32 %0, %1;" : "=h"(y) : "f"(x));
  return y;
}
)cuda";

// The same for tf32 (m16n8k8): A's registers hold (row g, k t), (g + 8, t), (g, t + 4),
// (g + 8, t + 4), B's (k t, column g) and (t + 4, g), each one f32 rounded to tf32 (cvt.rna, as
// cuBLAS does).
constexpr char kMmaTf32[] = R"cuda(
constexpr uint32_t KSTEP = 8u, LD = 36u;  // 36 words per row: fragment reads are conflict-free
__device__ inline uint32_t tf32(float x) {
  uint32_t y;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
  return y;
}
__device__ inline void load_a(uint32_t* f, const elem_t (*tile)[LD], uint32_t r, uint32_t k,
                              uint32_t t) {
  f[0] = tf32(tile[r][k + t]);
  f[1] = tf32(tile[r + 8u][k + t]);
  f[2] = tf32(tile[r][k + t + 4u]);
  f[3] = tf32(tile[r + 8u][k + t + 4u]);
}
__device__ inline void load_b(uint32_t* f, const elem_t (*tile)[LD], uint32_t n, uint32_t k,
                              uint32_t t) {
  f[0] = tf32(tile[n][k + t]);
  f[1] = tf32(tile[n][k + t + 4u]);
}
__device__ inline void mma(float* d, const uint32_t* a, const uint32_t* b) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline out_t to_out(float x) { return x; }
)cuda";

// Elements per global read along an operand's contiguous axis: 16 bytes where every vector lies
// wholly inside or outside the matrix and starts 16-byte aligned (the contiguous extent and the
// other stride are multiples of it, and so is the batch stride), else one element.
int64_t VectorWidth(int64_t element_bytes, int64_t contiguous_extent, int64_t other_stride,
                    int64_t batch_stride) {
  const int64_t w = 16 / element_bytes;
  return contiguous_extent % w == 0 && other_stride % w == 0 && batch_stride % w == 0 ? w : 1;
}

std::string MmaMatmul(const std::string& name, const MatmulShape& s) {
  const bool tf32 = s.kernel == MatmulKernel::kMmaTf32;
  const int64_t bytes = tf32 ? 4 : 2;
  // A's contiguous axis is k when a_col == 1 (else m); B's is n when b_col == 1 (else k).
  const int64_t a_vec = s.a_col == 1 ? VectorWidth(bytes, s.k, s.a_row, s.m * s.k)
                                     : VectorWidth(bytes, s.m, s.a_col, s.m * s.k);
  const int64_t b_vec = s.b_col == 1 ? VectorWidth(bytes, s.n, s.b_row, s.k * s.n)
                                     : VectorWidth(bytes, s.k, s.b_col, s.k * s.n);
  std::string fragments = tf32 ? kMmaTf32 : kMma16;
  if (!tf32) {
    const std::string type = s.kernel == MatmulKernel::kMmaBf16 ? "bf16" : "f16";
    for (size_t at; (at = fragments.find("TYPE")) != std::string::npos;) {
      fragments.replace(at, 4, type);
    }
  }
  return absl::StrCat(
      "// kiln matmul ", name, ": ", s.batch, " x [", s.m, " x ", s.k, "] x [", s.k, " x ", s.n,
      "], ", ir::DTypeName(s.dtype), " on tensor cores (", MatmulKernelName(s.kernel), ")\n",
      CudaPrelude(), "typedef ", tf32 ? "float" : "uint16_t", " elem_t;\ntypedef ",
      tf32 ? "float" : "uint16_t", " out_t;\nconstexpr uint32_t M = ", s.m, "u, N = ", s.n,
      "u, K = ", s.k, "u;\nconstexpr uint32_t A_ROW = ", s.a_row, "u, A_COL = ", s.a_col,
      "u, B_ROW = ", s.b_row, "u, B_COL = ", s.b_col, "u;\nconstexpr int A_VEC = ", a_vec,
      ", B_VEC = ", b_vec, ";\n", fragments, kMmaBody);
}

}  // namespace

const char* MatmulKernelName(MatmulKernel kernel) {
  switch (kernel) {
    case MatmulKernel::kFma:
      return "fma";
    case MatmulKernel::kMmaF16:
      return "mma.f16";
    case MatmulKernel::kMmaBf16:
      return "mma.bf16";
    case MatmulKernel::kMmaTf32:
      return "mma.tf32";
  }
  return "?";
}

int ComputeCapability(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0 || arch.size() < 5) return 0;
  int value = 0;
  for (size_t i = 3; i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])); ++i) {
    value = value * 10 + (arch[i] - '0');
  }
  return value;
}

std::optional<MatmulKernel> ChooseMatmulKernel(ir::DType dtype, int compute_capability,
                                               bool allow_tf32) {
  const bool tensor_cores = compute_capability >= 80;
  switch (dtype) {
    case ir::DType::kF16:
      if (tensor_cores) return MatmulKernel::kMmaF16;
      return std::nullopt;
    case ir::DType::kBF16:
      if (tensor_cores) return MatmulKernel::kMmaBf16;
      return std::nullopt;
    case ir::DType::kF32:
      return tensor_cores && allow_tf32 ? MatmulKernel::kMmaTf32 : MatmulKernel::kFma;
    case ir::DType::kF64:
      return MatmulKernel::kFma;
    default:
      return std::nullopt;
  }
}

bool MatmulFits(const MatmulShape& s) {
  switch (s.kernel) {
    case MatmulKernel::kFma:
      if (s.dtype != ir::DType::kF32 && s.dtype != ir::DType::kF64) return false;
      break;
    case MatmulKernel::kMmaF16:
      if (s.dtype != ir::DType::kF16) return false;
      break;
    case MatmulKernel::kMmaBf16:
      if (s.dtype != ir::DType::kBF16) return false;
      break;
    case MatmulKernel::kMmaTf32:
      if (s.dtype != ir::DType::kF32) return false;
      break;
  }
  const int64_t limit = int64_t{1} << 31;
  const int64_t tile = IsMma(s.kernel) ? kMmaTile : kFmaTile;
  return s.batch >= 1 && s.batch <= 65535 && (s.m + tile - 1) / tile <= 65535 &&
         s.batch * s.m * s.k < limit && s.batch * s.k * s.n < limit && s.batch * s.m * s.n < limit;
}

MatmulLaunch MatmulLaunchFor(const MatmulShape& s) {
  MatmulLaunch launch;
  const int64_t tile = IsMma(s.kernel) ? kMmaTile : kFmaTile;
  launch.grid[0] = static_cast<uint32_t>((s.n + tile - 1) / tile);
  launch.grid[1] = static_cast<uint32_t>((s.m + tile - 1) / tile);
  launch.grid[2] = static_cast<uint32_t>(s.batch);
  if (IsMma(s.kernel)) {
    launch.block[0] = 256;  // 8 warps
  } else {
    launch.block[0] = launch.block[1] = 16;
  }
  return launch;
}

std::string MatmulCuda(const std::string& name, const MatmulShape& shape) {
  return IsMma(shape.kernel) ? MmaMatmul(name, shape) : FmaMatmul(name, shape);
}

}  // namespace kiln::codegen::cuda
