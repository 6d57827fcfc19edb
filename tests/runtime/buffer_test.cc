#include "runtime/buffer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

bool IsAligned(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 64 == 0; }

TEST(BufferPoolTest, SizeClassesBoundTheWaste) {
  int64_t previous = 0;
  std::vector<int64_t> sizes;
  for (int64_t bytes = 1; bytes <= 100000; ++bytes) sizes.push_back(bytes);
  for (int shift = 17; shift <= 40; ++shift) {
    for (int64_t delta : {-1, 0, 1}) sizes.push_back((int64_t{1} << shift) + delta);
  }
  for (int64_t bytes : sizes) {
    const int64_t capacity = BufferPool::SizeClassBytes(bytes);
    ASSERT_GE(capacity, bytes);
    ASSERT_EQ(capacity % 64, 0) << bytes;
    // Waste stays below a cache line for small sizes and below a quarter for large ones.
    ASSERT_LT(capacity - bytes, std::max<int64_t>(64, bytes / 4 + 1)) << bytes;
    ASSERT_GE(capacity, previous) << "classes grow with the size: " << bytes;
    previous = capacity;
  }
  EXPECT_EQ(BufferPool::SizeClassBytes(1), 64);
  EXPECT_EQ(BufferPool::SizeClassBytes(64), 64);
  EXPECT_EQ(BufferPool::SizeClassBytes(65), 128);
  EXPECT_EQ(BufferPool::SizeClassBytes(257), 320);  // 256 + 256 / 4
}

TEST(BufferPoolTest, BuffersAreAlignedAndWritable) {
  BufferPool pool;
  for (int64_t bytes : {1, 3, 63, 64, 65, 100, 1000, 4097, 1 << 20}) {
    absl::StatusOr<Buffer> buffer = pool.Allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_TRUE(IsAligned(buffer->data())) << bytes;
    EXPECT_EQ(buffer->size(), bytes);
    EXPECT_EQ(buffer->capacity(), BufferPool::SizeClassBytes(bytes));
    // The whole capacity is usable (ASan would flag an overrun).
    std::memset(buffer->data(), 0xab, buffer->capacity());
  }
}

TEST(BufferPoolTest, FreedBlocksAreReused) {
  BufferPool pool;
  absl::StatusOr<Buffer> first = pool.Allocate(1000);
  ASSERT_TRUE(first.ok());
  std::byte* const address = first->data();
  first->Reset();
  EXPECT_EQ(first->data(), nullptr);

  // 900 bytes fall into the same size class as 1000, so the block comes back.
  ASSERT_EQ(BufferPool::SizeClassBytes(900), BufferPool::SizeClassBytes(1000));
  absl::StatusOr<Buffer> second = pool.Allocate(900);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->data(), address);
  EXPECT_EQ(second->size(), 900);

  const BufferPoolStats stats = pool.stats();
  EXPECT_EQ(stats.allocations, 2);
  EXPECT_EQ(stats.reused, 1);
  EXPECT_EQ(stats.system_allocations, 1);

  // A different class does not take it.
  absl::StatusOr<Buffer> other = pool.Allocate(5000);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->data(), address);
}

TEST(BufferPoolTest, StatsTrackUseCacheAndPeak) {
  BufferPool pool;
  const int64_t a_bytes = BufferPool::SizeClassBytes(100);
  const int64_t b_bytes = BufferPool::SizeClassBytes(10000);
  {
    absl::StatusOr<Buffer> a = pool.Allocate(100);
    absl::StatusOr<Buffer> b = pool.Allocate(10000);
    ASSERT_TRUE(a.ok() && b.ok());
    const BufferPoolStats stats = pool.stats();
    EXPECT_EQ(stats.buffers_in_use, 2);
    EXPECT_EQ(stats.bytes_in_use, a_bytes + b_bytes);
    EXPECT_EQ(stats.peak_bytes_in_use, a_bytes + b_bytes);
    EXPECT_EQ(stats.bytes_cached, 0);
  }
  BufferPoolStats stats = pool.stats();
  EXPECT_EQ(stats.buffers_in_use, 0);
  EXPECT_EQ(stats.bytes_in_use, 0);
  EXPECT_EQ(stats.peak_bytes_in_use, a_bytes + b_bytes);
  EXPECT_EQ(stats.bytes_cached, a_bytes + b_bytes);

  pool.Trim(a_bytes);  // the largest blocks go first
  stats = pool.stats();
  EXPECT_EQ(stats.bytes_cached, a_bytes);
  EXPECT_EQ(stats.system_frees, 1);
  pool.Trim();
  stats = pool.stats();
  EXPECT_EQ(stats.bytes_cached, 0);
  EXPECT_EQ(stats.system_frees, 2);

  // After a trim, allocations go to the system again.
  absl::StatusOr<Buffer> again = pool.Allocate(100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(pool.stats().system_allocations, 3);
}

TEST(BufferPoolTest, CacheLimitSendsBlocksBackToTheSystem) {
  BufferPool pool(BufferPool::Options{.max_cached_bytes = 1024});
  {
    absl::StatusOr<Buffer> small = pool.Allocate(512);
    absl::StatusOr<Buffer> large = pool.Allocate(4096);
    ASSERT_TRUE(small.ok() && large.ok());
  }
  const BufferPoolStats stats = pool.stats();
  EXPECT_EQ(stats.bytes_cached, 512);
  EXPECT_EQ(stats.system_frees, 1);
}

TEST(BufferPoolTest, ZeroBytesGiveAnEmptyBuffer) {
  BufferPool pool;
  absl::StatusOr<Buffer> empty = pool.Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(pool.stats().allocations, 0);
}

TEST(BufferPoolTest, ImpossibleSizesAreResourceExhausted) {
  BufferPool pool;
  absl::StatusOr<Buffer> huge = pool.Allocate(std::numeric_limits<int64_t>::max());
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(), testing::HasSubstr("cannot allocate"));
}

TEST(BufferTest, MovesTransferOwnership) {
  BufferPool pool;
  absl::StatusOr<Buffer> allocated = pool.Allocate(256);
  ASSERT_TRUE(allocated.ok());
  std::byte* const address = allocated->data();

  Buffer moved(std::move(*allocated));
  EXPECT_EQ(moved.data(), address);
  EXPECT_EQ(allocated->data(), nullptr);  // NOLINT(bugprone-use-after-move): checks the move

  absl::StatusOr<Buffer> other = pool.Allocate(64);
  ASSERT_TRUE(other.ok());
  moved = std::move(*other);  // releases the 256-byte block
  EXPECT_EQ(pool.stats().buffers_in_use, 1);
  EXPECT_EQ(pool.stats().bytes_cached, 256);
}

TEST(BufferTest, UnpooledBuffersAreAlignedToo) {
  absl::StatusOr<Buffer> buffer = AllocateAlignedBuffer(1000);
  ASSERT_TRUE(buffer.ok());
  EXPECT_TRUE(IsAligned(buffer->data()));
  EXPECT_EQ(buffer->size(), 1000);
  std::memset(buffer->data(), 1, buffer->size());
  absl::StatusOr<Buffer> empty = AllocateAlignedBuffer(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
}

// Huge pages for large blocks (base/host_memory.h): where the system's THP mode is "madvise" a
// block gets them only if kiln asks; "always" gives them anyway and "never" not at all.
int64_t AnonHugePagesKiB(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::atoll(line.c_str() + std::strlen("AnonHugePages:"));
    }
  }
  return -1;
}

TEST(BufferPoolTest, LargeBlocksAreHugePageAlignedAndAdvised) {
  BufferPool pool;
  absl::StatusOr<Buffer> large = pool.Allocate(16 << 20);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large->data()) % (2 << 20), 0u);
  absl::StatusOr<Buffer> unpooled = AllocateAlignedBuffer(8 << 20);
  ASSERT_TRUE(unpooled.ok()) << unpooled.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(unpooled->data()) % (2 << 20), 0u);

  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here (" << mode << ")";
  }
  std::memset(large->data(), 1, static_cast<size_t>(large->size()));
  EXPECT_GE(AnonHugePagesKiB(large->data()), 2048) << "THP mode: " << mode;
}

TEST(BufferPoolTest, ConcurrentUseKeepsBlocksPrivate) {
  BufferPool pool;
  std::vector<std::thread> threads;
  std::atomic<int> corrupted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &corrupted, t] {
      std::mt19937 random(t);
      std::vector<Buffer> held;
      for (int i = 0; i < 2000; ++i) {
        const int64_t bytes = 1 + random() % 5000;
        absl::StatusOr<Buffer> buffer = pool.Allocate(bytes);
        if (!buffer.ok()) {
          corrupted.fetch_add(1);
          continue;
        }
        std::memset(buffer->data(), t + 1, bytes);
        held.push_back(*std::move(buffer));
        if (held.size() > 8) {
          const size_t victim = random() % held.size();
          for (int64_t j = 0; j < held[victim].size(); ++j) {
            if (held[victim].data()[j] != static_cast<std::byte>(t + 1)) {
              corrupted.fetch_add(1);
              break;
            }
          }
          held.erase(held.begin() + victim);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(corrupted.load(), 0);
  const BufferPoolStats stats = pool.stats();
  EXPECT_EQ(stats.buffers_in_use, 0);
  EXPECT_EQ(stats.allocations, 4 * 2000);
  EXPECT_GT(stats.reused, 0);
}

TEST(BufferPoolDeathTest, DestroyingAPoolWithLiveBuffersAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto* pool = new BufferPool();
        Buffer kept = *pool->Allocate(100);
        delete pool;
      },
      "destroyed while 1 of its buffers");
}

}  // namespace
}  // namespace kiln::runtime
