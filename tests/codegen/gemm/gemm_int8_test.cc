// The int8 GEMM and convolution (runtime/cpu/gemm_int8.cc with the JIT's pmaddwd and pmaddubsw
// micro-kernels) against scalar references: the i32 sums of a plain loop in int64 wrapped to 32
// bits, and the epilogue computed with the same f32 operations one by one (this file is compiled
// for baseline x86-64, so nothing here is contracted into an fma). Equality is bit for bit, at
// every CPU level the test runs at (KILN_CPU=x86-64-v2 / -v3 in CMake), through the extremes 0 /
// 255 x -128 / 127 (where vpmaddubsw would saturate) and i16 products whose pair sums wrap, B
// within [-64, 64] with its extremes (the u8-quad kernels, and which blocks run on them),
// full-range B on the VNNI quad kernels (vpdpbusd) where the host has them, B packed once
// (PackInt8B), odd depths, edge tiles, strided, transposed and broadcast operands, and every
// epilogue op; the convolution against the reference interpreter's conv {accumulate=i32}. The gaps
// of C keep their contents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "codegen/cpu/gemm.h"
#include "codegen/cpu/gemm_kernel.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

namespace kiln::codegen::cpu {
namespace {

using base::DType;
namespace gi = runtime::cpu::gemm_internal;

runtime::ThreadPool& TwoThreads() {
  static runtime::ThreadPool* pool = new runtime::ThreadPool(2);
  return *pool;
}

// Raw storage for a u8, i8 or i16 operand; values are kept as int64 beside it.
struct Operand {
  DType dtype;
  std::vector<uint8_t> bytes;
  int64_t Size() const { return base::DTypeSize(dtype); }
  void Set(int64_t i, int64_t v) {
    if (dtype == DType::kI16) {
      const int16_t x = static_cast<int16_t>(v);
      std::memcpy(bytes.data() + i * 2, &x, 2);
    } else {
      bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    }
  }
};

int64_t Lowest(DType dtype) {
  return dtype == DType::kU8 ? 0 : dtype == DType::kI8 ? -128 : -32768;
}
int64_t Highest(DType dtype) {
  return dtype == DType::kU8 ? 255 : dtype == DType::kI8 ? 127 : 32767;
}

// Mostly the dtype's extremes (the saturating and wrapping cases), some values in between; with a
// limit, the extremes are -limit and limit (B within [-64, 64]: the u8-quad kernels).
int64_t Draw(DType dtype, std::mt19937& rng, int64_t limit = 0) {
  const int64_t lowest = limit > 0 ? -limit : Lowest(dtype);
  const int64_t highest = limit > 0 ? limit : Highest(dtype);
  const uint32_t r = rng() % 8;
  if (r < 3) return lowest;
  if (r < 6) return highest;
  return std::uniform_int_distribution<int64_t>(lowest, highest)(rng);
}

// A strided operand [entries][rows][cols] with gaps, and its values dense.
struct Matrix {
  Operand data;
  int64_t row_stride = 0, col_stride = 0, entry = 0;
  std::vector<int64_t> values;  // dense [entries, rows, cols]
};

Matrix MakeMatrix(DType dtype, int64_t rows, int64_t cols, int64_t entries, bool transposed,
                  std::mt19937& rng, int64_t limit = 0) {
  Matrix m{{dtype, {}}, 0, 0, 0, {}};
  const int64_t pad = 3;
  if (transposed) {
    m.row_stride = 1;
    m.col_stride = rows + pad;
    m.entry = cols * (rows + pad) + 5;
  } else {
    m.row_stride = cols + pad;
    m.col_stride = 1;
    m.entry = rows * (cols + pad) + 5;
  }
  m.data.bytes.assign(static_cast<size_t>(std::max<int64_t>(1, entries * m.entry) * m.data.Size()),
                      0x5a);
  m.values.resize(static_cast<size_t>(entries * rows * cols));
  for (int64_t e = 0; e < entries; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t v = Draw(dtype, rng, limit);
        m.data.Set(e * m.entry + r * m.row_stride + c * m.col_stride, v);
        m.values[static_cast<size_t>((e * rows + r) * cols + c)] = v;
      }
    }
  }
  return m;
}

int32_t Wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// The IR's max / min on f32 (ir/interpreter.cc: MaxNaN, MinNaN).
float MaxNaN(float a, float b) { return std::isnan(a) || b <= a ? a : b; }
float MinNaN(float a, float b) { return std::isnan(a) || b >= a ? a : b; }

float ApplyStep(const Int8EpilogueStep& step, float v, float x) {
  switch (step.op) {
    case Int8EpilogueOp::kAdd:
      return v + x;
    case Int8EpilogueOp::kSub:
      return v - x;
    case Int8EpilogueOp::kSubFrom:
      return x - v;
    case Int8EpilogueOp::kMul:
      return v * x;
    case Int8EpilogueOp::kDiv:
      return v / x;
    case Int8EpilogueOp::kDivInto:
      return x / v;
    case Int8EpilogueOp::kMax:
      return MaxNaN(v, x);
    case Int8EpilogueOp::kMaxFrom:
      return MaxNaN(x, v);
    case Int8EpilogueOp::kMin:
      return MinNaN(v, x);
    case Int8EpilogueOp::kMinFrom:
      return MinNaN(x, v);
    case Int8EpilogueOp::kRound:
      return std::nearbyint(v);  // the default rounding mode: half to even
  }
  return v;
}

// The output element for sum `sum` at (row, col): its bytes in the output dtype.
std::vector<uint8_t> ReferenceOutput(const Int8Epilogue& e, int32_t sum, int64_t row, int64_t col) {
  std::vector<uint8_t> out(static_cast<size_t>(base::DTypeSize(e.output)));
  if (e.output == DType::kI32) {
    std::memcpy(out.data(), &sum, 4);
    return out;
  }
  float v = static_cast<float>(sum);
  for (const Int8EpilogueStep& step : e.steps) {
    const float x = step.operand == Int8Operand::kScalar   ? step.scalar
                    : step.operand == Int8Operand::kRow    ? step.vector[row]
                    : step.operand == Int8Operand::kColumn ? step.vector[col]
                                                           : 0.0f;
    v = ApplyStep(step, v, x);
  }
  if (e.output == DType::kF32) {
    std::memcpy(out.data(), &v, 4);
    return out;
  }
  // The IR's cast: NaN -> 0, truncate toward zero, saturate.
  const double lo = e.output == DType::kU8 ? 0 : -128, hi = e.output == DType::kU8 ? 255 : 127;
  const int64_t q = std::isnan(v) ? 0 : static_cast<int64_t>(std::clamp<double>(v, lo, hi));
  out[0] = static_cast<uint8_t>(q);
  return out;
}

std::string OutputBytes(const uint8_t* p, int64_t size) {
  std::string s;
  for (int64_t i = 0; i < size; ++i) absl::StrAppend(&s, absl::Hex(p[i], absl::kZeroPad2));
  return s;
}

// An epilogue of every op (vectors indexed up to `rows` / `cols`), for `output`.
struct Epilogues {
  std::vector<float> column, row, scale;
  Int8Epilogue Make(DType output, int variant) const {
    Int8Epilogue e;
    e.output = output;
    if (output == DType::kI32) return e;
    using Op = Int8EpilogueOp;
    using X = Int8Operand;
    auto step = [](Op op, X operand, float scalar, const std::vector<float>* vector) {
      return Int8EpilogueStep{op, operand, scalar, vector == nullptr ? nullptr : vector->data()};
    };
    if (variant == 0) {
      // Dequantise per column, bias, relu, requantise: what a quantized Linear layer computes.
      e.steps = {step(Op::kMul, X::kColumn, 0, &scale),
                 step(Op::kAdd, X::kColumn, 0, &column),
                 step(Op::kMax, X::kScalar, 0.0f, nullptr),
                 step(Op::kDiv, X::kScalar, 0.37f, nullptr),
                 step(Op::kRound, X::kNone, 0, nullptr),
                 step(Op::kAdd, X::kScalar, 3.0f, nullptr),
                 step(Op::kMax, X::kScalar, -128.0f, nullptr),
                 step(Op::kMin, X::kScalar, 127.0f, nullptr)};
    } else {
      // Every other op, per row (a convolution's channels) and reversed operands.
      e.steps = {step(Op::kMul, X::kScalar, 1.5e-3f, nullptr),
                 step(Op::kSub, X::kRow, 0, &row),
                 step(Op::kSubFrom, X::kColumn, 0, &column),
                 step(Op::kDivInto, X::kScalar, 7.0f, nullptr),
                 step(Op::kMaxFrom, X::kRow, 0, &row),
                 step(Op::kMinFrom, X::kScalar, 50.0f, nullptr),
                 step(Op::kMin, X::kColumn, 0, &column),
                 step(Op::kRound, X::kNone, 0, nullptr)};
    }
    return e;
  }
};

Epilogues MakeEpilogues(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  Epilogues e;
  for (int64_t c = 0; c < cols; ++c) {
    e.column.push_back(uniform(rng));
    e.scale.push_back(std::abs(uniform(rng)) * 1e-3f);
  }
  for (int64_t r = 0; r < rows; ++r) e.row.push_back(uniform(rng));
  // NaN reaches the output now and then: converted to 0 in u8 / i8.
  if (!e.column.empty()) e.column[e.column.size() / 2] = std::numeric_limits<float>::quiet_NaN();
  return e;
}

struct Case {
  DType a_dtype, b_dtype;
  int64_t batch, m, n, k;
  bool transpose_a, transpose_b, broadcast_b;
  int threads;

  std::string Name() const {
    return absl::StrCat(base::DTypeName(a_dtype), " x ", base::DTypeName(b_dtype), " batch=", batch,
                        " m=", m, " n=", n, " k=", k, transpose_a ? " aT" : "",
                        transpose_b ? " bT" : "", broadcast_b ? " b-broadcast" : "",
                        " threads=", threads);
  }
};

// b_limit > 0: B's values within [-b_limit, b_limit]. prepack: B packed first by PackInt8B (the
// call gets a null b.data; tc needs one B: broadcast_b or batch 1).
void RunCase(const Case& tc, const Int8Epilogue& epilogue, const GemmTuning& tuning = {},
             int64_t b_limit = 0, bool prepack = false) {
  SCOPED_TRACE(absl::StrCat(tc.Name(), " output ", base::DTypeName(epilogue.output), " steps ",
                            epilogue.steps.size(), b_limit > 0 ? " B within +-" : "",
                            b_limit > 0 ? absl::StrCat(b_limit) : "", prepack ? " prepacked" : ""));
  std::mt19937 rng(static_cast<uint32_t>(tc.m * 131 + tc.n * 7 + tc.k));
  const Matrix a = MakeMatrix(tc.a_dtype, tc.m, tc.k, tc.batch, tc.transpose_a, rng);
  const Matrix b = MakeMatrix(tc.b_dtype, tc.k, tc.n, tc.broadcast_b ? 1 : tc.batch, tc.transpose_b,
                              rng, b_limit);
  const int64_t out_size = base::DTypeSize(epilogue.output);
  const int64_t ldc = tc.n + 2, c_entry = tc.m * ldc + 1;
  constexpr uint8_t kSentinel = 0xa5;
  std::vector<uint8_t> c(static_cast<size_t>(std::max<int64_t>(1, tc.batch * c_entry) * out_size),
                         kSentinel);

  Int8GemmParams p;
  p.a_dtype = tc.a_dtype;
  p.b_dtype = tc.b_dtype;
  p.batch = {tc.batch};
  p.m = tc.m;
  p.n = tc.n;
  p.k = tc.k;
  p.a = MatrixView{a.data.bytes.data(), a.row_stride, a.col_stride, {a.entry}};
  p.b = MatrixView{b.data.bytes.data(), b.row_stride, b.col_stride, {tc.broadcast_b ? 0 : b.entry}};
  p.c = MatrixView{c.data(), ldc, 1, {c_entry}};
  p.epilogue = epilogue;
  p.tuning = tuning;
  if (prepack) {
    ASSERT_TRUE(tc.broadcast_b || tc.batch == 1);
    p.b.batch_strides = {0};
    absl::StatusOr<std::shared_ptr<const runtime::cpu::PackedInt8B>> packed =
        runtime::cpu::PackInt8B(p, gemm_internal::JitMicroKernels());
    ASSERT_TRUE(packed.ok()) << packed.status();
    p.packed_b = *packed;
    p.b.data = nullptr;
  }
  const absl::Status status = Int8Gemm(p, tc.threads > 1 ? &TwoThreads() : nullptr);
  ASSERT_TRUE(status.ok()) << status;

  int failures = 0;
  std::vector<bool> inside(c.size() / static_cast<size_t>(out_size), false);
  for (int64_t e = 0; e < tc.batch; ++e) {
    const int64_t eb = tc.broadcast_b ? 0 : e;
    for (int64_t r = 0; r < tc.m; ++r) {
      for (int64_t col = 0; col < tc.n && failures < 5; ++col) {
        int64_t sum = 0;
        for (int64_t kk = 0; kk < tc.k; ++kk) {
          sum += a.values[static_cast<size_t>((e * tc.m + r) * tc.k + kk)] *
                 b.values[static_cast<size_t>((eb * tc.k + kk) * tc.n + col)];
        }
        const std::vector<uint8_t> want = ReferenceOutput(epilogue, Wrap32(sum), r, col);
        const int64_t at = e * c_entry + r * ldc + col;
        inside[static_cast<size_t>(at)] = true;
        const uint8_t* got = c.data() + at * out_size;
        if (std::memcmp(got, want.data(), want.size()) != 0) {
          ADD_FAILURE() << "C[" << e << "][" << r << "][" << col
                        << "] = " << OutputBytes(got, out_size) << ", expected "
                        << OutputBytes(want.data(), out_size) << " (sum " << Wrap32(sum) << ")";
          ++failures;
        }
      }
    }
  }
  for (size_t i = 0; i < inside.size() && failures < 5; ++i) {
    if (inside[i]) continue;
    for (int64_t byte = 0; byte < out_size; ++byte) {
      if (c[i * static_cast<size_t>(out_size) + static_cast<size_t>(byte)] != kSentinel) {
        ADD_FAILURE() << "gap element " << i << " of C was overwritten";
        ++failures;
        break;
      }
    }
  }
}

constexpr DType kOperandTypes[] = {DType::kU8, DType::kI8, DType::kI16};

TEST(GemmInt8Test, ExtremesAreExactWherePmaddubswWouldSaturate) {
  // 255 x -128 + 255 x -128 = -65280 does not fit the i16 that vpmaddubsw sums a pair into; the
  // widened pairs of pmaddwd hold it. All-extreme operands, long depth.
  for (DType b_dtype : {DType::kI8, DType::kU8}) {
    for (int64_t k : {1, 2, 3, 64, 1027}) {
      RunCase({DType::kU8, b_dtype, 1, 7, 19, k, false, false, false, 1}, Int8Epilogue{});
    }
  }
}

TEST(GemmInt8Test, SumsEqualTheScalarLoopForEveryOperandPairing) {
  for (DType a : kOperandTypes) {
    for (DType b : kOperandTypes) {
      RunCase({a, b, 1, 13, 37, 29, false, false, false, 1}, Int8Epilogue{});
      RunCase({a, b, 2, 6, 16, 40, true, true, false, 2}, Int8Epilogue{});
    }
  }
}

TEST(GemmInt8Test, ShapesStridesAndThreads) {
  const Int8Epilogue sums;
  RunCase({DType::kU8, DType::kI8, 1, 1, 53, 33, false, false, false, 1}, sums);  // one row
  RunCase({DType::kU8, DType::kI8, 1, 3, 5, 7, false, true, false, 1}, sums);     // short tile
  RunCase({DType::kU8, DType::kI8, 3, 17, 9, 40, true, true, false, 1}, sums);
  RunCase({DType::kI8, DType::kI8, 4, 8, 24, 12, false, true, true, 2}, sums);  // broadcast B
  RunCase({DType::kU8, DType::kI8, 1, 0, 5, 3, false, false, false, 1}, sums);  // empty
  RunCase({DType::kU8, DType::kI8, 1, 5, 7, 0, false, false, false, 1}, sums);  // no depth
  RunCase({DType::kU8, DType::kI8, 1, 130, 150, 300, false, true, false, 2}, sums);
  RunCase({DType::kI16, DType::kU8, 2, 64, 96, 257, true, false, false, 2}, sums);
}

TEST(GemmInt8Test, SmallBlocksCoverEveryBlockEdge) {
  GemmTuning tuning;
  tuning.mc = 7;
  tuning.nc = 20;
  RunCase({DType::kU8, DType::kI8, 2, 45, 77, 31, false, true, false, 1}, Int8Epilogue{}, tuning);
  RunCase({DType::kU8, DType::kI8, 1, 45, 77, 31, true, false, false, 2}, Int8Epilogue{}, tuning);
}

TEST(GemmInt8Test, EpiloguesMatchTheStepsInF32) {
  for (DType output : {DType::kF32, DType::kU8, DType::kI8}) {
    for (int variant : {0, 1}) {
      for (const Case& tc : {Case{DType::kU8, DType::kI8, 1, 9, 21, 35, false, true, false, 1},
                             Case{DType::kI8, DType::kI8, 2, 30, 40, 64, false, false, false, 2},
                             Case{DType::kU8, DType::kI8, 1, 1, 19, 10, false, true, false, 1}}) {
        std::mt19937 rng(static_cast<uint32_t>(variant * 10 + static_cast<int>(output)));
        const Epilogues vectors = MakeEpilogues(tc.m, tc.n, rng);
        RunCase(tc, vectors.Make(output, variant));
      }
    }
  }
}

TEST(GemmInt8Test, KernelsUsePmaddwd) {
  // The generic IR of the pair products becomes the target's multiply-add of i16 pairs: SSE2 /
  // AVX2 / AVX-512 pmaddwd, or vpdpwssd where the JIT's target has VNNI.
  absl::StatusOr<gi::TargetVectors> vectors = gemm_internal::HostVectors();
  ASSERT_TRUE(vectors.ok()) << vectors.status();
  absl::StatusOr<gi::KernelShape> shape = gi::ChooseInt8KernelShape({}, *vectors);
  ASSERT_TRUE(shape.ok());
  gi::Int8EpilogueVariant variant;
  variant.output = DType::kU8;
  variant.steps = {{Int8EpilogueOp::kMul, Int8Operand::kColumn},
                   {Int8EpilogueOp::kRound, Int8Operand::kNone}};
  absl::StatusOr<gemm_internal::KernelText> text =
      gemm_internal::GenerateInt8KernelText(*shape, variant);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->name, absl::StrCat("kiln_qgemm_", shape->mr, "x", shape->nr(), "_v",
                                     shape->vector_bits, "_u8_mul_c_round"));
  EXPECT_TRUE(absl::StrContains(text->assembly, "pmaddwd") ||
              absl::StrContains(text->assembly, "vpdpwssd"))
      << text->assembly;
  EXPECT_FALSE(absl::StrContains(text->assembly, "pmaddubsw"));
}

// ---- u8 quads (B within [-64, 64]) --------------------------------------------------------------

TEST(GemmInt8Test, SevenBitWeightsOnQuadsEqualTheScalarLoop) {
  // 255 x 64 x 2 = 32640 and 255 x -64 x 2 = -32640: the pair sums of pmaddubsw at their largest,
  // still inside i16. Depths around multiples of 4 (the quads' zero padding), edges, strides,
  // batches, a broadcast B, small blocks, threads and every epilogue.
  // An i8 A (A + 128 in the kernel, minus 128 x B's column sums) the same, through -128 and 127.
  const Int8Epilogue sums;
  for (DType a : {DType::kU8, DType::kI8}) {
    for (int64_t k : {1, 2, 3, 4, 5, 7, 8, 9, 64, 1027}) {
      RunCase({a, DType::kI8, 1, 7, 19, k, false, false, false, 1}, sums, {}, 64);
    }
    RunCase({a, DType::kI8, 1, 1, 53, 33, false, false, false, 1}, sums, {}, 64);
    RunCase({a, DType::kI8, 3, 17, 9, 40, true, true, false, 2}, sums, {}, 64);
    RunCase({a, DType::kI8, 4, 8, 24, 12, false, true, true, 2}, sums, {}, 64);
    RunCase({a, DType::kI8, 1, 130, 150, 300, false, true, false, 2}, sums, {}, 64);
    GemmTuning small;
    small.mc = 7;
    small.nc = 20;
    RunCase({a, DType::kI8, 2, 45, 77, 31, false, true, false, 1}, sums, small, 64);
    for (DType output : {DType::kF32, DType::kU8, DType::kI8}) {
      for (int variant : {0, 1}) {
        const Case tc{a, DType::kI8, 2, 9, 21, 35, false, true, false, 2};
        std::mt19937 rng(static_cast<uint32_t>(variant * 10 + static_cast<int>(output)));
        RunCase(tc, MakeEpilogues(tc.m, tc.n, rng).Make(output, variant), {}, 64);
      }
    }
  }
  // A partial last panel of a transposed B (the column packer's zero columns).
  RunCase({DType::kI8, DType::kI8, 1, 11, 43, 70, false, true, false, 1}, sums, {}, 64);
  // An i16 A stays on pairs (its values do not fit a byte).
  RunCase({DType::kI16, DType::kI8, 1, 7, 19, 37, false, false, false, 1}, sums, {}, 64);
  // Column sums large enough to wrap i32 (64 x 128 x 2^18): the kernel's sums wrap alike.
  RunCase({DType::kI8, DType::kI8, 1, 2, 17, (int64_t{1} << 18) + 3, false, false, false, 2}, sums,
          {}, 64);
}

// The JIT's kernels with the u8-quad ones replaced by a kernel that writes nothing (or, without
// quads, missing as in a blob compiled before them): the untouched columns of C are the ones
// whose B block ran on quads.
class QuadProbeKernels final : public gi::MicroKernelProvider {
 public:
  // vnni: the vectors say the quad kernels take any i8 B (vpdpbusd), as on a VNNI host; without
  // it, the pmaddubsw quads' range check is what is probed, on any host.
  explicit QuadProbeKernels(bool has_quads, bool vnni = false)
      : has_quads_(has_quads), vnni_(vnni) {}
  gi::TargetVectors vectors() const override {
    gi::TargetVectors vectors = gemm_internal::JitMicroKernels().vectors();
    vectors.vnni = vnni_;
    return vectors;
  }
  absl::StatusOr<gi::MicroKernelFn> Get(DType dtype, const gi::KernelShape& shape,
                                        const gi::EpilogueVariant& variant) const override {
    return gemm_internal::JitMicroKernels().Get(dtype, shape, variant);
  }
  absl::StatusOr<gi::Int8MicroKernelFn> GetInt8(
      const gi::KernelShape& shape, const gi::Int8EpilogueVariant& variant) const override {
    if (!shape.u8_quads) return gemm_internal::JitMicroKernels().GetInt8(shape, variant);
    ++quad_requests;
    if (!has_quads_) return absl::NotFoundError("no u8-quad kernels here");
    return &WritesNothing;
  }
  mutable int quad_requests = 0;

 private:
  static void WritesNothing(int64_t, const void*, const void*, void*, int64_t,
                            const gi::Int8TileArgs*) {}
  bool has_quads_;
  bool vnni_;
};

// How B lies in memory: row-major, column-major (row stride 1), or neither stride 1.
enum class BLayout { kRows, kColumns, kStrided };

// A u8 [m, k] x B i8 [k, n], B within [-64, 64] but for `outside` (depth, column, value) entries,
// one B block per NR panel; returns for each column whether C holds its sums (false: untouched).
// Every touched element must be exact.
// prepack: B packed first by PackInt8B, and blocks of the default size (several panels each).
std::vector<bool> ColumnsWithSums(const gi::MicroKernelProvider& kernels, int64_t n, int64_t k,
                                  const std::vector<std::tuple<int64_t, int64_t, int>>& outside,
                                  bool quads = true, DType a_dtype = DType::kU8,
                                  BLayout layout = BLayout::kRows, bool prepack = false) {
  absl::StatusOr<gi::KernelShape> shape =
      gi::ChooseInt8KernelShape({}, gemm_internal::JitMicroKernels().vectors());
  EXPECT_TRUE(shape.ok());
  const int64_t m = 6;
  std::mt19937 rng(static_cast<uint32_t>(n + k));
  std::vector<uint8_t> a(static_cast<size_t>(m * k));
  std::vector<int8_t> b(static_cast<size_t>(k * n));
  for (uint8_t& v : a) v = static_cast<uint8_t>(Draw(a_dtype, rng));
  for (int8_t& v : b) v = static_cast<int8_t>(Draw(DType::kI8, rng, 64));
  for (const auto& [depth, column, value] : outside) {
    b[static_cast<size_t>(depth * n + column)] = static_cast<int8_t>(value);
  }
  // kColumns: B^T [n, k] row-major (a Linear layer's weight); kStrided: the even columns of a
  // [k, 2n] matrix (neither stride 1: the packer that gathers narrow panels first).
  std::vector<int8_t> bt(b.size()), wide(2 * b.size());
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t col = 0; col < n; ++col) {
      bt[static_cast<size_t>(col * k + kk)] = b[static_cast<size_t>(kk * n + col)];
      wide[static_cast<size_t>(kk * 2 * n + 2 * col)] = b[static_cast<size_t>(kk * n + col)];
    }
  }
  constexpr int32_t kSentinel = 0x5a5a5a5a;
  std::vector<int32_t> c(static_cast<size_t>(m * n), kSentinel);
  Int8GemmParams p;
  p.a_dtype = a_dtype;
  p.b_dtype = DType::kI8;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = DenseMatrix(a.data(), m, k);
  p.b = layout == BLayout::kColumns   ? MatrixView{bt.data(), 1, k, {}}
        : layout == BLayout::kStrided ? MatrixView{wide.data(), 2 * n, 2, {}}
                                      : DenseMatrix(b.data(), k, n);
  p.c = DenseMatrix(c.data(), m, n);
  if (!prepack) p.tuning.nc = shape->nr();  // one panel per block
  p.tuning.int8_quads = quads;
  if (prepack) {
    absl::StatusOr<std::shared_ptr<const runtime::cpu::PackedInt8B>> packed =
        runtime::cpu::PackInt8B(p, kernels);
    EXPECT_TRUE(packed.ok()) << packed.status();
    if (packed.ok()) p.packed_b = *packed;
    p.b.data = nullptr;
  }
  const absl::Status status = runtime::cpu::ExecuteInt8Gemm(p, kernels, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<bool> with_sums(static_cast<size_t>(n), false);
  for (int64_t col = 0; col < n; ++col) {
    with_sums[static_cast<size_t>(col)] = c[static_cast<size_t>(col)] != kSentinel;
    for (int64_t r = 0; r < m; ++r) {
      int64_t sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const uint8_t byte = a[static_cast<size_t>(r * k + kk)];
        const int64_t a_value = a_dtype == DType::kI8 ? int64_t{static_cast<int8_t>(byte)} : byte;
        sum += a_value * b[static_cast<size_t>(kk * n + col)];
      }
      const int32_t got = c[static_cast<size_t>(r * n + col)];
      EXPECT_EQ(got != kSentinel, with_sums[static_cast<size_t>(col)])
          << "C[" << r << "][" << col << "]";
      if (got != kSentinel) {
        EXPECT_EQ(got, Wrap32(sum)) << "C[" << r << "][" << col << "]";
      }
    }
  }
  return with_sums;
}

TEST(GemmInt8Test, BlocksWithinSevenBitsRunOnQuadsTheOthersOnPairs) {
  absl::StatusOr<gi::KernelShape> shape =
      gi::ChooseInt8KernelShape({}, gemm_internal::JitMicroKernels().vectors());
  ASSERT_TRUE(shape.ok());
  const int64_t nr = shape->nr(), n = 3 * nr, k = 300;
  const QuadProbeKernels probe(/*has_quads=*/true);
  // All within [-64, 64], the bounds included: every block on quads, for a u8 or an i8 A.
  for (DType a : {DType::kU8, DType::kI8}) {
    for (BLayout layout : {BLayout::kRows, BLayout::kColumns, BLayout::kStrided}) {
      EXPECT_EQ(ColumnsWithSums(probe, n, k, {}, true, a, layout),
                std::vector<bool>(static_cast<size_t>(n), false));
    }
  }
  EXPECT_GT(probe.quad_requests, 0);
  // One value just outside, at the start, the middle and the last byte of the middle block (its
  // range check reads the block's k x NR bytes in chunks, then a tail): that block on pairs.
  for (const auto& [depth, column] :
       {std::pair<int64_t, int64_t>{0, nr}, {200, nr + 3}, {k - 1, 2 * nr - 1}}) {
    for (int value : {65, -65, 127, -128}) {
      SCOPED_TRACE(absl::StrCat("B[", depth, "][", column, "] = ", value));
      std::vector<bool> want(static_cast<size_t>(n), false);
      for (int64_t col = nr; col < 2 * nr; ++col) want[static_cast<size_t>(col)] = true;
      EXPECT_EQ(ColumnsWithSums(probe, n, k, {{depth, column, value}}), want);
      // B^T stored by rows (each column's k bytes checked in turn), and a B of neither stride 1
      // (its narrow panels checked).
      for (BLayout layout : {BLayout::kColumns, BLayout::kStrided}) {
        EXPECT_EQ(ColumnsWithSums(probe, n, k, {{depth, column, value}}, true, DType::kI8, layout),
                  want);
      }
    }
  }
}

TEST(GemmInt8Test, WithoutQuadKernelsOrWithQuadsOffTheSumsRunOnPairs) {
  const std::vector<bool> all(static_cast<size_t>(40), true);
  const QuadProbeKernels missing(/*has_quads=*/false);
  EXPECT_EQ(ColumnsWithSums(missing, 40, 37, {}), all);
  EXPECT_GT(missing.quad_requests, 0);
  const QuadProbeKernels probe(/*has_quads=*/true);
  EXPECT_EQ(ColumnsWithSums(probe, 40, 37, {}, /*quads=*/false), all);
  EXPECT_EQ(probe.quad_requests, 0);
}

TEST(GemmInt8Test, PackedBEqualsTheScalarLoop) {
  // B packed once (a constant weight) and the call reading only the packed panels: full-range B
  // on pairs, 7-bit B on quads, for every operand pairing, depths around multiples of 4, edges,
  // a transposed B (the column packer), a broadcast B over a batch, small blocks (a block starts
  // at any panel of the packed B), threads (column rectangles) and every epilogue.
  const Int8Epilogue sums;
  for (const int64_t limit : {0, 64}) {
    for (DType a : kOperandTypes) {
      for (DType b : kOperandTypes) {
        if (limit > 0 && b != DType::kI8) continue;
        for (int64_t k : {1, 3, 4, 5, 64, 1027}) {
          RunCase({a, b, 1, 7, 19, k, false, false, false, 1}, sums, {}, limit, true);
        }
        RunCase({a, b, 1, 11, 43, 70, false, true, false, 1}, sums, {}, limit, true);
      }
    }
    for (DType a : {DType::kU8, DType::kI8}) {
      RunCase({a, DType::kI8, 4, 8, 24, 12, true, true, true, 2}, sums, {}, limit, true);
      RunCase({a, DType::kI8, 1, 130, 150, 300, false, true, false, 2}, sums, {}, limit, true);
      GemmTuning small;
      small.mc = 7;
      small.nc = 20;
      RunCase({a, DType::kI8, 1, 45, 77, 31, false, true, false, 2}, sums, small, limit, true);
      for (DType output : {DType::kF32, DType::kU8, DType::kI8}) {
        for (int variant : {0, 1}) {
          const Case tc{a, DType::kI8, 2, 9, 21, 35, false, true, true, 2};
          std::mt19937 rng(static_cast<uint32_t>(variant * 10 + static_cast<int>(output)));
          RunCase(tc, MakeEpilogues(tc.m, tc.n, rng).Make(output, variant), {}, limit, true);
        }
      }
    }
  }
}

TEST(GemmInt8Test, PackedBChoosesTheLayoutPerPanel) {
  // Packed once, each NR-column panel takes its own layout, whatever the blocking: with blocks of
  // many panels, only the panel holding a value outside [-64, 64] runs on pairs.
  absl::StatusOr<gi::KernelShape> shape =
      gi::ChooseInt8KernelShape({}, gemm_internal::JitMicroKernels().vectors());
  ASSERT_TRUE(shape.ok());
  const int64_t nr = shape->nr(), n = 4 * nr + 5, k = 77;
  const QuadProbeKernels probe(/*has_quads=*/true);
  for (DType a : {DType::kU8, DType::kI8}) {
    for (BLayout layout : {BLayout::kRows, BLayout::kColumns, BLayout::kStrided}) {
      SCOPED_TRACE(absl::StrCat(base::DTypeName(a), " layout ", static_cast<int>(layout)));
      EXPECT_EQ(ColumnsWithSums(probe, n, k, {}, true, a, layout, true),
                std::vector<bool>(static_cast<size_t>(n), false));
      std::vector<bool> want(static_cast<size_t>(n), false);
      for (int64_t col = 2 * nr; col < 3 * nr; ++col) want[static_cast<size_t>(col)] = true;
      for (int64_t col = 4 * nr; col < n; ++col) want[static_cast<size_t>(col)] = true;
      EXPECT_EQ(ColumnsWithSums(probe, n, k, {{40, 2 * nr + 1, -100}, {k - 1, n - 1, 65}}, true, a,
                                layout, true),
                want);
    }
  }
  // Without quad kernels (or with quads off while packing) every panel is pairs.
  const QuadProbeKernels missing(/*has_quads=*/false);
  EXPECT_EQ(ColumnsWithSums(missing, n, k, {}, true, DType::kU8, BLayout::kRows, true),
            std::vector<bool>(static_cast<size_t>(n), true));
  EXPECT_EQ(ColumnsWithSums(probe, n, k, {}, false, DType::kU8, BLayout::kRows, true),
            std::vector<bool>(static_cast<size_t>(n), true));
}

TEST(GemmInt8Test, RejectsAPackedBThatDoesNotFit) {
  std::vector<uint8_t> a(64 * 64, 1), c(64 * 64 * 4);
  std::vector<int8_t> b(64 * 64, 3);  // within [-64, 64]: quad panels
  Int8GemmParams p;
  p.m = 4;
  p.n = 40;
  p.k = 30;
  p.a = DenseMatrix(a.data(), p.m, p.k);
  p.b = DenseMatrix(b.data(), p.k, p.n);
  p.c = DenseMatrix(c.data(), p.m, p.n);
  const gi::MicroKernelProvider& jit = gemm_internal::JitMicroKernels();
  absl::StatusOr<std::shared_ptr<const runtime::cpu::PackedInt8B>> packed =
      runtime::cpu::PackInt8B(p, jit);
  ASSERT_TRUE(packed.ok()) << packed.status();

  Int8GemmParams bad = p;
  bad.packed_b = *packed;
  bad.k = 31;
  EXPECT_EQ(Int8Gemm(bad).message(),
            "gemm int8: packed_b holds i8 B [30, 40] for a u8 A; this call multiplies u8 A [4, 31] "
            "by i8 B [31, 40]");
  bad = p;
  bad.packed_b = *packed;
  bad.a_dtype = DType::kI8;
  EXPECT_TRUE(absl::StartsWith(Int8Gemm(bad).message(),
                               "gemm int8: packed_b holds i8 B [30, 40] "
                               "for a u8 A; this call multiplies i8 A"));
  bad = p;
  bad.packed_b = *packed;
  bad.tuning.int8_quads = false;
  EXPECT_EQ(Int8Gemm(bad).message(),
            "gemm int8: packed_b holds quad panels but this call has no quad kernels (another "
            "provider, or tuning.int8_quads off)");
  // Packed for 128-bit kernels (every x86-64 host has them), run with the host's widest.
  Int8GemmParams narrow = p;
  narrow.tuning.vector_bits = 128;
  narrow.tuning.mr = 4;
  narrow.tuning.nr_vectors = 1;
  absl::StatusOr<std::shared_ptr<const runtime::cpu::PackedInt8B>> packed_128 =
      runtime::cpu::PackInt8B(narrow, jit);
  ASSERT_TRUE(packed_128.ok()) << packed_128.status();
  narrow.packed_b = *packed_128;
  EXPECT_TRUE(Int8Gemm(narrow).ok());
  if (jit.vectors().bits > 128) {
    bad = p;
    bad.packed_b = *packed_128;
    EXPECT_TRUE(absl::StartsWith(Int8Gemm(bad).message(),
                                 "gemm int8: packed_b was packed for 4-column panels of 128-bit "
                                 "vectors, this call's kernels take "));
  }
  // A batch of B matrices cannot be packed as one.
  bad = p;
  bad.batch = {2};
  bad.b.batch_strides = {p.k * p.n};
  EXPECT_EQ(runtime::cpu::PackInt8B(bad, jit).status().message(),
            "pack int8 b: b has batch stride 1200; a packed B serves every batch entry, so its "
            "batch strides must be 0");
  bad = p;
  bad.b.data = nullptr;
  EXPECT_EQ(runtime::cpu::PackInt8B(bad, jit).status().message(), "pack int8 b: b.data is null");
}

TEST(GemmInt8Test, WithVnniEveryBlockRunsOnQuads) {
  // vpdpbusd does not saturate: with VNNI quad kernels no block is checked, full-range values
  // included, for a u8 or an i8 A and B of every layout; with the quads off, pairs.
  absl::StatusOr<gi::KernelShape> shape =
      gi::ChooseInt8KernelShape({}, gemm_internal::JitMicroKernels().vectors());
  ASSERT_TRUE(shape.ok());
  const int64_t nr = shape->nr(), n = 3 * nr, k = 300;
  const QuadProbeKernels vnni(/*has_quads=*/true, /*vnni=*/true);
  const std::vector<std::tuple<int64_t, int64_t, int>> full_range = {
      {0, 0, -128}, {200, nr + 3, 127}, {k - 1, 2 * nr - 1, -65}};
  for (DType a : {DType::kU8, DType::kI8}) {
    for (BLayout layout : {BLayout::kRows, BLayout::kColumns, BLayout::kStrided}) {
      for (bool prepack : {false, true}) {
        SCOPED_TRACE(absl::StrCat(base::DTypeName(a), " layout ", static_cast<int>(layout),
                                  prepack ? " prepacked" : ""));
        EXPECT_EQ(ColumnsWithSums(vnni, n, k, full_range, true, a, layout, prepack),
                  std::vector<bool>(static_cast<size_t>(n), false));
      }
    }
  }
  EXPECT_EQ(ColumnsWithSums(vnni, n, k, full_range, /*quads=*/false),
            std::vector<bool>(static_cast<size_t>(n), true));
}

TEST(GemmInt8Test, FullRangeSumsOnTheHostsQuadKernelsAreExact) {
  // On a VNNI host the JIT's quad kernels (vpdpbusd) take full-range B: the extremes 255 x -128
  // in every quad, u8 and i8 A, depths around multiples of 4, edges, threads, epilogues, packed
  // per call and once. (Elsewhere these run on pairs and must be exact all the same.)
  const Int8Epilogue sums;
  for (DType a : {DType::kU8, DType::kI8}) {
    for (int64_t k : {1, 3, 4, 5, 8, 67, 1027}) {
      RunCase({a, DType::kI8, 1, 7, 19, k, false, false, false, 1}, sums);
      RunCase({a, DType::kI8, 1, 7, 19, k, false, true, false, 1}, sums, {}, 0, true);
    }
    RunCase({a, DType::kI8, 3, 17, 9, 40, true, true, false, 2}, sums);
    RunCase({a, DType::kI8, 1, 130, 150, 300, false, true, false, 2}, sums);
    for (DType output : {DType::kF32, DType::kU8, DType::kI8}) {
      const Case tc{a, DType::kI8, 2, 9, 21, 35, false, true, true, 2};
      std::mt19937 rng(static_cast<uint32_t>(static_cast<int>(output)));
      RunCase(tc, MakeEpilogues(tc.m, tc.n, rng).Make(output, 1));
    }
  }
  // Column sums large enough to wrap i32 (128 x 128 x 2^18).
  RunCase({DType::kI8, DType::kI8, 1, 2, 17, (int64_t{1} << 18) + 3, false, false, false, 2}, sums);
}

TEST(GemmInt8Test, ThirtyTwoRowsOrMoreEqualTheScalarLoop) {
  // On an AMX host, 32 rows or more run on tiles: A in tile rows, the depth padded to 64, each
  // call a whole B block of panels with the last one partial, the column operands of each panel.
  // Rows 32 and beyond a multiple of 32, depths around multiples of 64, several blocks (nc),
  // threads, u8 and i8 A, full-range B, every epilogue, B packed per call and once.
  const Int8Epilogue sums;
  for (DType a : {DType::kU8, DType::kI8}) {
    for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{32, 32, 64},
                                  {33, 45, 63},
                                  {64, 161, 65},
                                  {97, 100, 200},
                                  {40, 70, 1}}) {
      for (bool prepack : {false, true}) {
        RunCase({a, DType::kI8, 1, m, n, k, false, true, false, 1}, sums, {}, 0, prepack);
        RunCase({a, DType::kI8, 1, m, n, k, true, false, false, 2}, sums, {}, 0, prepack);
      }
    }
    GemmTuning blocks;
    blocks.nc = 64;
    blocks.mc = 64;
    RunCase({a, DType::kI8, 1, 130, 150, 300, false, true, false, 2}, sums, blocks, 0, true);
    // An i8 A times a u8 B (a convolution's weights and image): the signs swapped (tdpbsud).
    if (a == DType::kI8) {
      for (bool prepack : {false, true}) {
        RunCase({a, DType::kU8, 1, 64, 161, 65, false, true, false, 2}, sums, blocks, 0, prepack);
        RunCase({a, DType::kU8, 1, 33, 45, 300, false, false, false, 1}, sums, {}, 0, prepack);
      }
    }
    RunCase({a, DType::kI8, 2, 70, 90, 130, false, false, true, 2}, sums, blocks);
    for (DType output : {DType::kF32, DType::kU8, DType::kI8}) {
      for (int variant : {0, 1}) {
        const Case tc{a, DType::kI8, 2, 67, 99, 129, false, true, true, 2};
        std::mt19937 rng(static_cast<uint32_t>(variant * 10 + static_cast<int>(output)));
        RunCase(tc, MakeEpilogues(tc.m, tc.n, rng).Make(output, variant), blocks, 0, variant == 1);
      }
    }
  }
}

TEST(GemmInt8Test, AmxKernelsUseTiles) {
  absl::StatusOr<gi::TargetVectors> vectors = gemm_internal::HostVectors();
  ASSERT_TRUE(vectors.ok()) << vectors.status();
  if (!vectors->amx) GTEST_SKIP() << "the JIT's target has no AMX-INT8 (or Linux refused it)";
  absl::StatusOr<gi::KernelShape> shape = gi::ChooseInt8KernelShape({}, *vectors);
  ASSERT_TRUE(shape.ok());
  shape->mr = gi::kAmxTile;
  shape->nr_vectors = gi::kAmxTile / shape->lanes;
  shape->u8_quads = shape->vnni = shape->amx = true;
  absl::StatusOr<gemm_internal::KernelText> text =
      gemm_internal::GenerateInt8KernelText(*shape, gi::Int8EpilogueVariant{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->name, "kiln_qgemm_32x32_v512_u8x_i32");
  for (const char* instruction : {"ldtilecfg", "tileloadd", "tdpbusd", "tilestored"}) {
    EXPECT_TRUE(absl::StrContains(text->assembly, instruction)) << instruction;
  }
  // An i8 A times a u8 B: the signed-by-unsigned tile product.
  shape->b_unsigned = true;
  text = gemm_internal::GenerateInt8KernelText(*shape, gi::Int8EpilogueVariant{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->name, "kiln_qgemm_32x32_v512_ubx_i32");
  EXPECT_TRUE(absl::StrContains(text->assembly, "tdpbsud")) << text->assembly;
}

TEST(GemmInt8Test, VnniQuadKernelsUseVpdpbusd) {
  absl::StatusOr<gi::TargetVectors> vectors = gemm_internal::HostVectors();
  ASSERT_TRUE(vectors.ok()) << vectors.status();
  if (!vectors->vnni) GTEST_SKIP() << "the JIT's target has no AVX-512 VNNI or AVX-VNNI";
  absl::StatusOr<gi::KernelShape> shape = gi::ChooseInt8KernelShape({}, *vectors);
  ASSERT_TRUE(shape.ok());
  shape->u8_quads = true;
  shape->vnni = true;
  for (bool signed_a : {false, true}) {
    shape->signed_a = signed_a;
    absl::StatusOr<gemm_internal::KernelText> text =
        gemm_internal::GenerateInt8KernelText(*shape, gi::Int8EpilogueVariant{});
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(text->name, absl::StrCat("kiln_qgemm_", shape->mr, "x", shape->nr(), "_v",
                                       shape->vector_bits, signed_a ? "_s8v_i32" : "_u8v_i32"));
    EXPECT_TRUE(absl::StrContains(text->assembly, "vpdpbusd")) << text->assembly;
    EXPECT_FALSE(absl::StrContains(text->assembly, "pmaddubsw"));
    EXPECT_FALSE(absl::StrContains(text->assembly, "vpdpbusds"));  // the saturating form
  }
  // An i8 A times a u8 B: B's bytes are the unsigned operand (vpdpbusd's second source).
  shape->signed_a = false;
  shape->b_unsigned = true;
  absl::StatusOr<gemm_internal::KernelText> text =
      gemm_internal::GenerateInt8KernelText(*shape, gi::Int8EpilogueVariant{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(absl::StrContains(text->name, "_ubv_")) << text->name;
  EXPECT_TRUE(absl::StrContains(text->assembly, "vpdpbusd")) << text->assembly;
}

TEST(GemmInt8Test, QuadKernelsUsePmaddubsw) {
  absl::StatusOr<gi::TargetVectors> vectors = gemm_internal::HostVectors();
  ASSERT_TRUE(vectors.ok()) << vectors.status();
  absl::StatusOr<gi::KernelShape> shape = gi::ChooseInt8KernelShape({}, *vectors);
  ASSERT_TRUE(shape.ok());
  shape->u8_quads = true;
  for (bool signed_a : {false, true}) {
    shape->signed_a = signed_a;
    gi::Int8EpilogueVariant variant;
    absl::StatusOr<gemm_internal::KernelText> text =
        gemm_internal::GenerateInt8KernelText(*shape, variant);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(text->name, absl::StrCat("kiln_qgemm_", shape->mr, "x", shape->nr(), "_v",
                                       shape->vector_bits, signed_a ? "_s8q_i32" : "_u8q_i32"));
    EXPECT_TRUE(absl::StrContains(text->assembly, "pmaddubsw")) << text->assembly;
  }
}

TEST(GemmInt8Test, RejectsBadArguments) {
  std::vector<uint8_t> buffer(64);
  Int8GemmParams p;
  p.m = p.n = p.k = 2;
  p.a = p.b = DenseMatrix(buffer.data(), 2, 2);
  p.c = DenseMatrix(buffer.data(), 2, 2);
  Int8GemmParams bad = p;
  bad.a_dtype = DType::kF32;
  EXPECT_EQ(Int8Gemm(bad).message(), "gemm int8: a dtype f32 is not supported (u8, i8, i16)");
  bad = p;
  bad.epilogue.output = DType::kF64;
  EXPECT_EQ(Int8Gemm(bad).message(),
            "gemm int8: output dtype f64 is not supported (i32, f32, u8, i8)");
  bad = p;
  bad.epilogue.output = DType::kF32;
  bad.epilogue.steps = {{Int8EpilogueOp::kAdd, Int8Operand::kColumn, 0, nullptr}};
  EXPECT_EQ(Int8Gemm(bad).message(), "gemm int8: epilogue step 0 (add) has a null vector");
  bad.epilogue.steps = {{Int8EpilogueOp::kRound, Int8Operand::kScalar, 1, nullptr}};
  EXPECT_EQ(Int8Gemm(bad).message(),
            "gemm int8: epilogue step 0 (round) takes no operand, got scalar");
  bad = p;
  bad.epilogue.steps = {{Int8EpilogueOp::kRound, Int8Operand::kNone, 0, nullptr}};
  EXPECT_EQ(Int8Gemm(bad).message(),
            "gemm int8: an i32 output stores the sums; its epilogue has no steps");
  bad = p;
  bad.c.col_stride = 2;
  EXPECT_EQ(Int8Gemm(bad).message(), "gemm int8: c.col_stride must be 1, got 2");
}

// ---- Convolution ------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  DType input_dtype, weight_dtype;
  runtime::cpu::Dims input, weight;
  std::vector<int64_t> strides = {}, low = {}, high = {}, dilation = {}, input_dilation = {};
  int64_t groups = 1;
};

ir::TensorData RandomTensor(DType dtype, const runtime::cpu::Dims& shape, std::mt19937& rng) {
  ir::TensorData t(dtype, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.SetInt64(i, Draw(dtype, rng));
  return t;
}

void RunConvCase(const ConvCase& tc, DType output, int threads) {
  SCOPED_TRACE(absl::StrCat(tc.name, " output ", base::DTypeName(output), " threads ", threads));
  std::mt19937 rng(static_cast<uint32_t>(tc.name.size() * 977 + tc.input.size()));
  const ir::TensorData x = RandomTensor(tc.input_dtype, tc.input, rng);
  const ir::TensorData w = RandomTensor(tc.weight_dtype, tc.weight, rng);
  // The oracle: the interpreter's conv {accumulate=i32}.
  ir::Attrs attrs;
  attrs.strides = tc.strides;
  attrs.low = tc.low;
  attrs.high = tc.high;
  attrs.dilation = tc.dilation;
  attrs.input_dilation = tc.input_dilation;
  attrs.groups = tc.groups;
  attrs.accumulate = DType::kI32;
  ir::Builder b;
  const ir::NodeId input = b.Parameter("x", {tc.input_dtype, tc.input});
  const ir::NodeId weight = b.Parameter("w", {tc.weight_dtype, tc.weight});
  b.Output(b.Conv(input, weight, attrs));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<ir::TensorData> arguments = {x, w};
  absl::StatusOr<std::vector<ir::TensorData>> sums = ir::Interpret(*graph, arguments);
  ASSERT_TRUE(sums.ok()) << sums.status();
  const ir::TensorData& expected = (*sums)[0];

  Int8ConvParams p;
  p.input_dtype = tc.input_dtype;
  p.weight_dtype = tc.weight_dtype;
  p.conv.input_shape = tc.input;
  p.conv.weight_shape = tc.weight;
  p.conv.strides = tc.strides;
  p.conv.low = tc.low;
  p.conv.high = tc.high;
  p.conv.dilation = tc.dilation;
  p.conv.input_dilation = tc.input_dilation;
  p.conv.groups = tc.groups;
  p.conv.input = x.data();
  p.conv.weight = w.data();
  const Epilogues vectors = MakeEpilogues(tc.weight[0], 1, rng);
  // Per output channel: row operands.
  if (output != DType::kI32) {
    p.epilogue.output = output;
    p.epilogue.steps = {
        {Int8EpilogueOp::kMul, Int8Operand::kScalar, 2.5e-3f, nullptr},
        {Int8EpilogueOp::kAdd, Int8Operand::kRow, 0, vectors.row.data()},
        {Int8EpilogueOp::kMax, Int8Operand::kScalar, 0.0f, nullptr},
        {Int8EpilogueOp::kDiv, Int8Operand::kScalar, 0.05f, nullptr},
        {Int8EpilogueOp::kRound, Int8Operand::kNone, 0, nullptr},
    };
  }
  const int64_t out_size = base::DTypeSize(output);
  std::vector<uint8_t> out(static_cast<size_t>(expected.num_elements() * out_size), 0xa5);
  p.conv.output = out.data();
  const absl::Status status = Int8Conv(p, threads > 1 ? &TwoThreads() : nullptr);
  ASSERT_TRUE(status.ok()) << status;
  const int64_t plane = expected.num_elements() / (tc.input[0] * tc.weight[0]);
  int failures = 0;
  for (int64_t i = 0; i < expected.num_elements() && failures < 5; ++i) {
    const int64_t channel = (i / plane) % tc.weight[0];
    const std::vector<uint8_t> want =
        ReferenceOutput(p.epilogue, static_cast<int32_t>(expected.GetInt64(i)), channel, 0);
    if (std::memcmp(out.data() + i * out_size, want.data(), want.size()) != 0) {
      ADD_FAILURE() << "output " << i << " = " << OutputBytes(out.data() + i * out_size, out_size)
                    << ", expected " << OutputBytes(want.data(), out_size) << " (sum "
                    << expected.GetInt64(i) << ")";
      ++failures;
    }
  }
}

TEST(GemmInt8Test, ConvEqualsTheInterpreter) {
  const std::vector<ConvCase> cases = {
      {"conv2d_3x3_pad", DType::kU8, DType::kI8, {2, 3, 9, 9}, {8, 3, 3, 3}, {}, {1, 1}, {1, 1}},
      {"conv2d_stride2",
       DType::kU8,
       DType::kI8,
       {1, 4, 11, 10},
       {6, 4, 3, 3},
       {2, 2},
       {1, 0},
       {0, 1}},
      {"conv2d_dilated_groups",
       DType::kI8,
       DType::kI8,
       {2, 4, 8, 8},
       {6, 2, 2, 2},
       {},
       {},
       {},
       {2, 1},
       {},
       2},
      {"conv1d_input_dilation",
       DType::kU8,
       DType::kI16,
       {1, 2, 7},
       {3, 2, 3},
       {},
       {1},
       {1},
       {},
       {2}},
      {"conv2d_pointwise", DType::kU8, DType::kI8, {3, 16, 5, 5}, {12, 16, 1, 1}},
      {"conv3d", DType::kI16, DType::kU8, {1, 2, 4, 4, 4}, {3, 2, 2, 2, 2}, {1, 2, 1}, {1, 0, 0}},
      {"conv2d_cnn", DType::kU8, DType::kI8, {4, 16, 13, 13}, {32, 16, 3, 3}},
  };
  for (const ConvCase& tc : cases) {
    for (DType output : {DType::kI32, DType::kF32, DType::kU8}) {
      RunConvCase(tc, output, tc.name == "conv2d_cnn" ? 2 : 1);
    }
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
