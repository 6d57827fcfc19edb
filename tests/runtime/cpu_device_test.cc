#include "runtime/cpu_device.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "tests/runtime/test_kernels.h"

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> AsBytes(const std::vector<float>& values) {
  return std::as_bytes(std::span<const float>(values));
}

TEST(CpuDeviceTest, IdentifiesItself) {
  CpuDevice device(CpuDevice::Options{.index = 2});
  EXPECT_EQ(device.id(), (DeviceId{DeviceKind::kCpu, 2}));
  EXPECT_EQ(CpuDevice::Default().id().ToString(), "cpu:0");
  EXPECT_EQ(&CpuDevice::Default(), &CpuDevice::Default());
}

TEST(CpuDeviceTest, UsesTheGivenOrItsOwnOrTheDefaultPools) {
  CpuDevice shared;
  EXPECT_EQ(&shared.threads(), &DefaultThreadPool());
  EXPECT_EQ(&shared.buffers(), &DefaultBufferPool());

  CpuDevice owning(CpuDevice::Options{.num_threads = 3});
  EXPECT_EQ(owning.threads().num_threads(), 3);
  EXPECT_NE(&owning.threads(), &DefaultThreadPool());

  ThreadPool threads(2);
  BufferPool buffers;
  CpuDevice borrowing(CpuDevice::Options{.threads = &threads, .buffers = &buffers});
  EXPECT_EQ(&borrowing.threads(), &threads);
  EXPECT_EQ(&borrowing.buffers(), &buffers);
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer = borrowing.Allocate(100);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(buffers.stats().buffers_in_use, 1);
}

TEST(CpuDeviceTest, BuffersRoundTripThroughTheInterface) {
  CpuDevice cpu;
  Device& device = cpu;
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer = device.Allocate(40);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  DeviceBuffer& storage = **buffer;
  EXPECT_EQ(storage.size(), 40);
  EXPECT_EQ(&storage.device(), &device);
  ASSERT_NE(storage.host_data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(storage.host_data()) % kBufferAlignment, 0u);

  const std::vector<float> values = {1, 2, 3, 4, 5};
  ASSERT_TRUE(device.CopyToDevice(AsBytes(values), storage, 8).ok());
  std::vector<float> back(5);
  ASSERT_TRUE(device.CopyFromDevice(storage, 8, std::as_writable_bytes(std::span(back))).ok());
  EXPECT_EQ(back, values);
  ASSERT_TRUE(device.Synchronize().ok());
}

TEST(CpuDeviceTest, CopiesOutsideTheBufferAreRejected) {
  CpuDevice device;
  std::unique_ptr<DeviceBuffer> buffer = *device.Allocate(16);
  const std::vector<float> values(5);
  absl::Status status = device.CopyToDevice(AsBytes(values), *buffer, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("cpu:0: CopyToDevice of 20 bytes at offset 0 does not fit a buffer of 16"));

  std::vector<std::byte> out(8);
  status = device.CopyFromDevice(*buffer, 12, out);
  EXPECT_THAT(status.message(), HasSubstr("CopyFromDevice of 8 bytes at offset 12"));
  status = device.CopyFromDevice(*buffer, -1, std::span<std::byte>(out.data(), 1));
  EXPECT_THAT(status.message(), HasSubstr("at offset -1"));

  CpuDevice other(CpuDevice::Options{.index = 1});
  status = other.CopyFromDevice(*buffer, 0, out);
  EXPECT_THAT(status.message(), HasSubstr("cpu:1: CopyFromDevice got a buffer of another device "
                                          "(cpu:0)"));
}

ExecutableSpec ScaleSpec(int64_t n) {
  ExecutableSpec spec;
  spec.name = "scale";
  spec.num_inputs = 1;
  spec.num_outputs = 1;
  spec.num_scalars = 1;
  spec.slots = {Slot::Input(0, n * 4), Slot::Output(0, n * 4), Slot::Scalar(0, 4)};
  spec.steps = {Step{testing::ScaleKernel, {0, 1, 2}, n, 16, "scale", ""}};
  return spec;
}

TEST(CpuDeviceTest, RunsExecutablesOnDeviceBuffers) {
  constexpr int64_t n = 300;
  absl::StatusOr<Executable> exe = Executable::Create(ScaleSpec(n));
  ASSERT_TRUE(exe.ok()) << exe.status();
  CpuDevice cpu(CpuDevice::Options{.num_threads = 2});
  Device& device = cpu;

  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) - 100.0f;
  std::unique_ptr<DeviceBuffer> in = *device.Allocate(n * 4);
  std::unique_ptr<DeviceBuffer> out = *device.Allocate(n * 4);
  ASSERT_TRUE(device.CopyToDevice(AsBytes(values), *in, 0).ok());
  const float scale = -2.0f;
  const DeviceBuffer* inputs[] = {in.get()};
  DeviceBuffer* outputs[] = {out.get()};
  const void* scalars[] = {&scale};
  ASSERT_TRUE(device.Run(*exe, inputs, outputs, scalars).ok());

  std::vector<float> result(n);
  ASSERT_TRUE(device.CopyFromDevice(*out, 0, std::as_writable_bytes(std::span(result))).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(result[i], values[i] * scale) << i;

  // The host-pointer path gives the same.
  std::vector<float> direct(n);
  const void* host_inputs[] = {values.data()};
  void* host_outputs[] = {direct.data()};
  ASSERT_TRUE(cpu.RunHost(*exe, host_inputs, host_outputs, scalars).ok());
  EXPECT_EQ(direct, result);
}

TEST(CpuDeviceTest, RunChecksTheBuffers) {
  absl::StatusOr<Executable> exe = Executable::Create(ScaleSpec(100));
  ASSERT_TRUE(exe.ok()) << exe.status();
  CpuDevice device;
  CpuDevice other(CpuDevice::Options{.index = 1});
  std::unique_ptr<DeviceBuffer> big = *device.Allocate(400);
  std::unique_ptr<DeviceBuffer> small = *device.Allocate(396);
  std::unique_ptr<DeviceBuffer> foreign = *other.Allocate(400);
  const float scale = 1.0f;
  const void* scalars[] = {&scale};
  DeviceBuffer* outputs[] = {big.get()};

  const DeviceBuffer* too_small[] = {small.get()};
  absl::Status status = device.Run(*exe, too_small, outputs, scalars);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("executable \"scale\" input 0 of 400 bytes at offset 0 "
                                          "does not fit a buffer of 396 bytes"));

  const DeviceBuffer* null_input[] = {nullptr};
  status = device.Run(*exe, null_input, outputs, scalars);
  EXPECT_THAT(status.message(), HasSubstr("executable \"scale\" input 0 is null"));

  const DeviceBuffer* foreign_input[] = {foreign.get()};
  status = device.Run(*exe, foreign_input, outputs, scalars);
  EXPECT_THAT(status.message(), HasSubstr("got a buffer of another device (cpu:1)"));

  status = device.Run(*exe, {}, outputs, scalars);
  EXPECT_THAT(status.message(), HasSubstr("takes 1 inputs and 1 outputs, got 0 and 1"));
}

}  // namespace
}  // namespace kiln::runtime
