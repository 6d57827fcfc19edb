// openblas_bench: OpenBLAS's cblas_sgemm on the square f32 sizes of kiln_bench's matmul/f32/N,
// row-major C = A B, with a fixed number of threads (--threads, default 2). Prints JSON:
//   {"threads": 2, "core": "...", "results": {"matmul/f32/256": {"seconds": ..., "gflops": ...}}}
// "seconds" is the best of --repetitions batches, each the mean of as many calls as fit in
// --min_time seconds (after one warm-up call), the same statistic run_peers.py takes of kiln.
//
//   openblas_bench [--threads=2] [--sizes=256,512,1024,2048] [--repetitions=3] [--min_time=0.5]

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
char* openblas_get_corename(void);
void openblas_set_num_threads(int num_threads);
}

namespace {

bool ParseFlag(const char* arg, const char* name, std::string* value) {
  const size_t length = std::strlen(name);
  if (std::strncmp(arg, name, length) != 0 || arg[length] != '=') return false;
  *value = arg + length + 1;
  return true;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int repetitions = 3;
  double min_time = 0.5;
  std::vector<int64_t> sizes = {256, 512, 1024, 2048};
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (ParseFlag(argv[i], "--threads", &value)) {
      threads = std::stoi(value);
    } else if (ParseFlag(argv[i], "--repetitions", &value)) {
      repetitions = std::stoi(value);
    } else if (ParseFlag(argv[i], "--min_time", &value)) {
      min_time = std::stod(value);
    } else if (ParseFlag(argv[i], "--sizes", &value)) {
      sizes.clear();
      for (size_t start = 0; start < value.size();) {
        size_t end = value.find(',', start);
        if (end == std::string::npos) end = value.size();
        sizes.push_back(std::stoll(value.substr(start, end - start)));
        start = end + 1;
      }
    } else {
      std::fprintf(stderr, "openblas_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  openblas_set_num_threads(threads);

  std::printf("{\"threads\": %d, \"core\": \"%s\", \"results\": {", threads,
              openblas_get_corename());
  std::mt19937 engine(5);
  std::uniform_real_distribution<float> distribution(-1.f, 1.f);
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t n = sizes[s];
    std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size());
    for (float& v : a) v = distribution(engine);
    for (float& v : b) v = distribution(engine);
    auto call = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                  static_cast<int>(n), static_cast<int>(n), 1.f, a.data(), static_cast<int>(n),
                  b.data(), static_cast<int>(n), 0.f, c.data(), static_cast<int>(n));
    };
    call();  // warm-up: thread start, page faults of c
    double best = 1e30;
    for (int r = 0; r < repetitions; ++r) {
      int64_t calls = 0;
      const double start = Seconds();
      double elapsed = 0;
      do {
        call();
        ++calls;
        elapsed = Seconds() - start;
      } while (elapsed < min_time);
      best = std::min(best, elapsed / static_cast<double>(calls));
    }
    const double flops = 2.0 * static_cast<double>(n) * n * n;
    std::printf("%s\"matmul/f32/%lld\": {\"seconds\": %.9g, \"gflops\": %.6g}", s ? ", " : "",
                static_cast<long long>(n), best, flops / best * 1e-9);
  }
  std::printf("}}\n");
  return 0;
}
