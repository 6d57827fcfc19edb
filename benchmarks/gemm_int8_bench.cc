// kiln's int8 GEMM (u8 x i8 -> i32, runtime/cpu/gemm_int8.cc) against kiln's own f32 GEMM on the
// same shapes, in the same process, with the same thread pool (issue #17's figure: int8 >= 2x f32).
//
//   gemm_int8_bench [--sizes=1024,2048] [--shapes=MxNxK[t],...] [--threads=2] [--rounds=5]
//                   [--min_time=0.3] [--output=i32|f32|u8] [--weights=8bit|7bit] [--pairs]
//                   [--prepack] [--json] [--asm]
//
// The two take turns in batches of about 20 ms until each has run for rounds x min_time seconds;
// the table shows each one's best batch in GOP/s (2 M N K operations per call) and the ratios
// int8 / f32 of the best batches and, steadier under load, the median over adjacent pairs.
// --output picks the int8 epilogue: the i32 sums (MatMulInteger), or the sums dequantised per
// column (f32) and requantised (u8), as a quantized Linear layer computes them (QLinearMatMul).
// --weights picks B's values: uniform over all of i8, or over [-64, 64] (weights quantized to 7
// bits, onnxruntime's reduce_range), where the driver runs the u8-quad kernels (pmaddubsw) unless
// --pairs keeps it on the i16 pairs (pmaddwd) for comparison. On a host with VNNI the quads run
// on vpdpbusd, which takes every i8 B. --prepack packs B once before
// timing (PackInt8B: a constant weight, as onnxruntime prepacks its initializers) instead of in
// every call; the f32 GEMM packs B in every call either way.
// The i32 sums are checked against a scalar loop on a sample of elements. --json prints one JSON
// object per shape instead of the table (benchmarks/peers/int8_peers.py reads it).

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/gemm_flags.h"
#include "codegen/cpu/gemm.h"
#include "codegen/cpu/gemm_kernel.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

namespace {

using kiln::base::DType;
using namespace kiln::codegen::cpu;  // NOLINT: the GEMM entry points and their types

using Shape = kiln::bench::GemmShape;
using kiln::bench::ParseFlag;

struct Options {
  std::vector<Shape> shapes = {{1024, 1024, 1024}, {2048, 2048, 2048}};
  int threads = 2;
  int rounds = 5;
  double min_time = 0.3;
  DType output = DType::kI32;
  bool seven_bit_weights = false;
  bool pairs_only = false;
  bool prepack = false;
  bool json = false;
  bool print_assembly = false;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "gemm_int8_bench: %s\n", why.c_str());
  std::exit(2);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (ParseFlag(argv[i], "--sizes", &value)) {
      options.shapes = kiln::bench::ParseSizes(value);
    } else if (ParseFlag(argv[i], "--shapes", &value)) {
      options.shapes = kiln::bench::ParseShapes(value, /*transposed_b_only=*/true);
    } else if (ParseFlag(argv[i], "--threads", &value)) {
      options.threads = std::stoi(value);
    } else if (ParseFlag(argv[i], "--rounds", &value)) {
      options.rounds = std::stoi(value);
    } else if (ParseFlag(argv[i], "--min_time", &value)) {
      options.min_time = std::stod(value);
    } else if (ParseFlag(argv[i], "--output", &value)) {
      if (value == "i32") {
        options.output = DType::kI32;
      } else if (value == "f32") {
        options.output = DType::kF32;
      } else if (value == "u8") {
        options.output = DType::kU8;
      } else {
        Usage("--output must be i32, f32 or u8");
      }
    } else if (ParseFlag(argv[i], "--weights", &value)) {
      if (value != "8bit" && value != "7bit") Usage("--weights must be 8bit or 7bit");
      options.seven_bit_weights = value == "7bit";
    } else if (std::strcmp(argv[i], "--pairs") == 0) {
      options.pairs_only = true;
    } else if (std::strcmp(argv[i], "--prepack") == 0) {
      options.prepack = true;
    } else if (std::strcmp(argv[i], "--json") == 0) {
      options.json = true;
    } else if (std::strcmp(argv[i], "--asm") == 0) {
      options.print_assembly = true;
    } else {
      Usage(std::string("unknown argument ") + argv[i]);
    }
  }
  return options;
}

void Check(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    std::exit(1);
  }
}

int Run(const Options& options) {
  kiln::runtime::ThreadPool pool(options.threads);
  namespace gi = kiln::runtime::cpu::gemm_internal;
  absl::StatusOr<gi::TargetVectors> vectors = gemm_internal::HostVectors();
  Check(vectors.status());
  absl::StatusOr<gi::KernelShape> shape = gi::ChooseInt8KernelShape({}, *vectors);
  Check(shape.status());
  // The kernel the driver picks: quads (pmaddubsw) for B within [-64, 64], or for any B where the
  // host has VNNI (vpdpbusd); else the i16 pairs.
  shape->vnni = vectors->vnni;
  shape->u8_quads = (options.seven_bit_weights || shape->vnni) && !options.pairs_only;
  if (shape->u8_quads && vectors->amx) {  // AMX tiles for 32 rows or more
    shape->amx = true;
    shape->mr = gi::kAmxTile;
    shape->nr_vectors = gi::kAmxTile / shape->lanes;
  }
  if (!options.json) {
    std::printf(
        "kiln int8 micro-kernel %d x %d on %d-bit vectors (u8 x i8 -> i32, output %s; %s); "
        "B packed %s; threads %d; best ~20 ms batch of %.1f s per kernel\n\n",
        shape->mr, shape->nr(), shape->vector_bits,
        std::string(kiln::base::DTypeName(options.output)).c_str(),
        shape->amx                       ? "u8 quads, AMX tiles (tdpbusd), 32 rows or more"
        : shape->u8_quads && shape->vnni ? "u8 quads, vpdpbusd (VNNI)"
        : shape->u8_quads                ? "B in [-64, 64]: u8 quads, pmaddubsw"
        : options.pairs_only             ? "i16 pairs (--pairs), pmaddwd"
                                         : "B over all of i8: i16 pairs, pmaddwd",
        options.prepack ? "once (--prepack)" : "in every call", pool.num_threads(),
        options.rounds * options.min_time);
    if (options.print_assembly) {
      gi::Int8EpilogueVariant variant;
      variant.output = options.output;
      absl::StatusOr<gemm_internal::KernelText> text =
          gemm_internal::GenerateInt8KernelText(*shape, variant);
      Check(text.status());
      std::printf("%s\n", text->assembly.c_str());
    }
    std::printf(
        "| M x N x K | int8 GOP/s | f32 GFLOP/s | int8 / f32 (best) | int8 / f32 (median "
        "of pairs) |\n| ---: | ---: | ---: | ---: | ---: |\n");
  }
  std::mt19937 rng(42);
  for (const Shape& s : options.shapes) {
    const int64_t m = s.m, n = s.n, k = s.k;
    std::vector<uint8_t> a8(static_cast<size_t>(m * k));
    std::vector<int8_t> b8(static_cast<size_t>(k * n));
    std::vector<float> a32(a8.size()), b32(b8.size()), c32(static_cast<size_t>(m * n));
    std::vector<uint8_t> c8(static_cast<size_t>(m * n * kiln::base::DTypeSize(options.output)));
    std::uniform_int_distribution<int> u8(0, 255);
    std::uniform_int_distribution<int> i8(options.seven_bit_weights ? -64 : -128,
                                          options.seven_bit_weights ? 64 : 127);
    for (size_t i = 0; i < a8.size(); ++i) a32[i] = a8[i] = static_cast<uint8_t>(u8(rng));
    for (size_t i = 0; i < b8.size(); ++i) b32[i] = b8[i] = static_cast<int8_t>(i8(rng));
    std::vector<float> scale(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      scale[static_cast<size_t>(j)] = 1e-5f * static_cast<float>(1 + j % 7);
      bias[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j % 5);
    }

    Int8GemmParams q;
    q.a_dtype = DType::kU8;
    q.b_dtype = DType::kI8;
    q.m = m;
    q.n = n;
    q.k = k;
    q.a = DenseMatrix(a8.data(), m, k);
    // B^T stored [N, K] (a Linear layer's weight): element (r, c) of B is b[c * K + r].
    q.b = s.b_transposed ? MatrixView{b8.data(), 1, k, {}} : DenseMatrix(b8.data(), k, n);
    q.c = DenseMatrix(c8.data(), m, n);
    q.epilogue.output = options.output;
    q.tuning.int8_quads = !options.pairs_only;
    if (options.output != DType::kI32) {
      q.epilogue.steps = {{Int8EpilogueOp::kMul, Int8Operand::kColumn, 0, scale.data()},
                          {Int8EpilogueOp::kAdd, Int8Operand::kColumn, 0, bias.data()}};
      if (options.output == DType::kU8) {
        q.epilogue.steps.push_back({Int8EpilogueOp::kMax, Int8Operand::kScalar, 0.0f, nullptr});
        q.epilogue.steps.push_back({Int8EpilogueOp::kDiv, Int8Operand::kScalar, 0.05f, nullptr});
        q.epilogue.steps.push_back({Int8EpilogueOp::kRound, Int8Operand::kNone, 0, nullptr});
        q.epilogue.steps.push_back({Int8EpilogueOp::kMin, Int8Operand::kScalar, 255.0f, nullptr});
      }
    }
    if (options.prepack) {
      absl::StatusOr<std::shared_ptr<const kiln::runtime::cpu::PackedInt8B>> packed =
          kiln::runtime::cpu::PackInt8B(q, gemm_internal::JitMicroKernels());
      Check(packed.status());
      q.packed_b = *packed;
    }
    GemmParams f;
    f.dtype = DType::kF32;
    f.m = m;
    f.n = n;
    f.k = k;
    f.a = DenseMatrix(a32.data(), m, k);
    f.b = s.b_transposed ? MatrixView{b32.data(), 1, k, {}} : DenseMatrix(b32.data(), k, n);
    f.c = DenseMatrix(c32.data(), m, n);
    auto int8_gemm = [&] { Check(Int8Gemm(q, &pool)); };
    auto f32_gemm = [&] { Check(Gemm(f, &pool)); };
    int8_gemm();  // warm-up: JIT compile, page faults, thread start
    f32_gemm();
    // Spot checks of the i32 sums against a scalar loop.
    if (options.output == DType::kI32) {
      const auto* sums = reinterpret_cast<const int32_t*>(c8.data());
      for (int t = 0; t < 64; ++t) {
        const int64_t r = static_cast<int64_t>(rng() % m), c = static_cast<int64_t>(rng() % n);
        int64_t sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const int64_t bv = s.b_transposed ? b8[static_cast<size_t>(c * k + kk)]
                                            : b8[static_cast<size_t>(kk * n + c)];
          sum += a8[static_cast<size_t>(r * k + kk)] * bv;
        }
        if (sums[r * n + c] != static_cast<int32_t>(sum)) {
          std::fprintf(stderr, "MISMATCH at (%lld, %lld): %d, expected %lld\n",
                       static_cast<long long>(r), static_cast<long long>(c), sums[r * n + c],
                       static_cast<long long>(sum));
          return 1;
        }
      }
    }
    const double ops =
        2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const kiln::bench::AlternatingRates rates =
        kiln::bench::AlternateBatches(ops, options.rounds, options.min_time, int8_gemm, f32_gemm);
    const double best_int8 = rates.best_first, best_f32 = rates.best_second;
    const double median = rates.median_ratio;
    if (options.json) {
      std::printf(
          "{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"b_transposed\": %s, \"output\": \"%s\", "
          "\"weights\": \"%s\", \"kernel\": \"%s\", \"prepacked\": %s, "
          "\"int8_gops\": %.3f, \"f32_gflops\": %.3f, \"int8_ms\": %.4f, \"f32_ms\": %.4f, "
          "\"median_ratio\": %.4f}\n",
          static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
          s.b_transposed ? "true" : "false",
          std::string(kiln::base::DTypeName(options.output)).c_str(),
          options.seven_bit_weights ? "7bit" : "8bit",
          !shape->u8_quads ? "pairs"
          : shape->amx     ? "u8_quads_amx"
          : shape->vnni    ? "u8_quads_vnni"
                           : "u8_quads",
          options.prepack ? "true" : "false", best_int8, best_f32, ops / best_int8 * 1e-6,
          ops / best_f32 * 1e-6, median);
    } else {
      std::printf("| %lldx%lldx%lld%s | %.1f | %.1f | %.2f | %.2f |\n", static_cast<long long>(m),
                  static_cast<long long>(n), static_cast<long long>(k), s.b_transposed ? "t" : "",
                  best_int8, best_f32, best_int8 / best_f32, median);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(ParseOptions(argc, argv)); }
