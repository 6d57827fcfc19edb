// Command-line pieces the GEMM benchmarks share (gemm_vs_openblas.cc, gemm_int8_bench.cc):
// `--name=value` flags, comma lists, and the --sizes / --shapes forms of the problems.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::bench {

/// C[M,N] = A[M,K] B[K,N]; `b_transposed`: B is stored as a row-major [N,K] matrix (a Linear
/// layer's weight, x W^T).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool b_transposed = false;
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
    shapes.push_back({n, n, n, false});
  }
  return shapes;
}

/// --shapes=MxNxK[t],...: exits with status 2 and a message on a malformed entry.
inline std::vector<GemmShape> ParseShapes(const std::string& value) {
  std::vector<GemmShape> shapes;
  for (const std::string& text : SplitList(value)) {
    GemmShape shape;
    char transposed = 0;
    const int fields = std::sscanf(text.c_str(), "%" SCNd64 "x%" SCNd64 "x%" SCNd64 "%c", &shape.m,
                                   &shape.n, &shape.k, &transposed);
    if (fields < 3 || (fields == 4 && transposed != 't') || shape.m < 1 || shape.n < 1 ||
        shape.k < 1) {
      std::fprintf(stderr, "--shapes: '%s' is not MxNxK or MxNxKt\n", text.c_str());
      std::exit(2);
    }
    shape.b_transposed = fields == 4;
    shapes.push_back(shape);
  }
  return shapes;
}

}  // namespace kiln::bench
