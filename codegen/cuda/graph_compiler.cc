#include "codegen/cuda/graph_compiler.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/cuda/matmul.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/graph_compiler.h"
#include "codegen/kernel_ir.h"
#include "ir/hash.h"
#include "passes/fusion.h"
#include "runtime/buffer.h"

namespace kiln::codegen::cuda {
namespace {

namespace rc = runtime::cuda;
using passes::FusionGroup;

// The CUDA backend's hooks on the shared graph compiler (codegen/graph_compiler.h): kernels
// become CUDA C compiled to PTX by NVRTC (one module each), f32/f64 matmuls the tiled template,
// copies a copy kernel.
class Compiler : public GraphCompiler {
 public:
  // `device` may be null (CompileSpec): the spec is then compiled for `arch` and not loaded.
  Compiler(const ir::Graph& graph, std::shared_ptr<rc::CudaDevice> device, std::string arch,
           bool allow_tf32)
      : GraphCompiler(graph, Options()),
        device_(std::move(device)),
        arch_(std::move(arch)),
        compute_capability_(ComputeCapability(arch_)),
        allow_tf32_(allow_tf32) {
    if (device_ != nullptr) {
      const rc::DeviceInfo& info = device_->info();
      if (info.max_grid[0] > 0) target_.max_grid_x = info.max_grid[0];
      if (info.max_grid[1] > 0) target_.max_grid_y = info.max_grid[1];
    }
  }

  absl::StatusOr<std::shared_ptr<const CompiledGraph>> Run() {
    if (absl::Status s = Compile(); !s.ok()) return s;
    return std::move(compiled_);
  }

 private:
  static GraphCompilerOptions Options() {
    GraphCompilerOptions options;
    options.backend = "cuda";
    options.contraction_label = "matmul";
    // Every slot address is a multiple of the largest element (and of a 128-byte line).
    options.arena_alignment = std::max<int64_t>(runtime::kBufferAlignment, 128);
    options.min_buffer_bytes = 4;
    return options;
  }

  std::vector<runtime::Slot>& slots() override { return spec_.slots; }

  bool RunsContraction(const ir::Node& root) const override {
    if (root.op != ir::Op::kMatMul) return false;
    std::optional<MatmulShape> shape = ShapeOf(root, false, false);
    return shape.has_value() && MatmulFits(*shape);
  }

  // The matmul template takes the operands' row and column strides.
  bool ReadsTransposedOperands(const ir::Node&) const override { return true; }

  absl::Status Finish() override {
    spec_.name = "cuda_graph";
    spec_.num_inputs = static_cast<int>(parameter_types().size());
    spec_.num_outputs = static_cast<int>(output_types().size());
    auto compiled = std::make_shared<CompiledGraph>();
    compiled->source = source();
    compiled->parameter_types = parameter_types();
    compiled->output_types = output_types();
    compiled->num_kernels = num_kernels_;
    compiled->num_matmuls = num_matmuls_;
    compiled->arch = arch_;
    compiled->allow_tf32 = allow_tf32_;
    compiled->dump_directory = dump().directory();
    if (device_ != nullptr) {  // ahead of time (no device): the spec only
      absl::StatusOr<std::shared_ptr<const rc::CudaExecutable>> executable = device_->Load(spec_);
      if (!executable.ok()) {
        return StageError("loading the launch plan failed", executable.status());
      }
      Dump("executable.txt", (*executable)->ToString());
      compiled->executable = *std::move(executable);
      compiled->device = device_;
    }
    compiled->spec = std::move(spec_);
    compiled->cuda_sources = std::move(sources_);
    compiled_ = std::move(compiled);
    return absl::OkStatus();
  }

  // Compiles CUDA C to PTX, dumps both, and appends the module and its kernel; returns the
  // kernel's index.
  absl::StatusOr<int> AddKernel(const std::string& name, const std::string& source,
                                const std::string& entry, int num_buffers) {
    const std::string dump_name = absl::StrCat("kernel_", num_kernels_);
    Dump(dump_name + ".cu", source);
    absl::StatusOr<std::string> ptx = CompileToPtx(source, name, arch_);
    if (!ptx.ok()) return ptx.status();
    Dump(dump_name + ".ptx", *ptx);
    rc::KernelSpec kernel;
    kernel.name = entry;
    kernel.module = static_cast<int>(spec_.modules.size());
    kernel.num_buffers = num_buffers;
    spec_.modules.push_back(*std::move(ptx));
    spec_.kernels.push_back(std::move(kernel));
    sources_.push_back(source);
    ++num_kernels_;
    return static_cast<int>(spec_.kernels.size() - 1);
  }

  // Appends the launch of `cuda` (a rendered kernel-IR kernel) on `slots`.
  absl::Status AddKernelLaunch(const Kernel& kernel, const CudaKernel& cuda,
                               const KernelBinding& binding) {
    absl::StatusOr<int> index =
        AddKernel(kernel.name, cuda.source, cuda.entry, static_cast<int>(kernel.args.size()));
    if (!index.ok()) return index.status();
    rc::Launch launch;
    launch.kernel = *index;
    launch.name = kernel.name;
    std::copy(cuda.grid.begin(), cuda.grid.end(), launch.grid);
    launch.block[0] = static_cast<uint32_t>(cuda.block_size);
    launch.buffer_slots = binding.slots;
    launch.error_context = binding.error_context;
    RecordPlanStep(launch.name, binding.reads, binding.writes);
    spec_.launches.push_back(std::move(launch));
    return absl::OkStatus();
  }

  absl::Status CompileKernel(int g, const Kernel& kernel, const SlotOverride& override) override {
    if (kernel.parallel_extent == 0) {
      // Nothing to compute (a zero-sized output), but later steps may bind its buffers: the
      // memory plan still sees the step write them.
      RecordEmptyKernel(kernel, override);
      return absl::OkStatus();
    }
    Dump(absl::StrCat("kernel_", num_kernels_, ".kir"), PrintKernel(kernel));
    absl::StatusOr<CudaKernel> cuda = KernelToCuda(kernel, target_);
    if (!cuda.ok()) return GroupError(g, cuda.status());
    if (absl::Status s = AddKernelLaunch(kernel, *cuda, BindKernelArgs(kernel, override));
        !s.ok()) {
      return GroupError(g, s);
    }
    return absl::OkStatus();
  }

  // The matmul template's view of `root`, or nullopt when no template takes its dtype here.
  std::optional<MatmulShape> ShapeOf(const ir::Node& root, bool lhs_transposed,
                                     bool rhs_transposed) const {
    std::optional<MatmulKernel> kernel =
        ChooseMatmulKernel(root.type.dtype, compute_capability_, allow_tf32_);
    if (!kernel.has_value()) return std::nullopt;
    const ir::Shape& a = graph().node(root.inputs[0]).type.shape;
    const ir::Shape& b = graph().node(root.inputs[1]).type.shape;
    const size_t r = a.size();
    MatmulShape s;
    s.dtype = root.type.dtype;
    s.kernel = *kernel;
    s.m = a[r - 2];
    s.k = a[r - 1];
    s.n = b[r - 1];
    for (size_t i = 0; i + 2 < r; ++i) s.batch *= a[i];
    // A transposed view of a dense [cols, rows] matrix: element (i, j) at j * rows + i.
    s.a_row = lhs_transposed ? 1 : s.k;
    s.a_col = lhs_transposed ? s.m : 1;
    s.b_row = rhs_transposed ? 1 : s.n;
    s.b_col = rhs_transposed ? s.k : 1;
    return s;
  }

  // A matmul through its tiled template (tensor cores or fma), then the rest of the group (bias,
  // activation, residual) as an elementwise kernel over its result.
  absl::Status CompileContraction(int g) override {
    const FusionGroup& group = plan().groups[static_cast<size_t>(g)];
    const ir::Node& root = graph().node(group.root);
    const ir::NodeId lhs = root.inputs[0], rhs = root.inputs[1];
    // The template needs a buffer for each operand (a recomputed leaf has none yet).
    for (const ir::NodeId operand : {OperandSource(lhs), OperandSource(rhs)}) {
      if (absl::Status s = MaterializeRecomputedLeaf(g, operand); !s.ok()) return s;
    }
    const bool has_epilogue = HasEpilogue(group);
    const bool root_is_output =
        std::find(group.outputs.begin(), group.outputs.end(), group.root) != group.outputs.end();
    const int result_slot = (!has_epilogue || root_is_output)
                                ? SlotFor(group.root)
                                : NewArenaSlot(root, absl::StrCat("%", group.root, " (matmul)"));
    // RunsContraction chose this group for a template, so one fits.
    const MatmulShape shape = *ShapeOf(root, OperandSource(lhs) != lhs, OperandSource(rhs) != rhs);
    const std::string name = absl::StrCat("matmul_", group.root);
    const int lhs_slot = SlotFor(OperandSource(lhs)), rhs_slot = SlotFor(OperandSource(rhs));
    if (root.type.num_elements() > 0) {
      Dump(absl::StrCat("kernel_", num_kernels_, ".kir"),
           absl::StrCat("// ", name, ": the tiled matmul template, ",
                        MatmulKernelName(shape.kernel), " (no kernel IR)\n"));
      absl::StatusOr<int> kernel = AddKernel(name, MatmulCuda(name, shape), "kiln_matmul", 3);
      if (!kernel.ok()) return GroupError(g, kernel.status());
      rc::Launch launch;
      launch.kernel = *kernel;
      launch.name = name;
      const MatmulLaunch dims = MatmulLaunchFor(shape);
      std::copy(std::begin(dims.grid), std::end(dims.grid), launch.grid);
      std::copy(std::begin(dims.block), std::end(dims.block), launch.block);
      launch.buffer_slots = {lhs_slot, rhs_slot, result_slot};
      RecordPlanStep(name, {lhs_slot, rhs_slot}, {result_slot});
      spec_.launches.push_back(std::move(launch));
      ++num_matmuls_;
    } else {
      RecordPlanStep(name + " (empty)", {lhs_slot, rhs_slot}, {result_slot});
    }
    if (!has_epilogue) return absl::OkStatus();
    return CompileEpilogue(g, result_slot);
  }

  // A copy kernel (an output that is a parameter, a constant or a repeated value).
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
    absl::StatusOr<CudaKernel> cuda = KernelToCuda(kernel, target_);
    if (!cuda.ok()) return cuda.status();
    Dump(absl::StrCat("kernel_", num_kernels_, ".kir"), PrintKernel(kernel));
    KernelBinding binding;
    binding.slots = {source_slot, output_slot};
    binding.reads = {source_slot};
    binding.writes = {output_slot};
    return AddKernelLaunch(kernel, *cuda, binding);
  }

  std::shared_ptr<rc::CudaDevice> device_;
  std::string arch_;
  int compute_capability_;
  bool allow_tf32_;
  CudaTarget target_;
  rc::CudaExecutableSpec spec_;
  std::vector<std::string> sources_;
  std::shared_ptr<const CompiledGraph> compiled_;
  int num_kernels_ = 0;
  int num_matmuls_ = 0;
};

std::atomic<int>& Tf32Setting() {
  // -1: not set by SetAllowTf32, so $KILN_CUDA_ALLOW_TF32 decides.
  static std::atomic<int> setting{-1};
  return setting;
}

GraphCache<CompiledGraph>& Cache() {
  static auto* cache = new GraphCache<CompiledGraph>();
  return *cache;
}

}  // namespace

std::string ArchFor(const rc::CudaDevice* device) {
  if (const char* arch = std::getenv("KILN_CUDA_ARCH"); arch != nullptr && *arch != '\0') {
    return arch;
  }
  if (device != nullptr) return device->info().Arch();
  return "sm_80";
}

bool AllowTf32() {
  if (const int set = Tf32Setting().load(); set >= 0) return set == 1;
  const char* env = std::getenv("KILN_CUDA_ALLOW_TF32");
  return env != nullptr && (std::string_view(env) == "1" || std::string_view(env) == "true");
}

void SetAllowTf32(bool allow) { Tf32Setting().store(allow ? 1 : 0); }

absl::StatusOr<std::shared_ptr<rc::CudaDevice>> DeviceForIndex(int index) {
  static std::mutex mutex;
  static auto* devices = new std::map<int, std::shared_ptr<rc::CudaDevice>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = devices->find(index); it != devices->end()) return it->second;
  absl::StatusOr<std::shared_ptr<rc::CudaDevice>> device = rc::CudaDevice::Open(index);
  if (!device.ok()) {
    return absl::Status(device.status().code(),
                        absl::StrCat("kiln::Cuda device ", index, ": ", device.status().message()));
  }
  (*devices)[index] = *device;
  return *device;
}

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(
    const ir::Graph& graph, std::shared_ptr<rc::CudaDevice> device) {
  if (device == nullptr) return absl::InvalidArgumentError("cuda backend: no device");
  std::string arch = ArchFor(device.get());
  return Compiler(graph, std::move(device), std::move(arch), AllowTf32()).Run();
}

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileSpec(const ir::Graph& graph,
                                                                 const std::string& arch,
                                                                 bool allow_tf32) {
  return Compiler(graph, nullptr, arch, allow_tf32).Run();
}

absl::StatusOr<std::vector<ir::TensorData>> RunCompiledGraph(
    const CompiledGraph& compiled,
    std::span<const std::shared_ptr<const ir::TensorData>> arguments) {
  return RunOnHostValues("cuda", compiled, arguments);
}

GraphCacheStats GetGraphCacheStats() { return Cache().Stats(); }

absl::StatusOr<std::shared_ptr<const CompiledGraph>> FindOrCompile(const ir::Graph& graph,
                                                                   int device_index) {
  absl::StatusOr<std::shared_ptr<rc::CudaDevice>> device = DeviceForIndex(device_index);
  if (!device.ok()) return device.status();
  return Cache().FindOrCompile(
      graph, ir::SignatureHash(graph),
      [&, allow_tf32 = AllowTf32(), arch = ArchFor(device->get())](const CompiledGraph& entry) {
        return entry.device == *device && entry.allow_tf32 == allow_tf32 && entry.arch == arch;
      },
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

}  // namespace kiln::codegen::cuda
