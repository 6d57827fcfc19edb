// kiln's GEMM (codegen/cpu/gemm.h) against OpenBLAS's cblas_sgemm / cblas_dgemm on the same
// row-major matrices, in the same process, with the same number of threads.
//
//   gemm_vs_openblas [--sizes=256,512,1024,2048] [--shapes=MxNxK[t],...] [--threads=2]
//                    [--dtype=f32|f64]
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

#include <cblas.h>

#include <algorithm>
#include <chrono>
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
  std::vector<Shape> shapes = {{256, 256, 256, false},
                               {512, 512, 512, false},
                               {1024, 1024, 1024, false},
                               {2048, 2048, 2048, false}};
  int threads = 2;
  bool f64 = false;
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

// GFLOP/s of one batch of `reps` back-to-back calls.
template <class Fn>
double TimeBatch(double flops, int reps, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return flops * reps / elapsed * 1e-9;
}

template <class T>
int Run(const Options& options) {
  kiln::runtime::ThreadPool pool(options.threads);
  openblas_set_num_threads(options.threads);
  const kiln::ir::DType dtype = sizeof(T) == 8 ? kiln::ir::DType::kF64 : kiln::ir::DType::kF32;
  auto info = kiln::codegen::cpu::DescribeGemmKernel(dtype, {}, options.tuning);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", std::string(info.status().message()).c_str());
    return 1;
  }
  if (options.print_assembly) std::printf("%s\n", info->assembly.c_str());
  std::printf("OpenBLAS: core %s, config %s\n", openblas_get_corename(), openblas_get_config());
  std::printf("kiln: micro-kernel %s (%d x %d, %d-bit vectors), MC=%lld NC=%lld KC=%lld\n",
              info->name.c_str(), info->mr, info->nr, info->vector_bits,
              static_cast<long long>(info->mc), static_cast<long long>(info->nc),
              static_cast<long long>(info->kc));
  std::printf("threads: kiln %d, OpenBLAS %d; best ~20 ms batch of %.1f s per library\n\n",
              pool.num_threads(), options.threads, options.rounds * options.min_time);
  std::printf(
      "| %s M x N x K | kiln GFLOP/s | OpenBLAS GFLOP/s | kiln / OpenBLAS (best) | kiln / OpenBLAS "
      "(median of pairs) | max rel diff |\n",
      sizeof(T) == 8 ? "f64" : "f32");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  int failures = 0;
  for (const Shape& shape : options.shapes) {
    const int64_t m = shape.m, n = shape.n, k = shape.k;
    auto alloc = [&](int64_t elements) {
      return static_cast<T*>(std::aligned_alloc(64, (elements * sizeof(T) + 63) / 64 * 64));
    };
    T *a = alloc(m * k), *b = alloc(k * n), *c_kiln = alloc(m * n), *c_blas = alloc(m * n);
    for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<T>(uniform(rng));
    for (int64_t i = 0; i < k * n; ++i) b[i] = static_cast<T>(uniform(rng));
    GemmParams params;
    params.dtype = dtype;
    params.m = m;
    params.n = n;
    params.k = k;
    params.a = DenseMatrix(a, m, k);
    // B^T stored [N, K]: element (r, c) of B is b[c * K + r].
    params.b = shape.b_transposed ? MatrixView{b, 1, k, {}} : DenseMatrix(b, k, n);
    params.c = DenseMatrix(c_kiln, m, n);
    params.tuning = options.tuning;
    auto kiln_gemm = [&] {
      if (auto status = Gemm(params, &pool); !status.ok()) {
        std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
        std::exit(1);
      }
    };
    const auto trans_b = shape.b_transposed ? CblasTrans : CblasNoTrans;
    const int64_t ldb = shape.b_transposed ? k : n;
    auto blas_gemm = [&] {
      if constexpr (sizeof(T) == 8) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b, m, n, k, 1.0, a, k, b, ldb, 0.0, c_blas,
                    n);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b, m, n, k, 1.0f, a, k, b, ldb, 0.0f, c_blas,
                    n);
      }
    };
    kiln_gemm();  // warm-up: JIT compile, page faults, thread start
    blas_gemm();
    double max_diff = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      const double diff = std::abs(static_cast<double>(c_kiln[i]) - c_blas[i]) /
                          (1.0 + std::abs(static_cast<double>(c_blas[i])));
      max_diff = std::max(max_diff, diff);
    }
    const double flops = 2.0 * static_cast<double>(m) * n * k;
    // Batches of about 20 ms, alternating between the libraries, until each has run for
    // min_time * rounds seconds; the best batch of each counts.
    const double estimate = TimeBatch(flops, 1, kiln_gemm);
    const int reps = std::max(1, static_cast<int>(0.02 * estimate * 1e9 / flops));
    const int batches =
        std::max(options.rounds, static_cast<int>(options.min_time * options.rounds / 0.02));
    double best_kiln = 0, best_blas = 0;
    std::vector<double> pair_ratios;
    for (int batch = 0; batch < batches; ++batch) {
      const double kiln = TimeBatch(flops, reps, kiln_gemm);
      const double blas = TimeBatch(flops, reps, blas_gemm);
      best_kiln = std::max(best_kiln, kiln);
      best_blas = std::max(best_blas, blas);
      pair_ratios.push_back(kiln / blas);
    }
    std::sort(pair_ratios.begin(), pair_ratios.end());
    const double median_ratio = pair_ratios[pair_ratios.size() / 2];
    const double tolerance = sizeof(T) == 8 ? 1e-12 : 1e-4;
    if (!(max_diff <= tolerance)) ++failures;
    std::printf("| %lldx%lldx%lld%s | %.1f | %.1f | %.2f | %.2f | %.1e%s |\n",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                shape.b_transposed ? "t" : "", best_kiln, best_blas, best_kiln / best_blas,
                median_ratio, max_diff, max_diff <= tolerance ? "" : " MISMATCH");
    std::fflush(stdout);
    std::free(a);
    std::free(b);
    std::free(c_kiln);
    std::free(c_blas);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  return options.f64 ? Run<double>(options) : Run<float>(options);
}
