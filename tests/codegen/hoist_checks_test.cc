// codegen::HoistInvariantChecks: a row gather's (index_select's) index check leaves the row loop
// (printed kernel IR), the kernel computes the same outputs and the same error flag on
// kernel_eval, in range and out of it, and the checks that must stay (an index that varies
// along the loop, a loop of no iterations) stay.
#include "codegen/hoist_checks.h"

#include <string>
#include <vector>

#include "codegen/kernel_eval.h"
#include "codegen/kernel_ir.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/tensor_data.h"
#include "tests/codegen/pipeline.h"

namespace kiln::codegen {
namespace {

// The lowered kernels of `graph` (fused as the CPU backend fuses it), on zero arguments.
std::vector<Kernel> Lowered(const ir::Graph& graph) {
  std::vector<ir::TensorData> args;
  for (ir::NodeId p : graph.Parameters()) {
    args.emplace_back(graph.node(p).type.dtype, graph.node(p).type.shape);
  }
  absl::StatusOr<test::PipelineResult> result = test::RunLowered(graph, args);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->kernels : std::vector<Kernel>{};
}

// x [rows, cols] index_select'ed along axis 0 by idx [n] (as the frontend spells it: a gather
// with the index broadcast over the row), or gathered per element by idx [n, cols] (torch.gather).
ir::Graph GatherGraph(int64_t rows, int64_t cols, int64_t n, bool per_element) {
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {rows, cols}});
  ir::NodeId index;
  if (per_element) {
    index = b.Parameter("idx", {ir::DType::kI64, {n, cols}});
  } else {
    const ir::NodeId idx = b.Parameter("idx", {ir::DType::kI64, {n}});
    index = b.Broadcast(b.Reshape(idx, {n, 1}), {n, cols});
  }
  b.Output(b.Gather(x, index, 0));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

// The text of `kernel` from its first `for` on: what runs inside the row loop.
std::string InsideLoop(const Kernel& kernel) {
  const std::string text = PrintKernel(kernel);
  const size_t at = text.find(" for i");
  return at == std::string::npos ? "" : text.substr(at);
}

// Runs `kernel` on x, idx; returns the output and the error flag.
std::pair<std::vector<float>, std::vector<int64_t>> Evaluate(const Kernel& kernel,
                                                             const std::vector<float>& x,
                                                             const std::vector<int64_t>& idx) {
  ir::TensorData x_data(ir::DType::kF32, {static_cast<int64_t>(x.size())});
  for (size_t i = 0; i < x.size(); ++i) x_data.SetDouble(static_cast<int64_t>(i), x[i]);
  ir::TensorData idx_data(ir::DType::kI64, {static_cast<int64_t>(idx.size())});
  for (size_t i = 0; i < idx.size(); ++i) idx_data.SetInt64(static_cast<int64_t>(i), idx[i]);
  std::vector<ir::TensorData> buffers;
  std::vector<ir::TensorData*> args;
  for (const KernelArg& arg : kernel.args) {
    if (arg.role == ArgRole::kInput) {
      buffers.push_back(arg.dtype == ir::DType::kI64 ? idx_data : x_data);
    } else {
      buffers.emplace_back(arg.dtype, ir::Shape{arg.num_elements});
    }
  }
  for (ir::TensorData& buffer : buffers) args.push_back(&buffer);
  const absl::Status status = EvalKernelOnTensors(kernel, args);
  EXPECT_TRUE(status.ok()) << status << "\n" << PrintKernel(kernel);
  std::pair<std::vector<float>, std::vector<int64_t>> out;
  for (size_t a = 0; a < kernel.args.size(); ++a) {
    const ir::TensorData& t = buffers[a];
    if (kernel.args[a].role == ArgRole::kOutput && t.dtype() == ir::DType::kF32) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        out.first.push_back(static_cast<float>(t.GetDouble(i)));
      }
    } else if (kernel.args[a].role == ArgRole::kErrorFlag) {
      for (int64_t i = 0; i < t.num_elements(); ++i) out.second.push_back(t.GetInt64(i));
    }
  }
  return out;
}

TEST(HoistInvariantChecksTest, ARowGathersIndexIsCheckedOncePerRow) {
  const std::vector<Kernel> kernels = Lowered(GatherGraph(5, 16, 3, /*per_element=*/false));
  ASSERT_EQ(kernels.size(), size_t{1});
  const Kernel& before = kernels[0];
  ASSERT_TRUE(VerifyKernel(before).ok());
  ASSERT_NE(InsideLoop(before).find("store arg"), std::string::npos) << PrintKernel(before);
  const Kernel after = HoistInvariantChecks(before);
  ASSERT_TRUE(VerifyKernel(after).ok()) << VerifyKernel(after);
  // The error-flag arg is the last; no store into it is left inside the loop.
  const std::string flag = "store arg" + std::to_string(after.args.size() - 1) + "[";
  EXPECT_NE(InsideLoop(before).find(flag), std::string::npos) << PrintKernel(before);
  EXPECT_EQ(InsideLoop(after).find(flag), std::string::npos) << PrintKernel(after);
  EXPECT_NE(PrintKernel(after).find(flag), std::string::npos) << "the check is gone\n"
                                                              << PrintKernel(after);

  std::vector<float> x(5 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i) - 3;
  for (const std::vector<int64_t>& idx :
       {std::vector<int64_t>{4, 0, 2}, std::vector<int64_t>{1, 7, 3},
        std::vector<int64_t>{-1, 2, 2}}) {
    const auto want = Evaluate(before, x, idx);
    const auto got = Evaluate(after, x, idx);
    EXPECT_EQ(got.first, want.first) << idx[0] << " " << idx[1];
    EXPECT_EQ(got.second, want.second) << idx[0] << " " << idx[1];
  }
  EXPECT_EQ(Evaluate(after, x, {1, 7, 3}).second, (std::vector<int64_t>{1, 7}));
}

TEST(HoistInvariantChecksTest, AnIndexThatVariesAlongTheLoopIsCheckedInIt) {
  const std::vector<Kernel> kernels = Lowered(GatherGraph(5, 16, 3, /*per_element=*/true));
  ASSERT_EQ(kernels.size(), size_t{1});
  EXPECT_EQ(PrintKernel(HoistInvariantChecks(kernels[0])), PrintKernel(kernels[0]));
}

TEST(HoistInvariantChecksTest, ALoopOfNoIterationsKeepsItsCheck) {
  // A check inside a loop of 0 iterations never runs: moved out, it would.
  KernelBuilder b("empty_loop");
  const ArgId idx = b.AddArg({"idx", ir::DType::kI64, 4, ArgRole::kInput});
  const ArgId out = b.AddArg({"y", ir::DType::kF32, 4, ArgRole::kOutput});
  const ArgId flag = b.AddArg({"err", ir::DType::kI64, 2, ArgRole::kErrorFlag});
  const ValueId index = b.Load(idx, b.Var(kGid));
  const ValueId bad = b.Binary(ExprOp::kGe, index, b.Index(4));
  b.BeginLoop(0);
  b.Store(flag, b.Index(0), b.Index(1), bad);
  b.EndLoop();
  b.Store(out, b.Var(kGid), b.Float(ScalarType::kF32, 1));
  const Kernel kernel = std::move(b).Finish(4);
  ASSERT_TRUE(VerifyKernel(kernel).ok()) << VerifyKernel(kernel);
  EXPECT_EQ(PrintKernel(HoistInvariantChecks(kernel)), PrintKernel(kernel));
}

}  // namespace
}  // namespace kiln::codegen
