#include "codegen/graph_compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"
#include "passes/simplify.h"

namespace kiln::codegen {
namespace {

using passes::FusionGroup;
using passes::FusionKind;

int64_t ByteSize(const ir::TensorType& type) {
  return type.num_elements() * ir::DTypeSize(type.dtype);
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

GraphCompiler::GraphCompiler(const ir::Graph& source, GraphCompilerOptions options)
    : source_(source), options_(std::move(options)) {}

GraphCompiler::~GraphCompiler() = default;

absl::Status GraphCompiler::Compile() {
  const auto start = std::chrono::steady_clock::now();
  dump_ = passes::DumpSession::FromEnv(options_.backend);
  passes::PassManagerOptions pm_options;
  pm_options.dump = dump_;
  // KILN_TIME_PASSES: the passes print their lines; the stages after them are timed here, one
  // line per fusion group (lowering it) and one per graph (with the backend's CodegenNote).
  const bool timing = timing_ = pm_options.time_passes;
  passes::PassManager pm(std::move(pm_options));
  passes::AddSimplifyPasses(pm);
  absl::StatusOr<ir::Graph> simplified = pm.Run(source_);
  if (!simplified.ok()) return simplified.status();
  graph_ = *std::move(simplified);
  const double passes_ms = MillisecondsSince(start);

  const auto fusion_start = std::chrono::steady_clock::now();
  plan_ = passes::Fuse(graph_);
  CountUses();
  FindTransposedOperands();
  const double fusion_ms = MillisecondsSince(fusion_start);

  for (ir::NodeId p : graph_.Parameters()) parameter_types_.push_back(graph_.node(p).type);
  for (const ir::Output& out : graph_.outputs()) {
    output_types_.push_back(graph_.node(out.node).type);
  }
  BindExternalSlots();
  if (timing) CodegenNote();  // starts the backend's count here
  double groups_ms = 0;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const auto group_start = std::chrono::steady_clock::now();
    if (absl::Status s = CompileGroup(static_cast<int>(g)); !s.ok()) return s;
    if (!timing) continue;
    const double ms = MillisecondsSince(group_start);
    groups_ms += ms;
    const FusionGroup& group = plan_.groups[g];
    const std::string label = absl::StrCat(passes::FusionKindName(group.kind), " ",
                                           ir::OpName(graph_.node(group.root).op));
    std::fprintf(stderr, "kiln: %s group %02zu %-24s %9.3f ms\n", options_.backend.c_str(), g,
                 label.c_str(), ms);
  }
  Dump("fusion.txt", passes::PrintFusionPlan(graph_, plan_) + fusion_notes_);
  const auto finish_start = std::chrono::steady_clock::now();
  if (absl::Status s = CopyRepeatedOutputs(); !s.ok()) return s;
  if (absl::Status s = PlaceArenaBuffers(); !s.ok()) return s;
  absl::Status finished = Finish();
  if (timing && finished.ok()) {
    const std::string note = CodegenNote();  // what the groups and Finish compiled
    std::fprintf(stderr,
                 "kiln: %s graph %d -> %d nodes, %zu groups: passes %.3f ms, fusion %.3f ms, "
                 "groups %.3f ms, plan+finish %.3f ms%s%s%s, total %.3f ms\n",
                 options_.backend.c_str(), source_.num_nodes(), graph_.num_nodes(),
                 plan_.groups.size(), passes_ms, fusion_ms, groups_ms,
                 MillisecondsSince(finish_start), note.empty() ? "" : " (", note.c_str(),
                 note.empty() ? "" : ")", MillisecondsSince(start));
  }
  return finished;
}

void GraphCompiler::Dump(const std::string& name, const std::string& contents) const {
  if (!dump_.enabled()) return;
  if (absl::Status s = dump_.Write(name, contents); !s.ok()) {
    std::fprintf(stderr, "kiln: KILN_DUMP: %s\n", std::string(s.message()).c_str());
  }
}

void GraphCompiler::AddFusionNote(absl::string_view line) {
  absl::StrAppend(&fusion_notes_, line, "\n");
}

absl::Status GraphCompiler::GroupError(int g, const absl::Status& status) const {
  const FusionGroup& group = plan_.groups[static_cast<size_t>(g)];
  return absl::Status(
      status.code(), absl::StrCat(options_.backend, " backend: group ", g, " (",
                                  passes::FusionKindName(group.kind), ", root %", group.root, " = ",
                                  ir::OpName(graph_.node(group.root).op), "): ", status.message()));
}

absl::Status GraphCompiler::StageError(absl::string_view what, const absl::Status& status) const {
  return absl::Status(status.code(),
                      absl::StrCat(options_.backend, " backend: ", what, ": ", status.message()));
}

// Number of uses of each node (operands of computed nodes, plus graph outputs).
void GraphCompiler::CountUses() {
  uses_.assign(static_cast<size_t>(graph_.num_nodes()), 0);
  for (ir::NodeId id = 0; id < graph_.num_nodes(); ++id) {
    for (ir::NodeId in : graph_.node(id).inputs) ++uses_[static_cast<size_t>(in)];
  }
  for (const ir::Output& out : graph_.outputs()) ++uses_[static_cast<size_t>(out.node)];
}

bool GraphCompiler::IsMaterialized(ir::NodeId id, int g) const {
  const ir::Node& node = graph_.node(id);
  if (node.op == ir::Op::kParameter || node.op == ir::Op::kConstant) return true;
  const int32_t owner = plan_.group_of[static_cast<size_t>(id)];
  if (owner < 0 || owner == g || skipped_groups_.count(owner) != 0) return false;
  const std::vector<ir::NodeId>& outs = plan_.groups[static_cast<size_t>(owner)].outputs;
  return std::find(outs.begin(), outs.end(), id) != outs.end();
}

// A permute that only swaps the last two axes of a materialized value and is read only as a
// matmul operand by the contraction routine is never copied: the routine reads the value with
// swapped strides. A reshape of a parameter read only as an operand of contractions is not
// copied either: a reshape keeps the bytes where they are, so its slot is the parameter's (a
// training step's [128, 28, 28] batch read as [128, 784] by the first Linear layer and its weight
// gradient). Both are dropped from their group; a group left with no output is skipped.
void GraphCompiler::FindTransposedOperands() {
  std::vector<std::vector<ir::NodeId>> users(static_cast<size_t>(graph_.num_nodes()));
  for (ir::NodeId id = 0; id < graph_.num_nodes(); ++id) {
    for (ir::NodeId in : graph_.node(id).inputs) users[static_cast<size_t>(in)].push_back(id);
  }
  std::vector<bool> is_output(static_cast<size_t>(graph_.num_nodes()), false);
  for (const ir::Output& out : graph_.outputs()) is_output[static_cast<size_t>(out.node)] = true;
  // Whether `value` is read, and only as an operand of contraction roots that the contraction
  // routine runs and `accepts`.
  auto read_only_by_contractions = [&](ir::NodeId value, auto accepts) {
    const std::vector<ir::NodeId>& readers = users[static_cast<size_t>(value)];
    if (readers.empty()) return false;
    for (ir::NodeId user : readers) {
      const ir::Node& user_node = graph_.node(user);
      const int32_t ug = plan_.group_of[static_cast<size_t>(user)];
      if (ug < 0 || plan_.groups[static_cast<size_t>(ug)].kind != FusionKind::kContraction ||
          plan_.groups[static_cast<size_t>(ug)].root != user || !RunsContraction(user_node) ||
          !accepts(user_node)) {
        return false;
      }
    }
    return true;
  };
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const FusionGroup& group = plan_.groups[g];
    if (group.kind == FusionKind::kContraction) continue;
    std::vector<ir::NodeId> elided;
    for (const ir::NodeId p : group.outputs) {
      const ir::Node& node = graph_.node(p);
      if (node.op == ir::Op::kReshape && !is_output[static_cast<size_t>(p)] &&
          graph_.node(node.inputs[0]).op == ir::Op::kParameter) {
        if (!read_only_by_contractions(p, [](const ir::Node&) { return true; })) continue;
        reshaped_parameter_[p] = node.inputs[0];
        elided.push_back(p);
        AddFusionNote(absl::StrCat(options_.contraction_label, ": %", p,
                                   " reshape read in place of parameter %", node.inputs[0],
                                   " (dropped from group ", g, ")"));
        continue;
      }
      if (node.op != ir::Op::kPermute || is_output[static_cast<size_t>(p)]) continue;
      const size_t rank = node.attrs.axes.size();
      if (rank < 2) continue;
      bool swap_last_two = node.attrs.axes[rank - 2] == static_cast<int64_t>(rank - 1) &&
                           node.attrs.axes[rank - 1] == static_cast<int64_t>(rank - 2);
      for (size_t i = 0; i + 2 < rank; ++i) {
        swap_last_two &= node.attrs.axes[i] == static_cast<int64_t>(i);
      }
      const ir::NodeId source = node.inputs[0];
      // The source may be another output of this same group (g = -1: any group).
      if (!swap_last_two || !IsMaterialized(source, -1)) continue;
      if (!read_only_by_contractions(p, [&](const ir::Node& user) {
            return user.op == ir::Op::kMatMul && ReadsTransposedOperands(user);
          })) {
        continue;
      }
      transposed_source_[p] = source;
      elided.push_back(p);
      AddFusionNote(absl::StrCat(options_.contraction_label, ": %", p,
                                 " permute read as a transposed view of %", source,
                                 " (dropped from group ", g, ")"));
    }
    if (elided.empty()) continue;
    FusionGroup reduced = group;
    auto drop = [&](std::vector<ir::NodeId>& ids) {
      ids.erase(std::remove_if(ids.begin(), ids.end(),
                               [&](ir::NodeId id) {
                                 return std::find(elided.begin(), elided.end(), id) != elided.end();
                               }),
                ids.end());
    };
    drop(reduced.nodes);
    drop(reduced.outputs);
    if (reduced.outputs.empty()) {
      skipped_groups_.insert(static_cast<int>(g));
      continue;
    }
    // The permute's input may now be read by nothing else in the group.
    std::set<ir::NodeId> needed;
    for (ir::NodeId id : reduced.nodes) {
      for (ir::NodeId in : graph_.node(id).inputs) needed.insert(in);
    }
    reduced.inputs.erase(std::remove_if(reduced.inputs.begin(), reduced.inputs.end(),
                                        [&](ir::NodeId id) { return needed.count(id) == 0; }),
                         reduced.inputs.end());
    if (std::find(reduced.nodes.begin(), reduced.nodes.end(), reduced.root) ==
        reduced.nodes.end()) {
      reduced.root = reduced.nodes.empty() ? reduced.outputs.back() : reduced.nodes.back();
    }
    reduced_groups_[static_cast<int>(g)] = std::move(reduced);
  }
}

ir::NodeId GraphCompiler::OperandSource(ir::NodeId operand) const {
  auto it = transposed_source_.find(operand);
  return it == transposed_source_.end() ? operand : it->second;
}

// Slots for parameters and graph outputs; every other value a group writes gets an arena slot
// (or a constant slot) when first needed.
void GraphCompiler::BindExternalSlots() {
  const std::vector<ir::NodeId> params = graph_.Parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    const ir::Node& node = graph_.node(params[k]);
    slot_of_[params[k]] =
        AddSlot(runtime::Slot::Input(static_cast<int64_t>(k), ByteSize(node.type)), node);
  }
  for (const auto& [reshape, parameter] : reshaped_parameter_) {
    slot_of_[reshape] = slot_of_.at(parameter);
  }
  const auto& outputs = graph_.outputs();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ir::NodeId id = outputs[k].node;
    const ir::Node& node = graph_.node(id);
    const int slot =
        AddSlot(runtime::Slot::Output(static_cast<int64_t>(k), ByteSize(node.type)), node);
    // Parameters and constants have homes of their own; no kernel computes them.
    const bool computed = node.op != ir::Op::kParameter && node.op != ir::Op::kConstant;
    output_slots_.push_back(slot);
    if (computed && slot_of_.count(id) == 0) {
      slot_of_[id] = slot;  // the value's home: later groups read it from the output
    } else {
      extra_output_slots_.emplace_back(id, slot);  // a parameter or a repeated output
    }
  }
}

int GraphCompiler::AddSlot(runtime::Slot slot, const ir::Node& node) {
  slot.label = absl::StrCat(ir::OpName(node.op), " ", ir::TypeToString(node.type));
  return AddSlot(std::move(slot));
}

int GraphCompiler::AddSlot(runtime::Slot slot) {
  std::vector<runtime::Slot>& table = slots();
  table.push_back(std::move(slot));
  return static_cast<int>(table.size() - 1);
}

int GraphCompiler::SlotFor(ir::NodeId id) {
  auto it = slot_of_.find(id);
  if (it != slot_of_.end()) return it->second;
  const ir::Node& node = graph_.node(id);
  int slot;
  if (node.op == ir::Op::kConstant) {
    const ir::TensorData& literal = *node.attrs.literal;
    std::vector<std::byte> bytes(literal.data(), literal.data() + literal.size_bytes());
    slot = AddSlot(runtime::Slot::Constant(std::move(bytes)), node);
  } else {
    slot = NewArenaSlot(node, absl::StrCat("%", id));
  }
  slot_of_[id] = slot;
  return slot;
}

int GraphCompiler::NewArenaSlot(const ir::Node& node, std::string name) {
  const int64_t bytes = std::max<int64_t>(ByteSize(node.type), options_.min_buffer_bytes);
  const int slot = AddSlot(runtime::Slot::Arena(0, bytes), node);
  arena_buffer_of_slot_[slot] = static_cast<passes::BufferId>(arena_buffers_.size());
  // The planner places buffers at sums of their sizes rounded to kBufferAlignment; planning with
  // sizes rounded to a larger power of two makes every offset a multiple of it.
  const int64_t align = options_.arena_alignment;
  const int64_t planned = align > 0 ? (bytes + align - 1) / align * align : bytes;
  arena_buffers_.push_back(passes::PlanBuffer{planned, false, false, std::move(name)});
  return slot;
}

int GraphCompiler::ErrorFlagSlot() {
  if (error_flag_slot_ < 0) error_flag_slot_ = AddSlot(runtime::Slot::ErrorFlag());
  return error_flag_slot_;
}

void GraphCompiler::RecordPlanStep(std::string name, const std::vector<int>& read_slots,
                                   const std::vector<int>& written_slots) {
  step_reads_.push_back(read_slots);
  step_writes_.push_back(written_slots);
  passes::PlanStep plan_step;
  plan_step.name = std::move(name);
  for (int s : read_slots) {
    if (auto it = arena_buffer_of_slot_.find(s); it != arena_buffer_of_slot_.end()) {
      plan_step.inputs.push_back(it->second);
    }
  }
  for (int s : written_slots) {
    if (auto it = arena_buffer_of_slot_.find(s); it != arena_buffer_of_slot_.end()) {
      plan_step.outputs.push_back(it->second);
    }
  }
  plan_steps_.push_back(std::move(plan_step));
}

void GraphCompiler::RecordEmptyKernel(const Kernel& kernel, const SlotOverride& override) {
  std::vector<int> reads, writes;
  for (const KernelArg& arg : kernel.args) {
    if (arg.role == ArgRole::kErrorFlag) continue;
    auto it = override.find(arg.node);
    const int slot = it != override.end() ? it->second : SlotFor(arg.node);
    (arg.role == ArgRole::kInput ? reads : writes).push_back(slot);
  }
  RecordPlanStep(kernel.name + " (empty)", reads, writes);
}

KernelBinding GraphCompiler::BindKernelArgs(const Kernel& kernel, const SlotOverride& override) {
  KernelBinding binding;
  for (const KernelArg& arg : kernel.args) {
    int slot;
    if (arg.role == ArgRole::kErrorFlag) {
      slot = ErrorFlagSlot();
      binding.error_context = arg.name;
    } else if (auto it = override.find(arg.node); it != override.end()) {
      slot = it->second;
    } else {
      slot = SlotFor(arg.node);
    }
    binding.slots.push_back(slot);
    // scatter_add reads back what it writes; the planner only needs the write.
    (arg.role == ArgRole::kInput ? binding.reads : binding.writes).push_back(slot);
  }
  return binding;
}

bool GraphCompiler::HasEpilogue(const FusionGroup& group) const {
  // The group's nodes include the leaves it recomputes (an operand computed just below, or a
  // fill an epilogue op reads); only other nodes make an epilogue.
  bool has_epilogue = false;
  for (const ir::NodeId id : group.nodes) {
    has_epilogue |= id != group.root && !passes::IsRecomputedLeaf(graph_.node(id));
  }
  return has_epilogue;
}

absl::Status GraphCompiler::MaterializeRecomputedLeaf(int g, ir::NodeId operand) {
  const ir::Node& node = graph_.node(operand);
  if (slot_of_.count(operand) != 0 || node.op == ir::Op::kConstant ||
      !passes::IsRecomputedLeaf(node)) {
    return absl::OkStatus();
  }
  FusionGroup leaf;
  leaf.kind = FusionKind::kElementwise;
  leaf.nodes = {operand};
  leaf.outputs = {operand};
  leaf.root = operand;
  absl::StatusOr<Kernel> kernel =
      LowerGroup(graph_, leaf, absl::StrCat("k", g, "_operand_", operand));
  if (!kernel.ok()) return GroupError(g, kernel.status());
  return CompileKernel(g, *kernel, {});
}

absl::Status GraphCompiler::CompileEpilogue(int g, int result_slot) {
  const FusionGroup& group = plan_.groups[static_cast<size_t>(g)];
  absl::StatusOr<Epilogue> epilogue = LowerEpilogue(graph_, group);
  if (!epilogue.ok()) return GroupError(g, epilogue.status());
  epilogue->kernel.name = absl::StrCat("epilogue_", group.root);
  return CompileKernel(g, epilogue->kernel, {{group.root, result_slot}});
}

absl::Status GraphCompiler::CompileGroup(int g) {
  const FusionGroup& group = plan_.groups[static_cast<size_t>(g)];
  // A parameter or constant that is a graph output: CopyRepeatedOutputs copies it.
  if (group.kind == FusionKind::kCopy && group.nodes.empty()) return absl::OkStatus();
  if (skipped_groups_.count(g) != 0) return absl::OkStatus();  // a transposed operand
  if (group.kind == FusionKind::kContraction && RunsContraction(graph_.node(group.root))) {
    return CompileContraction(g);
  }
  auto reduced = reduced_groups_.find(g);
  absl::StatusOr<Kernel> kernel = LowerGroup(
      graph_, reduced == reduced_groups_.end() ? group : reduced->second, absl::StrCat("k", g));
  if (!kernel.ok()) return GroupError(g, kernel.status());
  return CompileKernel(g, *kernel, {});
}

// A value that is a graph output more than once, or a parameter or constant that is an output,
// is copied into each extra output at the end (the kernels wrote its first home).
absl::Status GraphCompiler::CopyRepeatedOutputs() {
  for (const auto& [id, out_slot] : extra_output_slots_) {
    const int source = SlotFor(id);
    if (absl::Status s = AppendCopy(id, source, out_slot); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status GraphCompiler::PlaceArenaBuffers() {
  absl::StatusOr<passes::MemoryPlan> plan = passes::PlanMemory(arena_buffers_, plan_steps_);
  if (!plan.ok()) {
    return absl::InternalError(absl::StrCat(
        options_.backend, " backend: memory planning failed: ", plan.status().message()));
  }
  Dump("memory_plan.txt", plan->ToString());
  std::vector<runtime::Slot>& table = slots();
  for (const auto& [slot, buffer] : arena_buffer_of_slot_) {
    table[static_cast<size_t>(slot)].offset =
        std::max<int64_t>(plan->buffers[static_cast<size_t>(buffer)].offset, 0);
  }
  return absl::OkStatus();
}

absl::Status CheckArguments(absl::string_view backend,
                            std::span<const ir::TensorType> parameter_types,
                            std::span<const std::shared_ptr<const ir::TensorData>> arguments,
                            std::span<const bool> donated) {
  if (arguments.size() != parameter_types.size()) {
    return absl::InvalidArgumentError(absl::StrCat(backend, " backend: ", arguments.size(),
                                                   " arguments for ", parameter_types.size(),
                                                   " parameters"));
  }
  for (size_t k = 0; k < arguments.size(); ++k) {
    const ir::TensorType& want = parameter_types[k];
    if (arguments[k]->dtype() != want.dtype || arguments[k]->shape() != want.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          backend, " backend: argument ", k, " is ", ir::DTypeName(arguments[k]->dtype()),
          ir::ShapeToString(arguments[k]->shape()), ", the graph expects ",
          ir::TypeToString(want)));
    }
  }
  if (!donated.empty() && donated.size() != arguments.size()) {
    return absl::InvalidArgumentError(absl::StrCat(backend, " backend: ", donated.size(),
                                                   " donation flags for ", arguments.size(),
                                                   " arguments"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::codegen
