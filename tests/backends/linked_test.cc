// A program that links backend libraries (kiln_backend_cpu, kiln_backend_cuda, and
// kiln_backend_vulkan where kiln has Vulkan): their static registration makes them available with
// no call from the program, KILN_DEVICE selects them, and kiln::Cpu graphs run through the CPU
// graph compiler.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>

#include "codegen/cpu/graph_compiler.h"
#include "runtime/device.h"

namespace kiln {
namespace {

TEST(LinkedBackendsTest, LinkedBackendsAreAvailable) {
  EXPECT_TRUE(runtime::IsBackendAvailable(runtime::DeviceKind::kReference));
  EXPECT_TRUE(runtime::IsBackendAvailable(runtime::DeviceKind::kCpu));
  EXPECT_EQ(runtime::IsBackendAvailable(runtime::DeviceKind::kVulkan), KILN_TEST_HAVE_VULKAN != 0);
  // Linked on every machine: CUDA is dlopen()ed when a device is first used.
  EXPECT_TRUE(runtime::IsBackendAvailable(runtime::DeviceKind::kCuda));
}

// The error of a backend missing from the build (and the list of those present) is
// reference_only_test.cc's; here every backend kiln builds is present.
TEST(LinkedBackendsTest, KilnDeviceSelectsCudaWithoutOpeningIt) {
  setenv("KILN_DEVICE", "cuda:1", 1);
  absl::StatusOr<runtime::DeviceId> id = runtime::DeviceFromEnvironment();
  unsetenv("KILN_DEVICE");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, (runtime::DeviceId{runtime::DeviceKind::kCuda, 1}));
}

TEST(LinkedBackendsTest, KilnDeviceSelectsALinkedBackend) {
  setenv("KILN_DEVICE", "cpu:0", 1);
  absl::StatusOr<runtime::DeviceId> id = runtime::DeviceFromEnvironment();
  unsetenv("KILN_DEVICE");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->kind, runtime::DeviceKind::kCpu);
}

TEST(LinkedBackendsTest, CpuGraphsRunThroughTheCpuCompiler) {
  const int64_t compiles = codegen::cpu::GetGraphCacheStats().compiles;
  Cpu::Device device;
  // A graph of its own (a shape no other test here uses), so this realization compiles.
  auto x = Tensor<Cpu, 2>::ones({3, 7}, device);
  EXPECT_EQ((x * 2.0f + 1.0f).sum().item(), 63);
  EXPECT_GT(codegen::cpu::GetGraphCacheStats().compiles, compiles);
}

}  // namespace
}  // namespace kiln
