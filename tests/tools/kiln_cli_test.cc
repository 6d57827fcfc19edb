// End-to-end tests of the `kiln` command line (tools/kiln, docs/cli.md): the program is run as a
// user runs it (KILN_TOOL_PATH), and its outputs are checked against the reference interpreter.
// Also: the bad IR-text corpus (tests/tools/corpus/ir_bad/expected.txt), `kiln dump` against a
// KILN_DUMP run of the JIT, Graphviz output, and bad input on every command. ONNX models
// (tests/onnx/models, PyTorch's outputs as the oracle) go through compile/run, dynamic shapes,
// import errors, and `kiln export` to ONNX (imported back) and MLIR (checked by mlir-opt-16).
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "frontend/onnx/import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "ir/npy.h"
#include "ir/parser.h"

#ifndef KILN_TOOL_PATH
#error "KILN_TOOL_PATH (the kiln program) must be defined by the build"
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const char kMlp[] = "tests/tools/graphs/mlp.kir";

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Result {
  int code = -1;
  std::string out, err;
};

class KilnCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_cli_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `kiln <args>` through the shell (args are quoted by the caller where needed).
  Result Kiln(const std::string& args, const std::string& env = "") {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string command =
        env + " " + KILN_TOOL_PATH + " " + args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(command.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadText(out);
    r.err = ReadText(err);
    return r;
  }

  std::string P(const std::string& name) const { return (dir_ / name).string(); }

  ir::Graph Mlp() {
    absl::StatusOr<ir::Graph> g = ir::ParseGraph(ReadText(kMlp));
    EXPECT_TRUE(g.ok()) << g.status();
    return *std::move(g);
  }

  // Seeded random values for each parameter, written as in_<name>.npy.
  std::vector<ir::TensorData> WriteInputs(const ir::Graph& graph) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::vector<ir::TensorData> inputs;
    for (ir::NodeId p : graph.Parameters()) {
      const ir::Node& node = graph.node(p);
      ir::TensorData t(node.type.dtype, node.type.shape);
      for (int64_t i = 0; i < t.num_elements(); ++i) t.SetDouble(i, uniform(rng));
      EXPECT_TRUE(ir::WriteNpy(P("in_" + node.attrs.name + ".npy"), t).ok());
      inputs.push_back(std::move(t));
    }
    return inputs;
  }

  fs::path dir_;
};

void ExpectClose(const ir::TensorData& want, const ir::TensorData& got, const std::string& what) {
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  ASSERT_EQ(want.shape(), got.shape()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.GetDouble(i);
    EXPECT_NEAR(got.GetDouble(i), w, 1e-5 + 1e-4 * std::abs(w)) << what << " element " << i;
  }
}

TEST_F(KilnCli, CompileInspectRunMatchesTheInterpreter) {
  const ir::Graph graph = Mlp();
  const std::vector<ir::TensorData> inputs = WriteInputs(graph);
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();

  Result c = Kiln(std::string("compile ") + kMlp + " -o " + P("m.kiln"));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("wrote " + P("m.kiln")));

  Result i = Kiln("inspect " + P("m.kiln") + " --ir");
  ASSERT_EQ(i.code, 0) << i.err;
  for (const char* name : {"x", "w1", "w2", "probs", "logits", "f32", "[4,16]", "weights", "mlp"}) {
    EXPECT_THAT(i.out, HasSubstr(name));
  }
  EXPECT_THAT(i.out, HasSubstr("reduce_max"));  // the IR text section

  Result r =
      Kiln("run " + P("m.kiln") + " --input x=" + P("in_x.npy") + " --input w2=" + P("in_w2.npy") +
           " -i w1=" + P("in_w1.npy") + " --output " + P("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    const std::string name = graph.outputs()[o].name;
    absl::StatusOr<ir::TensorData> got = ir::ReadNpy(P("out/" + name + ".npy"));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose((*expected)[o], *got, name);
  }

  // Without --output: a summary on stdout. Positional inputs fill the inputs in order.
  Result s = Kiln("run " + P("m.kiln") + " -i " + P("in_x.npy") + " -i " + P("in_w1.npy") + " -i " +
                  P("in_w2.npy"));
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("probs: f32[4,3] ["));
}

TEST_F(KilnCli, OutputFilesStayInTheOutputFolder) {
  const std::string graph_path = "tests/tools/graphs/output_names.kir";
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(ReadText(graph_path));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<ir::TensorData> inputs = WriteInputs(*graph);
  ASSERT_EQ(Kiln("compile " + graph_path + " -o " + P("m.kiln")).code, 0);
  fs::create_directories(P("sub"));
  Result r = Kiln("run " + P("m.kiln") + " -i x=" + P("in_x.npy") + " --output " + P("sub/out"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(P("sub/out"))) {
    files.insert(e.path().filename().string());
  }
  EXPECT_EQ(files, (std::set<std::string>{".._up.npy", "a_b.npy", "output2.npy", "y.npy",
                                          "a_b_1.npy", "output_5.npy"}));
  EXPECT_FALSE(fs::exists(P("sub/up.npy")));
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(*graph, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const char* order[] = {".._up.npy", "a_b.npy",   "output2.npy",
                         "y.npy",     "a_b_1.npy", "output_5.npy"};
  for (size_t o = 0; o < 6; ++o) {
    absl::StatusOr<ir::TensorData> got = ir::ReadNpy(P("sub/out/") + order[o]);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == (*expected)[o]) << order[o];
  }
}

TEST_F(KilnCli, NoIrTextLeavesTheSectionOut) {
  ASSERT_EQ(Kiln(std::string("compile ") + kMlp + " -o " + P("m.kiln") + " --no-ir-text").code, 0);
  Result i = Kiln("inspect " + P("m.kiln") + " --ir");
  EXPECT_NE(i.code, 0);
  EXPECT_THAT(i.err, HasSubstr("no IR text"));
  Result plain = Kiln("inspect " + P("m.kiln"));
  EXPECT_EQ(plain.code, 0) << plain.err;
  EXPECT_THAT(plain.out, Not(HasSubstr("ir text")));
}

TEST_F(KilnCli, BenchReportsLoadAndLatency) {
  ASSERT_EQ(Kiln(std::string("compile ") + kMlp + " -o " + P("m.kiln")).code, 0);
  Result b = Kiln("bench " + P("m.kiln") + " --runs 5 --warmup 1");
  ASSERT_EQ(b.code, 0) << b.err;
  for (const char* field : {"load", "first run", "median", "min", "5 runs"}) {
    EXPECT_THAT(b.out, HasSubstr(field));
  }
  EXPECT_NE(Kiln("bench " + P("m.kiln") + " --runs 0").code, 0);
}

TEST_F(KilnCli, DumpWritesTheSameFilesAsKilnDump) {
  const std::string cli_root = P("cli_dump"), jit_root = P("jit_dump");
  Result d = Kiln(std::string("dump ") + kMlp + " --dir " + cli_root);
  ASSERT_EQ(d.code, 0) << d.err;

  // The JIT path with KILN_DUMP, in this process.
  const ir::Graph graph = Mlp();
  std::vector<std::shared_ptr<const ir::TensorData>> args;
  for (ir::TensorData& t : WriteInputs(graph)) {
    args.push_back(std::make_shared<const ir::TensorData>(std::move(t)));
  }
  ASSERT_EQ(setenv("KILN_DUMP", jit_root.c_str(), 1), 0);
  absl::StatusOr<std::vector<ir::TensorData>> ran = codegen::cpu::CompileAndRun(graph, args);
  unsetenv("KILN_DUMP");
  ASSERT_TRUE(ran.ok()) << ran.status();

  auto listing = [](const fs::path& root) {
    std::set<std::string> files;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) files.insert(fs::relative(e.path(), root).string());
    }
    return files;
  };
  const std::set<std::string> cli = listing(cli_root), jit = listing(jit_root);
  EXPECT_EQ(cli, jit);
  for (const char* f : {"0000-cpu/00-input.kir", "0000-cpu/fusion.txt", "0000-cpu/kernel_0.kir",
                        "0000-cpu/kernel_0.ll", "0000-cpu/kernel_0.s", "0000-cpu/memory_plan.txt",
                        "0000-cpu/executable.txt"}) {
    EXPECT_EQ(cli.count(f), 1u) << f;
  }
  EXPECT_THAT(d.out, HasSubstr("wrote " + cli_root + "/0000-cpu"));
}

TEST_F(KilnCli, VizWritesDotAndSvg) {
  Result dot = Kiln(std::string("viz ") + kMlp + " -o " + P("g.dot"));
  ASSERT_EQ(dot.code, 0) << dot.err;
  EXPECT_THAT(ReadText(P("g.dot")), HasSubstr("digraph"));
  Result svg = Kiln(std::string("viz ") + kMlp + " -o " + P("g.svg"));
  ASSERT_EQ(svg.code, 0) << svg.err;
  EXPECT_THAT(ReadText(P("g.svg")), HasSubstr("<svg"));
  EXPECT_FALSE(fs::exists(P("g.svg.tmp.dot")));

  // Without Graphviz on PATH: a clear error, and .dot still works.
  Result missing = Kiln(std::string("viz ") + kMlp + " -o " + P("h.svg"), "PATH=/nonexistent");
  EXPECT_NE(missing.code, 0);
  EXPECT_THAT(missing.err, HasSubstr("'dot' is not on PATH (apt-get install graphviz)"));
  EXPECT_EQ(Kiln(std::string("viz ") + kMlp + " -o " + P("h.dot"), "PATH=/nonexistent").code, 0);
  Result format = Kiln(std::string("viz ") + kMlp + " -o " + P("g.jpg"));
  EXPECT_NE(format.code, 0);
  EXPECT_THAT(format.err, HasSubstr("unknown picture format"));
}

TEST_F(KilnCli, EveryBadIrFileGivesItsErrorWithThePath) {
  const std::string dir = "tests/tools/corpus/ir_bad/";
  std::ifstream manifest(dir + "expected.txt");
  ASSERT_TRUE(manifest.good()) << "missing " << dir << "expected.txt (run from the repo root)";
  std::string line;
  int cases = 0;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string path = dir + line.substr(0, tab), expect = line.substr(tab + 1);
    SCOPED_TRACE(path);
    absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(ReadText(path));
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().message(), expect);
    // Through the command line: non-zero exit, "<path>:<line>:<col>: ..." on stderr.
    Result c = Kiln("compile " + path + " -o " + P("bad.kiln"));
    EXPECT_NE(c.code, 0);
    EXPECT_THAT(c.err, HasSubstr(path + ":" + expect));
    EXPECT_FALSE(fs::exists(P("bad.kiln")));
    ++cases;
  }
  EXPECT_GE(cases, 12);
}

TEST_F(KilnCli, GoodIrSeedsParse) {
  int seeds = 0;
  for (const fs::directory_entry& e : fs::directory_iterator("tests/tools/corpus/ir")) {
    absl::StatusOr<ir::Graph> g = ir::ParseGraph(ReadText(e.path()));
    EXPECT_TRUE(g.ok()) << e.path() << ": " << g.status();
    ++seeds;
  }
  EXPECT_GE(seeds, 50);
}

TEST_F(KilnCli, BadInputGivesNonZeroExitAndNamesTheFile) {
  ASSERT_EQ(Kiln(std::string("compile ") + kMlp + " -o " + P("m.kiln")).code, 0);
  const ir::Graph graph = Mlp();
  WriteInputs(graph);
  const std::string blob = P("m.kiln");

  struct Case {
    std::string args, expect;
  };
  std::vector<Case> cases = {
      {"compile " + P("missing.kir") + " -o " + P("x.kiln"), P("missing.kir") + ": cannot open"},
      {"compile " + P("model.onnx") + " -o " + P("x.kiln"), P("model.onnx") + ": cannot open"},
      {"dump " + P("model.onnx") + " --dir " + P("d"), P("model.onnx") + ": cannot open"},
      {std::string("compile ") + kMlp + " -o " + P("x.kiln") + " --input-shape x=4x16",
       std::string(kMlp) + ": --input-shape applies to .onnx models only"},
      {std::string("export ") + kMlp + " -o " + P("g.txt"), P("g.txt") + ": unknown format"},
      {std::string("export ") + kMlp + " -o " + P("nodir/g.onnx"),
       P("nodir/g.onnx") + ": cannot write"},
      {std::string("compile ") + kMlp + " -o " + P("x.kiln") + " --target tpu", "--target"},
      {"inspect " + P("missing.kiln"), P("missing.kiln")},
      {"inspect " + std::string(kMlp), std::string(kMlp) + ": blob: "},
      {"run " + std::string(kMlp) + " -i " + P("in_x.npy"), std::string(kMlp) + ": "},
      {"run " + blob + " -i x=" + P("in_x.npy"), blob + ": input 'w1' (f32[16,8]) is not given"},
      {"run " + blob + " -i q=" + P("in_x.npy"), blob + ": the model has no input named 'q'"},
      {"run " + blob + " -i x=" + P("in_w1.npy") + " -i w1=" + P("in_w1.npy") +
           " -i w2=" + P("in_w2.npy"),
       P("in_w1.npy") + ": input 'x' of " + blob + " is f32[4,16], the file holds f32[16,8]"},
      {"run " + blob + " -i x=" + std::string(kMlp),
       std::string(kMlp) + ": npy: byte 0: bad magic"},
      {"bench " + P("missing.kiln"), P("missing.kiln")},
      {"frobnicate", "frobnicate"},
      {"", "A subcommand is required"},
  };
  // A blob where a graph is expected: the error says what the file is and where its graph is.
  for (const std::string& command :
       {"viz " + blob + " -o " + P("g.dot"), "compile " + blob + " -o " + P("x.kiln"),
        "dump " + blob + " --dir " + P("d"), "export " + blob + " -o " + P("g.onnx")}) {
    cases.push_back({command, blob + ": a compiled .kiln blob, not a graph (IR text or ONNX); " +
                                  "'kiln inspect --ir " + blob + "' shows the graph stored in it"});
  }
  // A truncated blob and a blob with one flipped byte.
  const std::string bytes = ReadText(blob);
  std::ofstream(P("truncated.kiln"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x5a;
  std::ofstream(P("flipped.kiln"), std::ios::binary) << flipped;
  for (const char* bad : {"truncated.kiln", "flipped.kiln"}) {
    cases.push_back({"inspect " + P(bad), P(bad) + ": blob: "});
    cases.push_back({"run " + P(bad) + " -i " + P("in_x.npy"), P(bad) + ": "});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    Result r = Kiln(c.args);
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.err, HasSubstr(c.expect));
  }
}

TEST_F(KilnCli, VersionPrintsTheProjectVersion) {
  // The exact number is checked against the installed package's version by the package test
  // (tests/package/run_consumer.cmake); here: the form, and that no subcommand is needed.
  Result r = Kiln("--version");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::MatchesRegex("kiln [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(Kiln("--help").out, HasSubstr("--version"));
}

TEST_F(KilnCli, HelpOnEveryCommand) {
  Result top = Kiln("--help");
  EXPECT_EQ(top.code, 0);
  for (const char* command : {"compile", "run", "inspect", "dump", "viz", "bench", "export"}) {
    EXPECT_THAT(top.out, HasSubstr(command));
    Result r = Kiln(std::string(command) + " --help");
    EXPECT_EQ(r.code, 0) << command;
    EXPECT_THAT(r.out, HasSubstr("Usage")) << command;
    EXPECT_THAT(r.out, HasSubstr(command)) << command;
  }
}

// ---- ONNX ---------------------------------------------------------------------------------------

const std::string kModels = "tests/onnx/models/";

// The ONNX test-data layout's tensors (input_<k>.pb / output_<k>.pb, named input_<k> / output_<k>
// like the fixtures' graph inputs and outputs, tests/onnx/make_fixtures.py).
std::vector<ir::TensorData> ReadTestData(const std::string& model, const std::string& kind) {
  std::vector<ir::TensorData> out;
  for (int k = 0;; ++k) {
    const std::string path =
        kModels + model + "/test_data_set_0/" + kind + "_" + std::to_string(k) + ".pb";
    if (!fs::exists(path)) break;
    absl::StatusOr<ir::TensorData> t = onnx::ReadTensorProtoFile(path);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) out.push_back(*std::move(t));
  }
  EXPECT_FALSE(out.empty()) << model << ": no " << kind << " .pb files";
  return out;
}

// The golden criterion of tests/onnx: |got - want| <= 1e-4 |want| + 1e-5 max|want|.
void ExpectGolden(const ir::TensorData& want, const ir::TensorData& got, const std::string& what) {
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  ASSERT_EQ(want.shape(), got.shape()) << what;
  double scale = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    scale = std::max(scale, std::abs(want.GetDouble(i)));
  }
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.GetDouble(i), g = got.GetDouble(i);
    if (std::abs(g - w) > 1e-4 * std::abs(w) + 1e-5 * scale && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", PyTorch's " << w;
    }
  }
}

class KilnCliOnnx : public KilnCli {
 protected:
  // `kiln compile model.onnx` (with `extra` arguments), then `kiln run` on the test data's
  // inputs written as .npy; the outputs must match PyTorch's.
  void CompileRunGolden(const std::string& model_path, const std::string& fixture,
                        const std::string& extra) {
    SCOPED_TRACE(model_path + " " + extra);
    const std::vector<ir::TensorData> inputs = ReadTestData(fixture, "input");
    const std::vector<ir::TensorData> outputs = ReadTestData(fixture, "output");
    const std::string blob = P(fixture + ".kiln"), out = P(fixture + "_out");
    Result c = Kiln("compile " + model_path + " -o " + blob + " " + extra);
    ASSERT_EQ(c.code, 0) << c.err;
    std::string run = "run " + blob + " --output " + out;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string npy = P(fixture + "_input_" + std::to_string(k) + ".npy");
      ASSERT_TRUE(ir::WriteNpy(npy, inputs[k]).ok());
      run += " -i input_" + std::to_string(k) + "=" + npy;
    }
    Result r = Kiln(run);
    ASSERT_EQ(r.code, 0) << r.err;
    for (size_t k = 0; k < outputs.size(); ++k) {
      absl::StatusOr<ir::TensorData> got =
          ir::ReadNpy(out + "/output_" + std::to_string(k) + ".npy");
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectGolden(outputs[k], *got, fixture + " output " + std::to_string(k));
    }
  }
};

// Every golden fixture through the command line: compile (initializers in the blob's weights
// section, so the blob's only inputs are the model's), then run on .npy inputs.
TEST_F(KilnCliOnnx, GoldenModelsCompileAndRunLikePyTorch) {
  const std::vector<std::string> fixtures = {"mlp",         "cnn",           "resblock", "dwsep",
                                             "transformer", "transformer13", "upsample"};
  for (const std::string& f : fixtures) {
    // The CNN's batch is dynamic: the test data's shape is given on the command line.
    std::string extra;
    if (f == "cnn") {
      const ir::Shape shape = ReadTestData(f, "input")[0].shape();
      extra = "--input-shape input_0=";
      for (size_t i = 0; i < shape.size(); ++i) {
        extra += (i ? "x" : "") + std::to_string(shape[i]);
      }
    }
    CompileRunGolden(kModels + f + "/model.onnx", f, extra);
  }
  // The blob's signature: the model's input, and the initializers as weights (not inputs).
  Result i = Kiln("inspect " + P("mlp.kiln"));
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_THAT(i.out, HasSubstr("input input_0: f32[4,12]"));
  EXPECT_THAT(i.out, Not(HasSubstr("input fc1.weight")));
  Result missing = Kiln("run " + P("mlp.kiln"));
  EXPECT_NE(missing.code, 0);
  EXPECT_THAT(missing.err, HasSubstr("input 'input_0' (f32[4,12]) is not given"));
}

TEST_F(KilnCliOnnx, DynamicBatchNeedsInputShape) {
  const std::string cnn = kModels + "cnn/model.onnx";
  Result no_shape = Kiln("compile " + cnn + " -o " + P("cnn.kiln"));
  EXPECT_NE(no_shape.code, 0);
  EXPECT_THAT(no_shape.err, HasSubstr(cnn + ": input 'input_0': dimension 0 is dynamic ('batch')"));
  EXPECT_THAT(no_shape.err, HasSubstr("--input-shape"));
  EXPECT_THAT(no_shape.err, Not(HasSubstr("ImportOptions")));
  EXPECT_FALSE(fs::exists(P("cnn.kiln")));

  // Another batch than the test data's: the blob's signature follows --input-shape.
  Result b5 = Kiln("compile " + cnn + " -o " + P("cnn5.kiln") + " --input-shape input_0=5x3x16x16");
  ASSERT_EQ(b5.code, 0) << b5.err;
  Result i = Kiln("inspect " + P("cnn5.kiln"));
  EXPECT_THAT(i.out, HasSubstr("input input_0: f32[5,3,16,16]"));
  EXPECT_THAT(i.out, HasSubstr("output output_0: f32[5,10]"));

  struct Case {
    std::string shape, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"input_0=2x4x16x16", cnn + ": input 'input_0': the given shape [2,4,16,16] differs "
                                       "from the model's fixed dimension 1 (3)"},
           {"input_0=2x3x16", "has rank 3, the model's 4"},
           {"nope=2x3x16x16", cnn + ": --input-shape names 'nope', which is not a model input"},
           {"input_0=2xax16x16", "--input-shape 'input_0=2xax16x16': bad dimension 'a'"},
           {"input_0", "--input-shape 'input_0': expected name=dims"},
       }) {
    SCOPED_TRACE(c.shape);
    Result r = Kiln("compile " + cnn + " -o " + P("bad.kiln") + " --input-shape " + c.shape);
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.err, HasSubstr(c.expect));
  }
  Result twice = Kiln("compile " + cnn + " -o " + P("bad.kiln") +
                      " --input-shape input_0=1x3x16x16 --input-shape input_0=2x3x16x16");
  EXPECT_NE(twice.code, 0);
  EXPECT_THAT(twice.err, HasSubstr("input 'input_0' is given twice"));
  EXPECT_FALSE(fs::exists(P("bad.kiln")));

  // dump and viz take --input-shape too.
  Result d = Kiln("dump " + cnn + " --dir " + P("dump") + " --input-shape input_0=1x3x16x16");
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_TRUE(fs::exists(P("dump/0000-cpu/00-input.kir")));
  Result v = Kiln("viz " + cnn + " -o " + P("cnn.dot") + " --input-shape input_0=1x3x16x16");
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_THAT(ReadText(P("cnn.dot")), HasSubstr("digraph"));
  EXPECT_NE(Kiln("viz " + cnn + " -o " + P("cnn2.dot")).code, 0);
}

// A model whose tensors are external data (tests/onnx/make_extdata_fixtures.py): `kiln compile`
// reads model.onnx.data from the model's folder, not the working directory, and the blob computes
// numpy's output. Without the data file the error names the file, the initializer and the location.
TEST_F(KilnCliOnnx, ExternalDataBesideTheModel) {
  // A copy with symlinks followed: Bazel's data files are symlinks out of their folder, which the
  // importer refuses.
  const std::string folder = P("one_file");
  fs::copy("tests/onnx/extdata/one_file", folder, fs::copy_options::recursive);
  Result c = Kiln("compile " + folder + "/model.onnx -o " + P("ext.kiln"));
  ASSERT_EQ(c.code, 0) << c.err;
  absl::StatusOr<ir::TensorData> x =
      onnx::ReadTensorProtoFile(folder + "/test_data_set_0/input_0.pb");
  absl::StatusOr<ir::TensorData> y =
      onnx::ReadTensorProtoFile(folder + "/test_data_set_0/output_0.pb");
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(ir::WriteNpy(P("ext_x.npy"), *x).ok());
  Result r = Kiln("run " + P("ext.kiln") + " -i x=" + P("ext_x.npy") + " --output " + P("ext_out"));
  ASSERT_EQ(r.code, 0) << r.err;
  absl::StatusOr<ir::TensorData> got = ir::ReadNpy(P("ext_out/y.npy"));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectGolden(*y, *got, "external data output");

  fs::create_directories(P("alone"));
  fs::copy_file(folder + "/model.onnx", P("alone/model.onnx"));
  Result missing = Kiln("compile " + P("alone/model.onnx") + " -o " + P("alone.kiln"));
  EXPECT_NE(missing.code, 0);
  EXPECT_THAT(missing.err,
              HasSubstr("kiln compile: " + P("alone/model.onnx") +
                        ": node 'scale_const' (Constant): attribute 'value': external data "
                        "location 'model.onnx.data': cannot open '" +
                        fs::canonical(P("alone")).string() +
                        "/model.onnx.data': No such file or directory"));
  EXPECT_FALSE(fs::exists(P("alone.kiln")));
}

TEST_F(KilnCliOnnx, ImportErrorsNameTheFileAndTheNodes) {
  // tests/tools/onnx/make_fixtures.py writes both models.
  const std::string unsupported = "tests/tools/onnx/unsupported.onnx";
  Result u = Kiln("compile " + unsupported + " -o " + P("u.kiln"));
  EXPECT_NE(u.code, 0);
  EXPECT_THAT(u.err, HasSubstr("kiln compile: " + unsupported + ": unsupported ONNX operators: "));
  EXPECT_THAT(u.err, HasSubstr("NonMaxSuppression (nodes nms_a, nms_b)"));
  EXPECT_THAT(u.err, HasSubstr("Unique (node unique0)"));
  EXPECT_THAT(u.err, HasSubstr("com.example::Thing (node custom0)"));
  EXPECT_THAT(u.err, Not(HasSubstr("Relu")));
  EXPECT_FALSE(fs::exists(P("u.kiln")));
  Result e = Kiln("export " + unsupported + " -o " + P("u.onnx"));
  EXPECT_NE(e.code, 0);
  EXPECT_THAT(e.err, HasSubstr("kiln export: " + unsupported + ": unsupported ONNX operators"));

  const std::string bad = "tests/tools/onnx/bad_node.onnx";
  Result b = Kiln("compile " + bad + " -o " + P("b.kiln"));
  EXPECT_NE(b.code, 0);
  EXPECT_THAT(b.err, HasSubstr(bad + ": node 'add_mismatch' (Add): "));

  // Not a model at all.
  std::ofstream(P("garbage.onnx"), std::ios::binary) << "\x08\xff\xff\xff not protobuf";
  Result g = Kiln("viz " + P("garbage.onnx") + " -o " + P("g.dot"));
  EXPECT_NE(g.code, 0);
  EXPECT_THAT(g.err, HasSubstr("kiln viz: " + P("garbage.onnx") + ": "));
}

// `kiln export` to ONNX and back: the exported model keeps the initializers as initializers,
// compiles again through `kiln compile`, and still matches PyTorch. IR text exports too.
TEST_F(KilnCliOnnx, ExportToOnnxImportsBack) {
  for (const std::string f : {"resblock", "transformer"}) {
    SCOPED_TRACE(f);
    const std::string exported = P(f + "_export.onnx");
    Result e = Kiln("export " + kModels + f + "/model.onnx -o " + exported);
    ASSERT_EQ(e.code, 0) << e.err;
    EXPECT_THAT(e.out, HasSubstr("wrote " + exported + " (onnx, "));
    absl::StatusOr<onnx::ImportedModel> back = onnx::ImportFile(exported);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->input_names, std::vector<std::string>{"input_0"});
    EXPECT_FALSE(back->weights.empty());
    CompileRunGolden(exported, f, "");
    // python3-onnx's checker accepts it (where /usr/bin/python3 has onnx; CI installs it).
    if (std::system("/usr/bin/python3 -c 'import onnx' 2>/dev/null") == 0) {
      const std::string check =
          "/usr/bin/python3 -c 'import onnx, sys; "
          "onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)' '" +
          exported + "' 2>" + P("checker.txt");
      EXPECT_EQ(std::system(check.c_str()), 0) << ReadText(P("checker.txt"));
    }
  }

  // IR text → ONNX (--format overrides the extension), imported back: the same results as the
  // interpreter on the original graph.
  const std::string from_kir = P("mlp_kir.bin");
  Result k = Kiln(std::string("export ") + kMlp + " -o " + from_kir + " --format onnx --opset 16");
  ASSERT_EQ(k.code, 0) << k.err;
  fs::rename(from_kir, P("mlp_kir.onnx"));
  const ir::Graph graph = Mlp();
  const std::vector<ir::TensorData> inputs = WriteInputs(graph);
  absl::StatusOr<onnx::ImportedModel> back = onnx::ImportFile(P("mlp_kir.onnx"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->opset_version, 16);
  absl::StatusOr<std::vector<ir::TensorData>> want = ir::Interpret(graph, inputs);
  absl::StatusOr<std::vector<ir::TensorData>> args = back->Arguments(inputs);
  ASSERT_TRUE(want.ok() && args.ok());
  absl::StatusOr<std::vector<ir::TensorData>> got = ir::Interpret(back->graph, *args);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t o = 0; o < want->size(); ++o) ExpectClose((*want)[o], (*got)[o], "output");
  EXPECT_NE(Kiln(std::string("export ") + kMlp + " -o " + P("x.onnx") + " --opset 12").code, 0);
}

TEST_F(KilnCliOnnx, ExportToMlirVerifiesWithMlirOpt) {
  const std::string cnn_mlir = P("cnn.mlir"), kir_mlir = P("mlp.mlir");
  Result c = Kiln("export " + kModels + "cnn/model.onnx -o " + cnn_mlir +
                  " --input-shape input_0=2x3x16x16");
  ASSERT_EQ(c.code, 0) << c.err;
  Result k = Kiln(std::string("export ") + kMlp + " -o " + kir_mlir + " --function mlp_fn");
  ASSERT_EQ(k.code, 0) << k.err;
  // The ONNX model's initializers are constants: its function takes only the model's input.
  const std::string cnn_text = ReadText(cnn_mlir);
  EXPECT_THAT(cnn_text, HasSubstr("func.func @main(%arg0: tensor<2x3x16x16xf32> {kiln.name = "
                                  "\"input_0\"})"));
  EXPECT_THAT(cnn_text, Not(HasSubstr("%arg1")));
  EXPECT_THAT(ReadText(kir_mlir), HasSubstr("func.func @mlp_fn("));
  const char* mlir_opt = "/usr/bin/mlir-opt-16";
  if (!fs::exists(mlir_opt)) GTEST_SKIP() << mlir_opt << " is not installed (mlir-16-tools)";
  for (const std::string& f : {cnn_mlir, kir_mlir}) {
    const std::string command =
        std::string(mlir_opt) + " '" + f + "' -o /dev/null 2>" + P("opt.txt");
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << f << ": " << ReadText(P("opt.txt"));
  }
}

}  // namespace
}  // namespace kiln
