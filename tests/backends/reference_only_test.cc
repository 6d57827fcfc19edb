// A program that links kiln_frontend and no backend library (backends/): only kiln::Reference is
// there. The other backends are reported missing, by name, wherever a program asks for them
// (KILN_DEVICE, a device of their tag), and the reference interpreter still runs graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>

#include "runtime/device.h"

namespace kiln {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

TEST(ReferenceOnlyTest, OnlyTheReferenceBackendIsAvailable) {
  EXPECT_TRUE(runtime::IsBackendAvailable(runtime::DeviceKind::kReference));
  EXPECT_FALSE(runtime::IsBackendAvailable(runtime::DeviceKind::kCpu));
  EXPECT_FALSE(runtime::IsBackendAvailable(runtime::DeviceKind::kVulkan));
  EXPECT_FALSE(runtime::IsBackendAvailable(runtime::DeviceKind::kCuda));
}

TEST(ReferenceOnlyTest, KilnDeviceErrorListsOnlyTheReference) {
  setenv("KILN_DEVICE", "cpu", 1);
  absl::StatusOr<runtime::DeviceId> id = runtime::DeviceFromEnvironment();
  unsetenv("KILN_DEVICE");
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("the cpu backend is not in this build"));
  EXPECT_THAT(std::string(id.status().message()), EndsWith("available: reference"));
}

TEST(ReferenceOnlyTest, ACpuTensorNamesTheMissingBackend) {
  try {
    auto x = Tensor<Cpu, 1>::ones({2}, Cpu::Device());
    FAIL() << "a kiln::Cpu tensor was created without the cpu backend";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the cpu backend is not in this build"));
  }
}

TEST(ReferenceOnlyTest, TheReferenceRuns) {
  Reference::Device device;
  auto x = Tensor<Reference, 2>::ones({2, 3}, device);
  EXPECT_EQ((x * 2.0f).sum().item(), 12);
}

}  // namespace
}  // namespace kiln
