// GEMM (codegen/cpu/gemm.h) against a naive triple loop in double. Operands live in buffers with
// gaps between rows and batch entries; the gaps of A and B hold NaN (a read of them poisons the
// result) and those of C a sentinel that must survive (a write past a tile's edge changes it).
#include "codegen/cpu/gemm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cpu/gemm_kernel.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"
#include "tests/codegen/gemm/gemm_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using testing::ErrorBound;
using ::testing::HasSubstr;
using testing::ReferenceActivation;

namespace gi = runtime::cpu::gemm_internal;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSentinel = 12345.0;

runtime::ThreadPool& TwoThreads() {
  static runtime::ThreadPool* pool = new runtime::ThreadPool(2);
  return *pool;
}

// How a matrix operand is laid out in memory.
enum class Layout {
  kRowMajor,          // row stride = cols
  kPadded,            // row stride = cols + 3
  kTransposed,        // column-major: row stride 1, column stride = rows
  kTransposedPadded,  // column stride = rows + 5
  kStrided,           // column stride 2, row stride 2 * cols + 1
};

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kRowMajor:
      return "row_major";
    case Layout::kPadded:
      return "padded";
    case Layout::kTransposed:
      return "transposed";
    case Layout::kTransposedPadded:
      return "transposed_padded";
    case Layout::kStrided:
      return "strided";
  }
  return "?";
}

const Layout kAllLayouts[] = {Layout::kRowMajor, Layout::kPadded, Layout::kTransposed,
                              Layout::kTransposedPadded, Layout::kStrided};

// A batch of rows x cols matrices in a buffer of T, with its logical values in double.
template <class T>
struct Operand {
  int64_t rows = 0, cols = 0, count = 1;
  int64_t row_stride = 0, col_stride = 0, batch_stride = 0;
  std::vector<T> storage;

  int64_t Offset(int64_t batch, int64_t r, int64_t c) const {
    return batch * batch_stride + r * row_stride + c * col_stride;
  }
  double At(int64_t batch, int64_t r, int64_t c) const {
    return static_cast<double>(storage[static_cast<size_t>(Offset(batch, r, c))]);
  }
  // The view over batch dims `batch` (row-major over them; their product is `count`).
  MatrixView View(const std::vector<int64_t>& batch) const {
    MatrixView view;
    view.data = storage.data();
    view.row_stride = row_stride;
    view.col_stride = col_stride;
    view.batch_strides.resize(batch.size());
    int64_t stride = batch_stride;
    for (size_t i = batch.size(); i-- > 0;) {
      view.batch_strides[i] = stride;
      stride *= batch[i];
    }
    return view;
  }
};

template <class T>
Operand<T> MakeOperand(int64_t rows, int64_t cols, int64_t count, Layout layout, double gap_value,
                       std::mt19937& rng, double scale = 1.0) {
  Operand<T> op;
  op.rows = rows;
  op.cols = cols;
  op.count = count;
  int64_t extent = 0;  // elements spanned by one matrix
  switch (layout) {
    case Layout::kRowMajor:
      op.row_stride = cols;
      op.col_stride = 1;
      extent = rows * cols;
      break;
    case Layout::kPadded:
      op.row_stride = cols + 3;
      op.col_stride = 1;
      extent = rows * (cols + 3);
      break;
    case Layout::kTransposed:
      op.row_stride = 1;
      op.col_stride = rows;
      extent = rows * cols;
      break;
    case Layout::kTransposedPadded:
      op.row_stride = 1;
      op.col_stride = rows + 5;
      extent = cols * (rows + 5);
      break;
    case Layout::kStrided:
      op.col_stride = 2;
      op.row_stride = 2 * cols + 1;
      extent = rows * (2 * cols + 1);
      break;
  }
  op.batch_stride = extent + 7;
  op.storage.assign(static_cast<size_t>(count * op.batch_stride + 1), static_cast<T>(gap_value));
  std::uniform_real_distribution<double> uniform(-scale, scale);
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        op.storage[static_cast<size_t>(op.Offset(b, r, c))] = static_cast<T>(uniform(rng));
      }
    }
  }
  return op;
}

// Whether c (m x n) holds a (m x k) times b (k x n), all dense row-major f32, within 8e-7 of
// each element's sum of |products| (the double-precision dot product as reference).
::testing::AssertionResult IsDenseProduct(const float* a, const float* b, const float* c, int64_t m,
                                          int64_t n, int64_t k) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t col = 0; col < n; ++col) {
      double expected = 0, abs_sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(a[r * k + kk]) * b[kk * n + col];
        expected += p;
        abs_sum += std::abs(p);
      }
      const double got = c[r * n + col];
      if (!(std::abs(got - expected) <= 8e-7 * abs_sum)) {
        return ::testing::AssertionFailure()
               << "C[" << r << "][" << col << "] = " << got << ", expected " << expected
               << " (allowed error " << 8e-7 * abs_sum << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

const char* ARead(GemmTuning::ARead read) {
  switch (read) {
    case GemmTuning::ARead::kAuto:
      return "";
    case GemmTuning::ARead::kPacked:
      return " a_packed";
    case GemmTuning::ARead::kInPlace:
      return " a_in_place";
  }
  return "?";
}

struct Case {
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> batch;
  int64_t m = 1, n = 1, k = 1;
  Layout a_layout = Layout::kRowMajor, b_layout = Layout::kRowMajor;
  Layout c_layout = Layout::kRowMajor;  // kRowMajor or kPadded
  bool broadcast_a = false;             // every batch entry reads the same A
  double alpha = 1.0, beta = 0.0;
  double input_scale = 1.0;
  GemmActivation activation = GemmActivation::kNone;
  bool column_bias = false, row_bias = false;
  bool residual = false, residual_after_activation = true;
  GemmTuning tuning;
  int threads = 1;

  std::string Name() const {
    return absl::StrCat(
        ir::DTypeName(dtype), " batch=[", absl::StrJoin(batch, ","), "] m=", m, " n=", n, " k=", k,
        " a=", LayoutName(a_layout), " b=", LayoutName(b_layout), " c=", LayoutName(c_layout),
        broadcast_a ? " broadcast_a" : "", " alpha=", alpha, " beta=", beta,
        " act=", GemmActivationName(activation), column_bias ? " cbias" : "",
        row_bias ? " rbias" : "",
        residual ? (residual_after_activation ? " res_after" : " res_before") : "",
        " tuning=", tuning.mc, "/", tuning.nc, "/", tuning.kc, "/", tuning.vector_bits, "x",
        tuning.mr, "x", tuning.nr_vectors, ARead(tuning.a_read), " threads=", threads);
  }
};

// Runs `tc` and checks every element of C and of C's gaps. Returns C's values (for comparing
// runs); empty after a failure.
template <class T>
std::vector<T> RunAndCheck(const Case& tc, uint32_t seed = 1) {
  SCOPED_TRACE(tc.Name());
  std::mt19937 rng(seed);
  int64_t count = 1;
  for (int64_t d : tc.batch) count *= d;
  const Operand<T> a = MakeOperand<T>(tc.m, tc.k, tc.broadcast_a ? 1 : count, tc.a_layout, kNaN,
                                      rng, tc.input_scale);
  const Operand<T> b = MakeOperand<T>(tc.k, tc.n, count, tc.b_layout, kNaN, rng);
  Operand<T> c = MakeOperand<T>(tc.m, tc.n, count, tc.c_layout, kSentinel, rng);
  const std::vector<T> c_before = c.storage;
  if (tc.beta == 0.0) {
    // beta == 0 must not read C: poison it.
    for (int64_t bi = 0; bi < count; ++bi) {
      for (int64_t r = 0; r < tc.m; ++r) {
        for (int64_t col = 0; col < tc.n; ++col) {
          c.storage[static_cast<size_t>(c.Offset(bi, r, col))] = static_cast<T>(kNaN);
        }
      }
    }
  }
  const Operand<T> residual = MakeOperand<T>(tc.m, tc.n, count, Layout::kPadded, kNaN, rng);
  const Operand<T> column_bias = MakeOperand<T>(1, tc.n, 1, Layout::kRowMajor, kNaN, rng);
  const Operand<T> row_bias = MakeOperand<T>(1, tc.m, 1, Layout::kRowMajor, kNaN, rng);

  GemmParams params;
  params.dtype = tc.dtype;
  params.batch = tc.batch;
  params.m = tc.m;
  params.n = tc.n;
  params.k = tc.k;
  params.a = a.View(tc.batch);
  if (tc.broadcast_a) params.a.batch_strides.assign(tc.batch.size(), 0);
  params.b = b.View(tc.batch);
  params.c = c.View(tc.batch);
  params.alpha = tc.alpha;
  params.beta = tc.beta;
  params.epilogue.activation = tc.activation;
  if (tc.column_bias) params.epilogue.column_bias = column_bias.storage.data();
  if (tc.row_bias) params.epilogue.row_bias = row_bias.storage.data();
  if (tc.residual) params.epilogue.residual = residual.View(tc.batch);
  params.epilogue.residual_after_activation = tc.residual_after_activation;
  params.tuning = tc.tuning;
  const absl::Status status = Gemm(params, tc.threads > 1 ? &TwoThreads() : nullptr);
  EXPECT_TRUE(status.ok()) << status;
  if (!status.ok()) return {};

  int failures = 0;
  std::vector<bool> inside(c.storage.size(), false);
  for (int64_t bi = 0; bi < count && failures < 5; ++bi) {
    const int64_t ai = tc.broadcast_a ? 0 : bi;
    for (int64_t r = 0; r < tc.m && failures < 5; ++r) {
      for (int64_t col = 0; col < tc.n && failures < 5; ++col) {
        double dot = 0, abs_dot = 0;
        for (int64_t kk = 0; kk < tc.k; ++kk) {
          const double product = a.At(ai, r, kk) * b.At(bi, kk, col);
          dot += product;
          abs_dot += std::abs(product);
        }
        const size_t c_index = static_cast<size_t>(c.Offset(bi, r, col));
        inside[c_index] = true;
        double v = tc.alpha * dot;
        double added = 0, after = 0;
        if (tc.beta != 0.0) {
          v += tc.beta * static_cast<double>(c_before[c_index]);
          added += std::abs(tc.beta * static_cast<double>(c_before[c_index]));
        }
        if (tc.column_bias) {
          v += column_bias.At(0, 0, col);
          added += std::abs(column_bias.At(0, 0, col));
        }
        if (tc.row_bias) {
          v += row_bias.At(0, 0, r);
          added += std::abs(row_bias.At(0, 0, r));
        }
        if (tc.residual && !tc.residual_after_activation) {
          v += residual.At(bi, r, col);
          added += std::abs(residual.At(bi, r, col));
        }
        v = ReferenceActivation(tc.activation, v);
        if (tc.residual && tc.residual_after_activation) {
          v += residual.At(bi, r, col);
          after += std::abs(residual.At(bi, r, col));
        }
        const double got = static_cast<double>(c.storage[c_index]);
        const double bound = ErrorBound(tc.dtype, tc.activation, tc.k, std::abs(tc.alpha) * abs_dot,
                                        added, after, v);
        if (!(std::abs(got - v) <= bound)) {
          ADD_FAILURE() << "C[" << bi << "][" << r << "][" << col << "] = " << got << ", expected "
                        << v << " (allowed error " << bound << ")";
          ++failures;
        }
      }
    }
  }
  for (size_t i = 0; i < c.storage.size() && failures < 5; ++i) {
    if (!inside[i] && static_cast<double>(c.storage[i]) != kSentinel) {
      ADD_FAILURE() << "gap element " << i << " of C was overwritten with " << c.storage[i];
      ++failures;
    }
  }
  if (failures > 0) return {};
  return c.storage;
}

void RunBoth(Case tc) {
  tc.dtype = ir::DType::kF32;
  RunAndCheck<float>(tc);
  tc.dtype = ir::DType::kF64;
  RunAndCheck<double>(tc);
}

// The host's default micro-kernel shape, to aim edge cases at its MR and NR.
const GemmKernelInfo& HostKernel(ir::DType dtype) {
  static const GemmKernelInfo f32 = *DescribeGemmKernel(ir::DType::kF32, {});
  static const GemmKernelInfo f64 = *DescribeGemmKernel(ir::DType::kF64, {});
  return dtype == ir::DType::kF64 ? f64 : f32;
}

TEST(GemmTest, DescribesTheHostKernel) {
  for (ir::DType dtype : {ir::DType::kF32, ir::DType::kF64}) {
    const GemmKernelInfo& info = HostKernel(dtype);
    EXPECT_THAT(info.name, HasSubstr(ir::DTypeName(dtype)));
    EXPECT_GE(info.mr, 1);
    EXPECT_EQ(info.nr % (info.vector_bits / (dtype == ir::DType::kF64 ? 64 : 32)), 0);
    EXPECT_GT(info.kc, 0);
    EXPECT_EQ(info.nc % info.nr, 0);
    EXPECT_EQ(info.mc % info.mr, 0);
    EXPECT_THAT(info.llvm_ir, HasSubstr("define void @" + info.name));
    EXPECT_FALSE(info.assembly.empty());
  }
}

TEST(GemmTest, ShapesAroundTheTile) {
  for (ir::DType dtype : {ir::DType::kF32, ir::DType::kF64}) {
    const int64_t mr = HostKernel(dtype).mr, nr = HostKernel(dtype).nr;
    const std::vector<std::vector<int64_t>> shapes = {{1, 1, 1},
                                                      {1, 1, 7},
                                                      {2, 3, 4},
                                                      {13, 17, 19},
                                                      {mr, nr, 5},
                                                      {mr + 1, nr + 1, 1},
                                                      {mr - 1, nr - 1, 3},
                                                      {2 * mr, 2 * nr, 300},
                                                      {2 * mr + 1, 2 * nr + 3, 301},
                                                      {100, 1, 50},
                                                      {1, 100, 50},
                                                      {127, 131, 137},
                                                      {3, 5, 0},
                                                      {0, 5, 3},
                                                      {5, 0, 3},
                                                      {300, 257, 613}};
    for (const auto& shape : shapes) {
      for (int threads : {1, 2}) {
        Case tc;
        tc.dtype = dtype;
        tc.m = shape[0];
        tc.n = shape[1];
        tc.k = shape[2];
        tc.threads = threads;
        if (dtype == ir::DType::kF32) {
          RunAndCheck<float>(tc);
        } else {
          RunAndCheck<double>(tc);
        }
      }
    }
  }
}

TEST(GemmTest, SeveralBlocksInEveryDimension) {
  // Tiny blocks: many depth blocks (the beta and epilogue hand-over between them), several A and
  // B blocks, and edge panels inside every block.
  for (int threads : {1, 2}) {
    Case tc;
    tc.m = 61;
    tc.n = 75;
    tc.k = 53;
    tc.tuning.mc = 20;
    tc.tuning.nc = 40;
    tc.tuning.kc = 7;
    tc.threads = threads;
    tc.beta = 0.5;
    tc.activation = GemmActivation::kSilu;
    tc.column_bias = true;
    tc.residual = true;
    RunBoth(tc);
  }
}

TEST(GemmTest, OtherKernelShapes) {
  // The shapes other targets get (AVX2 6x2 vectors, SSE/NEON-like 128-bit) and odd ones, run on
  // this host: the generator must be right for any MR and vector count.
  const int host_bits = HostKernel(ir::DType::kF32).vector_bits;
  const std::vector<std::vector<int>> shapes = {{256, 6, 2}, {128, 6, 2}, {128, 14, 2}, {128, 3, 1},
                                                {256, 1, 3}, {512, 1, 1}, {512, 8, 3}};
  for (const auto& shape : shapes) {
    if (shape[0] > host_bits) continue;
    Case tc;
    tc.m = 37;
    tc.n = 45;
    tc.k = 29;
    tc.tuning.vector_bits = shape[0];
    tc.tuning.mr = shape[1];
    tc.tuning.nr_vectors = shape[2];
    tc.tuning.kc = 11;
    tc.activation = GemmActivation::kGeluTanh;
    tc.row_bias = true;
    for (int threads : {1, 2}) {
      tc.threads = threads;
      RunBoth(tc);
    }
  }
}

// Runs `tc` in T with A packed and with A read in place: both pass RunAndCheck, with the same bits.
template <class T>
void ExpectInPlaceGivesThePackedBits(Case tc) {
  tc.dtype = std::is_same_v<T, double> ? ir::DType::kF64 : ir::DType::kF32;
  tc.tuning.a_read = GemmTuning::ARead::kPacked;
  const std::vector<T> packed = RunAndCheck<T>(tc, 3);
  tc.tuning.a_read = GemmTuning::ARead::kInPlace;
  const std::vector<T> in_place = RunAndCheck<T>(tc, 3);
  ASSERT_FALSE(packed.empty());
  EXPECT_TRUE(packed == in_place) << tc.Name();
}

// A row-major A read where it lies and the same A packed first feed the micro-kernel the same
// products in the same order: the bits agree, at the tile's edges, across blocks, for a shared A
// and for other targets' tile shapes (AVX-512's 14 rows are packed by default; forced here).
TEST(GemmTest, ReadingAInPlaceGivesThePackedBits) {
  const int64_t mr = HostKernel(ir::DType::kF32).mr;
  struct Shape {
    int64_t m, n, k;
    std::vector<int64_t> batch;
    bool broadcast_a;
    GemmTuning tuning;
  };
  GemmTuning tiny_blocks;
  tiny_blocks.mc = 20;
  tiny_blocks.nc = 40;
  tiny_blocks.kc = 7;
  const std::vector<Shape> shapes = {{1, 1, 1, {}, false, {}},
                                     {mr - 1, 17, 5, {}, false, {}},
                                     {mr + 1, 33, 300, {}, false, {}},
                                     {61, 75, 53, {}, false, tiny_blocks},
                                     {37, 10, 64, {3}, false, {}},
                                     {16, 40, 27, {4}, true, {}},
                                     {37, 45, 29, {}, false, GemmTuning{0, 0, 11, 256, 6, 2}},
                                     {37, 45, 29, {}, false, GemmTuning{0, 0, 11, 128, 14, 2}},
                                     {37, 45, 29, {}, false, GemmTuning{0, 0, 11, 128, 3, 1}}};
  const int host_bits = HostKernel(ir::DType::kF32).vector_bits;
  for (const Shape& shape : shapes) {
    if (shape.tuning.vector_bits > host_bits) continue;
    for (Layout a : {Layout::kRowMajor, Layout::kPadded}) {
      for (int threads : {1, 2}) {
        Case tc;
        tc.m = shape.m;
        tc.n = shape.n;
        tc.k = shape.k;
        tc.batch = shape.batch;
        tc.broadcast_a = shape.broadcast_a;
        tc.a_layout = a;
        tc.tuning = shape.tuning;
        tc.threads = threads;
        tc.beta = 0.5;
        tc.activation = GemmActivation::kSilu;
        tc.row_bias = true;
        ExpectInPlaceGivesThePackedBits<float>(tc);
        ExpectInPlaceGivesThePackedBits<double>(tc);
      }
    }
  }
}

// The rows of a tile past the matrix's last row are never read in place: an A whose last row ends
// at a page that cannot be read runs (a read past it would fault).
TEST(GemmTest, ReadingAInPlaceStopsAtItsLastRow) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t mr = HostKernel(ir::DType::kF32).mr;
  for (const int64_t m : {int64_t{1}, mr - 1, mr + 1, 2 * mr + 1}) {
    const int64_t n = 24, k = 64;
    const size_t a_bytes = static_cast<size_t>(m * k) * sizeof(float);
    const size_t mapped = (a_bytes + static_cast<size_t>(page) - 1) / page * page + page;
    void* region =
        mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(region, MAP_FAILED);
    char* guard = static_cast<char*>(region) + mapped - page;
    ASSERT_EQ(mprotect(guard, static_cast<size_t>(page), PROT_NONE), 0);
    float* a = reinterpret_cast<float*>(guard - a_bytes);
    std::mt19937 rng(static_cast<uint32_t>(m));
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (int64_t i = 0; i < m * k; ++i) a[i] = uniform(rng);
    std::vector<float> b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
    for (float& v : b) v = uniform(rng);
    GemmParams params;
    params.m = m;
    params.n = n;
    params.k = k;
    params.a = DenseMatrix(a, m, k, {});
    params.b = DenseMatrix(b.data(), k, n, {});
    params.c = DenseMatrix(c.data(), m, n, {});
    params.tuning.a_read = GemmTuning::ARead::kInPlace;
    ASSERT_TRUE(Gemm(params, nullptr).ok());
    ASSERT_TRUE(IsDenseProduct(a, b.data(), c.data(), m, n, k)) << "m=" << m;
    munmap(region, mapped);
  }
}

// The JIT's kernels but those reading A in place, as in a blob compiled before they existed.
class PackingOnlyKernels final : public gi::MicroKernelProvider {
 public:
  gi::TargetVectors vectors() const override { return gemm_internal::JitMicroKernels().vectors(); }
  absl::StatusOr<gi::MicroKernelFn> Get(ir::DType dtype, const gi::KernelShape& shape,
                                        const gi::EpilogueVariant& variant) const override {
    if (shape.a_in_place) {
      ++in_place_requests;
      return absl::NotFoundError("no in-place kernels here");
    }
    return gemm_internal::JitMicroKernels().Get(dtype, shape, variant);
  }
  absl::StatusOr<gi::Int8MicroKernelFn> GetInt8(
      const gi::KernelShape& shape, const gi::Int8EpilogueVariant& variant) const override {
    return gemm_internal::JitMicroKernels().GetInt8(shape, variant);
  }
  mutable int in_place_requests = 0;
};

TEST(GemmTest, ProvidersWithoutInPlaceKernelsRunPacked) {
  const int64_t m = 13, n = 40, k = 30;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& v : a) v = uniform(rng);
  for (float& v : b) v = uniform(rng);
  std::vector<float> with_jit(static_cast<size_t>(m * n)), packing_only(with_jit.size());
  GemmParams params;
  params.m = m;
  params.n = n;
  params.k = k;
  params.a = DenseMatrix(a.data(), m, k, {});
  params.b = DenseMatrix(b.data(), k, n, {});
  params.tuning.a_read = GemmTuning::ARead::kInPlace;
  params.c = DenseMatrix(with_jit.data(), m, n, {});
  ASSERT_TRUE(Gemm(params, nullptr).ok());
  PackingOnlyKernels kernels;
  params.c = DenseMatrix(packing_only.data(), m, n, {});
  const absl::Status status = runtime::cpu::ExecuteGemm(params, kernels, nullptr);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(kernels.in_place_requests, 1);
  EXPECT_TRUE(with_jit == packing_only);
}

TEST(GemmTest, TransposesAndLeadingDimensions) {
  for (Layout a : kAllLayouts) {
    for (Layout b : kAllLayouts) {
      for (Layout c : {Layout::kRowMajor, Layout::kPadded}) {
        Case tc;
        tc.m = 23;
        tc.n = 37;
        tc.k = 41;
        tc.a_layout = a;
        tc.b_layout = b;
        tc.c_layout = c;
        tc.tuning.kc = 16;
        RunBoth(tc);
      }
    }
  }
}

TEST(GemmTest, Batches) {
  for (int threads : {1, 2}) {
    for (const std::vector<int64_t>& batch :
         std::vector<std::vector<int64_t>>{{1}, {3}, {2, 3}, {8}, {2, 1, 2}, {0}, {3, 0}}) {
      Case tc;
      tc.batch = batch;
      tc.m = 19;
      tc.n = 21;
      tc.k = 33;
      tc.threads = threads;
      tc.a_layout = Layout::kTransposed;
      RunBoth(tc);
      tc.broadcast_a = true;
      tc.residual = true;
      RunBoth(tc);
    }
  }
  // Few large entries: each one is split over the threads.
  Case large;
  large.batch = {3};
  large.m = 150;
  large.n = 170;
  large.k = 90;
  large.threads = 2;
  RunBoth(large);
}

TEST(GemmTest, SharedAIsRepackedOnEveryCall) {
  // Batch entries sharing A (stride 0, like a convolution's images) pack it once per thread
  // and call; a later call with the same buffer and new contents (weights after an update, a
  // reused arena) must not see the old packing.
  const int64_t B = 6, M = 16, N = 40, K = 27;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(B * K * N));
  for (float& v : b) v = static_cast<float>(uniform(rng));
  for (int threads : {1, 2}) {
    for (int call = 0; call < 6; ++call) {
      // Packed (every other call) and read in place.
      const bool packed = call % 2 == 0;
      SCOPED_TRACE(absl::StrCat("threads=", threads, " call=", call, packed ? " packed" : ""));
      for (float& v : a) v = static_cast<float>(uniform(rng));
      std::vector<float> out(static_cast<size_t>(B * M * N), 0.0f);
      GemmParams params;
      params.batch = {B};
      params.m = M;
      params.n = N;
      params.k = K;
      params.a = MatrixView{a.data(), K, 1, {0}};
      params.b = DenseMatrix(b.data(), K, N, {B});
      params.c = DenseMatrix(out.data(), M, N, {B});
      params.tuning.a_read = packed ? GemmTuning::ARead::kPacked : GemmTuning::ARead::kInPlace;
      ASSERT_TRUE(Gemm(params, threads > 1 ? &TwoThreads() : nullptr).ok());
      for (int64_t e = 0; e < B; ++e) {
        ASSERT_TRUE(IsDenseProduct(a.data(), b.data() + e * K * N, out.data() + e * M * N, M, N, K))
            << "batch entry " << e;
      }
    }
  }
}

TEST(GemmTest, PermutedViewNeedsNoCopy) {
  // x: [B=2, M=5, H=3, K=4] dense; y: [B, H, K, N=6] dense. out[b, h] = x[b, :, h, :] y[b, h],
  // the attention-score pattern, read through strides only.
  const int64_t B = 2, M = 5, H = 3, K = 4, N = 6;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<float> x(static_cast<size_t>(B * M * H * K)), y(static_cast<size_t>(B * H * K * N));
  for (float& v : x) v = static_cast<float>(uniform(rng));
  for (float& v : y) v = static_cast<float>(uniform(rng));
  std::vector<float> out(static_cast<size_t>(B * H * M * N), 0.0f);
  GemmParams params;
  params.batch = {B, H};
  params.m = M;
  params.n = N;
  params.k = K;
  params.a = MatrixView{x.data(), H * K, 1, {M * H * K, K}};
  params.b = DenseMatrix(y.data(), K, N, {B, H});
  params.c = DenseMatrix(out.data(), M, N, {B, H});
  ASSERT_TRUE(Gemm(params).ok());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double expected = 0, abs_sum = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = static_cast<double>(x[((b * M + m) * H + h) * K + k]) *
                             y[((b * H + h) * K + k) * N + n];
            expected += p;
            abs_sum += std::abs(p);
          }
          EXPECT_NEAR(out[((b * H + h) * M + m) * N + n], expected, 8e-7 * abs_sum + 1e-30)
              << b << " " << h << " " << m << " " << n;
        }
      }
    }
  }
}

// The dot-product paths' epilogue, for an m x n x k product with B transposed: every activation
// with both biases and alpha, with a residual before or after it or beta != 0, on one and two
// threads.
void RunEveryDotEpilogue(int64_t m, int64_t n, int64_t k) {
  const GemmActivation activations[] = {GemmActivation::kNone, GemmActivation::kRelu,
                                        GemmActivation::kGeluTanh, GemmActivation::kSilu,
                                        GemmActivation::kSigmoid};
  for (GemmActivation activation : activations) {
    for (int residual = 0; residual < 3; ++residual) {
      Case tc;
      tc.m = m;
      tc.n = n;
      tc.k = k;
      tc.b_layout = Layout::kTransposed;
      tc.activation = activation;
      tc.column_bias = true;
      tc.row_bias = true;
      tc.residual = residual > 0;
      tc.residual_after_activation = residual == 1;
      tc.alpha = 0.75;
      tc.beta = residual == 2 ? -0.5 : 0.0;
      tc.threads = residual % 2 + 1;
      RunBoth(tc);
    }
  }
}

// One output row takes the matrix-vector path (no packing): every layout of A and B, every
// epilogue, batches, and a size large enough to be split over two threads.
TEST(GemmTest, SingleRowMatrixVector) {
  for (Layout a : kAllLayouts) {
    for (Layout b : kAllLayouts) {
      for (int threads : {1, 2}) {
        Case tc;
        tc.m = 1;
        tc.n = 1100;
        tc.k = 1000;  // over the 1M multiply-adds from which the columns are split
        tc.a_layout = a;
        tc.b_layout = b;
        tc.threads = threads;
        RunBoth(tc);
      }
    }
  }
  RunEveryDotEpilogue(/*m=*/1, /*n=*/37, /*k=*/45);
  for (int threads : {1, 2}) {
    Case tc;
    tc.batch = {3, 2};
    tc.m = 1;
    tc.n = 513;
    tc.k = 129;
    tc.b_layout = Layout::kTransposed;
    tc.threads = threads;
    RunBoth(tc);
  }
}

// A few columns of a transposed B (a classifier's x W^T with 10 classes) are dot products of A's
// rows with W's rows, no packing (AVX2 kernels, SSE2 ones under KILN_CPU=x86-64-v2): N up to one
// under the 16-wide panel, every layout of A, every epilogue (the row bias and residual follow the
// row), batches, and sizes split over two threads.
TEST(GemmTest, FewColumnsOfTransposedB) {
  for (Layout a : kAllLayouts) {
    for (Layout b : {Layout::kTransposed, Layout::kTransposedPadded}) {
      for (int64_t n : {1, 3, 10, 15}) {
        Case tc;
        tc.m = 67;
        tc.n = n;
        tc.k = 300;
        tc.a_layout = a;
        tc.b_layout = b;
        tc.threads = n % 2 + 1;
        RunBoth(tc);
      }
    }
  }
  RunEveryDotEpilogue(/*m=*/9, /*n=*/10, /*k=*/45);
  for (int threads : {1, 2}) {
    Case tc;
    tc.batch = {3, 2};
    tc.m = 64;
    tc.n = 10;
    tc.k = 129;
    tc.b_layout = Layout::kTransposed;
    tc.row_bias = true;
    tc.residual = true;
    tc.threads = threads;
    RunBoth(tc);
  }
}

TEST(GemmTest, Epilogues) {
  const GemmActivation activations[] = {GemmActivation::kNone, GemmActivation::kRelu,
                                        GemmActivation::kGeluTanh, GemmActivation::kSilu,
                                        GemmActivation::kSigmoid};
  // Every activation with both biases and a residual; every bias and residual combination with
  // relu (each combination is a kernel of its own to compile).
  for (GemmActivation activation : activations) {
    for (int bias = 0; bias < 4; ++bias) {
      for (int residual = 0; residual < 3; ++residual) {
        if (activation != GemmActivation::kRelu && !(bias == 3 && residual == 1) &&
            !(bias == 0 && residual == 0)) {
          continue;
        }
        Case tc;
        tc.m = 31;
        tc.n = 47;
        tc.k = 40;
        tc.tuning.kc = 16;  // three depth blocks: the epilogue runs only after the last
        tc.activation = activation;
        tc.column_bias = bias & 1;
        tc.row_bias = bias & 2;
        tc.residual = residual > 0;
        tc.residual_after_activation = residual == 1;
        tc.alpha = 0.75;
        tc.beta = residual == 2 ? -0.5 : 0.0;
        tc.threads = bias % 2 + 1;
        RunBoth(tc);
      }
    }
  }
}

TEST(GemmTest, ActivationsSaturateOnLargeInputs) {
  // |A B| up to ~300: exp's argument leaves its clamped range, sigmoid/silu/gelu saturate.
  for (GemmActivation activation :
       {GemmActivation::kGeluTanh, GemmActivation::kSilu, GemmActivation::kSigmoid}) {
    Case tc;
    tc.m = 20;
    tc.n = 40;
    tc.k = 30;
    tc.input_scale = 40.0;
    tc.activation = activation;
    RunBoth(tc);
  }
}

template <class T>
void CheckActivationAccuracy(GemmActivation activation, double ulps) {
  // C = act(x * 1) for x spread over [-30, 30], on full and masked tiles alike.
  const int64_t m = 6001, n = 37;
  std::vector<T> x(static_cast<size_t>(m)), ones(static_cast<size_t>(n), T{1});
  std::vector<T> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) x[i] = static_cast<T>(-30.0 + 60.0 * i / (m - 1));
  GemmParams params;
  params.dtype = sizeof(T) == 8 ? ir::DType::kF64 : ir::DType::kF32;
  params.m = m;
  params.n = n;
  params.k = 1;
  params.a = DenseMatrix(x.data(), m, 1);
  params.b = DenseMatrix(ones.data(), 1, n);
  params.c = DenseMatrix(c.data(), m, n);
  params.epilogue.activation = activation;
  ASSERT_TRUE(Gemm(params).ok());
  const double eps = testing::Epsilon(params.dtype);
  const double tiny = sizeof(T) == 8 ? 1e-300 : 1e-36;
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    const double v = static_cast<double>(x[i]);
    const double expected = ReferenceActivation(activation, v);
    // exp(t) turns a rounding of its argument t (computed in T from x) into a relative error of
    // |t| eps: the condition number of exp, which no kernel can beat.
    double exp_argument = v;
    if (activation == GemmActivation::kGeluTanh) {
      exp_argument = 2 * std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v);
    } else if (activation == GemmActivation::kRelu) {
      exp_argument = 0;
    }
    const double allowed = ulps * eps * std::abs(expected) * (1 + std::abs(exp_argument)) + tiny;
    for (int64_t j = 0; j < n; ++j) {
      const double got = static_cast<double>(c[static_cast<size_t>(i * n + j)]);
      if (!(std::abs(got - expected) <= allowed)) {
        ADD_FAILURE() << GemmActivationName(activation) << "(" << x[i] << ") = " << got
                      << ", expected " << expected;
        ++failures;
        break;
      }
    }
  }
}

TEST(GemmTest, ActivationsAreAccurateToAFewUlp) {
  // The documented accuracy of the kernel's exp (~2 ulp) carried through sigmoid's division and
  // the products of silu and gelu: a relative error of at most 8 ulp times exp's condition
  // number.
  for (GemmActivation activation : {GemmActivation::kRelu, GemmActivation::kGeluTanh,
                                    GemmActivation::kSilu, GemmActivation::kSigmoid}) {
    CheckActivationAccuracy<float>(activation, 8);
    CheckActivationAccuracy<double>(activation, 8);
  }
}

TEST(GemmTest, NaNPropagatesThroughActivations) {
  for (GemmActivation activation :
       {GemmActivation::kNone, GemmActivation::kRelu, GemmActivation::kGeluTanh,
        GemmActivation::kSilu, GemmActivation::kSigmoid}) {
    const float a[2] = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
    const float b[2] = {1.0f, 2.0f};
    float c[2] = {0.0f, 0.0f};
    GemmParams params;
    params.m = 2;
    params.n = 1;
    params.k = 1;
    params.a = DenseMatrix(a, 2, 1);
    params.b = DenseMatrix(b, 1, 1);
    params.c = DenseMatrix(c, 2, 1);
    params.epilogue.activation = activation;
    ASSERT_TRUE(Gemm(params).ok());
    EXPECT_TRUE(std::isnan(c[0])) << GemmActivationName(activation);
    EXPECT_FLOAT_EQ(c[1], static_cast<float>(ReferenceActivation(activation, 1.0)))
        << GemmActivationName(activation);
  }
}

TEST(GemmTest, ThreadsGiveBitIdenticalResults) {
  // Every output element sums its depth blocks in the same order whatever the split.
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {200, 90, 300}, {30, 400, 200}, {1, 1000, 64}, {640, 10, 128}}) {
    Case tc;
    tc.m = shape[0];
    tc.n = shape[1];
    tc.k = shape[2];
    if (tc.n < 16) tc.b_layout = Layout::kTransposed;  // the rows of dot products
    tc.activation = GemmActivation::kGeluTanh;
    tc.column_bias = true;
    const std::vector<float> serial = RunAndCheck<float>(tc, 5);
    tc.threads = 2;
    const std::vector<float> parallel = RunAndCheck<float>(tc, 5);
    ASSERT_FALSE(serial.empty());
    EXPECT_TRUE(serial == parallel) << tc.Name();
  }
}

// Fewer columns than a panel sum in one order whatever B's layout, so a compile that folds W^T
// into a row-major constant (an AOT blob) gives the bits of the JIT, which reads W^T where it lies.
TEST(GemmTest, FewColumnsGiveTheSameBitsForEveryLayoutOfB) {
  for (int64_t n : {1, 5, 10, 15}) {
    std::vector<float> first;
    for (Layout b : kAllLayouts) {
      Case tc;
      tc.m = 37;
      tc.n = n;
      tc.k = 200;
      tc.b_layout = b;
      tc.column_bias = true;
      tc.threads = 2;
      const std::vector<float> c = RunAndCheck<float>(tc, 7);
      ASSERT_FALSE(c.empty()) << tc.Name();
      if (first.empty()) {
        first = c;
      } else {
        EXPECT_TRUE(c == first) << tc.Name();
      }
    }
  }
}

TEST(GemmTest, RejectsBadArguments) {
  float data[4] = {};
  GemmParams good;
  good.m = good.n = good.k = 2;
  good.a = DenseMatrix(data, 2, 2);
  good.b = DenseMatrix(data, 2, 2);
  good.c = DenseMatrix(data, 2, 2);
  ASSERT_TRUE(Gemm(good).ok());

  GemmParams p = good;
  p.dtype = ir::DType::kI32;
  EXPECT_THAT(Gemm(p).message(), HasSubstr("i32"));
  p = good;
  p.k = -1;
  EXPECT_THAT(Gemm(p).message(), HasSubstr("k=-1"));
  p = good;
  p.c.col_stride = 2;
  EXPECT_THAT(Gemm(p).message(), HasSubstr("c.col_stride"));
  p = good;
  p.batch = {2};
  EXPECT_THAT(Gemm(p).message(), HasSubstr("c.batch_strides"));
  p = good;
  p.batch = {2};
  p.c.batch_strides = {0};
  p.a.batch_strides = {1, 2};
  EXPECT_THAT(Gemm(p).message(), HasSubstr("a.batch_strides has 2 entries"));
  p = good;
  p.b.data = nullptr;
  EXPECT_THAT(Gemm(p).message(), HasSubstr("null operand"));
  p = good;
  p.tuning.vector_bits = 1024;
  p.tuning.mr = 4;
  p.tuning.nr_vectors = 1;
  EXPECT_THAT(Gemm(p).message(), HasSubstr("vector_bits 1024"));
  p = good;
  p.tuning.mr = 4;
  EXPECT_THAT(Gemm(p).message(), HasSubstr("set together"));
}

}  // namespace
}  // namespace kiln::codegen::cpu
