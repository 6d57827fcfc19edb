// Every kernel the op cases lower to (tests/codegen/op_cases.h, through the same fuse + lower
// pipeline as the backends, with and without the contraction epilogue split) renders to GLSL
// that glslang compiles and whose SPIR-V passes the SPIRV-Tools validator before and after the
// optimiser (CompileGlslToSpirv checks both). No device is needed: the target claims every
// feature, so every kernel is rendered; the device-side tests (op_test.cc) run them on lavapipe.
#include <string>
#include <vector>

#include "codegen/c_render.h"
#include "codegen/kernel_ir.h"
#include "codegen/vulkan/glsl.h"
#include "codegen/vulkan/spirv.h"
#include "gtest/gtest.h"
#include "tests/codegen/op_cases.h"
#include "tests/codegen/pipeline.h"

namespace kiln {
namespace {

using codegen::vulkan::GlslTarget;

GlslTarget FullTarget() {
  GlslTarget target;
  target.float64 = true;
  target.int64 = true;
  target.int8_storage = true;
  target.int16_storage = true;
  return target;
}

class GlslSpirvTest : public ::testing::TestWithParam<test::Case> {};

// Both forms of the cooperative combine: subgroup arithmetic, and the workgroup-memory tree a
// device without it (DeviceInfo::subgroup_arithmetic = false) gets.
TEST_P(GlslSpirvTest, EveryKernelCompilesAndValidates) {
  absl::StatusOr<test::CaseInstance> instance = test::Instantiate(GetParam());
  ASSERT_TRUE(instance.ok()) << instance.status();
  for (bool subgroups : {false, true}) {
    for (bool epilogue : {false, true}) {
      test::PipelineOptions options;
      options.use_epilogue = epilogue;
      absl::StatusOr<test::PipelineResult> lowered =
          test::RunLowered(instance->graph, instance->arguments, options);
      if (!lowered.ok()) continue;  // an error flag the case provokes on purpose
      GlslTarget target = FullTarget();
      target.subgroup_arithmetic = subgroups;
      for (const codegen::Kernel& kernel : lowered->kernels) {
        absl::StatusOr<codegen::vulkan::GlslKernel> glsl =
            codegen::vulkan::KernelToGlsl(kernel, target);
        ASSERT_TRUE(glsl.ok()) << glsl.status() << "\n" << codegen::PrintKernel(kernel);
        if (!subgroups) {
          EXPECT_EQ(glsl->source.find("subgroup"), std::string::npos);
        }
        absl::StatusOr<std::shared_ptr<const codegen::vulkan::SpirvModule>> module =
            codegen::vulkan::CompileGlslToSpirv(glsl->source, kernel.name);
        ASSERT_TRUE(module.ok()) << module.status();
        EXPECT_TRUE(codegen::vulkan::ValidateSpirv((*module)->words).ok());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, GlslSpirvTest, ::testing::ValuesIn(test::Cases()),
                         test::CaseTestName);

// A long row of every reduce kind and type the subgroup path takes (and two it leaves to the
// tree: i64 and bool): with subgroup arithmetic the combine uses it where the type allows, without
// it the GLSL has no subgroup operation; both forms compile and validate.
TEST(GlslTargetTest, LongReductionsUseSubgroupsOnlyWhenTheDeviceHasThem) {
  using codegen::ReduceKind;
  using codegen::ScalarType;
  struct Type {
    ScalarType scalar;
    ir::DType dtype;
    bool subgroup;  // whether GLSL's subgroup arithmetic covers it
  };
  for (const Type& t :
       {Type{ScalarType::kF32, ir::DType::kF32, true},
        Type{ScalarType::kI32, ir::DType::kI32, true}, Type{ScalarType::kU8, ir::DType::kU8, true},
        Type{ScalarType::kI64, ir::DType::kI64, false},
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
      for (bool subgroups : {false, true}) {
        GlslTarget target = FullTarget();
        target.subgroup_arithmetic = subgroups;
        absl::StatusOr<codegen::vulkan::GlslKernel> glsl =
            codegen::vulkan::KernelToGlsl(kernel, target);
        ASSERT_TRUE(glsl.ok()) << glsl.status() << "\n" << codegen::PrintKernel(kernel);
        ASSERT_TRUE(glsl->cooperative);
        const bool uses = glsl->source.find("subgroup") != std::string::npos;
        EXPECT_EQ(uses, subgroups && t.subgroup)
            << ScalarTypeName(t.scalar) << " kind " << static_cast<int>(kind) << "\n"
            << glsl->source;
        absl::StatusOr<std::shared_ptr<const codegen::vulkan::SpirvModule>> module =
            codegen::vulkan::CompileGlslToSpirv(glsl->source, kernel.name);
        ASSERT_TRUE(module.ok()) << module.status();
      }
    }
  }
}

// A device without a feature gets an error naming the kernel's arg or op and the feature.
TEST(GlslTargetTest, MissingFeaturesAreNamed) {
  codegen::KernelBuilder b("halve");
  const codegen::ArgId x = b.AddArg({"x", ir::DType::kF64, 4, codegen::ArgRole::kInput});
  const codegen::ArgId y = b.AddArg({"y", ir::DType::kF64, 4, codegen::ArgRole::kOutput});
  const codegen::ValueId gid = b.Var(codegen::kGid);
  b.Store(y, gid,
          b.Binary(codegen::ExprOp::kMul, b.Load(x, gid), b.Float(codegen::ScalarType::kF64, 0.5)));
  const codegen::Kernel kernel = std::move(b).Finish(4);
  GlslTarget target = FullTarget();
  target.float64 = false;
  absl::StatusOr<codegen::vulkan::GlslKernel> glsl = codegen::vulkan::KernelToGlsl(kernel, target);
  ASSERT_FALSE(glsl.ok());
  EXPECT_EQ(glsl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(glsl.status().message().find("shaderFloat64"), std::string::npos) << glsl.status();
  EXPECT_NE(glsl.status().message().find("arg x (f64)"), std::string::npos) << glsl.status();
}

// An invalid shader is a compiler bug: the error carries the compiler's message and the source.
TEST(SpirvTest, GlslErrorsShowTheSource) {
  absl::StatusOr<std::shared_ptr<const codegen::vulkan::SpirvModule>> module =
      codegen::vulkan::CompileGlslToSpirv("#version 450\nvoid main() { undeclared = 1; }\n",
                                          "broken");
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(module.status().message().find("undeclared"), std::string::npos);
  EXPECT_NE(module.status().message().find("2: void main()"), std::string::npos);
}

TEST(SpirvTest, CacheServesTheSameSource) {
  const std::string glsl =
      "#version 450\nlayout(local_size_x = 1) in;\n"
      "layout(std430, set = 0, binding = 0) buffer B { float d[]; } b;\n"
      "void main() { b.d[0] = 1.0f; }\n";
  const int64_t hits = codegen::vulkan::GetSpirvCacheStats().hits;
  auto first = codegen::vulkan::CompileGlslToSpirv(glsl, "one");
  auto second = codegen::vulkan::CompileGlslToSpirv(glsl, "one");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(codegen::vulkan::GetSpirvCacheStats().hits, hits + 1);
  const std::string text = codegen::vulkan::DisassembleSpirv((*first)->words);
  EXPECT_NE(text.find("OpEntryPoint GLCompute"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln
