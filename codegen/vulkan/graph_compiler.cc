#include "codegen/vulkan/graph_compiler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "codegen/vulkan/spirv.h"
#include "ir/hash.h"
#include "ir/printer.h"
#include "passes/dump.h"
#include "passes/fusion.h"
#include "passes/memory_plan.h"
#include "passes/pass_manager.h"
#include "passes/rewriter.h"
#include "passes/simplify.h"
#include "runtime/buffer.h"

namespace kiln::codegen::vulkan {
namespace {

namespace rv = runtime::vulkan;
using passes::FusionGroup;
using passes::FusionKind;

int64_t ByteSize(const ir::TensorType& type) {
  return type.num_elements() * ir::DTypeSize(type.dtype);
}

// The tiled matmul: C[b] = A[b] B[b] with A[b] of M x K and B[b] of K x N, element (i, k) of A
// at b * M * K + i * a_row + k * a_col (and likewise for B), C dense. A workgroup of 16 x 16
// invocations computes a 64 x 64 tile of C: per step of 16 along K it stages a 64 x 16 tile of A
// and a 16 x 64 tile of B in shared memory (each invocation loads 4 elements of each), then every
// invocation accumulates a 4 x 4 block of C in registers (rows ly + 16 i, columns lx + 16 j), so
// each pair of shared-memory reads feeds 4 multiply-adds.
constexpr int kMatmulTile = 64;

std::string MatmulGlsl(const std::string& name, bool f64, int64_t m, int64_t k, int64_t n,
                       int64_t a_row, int64_t a_col, int64_t b_row, int64_t b_col) {
  const std::string t = f64 ? "double" : "float";
  const std::string zero = f64 ? "0.0lf" : "0.0f";
  return absl::StrCat(
      "#version 450\n// kiln matmul ", name, ": [", m, " x ", k, "] x [", k, " x ", n, "]\n",
      // [[unroll]] keeps the 4 x 4 accumulator block in registers.
      "#extension GL_EXT_control_flow_attributes : require\n",
      "layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;\n",
      "layout(std430, set = 0, binding = 0) readonly buffer Lhs { ", t, " d[]; } a;\n",
      "layout(std430, set = 0, binding = 1) readonly buffer Rhs { ", t, " d[]; } b;\n",
      "layout(std430, set = 0, binding = 2) buffer Out { ", t, " d[]; } c;\n", "shared ", t,
      " tile_a[16][65];\n",                // [k][row], padded against bank conflicts
      "shared ", t, " tile_b[16][65];\n",  // [k][col]
      "const uint M = ", m, "u, K = ", k, "u, N = ", n, "u;\n", "void main() {\n",
      "  uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;\n",
      "  uint tid = ly * 16u + lx;\n",
      "  uint row0 = gl_WorkGroupID.y * 64u, col0 = gl_WorkGroupID.x * 64u;\n",
      "  uint batch = gl_WorkGroupID.z;\n",
      "  uint a_base = batch * (M * K), b_base = batch * (K * N);\n", "  ", t, " acc[4][4];\n",
      "  [[unroll]] for (uint i = 0u; i < 4u; ++i)\n",
      "    [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = ", zero, ";\n",
      "  for (uint k0 = 0u; k0 < K; k0 += 16u) {\n",
      "    for (uint e = tid; e < 1024u; e += 256u) {\n",
      "      uint r = e >> 4u, ka = k0 + (e & 15u);\n",
      "      tile_a[e & 15u][r] = (row0 + r < M && ka < K) ? a.d[a_base + (row0 + r) * ", a_row,
      "u + ka * ", a_col, "u] : ", zero, ";\n", "      uint kb = k0 + (e >> 6u), col = e & 63u;\n",
      "      tile_b[e >> 6u][col] = (kb < K && col0 + col < N) ? b.d[b_base + kb * ", b_row,
      "u + (col0 + col) * ", b_col, "u] : ", zero, ";\n", "    }\n", "    barrier();\n",
      "    [[unroll]] for (uint kk = 0u; kk < 16u; ++kk) {\n", "      ", t, " av[4], bv[4];\n",
      "      [[unroll]] for (uint i = 0u; i < 4u; ++i) av[i] = tile_a[kk][ly + 16u * i];\n",
      "      [[unroll]] for (uint j = 0u; j < 4u; ++j) bv[j] = tile_b[kk][lx + 16u * j];\n",
      "      [[unroll]] for (uint i = 0u; i < 4u; ++i)\n",
      "        [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] += av[i] * bv[j];\n", "    }\n",
      "    barrier();\n", "  }\n", "  [[unroll]] for (uint i = 0u; i < 4u; ++i) {\n",
      "    uint row = row0 + ly + 16u * i;\n", "    [[unroll]] for (uint j = 0u; j < 4u; ++j) {\n",
      "      uint col = col0 + lx + 16u * j;\n",
      "      if (row < M && col < N) c.d[batch * (M * N) + row * N + col] = acc[i][j];\n",
      "    }\n", "  }\n", "}\n");
}

class Compiler {
 public:
  // `device` may be null (CompileSpec): the spec is then compiled for `info` and not loaded.
  Compiler(const ir::Graph& graph, std::shared_ptr<rv::VulkanDevice> device,
           const rv::DeviceInfo& info)
      : source_(graph), device_(std::move(device)), info_(info), target_(TargetFor(info_)) {}

  absl::StatusOr<std::shared_ptr<const CompiledGraph>> Run() {
    dump_ = passes::DumpSession::FromEnv("vulkan");
    passes::PassManagerOptions pm_options;
    pm_options.dump = dump_;
    passes::PassManager pm(std::move(pm_options));
    passes::AddSimplifyPasses(pm);
    absl::StatusOr<ir::Graph> simplified = pm.Run(source_);
    if (!simplified.ok()) return simplified.status();
    graph_ = *std::move(simplified);
    plan_ = passes::Fuse(graph_);
    FindTransposedOperands();

    std::vector<ir::TensorType> parameter_types, output_types;
    for (ir::NodeId p : graph_.Parameters()) parameter_types.push_back(graph_.node(p).type);
    for (const ir::Output& out : graph_.outputs()) {
      output_types.push_back(graph_.node(out.node).type);
    }
    spec_.name = "vulkan_graph";
    spec_.num_inputs = static_cast<int>(parameter_types.size());
    spec_.num_outputs = static_cast<int>(output_types.size());
    BindExternalSlots();
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      if (absl::Status s = CompileGroup(static_cast<int>(g)); !s.ok()) return s;
    }
    Dump("fusion.txt", passes::PrintFusionPlan(graph_, plan_) + notes_);
    if (absl::Status s = CopyRepeatedOutputs(); !s.ok()) return s;
    if (absl::Status s = PlaceArenaBuffers(); !s.ok()) return s;

    auto compiled = std::make_shared<CompiledGraph>();
    if (device_ == nullptr) {  // ahead of time: the spec only
      compiled->source = source_;
      compiled->spec = std::move(spec_);
      compiled->parameter_types = std::move(parameter_types);
      compiled->output_types = std::move(output_types);
      compiled->glsl = std::move(glsl_);
      compiled->num_kernels = num_kernels_;
      compiled->num_matmuls = num_matmuls_;
      compiled->dump_directory = dump_.directory();
      return std::shared_ptr<const CompiledGraph>(std::move(compiled));
    }
    rv::VulkanExecutableSpec spec = spec_;
    absl::StatusOr<std::shared_ptr<const rv::VulkanExecutable>> executable =
        device_->Load(std::move(spec));
    if (!executable.ok()) {
      return absl::Status(executable.status().code(),
                          absl::StrCat("vulkan backend: loading the launch plan failed: ",
                                       executable.status().message()));
    }
    Dump("executable.txt", (*executable)->ToString());
    compiled->source = source_;
    compiled->spec = std::move(spec_);
    compiled->executable = *std::move(executable);
    compiled->device = device_;
    compiled->parameter_types = std::move(parameter_types);
    compiled->output_types = std::move(output_types);
    compiled->glsl = std::move(glsl_);
    compiled->num_kernels = num_kernels_;
    compiled->num_matmuls = num_matmuls_;
    compiled->dump_directory = dump_.directory();
    return std::shared_ptr<const CompiledGraph>(std::move(compiled));
  }

 private:
  void Dump(const std::string& name, const std::string& contents) {
    if (!dump_.enabled()) return;
    if (absl::Status s = dump_.Write(name, contents); !s.ok()) {
      std::fprintf(stderr, "kiln: KILN_DUMP: %s\n", std::string(s.message()).c_str());
    }
  }

  int AddSlot(runtime::Slot slot, const ir::Node& node) {
    slot.label = absl::StrCat(ir::OpName(node.op), " ", ir::TypeToString(node.type));
    spec_.slots.push_back(std::move(slot));
    return static_cast<int>(spec_.slots.size() - 1);
  }

  void BindExternalSlots() {
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
      const bool computed = node.op != ir::Op::kParameter && node.op != ir::Op::kConstant;
      if (computed && slot_of_.count(id) == 0) {
        slot_of_[id] = slot;
      } else {
        extra_output_slots_.emplace_back(id, slot);
      }
    }
  }

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

  // The planner places buffers at sums of their sizes rounded to 64 bytes; planning with sizes
  // rounded to the device's storage-buffer offset alignment (a power of two) makes every offset
  // a multiple of it, as descriptor ranges require.
  int NewArenaSlot(const ir::Node& node, std::string name) {
    // A binding cannot be empty: zero-sized values still get 4 bytes.
    const int slot =
        AddSlot(runtime::Slot::Arena(0, std::max<int64_t>(ByteSize(node.type), 4)), node);
    arena_buffer_of_slot_[slot] = static_cast<passes::BufferId>(arena_buffers_.size());
    const int64_t align = std::max<int64_t>(
        runtime::kBufferAlignment, static_cast<int64_t>(info_.min_storage_buffer_offset_alignment));
    const int64_t planned = (std::max<int64_t>(ByteSize(node.type), 4) + align - 1) / align * align;
    arena_buffers_.push_back(passes::PlanBuffer{planned, false, false, std::move(name)});
    return slot;
  }

  int ErrorFlagSlot() {
    if (error_flag_slot_ < 0) {
      spec_.slots.push_back(runtime::Slot::ErrorFlag());
      error_flag_slot_ = static_cast<int>(spec_.slots.size() - 1);
    }
    return error_flag_slot_;
  }

  void RecordPlanStep(std::string name, const std::vector<int>& reads,
                      const std::vector<int>& writes) {
    passes::PlanStep step;
    step.name = std::move(name);
    for (int s : reads) {
      if (auto it = arena_buffer_of_slot_.find(s); it != arena_buffer_of_slot_.end()) {
        step.inputs.push_back(it->second);
      }
    }
    for (int s : writes) {
      if (auto it = arena_buffer_of_slot_.find(s); it != arena_buffer_of_slot_.end()) {
        step.outputs.push_back(it->second);
      }
    }
    plan_steps_.push_back(std::move(step));
  }

  absl::Status GroupError(int g, const absl::Status& status) {
    const FusionGroup& group = plan_.groups[static_cast<size_t>(g)];
    return absl::Status(
        status.code(),
        absl::StrCat("vulkan backend: group ", g, " (", passes::FusionKindName(group.kind),
                     ", root %", group.root, " = ", ir::OpName(graph_.node(group.root).op),
                     "): ", status.message()));
  }

  // Compiles GLSL to SPIR-V, dumps both, and appends the shader; returns its index.
  absl::StatusOr<int> AddShader(const std::string& name, const std::string& glsl, int num_buffers) {
    const std::string dump_name = absl::StrCat("kernel_", num_kernels_);
    Dump(dump_name + ".glsl", glsl);
    absl::StatusOr<std::shared_ptr<const SpirvModule>> module = CompileGlslToSpirv(glsl, name);
    if (!module.ok()) return module.status();
    if (dump_.enabled()) Dump(dump_name + ".spvasm", DisassembleSpirv((*module)->words));
    rv::ShaderSpec shader;
    shader.name = name;
    shader.spirv = (*module)->words;
    shader.num_buffers = num_buffers;
    spec_.shaders.push_back(std::move(shader));
    glsl_.push_back(glsl);
    ++num_kernels_;
    return static_cast<int>(spec_.shaders.size() - 1);
  }

  absl::Status EmitKernel(int g, const Kernel& kernel,
                          const std::map<ir::NodeId, int>& slot_override = {}) {
    if (kernel.parallel_extent == 0) {
      // Nothing to compute (a zero-sized output), but later steps may bind its buffers: the
      // memory plan still sees the step write them.
      std::vector<int> reads, writes;
      for (const KernelArg& arg : kernel.args) {
        if (arg.role == ArgRole::kErrorFlag) continue;
        auto it = slot_override.find(arg.node);
        const int slot = it != slot_override.end() ? it->second : SlotFor(arg.node);
        (arg.role == ArgRole::kInput ? reads : writes).push_back(slot);
      }
      RecordPlanStep(kernel.name + " (empty)", reads, writes);
      return absl::OkStatus();
    }
    Dump(absl::StrCat("kernel_", num_kernels_, ".kir"), PrintKernel(kernel));
    absl::StatusOr<GlslKernel> glsl = KernelToGlsl(kernel, target_);
    if (!glsl.ok()) return GroupError(g, glsl.status());
    absl::StatusOr<int> shader =
        AddShader(kernel.name, glsl->source, static_cast<int>(kernel.args.size()));
    if (!shader.ok()) return GroupError(g, shader.status());
    rv::Dispatch dispatch;
    dispatch.shader = *shader;
    dispatch.name = kernel.name;
    std::copy(glsl->groups.begin(), glsl->groups.end(), dispatch.groups);
    std::vector<int> reads, writes;
    for (const KernelArg& arg : kernel.args) {
      int slot;
      if (arg.role == ArgRole::kErrorFlag) {
        slot = ErrorFlagSlot();
        dispatch.error_context = arg.name;
      } else if (auto it = slot_override.find(arg.node); it != slot_override.end()) {
        slot = it->second;
      } else {
        slot = SlotFor(arg.node);
      }
      dispatch.buffer_slots.push_back(slot);
      (arg.role == ArgRole::kInput ? reads : writes).push_back(slot);
    }
    RecordPlanStep(dispatch.name, reads, writes);
    spec_.dispatches.push_back(std::move(dispatch));
    return absl::OkStatus();
  }

  bool TiledMatmul(const ir::Node& root) const {
    if (root.op != ir::Op::kMatMul) return false;
    if (root.type.dtype != ir::DType::kF32 &&
        !(root.type.dtype == ir::DType::kF64 && target_.float64)) {
      return false;
    }
    // 32-bit indices in the shader, one batch per z workgroup.
    const ir::Shape& a = graph_.node(root.inputs[0]).type.shape;
    const ir::Shape& b = graph_.node(root.inputs[1]).type.shape;
    const int64_t limit = int64_t{1} << 31;
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < a.size(); ++i) batch *= a[i];
    return batch <= 65535 && batch * a[a.size() - 2] * a.back() < limit &&
           batch * b[b.size() - 2] * b.back() < limit && batch * a[a.size() - 2] * b.back() < limit;
  }

  // A group that only copies a permute swapping the last two axes of a value with a buffer of its
  // own, read only by tiled matmuls, is not run: the matmuls read the source with swapped strides.
  void FindTransposedOperands() {
    std::vector<std::vector<ir::NodeId>> users(static_cast<size_t>(graph_.num_nodes()));
    for (ir::NodeId id = 0; id < graph_.num_nodes(); ++id) {
      for (ir::NodeId in : graph_.node(id).inputs) users[static_cast<size_t>(in)].push_back(id);
    }
    std::set<ir::NodeId> graph_outputs, group_outputs;
    for (const ir::Output& out : graph_.outputs()) graph_outputs.insert(out.node);
    for (const FusionGroup& group : plan_.groups) {
      group_outputs.insert(group.outputs.begin(), group.outputs.end());
    }
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      const FusionGroup& group = plan_.groups[g];
      if (group.kind == FusionKind::kContraction || group.nodes.size() != 1 ||
          group.outputs.size() != 1) {
        continue;
      }
      const ir::NodeId p = group.outputs[0];
      const ir::Node& node = graph_.node(p);
      const size_t rank = node.attrs.axes.size();
      if (node.op != ir::Op::kPermute || graph_outputs.count(p) != 0 || rank < 2) continue;
      bool swap = node.attrs.axes[rank - 2] == static_cast<int64_t>(rank - 1) &&
                  node.attrs.axes[rank - 1] == static_cast<int64_t>(rank - 2);
      for (size_t i = 0; i + 2 < rank; ++i) swap &= node.attrs.axes[i] == static_cast<int64_t>(i);
      const ir::NodeId source = node.inputs[0];
      const ir::Op source_op = graph_.node(source).op;
      const bool materialized = source_op == ir::Op::kParameter || source_op == ir::Op::kConstant ||
                                group_outputs.count(source) != 0;
      if (transposed_source_.count(source) != 0) continue;  // itself an elided permute
      if (!swap || !materialized || users[static_cast<size_t>(p)].empty()) continue;
      bool only_matmuls = true;
      for (ir::NodeId user : users[static_cast<size_t>(p)]) {
        const int32_t ug = plan_.group_of[static_cast<size_t>(user)];
        only_matmuls &=
            ug >= 0 && plan_.groups[static_cast<size_t>(ug)].kind == FusionKind::kContraction &&
            plan_.groups[static_cast<size_t>(ug)].root == user && TiledMatmul(graph_.node(user));
      }
      if (!only_matmuls) continue;
      transposed_source_[p] = source;
      skipped_groups_.insert(static_cast<int>(g));
      absl::StrAppend(&notes_, "matmul: %", p, " permute read as a transposed view of %", source,
                      " (group ", g, " not run)\n");
    }
  }

  ir::NodeId OperandSource(ir::NodeId operand) const {
    auto it = transposed_source_.find(operand);
    return it == transposed_source_.end() ? operand : it->second;
  }

  absl::Status CompileGroup(int g) {
    const FusionGroup& group = plan_.groups[static_cast<size_t>(g)];
    if (group.kind == FusionKind::kCopy && group.nodes.empty()) return absl::OkStatus();
    if (skipped_groups_.count(g) != 0) return absl::OkStatus();
    if (group.kind == FusionKind::kContraction && TiledMatmul(graph_.node(group.root))) {
      return CompileMatmul(g);
    }
    absl::StatusOr<Kernel> kernel = LowerGroup(graph_, group, absl::StrCat("k", g));
    if (!kernel.ok()) return GroupError(g, kernel.status());
    return EmitKernel(g, *kernel);
  }

  absl::Status CompileMatmul(int g) {
    const FusionGroup& group = plan_.groups[static_cast<size_t>(g)];
    const ir::Node& root = graph_.node(group.root);
    const ir::NodeId lhs = root.inputs[0], rhs = root.inputs[1];
    const bool lhs_transposed = OperandSource(lhs) != lhs;
    const bool rhs_transposed = OperandSource(rhs) != rhs;
    // Leaves the fusion recomputes per group (fill, iota, random_*) need a buffer here.
    for (const ir::NodeId operand : {OperandSource(lhs), OperandSource(rhs)}) {
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
    bool has_epilogue = false;
    for (const ir::NodeId id : group.nodes) {
      has_epilogue |= id != group.root && !passes::IsRecomputedLeaf(graph_.node(id));
    }
    const bool root_is_output =
        std::find(group.outputs.begin(), group.outputs.end(), group.root) != group.outputs.end();
    const int result_slot = (!has_epilogue || root_is_output)
                                ? SlotFor(group.root)
                                : NewArenaSlot(root, absl::StrCat("%", group.root, " (matmul)"));
    const ir::Shape& a = graph_.node(lhs).type.shape;
    const ir::Shape& b = graph_.node(rhs).type.shape;
    const size_t r = a.size();
    const int64_t m = a[r - 2], k = a[r - 1], n = b[r - 1];
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < r; ++i) batch *= a[i];
    const std::string name = absl::StrCat("matmul_", group.root);
    if (root.type.num_elements() > 0) {
      // A transposed view of a dense [cols, rows] matrix: element (i, j) at j * rows + i.
      const std::string glsl =
          MatmulGlsl(name, root.type.dtype == ir::DType::kF64, m, k, n, lhs_transposed ? 1 : k,
                     lhs_transposed ? m : 1, rhs_transposed ? 1 : n, rhs_transposed ? k : 1);
      Dump(absl::StrCat("kernel_", num_kernels_, ".kir"),
           absl::StrCat("// ", name, ": the tiled matmul template (no kernel IR)\n"));
      absl::StatusOr<int> shader = AddShader(name, glsl, 3);
      if (!shader.ok()) return GroupError(g, shader.status());
      rv::Dispatch dispatch;
      dispatch.shader = *shader;
      dispatch.name = name;
      dispatch.groups[0] = static_cast<uint32_t>((n + kMatmulTile - 1) / kMatmulTile);
      dispatch.groups[1] = static_cast<uint32_t>((m + kMatmulTile - 1) / kMatmulTile);
      dispatch.groups[2] = static_cast<uint32_t>(batch);
      const int lhs_slot = SlotFor(OperandSource(lhs)), rhs_slot = SlotFor(OperandSource(rhs));
      dispatch.buffer_slots = {lhs_slot, rhs_slot, result_slot};
      RecordPlanStep(name, {lhs_slot, rhs_slot}, {result_slot});
      spec_.dispatches.push_back(std::move(dispatch));
      ++num_matmuls_;
    } else {
      RecordPlanStep(name + " (empty)", {SlotFor(OperandSource(lhs)), SlotFor(OperandSource(rhs))},
                     {result_slot});
    }
    if (!has_epilogue) return absl::OkStatus();
    absl::StatusOr<Epilogue> epilogue = LowerEpilogue(graph_, group);
    if (!epilogue.ok()) return GroupError(g, epilogue.status());
    epilogue->kernel.name = absl::StrCat("epilogue_", group.root);
    return EmitKernel(g, epilogue->kernel, {{group.root, result_slot}});
  }

  // Outputs that are parameters, constants or repeated values: a copy kernel each.
  absl::Status CopyRepeatedOutputs() {
    for (const auto& [id, out_slot] : extra_output_slots_) {
      const ir::Node& node = graph_.node(id);
      const int source = SlotFor(id);
      const int64_t n = node.type.num_elements();
      if (n == 0) continue;
      KernelBuilder b(absl::StrCat("copy_", id));
      b.SetParallelExtent(n);
      const ArgId in = b.AddArg({"source", node.type.dtype, n, ArgRole::kInput, id});
      const ArgId out = b.AddArg({"copy", node.type.dtype, n, ArgRole::kOutput, id});
      const ValueId gid = b.Var(kGid);
      b.Store(out, gid, b.Load(in, gid));
      const Kernel kernel = std::move(b).Finish(n);
      absl::StatusOr<GlslKernel> glsl = KernelToGlsl(kernel, target_);
      if (!glsl.ok()) return glsl.status();
      Dump(absl::StrCat("kernel_", num_kernels_, ".kir"), PrintKernel(kernel));
      absl::StatusOr<int> shader = AddShader(kernel.name, glsl->source, 2);
      if (!shader.ok()) return shader.status();
      rv::Dispatch dispatch;
      dispatch.shader = *shader;
      dispatch.name = kernel.name;
      std::copy(glsl->groups.begin(), glsl->groups.end(), dispatch.groups);
      dispatch.buffer_slots = {source, out_slot};
      RecordPlanStep(dispatch.name, {source}, {out_slot});
      spec_.dispatches.push_back(std::move(dispatch));
    }
    return absl::OkStatus();
  }

  absl::Status PlaceArenaBuffers() {
    absl::StatusOr<passes::MemoryPlan> plan = passes::PlanMemory(arena_buffers_, plan_steps_);
    if (!plan.ok()) {
      return absl::InternalError(
          absl::StrCat("vulkan backend: memory planning failed: ", plan.status().message()));
    }
    Dump("memory_plan.txt", plan->ToString());
    for (const auto& [slot, buffer] : arena_buffer_of_slot_) {
      spec_.slots[static_cast<size_t>(slot)].offset =
          std::max<int64_t>(plan->buffers[static_cast<size_t>(buffer)].offset, 0);
    }
    return absl::OkStatus();
  }

  const ir::Graph& source_;
  std::shared_ptr<rv::VulkanDevice> device_;
  rv::DeviceInfo info_;
  GlslTarget target_;
  ir::Graph graph_;
  passes::FusionPlan plan_;
  passes::DumpSession dump_;
  rv::VulkanExecutableSpec spec_;
  std::vector<std::string> glsl_;
  std::unordered_map<ir::NodeId, int> slot_of_;
  std::vector<std::pair<ir::NodeId, int>> extra_output_slots_;
  std::map<int, passes::BufferId> arena_buffer_of_slot_;
  std::vector<passes::PlanBuffer> arena_buffers_;
  std::vector<passes::PlanStep> plan_steps_;
  // Elided permutes (read by matmuls as strided views) and their sources; their groups.
  std::unordered_map<ir::NodeId, ir::NodeId> transposed_source_;
  std::set<int> skipped_groups_;
  std::string notes_;  // appended to fusion.txt
  int error_flag_slot_ = -1;
  int num_kernels_ = 0;
  int num_matmuls_ = 0;
};

struct GraphCache {
  std::mutex mutex;
  std::unordered_multimap<uint64_t, std::shared_ptr<const CompiledGraph>> entries;
  GraphCacheStats stats;
};

GraphCache& Cache() {
  static GraphCache* cache = new GraphCache();
  return *cache;
}

}  // namespace

GlslTarget TargetFor(const rv::DeviceInfo& info) {
  GlslTarget target;
  target.float64 = info.float64;
  target.int64 = info.int64;
  target.int8_storage = info.int8_storage;
  target.int16_storage = info.int16_storage;
  target.subgroup_arithmetic = info.subgroup_arithmetic;
  if (info.max_workgroup_count[0] > 0) target.max_workgroup_count_x = info.max_workgroup_count[0];
  if (info.max_workgroup_count[1] > 0) target.max_workgroup_count_y = info.max_workgroup_count[1];
  return target;
}

absl::StatusOr<std::shared_ptr<rv::VulkanDevice>> DeviceForIndex(int index) {
  static std::mutex mutex;
  static auto* devices = new std::map<int, std::shared_ptr<rv::VulkanDevice>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = devices->find(index); it != devices->end()) return it->second;
  absl::StatusOr<std::shared_ptr<rv::VulkanDevice>> device =
      rv::VulkanDevice::Open(index == 0 ? std::string() : std::to_string(index));
  if (!device.ok()) {
    return absl::Status(device.status().code(), absl::StrCat("kiln::Vulkan device ", index, ": ",
                                                             device.status().message()));
  }
  (*devices)[index] = *device;
  return *device;
}

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(
    const ir::Graph& graph, std::shared_ptr<rv::VulkanDevice> device) {
  if (device == nullptr) return absl::InvalidArgumentError("vulkan backend: no device");
  const rv::DeviceInfo info = device->info();
  return Compiler(graph, std::move(device), info).Run();
}

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(
    const ir::Graph& graph, std::shared_ptr<rv::VulkanDevice> device, const rv::DeviceInfo& info) {
  if (device == nullptr) return absl::InvalidArgumentError("vulkan backend: no device");
  return Compiler(graph, std::move(device), info).Run();
}

rv::DeviceInfo PortableDeviceInfo() {
  rv::DeviceInfo info;
  info.name = "portable Vulkan 1.1 baseline";
  info.api_version = (1u << 22) | (1u << 12);  // VK_MAKE_API_VERSION(0, 1, 1, 0)
  info.float64 = info.int64 = info.float16 = info.int16 = info.int8 = true;
  info.int8_storage = info.int16_storage = true;
  // No subgroup arithmetic: blobs keep the workgroup-memory reduction tree, which every
  // Vulkan 1.1 compute device runs (subgroup arithmetic is optional in compute shaders), so a
  // blob needs no subgroup feature and loads wherever its other features are present.
  info.subgroup_arithmetic = false;
  info.max_shared_memory_bytes = 16384;
  info.max_workgroup_invocations = 128;
  info.max_workgroup_size[0] = info.max_workgroup_size[1] = 128;
  info.max_workgroup_size[2] = 64;
  info.max_workgroup_count[0] = info.max_workgroup_count[1] = info.max_workgroup_count[2] = 65535;
  info.max_storage_buffers = 4;
  info.max_storage_buffer_range = uint64_t{1} << 27;
  // 256 is the largest minStorageBufferOffsetAlignment the specification allows: arena offsets
  // planned with it are valid descriptor offsets on every device.
  info.min_storage_buffer_offset_alignment = 256;
  return info;
}

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileSpec(const ir::Graph& graph,
                                                                 const rv::DeviceInfo& info) {
  return Compiler(graph, nullptr, info).Run();
}

absl::StatusOr<std::vector<ir::TensorData>> RunCompiledGraph(
    const CompiledGraph& compiled,
    std::span<const std::shared_ptr<const ir::TensorData>> arguments) {
  if (arguments.size() != compiled.parameter_types.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vulkan backend: ", arguments.size(),
                                                   " arguments for ",
                                                   compiled.parameter_types.size(), " parameters"));
  }
  absl::InlinedVector<const void*, 8> inputs(arguments.size());
  for (size_t k = 0; k < arguments.size(); ++k) {
    const ir::TensorType& want = compiled.parameter_types[k];
    if (arguments[k]->dtype() != want.dtype || arguments[k]->shape() != want.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("vulkan backend: argument ", k, " is ", ir::DTypeName(arguments[k]->dtype()),
                       ir::ShapeToString(arguments[k]->shape()), ", the graph expects ",
                       ir::TypeToString(want)));
    }
    inputs[k] = arguments[k]->data();
  }
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

GraphCacheStats GetGraphCacheStats() {
  GraphCache& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  GraphCacheStats stats = cache.stats;
  stats.entries = static_cast<int64_t>(cache.entries.size());
  return stats;
}

absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    int device_index) {
  absl::StatusOr<std::shared_ptr<rv::VulkanDevice>> device = DeviceForIndex(device_index);
  if (!device.ok()) return device.status();
  const uint64_t key = ir::SignatureHash(graph);
  std::shared_ptr<const CompiledGraph> compiled;
  GraphCache& cache = Cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto [begin, end] = cache.entries.equal_range(key);
    for (auto it = begin; it != end; ++it) {
      if (it->second->device == *device && passes::SameGraph(it->second->source, graph)) {
        compiled = it->second;
        ++cache.stats.hits;
        break;
      }
    }
  }
  if (!compiled) {
    absl::StatusOr<std::shared_ptr<const CompiledGraph>> fresh = CompileGraph(graph, *device);
    if (!fresh.ok()) return fresh.status();
    compiled = *std::move(fresh);
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries.emplace(key, compiled);
    ++cache.stats.compiles;
  }
  return RunCompiledGraph(*compiled, arguments);
}

}  // namespace kiln::codegen::vulkan
