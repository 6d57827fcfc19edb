// KILN_DUMP on the CPU backend: realizing a softmax writes one folder with every stage of its
// compile (the graph after each pass, the fusion decisions, the kernel IR, LLVM IR and assembly
// of each kernel, the memory plan and the executable), and the softmax is a single kernel.
#include <kiln/kiln.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/parser.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CpuDumpTest, SoftmaxWritesEveryStage) {
  const fs::path root =
      fs::temp_directory_path() / ("kiln_cpu_dump_test_" + std::to_string(getpid()));
  fs::remove_all(root);
  ASSERT_EQ(setenv("KILN_DUMP", root.c_str(), 1), 0);

  const Cpu::Device device;
  std::vector<float> values(5 * 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i));
  const std::vector<float> result =
      activation::softmax(Tensor<Cpu, 2>::from_vector(values, {5, 7}, device), 1)
          .to_vector<float>();
  unsetenv("KILN_DUMP");

  // The values are a softmax (exp runs as a 1-ulp polynomial: rows sum to 1 within f32 rounding).
  ASSERT_EQ(result.size(), values.size());
  for (int row = 0; row < 5; ++row) {
    double max = -INFINITY, sum = 0;
    for (int j = 0; j < 7; ++j) max = std::max<double>(max, values[row * 7 + j]);
    for (int j = 0; j < 7; ++j) sum += std::exp(values[row * 7 + j] - max);
    for (int j = 0; j < 7; ++j) {
      EXPECT_NEAR(result[row * 7 + j], std::exp(values[row * 7 + j] - max) / sum, 1e-6);
    }
  }

  // One compile, one folder.
  std::vector<fs::path> folders;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) folders.push_back(entry.path());
  }
  ASSERT_EQ(folders.size(), 1u);
  const fs::path dir = folders[0];
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  std::string listing;
  for (const std::string& f : files) listing += f + "\n";

  // The graph before and after every pass, each parseable.
  const std::regex pass_file("[0-9][0-9]-.+\\.kir");
  int pass_files = 0;
  for (const std::string& f : files) {
    if (!std::regex_match(f, pass_file)) continue;
    ++pass_files;
    absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(ReadFile(dir / f));
    EXPECT_TRUE(parsed.ok()) << f << ": " << parsed.status();
  }
  EXPECT_GE(pass_files, 2) << listing;

  // The fusion decisions: the softmax's nodes were fused into one group.
  const std::string fusion = ReadFile(dir / "fusion.txt");
  EXPECT_THAT(fusion, HasSubstr(" fused: "));
  EXPECT_THAT(fusion, HasSubstr("group 0"));
  EXPECT_THAT(fusion, ::testing::Not(HasSubstr("group 1"))) << fusion;

  // Exactly one kernel, with its kernel IR, LLVM IR and assembly.
  EXPECT_TRUE(fs::exists(dir / "kernel_0.kir")) << listing;
  EXPECT_FALSE(fs::exists(dir / "kernel_1.kir")) << listing;
  EXPECT_THAT(ReadFile(dir / "kernel_0.kir"), HasSubstr("reduce"));
  EXPECT_THAT(ReadFile(dir / "kernel_0.ll"), HasSubstr("define"));
  const std::string assembly = ReadFile(dir / "kernel_0.s");
  EXPECT_THAT(assembly, HasSubstr("ret")) << assembly.substr(0, 2000);
  EXPECT_FALSE(ReadFile(dir / "memory_plan.txt").empty()) << listing;
  EXPECT_FALSE(ReadFile(dir / "executable.txt").empty()) << listing;

  fs::remove_all(root);
}

TEST(CpuDumpTest, SoftmaxCompilesToOneKernel) {
  ir::Builder b;
  const ir::Shape shape = {6, 10};
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, shape});
  const ir::NodeId shifted =
      b.Binary(ir::Op::kSub, x, b.Broadcast(b.Reduce(ir::Op::kReduceMax, x, {1}), shape));
  const ir::NodeId e = b.Unary(ir::Op::kExp, shifted);
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(b.Reduce(ir::Op::kReduceSum, e, {1}), shape)));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
      codegen::cpu::CompileGraph(*graph);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->num_kernels, 1);
  EXPECT_EQ((*compiled)->num_gemm_steps, 0);
  EXPECT_EQ((*compiled)->dump_directory, "");
}

}  // namespace
}  // namespace kiln
