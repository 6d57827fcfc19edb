// The blocked GEMM driver (packing, cache blocking, threading) around the JIT-compiled
// micro-kernel of gemm_kernel.cc.
//
// Loop nest of one rectangle of C (the work of one task):
//   for ic in rows, step MC:                 A block of MC x KC stays in L3
//     for pc in depth, step KC:
//       pack A[ic.., pc..] into MR-row panels
//       for jc in columns, step NC:          B block of KC x NC stays in L2
//         pack B[pc.., jc..] into NR-column panels
//         for each MR panel:                 its A micro-panel is reused across the NR panels
//           for each NR panel: micro-kernel (the epilogue variant on the last depth block)

#include "runtime/cpu/gemm.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm_checks.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace kiln::runtime::cpu {

const char* GemmActivationName(GemmActivation activation) {
  switch (activation) {
    case GemmActivation::kNone:
      return "none";
    case GemmActivation::kRelu:
      return "relu";
    case GemmActivation::kGeluTanh:
      return "gelu_tanh";
    case GemmActivation::kSilu:
      return "silu";
    case GemmActivation::kSigmoid:
      return "sigmoid";
  }
  return "unknown";
}

MatrixView DenseMatrix(const void* data, int64_t rows, int64_t cols,
                       const std::vector<int64_t>& batch) {
  MatrixView view;
  view.data = data;
  view.row_stride = cols;
  view.col_stride = 1;
  view.batch_strides.resize(batch.size());
  int64_t stride = rows * cols;
  for (size_t i = batch.size(); i-- > 0;) {
    view.batch_strides[i] = stride;
    stride *= batch[i];
  }
  return view;
}

namespace {
#if defined(__x86_64__)
// The hand-written AVX2 paths: taken where this process may use AVX2 and FMA (KILN_CPU pins it
// below the host's level in tests of what other CPUs compute).
bool HostHasAvx2Fma() {
  static const bool has = CpuAllows("avx2") && CpuAllows("fma");
  return has;
}

// dst[c * dst_stride + r] = src[r * src_stride + c] for r, c < 8.
__attribute__((target("avx2"))) void Transpose8x8(const float* src, int64_t src_stride, float* dst,
                                                  int64_t dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  t[0] = _mm256_unpacklo_ps(r[0], r[1]);
  t[1] = _mm256_unpackhi_ps(r[0], r[1]);
  t[2] = _mm256_unpacklo_ps(r[2], r[3]);
  t[3] = _mm256_unpackhi_ps(r[2], r[3]);
  t[4] = _mm256_unpacklo_ps(r[4], r[5]);
  t[5] = _mm256_unpackhi_ps(r[4], r[5]);
  t[6] = _mm256_unpacklo_ps(r[6], r[7]);
  t[7] = _mm256_unpackhi_ps(r[6], r[7]);
  r[0] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(1, 0, 1, 0));
  r[1] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(3, 2, 3, 2));
  r[2] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(1, 0, 1, 0));
  r[3] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(3, 2, 3, 2));
  r[4] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(1, 0, 1, 0));
  r[5] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(3, 2, 3, 2));
  r[6] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(1, 0, 1, 0));
  r[7] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(dst + 0 * dst_stride, _mm256_permute2f128_ps(r[0], r[4], 0x20));
  _mm256_storeu_ps(dst + 1 * dst_stride, _mm256_permute2f128_ps(r[1], r[5], 0x20));
  _mm256_storeu_ps(dst + 2 * dst_stride, _mm256_permute2f128_ps(r[2], r[6], 0x20));
  _mm256_storeu_ps(dst + 3 * dst_stride, _mm256_permute2f128_ps(r[3], r[7], 0x20));
  _mm256_storeu_ps(dst + 4 * dst_stride, _mm256_permute2f128_ps(r[0], r[4], 0x31));
  _mm256_storeu_ps(dst + 5 * dst_stride, _mm256_permute2f128_ps(r[1], r[5], 0x31));
  _mm256_storeu_ps(dst + 6 * dst_stride, _mm256_permute2f128_ps(r[2], r[6], 0x31));
  _mm256_storeu_ps(dst + 7 * dst_stride, _mm256_permute2f128_ps(r[3], r[7], 0x31));
}
#endif
}  // namespace

namespace gemm_internal {
namespace {

// ---- Host caches ----------------------------------------------------------------------------

int64_t ParseCacheSize(std::string text) {
  text = std::string(absl::StripAsciiWhitespace(text));
  int64_t multiplier = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'k')) {
    multiplier = 1 << 10;
    text.pop_back();
  } else if (!text.empty() && text.back() == 'M') {
    multiplier = 1 << 20;
    text.pop_back();
  }
  int64_t value = 0;
  return absl::SimpleAtoi(text, &value) && value > 0 ? value * multiplier : 0;
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// Number of CPUs in a /sys cpu list such as "0-1,4".
int CountCpuList(const std::string& list) {
  int count = 0;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    const size_t dash = part.find('-');
    int first = 0, last = 0;
    if (dash == absl::string_view::npos) {
      if (absl::SimpleAtoi(part, &first)) ++count;
    } else if (absl::SimpleAtoi(part.substr(0, dash), &first) &&
               absl::SimpleAtoi(part.substr(dash + 1), &last) && last >= first) {
      count += last - first + 1;
    }
  }
  return count;
}

CacheSizes DetectCaches() {
  CacheSizes sizes;
  bool found_l1 = false, found_l2 = false, found_l3 = false;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", index, "/");
    const std::string level = ReadFirstLine(dir + "level");
    if (level.empty()) break;
    const std::string type = ReadFirstLine(dir + "type");
    const int64_t size = ParseCacheSize(ReadFirstLine(dir + "size"));
    if (size == 0 || type == "Instruction") continue;
    if (level == "1") {
      sizes.l1d = size;
      found_l1 = true;
    } else if (level == "2") {
      sizes.l2 = size;
      found_l2 = true;
    } else if (level == "3") {
      sizes.l3 = size;
      found_l3 = true;
      sizes.l3_sharing = std::max(1, CountCpuList(ReadFirstLine(dir + "shared_cpu_list")));
    }
  }
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  if (!found_l1 && sysconf(_SC_LEVEL1_DCACHE_SIZE) > 0) sizes.l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  if (!found_l2 && sysconf(_SC_LEVEL2_CACHE_SIZE) > 0) sizes.l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (!found_l3 && sysconf(_SC_LEVEL3_CACHE_SIZE) > 0) {
    sizes.l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    sizes.l3_sharing = cpus > 0 ? static_cast<int>(cpus) : 1;
  }
#else
  (void)found_l1;
  (void)found_l2;
  (void)found_l3;
#endif
  // Guard against nonsense (a hypervisor reporting 0 or absurd sizes).
  sizes.l1d = std::clamp<int64_t>(sizes.l1d, 16 << 10, 256 << 10);
  sizes.l2 = std::clamp<int64_t>(sizes.l2, 128 << 10, 16 << 20);
  sizes.l3 = std::clamp<int64_t>(sizes.l3, sizes.l2, int64_t{512} << 20);
  return sizes;
}

int64_t RoundDown(int64_t value, int64_t multiple) {
  return std::max(multiple, value / multiple * multiple);
}
int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- Packing --------------------------------------------------------------------------------

// One MR-row panel of a row-major A (unit column stride): for each depth step, the MR elements
// of that column. A compile-time MR lets the row loop unroll; on x86-64 (SSE2 is baseline) the
// panel is transposed in 4 x 4 (f32) or 2 x 2 (f64) register blocks, about three times faster
// than element by element, which matters for small matrices where packing is a visible share.
template <class T, int kMr>
void PackRowMajorPanel(const T* src, int64_t row_stride, int64_t kc, T* panel) {
  int64_t k = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    for (; k + 4 <= kc; k += 4) {
      float* out = panel + k * kMr;
      int i = 0;
      for (; i + 4 <= kMr; i += 4) {
        const float* row = src + i * row_stride + k;
        __m128 r0 = _mm_loadu_ps(row);
        __m128 r1 = _mm_loadu_ps(row + row_stride);
        __m128 r2 = _mm_loadu_ps(row + 2 * row_stride);
        __m128 r3 = _mm_loadu_ps(row + 3 * row_stride);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(out + i, r0);
        _mm_storeu_ps(out + kMr + i, r1);
        _mm_storeu_ps(out + 2 * kMr + i, r2);
        _mm_storeu_ps(out + 3 * kMr + i, r3);
      }
      if (i + 2 <= kMr) {
        // The two rows left over by 4-row blocks (AVX2's 6-row and AVX-512's 14-row tiles): as
        // element copies they were the slowest part of the panel.
        const float* row = src + i * row_stride + k;
        const __m128 r0 = _mm_loadu_ps(row), r1 = _mm_loadu_ps(row + row_stride);
        const __m128 low = _mm_unpacklo_ps(r0, r1), high = _mm_unpackhi_ps(r0, r1);
        _mm_storel_pi(reinterpret_cast<__m64*>(out + i), low);
        _mm_storeh_pi(reinterpret_cast<__m64*>(out + kMr + i), low);
        _mm_storel_pi(reinterpret_cast<__m64*>(out + 2 * kMr + i), high);
        _mm_storeh_pi(reinterpret_cast<__m64*>(out + 3 * kMr + i), high);
        i += 2;
      }
      for (; i < kMr; ++i) {
        for (int j = 0; j < 4; ++j) out[j * kMr + i] = src[i * row_stride + k + j];
      }
    }
  } else {
    for (; k + 2 <= kc; k += 2) {
      double* out = panel + k * kMr;
      int i = 0;
      for (; i + 2 <= kMr; i += 2) {
        const double* row = src + i * row_stride + k;
        const __m128d r0 = _mm_loadu_pd(row);
        const __m128d r1 = _mm_loadu_pd(row + row_stride);
        _mm_storeu_pd(out + i, _mm_unpacklo_pd(r0, r1));
        _mm_storeu_pd(out + kMr + i, _mm_unpackhi_pd(r0, r1));
      }
      for (; i < kMr; ++i) {
        for (int j = 0; j < 2; ++j) out[j * kMr + i] = src[i * row_stride + k + j];
      }
    }
  }
#endif
  for (; k < kc; ++k) {
    T* out = panel + k * kMr;
    for (int i = 0; i < kMr; ++i) out[i] = src[i * row_stride + k];
  }
}

// A[0:rows, 0:kc] (strided) into ceil(rows / mr) panels of kc x mr, k-major, rows past `rows`
// zero.
template <class T>
void PackA(const T* a, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t kc, int mr,
           T* dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += mr) {
    const int valid = static_cast<int>(std::min<int64_t>(mr, rows - r0));
    T* panel = dst + r0 * kc;
    const T* src = a + r0 * row_stride;
    if (col_stride == 1 && valid == mr && mr == 14) {
      PackRowMajorPanel<T, 14>(src, row_stride, kc, panel);  // AVX-512's tile
      continue;
    }
    if (col_stride == 1 && valid == mr && mr == 6) {
      PackRowMajorPanel<T, 6>(src, row_stride, kc, panel);  // AVX2's tile
      continue;
    }
    if (row_stride == 1) {
      // Transposed A: the mr elements of a depth step are contiguous.
      for (int64_t k = 0; k < kc; ++k) {
        const T* column = src + k * col_stride;
        T* out = panel + k * mr;
        for (int i = 0; i < valid; ++i) out[i] = column[i];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        T* out = panel + k * mr;
        for (int i = 0; i < valid; ++i) out[i] = src[i * row_stride + k * col_stride];
      }
    }
    if (valid < mr) {
      for (int64_t k = 0; k < kc; ++k) {
        std::fill(panel + k * mr + valid, panel + (k + 1) * mr, T{0});
      }
    }
  }
}

// ---- Per-thread packing buffers -------------------------------------------------------------

struct PackBuffers {
  AlignedBuffer a, b;
  // What `a` holds: the block at (ic, pc) of the A of RunCore call `a_generation` (0: nothing).
  // Batch entries that share A (a convolution's images) then pack it once per thread and call.
  uint64_t a_generation = 0;
  const void* a_source = nullptr;
  const void* a_packed = nullptr;  // a.Get()'s pointer then: a reallocation drops the contents
  int64_t a_ic = 0, a_pc = 0;
};

PackBuffers& ThreadBuffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// ---- The blocked loop nest ------------------------------------------------------------------

struct Plan {
  KernelShape shape;
  Blocking blocking;
  MicroKernelFn plain = nullptr;  // every depth block but the last
  MicroKernelFn last = nullptr;   // the last depth block: with the epilogue
  uint64_t generation = 0;        // unique per RunCore call (A is read-only during one)
};

std::atomic<uint64_t> next_generation{1};

// Whether the micro-kernels read `problem`'s A where it lies. A row-major A needs no packing: a
// tile's rows are MR streams of contiguous depth that the kernel broadcasts from as it would from
// a panel, and the block of A stays in cache across the column panels as a packed one does.
// Packing A costs most where N is small (it is amortised over N / NR micro-kernel calls): in
// place, 256x512x784 ran 1.05-1.11x and 256x10x256 1.1-2x its packed speed on the AVX2 Zen 3.
// Two exceptions pack: AVX-512's 14-row tile, whose row pointers would not fit the general
// registers beside the loop's own, and rows a multiple of 4 KiB apart with a wide B, where the
// rows of an A block share cache sets and the block is reused long enough to be worth a packed
// copy (2048^3: 174-181 in place against 186-188 GFLOP/s packed).
template <class T>
bool ReadsAInPlace(const CoreProblem<T>& problem, int mr, GemmTuning::ARead read) {
  if (problem.a_col_stride != 1 || problem.k == 0) return false;
  switch (read) {
    case GemmTuning::ARead::kPacked:
      return false;
    case GemmTuning::ARead::kInPlace:
      return true;
    case GemmTuning::ARead::kAuto: {
      constexpr int64_t kWideB = 512;
      const bool rows_alias = problem.a_row_stride * static_cast<int64_t>(sizeof(T)) % 4096 == 0;
      return mr <= 8 && !(rows_alias && problem.n > kWideB);
    }
  }
  return false;
}

// C[m0:m1, n0:n1] of batch entry `batch`.
template <class T>
void ComputeRect(const CoreProblem<T>& p, const Plan& plan, const BatchOffsets& batch, int64_t m0,
                 int64_t m1, int64_t n0, int64_t n1) {
  const int mr = plan.shape.mr, nr = plan.shape.nr();
  const int64_t mc = plan.blocking.mc, nc = plan.blocking.nc;
  // Depth blocks of equal size (1024 = 4 x 256 rather than 3 x 288 + 160): a short last block
  // would pay a whole pass over C for little work.
  const int64_t kc_max = p.k == 0 ? plan.blocking.kc : CeilDiv(p.k, CeilDiv(p.k, plan.blocking.kc));
  PackBuffers& buffers = ThreadBuffers();
  const int64_t kc_alloc = std::max<int64_t>(1, std::min(kc_max, p.k));
  T* a_packed =
      plan.shape.a_in_place
          ? nullptr
          : static_cast<T*>(buffers.a.Get(
                static_cast<size_t>(RoundUp(std::min(mc, m1 - m0), mr) * kc_alloc) * sizeof(T)));
  T* b_packed = static_cast<T*>(buffers.b.Get(
      static_cast<size_t>(RoundUp(std::min(nc, n1 - n0), nr) * kc_alloc) * sizeof(T)));
  const T* a = p.a + batch.a;
  const T* b = p.b + batch.b;
  T* c = p.c + batch.c;
  const T* residual = p.residual == nullptr ? nullptr : p.residual + batch.residual;
  const T* row_bias = p.row_bias == nullptr ? nullptr : p.row_bias + batch.row_bias;

  TileArgs args;
  args.alpha = static_cast<double>(p.alpha);
  args.residual_ld = p.residual_ld;
  args.a_ld = p.a_row_stride;
  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t mcb = std::min(mc, m1 - ic);
    // With k == 0 one pass of empty depth still applies beta and the epilogue.
    int64_t pc = 0;
    do {
      const int64_t kcb = std::min(kc_max, p.k - pc);
      const bool first = pc == 0, last = pc + kcb >= p.k;
      // The packed block depends on (A, ic, pc) and, within one call, on nothing else (mcb, kcb
      // and mr follow from ic and pc).
      if (!plan.shape.a_in_place &&
          (buffers.a_generation != plan.generation || buffers.a_source != a || buffers.a_ic != ic ||
           buffers.a_pc != pc || buffers.a_packed != a_packed)) {
        PackA(a + ic * p.a_row_stride + pc * p.a_col_stride, p.a_row_stride, p.a_col_stride, mcb,
              kcb, mr, a_packed);
        buffers.a_generation = plan.generation;
        buffers.a_source = a;
        buffers.a_ic = ic;
        buffers.a_pc = pc;
        buffers.a_packed = a_packed;
      }
      const MicroKernelFn kernel = last ? plan.last : plan.plain;
      args.beta = first ? static_cast<double>(p.beta) : 1.0;
      for (int64_t jc = n0; jc < n1; jc += nc) {
        const int64_t ncb = std::min(nc, n1 - jc);
        p.b_packer->Pack(b, pc, kcb, jc, ncb, nr, b_packed);
        for (int64_t ir = 0; ir < mcb; ir += mr) {
          const int64_t row = ic + ir;
          args.m_valid = std::min<int64_t>(mr, mcb - ir);
          args.row_bias = row_bias == nullptr ? nullptr : row_bias + row;
          const T* a_panel =
              plan.shape.a_in_place ? a + row * p.a_row_stride + pc : a_packed + ir * kcb;
          for (int64_t jr = 0; jr < ncb; jr += nr) {
            const int64_t column = jc + jr;
            args.n_valid = std::min<int64_t>(nr, ncb - jr);
            args.column_bias = p.column_bias == nullptr ? nullptr : p.column_bias + column;
            args.residual = residual == nullptr ? nullptr : residual + row * p.residual_ld + column;
            kernel(kcb, a_panel, b_packed + jr * kcb, c + row * p.ldc + column, p.ldc, &args);
          }
        }
      }
      pc += kcb;
    } while (pc < p.k);
  }
}

}  // namespace

const CacheSizes& HostCaches() {
  static const CacheSizes sizes = DetectCaches();
  return sizes;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

void* AlignedBuffer::Get(size_t bytes) {
  if (bytes > size_) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    std::free(data_);
    data_ = std::aligned_alloc(64, rounded);
    if (data_ == nullptr) {
      std::fprintf(stderr, "kiln: gemm cannot allocate %zu bytes of packing buffer\n", rounded);
      std::abort();
    }
    size_ = rounded;
  }
  return data_;
}

// Splits one GEMM over `threads` rectangles: tm row bands x tn column bands, tm * tn == threads.
// Each rectangle packs its own rows of A and columns of B, so the split minimises the largest
// rectangle's work plus its packing (a packed element costs about as much as kPackCost flops).
Grid ChooseGrid(int64_t m, int64_t n, int mr, int nr, int threads, bool b_prepacked) {
  constexpr int64_t kPackCost = 16;
  const int64_t m_panels = CeilDiv(m, mr), n_panels = CeilDiv(n, nr);
  Grid best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int tm = 1; tm <= threads; ++tm) {
    if (threads % tm != 0) continue;
    const int tn = threads / tm;
    if (tm > m_panels || tn > n_panels) continue;
    const int64_t rows = CeilDiv(m_panels, tm) * mr, cols = CeilDiv(n_panels, tn) * nr;
    const double cost = 2.0 * static_cast<double>(rows) * static_cast<double>(cols) +
                        kPackCost * static_cast<double>(b_prepacked ? rows : rows + cols);
    if (cost < best_cost) {
      best_cost = cost;
      best = Grid{tm, tn, rows, cols};
    }
  }
  if (best_cost == std::numeric_limits<double>::infinity()) {
    // Fewer panels than threads in both directions: one band along the longer side per panel.
    if (m_panels >= n_panels) {
      best = Grid{m_panels, 1, static_cast<int64_t>(mr), RoundUp(n, nr)};
    } else {
      best = Grid{1, n_panels, RoundUp(m, mr), static_cast<int64_t>(nr)};
    }
  }
  return best;
}

Blocking ChooseBlocking(const KernelShape& shape, int64_t element_size, const GemmTuning& tuning) {
  const CacheSizes& caches = HostCaches();
  const int mr = shape.mr, nr = shape.nr();
  Blocking blocking;
  // KC: the A micro-panel (MR x KC) takes about half of L1, the rest streams B.
  blocking.kc = tuning.kc > 0 ? tuning.kc
                              : std::clamp<int64_t>(
                                    RoundDown(caches.l1d / 2 / (mr * element_size), 16), 64, 512);
  // NC: the B block (KC x NC) takes about half of L2.
  blocking.nc = tuning.nc > 0 ? RoundUp(tuning.nc, nr)
                              : RoundDown(caches.l2 / 2 / (blocking.kc * element_size), nr);
  // MC: the A block (MC x KC) takes about half of this core's share of L3.
  const int64_t l3_share = caches.l3 / std::max(1, caches.l3_sharing);
  blocking.mc = tuning.mc > 0 ? RoundUp(tuning.mc, mr)
                              : RoundDown(l3_share / 2 / (blocking.kc * element_size), mr);
  return blocking;
}

int FitTileRows(int mr, int64_t m, const GemmTuning& tuning) {
  if (tuning.mr != 0) return mr;
  if (m < mr / 2) {
    // Few rows (a depthwise convolution's one output channel per group, a batch-1 Linear): a
    // short tile instead of computing mostly padding. Its own kernel, compiled on first use.
    int rows = 1;
    while (rows < m) rows *= 2;
    return rows;
  }
  if (m <= 4 * mr) {
    // A few row panels (a convolution's 16 or 32 output channels on a 14-row tile): the same
    // number of panels of balanced height, ceil(m / panels), instead of full panels and a
    // mostly-padding last one (16 rows: 2 x 8 instead of 14 + 14; 32 rows: 3 x 11 instead of
    // 3 x 14). Only when that saves at least 1/8 of the padded rows, as each height is one more
    // compiled kernel.
    const int64_t panels = CeilDiv(m, mr);
    const int balanced = static_cast<int>(CeilDiv(m, panels));
    if ((mr - balanced) * 8 >= mr) return balanced;
  }
  return mr;
}

void ForEachRectangle(int64_t m, int64_t n, int64_t k, int64_t count, int mr, int nr,
                      runtime::ThreadPool* pool,
                      absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t, int64_t)> run,
                      bool b_prepacked) {
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(std::max<int64_t>(k, 1)) * static_cast<double>(count);
  if (threads <= 1 || flops < kMinParallelFlops) {
    for (int64_t i = 0; i < count; ++i) run(i, 0, m, 0, n);
    return;
  }
  if (count >= threads && (count % threads == 0 || count >= 4 * threads)) {
    // Whole GEMMs per thread: no packing is repeated.
    pool->ParallelFor(count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) run(i, 0, m, 0, n);
    });
    return;
  }
  const Grid grid = ChooseGrid(m, n, mr, nr, threads, b_prepacked);
  for (int64_t i = 0; i < count; ++i) {
    pool->ParallelFor(grid.tm * grid.tn, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t m0 = (task / grid.tn) * grid.rows, n0 = (task % grid.tn) * grid.cols;
        if (m0 >= m || n0 >= n) continue;
        run(i, m0, std::min(m, m0 + grid.rows), n0, std::min(n, n0 + grid.cols));
      }
    });
  }
}

namespace {

template <size_t kBytes>
void CopyFixedPanels(const std::byte* src, int64_t src_stride, int64_t rows, int64_t panels,
                     std::byte* dst) {
  const int64_t panel_bytes = rows * static_cast<int64_t>(kBytes);
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* row = src + r * src_stride;
    std::byte* out = dst + r * static_cast<int64_t>(kBytes);
    for (int64_t p = 0; p < panels; ++p) {
      std::memcpy(out + p * panel_bytes, row + p * static_cast<int64_t>(kBytes), kBytes);
    }
  }
}

// Copies `panels` whole panels (`rows` rows of `panel_width` elements each) from a row-major B,
// reading B row by row: the reads are sequential for the prefetcher, and each copy has a size
// known at compile time (a few vector moves; memcpy of a run-time size is a library call per
// 64-byte row, which costs as much as a small GEMM's multiply-adds). Returns false for a width
// it has no constant for.
template <class T>
bool CopyWholePanels(const T* src, int64_t src_stride, int64_t rows, int64_t panels,
                     int panel_width, T* dst) {
  const auto* from = reinterpret_cast<const std::byte*>(src);
  auto* to = reinterpret_cast<std::byte*>(dst);
  const int64_t stride = src_stride * static_cast<int64_t>(sizeof(T));
  switch (static_cast<size_t>(panel_width) * sizeof(T)) {
    case 16:
      CopyFixedPanels<16>(from, stride, rows, panels, to);
      return true;
    case 32:
      CopyFixedPanels<32>(from, stride, rows, panels, to);
      return true;
    case 64:
      CopyFixedPanels<64>(from, stride, rows, panels, to);
      return true;
    case 128:
      CopyFixedPanels<128>(from, stride, rows, panels, to);
      return true;
    default:
      return false;
  }
}

}  // namespace

template <class T>
void StridedBPacker<T>::Pack(const T* base, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
                             T* dst) const {
  const int64_t rs = row_stride_, cs = col_stride_;
  int64_t whole = 0;  // leading columns already packed
  if (cs == 1 && CopyWholePanels(base + k0 * rs + n0, rs, kc, nc / nr, nr, dst)) {
    whole = nc / nr * nr;
  }
  for (int64_t j0 = whole; j0 < nc; j0 += nr) {
    const int valid = static_cast<int>(std::min<int64_t>(nr, nc - j0));
    T* panel = dst + j0 * kc;
    const T* src = base + k0 * rs + (n0 + j0) * cs;
    if (cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(panel + k * nr, src + k * rs, static_cast<size_t>(valid) * sizeof(T));
        if (valid < nr) std::fill(panel + k * nr + valid, panel + (k + 1) * nr, T{0});
      }
      continue;
    }
    if (rs == 1) {
      // Transposed B: each column is contiguous along k.
#if defined(__x86_64__)
      if constexpr (std::is_same_v<T, float>) {
        if (valid == nr && nr % 8 == 0 && kc >= 8 && HostHasAvx2Fma()) {
          // 8 x 8 blocks through registers instead of nr-strided scalar stores.
          const int64_t k8 = kc - kc % 8;
          for (int j = 0; j < nr; j += 8) {
            for (int64_t k = 0; k < k8; k += 8) {
              Transpose8x8(src + j * cs + k, cs, panel + k * nr + j, nr);
            }
            for (int jj = j; jj < j + 8; ++jj) {
              for (int64_t k = k8; k < kc; ++k) panel[k * nr + jj] = src[jj * cs + k];
            }
          }
          continue;
        }
      }
#endif
      for (int j = 0; j < valid; ++j) {
        const T* column = src + j * cs;
        for (int64_t k = 0; k < kc; ++k) panel[k * nr + j] = column[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        for (int j = 0; j < valid; ++j) panel[k * nr + j] = src[k * rs + j * cs];
      }
    }
    if (valid < nr) {
      for (int64_t k = 0; k < kc; ++k)
        std::fill(panel + k * nr + valid, panel + (k + 1) * nr, T{0});
    }
  }
}

template class StridedBPacker<float>;
template class StridedBPacker<double>;
template class StridedBPacker<uint8_t>;
template class StridedBPacker<int8_t>;
template class StridedBPacker<int16_t>;

template <class T>
absl::Status RunCore(const CoreProblem<T>& problem, const EpilogueVariant& epilogue,
                     const GemmTuning& tuning, const MicroKernelProvider& kernels,
                     runtime::ThreadPool* pool) {
  constexpr base::DType dtype = sizeof(T) == 8 ? base::DType::kF64 : base::DType::kF32;
  absl::StatusOr<KernelShape> shape = ChooseKernelShape(dtype, tuning, kernels.vectors());
  if (!shape.ok()) return shape.status();
  if (problem.m == 0 || problem.n == 0 || problem.batches.empty()) return absl::OkStatus();
  Plan plan;
  plan.shape = *shape;
  plan.shape.mr = FitTileRows(plan.shape.mr, problem.m, tuning);
  plan.shape.a_in_place = ReadsAInPlace(problem, plan.shape.mr, tuning.a_read);
  plan.blocking = ChooseBlocking(plan.shape, sizeof(T), tuning);
  plan.generation = next_generation.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<MicroKernelFn> plain = kernels.Get(dtype, plan.shape, EpilogueVariant{});
  if (absl::IsNotFound(plain.status()) && plan.shape.a_in_place) {
    // A blob compiled before kernels read A in place has only the packing ones.
    plan.shape.a_in_place = false;
    plain = kernels.Get(dtype, plan.shape, EpilogueVariant{});
  }
  if (!plain.ok()) return plain.status();
  absl::StatusOr<MicroKernelFn> last = kernels.Get(dtype, plan.shape, epilogue);
  if (!last.ok()) return last.status();
  plan.plain = *plain;
  plan.last = *last;

  ForEachRectangle(
      problem.m, problem.n, problem.k, static_cast<int64_t>(problem.batches.size()), plan.shape.mr,
      plan.shape.nr(), pool, [&](int64_t batch, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
        ComputeRect(problem, plan, problem.batches[static_cast<size_t>(batch)], m0, m1, n0, n1);
      });
  return absl::OkStatus();
}

template absl::Status RunCore<float>(const CoreProblem<float>&, const EpilogueVariant&,
                                     const GemmTuning&, const MicroKernelProvider&,
                                     runtime::ThreadPool*);
template absl::Status RunCore<double>(const CoreProblem<double>&, const EpilogueVariant&,
                                      const GemmTuning&, const MicroKernelProvider&,
                                      runtime::ThreadPool*);

EpilogueVariant EpilogueVariant::Of(const GemmEpilogue& epilogue) {
  EpilogueVariant variant;
  variant.activation = epilogue.activation;
  variant.row_bias = epilogue.row_bias != nullptr;
  variant.column_bias = epilogue.column_bias != nullptr;
  variant.residual = epilogue.residual.data != nullptr;
  variant.residual_after_activation = epilogue.residual_after_activation;
  return variant;
}

std::string EpilogueVariant::Name() const {
  std::string name;
  auto add = [&](const char* part) { absl::StrAppend(&name, name.empty() ? "" : "_", part); };
  if (column_bias) add("cbias");
  if (row_bias) add("rbias");
  if (residual && !residual_after_activation) add("res");
  if (activation != GemmActivation::kNone) add(GemmActivationName(activation));
  if (residual && residual_after_activation) add("res");
  return name.empty() ? "plain" : name;
}

std::string MicroKernelName(base::DType dtype, const KernelShape& shape,
                            const EpilogueVariant& variant) {
  return absl::StrCat("kiln_gemm_", dtype == base::DType::kF64 ? "f64" : "f32", "_", shape.mr, "x",
                      shape.nr(), "_v", shape.vector_bits, shape.a_in_place ? "_arows_" : "_",
                      variant.Name());
}

absl::StatusOr<KernelShape> ChooseKernelShape(base::DType dtype, const GemmTuning& tuning,
                                              const TargetVectors& vectors) {
  if (dtype != base::DType::kF32 && dtype != base::DType::kF64) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: dtype ", base::DTypeName(dtype), " is not supported (f32, f64 only)"));
  }
  const int host_bits = vectors.bits, registers = vectors.registers;
  KernelShape shape;
  shape.fma = vectors.fma;
  const int element_bits = dtype == base::DType::kF64 ? 64 : 32;
  if (tuning.vector_bits != 0 || tuning.mr != 0 || tuning.nr_vectors != 0) {
    if (tuning.vector_bits == 0 || tuning.mr <= 0 || tuning.nr_vectors <= 0) {
      return absl::InvalidArgumentError(
          "gemm: tuning.vector_bits, tuning.mr and tuning.nr_vectors must be set together");
    }
    if ((tuning.vector_bits != 128 && tuning.vector_bits != 256 && tuning.vector_bits != 512) ||
        tuning.vector_bits > host_bits) {
      return absl::InvalidArgumentError(
          absl::StrCat("gemm: tuning.vector_bits ", tuning.vector_bits,
                       " is not 128, 256 or 512 up to the host's ", host_bits));
    }
    if (tuning.mr > 32 || tuning.nr_vectors > 8) {
      return absl::InvalidArgumentError(absl::StrCat("gemm: tuning asks for an oversized tile ",
                                                     tuning.mr, " x ", tuning.nr_vectors,
                                                     " vectors"));
    }
    shape.vector_bits = tuning.vector_bits;
    shape.mr = tuning.mr;
    shape.nr_vectors = tuning.nr_vectors;
  } else {
    shape.vector_bits = host_bits;
    shape.nr_vectors = 2;
    // Accumulators for MR rows, the row of B vectors, and two registers for the broadcast A
    // element and the compiler's use: 14 x 2 on 32 registers, 6 x 2 on 16.
    shape.mr = (registers - shape.nr_vectors - 2) / shape.nr_vectors;
  }
  shape.lanes = shape.vector_bits / element_bits;
  return shape;
}

}  // namespace gemm_internal

namespace {

using gemm_internal::BatchOffsets;
using gemm_internal::CoreProblem;
using gemm_internal::EpilogueVariant;
using gemm_internal::StridedBPacker;

// ---- Rows of dot products (M == 1, or N <= 15) -------------------------------------------------
//
// With one row, a GEMM is memory-bound on B: packing B into panels would read and write it once
// more and a 14-row register tile would be 1/14 used. Batch-1 inference of a Linear layer
// (x @ W^T with W [out, in] row-major) is this case, so it reads B where it lies instead: as dot
// products along contiguous rows of W (B transposed) or as row updates (B dense), split over the
// pool by columns of the output.
//
// A classifier's last Linear layer (N = 10 classes, B = W^T) is the other case: N is less than one
// 16-wide panel, so the packed path gathers B element by element into a zero-filled panel and its
// tiles are 10/16 used, and packing A costs what the product does. Dot products of A's rows with
// W's rows need no packing: two rows by four columns per pass, bound by the multiply-adds. Every
// f32 GEMM with N <= 15 takes this path whatever B's layout (a B that is not W^T is copied into
// W's layout first), so that its bits do not depend on the layout.

#if defined(__x86_64__)
// out[r] = x . y[r][0, n) for four rows at once: x is loaded once per four rows, so the loop is
// bound by the loads of B (the rows), not by two loads per multiply-add.
__attribute__((target("avx2,fma"))) void Dot4Avx2(const float* x, const float* const y[4],
                                                  int64_t n, float out[4]) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(),
         b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[0] + i), a0);
    a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[1] + i), a1);
    a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[2] + i), a2);
    a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[3] + i), a3);
    b0 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y[0] + i + 8), b0);
    b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y[1] + i + 8), b1);
    b2 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y[2] + i + 8), b2);
    b3 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y[3] + i + 8), b3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[0] + i), a0);
    a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[1] + i), a1);
    a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[2] + i), a2);
    a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y[3] + i), a3);
  }
  // Horizontal sums of the four rows at once: [r0 r1 r2 r3] in one 128-bit vector.
  const __m256 s0 = _mm256_add_ps(a0, b0), s1 = _mm256_add_ps(a1, b1), s2 = _mm256_add_ps(a2, b2),
               s3 = _mm256_add_ps(a3, b3);
  const __m256 h01 = _mm256_hadd_ps(s0, s1), h23 = _mm256_hadd_ps(s2, s3);
  const __m256 h = _mm256_hadd_ps(h01, h23);
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  _mm_storeu_ps(out, sums);
  for (; i < n; ++i) {
    for (int r = 0; r < 4; ++r) out[r] += x[i] * y[r][i];
  }
}

// out0[c] = x0 . y[c][0, n) and out1[c] = x1 . y[c][0, n) for four columns c: each load of a
// column serves two rows, so eight multiply-adds take six loads and the loop is bound by the
// multiply-adds rather than by loads.
__attribute__((target("avx2,fma"))) void Dot2x4Avx2(const float* x0, const float* x1,
                                                    const float* const y[4], int64_t n,
                                                    float out0[4], float out1[4]) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(),
         b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 u = _mm256_loadu_ps(x0 + i), v = _mm256_loadu_ps(x1 + i);
    const __m256 y0 = _mm256_loadu_ps(y[0] + i), y1 = _mm256_loadu_ps(y[1] + i);
    a0 = _mm256_fmadd_ps(u, y0, a0);
    b0 = _mm256_fmadd_ps(v, y0, b0);
    a1 = _mm256_fmadd_ps(u, y1, a1);
    b1 = _mm256_fmadd_ps(v, y1, b1);
    const __m256 y2 = _mm256_loadu_ps(y[2] + i), y3 = _mm256_loadu_ps(y[3] + i);
    a2 = _mm256_fmadd_ps(u, y2, a2);
    b2 = _mm256_fmadd_ps(v, y2, b2);
    a3 = _mm256_fmadd_ps(u, y3, a3);
    b3 = _mm256_fmadd_ps(v, y3, b3);
  }
  const __m256 ha = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 hb = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
  _mm_storeu_ps(out0, _mm_add_ps(_mm256_castps256_ps128(ha), _mm256_extractf128_ps(ha, 1)));
  _mm_storeu_ps(out1, _mm_add_ps(_mm256_castps256_ps128(hb), _mm256_extractf128_ps(hb, 1)));
  for (; i < n; ++i) {
    for (int c = 0; c < 4; ++c) {
      out0[c] += x0[i] * y[c][i];
      out1[c] += x1[i] * y[c][i];
    }
  }
}

// Dot2x4Avx2 for x86-64 CPUs without AVX2 and FMA (SSE2 is baseline): four lanes, multiply then
// add.
void Dot2x4Sse2(const float* x0, const float* x1, const float* const y[4], int64_t n, float out0[4],
                float out1[4]) {
  __m128 a[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  __m128 b[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 u = _mm_loadu_ps(x0 + i), v = _mm_loadu_ps(x1 + i);
    for (int c = 0; c < 4; ++c) {
      const __m128 yc = _mm_loadu_ps(y[c] + i);
      a[c] = _mm_add_ps(a[c], _mm_mul_ps(u, yc));
      b[c] = _mm_add_ps(b[c], _mm_mul_ps(v, yc));
    }
  }
  // Transpose-and-add: lane c of the result is the sum of a[c]'s four lanes.
  _MM_TRANSPOSE4_PS(a[0], a[1], a[2], a[3]);
  _MM_TRANSPOSE4_PS(b[0], b[1], b[2], b[3]);
  _mm_storeu_ps(out0, _mm_add_ps(_mm_add_ps(a[0], a[1]), _mm_add_ps(a[2], a[3])));
  _mm_storeu_ps(out1, _mm_add_ps(_mm_add_ps(b[0], b[1]), _mm_add_ps(b[2], b[3])));
  for (; i < n; ++i) {
    for (int c = 0; c < 4; ++c) {
      out0[c] += x0[i] * y[c][i];
      out1[c] += x1[i] * y[c][i];
    }
  }
}

// y[0, n) += a * x[0, n)
__attribute__((target("avx2,fma"))) void AxpyAvx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}
#endif

// x . y[0, n) where the kernels above do not apply: f64, and f32 off x86-64.
template <class T>
T Dot(const T* x, const T* y, int64_t n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += x[i] * y[i];
    s1 += x[i + 1] * y[i + 1];
    s2 += x[i + 2] * y[i + 2];
    s3 += x[i + 3] * y[i + 3];
  }
  for (; i < n; ++i) s0 += x[i] * y[i];
  return (s0 + s1) + (s2 + s3);
}

template <class T>
void Axpy(T a, const T* x, T* y, int64_t n) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (HostHasAvx2Fma()) return AxpyAvx2(a, x, y, n);
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

template <class T>
T Activate(GemmActivation activation, T v) {
  switch (activation) {
    case GemmActivation::kNone:
      return v;
    case GemmActivation::kRelu:
      return v < T{0} ? T{0} : v;  // NaN stays NaN
    case GemmActivation::kGeluTanh: {
      constexpr T kSqrt2OverPi = static_cast<T>(0.7978845608028654);
      return static_cast<T>(0.5) * v *
             (T{1} + std::tanh(kSqrt2OverPi * (v + static_cast<T>(0.044715) * v * v * v)));
    }
    case GemmActivation::kSilu:
      return v / (T{1} + std::exp(-v));
    case GemmActivation::kSigmoid:
      return T{1} / (T{1} + std::exp(-v));
  }
  return v;
}

// One output row of RunRowDots: A's row (contiguous) and the row's offsets of A, C, the residual
// and the row bias.
template <class T>
struct DotRow {
  const T* x = nullptr;
  BatchOffsets at;
};

// Where one output row's dot products go for columns [j0, j0 + count): straight into C unless the
// epilogue reads C's old values (beta != 0) or a residual (which may be C itself, updated in
// place), then into `scratch`.
template <class T>
T* DotRowSums(const CoreProblem<T>& p, const BatchOffsets& at, int64_t j0, T* scratch) {
  const bool reads_c = p.beta != T{0} || p.residual != nullptr;
  return reads_c ? scratch : p.c + at.c + j0;
}

// Applies the epilogue to columns [j0, j0 + count) of one output row whose sums DotRowSums placed,
// one step at a time over the block (each step a loop the compiler vectorises, none with a branch
// per element), and leaves the result in C.
template <class T>
void FinishDotRow(const CoreProblem<T>& p, const GemmParams& params, const BatchOffsets& at,
                  T* sums, int64_t j0, int64_t count) {
  const GemmEpilogue& e = params.epilogue;
  T* c = p.c + at.c + j0;
  const T* residual = p.residual != nullptr ? p.residual + at.residual + j0 : nullptr;
  if (p.alpha != T{1}) {
    for (int64_t j = 0; j < count; ++j) sums[j] *= p.alpha;
  }
  if (p.beta != T{0}) {
    for (int64_t j = 0; j < count; ++j) sums[j] += p.beta * c[j];
  }
  if (p.column_bias != nullptr) {
    const T* bias = p.column_bias + j0;
    for (int64_t j = 0; j < count; ++j) sums[j] += bias[j];
  }
  if (p.row_bias != nullptr) {
    const T bias = p.row_bias[at.row_bias];
    for (int64_t j = 0; j < count; ++j) sums[j] += bias;
  }
  if (residual != nullptr && !e.residual_after_activation) {
    for (int64_t j = 0; j < count; ++j) sums[j] += residual[j];
  }
  if (e.activation != GemmActivation::kNone) {
    for (int64_t j = 0; j < count; ++j) sums[j] = Activate(e.activation, sums[j]);
  }
  if (residual != nullptr && e.residual_after_activation) {
    for (int64_t j = 0; j < count; ++j) sums[j] += residual[j];
  }
  if (sums != c) std::memcpy(c, sums, static_cast<size_t>(count) * sizeof(T));
}

// out_r[j] = rows[r].x . b[j * cs][0, k) for j < count and the one or two rows: B transposed, each
// of its columns contiguous. Four columns at a time; the last 1-3 columns repeat the last one, so
// that they too take the four-column kernels.
template <class T>
void DotColumnsOfTransposedB(int64_t k, const T* b, int64_t cs, const DotRow<T>* rows,
                             int row_count, int64_t count, T* out0, T* out1) {
  int64_t j = 0;
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    const bool avx2 = HostHasAvx2Fma();
    for (; j < count; j += 4) {
      const T* columns[4];
      for (int c = 0; c < 4; ++c) columns[c] = b + std::min(j + c, count - 1) * cs;
      const bool full = j + 4 <= count;
      T tail0[4], tail1[4];
      T* sums0 = full ? out0 + j : tail0;
      T* sums1 = full && row_count == 2 ? out1 + j : tail1;
      const T* x1 = row_count == 2 ? rows[1].x : rows[0].x;
      if (avx2 && row_count == 1) {
        Dot4Avx2(rows[0].x, columns, k, sums0);
      } else if (avx2) {
        Dot2x4Avx2(rows[0].x, x1, columns, k, sums0, sums1);
      } else {
        Dot2x4Sse2(rows[0].x, x1, columns, k, sums0, sums1);
      }
      for (int64_t c = 0; !full && j + c < count; ++c) {
        out0[j + c] = tail0[c];
        if (row_count == 2) out1[j + c] = tail1[c];
      }
    }
    return;
  }
#endif
  for (; j < count; ++j) {
    out0[j] = Dot(rows[0].x, b + j * cs, k);
    if (row_count == 2) out1[j] = Dot(rows[1].x, b + j * cs, k);
  }
}

// Columns [n0, n1) of one or two output rows of one batch entry (`row_count` rows of `rows`).
template <class T>
void RowDotColumns(const CoreProblem<T>& p, const GemmParams& params, int64_t rs, int64_t cs,
                   const DotRow<T>* rows, int row_count, int64_t n0, int64_t n1) {
  const T* b = p.b + rows[0].at.b;
  constexpr int64_t kBlock = 256;
  T scratch[2][kBlock];
  for (int64_t j0 = n0; j0 < n1; j0 += kBlock) {
    const int64_t count = std::min(kBlock, n1 - j0);
    T* sums[2] = {DotRowSums(p, rows[0].at, j0, scratch[0]),
                  row_count == 2 ? DotRowSums(p, rows[1].at, j0, scratch[1]) : nullptr};
    if (rs == 1) {
      DotColumnsOfTransposedB(p.k, b + j0 * cs, cs, rows, row_count, count, sums[0], sums[1]);
    } else {
      for (int r = 0; r < row_count; ++r) {
        T* out = sums[r];
        const T* x = rows[r].x;
        if (cs == 1) {
          std::fill(out, out + count, T{0});
          for (int64_t k = 0; k < p.k; ++k) Axpy(x[k], b + k * rs + j0, out, count);
        } else {
          for (int64_t j = 0; j < count; ++j) {
            T sum = 0;
            for (int64_t k = 0; k < p.k; ++k) sum += x[k] * b[k * rs + (j0 + j) * cs];
            out[j] = sum;
          }
        }
      }
    }
    for (int r = 0; r < row_count; ++r) FinishDotRow(p, params, rows[r].at, sums[r], j0, count);
  }
}

// Every output row (of every batch entry) as dot products, two rows at a time, split over the
// pool by pairs of rows and by 32 columns. B's element (k, j) is at b_rs k + b_cs j.
template <class T>
absl::Status RunRowDots(const CoreProblem<T>& p, const GemmParams& params, int64_t b_rs,
                        int64_t b_cs, runtime::ThreadPool* pool) {
  if (p.n == 0 || p.m == 0) return absl::OkStatus();
  constexpr int64_t kColumnsPerTask = 32;
  const int64_t column_tasks = (p.n + kColumnsPerTask - 1) / kColumnsPerTask;
  const int64_t pairs = (p.m + 1) / 2;  // of rows, per batch entry
  const int64_t tasks = static_cast<int64_t>(p.batches.size()) * pairs * column_tasks;
  // Another thread pays off from ~64K multiply-adds (256 KiB of f32 B): B streams from L3 at
  // about 66 GB/s on one core of this project's AVX2 machine and 119 GB/s on two, and the pool's
  // workers spin between the kernels of a graph, so the batch-1 MLP's 784x512 and 512x256 layers
  // take half the time on two threads (docs/performance.md, "Replay"). Below that, waking a
  // worker costs what the work does.
  constexpr int64_t kMinParallelMacs = int64_t{1} << 16;
  const int64_t macs = static_cast<int64_t>(p.batches.size()) * p.m * p.n * p.k;
  const bool parallel =
      pool != nullptr && pool->num_threads() > 1 && macs >= kMinParallelMacs && tasks > 1;
  const int64_t task_macs =
      std::min<int64_t>(p.m, 2) * std::min(p.n, kColumnsPerTask) * std::max<int64_t>(p.k, 1);
  const int64_t grain = std::max<int64_t>(1, (kMinParallelMacs / 4) / task_macs);
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<T> gathered[2];  // A's rows when their elements are strided
    for (int64_t task = begin; task < end; ++task) {
      const int64_t pair = task / column_tasks, columns = task % column_tasks;
      const BatchOffsets& batch = p.batches[static_cast<size_t>(pair / pairs)];
      const int64_t i0 = (pair % pairs) * 2;
      const int row_count = static_cast<int>(std::min<int64_t>(2, p.m - i0));
      DotRow<T> rows[2];
      for (int r = 0; r < row_count; ++r) {
        const int64_t i = i0 + r;
        BatchOffsets& at = rows[r].at;
        at = batch;
        at.a += i * p.a_row_stride;
        at.c += i * p.ldc;
        at.residual += i * p.residual_ld;
        at.row_bias += i;
        rows[r].x = p.a + at.a;
        if (p.a_col_stride != 1) {
          std::vector<T>& row = gathered[r];
          row.resize(static_cast<size_t>(p.k));
          for (int64_t k = 0; k < p.k; ++k) {
            row[static_cast<size_t>(k)] = rows[r].x[k * p.a_col_stride];
          }
          rows[r].x = row.data();
        }
      }
      RowDotColumns(p, params, b_rs, b_cs, rows, row_count, columns * kColumnsPerTask,
                    std::min(p.n, (columns + 1) * kColumnsPerTask));
    }
  };
  if (parallel) {
    pool->ParallelFor(tasks, grain, body);
  } else {
    body(0, tasks);
  }
  return absl::OkStatus();
}

// Whether C = A B with fewer columns than a panel goes to RunFewColumns rather than the packed
// micro-kernels (see "Rows of dot products"): f32 with B small enough to stay in L2 while every
// row of A passes. The choice depends on the shape alone, never on B's layout or on the host: a
// GEMM's bits must not change when a compile folds W^T into a row-major constant (an AOT blob
// gives the JIT's bits), and an AOT compile records which micro-kernels the driver asks for on
// the compiling machine, so a blob's runtime must take the same path on every CPU.
template <class T>
bool FewColumns(const GemmParams& params) {
  constexpr int64_t kMaxColumns = 15;  // the AVX2 micro-kernels' panels are 16 wide
  constexpr int64_t kMaxBBytes = 256 << 10;
  return std::is_same_v<T, float> && params.n <= kMaxColumns &&
         params.n * params.k * int64_t{sizeof(T)} <= kMaxBBytes;
}

// RunRowDots on B's columns made contiguous: B transposed (W^T) is read where it lies; any other
// layout is first copied into [n, k] (at most 15 x 16K floats, once per distinct B of the batch),
// so that every layout sums in the same order.
template <class T>
absl::Status RunFewColumns(const CoreProblem<T>& p, const GemmParams& params,
                           runtime::ThreadPool* pool) {
  const int64_t rs = params.b.row_stride, cs = params.b.col_stride;
  if (rs == 1) return RunRowDots(p, params, rs, cs, pool);
  CoreProblem<T> contiguous = p;
  std::map<int64_t, int64_t> copies;  // B's offset -> its copy's offset
  for (const BatchOffsets& batch : p.batches) copies.emplace(batch.b, 0);
  std::vector<T> columns(copies.size() * static_cast<size_t>(p.n * p.k));
  int64_t next = 0;
  for (auto& [offset, copy] : copies) {
    copy = next;
    next += p.n * p.k;
    const T* b = p.b + offset;
    for (int64_t j = 0; j < p.n; ++j) {
      T* column = columns.data() + copy + j * p.k;
      for (int64_t k = 0; k < p.k; ++k) column[k] = b[k * rs + j * cs];
    }
  }
  for (BatchOffsets& batch : contiguous.batches) batch.b = copies[batch.b];
  contiguous.b = columns.data();
  return RunRowDots(contiguous, params, /*b_rs=*/1, /*b_cs=*/p.k, pool);
}

template <class T>
absl::Status RunGemm(const GemmParams& params, const gemm_internal::MicroKernelProvider& kernels,
                     runtime::ThreadPool* pool) {
  CoreProblem<T> problem;
  problem.m = params.m;
  problem.n = params.n;
  problem.k = params.k;
  problem.a = static_cast<const T*>(params.a.data);
  problem.a_row_stride = params.a.row_stride;
  problem.a_col_stride = params.a.col_stride;
  problem.b = static_cast<const T*>(params.b.data);
  const StridedBPacker<T> packer(params.b.row_stride, params.b.col_stride);
  problem.b_packer = &packer;
  problem.c = static_cast<T*>(const_cast<void*>(params.c.data));
  problem.ldc = params.c.row_stride;
  problem.alpha = static_cast<T>(params.alpha);
  problem.beta = static_cast<T>(params.beta);
  const GemmEpilogue& epilogue = params.epilogue;
  problem.row_bias = static_cast<const T*>(epilogue.row_bias);
  problem.column_bias = static_cast<const T*>(epilogue.column_bias);
  problem.residual = static_cast<const T*>(epilogue.residual.data);
  problem.residual_ld = epilogue.residual.row_stride;

  int64_t count = 1;
  for (int64_t d : params.batch) count *= d;
  problem.batches.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(params.batch.size(), 0);
  auto stride = [](const MatrixView& view, size_t d) {
    return view.batch_strides.empty() ? int64_t{0} : view.batch_strides[d];
  };
  for (int64_t i = 0; i < count; ++i) {
    BatchOffsets offsets;
    for (size_t d = 0; d < index.size(); ++d) {
      offsets.a += index[d] * stride(params.a, d);
      offsets.b += index[d] * stride(params.b, d);
      offsets.c += index[d] * stride(params.c, d);
      offsets.residual += index[d] * stride(epilogue.residual, d);
    }
    problem.batches.push_back(offsets);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < params.batch[d]) break;
      index[d] = 0;
    }
  }
  // Fewer columns than a panel, or a single output row, unless a test asked for a kernel shape.
  if (params.tuning.mr == 0 && FewColumns<T>(params)) return RunFewColumns(problem, params, pool);
  if (params.tuning.mr == 0 && params.m == 1) {
    return RunRowDots(problem, params, params.b.row_stride, params.b.col_stride, pool);
  }
  return gemm_internal::RunCore(problem, EpilogueVariant::Of(epilogue), params.tuning, kernels,
                                pool);
}

}  // namespace

absl::Status ExecuteGemm(const GemmParams& params,
                         const gemm_internal::MicroKernelProvider& kernels,
                         runtime::ThreadPool* pool) {
  // The fast paths below are chosen by the process's CPU level: a bad KILN_CPU is an error here
  // as in the JIT, not a silent fall back to the portable code.
  if (const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel(); !level.ok()) {
    return level.status();
  }
  if (gemm_internal::IsHalf(params.dtype)) {
    return gemm_internal::ExecuteHalfGemm(params, kernels, pool);
  }
  if (params.dtype != base::DType::kF32 && params.dtype != base::DType::kF64) {
    return absl::InvalidArgumentError(absl::StrCat("gemm: dtype ", base::DTypeName(params.dtype),
                                                   " is not supported (f32, f64, bf16, f16)"));
  }
  const absl::StatusOr<int64_t> checked = gemm_internal::CheckGemmGeometry(
      "gemm", params.m, params.n, params.k, params.batch, params.a, params.b, params.c);
  if (!checked.ok()) return checked.status();
  const int64_t count = *checked;
  const size_t rank = params.batch.size();
  const GemmEpilogue& epilogue = params.epilogue;
  if (epilogue.residual.data != nullptr) {
    if (epilogue.residual.col_stride != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm: epilogue.residual.col_stride must be 1, got ", epilogue.residual.col_stride));
    }
    if (absl::Status s = gemm_internal::CheckBatchStrides("gemm", "epilogue.residual",
                                                          epilogue.residual, rank, true);
        !s.ok()) {
      return s;
    }
  }
  if (count == 0 || params.m == 0 || params.n == 0) return absl::OkStatus();
  if (absl::Status s = gemm_internal::CheckGemmOperands("gemm", params.m, params.n, params.k,
                                                        params.a, params.b, params.c);
      !s.ok()) {
    return s;
  }
  if (params.k == 0) {
    // Nothing is read from A or B; keep the pointers valid for the address arithmetic.
    GemmParams copy = params;
    static const double kZero[1] = {0.0};
    copy.a = MatrixView{kZero, 0, 0, {}};
    copy.b = MatrixView{kZero, 0, 0, {}};
    return params.dtype == base::DType::kF32 ? RunGemm<float>(copy, kernels, pool)
                                             : RunGemm<double>(copy, kernels, pool);
  }
  return params.dtype == base::DType::kF32 ? RunGemm<float>(params, kernels, pool)
                                           : RunGemm<double>(params, kernels, pool);
}

namespace gemm_internal {

absl::Status CheckBatchStrides(const char* what, const char* name, const MatrixView& view,
                               size_t batch_rank, bool may_be_empty) {
  if (view.batch_strides.size() == batch_rank) return absl::OkStatus();
  if (may_be_empty && view.batch_strides.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, ".batch_strides has ",
                                                 view.batch_strides.size(), " entries for ",
                                                 batch_rank, " batch dimensions"));
}

absl::StatusOr<int64_t> CheckGemmGeometry(const char* what, int64_t m, int64_t n, int64_t k,
                                          const std::vector<int64_t>& batch, const MatrixView& a,
                                          const MatrixView& b, const MatrixView& c) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative size m=", m, " n=", n, " k=", k));
  }
  int64_t count = 1;
  for (int64_t d : batch) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": negative batch dimension in [", absl::StrJoin(batch, ","), "]"));
    }
    count *= d;
  }
  for (auto [name, view, may_be_empty] :
       {std::tuple{"a", &a, true}, {"b", &b, true}, {"c", &c, false}}) {
    if (absl::Status s = CheckBatchStrides(what, name, *view, batch.size(), may_be_empty);
        !s.ok()) {
      return s;
    }
  }
  if (c.col_stride != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": c.col_stride must be 1, got ", c.col_stride));
  }
  return count;
}

absl::Status CheckGemmOperands(const char* what, int64_t m, int64_t n, int64_t k,
                               const MatrixView& a, const MatrixView& b, const MatrixView& c) {
  if (c.data == nullptr || (k > 0 && (a.data == nullptr || b.data == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null operand for m=", m, " n=", n, " k=", k));
  }
  return absl::OkStatus();
}

}  // namespace gemm_internal

}  // namespace kiln::runtime::cpu
