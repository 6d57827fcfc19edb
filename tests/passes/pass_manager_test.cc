// The pass manager: verification after each pass (a broken pass is named), dump files (names,
// contents that parse back), KILN_TIME_PASSES lines, fixed-point groups, and DumpSession's
// numbered folders (unique across threads and processes).
#include "passes/pass_manager.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "pass_test_util.h"
#include "passes/dump.h"
#include "passes/simplify.h"

namespace kiln::passes {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kInput[] = R"(
  graph {
    %0 = parameter() {name="x"} : f32[2]
    %1 = fill() {value=1} : f32[2]
    %2 = mul(%0, %1) : f32[2]
    %3 = exp(%2) : f32[2]
    return %3 as "y"
  })";

// A fresh, empty folder under the test's temporary directory.
std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path path = fs::path(base != nullptr ? base : fs::temp_directory_path().string()) /
                  absl::StrCat("kiln_passes_", name, "_", ::getpid());
  fs::remove_all(path);
  fs::create_directories(path);
  return path.string();
}

std::string ReadFile(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Appends a node the verifier rejects: an add whose operand comes after it.
class BreakingPass : public Pass {
 public:
  const char* name() const override { return "breaker"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override {
    ir::Node bad = graph.node(0);
    bad.op = ir::Op::kNeg;
    bad.attrs = ir::Attrs();
    bad.inputs = {graph.num_nodes() + 5};
    graph.AddNode(bad);
    return graph;
  }
};

class FailingPass : public Pass {
 public:
  const char* name() const override { return "failing"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph) override {
    return absl::ResourceExhaustedError("out of patience");
  }
};

class IdentityPass : public Pass {
 public:
  explicit IdentityPass(int* runs) : runs_(runs) {}
  const char* name() const override { return "identity"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override {
    ++*runs_;
    return graph;
  }

 private:
  int* runs_;
};

TEST(PassManager, RunsPassesInOrder) {
  PassManager pm(testing::QuietOptions());
  pm.Add(std::make_unique<AlgebraicSimplification>());
  pm.Add(std::make_unique<DeadCodeElimination>());
  absl::StatusOr<ir::Graph> result = pm.Run(testing::Parse(kInput));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->num_nodes(), 2);
  EXPECT_THAT(pm.last_run(), ElementsAre("algebraic", "dce"));
  EXPECT_EQ(pm.ToString(), "algebraic, dce");
}

TEST(PassManager, NamesThePassThatBrokeTheGraph) {
  PassManager pm(testing::QuietOptions());
  pm.Add(std::make_unique<DeadCodeElimination>());
  pm.Add(std::make_unique<BreakingPass>());
  pm.Add(std::make_unique<CommonSubexpressionElimination>());
  absl::StatusOr<ir::Graph> result = pm.Run(testing::Parse(kInput));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(),
              HasSubstr("pass \"breaker\" produced an invalid graph: %4 = neg"));
  EXPECT_THAT(pm.last_run(), ElementsAre("dce", "breaker"));  // cse never ran.
}

TEST(PassManager, ReportsAFailingPassByNameWithItsCode) {
  PassManager pm(testing::QuietOptions());
  pm.Add(std::make_unique<FailingPass>());
  absl::StatusOr<ir::Graph> result = pm.Run(testing::Parse(kInput));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(result.status().message(), "pass \"failing\": out of patience");
}

TEST(PassManager, RejectsAnInvalidInput) {
  ir::Graph graph = testing::Parse(kInput);
  graph.mutable_node(2).inputs = {7};
  PassManager pm(testing::QuietOptions());
  pm.Add(std::make_unique<DeadCodeElimination>());
  absl::StatusOr<ir::Graph> result = pm.Run(std::move(graph));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("invalid input graph"));
  EXPECT_TRUE(pm.last_run().empty());
}

TEST(PassManager, FixedPointStopsWhenARoundChangesNothing) {
  int runs = 0;
  PassManager pm(testing::QuietOptions());
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<IdentityPass>(&runs));
  pm.AddFixedPoint(std::move(group), 5);
  ASSERT_TRUE(pm.Run(testing::Parse(kInput)).ok());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(pm.ToString(), "(identity)x5");
}

TEST(PassManager, FixedPointStopsAtMaxRounds) {
  // A pass that always changes the graph (appends a node) runs exactly max_rounds times.
  class Grower : public Pass {
   public:
    const char* name() const override { return "grow"; }
    absl::StatusOr<ir::Graph> Run(ir::Graph graph) override {
      ir::Node fill = ir::Node{ir::Op::kFill, {}, {}, {ir::DType::kF32, {}}, {}};
      graph.AddNode(fill);
      return graph;
    }
  };
  PassManager pm(testing::QuietOptions());
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<Grower>());
  pm.AddFixedPoint(std::move(group), 3);
  absl::StatusOr<ir::Graph> result = pm.Run(testing::Parse(kInput));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(pm.last_run().size(), 3u);
  EXPECT_EQ(result->num_nodes(), 4 + 3);
}

TEST(PassManager, DumpsEveryPassAsParseableText) {
  const std::string root = TempDir("dump");
  absl::StatusOr<DumpSession> dump = DumpSession::Create(root, "mlp layer");
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(fs::path(dump->directory()).filename().string(), "0000-mlp_layer");
  PassManagerOptions options = testing::QuietOptions();
  options.dump = *dump;
  PassManager pm(options);
  pm.Add(std::make_unique<AlgebraicSimplification>());
  pm.Add(std::make_unique<DeadCodeElimination>());
  const ir::Graph input = testing::Parse(kInput);
  absl::StatusOr<ir::Graph> result = pm.Run(input);
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_THAT(ListDir(dump->directory()),
              ElementsAre("00-input.kir", "01-algebraic.kir", "02-dce.kir"));
  const std::vector<std::pair<std::string, const ir::Graph*>> expected = {{"00-input.kir", &input},
                                                                          {"02-dce.kir", &*result}};
  for (const auto& [name, graph] : expected) {
    const std::string text = ReadFile(fs::path(dump->directory()) / name);
    absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(text);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status() << "\n" << text;
    EXPECT_EQ(ir::PrintGraph(*parsed), ir::PrintGraph(*graph)) << name;
  }
  const std::string after_algebraic = ReadFile(fs::path(dump->directory()) / "01-algebraic.kir");
  EXPECT_TRUE(ir::ParseGraph(after_algebraic).ok());
  EXPECT_THAT(after_algebraic, HasSubstr("%2 = exp(%0) : f32[2]"));
}

TEST(PassManager, DumpsCarrySourceLocationsAndAPrefix) {
  const std::string root = TempDir("locations");
  absl::StatusOr<DumpSession> dump = DumpSession::Create(root, "");
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(fs::path(dump->directory()).filename().string(), "0000");
  ir::Builder b;
  const int line = __LINE__ + 1;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {2}});
  b.Output(b.Unary(ir::Op::kExp, x));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  PassManagerOptions options = testing::QuietOptions();
  options.dump = *dump;
  options.dump_prefix = "simplify-";
  PassManager pm(options);
  pm.Add(std::make_unique<DeadCodeElimination>());
  ASSERT_TRUE(pm.Run(*graph).ok());
  EXPECT_THAT(ListDir(dump->directory()),
              ElementsAre("simplify-00-input.kir", "simplify-01-dce.kir"));
  const std::string text = ReadFile(fs::path(dump->directory()) / "simplify-01-dce.kir");
  EXPECT_THAT(text, HasSubstr(absl::StrCat("pass_manager_test.cc:", line)));
  EXPECT_TRUE(ir::ParseGraph(text).ok());
}

TEST(PassManager, DumpsTheInvalidGraphOfABrokenPass) {
  const std::string root = TempDir("broken");
  absl::StatusOr<DumpSession> dump = DumpSession::Create(root, "broken");
  ASSERT_TRUE(dump.ok());
  PassManagerOptions options = testing::QuietOptions();
  options.dump = *dump;
  PassManager pm(options);
  pm.Add(std::make_unique<BreakingPass>());
  ASSERT_FALSE(pm.Run(testing::Parse(kInput)).ok());
  EXPECT_THAT(ListDir(dump->directory()), ElementsAre("00-input.kir", "01-breaker.invalid.kir"));
  EXPECT_THAT(ReadFile(fs::path(dump->directory()) / "01-breaker.invalid.kir"),
              HasSubstr("neg(%9)"));
}

TEST(PassManager, TimePassesPrintsOneLinePerPassRun) {
  ASSERT_EQ(::setenv("KILN_TIME_PASSES", "1", 1), 0);
  EXPECT_TRUE(TimePassesFromEnv());
  PassManager pm;  // Reads KILN_TIME_PASSES through the default options.
  ASSERT_EQ(::unsetenv("KILN_TIME_PASSES"), 0);
  pm.Add(std::make_unique<AlgebraicSimplification>());
  pm.Add(std::make_unique<DeadCodeElimination>());
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(pm.Run(testing::Parse(kInput)).ok());
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::vector<std::string> lines = absl::StrSplit(err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << err;
  EXPECT_THAT(lines[0], MatchesRegex("kiln: pass 01 algebraic +[0-9]+\\.[0-9]+ ms +4 -> 3 nodes"));
  EXPECT_THAT(lines[1], MatchesRegex("kiln: pass 02 dce +[0-9]+\\.[0-9]+ ms +3 -> 2 nodes"));
}

TEST(PassManager, NoTimingLinesByDefault) {
  ASSERT_EQ(::unsetenv("KILN_TIME_PASSES"), 0);
  EXPECT_FALSE(TimePassesFromEnv());
  ASSERT_EQ(::setenv("KILN_TIME_PASSES", "0", 1), 0);
  EXPECT_FALSE(TimePassesFromEnv());
  PassManager pm;
  ASSERT_EQ(::unsetenv("KILN_TIME_PASSES"), 0);
  pm.Add(std::make_unique<DeadCodeElimination>());
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(pm.Run(testing::Parse(kInput)).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// ---- DumpSession --------------------------------------------------------------------------------

TEST(DumpSession, DisabledWithoutKilnDump) {
  ASSERT_EQ(::unsetenv("KILN_DUMP"), 0);
  const DumpSession dump = DumpSession::FromEnv("x");
  EXPECT_FALSE(dump.enabled());
  EXPECT_EQ(dump.directory(), "");
  EXPECT_TRUE(dump.Write("a.txt", "ignored").ok());
  ASSERT_EQ(::setenv("KILN_DUMP", "", 1), 0);
  EXPECT_FALSE(DumpSession::FromEnv("x").enabled());
  ASSERT_EQ(::unsetenv("KILN_DUMP"), 0);
}

TEST(DumpSession, FromEnvNumbersFoldersInOrder) {
  const std::string root = TempDir("env") + "/nested/dumps";  // Created on demand.
  ASSERT_EQ(::setenv("KILN_DUMP", root.c_str(), 1), 0);
  const DumpSession first = DumpSession::FromEnv("softmax");
  const DumpSession second = DumpSession::FromEnv("softmax");
  ASSERT_EQ(::unsetenv("KILN_DUMP"), 0);
  ASSERT_TRUE(first.enabled());
  EXPECT_EQ(first.directory(), root + "/0000-softmax");
  EXPECT_EQ(second.directory(), root + "/0001-softmax");
  ASSERT_TRUE(first.Write("fusion.txt", "groups: 1\n").ok());
  EXPECT_EQ(ReadFile(first.directory() + "/fusion.txt"), "groups: 1\n");
  ASSERT_TRUE(first.Write("fusion.txt", "groups: 2\n").ok());  // Replaces.
  EXPECT_EQ(ReadFile(first.directory() + "/fusion.txt"), "groups: 2\n");
}

TEST(DumpSession, RejectsPathsAsFileNames) {
  absl::StatusOr<DumpSession> dump = DumpSession::Create(TempDir("names"), "n");
  ASSERT_TRUE(dump.ok());
  for (const char* bad : {"", ".", "..", "a/b", "../escape"}) {
    EXPECT_EQ(dump->Write(bad, "x").code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DumpSession, UnwritableRootDisablesWithAWarning) {
  const std::string root = TempDir("unwritable");
  const std::string file = root + "/plain_file";
  std::ofstream(file) << "not a folder";
  EXPECT_FALSE(DumpSession::Create(file + "/sub", "x").ok());
  ASSERT_EQ(::setenv("KILN_DUMP", (file + "/sub").c_str(), 1), 0);
  ::testing::internal::CaptureStderr();
  const DumpSession dump = DumpSession::FromEnv("x");
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(::unsetenv("KILN_DUMP"), 0);
  EXPECT_FALSE(dump.enabled());
  EXPECT_THAT(err, HasSubstr("KILN_DUMP ignored"));
}

TEST(DumpSession, FoldersAreUniqueAcrossThreadsAndProcesses) {
  const std::string root = TempDir("concurrent");
  constexpr int kPerWorker = 10;
  // A child process and, in this process, four threads create sessions at the same time. The
  // child starts before any thread exists.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    bool ok = true;
    for (int i = 0; i < kPerWorker; ++i) ok = ok && DumpSession::Create(root, "child").ok();
    ::_exit(ok ? 0 : 1);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&root, t] {
      for (int i = 0; i < kPerWorker; ++i) {
        EXPECT_TRUE(DumpSession::Create(root, absl::StrCat("thread", t)).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  std::set<int> numbers;
  int folders = 0;
  for (const std::string& name : ListDir(root)) {
    if (name == ".kiln-dump.lock") continue;
    ++folders;
    ASSERT_THAT(name, MatchesRegex("[0-9]{4}-(child|thread[0-3])"));
    numbers.insert(std::stoi(name.substr(0, 4)));
  }
  EXPECT_EQ(folders, 5 * kPerWorker);
  // Distinct numbers 0..49: each folder got its own.
  ASSERT_EQ(numbers.size(), static_cast<size_t>(5 * kPerWorker));
  EXPECT_EQ(*numbers.begin(), 0);
  EXPECT_EQ(*numbers.rbegin(), 5 * kPerWorker - 1);
}

}  // namespace
}  // namespace kiln::passes
