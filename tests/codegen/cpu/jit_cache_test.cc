// CpuCompiler's caches and dumps: the in-memory cache, the on-disk cache a fresh compiler (as in
// a second process) loads without running LLVM, damaged cache entries, the generic CompileObject
// entry, KILN_DUMP files, cache keys, and concurrent compiles.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/jit.h"
#include "codegen/cpu/object_cache.h"
#include "codegen/kernel_ir.h"
#include "gtest/gtest.h"
#include "passes/dump.h"
#include "tests/codegen/cpu/cpu_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using testing::KernelBuffers;

// A fresh, empty folder under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/kiln_jit_cache_test_", name, "_",
                                       static_cast<int64_t>(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// y[i] = tanh(x[i] * k) + i, n elements: small, with an expanded transcendental.
Kernel SmallKernel(double k, int64_t n = 1000) {
  KernelBuilder b("small");
  const ArgId x = b.AddArg({"x", ir::DType::kF32, n, ArgRole::kInput});
  const ArgId y = b.AddArg({"y", ir::DType::kF32, n, ArgRole::kOutput});
  const ValueId gid = b.Var(kGid);
  b.Store(y, gid,
          b.Binary(ExprOp::kAdd,
                   b.Unary(ExprOp::kTanh,
                           b.Binary(ExprOp::kMul, b.Load(x, gid), b.Float(ScalarType::kF32, k))),
                   b.Cast(gid, ScalarType::kF32)));
  return std::move(b).Finish(n);
}

std::vector<float> RunKernel(const CompiledKernel& compiled, const Kernel& kernel) {
  KernelBuffers buffers(kernel);
  const int64_t n = kernel.args[0].num_elements;
  for (int64_t i = 0; i < n; ++i) buffers.as<float>(0)[i] = static_cast<float>(i % 17) * 0.3f - 2;
  testing::RunChunked(compiled.fn, buffers.args(), kernel.parallel_extent);
  return std::vector<float>(buffers.as<float>(1), buffers.as<float>(1) + n);
}

TEST(JitCacheTest, MemoryCacheReturnsTheSameCode) {
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = ""});
  const Kernel kernel = SmallKernel(0.5);
  absl::StatusOr<CompiledKernel> first = compiler.Compile(kernel);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<CompiledKernel> second = compiler.Compile(SmallKernel(0.5));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->source, CodeSource::kCompiled);
  EXPECT_EQ(second->source, CodeSource::kMemoryCache);
  EXPECT_EQ(first->fn, second->fn);
  EXPECT_EQ(first->cache_key, second->cache_key);
  const CompileStats stats = compiler.stats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_EQ(stats.disk_hits, 0);
  EXPECT_EQ(compiler.cache_dir(), "");

  // A different constant is a different kernel.
  absl::StatusOr<CompiledKernel> other = compiler.Compile(SmallKernel(0.75));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->cache_key, first->cache_key);
  EXPECT_EQ(other->source, CodeSource::kCompiled);
}

// KILN_PERF_MAP=1 (the ctest entry codegen_cpu_test.perf_map sets it) lists every loaded
// kernel in /tmp/perf-<pid>.map, Linux perf's map of JIT code: its address, size and symbol.
TEST(JitCacheTest, PerfMapNamesEveryLoadedKernel) {
  const char* flag = std::getenv("KILN_PERF_MAP");
  if (flag == nullptr || std::string(flag) != "1") {
    GTEST_SKIP() << "runs with KILN_PERF_MAP=1 (ctest: codegen_cpu_test.perf_map)";
  }
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = ""});
  absl::StatusOr<CompiledKernel> compiled = compiler.Compile(SmallKernel(0.625));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const auto address = reinterpret_cast<uintptr_t>(compiled->fn);
  std::ifstream map(absl::StrCat("/tmp/perf-", static_cast<int64_t>(::getpid()), ".map"));
  ASSERT_TRUE(map) << "no perf map for this process";
  bool found = false;
  std::string line;
  while (std::getline(map, line)) {
    std::istringstream fields(line);
    std::string start, size, symbol;
    fields >> start >> size >> symbol;
    if (std::stoull(start, nullptr, 16) != address) continue;
    found = true;
    EXPECT_EQ(symbol, "kiln_small") << line;
    EXPECT_GT(std::stoull(size, nullptr, 16), 16u) << line;
  }
  EXPECT_TRUE(found) << "the kernel at 0x" << std::hex << address << " is not in the map";
}

TEST(JitCacheTest, CacheKeyDependsOnKernelAndSettingsOnly) {
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = ""});
  const absl::StatusOr<std::string> a = compiler.CacheKey(SmallKernel(0.5));
  const absl::StatusOr<std::string> b = compiler.CacheKey(SmallKernel(0.5));
  const absl::StatusOr<std::string> c = compiler.CacheKey(SmallKernel(0.5, 999));
  CompileOptions no_expansion;
  no_expansion.expand_math = false;
  const absl::StatusOr<std::string> d = compiler.CacheKey(SmallKernel(0.5), no_expansion);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *c);
  EXPECT_NE(*a, *d);
  // The key is also what a compile reports.
  absl::StatusOr<CompiledKernel> compiled = compiler.Compile(SmallKernel(0.5));
  ASSERT_TRUE(compiled.ok());
  EXPECT_EQ(compiled->cache_key, *a);
}

TEST(JitCacheTest, SecondCompilerLoadsFromDiskWithoutLlvm) {
  const std::string dir = FreshDir("disk");
  const Kernel kernel = SmallKernel(1.25);
  std::vector<float> compiled_result, cached_result;
  std::string key;
  double compile_seconds = 0;
  {
    CpuCompiler first(CpuCompiler::Options{.cache_dir = dir});
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<CompiledKernel> compiled = first.Compile(kernel);
    compile_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_EQ(compiled->source, CodeSource::kCompiled);
    const CompileStats stats = first.stats();
    EXPECT_EQ(stats.compiles, 1);
    EXPECT_EQ(stats.disk_writes, 1);
    EXPECT_EQ(stats.disk_hits, 0);
    key = compiled->cache_key;
    EXPECT_TRUE(std::filesystem::exists(ObjectDiskCache(dir).PathFor(key)));
    compiled_result = RunKernel(*compiled, kernel);
  }
  // A fresh compiler has an empty memory cache, like a new process.
  CpuCompiler second(CpuCompiler::Options{.cache_dir = dir});
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CompiledKernel> cached = second.Compile(kernel);
  const double hit_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->source, CodeSource::kDiskCache);
  EXPECT_EQ(cached->cache_key, key);
  const CompileStats stats = second.stats();
  EXPECT_EQ(stats.compiles, 0);
  EXPECT_EQ(stats.disk_hits, 1);
  EXPECT_EQ(stats.llvm_seconds, 0.0);
  cached_result = RunKernel(*cached, kernel);
  EXPECT_EQ(cached_result, compiled_result);
  std::printf("small kernel: O3 + JIT %.1f ms; disk-cache hit %.2f ms\n", compile_seconds * 1e3,
              hit_seconds * 1e3);

  // Then it is in the second compiler's memory.
  absl::StatusOr<CompiledKernel> again = second.Compile(kernel);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, CodeSource::kMemoryCache);
  std::filesystem::remove_all(dir);
}

TEST(JitCacheTest, KilnCacheDirEnvironmentVariableSelectsTheFolder) {
  const std::string dir = FreshDir("env");
  ASSERT_EQ(::setenv("KILN_CACHE_DIR", dir.c_str(), 1), 0);
  CpuCompiler compiler;
  ::unsetenv("KILN_CACHE_DIR");
  EXPECT_EQ(compiler.cache_dir(), dir);
  absl::StatusOr<CompiledKernel> compiled = compiler.Compile(SmallKernel(2.0));
  ASSERT_TRUE(compiled.ok());
  EXPECT_TRUE(std::filesystem::exists(ObjectDiskCache(dir).PathFor(compiled->cache_key)));
  CpuCompiler without;
  EXPECT_EQ(without.cache_dir(), "");
  std::filesystem::remove_all(dir);
}

TEST(JitCacheTest, DamagedEntriesAreRecompiledAndReplaced) {
  const std::string dir = FreshDir("damaged");
  const Kernel kernel = SmallKernel(0.3);
  std::string path;
  std::vector<float> expected;
  {
    CpuCompiler compiler(CpuCompiler::Options{.cache_dir = dir});
    absl::StatusOr<CompiledKernel> compiled = compiler.Compile(kernel);
    ASSERT_TRUE(compiled.ok());
    path = ObjectDiskCache(dir).PathFor(compiled->cache_key);
    expected = RunKernel(*compiled, kernel);
  }
  // Flip a byte of the object: the checksum no longer matches.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(100);
    const char byte = static_cast<char>(file.get());
    file.seekp(100);
    file.put(static_cast<char>(byte ^ 0xff));
  }
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = dir});
  absl::StatusOr<CompiledKernel> recompiled = compiler.Compile(kernel);
  ASSERT_TRUE(recompiled.ok()) << recompiled.status();
  EXPECT_EQ(recompiled->source, CodeSource::kCompiled);
  EXPECT_EQ(compiler.stats().disk_writes, 1);
  EXPECT_EQ(RunKernel(*recompiled, kernel), expected);
  // The rewritten entry is good again.
  CpuCompiler next(CpuCompiler::Options{.cache_dir = dir});
  absl::StatusOr<CompiledKernel> loaded = next.Compile(kernel);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->source, CodeSource::kDiskCache);

  // A truncated file is a miss as well.
  std::filesystem::resize_file(path, 10);
  EXPECT_FALSE(ObjectDiskCache(dir).Load(loaded->cache_key).has_value());
  std::filesystem::remove_all(dir);
}

TEST(JitCacheTest, UnwritableCacheFolderDoesNotFailTheCompile) {
  const std::string dir = FreshDir("unwritable");
  const std::string blocked = dir + "/file";
  std::ofstream(blocked) << "not a folder";
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = blocked + "/cache"});
  absl::StatusOr<CompiledKernel> compiled = compiler.Compile(SmallKernel(0.9));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiler.stats().disk_errors, 1);
  EXPECT_EQ(compiler.stats().disk_writes, 0);
  std::filesystem::remove_all(dir);
}

TEST(JitCacheTest, CompileObjectLoadsGivenObjectCodeAndCachesIt) {
  // Real object code for the generic entry: the disk-cache file of a compiled kernel.
  const std::string dir = FreshDir("generic");
  const Kernel kernel = SmallKernel(0.6);
  std::string object, symbol;
  std::vector<float> expected;
  {
    CpuCompiler compiler(CpuCompiler::Options{.cache_dir = dir});
    absl::StatusOr<CompiledKernel> compiled = compiler.Compile(kernel);
    ASSERT_TRUE(compiled.ok());
    std::optional<std::string> bytes = ObjectDiskCache(dir).Load(compiled->cache_key);
    ASSERT_TRUE(bytes.has_value());
    object = *bytes;
    symbol = compiled->symbol;
    expected = RunKernel(*compiled, kernel);
  }
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = ""});
  int calls = 0;
  auto generate = [&](bool want_text) -> absl::StatusOr<ObjectCode> {
    ++calls;
    EXPECT_FALSE(want_text);
    return ObjectCode{object, "", ""};
  };
  absl::StatusOr<CompiledKernel> first = compiler.CompileObject("custom code", symbol, generate);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(RunKernel(*first, kernel), expected);
  absl::StatusOr<CompiledKernel> second = compiler.CompileObject("custom code", symbol, generate);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->source, CodeSource::kMemoryCache);
  EXPECT_EQ(calls, 1);

  // A generator's error, a missing symbol and bytes that are no object are errors.
  auto failing = [](bool) -> absl::StatusOr<ObjectCode> {
    return absl::InternalError("generator says no");
  };
  EXPECT_EQ(compiler.CompileObject("failing", symbol, failing).status().message(),
            "generator says no");
  auto garbage = [](bool) -> absl::StatusOr<ObjectCode> {
    return ObjectCode{"not an object file", "", ""};
  };
  EXPECT_FALSE(compiler.CompileObject("garbage", symbol, garbage).ok());
  absl::StatusOr<CompiledKernel> missing =
      compiler.CompileObject("missing symbol", "kiln_no_such_symbol", generate);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("kiln_no_such_symbol"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(JitCacheTest, DumpWritesLlvmIrAndAssembly) {
  const std::string root = FreshDir("dump");
  absl::StatusOr<passes::DumpSession> session = passes::DumpSession::Create(root, "jit");
  ASSERT_TRUE(session.ok()) << session.status();
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = ""});
  const Kernel kernel = SmallKernel(0.5);
  ASSERT_TRUE(compiler.Compile(kernel).ok());  // now in the memory cache
  CompileOptions options;
  options.dump = &*session;
  options.dump_name = "kernel_3";
  absl::StatusOr<CompiledKernel> compiled = compiler.Compile(kernel, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // Dumping runs LLVM even though the kernel was cached.
  EXPECT_EQ(compiled->source, CodeSource::kCompiled);
  EXPECT_EQ(compiler.stats().compiles, 2);
  const std::string ll = session->directory() + "/kernel_3.ll";
  const std::string s = session->directory() + "/kernel_3.s";
  ASSERT_TRUE(std::filesystem::exists(ll));
  ASSERT_TRUE(std::filesystem::exists(s));
  std::ifstream ll_file(ll), s_file(s);
  const std::string ll_text((std::istreambuf_iterator<char>(ll_file)), {});
  const std::string s_text((std::istreambuf_iterator<char>(s_file)), {});
  EXPECT_EQ(ll_text, compiled->llvm_ir);
  EXPECT_EQ(s_text, compiled->assembly);
  EXPECT_NE(ll_text.find("define void @kiln_small(ptr"), std::string::npos) << ll_text;
  EXPECT_NE(s_text.find("kiln_small:"), std::string::npos) << s_text;
  // A disabled session writes nothing and does not force a compile.
  passes::DumpSession disabled;
  options.dump = &disabled;
  absl::StatusOr<CompiledKernel> quiet = compiler.Compile(kernel, options);
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(quiet->source, CodeSource::kMemoryCache);
  EXPECT_TRUE(quiet->llvm_ir.empty());
  std::filesystem::remove_all(root);
}

TEST(JitCacheTest, KernelsOutliveTheCompilerThatMadeThem) {
  CompiledKernel kept;
  {
    CpuCompiler compiler(CpuCompiler::Options{.cache_dir = ""});
    absl::StatusOr<CompiledKernel> compiled = compiler.Compile(SmallKernel(0.4));
    ASSERT_TRUE(compiled.ok());
    kept = *compiled;
  }
  const Kernel kernel = SmallKernel(0.4);
  const std::vector<float> out = RunKernel(kept, kernel);
  EXPECT_FLOAT_EQ(out[3], std::tanh((3 * 0.3f - 2) * 0.4f) + 3);
}

TEST(JitCacheTest, ConcurrentCompilesAllWork) {
  const std::string dir = FreshDir("threads");
  CpuCompiler compiler(CpuCompiler::Options{.cache_dir = dir});
  constexpr int kThreads = 4, kKernels = 6;
  std::vector<std::vector<std::string>> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKernels; ++k) {
        // Every thread compiles the same kernels, in a different order.
        const int which = (k + t) % kKernels;
        const Kernel kernel = SmallKernel(0.1 * (which + 1), 300);
        absl::StatusOr<CompiledKernel> compiled = compiler.Compile(kernel);
        if (!compiled.ok()) {
          failures[t].push_back(std::string(compiled.status().message()));
          continue;
        }
        const std::vector<float> out = RunKernel(*compiled, kernel);
        const float want = std::tanh((5 * 0.3f - 2) * static_cast<float>(0.1 * (which + 1))) + 5;
        if (std::abs(out[5] - want) > 1e-5f) failures[t].push_back("wrong result");
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(failures[t].empty()) << failures[t][0];
  const CompileStats stats = compiler.stats();
  EXPECT_EQ(stats.compiles + stats.memory_hits + stats.disk_hits, kThreads * kKernels);
  EXPECT_GE(stats.compiles, kKernels);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::codegen::cpu
