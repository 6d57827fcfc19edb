#include "codegen/cpu/graph_compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cpu/gemm.h"
#include "codegen/cpu/gemm_kernel.h"
#include "codegen/cpu/jit.h"
#include "codegen/graph_compiler.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "ir/hash.h"
#include "ir/printer.h"
#include "passes/fusion.h"
#include "runtime/cpu/contraction.h"
#include "runtime/cpu/gemm_internal.h"
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

bool GemmSupports(const ir::Node& node) {
  return (node.op == ir::Op::kMatMul || node.op == ir::Op::kConv) &&
         (node.type.dtype == ir::DType::kF32 || node.type.dtype == ir::DType::kF64 ||
          node.type.dtype == ir::DType::kBF16 || node.type.dtype == ir::DType::kF16);
}

// An integer matmul / conv {accumulate=i32} of u8, i8 or i16 operands: the int8 GEMM's.
bool IsInt8Contraction(const ir::Graph& graph, const ir::Node& node) {
  if ((node.op != ir::Op::kMatMul && node.op != ir::Op::kConv) ||
      node.attrs.accumulate != ir::DType::kI32) {
    return false;
  }
  return runtime::cpu::gemm_internal::IsInt8Operand(graph.node(node.inputs[0]).type.dtype) &&
         runtime::cpu::gemm_internal::IsInt8Operand(graph.node(node.inputs[1]).type.dtype);
}

// The CPU backend's hooks on the shared graph compiler (codegen/graph_compiler.h): kernels go
// through the LLVM JIT, f32/f64 matmuls and convolutions through the packed GEMM, copies through
// runtime::CopyBytesKernel; Finish pairs donated buffers and builds the runtime::Executable.
class Compiler : public GraphCompiler {
 public:
  Compiler(const ir::Graph& graph, std::vector<bool> donatable)
      : GraphCompiler(graph, Options()), donatable_(std::move(donatable)) {}

  absl::StatusOr<std::shared_ptr<const CompiledGraph>> Run() {
    if (absl::Status s = Compile(); !s.ok()) return s;
    return std::move(compiled_);
  }

 private:
  struct KeepAlive {
    std::vector<std::shared_ptr<const void>> code;
    std::vector<std::unique_ptr<ContractionStep>> contractions;
  };

  static GraphCompilerOptions Options() {
    GraphCompilerOptions options;
    options.backend = "cpu";
    options.contraction_label = "gemm";
    return options;
  }

  std::vector<runtime::Slot>& slots() override { return spec_.slots; }

  bool RunsContraction(const ir::Node& root) const override {
    return GemmSupports(root) || IsInt8Contraction(graph(), root);
  }

  // The GEMM's packing routines take any strides.
  bool ReadsTransposedOperands(const ir::Node&) const override { return true; }

  absl::Status Finish() override {
    spec_.name = "cpu_graph";
    spec_.num_inputs = static_cast<int>(parameter_types().size());
    spec_.num_outputs = static_cast<int>(output_types().size());
    if (absl::Status s = PairDonatedBuffers(); !s.ok()) return s;
    if (absl::Status s = CompilePendingKernels(); !s.ok()) return s;

    spec_.keep_alive = std::make_shared<const KeepAlive>(std::move(keep_alive_));
    absl::StatusOr<runtime::Executable> executable = runtime::Executable::Create(std::move(spec_));
    if (!executable.ok()) {
      return absl::InternalError(
          absl::StrCat("cpu backend: invalid launch plan: ", executable.status().message()));
    }
    Dump("executable.txt", executable->ToString());
    compiled_ = std::make_shared<CompiledGraph>(
        CompiledGraph{source(), *std::move(executable), parameter_types(), output_types(),
                      num_kernels_, num_gemm_steps_, num_packed_weights_, dump().directory(),
                      donatable_, std::move(donor_of_output_), std::move(kernel_of_step_)});
    return absl::OkStatus();
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
      return graph().node(n).op == op && plan().group_of[static_cast<size_t>(n)] == g &&
             UseCount(n) == 1;
    };
    if (fused_here(id, ir::Op::kBroadcast)) {
      chain->push_back(id);
      id = graph().node(id).inputs[0];
    }
    const ir::Shape& shape = graph().node(id).type.shape;
    if (shape.size() <= axis) return ir::kInvalidNode;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] != (d == axis ? size : 1)) return ir::kInvalidNode;
    }
    if (fused_here(id, ir::Op::kReshape)) {
      chain->push_back(id);
      id = graph().node(id).inputs[0];
    }
    if (!IsMaterialized(id, g) || graph().node(id).type.num_elements() != size) {
      return ir::kInvalidNode;
    }
    return id;
  }

  std::optional<EpilogueMatch> MatchEpilogue(int g) const {
    const FusionGroup& group = plan().groups[g];
    const ir::Node& root = graph().node(group.root);
    const bool is_conv = root.op == ir::Op::kConv;
    const ir::Shape& out = root.type.shape;
    const size_t axis = is_conv ? 1 : out.size() - 1;
    EpilogueMatch match;
    std::vector<ir::NodeId> chain;
    ir::NodeId current = group.root;
    for (const ir::NodeId id : group.nodes) {
      const ir::Node& node = graph().node(id);
      if (id == group.root || passes::IsRecomputedLeaf(node)) continue;
      if (node.op == ir::Op::kReshape || node.op == ir::Op::kBroadcast) continue;  // checked below
      if (node.inputs.size() != 2 || node.type.shape != out) return std::nullopt;
      const int side = node.inputs[0] == current ? 0 : node.inputs[1] == current ? 1 : -1;
      if (side < 0 || node.inputs[0] == node.inputs[1]) return std::nullopt;
      // An intermediate value read elsewhere would have to be stored too.
      if (UseCount(current) != 1) return std::nullopt;
      const ir::NodeId other = node.inputs[1 - side];
      if (node.op == ir::Op::kAdd && match.bias == ir::kInvalidNode &&
          match.activation == GemmActivation::kNone) {
        match.bias = BiasSource(other, g, axis, out[axis], &chain);
        if (match.bias == ir::kInvalidNode) return std::nullopt;
      } else if (node.op == ir::Op::kMax && match.activation == GemmActivation::kNone &&
                 graph().node(other).op == ir::Op::kFill &&
                 graph().node(other).attrs.value == 0.0) {
        match.activation = GemmActivation::kRelu;
      } else {
        return std::nullopt;
      }
      current = id;
    }
    if (!EpilogueCovers(group, chain, current)) return std::nullopt;
    match.final = current;
    return match;
  }

  // Whether an epilogue match that ends at `current` and read its operands through the movement
  // nodes `chain` accounts for the whole group: every movement node is in the chain, and the
  // group writes `current` alone.
  bool EpilogueCovers(const FusionGroup& group, const std::vector<ir::NodeId>& chain,
                      ir::NodeId current) const {
    for (const ir::NodeId id : group.nodes) {
      const ir::Op op = graph().node(id).op;
      if (id != group.root && (op == ir::Op::kReshape || op == ir::Op::kBroadcast) &&
          std::find(chain.begin(), chain.end(), id) == chain.end()) {
        return false;
      }
    }
    return group.outputs.size() == 1 && group.outputs[0] == current;
  }

  // The part of an int8 contraction group the int8 GEMM's epilogue computes in registers: the
  // i32 result cast to f32, then elementwise f32 ops each reading the value so far and a scalar
  // (a fill, or a one-element f32 constant), a per-row or per-column vector (as a bias is read:
  // BiasSource), or nothing (round); optionally a final cast to u8 or i8. Each step is the same
  // f32 operation as the node's, so the result is the graph's bit for bit.
  // A vector step's operand: a materialized value of the vector's size, or the values of a
  // constant of the output's shape that varies along the vector's axis only (the simplifier folds
  // a broadcast of a small constant into such a constant).
  struct Int8Vector {
    ir::NodeId node = ir::kInvalidNode;
    std::vector<float> values;
  };
  struct Int8Match {
    runtime::cpu::Int8Epilogue epilogue;  // vectors unset: bound from `vectors` per run
    std::vector<Int8Vector> vectors;      // each vector step's operand, in step order
    ir::NodeId final = ir::kInvalidNode;
  };

  // The values along `axis` of constant `id` (of shape `out`, f32) when it holds nothing else:
  // element i equals element (i's index along axis) of the returned vector.
  std::optional<std::vector<float>> ConstantAlong(ir::NodeId id, const ir::Shape& out,
                                                  size_t axis) const {
    const ir::Node& node = graph().node(id);
    if (node.op != ir::Op::kConstant || node.type.dtype != ir::DType::kF32 ||
        node.type.shape != out) {
      return std::nullopt;
    }
    const auto* values = reinterpret_cast<const float*>(node.attrs.literal->data());
    int64_t inner = 1;
    for (size_t d = axis + 1; d < out.size(); ++d) inner *= out[d];
    const int64_t size = out[axis];
    std::vector<float> vector(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) vector[static_cast<size_t>(i)] = values[i * inner];
    for (int64_t i = 0; i < node.type.num_elements(); ++i) {
      const float want = vector[static_cast<size_t>((i / inner) % size)];
      if (std::memcmp(&values[i], &want, sizeof(float)) != 0) return std::nullopt;
    }
    return vector;
  }

  // The scalar `operand` reads everywhere, if it is one: a fill, or a broadcast / reshape of a
  // one-element f32 constant.
  std::optional<float> ScalarOperand(ir::NodeId operand, int g, std::vector<ir::NodeId>* chain) {
    const ir::Node& node = graph().node(operand);
    if (node.op == ir::Op::kFill)
      return static_cast<float>(ir::RoundToDType(node.attrs.value, ir::DType::kF32));
    std::vector<ir::NodeId> passed;
    ir::NodeId id = operand;
    while ((graph().node(id).op == ir::Op::kBroadcast || graph().node(id).op == ir::Op::kReshape) &&
           plan().group_of[static_cast<size_t>(id)] == g && UseCount(id) == 1) {
      passed.push_back(id);
      id = graph().node(id).inputs[0];
    }
    const ir::Node& source = graph().node(id);
    if (source.op != ir::Op::kConstant || source.type.dtype != ir::DType::kF32 ||
        source.type.num_elements() != 1) {
      return std::nullopt;
    }
    chain->insert(chain->end(), passed.begin(), passed.end());
    return static_cast<float>(source.attrs.literal->GetDouble(0));
  }

  std::optional<Int8Match> MatchInt8Epilogue(int g) {
    using runtime::cpu::Int8EpilogueOp;
    using runtime::cpu::Int8Operand;
    const FusionGroup& group = plan().groups[g];
    const ir::Node& root = graph().node(group.root);
    const bool is_conv = root.op == ir::Op::kConv;
    const ir::Shape& out = root.type.shape;
    Int8Match match;
    std::vector<ir::NodeId> chain;
    ir::NodeId current = group.root;
    bool converted = false, narrowed = false;
    for (const ir::NodeId id : group.nodes) {
      const ir::Node& node = graph().node(id);
      if (id == group.root || passes::IsRecomputedLeaf(node)) continue;
      if (node.op == ir::Op::kReshape || node.op == ir::Op::kBroadcast) continue;  // checked below
      if (narrowed || node.type.shape != out) return std::nullopt;
      const int side = node.inputs[0] == current                             ? 0
                       : node.inputs.size() > 1 && node.inputs[1] == current ? 1
                                                                             : -1;
      if (side < 0 || UseCount(current) != 1) return std::nullopt;
      if (node.op == ir::Op::kCast) {
        if (!converted && node.type.dtype == ir::DType::kF32) {
          converted = true;
        } else if (converted &&
                   (node.type.dtype == ir::DType::kU8 || node.type.dtype == ir::DType::kI8)) {
          narrowed = true;
          match.epilogue.output = node.type.dtype;
        } else {
          return std::nullopt;
        }
        current = id;
        continue;
      }
      if (!converted || node.type.dtype != ir::DType::kF32) return std::nullopt;
      runtime::cpu::Int8EpilogueStep step;
      if (node.op == ir::Op::kRound) {
        step.op = Int8EpilogueOp::kRound;
      } else {
        if (node.inputs.size() != 2 || node.inputs[0] == node.inputs[1]) return std::nullopt;
        const bool first = side == 0;
        switch (node.op) {
          case ir::Op::kAdd:
            step.op = Int8EpilogueOp::kAdd;
            break;
          case ir::Op::kMul:
            step.op = Int8EpilogueOp::kMul;
            break;
          case ir::Op::kSub:
            step.op = first ? Int8EpilogueOp::kSub : Int8EpilogueOp::kSubFrom;
            break;
          case ir::Op::kDiv:
            step.op = first ? Int8EpilogueOp::kDiv : Int8EpilogueOp::kDivInto;
            break;
          case ir::Op::kMax:
            step.op = first ? Int8EpilogueOp::kMax : Int8EpilogueOp::kMaxFrom;
            break;
          case ir::Op::kMin:
            step.op = first ? Int8EpilogueOp::kMin : Int8EpilogueOp::kMinFrom;
            break;
          default:
            return std::nullopt;
        }
        const ir::NodeId other = node.inputs[1 - side];
        if (std::optional<float> scalar = ScalarOperand(other, g, &chain)) {
          step.operand = Int8Operand::kScalar;
          step.scalar = *scalar;
        } else {
          // Per row (a matmul's M axis, a convolution's channels), else per column.
          const size_t row_axis = is_conv ? 1 : out.size() - 2;
          Int8Vector vector;
          for (const auto& [kind, axis] :
               {std::pair{Int8Operand::kRow, row_axis}, {Int8Operand::kColumn, out.size() - 1}}) {
            if (kind == Int8Operand::kColumn && is_conv) break;
            vector.node = BiasSource(other, g, axis, out[axis], &chain);
            if (vector.node == ir::kInvalidNode) {
              if (std::optional<std::vector<float>> v = ConstantAlong(other, out, axis)) {
                vector.values = *std::move(v);
              }
            }
            if (vector.node != ir::kInvalidNode || !vector.values.empty()) {
              step.operand = kind;
              break;
            }
          }
          if (step.operand == Int8Operand::kNone) return std::nullopt;
          if (vector.node != ir::kInvalidNode &&
              graph().node(vector.node).type.dtype != ir::DType::kF32) {
            return std::nullopt;
          }
          match.vectors.push_back(std::move(vector));
        }
      }
      match.epilogue.steps.push_back(step);
      current = id;
    }
    if (match.epilogue.steps.size() > static_cast<size_t>(runtime::cpu::kMaxInt8EpilogueSteps)) {
      return std::nullopt;
    }
    if (current != group.root && !narrowed) {
      if (!converted) return std::nullopt;
      match.epilogue.output = ir::DType::kF32;
    }
    if (!EpilogueCovers(group, chain, current)) return std::nullopt;
    match.final = current;
    return match;
  }

  void AddStep(runtime::Step step, const std::vector<int>& read_slots,
               const std::vector<int>& written_slots) {
    RecordPlanStep(step.name, read_slots, written_slots);
    spec_.steps.push_back(std::move(step));
  }

  // Appends `kernel`'s launch; its code comes in Finish (CompilePendingKernels), once donation
  // has decided which kernels run in place, so that no kernel goes through LLVM twice.
  absl::Status CompileKernel(int g, const Kernel& kernel, const SlotOverride& override) override {
    const std::string dump_name = absl::StrCat("kernel_", num_kernels_);
    Dump(dump_name + ".kir", PrintKernel(kernel));
    KernelBinding binding = BindKernelArgs(kernel, override);
    runtime::Step step;
    step.parallel_extent = kernel.parallel_extent;
    step.grain = GrainFor(kernel);
    step.name = kernel.name;
    step.error_context = binding.error_context;
    step.slot_args = binding.slots;
    ++num_kernels_;
    const int index = static_cast<int>(spec_.steps.size());
    kernel_of_step_[index] = kernel;
    pending_kernels_.push_back(PendingKernel{index, g, dump_name});
    AddStep(std::move(step), binding.reads, binding.writes);
    return absl::OkStatus();
  }

  // The kernels CompileKernel appended, compiled concurrently on the thread pool (each LLVM
  // compile has its own context and target machine; the JIT links them thread-safely).
  absl::Status CompilePendingKernels() {
    const size_t n = pending_kernels_.size();
    std::vector<absl::StatusOr<CompiledKernel>> code(n, absl::UnknownError("not compiled"));
    std::vector<double> milliseconds(n, 0);
    runtime::DefaultThreadPool().ParallelFor(
        static_cast<int64_t>(n), 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const PendingKernel& pending = pending_kernels_[static_cast<size_t>(i)];
            CompileOptions options;
            options.dump = dump().enabled() ? &dump() : nullptr;
            options.dump_name = pending.dump_name;
            const auto start = std::chrono::steady_clock::now();
            code[static_cast<size_t>(i)] =
                KernelCompiler().Compile(kernel_of_step_.at(pending.step), options);
            milliseconds[static_cast<size_t>(i)] =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count();
          }
        });
    for (size_t i = 0; i < n; ++i) {
      const PendingKernel& pending = pending_kernels_[i];
      if (!code[i].ok()) {
        if (!pending.in_place) return GroupError(pending.group, code[i].status());
        return absl::Status(
            code[i].status().code(),
            absl::StrCat("cpu backend: in-place kernel ", kernel_of_step_.at(pending.step).name,
                         ": ", code[i].status().message()));
      }
      keep_alive_.code.push_back(code[i]->keep_alive);
      spec_.steps[static_cast<size_t>(pending.step)].fn = code[i]->fn;
      if (timing()) {
        std::fprintf(stderr, "kiln: cpu kernel %-24s %9.3f ms  %s (group %02d)\n",
                     pending.dump_name.c_str(), milliseconds[i], CodeSourceName(code[i]->source),
                     pending.group);
      }
    }
    pending_kernels_.clear();
    return absl::OkStatus();
  }

  // A matmul or convolution through the packed GEMM, then the rest of the group (bias,
  // activation, residual) as an elementwise kernel over its result.
  absl::Status CompileContraction(int g) override {
    const FusionGroup& group = plan().groups[g];
    const ir::Node& root = graph().node(group.root);
    const ir::NodeId lhs = root.inputs[0], rhs = root.inputs[1];
    auto step_desc = std::make_unique<ContractionStep>();
    step_desc->pool = &runtime::DefaultThreadPool();
    step_desc->kernels = &gemm_internal::JitMicroKernels();
    const ir::Shape& a = graph().node(lhs).type.shape;
    const ir::Shape& b = graph().node(rhs).type.shape;
    // An operand that is an elided permute (ReadsTransposedOperands) is read from its source.
    auto operand_source = [&](ir::NodeId operand) { return OperandSource(operand); };
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
    if (IsInt8Contraction(graph(), root)) return CompileInt8Contraction(g, std::move(step_desc));

    bool has_epilogue = HasEpilogue(group);
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
      AddFusionNote(
          absl::StrCat("gemm: group ", g, " epilogue in registers (bias ",
                       in_register->bias == ir::kInvalidNode ? std::string("none")
                                                             : absl::StrCat("%", in_register->bias),
                       ", activation ", GemmActivationName(in_register->activation), ")"));
    } else if (!has_epilogue || std::find(group.outputs.begin(), group.outputs.end(), group.root) !=
                                    group.outputs.end()) {
      // Where the contraction's result goes: its own slot when something outside reads it,
      // otherwise a temporary the epilogue consumes.
      result_slot = SlotFor(group.root);
    } else {
      result_slot = NewArenaSlot(root, absl::StrCat("%", group.root, " (gemm result)"));
    }

    std::vector<int> extra_slots;
    if (bias_slot >= 0) extra_slots.push_back(bias_slot);
    if (absl::Status s = AppendContractionStep(g, std::move(step_desc), result_slot, extra_slots);
        !s.ok()) {
      return s;
    }
    if (!has_epilogue) return absl::OkStatus();
    return CompileEpilogue(g, result_slot);
  }

  // An int8 matmul / conv {accumulate=i32} through the int8 GEMM: `desc` holds its geometry in
  // gemm / conv, moved into int8_gemm / int8_conv here with the operand dtypes and the epilogue
  // MatchInt8Epilogue finds (or none: the i32 result, and the group's rest as a kernel over it).
  absl::Status CompileInt8Contraction(int g, std::unique_ptr<ContractionStep> desc) {
    const FusionGroup& group = plan().groups[g];
    const ir::Node& root = graph().node(group.root);
    const ir::DType lhs = graph().node(root.inputs[0]).type.dtype;
    const ir::DType rhs = graph().node(root.inputs[1]).type.dtype;
    desc->is_int8 = true;
    runtime::cpu::Int8Epilogue* epilogue;
    if (desc->is_conv) {
      desc->int8_conv.input_dtype = lhs;
      desc->int8_conv.weight_dtype = rhs;
      desc->int8_conv.conv = desc->conv;
      desc->int8_conv.conv.dtype = ir::DType::kF32;  // unused: the operand dtypes say it
      epilogue = &desc->int8_conv.epilogue;
    } else {
      runtime::cpu::Int8GemmParams& q = desc->int8_gemm;
      const GemmParams& p = desc->gemm;
      q.a_dtype = lhs;
      q.b_dtype = rhs;
      q.batch = p.batch;
      q.m = p.m;
      q.n = p.n;
      q.k = p.k;
      q.a = p.a;
      q.b = p.b;
      q.c = p.c;
      epilogue = &q.epilogue;
    }
    const bool has_epilogue = HasEpilogue(group);
    std::optional<Int8Match> match = MatchInt8Epilogue(g);
    int result_slot;
    std::vector<int> vector_slots;
    if (match.has_value()) {
      *epilogue = match->epilogue;
      for (const Int8Vector& v : match->vectors) {
        if (v.node != ir::kInvalidNode) {
          vector_slots.push_back(SlotFor(v.node));
          continue;
        }
        std::vector<std::byte> bytes(v.values.size() * sizeof(float));
        std::memcpy(bytes.data(), v.values.data(), bytes.size());
        vector_slots.push_back(AddSlot(runtime::Slot::Constant(std::move(bytes))));
      }
      result_slot = SlotFor(match->final);
      if (has_epilogue) {
        std::string steps;
        for (const runtime::cpu::Int8EpilogueStep& step : epilogue->steps) {
          absl::StrAppend(&steps, steps.empty() ? "" : ", ",
                          runtime::cpu::Int8EpilogueOpName(step.op), " ",
                          runtime::cpu::Int8OperandName(step.operand));
        }
        AddFusionNote(absl::StrCat("gemm: group ", g, " int8 epilogue in registers (", steps,
                                   "; output ", ir::DTypeName(epilogue->output), ")"));
      }
    } else {
      // The i32 sums into the root's slot (or a temporary), the rest of the group after them.
      epilogue->output = ir::DType::kI32;
      result_slot =
          std::find(group.outputs.begin(), group.outputs.end(), group.root) != group.outputs.end()
              ? SlotFor(group.root)
              : NewArenaSlot(root, absl::StrCat("%", group.root, " (int8 gemm result)"));
    }
    if (!desc->is_conv) {
      if (absl::Status s = PackConstantInt8B(g, desc->int8_gemm); !s.ok()) return s;
    }
    if (absl::Status s = AppendContractionStep(g, std::move(desc), result_slot, vector_slots);
        !s.ok()) {
      return s;
    }
    if (match.has_value() || !has_epilogue) return absl::OkStatus();
    return CompileEpilogue(g, result_slot);
  }

  // A constant B (a weight bound into the graph: aot::Compile's weights, an ONNX initializer) is
  // packed once here, as onnxruntime prepacks constant initializers, instead of on every call.
  absl::Status PackConstantInt8B(int g, runtime::cpu::Int8GemmParams& q) {
    const ir::NodeId b_id = OperandSource(graph().node(plan().groups[g].root).inputs[1]);
    const ir::Node& b = graph().node(b_id);
    if (b.op != ir::Op::kConstant || b.attrs.literal == nullptr) return absl::OkStatus();
    if (!runtime::cpu::SameMatrixForEveryBatchEntry(q.b)) {
      return absl::OkStatus();  // a batch of B matrices
    }
    runtime::cpu::Int8GemmParams params = q;
    params.b.data = b.attrs.literal->data();
    absl::StatusOr<std::shared_ptr<const runtime::cpu::PackedInt8B>> packed =
        runtime::cpu::PackInt8B(params, gemm_internal::JitMicroKernels());
    if (!packed.ok()) return GroupError(g, packed.status());
    q.packed_b = *std::move(packed);
    ++num_packed_weights_;
    AddFusionNote(absl::StrCat("gemm: group ", g, " int8 B (constant %", b_id, ") packed once"));
    return absl::OkStatus();
  }

  // The contraction step of group g: `desc` kept alive and bound through a descriptor slot, its
  // operands (materialized first when they are recomputed leaves), `result_slot` written,
  // `extra_slots` (a bias, an int8 epilogue's vectors) read after the descriptor.
  absl::Status AppendContractionStep(int g, std::unique_ptr<ContractionStep> desc, int result_slot,
                                     const std::vector<int>& extra_slots) {
    const FusionGroup& group = plan().groups[g];
    const ir::Node& root = graph().node(group.root);
    const ir::NodeId lhs = OperandSource(root.inputs[0]), rhs = OperandSource(root.inputs[1]);
    const bool int8 = desc->is_int8;
    const ContractionStep* desc_ptr = desc.get();
    std::vector<std::byte> desc_bytes(sizeof(desc_ptr));
    std::memcpy(desc_bytes.data(), &desc_ptr, sizeof(desc_ptr));
    const int desc_slot = AddSlot(runtime::Slot::Constant(std::move(desc_bytes)));
    keep_alive_.contractions.push_back(std::move(desc));

    // The GEMM needs a buffer for each operand (a recomputed leaf has none yet).
    for (const ir::NodeId operand : {lhs, rhs}) {
      if (absl::Status s = MaterializeRecomputedLeaf(g, operand); !s.ok()) return s;
    }

    runtime::Step step;
    step.fn = ContractionKernel;
    step.parallel_extent = 1;
    step.grain = 1;
    step.name = absl::StrCat(int8 ? "int8_" : "", root.op == ir::Op::kMatMul ? "gemm_" : "conv_",
                             group.root);
    const int lhs_slot = SlotFor(lhs), rhs_slot = SlotFor(rhs);
    step.slot_args = {lhs_slot, rhs_slot, result_slot, desc_slot};
    std::vector<int> reads = {lhs_slot, rhs_slot};
    for (const int slot : extra_slots) {
      step.slot_args.push_back(slot);
      reads.push_back(slot);
    }
    ++num_gemm_steps_;
    AddStep(std::move(step), reads, {result_slot});
    return absl::OkStatus();
  }

  absl::Status AppendCopy(ir::NodeId value, int source_slot, int output_slot) override {
    const std::string name = absl::StrCat("copy_%", value);
    RecordPlanStep(name, {source_slot}, {output_slot});
    runtime::AppendCopyStep(spec_, source_slot, output_slot, ByteSize(graph().node(value).type),
                            name);
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
    const std::vector<ir::NodeId> params = graph().Parameters();
    const auto& outputs = graph().outputs();
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
        const int out_slot = output_slots()[k];
        int writer = -1, writers = 0;
        for (int s = 0; s < num_steps; ++s) {
          if (contains(step_writes()[static_cast<size_t>(s)], out_slot)) {
            writer = s;
            ++writers;
          }
        }
        const ir::TensorType& type = graph().node(outputs[k].node).type;
        if (writers != 1 || ByteSize(type) == 0) continue;
        for (size_t j = 0; j < params.size() && j < donatable_.size(); ++j) {
          if (!donatable_[j] || taken[j] || !(graph().node(params[j]).type == type)) continue;
          const int in_slot = SlotFor(params[j]);
          bool read_by_writer = false, read_later = false;
          for (int s = writer; s < num_steps; ++s) {
            if (!contains(step_reads()[static_cast<size_t>(s)], in_slot)) continue;
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
    for (PendingKernel& pending : pending_kernels_) {
      if (pending.step != step) continue;
      pending.dump_name = dump_name;
      pending.in_place = true;
    }
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

  static CpuCompiler& KernelCompiler() {
    static CpuCompiler* compiler = new CpuCompiler();
    return *compiler;
  }

  // The JIT's work since the previous call: LLVM (emission, O3, codegen), linking, and where
  // the kernels came from. (Counters of the process-wide compiler: a compile on another thread
  // meanwhile would show here too.)
  std::string CodegenNote() override {
    const CompileStats now = KernelCompiler().stats();
    const CompileStats& was = last_stats_;
    std::string note;
    if (now.compiles > was.compiles) {
      absl::StrAppendFormat(&note, "llvm %.3f ms, %d compiled",
                            1e3 * (now.llvm_seconds - was.llvm_seconds),
                            now.compiles - was.compiles);
    }
    if (now.disk_hits > was.disk_hits) {
      absl::StrAppend(&note, note.empty() ? "" : ", ", now.disk_hits - was.disk_hits,
                      " from the disk cache");
    }
    if (now.memory_hits > was.memory_hits) {
      absl::StrAppend(&note, note.empty() ? "" : ", ", now.memory_hits - was.memory_hits,
                      " already loaded");
    }
    if (now.load_seconds > was.load_seconds) {
      absl::StrAppendFormat(&note, "%sload %.3f ms", note.empty() ? "" : ", ",
                            1e3 * (now.load_seconds - was.load_seconds));
    }
    last_stats_ = now;
    return note;
  }
  CompileStats last_stats_;

  // Per parameter: the caller may hand its buffer over (CompileGraph's `donatable`).
  std::vector<bool> donatable_;
  // Per output: the parameter whose buffer it is written into, or -1 (PairDonatedBuffers).
  std::vector<int> donor_of_output_;
  // The kernel IR behind each step that launches a JIT kernel, by step index.
  std::map<int, Kernel> kernel_of_step_;
  // Kernel launches whose code CompilePendingKernels still has to make.
  struct PendingKernel {
    int step;
    int group;
    std::string dump_name;
    bool in_place = false;  // rebuilt by MergeIntoOutput
  };
  std::vector<PendingKernel> pending_kernels_;
  runtime::ExecutableSpec spec_;
  KeepAlive keep_alive_;
  std::shared_ptr<const CompiledGraph> compiled_;
  int num_kernels_ = 0;
  int num_gemm_steps_ = 0;
  int num_packed_weights_ = 0;
  int num_in_place_ = 0;  // kernels rebuilt for donation (dump names)
};

GraphCache<CompiledGraph>& Cache() {
  static auto* cache = new GraphCache<CompiledGraph>();
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
  if (absl::Status s = CheckArguments("cpu", compiled.parameter_types, arguments, donated);
      !s.ok()) {
    return s;
  }
  absl::InlinedVector<const void*, 8> inputs(arguments.size());
  for (size_t k = 0; k < arguments.size(); ++k) inputs[k] = arguments[k]->data();
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

GraphCacheStats GetGraphCacheStats() { return Cache().Stats(); }

absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileCached(
    const ir::Graph& graph, std::span<const bool> donatable_flags) {
  // The donation flags are part of the key: only a graph compiled for them pairs buffers.
  std::vector<bool> donatable(donatable_flags.begin(), donatable_flags.end());
  if (std::find(donatable.begin(), donatable.end(), true) == donatable.end()) donatable.clear();
  uint64_t key = ir::SignatureHash(graph);
  for (size_t j = 0; j < donatable.size(); ++j) {
    if (donatable[j]) key = (key ^ (0x9e3779b97f4a7c15ULL + j)) * 0x100000001b3ULL;
  }
  return Cache().FindOrCompile(
      graph, key, [&](const CompiledGraph& entry) { return entry.donatable == donatable; },
      [&] { return CompileGraph(graph, donatable); });
}

absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    std::span<const bool> donated) {
  absl::StatusOr<std::shared_ptr<const CompiledGraph>> compiled = CompileCached(graph, donated);
  if (!compiled.ok()) return compiled.status();
  return RunCompiledGraph(**compiled, arguments, donated);
}

}  // namespace kiln::codegen::cpu
