// Devices and backend tags: Any reads KILN_DEVICE; tensors stay on their device.
#include <cstdlib>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Sets KILN_DEVICE (or unsets it for nullopt) for one scope, restoring the old value after.
class ScopedDeviceEnv {
 public:
  explicit ScopedDeviceEnv(std::optional<std::string> value) {
    if (const char* old = std::getenv("KILN_DEVICE")) old_ = old;
    if (value) {
      setenv("KILN_DEVICE", value->c_str(), 1);
    } else {
      unsetenv("KILN_DEVICE");
    }
  }
  ~ScopedDeviceEnv() {
    if (old_) {
      setenv("KILN_DEVICE", old_->c_str(), 1);
    } else {
      unsetenv("KILN_DEVICE");
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(AnyDeviceTest, DefaultsToReference) {
  ScopedDeviceEnv env(std::nullopt);
  Any::Device device;
  EXPECT_EQ(device.kind(), runtime::DeviceKind::kReference);
  EXPECT_EQ(device.index(), 0);
  ScopedDeviceEnv empty("");
  EXPECT_EQ(Any::Device().ToString(), "reference:0");
}

TEST(AnyDeviceTest, ReadsKilnDevice) {
  ScopedDeviceEnv env("reference:2");
  Any::Device device;
  EXPECT_EQ(device.ToString(), "reference:2");
  auto x = Tensor<Any, 1>::from_data({1.f, 2.f}, device);
  EXPECT_EQ(x.device().ToString(), "reference:2");
  EXPECT_THAT((x * 3).to_vector(), ElementsAre(3, 6));
}

TEST(AnyDeviceTest, UnknownDeviceThrows) {
  ScopedDeviceEnv env("tpu:0");
  try {
    Any::Device device;
    FAIL() << "no error for " << device.ToString();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("KILN_DEVICE"));
    EXPECT_THAT(e.what(), HasSubstr("tpu"));
  }
  ScopedDeviceEnv bad_index("reference:x");
  EXPECT_THROW(Any::Device(), Error);
}

TEST(AnyDeviceTest, BackendMissingFromTheBuildThrows) {
  for (runtime::DeviceKind kind :
       {runtime::DeviceKind::kCpu, runtime::DeviceKind::kVulkan, runtime::DeviceKind::kCuda}) {
    ScopedDeviceEnv env(runtime::DeviceKindName(kind));
    if (runtime::IsBackendAvailable(kind)) {
      EXPECT_EQ(Any::Device().kind(), kind);
    } else {
      try {
        Any::Device device;
        FAIL() << "no error for " << device.ToString();
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("not in this build"));
      }
    }
  }
}

TEST(AnyDeviceTest, AnyAcceptsEveryAvailableDevice) {
  Reference::Device reference;
  auto x = Tensor<Any, 2>::ones({2, 2}, reference);
  EXPECT_EQ(x.sum().item(), 4);
}

TEST(DeviceTest, ParseAndCompare) {
  EXPECT_EQ(Device::Parse("reference:3").index(), 3);
  EXPECT_EQ(Device::Parse("cuda").kind(), runtime::DeviceKind::kCuda);
  EXPECT_EQ(Device::Parse("reference"), Reference::Device());
  EXPECT_NE(Device::Parse("reference:1"), Reference::Device());
  EXPECT_THROW(Device::Parse("gpu"), Error);
}

TEST(DeviceTest, ToMovesBetweenDevices) {
  Reference::Device d0;
  Reference::Device d1(1);
  auto x = TF<1>::from_data({1.f, 2.f}, d0) + 1;
  auto y = x.to(d1);
  EXPECT_EQ(y.device(), d1);
  EXPECT_THAT((y * 2).to_vector(), ElementsAre(4, 6));
  EXPECT_THROW(x + y, Error);
  EXPECT_THAT((x + y.to(d0)).to_vector(), ElementsAre(4, 6));
}

}  // namespace
}  // namespace kiln::testing
