// The CPU backend's matrix-multiplication engine: a packed, register-blocked GEMM in the
// GotoBLAS/BLIS structure, and N-d convolution through the same GEMM (implicit im2col: the
// convolution's input is gathered straight into the packed panels, never into a column matrix).
//
//   C[M,N] = alpha * A[M,K] * B[K,N] + beta * C   (per batch entry), then the fused epilogue.
//
// The register tile is an MR x NR micro-kernel generated as LLVM IR for the host's vector width
// (AVX-512: 14 x 32 f32 in zmm registers; AVX2: 6 x 16 in ymm; NEON/SSE: 14 x 8 / 6 x 8) and
// JIT-compiled once per process and epilogue variant through codegen/cpu/llvm_jit.h (and kept as
// an object file in $KILN_CACHE_DIR when it is set, so a later process skips LLVM). Operands are
// packed into 64-byte aligned panels: A into MR-row panels, B into NR-column panels, with cache
// blocks KC (depth), NC (columns, one B block stays in L2) and MC (rows, one A block stays in L3)
// derived from the host's cache sizes. The epilogue (bias, residual, activation) runs in registers
// on each output tile right after its last depth block, while the tile is hot.
//
// Threading: the output of each batch entry is cut into as many rectangles as the pool has
// threads (rows or columns, whichever costs less repeated packing), each computed independently
// with the thread's own packing buffers; many small batch entries are spread over the threads
// whole instead. One ParallelFor per call (per batch entry at most).
//
// f32 and f64 run natively; bf16 and f16 are stored narrow and computed in f32 (the operands are
// widened, the f32 driver runs, the result is rounded once: gemm_half.cc). Nothing here includes
// LLVM: the driver lives in the runtime (libkiln_runtime runs it for blobs) and takes its
// micro-kernels from a MicroKernelProvider — the JIT's (codegen/cpu/gemm.h: Gemm, Conv) or a loaded
// blob's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace kiln::runtime {
class ThreadPool;
}  // namespace kiln::runtime

namespace kiln::runtime::cpu {

namespace gemm_internal {
class MicroKernelProvider;
}  // namespace gemm_internal

/// The activation a GEMM or convolution applies to each output element in its epilogue.
enum class GemmActivation {
  kNone,
  kRelu,      // max(x, 0); NaN stays NaN
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as x * sigmoid(2 z)
  kSilu,      // x * sigmoid(x)
  kSigmoid,   // 1 / (1 + exp(-x))
};

/// "none", "relu", "gelu_tanh", "silu", "sigmoid".
const char* GemmActivationName(GemmActivation activation);

/// A strided matrix (or a batch of them). Element (r, c) of batch entry (i0, i1, ...) is at
/// data + i0 * batch_strides[0] + i1 * batch_strides[1] + ... + r * row_stride + c * col_stride,
/// all in elements. A transposed operand is just swapped strides, a permuted view of a larger
/// tensor is its strides, and a stride of 0 broadcasts.
struct MatrixView {
  const void* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
  /// One entry per batch dimension of the GEMM (GemmParams::batch); empty when unbatched.
  std::vector<int64_t> batch_strides;
};

/// The view of a dense row-major tensor [batch..., rows, cols].
MatrixView DenseMatrix(const void* data, int64_t rows, int64_t cols,
                       const std::vector<int64_t>& batch = {});

/// What happens to each output element after the last depth block, in this order:
///   v = alpha * sum + beta * c_old;  v += column_bias[col];  v += row_bias[row];
///   if (!residual_after_activation) v += residual;  v = activation(v);
///   if (residual_after_activation) v += residual;  c = v.
struct GemmEpilogue {
  GemmActivation activation = GemmActivation::kNone;
  /// [N], added to every row (a Linear layer's bias). Shared by all batch entries. May be null.
  const void* column_bias = nullptr;
  /// [M], added to every column (a convolution's per-output-channel bias). May be null.
  const void* row_bias = nullptr;
  /// A matrix like C (same batch, M, N; col_stride must be 1) added to the result; data null for
  /// none. It must not overlap C: C holds partial sums while earlier depth blocks run.
  MatrixView residual;
  /// The residual is added after the activation (out = x + f(y), a transformer block) or before
  /// it (out = relu(y + x), a ResNet block).
  bool residual_after_activation = true;

  bool empty() const {
    return activation == GemmActivation::kNone && column_bias == nullptr && row_bias == nullptr &&
           residual.data == nullptr;
  }
};

/// Overrides of the blocking and micro-kernel shape, for tests (to exercise several blocks and
/// edge tiles on small matrices, or another target's kernel shape on this host) and for tuning.
/// Zero means "derived from the host".
struct GemmTuning {
  int64_t mc = 0;  // rows of an A block (rounded up to a multiple of MR)
  int64_t nc = 0;  // columns of a B block (rounded up to a multiple of NR)
  int64_t kc = 0;  // depth of a block
  /// Micro-kernel shape: vector width in bits (128, 256 or 512; at most the host's), rows MR and
  /// vectors per row (NR = nr_vectors * lanes). All three or none.
  int vector_bits = 0;
  int mr = 0;
  int nr_vectors = 0;
  /// How the micro-kernel reads an A with unit column stride (a row-major matrix).
  enum class ARead {
    kAuto,     // in place, except for tiles of more than 8 rows and, with N > 512, rows a
               // multiple of 4 KiB apart (runtime/cpu/gemm.cc, ReadsAInPlace)
    kPacked,   // always packed into k-major panels first
    kInPlace,  // in place whenever the column stride is 1
  };
  ARead a_read = ARead::kAuto;
  /// int8 GEMMs of a u8 or i8 A and an i8 B: a B block whose values all lie in [-64, 64] runs on
  /// the quad micro-kernels (pmaddubsw, exact in that range; KernelShape::u8_quads) instead of
  /// the i16 pairs. false: always the pairs (to compare the two).
  bool int8_quads = true;
};

/// One GEMM call: C = alpha * A * B + beta * C over every batch entry, then `epilogue`.
struct GemmParams {
  /// kF32, kF64, kBF16 or kF16; A, B, C, bias and residual all have it.
  base::DType dtype = base::DType::kF32;
  /// Batch dimensions (each >= 0); the matrices' batch_strides have one entry per dimension.
  std::vector<int64_t> batch;
  int64_t m = 0, n = 0, k = 0;
  MatrixView a;  // [M, K]
  MatrixView b;  // [K, N]
  /// [M, N]; col_stride must be 1 (the kernel stores whole vectors along N). `c.data` is written
  /// through although MatrixView holds a const pointer.
  MatrixView c;
  double alpha = 1.0;
  /// 0 means C's old contents are never read (they may be uninitialised or NaN).
  double beta = 0.0;
  GemmEpilogue epilogue;
  GemmTuning tuning;
};

/// Runs the GEMM with the micro-kernels of `kernels`, in parallel on `pool` when it is given
/// (nullptr: on the calling thread). Errors (InvalidArgument) name the offending field and its
/// value; a micro-kernel the provider cannot give is its error. codegen::cpu::Gemm calls this
/// with the JIT's provider.
absl::Status ExecuteGemm(const GemmParams& params,
                         const gemm_internal::MicroKernelProvider& kernels,
                         runtime::ThreadPool* pool = nullptr);

/// The dimension sizes of a dense row-major tensor (the runtime's own: it does not link the IR,
/// whose ir::Shape is the same std::vector).
using Dims = std::vector<int64_t>;

/// A convolution as the IR defines it (docs/ir.md, base/conv_shape.h): input [N, C, S...], weight
/// [O, C/groups, K...], output [N, O, S'...], each dense row-major. The per-axis vectors follow
/// the IR's conv attributes (spatial axes only; empty means the default 1 / 0 / 0 / 1 / 1).
struct ConvParams {
  base::DType dtype = base::DType::kF32;  // kF32, kF64, kBF16 or kF16 (as GemmParams)
  Dims input_shape;
  Dims weight_shape;
  std::vector<int64_t> strides, low, high, dilation, input_dilation;
  int64_t groups = 1;
  const void* input = nullptr;
  const void* weight = nullptr;
  void* output = nullptr;
  /// [O]: added to every element of output channel o. May be null.
  const void* bias = nullptr;
  /// Dense, shaped like the output; null for none. Order as in GemmEpilogue.
  const void* residual = nullptr;
  bool residual_after_activation = true;
  GemmActivation activation = GemmActivation::kNone;
  GemmTuning tuning;
};

/// The output shape of `params` (base::ConvOutputShape, the rule ir::InferType applies), or
/// InvalidArgument naming the mismatch: "conv: groups 3 must divide ...; input [1,4,5,5], weight
/// [6,1,3,3]".
absl::StatusOr<Dims> ConvOutputShape(const ConvParams& params);

/// Runs the convolution: for each image and group, out[O/g, P] = W_g[O/g, C/g * prod(K)] *
/// im2col(x)[C/g * prod(K), P], where the im2col operand is gathered into packed B panels on the
/// fly (padding and input dilation read as zeros). A 2-d conv with at most 16 output positions,
/// a depth of at least 1024 and no epilogue (a weight gradient: dW of a 3x3 kernel) runs as
/// out^T = im2col^T * W^T instead, with im2col^T built explicitly (capped at 64 MiB).
absl::Status ExecuteConv(const ConvParams& params,
                         const gemm_internal::MicroKernelProvider& kernels,
                         runtime::ThreadPool* pool = nullptr);

// ---- int8 inference ---------------------------------------------------------------------------
//
// The integer contraction of the IR (matmul / conv {accumulate=i32}, docs/ir.md): operands of u8,
// i8 or i16 (any mix), exact products summed in i32, wrapping at 32 bits. Operands are widened to
// i16 while they are packed (a u8 or i8 panel element becomes one i16), and the micro-kernel
// multiplies pairs of depth steps into i32 and adds them: LLVM selects pmaddwd for it on SSE2 /
// AVX2 / AVX-512 (vpdpwssd where the target has AVX-512 VNNI or AVX-VNNI), each exact, so every
// CPU level computes the same bits. A u8 or i8 A times an i8 B runs on quads of bytes instead
// where that is exact too: with vpdpbusd on a CPU with VNNI (any B), else with pmaddubsw for the
// B blocks whose values lie in [-64, 64] (its i16 pair sums saturate beyond: 255 * -128 * 2 does
// not fit).
//
// The epilogue runs on each finished tile in registers: the i32 sum is stored as it is, or
// converted to f32 and taken through a list of f32 steps (a dequantisation scale per output
// channel, a bias, relu, the next layer's requantisation: divide, round, clamp) and stored as f32,
// u8 or i8 (converted as the IR's cast: saturating, NaN -> 0). Each step is one IEEE f32 operation
// in the order given, as the IR computes it, so the result equals the IR graph's bit for bit.

/// An elementwise f32 operation of an int8 contraction's epilogue on v (the sum converted to f32,
/// or the previous step's result) and x (the step's operand).
enum class Int8EpilogueOp : uint8_t {
  kAdd,      // v + x
  kSub,      // v - x
  kSubFrom,  // x - v
  kMul,      // v * x
  kDiv,      // v / x
  kDivInto,  // x / v
  kMax,      // max(v, x) as the IR's max: NaN propagates (from v first), a tie gives v
  kMaxFrom,  // max(x, v)
  kMin,      // min(v, x), as kMax
  kMinFrom,  // min(x, v)
  kRound,    // round half to even (no operand)
};

/// What a step's x is.
enum class Int8Operand : uint8_t {
  kNone,    // kRound
  kScalar,  // Int8EpilogueStep::scalar
  kRow,     // a vector with one f32 per output row (a convolution's output channel)
  kColumn,  // a vector with one f32 per output column (a Linear layer's output feature)
};

/// "add", "sub_from", ...; "scalar", "row", ...
const char* Int8EpilogueOpName(Int8EpilogueOp op);
const char* Int8OperandName(Int8Operand operand);

struct Int8EpilogueStep {
  Int8EpilogueOp op = Int8EpilogueOp::kAdd;
  Int8Operand operand = Int8Operand::kNone;
  float scalar = 0;
  /// kRow: [M] (per output channel of a convolution: [O]); kColumn: [N]. Shared by every batch
  /// entry of a GEMM; a grouped convolution's groups read their own channels.
  const float* vector = nullptr;
};

/// At most this many steps (the micro-kernel's argument block has one slot per step).
inline constexpr int kMaxInt8EpilogueSteps = 12;

struct Int8Epilogue {
  std::vector<Int8EpilogueStep> steps;
  /// kI32: the sums (no steps); kF32, kU8 or kI8: the steps' result, converted.
  base::DType output = base::DType::kI32;
};

/// The B of an int8 GEMM packed once (PackInt8B), for a B that stays the same over many calls:
/// a quantized layer's constant weight, which onnxruntime (constant initializers) and MLAS
/// (MlasGemmPackB) prepack the same way. Each NR-column panel holds the whole depth as quads
/// when its values lie in [-64, 64] (and the A dtype allows them) or as i16 pairs otherwise, so
/// the choice is per panel rather than per B block. Immutable: calls on any threads may share it.
class PackedInt8B;

/// One int8 GEMM: C = epilogue(A * B) per batch entry, A [M, K] and B [K, N] of u8, i8 or i16
/// (strided views, as GemmParams), C [M, N] of epilogue.output (col_stride 1).
struct Int8GemmParams {
  base::DType a_dtype = base::DType::kU8;
  base::DType b_dtype = base::DType::kI8;
  std::vector<int64_t> batch;
  int64_t m = 0, n = 0, k = 0;
  MatrixView a, b, c;
  Int8Epilogue epilogue;
  GemmTuning tuning;  // mc, nc and the tile shape (kc is not used: the depth is one block)
  /// B packed by PackInt8B for these dtypes, k and n, with the same provider and tile width.
  /// When set, every batch entry uses it and b is not read (its data may be null); a packed B
  /// that does not fit the call is InvalidArgument.
  std::shared_ptr<const PackedInt8B> packed_b;
};

absl::Status ExecuteInt8Gemm(const Int8GemmParams& params,
                             const gemm_internal::MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool = nullptr);

/// Whether `view` is one matrix for every batch entry (no batch strides, or all 0): a B that
/// PackInt8B can pack.
bool SameMatrixForEveryBatchEntry(const MatrixView& view);

/// Packs the B of `params` for ExecuteInt8Gemm with `kernels`, which it asks for the kernels
/// the calls will run (so a missing one fails here): it reads the dtypes, m (the kernels' tile
/// height follows it), k, n, the B view, the epilogue's dtype and steps (not their vectors) and
/// the tuning, not a or c. B must be the same matrix for every batch entry (batch strides 0).
/// The packed bytes are about B's (quads, plus a row of column sums per panel for an i8 A) or
/// twice them (pairs). Calls with another m may share the result.
absl::StatusOr<std::shared_ptr<const PackedInt8B>> PackInt8B(
    const Int8GemmParams& params, const gemm_internal::MicroKernelProvider& kernels);

/// One int8 convolution (the IR's conv {accumulate=i32}): `conv` gives the geometry and the
/// input / weight / output pointers (its dtype, bias, residual and activation must keep their
/// defaults); per-channel epilogue vectors are kRow operands ([O]).
struct Int8ConvParams {
  base::DType input_dtype = base::DType::kU8;
  base::DType weight_dtype = base::DType::kI8;
  ConvParams conv;
  Int8Epilogue epilogue;
};

absl::Status ExecuteInt8Conv(const Int8ConvParams& params,
                             const gemm_internal::MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool = nullptr);

}  // namespace kiln::runtime::cpu
