// The graph compiler every compiled backend shares: ir::Graph → a launch plan of slots and steps.
//
//   simplify passes (passes/simplify.h) → Fuse (passes/fusion.h) → FindTransposedOperands →
//   BindExternalSlots → CompileGroup per fusion group → fusion.txt → CopyRepeatedOutputs →
//   PlaceArenaBuffers (passes/memory_plan.h) → Finish (the backend's: build and load its plan)
//
// The pipeline, the slot table's bookkeeping (graph inputs and outputs, arena values, constants,
// the error flag), the steps the memory planner sees, the KILN_DUMP session and error messages
// live here, once. A backend derives from GraphCompiler and supplies the hooks: where its slot
// table is, which contractions it runs with a routine of its own (and whether that routine reads
// a permuted operand through strides), how a kernel-IR kernel becomes a step (CompileKernel), how
// a contraction does (CompileContraction), the copy step, and Finish. The helpers below
// (SlotFor, BindKernelArgs, CompileEpilogue, ...) are what those hooks build on. Steps stay in
// the backend's own plan type (runtime::ExecutableSpec, VulkanExecutableSpec, ...): only the
// slot table (runtime::Slot) is common.
//
// Also here: the compiled-graph cache (GraphCache) and the argument checks of a run.
//
// No LLVM, shaderc or device API here: this library is what a new backend links to.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "codegen/kernel_ir.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "passes/dump.h"
#include "passes/fusion.h"
#include "passes/memory_plan.h"
#include "passes/rewriter.h"
#include "runtime/executable.h"

namespace kiln::codegen {

/// What sets one backend's compiles apart besides its hooks.
struct GraphCompilerOptions {
  /// "cpu", "vulkan": the KILN_DUMP folder's label and the prefix of every error message
  /// ("cpu backend: group 3 (...): ...").
  std::string backend;
  /// The backend's contraction routine as fusion.txt names it ("gemm", "matmul").
  std::string contraction_label = "gemm";
  /// 0: arena buffers are planned at their sizes (the planner aligns offsets to
  /// passes::kBufferAlignment). A power of two: planned sizes are rounded up to it, so every
  /// arena offset is a multiple of it (a descriptor offset alignment).
  int64_t arena_alignment = 0;
  /// The smallest arena slot (a binding that cannot be empty); zero-sized values get this many
  /// bytes.
  int64_t min_buffer_bytes = 0;
};

/// Slots to bind instead of SlotFor(node): the kernel arg of `node` binds the given slot (an
/// epilogue reads its contraction's result from a temporary).
using SlotOverride = std::map<ir::NodeId, int>;

/// The slots of a kernel's args (BindKernelArgs).
struct KernelBinding {
  std::vector<int> slots;   // per kernel arg, in order
  std::vector<int> reads;   // the input args' slots
  std::vector<int> writes;  // the output (and error flag) args' slots
  /// The name of the error-flag arg ("" when the kernel has none): the step's error context.
  std::string error_context;
};

/// The driver. A backend subclasses it, implements the hooks and calls Compile().
class GraphCompiler {
 public:
  virtual ~GraphCompiler();
  GraphCompiler(const GraphCompiler&) = delete;
  GraphCompiler& operator=(const GraphCompiler&) = delete;

 protected:
  /// `source` must verify and outlive the compiler.
  GraphCompiler(const ir::Graph& source, GraphCompilerOptions options);

  /// Runs the pipeline (see the file comment); Finish() is its last stage. Errors name the stage,
  /// and for a group its index, kind and root.
  absl::Status Compile();

  // ---- Hooks ------------------------------------------------------------------------------

  /// The launch plan's slot table, which the helpers below append to.
  virtual std::vector<runtime::Slot>& slots() = 0;
  /// Whether contraction group root `root` (matmul or conv) runs through CompileContraction;
  /// otherwise it is lowered with LowerGroup and compiled like any group (CompileKernel).
  virtual bool RunsContraction(const ir::Node& root) const = 0;
  /// Whether the contraction routine reads an operand of `matmul` (a root RunsContraction
  /// accepts) that permutes the last two axes of a materialized value in place, with swapped
  /// strides: such a permute is then never computed (OperandSource gives its source).
  virtual bool ReadsTransposedOperands(const ir::Node& matmul) const = 0;
  /// Compiles `kernel` (lowered from group `g`) and appends its step; its args bind
  /// BindKernelArgs(kernel, override). Must RecordPlanStep the step.
  virtual absl::Status CompileKernel(int g, const Kernel& kernel, const SlotOverride& override) = 0;
  /// Appends the steps of contraction group `g` (RunsContraction holds for its root).
  virtual absl::Status CompileContraction(int g) = 0;
  /// Appends a step copying `value` from slot `source_slot` into graph output slot `output_slot`
  /// (a parameter or constant that is an output, or an output repeated). Must RecordPlanStep it.
  virtual absl::Status AppendCopy(ir::NodeId value, int source_slot, int output_slot) = 0;
  /// After the memory plan: build (and load) the backend's result.
  virtual absl::Status Finish() = 0;
  /// For KILN_TIME_PASSES: what the backend's code generator spent since the previous call
  /// ("llvm 12.10 ms, 1 compiled"), or "" when it does not say. Called once before the groups
  /// are compiled and once after Finish (its summary goes on the graph's line).
  virtual std::string CodegenNote() { return ""; }

  // ---- Helpers for the hooks --------------------------------------------------------------

  const GraphCompilerOptions& options() const { return options_; }
  /// Whether this compile prints its timing lines (KILN_TIME_PASSES).
  bool timing() const { return timing_; }
  /// The graph as given, and as compiled (simplified).
  const ir::Graph& source() const { return source_; }
  const ir::Graph& graph() const { return graph_; }
  const passes::FusionPlan& plan() const { return plan_; }
  const passes::DumpSession& dump() const { return dump_; }
  const std::vector<ir::TensorType>& parameter_types() const { return parameter_types_; }
  const std::vector<ir::TensorType>& output_types() const { return output_types_; }

  /// Writes `contents` to the dump folder's `name` (nothing when KILN_DUMP is unset; a failed
  /// write warns on stderr and does not fail the compile).
  void Dump(const std::string& name, const std::string& contents) const;
  /// A line for fusion.txt, after the plan (what a contraction routine took over).
  void AddFusionNote(absl::string_view line);

  /// "<backend> backend: group g (kind, root %r = op): <status message>", with status's code.
  absl::Status GroupError(int g, const absl::Status& status) const;
  /// "<backend> backend: <what>: <status message>", with status's code.
  absl::Status StageError(absl::string_view what, const absl::Status& status) const;

  /// Appends `slot`, labelled with `node`'s op and type; returns its index.
  int AddSlot(runtime::Slot slot, const ir::Node& node);
  /// Appends an unlabelled slot; returns its index.
  int AddSlot(runtime::Slot slot);
  /// The slot holding `id`'s value, creating an arena slot or a constant slot on first use.
  int SlotFor(ir::NodeId id);
  /// Whether `id`'s value has a slot already (a parameter, an output, a value computed earlier).
  bool HasSlot(ir::NodeId id) const { return slot_of_.count(id) != 0; }
  /// A fresh arena slot for a value of `node`'s type (a temporary); its offset comes from the
  /// memory plan. `name` is the memory plan's name for it.
  int NewArenaSlot(const ir::Node& node, std::string name);
  /// The error-flag slot (created on first use).
  int ErrorFlagSlot();
  /// Tells the memory planner (and StepReads/StepWrites) which slots the next step reads and
  /// writes. Every step a hook appends is recorded, in step order.
  void RecordPlanStep(std::string name, const std::vector<int>& read_slots,
                      const std::vector<int>& written_slots);
  /// The slots each recorded step reads and writes (all kinds, not only arena), in step order.
  const std::vector<std::vector<int>>& step_reads() const { return step_reads_; }
  const std::vector<std::vector<int>>& step_writes() const { return step_writes_; }
  /// The slot bound to each graph output.
  const std::vector<int>& output_slots() const { return output_slots_; }

  /// The slot of each of `kernel`'s args: the error flag, an override, or SlotFor(arg.node).
  KernelBinding BindKernelArgs(const Kernel& kernel, const SlotOverride& override = {});
  /// Records the step of a kernel with nothing to compute (a zero-sized output) without
  /// appending one: later steps may bind its buffers, so the memory plan still sees it read and
  /// write them (its error flag aside).
  void RecordEmptyKernel(const Kernel& kernel, const SlotOverride& override);

  /// `operand` itself, or the source of an elided permute that the contraction routine reads
  /// with swapped strides (see ReadsTransposedOperands).
  ir::NodeId OperandSource(ir::NodeId operand) const;
  /// A value with a buffer of its own at run time: a parameter, a constant, or an output of a
  /// group other than `g` that is really computed (g = -1: any group).
  bool IsMaterialized(ir::NodeId id, int g) const;
  /// The uses of `id`: operands of nodes plus graph outputs.
  int32_t UseCount(ir::NodeId id) const { return uses_[static_cast<size_t>(id)]; }
  /// Whether contraction group `group` computes more than its root and the leaves it recomputes
  /// (bias, activation, residual: an epilogue).
  bool HasEpilogue(const passes::FusionGroup& group) const;
  /// Fuse recomputes leaves (fill, iota, random_*) inside each group that reads them, so an
  /// operand of a contraction may be such a leaf with no buffer of its own: this computes it into
  /// one with a kernel of its own (CompileKernel), unless it has a slot or is a constant.
  absl::Status MaterializeRecomputedLeaf(int g, ir::NodeId operand);
  /// The rest of contraction group `g` (LowerEpilogue) as a kernel reading the contraction's
  /// result from `result_slot` (CompileKernel).
  absl::Status CompileEpilogue(int g, int result_slot);

 private:
  void CountUses();
  void FindTransposedOperands();
  void BindExternalSlots();
  absl::Status CompileGroup(int g);
  absl::Status CopyRepeatedOutputs();
  absl::Status PlaceArenaBuffers();

  const ir::Graph& source_;
  GraphCompilerOptions options_;
  bool timing_ = false;
  ir::Graph graph_;
  passes::FusionPlan plan_;
  passes::DumpSession dump_;
  std::vector<ir::TensorType> parameter_types_, output_types_;
  std::vector<int32_t> uses_;
  std::unordered_map<ir::NodeId, int> slot_of_;
  std::vector<int> output_slots_;
  // Parameters, constants and repeated values that are outputs: copied at the end.
  std::vector<std::pair<ir::NodeId, int>> extra_output_slots_;
  std::map<int, passes::BufferId> arena_buffer_of_slot_;
  std::vector<passes::PlanBuffer> arena_buffers_;
  std::vector<passes::PlanStep> plan_steps_;
  std::vector<std::vector<int>> step_reads_, step_writes_;
  int error_flag_slot_ = -1;
  // Elided permutes (read by the contraction routine as strided views) and their sources.
  std::unordered_map<ir::NodeId, ir::NodeId> transposed_source_;
  // Elided reshapes of parameters (read by contractions from the parameter's own buffer: a
  // reshape does not move bytes) and the parameters; BindExternalSlots gives them its slot.
  std::unordered_map<ir::NodeId, ir::NodeId> reshaped_parameter_;
  // Groups left with nothing to compute, and groups that lost elided permute outputs (compiled
  // in this reduced form).
  std::set<int> skipped_groups_;
  std::map<int, passes::FusionGroup> reduced_groups_;
  std::string fusion_notes_;
};

/// Counters of a compiled-graph cache.
struct GraphCacheStats {
  int64_t compiles = 0;  // graphs compiled
  int64_t hits = 0;      // runs served by an already compiled graph
  int64_t entries = 0;   // graphs cached now
};

/// A process-wide cache of compiled graphs keyed by a hash (ir::SignatureHash, mixed with
/// whatever else the compile depends on), each hit checked against the graph itself
/// (passes::SameGraph on Compiled::source), so a collision costs a compile, never a wrong result.
/// Thread-safe; a compile runs outside the lock.
template <typename Compiled>
class GraphCache {
 public:
  using CompiledPtr = std::shared_ptr<const Compiled>;

  /// The cached entry under `key` for `graph` that `matches` accepts (same device, same
  /// donation flags, ...), or the result of `compile`, then cached under `key`.
  absl::StatusOr<CompiledPtr> FindOrCompile(
      const ir::Graph& graph, uint64_t key, absl::FunctionRef<bool(const Compiled&)> matches,
      absl::FunctionRef<absl::StatusOr<CompiledPtr>()> compile) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto [begin, end] = entries_.equal_range(key);
      for (auto it = begin; it != end; ++it) {
        if (matches(*it->second) && passes::SameGraph(it->second->source, graph)) {
          ++stats_.hits;
          return it->second;
        }
      }
    }
    absl::StatusOr<CompiledPtr> fresh = compile();
    if (!fresh.ok()) return fresh.status();
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.emplace(key, *fresh);
    ++stats_.compiles;
    return *std::move(fresh);
  }

  GraphCacheStats Stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    GraphCacheStats stats = stats_;
    stats.entries = static_cast<int64_t>(entries_.size());
    return stats;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_multimap<uint64_t, CompiledPtr> entries_;
  GraphCacheStats stats_;
};

/// Checks a run's arguments against a compiled graph's parameters: their number, each one's
/// dtype and shape, and (when not empty) one donation flag per argument. Errors start
/// "<backend> backend: ".
absl::Status CheckArguments(absl::string_view backend,
                            std::span<const ir::TensorType> parameter_types,
                            std::span<const std::shared_ptr<const ir::TensorData>> arguments,
                            std::span<const bool> donated = {});

/// Runs a GPU backend's compiled graph (codegen/vulkan's or codegen/cuda's CompiledGraph: its
/// parameter_types, output_types, executable and device, whose Run takes host pointers) on host
/// values: arguments checked, outputs allocated on the host, errors prefixed "<backend> backend".
template <typename Compiled>
absl::StatusOr<std::vector<ir::TensorData>> RunOnHostValues(
    absl::string_view backend, const Compiled& compiled,
    std::span<const std::shared_ptr<const ir::TensorData>> arguments) {
  if (compiled.device == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(backend, " backend: the graph was compiled without a device"));
  }
  if (absl::Status s = CheckArguments(backend, compiled.parameter_types, arguments); !s.ok()) {
    return s;
  }
  absl::InlinedVector<const void*, 8> inputs(arguments.size());
  for (size_t k = 0; k < arguments.size(); ++k) inputs[k] = arguments[k]->data();
  std::vector<ir::TensorData> results;
  results.reserve(compiled.output_types.size());
  absl::InlinedVector<void*, 4> outputs;
  for (const ir::TensorType& type : compiled.output_types) {
    results.push_back(ir::TensorData::Uninitialized(type.dtype, type.shape));
    outputs.push_back(results.back().data());
  }
  if (absl::Status s = compiled.device->Run(*compiled.executable, inputs, outputs); !s.ok()) {
    return s;
  }
  return results;
}

}  // namespace kiln::codegen
