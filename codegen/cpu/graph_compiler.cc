#include "codegen/cpu/graph_compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu/gemm.h"
#include "codegen/cpu/gemm_kernel.h"
#include "codegen/cpu/jit.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "ir/hash.h"
#include "ir/printer.h"
#include "passes/dump.h"
#include "passes/fusion.h"
#include "passes/memory_plan.h"
#include "passes/pass_manager.h"
#include "passes/rewriter.h"
#include "passes/simplify.h"
#include "runtime/cpu/contraction.h"
#include "runtime/thread_pool.h"

namespace kiln::codegen::cpu {
namespace {

using passes::FusionGroup;
using passes::FusionKind;

int64_t ByteSize(const ir::TensorType& type) {
  return type.num_elements() * ir::DTypeSize(type.dtype);
}

// Work below this many element operations per chunk is not worth waking another thread for.
constexpr int64_t kElementsPerChunk = 32 * 1024;

int64_t GrainFor(const Kernel& kernel) {
  int64_t elements = 0;
  for (const KernelArg& arg : kernel.args) {
    if (arg.role != ArgRole::kErrorFlag) elements = std::max(elements, arg.num_elements);
  }
  const int64_t extent = std::max<int64_t>(kernel.parallel_extent, 1);
  const int64_t per_iteration = std::max<int64_t>(elements / extent, 1);
  return std::max<int64_t>(kElementsPerChunk / per_iteration, 1);
}

using runtime::cpu::ContractionKernel;
using runtime::cpu::ContractionStep;

bool GemmSupports(const ir::Graph& graph, ir::NodeId root) {
  const ir::Node& node = graph.node(root);
  return (node.op == ir::Op::kMatMul || node.op == ir::Op::kConv) &&
         (node.type.dtype == ir::DType::kF32 || node.type.dtype == ir::DType::kF64);
}

class Compiler {
 public:
  Compiler(const ir::Graph& graph, std::vector<bool> donatable)
      : source_(graph), donatable_(std::move(donatable)) {}

  absl::StatusOr<std::shared_ptr<const CompiledGraph>> Run() {
    dump_ = passes::DumpSession::FromEnv("cpu");
    passes::PassManagerOptions pm_options;
    pm_options.dump = dump_;
    passes::PassManager pm(std::move(pm_options));
    passes::AddSimplifyPasses(pm);
    absl::StatusOr<ir::Graph> simplified = pm.Run(source_);
    if (!simplified.ok()) return simplified.status();
    graph_ = *std::move(simplified);

    plan_ = passes::Fuse(graph_);
    CountUses();
    FindTransposedOperands();

    std::vector<ir::TensorType> parameter_types, output_types;
    for (ir::NodeId p : graph_.Parameters()) parameter_types.push_back(graph_.node(p).type);
    for (const ir::Output& out : graph_.outputs()) {
      output_types.push_back(graph_.node(out.node).type);
    }

    spec_.name = "cpu_graph";
    spec_.num_inputs = static_cast<int>(parameter_types.size());
    spec_.num_outputs = static_cast<int>(output_types.size());
    if (absl::Status s = BindExternalSlots(); !s.ok()) return s;
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      if (absl::Status s = CompileGroup(static_cast<int>(g)); !s.ok()) return s;
    }
    Dump("fusion.txt", passes::PrintFusionPlan(graph_, plan_) + contraction_notes_);
    if (absl::Status s = CopyRepeatedOutputs(); !s.ok()) return s;
    if (absl::Status s = PlaceArenaBuffers(); !s.ok()) return s;
    if (absl::Status s = PairDonatedBuffers(); !s.ok()) return s;

    spec_.keep_alive = std::make_shared<const KeepAlive>(std::move(keep_alive_));
    absl::StatusOr<runtime::Executable> executable = runtime::Executable::Create(std::move(spec_));
    if (!executable.ok()) {
      return absl::InternalError(
          absl::StrCat("cpu backend: invalid launch plan: ", executable.status().message()));
    }
    Dump("executable.txt", executable->ToString());
    auto compiled = std::make_shared<CompiledGraph>(
        CompiledGraph{source_, *std::move(executable), std::move(parameter_types),
                      std::move(output_types), num_kernels_, num_gemm_steps_, dump_.directory(),
                      donatable_, std::move(donor_of_output_), std::move(kernel_of_step_)});
    return std::shared_ptr<const CompiledGraph>(std::move(compiled));
  }

 private:
  struct KeepAlive {
    std::vector<std::shared_ptr<const void>> code;
    std::vector<std::unique_ptr<ContractionStep>> contractions;
  };

  void Dump(const std::string& name, const std::string& contents) {
    if (!dump_.enabled()) return;
    if (absl::Status s = dump_.Write(name, contents); !s.ok()) {
      std::fprintf(stderr, "kiln: KILN_DUMP: %s\n", std::string(s.message()).c_str());
    }
  }

  // Number of uses of each node (operands of computed nodes, plus graph outputs).
  void CountUses() {
    uses_.assign(static_cast<size_t>(graph_.num_nodes()), 0);
    for (ir::NodeId id = 0; id < graph_.num_nodes(); ++id) {
      for (ir::NodeId in : graph_.node(id).inputs) ++uses_[static_cast<size_t>(in)];
    }
    for (const ir::Output& out : graph_.outputs()) ++uses_[static_cast<size_t>(out.node)];
  }

  // A value with a buffer of its own at run time: a parameter, a constant (constant slot) or an
  // output of a group other than `g` that is really computed.
  bool IsMaterialized(ir::NodeId id, int g) const {
    const ir::Node& node = graph_.node(id);
    if (node.op == ir::Op::kParameter || node.op == ir::Op::kConstant) return true;
    const int32_t owner = plan_.group_of[static_cast<size_t>(id)];
    if (owner < 0 || owner == g || skipped_groups_.count(owner) != 0) return false;
    const std::vector<ir::NodeId>& outs = plan_.groups[static_cast<size_t>(owner)].outputs;
    return std::find(outs.begin(), outs.end(), id) != outs.end();
  }

  // A permute that only swaps the last two axes of a materialized value and is read only as a
  // matmul operand by the GEMM is never copied: the GEMM reads the value with swapped strides
  // (its packing routines take any strides). Its copy group is skipped.
  void FindTransposedOperands() {
    std::vector<std::vector<ir::NodeId>> users(static_cast<size_t>(graph_.num_nodes()));
    for (ir::NodeId id = 0; id < graph_.num_nodes(); ++id) {
      for (ir::NodeId in : graph_.node(id).inputs) users[static_cast<size_t>(in)].push_back(id);
    }
    std::vector<bool> is_output(static_cast<size_t>(graph_.num_nodes()), false);
    for (const ir::Output& out : graph_.outputs()) is_output[static_cast<size_t>(out.node)] = true;
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      const FusionGroup& group = plan_.groups[g];
      if (group.kind == FusionKind::kContraction) continue;
      std::vector<ir::NodeId> elided;
      for (const ir::NodeId p : group.outputs) {
        const ir::Node& node = graph_.node(p);
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
        bool only_gemm_operands = !users[static_cast<size_t>(p)].empty();
        for (ir::NodeId user : users[static_cast<size_t>(p)]) {
          const int32_t ug = plan_.group_of[static_cast<size_t>(user)];
          only_gemm_operands &=
              graph_.node(user).op == ir::Op::kMatMul && ug >= 0 &&
              plan_.groups[static_cast<size_t>(ug)].kind == FusionKind::kContraction &&
              plan_.groups[static_cast<size_t>(ug)].root == user && GemmSupports(graph_, user);
        }
        if (!only_gemm_operands) continue;
        transposed_source_[p] = source;
        elided.push_back(p);
        absl::StrAppend(&contraction_notes_, "gemm: %", p,
                        " permute read as a transposed view of %", source, " (dropped from group ",
                        g, ")\n");
      }
      if (elided.empty()) continue;
      FusionGroup reduced = group;
      auto drop = [&](std::vector<ir::NodeId>& ids) {
        ids.erase(std::remove_if(ids.begin(), ids.end(),
                                 [&](ir::NodeId id) {
                                   return std::find(elided.begin(), elided.end(), id) !=
                                          elided.end();
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

  // The part of a contraction group the GEMM's in-register epilogue computes: an optional bias
  // add (matmul: broadcast of a [N] vector along the rows; conv: of a [O] vector per output
  // channel) followed by an optional relu (max with fill 0). `final` is the value the group
  // writes.
  struct EpilogueMatch {
    ir::NodeId bias = ir::kInvalidNode;
    GemmActivation activation = GemmActivation::kNone;
    ir::NodeId final = ir::kInvalidNode;
  };

  // The source of a bias operand `operand` (shaped like the output): broadcast?(reshape?(source))
  // where the value before broadcasting has every dimension 1 except `axis`, of `size`, and
  // `source` (materialized) has `size` elements. The movement nodes of group `g` it passes are
  // appended to `chain`.
  ir::NodeId BiasSource(ir::NodeId operand, int g, size_t axis, int64_t size,
                        std::vector<ir::NodeId>* chain) const {
    ir::NodeId id = operand;
    auto fused_here = [&](ir::NodeId n, ir::Op op) {
      return graph_.node(n).op == op && plan_.group_of[static_cast<size_t>(n)] == g &&
             uses_[static_cast<size_t>(n)] == 1;
    };
    if (fused_here(id, ir::Op::kBroadcast)) {
      chain->push_back(id);
      id = graph_.node(id).inputs[0];
    }
    const ir::Shape& shape = graph_.node(id).type.shape;
    if (shape.size() <= axis) return ir::kInvalidNode;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] != (d == axis ? size : 1)) return ir::kInvalidNode;
    }
    if (fused_here(id, ir::Op::kReshape)) {
      chain->push_back(id);
      id = graph_.node(id).inputs[0];
    }
    if (!IsMaterialized(id, g) || graph_.node(id).type.num_elements() != size) {
      return ir::kInvalidNode;
    }
    return id;
  }

  std::optional<EpilogueMatch> MatchEpilogue(int g) const {
    const FusionGroup& group = plan_.groups[g];
    const ir::Node& root = graph_.node(group.root);
    const bool is_conv = root.op == ir::Op::kConv;
    const ir::Shape& out = root.type.shape;
    const size_t axis = is_conv ? 1 : out.size() - 1;
    EpilogueMatch match;
    std::vector<ir::NodeId> chain;
    ir::NodeId current = group.root;
    for (const ir::NodeId id : group.nodes) {
      const ir::Node& node = graph_.node(id);
      if (id == group.root || passes::IsRecomputedLeaf(node)) continue;
      if (node.op == ir::Op::kReshape || node.op == ir::Op::kBroadcast) continue;  // checked below
      if (node.inputs.size() != 2 || node.type.shape != out) return std::nullopt;
      const int side = node.inputs[0] == current ? 0 : node.inputs[1] == current ? 1 : -1;
      if (side < 0 || node.inputs[0] == node.inputs[1]) return std::nullopt;
      // An intermediate value read elsewhere would have to be stored too.
      if (uses_[static_cast<size_t>(current)] != 1) return std::nullopt;
      const ir::NodeId other = node.inputs[1 - side];
      if (node.op == ir::Op::kAdd && match.bias == ir::kInvalidNode &&
          match.activation == GemmActivation::kNone) {
        match.bias = BiasSource(other, g, axis, out[axis], &chain);
        if (match.bias == ir::kInvalidNode) return std::nullopt;
      } else if (node.op == ir::Op::kMax && match.activation == GemmActivation::kNone &&
                 graph_.node(other).op == ir::Op::kFill && graph_.node(other).attrs.value == 0.0) {
        match.activation = GemmActivation::kRelu;
      } else {
        return std::nullopt;
      }
      current = id;
    }
    // Every movement node of the group must be part of the bias chain.
    for (const ir::NodeId id : group.nodes) {
      const ir::Op op = graph_.node(id).op;
      if (id != group.root && (op == ir::Op::kReshape || op == ir::Op::kBroadcast) &&
          std::find(chain.begin(), chain.end(), id) == chain.end()) {
        return std::nullopt;
      }
    }
    if (group.outputs.size() != 1 || group.outputs[0] != current) return std::nullopt;
    match.final = current;
    return match;
  }

  // Slots for parameters, graph outputs and non-splat constants; every other value a group
  // writes gets an arena slot when first needed.
  absl::Status BindExternalSlots() {
    const std::vector<ir::NodeId> params = graph_.Parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      const ir::Node& node = graph_.node(params[k]);
      slot_of_[params[k]] =
          AddSlot(runtime::Slot::Input(static_cast<int64_t>(k), ByteSize(node.type)), node);
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
    return absl::OkStatus();
  }

  int AddSlot(runtime::Slot slot, const ir::Node& node) {
    slot.label = absl::StrCat(ir::OpName(node.op), " ", ir::TypeToString(node.type));
    spec_.slots.push_back(std::move(slot));
    return static_cast<int>(spec_.slots.size() - 1);
  }

  // The slot holding `id`'s value, creating an arena slot (offset assigned by the memory plan)
  // or a constant slot on first use.
  int SlotFor(ir::NodeId id) {
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

  // An arena slot for a value of `node`'s type; PlaceArenaBuffers assigns its offset.
  int NewArenaSlot(const ir::Node& node, std::string name) {
    const int slot = AddSlot(runtime::Slot::Arena(0, ByteSize(node.type)), node);
    arena_buffer_of_slot_[slot] = static_cast<passes::BufferId>(arena_buffers_.size());
    arena_buffers_.push_back(
        passes::PlanBuffer{ByteSize(node.type), false, false, std::move(name)});
    return slot;
  }

  int ErrorFlagSlot() {
    if (error_flag_slot_ < 0) {
      spec_.slots.push_back(runtime::Slot::ErrorFlag());
      error_flag_slot_ = static_cast<int>(spec_.slots.size() - 1);
    }
    return error_flag_slot_;
  }

  // Tells the memory planner which arena buffers the next step reads and writes.
  void RecordPlanStep(std::string name, const std::vector<int>& read_slots,
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

  void AddStep(runtime::Step step, const std::vector<int>& read_slots,
               const std::vector<int>& written_slots) {
    RecordPlanStep(step.name, read_slots, written_slots);
    spec_.steps.push_back(std::move(step));
  }

  absl::Status GroupError(int g, const absl::Status& status) {
    const FusionGroup& group = plan_.groups[g];
    return absl::Status(
        status.code(),
        absl::StrCat("cpu backend: group ", g, " (", passes::FusionKindName(group.kind), ", root %",
                     group.root, " = ", ir::OpName(graph_.node(group.root).op),
                     "): ", status.message()));
  }

  absl::Status CompileGroup(int g) {
    const FusionGroup& group = plan_.groups[g];
    // A parameter or constant that is a graph output: CopyRepeatedOutputs copies it.
    if (group.kind == FusionKind::kCopy && group.nodes.empty()) return absl::OkStatus();
    if (skipped_groups_.count(g) != 0) return absl::OkStatus();  // a transposed GEMM operand
    if (group.kind == FusionKind::kContraction && GemmSupports(graph_, group.root)) {
      return CompileContraction(g);
    }
    auto reduced = reduced_groups_.find(g);
    absl::StatusOr<Kernel> kernel = LowerGroup(
        graph_, reduced == reduced_groups_.end() ? group : reduced->second, absl::StrCat("k", g));
    if (!kernel.ok()) return GroupError(g, kernel.status());
    return EmitKernel(g, *kernel);
  }

  // Compiles `kernel` and appends its launch. Its args name the graph values they hold.
  absl::Status EmitKernel(int g, const Kernel& kernel,
                          const std::map<ir::NodeId, int>& slot_override = {}) {
    const std::string dump_name = absl::StrCat("kernel_", num_kernels_);
    Dump(dump_name + ".kir", PrintKernel(kernel));
    CompileOptions options;
    options.dump = dump_.enabled() ? &dump_ : nullptr;
    options.dump_name = dump_name;
    absl::StatusOr<CompiledKernel> code = KernelCompiler().Compile(kernel, options);
    if (!code.ok()) return GroupError(g, code.status());
    keep_alive_.code.push_back(code->keep_alive);

    runtime::Step step;
    step.fn = code->fn;
    step.parallel_extent = kernel.parallel_extent;
    step.grain = GrainFor(kernel);
    step.name = kernel.name;
    std::vector<int> reads, writes;
    for (const KernelArg& arg : kernel.args) {
      int slot;
      if (arg.role == ArgRole::kErrorFlag) {
        slot = ErrorFlagSlot();
        step.error_context = arg.name;
      } else if (auto it = slot_override.find(arg.node); it != slot_override.end()) {
        slot = it->second;
      } else {
        slot = SlotFor(arg.node);
      }
      step.slot_args.push_back(slot);
      (arg.role == ArgRole::kInput ? reads : writes).push_back(slot);
      // scatter_add reads back what it writes; the planner only needs the write.
    }
    ++num_kernels_;
    kernel_of_step_[static_cast<int>(spec_.steps.size())] = kernel;
    AddStep(std::move(step), reads, writes);
    return absl::OkStatus();
  }

  // A matmul or convolution through the packed GEMM, then the rest of the group (bias,
  // activation, residual) as an elementwise kernel over its result.
  absl::Status CompileContraction(int g) {
    const FusionGroup& group = plan_.groups[g];
    const ir::Node& root = graph_.node(group.root);
    const ir::NodeId lhs = root.inputs[0], rhs = root.inputs[1];
    auto step_desc = std::make_unique<ContractionStep>();
    step_desc->pool = &runtime::DefaultThreadPool();
    step_desc->kernels = &gemm_internal::JitMicroKernels();
    const ir::Shape& a = graph_.node(lhs).type.shape;
    const ir::Shape& b = graph_.node(rhs).type.shape;
    // An operand that is an elided permute (FindTransposedOperands) is read from its source.
    auto operand_source = [&](ir::NodeId operand) {
      auto it = transposed_source_.find(operand);
      return it == transposed_source_.end() ? operand : it->second;
    };
    if (root.op == ir::Op::kMatMul) {
      const size_t r = a.size();
      std::vector<int64_t> batch(a.begin(), a.end() - 2);
      GemmParams& p = step_desc->gemm;
      p.dtype = root.type.dtype;
      p.batch = batch;
      p.m = a[r - 2];
      p.k = a[r - 1];
      p.n = b[r - 1];
      p.a = DenseMatrix(nullptr, p.m, p.k, batch);
      p.b = DenseMatrix(nullptr, p.k, p.n, batch);
      p.c = DenseMatrix(nullptr, p.m, p.n, batch);
      // A transposed view of a dense [cols, rows] matrix: element (i, j) at j * rows + i.
      if (operand_source(lhs) != lhs) {
        p.a.row_stride = 1;
        p.a.col_stride = p.m;
      }
      if (operand_source(rhs) != rhs) {
        p.b.row_stride = 1;
        p.b.col_stride = p.k;
      }
    } else {
      ConvParams& p = step_desc->conv;
      step_desc->is_conv = true;
      p.dtype = root.type.dtype;
      p.input_shape = a;
      p.weight_shape = b;
      p.strides = root.attrs.strides;
      p.low = root.attrs.low;
      p.high = root.attrs.high;
      p.dilation = root.attrs.dilation;
      p.input_dilation = root.attrs.input_dilation;
      p.groups = root.attrs.groups;
      if (absl::StatusOr<ir::Shape> shape = ConvOutputShape(p); !shape.ok()) {
        return GroupError(g, shape.status());
      }
    }

    // The group's nodes include the leaves it recomputes (an operand computed just below, or a
    // fill an epilogue op reads); only other nodes make an epilogue.
    bool has_epilogue = false;
    for (const ir::NodeId id : group.nodes) {
      has_epilogue |= id != group.root && !passes::IsRecomputedLeaf(graph_.node(id));
    }
    // A bias add and/or relu runs in the GEMM's registers on each finished tile; anything else
    // runs as an elementwise kernel over the GEMM's result.
    int result_slot;
    int bias_slot = -1;
    std::optional<EpilogueMatch> in_register;
    if (has_epilogue) in_register = MatchEpilogue(g);
    if (in_register.has_value()) {
      if (in_register->bias != ir::kInvalidNode) {
        bias_slot = SlotFor(in_register->bias);
        step_desc->has_bias = true;
      }
      if (step_desc->is_conv) {
        step_desc->conv.activation = in_register->activation;
      } else {
        step_desc->gemm.epilogue.activation = in_register->activation;
      }
      result_slot = SlotFor(in_register->final);
      has_epilogue = false;
      absl::StrAppend(&contraction_notes_, "gemm: group ", g, " epilogue in registers (bias ",
                      in_register->bias == ir::kInvalidNode ? std::string("none")
                                                            : absl::StrCat("%", in_register->bias),
                      ", activation ", GemmActivationName(in_register->activation), ")\n");
    } else if (!has_epilogue || std::find(group.outputs.begin(), group.outputs.end(), group.root) !=
                                    group.outputs.end()) {
      // Where the contraction's result goes: its own slot when something outside reads it,
      // otherwise a temporary the epilogue consumes.
      result_slot = SlotFor(group.root);
    } else {
      result_slot = NewArenaSlot(root, absl::StrCat("%", group.root, " (gemm result)"));
    }

    const ContractionStep* desc_ptr = step_desc.get();
    std::vector<std::byte> desc_bytes(sizeof(desc_ptr));
    std::memcpy(desc_bytes.data(), &desc_ptr, sizeof(desc_ptr));
    spec_.slots.push_back(runtime::Slot::Constant(std::move(desc_bytes)));
    const int desc_slot = static_cast<int>(spec_.slots.size() - 1);
    keep_alive_.contractions.push_back(std::move(step_desc));

    // Fuse recomputes leaves (fill, iota, random_*) inside each group that reads them, so an
    // operand of the contraction may be such a leaf with no buffer of its own; the GEMM needs
    // one, so it is computed by a kernel of its own first (constants have constant slots).
    for (const ir::NodeId operand : {operand_source(lhs), operand_source(rhs)}) {
      const ir::Node& node = graph_.node(operand);
      if (slot_of_.count(operand) != 0 || node.op == ir::Op::kConstant ||
          !passes::IsRecomputedLeaf(node)) {
        continue;
      }
      FusionGroup leaf;
      leaf.kind = FusionKind::kElementwise;
      leaf.nodes = {operand};
      leaf.outputs = {operand};
      leaf.root = operand;
      absl::StatusOr<Kernel> kernel =
          LowerGroup(graph_, leaf, absl::StrCat("k", g, "_operand_", operand));
      if (!kernel.ok()) return GroupError(g, kernel.status());
      if (absl::Status s = EmitKernel(g, *kernel); !s.ok()) return s;
    }

    runtime::Step step;
    step.fn = ContractionKernel;
    step.parallel_extent = 1;
    step.grain = 1;
    step.name = absl::StrCat(root.op == ir::Op::kMatMul ? "gemm_" : "conv_", group.root);
    const int lhs_slot = SlotFor(operand_source(lhs)), rhs_slot = SlotFor(operand_source(rhs));
    step.slot_args = {lhs_slot, rhs_slot, result_slot, desc_slot};
    std::vector<int> reads = {lhs_slot, rhs_slot};
    if (bias_slot >= 0) {
      step.slot_args.push_back(bias_slot);
      reads.push_back(bias_slot);
    }
    ++num_gemm_steps_;
    AddStep(std::move(step), reads, {result_slot});

    if (!has_epilogue) return absl::OkStatus();
    absl::StatusOr<Epilogue> epilogue = LowerEpilogue(graph_, group);
    if (!epilogue.ok()) return GroupError(g, epilogue.status());
    epilogue->kernel.name = absl::StrCat("epilogue_", group.root);
    return EmitKernel(g, epilogue->kernel, {{group.root, result_slot}});
  }

  // A value that is a graph output more than once, or a parameter that is an output, is copied
  // into each extra output at the end (the fused kernels wrote its first home).
  absl::Status CopyRepeatedOutputs() {
    for (const auto& [id, out_slot] : extra_output_slots_) {
      const int source = SlotFor(id);
      const std::string name = absl::StrCat("copy_%", id);
      RecordPlanStep(name, {source}, {out_slot});
      runtime::AppendCopyStep(spec_, source, out_slot, ByteSize(graph_.node(id).type), name);
    }
    return absl::OkStatus();
  }

  // Buffer donation (see CompileGraph): output k is written into the buffer of a donatable
  // parameter j of its type when no step reads parameter j after output k's writing step starts,
  // or when that writing step is a kernel that reads parameter j only at the element it stores
  // (InPlaceKernel; the W' = W - lr * v of an optimizer). Such a kernel is rebuilt to load from
  // and store to the one buffer, so its arguments stay noalias. Pairs whose writer reads the
  // donor in place are taken first (those where no other output of that kernel reads the donor
  // before the rest: W' = W - lr * v' takes W, leaving v to v' = 0.9 v + g); a donor dead earlier
  // may serve any output of its type.
  absl::Status PairDonatedBuffers() {
    const std::vector<ir::NodeId> params = graph_.Parameters();
    const auto& outputs = graph_.outputs();
    donor_of_output_.assign(outputs.size(), -1);
    if (std::find(donatable_.begin(), donatable_.end(), true) == donatable_.end()) {
      return absl::OkStatus();
    }
    const auto contains = [](const std::vector<int>& slots, int slot) {
      return std::find(slots.begin(), slots.end(), slot) != slots.end();
    };
    const int num_steps = static_cast<int>(spec_.steps.size());
    std::vector<bool> taken(params.size(), false);
    std::string notes;
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (donor_of_output_[k] >= 0) continue;
        const int out_slot = output_slots_[k];
        int writer = -1, writers = 0;
        for (int s = 0; s < num_steps; ++s) {
          if (contains(step_writes_[static_cast<size_t>(s)], out_slot)) {
            writer = s;
            ++writers;
          }
        }
        const ir::TensorType& type = graph_.node(outputs[k].node).type;
        if (writers != 1 || ByteSize(type) == 0) continue;
        for (size_t j = 0; j < params.size() && j < donatable_.size(); ++j) {
          if (!donatable_[j] || taken[j] || !(graph_.node(params[j]).type == type)) continue;
          const int in_slot = slot_of_.at(params[j]);
          bool read_by_writer = false, read_later = false;
          for (int s = writer; s < num_steps; ++s) {
            if (!contains(step_reads_[static_cast<size_t>(s)], in_slot)) continue;
            (s == writer ? read_by_writer : read_later) = true;
          }
          if (read_later || read_by_writer != (pass < 2)) continue;
          if (read_by_writer) {
            absl::StatusOr<bool> merged =
                MergeIntoOutput(writer, in_slot, out_slot, /*exclusive=*/pass == 0);
            if (!merged.ok()) return merged.status();
            if (!*merged) continue;
          }
          donor_of_output_[k] = static_cast<int>(j);
          taken[j] = true;
          absl::StrAppend(&notes, "output ", k, " written into parameter ", j, "'s buffer",
                          read_by_writer ? " in place by " : " after its last read; writer ",
                          spec_.steps[static_cast<size_t>(writer)].name, "\n");
          break;
        }
      }
    }
    Dump("donation.txt", notes.empty() ? "no output written into a donated buffer\n" : notes);
    return absl::OkStatus();
  }

  // Rebuilds the kernel of `step` so that the arg bound to `in_slot` is read from the arg bound
  // to `out_slot` (which the run binds to the same memory), when InPlaceKernel allows it.
  absl::StatusOr<bool> MergeIntoOutput(int step, int in_slot, int out_slot, bool exclusive) {
    auto it = kernel_of_step_.find(step);
    if (it == kernel_of_step_.end()) return false;  // a GEMM or a copy: reads other elements
    runtime::Step& launch = spec_.steps[static_cast<size_t>(step)];
    const auto arg_of = [&](int slot) {
      ArgId arg = -1;
      for (size_t i = 0; i < launch.slot_args.size(); ++i) {
        if (launch.slot_args[i] != slot) continue;
        if (arg >= 0) return ArgId{-1};  // bound twice: leave it alone
        arg = static_cast<ArgId>(i);
      }
      return arg;
    };
    const ArgId in = arg_of(in_slot), out = arg_of(out_slot);
    if (in < 0 || out < 0) return false;
    std::optional<Kernel> merged = InPlaceKernel(it->second, in, out, exclusive);
    if (!merged.has_value()) return false;
    const std::string dump_name = absl::StrCat("kernel_in_place_", num_in_place_++);
    Dump(dump_name + ".kir", PrintKernel(*merged));
    CompileOptions options;
    options.dump = dump_.enabled() ? &dump_ : nullptr;
    options.dump_name = dump_name;
    absl::StatusOr<CompiledKernel> code = KernelCompiler().Compile(*merged, options);
    if (!code.ok()) {
      return absl::Status(code.status().code(),
                          absl::StrCat("cpu backend: in-place kernel ", merged->name, ": ",
                                       code.status().message()));
    }
    keep_alive_.code.push_back(code->keep_alive);
    launch.fn = code->fn;
    launch.slot_args.erase(launch.slot_args.begin() + in);
    it->second = *std::move(merged);
    return true;
  }

  // `kernel` with every load of arg `in` reading arg `out` instead and `in` removed, when that
  // computes the same values with both bound to one buffer: one unpredicated store to `out`,
  // outside any reduce, run once per element (the loop extents around it multiply to its
  // element count); every load of `in` at that store's index and no load of `out`; and no
  // statement after the store (in the same iteration) loads `in`. Each element is then read
  // only by the iteration that overwrites it, before it does. nullopt otherwise.
  //
  // The store is first moved to the end of its block when its value loads no output arg: nothing
  // loads `out`, so the order of the statements it passes does not matter to them or to it. (A
  // fused update stores v' = 0.9 v + g before W' = W - lr * v' recomputes v' from v.)
  // `exclusive`: also require that no store to another arg reads `in`.
  static std::optional<Kernel> InPlaceKernel(const Kernel& original, ArgId in, ArgId out,
                                             bool exclusive) {
    Kernel kernel = original;
    {
      std::vector<bool> loads_output(kernel.exprs.size(), false);
      for (size_t v = 0; v < kernel.exprs.size(); ++v) {
        const Expr& e = kernel.exprs[v];
        bool loads = e.op == ExprOp::kLoad &&
                     kernel.args[static_cast<size_t>(e.arg)].role == ArgRole::kOutput;
        for (ValueId operand : e.operands) {
          loads = loads || loads_output[static_cast<size_t>(operand)];
        }
        loads_output[v] = loads;
      }
      const auto reads_output = [&](ValueId v) {
        return v != kNoValue && loads_output[static_cast<size_t>(v)];
      };
      std::function<bool(std::vector<Stmt>&)> sink = [&](std::vector<Stmt>& block) {
        for (size_t i = 0; i < block.size(); ++i) {
          const Stmt& stmt = block[i];
          if (stmt.kind == StmtKind::kStore && stmt.arg == out) {
            if (!reads_output(stmt.value) && !reads_output(stmt.index) &&
                !reads_output(stmt.predicate)) {
              std::rotate(block.begin() + static_cast<std::ptrdiff_t>(i),
                          block.begin() + static_cast<std::ptrdiff_t>(i) + 1, block.end());
            }
            return true;
          }
          if (sink(block[i].body)) return true;
        }
        return false;
      };
      sink(kernel.body);
    }
    const KernelArg& in_arg = kernel.args[static_cast<size_t>(in)];
    const KernelArg& out_arg = kernel.args[static_cast<size_t>(out)];
    if (in_arg.role != ArgRole::kInput || out_arg.role != ArgRole::kOutput ||
        in_arg.dtype != out_arg.dtype || in_arg.num_elements != out_arg.num_elements) {
      return std::nullopt;
    }
    // Expressions whose evaluation loads `in` (operands precede their users).
    std::vector<bool> loads_in(kernel.exprs.size(), false);
    for (size_t v = 0; v < kernel.exprs.size(); ++v) {
      const Expr& e = kernel.exprs[v];
      if (e.op == ExprOp::kLoad && e.arg == out) return std::nullopt;
      bool loads = e.op == ExprOp::kLoad && e.arg == in;
      for (ValueId operand : e.operands) loads = loads || loads_in[static_cast<size_t>(operand)];
      loads_in[v] = loads;
    }
    const auto loads = [&](ValueId v) { return v != kNoValue && loads_in[static_cast<size_t>(v)]; };
    struct Search {
      int stores = 0;
      ValueId index = kNoValue;
      bool ok = true;  // unpredicated, outside reduces, once per element
      bool later_load = false;
    } search;
    bool shared_read = false;  // a store to another arg reads `in`
    std::function<void(const std::vector<Stmt>&)> find_shared = [&](const std::vector<Stmt>& b) {
      for (const Stmt& stmt : b) {
        if (stmt.kind == StmtKind::kStore && stmt.arg != out &&
            (loads(stmt.value) || loads(stmt.index) || loads(stmt.predicate))) {
          shared_read = true;
        }
        find_shared(stmt.body);
      }
    };
    find_shared(kernel.body);
    if (exclusive && shared_read) return std::nullopt;
    std::function<bool(const Stmt&)> uses_in = [&](const Stmt& stmt) {
      if (loads(stmt.value) || loads(stmt.index) || loads(stmt.predicate) || loads(stmt.init)) {
        return true;
      }
      return std::any_of(stmt.body.begin(), stmt.body.end(), uses_in);
    };
    // Returns whether `block` holds the store; statements after it (or after the loop holding it)
    // run after the store in the same iteration.
    std::function<bool(const std::vector<Stmt>&, int64_t, bool)> visit =
        [&](const std::vector<Stmt>& block, int64_t trips, bool in_reduce) {
          bool found = false;
          for (const Stmt& stmt : block) {
            if (found && uses_in(stmt)) search.later_load = true;
            if (stmt.kind == StmtKind::kStore && stmt.arg == out) {
              ++search.stores;
              search.index = stmt.index;
              search.ok = search.ok && stmt.predicate == kNoValue && !in_reduce &&
                          trips == out_arg.num_elements;
              found = true;
            } else if (stmt.kind == StmtKind::kLoop || stmt.kind == StmtKind::kReduce) {
              const bool loop = stmt.kind == StmtKind::kLoop;
              found |= visit(stmt.body, loop ? trips * stmt.extent : trips, in_reduce || !loop);
            }
          }
          return found;
        };
    visit(kernel.body, kernel.parallel_extent, false);
    if (search.stores != 1 || !search.ok || search.later_load) return std::nullopt;
    for (const Expr& e : kernel.exprs) {
      if (e.op == ExprOp::kLoad && e.arg == in && e.operands[0] != search.index) {
        return std::nullopt;
      }
    }
    Kernel merged = kernel;
    if (!merged.name.ends_with("_in_place")) merged.name += "_in_place";
    const auto renumber = [&](ArgId arg) { return arg == in ? out - 1 : arg > in ? arg - 1 : arg; };
    if (out < in) return std::nullopt;  // args are inputs, then outputs
    for (Expr& e : merged.exprs) {
      if (e.op == ExprOp::kLoad) e.arg = renumber(e.arg);
    }
    std::function<void(std::vector<Stmt>&)> fix = [&](std::vector<Stmt>& block) {
      for (Stmt& stmt : block) {
        if (stmt.kind == StmtKind::kStore) stmt.arg = renumber(stmt.arg);
        fix(stmt.body);
      }
    };
    fix(merged.body);
    merged.args.erase(merged.args.begin() + in);
    if (!VerifyKernel(merged).ok()) return std::nullopt;
    return merged;
  }

  absl::Status PlaceArenaBuffers() {
    absl::StatusOr<passes::MemoryPlan> plan = passes::PlanMemory(arena_buffers_, plan_steps_);
    if (!plan.ok()) {
      return absl::InternalError(
          absl::StrCat("cpu backend: memory planning failed: ", plan.status().message()));
    }
    Dump("memory_plan.txt", plan->ToString());
    for (const auto& [slot, buffer] : arena_buffer_of_slot_) {
      spec_.slots[slot].offset = std::max<int64_t>(plan->buffers[buffer].offset, 0);
    }
    return absl::OkStatus();
  }

  static CpuCompiler& KernelCompiler() {
    static CpuCompiler* compiler = new CpuCompiler();
    return *compiler;
  }

  const ir::Graph& source_;
  // Per parameter: the caller may hand its buffer over (CompileGraph's `donatable`).
  std::vector<bool> donatable_;
  // Per output: the parameter whose buffer it is written into, or -1 (PairDonatedBuffers).
  std::vector<int> donor_of_output_;
  // The slot bound to each graph output.
  std::vector<int> output_slots_;
  // Slots each step reads and writes (all kinds, not only arena), in step order.
  std::vector<std::vector<int>> step_reads_, step_writes_;
  // The kernel IR behind each step that launches a JIT kernel, by step index.
  std::map<int, Kernel> kernel_of_step_;
  ir::Graph graph_;
  passes::FusionPlan plan_;
  passes::DumpSession dump_;
  runtime::ExecutableSpec spec_;
  KeepAlive keep_alive_;
  std::unordered_map<ir::NodeId, int> slot_of_;
  std::vector<int32_t> uses_;
  // Elided permutes (read by the GEMM as strided views) and their sources; their groups.
  std::unordered_map<ir::NodeId, ir::NodeId> transposed_source_;
  std::set<int> skipped_groups_;
  // Groups that lost elided permute outputs: compiled in this reduced form.
  std::map<int, FusionGroup> reduced_groups_;
  // Lines appended to fusion.txt: what the GEMM took over.
  std::string contraction_notes_;
  std::vector<std::pair<ir::NodeId, int>> extra_output_slots_;
  std::map<int, passes::BufferId> arena_buffer_of_slot_;
  std::vector<passes::PlanBuffer> arena_buffers_;
  std::vector<passes::PlanStep> plan_steps_;
  int error_flag_slot_ = -1;
  int num_kernels_ = 0;
  int num_gemm_steps_ = 0;
  int num_in_place_ = 0;  // kernels rebuilt for donation (dump names)
};

struct GraphCache {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::shared_ptr<const CompiledGraph>> entries;
  GraphCacheStats stats;
};

GraphCache& Cache() {
  static GraphCache* cache = new GraphCache();
  return *cache;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(const ir::Graph& graph,
                                                                  std::vector<bool> donatable) {
  if (std::find(donatable.begin(), donatable.end(), true) == donatable.end()) donatable.clear();
  return Compiler(graph, std::move(donatable)).Run();
}

absl::StatusOr<std::vector<ir::TensorData>> RunCompiledGraph(
    const CompiledGraph& compiled, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    std::span<const bool> donated) {
  if (arguments.size() != compiled.parameter_types.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: ", arguments.size(),
                                                   " arguments for ",
                                                   compiled.parameter_types.size(), " parameters"));
  }
  absl::InlinedVector<const void*, 8> inputs(arguments.size());
  for (size_t k = 0; k < arguments.size(); ++k) {
    const ir::TensorType& want = compiled.parameter_types[k];
    if (arguments[k]->dtype() != want.dtype || arguments[k]->shape() != want.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu backend: argument ", k, " is ", ir::DTypeName(arguments[k]->dtype()),
                       ir::ShapeToString(arguments[k]->shape()), ", the graph expects ",
                       ir::TypeToString(want)));
    }
    inputs[k] = arguments[k]->data();
  }
  if (!donated.empty() && donated.size() != arguments.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu backend: ", donated.size(), " donation flags for ", arguments.size(), " arguments"));
  }
  std::vector<ir::TensorData> results;
  results.reserve(compiled.output_types.size());
  absl::InlinedVector<void*, 4> outputs;
  for (size_t k = 0; k < compiled.output_types.size(); ++k) {
    const ir::TensorType& type = compiled.output_types[k];
    const int donor = compiled.donor_of_output.empty() ? -1 : compiled.donor_of_output[k];
    if (donor >= 0 && !donated.empty() && donated[static_cast<size_t>(donor)]) {
      // Written in place of the donated argument (moved into results[k] after the run).
      results.emplace_back();
      outputs.push_back(const_cast<void*>(inputs[static_cast<size_t>(donor)]));
      continue;
    }
    results.push_back(ir::TensorData::Uninitialized(type.dtype, type.shape));
    if (donor >= 0) {
      // Compiled to read the donor from this output's buffer, but not handed over: a copy.
      std::memcpy(results.back().data(), inputs[static_cast<size_t>(donor)],
                  static_cast<size_t>(ByteSize(type)));
    }
    outputs.push_back(results.back().data());
  }
  if (absl::Status s = compiled.executable.Run(inputs, outputs, runtime::DefaultThreadPool());
      !s.ok()) {
    return s;
  }
  for (size_t k = 0; k < compiled.donor_of_output.size(); ++k) {
    const int donor = compiled.donor_of_output[k];
    if (donor < 0 || donated.empty() || !donated[static_cast<size_t>(donor)]) continue;
    // The caller handed this buffer over: ownership moves into the result.
    results[k] = std::move(const_cast<ir::TensorData&>(*arguments[static_cast<size_t>(donor)]));
  }
  return results;
}

GraphCacheStats GetGraphCacheStats() {
  GraphCache& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  GraphCacheStats stats = cache.stats;
  stats.entries = static_cast<int64_t>(cache.entries.size());
  return stats;
}

absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    std::span<const bool> donated) {
  // The donation flags are part of the key: only a graph compiled for them pairs buffers.
  std::vector<bool> donatable(donated.begin(), donated.end());
  if (std::find(donatable.begin(), donatable.end(), true) == donatable.end()) donatable.clear();
  uint64_t key = ir::SignatureHash(graph);
  for (size_t j = 0; j < donatable.size(); ++j) {
    if (donatable[j]) key = (key ^ (0x9e3779b97f4a7c15ULL + j)) * 0x100000001b3ULL;
  }
  std::shared_ptr<const CompiledGraph> compiled;
  GraphCache& cache = Cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end() && it->second->donatable == donatable &&
        passes::SameGraph(it->second->source, graph)) {
      compiled = it->second;
      ++cache.stats.hits;
    }
  }
  if (!compiled) {
    absl::StatusOr<std::shared_ptr<const CompiledGraph>> fresh = CompileGraph(graph, donatable);
    if (!fresh.ok()) return fresh.status();
    compiled = *std::move(fresh);
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries[key] = compiled;
    ++cache.stats.compiles;
  }
  return RunCompiledGraph(*compiled, arguments, donated);
}

}  // namespace kiln::codegen::cpu
