// N-d convolution as implicit GEMM. For image n and group g:
//   out[n, g*Og : (g+1)*Og, P] = W[g*Og : (g+1)*Og, Cg * prod(K)] * X_ng[Cg * prod(K), P]
// where X_ng (the im2col matrix) is never built: ConvBPacker gathers its blocks straight into the
// packed B panels, reading padding and the holes of input dilation as zeros. The bias is the
// GEMM's per-row bias (one value per output channel) and the residual has the output's layout,
// so the whole epilogue runs on the output tiles like a matmul's. Weight-gradient shaped convs
// (a few output positions, a long reduction, no epilogue) run transposed instead: see
// RunConvTransposed.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/conv_shape.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::runtime::cpu {
namespace {

#if defined(__x86_64__)
// The masked AVX-512 row copies: where this process may use AVX-512 (KILN_CPU can pin a lower
// level than the host's).
bool HostHasAvx512() {
  static const bool has = CpuAllows("avx512f");
  return has;
}

// out[0, piece) = src[r] for r in [begin, end), zeros elsewhere, piece <= 16: one masked load
// (lanes outside [begin, end) are not read, so src may point before the input) and one masked
// store.
__attribute__((target("avx512f"))) void CopyShortRunAvx512(const float* src, int64_t begin,
                                                           int64_t end, int64_t piece, float* out) {
  const uint32_t load = ((1u << end) - 1u) & ~((1u << begin) - 1u);
  const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(load), src);
  _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << piece) - 1u), v);
}

// The geometry of a plain 2-d convolution whose output rows are at most 16 wide, with unit
// stride and no input dilation along the width (ConvBPacker::Pack's fast path).
struct Rows2d {
  int64_t in_h, in_w, out_h, out_w, kh_size, kw_size;
  int64_t stride_h, dil_h, dil_w, low_h, low_w;
  int64_t channel_stride;
};

// im2col rows [k0, k0 + kc) x whole output rows [n0, n0 + nc) (n0, nc multiples of out_w, nr a
// multiple of out_w, so an output row never straddles two NR panels) into NR panels: per depth
// step the width shift is fixed, so each output row is one masked load + one masked store with
// masks computed once per depth step (the generic path spends ~30 cycles per row on clamps and
// odometers, which dominated conv time at 16x16 and 8x8 images).
__attribute__((target("avx512f"))) void PackRows2dAvx512(const Rows2d& geometry, const float* base,
                                                         int64_t k0, int64_t kc, int64_t n0,
                                                         int64_t nc, int nr, float* dst) {
  // Locals, not loads through `geometry`: the stores below may alias it as far as the compiler
  // knows.
  const Rows2d g = geometry;
  const int64_t panel_stride = static_cast<int64_t>(nr) * kc;
  // The columns lie in one image's output plane, so output row r is oh = r.
  const int64_t row_begin = n0 / g.out_w, row_end = (n0 + nc) / g.out_w;
  const __mmask16 store = static_cast<__mmask16>((1u << g.out_w) - 1u);
  const __m512 zero = _mm512_setzero_ps();
  // kk = (channel, kh, kw) as an odometer.
  int64_t kernel = k0 % (g.kh_size * g.kw_size);
  int64_t kh = kernel / g.kw_size, kw = kernel % g.kw_size;
  const float* channel = base + k0 / (g.kh_size * g.kw_size) * g.channel_stride;
  for (int64_t kk = 0; kk < kc; ++kk) {
    // Output column ow reads input column ow + shift; lanes outside [0, in_w) are zeros and are
    // not read (masked-off lanes do not fault, so the address may lie before the input).
    const int64_t shift = kw * g.dil_w - g.low_w;
    const int64_t begin = std::clamp<int64_t>(-shift, 0, g.out_w);
    const int64_t end = std::clamp<int64_t>(g.in_w - shift, begin, g.out_w);
    const __mmask16 load = static_cast<__mmask16>(((1u << end) - 1u) & ~((1u << begin) - 1u));
    float* out = dst + kk * nr;
    int64_t lane = 0;
    int64_t ih = row_begin * g.stride_h + kh * g.dil_h - g.low_h;
    const float* src = channel + ih * g.in_w + shift;
    for (int64_t r = row_begin; r < row_end; ++r) {
      const __m512 v = ih >= 0 && ih < g.in_h ? _mm512_maskz_loadu_ps(load, src) : zero;
      _mm512_mask_storeu_ps(out + lane, store, v);
      ih += g.stride_h;
      src += g.stride_h * g.in_w;
      lane += g.out_w;
      if (lane == nr) {
        lane = 0;
        out += panel_stride;
      }
    }
    if (nc % nr != 0) {
      float* tail = dst + kk * nr + (nc / nr) * panel_stride;
      for (int64_t r = nc % nr; r < nr; ++r) tail[r] = 0.0f;
    }
    if (++kw == g.kw_size) {
      kw = 0;
      if (++kh == g.kh_size) {
        kh = 0;
        channel += g.channel_stride;
      }
    }
  }
}
#endif

using gemm_internal::BatchOffsets;
using gemm_internal::BPacker;
using gemm_internal::CoreProblem;
using gemm_internal::EpilogueVariant;
using gemm_internal::StridedBPacker;

int64_t At(const std::vector<int64_t>& values, size_t i, int64_t fallback) {
  return values.empty() ? fallback : values[i];
}

int64_t NumElements(const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// "[2,3]", as the IR prints shapes.
std::string ShapeString(const Dims& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t Product(Dims::const_iterator begin, Dims::const_iterator end) {
  int64_t product = 1;
  for (auto it = begin; it != end; ++it) product *= *it;
  return product;
}

// The im2col operand of one (image, group): row kk = (channel, kernel position) in row-major
// order over [Cg, K...], column = output position in row-major order over [P...].
template <class T>
class ConvBPacker final : public BPacker<T> {
 public:
  ConvBPacker(const ConvParams& params, const Dims& output_shape) {
    const size_t spatial = params.input_shape.size() - 2;
    input_sizes_.assign(params.input_shape.begin() + 2, params.input_shape.end());
    kernel_sizes_.assign(params.weight_shape.begin() + 2, params.weight_shape.end());
    output_sizes_.assign(output_shape.begin() + 2, output_shape.end());
    channel_stride_ = Product(params.input_shape.begin() + 2, params.input_shape.end());
    kernel_volume_ = Product(params.weight_shape.begin() + 2, params.weight_shape.end());
    // tables_[t][kpos * P_t + p]: the element offset along axis t read by kernel position kpos at
    // output position p, or -1 where it falls on padding or between dilated input elements.
    const size_t last = spatial - 1;
    undilated_last_axis_ = At(params.input_dilation, last, 1) == 1;
    last_stride_ = At(params.strides, last, 1);
    last_dilation_ = At(params.dilation, last, 1);
    last_low_ = At(params.low, last, 0);
    last_input_size_ = input_sizes_[last];
#if defined(__x86_64__)
    if (spatial == 2 && At(params.strides, 1, 1) == 1 && At(params.input_dilation, 0, 1) == 1 &&
        At(params.input_dilation, 1, 1) == 1 && output_sizes_[1] >= 1 && output_sizes_[1] <= 16) {
      rows2d_valid_ = true;
      rows2d_ =
          Rows2d{input_sizes_[0],          input_sizes_[1],           output_sizes_[0],
                 output_sizes_[1],         kernel_sizes_[0],          kernel_sizes_[1],
                 At(params.strides, 0, 1), At(params.dilation, 0, 1), At(params.dilation, 1, 1),
                 At(params.low, 0, 0),     At(params.low, 1, 0),      channel_stride_};
    }
#endif
    tables_.resize(spatial);
    int64_t axis_stride = channel_stride_;
    for (size_t t = 0; t < spatial; ++t) {
      axis_stride /= std::max<int64_t>(1, input_sizes_[t]);
      const int64_t stride = At(params.strides, t, 1), dilation = At(params.dilation, t, 1),
                    input_dilation = At(params.input_dilation, t, 1), low = At(params.low, t, 0);
      std::vector<int64_t>& table = tables_[t];
      table.resize(static_cast<size_t>(kernel_sizes_[t] * output_sizes_[t]));
      for (int64_t kpos = 0; kpos < kernel_sizes_[t]; ++kpos) {
        for (int64_t p = 0; p < output_sizes_[t]; ++p) {
          const int64_t q = p * stride + kpos * dilation - low;
          const bool valid =
              q >= 0 && q % input_dilation == 0 && q / input_dilation < input_sizes_[t];
          table[static_cast<size_t>(kpos * output_sizes_[t] + p)] =
              valid ? q / input_dilation * axis_stride : -1;
        }
      }
    }
    // Small planes with short output rows: one offset per (kernel position, output position).
    plane_size_ = Product(output_sizes_.begin(), output_sizes_.end());
    if (output_sizes_[last] <= kShortRun && kernel_volume_ * plane_size_ <= kMaxPlaneTable &&
        channel_stride_ <= std::numeric_limits<int32_t>::max()) {
      plane_table_.resize(static_cast<size_t>(kernel_volume_ * plane_size_));
      std::vector<int64_t> k_index(spatial), p_index(spatial);
      for (int64_t kpos = 0; kpos < kernel_volume_; ++kpos) {
        int64_t rest = kpos;
        for (size_t t = spatial; t-- > 0;) {
          k_index[t] = rest % kernel_sizes_[t];
          rest /= kernel_sizes_[t];
        }
        for (int64_t p = 0; p < plane_size_; ++p) {
          rest = p;
          for (size_t t = spatial; t-- > 0;) {
            p_index[t] = rest % output_sizes_[t];
            rest /= output_sizes_[t];
          }
          int64_t offset = 0;
          for (size_t t = 0; t < spatial && offset >= 0; ++t) {
            const int64_t along =
                tables_[t][static_cast<size_t>(k_index[t] * output_sizes_[t] + p_index[t])];
            offset = along >= 0 ? offset + along : -1;
          }
          plane_table_[static_cast<size_t>(kpos * plane_size_ + p)] = static_cast<int32_t>(offset);
        }
      }
    }
  }

  static constexpr int64_t kShortRun = 16;
  // The largest plane_table_ (int32 entries): 256 KiB.
  static constexpr int64_t kMaxPlaneTable = int64_t{1} << 16;

  void Pack(const T* base, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
            T* dst) const override {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<T, float>) {
      if (rows2d_valid_ && nr % rows2d_.out_w == 0 && n0 % rows2d_.out_w == 0 &&
          nc % rows2d_.out_w == 0 && HostHasAvx512()) {
        PackRows2dAvx512(rows2d_, base, k0, kc, n0, nc, nr, dst);
        return;
      }
    }
#endif
    if (!plane_table_.empty()) {
      PackFromPlaneTable(base, k0, kc, n0, nc, nr, dst);
      return;
    }
    const size_t spatial = tables_.size();
    const size_t last = spatial - 1;
    const int64_t last_size = output_sizes_[last];
    const int64_t panel_stride = static_cast<int64_t>(nr) * kc;
    // Depth kk = (channel, kernel position) and column n0 = output position are decoded once;
    // kk then advances as an odometer (divisions per depth step dominated packing when the
    // output has few positions, as in a weight gradient).
    std::vector<int64_t> kpos(spatial), p(spatial), p0(spatial);
    int64_t channel_index = k0 / kernel_volume_;
    int64_t rest = k0 % kernel_volume_;
    for (size_t t = spatial; t-- > 0;) {
      kpos[t] = rest % kernel_sizes_[t];
      rest /= kernel_sizes_[t];
    }
    rest = n0;
    for (size_t t = spatial; t-- > 0;) {
      p0[t] = rest % output_sizes_[t];
      rest /= output_sizes_[t];
    }
    for (int64_t kk = k0; kk < k0 + kc; ++kk) {
      if (kk != k0) {
        size_t t = spatial;
        while (t-- > 0) {
          if (++kpos[t] < kernel_sizes_[t]) break;
          kpos[t] = 0;
        }
        if (t == static_cast<size_t>(-1)) ++channel_index;  // every axis wrapped
      }
      const T* channel = base + channel_index * channel_stride_;
      std::copy(p0.begin(), p0.end(), p.begin());
      const int64_t* last_table = tables_[last].data() + kpos[last] * last_size;
      // Without input dilation along the last axis, output position p reads input position
      // p * stride + shift: a run is a strided copy between zero borders.
      const int64_t shift = kpos[last] * last_dilation_ - last_low_;
      T* row = dst + (kk - k0) * nr;  // this depth step in panel 0
      int64_t column = 0;             // position within [n0, n0 + nc)
      // `column` as (panel, lane within it), advanced with it (no divisions per run).
      int64_t panel = 0, lane = 0;
      int64_t outer = 0;
      bool outer_valid = true, outer_stale = true;
      while (column < nc) {
        // A run along the last output axis shares the outer axes' offset, which changes only
        // when the run wraps to the next row.
        if (outer_stale) {
          outer = 0;
          outer_valid = true;
          for (size_t t = 0; t < last; ++t) {
            const int64_t offset =
                tables_[t][static_cast<size_t>(kpos[t] * output_sizes_[t] + p[t])];
            outer_valid = outer_valid && offset >= 0;
            outer += offset;
          }
          outer_stale = false;
        }
        const int64_t run = std::min(last_size - p[last], nc - column);
        const T* src = channel + outer;
        // The run in pieces that stay inside one NR panel.
        for (int64_t done = 0; done < run;) {
          const int64_t piece = std::min<int64_t>(run - done, nr - lane);
          T* out = row + panel * panel_stride + lane;
          const int64_t first = p[last] + done;  // output position of out[0]
          if (!outer_valid) {
            std::fill(out, out + piece, T{0});
          } else if (undilated_last_axis_) {
            // out[r] reads input position q + r * stride where that is inside [0, size).
            const int64_t stride = last_stride_;
            const int64_t q = first * stride + shift;  // input position of out[0]
            const int64_t size = last_input_size_;
            int64_t begin, end;
            if (stride == 1) {  // no divisions on the common path
              begin = std::clamp<int64_t>(-q, 0, piece);
              end = std::clamp<int64_t>(size - q, begin, piece);
            } else {
              begin = std::clamp<int64_t>(q >= 0 ? 0 : (stride - 1 - q) / stride, 0, piece);
              end = std::clamp<int64_t>(size - q <= 0 ? 0 : (size - q + stride - 1) / stride, begin,
                                        piece);
            }
            bool copied = false;
#if defined(__x86_64__)
            if constexpr (std::is_same_v<T, float>) {
              if (stride == 1 && piece <= kShortRun && HostHasAvx512()) {
                CopyShortRunAvx512(src + q, begin, end, piece, out);
                copied = true;
              }
            }
#endif
            if (!copied && piece <= kShortRun) {
              // Short runs (small images, weight gradients with a few output positions): plain
              // loops, as the library calls' fixed cost would exceed the copy itself.
              for (int64_t r = 0; r < begin; ++r) out[r] = T{0};
              for (int64_t r = begin; r < end; ++r) out[r] = src[q + r * stride];
              for (int64_t r = end; r < piece; ++r) out[r] = T{0};
            } else if (!copied) {
              std::fill(out, out + begin, T{0});
              if (stride == 1) {
                std::copy(src + q + begin, src + q + end, out + begin);
              } else {
                for (int64_t r = begin; r < end; ++r) out[r] = src[q + r * stride];
              }
              std::fill(out + end, out + piece, T{0});
            }
          } else {
            for (int64_t r = 0; r < piece; ++r) {
              const int64_t offset = last_table[first + r];
              out[r] = offset >= 0 ? src[offset] : T{0};
            }
          }
          done += piece;
          lane += piece;
          if (lane == nr) {
            lane = 0;
            ++panel;
          }
        }
        column += run;
        p[last] += run;
        for (size_t t = last; t > 0 && p[t] == output_sizes_[t]; --t) {
          p[t] = 0;
          ++p[t - 1];
          outer_stale = true;
        }
      }
      if (nc % nr != 0) {
        T* out = row + (nc / nr) * panel_stride;
        for (int64_t r = nc % nr; r < nr; ++r) out[r] = T{0};
      }
    }
  }

 private:
  // Pack through plane_table_: per depth step, each NR panel's row is a gather of the channel's
  // elements at the kernel position's offsets. Where output rows are short, Pack's run-by-run
  // copy spends most of its time on per-run bookkeeping: with this gather the Fashion-MNIST
  // CNN's f32 inference at batch 64 (its second 3x3 conv has 11-wide output rows) took ~9 ms
  // instead of ~12 ms on an AVX2 machine.
  void PackFromPlaneTable(const T* base, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
                          T* dst) const {
    const int64_t panel_stride = static_cast<int64_t>(nr) * kc;
    int64_t channel_index = k0 / kernel_volume_, kpos = k0 % kernel_volume_;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const T* channel = base + channel_index * channel_stride_;
      const int32_t* offsets = plane_table_.data() + kpos * plane_size_ + n0;
      T* row = dst + kk * nr;
      for (int64_t c0 = 0; c0 < nc; c0 += nr) {
        const int64_t width = std::min<int64_t>(nr, nc - c0);
        T* out = row + c0 / nr * panel_stride;
        for (int64_t r = 0; r < width; ++r) {
          const int32_t offset = offsets[c0 + r];
          out[r] = offset >= 0 ? channel[offset] : T{0};
        }
        for (int64_t r = width; r < nr; ++r) out[r] = T{0};
      }
      if (++kpos == kernel_volume_) {
        kpos = 0;
        ++channel_index;
      }
    }
  }

  std::vector<int64_t> input_sizes_, kernel_sizes_, output_sizes_;
  int64_t channel_stride_ = 1;
  int64_t kernel_volume_ = 1;
  bool undilated_last_axis_ = false;  // input dilation 1 along the last axis
  int64_t last_stride_ = 1, last_dilation_ = 1, last_low_ = 0, last_input_size_ = 0;
  std::vector<std::vector<int64_t>> tables_;
  // plane_table_[kpos * plane_size_ + p]: the element offset within one input channel that
  // kernel position kpos reads at output position p, or -1 (padding, a hole of input dilation);
  // empty unless the output rows are short and the table small (PackFromPlaneTable).
  int64_t plane_size_ = 1;
  std::vector<int32_t> plane_table_;
#if defined(__x86_64__)
  bool rows2d_valid_ = false;  // PackRows2dAvx512 applies (given whole rows per panel)
  Rows2d rows2d_{};
#endif
};

// A 1x1 kernel with unit strides, no padding and no dilation reads the input channels as they
// are: B is the [Cg, P] slice of the input.
bool IsPointwise(const ConvParams& params) {
  const size_t spatial = params.input_shape.size() - 2;
  for (size_t t = 0; t < spatial; ++t) {
    if (params.weight_shape[t + 2] != 1 || At(params.strides, t, 1) != 1 ||
        At(params.low, t, 0) != 0 || At(params.high, t, 0) != 0 ||
        At(params.input_dilation, t, 1) != 1) {
      return false;
    }
  }
  return true;
}

// A weight-gradient convolution (the kernel is the big output gradient, the output is the small
// kernel-sized dW, e.g. 3x3) as the plain im2col GEMM has N = P (9) output positions: most of
// the NR-wide register tile idles and packing im2col panels with runs of P elements dominates.
// Transposed, out^T[(image, p), o] = im2col^T[(image, p), K] * W^T[K, o]: the images' P rows
// stack into M (one GEMM, the weight packed once per thread band), O fills the register tile,
// and im2col^T is built row by row with long contiguous copies. Only the plain 2-d case without
// input dilation, groups or epilogue takes this path.
bool UseTransposedSmallOutput(const ConvParams& params, const Dims& output_shape) {
  if (params.input_shape.size() != 4 || params.groups != 1 || params.bias != nullptr ||
      params.residual != nullptr || params.activation != GemmActivation::kNone) {
    return false;
  }
  for (size_t t = 0; t < 2; ++t) {
    if (At(params.input_dilation, t, 1) != 1) return false;
  }
  const int64_t output_plane = output_shape[2] * output_shape[3];
  const int64_t depth = params.weight_shape[1] * params.weight_shape[2] * params.weight_shape[3];
  // P well under one 32-wide AVX-512 tile and a long reduction: the weight-gradient shape. The
  // explicit im2col^T (images * P * depth elements) is capped at 64 MiB.
  const int64_t im2col_bytes =
      params.input_shape[0] * output_plane * depth * (params.dtype == base::DType::kF64 ? 8 : 4);
  return output_plane <= 16 && depth >= 1024 && params.weight_shape[0] >= 8 &&
         im2col_bytes <= (int64_t{64} << 20);
}

template <class T>
absl::Status RunConvTransposed(const ConvParams& params, const Dims& output_shape,
                               const gemm_internal::MicroKernelProvider& kernels,
                               runtime::ThreadPool* pool) {
  const int64_t images = params.input_shape[0], channels = params.input_shape[1];
  const int64_t in_h = params.input_shape[2], in_w = params.input_shape[3];
  const int64_t out_channels = params.weight_shape[0];
  const int64_t kh_size = params.weight_shape[2], kw_size = params.weight_shape[3];
  const int64_t out_h = output_shape[2], out_w = output_shape[3];
  const int64_t plane = out_h * out_w;
  const int64_t depth = channels * kh_size * kw_size;
  const int64_t stride_h = At(params.strides, 0, 1), stride_w = At(params.strides, 1, 1);
  const int64_t dil_h = At(params.dilation, 0, 1), dil_w = At(params.dilation, 1, 1);
  const int64_t low_h = At(params.low, 0, 0), low_w = At(params.low, 1, 0);
  const int64_t rows = images * plane;
  // Kept per calling thread across calls: a fresh multi-megabyte buffer would page-fault on
  // every step.
  thread_local std::vector<T> columns, result;
  columns.resize(static_cast<size_t>(rows * depth));
  result.resize(static_cast<size_t>(rows * out_channels));
  const T* input = static_cast<const T*>(params.input);
  T* a = columns.data();
  // Row (image, oh, ow) of im2col^T: for each channel c and kernel position (kh, kw), the input
  // element at (oh * stride + kh * dilation - low, ow * stride + kw * dilation - low).
  auto build = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t image = r / plane, oh = (r % plane) / out_w, ow = r % out_w;
      T* row = a + r * depth;
      const int64_t w0 = ow * stride_w - low_w;  // input column of kw = 0
      // Kernel columns kw with 0 <= w0 + kw * dil_w < in_w.
      int64_t kw_begin = 0, kw_end = kw_size;
      while (kw_begin < kw_size && w0 + kw_begin * dil_w < 0) ++kw_begin;
      while (kw_end > kw_begin && w0 + (kw_end - 1) * dil_w >= in_w) --kw_end;
      for (int64_t c = 0; c < channels; ++c) {
        const T* src_plane = input + (image * channels + c) * in_h * in_w;
        for (int64_t kh = 0; kh < kh_size; ++kh) {
          T* out = row + (c * kh_size + kh) * kw_size;
          const int64_t ih = oh * stride_h + kh * dil_h - low_h;
          if (ih < 0 || ih >= in_h) {
            std::fill(out, out + kw_size, T{0});
            continue;
          }
          const T* src = src_plane + ih * in_w + w0;
          std::fill(out, out + kw_begin, T{0});
          if (dil_w == 1) {
            std::memcpy(out + kw_begin, src + kw_begin,
                        static_cast<size_t>(kw_end - kw_begin) * sizeof(T));
          } else {
            for (int64_t kw = kw_begin; kw < kw_end; ++kw) out[kw] = src[kw * dil_w];
          }
          std::fill(out + kw_end, out + kw_size, T{0});
        }
      }
    }
  };
  if (pool != nullptr && pool->num_threads() > 1 && rows > 1) {
    pool->ParallelFor(rows, 1, build);
  } else {
    build(0, rows);
  }

  CoreProblem<T> problem;
  problem.m = rows;
  problem.n = out_channels;
  problem.k = depth;
  problem.a = a;
  problem.a_row_stride = depth;
  problem.a_col_stride = 1;
  problem.b = static_cast<const T*>(params.weight);
  const StridedBPacker<T> weight_t(/*row_stride=*/1, /*col_stride=*/depth);
  problem.b_packer = &weight_t;
  problem.c = result.data();
  problem.ldc = out_channels;
  problem.batches.push_back(BatchOffsets{});
  absl::Status status =
      gemm_internal::RunCore(problem, EpilogueVariant{}, params.tuning, kernels, pool);
  if (!status.ok()) return status;
  // out[image, o, p] = result[(image, p), o]: P x O per image, small next to the GEMM.
  T* output = static_cast<T*>(params.output);
  for (int64_t image = 0; image < images; ++image) {
    const T* src = result.data() + image * plane * out_channels;
    T* dst = output + image * out_channels * plane;
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t p = 0; p < plane; ++p) dst[o * plane + p] = src[p * out_channels + o];
    }
  }
  return absl::OkStatus();
}

// An input-gradient convolution: autodiff's dX = conv(g, W') with W'[C, O, k] the flipped,
// transposed weight, unit strides and "full" padding k - 1 on both sides. As an implicit GEMM
// its im2col panels are O * prod(k) deep over the padded output positions, packed for only C
// rows of A, and (k - 1)-wide borders of every panel are zeros that are multiplied anyway.
// Computed the other way round (col2im, as the forward conv's transpose): for each image
// cols[(c, kk), p] = W'^T[(c, kk), o] * g[o, p] is one GEMM whose B is g itself (dense rows, no
// gather, no padding), then every column adds back at output position p + (k - 1) - kk. About
// prod(in) / prod(out) of the multiply-adds (121 / 169 for the CNN's 11x11 -> 13x13). Only the
// plain 2-d case without groups, dilation or epilogue takes this path.
bool UseCol2Im(const ConvParams& params, const Dims& output_shape) {
  if (params.input_shape.size() != 4 || params.groups != 1 || params.bias != nullptr ||
      params.residual != nullptr || params.activation != GemmActivation::kNone) {
    return false;
  }
  for (size_t t = 0; t < 2; ++t) {
    const int64_t k = params.weight_shape[t + 2];
    if (k < 2 || At(params.strides, t, 1) != 1 || At(params.dilation, t, 1) != 1 ||
        At(params.input_dilation, t, 1) != 1 || At(params.low, t, 0) != k - 1 ||
        At(params.high, t, 0) != k - 1) {
      return false;
    }
  }
  const int64_t columns_bytes = params.input_shape[0] * params.weight_shape[0] *
                                params.weight_shape[2] * params.weight_shape[3] *
                                params.input_shape[2] * params.input_shape[3] *
                                (params.dtype == base::DType::kF64 ? 8 : 4);
  // Enough positions to fill a few register tiles; the columns are capped at 64 MiB.
  return params.input_shape[2] * params.input_shape[3] >= 32 && output_shape[1] >= 8 &&
         columns_bytes <= (int64_t{64} << 20);
}

template <class T>
absl::Status RunConvCol2Im(const ConvParams& params, const Dims& output_shape,
                           const gemm_internal::MicroKernelProvider& kernels,
                           runtime::ThreadPool* pool) {
  const int64_t images = params.input_shape[0], channels = params.input_shape[1];
  const int64_t in_h = params.input_shape[2], in_w = params.input_shape[3];
  const int64_t out_channels = params.weight_shape[0];
  const int64_t kh_size = params.weight_shape[2], kw_size = params.weight_shape[3];
  const int64_t out_h = output_shape[2], out_w = output_shape[3];
  const int64_t kernel = kh_size * kw_size, plane = in_h * in_w;
  const int64_t rows = out_channels * kernel;  // (output channel, kernel position)
  // Kept per calling thread across calls, as in RunConvTransposed.
  thread_local std::vector<T> weight_t, columns;
  weight_t.resize(static_cast<size_t>(rows * channels));
  columns.resize(static_cast<size_t>(images * rows * plane));
  // weight_t[(o, kk), c] = W'[o, c, kk].
  const T* weight = static_cast<const T*>(params.weight);
  for (int64_t o = 0; o < out_channels; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const T* src = weight + (o * channels + c) * kernel;
      for (int64_t kk = 0; kk < kernel; ++kk)
        weight_t[((o * kernel + kk) * channels) + c] = src[kk];
    }
  }
  CoreProblem<T> problem;
  problem.m = rows;
  problem.n = plane;
  problem.k = channels;
  problem.a = weight_t.data();
  problem.a_row_stride = channels;
  problem.a_col_stride = 1;
  problem.b = static_cast<const T*>(params.input);
  const StridedBPacker<T> dense(/*row_stride=*/plane, /*col_stride=*/1);
  problem.b_packer = &dense;
  problem.c = columns.data();
  problem.ldc = plane;
  problem.batches.reserve(static_cast<size_t>(images));
  for (int64_t image = 0; image < images; ++image) {
    BatchOffsets offsets;
    offsets.b = image * channels * plane;
    offsets.c = image * rows * plane;
    problem.batches.push_back(offsets);
  }
  absl::Status status =
      gemm_internal::RunCore(problem, EpilogueVariant{}, params.tuning, kernels, pool);
  if (!status.ok()) return status;
  // out[image, o, y, x] = sum over (kh, kw) of columns[image, (o, kh, kw), y - (kh_size - 1 - kh),
  // x - (kw_size - 1 - kw)] where that position lies inside g's plane.
  T* output = static_cast<T*>(params.output);
  const T* cols = columns.data();  // not `columns` in the lambda: a worker has its own, empty
  auto col2im = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {  // r = (image, o)
      const int64_t image = r / out_channels, o = r % out_channels;
      T* dst = output + r * out_h * out_w;
      std::fill(dst, dst + out_h * out_w, T{0});
      const T* src_rows = cols + (image * rows + o * kernel) * plane;
      for (int64_t kh = 0; kh < kh_size; ++kh) {
        for (int64_t kw = 0; kw < kw_size; ++kw) {
          const T* src = src_rows + (kh * kw_size + kw) * plane;
          const int64_t dy = kh_size - 1 - kh, dx = kw_size - 1 - kw;
          for (int64_t y = 0; y < in_h; ++y) {
            T* d = dst + (y + dy) * out_w + dx;
            const T* s = src + y * in_w;
            for (int64_t x = 0; x < in_w; ++x) d[x] += s[x];
          }
        }
      }
    }
  };
  const int64_t planes = images * out_channels;
  if (pool != nullptr && pool->num_threads() > 1 && planes > 1) {
    pool->ParallelFor(planes, 1, col2im);
  } else {
    col2im(0, planes);
  }
  return absl::OkStatus();
}

// One GEMM per (image, group): the offsets of its weight rows, input channels, output channels
// (and residual), and per-channel vectors.
std::vector<BatchOffsets> ConvBatches(const ConvParams& params, const Dims& output_shape) {
  const int64_t images = params.input_shape[0], channels = params.input_shape[1];
  const int64_t out_channels = params.weight_shape[0], group_channels = params.weight_shape[1];
  const int64_t groups = params.groups, group_outputs = out_channels / groups;
  const int64_t input_plane = Product(params.input_shape.begin() + 2, params.input_shape.end());
  const int64_t output_plane = Product(output_shape.begin() + 2, output_shape.end());
  const int64_t depth =
      group_channels * Product(params.weight_shape.begin() + 2, params.weight_shape.end());
  std::vector<BatchOffsets> batches;
  batches.reserve(static_cast<size_t>(images * groups));
  for (int64_t image = 0; image < images; ++image) {
    for (int64_t g = 0; g < groups; ++g) {
      BatchOffsets offsets;
      offsets.a = g * group_outputs * depth;
      offsets.b = (image * channels + g * group_channels) * input_plane;
      offsets.c = (image * out_channels + g * group_outputs) * output_plane;
      offsets.residual = offsets.c;
      offsets.row_bias = g * group_outputs;
      batches.push_back(offsets);
    }
  }
  return batches;
}

template <class T>
absl::Status RunConv(const ConvParams& params, const Dims& output_shape,
                     const gemm_internal::MicroKernelProvider& kernels, runtime::ThreadPool* pool) {
  if (UseTransposedSmallOutput(params, output_shape)) {
    return RunConvTransposed<T>(params, output_shape, kernels, pool);
  }
  if (UseCol2Im(params, output_shape)) return RunConvCol2Im<T>(params, output_shape, kernels, pool);
  const int64_t group_outputs = params.weight_shape[0] / params.groups;
  const int64_t input_plane = Product(params.input_shape.begin() + 2, params.input_shape.end());
  const int64_t output_plane = Product(output_shape.begin() + 2, output_shape.end());
  const int64_t kernel_volume = Product(params.weight_shape.begin() + 2, params.weight_shape.end());

  CoreProblem<T> problem;
  problem.m = group_outputs;
  problem.n = output_plane;
  problem.k = params.weight_shape[1] * kernel_volume;
  problem.a = static_cast<const T*>(params.weight);
  problem.a_row_stride = problem.k;
  problem.a_col_stride = 1;
  problem.b = static_cast<const T*>(params.input);
  const ConvBPacker<T> gather(params, output_shape);
  const StridedBPacker<T> pointwise(input_plane, 1);
  problem.b_packer = IsPointwise(params) ? static_cast<const BPacker<T>*>(&pointwise) : &gather;
  problem.c = static_cast<T*>(params.output);
  problem.ldc = output_plane;
  problem.row_bias = static_cast<const T*>(params.bias);
  problem.residual = static_cast<const T*>(params.residual);
  problem.residual_ld = output_plane;
  problem.batches = ConvBatches(params, output_shape);
  EpilogueVariant variant;
  variant.activation = params.activation;
  variant.row_bias = params.bias != nullptr;
  variant.residual = params.residual != nullptr;
  variant.residual_after_activation = params.residual_after_activation;
  return gemm_internal::RunCore(problem, variant, params.tuning, kernels, pool);
}

}  // namespace

absl::Status ExecuteInt8Conv(const Int8ConvParams& params,
                             const gemm_internal::MicroKernelProvider& kernels,
                             runtime::ThreadPool* pool) {
  if (const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel(); !level.ok()) {
    return level.status();
  }
  const ConvParams& conv = params.conv;
  for (auto [name, dtype] :
       {std::pair{"input", params.input_dtype}, {"weight", params.weight_dtype}}) {
    if (!gemm_internal::IsInt8Operand(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("conv int8: ", name, " dtype ",
                                                     base::DTypeName(dtype),
                                                     " is not supported (u8, i8, i16)"));
    }
  }
  if (conv.bias != nullptr || conv.residual != nullptr ||
      conv.activation != GemmActivation::kNone) {
    return absl::InvalidArgumentError(
        "conv int8: bias, residual and activation are epilogue steps, not ConvParams fields");
  }
  if (absl::Status s = gemm_internal::CheckInt8Epilogue("conv int8", params.epilogue); !s.ok()) {
    return s;
  }
  absl::StatusOr<Dims> output_shape = ConvOutputShape(conv);
  if (!output_shape.ok()) return output_shape.status();
  for (int64_t d : conv.input_shape) {
    if (d < 0) return absl::InvalidArgumentError("conv int8: negative input dimension");
  }
  if (NumElements(*output_shape) == 0) return absl::OkStatus();
  if (conv.output == nullptr || (NumElements(conv.input_shape) > 0 && conv.input == nullptr) ||
      (NumElements(conv.weight_shape) > 0 && conv.weight == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("conv int8: null operand for input ",
                                                   ShapeString(conv.input_shape), " and weight ",
                                                   ShapeString(conv.weight_shape)));
  }
  // out[image, g * Og + o, P] = W_g[o, Cg * prod(K)] * im2col(x)[Cg * prod(K), P], as RunConv.
  const Dims& out = *output_shape;
  const int64_t group_outputs = conv.weight_shape[0] / conv.groups;
  const int64_t input_plane = Product(conv.input_shape.begin() + 2, conv.input_shape.end());
  const int64_t output_plane = Product(out.begin() + 2, out.end());
  gemm_internal::Int8CoreProblem problem;
  problem.m = group_outputs;
  problem.n = output_plane;
  problem.k =
      conv.weight_shape[1] * Product(conv.weight_shape.begin() + 2, conv.weight_shape.end());
  problem.a_dtype = params.weight_dtype;
  problem.a = conv.weight;
  problem.a_row_stride = problem.k;
  problem.a_col_stride = 1;
  problem.b = conv.input;
  problem.b_element_size = base::DTypeSize(params.input_dtype);
  problem.c = conv.output;
  problem.ldc = output_plane;
  problem.epilogue = params.epilogue;
  problem.batches = ConvBatches(conv, out);
  return gemm_internal::WithInt8OperandType(params.input_dtype, [&]<class T>(T*) {
    const ConvBPacker<T> gather(conv, out);
    const StridedBPacker<T> pointwise(input_plane, 1);
    const gemm_internal::NarrowInt8Packer<T> packer(
        IsPointwise(conv) ? static_cast<const BPacker<T>&>(pointwise) : gather);
    problem.b_packer = &packer;
    // The weights are A and the image B: quads for an i8 image within [-64, 64] (any, with VNNI),
    // and with VNNI for a u8 image (after a ReLU) too, its bytes the unsigned ones.
    const bool byte_weights =
        params.weight_dtype == base::DType::kU8 || params.weight_dtype == base::DType::kI8;
    problem.quads = byte_weights && std::is_same_v<T, int8_t>;
    problem.quads_b_unsigned =
        params.weight_dtype == base::DType::kI8 && std::is_same_v<T, uint8_t>;
    return gemm_internal::RunInt8Core(problem, conv.tuning, kernels, pool);
  });
}

absl::StatusOr<Dims> ConvOutputShape(const ConvParams& params) {
  absl::StatusOr<Dims> shape = base::ConvOutputShape(
      params.input_shape, params.weight_shape,
      base::ConvGeometry{params.strides, params.low, params.high, params.dilation,
                         params.input_dilation, params.groups});
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("conv: ", shape.status().message(), "; input ",
                                                   ShapeString(params.input_shape), ", weight ",
                                                   ShapeString(params.weight_shape)));
  }
  return shape;
}

absl::Status ExecuteConv(const ConvParams& params,
                         const gemm_internal::MicroKernelProvider& kernels,
                         runtime::ThreadPool* pool) {
  // The fast paths below are chosen by the process's CPU level: a bad KILN_CPU is an error here
  // as in the JIT, not a silent fall back to the portable code.
  if (const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel(); !level.ok()) {
    return level.status();
  }
  if (gemm_internal::IsHalf(params.dtype)) {
    return gemm_internal::ExecuteHalfConv(params, kernels, pool);
  }
  if (params.dtype != base::DType::kF32 && params.dtype != base::DType::kF64) {
    return absl::InvalidArgumentError(absl::StrCat("conv: dtype ", base::DTypeName(params.dtype),
                                                   " is not supported (f32, f64, bf16, f16)"));
  }
  absl::StatusOr<Dims> output_shape = ConvOutputShape(params);
  if (!output_shape.ok()) return output_shape.status();
  for (int64_t d : params.input_shape) {
    if (d < 0) return absl::InvalidArgumentError("conv: negative input dimension");
  }
  const int64_t output_elements = NumElements(*output_shape);
  if (output_elements == 0) return absl::OkStatus();
  if (params.output == nullptr ||
      (NumElements(params.input_shape) > 0 && params.input == nullptr) ||
      (NumElements(params.weight_shape) > 0 && params.weight == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("conv: null operand for input ",
                                                   ShapeString(params.input_shape), " and weight ",
                                                   ShapeString(params.weight_shape)));
  }
  return params.dtype == base::DType::kF32 ? RunConv<float>(params, *output_shape, kernels, pool)
                                           : RunConv<double>(params, *output_shape, kernels, pool);
}

}  // namespace kiln::runtime::cpu
