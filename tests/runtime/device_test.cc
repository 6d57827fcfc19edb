#include "runtime/device.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;

TEST(DeviceIdTest, ParsesNamesAndIndices) {
  auto cpu = ParseDeviceId("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(*cpu, (DeviceId{DeviceKind::kCpu, 0}));

  auto cuda = ParseDeviceId("cuda:3");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(*cuda, (DeviceId{DeviceKind::kCuda, 3}));
  EXPECT_EQ(cuda->ToString(), "cuda:3");
}

TEST(DeviceIdTest, ToStringRoundTrips) {
  for (DeviceKind kind :
       {DeviceKind::kReference, DeviceKind::kCpu, DeviceKind::kVulkan, DeviceKind::kCuda}) {
    const DeviceId id{kind, 2};
    auto parsed = ParseDeviceId(id.ToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, id);
  }
}

TEST(DeviceIdTest, RejectsUnknownNamesAndBadIndices) {
  auto unknown = ParseDeviceId("tpu");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown device \"tpu\""));
  EXPECT_THAT(unknown.status().message(), HasSubstr("reference, cpu, vulkan, cuda"));

  for (const char* bad : {"cpu:", "cpu:x", "cpu:-1"}) {
    auto parsed = ParseDeviceId(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("index must be a number")) << bad;
  }
}

class EnvironmentTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("KILN_DEVICE"); }
};

TEST_F(EnvironmentTest, UnsetGivesTheFallback) {
  unsetenv("KILN_DEVICE");
  auto id = DeviceFromEnvironment();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->kind, DeviceKind::kReference);
}

TEST_F(EnvironmentTest, ReadsTheVariable) {
  setenv("KILN_DEVICE", "reference:1", 1);
  auto id = DeviceFromEnvironment();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, (DeviceId{DeviceKind::kReference, 1}));
}

TEST_F(EnvironmentTest, ExplainsABackendMissingFromThisBuild) {
  // This test links no backend library (kiln_backend_cuda registers CUDA); the message must say
  // what is there.
  ASSERT_FALSE(IsBackendAvailable(DeviceKind::kCuda));
  setenv("KILN_DEVICE", "cuda", 1);
  auto id = DeviceFromEnvironment();
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("KILN_DEVICE=cuda"));
  EXPECT_THAT(id.status().message(), HasSubstr("available: reference"));
}

TEST_F(EnvironmentTest, NamesTheVariableOnAParseError) {
  setenv("KILN_DEVICE", "gpu", 1);
  auto id = DeviceFromEnvironment();
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("KILN_DEVICE: unknown device \"gpu\""));
}

}  // namespace
}  // namespace kiln::runtime
