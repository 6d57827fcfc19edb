// kiln's GEMM (codegen/cpu/gemm.h) against OpenBLAS's cblas_sgemm / cblas_dgemm on the same
// row-major matrices, in the same process, with the same number of threads.
//
//   gemm_vs_openblas [--sizes=256,512,1024,2048] [--shapes=MxNxK[a][t][/B],...] [--threads=2]
//                    [--dtype=f32|f64] [--format=markdown|json]
//                    [--rounds=5] [--min_time=0.3]
//                    [--mc= --nc= --kc=] [--bits= --mr= --nrv=]   (tuning overrides)
//                    [--asm]   (print the micro-kernel's assembly first)
//
// The libraries take turns in batches of about 20 ms (as many calls as fit) until each has run
// for --rounds x --min_time seconds; the table shows each library's best batch. Short batches
// that alternate make a burst of load from other processes on this shared machine hit both
// alike, and the best batch is the one least disturbed. The ratio is kiln / OpenBLAS, of the best
// batches and, steadier under load, the median over the adjacent (kiln, OpenBLAS) pairs. The two
// results are also compared, so a fast wrong kernel cannot go unnoticed.
//
// --sizes are square products; --shapes are C[M,N] = A[M,K] B[K,N], and a trailing `t` gives B
// as a row-major [N,K] matrix used transposed, as a Linear layer's weight is (x W^T):
// --shapes=4096x1536x384t,4096x384x1536t is all-MiniLM-L6-v2's feed-forward block at batch 32.
// An `a` before it gives A as a row-major [K,M] matrix used transposed, as a weight gradient
// reads the output gradient (dW = dY^T X: --shapes=512x784x128a). `/B` makes it B independent
// products of that shape (a convolution's per-image GEMMs): kiln gets them as one batched call,
// which spreads whole products over its threads; OpenBLAS runs them single-threaded, spread the
// same way over the same threads (as a framework calling BLAS per image does), so neither
// library pays for splitting products too small to split.
//
// --format=json prints one object instead of the table: the configuration and, per shape,
// {"shape", "kiln_gflops", "openblas_gflops", "ratio_best", "ratio_median", "max_rel_diff", "ok"}.

#include <cblas.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/gemm_flags.h"
#include "codegen/cpu/gemm.h"
#include "runtime/thread_pool.h"

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
void openblas_set_num_threads(int num_threads);
}

namespace {

using kiln::codegen::cpu::DenseMatrix;
using kiln::codegen::cpu::Gemm;
using kiln::codegen::cpu::GemmParams;
using kiln::codegen::cpu::MatrixView;

using Shape = kiln::bench::GemmShape;
using kiln::bench::ParseFlag;

struct Options {
  std::vector<Shape> shapes = {
      {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}};
  int threads = 2;
  bool f64 = false;
  bool json = false;
  int rounds = 5;
  double min_time = 0.3;
  bool print_assembly = false;
  kiln::codegen::cpu::GemmTuning tuning;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (ParseFlag(argv[i], "--sizes", &value)) {
      options.shapes = kiln::bench::ParseSizes(value);
    } else if (ParseFlag(argv[i], "--shapes", &value)) {
      options.shapes = kiln::bench::ParseShapes(value);
    } else if (ParseFlag(argv[i], "--threads", &value)) {
      options.threads = std::stoi(value);
    } else if (ParseFlag(argv[i], "--dtype", &value)) {
      options.f64 = value == "f64";
    } else if (ParseFlag(argv[i], "--format", &value)) {
      if (value != "json" && value != "markdown") {
        std::fprintf(stderr, "--format: '%s' is not markdown or json\n", value.c_str());
        std::exit(2);
      }
      options.json = value == "json";
    } else if (ParseFlag(argv[i], "--rounds", &value)) {
      options.rounds = std::stoi(value);
    } else if (ParseFlag(argv[i], "--min_time", &value)) {
      options.min_time = std::stod(value);
    } else if (std::strcmp(argv[i], "--asm") == 0) {
      options.print_assembly = true;
    } else if (ParseFlag(argv[i], "--mc", &value)) {
      options.tuning.mc = std::stoll(value);
    } else if (ParseFlag(argv[i], "--nc", &value)) {
      options.tuning.nc = std::stoll(value);
    } else if (ParseFlag(argv[i], "--kc", &value)) {
      options.tuning.kc = std::stoll(value);
    } else if (ParseFlag(argv[i], "--bits", &value)) {
      options.tuning.vector_bits = std::stoi(value);
    } else if (ParseFlag(argv[i], "--mr", &value)) {
      options.tuning.mr = std::stoi(value);
    } else if (ParseFlag(argv[i], "--nrv", &value)) {
      options.tuning.nr_vectors = std::stoi(value);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return options;
}

// One library's product over every batch entry: whole entries spread over `pool` when there are
// several, each entry's call single-threaded (OpenBLAS's thread count is set by the caller).
template <class Fn>
void ForEachEntry(const Shape& shape, kiln::runtime::ThreadPool& pool, Fn&& entry) {
  if (shape.batch == 1) {
    entry(0);
    return;
  }
  pool.ParallelFor(shape.batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) entry(i);
  });
}

struct ShapeResult {
  double kiln_gflops, blas_gflops, median_ratio, max_diff;
  bool ok;
};

template <class T>
ShapeResult RunShape(const Options& options, const Shape& shape, kiln::runtime::ThreadPool& pool) {
  const int64_t m = shape.m, n = shape.n, k = shape.k, batch = shape.batch;
  const kiln::ir::DType dtype = sizeof(T) == 8 ? kiln::ir::DType::kF64 : kiln::ir::DType::kF32;
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto alloc = [&](int64_t elements) {
    return static_cast<T*>(std::aligned_alloc(64, (elements * sizeof(T) + 63) / 64 * 64));
  };
  T *a = alloc(batch * m * k), *b = alloc(batch * k * n), *c_kiln = alloc(batch * m * n),
    *c_blas = alloc(batch * m * n);
  for (int64_t i = 0; i < batch * m * k; ++i) a[i] = static_cast<T>(uniform(rng));
  for (int64_t i = 0; i < batch * k * n; ++i) b[i] = static_cast<T>(uniform(rng));
  GemmParams params;
  params.dtype = dtype;
  if (batch != 1) params.batch = {batch};
  params.m = m;
  params.n = n;
  params.k = k;
  // A^T stored [K, M]: element (r, c) of A is a[c * M + r]; B^T stored [N, K]: b[c * K + r].
  params.a = shape.a_transposed ? MatrixView{a, 1, m, {}} : DenseMatrix(a, m, k);
  params.b = shape.b_transposed ? MatrixView{b, 1, k, {}} : DenseMatrix(b, k, n);
  params.c = DenseMatrix(c_kiln, m, n);
  if (batch != 1) {
    params.a.batch_strides = {m * k};
    params.b.batch_strides = {k * n};
    params.c.batch_strides = {m * n};
  }
  params.tuning = options.tuning;
  auto kiln_gemm = [&] {
    if (auto status = Gemm(params, &pool); !status.ok()) {
      std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
      std::exit(1);
    }
  };
  const auto trans_a = shape.a_transposed ? CblasTrans : CblasNoTrans;
  const auto trans_b = shape.b_transposed ? CblasTrans : CblasNoTrans;
  const int64_t lda = shape.a_transposed ? m : k;
  const int64_t ldb = shape.b_transposed ? k : n;
  auto blas_entry = [&](int64_t i) {
    const T* ai = a + i * m * k;
    const T* bi = b + i * k * n;
    T* ci = c_blas + i * m * n;
    if constexpr (sizeof(T) == 8) {
      cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0, ai, lda, bi, ldb, 0.0, ci, n);
    } else {
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0f, ai, lda, bi, ldb, 0.0f, ci, n);
    }
  };
  openblas_set_num_threads(batch == 1 ? options.threads : 1);
  auto blas_gemm = [&] { ForEachEntry(shape, pool, blas_entry); };
  kiln_gemm();  // warm-up: JIT compile, page faults, thread start
  blas_gemm();
  double max_diff = 0;
  for (int64_t i = 0; i < batch * m * n; ++i) {
    const double diff = std::abs(static_cast<double>(c_kiln[i]) - c_blas[i]) /
                        (1.0 + std::abs(static_cast<double>(c_blas[i])));
    max_diff = std::max(max_diff, diff);
  }
  const double flops = 2.0 * static_cast<double>(m) * n * k * batch;
  const kiln::bench::AlternatingRates rates =
      kiln::bench::AlternateBatches(flops, options.rounds, options.min_time, kiln_gemm, blas_gemm);
  const double tolerance = sizeof(T) == 8 ? 1e-12 : 1e-4;
  std::free(a);
  std::free(b);
  std::free(c_kiln);
  std::free(c_blas);
  return {rates.best_first, rates.best_second, rates.median_ratio, max_diff, max_diff <= tolerance};
}

template <class T>
int Run(const Options& options) {
  kiln::runtime::ThreadPool pool(options.threads);
  const kiln::ir::DType dtype = sizeof(T) == 8 ? kiln::ir::DType::kF64 : kiln::ir::DType::kF32;
  auto info = kiln::codegen::cpu::DescribeGemmKernel(dtype, {}, options.tuning);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", std::string(info.status().message()).c_str());
    return 1;
  }
  if (options.print_assembly) std::printf("%s\n", info->assembly.c_str());
  if (options.json) {
    std::printf(
        "{\"openblas_core\": \"%s\", \"kiln_kernel\": \"%s\", \"threads\": %d, "
        "\"dtype\": \"%s\", \"results\": [",
        openblas_get_corename(), info->name.c_str(), pool.num_threads(),
        sizeof(T) == 8 ? "f64" : "f32");
  } else {
    std::printf("OpenBLAS: core %s, config %s\n", openblas_get_corename(), openblas_get_config());
    std::printf("kiln: micro-kernel %s (%d x %d, %d-bit vectors), MC=%lld NC=%lld KC=%lld\n",
                info->name.c_str(), info->mr, info->nr, info->vector_bits,
                static_cast<long long>(info->mc), static_cast<long long>(info->nc),
                static_cast<long long>(info->kc));
    std::printf("threads: kiln %d, OpenBLAS %d; best ~20 ms batch of %.1f s per library\n\n",
                pool.num_threads(), options.threads, options.rounds * options.min_time);
    std::printf(
        "| %s M x N x K | kiln GFLOP/s | OpenBLAS GFLOP/s | kiln / OpenBLAS (best) | kiln / "
        "OpenBLAS (median of pairs) | max rel diff |\n",
        sizeof(T) == 8 ? "f64" : "f32");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  int failures = 0;
  for (size_t i = 0; i < options.shapes.size(); ++i) {
    const Shape& shape = options.shapes[i];
    const ShapeResult r = RunShape<T>(options, shape, pool);
    failures += !r.ok;
    if (options.json) {
      std::printf(
          "%s\n {\"shape\": \"%s\", \"kiln_gflops\": %.3f, \"openblas_gflops\": %.3f, "
          "\"ratio_best\": %.4f, \"ratio_median\": %.4f, \"max_rel_diff\": %.3e, "
          "\"ok\": %s}",
          i == 0 ? "" : ",", shape.Name().c_str(), r.kiln_gflops, r.blas_gflops,
          r.kiln_gflops / r.blas_gflops, r.median_ratio, r.max_diff, r.ok ? "true" : "false");
    } else {
      std::printf("| %s | %.1f | %.1f | %.2f | %.2f | %.1e%s |\n", shape.Name().c_str(),
                  r.kiln_gflops, r.blas_gflops, r.kiln_gflops / r.blas_gflops, r.median_ratio,
                  r.max_diff, r.ok ? "" : " MISMATCH");
    }
    std::fflush(stdout);
  }
  if (options.json) std::printf("]}\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  return options.f64 ? Run<double>(options) : Run<float>(options);
}
