// The Vulkan backend (codegen/vulkan: GLSL → SPIR-V, the tiled matmul; run on the machine's
// Vulkan device, lavapipe in CI) as the conformance suite's backend under test
// (tests/conformance/backend_under_test.h).
#include "tests/conformance/backend_under_test.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "codegen/vulkan/graph_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/vulkan/blob_vulkan.h"

namespace kiln::conformance {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The shader forms of a fused softmax: a short row runs one invocation per row; a long row runs
// one workgroup per row, combining the row's max and sum through shared memory (barriers in the
// GLSL, OpControlBarrier in the SPIR-V), after subgroup combines where the device has subgroup
// arithmetic (lavapipe has it).
void CheckSoftmaxShader(const SoftmaxDump& dump) {
  const std::filesystem::path dir = dump.directory;
  const std::string glsl = ReadFile(dir / "kernel_0.glsl");
  const std::string spvasm = ReadFile(dir / "kernel_0.spvasm");
  if (dump.cols < 64) {
    EXPECT_THAT(glsl, Not(HasSubstr("barrier()")));
    EXPECT_THAT(glsl, HasSubstr("if (gid < " + std::to_string(dump.rows) + "l)"));
    return;
  }
  EXPECT_THAT(glsl, HasSubstr("shared float red_v"));
  EXPECT_THAT(glsl, HasSubstr("barrier();"));
  EXPECT_THAT(glsl, HasSubstr("int64_t lid"));
  EXPECT_THAT(spvasm, HasSubstr("OpControlBarrier"));
  EXPECT_THAT(spvasm, HasSubstr("Workgroup"));
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
}

}  // namespace

const BackendUnderTest& Backend() {
  static const BackendUnderTest* const backend = [] {
    auto* b = new BackendUnderTest;
    b->name = "vulkan";
    b->device = "vulkan:0";
    b->run = [](const ir::Graph& graph,
                std::span<const std::shared_ptr<const ir::TensorData>> arguments) {
      return codegen::vulkan::CompileAndRun(graph, arguments);
    };
    b->compile = [](const ir::Graph& graph) -> absl::StatusOr<CompileStats> {
      absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
          codegen::vulkan::DeviceForIndex(0);
      if (!device.ok()) return device.status();
      absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
          codegen::vulkan::CompileGraph(graph, *device);
      if (!compiled.ok()) return compiled.status();
      return CompileStats{(*compiled)->num_kernels, (*compiled)->num_matmuls,
                          (*compiled)->dump_directory};
    };
    b->graph_compiles = [] { return codegen::vulkan::GetGraphCacheStats().compiles; };
    // Each bound from its documentation:
    //  - f32 exp/log/tanh/erf/sigmoid use ExpandMath's polynomials (codegen/math_expand.h: 1.0
    //    ulp exp/log, 1.5 ulp tanh/erf, 2.5 ulp sigmoid), as on the CPU backend.
    //  - f32 sin, cos and pow are GLSL built-ins; Vulkan only promises them to 2^-11 absolute on
    //    [-pi, pi] (sin/cos) and to the error of exp2(y * log2(x)) (pow). lavapipe compiles them
    //    with LLVM's f32 routines; we allow 4 ulp relative plus 2^-21 absolute for sin/cos
    //    (cancellation near their zeros) and 8 ulp for pow.
    //  - f64 exp, log, sin, cos, tanh, erf and pow (GLSL has none) are kiln's own reductions,
    //    polynomials and series (codegen/vulkan/glsl.cc): 4 f64 ulps (16 for pow, which is
    //    exp(b log a) and loses |b log a| ulps), plus 2^-50 absolute for sin/cos and
    //    random_normal's Box-Muller, computed in f64 for every float dtype (cancellation near the
    //    zeros of cos).
    //  - f32 division and sqrt are correctly rounded on lavapipe (LLVM fdiv/sqrt); no widening.
    //  - Sums and products accumulate in another order (tiled matmul, workgroup reductions).
    b->math.f32 = {{ir::Op::kExp, {1.0}},
                   {ir::Op::kLog, {1.0}},
                   {ir::Op::kTanh, {1.5}},
                   {ir::Op::kErf, {1.5}},
                   {ir::Op::kSin, {4.0, std::ldexp(1.0, -21)}},
                   {ir::Op::kCos, {4.0, std::ldexp(1.0, -21)}},
                   {ir::Op::kPow, {8.0}}};
    b->math.f32_sigmoid_ulps = 2.5;
    b->math.f64 = {{ir::Op::kExp, {4.0}},
                   {ir::Op::kLog, {4.0}},
                   {ir::Op::kTanh, {4.0}},
                   {ir::Op::kErf, {4.0}},
                   {ir::Op::kPow, {16.0}},
                   {ir::Op::kSin, {4.0, std::ldexp(1.0, -50)}},
                   {ir::Op::kCos, {4.0, std::ldexp(1.0, -50)}},
                   {ir::Op::kRandomNormal, {4.0, std::ldexp(1.0, -50)}}};
    b->math.computed_in_f64 = {ir::Op::kRandomNormal};
    b->math.f64_reordered = {ir::Op::kReduceSum, ir::Op::kReduceProd, ir::Op::kMatMul,
                             ir::Op::kConv};
    b->kernel_dump_files = {
        {"glsl",
         {"#version 450", "layout(local_size_x = 64",
          "layout(std430, set = 0, binding = 0) readonly buffer Arg0",
          "layout(std430, set = 0, binding = 1) buffer Arg1", "void main()", "int64_t gid"}},
        {"spvasm",
         {"OpEntryPoint GLCompute %main \"main\"", "OpExecutionMode %main LocalSize 64 1 1",
          "OpDecorate %a0 Binding 0", "OpDecorate %a1 Binding 1", "OpCapability Int64"}}};
    b->executable_dump_contains = {"1 dispatch"};
    b->check_dump = CheckSoftmaxShader;
    // A training step costs 0.3-0.9 s on lavapipe (docs/vulkan.md): 40 steps, not an epoch,
    // and 2000 test images.
    b->mlp_train_examples = 40 * 128;
    b->mlp_test_examples = 2000;
    b->mlp_min_accuracy = 0.75;  // measured: 0.789 (seed 0)
    b->tensors_in_device_memory = true;
    // Blobs compile for PortableDeviceInfo() (no subgroup operations), unlike the JIT for the
    // device: equal to the interpreter's answers, not bit for bit to the JIT's.
    b->blob.configure = [](aot::CompileOptions& options) { options.vulkan = true; };
    b->blob.device = "vulkan";
    b->blob.enable = runtime::vulkan::EnableVulkanBlobs;
    return b;
  }();
  return *backend;
}

}  // namespace kiln::conformance
