// Memory planning: places the buffers of a compiled program in one arena, reusing the memory of
// buffers that are dead and writing outputs in place over inputs where that is legal.
//
// The planner knows nothing of kernels or graphs: the caller describes the program as steps
// (kernel launches, in execution order) that read and write buffers.
//
//   std::vector<PlanBuffer> buffers = {{.size_bytes = 4096, .graph_input = true, .name = "x"},
//                                      {.size_bytes = 4096, .name = "t"},
//                                      {.size_bytes = 4096, .graph_output = true, .name = "y"}};
//   std::vector<PlanStep> steps = {{.name = "exp", .inputs = {0}, .outputs = {1}, .in_place =
//   {-1}},
//                                  {.name = "neg", .inputs = {1}, .outputs = {2},
//                                   .in_place = {0}}};  // y may overwrite t
//   absl::StatusOr<MemoryPlan> plan = PlanMemory(buffers, steps);
//   // t at offset 0, y in place of t at offset 0, arena_size 4096.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::passes {

/// Index of a buffer in the planner's input.
using BufferId = int32_t;

/// Every arena offset and the arena size are multiples of this (a cache line; what the CPU
/// kernel ABI promises for every buffer).
inline constexpr int64_t kBufferAlignment = 64;

struct PlanBuffer {
  int64_t size_bytes = 0;
  /// Supplied by the caller: not owned, never written, never reused, not in the arena.
  bool graph_input = false;
  /// Returned to the caller: placed in the arena, live from its write to the end of the program,
  /// so nothing overwrites it (neither reuse nor an in-place write over it).
  bool graph_output = false;
  /// For the printout.
  std::string name;
};

struct PlanStep {
  /// For the printout.
  std::string name;
  /// Buffers the step reads.
  std::vector<BufferId> inputs;
  /// Buffers the step writes; each buffer is written by exactly one step, once.
  std::vector<BufferId> outputs;
  /// Empty, or one entry per output: the index into `inputs` of a buffer the step may write that
  /// output over (-1: none). An elementwise kernel that reads each element before writing the
  /// same element sets it when the output has that input's shape and dtype. The planner uses it
  /// only where legal: the input is an arena buffer (not a graph input or output), this step is
  /// its last use, the output fits, and no other output of the step already took it.
  std::vector<int> in_place;
};

struct BufferPlacement {
  /// Offset in the arena (a multiple of kBufferAlignment); -1 for graph inputs and buffers no
  /// step touches.
  int64_t offset = -1;
  /// The buffer whose memory this one took by being written over it in place, or -1.
  BufferId in_place_of = -1;
  /// Liveness in steps: written by step `first_step`, last read by step `last_step`
  /// (steps.size() for graph outputs, which live to the end; `first_step` when nothing reads
  /// it). Both -1 for graph inputs and untouched buffers.
  int32_t first_step = -1;
  int32_t last_step = -1;
  /// Copied from the input, for ToString.
  int64_t size_bytes = 0;
  bool graph_input = false;
  bool graph_output = false;
  std::string name;
};

struct MemoryPlan {
  /// One entry per buffer, indexed by BufferId.
  std::vector<BufferPlacement> buffers;
  /// Bytes the arena needs.
  int64_t arena_size = 0;
  /// Bytes the arena buffers would need without reuse or in-place writes (aligned sizes summed).
  int64_t unshared_size = 0;
  int32_t num_steps = 0;

  /// A readable listing for the dump (`memory.txt`): one line per buffer with its size, offset,
  /// liveness and in-place source.
  std::string ToString() const;
};

/// Plans the buffers of `steps` (run in order). Buffers whose live ranges overlap get disjoint
/// memory, except an output written in place over an input that dies at that step. Offsets are
/// chosen greedily, largest buffer first, at the lowest offset free over its live range.
///
/// InvalidArgument when the program is malformed: a buffer id out of range, a negative size, a
/// graph input that a step writes, a buffer written twice, a buffer read before it is written
/// (or never written and not a graph input), a graph output nobody writes, an `in_place` list of
/// the wrong length or with an index out of range.
absl::StatusOr<MemoryPlan> PlanMemory(std::span<const PlanBuffer> buffers,
                                      std::span<const PlanStep> steps);

}  // namespace kiln::passes
