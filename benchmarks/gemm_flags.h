// What the GEMM benchmarks share (gemm_vs_openblas.cc, gemm_int8_bench.cc): `--name=value`
// flags, comma lists, the --sizes / --shapes forms of the problems, and the alternating timing
// loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::bench {

/// C[M,N] = A[M,K] B[K,N], `batch` times; `a_transposed`: A is stored as a row-major [K,M]
/// matrix; `b_transposed`: B as a row-major [N,K] matrix (a Linear layer's weight, x W^T).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool a_transposed = false;
  bool b_transposed = false;
  int64_t batch = 1;

  /// The --shapes spelling: "MxNxK[a][t][/B]".
  std::string Name() const {
    std::string name = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    if (a_transposed) name += "a";
    if (b_transposed) name += "t";
    if (batch != 1) name += "/" + std::to_string(batch);
    return name;
  }
};

/// Whether `arg` is `name=value`; then *value is the text after '='.
inline bool ParseFlag(const char* arg, const char* name, std::string* value) {
  const size_t length = std::strlen(name);
  if (std::strncmp(arg, name, length) != 0 || arg[length] != '=') return false;
  *value = arg + length + 1;
  return true;
}

/// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> SplitList(const std::string& value) {
  std::vector<std::string> items;
  for (size_t start = 0; start < value.size();) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    items.push_back(value.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

/// --sizes=256,512: square products.
inline std::vector<GemmShape> ParseSizes(const std::string& value) {
  std::vector<GemmShape> shapes;
  for (const std::string& size : SplitList(value)) {
    const int64_t n = std::stoll(size);
    shapes.push_back({n, n, n});
  }
  return shapes;
}

/// --shapes=MxNxK[a][t][/B],... (with `transposed_b_only`: MxNxK[t]); exits with status 2 and a
/// message on a malformed entry.
inline std::vector<GemmShape> ParseShapes(const std::string& value,
                                          bool transposed_b_only = false) {
  std::vector<GemmShape> shapes;
  for (const std::string& text : SplitList(value)) {
    GemmShape shape;
    int used = 0;
    const int fields = std::sscanf(text.c_str(), "%" SCNd64 "x%" SCNd64 "x%" SCNd64 "%n", &shape.m,
                                   &shape.n, &shape.k, &used);
    const char* rest = text.c_str() + used;
    if (fields == 3 && !transposed_b_only && *rest == 'a') shape.a_transposed = *rest++ == 'a';
    if (fields == 3 && *rest == 't') shape.b_transposed = *rest++ == 't';
    if (fields == 3 && !transposed_b_only && *rest == '/') {
      char* end = nullptr;
      shape.batch = std::strtoll(rest + 1, &end, 10);
      rest = end;
    }
    if (fields < 3 || *rest != '\0' || shape.m < 1 || shape.n < 1 || shape.k < 1 ||
        shape.batch < 1) {
      std::fprintf(stderr, "--shapes: '%s' is not %s\n", text.c_str(),
                   transposed_b_only ? "MxNxK[t]" : "MxNxK[a][t][/B]");
      std::exit(2);
    }
    shapes.push_back(shape);
  }
  return shapes;
}

/// Billions of operations per second of `reps` calls of fn(), each `ops` operations.
template <class Fn>
double TimeBatch(double ops, int reps, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return ops * reps / elapsed * 1e-9;
}

/// The rates of two implementations of one product (G operations per second).
struct AlternatingRates {
  double best_first = 0, best_second = 0;  // each one's best batch
  double median_ratio = 0;                 // median of first / second over adjacent batches
};

/// first() and second(), `ops` operations per call, in alternating batches of about 20 ms until
/// each has run for rounds x min_time seconds (and at least `rounds` batches): alternating keeps
/// a loaded machine's slow spells from landing on one side only.
template <class First, class Second>
AlternatingRates AlternateBatches(double ops, int rounds, double min_time, First&& first,
                                  Second&& second) {
  const double estimate = TimeBatch(ops, 1, first);
  const int reps = std::max(1, static_cast<int>(0.02 * estimate * 1e9 / ops));
  const int batches = std::max(rounds, static_cast<int>(min_time * rounds / 0.02));
  AlternatingRates rates;
  std::vector<double> ratios;
  for (int batch = 0; batch < batches; ++batch) {
    const double first_rate = TimeBatch(ops, reps, first);
    const double second_rate = TimeBatch(ops, reps, second);
    rates.best_first = std::max(rates.best_first, first_rate);
    rates.best_second = std::max(rates.best_second, second_rate);
    ratios.push_back(first_rate / second_rate);
  }
  std::sort(ratios.begin(), ratios.end());
  rates.median_ratio = ratios[ratios.size() / 2];
  return rates;
}

}  // namespace kiln::bench
