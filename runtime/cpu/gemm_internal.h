// Internals shared by gemm.cc (the blocked driver), gemm_conv.cc (convolution as implicit GEMM),
// codegen/cpu/gemm_kernel.cc (the LLVM micro-kernel generator, the JIT's MicroKernelProvider) and
// runtime/blob.cc (the blob's MicroKernelProvider: micro-kernels compiled ahead of time). Not for
// use outside those. No LLVM types appear here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "runtime/cpu/gemm.h"

namespace kiln::runtime {
class ThreadPool;
}  // namespace kiln::runtime

namespace kiln::runtime::cpu::gemm_internal {

/// Per-tile arguments of a micro-kernel call. The generated IR reads this struct by field index,
/// so its layout is part of the kernel ABI: change both together.
struct TileArgs {
  int64_t m_valid = 0;                // rows of the tile inside C (1..MR)
  int64_t n_valid = 0;                // columns of the tile inside C (1..NR)
  const void* row_bias = nullptr;     // at the tile's first row
  const void* column_bias = nullptr;  // at the tile's first column
  const void* residual = nullptr;     // at the tile's first element
  int64_t residual_ld = 0;
  double alpha = 1.0;
  double beta = 0.0;
  int64_t a_ld = 0;  // rows of A apart, in elements (kernels that read A in place)
};

/// The micro-kernel: C[0:m_valid, 0:n_valid] = alpha * Ap * Bp + beta * C (C not read when
/// beta == 0), then its epilogue variant. `a` is an MR-row panel packed k-major (kc * MR
/// elements, zero-padded), or for a kernel with KernelShape::a_in_place the tile's first element
/// of A itself: rows TileArgs::a_ld elements apart, depth contiguous, and only the first m_valid
/// rows read (the others repeat the last valid row's loads). `b` is an NR-column panel packed
/// k-major (kc * NR elements, 64-byte aligned, zero-padded), `c` the tile's first element with
/// row stride ldc.
using MicroKernelFn = void (*)(int64_t kc, const void* a, const void* b, void* c, int64_t ldc,
                               const TileArgs* args);

/// The register tile of a micro-kernel.
struct KernelShape {
  int vector_bits = 0;  // 128, 256 or 512
  int lanes = 0;        // elements per vector
  int mr = 0;           // rows
  int nr_vectors = 0;   // vectors per row
  bool fma = false;     // the target has fused multiply-add
  /// A is read where it lies (rows TileArgs::a_ld apart) instead of from a packed panel: saves
  /// packing every block of a row-major A (5-8% of an MLP's inference at batch 256).
  bool a_in_place = false;
  /// int8 kernels: A (u8) and B (i8) come in quads of depth steps, multiplied with pmaddubsw into
  /// pairs summed in i16 and then into i32 lanes. Exact when every B value lies in [-64, 64]
  /// (|255 x 64 x 2| fits an i16), which the driver checks per B block; otherwise i16 pairs.
  bool u8_quads = false;
  /// u8_quads with an i8 A, packed as A + 128 (u8): each B panel ends in a row of NR i32,
  /// 128 x the column's sum over the depth, which the kernel subtracts from its sums.
  bool signed_a = false;
  /// u8_quads multiplied and summed into the i32 lanes by vpdpbusd (AVX-512 VNNI, AVX-VNNI),
  /// which does not saturate: exact for every i8 B, so no block is checked.
  bool vnni = false;
  /// u8_quads with the signs the other way round: A i8 (packed as it is), B u8; vpdpbusd takes
  /// B's bytes as the unsigned ones (tdpbsud on AMX). Only with vnni: nothing checks a range.
  bool b_unsigned = false;
  /// vnni quads on AMX tiles (tdpbusd): MR = NR = 32 (kAmxTile), four 16 x 16 i32 accumulator
  /// tiles; A packed in tile rows (PackRowsAsTiles) and the quad steps of A and B padded to a
  /// multiple of kAmxQuadSteps.
  bool amx = false;
  int nr() const { return nr_vectors * lanes; }
};

/// The vector registers of the CPU the micro-kernels are compiled for (the host's for the JIT,
/// the blob target's for ahead-of-time code): they fix the tile shape.
struct TargetVectors {
  int bits = 128;  // 128, 256 or 512
  int registers = 16;
  bool fma = false;
  /// vpdpbusd at every width up to `bits` (AVX-512 VNNI with VL, or AVX-VNNI on a 256-bit
  /// target): the int8 quad kernels use it (KernelShape::vnni).
  bool vnni = false;
  /// AMX-INT8 tiles, usable in this process (RequestAmxTileData): int8 GEMMs of at least
  /// kAmxTile rows run on them (KernelShape::amx), and every quad packing pads to kAmxQuadSteps.
  bool amx = false;
};

/// The AMX kernels' tile (MR = NR) and the quad steps of one tile's depth (64 bytes a row).
inline constexpr int kAmxTile = 32;
inline constexpr int kAmxQuadSteps = 16;

/// The shape for `dtype` on `vectors` (or the one `tuning` asks for, at most `vectors.bits`
/// wide). The register budget: MR rows of nr_vectors accumulators, plus nr_vectors B vectors and
/// two spare registers.
absl::StatusOr<KernelShape> ChooseKernelShape(base::DType dtype, const GemmTuning& tuning,
                                              const TargetVectors& vectors);

/// What the epilogue of a kernel does, fixed when it is generated.
struct EpilogueVariant {
  GemmActivation activation = GemmActivation::kNone;
  bool row_bias = false;
  bool column_bias = false;
  bool residual = false;
  bool residual_after_activation = true;

  static EpilogueVariant Of(const GemmEpilogue& epilogue);
  /// "plain", or e.g. "cbias_res_relu", for function names and the cache key.
  std::string Name() const;
};

/// The symbol of the micro-kernel for (dtype, shape, variant), e.g.
/// "kiln_gemm_f32_6x16_v256_arows_cbias_relu" (arows: A read in place): the JIT emits it under this
/// name and a blob's code section exports it under it.
std::string MicroKernelName(base::DType dtype, const KernelShape& shape,
                            const EpilogueVariant& variant);

// ---- int8 micro-kernels (gemm_int8.cc) ------------------------------------------------------

/// Per-tile arguments of an int8 micro-kernel; the generated IR reads it by field index.
struct Int8TileArgs {
  int64_t m_valid = 0;  // rows of the tile inside C (1..MR)
  int64_t n_valid = 0;  // columns of the tile inside C (1..NR)
  /// Per epilogue step: its scalar (a float), or its row / column vector at the tile's first row
  /// / column; null for kRound.
  const void* operands[kMaxInt8EpilogueSteps] = {};
  /// AMX kernels (KernelShape::amx) only: they run `panels` NR-column panels of B one after
  /// another, `b_panel_bytes` apart, into consecutive tiles of C (one tile configuration for
  /// all); n_valid is the last panel's, the others are whole. Other kernels ignore these.
  int64_t panels = 1;
  int64_t b_panel_bytes = 0;
};

/// The int8 micro-kernel: C[0:m_valid, 0:n_valid] = epilogue(Ap * Bp) over `k_steps` steps of
/// 4 bytes per row of A and per column of B. Pairs (the default): `a` is an MR-row panel of i16
/// pairs, element (p * MR + i) * 2 + h is A[i][2p + h]; `b` an NR-column panel of i16 pairs
/// (64-byte aligned), element (p * NR + j) * 2 + h is B[2p + h][j]. u8 quads
/// (KernelShape::u8_quads): bytes, element (q * MR + i) * 4 + h of `a` is A[i][4q + h] (u8) and
/// (q * NR + j) * 4 + h of `b` is B[4q + h][j] (i8); with KernelShape::signed_a, a's bytes are
/// A + 128 and b's k_steps quads are followed by NR i32 (128 x the sum of column j of B). Both
/// zero-padded. AMX (KernelShape::amx): `a` in tile rows (64 bytes of depth per row, MR rows per
/// kAmxQuadSteps steps) and Int8TileArgs::panels panels of B. `c` is the tile's first element and
/// ldc the row stride of C, in elements of the output dtype.
using Int8MicroKernelFn = void (*)(int64_t k_steps, const void* a, const void* b, void* c,
                                   int64_t ldc, const Int8TileArgs* args);

/// What the epilogue of an int8 kernel does, fixed when it is generated: the output dtype and the
/// steps' operations and operand kinds (their values come in Int8TileArgs).
struct Int8EpilogueVariant {
  base::DType output = base::DType::kI32;
  std::vector<std::pair<Int8EpilogueOp, Int8Operand>> steps;

  static Int8EpilogueVariant Of(const Int8Epilogue& epilogue);
  /// "i32", or e.g. "u8_mul_c_add_c_max_s_div_s_round_max_s_min_s".
  std::string Name() const;
  bool operator==(const Int8EpilogueVariant&) const = default;
};

/// The tile of an int8 kernel on `vectors` (or the one `tuning` asks for): lanes of i32
/// accumulators, MR rows of nr_vectors accumulators.
absl::StatusOr<KernelShape> ChooseInt8KernelShape(const GemmTuning& tuning,
                                                  const TargetVectors& vectors);

/// The symbol of the int8 micro-kernel, e.g. "kiln_qgemm_6x16_v256_f32_mul_c_add_c", or
/// "kiln_qgemm_5x16_v256_u8q_i32" for a u8-quad kernel ("_s8q_" with signed_a).
std::string Int8MicroKernelName(const KernelShape& shape, const Int8EpilogueVariant& variant);

/// Where the driver gets its micro-kernels: the JIT (codegen/cpu: generated on first use) or a
/// loaded blob (symbols of its code section). Implementations are thread-safe.
class MicroKernelProvider {
 public:
  virtual ~MicroKernelProvider() = default;
  /// The registers the kernels are made for (ChooseKernelShape's input).
  virtual TargetVectors vectors() const = 0;
  /// The kernel for (dtype, shape, variant), or an error naming it.
  virtual absl::StatusOr<MicroKernelFn> Get(base::DType dtype, const KernelShape& shape,
                                            const EpilogueVariant& variant) const = 0;
  /// The int8 kernel for (shape, variant), or an error naming it.
  virtual absl::StatusOr<Int8MicroKernelFn> GetInt8(const KernelShape& shape,
                                                    const Int8EpilogueVariant& variant) const = 0;
};

/// Cache sizes in bytes, from /sys (Linux) or sysconf, with defaults when neither answers.
struct CacheSizes {
  int64_t l1d = 32 << 10;
  int64_t l2 = 1 << 20;
  int64_t l3 = 8 << 20;
  int l3_sharing = 1;  // cores sharing one L3
};
const CacheSizes& HostCaches();

/// Cache blocking for a kernel shape, from the host's caches unless `tuning` overrides it.
struct Blocking {
  int64_t mc = 0, nc = 0, kc = 0;
};
Blocking ChooseBlocking(const KernelShape& shape, int64_t element_size, const GemmTuning& tuning);

/// Packs the B operand of a core problem: B[k0:k0+kc, n0:n0+nc] of the matrix starting at `base`
/// into ceil(nc / nr) panels of kc rows by nr columns, k-major, columns past nc zero.
template <class T>
class BPacker {
 public:
  virtual ~BPacker() = default;
  virtual void Pack(const T* base, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
                    T* dst) const = 0;
};

/// B as a strided matrix.
template <class T>
class StridedBPacker final : public BPacker<T> {
 public:
  StridedBPacker(int64_t row_stride, int64_t col_stride)
      : row_stride_(row_stride), col_stride_(col_stride) {}
  void Pack(const T* base, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
            T* dst) const override;

 private:
  int64_t row_stride_, col_stride_;
};

/// Element offsets of one batch entry's operands from the problem's base pointers.
struct BatchOffsets {
  int64_t a = 0, b = 0, c = 0, residual = 0, row_bias = 0;
};

/// A batch of equally shaped GEMMs with the epilogue, as gemm.cc runs them. A is strided; B comes
/// from a packer (a strided matrix, or a convolution's input for implicit im2col).
template <class T>
struct CoreProblem {
  int64_t m = 0, n = 0, k = 0;
  const T* a = nullptr;
  int64_t a_row_stride = 0, a_col_stride = 1;
  const T* b = nullptr;
  const BPacker<T>* b_packer = nullptr;
  T* c = nullptr;
  int64_t ldc = 0;
  const T* row_bias = nullptr;
  const T* column_bias = nullptr;
  const T* residual = nullptr;
  int64_t residual_ld = 0;
  T alpha = 1, beta = 0;
  std::vector<BatchOffsets> batches;  // one entry per GEMM
};

/// Runs `problem` with `epilogue`'s variant (its pointers are already in `problem`) and the
/// micro-kernels of `kernels`, on `pool` when given. Compiles the kernels first, so an error leaves
/// C untouched.
template <class T>
absl::Status RunCore(const CoreProblem<T>& problem, const EpilogueVariant& epilogue,
                     const GemmTuning& tuning, const MicroKernelProvider& kernels,
                     runtime::ThreadPool* pool);

// ---- Shared by the f32 and the int8 drivers --------------------------------------------------

/// A growing 64-byte aligned buffer (a thread's packing space); aborts when memory runs out.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  void* Get(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

/// How one GEMM of m x n is cut over `threads`: tm row bands x tn column bands, each `rows` x
/// `cols` (multiples of mr / nr), chosen to minimise a rectangle's work plus its packing (of A's
/// rows and, unless `b_prepacked`, B's columns).
struct Grid {
  int64_t tm = 1, tn = 1;
  int64_t rows = 0, cols = 0;
};
Grid ChooseGrid(int64_t m, int64_t n, int mr, int nr, int threads, bool b_prepacked = false);

/// Below this many multiply-adds x 2 the work runs on the calling thread.
inline constexpr double kMinParallelFlops = 2e6;

/// The tile height for a GEMM of m rows on a kernel of mr rows (unless `tuning` fixes it): a
/// short power-of-two tile when m < mr / 2, balanced panels when a few panels would otherwise end
/// in a mostly padding one.
int FitTileRows(int mr, int64_t m, const GemmTuning& tuning);

/// Calls run(batch entry, m0, m1, n0, n1) for rectangles covering `count` GEMMs of m x n x k:
/// on the calling thread when small, whole GEMMs per thread when there are enough of them,
/// otherwise each GEMM cut by ChooseGrid over the pool.
void ForEachRectangle(int64_t m, int64_t n, int64_t k, int64_t count, int mr, int nr,
                      runtime::ThreadPool* pool,
                      absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t, int64_t)> run,
                      bool b_prepacked = false);

/// The int8 core: `batches` equally shaped GEMMs out = epilogue(A * B), A strided (its own dtype,
/// widened while packed), B packed by `b_packer` (a strided matrix or a convolution's implicit
/// im2col), out of `epilogue.output` with row stride ldc. Offsets in elements of each operand's
/// dtype; BatchOffsets::row_bias offsets the kRow vectors.
class Int8BPacker {
 public:
  virtual ~Int8BPacker() = default;
  /// How B may be packed: as quads at all, with the row of column sums (for a signed A), and
  /// for any values (vpdpbusd) or only when they all lie in [-64, 64] (pmaddubsw).
  struct Quads {
    bool allowed = false;
    bool column_sums = false;
    bool any_value = false;
    /// The quad steps are padded with zeros to a multiple of this (kAmxQuadSteps for AMX).
    int step_multiple = 1;
  };
  /// B[0:k, n0:n0+nc] of the matrix at `base` into ceil(nc / nr) panels in the layout of
  /// Int8MicroKernelFn's b: quads when `quads` allows them for the block's values (then it
  /// returns true), i16 pairs otherwise (false). Rows and columns past the block are zero.
  /// `scratch` may be used for narrow panels.
  virtual bool Pack(const void* base, int64_t k, int64_t n0, int64_t nc, int nr, Quads quads,
                    void* dst, AlignedBuffer& scratch) const = 0;
};

/// An Int8BPacker from a narrow BPacker<T> (T = uint8_t, int8_t, int16_t): its k x nr panels
/// interleaved into pairs, or for T = int8_t into quads.
template <class T>
class NarrowInt8Packer final : public Int8BPacker {
 public:
  explicit NarrowInt8Packer(const BPacker<T>& narrow) : narrow_(narrow) {}
  bool Pack(const void* base, int64_t k, int64_t n0, int64_t nc, int nr, Quads quads, void* dst,
            AlignedBuffer& scratch) const override;

 private:
  const BPacker<T>& narrow_;
};

struct Int8CoreProblem {
  int64_t m = 0, n = 0, k = 0;
  base::DType a_dtype = base::DType::kU8;
  const void* a = nullptr;
  int64_t a_row_stride = 0, a_col_stride = 1;
  const void* b = nullptr;
  const Int8BPacker* b_packer = nullptr;
  int64_t b_element_size = 1;
  /// A is u8 or i8 and b_packer's B is i8: blocks of B in [-64, 64] (any, with VNNI) may run on
  /// the quad kernels.
  bool quads = false;
  /// A is i8 and B u8 (a convolution's weights and image): with VNNI, quads with the signs
  /// swapped (KernelShape::b_unsigned).
  bool quads_b_unsigned = false;
  /// B packed once (Int8GemmParams::packed_b): used instead of b and b_packer for every batch
  /// entry.
  const PackedInt8B* packed_b = nullptr;
  void* c = nullptr;
  int64_t ldc = 0;
  Int8Epilogue epilogue;
  std::vector<BatchOffsets> batches;
};

/// Runs `problem` with the int8 micro-kernels of `kernels`, on `pool` when given; the kernels
/// are fetched first, so an error leaves C untouched.
absl::Status RunInt8Core(const Int8CoreProblem& problem, const GemmTuning& tuning,
                         const MicroKernelProvider& kernels, runtime::ThreadPool* pool);

/// Calls run(T*) with a null pointer of the C++ type of an int8 operand dtype (u8, i8, i16), and
/// returns its status.
template <class Run>
absl::Status WithInt8OperandType(base::DType dtype, Run run) {
  switch (dtype) {
    case base::DType::kU8:
      return run(static_cast<uint8_t*>(nullptr));
    case base::DType::kI8:
      return run(static_cast<int8_t*>(nullptr));
    default:
      return run(static_cast<int16_t*>(nullptr));
  }
}

/// Whether `dtype` is an int8 operand dtype (u8, i8, i16) / output dtype (i32, f32, u8, i8).
bool IsInt8Operand(base::DType dtype);
bool IsInt8Output(base::DType dtype);
/// Checks an epilogue: the output dtype, at most kMaxInt8EpilogueSteps steps (none for i32),
/// operands where the ops need them, vectors where the operands are vectors. `what` prefixes
/// errors ("gemm int8", "conv int8").
absl::Status CheckInt8Epilogue(const char* what, const Int8Epilogue& epilogue);

/// bf16 and f16: ExecuteGemm and ExecuteConv run them through the two functions below
/// (gemm_half.cc), which widen the operands to f32, run the f32 driver and round the result.
bool IsHalf(base::DType dtype);
absl::Status ExecuteHalfGemm(const GemmParams& params, const MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool);
absl::Status ExecuteHalfConv(const ConvParams& params, const MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool);

}  // namespace kiln::runtime::cpu::gemm_internal
