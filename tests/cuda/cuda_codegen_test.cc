// The CUDA codegen without a GPU: every kernel the op cases lower to (with and without the
// contraction epilogue split, with warp shuffles and with the shared-memory tree) renders to CUDA
// C that NVRTC compiles to PTX, and every random fused graph and op-case graph compiled by the
// CUDA graph compiler (CompileSpec: the matmul template, the copy kernels) gives PTX modules that
// ptxas accepts for sm_80 (A100) and sm_90 (H100, H200). NVRTC and ptxas come with the CUDA
// toolkit (/usr/local/cuda), which is not a Debian package: where it is absent these tests skip
// and say why. The device suites (tests/cuda's conformance runs) check the answers on a GPU.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/c_render.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/cuda/graph_compiler.h"
#include "codegen/cuda/matmul.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/kernel_ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "tests/codegen/op_cases.h"
#include "tests/codegen/pipeline.h"
#include "tests/codegen/random_graph.h"
#include "tests/cuda/ptxas.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kArchs[] = {"sm_80", "sm_90"};

#define SKIP_WITHOUT_NVRTC()                                                          \
  do {                                                                                \
    if (absl::Status s = codegen::cuda::NvrtcAvailable(); !s.ok()) GTEST_SKIP() << s; \
  } while (false)

#define SKIP_WITHOUT_TOOLKIT()                                               \
  do {                                                                       \
    SKIP_WITHOUT_NVRTC();                                                    \
    if (absl::Status s = test::PtxasAvailable(); !s.ok()) GTEST_SKIP() << s; \
  } while (false)

// Assembles each distinct module once per architecture (the op cases share many kernels).
class PtxChecker {
 public:
  void Check(const std::string& ptx, const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!seen_.insert(ptx).second) return;
    }
    for (const char* arch : kArchs) {
      absl::Status s = test::AssemblePtx(ptx, arch, name);
      EXPECT_TRUE(s.ok()) << s;
    }
  }

 private:
  std::mutex mutex_;
  std::set<std::string> seen_;
};

PtxChecker& Checker() {
  static auto* checker = new PtxChecker;
  return *checker;
}

class CudaOpCaseTest : public ::testing::TestWithParam<test::Case> {};

TEST_P(CudaOpCaseTest, EveryKernelCompilesToPtxThatPtxasAccepts) {
  SKIP_WITHOUT_TOOLKIT();
  absl::StatusOr<test::CaseInstance> instance = test::Instantiate(GetParam());
  ASSERT_TRUE(instance.ok()) << instance.status();
  for (bool warp_shuffles : {false, true}) {
    for (bool epilogue : {false, true}) {
      test::PipelineOptions options;
      options.use_epilogue = epilogue;
      absl::StatusOr<test::PipelineResult> lowered =
          test::RunLowered(instance->graph, instance->arguments, options);
      if (!lowered.ok()) continue;  // an error flag the case provokes on purpose
      codegen::cuda::CudaTarget target;
      target.warp_shuffles = warp_shuffles;
      for (const codegen::Kernel& kernel : lowered->kernels) {
        absl::StatusOr<codegen::cuda::CudaKernel> cuda =
            codegen::cuda::KernelToCuda(kernel, target);
        ASSERT_TRUE(cuda.ok()) << cuda.status() << "\n" << codegen::PrintKernel(kernel);
        if (!warp_shuffles) {
          EXPECT_THAT(cuda->source, Not(HasSubstr("kiln_warp_")));
        }
        absl::StatusOr<std::string> ptx =
            codegen::cuda::CompileToPtx(cuda->source, kernel.name, "sm_80");
        ASSERT_TRUE(ptx.ok()) << ptx.status();
        EXPECT_THAT(*ptx, HasSubstr(".entry kiln_kernel"));
        Checker().Check(*ptx, kernel.name);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOpCaseTest, ::testing::ValuesIn(test::Cases()),
                         test::CaseTestName);

// Every module of a graph compiled for `arch` without a device: through ptxas for both GPUs.
void CheckCompiledGraph(const ir::Graph& graph, const std::string& what, int64_t& kernels,
                        int64_t& matmuls) {
  absl::StatusOr<std::shared_ptr<const codegen::cuda::CompiledGraph>> compiled =
      codegen::cuda::CompileSpec(graph, "sm_80");
  ASSERT_TRUE(compiled.ok()) << what << ": " << compiled.status();
  const codegen::cuda::CompiledGraph& c = **compiled;
  EXPECT_EQ(c.executable, nullptr);
  EXPECT_TRUE(runtime::cuda::CheckSpec(c.spec).ok()) << runtime::cuda::CheckSpec(c.spec);
  ASSERT_EQ(c.spec.modules.size(), c.cuda_sources.size());
  for (size_t m = 0; m < c.spec.modules.size(); ++m) {
    Checker().Check(c.spec.modules[m], absl::StrCat(what, ", module ", m));
  }
  kernels += c.num_kernels;
  matmuls += c.num_matmuls;
}

TEST(CudaGraphCompilerTest, OpCaseGraphsCompileForSm80AndSm90) {
  SKIP_WITHOUT_TOOLKIT();
  int64_t kernels = 0, matmuls = 0;
  for (const test::Case& c : test::Cases()) {
    absl::StatusOr<test::CaseInstance> instance = test::Instantiate(c);
    ASSERT_TRUE(instance.ok()) << instance.status();
    CheckCompiledGraph(instance->graph, c.name, kernels, matmuls);
  }
  EXPECT_GT(kernels, 0);
  EXPECT_GT(matmuls, 0);  // the tiled template ran through ptxas too
}

// The random graphs of the conformance suite (tests/conformance/random_graph_test.cc): the same
// seeds and both sizes.
TEST(CudaGraphCompilerTest, RandomFusedGraphsCompileForSm80AndSm90) {
  SKIP_WITHOUT_TOOLKIT();
  int64_t kernels = 0, matmuls = 0;
  std::vector<uint64_t> seeds;
  for (uint64_t seed = 0; seed < 500; ++seed) seeds.push_back(seed);
  for (uint64_t seed : test::FuzzSeeds(seeds)) {
    const test::RandomGraph g = test::MakeRandomGraph(seed);
    CheckCompiledGraph(g.graph, absl::StrCat("seed ", seed, "\n", g.text), kernels, matmuls);
  }
  test::RandomGraphOptions larger;
  larger.max_dim = 64;
  larger.max_ops = 20;
  for (uint64_t seed = 0; seed < 150; ++seed) {
    const test::RandomGraph g = test::MakeRandomGraph(seed, larger);
    CheckCompiledGraph(g.graph, absl::StrCat("larger seed ", seed, "\n", g.text), kernels, matmuls);
  }
  EXPECT_GT(kernels, 0);
  EXPECT_GT(matmuls, 0);
}

// A long row runs one block per row; its combine uses warp shuffles only when they are on, for
// every reduce kind and the types __shfl_xor_sync moves (bool keeps the shared-memory tree).
TEST(CudaCodegenTest, LongReductionsUseWarpShufflesWhereTheyPay) {
  SKIP_WITHOUT_TOOLKIT();
  using codegen::ReduceKind;
  using codegen::ScalarType;
  struct Type {
    ScalarType scalar;
    ir::DType dtype;
    bool shuffles;
  };
  for (const Type& t :
       {Type{ScalarType::kF32, ir::DType::kF32, true},
        Type{ScalarType::kF64, ir::DType::kF64, true},
        Type{ScalarType::kI32, ir::DType::kI32, true},
        Type{ScalarType::kI64, ir::DType::kI64, true}, Type{ScalarType::kU8, ir::DType::kU8, true},
        Type{ScalarType::kBool, ir::DType::kBool, false}}) {
    for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin,
                            ReduceKind::kArgMax, ReduceKind::kArgMin}) {
      const bool arg_kind = kind == ReduceKind::kArgMax || kind == ReduceKind::kArgMin;
      constexpr int64_t kRows = 4, kCols = 1000;
      codegen::KernelBuilder b("long_row");
      const codegen::ArgId x = b.AddArg({"x", t.dtype, kRows * kCols, codegen::ArgRole::kInput});
      const codegen::ArgId y =
          b.AddArg({"y", arg_kind ? ir::DType::kI64 : t.dtype, kRows, codegen::ArgRole::kOutput});
      const codegen::ValueId gid = b.Var(codegen::kGid);
      const codegen::ValueId init =
          arg_kind ? codegen::kNoValue : b.ConstantOf(t.scalar, kind == ReduceKind::kProd ? 1 : 0);
      const codegen::VarId r = b.BeginReduce(kind, init, kCols);
      const codegen::ValueId index = b.Binary(
          codegen::ExprOp::kAdd, b.Binary(codegen::ExprOp::kMul, gid, b.Index(kCols)), b.Var(r));
      b.Store(y, gid, b.EndReduce(b.Load(x, index)));
      const codegen::Kernel kernel = std::move(b).Finish(kRows);
      for (bool shuffles : {false, true}) {
        codegen::cuda::CudaTarget target;
        target.warp_shuffles = shuffles;
        absl::StatusOr<codegen::cuda::CudaKernel> cuda =
            codegen::cuda::KernelToCuda(kernel, target);
        ASSERT_TRUE(cuda.ok()) << cuda.status();
        ASSERT_TRUE(cuda->cooperative);
        EXPECT_EQ(cuda->grid[0], kRows);
        const bool uses = cuda->source.find("kiln_warp_") != std::string::npos;
        EXPECT_EQ(uses, shuffles && t.shuffles)
            << ScalarTypeName(t.scalar) << " " << ReduceKindName(kind) << "\n"
            << cuda->source;
        absl::StatusOr<std::string> ptx =
            codegen::cuda::CompileToPtx(cuda->source, "long_row", "sm_80");
        ASSERT_TRUE(ptx.ok()) << ptx.status();
        if (uses) {
          EXPECT_THAT(*ptx, HasSubstr("shfl.sync.bfly"));
        }
        EXPECT_THAT(*ptx, HasSubstr("bar.sync"));
        Checker().Check(*ptx, "long_row");
      }
    }
  }
}

// A thread per element in blocks of 256; a grid beyond the x limit folds into y.
TEST(CudaCodegenTest, LaunchShape) {
  codegen::KernelBuilder b("scale");
  constexpr int64_t kN = 1000;
  const codegen::ArgId x = b.AddArg({"x", ir::DType::kF16, kN, codegen::ArgRole::kInput});
  const codegen::ArgId y = b.AddArg({"y", ir::DType::kBF16, kN, codegen::ArgRole::kOutput});
  const codegen::ValueId gid = b.Var(codegen::kGid);
  b.Store(y, gid,
          b.Binary(codegen::ExprOp::kMul, b.Load(x, gid), b.Float(codegen::ScalarType::kF32, 0.5)));
  const codegen::Kernel kernel = std::move(b).Finish(kN);
  absl::StatusOr<codegen::cuda::CudaKernel> cuda = codegen::cuda::KernelToCuda(kernel);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_FALSE(cuda->cooperative);
  EXPECT_EQ(cuda->block_size, 256);
  EXPECT_EQ(cuda->grid[0], 4u);  // ceil(1000 / 256)
  EXPECT_EQ(cuda->grid[1], 1u);
  EXPECT_THAT(cuda->source, HasSubstr("__launch_bounds__(256) kiln_kernel(const uint16_t* a0, "
                                      "uint16_t* a1)"));
  EXPECT_THAT(cuda->source, HasSubstr("kiln_f16_to_f32("));
  EXPECT_THAT(cuda->source, HasSubstr("kiln_f32_to_bf16("));
  EXPECT_THAT(cuda->source, HasSubstr("if (gid < 1000ll)"));
  codegen::cuda::CudaTarget narrow;
  narrow.max_grid_x = 3;
  narrow.max_grid_y = 2;
  cuda = codegen::cuda::KernelToCuda(kernel, narrow);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->grid[0], 3u);
  EXPECT_EQ(cuda->grid[1], 2u);
  narrow.max_grid_y = 1;
  cuda = codegen::cuda::KernelToCuda(kernel, narrow);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kResourceExhausted);
}

// An invalid program is a code generator bug: the error carries NVRTC's log and the numbered
// source.
TEST(CudaCodegenTest, NvrtcErrorsShowTheLogAndTheSource) {
  SKIP_WITHOUT_NVRTC();
  absl::StatusOr<std::string> ptx = codegen::cuda::CompileToPtx(
      "extern \"C\" __global__ void f() {\n  undeclared = 1;\n}\n", "broken", "sm_80");
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(ptx.status().message(), HasSubstr("undeclared"));
  EXPECT_THAT(ptx.status().message(), HasSubstr("2:   undeclared = 1;"));
  ptx = codegen::cuda::CompileToPtx("", "empty", "gfx90a");
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("unknown GPU architecture \"gfx90a\""));
}

TEST(CudaCodegenTest, PtxIsCachedBySourceAndArch) {
  SKIP_WITHOUT_NVRTC();
  const std::string source =
      "extern \"C\" __global__ void cached_kernel(float* x) { x[0] = 2.0f; }\n";
  const int64_t before = codegen::cuda::NvrtcCompiles();
  absl::StatusOr<std::string> a = codegen::cuda::CompileToPtx(source, "cached", "sm_80");
  absl::StatusOr<std::string> b = codegen::cuda::CompileToPtx(source, "cached", "sm_80");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(codegen::cuda::NvrtcCompiles(), before + 1);
  absl::StatusOr<std::string> c = codegen::cuda::CompileToPtx(source, "cached", "sm_90");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, HasSubstr(".target sm_90"));
  EXPECT_THAT(*a, HasSubstr(".target sm_80"));
  EXPECT_EQ(codegen::cuda::NvrtcCompiles(), before + 2);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// KILN_DUMP writes each kernel's CUDA C and PTX (and the kernel IR) beside the passes' dumps; a
// transposed operand of a matmul is read in place by the template (no transpose kernel).
TEST(CudaGraphCompilerTest, DumpsCudaAndPtxAndReadsTransposedOperandsInPlace) {
  SKIP_WITHOUT_NVRTC();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("kiln_cuda_dump_", getpid());
  std::filesystem::remove_all(dir);
  setenv("KILN_DUMP", dir.c_str(), 1);
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", ir::TensorType{ir::DType::kF32, {96, 80}});
  const ir::NodeId w = b.Parameter("w", ir::TensorType{ir::DType::kF32, {70, 80}});
  const ir::NodeId bias = b.Parameter("bias", ir::TensorType{ir::DType::kF32, {70}});
  const ir::NodeId wt = b.Permute(w, {1, 0});
  const ir::NodeId y =
      b.Binary(ir::Op::kAdd, b.MatMul(x, wt), b.Broadcast(b.Reshape(bias, {1, 70}), {96, 70}));
  b.Output(b.Binary(ir::Op::kMax, y, b.Fill(0.0, ir::TensorType{ir::DType::kF32, {96, 70}})));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::shared_ptr<const codegen::cuda::CompiledGraph>> compiled =
      codegen::cuda::CompileSpec(*graph, "sm_90");
  unsetenv("KILN_DUMP");
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->num_matmuls, 1);
  EXPECT_EQ((*compiled)->num_kernels, 2);  // the matmul and its bias + relu epilogue
  EXPECT_EQ((*compiled)->arch, "sm_90");
  const std::string matmul = (*compiled)->cuda_sources[0];
  EXPECT_THAT(matmul, HasSubstr("kiln_matmul"));
  // w^T read with swapped strides: element (k, j) of w^T at j * 80 + k.
  EXPECT_THAT(matmul, HasSubstr("b[b_base + kb * 1u + (col0 + col) * 80u]"));
  const std::filesystem::path folder = (*compiled)->dump_directory;
  ASSERT_FALSE(folder.empty());
  EXPECT_THAT(ReadFile(folder / "kernel_0.cu"), HasSubstr("kiln_matmul"));
  EXPECT_THAT(ReadFile(folder / "kernel_0.ptx"), HasSubstr(".target sm_90"));
  EXPECT_THAT(ReadFile(folder / "kernel_1.cu"), HasSubstr("__global__"));
  EXPECT_THAT(ReadFile(folder / "kernel_1.kir"), Not(HasSubstr("no kernel IR")));
  EXPECT_THAT(ReadFile(folder / "fusion.txt"), HasSubstr("matmul"));
  std::filesystem::remove_all(dir);
}

// A [64, 96] x [96, 80] matmul of `dtype` (b read transposed in place when `b_transposed`).
ir::Graph MatmulGraph(ir::DType dtype, bool b_transposed) {
  ir::Builder builder;
  const ir::NodeId a = builder.Parameter("a", ir::TensorType{dtype, {64, 96}});
  const ir::NodeId b = b_transposed
                           ? builder.Permute(builder.Parameter("b", {dtype, {80, 96}}), {1, 0})
                           : builder.Parameter("b", ir::TensorType{dtype, {96, 80}});
  builder.Output(builder.MatMul(a, b));
  absl::StatusOr<ir::Graph> graph = std::move(builder).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

// f16/bf16 matmuls run on tensor cores from sm_80 (the direct loop nest before), f32 ones only
// when tf32 is allowed; every template's PTX passes ptxas for both GPUs.
TEST(CudaGraphCompilerTest, MatmulsPickTheirTemplateByDtypeArchAndTf32) {
  SKIP_WITHOUT_TOOLKIT();
  struct Expect {
    ir::DType dtype;
    std::string arch;
    bool allow_tf32;
    const char* instruction;  // in the PTX; null: no template (the loop nest)
  };
  const Expect expectations[] = {
      {ir::DType::kBF16, "sm_80", false, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
      {ir::DType::kF16, "sm_90", false, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
      {ir::DType::kF32, "sm_80", true, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"},
      {ir::DType::kF32, "sm_90", false, "fma.rn.f32"},
      {ir::DType::kF64, "sm_80", true, "fma.rn.f64"},
      {ir::DType::kBF16, "sm_75", false, nullptr},
  };
  for (const Expect& e : expectations) {
    for (bool b_transposed : {false, true}) {
      const std::string what =
          absl::StrCat(ir::DTypeName(e.dtype), " on ", e.arch,
                       e.allow_tf32 ? " (tf32 allowed)" : "", b_transposed ? ", b transposed" : "");
      absl::StatusOr<std::shared_ptr<const codegen::cuda::CompiledGraph>> compiled =
          codegen::cuda::CompileSpec(MatmulGraph(e.dtype, b_transposed), e.arch, e.allow_tf32);
      ASSERT_TRUE(compiled.ok()) << what << ": " << compiled.status();
      const codegen::cuda::CompiledGraph& c = **compiled;
      EXPECT_EQ(c.allow_tf32, e.allow_tf32);
      if (e.instruction == nullptr) {
        EXPECT_EQ(c.num_matmuls, 0) << what;
        continue;
      }
      ASSERT_EQ(c.num_matmuls, 1) << what;
      EXPECT_THAT(c.spec.modules[0], HasSubstr(e.instruction)) << what;
      const bool tensor_cores = e.dtype == ir::DType::kBF16 || e.dtype == ir::DType::kF16 ||
                                (e.dtype == ir::DType::kF32 && e.allow_tf32);
      if (tensor_cores) {
        // Tensor-core blocks are 8 warps on 128 x 128 tiles: [64, 80] is one tile.
        EXPECT_EQ(c.spec.launches[0].block[0], 256u) << what;
        EXPECT_EQ(c.spec.launches[0].grid[0], 1u) << what;
      }
      // PTX runs forward, never back: sm_90 PTX is assembled for sm_90 only.
      if (e.arch == "sm_80") {
        Checker().Check(c.spec.modules[0], what);
      } else {
        absl::Status s = test::AssemblePtx(c.spec.modules[0], e.arch, what);
        EXPECT_TRUE(s.ok()) << s;
      }
    }
  }
}

TEST(CudaGraphCompilerTest, Tf32IsOffUnlessAllowed) {
  unsetenv("KILN_CUDA_ALLOW_TF32");
  EXPECT_FALSE(codegen::cuda::AllowTf32());
  setenv("KILN_CUDA_ALLOW_TF32", "1", 1);
  EXPECT_TRUE(codegen::cuda::AllowTf32());
  codegen::cuda::SetAllowTf32(false);  // the program's choice wins over the environment
  EXPECT_FALSE(codegen::cuda::AllowTf32());
  unsetenv("KILN_CUDA_ALLOW_TF32");
  codegen::cuda::SetAllowTf32(true);
  EXPECT_TRUE(codegen::cuda::AllowTf32());
  codegen::cuda::SetAllowTf32(false);
}

TEST(CudaGraphCompilerTest, ArchComesFromTheEnvironmentThenTheDevice) {
  unsetenv("KILN_CUDA_ARCH");
  EXPECT_EQ(codegen::cuda::ArchFor(nullptr), "sm_80");
  setenv("KILN_CUDA_ARCH", "sm_90", 1);
  EXPECT_EQ(codegen::cuda::ArchFor(nullptr), "sm_90");
  unsetenv("KILN_CUDA_ARCH");
}

}  // namespace
}  // namespace kiln
