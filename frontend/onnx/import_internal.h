// Internals of the ONNX importer shared by import.cc (model, tensors, attributes, values) and
// import_ops.cc (one lowering per ONNX operator). Includes the ONNX protobuf headers: never
// include it from a public header.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "frontend/onnx/external_data.h"
#include "frontend/onnx/import.h"
#include "frontend/onnx/operator_versions.h"
#include "ir/builder.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx::internal {

/// ONNX TensorProto → TensorData. Checks dims, dtype and the data size; `what` names the tensor in
/// errors ("initializer 'fc.weight'", "attribute 'value' of node 'c1' (Constant)"). A tensor
/// stored as external data is read from `external` (none: an error saying how to give one).
absl::StatusOr<ir::TensorData> TensorFromProto(const ::onnx::TensorProto& proto,
                                               const std::string& what,
                                               ExternalDataSource* external = nullptr);
/// ONNX elem_type → DType, or an error naming `what`.
absl::StatusOr<ir::DType> DTypeFromOnnx(int32_t elem_type, const std::string& what);
/// As DTypeFromOnnx, and a narrow type (narrow_types.h) → the dtype that holds its values.
absl::StatusOr<ir::DType> HeldDTypeFromOnnx(int32_t elem_type, const std::string& what);

struct NarrowType;

class Importer;
/// Lowers one node: reads its inputs with Importer::Input/ConstInput, defines its outputs.
using Lowering = std::function<absl::Status(Importer&, const ::onnx::NodeProto&)>;
/// The operator table: op_type → lowering (default domain).
const std::map<std::string, Lowering>& Lowerings();

/// Thrown by Importer::type for a node the builder refused (see there).
struct BuilderFailed {};

class Importer {
 public:
  /// `external`: where external tensors come from; nullptr: SourceFor(options).
  Importer(const ImportOptions& options, int64_t opset,
           std::unique_ptr<ExternalDataSource> external = nullptr)
      : options_(options), opset_(opset), external_(std::move(external)) {}

  absl::StatusOr<ImportedModel> Run(const ::onnx::ModelProto& model);

  // ---- For the lowerings ----
  int64_t opset() const { return opset_; }
  ir::Builder& b() { return b_; }
  /// The type of a built node. A node the builder refused (kInvalidNode: its error is in
  /// b().status()) throws BuilderFailed, which unwinds the lowering to Run, which reports the
  /// builder's error for the node: lowerings need not check every intermediate node.
  const ir::TensorType& type(ir::NodeId id) const {
    if (id < 0 || id >= b_.graph().num_nodes()) throw BuilderFailed{};
    return b_.type(id);
  }
  const ir::Shape& shape(ir::NodeId id) const { return type(id).shape; }
  int64_t rank(ir::NodeId id) const { return type(id).rank(); }
  ir::DType dtype(ir::NodeId id) const { return type(id).dtype; }

  /// Number of inputs present (trailing empty names ignored).
  static int NumInputs(const ::onnx::NodeProto& node);
  static bool HasInput(const ::onnx::NodeProto& node, int i) {
    return i < node.input_size() && !node.input(i).empty();
  }
  /// Input i as a graph value (errors: missing, undefined).
  absl::StatusOr<ir::NodeId> Input(const ::onnx::NodeProto& node, int i);
  /// Input i as a value known at import time (an initializer, a Constant, or anything computed
  /// from shapes and constants); otherwise NotKnownAtImport's error, with `why` appended.
  absl::StatusOr<ir::TensorData> ConstInput(const ::onnx::NodeProto& node, int i,
                                            const std::string& why = "");
  /// The one refusal of an operand (input i of the node, built as `id`) that kiln needs at import
  /// time but that is not a constant: "input 1 ('shape') must be known at import time (kiln
  /// compiles static shapes), but it depends on the model input 'x'", naming every model input
  /// (and weight parameter) it is computed from, then `why` when given. Unimplemented.
  absl::Status NotKnownAtImport(const ::onnx::NodeProto& node, int i, ir::NodeId id,
                                const std::string& why = "") const;
  absl::StatusOr<std::vector<int64_t>> ConstInts(const ::onnx::NodeProto& node, int i);
  /// Defines output i of the node (ignored when the output name is empty).
  void SetOutput(const ::onnx::NodeProto& node, int i, ir::NodeId id);
  /// The narrow ONNX type (narrow_types.h) whose values input i holds, or null when they are
  /// plain values of its kiln dtype.
  const NarrowType* InputNarrowType(const ::onnx::NodeProto& node, int i) const;
  /// Marks output i as holding values of a narrow type (null: plain values).
  void SetOutputNarrowType(const ::onnx::NodeProto& node, int i, const NarrowType* type);
  /// Whether output i is named (used by the model).
  static bool HasOutput(const ::onnx::NodeProto& node, int i) {
    return i < node.output_size() && !node.output(i).empty();
  }

  // Builder wrappers that fold results computed from constants only (shape arithmetic).
  ir::NodeId Fold(ir::NodeId id);
  ir::NodeId Unary(ir::Op op, ir::NodeId x) { return Fold(b_.Unary(op, x)); }
  ir::NodeId Binary(ir::Op op, ir::NodeId a, ir::NodeId c) { return Fold(b_.Binary(op, a, c)); }
  ir::NodeId Select(ir::NodeId c, ir::NodeId t, ir::NodeId f) { return Fold(b_.Select(c, t, f)); }
  ir::NodeId Cast(ir::NodeId x, ir::DType d) { return dtype(x) == d ? x : Fold(b_.Cast(x, d)); }
  ir::NodeId Reduce(ir::Op op, ir::NodeId x, std::vector<int64_t> axes);
  ir::NodeId Reshape(ir::NodeId x, ir::Shape s) {
    return shape(x) == s ? x : Fold(b_.Reshape(x, std::move(s)));
  }
  ir::NodeId Permute(ir::NodeId x, std::vector<int64_t> perm);
  ir::NodeId Broadcast(ir::NodeId x, ir::Shape s) {
    return shape(x) == s ? x : Fold(b_.Broadcast(x, std::move(s)));
  }
  ir::NodeId Slice(ir::NodeId x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                   std::vector<int64_t> strides = {});
  ir::NodeId Concat(std::vector<ir::NodeId> xs, int64_t axis) {
    return xs.size() == 1 ? xs[0] : Fold(b_.Concat(std::move(xs), axis));
  }
  ir::NodeId Const(ir::TensorData t) { return b_.Constant(std::move(t)); }
  /// A tensor of `shape` filled with `value`.
  ir::NodeId Full(double value, ir::DType d, ir::Shape s) {
    return b_.Fill(value, {d, std::move(s)});
  }
  /// A scalar `value` broadcast to x's type.
  ir::NodeId Like(double value, ir::NodeId x) { return Full(value, dtype(x), shape(x)); }

  /// numpy broadcasting: x (rank ≤ target rank) reshaped with leading 1s and broadcast.
  absl::StatusOr<ir::NodeId> BroadcastTo(ir::NodeId x, ir::Shape target);
  /// The numpy broadcast shape of several shapes, or an error naming both.
  static absl::StatusOr<ir::Shape> BroadcastShape(const ir::Shape& a, const ir::Shape& b);
  /// Brings operands to one shape (numpy rules) and checks they share a dtype.
  absl::StatusOr<std::vector<ir::NodeId>> Broadcasted(std::vector<ir::NodeId> xs,
                                                      bool same_dtype = true);

  /// The value of a node when it is known at import time (constant, fill or iota leaves).
  std::optional<ir::TensorData> KnownValue(ir::NodeId id);

  /// What a DequantizeLinear of 8-bit integers computed an output from, (x - zero_point) *
  /// scale, so that a MatMul or Conv reading it can run as an integer contraction (QDQ models).
  struct Dequantized {
    ir::NodeId x = ir::kInvalidNode;           // u8 or i8
    ir::NodeId scale = ir::kInvalidNode;       // f32: scalar, or 1-D along `axis` of x
    ir::NodeId zero_point = ir::kInvalidNode;  // x's dtype, shaped as scale; or none
    int64_t axis = 0;
  };
  void SetDequantized(const ::onnx::NodeProto& node, int i, Dequantized value) {
    if (HasOutput(node, i)) dequantized_[node.output(i)] = value;
  }
  /// The Dequantized record of input i, or null when it was not made by such a
  /// DequantizeLinear.
  const Dequantized* InputDequantized(const ::onnx::NodeProto& node, int i) const {
    if (!HasInput(node, i)) return nullptr;
    auto it = dequantized_.find(node.input(i));
    return it == dequantized_.end() ? nullptr : &it->second;
  }

 private:
  absl::Status DefineInputs(const ::onnx::GraphProto& graph);
  // An error when the node computes on narrow inputs that kiln only casts and moves.
  absl::Status CheckNarrowInputs(const ::onnx::NodeProto& node) const;
  absl::StatusOr<ir::NodeId> ValueNode(const std::string& name);
  absl::StatusOr<ir::Graph> Prune(ir::Graph graph, const std::vector<ir::NodeId>& keep);

  const ImportOptions& options_;
  int64_t opset_;
  ir::Builder b_;
  std::map<std::string, ir::NodeId> values_;
  // Values (by name) whose kiln dtype holds a narrow ONNX type's values.
  std::map<std::string, const NarrowType*> narrow_;
  std::map<std::string, Dequantized> dequantized_;
  std::map<std::string, ir::TensorData> initializers_;
  std::map<std::string, ir::NodeId> weight_params_;
  std::vector<ir::NodeId> input_params_;
  // Where external tensors come from (the constructor's, or SourceFor(options_) made by Run); its
  // files stay mapped as long as the importer (a local of ImportBytes).
  std::unique_ptr<ExternalDataSource> external_;
};

/// "node 'conv1' (Conv)" or "node #3 (Conv)" for an unnamed node.
std::string Describe(const ::onnx::NodeProto& node, int index = -1);

// Attribute readers (default when absent; errors when present with the wrong type).
int64_t AttrInt(const ::onnx::NodeProto& node, const std::string& name, int64_t def);
float AttrFloat(const ::onnx::NodeProto& node, const std::string& name, float def);
std::string AttrString(const ::onnx::NodeProto& node, const std::string& name,
                       const std::string& def);
std::optional<std::vector<int64_t>> AttrInts(const ::onnx::NodeProto& node,
                                             const std::string& name);
const ::onnx::AttributeProto* FindAttr(const ::onnx::NodeProto& node, const std::string& name);

}  // namespace kiln::onnx::internal
