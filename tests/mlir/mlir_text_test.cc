// MLIR text export (codegen/mlir/mlir_text.h): mlir-opt-16 (mlir-16-tools) parses and verifies
// the export of every per-op case of tests/codegen/op_cases (every IR op with its dtypes and
// attribute variants), of random graphs and of three models (MLP + softmax, conv net, layer norm
// + GELU), and lowers them all to the LLVM dialect (bufferization, linalg → loops, arith/math/
// memref/func → llvm) and through mlir-translate-16 to LLVM IR, which checks that the linalg
// ops are well-formed beyond the verifier.
#include "codegen/mlir/mlir_text.h"

#include <stdio.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "tests/codegen/op_cases.h"
#include "tests/codegen/random_graph.h"
#include "tests/onnx/export_models.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kMlirOpt = "/usr/bin/mlir-opt-16";
constexpr const char* kMlirTranslate = "/usr/bin/mlir-translate-16";
// The lowering of docs/onnx.md "MLIR" (MLIR 16 pass names).
constexpr const char* kLowering =
    "--empty-tensor-to-alloc-tensor "
    "'--one-shot-bufferize=bufferize-function-boundaries allow-return-allocs "
    "function-boundary-type-conversion=identity-layout-map' "
    "--convert-linalg-to-loops --lower-affine --convert-scf-to-cf --expand-strided-metadata "
    "--convert-memref-to-llvm --convert-math-to-llvm --convert-math-to-libm --arith-expand "
    "--convert-arith-to-llvm --convert-func-to-llvm --convert-cf-to-llvm "
    "--reconcile-unrealized-casts";

fs::path OutputDir(const std::string& suite) {
  if (const char* dir = std::getenv("KILN_MLIR_EXPORT_DIR"); dir != nullptr && *dir != '\0') {
    fs::path p = fs::path(dir) / suite;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/kiln_mlir_export_XXXXXX");
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  fs::path p = fs::path(pattern) / suite;
  fs::create_directories(p);
  return p;
}

std::pair<int, std::string> Run(const std::string& cmd) {
  FILE* pipe = popen(absl::StrCat(cmd, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Writes each module to its own file and all of them, separated by "// -----", to all.mlir.
// Checks all.mlir with one mlir-opt-16 run (--split-input-file: every module on its own), and
// with `lowering` translates the result to LLVM IR; on a failure, names the failing files.
void CheckModules(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& mods,
                  const std::string& flags, bool lowering) {
  std::ofstream all(dir / "all.mlir");
  for (size_t i = 0; i < mods.size(); ++i) {
    std::ofstream(dir / (mods[i].first + ".mlir")) << mods[i].second;
    all << (i == 0 ? "" : "// -----\n") << mods[i].second;
  }
  all.close();
  // Lowered modules must also translate to LLVM IR: any op left outside the LLVM dialect fails.
  const std::string lowered = (dir / "all.lowered.mlir").string();
  const std::string translate =
      lowering ? absl::StrCat(" && ", kMlirTranslate, " --split-input-file --mlir-to-llvmir '",
                              lowered, "' -o /dev/null")
               : "";
  const auto [status, output] =
      Run(absl::StrCat(kMlirOpt, " --split-input-file ", flags, " '", (dir / "all.mlir").string(),
                       "' -o '", lowered, "'", translate));
  if (status == 0) return;
  std::string failures;
  int failed = 0;
  for (const auto& [name, text] : mods) {
    const std::string one = (dir / (name + ".mlir")).string();
    const auto [s, out] =
        Run(absl::StrCat(kMlirOpt, " ", flags, " '", one, "' -o '", one, ".lowered'",
                         lowering ? absl::StrCat(" && ", kMlirTranslate, " --mlir-to-llvmir '", one,
                                                 ".lowered' -o /dev/null")
                                  : ""));
    if (s != 0 && ++failed <= 10) absl::StrAppend(&failures, name, ":\n", out.substr(0, 1500));
  }
  ADD_FAILURE() << failed << " of " << mods.size() << " modules fail `mlir-opt-16 " << flags
                << "` (files in " << dir << ")\n"
                << failures;
}

bool IsRandom(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kRandomUniform || n.op == ir::Op::kRandomNormal) return true;
  }
  return false;
}

TEST(MlirExportTable, OneRowPerOpInTableOrder) {
  const auto rules = codegen::MlirExportRules();
  ASSERT_EQ(rules.size(), std::size(ir::kAllOps));
  for (size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(rules[i].op, ir::kAllOps[i]) << "row " << i;
    const bool random =
        rules[i].op == ir::Op::kRandomUniform || rules[i].op == ir::Op::kRandomNormal;
    EXPECT_EQ(std::string(rules[i].mlir).empty(), random) << ir::OpName(rules[i].op);
  }
}

class MlirExportTest : public ::testing::Test {
 protected:
  // Every op case and 30 random graphs (random ops excluded: they have no MLIR form).
  static std::vector<std::pair<std::string, std::string>> Modules() {
    std::vector<std::pair<std::string, std::string>> mods;
    std::set<ir::Op> exported;
    for (const test::Case& c : test::Cases()) {
      absl::StatusOr<test::CaseInstance> in = test::Instantiate(c);
      EXPECT_TRUE(in.ok()) << in.status();
      if (!in.ok()) continue;
      absl::StatusOr<std::string> text = codegen::ExportMlir(in->graph);
      if (IsRandom(in->graph)) {
        EXPECT_EQ(text.status().code(), absl::StatusCode::kUnimplemented) << c.name;
        continue;
      }
      EXPECT_TRUE(text.ok()) << c.name << ": " << text.status();
      if (!text.ok()) continue;
      for (const ir::Node& n : in->graph.nodes()) exported.insert(n.op);
      mods.push_back({test::CaseTestName({c, mods.size()}), *text});
    }
    for (const codegen::MlirExportRule& rule : codegen::MlirExportRules()) {
      if (!std::string(rule.mlir).empty()) {
        EXPECT_TRUE(exported.count(rule.op)) << ir::OpName(rule.op) << " never exported";
      }
    }
    test::RandomGraphOptions options;
    options.allow_random = false;
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      test::RandomGraph g = test::MakeRandomGraph(seed, options);
      absl::StatusOr<std::string> text = codegen::ExportMlir(g.graph);
      EXPECT_TRUE(text.ok()) << text.status() << "\n" << g.text;
      if (text.ok()) mods.push_back({absl::StrCat("random_", seed), *text});
    }
    for (const test::ExportModel& m : test::ExportModels()) {
      absl::StatusOr<std::string> text = codegen::ExportMlir(m.graph);
      EXPECT_TRUE(text.ok()) << m.name << ": " << text.status();
      if (text.ok()) mods.push_back({absl::StrCat("model_", m.name), *text});
    }
    return mods;
  }
};

TEST_F(MlirExportTest, EveryOpCaseParsesAndVerifies) {
  ASSERT_THAT(test::OpsWithoutCase(), ::testing::IsEmpty());
  const auto mods = Modules();
  std::cout << mods.size() << " modules\n";
  CheckModules(OutputDir("verify"), mods, "", false);
}

TEST_F(MlirExportTest, EveryOpCaseLowersToTheLlvmDialect) {
  CheckModules(OutputDir("lower"), Modules(), kLowering, true);
}

TEST(MlirExport, NamesAndErrors) {
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x \"in\"", {ir::DType::kF32, {2}});
  b.Output(b.Unary(ir::Op::kExp, x), "y");
  b.Output(x);
  const ir::Graph g = *std::move(b).Build();
  codegen::MlirExportOptions options;
  options.function_name = "forward";
  absl::StatusOr<std::string> text = codegen::ExportMlir(g, options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text,
              HasSubstr("func.func @forward(%arg0: tensor<2xf32> {kiln.name = \"x \\22in\\22\"})"));
  EXPECT_THAT(*text, HasSubstr("-> (tensor<2xf32> {kiln.name = \"y\"}, tensor<2xf32>)"));
  EXPECT_THAT(*text, HasSubstr("math.exp"));

  options.function_name = "bad name";
  EXPECT_EQ(codegen::ExportMlir(g, options).status().code(), absl::StatusCode::kInvalidArgument);

  ir::Builder r;
  r.Output(r.RandomUniform({ir::DType::kF32, {3}}, 1));
  const absl::Status s = codegen::ExportMlir(*std::move(r).Build()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no MLIR equivalent for op random_uniform"));
}

}  // namespace
}  // namespace kiln
