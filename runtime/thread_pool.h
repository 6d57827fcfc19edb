// ThreadPool: the CPU backend's fixed pool of worker threads and its one primitive, ParallelFor.
//
// A compiled graph runs as a sequence of kernels, each split over the pool, so the pool is tuned
// for many short dispatches rather than for throughput of independent tasks: the calling thread
// does a share of the work itself, chunks are claimed from one atomic counter (no queues), work
// too small to split runs inline without waking anybody, and idle workers spin for a short while
// before they sleep, so the next kernel of the same graph finds them awake.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace kiln::runtime {

/// The number of threads KILN_NUM_THREADS asks for, or std::thread::hardware_concurrency() (at
/// least 1) when it is unset. A value that is not an integer in [1, 1024] is reported on stderr
/// once and ignored.
int ThreadCountFromEnvironment();

class ThreadPool {
 public:
  struct Options {
    /// Threads that execute a ParallelFor, the calling thread included (so num_threads - 1
    /// workers are started). 0 means ThreadCountFromEnvironment().
    int num_threads = 0;
    /// How long an idle worker polls for new work before it blocks on a condition variable.
    /// Waking a blocked thread costs tens of microseconds; kernels of one graph follow each
    /// other much faster than that.
    std::chrono::microseconds spin = std::chrono::microseconds(100);
  };

  /// A pool of `num_threads` threads (0: ThreadCountFromEnvironment()).
  explicit ThreadPool(int num_threads = 0);
  explicit ThreadPool(Options options);
  /// Stops and joins the workers. No ParallelFor may be running.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that take part in a ParallelFor, the caller included.
  int num_threads() const { return num_threads_; }

  /// Calls fn(begin, end) on disjoint ranges that together cover [0, n) exactly once, and returns
  /// when all of them have returned. Ranges are at least `grain` long (except the last one) and
  /// run on the calling thread and the workers. The whole range runs inline as fn(0, n) on the
  /// caller when n <= grain, when the pool has one thread, when called from inside another
  /// ParallelFor (nested parallelism) or while another thread's ParallelFor occupies the pool.
  /// The first exception thrown by fn stops the hand-out of further ranges and is rethrown here
  /// once every range already started has finished. n <= 0 calls nothing; grain < 1 counts as 1.
  void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn);

  /// The length of the ranges ParallelFor hands out: at least `grain`, and small enough that
  /// every thread gets about four of them, so a thread that started late or runs slower still
  /// finds work.
  static int64_t ChunkSize(int64_t n, int64_t grain, int num_threads);

 private:
  struct Job;

  void WorkerLoop();
  // Executes chunks of `job` until none are left; records the first exception in it.
  static void RunChunks(Job& job);
  void WakeWorkers(int64_t wanted);

  int num_threads_;  // fewer than asked for only if the OS refused to start a thread
  const std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;

  // Set by the thread whose ParallelFor owns the pool; others then run inline.
  std::atomic<bool> busy_{false};
  // The job workers should join, or null. Together with active_workers_ it forms a Dekker-style
  // handshake (all seq_cst): a worker increments active_workers_ before it reads current_job_,
  // the owner clears current_job_ before it waits for active_workers_ to reach 0, so no worker
  // can touch a job after its ParallelFor returned.
  std::atomic<Job*> current_job_{nullptr};
  std::atomic<int> active_workers_{0};
  // Bumped once per dispatched job and at shutdown; workers wait for it to change.
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> stopping_{false};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
};

/// The process-wide pool, sized by ThreadCountFromEnvironment() on first use and never
/// destroyed (kernels may still run during static destruction).
ThreadPool& DefaultThreadPool();

}  // namespace kiln::runtime
