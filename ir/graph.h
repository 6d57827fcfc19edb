// The graph IR: a Graph is a list of Nodes in topological order (every input of node i has an id
// below i) plus the list of outputs. Nodes are values: an op, its operand ids, its attributes and
// its result type. docs/ir.md documents every op's attributes and semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/ops.h"
#include "ir/tensor_data.h"

namespace kiln::ir {

/// Index of a node within its graph.
using NodeId = int32_t;
inline constexpr NodeId kInvalidNode = -1;

/// The type of a value: element type and static shape.
struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t num_elements() const { return NumElements(shape); }
  bool operator==(const TensorType&) const = default;
};

/// "f32[2,3]" — the form used by the text IR and error messages.
std::string TypeToString(const TensorType& type);

/// Attributes of a node. One struct for every op keeps passes, the printer, the parser and the
/// hash generic; each op reads only the fields docs/ir.md lists for it, and the rest keep their
/// defaults (the verifier rejects set fields an op does not use).
struct Attrs {
  /// Result dtype and shape for ops whose result type does not follow from their inputs
  /// (parameter, fill, iota, random_*, cast, reshape, broadcast). The printer takes them from the
  /// result type rather than printing them twice.
  DType dtype = DType::kF32;
  Shape shape;
  /// reduce_*: the reduced axes (sorted). argmax/argmin, iota, concat, gather, scatter_add: one
  /// axis. permute: the permutation (output axis i reads input axis axes[i]). flip: flipped axes.
  std::vector<int64_t> axes;
  /// slice: per-axis start, limit (exclusive) and stride.
  std::vector<int64_t> starts;
  std::vector<int64_t> limits;
  /// slice, conv, window_*: per-axis stride (conv: spatial axes only).
  std::vector<int64_t> strides;
  /// pad, conv, window_*: padding before and after each axis (conv: spatial axes only).
  std::vector<int64_t> low;
  std::vector<int64_t> high;
  /// conv: kernel dilation per spatial axis; window_*: window dilation per axis.
  std::vector<int64_t> dilation;
  /// conv: input (lhs) dilation per spatial axis; the transposed convolution of the gradient.
  std::vector<int64_t> input_dilation;
  /// window_*: window size per axis.
  std::vector<int64_t> window;
  /// conv: feature groups.
  int64_t groups = 1;
  /// fill: the value; pad: the padding value.
  double value = 0.0;
  /// random_uniform / random_normal: the counter-based generator's key.
  uint64_t seed = 0;
  /// parameter: its name, unique within the graph.
  std::string name;
  /// constant: the value.
  std::shared_ptr<const TensorData> literal;
  /// matmul, conv: an integer contraction's accumulator and result dtype, wider than both
  /// (integer) operands, which it holds exactly (u8 x i8 -> i32, like ONNX MatMulInteger).
  /// Unset: the operands share one dtype, which is the result's.
  std::optional<DType> accumulate;

  bool operator==(const Attrs& other) const;
};

/// Bit flags naming Attrs fields, for UsedAttrs.
enum AttrField : uint32_t {
  kAttrDType = 1u << 0,
  kAttrShape = 1u << 1,
  kAttrAxes = 1u << 2,
  kAttrStarts = 1u << 3,
  kAttrLimits = 1u << 4,
  kAttrStrides = 1u << 5,
  kAttrLow = 1u << 6,
  kAttrHigh = 1u << 7,
  kAttrDilation = 1u << 8,
  kAttrInputDilation = 1u << 9,
  kAttrWindow = 1u << 10,
  kAttrGroups = 1u << 11,
  kAttrValue = 1u << 12,
  kAttrSeed = 1u << 13,
  kAttrName = 1u << 14,
  kAttrLiteral = 1u << 15,
  kAttrAccumulate = 1u << 16,
};

/// The Attrs fields an op reads (a mask of AttrField). Fields outside it must keep their defaults.
uint32_t UsedAttrs(Op op);

/// One value of the graph.
struct Node {
  Op op = Op::kParameter;
  std::vector<NodeId> inputs;
  Attrs attrs;
  TensorType type;
  /// Where the user created it (empty file name when unknown, e.g. after parsing text).
  std::source_location loc;
};

/// "file.cc:12" for a known location, "" otherwise.
std::string LocationToString(const std::source_location& loc);

/// A graph output: a node and an optional name.
struct Output {
  NodeId node = kInvalidNode;
  std::string name;
  bool operator==(const Output&) const = default;
};

/// A computation over static shapes. Build one with ir::Builder (which infers and checks types),
/// or parse its text form; ir::Verify checks any graph.
class Graph {
 public:
  /// Appends a node as is and returns its id. No checks: use Builder, or Verify afterwards.
  NodeId AddNode(Node node);
  void AddOutput(NodeId node, std::string name = "");
  /// Room for `nodes` nodes without reallocating (a graph built from a known node count).
  void Reserve(int64_t nodes) { nodes_.reserve(static_cast<size_t>(nodes)); }

  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const Node& node(NodeId id) const { return nodes_[static_cast<size_t>(id)]; }
  Node& mutable_node(NodeId id) { return nodes_[static_cast<size_t>(id)]; }
  std::span<const Node> nodes() const { return nodes_; }
  const std::vector<Output>& outputs() const { return outputs_; }
  std::vector<Output>& mutable_outputs() { return outputs_; }

  /// Parameter nodes in id order: the positional calling convention of a compiled graph.
  std::vector<NodeId> Parameters() const;
  /// The parameter with this name, or kInvalidNode.
  NodeId FindParameter(std::string_view name) const;

 private:
  std::vector<Node> nodes_;
  std::vector<Output> outputs_;
};

}  // namespace kiln::ir
