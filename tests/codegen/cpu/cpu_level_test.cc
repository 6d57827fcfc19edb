// KILN_CPU and the JIT: LLVM's CPU of each x86-64 level has exactly the features of the runtime's
// table (runtime/cpu/cpu_features.h) and the host's LLVM features agree with the runtime's
// detection; then, in one child process per level (the JIT's target is fixed per process), the
// code the JIT generates stays within the level (no zmm below v4, no ymm below v3, no fma below
// v3), the GEMM micro-kernel has the level's vector width and computes exactly, the disk cache
// never hands one level another level's code, and bad values are clear errors.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/cpu/gemm.h"
#include "codegen/cpu/jit.h"
#include "codegen/cpu/llvm_jit.h"
#include "codegen/kernel_ir.h"
#include "gtest/gtest.h"
#include "passes/dump.h"
#include "runtime/cpu/cpu_features.h"
#include "tests/codegen/child_process.h"
#include "tests/codegen/cpu/cpu_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using runtime::cpu::CpuLevel;
using runtime::cpu::CpuLevelName;
using testing::AxpbKernel;

constexpr CpuLevel kPinned[] = {CpuLevel::kX86_64, CpuLevel::kX86_64V2, CpuLevel::kX86_64V3,
                                CpuLevel::kX86_64V4};

// "+a,-b,+c" → {a: true, b: false, c: true}.
std::map<std::string, bool> ParseFeatures(const std::string& features) {
  std::map<std::string, bool> result;
  for (absl::string_view token : absl::StrSplit(features, ',', absl::SkipEmpty())) {
    result[std::string(token.substr(1))] = token[0] == '+';
  }
  return result;
}

bool IsX86Host() {
  absl::StatusOr<HostTarget> host = TargetForLevel(CpuLevel::kHost);
  return host.ok() && host->triple.rfind("x86_64", 0) == 0;
}

TEST(CpuLevelTest, LlvmCpuOfEachLevelHasExactlyTheRuntimeTablesFeatures) {
  if (!IsX86Host()) GTEST_SKIP() << "x86-64 levels only";
  absl::StatusOr<HostTarget> host = TargetForLevel(CpuLevel::kHost);
  ASSERT_TRUE(host.ok()) << host.status();
  const std::map<std::string, bool> host_features = ParseFeatures(host->features);
  for (CpuLevel level : kPinned) {
    absl::StatusOr<HostTarget> target = TargetForLevel(level);
    ASSERT_TRUE(target.ok()) << target.status();
    EXPECT_EQ(target->cpu, CpuLevelName(level));
    EXPECT_EQ(target->triple, host->triple);
    const std::map<std::string, bool> features = ParseFeatures(target->features);
    std::set<std::string> enabled, names;
    for (const auto& [name, on] : features) {
      names.insert(name);
      if (on) enabled.insert(name);
    }
    std::set<std::string> expected;
    for (std::string_view f : runtime::cpu::LevelFeatures(level)) expected.insert(std::string(f));
    EXPECT_EQ(enabled, expected) << CpuLevelName(level) << ": " << target->features;
    // +/- over the same names as the host's string: nothing is left to the CPU name alone.
    std::set<std::string> host_names;
    for (const auto& entry : host_features) host_names.insert(entry.first);
    EXPECT_EQ(names, host_names) << CpuLevelName(level);
  }
}

TEST(CpuLevelTest, HostFeaturesAgreeWithTheRuntimesDetection) {
  if (!IsX86Host()) GTEST_SKIP() << "x86-64 levels only";
  absl::StatusOr<HostTarget> host = TargetForLevel(CpuLevel::kHost);
  ASSERT_TRUE(host.ok()) << host.status();
  const std::map<std::string, bool> features = ParseFeatures(host->features);
  for (std::string_view f : runtime::cpu::LevelFeatures(CpuLevel::kX86_64V4)) {
    auto it = features.find(std::string(f));
    const bool llvm_has = it != features.end() && it->second;
    EXPECT_EQ(llvm_has, runtime::cpu::HostHasFeature(f)) << f;
  }
}

TEST(CpuLevelTest, TheJitCompilesForTheProcessLevel) {
  const absl::StatusOr<CpuLevel>& level = runtime::cpu::ProcessCpuLevel();
  absl::StatusOr<HostTarget> jit = CpuCompiler::Host();
  ASSERT_EQ(jit.ok(), level.ok()) << jit.status();
  if (!level.ok()) return;
  absl::StatusOr<HostTarget> expected = TargetForLevel(*level);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(jit->cpu, expected->cpu);
  EXPECT_EQ(jit->features, expected->features);
}

// ---- One child process per level -------------------------------------------------------------

constexpr char kChildFlag[] = "KILN_CPU_LEVEL_TEST_CHILD";

bool Has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// The child's checks for the level in KILN_CPU; prints "kiln-child: source=... key=..." for the
// parent's cache checks when the level runs here.
TEST(CpuLevelChild, CompilesForItsLevel) {
  if (std::getenv(kChildFlag) == nullptr) GTEST_SKIP() << "run by EachLevelInAChildProcess";
  const char* env = std::getenv("KILN_CPU");
  const std::string value = env != nullptr ? env : "";
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  CpuCompiler compiler;  // KILN_CACHE_DIR from the parent
  const absl::StatusOr<CpuLevel> parsed = runtime::cpu::ParseCpuLevel(value);
  if (!parsed.ok()) {
    ASSERT_FALSE(jit.ok());
    EXPECT_EQ(jit.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(jit.status().message());
    EXPECT_NE(message.find(absl::StrCat("KILN_CPU=", value)), std::string::npos) << message;
    for (CpuLevel level : kPinned) {
      EXPECT_NE(message.find(CpuLevelName(level)), std::string::npos) << message;
    }
    absl::StatusOr<CompiledKernel> compiled = compiler.Compile(AxpbKernel());
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().message(), jit.status().message());
    return;
  }
  const CpuLevel level = *parsed;
  if (absl::Status runs = runtime::cpu::CheckLevelRunsHere(level); !runs.ok()) {
    ASSERT_FALSE(jit.ok());
    EXPECT_EQ(jit.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(jit.status().message().find(runs.message()), std::string::npos) << jit.status();
    EXPECT_NE(jit.status().message().find("lacks "), std::string::npos) << jit.status();
    return;
  }
  ASSERT_TRUE(jit.ok()) << jit.status();
  if (level != CpuLevel::kHost) {
    EXPECT_EQ((*jit)->host().cpu, CpuLevelName(level));
  }
  const bool avx512 = runtime::cpu::LevelAllows(level, "avx512f");
  const bool avx2 = runtime::cpu::LevelAllows(level, "avx2");
  const bool fma = runtime::cpu::LevelAllows(level, "fma");

  // A vectorisable kernel's assembly uses no register wider than the level has.
  const std::string dump_dir = absl::StrCat(::testing::TempDir(), "/kiln_cpu_level_dump_", value);
  absl::StatusOr<passes::DumpSession> session = passes::DumpSession::Create(dump_dir, "level");
  ASSERT_TRUE(session.ok()) << session.status();
  CompileOptions options;
  options.dump = &*session;
  absl::StatusOr<CompiledKernel> axpb = compiler.Compile(AxpbKernel(), options);
  ASSERT_TRUE(axpb.ok()) << axpb.status();
  const std::string& assembly = axpb->assembly;
  EXPECT_TRUE(avx512 || !Has(assembly, "%zmm")) << assembly;
  EXPECT_TRUE(avx2 || !Has(assembly, "%ymm")) << assembly;
  EXPECT_TRUE(!avx2 || Has(assembly, "%ymm") || Has(assembly, "%zmm")) << assembly;
  EXPECT_EQ(Has(assembly, "vfmadd"), fma) << assembly;
  std::filesystem::remove_all(dump_dir);

  // The GEMM micro-kernel: the level's vector width, its registers, fma only where it exists.
  absl::StatusOr<GemmKernelInfo> gemm = DescribeGemmKernel(ir::DType::kF32, GemmEpilogue{});
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  EXPECT_EQ(gemm->vector_bits, avx512 ? 512 : runtime::cpu::LevelAllows(level, "avx") ? 256 : 128);
  EXPECT_EQ(Has(gemm->assembly, "%zmm"), avx512) << gemm->assembly;
  EXPECT_TRUE(avx2 || !Has(gemm->assembly, "%ymm")) << gemm->assembly;
  EXPECT_EQ(Has(gemm->assembly, "vfmadd"), fma) << gemm->assembly;

  // And it computes: small integers, so every summation order gives the exact result. M = 1
  // takes the hand-written matrix-vector path too.
  for (const int64_t m : {int64_t{1}, int64_t{37}}) {
    const int64_t n = 45, k = 29;
    std::vector<float> a(m * k), b(k * n), c(m * n, -1.0f);
    for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7 - 3);
    for (int64_t i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5 - 2);
    GemmParams params;
    params.m = m;
    params.n = n;
    params.k = k;
    params.a = runtime::cpu::DenseMatrix(a.data(), m, k);
    params.b = runtime::cpu::DenseMatrix(b.data(), k, n);
    params.c = runtime::cpu::DenseMatrix(c.data(), m, n);
    ASSERT_TRUE(Gemm(params).ok());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double expected = 0;
        for (int64_t p = 0; p < k; ++p) expected += double{a[i * k + p]} * b[p * n + j];
        ASSERT_EQ(c[i * n + j], expected) << "m=" << m << " at " << i << "," << j;
      }
    }
  }

  // For the parent's cache checks: where this kernel's code came from, and its key.
  KernelBuilder b("cached");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, 256, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, 256, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(y, gid, b.Unary(ExprOp::kTanh, b.Load(x, gid)));
  const Kernel cached = std::move(b).Finish(256);
  absl::StatusOr<CompiledKernel> compiled = compiler.Compile(cached);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::printf("kiln-child: source=%s key=%s\n", CodeSourceName(compiled->source),
              compiled->cache_key.c_str());
}

struct ChildReport {
  std::string source, key;
};

ChildReport ParseReport(const std::string& output) {
  ChildReport report;
  const size_t at = output.find("kiln-child: source=");
  if (at == std::string::npos) return report;
  const std::string line = output.substr(at, output.find('\n', at) - at);
  const size_t key = line.find(" key=");
  report.source = line.substr(std::string("kiln-child: source=").size(),
                              key - std::string("kiln-child: source=").size());
  report.key = line.substr(key + 5);
  return report;
}

int CountGemmEntries(const std::string& dir) {
  int count = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    count +=
        name.rfind("gemm_", 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".kobj";
  }
  return count;
}

TEST(CpuLevelTest, EachLevelInAChildProcess) {
  if (!IsX86Host()) GTEST_SKIP() << "x86-64 levels only";
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/kiln_cpu_level_cache_", static_cast<int64_t>(getpid()));
  std::filesystem::remove_all(dir);
  const std::vector<std::string> levels = {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "host"};
  std::map<std::string, std::string> first_keys;
  int gemm_entries = 0;
  for (const std::string& level : levels) {
    const child_process::ChildRun run = child_process::RunTestInChild(
        "CpuLevelChild.CompilesForItsLevel",
        {{kChildFlag, "1"}, {"KILN_CPU", level}, {"KILN_CACHE_DIR", dir}});
    ASSERT_TRUE(run.passed_one()) << "KILN_CPU=" << level << ":\n" << run.output;
    const ChildReport report = ParseReport(run.output);
    if (!runtime::cpu::CheckLevelRunsHere(*runtime::cpu::ParseCpuLevel(level)).ok()) {
      EXPECT_EQ(report.key, "") << level;
      continue;
    }
    // A level's first run finds nothing of the other levels' in the shared cache folder.
    EXPECT_EQ(report.source, "compiled") << level;
    for (const auto& [other, key] : first_keys) EXPECT_NE(report.key, key) << level << " " << other;
    first_keys[level] = report.key;
    const int entries = CountGemmEntries(dir);
    EXPECT_GT(entries, gemm_entries) << "no new GEMM micro-kernel entry for " << level;
    gemm_entries = entries;
  }
  // A second run of each level gets its own code back from disk and stores nothing new.
  for (const auto& [level, key] : first_keys) {
    const child_process::ChildRun run = child_process::RunTestInChild(
        "CpuLevelChild.CompilesForItsLevel",
        {{kChildFlag, "1"}, {"KILN_CPU", level}, {"KILN_CACHE_DIR", dir}});
    ASSERT_TRUE(run.passed_one()) << "KILN_CPU=" << level << ":\n" << run.output;
    const ChildReport report = ParseReport(run.output);
    EXPECT_EQ(report.source, "disk cache") << level;
    EXPECT_EQ(report.key, key) << level;
  }
  EXPECT_EQ(CountGemmEntries(dir), gemm_entries);
  std::filesystem::remove_all(dir);
}

TEST(CpuLevelTest, UnknownValuesAreErrorsInTheJit) {
  for (const char* bad : {"x86-64-v9", "avx2", "znver3"}) {
    const child_process::ChildRun run = child_process::RunTestInChild(
        "CpuLevelChild.CompilesForItsLevel", {{kChildFlag, "1"}, {"KILN_CPU", bad}});
    EXPECT_TRUE(run.passed_one()) << "KILN_CPU=" << bad << ":\n" << run.output;
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
