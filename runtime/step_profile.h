// Step profiling: KILN_PROFILE=1 times every step (kernel launch) of every Executable::Run and
// prints, at exit, a table of where the time went, like a per-op profile of PyTorch's or XLA's
// profiler. It answers "which kernel of which graph" where `perf` sees only JIT addresses (or,
// with KILN_PERF_MAP=1, kernel symbols that several graphs share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"

namespace kiln::runtime {

/// Whether steps are being timed: from KILN_PROFILE (set to something other than "" or "0") at
/// first use, then as SetStepProfiling leaves it.
bool StepProfilingEnabled();

/// Starts or stops timing steps from code (a region of a program, a test); the report at exit is
/// printed only when KILN_PROFILE asked for it.
void SetStepProfiling(bool enabled);

/// Forgets every recorded step.
void ResetStepProfile();

/// Adds one run of step `step` of executable `executable_id` (NewExecutableId) to the profile.
/// `describe` is called the first time the step is seen, for the table's label.
void RecordStepTime(uint64_t executable_id, size_t step, double seconds,
                    absl::FunctionRef<std::string()> describe);

/// A process-unique id for an executable's steps in the profile (numbered in the report in the
/// order they first ran).
uint64_t NewExecutableId();

/// The profile so far as text: one line per step, the most total time first, with its calls, its
/// total and mean milliseconds and its share of all profiled time. KILN_PROFILE prints it to
/// stderr at exit.
std::string StepProfileReport();

}  // namespace kiln::runtime
