// The CUDA backend (codegen/cuda: CUDA C → NVRTC → PTX, the tiled matmul; run through the CUDA
// driver, runtime/cuda) as the conformance suite's backend under test
// (tests/conformance/backend_under_test.h). Every case skips, with the reason, on a machine
// without an NVIDIA driver and GPU (kiln_add_conformance SKIP_WITHOUT_DEVICE): CI's machines. On
// a GPU server the suite runs in full (scripts/gpu_check.sh).
#include "tests/conformance/backend_under_test.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "codegen/cuda/graph_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

// The kernel forms of a fused softmax: a short row runs one thread per row; a long row one block
// per row, combining the row's max and sum with warp shuffles and then shared memory.
void CheckSoftmaxKernel(const SoftmaxDump& dump) {
  const std::filesystem::path dir = dump.directory;
  const std::string cuda = ReadFile(dir / "kernel_0.cu");
  const std::string ptx = ReadFile(dir / "kernel_0.ptx");
  if (dump.cols < 64) {
    EXPECT_THAT(cuda, Not(HasSubstr("__syncthreads()")));
    EXPECT_THAT(cuda, HasSubstr("if (gid < " + std::to_string(dump.rows) + "ll)"));
    return;
  }
  EXPECT_THAT(cuda, HasSubstr("__shared__ float red_v"));
  EXPECT_THAT(cuda, HasSubstr("kiln_warp_max("));
  EXPECT_THAT(cuda, HasSubstr("kiln_warp_sum("));
  EXPECT_THAT(ptx, HasSubstr("shfl.sync.bfly"));
  EXPECT_THAT(ptx, HasSubstr("bar.sync"));
}

}  // namespace

const BackendUnderTest& Backend() {
  static const BackendUnderTest* const backend = [] {
    auto* b = new BackendUnderTest;
    b->name = "cuda";
    b->device = "cuda:0";
    b->run = [](const ir::Graph& graph,
                std::span<const std::shared_ptr<const ir::TensorData>> arguments) {
      return codegen::cuda::CompileAndRun(graph, arguments);
    };
    b->compile = [](const ir::Graph& graph) -> absl::StatusOr<CompileStats> {
      absl::StatusOr<std::shared_ptr<runtime::cuda::CudaDevice>> device =
          codegen::cuda::DeviceForIndex(0);
      if (!device.ok()) return device.status();
      absl::StatusOr<std::shared_ptr<const codegen::cuda::CompiledGraph>> compiled =
          codegen::cuda::CompileGraph(graph, *device);
      if (!compiled.ok()) return compiled.status();
      return CompileStats{(*compiled)->num_kernels, (*compiled)->num_matmuls,
                          (*compiled)->dump_directory};
    };
    b->graph_compiles = [] { return codegen::cuda::GetGraphCacheStats().compiles; };
    // Each bound from its documentation:
    //  - f32 exp/log/tanh/erf/sigmoid use ExpandMath's polynomials (codegen/math_expand.h: 1.0
    //    ulp exp/log, 1.5 ulp tanh/erf, 2.5 ulp sigmoid), as on the CPU and Vulkan backends.
    //  - f32 sinf, cosf (2 ulp) and powf (4 ulp) are CUDA's, whose maximum errors the CUDA C++
    //    Programming Guide lists (Mathematical Functions, single precision, without
    //    -use_fast_math); division and sqrtf are correctly rounded (NVRTC's --prec-div,
    //    --prec-sqrt).
    //  - f64: CUDA's exp, log, tanh (1 ulp), sin, cos, erf, pow (2 ulp); we allow 4 (pow 16, as
    //    exp(b log a) elsewhere) plus 2^-50 absolute for sin/cos and random_normal's Box-Muller,
    //    computed in f64 for every float dtype (cancellation near the zeros of cos).
    //  - Sums and products accumulate in another order (tiled matmul, block reductions).
    b->math.f32 = {{ir::Op::kExp, {1.0}}, {ir::Op::kLog, {1.0}}, {ir::Op::kTanh, {1.5}},
                   {ir::Op::kErf, {1.5}}, {ir::Op::kSin, {2.0}}, {ir::Op::kCos, {2.0}},
                   {ir::Op::kPow, {4.0}}};
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
        {"cu",
         {"typedef long long int64_t;", "extern \"C\" __global__ void __launch_bounds__(256)",
          "kiln_kernel(const float* a0, float* a1)", "int64_t gid"}},
        {"ptx", {".version", ".target sm_", ".entry kiln_kernel"}}};
    b->executable_dump_contains = {"1 launch"};
    b->check_dump = CheckSoftmaxKernel;
    b->tensors_in_device_memory = true;
    return b;
  }();
  return *backend;
}

}  // namespace kiln::conformance
