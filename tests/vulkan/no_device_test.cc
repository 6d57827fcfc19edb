// Without a Vulkan device (this test's CTest environment points the loader at a driver file that
// does not exist), realizing a kiln::Vulkan tensor throws a kiln::Error that says there is no
// Vulkan device and suggests the CPU backend; the same program runs on kiln::Cpu.
#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(VulkanNoDeviceTest, RealizingSaysSoAndSuggestsTheCpuBackend) {
  const Vulkan::Device device;
  const auto x = Tensor<Vulkan, 1>::from_vector(std::vector<float>{1, 2, 3}, {3}, device);
  try {
    const std::vector<float> y = (x * 2.0f).to_vector<float>();
    FAIL() << "no error; got " << y.size() << " values";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Vulkan"));
    EXPECT_THAT(e.what(), HasSubstr("no Vulkan"));
    EXPECT_THAT(e.what(), HasSubstr("KILN_DEVICE=cpu"));
  }
  const Cpu::Device cpu;
  const auto z = Tensor<Cpu, 1>::from_vector(std::vector<float>{1, 2, 3}, {3}, cpu);
  EXPECT_EQ((z * 2.0f).to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

}  // namespace
}  // namespace kiln
