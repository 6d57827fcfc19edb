// A program that links backend libraries (kiln_backend_cpu, and kiln_backend_vulkan where kiln has
// Vulkan): their static registration makes them available with no call from the program,
// KILN_DEVICE errors list them, and kiln::Cpu graphs run through the CPU graph compiler.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>

#include "codegen/cpu/graph_compiler.h"
#include "runtime/device.h"

namespace kiln {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

TEST(LinkedBackendsTest, LinkedBackendsAreAvailable) {
  EXPECT_TRUE(runtime::IsBackendAvailable(runtime::DeviceKind::kReference));
  EXPECT_TRUE(runtime::IsBackendAvailable(runtime::DeviceKind::kCpu));
  EXPECT_EQ(runtime::IsBackendAvailable(runtime::DeviceKind::kVulkan), KILN_TEST_HAVE_VULKAN != 0);
  EXPECT_FALSE(runtime::IsBackendAvailable(runtime::DeviceKind::kCuda));
}

TEST(LinkedBackendsTest, KilnDeviceErrorListsTheLinkedBackends) {
  setenv("KILN_DEVICE", "cuda", 1);
  absl::StatusOr<runtime::DeviceId> id = runtime::DeviceFromEnvironment();
  unsetenv("KILN_DEVICE");
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("the cuda backend is not in this build"));
  EXPECT_THAT(std::string(id.status().message()),
              EndsWith(KILN_TEST_HAVE_VULKAN ? "available: reference, cpu, vulkan"
                                             : "available: reference, cpu"));
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
