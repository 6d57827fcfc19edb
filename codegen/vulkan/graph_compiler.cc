#include "codegen/vulkan/graph_compiler.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/graph_compiler.h"
#include "codegen/kernel_ir.h"
#include "codegen/vulkan/spirv.h"
#include "ir/hash.h"
#include "ir/printer.h"
#include "passes/fusion.h"
#include "runtime/buffer.h"

namespace kiln::codegen::vulkan {
namespace {

namespace rv = runtime::vulkan;
using passes::FusionGroup;

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

// The Vulkan backend's hooks on the shared graph compiler (codegen/graph_compiler.h): kernels
// become GLSL compute shaders compiled to SPIR-V, tiled-matmul-sized matmuls use the shared-memory
// matmul template, copies a copy shader; arena offsets are aligned for descriptor ranges.
class Compiler : public GraphCompiler {
 public:
  // `device` may be null (CompileSpec): the spec is then compiled for `info` and not loaded.
  Compiler(const ir::Graph& graph, std::shared_ptr<rv::VulkanDevice> device,
           const rv::DeviceInfo& info)
      : GraphCompiler(graph, Options(info)),
        device_(std::move(device)),
        info_(info),
        target_(TargetFor(info_)) {}

  absl::StatusOr<std::shared_ptr<const CompiledGraph>> Run() {
    if (absl::Status s = Compile(); !s.ok()) return s;
    return std::move(compiled_);
  }

 private:
  static GraphCompilerOptions Options(const rv::DeviceInfo& info) {
    GraphCompilerOptions options;
    options.backend = "vulkan";
    options.contraction_label = "matmul";
    // Descriptor ranges start at multiples of minStorageBufferOffsetAlignment (a power of two).
    options.arena_alignment = std::max<int64_t>(
        runtime::kBufferAlignment, static_cast<int64_t>(info.min_storage_buffer_offset_alignment));
    // A binding cannot be empty: zero-sized values still get 4 bytes.
    options.min_buffer_bytes = 4;
    return options;
  }

  std::vector<runtime::Slot>& slots() override { return spec_.slots; }

  bool RunsContraction(const ir::Node& root) const override { return TiledMatmul(root); }

  // The matmul template takes the operands' row and column strides.
  bool ReadsTransposedOperands(const ir::Node&) const override { return true; }

  absl::Status Finish() override {
    spec_.name = "vulkan_graph";
    spec_.num_inputs = static_cast<int>(parameter_types().size());
    spec_.num_outputs = static_cast<int>(output_types().size());
    auto compiled = std::make_shared<CompiledGraph>();
    compiled->source = source();
    compiled->parameter_types = parameter_types();
    compiled->output_types = output_types();
    compiled->num_kernels = num_kernels_;
    compiled->num_matmuls = num_matmuls_;
    compiled->dump_directory = dump().directory();
    if (device_ != nullptr) {  // ahead of time (no device): the spec only
      absl::StatusOr<std::shared_ptr<const rv::VulkanExecutable>> executable = device_->Load(spec_);
      if (!executable.ok())
        return StageError("loading the launch plan failed", executable.status());
      Dump("executable.txt", (*executable)->ToString());
      compiled->executable = *std::move(executable);
      compiled->device = device_;
    }
    compiled->spec = std::move(spec_);
    compiled->glsl = std::move(glsl_);
    compiled_ = std::move(compiled);
    return absl::OkStatus();
  }

  // Compiles GLSL to SPIR-V, dumps both, and appends the shader; returns its index.
  absl::StatusOr<int> AddShader(const std::string& name, const std::string& glsl, int num_buffers) {
    const std::string dump_name = absl::StrCat("kernel_", num_kernels_);
    Dump(dump_name + ".glsl", glsl);
    absl::StatusOr<std::shared_ptr<const SpirvModule>> module = CompileGlslToSpirv(glsl, name);
    if (!module.ok()) return module.status();
    if (dump().enabled()) Dump(dump_name + ".spvasm", DisassembleSpirv((*module)->words));
    rv::ShaderSpec shader;
    shader.name = name;
    shader.spirv = (*module)->words;
    shader.num_buffers = num_buffers;
    spec_.shaders.push_back(std::move(shader));
    glsl_.push_back(glsl);
    ++num_kernels_;
    return static_cast<int>(spec_.shaders.size() - 1);
  }

  absl::Status CompileKernel(int g, const Kernel& kernel, const SlotOverride& override) override {
    if (kernel.parallel_extent == 0) {
      // Nothing to compute (a zero-sized output), but later steps may bind its buffers: the
      // memory plan still sees the step write them.
      RecordEmptyKernel(kernel, override);
      return absl::OkStatus();
    }
    Dump(absl::StrCat("kernel_", num_kernels_, ".kir"), PrintKernel(kernel));
    absl::StatusOr<GlslKernel> glsl = KernelToGlsl(kernel, target_);
    if (!glsl.ok()) return GroupError(g, glsl.status());
    absl::StatusOr<int> shader =
        AddShader(kernel.name, glsl->source, static_cast<int>(kernel.args.size()));
    if (!shader.ok()) return GroupError(g, shader.status());
    KernelBinding binding = BindKernelArgs(kernel, override);
    rv::Dispatch dispatch;
    dispatch.shader = *shader;
    dispatch.name = kernel.name;
    std::copy(glsl->groups.begin(), glsl->groups.end(), dispatch.groups);
    dispatch.buffer_slots = binding.slots;
    dispatch.error_context = binding.error_context;
    RecordPlanStep(dispatch.name, binding.reads, binding.writes);
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
    const ir::Shape& a = graph().node(root.inputs[0]).type.shape;
    const ir::Shape& b = graph().node(root.inputs[1]).type.shape;
    const int64_t limit = int64_t{1} << 31;
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < a.size(); ++i) batch *= a[i];
    return batch <= 65535 && batch * a[a.size() - 2] * a.back() < limit &&
           batch * b[b.size() - 2] * b.back() < limit && batch * a[a.size() - 2] * b.back() < limit;
  }

  // An f32/f64 matmul through the tiled matmul shader, then the rest of the group (bias,
  // activation, residual) as an elementwise kernel over its result.
  absl::Status CompileContraction(int g) override {
    const FusionGroup& group = plan().groups[static_cast<size_t>(g)];
    const ir::Node& root = graph().node(group.root);
    const ir::NodeId lhs = root.inputs[0], rhs = root.inputs[1];
    const bool lhs_transposed = OperandSource(lhs) != lhs;
    const bool rhs_transposed = OperandSource(rhs) != rhs;
    // The shader needs a buffer for each operand (a recomputed leaf has none yet).
    for (const ir::NodeId operand : {OperandSource(lhs), OperandSource(rhs)}) {
      if (absl::Status s = MaterializeRecomputedLeaf(g, operand); !s.ok()) return s;
    }
    const bool has_epilogue = HasEpilogue(group);
    const bool root_is_output =
        std::find(group.outputs.begin(), group.outputs.end(), group.root) != group.outputs.end();
    const int result_slot = (!has_epilogue || root_is_output)
                                ? SlotFor(group.root)
                                : NewArenaSlot(root, absl::StrCat("%", group.root, " (matmul)"));
    const ir::Shape& a = graph().node(lhs).type.shape;
    const ir::Shape& b = graph().node(rhs).type.shape;
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
    return CompileEpilogue(g, result_slot);
  }

  // A copy shader (an output that is a parameter, a constant or a repeated value).
  absl::Status AppendCopy(ir::NodeId value, int source_slot, int output_slot) override {
    const ir::Node& node = graph().node(value);
    const int64_t n = node.type.num_elements();
    if (n == 0) return absl::OkStatus();
    KernelBuilder b(absl::StrCat("copy_", value));
    b.SetParallelExtent(n);
    const ArgId in = b.AddArg({"source", node.type.dtype, n, ArgRole::kInput, value});
    const ArgId out = b.AddArg({"copy", node.type.dtype, n, ArgRole::kOutput, value});
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
    dispatch.buffer_slots = {source_slot, output_slot};
    RecordPlanStep(dispatch.name, {source_slot}, {output_slot});
    spec_.dispatches.push_back(std::move(dispatch));
    return absl::OkStatus();
  }

  std::shared_ptr<rv::VulkanDevice> device_;
  rv::DeviceInfo info_;
  GlslTarget target_;
  rv::VulkanExecutableSpec spec_;
  std::vector<std::string> glsl_;
  std::shared_ptr<const CompiledGraph> compiled_;
  int num_kernels_ = 0;
  int num_matmuls_ = 0;
};

GraphCache<CompiledGraph>& Cache() {
  static auto* cache = new GraphCache<CompiledGraph>();
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
  return RunOnHostValues("vulkan", compiled, arguments);
}

GraphCacheStats GetGraphCacheStats() { return Cache().Stats(); }

absl::StatusOr<std::shared_ptr<const CompiledGraph>> FindOrCompile(const ir::Graph& graph,
                                                                   int device_index) {
  absl::StatusOr<std::shared_ptr<rv::VulkanDevice>> device = DeviceForIndex(device_index);
  if (!device.ok()) return device.status();
  return Cache().FindOrCompile(
      graph, ir::SignatureHash(graph),
      [&](const CompiledGraph& entry) { return entry.device == *device; },
      [&] { return CompileGraph(graph, *device); });
}

absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    int device_index) {
  absl::StatusOr<std::shared_ptr<const CompiledGraph>> compiled =
      FindOrCompile(graph, device_index);
  if (!compiled.ok()) return compiled.status();
  return RunCompiledGraph(**compiled, arguments);
}

}  // namespace kiln::codegen::vulkan
