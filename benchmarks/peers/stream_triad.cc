// stream_triad: the machine's sustainable memory bandwidth, STREAM's triad a[i] = b[i] + s * c[i]
// on f32 arrays of 64 MiB each (16M elements, far beyond the caches), split over --threads
// (default 2) std::threads that each first-touch their own part, in huge pages where the system
// gives them (see Allocate). Bandwidth counts STREAM's
// bytes: 2 reads + 1 write of 4 bytes per element (no write-allocate traffic). Prints JSON:
//   {"threads": 2, "array_bytes": ..., "seconds": best, "bytes_per_second": ...}
//
//   stream_triad [--threads=2] [--repetitions=20]

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/host_memory.h"

namespace {

constexpr int64_t kElements = int64_t{64} * 1024 * 1024 / sizeof(float);

constexpr size_t kArrayBytes = kElements * sizeof(float);
constexpr size_t kAlignment = 64;

struct BlockFree {
  void operator()(float* p) const {
    kiln::base::FreeHostBlock(reinterpret_cast<std::byte*>(p), kArrayBytes, kAlignment);
  }
};
using Array = std::unique_ptr<float[], BlockFree>;

// kiln's own large host blocks (base/host_memory.h: 2 MiB-aligned, advised for transparent huge
// pages), so that where THP is "madvise" both sides of a comparison have the same pages.
Array Allocate() {
  return Array(reinterpret_cast<float*>(kiln::base::AllocateHostBlock(kArrayBytes, kAlignment)));
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int repetitions = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--repetitions=", 14) == 0) {
      repetitions = std::atoi(argv[i] + 14);
    } else {
      std::fprintf(stderr, "stream_triad: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  Array a = Allocate(), b = Allocate(), c = Allocate();
  const float scalar = 3.f;
  // Each repetition: all threads start together, run their chunk, and meet again; thread 0
  // times the interval between the two barriers.
  std::barrier sync(threads);
  std::vector<double> times(static_cast<size_t>(repetitions));
  auto worker = [&](int t) {
    const int64_t begin = kElements * t / threads, end = kElements * (t + 1) / threads;
    float* __restrict pa = a.get();
    const float* __restrict pb = b.get();
    const float* __restrict pc = c.get();
    for (int64_t i = begin; i < end; ++i) {  // first touch by the thread that uses the pages
      pa[i] = 0.f;
      b[i] = 1.f;
      c[i] = 2.f;
    }
    for (int r = 0; r < repetitions; ++r) {
      sync.arrive_and_wait();
      const double start = Seconds();
      for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + scalar * pc[i];
      sync.arrive_and_wait();
      if (t == 0) times[static_cast<size_t>(r)] = Seconds() - start;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& thread : pool) thread.join();
  for (int64_t i = 0; i < kElements; i += 4097) {
    if (a[i] != 7.f) {
      std::fprintf(stderr, "stream_triad: wrong result at %lld\n", static_cast<long long>(i));
      return 1;
    }
  }
  // The first repetition still pays for TLB and page-table warm-up; take the best of the rest.
  const double best = *std::min_element(times.begin() + (repetitions > 1 ? 1 : 0), times.end());
  const double bytes = 3.0 * sizeof(float) * static_cast<double>(kElements);
  std::printf(
      "{\"threads\": %d, \"array_bytes\": %lld, \"seconds\": %.9g, \"bytes_per_second\": %.6g}\n",
      threads, static_cast<long long>(kElements * sizeof(float)), best, bytes / best);
  return 0;
}
