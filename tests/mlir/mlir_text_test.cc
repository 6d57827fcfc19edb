// MLIR text export (codegen/mlir/mlir_text.h): mlir-opt-16 (mlir-16-tools) parses and verifies
// the export of every per-op case of tests/codegen/op_cases (every IR op with its dtypes and
// attribute variants), of random graphs and of three models (MLP + softmax, conv net, layer norm
// + GELU), and lowers them all to the LLVM dialect (bufferization, linalg → loops, arith/math/
// memref/func → llvm) and through mlir-translate-16 to LLVM IR, which checks that the linalg
// ops are well-formed beyond the verifier.
#include "codegen/mlir/mlir_text.h"

#include <stdio.h>
#include <stdlib.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
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

// Removes a temporary folder made by OutputDir (kept when $KILN_MLIR_EXPORT_DIR chose the folder,
// for inspection).
struct RemoveWhenDone {
  fs::path dir;
  ~RemoveWhenDone() {
    const char* env = std::getenv("KILN_MLIR_EXPORT_DIR");
    if (env == nullptr || *env == '\0') {
      std::error_code ignored;
      fs::remove_all(dir.parent_path(), ignored);
    }
  }
};

std::pair<int, std::string> RunCommand(const std::string& cmd) {
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
      RunCommand(absl::StrCat(kMlirOpt, " --split-input-file ", flags, " '",
                              (dir / "all.mlir").string(), "' -o '", lowered, "'", translate));
  if (status == 0) return;
  std::string failures;
  int failed = 0;
  for (const auto& [name, text] : mods) {
    const std::string one = (dir / (name + ".mlir")).string();
    const auto [s, out] = RunCommand(
        absl::StrCat(kMlirOpt, " ", flags, " '", one, "' -o '", one, ".lowered'",
                     lowering ? absl::StrCat(" && ", kMlirTranslate, " --mlir-to-llvmir '", one,
                                             ".lowered' -o /dev/null")
                              : ""));
    if (s != 0 && ++failed <= 10) absl::StrAppend(&failures, name, ":\n", out.substr(0, 1500));
  }
  ADD_FAILURE() << failed << " of " << mods.size() << " modules fail `mlir-opt-16 " << flags
                << "` (files in " << dir << ")\n"
                << failures;
}

// Ops without an MLIR form: random_* (kiln's Philox stream) and sort/argsort (no linalg sort).
bool HasNoMlirForm(ir::Op op) {
  return op == ir::Op::kRandomUniform || op == ir::Op::kRandomNormal ||
         ir::GetOpClass(op) == ir::OpClass::kSort;
}

bool LacksMlirForm(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (HasNoMlirForm(n.op)) return true;
  }
  return false;
}

TEST(MlirExportTable, OneRowPerOpInTableOrder) {
  const auto rules = codegen::MlirExportRules();
  ASSERT_EQ(rules.size(), std::size(ir::kAllOps));
  for (size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(rules[i].op, ir::kAllOps[i]) << "row " << i;
    EXPECT_EQ(std::string(rules[i].mlir).empty(), HasNoMlirForm(rules[i].op))
        << ir::OpName(rules[i].op);
  }
}

class MlirExportTest : public ::testing::Test {
 protected:
  // Every op case and 30 random graphs (random and sort ops excluded: they have no MLIR form).
  static std::vector<std::pair<std::string, std::string>> Modules() {
    std::vector<std::pair<std::string, std::string>> mods;
    std::set<ir::Op> exported;
    for (const test::Case& c : test::Cases()) {
      absl::StatusOr<test::CaseInstance> in = test::Instantiate(c);
      EXPECT_TRUE(in.ok()) << in.status();
      if (!in.ok()) continue;
      absl::StatusOr<std::string> text = codegen::ExportMlir(in->graph);
      if (LacksMlirForm(in->graph)) {
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
  const fs::path dir = OutputDir("verify");
  const RemoveWhenDone cleanup{dir};
  CheckModules(dir, mods, "", false);
}

TEST_F(MlirExportTest, EveryOpCaseLowersToTheLlvmDialect) {
  const fs::path dir = OutputDir("lower");
  const RemoveWhenDone cleanup{dir};
  CheckModules(dir, Modules(), kLowering, true);
}

// ---- Running the lowered modules (mlir-cpu-runner-16) ------------------------------------------

constexpr const char* kRunner = "/usr/bin/mlir-cpu-runner-16";
constexpr const char* kRunnerLibs =
    "/usr/lib/llvm-16/lib/libmlir_runner_utils.so,/usr/lib/llvm-16/lib/libmlir_c_runner_utils.so";
constexpr const char* kBufferize =
    "--empty-tensor-to-alloc-tensor "
    "'--one-shot-bufferize=bufferize-function-boundaries allow-return-allocs "
    "function-boundary-type-conversion=identity-layout-map'";
constexpr const char* kLowerBuffers =
    "--convert-linalg-to-loops --lower-affine --convert-scf-to-cf --expand-strided-metadata "
    "--convert-memref-to-llvm --convert-math-to-llvm --convert-math-to-libm --arith-expand "
    "--convert-arith-to-llvm --convert-func-to-llvm --convert-cf-to-llvm "
    "--reconcile-unrealized-casts";

const char* Elem(ir::DType d) {
  switch (d) {
    case ir::DType::kF32:
      return "f32";
    case ir::DType::kF64:
      return "f64";
    case ir::DType::kF16:
      return "f16";
    case ir::DType::kBF16:
      return "bf16";
    case ir::DType::kI32:
      return "i32";
    case ir::DType::kI64:
      return "i64";
    case ir::DType::kU8:
    case ir::DType::kI8:
      return "i8";
    case ir::DType::kI16:
    case ir::DType::kU16:
      return "i16";
    case ir::DType::kU32:
      return "i32";
    case ir::DType::kU64:
      return "i64";
    case ir::DType::kBool:
      return "i1";
  }
  return "?";
}

std::string Memref(const ir::Shape& shape, const std::string& elem) {
  std::string s = "memref<";
  for (int64_t d : shape) absl::StrAppend(&s, d, "x");
  return absl::StrCat(s, elem, ">");
}

std::string Hex(const ir::TensorData& t) {
  static const char* digits = "0123456789ABCDEF";
  std::string s = "0x";
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  for (int64_t i = 0; i < t.num_elements() * ir::DTypeSize(t.dtype()); ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// A linalg.generic on buffers converting `from` (elem type a) into a new buffer of elem type b.
std::string Convert(const std::string& from, const ir::Shape& shape, const std::string& a,
                    const std::string& b, const std::string& op, const std::string& to) {
  std::vector<std::string> dims;
  for (size_t i = 0; i < shape.size(); ++i) dims.push_back(absl::StrCat("d", i));
  const std::string map = absl::StrCat("affine_map<(", absl::StrJoin(dims, ", "), ") -> (",
                                       absl::StrJoin(dims, ", "), ")>");
  std::vector<std::string> iters(shape.size(), "\"parallel\"");
  return absl::StrCat("    ", to, " = memref.alloc() : ", Memref(shape, b), "\n",
                      "    linalg.generic {indexing_maps = [", map, ", ", map,
                      "], iterator_types = [", absl::StrJoin(iters, ", "), "]} ins(", from, " : ",
                      Memref(shape, a), ") outs(", to, " : ", Memref(shape, b), ") {\n",
                      "    ^bb0(%x: ", a, ", %y: ", b, "):\n      ", op, "\n",
                      "      linalg.yield %e : ", b, "\n    }\n");
}

TEST_F(MlirExportTest, LoweredModulesRunLikeTheInterpreter) {
  struct Expected {
    std::string name;
    ir::TensorData value;
    test::Tolerance tol;
  };
  std::vector<Expected> expected;
  std::string funcs = "module {\n", entry, globals;
  int index = 0;
  auto add = [&](const std::string& name, const ir::Graph& graph,
                 const std::vector<ir::TensorData>& args, test::Tolerance tol) {
    if (LacksMlirForm(graph)) return;
    absl::StatusOr<std::vector<ir::TensorData>> want = ir::Interpret(graph, args);
    if (!want.ok()) return;  // e.g. an out-of-range random index: nothing to compare
    const int i = index++;
    codegen::MlirExportOptions options;
    options.function_name = absl::StrCat("case", i);
    options.module = false;
    absl::StatusOr<std::string> text = codegen::ExportMlir(graph, options);
    ASSERT_TRUE(text.ok()) << name << ": " << text.status();
    absl::StrAppend(&funcs, *text);
    std::vector<std::string> names, types;
    const std::vector<ir::NodeId> params = graph.Parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      const ir::TensorData& a = args[k];
      const std::string v = absl::StrCat("%a", i, "_", k);
      const std::string type = Memref(a.shape(), Elem(a.dtype()));
      if (a.num_elements() == 0) {
        absl::StrAppend(&entry, "    ", v, " = memref.alloc() : ", type, "\n");
      } else if (a.dtype() == ir::DType::kBool) {  // i1 has no hex form: stored as i8
        absl::StrAppend(&globals, "  memref.global \"private\" @g", i, "_", k, " : ",
                        Memref(a.shape(), "i8"), " = dense<\"", Hex(a), "\">\n");
        absl::StrAppend(
            &entry, "    ", v, "b = memref.get_global @g", i, "_", k, " : ",
            Memref(a.shape(), "i8"), "\n",
            Convert(v + "b", a.shape(), "i8", "i1",
                    "%z = arith.constant 0 : i8\n      %e = arith.cmpi ne, %x, %z : i8", v));
      } else {
        absl::StrAppend(&globals, "  memref.global \"private\" @g", i, "_", k, " : ", type,
                        " = dense<\"", Hex(a), "\">\n");
        absl::StrAppend(&entry, "    ", v, " = memref.get_global @g", i, "_", k, " : ", type, "\n");
      }
      names.push_back(v);
      types.push_back(type);
    }
    std::vector<std::string> result_types;
    for (const ir::Output& o : graph.outputs()) {
      const ir::TensorType& t = graph.node(o.node).type;
      result_types.push_back(Memref(t.shape, Elem(t.dtype)));
    }
    const size_t n = result_types.size();
    const std::string r = absl::StrCat("%r", i);
    absl::StrAppend(&entry, "    ", r, n > 1 ? absl::StrCat(":", n) : "", " = call @case", i, "(",
                    absl::StrJoin(names, ", "), ") : (", absl::StrJoin(types, ", "), ") -> (",
                    absl::StrJoin(result_types, ", "), ")\n");
    for (size_t j = 0; j < n; ++j) {
      const ir::TensorData& w = (*want)[j];
      if (w.num_elements() == 0) continue;
      std::string v = n > 1 ? absl::StrCat(r, "#", j) : r;
      std::string print = Elem(w.dtype());
      const std::string c = absl::StrCat("%c", i, "_", j);
      if (w.dtype() == ir::DType::kF16 || w.dtype() == ir::DType::kBF16) {
        absl::StrAppend(
            &entry, Convert(v, w.shape(), Elem(w.dtype()), "f32",
                            absl::StrCat("%e = arith.extf %x : ", Elem(w.dtype()), " to f32"), c));
        v = c;
        print = "f32";
      } else if (ir::DTypeSize(w.dtype()) < 4 || w.dtype() == ir::DType::kU32) {
        // The runner prints i32 and i64 (signed): narrower values and u32 are extended first.
        // u64 prints as i64, its bit pattern, which is what GetInt64 gives.
        const std::string wide = w.dtype() == ir::DType::kU32 ? "i64" : "i32";
        const char* ext = ir::IsSignedInteger(w.dtype()) ? "arith.extsi" : "arith.extui";
        absl::StrAppend(
            &entry,
            Convert(v, w.shape(), Elem(w.dtype()), wide,
                    absl::StrCat("%e = ", ext, " %x : ", Elem(w.dtype()), " to ", wide), c));
        v = c;
        print = wide;
      }
      const std::string u = absl::StrCat("%u", i, "_", j);
      std::string fn = print;
      fn[0] = static_cast<char>(std::toupper(fn[0]));
      absl::StrAppend(&entry, "    ", u, " = memref.cast ", v, " : ", Memref(w.shape(), print),
                      " to memref<*x", print, ">\n", "    call @printMemref", fn, "(", u,
                      ") : (memref<*x", print, ">) -> ()\n");
      expected.push_back({absl::StrCat(name, " output ", j), w, tol});
    }
  };
  for (const test::Case& c : test::Cases()) {
    absl::StatusOr<test::CaseInstance> in = test::Instantiate(c);
    ASSERT_TRUE(in.ok());
    add(c.name, in->graph, in->arguments, c.tolerance);
  }
  test::RandomGraphOptions options;
  options.allow_random = false;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    test::RandomGraph g = test::MakeRandomGraph(seed, options);
    add(absl::StrCat("random_", seed), g.graph, g.arguments, g.tolerance);
  }
  for (const test::ExportModel& m : test::ExportModels()) {
    add(m.name, m.graph, m.arguments, {1e-5, 1e-6});
  }
  absl::StrAppend(&funcs, "}\n");

  const fs::path dir = OutputDir("run");

  const RemoveWhenDone cleanup_dir{dir};
  std::ofstream(dir / "cases.mlir") << funcs;
  auto [s1, o1] =
      RunCommand(absl::StrCat(kMlirOpt, " ", kBufferize, " '", (dir / "cases.mlir").string(),
                              "' -o '", (dir / "bufferized.mlir").string(), "'"));
  ASSERT_EQ(s1, 0) << o1.substr(0, 3000);
  std::ifstream in(dir / "bufferized.mlir");
  std::string module((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = module.rfind('}');
  ASSERT_NE(close, std::string::npos);
  module = absl::StrCat(
      module.substr(0, close), globals, "  func.func @entry() {\n", entry, "    return\n  }\n",
      "  func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}\n",
      "  func.func private @printMemrefF64(memref<*xf64>) attributes {llvm.emit_c_interface}\n",
      "  func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}\n",
      "  func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}\n",
      "}\n");
  std::ofstream(dir / "run.mlir") << module;
  auto [s2, o2] =
      RunCommand(absl::StrCat(kMlirOpt, " ", kLowerBuffers, " '", (dir / "run.mlir").string(),
                              "' -o '", (dir / "run.llvm.mlir").string(), "'"));
  ASSERT_EQ(s2, 0) << o2.substr(0, 3000);
  auto [s3, o3] = RunCommand(
      absl::StrCat(kRunner, " -e entry -entry-point-result=void -shared-libs=", kRunnerLibs, " '",
                   (dir / "run.llvm.mlir").string(), "'"));
  ASSERT_EQ(s3, 0) << o3.substr(0, 3000);

  // One "Unranked Memref ... data = [[...]]" block per printed output, in order.
  std::vector<std::vector<std::string>> printed;
  size_t pos = 0;
  while ((pos = o3.find("Unranked Memref", pos)) != std::string::npos) {
    const size_t data = o3.find("data =", pos);
    const size_t next = o3.find("Unranked Memref", pos + 1);
    std::string body =
        o3.substr(data + 6, next == std::string::npos ? std::string::npos : next - data - 6);
    for (char& ch : body) {
      if (ch == '[' || ch == ']' || ch == ',') ch = ' ';
    }
    std::istringstream tokens(body);
    std::vector<std::string> values;
    for (std::string t; tokens >> t;) values.push_back(t);
    printed.push_back(values);
    pos = next == std::string::npos ? o3.size() : next;
  }
  ASSERT_EQ(printed.size(), expected.size()) << o3.substr(0, 2000);
  int mismatched = 0;
  for (size_t k = 0; k < expected.size(); ++k) {
    const Expected& e = expected[k];
    ASSERT_EQ(static_cast<int64_t>(printed[k].size()), e.value.num_elements()) << e.name;
    for (int64_t i = 0; i < e.value.num_elements(); ++i) {
      const std::string& tok = printed[k][static_cast<size_t>(i)];
      bool ok;
      if (ir::IsFloat(e.value.dtype())) {
        const double got = std::strtod(tok.c_str(), nullptr), want = e.value.GetDouble(i);
        // printMemref prints 6 significant digits.
        const double rtol = std::max(e.tol.rtol, 1e-5), atol = std::max(e.tol.atol, 1e-6);
        ok = (std::isnan(want) && std::isnan(got)) || got == want ||
             std::abs(got - want) <= atol + rtol * std::abs(want);
      } else {
        ok = std::strtoll(tok.c_str(), nullptr, 10) == e.value.GetInt64(i);
      }
      if (!ok) {
        if (++mismatched <= 20) {
          ADD_FAILURE() << e.name << " element " << i << ": mlir-cpu-runner " << tok
                        << ", interpreter " << e.value.GetDouble(i);
        }
        break;
      }
    }
  }
  std::cout << index << " graphs, " << expected.size() << " outputs compared, " << mismatched
            << " differ\n";
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
