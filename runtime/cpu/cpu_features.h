// The CPU features code may use in this process: the host's own, or those of an x86-64
// micro-architecture level when KILN_CPU pins one.
//
//   KILN_CPU = host (default) | x86-64 (SSE2) | x86-64-v2 (SSE4.2) | x86-64-v3 (AVX2, FMA)
//            | x86-64-v4 (AVX-512 F/BW/CD/DQ/VL)
//
// A pinned level makes this process behave like a machine with exactly that level: every choice
// of code by CPU features asks here (the hand-written AVX2/AVX-512 paths of runtime/cpu, the blob
// loader's check of a code section), and the JIT compiles for LLVM's CPU of the same name
// (codegen/cpu/llvm_jit.cc). So on an AVX-512 machine KILN_CPU=x86-64-v3 reproduces what an
// AVX2-only user sees, without that machine. A level is the host's features intersected with the
// level's; a level the host does not have is an error (its code would die of SIGILL).
//
// The level names are LLVM's CPU names; the feature names are LLVM's target feature names (the
// `+avx2,+fma,...` strings code sections record), so both sides of the compiler/runtime split use
// the same words. This file has no LLVM dependency (libkiln_runtime links none).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime::cpu {

enum class CpuLevel {
  kHost,      // every feature the host has
  kX86_64,    // the x86-64 baseline: SSE2
  kX86_64V2,  // + CX16, LAHF/SAHF, POPCNT, SSE3, SSSE3, SSE4.1, SSE4.2
  kX86_64V3,  // + AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE, XSAVE
  kX86_64V4,  // + AVX512F, AVX512BW, AVX512CD, AVX512DQ, AVX512VL
};

/// "host", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4" (the pinned ones are LLVM CPU names).
const char* CpuLevelName(CpuLevel level);

/// Parses a KILN_CPU value; "" means host. Anything else is InvalidArgument naming the value and
/// listing the valid ones.
absl::StatusOr<CpuLevel> ParseCpuLevel(std::string_view text);

/// The LLVM feature names a pinned level comprises, cumulatively (v3's include v2's); empty for
/// kHost. They are exactly the features LLVM enables for the CPU of that name among those it
/// detects on hosts (tests/codegen/cpu/cpu_level_test.cc checks this).
const std::vector<std::string_view>& LevelFeatures(CpuLevel level);

/// Whether this CPU has `feature` (an LLVM feature name of some level) and the OS enables its
/// registers (XCR0 for AVX and AVX-512 state). False for other names and on other architectures.
bool HostHasFeature(std::string_view feature);

/// OK when the host has every feature of `level`; otherwise FailedPrecondition naming the first
/// missing feature. Any x86 level on a non-x86-64 host is FailedPrecondition too.
absl::Status CheckLevelRunsHere(CpuLevel level);

/// CheckLevelRunsHere for a CPU whose features `has` reports (tests use it for CPUs they do not
/// run on).
absl::Status CheckLevelRunsOn(CpuLevel level, absl::FunctionRef<bool(std::string_view)> has);

/// The process's level: KILN_CPU, read and checked (ParseCpuLevel, CheckLevelRunsHere) on first
/// use and fixed for the life of the process. Errors start with "KILN_CPU=<value>: ".
const absl::StatusOr<CpuLevel>& ProcessCpuLevel();

/// Whether code may use `feature` at `level`: the host has it and, for a pinned level, the level
/// includes it.
bool LevelAllows(CpuLevel level, std::string_view feature);

/// Whether machine code compiled for LLVM target features `features` (comma-separated "+name" /
/// "-name", as code sections record them) may run at `level`: every enabled feature a level
/// names must be allowed (LevelAllows). Under a pinned level any other enabled feature refuses
/// the code as well, since it lies outside the level; under kHost such features are not checked
/// (this runtime cannot detect them).
bool CodeRunsAtLevel(CpuLevel level, std::string_view features);

/// LevelAllows and CodeRunsAtLevel at the process's level; false when KILN_CPU is invalid
/// (ProcessCpuLevel says why).
bool CpuAllows(std::string_view feature);
bool CodeFeaturesAllowed(std::string_view features);

/// Asks Linux, once per process, for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM),
/// without which the first AMX tile instruction stops the process with SIGILL. True when granted;
/// false on CPUs without AMX, kernels before 5.16 and other systems.
bool RequestAmxTileData();

}  // namespace kiln::runtime::cpu
