// KILN_DUMP on the backend under test: realizing a softmax writes one folder with every stage of
// its compile (the graph after each pass, the fusion decisions, each kernel's kernel IR and the
// backend's own forms of it, the memory plan and the executable), and the softmax is a single
// kernel, with short rows and with rows long enough for the backends' cooperative reductions.
#include <kiln/kiln.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Realizes softmax over rows of `cols` with KILN_DUMP set, checks the values and every file of
// the one dump folder, then hands the folder to the backend's own checks.
void DumpSoftmaxAndCheck(int rows, int cols) {
  const BackendUnderTest& backend = Backend();
  const fs::path root =
      fs::temp_directory_path() / ("kiln_dump_test_" + backend.name + "_" + std::to_string(rows) +
                                   "x" + std::to_string(cols) + "_" + std::to_string(getpid()));
  fs::remove_all(root);
  ASSERT_EQ(setenv("KILN_DUMP", root.c_str(), 1), 0);
  const Any::Device device(kiln::Device::Parse(backend.device));
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i));
  const std::vector<float> result =
      activation::softmax(Tensor<Any, 2>::from_vector(values, {rows, cols}, device), 1)
          .to_vector<float>();
  unsetenv("KILN_DUMP");

  // The values are a softmax (exp runs as a 1-ulp polynomial: rows sum to 1 within f32 rounding).
  ASSERT_EQ(result.size(), values.size());
  for (int row = 0; row < rows; ++row) {
    double max = -INFINITY, sum = 0;
    for (int j = 0; j < cols; ++j) max = std::max<double>(max, values[row * cols + j]);
    for (int j = 0; j < cols; ++j) sum += std::exp(values[row * cols + j] - max);
    for (int j = 0; j < cols; ++j) {
      EXPECT_NEAR(result[row * cols + j], std::exp(values[row * cols + j] - max) / sum, 1e-6);
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

  // Exactly one kernel: its kernel IR (both reductions of the row) and the backend's forms.
  ASSERT_TRUE(fs::exists(dir / "kernel_0.kir")) << listing;
  EXPECT_FALSE(fs::exists(dir / "kernel_1.kir")) << listing;
  const std::string kir = ReadFile(dir / "kernel_0.kir");
  EXPECT_THAT(kir, HasSubstr("reduce max.f32"));
  EXPECT_THAT(kir, HasSubstr("reduce sum.f32"));
  for (const KernelDumpFile& file : backend.kernel_dump_files) {
    const std::string name = "kernel_0." + file.extension;
    ASSERT_TRUE(fs::exists(dir / name)) << listing;
    EXPECT_FALSE(fs::exists(dir / ("kernel_1." + file.extension))) << listing;
    const std::string text = ReadFile(dir / name);
    for (const std::string& part : file.contains) {
      EXPECT_THAT(text, HasSubstr(part)) << name << ":\n" << text.substr(0, 2000);
    }
  }
  EXPECT_FALSE(ReadFile(dir / "memory_plan.txt").empty()) << listing;
  const std::string executable = ReadFile(dir / "executable.txt");
  EXPECT_FALSE(executable.empty()) << listing;
  for (const std::string& part : backend.executable_dump_contains) {
    EXPECT_THAT(executable, HasSubstr(part));
  }
  if (backend.check_dump) backend.check_dump(SoftmaxDump{rows, cols, dir.string()});
  fs::remove_all(root);
}

TEST(ConformanceDumpTest, ShortRowSoftmaxWritesEveryStage) { DumpSoftmaxAndCheck(5, 7); }

TEST(ConformanceDumpTest, LongRowSoftmaxWritesEveryStage) { DumpSoftmaxAndCheck(3, 1000); }

TEST(ConformanceDumpTest, SoftmaxCompilesToOneKernel) {
  ir::Builder b;
  const ir::Shape shape = {6, 10};
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, shape});
  const ir::NodeId shifted =
      b.Binary(ir::Op::kSub, x, b.Broadcast(b.Reduce(ir::Op::kReduceMax, x, {1}), shape));
  const ir::NodeId e = b.Unary(ir::Op::kExp, shifted);
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(b.Reduce(ir::Op::kReduceSum, e, {1}), shape)));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<CompileStats> compiled = Backend().compile(*graph);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->kernels, 1);
  EXPECT_EQ(compiled->contractions, 0);
  EXPECT_EQ(compiled->dump_directory, "");
}

}  // namespace
}  // namespace kiln::conformance
