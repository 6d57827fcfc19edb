// KILN_DUMP on the Vulkan backend: realizing a softmax writes one folder per compile with the
// kernel IR, the GLSL and the SPIR-V disassembly of its one fused kernel. A short-row softmax
// runs one invocation per row; a long-row one runs one workgroup per row, combining the row's
// max and sum through shared memory (barriers in the GLSL, OpControlBarrier in the SPIR-V).
#include <kiln/kiln.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/vulkan/graph_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Realizes softmax over rows of `cols` with KILN_DUMP set; checks the values and returns the one
// dump folder.
fs::path DumpSoftmax(int rows, int cols, const std::string& tag) {
  const fs::path root =
      fs::temp_directory_path() / ("kiln_vulkan_dump_test_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(root);
  EXPECT_EQ(setenv("KILN_DUMP", root.c_str(), 1), 0);
  const Vulkan::Device device;
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i));
  const std::vector<float> result =
      activation::softmax(Tensor<Vulkan, 2>::from_vector(values, {rows, cols}, device), 1)
          .to_vector<float>();
  unsetenv("KILN_DUMP");
  EXPECT_EQ(result.size(), values.size());
  for (int row = 0; row < rows; ++row) {
    double max = -INFINITY, sum = 0;
    for (int j = 0; j < cols; ++j) max = std::max<double>(max, values[row * cols + j]);
    for (int j = 0; j < cols; ++j) sum += std::exp(values[row * cols + j] - max);
    for (int j = 0; j < cols; ++j) {
      EXPECT_NEAR(result[row * cols + j], std::exp(values[row * cols + j] - max) / sum, 1e-6);
    }
  }
  std::vector<fs::path> folders;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) folders.push_back(entry.path());
  }
  EXPECT_EQ(folders.size(), 1u);
  return folders.empty() ? root : folders[0];
}

void ExpectOneKernelShader(const fs::path& dir) {
  // One fused kernel: kernel_0.{kir,glsl,spvasm} and no kernel_1.
  ASSERT_TRUE(fs::exists(dir / "kernel_0.kir"));
  ASSERT_TRUE(fs::exists(dir / "kernel_0.glsl"));
  ASSERT_TRUE(fs::exists(dir / "kernel_0.spvasm"));
  EXPECT_FALSE(fs::exists(dir / "kernel_1.glsl"));
  for (const char* name : {"fusion.txt", "memory_plan.txt", "executable.txt"}) {
    EXPECT_TRUE(fs::exists(dir / name)) << name;
  }
  const std::string kir = ReadFile(dir / "kernel_0.kir");
  EXPECT_THAT(kir, HasSubstr("reduce max.f32"));
  EXPECT_THAT(kir, HasSubstr("reduce sum.f32"));

  const std::string glsl = ReadFile(dir / "kernel_0.glsl");
  EXPECT_THAT(glsl, HasSubstr("#version 450"));
  EXPECT_THAT(glsl, HasSubstr("layout(local_size_x = 64"));
  EXPECT_THAT(glsl, HasSubstr("layout(std430, set = 0, binding = 0) readonly buffer Arg0"));
  EXPECT_THAT(glsl, HasSubstr("layout(std430, set = 0, binding = 1) buffer Arg1"));
  EXPECT_THAT(glsl, HasSubstr("void main()"));
  EXPECT_THAT(glsl, HasSubstr("int64_t gid"));

  const std::string spvasm = ReadFile(dir / "kernel_0.spvasm");
  EXPECT_THAT(spvasm, HasSubstr("OpEntryPoint GLCompute %main \"main\""));
  EXPECT_THAT(spvasm, HasSubstr("OpExecutionMode %main LocalSize 64 1 1"));
  EXPECT_THAT(spvasm, HasSubstr("OpDecorate %a0 Binding 0"));
  EXPECT_THAT(spvasm, HasSubstr("OpDecorate %a1 Binding 1"));
  EXPECT_THAT(spvasm, HasSubstr("OpCapability Int64"));

  const std::string executable = ReadFile(dir / "executable.txt");
  EXPECT_THAT(executable, HasSubstr("1 dispatch"));
}

TEST(VulkanDumpTest, ShortRowSoftmaxIsOneThreadPerRowShader) {
  const fs::path dir = DumpSoftmax(5, 7, "short");
  ExpectOneKernelShader(dir);
  const std::string glsl = ReadFile(dir / "kernel_0.glsl");
  EXPECT_THAT(glsl, Not(HasSubstr("barrier()")));
  EXPECT_THAT(glsl, HasSubstr("if (gid < 5l)"));
  fs::remove_all(dir.parent_path());
}

TEST(VulkanDumpTest, LongRowSoftmaxReducesThroughSharedMemory) {
  const fs::path dir = DumpSoftmax(3, 1000, "long");
  ExpectOneKernelShader(dir);
  const std::string glsl = ReadFile(dir / "kernel_0.glsl");
  EXPECT_THAT(glsl, HasSubstr("shared float red_v"));
  EXPECT_THAT(glsl, HasSubstr("barrier();"));
  EXPECT_THAT(glsl, HasSubstr("int64_t lid"));
  const std::string spvasm = ReadFile(dir / "kernel_0.spvasm");
  EXPECT_THAT(spvasm, HasSubstr("OpControlBarrier"));
  EXPECT_THAT(spvasm, HasSubstr("Workgroup"));
  // With the device's subgroup arithmetic (lavapipe has it) the max and the sum combine within
  // subgroups before the shared-memory step.
  absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
      codegen::vulkan::DeviceForIndex(0);
  ASSERT_TRUE(device.ok()) << device.status();
  if ((*device)->info().subgroup_arithmetic) {
    EXPECT_THAT(glsl, HasSubstr("GL_KHR_shader_subgroup_arithmetic"));
    EXPECT_THAT(glsl, HasSubstr("subgroupMax("));
    EXPECT_THAT(glsl, HasSubstr("subgroupAdd("));
    EXPECT_THAT(spvasm, HasSubstr("OpGroupNonUniformFMax"));
    EXPECT_THAT(spvasm, HasSubstr("OpGroupNonUniformFAdd"));
  }
  fs::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace kiln
