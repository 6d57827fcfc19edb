#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// Deadlock guard for tests that need several threads inside fn at once: generous, so it only
// fires when the pool really fails to run ranges concurrently.
constexpr auto kRendezvousTimeout = std::chrono::seconds(60);

// Checks that ParallelFor(n, grain) calls fn on ranges that cover [0, n) exactly once and are at
// least `grain` long except the one that ends at n.
void ExpectExactCover(ThreadPool& pool, int64_t n, int64_t grain) {
  SCOPED_TRACE(testing::Message() << "threads " << pool.num_threads() << " n " << n << " grain "
                                  << grain);
  std::vector<std::atomic<int>> hits(std::max<int64_t>(n, 0));
  std::atomic<int> bad_ranges{0};
  pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end) {
      bad_ranges.fetch_add(1);
      return;
    }
    if (end - begin < grain && end != n) bad_ranges.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
  });
  EXPECT_EQ(bad_ranges.load(), 0);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[i].load(), 1) << "index " << i;
  }
}

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 63, 64, 65, 1000, 4097, 100000}) {
      for (int64_t grain : {1, 3, 64, 1000, 5000}) ExpectExactCover(pool, n, grain);
    }
  }
}

TEST(ThreadPoolTest, SleepingWorkersAreWokenUp) {
  // With no spinning every dispatch goes through the condition variable.
  ThreadPool pool(ThreadPool::Options{.num_threads = 3, .spin = std::chrono::microseconds(0)});
  for (int repeat = 0; repeat < 50; ++repeat) ExpectExactCover(pool, 5000, 7);
}

TEST(ThreadPoolTest, NonPositiveSizesCallNothing) {
  ThreadPool pool(2);
  int calls = 0;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { ++calls; });
  pool.ParallelFor(-5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  // A grain below 1 counts as 1.
  ExpectExactCover(pool, 100, 0);
  ExpectExactCover(pool, 100, -3);
}

TEST(ThreadPoolTest, SmallRangesRunInlineAsOneCall) {
  ThreadPool pool(4);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::thread::id runner;
  pool.ParallelFor(10, 10, [&](int64_t begin, int64_t end) {
    ranges.emplace_back(begin, end);
    runner = std::this_thread::get_id();
  });
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], std::make_pair(int64_t{0}, int64_t{10}));
  EXPECT_EQ(runner, std::this_thread::get_id());
}

TEST(ThreadPoolTest, ChunkSizeGivesEachThreadAboutFourRanges) {
  EXPECT_EQ(ThreadPool::ChunkSize(1000, 1, 2), 125);    // 1000 / (2 * 4)
  EXPECT_EQ(ThreadPool::ChunkSize(1001, 1, 2), 126);    // rounded up
  EXPECT_EQ(ThreadPool::ChunkSize(1000, 200, 2), 200);  // never below the grain
  EXPECT_EQ(ThreadPool::ChunkSize(10, 0, 4), 1);
}

// Runs ParallelFor(threads, 1) where every range waits until `threads` ranges are running at
// the same time, and returns the distinct threads that ran them (empty on timeout).
std::set<std::thread::id> RendezvousThreads(ThreadPool& pool, int threads) {
  std::mutex mutex;
  std::condition_variable arrived;
  int waiting = 0;
  bool timed_out = false;
  std::set<std::thread::id> ids;
  pool.ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
    std::unique_lock<std::mutex> lock(mutex);
    for (int64_t i = begin; i < end; ++i) ids.insert(std::this_thread::get_id());
    ++waiting;
    arrived.notify_all();
    if (!arrived.wait_for(lock, kRendezvousTimeout, [&] { return waiting >= threads; })) {
      timed_out = true;
      waiting = threads;  // release the others
      arrived.notify_all();
    }
  });
  if (timed_out) return {};
  return ids;
}

TEST(ThreadPoolTest, EveryThreadTakesPart) {
  for (auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(100)}) {
    ThreadPool pool(ThreadPool::Options{.num_threads = 4, .spin = spin});
    const std::set<std::thread::id> ids = RendezvousThreads(pool, 4);
    EXPECT_EQ(ids.size(), 4u) << "spin " << spin.count() << " us";
    EXPECT_TRUE(ids.contains(std::this_thread::get_id())) << "the caller participates";
  }
}

class ThreadCountEnvironmentTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("KILN_NUM_THREADS"); }
};

int Hardware() { return std::max(1u, std::thread::hardware_concurrency()); }

TEST_F(ThreadCountEnvironmentTest, KilnNumThreadsSetsThePoolSize) {
  setenv("KILN_NUM_THREADS", "3", 1);
  EXPECT_EQ(ThreadCountFromEnvironment(), 3);
  ThreadPool pool;
  EXPECT_EQ(pool.num_threads(), 3);
  EXPECT_EQ(RendezvousThreads(pool, 3).size(), 3u);

  setenv("KILN_NUM_THREADS", "1", 1);
  ThreadPool single;
  EXPECT_EQ(single.num_threads(), 1);
  ExpectExactCover(single, 1000, 1);
}

TEST_F(ThreadCountEnvironmentTest, UnsetOrInvalidMeansTheHardwareThreadCount) {
  unsetenv("KILN_NUM_THREADS");
  EXPECT_EQ(ThreadCountFromEnvironment(), Hardware());
  for (const char* bad : {"", "0", "-2", "many", "4x", "100000"}) {
    setenv("KILN_NUM_THREADS", bad, 1);
    EXPECT_EQ(ThreadCountFromEnvironment(), Hardware()) << "KILN_NUM_THREADS=" << bad;
  }
}

TEST(ThreadPoolTest, TheFirstExceptionPropagates) {
  ThreadPool pool(3);
  for (int64_t grain : {1, 16, 1000000}) {
    try {
      pool.ParallelFor(10000, grain, [&](int64_t begin, int64_t end) {
        if (begin <= 5000 && 5000 < end) {
          throw std::runtime_error("index 5000 failed");
        }
      });
      ADD_FAILURE() << "no exception, grain " << grain;
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "index 5000 failed");
    }
    // The pool is intact afterwards.
    ExpectExactCover(pool, 10000, grain);
  }
}

TEST(ThreadPoolTest, OneOfManyExceptionsPropagates) {
  ThreadPool pool(4);
  EXPECT_THROW(
      pool.ParallelFor(
          1000, 1, [](int64_t begin, int64_t) { throw std::out_of_range(std::to_string(begin)); }),
      std::out_of_range);
  ExpectExactCover(pool, 1000, 1);
}

TEST(ThreadPoolTest, NestedCallsRunInlineOnTheCallingThread) {
  ThreadPool pool(4);
  std::atomic<int> bad_inner{0};
  std::vector<std::atomic<int>> hits(64 * 100);
  pool.ParallelFor(64, 1, [&](int64_t outer_begin, int64_t outer_end) {
    for (int64_t outer = outer_begin; outer < outer_end; ++outer) {
      const std::thread::id outer_thread = std::this_thread::get_id();
      int inner_calls = 0;
      pool.ParallelFor(100, 1, [&](int64_t begin, int64_t end) {
        ++inner_calls;
        if (std::this_thread::get_id() != outer_thread || begin != 0 || end != 100) {
          bad_inner.fetch_add(1);
        }
        for (int64_t i = begin; i < end; ++i) hits[outer * 100 + i].fetch_add(1);
      });
      if (inner_calls != 1) bad_inner.fetch_add(1);
    }
  });
  EXPECT_EQ(bad_inner.load(), 0);
  for (auto& hit : hits) ASSERT_EQ(hit.load(), 1);
}

TEST(ThreadPoolTest, SeveralCallersShareOnePool) {
  ThreadPool pool(3);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&pool, &failures, c] {
      for (int repeat = 0; repeat < 100; ++repeat) {
        const int64_t n = 500 + 37 * c + repeat;
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, 3, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (auto& hit : hits) {
          if (hit.load() != 1) failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPoolTest, PoolsStartAndStopCleanly) {
  for (int repeat = 0; repeat < 20; ++repeat) {
    ThreadPool pool(ThreadPool::Options{.num_threads = 3,
                                        .spin = std::chrono::microseconds(repeat % 2 ? 0 : 50)});
    if (repeat % 3 != 0) ExpectExactCover(pool, 300, 1);
  }
}

TEST(ThreadPoolTest, DefaultPoolIsOneInstance) {
  ThreadPool& pool = DefaultThreadPool();
  EXPECT_EQ(&pool, &DefaultThreadPool());
  EXPECT_GE(pool.num_threads(), 1);
  ExpectExactCover(pool, 10000, 10);
}

}  // namespace
}  // namespace kiln::runtime
