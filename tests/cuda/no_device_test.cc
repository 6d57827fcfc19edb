// Without a CUDA driver (this test's CTest environment points KILN_CUDA_DRIVER at a file that
// does not exist, so it behaves the same on a GPU server), a kiln::Cuda device is not available
// and realizing a kiln::Cuda tensor throws a kiln::Error that says there is no CUDA driver and
// suggests the CPU backend; the same program runs on kiln::Cpu.
#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(CudaNoDeviceTest, IsAvailableSaysWhyNot) {
  std::string reason;
  EXPECT_FALSE(Cuda::Device().is_available(&reason));
  EXPECT_THAT(reason, HasSubstr("CUDA driver"));
  EXPECT_THAT(reason, HasSubstr("KILN_DEVICE=cpu"));
  EXPECT_TRUE(Cpu::Device().is_available());
}

TEST(CudaNoDeviceTest, RealizingSaysSoAndSuggestsTheCpuBackend) {
  const Cuda::Device device;
  const auto x = Tensor<Cuda, 1>::from_vector(std::vector<float>{1, 2, 3}, {3}, device);
  try {
    const std::vector<float> y = (x * 2.0f).to_vector<float>();
    FAIL() << "no error; got " << y.size() << " values";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kiln::Cuda"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA driver"));
    EXPECT_THAT(e.what(), HasSubstr("KILN_DEVICE=cpu"));
  }
  const Cpu::Device cpu;
  const auto z = Tensor<Cpu, 1>::from_vector(std::vector<float>{1, 2, 3}, {3}, cpu);
  EXPECT_EQ((z * 2.0f).to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

}  // namespace
}  // namespace kiln
