#include "runtime/thread_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <system_error>

#include "absl/strings/numbers.h"

#if defined(__linux__)
#include <pthread.h>
#endif

namespace kiln::runtime {
namespace {

constexpr int kMaxThreads = 1024;
// Ranges handed out per thread: more balances uneven progress, fewer saves atomic traffic.
constexpr int64_t kChunksPerThread = 4;

// True while this thread executes ranges of a pooled ParallelFor: a nested call then runs inline
// instead of waiting for workers that are busy with the outer call (which could deadlock).
thread_local bool tls_inside_parallel_for = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int HardwareThreads() {
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(std::min<unsigned>(hardware, kMaxThreads));
}

}  // namespace

int ThreadCountFromEnvironment() {
  const char* value = std::getenv("KILN_NUM_THREADS");
  if (value == nullptr || *value == '\0') return HardwareThreads();
  int threads = 0;
  if (absl::SimpleAtoi(value, &threads) && threads >= 1 && threads <= kMaxThreads) return threads;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr,
                 "kiln: ignoring KILN_NUM_THREADS=\"%s\" (expected an integer in [1, %d]); "
                 "using %d threads\n",
                 value, kMaxThreads, HardwareThreads());
  });
  return HardwareThreads();
}

struct ThreadPool::Job {
  Job(absl::FunctionRef<void(int64_t, int64_t)> fn, int64_t n, int64_t chunk)
      : fn(fn), n(n), chunk(chunk) {}

  absl::FunctionRef<void(int64_t, int64_t)> fn;
  const int64_t n;
  const int64_t chunk;
  // Start of the next unclaimed range; set to n when a range throws so no new one starts.
  // Aligned so that the counter every thread hammers does not share a line with the owner's stack.
  alignas(64) std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  // Written once, by the thread that flipped `failed`; read by the owner after every worker left.
  std::exception_ptr error;
};

ThreadPool::ThreadPool(int num_threads) : ThreadPool(Options{.num_threads = num_threads}) {}

ThreadPool::ThreadPool(Options options)
    : num_threads_(options.num_threads > 0 ? std::min(options.num_threads, kMaxThreads)
                                           : ThreadCountFromEnvironment()),
      spin_(options.spin) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    try {
      workers_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error& error) {
      // Fewer workers still compute correct results; say so rather than fail the process.
      std::fprintf(stderr, "kiln: could only start %d of %d thread-pool workers: %s\n", i - 1,
                   num_threads_ - 1, error.what());
      break;
    }
#if defined(__linux__)
    pthread_setname_np(workers_.back().native_handle(), "kiln-worker");
#endif
  }
  num_threads_ = static_cast<int>(workers_.size()) + 1;
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

int64_t ThreadPool::ChunkSize(int64_t n, int64_t grain, int num_threads) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t pieces = std::max<int64_t>(num_threads, 1) * kChunksPerThread;
  const int64_t even_share = n / pieces + (n % pieces != 0 ? 1 : 0);
  return std::max(grain, even_share);
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || num_threads_ == 1 || tls_inside_parallel_for) {
    fn(0, n);
    return;
  }
  const int64_t chunk = ChunkSize(n, grain, num_threads_);
  const int64_t num_chunks = n / chunk + (n % chunk != 0 ? 1 : 0);
  if (num_chunks <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
    fn(0, n);
    return;
  }

  Job job(fn, n, chunk);
  current_job_.store(&job, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  WakeWorkers(num_chunks - 1);

  RunChunks(job);

  // Every range is claimed; wait until the workers that joined have finished theirs and left.
  current_job_.store(nullptr, std::memory_order_seq_cst);
  for (int spins = 0; active_workers_.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();  // a worker holding a range was descheduled
    }
  }
  busy_.store(false, std::memory_order_release);
  if (job.error) std::rethrow_exception(job.error);
}

void ThreadPool::RunChunks(Job& job) {
  const bool was_inside = tls_inside_parallel_for;
  tls_inside_parallel_for = true;
  for (;;) {
    const int64_t begin = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
    if (begin >= job.n) break;
    const int64_t end = std::min(begin + job.chunk, job.n);
    try {
      job.fn(begin, end);
    } catch (...) {
      if (!job.failed.exchange(true, std::memory_order_acq_rel)) {
        job.error = std::current_exception();
      }
      job.next.store(job.n, std::memory_order_relaxed);
      break;
    }
  }
  tls_inside_parallel_for = was_inside;
}

void ThreadPool::WakeWorkers(int64_t wanted) {
  const int sleeping = sleeping_workers_.load(std::memory_order_seq_cst);
  if (sleeping == 0) return;  // the spinning workers see the new epoch by themselves
  {
    // A worker between its predicate check and its wait holds the mutex; taking it here makes
    // sure the notification cannot fall into that gap.
    std::lock_guard<std::mutex> lock(sleep_mutex_);
  }
  if (wanted >= sleeping) {
    wake_.notify_all();
  } else {
    for (int64_t i = 0; i < wanted; ++i) wake_.notify_one();
  }
}

void ThreadPool::WorkerLoop() {
  // Not epoch_.load(): the pool may already have dispatched a job or started shutting down
  // before this thread got to run, and that change must not be missed.
  uint64_t seen = 0;
  for (;;) {
    uint64_t epoch = seen;
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    for (int i = 1;; ++i) {
      epoch = epoch_.load(std::memory_order_acquire);
      if (epoch != seen) break;
      if (i % 256 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
      CpuRelax();
    }
    if (epoch == seen) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
      sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
      epoch = epoch_.load(std::memory_order_acquire);
    }
    seen = epoch;
    if (stopping_.load(std::memory_order_acquire)) return;

    active_workers_.fetch_add(1, std::memory_order_seq_cst);
    if (Job* job = current_job_.load(std::memory_order_seq_cst)) RunChunks(*job);
    active_workers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

ThreadPool& DefaultThreadPool() {
  static ThreadPool* const pool = new ThreadPool();
  return *pool;
}

}  // namespace kiln::runtime
