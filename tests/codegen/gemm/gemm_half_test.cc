// bf16 and f16 GEMMs and convolutions (runtime/cpu/gemm_half.cc): stored narrow, computed in
// f32. The oracle is the f32 driver run on the operands widened by hand (exact) with the result
// rounded by base::FloatToBFloat16 / FloatToHalf: the narrow call must give those bits exactly,
// at every CPU level (F16C or not), through strided, transposed and broadcast operands, beta,
// and the fused epilogue; and the gaps of C must keep their contents.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "codegen/cpu/gemm.h"
#include "runtime/thread_pool.h"

namespace kiln::codegen::cpu {
namespace {

using base::DType;

uint16_t ToNarrow(DType dtype, float v) {
  return dtype == DType::kBF16 ? base::FloatToBFloat16(v) : base::FloatToHalf(v);
}
float ToWide(DType dtype, uint16_t bits) {
  return dtype == DType::kBF16 ? base::BFloat16ToFloat(bits) : base::HalfToFloat(bits);
}

runtime::ThreadPool& TwoThreads() {
  static runtime::ThreadPool* pool = new runtime::ThreadPool(2);
  return *pool;
}

// `rows` x `cols` per batch entry at (row_stride, col_stride), entries `entry` apart, in a buffer
// whose gaps hold `gap` (bits), and its widened dense copy.
struct Matrix {
  int64_t rows, cols, entries, row_stride, col_stride, entry;
  std::vector<uint16_t> narrow;
  std::vector<float> wide;  // dense [entries, rows, cols]
};

Matrix MakeMatrix(DType dtype, int64_t rows, int64_t cols, int64_t entries, bool transposed,
                  int64_t pad, std::mt19937& rng, uint16_t gap) {
  Matrix m{rows, cols, entries, 0, 0, 0, {}, {}};
  if (transposed) {
    m.row_stride = 1;
    m.col_stride = rows + pad;
    m.entry = cols * (rows + pad) + 3;
  } else {
    m.row_stride = cols + pad;
    m.col_stride = 1;
    m.entry = rows * (cols + pad) + 3;
  }
  m.narrow.assign(static_cast<size_t>(entries * m.entry), gap);
  m.wide.resize(static_cast<size_t>(entries * rows * cols));
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (int64_t e = 0; e < entries; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t bits = ToNarrow(dtype, uniform(rng));
        m.narrow[static_cast<size_t>(e * m.entry + r * m.row_stride + c * m.col_stride)] = bits;
        m.wide[static_cast<size_t>((e * rows + r) * cols + c)] = ToWide(dtype, bits);
      }
    }
  }
  return m;
}

struct Case {
  DType dtype;
  int64_t batch, m, n, k;
  bool transpose_a, transpose_b, broadcast_b;
  double beta;
  bool bias, residual;
  GemmActivation activation;
  int threads;

  std::string Name() const {
    return absl::StrCat(base::DTypeName(dtype), " batch=", batch, " m=", m, " n=", n, " k=", k,
                        transpose_a ? " aT" : "", transpose_b ? " bT" : "",
                        broadcast_b ? " b-broadcast" : "", " beta=", beta, bias ? " bias" : "",
                        residual ? " residual" : "", " act=", GemmActivationName(activation),
                        " threads=", threads);
  }
};

void RunCase(const Case& tc) {
  SCOPED_TRACE(tc.Name());
  std::mt19937 rng(static_cast<uint32_t>(tc.m * 131 + tc.n * 7 + tc.k));
  constexpr uint16_t kGap = 0x7fc1;  // a NaN in both dtypes: reading a gap poisons the result
  constexpr uint16_t kSentinel = 0x1234;
  const Matrix a = MakeMatrix(tc.dtype, tc.m, tc.k, tc.batch, tc.transpose_a, 2, rng, kGap);
  const Matrix b =
      MakeMatrix(tc.dtype, tc.k, tc.n, tc.broadcast_b ? 1 : tc.batch, tc.transpose_b, 1, rng, kGap);
  Matrix c = MakeMatrix(tc.dtype, tc.m, tc.n, tc.batch, false, 3, rng, kSentinel);
  const Matrix residual = MakeMatrix(tc.dtype, tc.m, tc.n, tc.batch, false, 0, rng, kGap);
  const Matrix bias = MakeMatrix(tc.dtype, 1, tc.n, 1, false, 0, rng, kGap);

  GemmParams narrow;
  narrow.dtype = tc.dtype;
  narrow.batch = {tc.batch};
  narrow.m = tc.m;
  narrow.n = tc.n;
  narrow.k = tc.k;
  narrow.a = MatrixView{a.narrow.data(), a.row_stride, a.col_stride, {a.entry}};
  narrow.b =
      MatrixView{b.narrow.data(), b.row_stride, b.col_stride, {tc.broadcast_b ? 0 : b.entry}};
  narrow.c = MatrixView{c.narrow.data(), c.row_stride, 1, {c.entry}};
  narrow.beta = tc.beta;
  narrow.epilogue.activation = tc.activation;
  if (tc.bias) narrow.epilogue.column_bias = bias.narrow.data();
  if (tc.residual) {
    narrow.epilogue.residual =
        MatrixView{residual.narrow.data(), residual.row_stride, 1, {residual.entry}};
  }

  GemmParams wide = narrow;
  wide.dtype = DType::kF32;
  std::vector<float> c_wide = c.wide;
  wide.a = MatrixView{a.wide.data(), tc.k, 1, {tc.m * tc.k}};
  wide.b = MatrixView{b.wide.data(), tc.n, 1, {tc.broadcast_b ? 0 : tc.k * tc.n}};
  wide.c = MatrixView{c_wide.data(), tc.n, 1, {tc.m * tc.n}};
  if (tc.bias) wide.epilogue.column_bias = bias.wide.data();
  if (tc.residual)
    wide.epilogue.residual = MatrixView{residual.wide.data(), tc.n, 1, {tc.m * tc.n}};

  runtime::ThreadPool* pool = tc.threads > 1 ? &TwoThreads() : nullptr;
  ASSERT_TRUE(Gemm(wide, pool).ok());
  const absl::Status status = Gemm(narrow, pool);
  ASSERT_TRUE(status.ok()) << status;
  int failures = 0;
  std::vector<bool> inside(c.narrow.size(), false);
  for (int64_t e = 0; e < tc.batch; ++e) {
    for (int64_t r = 0; r < tc.m; ++r) {
      for (int64_t col = 0; col < tc.n && failures < 5; ++col) {
        const size_t at = static_cast<size_t>(e * c.entry + r * c.row_stride + col);
        inside[at] = true;
        const float want_f32 = c_wide[static_cast<size_t>((e * tc.m + r) * tc.n + col)];
        const uint16_t want = ToNarrow(tc.dtype, want_f32);
        if (c.narrow[at] != want) {
          ADD_FAILURE() << "C[" << e << "][" << r << "][" << col << "] = 0x" << std::hex
                        << c.narrow[at] << ", expected 0x" << want << std::dec << " (" << want_f32
                        << ")";
          ++failures;
        }
      }
    }
  }
  for (size_t i = 0; i < c.narrow.size() && failures < 5; ++i) {
    if (!inside[i] && c.narrow[i] != kSentinel) {
      ADD_FAILURE() << "gap element " << i << " of C was overwritten";
      ++failures;
    }
  }
}

TEST(GemmHalfTest, EqualsTheF32GemmOfTheWidenedOperandsRoundedOnce) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    RunCase(
        {dtype, 1, 1, 37, 19, false, false, false, 0.0, false, false, GemmActivation::kNone, 1});
    RunCase(
        {dtype, 1, 33, 45, 70, false, false, false, 0.0, false, false, GemmActivation::kNone, 2});
    RunCase({dtype, 3, 17, 9, 40, true, true, false, 0.0, false, false, GemmActivation::kNone, 1});
    RunCase({dtype, 4, 8, 24, 12, false, true, true, 1.0, false, false, GemmActivation::kNone, 2});
    RunCase({dtype, 2, 20, 35, 16, true, false, false, 0.0, true, false, GemmActivation::kRelu, 1});
    RunCase(
        {dtype, 2, 9, 18, 27, false, false, true, 0.5, true, true, GemmActivation::kGeluTanh, 2});
    RunCase(
        {dtype, 1, 64, 96, 300, false, false, false, 0.0, true, false, GemmActivation::kNone, 2});
  }
}

TEST(GemmHalfTest, ConvEqualsTheF32ConvOfTheWidenedOperandsRoundedOnce) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(base::DTypeName(dtype));
    std::mt19937 rng(5);
    const Matrix input = MakeMatrix(dtype, 1, 2 * 3 * 9 * 9, 1, false, 0, rng, 0);
    const Matrix weight = MakeMatrix(dtype, 1, 4 * 3 * 3 * 3, 1, false, 0, rng, 0);
    const Matrix bias = MakeMatrix(dtype, 1, 4, 1, false, 0, rng, 0);
    ConvParams narrow;
    narrow.dtype = dtype;
    narrow.input_shape = {2, 3, 9, 9};
    narrow.weight_shape = {4, 3, 3, 3};
    narrow.strides = {2, 1};
    narrow.low = {1, 1};
    narrow.high = {1, 0};
    narrow.input = input.narrow.data();
    narrow.weight = weight.narrow.data();
    narrow.bias = bias.narrow.data();
    narrow.activation = GemmActivation::kRelu;
    const absl::StatusOr<runtime::cpu::Dims> shape = runtime::cpu::ConvOutputShape(narrow);
    ASSERT_TRUE(shape.ok()) << shape.status();
    int64_t count = 1;
    for (int64_t d : *shape) count *= d;
    std::vector<uint16_t> out(static_cast<size_t>(count));
    std::vector<float> out_wide(static_cast<size_t>(count));
    narrow.output = out.data();
    ConvParams wide = narrow;
    wide.dtype = DType::kF32;
    wide.input = input.wide.data();
    wide.weight = weight.wide.data();
    wide.bias = bias.wide.data();
    wide.output = out_wide.data();
    ASSERT_TRUE(Conv(wide, &TwoThreads()).ok());
    const absl::Status status = Conv(narrow, &TwoThreads());
    ASSERT_TRUE(status.ok()) << status;
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)], ToNarrow(dtype, out_wide[static_cast<size_t>(i)]))
          << i;
    }
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
