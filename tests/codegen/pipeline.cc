#include "tests/codegen/pipeline.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/kernel_eval.h"
#include "codegen/lower.h"

namespace kiln::test {
namespace {

using ir::NodeId;

class Runner {
 public:
  Runner(const ir::Graph& graph, std::span<const ir::TensorData> arguments) : graph_(graph) {
    const std::vector<NodeId> parameters = graph.Parameters();
    for (size_t i = 0; i < parameters.size() && i < arguments.size(); ++i) {
      sources_[parameters[i]] = &arguments[i];
    }
    for (NodeId id = 0; id < graph.num_nodes(); ++id) {
      if (graph.node(id).op == ir::Op::kConstant) sources_[id] = graph.node(id).attrs.literal.get();
    }
  }

  // Evaluates `kernel`: inputs come from `extra` (by arg index) or the values computed so far;
  // outputs are stored as the values of their nodes.
  absl::Status Run(const codegen::Kernel& kernel,
                   const std::map<codegen::ArgId, ir::TensorData*>& extra = {}) {
    std::vector<ir::TensorData> owned_outputs;
    owned_outputs.reserve(kernel.args.size());
    std::vector<ir::TensorData*> args;
    std::vector<std::pair<NodeId, size_t>> stores;
    std::optional<size_t> flag;
    std::vector<ir::TensorData> inputs;  // Copies keep const-correctness simple.
    inputs.reserve(kernel.args.size());
    for (size_t i = 0; i < kernel.args.size(); ++i) {
      const codegen::KernelArg& arg = kernel.args[i];
      if (auto it = extra.find(static_cast<codegen::ArgId>(i)); it != extra.end()) {
        args.push_back(it->second);
        continue;
      }
      switch (arg.role) {
        case codegen::ArgRole::kInput: {
          const ir::TensorData* value = Lookup(arg.node);
          if (value == nullptr) {
            return absl::InternalError(
                absl::StrCat("kernel ", kernel.name, " reads %", arg.node, " before it exists"));
          }
          inputs.push_back(*value);
          args.push_back(&inputs.back());
          break;
        }
        case codegen::ArgRole::kOutput:
          owned_outputs.emplace_back(arg.dtype, graph_.node(arg.node).type.shape);
          args.push_back(&owned_outputs.back());
          stores.push_back({arg.node, owned_outputs.size() - 1});
          break;
        case codegen::ArgRole::kErrorFlag:
          owned_outputs.emplace_back(ir::DType::kI64, ir::Shape{2});
          args.push_back(&owned_outputs.back());
          flag = owned_outputs.size() - 1;
          break;
      }
    }
    if (absl::Status s = codegen::EvalKernelOnTensors(kernel, args); !s.ok()) return s;
    if (flag && owned_outputs[*flag].GetInt64(0) != 0) {
      const codegen::KernelArg& arg = kernel.args.back();
      return absl::InvalidArgumentError(
          absl::StrCat(arg.name, " (index ", owned_outputs[*flag].GetInt64(1), ")"));
    }
    for (auto [node, slot] : stores) computed_[node] = std::move(owned_outputs[slot]);
    return absl::OkStatus();
  }

  const ir::TensorData* Lookup(NodeId id) const {
    if (auto it = computed_.find(id); it != computed_.end()) return &it->second;
    if (auto it = sources_.find(id); it != sources_.end()) return it->second;
    return nullptr;
  }

  ir::TensorData Take(NodeId id) { return std::move(computed_[id]); }

 private:
  const ir::Graph& graph_;
  std::map<NodeId, const ir::TensorData*> sources_;
  std::map<NodeId, ir::TensorData> computed_;
};

}  // namespace

absl::StatusOr<PipelineResult> RunLowered(const ir::Graph& graph,
                                          std::span<const ir::TensorData> arguments,
                                          PipelineOptions options) {
  PipelineResult result;
  result.plan = passes::Fuse(graph);
  Runner runner(graph, arguments);
  for (const passes::FusionGroup& group : result.plan.groups) {
    if (options.use_epilogue && group.kind == passes::FusionKind::kContraction) {
      // The contraction alone (with the leaves it recomputes), then the epilogue on its result.
      passes::FusionGroup alone;
      alone.kind = passes::FusionKind::kContraction;
      alone.root = group.root;
      alone.outputs = {group.root};
      std::set<NodeId> nodes = {group.root};
      for (NodeId operand : graph.node(group.root).inputs) {
        if (passes::IsRecomputedLeaf(graph.node(operand))) {
          nodes.insert(operand);
        } else {
          alone.inputs.push_back(operand);
        }
      }
      alone.nodes.assign(nodes.begin(), nodes.end());
      std::sort(alone.inputs.begin(), alone.inputs.end());
      alone.inputs.erase(std::unique(alone.inputs.begin(), alone.inputs.end()), alone.inputs.end());
      absl::StatusOr<codegen::Kernel> gemm = codegen::LowerGroup(graph, alone);
      if (!gemm.ok()) return gemm.status();
      absl::StatusOr<codegen::Epilogue> epilogue = codegen::LowerEpilogue(graph, group);
      if (!epilogue.ok()) return epilogue.status();
      if (absl::Status s = runner.Run(*gemm); !s.ok()) return s;
      ir::TensorData contraction = runner.Take(group.root);
      std::map<codegen::ArgId, ir::TensorData*> extra = {{epilogue->contraction_arg, &contraction}};
      if (absl::Status s = runner.Run(epilogue->kernel, extra); !s.ok()) return s;
      result.kernels.push_back(*std::move(gemm));
      result.kernels.push_back(std::move(epilogue->kernel));
      continue;
    }
    absl::StatusOr<codegen::Kernel> kernel = codegen::LowerGroup(graph, group);
    if (!kernel.ok()) return kernel.status();
    if (absl::Status s = runner.Run(*kernel); !s.ok()) return s;
    result.kernels.push_back(*std::move(kernel));
  }
  for (const ir::Output& output : graph.outputs()) {
    const ir::TensorData* value = runner.Lookup(output.node);
    if (value == nullptr) {
      return absl::InternalError(absl::StrCat("no kernel computed output %", output.node));
    }
    result.outputs.push_back(*value);
  }
  return result;
}

}  // namespace kiln::test
