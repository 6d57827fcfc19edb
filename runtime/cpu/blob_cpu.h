// The CPU target of `.kiln` blobs (docs/deploy.md): the plan section "cpu" (JSON: the
// runtime::ExecutableSpec — slots, steps with kernel symbol names, extents, grains, error
// contexts, GEMM/convolution descriptors — and the code targets) and one payload per LLVM triple,
// "cpu:<triple>", a shared object holding the kernels and GEMM micro-kernels. Parse validates
// the plan against the signature and the weights; Load maps the code section for this CPU
// (memfd_create + dlopen) and resolves every symbol. The blob loader reaches it through the
// registry (runtime/blob_target.h), which always has it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/blob.h"
#include "runtime/blob_target.h"

namespace kiln::runtime::cpu {

/// The machine code of one triple: which section holds it and what it needs from the CPU.
struct CodeTarget {
  std::string triple;         // "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"
  std::string cpu;            // "znver3", "generic"
  std::string features;       // LLVM feature string the code was compiled with
  int vector_bits = 128;      // the GEMM micro-kernels' vector width ...
  int vector_registers = 16;  // ... and register count (they pick the tile shape)
  bool fma = false;
  bool vnni = false;  // the int8 quad kernels use vpdpbusd (exact for any i8 B)
  bool amx = false;   // int8 GEMMs of 32 rows or more run on AMX tiles
  /// The GEMM micro-kernel symbols the code exports (MicroKernelName).
  std::vector<std::string> micro_kernels;
  int section = -1;  // index into BlobView::sections: the payload ("cpu:<triple>[@k]")
};

/// The CPU plan of a blob, validated (BlobView::PlanOf<CpuBlobPlan>("cpu")).
class CpuBlobPlan final : public blob::TargetPlan {
 public:
  struct Parsed;  // the slots and steps, in the form Load turns into an ExecutableSpec

  std::vector<CodeTarget> code;  // one per triple, in the plan's order
  int num_slots = 0;
  int num_steps = 0;
  std::shared_ptr<const Parsed> parsed;

  /// "cpu launch plan: 5 slots, 3 steps" and one line per code target.
  std::string Describe() const override;
};

/// The CPU target's driver (what the registry holds under "cpu"). Load's selector must be empty
/// (there is one CPU device).
std::shared_ptr<const blob::TargetDriver> MakeCpuTargetDriver();

/// The LLVM architecture name this runtime was built for ("x86_64", "aarch64"): Load runs the
/// code section whose triple starts with it.
const char* HostArchitecture();

}  // namespace kiln::runtime::cpu
