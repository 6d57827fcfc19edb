// The int8 GEMM driver (runtime/cpu/gemm.h, "int8 inference"): operands of u8, i8 or i16 widened
// to i16 pairs while they are packed, or, for a u8 or i8 A and an i8 B, A and B kept in quads of
// bytes (any B block with VNNI, a block within [-64, 64] without); the micro-kernels of
// codegen/cpu/gemm_kernel.cc (pmaddwd, pmaddubsw, vpdpbusd), i32 sums, the epilogue on each
// finished tile. A constant B may be packed once (PackInt8B), each panel in its own layout.
//
// Loop nest of one rectangle of the output (the work of one task):
//   for ic in rows, step MC:                 the A band, MC x K, packed once per layout (L3)
//     for jc in columns, step NC:            the B block, K x NC, packed (L2): quads or pairs
//       for each MR panel of the band:       its micro-panel is reused across the NR panels (L1)
//         for each NR panel: micro-kernel over the whole depth, then the epilogue
// The depth is not cut into blocks: partial sums would need an i32 buffer beside an output of
// another dtype, and a whole-depth micro-panel of i16 pairs (MR x K x 2 bytes, 24 KiB at K = 2048
// on AVX2) still fits L1. Widened operands take twice the bytes of f32's per two depth steps, so
// the blocks are sized from K the way the f32 driver sizes them from KC (quads fill half of them).
//
// Why two layouts: pmaddwd multiplies i16 pairs exactly for any operands, but needs an add per
// 16 products; pmaddubsw multiplies u8 by i8 into pair sums of 32 products per instruction and
// saturates them at i16, which |255 x 64 x 2| = 32640 never reaches. On the AVX2 Zen 3 the pairs'
// inner loop runs 20 pmaddwd and 20 vpaddd in 12.4 cycles, the quads' 20 pmaddubsw, 20 pmaddwd
// (by ones) and 20 vpaddd per twice the products in 21 (docs/quantization.md). Weights quantized
// to 7 bits (onnxruntime's reduce_range, kiln::quant's QuantConfig::reduce_range) fit. vpdpbusd
// (AVX-512 VNNI, AVX-VNNI) multiplies and adds quads into the i32 lanes without saturating, in
// one instruction per 16 (x 4) products where the pairs take one per 16 (x 2).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_checks.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime::cpu {

const char* Int8EpilogueOpName(Int8EpilogueOp op) {
  switch (op) {
    case Int8EpilogueOp::kAdd:
      return "add";
    case Int8EpilogueOp::kSub:
      return "sub";
    case Int8EpilogueOp::kSubFrom:
      return "sub_from";
    case Int8EpilogueOp::kMul:
      return "mul";
    case Int8EpilogueOp::kDiv:
      return "div";
    case Int8EpilogueOp::kDivInto:
      return "div_into";
    case Int8EpilogueOp::kMax:
      return "max";
    case Int8EpilogueOp::kMaxFrom:
      return "max_from";
    case Int8EpilogueOp::kMin:
      return "min";
    case Int8EpilogueOp::kMinFrom:
      return "min_from";
    case Int8EpilogueOp::kRound:
      return "round";
  }
  return "unknown";
}

const char* Int8OperandName(Int8Operand operand) {
  switch (operand) {
    case Int8Operand::kNone:
      return "none";
    case Int8Operand::kScalar:
      return "scalar";
    case Int8Operand::kRow:
      return "row";
    case Int8Operand::kColumn:
      return "column";
  }
  return "unknown";
}

// What PackInt8B made: the panels of B one after another, each in its own layout.
class PackedInt8B {
 public:
  base::DType a_dtype = base::DType::kU8, b_dtype = base::DType::kI8;
  int64_t k = 0, n = 0;
  int nr = 0, vector_bits = 0;
  gemm_internal::AlignedBuffer buffer;
  const char* data = nullptr;    // the buffer's bytes
  std::vector<int64_t> offsets;  // panel t at data + offsets[t]
  std::vector<uint8_t> quads;    // panel t is quads (1) or pairs (0)
  bool any_quads = false, all_quads = true;
  int quad_step_multiple = 1;  // Int8Plan::quad_step_multiple

  const char* Panel(int64_t t) const { return data + offsets[static_cast<size_t>(t)]; }
};

namespace gemm_internal {
namespace {

using base::DType;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t value, int64_t multiple) { return CeilDiv(value, multiple) * multiple; }

// A[0:rows, 0:k] (strided, any of the operand dtypes) into ceil(rows / mr) panels of i16 pairs:
// element (p * mr + i) * 2 + h of a panel is A[i][2p + h], rows past `rows` and the depth step
// past an odd k zero. Also B^T's rows, i.e. B's contiguous columns, into NR-column panels.
template <class T>
void PackRowsAsPairs(const T* a, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t k,
                     int mr, int16_t* dst) {
  const int64_t pairs = CeilDiv(k, 2);
  for (int64_t r0 = 0; r0 < rows; r0 += mr) {
    const int valid = static_cast<int>(std::min<int64_t>(mr, rows - r0));
    int16_t* panel = dst + r0 * pairs * 2;
    for (int i = 0; i < valid; ++i) {
      // Along the row: sequential reads, stores one pair (a dword) apart by the panel's rows.
      const T* src = a + (r0 + i) * row_stride;
      int16_t* out = panel + 2 * i;
      int64_t p = 0;
      for (; 2 * p + 1 < k; ++p) {
        out[p * mr * 2] = static_cast<int16_t>(src[2 * p * col_stride]);
        out[p * mr * 2 + 1] = static_cast<int16_t>(src[(2 * p + 1) * col_stride]);
      }
      if (p < pairs) {
        out[p * mr * 2] = static_cast<int16_t>(src[2 * p * col_stride]);
        out[p * mr * 2 + 1] = 0;
      }
    }
    for (int i = valid; i < mr; ++i) {
      for (int64_t p = 0; p < pairs; ++p) {
        panel[(p * mr + i) * 2] = 0;
        panel[(p * mr + i) * 2 + 1] = 0;
      }
    }
  }
}

void PackAPairsOf(DType dtype, const void* a, int64_t row_stride, int64_t col_stride, int64_t rows,
                  int64_t k, int mr, int16_t* dst) {
  switch (dtype) {
    case DType::kU8:
      return PackRowsAsPairs(static_cast<const uint8_t*>(a), row_stride, col_stride, rows, k, mr,
                             dst);
    case DType::kI8:
      return PackRowsAsPairs(static_cast<const int8_t*>(a), row_stride, col_stride, rows, k, mr,
                             dst);
    default:
      return PackRowsAsPairs(static_cast<const int16_t*>(a), row_stride, col_stride, rows, k, mr,
                             dst);
  }
}

// The quad steps of depth k, padded to a multiple of `multiple`.
int64_t QuadSteps(int64_t k, int multiple) { return RoundUp(CeilDiv(k, 4), multiple); }

// A[0:rows, 0:k] (u8, or i8 stored as A + 128, strided) into ceil(rows / mr) panels of `steps`
// quads, `panel_bytes` apart: element (q * mr + i) * 4 + h of a panel is A[i][4q + h], rows past
// `rows` and depth steps past k zero (for an i8 A too: the column sums the kernel subtracts count
// only B's values). Also B's contiguous i8 columns, as u8 (no flip), into NR-column panels.
template <class T>
void PackRowsAsQuads(const T* a, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t k,
                     int mr, int64_t steps, int64_t panel_bytes, uint8_t* dst) {
  // x + 128 of an i8 is its byte with the sign bit flipped.
  constexpr uint32_t kFlip = std::is_same_v<T, int8_t> ? 0x80808080u : 0;
  const int64_t quads = steps, whole = k / 4;
  for (int64_t r0 = 0; r0 < rows; r0 += mr) {
    const int valid = static_cast<int>(std::min<int64_t>(mr, rows - r0));
    uint8_t* panel = dst + r0 / mr * panel_bytes;
    for (int i = 0; i < mr; ++i) {
      uint8_t* out = panel + 4 * i;
      if (i >= valid) {
        for (int64_t q = 0; q < quads; ++q) std::memset(out + q * mr * 4, 0, 4);
        continue;
      }
      const T* src = a + (r0 + i) * row_stride;
      for (int64_t q = 0; q < whole; ++q) {
        uint8_t* quad = out + q * mr * 4;
        if (col_stride == 1) {
          uint32_t bytes;
          std::memcpy(&bytes, src + 4 * q, 4);
          bytes ^= kFlip;
          std::memcpy(quad, &bytes, 4);
        } else {
          for (int h = 0; h < 4; ++h) {
            quad[h] = static_cast<uint8_t>(src[(4 * q + h) * col_stride]) ^ (kFlip & 0xff);
          }
        }
      }
      for (int64_t q = whole; q < quads; ++q) {
        uint8_t* quad = out + q * mr * 4;
        for (int h = 0; h < 4; ++h) {
          const int64_t kk = 4 * q + h;
          quad[h] = kk < k ? static_cast<uint8_t>(src[kk * col_stride]) ^ (kFlip & 0xff) : 0;
        }
      }
    }
  }
}

// A[0:rows, 0:k] (u8, or i8 stored as A + 128) into ceil(rows / kAmxTile) panels for the AMX
// kernels: per kAmxQuadSteps quad steps (64 bytes of depth), kAmxTile rows of 64 bytes, so that
// each half of the panel's rows is one tile (rows 64 bytes apart). `steps` (a multiple of
// kAmxQuadSteps) quads per row; rows past `rows` and depth past k zero.
template <class T>
void PackRowsAsTiles(const T* a, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t k,
                     int64_t steps, uint8_t* dst) {
  constexpr uint8_t kFlip = std::is_same_v<T, int8_t> ? 0x80 : 0;
  constexpr int64_t kRowBytes = int64_t{kAmxQuadSteps} * 4;
  const int64_t chunks = steps / kAmxQuadSteps, panel_bytes = steps * 4 * kAmxTile;
  for (int64_t r0 = 0; r0 < rows; r0 += kAmxTile) {
    uint8_t* panel = dst + r0 / kAmxTile * panel_bytes;
    for (int64_t i = 0; i < kAmxTile; ++i) {
      const bool valid = r0 + i < rows;
      const T* src = a + (r0 + i) * row_stride;
      for (int64_t c = 0; c < chunks; ++c) {
        uint8_t* out = panel + (c * kAmxTile + i) * kRowBytes;
        const int64_t k0 = c * kRowBytes;
        if (!valid || k0 >= k) {
          std::memset(out, 0, kRowBytes);
        } else if (col_stride == 1 && k0 + kRowBytes <= k) {
          std::memcpy(out, src + k0, kRowBytes);
          if constexpr (kFlip != 0) {
            for (int64_t b = 0; b < kRowBytes; ++b) out[b] ^= kFlip;
          }
        } else {
          for (int64_t b = 0; b < kRowBytes; ++b) {
            const int64_t kk = k0 + b;
            out[b] = kk < k ? static_cast<uint8_t>(src[kk * col_stride]) ^ kFlip : 0;
          }
        }
      }
    }
  }
}

// One band of A packed in one layout, kept while the call, A and the band stay the same: batch
// entries that share A (a convolution's images) pack it once per thread and call.
struct PackedBand {
  AlignedBuffer buffer;
  uint64_t generation = 0;
  const void* source = nullptr;
  const void* data = nullptr;
  int64_t ic = 0;
};

// Per-thread packing space.
struct Int8Buffers {
  PackedBand pairs, quads;
  AlignedBuffer b, scratch;
};

Int8Buffers& ThreadBuffers() {
  thread_local Int8Buffers buffers;
  return buffers;
}

std::atomic<uint64_t> next_generation{1};

struct Int8Plan {
  KernelShape shape;
  int64_t mc = 0, nc = 0;
  Int8MicroKernelFn kernel = nullptr;       // i16 pairs
  Int8MicroKernelFn quad_kernel = nullptr;  // quads (KernelShape::u8_quads); null: pairs only
  bool vnni_quads = false;                  // quad_kernel takes any B
  bool column_sums = false;                 // quad_kernel is signed_a: B panels carry the sums
  int quad_step_multiple = 1;               // kAmxQuadSteps where the provider has AMX
  uint64_t generation = 0;

  Int8BPacker::Quads QuadUse() const {
    return {quad_kernel != nullptr, column_sums, vnni_quads, quad_step_multiple};
  }
};

// Blocks from the host's caches: the B block (K x NC i16) in half of L2, the A band (MC x K i16)
// in half of this core's share of L3.
void ChooseInt8Blocking(Int8Plan& plan, int64_t k, const GemmTuning& tuning) {
  const CacheSizes& caches = HostCaches();
  const int mr = plan.shape.mr, nr = plan.shape.nr();
  // i16 pairs take two bytes per depth step; the AMX kernels' quads (every block) one.
  const int64_t row_bytes = plan.shape.amx
                                ? std::max<int64_t>(64, QuadSteps(k, plan.quad_step_multiple) * 4)
                                : std::max<int64_t>(2, RoundUp(k, 2) * 2);
  plan.nc = tuning.nc > 0 ? RoundUp(tuning.nc, nr)
                          : std::max<int64_t>(nr, caches.l2 / 2 / row_bytes / nr * nr);
  const int64_t l3_share = caches.l3 / std::max(1, caches.l3_sharing);
  plan.mc = tuning.mc > 0 ? RoundUp(tuning.mc, mr)
                          : std::max<int64_t>(mr, l3_share / 2 / row_bytes / mr * mr);
}

// The quad steps are padded to the AMX tiles' depth wherever the provider has AMX, so that a B
// packed once serves its AMX and other kernels alike.
int QuadStepMultiple(const TargetVectors& vectors) { return vectors.amx ? kAmxQuadSteps : 1; }

// `shape` as the quad kernel for an A of `a_dtype`: an i8 A packed as A + 128 with column sums,
// or with b_unsigned (an i8 A, a u8 B) the signs the other way round.
KernelShape QuadShape(KernelShape shape, DType a_dtype, bool b_unsigned, bool vnni) {
  shape.u8_quads = true;
  shape.b_unsigned = b_unsigned;
  shape.signed_a = a_dtype == DType::kI8 && !b_unsigned;
  shape.vnni = vnni;
  return shape;
}

void AdoptQuadKernel(const KernelShape& shape, Int8MicroKernelFn kernel, Int8Plan& plan) {
  plan.quad_kernel = kernel;
  plan.vnni_quads = shape.vnni;
  plan.column_sums = shape.signed_a;
}

// Fetches the pairs kernel of plan.shape for `variant` and, when `quads` (a u8 or i8 A, an i8 B)
// or, with VNNI, `quads_b_unsigned` (an i8 A, a u8 B) and the tuning allow, the quads one (a
// provider without it, a blob compiled before the quad kernels, leaves quad_kernel null: pairs
// only). Both are fetched before any block is packed, since the layout is chosen per block from its
// values (and a blob's recording run sees only zeros).
absl::Status FetchInt8Kernels(const Int8EpilogueVariant& variant, DType a_dtype, bool quads,
                              bool quads_b_unsigned, const GemmTuning& tuning,
                              const MicroKernelProvider& kernels, Int8Plan& plan) {
  absl::StatusOr<Int8MicroKernelFn> kernel = kernels.GetInt8(plan.shape, variant);
  if (!kernel.ok()) return kernel.status();
  plan.kernel = *kernel;
  const bool vnni = kernels.vectors().vnni;
  const bool b_unsigned = !quads && quads_b_unsigned && vnni;
  if (!(quads || b_unsigned) || !tuning.int8_quads) return absl::OkStatus();
  const KernelShape shape = QuadShape(plan.shape, a_dtype, b_unsigned, vnni);
  absl::StatusOr<Int8MicroKernelFn> quad_kernel = kernels.GetInt8(shape, variant);
  if (quad_kernel.ok()) {
    AdoptQuadKernel(shape, *quad_kernel, plan);
  } else if (!absl::IsNotFound(quad_kernel.status())) {
    return quad_kernel.status();
  }
  return absl::OkStatus();
}

// Bytes of one packed B panel (NR columns, the whole depth) in either layout: i16 pairs, or quads
// followed, with column_sums (a signed A as A + 128), by the row of column sums.
int64_t PanelBytes(int64_t k, int nr, bool quads, bool column_sums, int step_multiple) {
  return (quads ? QuadSteps(k, step_multiple) + (column_sums ? 1 : 0) : CeilDiv(k, 2)) * nr * 4;
}

// Rows [ic, ic + mcb) of A packed as quads or pairs in `band`: k_steps * 4 bytes per row.
const char* PackedRows(const Int8CoreProblem& p, const Int8Plan& plan, const char* a, int64_t ic,
                       int64_t mcb, bool quads, PackedBand& band) {
  const int mr = plan.shape.mr;
  const int64_t steps = quads ? QuadSteps(p.k, plan.quad_step_multiple) : CeilDiv(p.k, 2);
  void* data =
      band.buffer.Get(static_cast<size_t>(std::max<int64_t>(1, RoundUp(mcb, mr) * steps)) * 4);
  if (band.generation != plan.generation || band.source != a || band.ic != ic ||
      band.data != data) {
    const char* rows = a + ic * p.a_row_stride * base::DTypeSize(p.a_dtype);
    const int64_t panel_bytes = steps * mr * 4;
    auto* out = static_cast<uint8_t*>(data);
    const auto pack_quads = [&]<class T>(const T* from) {
      if (plan.shape.amx) {
        PackRowsAsTiles(from, p.a_row_stride, p.a_col_stride, mcb, p.k, steps, out);
      } else {
        PackRowsAsQuads(from, p.a_row_stride, p.a_col_stride, mcb, p.k, mr, steps, panel_bytes,
                        out);
      }
    };
    if (quads && plan.column_sums) {  // an i8 A as A + 128
      pack_quads(reinterpret_cast<const int8_t*>(rows));
    } else if (quads) {
      pack_quads(reinterpret_cast<const uint8_t*>(rows));
    } else {
      PackAPairsOf(p.a_dtype, rows, p.a_row_stride, p.a_col_stride, mcb, p.k, mr,
                   static_cast<int16_t*>(data));
    }
    band.generation = plan.generation;
    band.source = a;
    band.ic = ic;
    band.data = data;
  }
  return static_cast<const char*>(data);
}

// The B panels of one block [jc, jc + ncb): packed for this call (one layout for all) or taken
// from a PackedInt8B (each its own).
struct BlockPanels {
  const char* data = nullptr;
  int64_t stride = 0;  // bytes per panel, packed for this call
  bool all_quads = false;
  const PackedInt8B* packed = nullptr;
  int64_t first = 0;  // the block's first panel of `packed`

  bool Quads(int64_t t) const {
    return packed != nullptr ? packed->quads[static_cast<size_t>(first + t)] != 0 : all_quads;
  }
  const char* Panel(int64_t t) const {
    return packed != nullptr ? packed->Panel(first + t) : data + t * stride;
  }
};

void ComputeRect(const Int8CoreProblem& p, const Int8Plan& plan, const BatchOffsets& batch,
                 int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const int mr = plan.shape.mr, nr = plan.shape.nr();
  const int64_t pairs = CeilDiv(p.k, 2), quad_steps = QuadSteps(p.k, plan.quad_step_multiple);
  const bool column_sums = plan.column_sums;
  const int64_t a_size = base::DTypeSize(p.a_dtype);
  const int64_t c_size = base::DTypeSize(p.epilogue.output);
  Int8Buffers& buffers = ThreadBuffers();
  const char* a = static_cast<const char*>(p.a) + batch.a * a_size;
  const char* b = static_cast<const char*>(p.b) + batch.b * p.b_element_size;
  char* c = static_cast<char*>(p.c) + batch.c * c_size;
  const std::vector<Int8EpilogueStep>& steps = p.epilogue.steps;
  const Int8BPacker::Quads quad_use = plan.QuadUse();
  const int64_t pair_panel_bytes = PanelBytes(p.k, nr, false, column_sums, plan.quad_step_multiple);
  const int64_t quad_panel_bytes = PanelBytes(p.k, nr, true, column_sums, plan.quad_step_multiple);

  Int8TileArgs args;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (steps[s].operand == Int8Operand::kScalar) args.operands[s] = &steps[s].scalar;
  }
  for (int64_t ic = m0; ic < m1; ic += plan.mc) {
    const int64_t mcb = std::min(plan.mc, m1 - ic);
    for (int64_t jc = n0; jc < n1; jc += plan.nc) {
      const int64_t ncb = std::min(plan.nc, n1 - jc);
      const int64_t panels = CeilDiv(ncb, nr);
      BlockPanels block;
      if (p.packed_b != nullptr) {
        block.packed = p.packed_b;
        block.first = jc / nr;  // rectangles and blocks start at multiples of NR
      } else {
        // Room for either layout.
        const int64_t bytes = std::max(pair_panel_bytes, quad_panel_bytes);
        void* b_packed = buffers.b.Get(static_cast<size_t>(std::max<int64_t>(1, panels * bytes)));
        block.all_quads =
            p.b_packer->Pack(b, p.k, jc, ncb, nr, quad_use, b_packed, buffers.scratch);
        block.data = static_cast<const char*>(b_packed);
        block.stride = block.all_quads ? quad_panel_bytes : pair_panel_bytes;
      }
      // A's band in each layout the block's panels use ([0] pairs, [1] quads).
      const char* a_packed[2] = {nullptr, nullptr};
      for (int64_t t = 0; t < panels; ++t) {
        const bool quads = block.Quads(t);
        if (a_packed[quads] == nullptr) {
          a_packed[quads] =
              PackedRows(p, plan, a, ic, mcb, quads, quads ? buffers.quads : buffers.pairs);
        }
      }
      for (int64_t ir = 0; ir < mcb; ir += mr) {
        const int64_t row = ic + ir;
        args.m_valid = std::min<int64_t>(mr, mcb - ir);
        for (size_t s = 0; s < steps.size(); ++s) {
          if (steps[s].operand == Int8Operand::kRow) {
            args.operands[s] = steps[s].vector + batch.row_bias + row;
          }
        }
        if (plan.shape.amx) {
          // The block's panels in one call (one tile configuration); all quads, equally sized.
          args.panels = panels;
          args.b_panel_bytes = quad_panel_bytes;
          args.n_valid = ncb - (panels - 1) * nr;
          for (size_t s = 0; s < steps.size(); ++s) {
            if (steps[s].operand == Int8Operand::kColumn) args.operands[s] = steps[s].vector + jc;
          }
          plan.quad_kernel(quad_steps, a_packed[1] + ir * quad_steps * 4, block.Panel(0),
                           c + (row * p.ldc + jc) * c_size, p.ldc, &args);
          continue;
        }
        for (int64_t jr = 0; jr < ncb; jr += nr) {
          const int64_t column = jc + jr;
          const bool quads = block.Quads(jr / nr);
          const int64_t k_steps = quads ? quad_steps : pairs;
          args.n_valid = std::min<int64_t>(nr, ncb - jr);
          for (size_t s = 0; s < steps.size(); ++s) {
            if (steps[s].operand == Int8Operand::kColumn) {
              args.operands[s] = steps[s].vector + column;
            }
          }
          (quads ? plan.quad_kernel : plan.kernel)(
              k_steps, a_packed[quads] + ir * k_steps * 4, block.Panel(jr / nr),
              c + (row * p.ldc + column) * c_size, p.ldc, &args);
        }
      }
    }
  }
}

}  // namespace

bool IsInt8Operand(DType dtype) {
  return dtype == DType::kU8 || dtype == DType::kI8 || dtype == DType::kI16;
}

bool IsInt8Output(DType dtype) {
  return dtype == DType::kI32 || dtype == DType::kF32 || dtype == DType::kU8 || dtype == DType::kI8;
}

absl::Status CheckInt8Epilogue(const char* what, const Int8Epilogue& epilogue) {
  if (!IsInt8Output(epilogue.output)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": output dtype ",
                                                   base::DTypeName(epilogue.output),
                                                   " is not supported (i32, f32, u8, i8)"));
  }
  if (epilogue.output == DType::kI32 && !epilogue.steps.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": an i32 output stores the sums; its epilogue has no steps"));
  }
  if (epilogue.steps.size() > static_cast<size_t>(kMaxInt8EpilogueSteps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", epilogue.steps.size(), " epilogue steps, at most ", kMaxInt8EpilogueSteps));
  }
  for (size_t s = 0; s < epilogue.steps.size(); ++s) {
    const Int8EpilogueStep& step = epilogue.steps[s];
    const bool takes_operand = step.op != Int8EpilogueOp::kRound;
    const bool has_operand = step.operand != Int8Operand::kNone;
    if (takes_operand != has_operand) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": epilogue step ", s, " (", Int8EpilogueOpName(step.op), ") ",
                       takes_operand ? "needs an operand" : "takes no operand", ", got ",
                       Int8OperandName(step.operand)));
    }
    const bool vector = step.operand == Int8Operand::kRow || step.operand == Int8Operand::kColumn;
    if (vector && step.vector == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": epilogue step ", s, " (", Int8EpilogueOpName(step.op), ") has a null vector"));
    }
  }
  return absl::OkStatus();
}

Int8EpilogueVariant Int8EpilogueVariant::Of(const Int8Epilogue& epilogue) {
  Int8EpilogueVariant variant;
  variant.output = epilogue.output;
  for (const Int8EpilogueStep& step : epilogue.steps)
    variant.steps.emplace_back(step.op, step.operand);
  return variant;
}

std::string Int8EpilogueVariant::Name() const {
  std::string name = base::DTypeName(output);
  for (const auto& [op, operand] : steps) {
    absl::StrAppend(&name, "_", Int8EpilogueOpName(op));
    switch (operand) {
      case Int8Operand::kScalar:
        absl::StrAppend(&name, "_s");
        break;
      case Int8Operand::kRow:
        absl::StrAppend(&name, "_r");
        break;
      case Int8Operand::kColumn:
        absl::StrAppend(&name, "_c");
        break;
      case Int8Operand::kNone:
        break;
    }
  }
  return name;
}

absl::StatusOr<KernelShape> ChooseInt8KernelShape(const GemmTuning& tuning,
                                                  const TargetVectors& vectors) {
  // i32 accumulators have f32's lanes. The register budget has one more than f32's: pmaddwd
  // cannot accumulate (an fma can), so each product needs a register before its add. MR
  // accumulator rows of nr_vectors, the row of B vectors, the broadcast A pair and the product:
  // 5 x 16 on 16 registers (6 x 16 spills), 13 x 32 on 32.
  absl::StatusOr<KernelShape> shape = ChooseKernelShape(DType::kF32, tuning, vectors);
  if (!shape.ok()) return shape.status();
  if (tuning.mr == 0) shape->mr = (vectors.registers - shape->nr_vectors - 3) / shape->nr_vectors;
  shape->fma = false;
  return shape;
}

std::string Int8MicroKernelName(const KernelShape& shape, const Int8EpilogueVariant& variant) {
  return absl::StrCat("kiln_qgemm_", shape.mr, "x", shape.nr(), "_v", shape.vector_bits,
                      !shape.u8_quads ? "_"
                                      : absl::StrCat("_",
                                                     shape.b_unsigned ? "ub"
                                                     : shape.signed_a ? "s8"
                                                                      : "u8",
                                                     shape.amx    ? "x_"
                                                     : shape.vnni ? "v_"
                                                                  : "q_"),
                      variant.Name());
}

namespace {

// Whether every value lies in [-64, 64]; stops soon after the first that does not (a weight
// matrix quantized to the full 8 bits has one in its first few bytes). Eight bytes at a time:
// each byte plus 64 (no carry between bytes) must not exceed 128.
bool WithinQuadRange(const int8_t* values, int64_t count) {
  constexpr uint64_t kHigh = 0x8080808080808080u, kLow = 0x7f7f7f7f7f7f7f7fu;
  constexpr uint64_t kPlus64 = 0x4040404040404040u;
  constexpr int64_t kChunk = 256;  // bytes between the early exits
  uint64_t outside = 0;
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    uint64_t x;
    std::memcpy(&x, values + i, 8);
    const uint64_t shifted = ((x & kLow) + kPlus64) ^ (x & kHigh);
    // Above 128: the high bit set and any of the low seven.
    outside |= shifted & kHigh & ((shifted & kLow) + kLow);
    if ((i + 8) % kChunk == 0 && outside != 0) return false;
  }
  for (; i < count; ++i) {
    if (static_cast<uint8_t>(values[i] + 64) > 128) return false;
  }
  return outside == 0;
}

// 128 x the sum of `count` values `stride` apart, mod 2^32 (the kernel's sums wrap alike): what a
// quad kernel subtracts from a column's sums for an i8 A packed as A + 128.
uint32_t ScaledColumnSum(const int8_t* values, int64_t count, int64_t stride) {
  uint32_t sum = 0;
  for (int64_t i = 0; i < count; ++i) sum += static_cast<uint32_t>(int32_t{values[i * stride]});
  return sum * 128u;
}

// The narrow k x nr panels of Pack into pairs of i16 / quads of bytes (Int8MicroKernelFn's b).
template <class T>
void InterleavePairs(const T* narrow, int64_t panels, int64_t k, int nr, int16_t* dst) {
  const int64_t pairs = CeilDiv(k, 2);
  for (int64_t q = 0; q < panels; ++q) {
    const T* src = narrow + q * k * nr;
    int16_t* out = dst + q * pairs * nr * 2;
    for (int64_t p = 0; p < pairs; ++p) {
      const T* even = src + 2 * p * nr;
      int16_t* row = out + p * nr * 2;
      if (2 * p + 1 < k) {
        const T* odd = even + nr;
        for (int j = 0; j < nr; ++j) {
          row[2 * j] = static_cast<int16_t>(even[j]);
          row[2 * j + 1] = static_cast<int16_t>(odd[j]);
        }
      } else {
        for (int j = 0; j < nr; ++j) {
          row[2 * j] = static_cast<int16_t>(even[j]);
          row[2 * j + 1] = 0;
        }
      }
    }
  }
}

// With column_sums, each panel's quads are followed by NR i32, ScaledColumnSum of each column.
void InterleaveQuads(const int8_t* narrow, int64_t panels, int64_t k, int nr, bool column_sums,
                     int64_t steps, int8_t* dst) {
  const int64_t quads = steps;
  const std::vector<int8_t> zeros(static_cast<size_t>(nr), 0);
  for (int64_t q = 0; q < panels; ++q) {
    const int8_t* src = narrow + q * k * nr;
    int8_t* out = dst + q * (quads + (column_sums ? 1 : 0)) * nr * 4;
    for (int64_t s = 0; s < quads; ++s) {
      const int8_t* depth[4];
      for (int h = 0; h < 4; ++h) depth[h] = 4 * s + h < k ? src + (4 * s + h) * nr : zeros.data();
      int8_t* row = out + s * nr * 4;
      int j = 0;
#if defined(__SSE2__)
      // 16 columns at a time: bytes of rows 0/1 and 2/3 interleaved into pairs, the pairs into
      // quads (the scalar loop below took a tenth of a CNN's int8 inference).
      for (; j + 16 <= nr; j += 16) {
        const auto load = [&](int h) {
          return _mm_loadu_si128(reinterpret_cast<const __m128i*>(depth[h] + j));
        };
        const __m128i r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
        const __m128i low01 = _mm_unpacklo_epi8(r0, r1), high01 = _mm_unpackhi_epi8(r0, r1);
        const __m128i low23 = _mm_unpacklo_epi8(r2, r3), high23 = _mm_unpackhi_epi8(r2, r3);
        auto* to = reinterpret_cast<__m128i*>(row + 4 * j);
        _mm_storeu_si128(to, _mm_unpacklo_epi16(low01, low23));
        _mm_storeu_si128(to + 1, _mm_unpackhi_epi16(low01, low23));
        _mm_storeu_si128(to + 2, _mm_unpacklo_epi16(high01, high23));
        _mm_storeu_si128(to + 3, _mm_unpackhi_epi16(high01, high23));
      }
#endif
      for (; j < nr; ++j) {
        const uint32_t quad = static_cast<uint8_t>(depth[0][j]) |
                              static_cast<uint32_t>(static_cast<uint8_t>(depth[1][j])) << 8 |
                              static_cast<uint32_t>(static_cast<uint8_t>(depth[2][j])) << 16 |
                              static_cast<uint32_t>(static_cast<uint8_t>(depth[3][j])) << 24;
        std::memcpy(row + 4 * j, &quad, 4);  // little-endian: depth step 4s + h at byte h
      }
    }
    if (!column_sums) continue;
    for (int j = 0; j < nr; ++j) {
      const uint32_t sum = ScaledColumnSum(src + j, k, nr);
      std::memcpy(out + (quads * nr + j) * 4, &sum, 4);
    }
  }
}

// A B whose columns are contiguous (row stride 1: a Linear layer's [N, K] weight used as
// B = W^T) packed straight from its columns, without narrow panels: the rows of B^T packed as A's
// rows are (pairs, or for i8 quads with, for a signed A, a row of column sums after each panel).
template <class T>
class ColumnInt8Packer final : public Int8BPacker {
 public:
  explicit ColumnInt8Packer(int64_t col_stride) : col_stride_(col_stride) {}

  bool Pack(const void* base, int64_t k, int64_t n0, int64_t nc, int nr, Quads quads, void* dst,
            AlignedBuffer&) const override {
    const auto* b = static_cast<const T*>(base) + n0 * col_stride_;
    if constexpr (sizeof(T) == 1) {
      // A u8 B only ever comes with any_value (VNNI): its range is not the check's.
      bool within = quads.allowed && (std::is_same_v<T, int8_t> || quads.any_value);
      for (int64_t j = 0; j < nc && within && !quads.any_value; ++j) {
        within = WithinQuadRange(reinterpret_cast<const int8_t*>(b) + j * col_stride_, k);
      }
      if (within) {
        const bool column_sums = quads.column_sums;
        const int64_t steps = QuadSteps(k, quads.step_multiple);
        const int64_t panel_bytes = (steps + (column_sums ? 1 : 0)) * nr * 4;
        auto* out = static_cast<uint8_t*>(dst);
        PackRowsAsQuads(reinterpret_cast<const uint8_t*>(b), col_stride_, 1, nc, k, nr, steps,
                        panel_bytes, out);
        if (column_sums) {
          for (int64_t j = 0; j < RoundUp(nc, nr); ++j) {
            const uint32_t sum =
                j < nc ? ScaledColumnSum(reinterpret_cast<const int8_t*>(b) + j * col_stride_, k, 1)
                       : 0;
            std::memcpy(out + j / nr * panel_bytes + (steps * nr + j % nr) * 4, &sum, 4);
          }
        }
        return true;
      }
    }
    PackRowsAsPairs(b, col_stride_, 1, nc, k, nr, static_cast<int16_t*>(dst));
    return false;
  }

 private:
  int64_t col_stride_;
};

}  // namespace

template <class T>
bool NarrowInt8Packer<T>::Pack(const void* base, int64_t k, int64_t n0, int64_t nc, int nr,
                               Quads quads, void* dst, AlignedBuffer& scratch) const {
  const int64_t panels = CeilDiv(nc, nr);
  auto* narrow = static_cast<T*>(
      scratch.Get(static_cast<size_t>(std::max<int64_t>(1, panels * nr * k)) * sizeof(T)));
  narrow_.Pack(static_cast<const T*>(base), 0, k, n0, nc, nr, narrow);
  if constexpr (sizeof(T) == 1) {
    // A u8 B only ever comes with any_value (VNNI), and without column sums.
    const auto* bytes = reinterpret_cast<const int8_t*>(narrow);
    if (quads.allowed && (quads.any_value ||
                          (std::is_same_v<T, int8_t> && WithinQuadRange(bytes, panels * nr * k)))) {
      InterleaveQuads(bytes, panels, k, nr, quads.column_sums, QuadSteps(k, quads.step_multiple),
                      static_cast<int8_t*>(dst));
      return true;
    }
  }
  InterleavePairs(narrow, panels, k, nr, static_cast<int16_t*>(dst));
  return false;
}

template class NarrowInt8Packer<uint8_t>;
template class NarrowInt8Packer<int8_t>;
template class NarrowInt8Packer<int16_t>;

// The AMX kernels for `problem` when the provider has them and they fit: a u8 or i8 A of at
// least kAmxTile rows, an i8 B (packed once: all in quads), the host's own tile shape. Then
// `plan` gets their shape and quad kernel (no pairs kernel: every B block is quads).
absl::StatusOr<bool> UseAmxKernels(const Int8CoreProblem& problem, const GemmTuning& tuning,
                                   const MicroKernelProvider& kernels,
                                   const Int8EpilogueVariant& variant, Int8Plan& plan) {
  const TargetVectors vectors = kernels.vectors();
  if (!vectors.amx || !vectors.vnni || vectors.bits != 512 ||
      !(problem.quads || problem.quads_b_unsigned) || !tuning.int8_quads || problem.m < kAmxTile ||
      tuning.vector_bits != 0 || tuning.mr != 0 ||
      (problem.packed_b != nullptr && !problem.packed_b->all_quads)) {
    return false;
  }
  KernelShape shape =
      QuadShape(plan.shape, problem.a_dtype, /*b_unsigned=*/!problem.quads, /*vnni=*/true);
  shape.mr = kAmxTile;
  shape.nr_vectors = kAmxTile / shape.lanes;
  shape.amx = true;
  absl::StatusOr<Int8MicroKernelFn> kernel = kernels.GetInt8(shape, variant);
  if (absl::IsNotFound(kernel.status())) return false;  // a blob without them
  if (!kernel.ok()) return kernel.status();
  plan.shape = shape;
  AdoptQuadKernel(shape, *kernel, plan);
  return true;
}

absl::Status RunInt8Core(const Int8CoreProblem& problem, const GemmTuning& tuning,
                         const MicroKernelProvider& kernels, runtime::ThreadPool* pool) {
  const TargetVectors vectors = kernels.vectors();
  absl::StatusOr<KernelShape> shape = ChooseInt8KernelShape(tuning, vectors);
  if (!shape.ok()) return shape.status();
  if (problem.m == 0 || problem.n == 0 || problem.batches.empty()) return absl::OkStatus();
  const Int8EpilogueVariant variant = Int8EpilogueVariant::Of(problem.epilogue);
  const PackedInt8B* packed = problem.packed_b;
  Int8Plan plan;
  plan.shape = *shape;
  plan.quad_step_multiple = QuadStepMultiple(vectors);
  absl::StatusOr<bool> amx = UseAmxKernels(problem, tuning, kernels, variant, plan);
  if (!amx.ok()) return amx.status();
  if (!*amx) {
    plan.shape.mr = FitTileRows(plan.shape.mr, problem.m, tuning);
    if (absl::Status s = FetchInt8Kernels(variant, problem.a_dtype, problem.quads,
                                          problem.quads_b_unsigned, tuning, kernels, plan);
        !s.ok()) {
      return s;
    }
  }
  ChooseInt8Blocking(plan, problem.k, tuning);
  plan.generation = next_generation.fetch_add(1, std::memory_order_relaxed);
  if (packed != nullptr) {
    if (packed->quad_step_multiple != plan.quad_step_multiple) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm int8: packed_b pads its quads to multiples of ", packed->quad_step_multiple,
          " steps, this call's kernels to ", plan.quad_step_multiple, " (another provider)"));
    }
    if (packed->nr != plan.shape.nr() || packed->vector_bits != plan.shape.vector_bits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm int8: packed_b was packed for ", packed->nr, "-column panels of ",
          packed->vector_bits, "-bit vectors, this call's kernels take ", plan.shape.nr(), " of ",
          plan.shape.vector_bits, " (another provider or tuning)"));
    }
    if (packed->any_quads && plan.quad_kernel == nullptr) {
      return absl::InvalidArgumentError(
          "gemm int8: packed_b holds quad panels but this call has no quad kernels (another "
          "provider, or tuning.int8_quads off)");
    }
  }
  ForEachRectangle(
      problem.m, problem.n, problem.k, static_cast<int64_t>(problem.batches.size()), plan.shape.mr,
      plan.shape.nr(), pool,
      [&](int64_t batch, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
        ComputeRect(problem, plan, problem.batches[static_cast<size_t>(batch)], m0, m1, n0, n1);
      },
      /*b_prepacked=*/packed != nullptr);
  return absl::OkStatus();
}

}  // namespace gemm_internal

namespace {

using base::DType;
using gemm_internal::BatchOffsets;
using gemm_internal::Int8BPacker;
using gemm_internal::Int8CoreProblem;
using gemm_internal::NarrowInt8Packer;
using gemm_internal::StridedBPacker;

absl::Status CheckInt8Operands(const char* what, DType a_dtype, DType b_dtype) {
  for (auto [name, dtype] : {std::pair{"a", a_dtype}, {"b", b_dtype}}) {
    if (!gemm_internal::IsInt8Operand(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", name, " dtype ", base::DTypeName(dtype), " is not supported (u8, i8, i16)"));
    }
  }
  return absl::OkStatus();
}

// Calls run(packer, quads, quads_b_unsigned) with the packer for B of `params` (its dtype and
// view) and whether its blocks may run on the quad kernels (a u8 or i8 A and an i8 B; or, with
// VNNI, an i8 A and a u8 B: Int8CoreProblem).
template <class Run>
absl::Status WithInt8BPacker(const Int8GemmParams& params, Run run) {
  return gemm_internal::WithInt8OperandType(params.b_dtype, [&]<class T>(T*) {
    const StridedBPacker<T> narrow(params.b.row_stride, params.b.col_stride);
    const NarrowInt8Packer<T> packer(narrow);
    const gemm_internal::ColumnInt8Packer<T> columns(params.b.col_stride);
    // A row-major B goes through the narrow panels: gathering each quad from four rows straight
    // from B ran 2-4% slower at 2048^3 (rows 339-347 against narrow 353-355 GOP/s, alternated).
    const Int8BPacker& chosen =
        params.b.row_stride == 1 ? static_cast<const Int8BPacker&>(columns) : packer;
    const bool quads =
        (params.a_dtype == DType::kU8 || params.a_dtype == DType::kI8) && std::is_same_v<T, int8_t>;
    const bool quads_b_unsigned = params.a_dtype == DType::kI8 && std::is_same_v<T, uint8_t>;
    return run(chosen, quads, quads_b_unsigned);
  });
}

}  // namespace

absl::Status ExecuteInt8Gemm(const Int8GemmParams& params,
                             const gemm_internal::MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool) {
  if (const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel(); !level.ok()) {
    return level.status();
  }
  if (absl::Status s = CheckInt8Operands("gemm int8", params.a_dtype, params.b_dtype); !s.ok()) {
    return s;
  }
  if (absl::Status s = gemm_internal::CheckInt8Epilogue("gemm int8", params.epilogue); !s.ok()) {
    return s;
  }
  const PackedInt8B* packed = params.packed_b.get();
  // With B packed, its view is not read: a dense stand-in passes the geometry checks.
  static constexpr int8_t kNoB = 0;
  MatrixView b = params.b;
  if (packed != nullptr) {
    if (packed->a_dtype != params.a_dtype || packed->b_dtype != params.b_dtype ||
        packed->k != params.k || packed->n != params.n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm int8: packed_b holds ", base::DTypeName(packed->b_dtype), " B [", packed->k, ", ",
          packed->n, "] for a ", base::DTypeName(packed->a_dtype), " A; this call multiplies ",
          base::DTypeName(params.a_dtype), " A [", params.m, ", ", params.k, "] by ",
          base::DTypeName(params.b_dtype), " B [", params.k, ", ", params.n, "]"));
    }
    b = MatrixView{&kNoB, 0, 0, {}};
  }
  const absl::StatusOr<int64_t> checked = gemm_internal::CheckGemmGeometry(
      "gemm int8", params.m, params.n, params.k, params.batch, params.a, b, params.c);
  if (!checked.ok()) return checked.status();
  const int64_t count = *checked;
  const size_t rank = params.batch.size();
  if (count == 0 || params.m == 0 || params.n == 0) return absl::OkStatus();
  if (absl::Status s = gemm_internal::CheckGemmOperands("gemm int8", params.m, params.n, params.k,
                                                        params.a, b, params.c);
      !s.ok()) {
    return s;
  }
  Int8CoreProblem problem;
  problem.m = params.m;
  problem.n = params.n;
  problem.k = params.k;
  problem.a_dtype = params.a_dtype;
  problem.a = params.a.data;
  problem.a_row_stride = params.a.row_stride;
  problem.a_col_stride = params.a.col_stride;
  problem.b = b.data;
  problem.b_element_size = base::DTypeSize(params.b_dtype);
  problem.packed_b = packed;
  problem.c = const_cast<void*>(params.c.data);
  problem.ldc = params.c.row_stride;
  problem.epilogue = params.epilogue;
  problem.batches.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(rank, 0);
  auto stride = [](const MatrixView& view, size_t d) {
    return view.batch_strides.empty() ? int64_t{0} : view.batch_strides[d];
  };
  for (int64_t i = 0; i < count; ++i) {
    BatchOffsets offsets;
    for (size_t d = 0; d < rank; ++d) {
      offsets.a += index[d] * stride(params.a, d);
      offsets.b += index[d] * stride(b, d);
      offsets.c += index[d] * stride(params.c, d);
    }
    problem.batches.push_back(offsets);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < params.batch[d]) break;
      index[d] = 0;
    }
  }
  return WithInt8BPacker(params, [&](const Int8BPacker& packer, bool quads, bool b_unsigned) {
    problem.b_packer = &packer;
    problem.quads = quads;
    problem.quads_b_unsigned = b_unsigned;
    return gemm_internal::RunInt8Core(problem, params.tuning, kernels, pool);
  });
}

bool SameMatrixForEveryBatchEntry(const MatrixView& view) {
  return std::all_of(view.batch_strides.begin(), view.batch_strides.end(),
                     [](int64_t stride) { return stride == 0; });
}

absl::StatusOr<std::shared_ptr<const PackedInt8B>> PackInt8B(
    const Int8GemmParams& params, const gemm_internal::MicroKernelProvider& kernels) {
  constexpr const char* kWhat = "pack int8 b";
  if (const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel(); !level.ok()) {
    return level.status();
  }
  if (absl::Status s = CheckInt8Operands(kWhat, params.a_dtype, params.b_dtype); !s.ok()) return s;
  if (params.k < 0 || params.n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": k = ", params.k, " and n = ", params.n, " must not be negative"));
  }
  if (absl::Status s = gemm_internal::CheckBatchStrides(kWhat, "b", params.b, params.batch.size(),
                                                        /*may_be_empty=*/true);
      !s.ok()) {
    return s;
  }
  if (!SameMatrixForEveryBatchEntry(params.b)) {
    const int64_t stride =
        *std::find_if(params.b.batch_strides.begin(), params.b.batch_strides.end(),
                      [](int64_t s) { return s != 0; });
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": b has batch stride ", stride,
                     "; a packed B serves every batch entry, so its batch strides must be 0"));
  }
  if (params.b.data == nullptr && params.k > 0 && params.n > 0) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": b.data is null"));
  }
  absl::StatusOr<gemm_internal::KernelShape> shape =
      gemm_internal::ChooseInt8KernelShape(params.tuning, kernels.vectors());
  if (!shape.ok()) return shape.status();
  auto packed = std::make_shared<PackedInt8B>();
  packed->a_dtype = params.a_dtype;
  packed->b_dtype = params.b_dtype;
  packed->k = params.k;
  packed->n = params.n;
  packed->nr = shape->nr();
  packed->vector_bits = shape->vector_bits;
  absl::Status status =
      WithInt8BPacker(params, [&](const Int8BPacker& packer, bool quads, bool b_unsigned) {
        // The kernels of the calls to come (their tile height follows m, as in RunInt8Core): a blob
        // holds only those.
        gemm_internal::Int8Plan plan;
        plan.shape = *shape;
        plan.shape.mr = gemm_internal::FitTileRows(plan.shape.mr, params.m, params.tuning);
        if (absl::Status s = gemm_internal::FetchInt8Kernels(
                gemm_internal::Int8EpilogueVariant::Of(params.epilogue), params.a_dtype, quads,
                b_unsigned, params.tuning, kernels, plan);
            !s.ok()) {
          return s;
        }
        const bool column_sums = plan.column_sums;
        plan.quad_step_multiple = gemm_internal::QuadStepMultiple(kernels.vectors());
        packed->quad_step_multiple = plan.quad_step_multiple;
        const Int8BPacker::Quads quad_use = plan.QuadUse();
        const int multiple = plan.quad_step_multiple;
        // Each panel into the room of either layout, then moved to its place in one buffer.
        const int nr = packed->nr;
        const int64_t room =
            std::max(gemm_internal::PanelBytes(params.k, nr, false, column_sums, multiple),
                     gemm_internal::PanelBytes(params.k, nr, true, column_sums, multiple));
        gemm_internal::AlignedBuffer panel, scratch;
        void* panel_bytes = panel.Get(static_cast<size_t>(std::max<int64_t>(1, room)));
        std::vector<char> staged;
        for (int64_t n0 = 0; n0 < params.n; n0 += nr) {
          const bool as_quads =
              packer.Pack(params.b.data, params.k, n0, std::min<int64_t>(nr, params.n - n0), nr,
                          quad_use, panel_bytes, scratch);
          const int64_t size =
              gemm_internal::PanelBytes(params.k, nr, as_quads, column_sums, multiple);
          packed->offsets.push_back(static_cast<int64_t>(staged.size()));
          packed->quads.push_back(as_quads ? 1 : 0);
          packed->any_quads |= as_quads;
          packed->all_quads &= as_quads;
          const char* from = static_cast<const char*>(panel_bytes);
          staged.insert(staged.end(), from, from + size);
        }
        void* data = packed->buffer.Get(std::max<size_t>(1, staged.size()));
        if (!staged.empty()) std::memcpy(data, staged.data(), staged.size());
        packed->data = static_cast<const char*>(data);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return std::shared_ptr<const PackedInt8B>(std::move(packed));
}

}  // namespace kiln::runtime::cpu
