// The runtime::Device contract (runtime/device.h), written once and run on every driver: buffers
// (allocation, copies in and out at offsets, range and ownership checks), running an executable
// on device buffers (results, argument checks, executables of another driver refused),
// synchronisation, concurrent use from several threads, the transfer counters, and the caching
// allocator on the driver's buffers. A driver's test binary includes this
// header once (it defines the tests) and instantiates the suite with its DeviceUnderTest:
//   INSTANTIATE_TEST_SUITE_P(Cpu, DeviceConformance, ::testing::Values(CpuUnderTest()), Name);
// tests/runtime/device_conformance_test.cc (cpu), tests/runtime/vulkan/
// device_conformance_vulkan_test.cc (vulkan, unified and staging memory) and
// tests/runtime/cuda/device_conformance_cuda_test.cc (cuda; skips without a GPU) do.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/caching_allocator.h"
#include "runtime/device.h"

namespace kiln::runtime::conformance {

/// One driver as the suite sees it.
struct DeviceUnderTest {
  std::string name;  // the instantiation's name: "cpu", "vulkan_staging"
  DeviceKind kind = DeviceKind::kCpu;
  /// The device under test, alive for the whole process.
  std::function<Device*()> device;
  /// Another device of the same driver (its buffers are foreign to `device`).
  std::function<Device*()> other;
  /// An executable for `device`: out = a + b over n floats (inputs 0 and 1, output 0).
  std::function<absl::StatusOr<std::shared_ptr<const DeviceExecutable>>(Device&, int64_t n)>
      make_add;
  /// Whether the driver can run here; empty: always. When it returns an error, every case skips
  /// with its message (the CUDA driver's instantiation on a machine without a GPU).
  std::function<absl::Status()> available;
};

/// Prints a DeviceUnderTest as its name (gtest and ctest show it in test names).
inline void PrintTo(const DeviceUnderTest& under_test, std::ostream* os) { *os << under_test.name; }

/// gtest's name for an instantiation: DeviceUnderTest::name.
inline std::string Name(const ::testing::TestParamInfo<DeviceUnderTest>& info) {
  return info.param.name;
}

class DeviceConformance : public ::testing::TestWithParam<DeviceUnderTest> {
 protected:
  void SetUp() override {
    if (!GetParam().available) return;
    if (absl::Status status = GetParam().available(); !status.ok()) {
      GTEST_SKIP() << status.message();
    }
  }

  Device& device() { return *GetParam().device(); }

  std::unique_ptr<DeviceBuffer> Allocate(int64_t bytes) {
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer = device().Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    return buffer.ok() ? *std::move(buffer) : nullptr;
  }

  std::shared_ptr<const DeviceExecutable> Add(int64_t n) {
    absl::StatusOr<std::shared_ptr<const DeviceExecutable>> exe = GetParam().make_add(device(), n);
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? *exe : nullptr;
  }

  void Upload(const std::vector<float>& values, DeviceBuffer& buffer) {
    ASSERT_TRUE(device().CopyToDevice(std::as_bytes(std::span(values)), buffer, 0).ok());
  }

  std::vector<float> Download(const DeviceBuffer& buffer, int64_t n) {
    std::vector<float> values(static_cast<size_t>(n));
    absl::Status s = device().CopyFromDevice(buffer, 0, std::as_writable_bytes(std::span(values)));
    EXPECT_TRUE(s.ok()) << s;
    return values;
  }
};

// A DeviceExecutable of no driver: what a device must refuse to run.
class ForeignExecutable final : public DeviceExecutable {
 public:
  DeviceKind kind() const override { return DeviceKind::kReference; }
  const std::string& name() const override { return name_; }
  int num_inputs() const override { return 2; }
  int num_outputs() const override { return 1; }
  int num_scalars() const override { return 0; }
  int64_t input_bytes(int) const override { return 16; }
  int64_t output_bytes(int) const override { return 16; }

 private:
  std::string name_ = "foreign";
};

std::vector<float> Ramp(int64_t n, float start, float step) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = start + step * i;
  return values;
}

TEST_P(DeviceConformance, IdNamesTheDriver) {
  EXPECT_EQ(device().id().kind, GetParam().kind);
  EXPECT_NE(&device(), GetParam().other());
}

TEST_P(DeviceConformance, CopiesRoundTripAtOffsets) {
  std::unique_ptr<DeviceBuffer> buffer = Allocate(1000);
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(buffer->size(), 1000);
  EXPECT_EQ(&buffer->device(), &device());
  std::vector<std::byte> pattern(300);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::byte>(i * 7 + 1);
  ASSERT_TRUE(device().CopyToDevice(pattern, *buffer, 0).ok());
  ASSERT_TRUE(device().CopyToDevice(pattern, *buffer, 700).ok());
  std::vector<std::byte> back(300);
  ASSERT_TRUE(device().CopyFromDevice(*buffer, 700, back).ok());
  EXPECT_EQ(back, pattern);
  // A read straddling both writes: the tail of the first and bytes written by neither are not
  // compared; the overlap with the second write is.
  std::vector<std::byte> tail(100);
  ASSERT_TRUE(device().CopyFromDevice(*buffer, 900, tail).ok());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), pattern.begin() + 200));
  // Empty copies and empty buffers are fine.
  ASSERT_TRUE(device().CopyToDevice({}, *buffer, 1000).ok());
  std::unique_ptr<DeviceBuffer> empty = Allocate(0);
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->size(), 0);
  EXPECT_TRUE(device().CopyFromDevice(*empty, 0, {}).ok());
}

TEST_P(DeviceConformance, LargeBuffersRoundTrip) {
  // Larger than the Vulkan driver's 32 MiB threshold for a memory block of its own.
  constexpr int64_t n = 10 << 20;
  std::unique_ptr<DeviceBuffer> buffer = Allocate(n * 4);
  ASSERT_NE(buffer, nullptr);
  const std::vector<float> values = Ramp(n, -1.0f, 0.25f);
  Upload(values, *buffer);
  EXPECT_EQ(Download(*buffer, n), values);
}

TEST_P(DeviceConformance, RejectsRangesOutsideTheBuffer) {
  std::unique_ptr<DeviceBuffer> buffer = Allocate(64);
  ASSERT_NE(buffer, nullptr);
  std::vector<std::byte> bytes(16);
  for (int64_t offset : {int64_t{-1}, int64_t{49}, int64_t{1} << 62}) {
    absl::Status to = device().CopyToDevice(bytes, *buffer, offset);
    EXPECT_EQ(to.code(), absl::StatusCode::kInvalidArgument) << offset;
    EXPECT_THAT(to.message(), ::testing::HasSubstr("does not fit a buffer of 64 bytes"));
    EXPECT_EQ(device().CopyFromDevice(*buffer, offset, bytes).code(),
              absl::StatusCode::kInvalidArgument)
        << offset;
  }
  EXPECT_EQ(device().Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(DeviceConformance, RejectsBuffersOfAnotherDevice) {
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> foreign = GetParam().other()->Allocate(64);
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  std::vector<std::byte> bytes(16);
  absl::Status s = device().CopyToDevice(bytes, **foreign, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("a buffer of another device"));
  EXPECT_EQ(device().CopyFromDevice(**foreign, 0, bytes).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(DeviceConformance, RunsAnExecutableOnItsBuffers) {
  constexpr int64_t n = 1000;
  std::shared_ptr<const DeviceExecutable> add = Add(n);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->kind(), GetParam().kind);
  EXPECT_EQ(add->num_inputs(), 2);
  EXPECT_EQ(add->num_outputs(), 1);
  EXPECT_EQ(add->input_bytes(0), n * 4);
  EXPECT_EQ(add->output_bytes(0), n * 4);
  std::unique_ptr<DeviceBuffer> a = Allocate(n * 4), b = Allocate(n * 4), out = Allocate(n * 4);
  const std::vector<float> x = Ramp(n, 0.5f, 1.0f), y = Ramp(n, -3.0f, 0.5f);
  Upload(x, *a);
  Upload(y, *b);
  const DeviceBuffer* inputs[] = {a.get(), b.get()};
  DeviceBuffer* outputs[] = {out.get()};
  ASSERT_TRUE(device().Run(*add, inputs, outputs, {}).ok());
  ASSERT_TRUE(device().Synchronize().ok());
  const std::vector<float> sum = Download(*out, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], x[i] + y[i]) << i;
  // The inputs are unchanged, and a second run on the result chains on the device.
  EXPECT_EQ(Download(*a, n), x);
  const DeviceBuffer* again[] = {out.get(), b.get()};
  DeviceBuffer* into[] = {a.get()};
  ASSERT_TRUE(device().Run(*add, again, into, {}).ok());
  const std::vector<float> twice = Download(*a, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(twice[i], sum[i] + y[i]) << i;
}

TEST_P(DeviceConformance, RunChecksItsArguments) {
  std::shared_ptr<const DeviceExecutable> add = Add(100);
  ASSERT_NE(add, nullptr);
  std::unique_ptr<DeviceBuffer> big = Allocate(400), small = Allocate(396);
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> foreign = GetParam().other()->Allocate(400);
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  DeviceBuffer* outputs[] = {big.get()};
  auto expect = [&](std::span<const DeviceBuffer* const> inputs, const char* message) {
    absl::Status s = device().Run(*add, inputs, outputs, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(s.message(), ::testing::HasSubstr(message));
  };
  const DeviceBuffer* too_small[] = {big.get(), small.get()};
  expect(too_small, "input 1 of 400 bytes at offset 0 does not fit a buffer of 396 bytes");
  const DeviceBuffer* null_input[] = {nullptr, big.get()};
  expect(null_input, "input 0 is null");
  const DeviceBuffer* foreign_input[] = {foreign->get(), big.get()};
  expect(foreign_input, "a buffer of another device");
  const DeviceBuffer* one[] = {big.get()};
  expect(one, "takes 2 inputs and 1 outputs, got 1 and 1");
}

TEST_P(DeviceConformance, RefusesExecutablesOfAnotherDriver) {
  std::unique_ptr<DeviceBuffer> a = Allocate(16), b = Allocate(16), out = Allocate(16);
  const DeviceBuffer* inputs[] = {a.get(), b.get()};
  DeviceBuffer* outputs[] = {out.get()};
  absl::Status s = device().Run(ForeignExecutable(), inputs, outputs, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              ::testing::HasSubstr("executable \"foreign\" is a reference executable"));
}

TEST_P(DeviceConformance, RunsFromSeveralThreadsAtOnce) {
  constexpr int64_t n = 4096;
  std::shared_ptr<const DeviceExecutable> add = Add(n);
  ASSERT_NE(add, nullptr);
  constexpr int kThreads = 4, kRuns = 8;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<DeviceBuffer> a = *device().Allocate(n * 4), b = *device().Allocate(n * 4),
                                    out = *device().Allocate(n * 4);
      const std::vector<float> x = Ramp(n, static_cast<float>(t), 1.0f), y = Ramp(n, 1.0f, 0.0f);
      (void)device().CopyToDevice(std::as_bytes(std::span(y)), *b, 0);
      for (int r = 0; r < kRuns; ++r) {
        (void)device().CopyToDevice(std::as_bytes(std::span(x)), *a, 0);
        const DeviceBuffer* inputs[] = {a.get(), b.get()};
        DeviceBuffer* outputs[] = {out.get()};
        if (!device().Run(*add, inputs, outputs, {}).ok()) {
          ++wrong[t];
          continue;
        }
        std::vector<float> sum(static_cast<size_t>(n));
        (void)device().CopyFromDevice(*out, 0, std::as_writable_bytes(std::span(sum)));
        for (int64_t i = 0; i < n; ++i) {
          if (sum[i] != x[i] + 1.0f) {
            ++wrong[t];
            break;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(kThreads, 0));
  EXPECT_TRUE(device().Synchronize().ok());
}

TEST_P(DeviceConformance, CountsCopiesAndNothingForRuns) {
  constexpr int64_t n = 256;
  std::shared_ptr<const DeviceExecutable> add = Add(n);
  ASSERT_NE(add, nullptr);
  std::unique_ptr<DeviceBuffer> a = Allocate(n * 4), b = Allocate(n * 4), out = Allocate(n * 4);
  const TransferStats start = device().transfer_stats();
  Upload(Ramp(n, 1.0f, 1.0f), *a);
  Upload(Ramp(n, 2.0f, 0.0f), *b);
  const TransferStats uploaded = device().transfer_stats();
  EXPECT_EQ(uploaded.host_to_device_bytes - start.host_to_device_bytes, 2 * n * 4);
  EXPECT_EQ(uploaded.host_to_device_copies - start.host_to_device_copies, 2);
  // A run on device buffers reads and writes them where they are.
  const DeviceBuffer* inputs[] = {a.get(), b.get()};
  DeviceBuffer* outputs[] = {out.get()};
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(device().Run(*add, inputs, outputs, {}).ok());
  const TransferStats ran = device().transfer_stats();
  EXPECT_EQ(ran.host_to_device_bytes, uploaded.host_to_device_bytes);
  EXPECT_EQ(ran.device_to_host_bytes, uploaded.device_to_host_bytes);
  EXPECT_EQ(Download(*out, n)[3], 6.0f);
  const TransferStats read = device().transfer_stats();
  EXPECT_EQ(read.device_to_host_bytes - ran.device_to_host_bytes, n * 4);
  EXPECT_EQ(read.device_to_host_copies - ran.device_to_host_copies, 1);
}

TEST_P(DeviceConformance, CachingAllocatorReusesFreedBuffers) {
  // Not owned: the device lives for the whole process.
  std::shared_ptr<Device> device_ref(&device(), [](Device*) {});
  std::shared_ptr<CachingAllocator> allocator = CachingAllocator::Create(device_ref);
  EXPECT_EQ(&allocator->device(), &device());
  const DeviceBuffer* first = nullptr;
  {
    absl::StatusOr<std::shared_ptr<DeviceBuffer>> buffer = allocator->Allocate(1000);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_GE((*buffer)->size(), 1000);
    EXPECT_EQ(&(*buffer)->device(), &device());
    first = buffer->get();
    EXPECT_EQ(allocator->stats().bytes_in_use, (*buffer)->size());
  }
  AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.bytes_in_use, 0);
  EXPECT_EQ(stats.bytes_cached, BufferPool::SizeClassBytes(1000));
  // The same size class comes back from the cache; another class reaches the driver.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> again = allocator->Allocate(990);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), first);
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> other = allocator->Allocate(100000);
  ASSERT_TRUE(other.ok()) << other.status();
  stats = allocator->stats();
  EXPECT_EQ(stats.allocations, 3);
  EXPECT_EQ(stats.reused, 1);
  EXPECT_EQ(stats.system_allocations, 2);
  EXPECT_EQ(stats.buffers_in_use, 2);
  EXPECT_EQ(stats.peak_bytes_in_use, stats.bytes_in_use);
  // A cached buffer is a working buffer of the device.
  const std::vector<float> values = Ramp(200, 1.0f, 0.25f);
  Upload(values, **again);
  EXPECT_EQ(Download(**again, 200), values);
  other->reset();
  allocator->EmptyCache();
  stats = allocator->stats();
  EXPECT_EQ(stats.bytes_cached, 0);
  EXPECT_EQ(stats.system_frees, 1);
  // A buffer may outlive its allocator: it then goes straight back to the driver.
  allocator.reset();
  Upload(values, **again);
  again->reset();
}

}  // namespace kiln::runtime::conformance
