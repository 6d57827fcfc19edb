// CpuCompiler: kernel IR → native code for the host CPU, with the compile caches.
//
//   codegen::cpu::CpuCompiler compiler;                    // caches: memory + $KILN_CACHE_DIR
//   absl::StatusOr<CompiledKernel> k = compiler.Compile(kernel);
//   k->fn(args, 0, kernel.parallel_extent);               // runtime::KernelFn
//   spec.keep_alive = k->keep_alive;                       // the code lives while this does
//
// Pipeline: PrepareKernel (emitter.h: HoistInvariantChecks, ReuseReducedValues, then ExpandMath:
// f32 exp/log/tanh/erf/sigmoid → vectorisable polynomials) → emitter (emitter.h: LLVM IR with the
// kernel ABI) → O3 for the host CPU (LlvmJit) → an object file → loaded into the process's one ORC
// LLJIT. No LLVM header is included here; users of this header need no LLVM include path.
//
// Caches. The key of a kernel is a 128-bit hash (XXH3) of its printed kernel IR (PrintKernel, so
// two structurally identical kernels share it, whatever their ValueIds), the ExpandMath and
// emitter settings, the target (triple, CPU name, feature string: the host's or the KILN_CPU
// level's, so code of one level is never reused at another) and kCodegenVersion.
//  - In memory (per CpuCompiler): key → loaded code. A hit costs a print and a hash.
//  - On disk, when a cache folder is set (Options::cache_dir, else $KILN_CACHE_DIR): key →
//    object file (object_cache.h: checksummed, written atomically). A hit in a fresh process
//    loads the object straight into the JIT: no PrepareKernel, no LLVM IR, no optimisation, no
//    instruction selection. Unusable entries (bad checksum, failing to link) are recompiled and
//    overwritten; failing to write the cache is not an error (the kernel still compiles).
// Thread-safe: Compile may be called concurrently (two threads compiling the same new kernel may
// both run LLVM; both get working code and one copy is kept).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "codegen/cpu/llvm_jit.h"
#include "codegen/cpu/object_cache.h"
#include "codegen/kernel_ir.h"
#include "passes/dump.h"
#include "runtime/executable.h"

namespace kiln::codegen::cpu {

/// Part of every cache key: bump it whenever a change to PrepareKernel's passes, the emitter or
/// the LLVM pipeline changes the code generated for some kernel, so stale disk-cache entries are
/// ignored.
inline constexpr int kCodegenVersion = 4;

/// Per-compile settings.
struct CompileOptions {
  /// Rewrite f32 transcendental functions into vectorisable expansions (math_expand.h). Without
  /// it they are libm calls in double (exact, scalar).
  bool expand_math = true;
  /// When set and enabled: writes `<dump_name>.ll` (LLVM IR after O3) and `<dump_name>.s`
  /// (assembly) into the session. Dumping always runs LLVM (a cache hit has no IR to show); the
  /// result still goes into both caches.
  const passes::DumpSession* dump = nullptr;
  std::string dump_name = "kernel";
};

/// Where a CompiledKernel's code came from.
enum class CodeSource { kCompiled, kMemoryCache, kDiskCache };
const char* CodeSourceName(CodeSource source);

/// A kernel ready to call.
struct CompiledKernel {
  runtime::KernelFn fn = nullptr;
  /// Owns the JIT code `fn` points into; copy it into ExecutableSpec::keep_alive.
  std::shared_ptr<const void> keep_alive;
  /// The cache key (32 hex digits).
  std::string cache_key;
  /// The symbol the code was emitted as ("kiln_<kernel name>", sanitised).
  std::string symbol;
  CodeSource source = CodeSource::kCompiled;
  /// Filled only when the compile dumped: the optimised LLVM IR and the assembly.
  std::string llvm_ir;
  std::string assembly;
};

/// Counters of one CpuCompiler (for tests and KILN_TIME_PASSES-style reporting).
struct CompileStats {
  int64_t compiles = 0;     // kernels that went through LLVM
  int64_t memory_hits = 0;  // served from the in-memory cache
  int64_t disk_hits = 0;    // loaded from the disk cache, LLVM skipped
  int64_t disk_writes = 0;  // objects written to the disk cache
  int64_t disk_errors = 0;  // disk-cache writes that failed (reported here, not as errors)
  double llvm_seconds = 0;  // time in emission + O3 + codegen
  double load_seconds = 0;  // time linking objects into the JIT
};

class CpuCompiler {
 public:
  struct Options {
    /// Disk-cache folder: nullopt reads $KILN_CACHE_DIR (unset or empty: no disk cache); an
    /// empty string disables the disk cache.
    std::optional<std::string> cache_dir;
  };

  CpuCompiler();
  explicit CpuCompiler(Options options);
  CpuCompiler(const CpuCompiler&) = delete;
  CpuCompiler& operator=(const CpuCompiler&) = delete;
  ~CpuCompiler();

  /// Compiles `kernel` (VerifyKernel must accept it) for the host. Errors: InvalidArgument from
  /// VerifyKernel; FailedPrecondition when LLVM cannot target the host; Internal for emitter or
  /// LLVM failures (bugs), each naming the kernel.
  absl::StatusOr<CompiledKernel> Compile(const Kernel& kernel, const CompileOptions& options = {});

  /// The generic entry for code not made from kernel IR (the GEMM generator): `key_text`
  /// identifies the code completely (it is hashed with the target and kCodegenVersion);
  /// `generate(want_text)` produces the object (e.g. by building an llvm::Module and calling
  /// LlvmJit::Codegen) and, when want_text, its IR and assembly; `symbol` is the function to
  /// return. Cached exactly like Compile.
  absl::StatusOr<CompiledKernel> CompileObject(
      std::string_view key_text, const std::string& symbol,
      const std::function<absl::StatusOr<ObjectCode>(bool want_text)>& generate,
      const CompileOptions& options = {});

  /// The cache key Compile would use for `kernel` (for tests and dumps).
  absl::StatusOr<std::string> CacheKey(const Kernel& kernel, const CompileOptions& options = {});

  CompileStats stats() const;
  /// The disk-cache folder in use ("" when there is none).
  std::string cache_dir() const;
  /// The host target code is compiled for.
  static absl::StatusOr<HostTarget> Host();

 private:
  struct Loaded;
  absl::StatusOr<std::string> KeyFor(std::string_view key_text);

  std::unique_ptr<ObjectDiskCache> disk_;
  mutable std::mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<Loaded>> memory_;
  CompileStats stats_;
};

}  // namespace kiln::codegen::cpu
