#include "passes/constant_fold.h"

#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "ir/builder.h"
#include "ir/interpreter.h"
#include "passes/patterns.h"
#include "passes/rewriter.h"

namespace kiln::passes {
namespace {

int64_t SaturatingMul(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (a == 0 || b == 0) return 0;
  return a > kMax / b ? kMax : a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

// What evaluating `node` costs the interpreter, in element operations: materializing the operands
// plus the op's own work.
int64_t EvaluationWork(const ir::Node& node, const std::vector<const ir::Node*>& operands) {
  int64_t work = 0;
  for (const ir::Node* operand : operands) work = SaturatingAdd(work, operand->type.num_elements());
  const int64_t out = node.type.num_elements();
  switch (ir::GetOpClass(node.op)) {
    case ir::OpClass::kReduce:
    case ir::OpClass::kArgReduce:
      return SaturatingAdd(work, operands[0]->type.num_elements());
    case ir::OpClass::kContraction: {
      const ir::TensorType& weight = operands[1]->type;
      int64_t per_output = 0;
      if (node.op == ir::Op::kMatMul) {
        per_output = weight.shape[weight.shape.size() - 2];  // K
      } else if (weight.shape[0] > 0) {
        per_output = weight.num_elements() / weight.shape[0];  // C / groups * kernel
      }
      return SaturatingAdd(work, SaturatingMul(out, per_output));
    }
    case ir::OpClass::kWindow: {
      int64_t per_output = 1;
      for (int64_t w : node.attrs.window) per_output = SaturatingMul(per_output, w);
      return SaturatingAdd(work, SaturatingMul(out, per_output));
    }
    default:
      return SaturatingAdd(work, out);
  }
}

// Runs `node`'s op on copies of its known-leaf operands. With `scalar`, every operand is a fill
// and is evaluated as a rank-0 fill, which for an elementwise op gives the one value of the whole
// result.
absl::StatusOr<ir::TensorData> Evaluate(const ir::Node& node,
                                        const std::vector<const ir::Node*>& operands, bool scalar) {
  ir::Builder b;
  std::vector<ir::NodeId> inputs;
  for (const ir::Node* operand : operands) {
    inputs.push_back(scalar ? b.Fill(operand->attrs.value, {operand->type.dtype, {}})
                            : b.Emit(operand->op, {}, operand->attrs));
  }
  b.Output(b.Emit(node.op, std::move(inputs), node.attrs));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  if (!graph.ok()) return graph.status();
  absl::StatusOr<std::vector<ir::TensorData>> results = ir::Interpret(*graph, {});
  if (!results.ok()) return results.status();
  return std::move((*results)[0]);
}

}  // namespace

absl::StatusOr<ir::Graph> ConstantFolding::Run(ir::Graph graph) {
  return RewriteEachNode(graph, [&](GraphRewriter& rw, ir::NodeId id) -> ir::NodeId {
    const ir::Node& node = rw.source().node(id);
    if (node.op == ir::Op::kConstant) {
      const std::optional<double> fill = AsFillValue(node);
      return fill ? rw.EmitFill(*fill, node.type, node.loc) : ir::kInvalidNode;
    }
    if (ir::GetOpClass(node.op) == ir::OpClass::kLeaf) return ir::kInvalidNode;

    std::vector<const ir::Node*> operands;
    bool all_fills = true;
    for (ir::NodeId input : rw.Inputs(id)) {
      if (input == ir::kInvalidNode) return ir::kInvalidNode;
      const ir::Node& operand = rw.node(input);
      if (!IsKnownLeaf(operand.op)) return ir::kInvalidNode;
      all_fills = all_fills && operand.op == ir::Op::kFill;
      operands.push_back(&operand);
    }

    if (all_fills && ir::IsElementwise(node.op)) {
      absl::StatusOr<ir::TensorData> element = Evaluate(node, operands, /*scalar=*/true);
      if (element.ok()) {
        if (std::optional<double> fill = FillValueFor(*element)) {
          return rw.EmitFill(*fill, node.type, node.loc);
        }
      }
      // A value no fill can hold (an i64 beyond 2^53): a constant, if small enough.
    }

    if (node.type.num_elements() > max_elements_ || EvaluationWork(node, operands) > max_work_) {
      return ir::kInvalidNode;
    }
    absl::StatusOr<ir::TensorData> value = Evaluate(node, operands, /*scalar=*/false);
    if (!value.ok()) return ir::kInvalidNode;  // E.g. an out-of-range gather: fails at run time.
    if (value->num_elements() == 0) return rw.EmitFill(0.0, node.type, node.loc);
    if (std::optional<ir::TensorData> element = UniformElementOf(*value)) {
      if (std::optional<double> fill = FillValueFor(*element)) {
        return rw.EmitFill(*fill, node.type, node.loc);
      }
    }
    ir::Attrs attrs;
    attrs.literal = std::make_shared<const ir::TensorData>(*std::move(value));
    return rw.Emit(ir::Op::kConstant, {}, std::move(attrs), node.loc);
  });
}

}  // namespace kiln::passes
