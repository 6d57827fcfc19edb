// The process-wide LLVM ORC JIT of the CPU backend, and the O3 + machine-code pipeline.
//
// Internal to codegen/cpu: other folders use codegen/cpu/jit.h. This header names LLVM types only
// through forward declarations, so including it needs no LLVM include path; only the .cc files of
// codegen/cpu/ include LLVM headers.
//
// The pipeline always goes through an object file: a module is optimised (the O3 pipeline, tuned
// for the host CPU or the KILN_CPU level), compiled to a relocatable object, and the object is
// loaded into the JIT. The same bytes are what the on-disk cache stores, so a cache hit and a fresh
// compile run identical machine code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/cpu/cpu_features.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace kiln::codegen::cpu {

/// The machine code is compiled for: the host as LLVM detects it (znver3: +avx2 +fma), or the
/// x86-64 level KILN_CPU pins (runtime/cpu/cpu_features.h).
struct HostTarget {
  std::string triple;    // "x86_64-unknown-linux-gnu"
  std::string cpu;       // "znver3", or the level's name: "x86-64-v3"
  std::string features;  // "+avx2,+fma,...": the full subtarget feature string
};

/// The target for `level`. kHost: the host as LLVM detects it. A pinned level: LLVM's CPU of
/// that name with exactly its features, written as "+name"/"-name" for every feature LLVM
/// detects on x86 hosts (the form the host's string has), so the string is the same on every
/// machine and cache keys and code sections tell levels apart. Does not check that the host can
/// run the level (runtime::cpu::CheckLevelRunsHere does); a pinned level on a non-x86-64 host is
/// FailedPrecondition.
absl::StatusOr<HostTarget> TargetForLevel(runtime::cpu::CpuLevel level);

/// What Codegen produces: the object file, plus the optimised IR and assembly when asked.
struct ObjectCode {
  std::string object;    // ELF relocatable object bytes, loadable by LlvmJit::Load
  std::string llvm_ir;   // the module after O3 (empty unless requested)
  std::string assembly;  // the host assembly (empty unless requested)
};

/// Code loaded into the JIT. The code stays mapped while this object lives; destroying it
/// releases the code (the JITDylib holding it is removed).
class LoadedObject {
 public:
  LoadedObject(const LoadedObject&) = delete;
  LoadedObject& operator=(const LoadedObject&) = delete;
  ~LoadedObject();

  /// Address of the symbol Load looked up.
  uint64_t address() const { return address_; }

 private:
  friend class LlvmJit;
  struct DylibHandle;
  LoadedObject(std::unique_ptr<DylibHandle> dylib, uint64_t address);

  std::unique_ptr<DylibHandle> dylib_;
  uint64_t address_;
};

/// The JIT: one per process (Get), thread-safe. Never destroyed, so kernels stay valid during
/// static destruction.
class LlvmJit {
 public:
  /// Creates the JIT on first use (initialises LLVM's native target) for the process's CPU level
  /// (runtime::cpu::ProcessCpuLevel: KILN_CPU). An error when LLVM cannot target the host, or
  /// KILN_CPU is unknown (InvalidArgument) or names a level the host lacks (FailedPrecondition
  /// naming the missing feature).
  static absl::StatusOr<LlvmJit*> Get();

  const HostTarget& host() const;

  /// Sets the module's triple and data layout and every defined function's target-cpu and
  /// target-features attributes for host(). Emitters call this before building code that
  /// depends on the data layout; Codegen calls it again (idempotent).
  void ConfigureModule(llvm::Module& module) const;

  /// How much of LLVM a module goes through before code generation.
  enum class IrPipeline {
    kO3,    ///< the O3 pipeline: kernels emitted from kernel IR
    kNone,  ///< straight to code generation: IR already in its final form (GEMM micro-kernels)
  };

  /// Verifies `module`, runs `pipeline` for host() and emits an object file; with `want_text`,
  /// also the IR after the pipeline and the assembly. Consumes (mutates) the module. Safe to
  /// call from several threads on modules of distinct LLVMContexts.
  absl::StatusOr<ObjectCode> Codegen(llvm::Module& module, bool want_text,
                                     IrPipeline pipeline = IrPipeline::kO3) const;

  /// Loads `object` (from Codegen, possibly via the disk cache) into a fresh JITDylib, resolving
  /// undefined symbols against the process (libm), and returns the address of `symbol`.
  absl::StatusOr<std::unique_ptr<LoadedObject>> Load(std::string_view object,
                                                     const std::string& symbol);

 private:
  struct Impl;
  explicit LlvmJit(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::codegen::cpu
