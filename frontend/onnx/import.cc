// ONNX import, model level: protobuf parsing, tensors, inputs and initializers, the node loop,
// import-time folding of constant (shape) subgraphs and the final pruning. The operator lowerings
// are in import_ops.cc.
#include "frontend/onnx/import.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <span>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/onnx/import_internal.h"
#include "frontend/onnx/narrow_types.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"

namespace kiln::onnx {
namespace internal {
namespace {

// Results of constant subgraphs up to this many elements are computed during import.
constexpr int64_t kFoldLimit = int64_t{1} << 16;
// Fill/iota leaves up to this many elements are materialized when an import-time value is needed.
constexpr int64_t kKnownLimit = int64_t{1} << 22;
// Tensors and shapes above this many elements are rejected (the IR's own limit).
constexpr int64_t kMaxElements = int64_t{1} << 31;

absl::Status Invalid(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

// Operators that move narrow values (narrow_types.h) without computing on them: their output 0
// holds input 0's narrow type.
const std::set<std::string> kNarrowMovers = {"Identity", "Reshape",   "Flatten",
                                             "Squeeze",  "Unsqueeze", "Transpose"};
// Operators that read narrow values as numbers (those that produce them are among them).
const std::set<std::string> kNarrowReaders = {
    "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Shape", "Size"};

}  // namespace

std::string Describe(const ::onnx::NodeProto& node, int index) {
  if (!node.name().empty()) return absl::StrCat("node '", node.name(), "' (", node.op_type(), ")");
  if (index >= 0) return absl::StrCat("node #", index, " (", node.op_type(), ")");
  return absl::StrCat("node (", node.op_type(), ")");
}

absl::StatusOr<ir::DType> DTypeFromOnnx(int32_t elem_type, const std::string& what) {
  using T = ::onnx::TensorProto;
  switch (elem_type) {
    case T::FLOAT:
      return ir::DType::kF32;
    case T::DOUBLE:
      return ir::DType::kF64;
    case T::FLOAT16:
      return ir::DType::kF16;
    case T::BFLOAT16:
      return ir::DType::kBF16;
    case T::INT32:
      return ir::DType::kI32;
    case T::INT64:
      return ir::DType::kI64;
    case T::UINT8:
      return ir::DType::kU8;
    case T::BOOL:
      return ir::DType::kBool;
    case T::INT8:
      return ir::DType::kI8;
    case T::INT16:
      return ir::DType::kI16;
    case T::UINT16:
      return ir::DType::kU16;
    case T::UINT32:
      return ir::DType::kU32;
    case T::UINT64:
      return ir::DType::kU64;
    default:
      break;
  }
  std::string name = T::DataType_IsValid(elem_type)
                         ? T::DataType_Name(static_cast<T::DataType>(elem_type))
                         : absl::StrCat("#", elem_type);
  return absl::UnimplementedError(absl::StrCat(
      what, ": element type ", name,
      " is not supported (kiln has float, double, float16, bfloat16, int8, int16, int32, int64, "
      "uint8, uint16, uint32, uint64, bool)"));
}

absl::StatusOr<ir::DType> HeldDTypeFromOnnx(int32_t elem_type, const std::string& what) {
  if (const NarrowType* narrow = FindNarrowType(elem_type)) return narrow->held;
  return DTypeFromOnnx(elem_type, what);
}

namespace {

// A narrow type's packed bytes: raw_data, external data, or one byte per int32_data entry.
absl::StatusOr<ir::TensorData> NarrowFromProto(const NarrowType& type,
                                               const ::onnx::TensorProto& proto,
                                               const ir::Shape& shape, int64_t count,
                                               const std::string& what,
                                               ExternalDataSource* external) {
  const int64_t size = NarrowByteSize(type, count);
  const std::string elements = absl::StrCat(count, " elements of ", type.name, " (packed)");
  std::span<const uint8_t> bytes;
  std::vector<uint8_t> from_int32;
  if (proto.data_location() == ::onnx::TensorProto::EXTERNAL) {
    absl::StatusOr<std::span<const std::byte>> ext =
        ExternalTensorBytes(proto, size, elements, what, external);
    if (!ext.ok()) return ext.status();
    bytes = {reinterpret_cast<const uint8_t*>(ext->data()), ext->size()};
  } else if (proto.has_raw_data()) {
    bytes = {reinterpret_cast<const uint8_t*>(proto.raw_data().data()), proto.raw_data().size()};
  } else {
    if (proto.int32_data_size() != size) {
      return Invalid(what, absl::StrCat("int32_data has ", proto.int32_data_size(),
                                        " entries, but ", elements, " need ", size));
    }
    for (int32_t v : proto.int32_data()) from_int32.push_back(static_cast<uint8_t>(v));
    bytes = from_int32;
  }
  return DecodeNarrow(type, shape, count, bytes, what);
}

// Raw little-endian bytes (raw_data, or an external file's) → a tensor; `source` names them.
absl::StatusOr<ir::TensorData> FromRawBytes(ir::DType dtype, const ir::Shape& shape, int64_t count,
                                            std::span<const std::byte> raw, const char* source,
                                            const std::string& what) {
  const int64_t size = ir::DTypeSize(dtype);
  if (static_cast<int64_t>(raw.size()) != count * size) {
    return Invalid(what,
                   absl::StrCat(source, " has ", raw.size(), " bytes, but ", count, " elements of ",
                                ir::DTypeName(dtype), " need ", count * size));
  }
  ir::TensorData t(dtype, shape);
  if (count > 0) std::memcpy(t.data(), raw.data(), raw.size());
  if (dtype == ir::DType::kBool) {  // one byte 0 or 1, as the IR requires
    auto* p = reinterpret_cast<uint8_t*>(t.data());
    for (int64_t i = 0; i < count; ++i) p[i] = p[i] != 0;
  }
  return t;
}

// Whether any of the typed data fields holds values.
bool HasTypedData(const ::onnx::TensorProto& p) {
  return p.float_data_size() > 0 || p.int32_data_size() > 0 || p.string_data_size() > 0 ||
         p.int64_data_size() > 0 || p.double_data_size() > 0 || p.uint64_data_size() > 0;
}

}  // namespace

absl::StatusOr<ir::TensorData> TensorFromProto(const ::onnx::TensorProto& proto,
                                               const std::string& what,
                                               ExternalDataSource* external) {
  const bool is_external = proto.data_location() == ::onnx::TensorProto::EXTERNAL;
  if (!is_external && proto.external_data_size() > 0) {
    return Invalid(what, "has external_data entries, but data_location is not EXTERNAL");
  }
  if (is_external && (proto.has_raw_data() || HasTypedData(proto))) {
    return Invalid(what, "is stored as external data, but also holds data in the model");
  }
  if (proto.has_segment()) return Invalid(what, "segmented tensors are not supported");
  const NarrowType* narrow = FindNarrowType(proto.data_type());
  absl::StatusOr<ir::DType> dtype = HeldDTypeFromOnnx(proto.data_type(), what);
  if (!dtype.ok()) return dtype.status();
  ir::Shape shape;
  int64_t count = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0 || d > kMaxElements) {
      return Invalid(what, absl::StrCat("bad dimension ", d, " in dims [",
                                        absl::StrJoin(proto.dims(), ","), "]"));
    }
    shape.push_back(d);
    if (d != 0 && count > kMaxElements / d) {
      return Invalid(
          what, absl::StrCat("too many elements in dims [", absl::StrJoin(proto.dims(), ","), "]"));
    }
    count *= d;
  }
  if (narrow != nullptr) return NarrowFromProto(*narrow, proto, shape, count, what, external);
  if (is_external) {
    // count <= 2^31 and sizes <= 8: no overflow.
    absl::StatusOr<std::span<const std::byte>> bytes = ExternalTensorBytes(
        proto, count * ir::DTypeSize(*dtype),
        absl::StrCat(count, " elements of ", ir::DTypeName(*dtype)), what, external);
    if (!bytes.ok()) return bytes.status();
    return FromRawBytes(*dtype, shape, count, *bytes, "external data", what);
  }
  if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    return FromRawBytes(*dtype, shape, count,
                        {reinterpret_cast<const std::byte*>(raw.data()), raw.size()}, "raw_data",
                        what);
  }
  auto check = [&](int n, const char* field) -> absl::Status {
    if (n != count) {
      return Invalid(what, absl::StrCat(field, " has ", n, " values, but dims [",
                                        absl::StrJoin(proto.dims(), ","), "] need ", count));
    }
    return absl::OkStatus();
  };
  // Check the element count before allocating: dims are untrusted.
  int n = 0;
  const char* field = "int32_data";
  switch (*dtype) {
    case ir::DType::kF32:
      n = proto.float_data_size(), field = "float_data";
      break;
    case ir::DType::kF64:
      n = proto.double_data_size(), field = "double_data";
      break;
    case ir::DType::kI64:
      n = proto.int64_data_size(), field = "int64_data";
      break;
    case ir::DType::kU32:
    case ir::DType::kU64:
      n = proto.uint64_data_size(), field = "uint64_data";
      break;
    default:
      n = proto.int32_data_size();
      break;
  }
  if (absl::Status s = check(n, field); !s.ok()) return s;
  ir::TensorData t(*dtype, shape);
  if (count == 0) return t;  // (an empty repeated field's data() may be null)
  switch (*dtype) {
    case ir::DType::kF32: {
      if (auto s = check(proto.float_data_size(), "float_data"); !s.ok()) return s;
      std::memcpy(t.data(), proto.float_data().data(), static_cast<size_t>(count) * 4);
      break;
    }
    case ir::DType::kF64: {
      if (auto s = check(proto.double_data_size(), "double_data"); !s.ok()) return s;
      std::memcpy(t.data(), proto.double_data().data(), static_cast<size_t>(count) * 8);
      break;
    }
    case ir::DType::kI64: {
      if (auto s = check(proto.int64_data_size(), "int64_data"); !s.ok()) return s;
      std::memcpy(t.data(), proto.int64_data().data(), static_cast<size_t>(count) * 8);
      break;
    }
    case ir::DType::kI32: {
      if (auto s = check(proto.int32_data_size(), "int32_data"); !s.ok()) return s;
      std::memcpy(t.data(), proto.int32_data().data(), static_cast<size_t>(count) * 4);
      break;
    }
    case ir::DType::kF16:
    case ir::DType::kBF16: {  // bit patterns in the low 16 bits of int32_data
      if (auto s = check(proto.int32_data_size(), "int32_data"); !s.ok()) return s;
      auto* p = reinterpret_cast<uint16_t*>(t.data());
      for (int64_t i = 0; i < count; ++i) p[i] = static_cast<uint16_t>(proto.int32_data(i));
      break;
    }
    case ir::DType::kU8:
    case ir::DType::kBool: {
      if (auto s = check(proto.int32_data_size(), "int32_data"); !s.ok()) return s;
      auto* p = reinterpret_cast<uint8_t*>(t.data());
      for (int64_t i = 0; i < count; ++i) {
        int32_t v = proto.int32_data(i);
        p[i] = *dtype == ir::DType::kBool ? (v != 0) : static_cast<uint8_t>(v);
      }
      break;
    }
    case ir::DType::kI8:
    case ir::DType::kI16:
    case ir::DType::kU16: {  // one value per int32_data entry (the spec's packing for them)
      if (auto s = check(proto.int32_data_size(), "int32_data"); !s.ok()) return s;
      for (int64_t i = 0; i < count; ++i) t.SetInt64(i, proto.int32_data(static_cast<int>(i)));
      break;
    }
    case ir::DType::kU32:
    case ir::DType::kU64: {
      if (auto s = check(proto.uint64_data_size(), "uint64_data"); !s.ok()) return s;
      for (int64_t i = 0; i < count; ++i) {
        t.SetInt64(i, static_cast<int64_t>(proto.uint64_data(static_cast<int>(i))));
      }
      break;
    }
  }
  return t;
}

const ::onnx::AttributeProto* FindAttr(const ::onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t AttrInt(const ::onnx::NodeProto& node, const std::string& name, int64_t def) {
  const auto* a = FindAttr(node, name);
  return a ? a->i() : def;
}

float AttrFloat(const ::onnx::NodeProto& node, const std::string& name, float def) {
  const auto* a = FindAttr(node, name);
  return a ? a->f() : def;
}

std::string AttrString(const ::onnx::NodeProto& node, const std::string& name,
                       const std::string& def) {
  const auto* a = FindAttr(node, name);
  return a ? a->s() : def;
}

std::optional<std::vector<int64_t>> AttrInts(const ::onnx::NodeProto& node,
                                             const std::string& name) {
  const auto* a = FindAttr(node, name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

// ---- Importer: values --------------------------------------------------------------------------

int Importer::NumInputs(const ::onnx::NodeProto& node) {
  int n = node.input_size();
  while (n > 0 && node.input(n - 1).empty()) --n;
  return n;
}

absl::StatusOr<ir::NodeId> Importer::ValueNode(const std::string& name) {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  auto init = initializers_.find(name);
  if (init == initializers_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not defined"));
  }
  // Float initializers are the model's weights; integer/bool ones are shape data and indices.
  ir::NodeId id;
  // (Narrow floats are quantized data: constants, like the integers that they resemble.)
  if (options_.weights_as_parameters && ir::IsFloat(init->second.dtype()) && !narrow_.count(name)) {
    id = b_.Parameter(name, {init->second.dtype(), init->second.shape()});
    weight_params_[name] = id;
  } else {
    id = b_.Constant(init->second);
  }
  values_[name] = id;
  return id;
}

absl::StatusOr<ir::NodeId> Importer::Input(const ::onnx::NodeProto& node, int i) {
  if (!HasInput(node, i)) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
  }
  absl::StatusOr<ir::NodeId> id = ValueNode(node.input(i));
  if (!id.ok())
    return absl::InvalidArgumentError(absl::StrCat("input ", i, ": ", id.status().message()));
  return id;
}

std::optional<ir::TensorData> Importer::KnownValue(ir::NodeId id) {
  if (id < 0 || id >= b_.graph().num_nodes()) return std::nullopt;
  const ir::Node& n = b_.graph().node(id);
  if (n.op == ir::Op::kConstant) return *n.attrs.literal;
  if ((n.op == ir::Op::kFill || n.op == ir::Op::kIota) && n.type.num_elements() <= kKnownLimit) {
    ir::Graph g;
    ir::Node copy = n;
    g.AddOutput(g.AddNode(copy));
    auto out = ir::Interpret(g, {});
    if (out.ok()) return std::move((*out)[0]);
  }
  return std::nullopt;
}

absl::StatusOr<ir::TensorData> Importer::ConstInput(const ::onnx::NodeProto& node, int i,
                                                    const std::string& why) {
  if (!HasInput(node, i)) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
  }
  const std::string& name = node.input(i);
  if (values_.find(name) == values_.end()) {
    if (auto it = initializers_.find(name); it != initializers_.end()) return it->second;
  }
  absl::StatusOr<ir::NodeId> id = Input(node, i);
  if (!id.ok()) return id.status();
  if (std::optional<ir::TensorData> v = KnownValue(*id)) return *std::move(v);
  return NotKnownAtImport(node, i, *id, why);
}

absl::Status Importer::NotKnownAtImport(const ::onnx::NodeProto& node, int i, ir::NodeId id,
                                        const std::string& why) const {
  // The parameters the value is computed from: the model inputs (and weights) to name, so that
  // a user (or a test harness that freezes inputs) knows which values would have to be fixed.
  const ir::Graph& g = b_.graph();
  std::vector<bool> seen(static_cast<size_t>(g.num_nodes()), false);
  std::vector<ir::NodeId> stack = {id};
  std::set<ir::NodeId> params;
  while (!stack.empty()) {
    const ir::NodeId at = stack.back();
    stack.pop_back();
    if (at < 0 || at >= g.num_nodes() || seen[static_cast<size_t>(at)]) continue;
    seen[static_cast<size_t>(at)] = true;
    const ir::Node& n = g.node(at);
    if (n.op == ir::Op::kParameter) params.insert(at);
    stack.insert(stack.end(), n.inputs.begin(), n.inputs.end());
  }
  auto quoted = [&](bool inputs) {
    std::vector<std::string> names;
    for (ir::NodeId p : params) {
      const bool is_input =
          std::find(input_params_.begin(), input_params_.end(), p) != input_params_.end();
      if (is_input == inputs) names.push_back(absl::StrCat("'", g.node(p).attrs.name, "'"));
    }
    return names;
  };
  const std::vector<std::string> inputs = quoted(true), weights = quoted(false);
  std::string from;
  if (!inputs.empty()) {
    absl::StrAppend(&from, "depends on the model input", inputs.size() > 1 ? "s " : " ",
                    absl::StrJoin(inputs, ", "));
  }
  if (!weights.empty()) {
    absl::StrAppend(&from, from.empty() ? "depends on " : " and ", "the weight",
                    weights.size() > 1 ? "s " : " ", absl::StrJoin(weights, ", "),
                    " (graph parameters under ImportOptions::weights_as_parameters)");
  }
  if (from.empty()) {
    from = absl::StrCat("is not folded at import time (folding skips results over ", kFoldLimit,
                        " elements and large broadcasts and contractions)");
  }
  return absl::UnimplementedError(
      absl::StrCat("input ", i, " ('", node.input(i),
                   "') must be known at import time (kiln compiles static shapes), but it ", from,
                   why.empty() ? "" : "; ", why));
}

absl::StatusOr<std::vector<int64_t>> Importer::ConstInts(const ::onnx::NodeProto& node, int i) {
  absl::StatusOr<ir::TensorData> t = ConstInput(node, i);
  if (!t.ok()) return t.status();
  if (!ir::IsInteger(t->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " ('", node.input(i),
                                                   "') must be an integer tensor, not ",
                                                   ir::DTypeName(t->dtype())));
  }
  return t->ToInt64s();
}

void Importer::SetOutput(const ::onnx::NodeProto& node, int i, ir::NodeId id) {
  if (HasOutput(node, i)) values_[node.output(i)] = id;
}

absl::Status Importer::CheckNarrowInputs(const ::onnx::NodeProto& node) const {
  if (kNarrowMovers.count(node.op_type()) || kNarrowReaders.count(node.op_type())) {
    return absl::OkStatus();
  }
  for (int i = 0; i < node.input_size(); ++i) {
    if (const NarrowType* narrow = InputNarrowType(node, i)) {
      return absl::UnimplementedError(absl::StrCat(
          "input ", i, " ('", node.input(i), "') is ", narrow->name, ", which kiln holds as ",
          ir::DTypeName(narrow->held),
          " and reads only into Cast, CastLike, QuantizeLinear, DequantizeLinear, Shape and "
          "Size, or moves with Identity, Reshape, Flatten, Squeeze, Unsqueeze and Transpose"));
    }
  }
  return absl::OkStatus();
}

const NarrowType* Importer::InputNarrowType(const ::onnx::NodeProto& node, int i) const {
  if (!HasInput(node, i)) return nullptr;
  auto it = narrow_.find(node.input(i));
  return it == narrow_.end() ? nullptr : it->second;
}

void Importer::SetOutputNarrowType(const ::onnx::NodeProto& node, int i, const NarrowType* type) {
  if (!HasOutput(node, i)) return;
  if (type == nullptr) {
    narrow_.erase(node.output(i));
  } else {
    narrow_[node.output(i)] = type;
  }
}

// ---- Importer: folding and broadcasting
// ----------------------------------------------------------

ir::NodeId Importer::Fold(ir::NodeId id) {
  if (id == ir::kInvalidNode || !b_.status().ok()) return id;
  const ir::Node& n = b_.graph().node(id);
  if (ir::GetOpClass(n.op) == ir::OpClass::kLeaf || n.type.num_elements() > kFoldLimit) return id;
  // A broadcast stays a broadcast unless it is shape-sized: backends fuse it into its user (e.g. a
  // bias add into the GEMM's epilogue), which a materialized constant would prevent.
  if (n.op == ir::Op::kBroadcast && n.type.num_elements() > 64) return id;
  ir::Graph g;
  std::vector<ir::NodeId> operands;
  for (ir::NodeId in : n.inputs) {
    const ir::Node& operand = b_.graph().node(in);
    bool known = operand.op == ir::Op::kConstant || operand.op == ir::Op::kFill ||
                 operand.op == ir::Op::kIota;
    if (!known || operand.type.num_elements() > kFoldLimit) return id;
    // Contractions and windows cost up to operand × result elements: fold only small ones.
    const ir::OpClass cls = ir::GetOpClass(n.op);
    if ((cls == ir::OpClass::kContraction || cls == ir::OpClass::kWindow) &&
        operand.type.num_elements() > 4096) {
      return id;
    }
    operands.push_back(g.AddNode(operand));
  }
  ir::Node copy = n;
  copy.inputs = operands;
  g.AddOutput(g.AddNode(std::move(copy)));
  auto out = ir::Interpret(g, {});
  if (!out.ok()) return id;  // e.g. an out-of-range index: left for run time to report
  return b_.Constant(std::move((*out)[0]));
}

ir::NodeId Importer::Reduce(ir::Op op, ir::NodeId x, std::vector<int64_t> axes) {
  // ONNX (18 on) defines the max and min of an empty set as -inf and +inf (an integer type's
  // lowest and highest values), which the IR's reductions, having no identity for them, refuse.
  // (int64's are not doubles: the IR's refusal stands there.)
  const bool extremum = op == ir::Op::kReduceMax || op == ir::Op::kReduceMin;
  const ir::DType t = dtype(x);
  if (extremum && (ir::IsFloat(t) || t == ir::DType::kU8 || t == ir::DType::kI32)) {
    ir::Shape out = shape(x);
    bool empty = false;
    for (int64_t a : axes) {
      if (a < 0 || a >= static_cast<int64_t>(out.size())) continue;  // the builder reports it
      empty = empty || out[static_cast<size_t>(a)] == 0;
      out[static_cast<size_t>(a)] = 1;
    }
    if (empty) {
      double lowest = -std::numeric_limits<double>::infinity(), highest = -lowest;
      if (t == ir::DType::kU8) lowest = 0, highest = 255;
      if (t == ir::DType::kI32) {
        lowest = std::numeric_limits<int32_t>::min(), highest = std::numeric_limits<int32_t>::max();
      }
      return Full(op == ir::Op::kReduceMax ? lowest : highest, t, std::move(out));
    }
  }
  return Fold(b_.Reduce(op, x, std::move(axes)));
}

ir::NodeId Importer::Permute(ir::NodeId x, std::vector<int64_t> perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  return identity ? x : Fold(b_.Permute(x, std::move(perm)));
}

ir::NodeId Importer::Slice(ir::NodeId x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                           std::vector<int64_t> strides) {
  bool whole = true;
  const ir::Shape s = shape(x);
  for (size_t i = 0; i < starts.size() && i < s.size(); ++i) {
    whole = whole && starts[i] == 0 && limits[i] == s[i] && (strides.empty() || strides[i] == 1);
  }
  return whole ? x : Fold(b_.Slice(x, std::move(starts), std::move(limits), std::move(strides)));
}

absl::StatusOr<ir::Shape> Importer::BroadcastShape(const ir::Shape& a, const ir::Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  ir::Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ir::ShapeToString(a), " and ",
                                                     ir::ShapeToString(b), " do not broadcast"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<ir::NodeId> Importer::BroadcastTo(ir::NodeId x, ir::Shape target) {
  const ir::Shape s = shape(x);
  if (s == target) return x;
  if (s.size() > target.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot broadcast ", ir::ShapeToString(s), " to ", ir::ShapeToString(target)));
  }
  ir::Shape padded(target.size() - s.size(), 1);
  padded.insert(padded.end(), s.begin(), s.end());
  for (size_t i = 0; i < target.size(); ++i) {
    if (padded[i] != 1 && padded[i] != target[i]) {
      return absl::InvalidArgumentError(absl::StrCat("cannot broadcast ", ir::ShapeToString(s),
                                                     " to ", ir::ShapeToString(target)));
    }
  }
  return Broadcast(Reshape(x, padded), target);
}

absl::StatusOr<std::vector<ir::NodeId>> Importer::Broadcasted(std::vector<ir::NodeId> xs,
                                                              bool same_dtype) {
  ir::Shape target;
  for (ir::NodeId x : xs) {
    if (same_dtype && dtype(x) != dtype(xs[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat("operand types differ: ", ir::TypeToString(type(xs[0])), " and ",
                       ir::TypeToString(type(x))));
    }
    absl::StatusOr<ir::Shape> s = BroadcastShape(target, shape(x));
    if (!s.ok()) return s.status();
    target = *s;
  }
  for (ir::NodeId& x : xs) {
    absl::StatusOr<ir::NodeId> y = BroadcastTo(x, target);
    if (!y.ok()) return y.status();
    x = *y;
  }
  return xs;
}

// ---- Importer: the model ---------------------------------------------------------------------

namespace {
// What a value of this type is, for errors about values that are not tensors.
std::string TypeKindName(const ::onnx::TypeProto& type) {
  switch (type.value_case()) {
    case ::onnx::TypeProto::kTensorType:
      return "a tensor";
    case ::onnx::TypeProto::kSequenceType:
      return "a sequence";
    case ::onnx::TypeProto::kOptionalType:
      return "an optional";
    case ::onnx::TypeProto::kMapType:
      return "a map";
    case ::onnx::TypeProto::kSparseTensorType:
      return "a sparse tensor";
    default:
      return "untyped";
  }
}
}  // namespace

absl::Status Importer::DefineInputs(const ::onnx::GraphProto& graph) {
  for (const auto& [name, shape] : options_.input_shapes) {
    bool found = false;
    for (const auto& vi : graph.input())
      found = found || (vi.name() == name && !initializers_.count(name));
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("ImportOptions::input_shapes names '", name,
                                                     "', which is not a model input"));
    }
  }
  std::set<std::string> names;
  for (const auto& vi : graph.input()) {
    if (initializers_.count(vi.name())) continue;  // IR < 4: initializers listed as inputs
    const std::string what = absl::StrCat("input '", vi.name(), "'");
    if (vi.name().empty()) return Invalid("graph input", "has no name");
    if (!names.insert(vi.name()).second) return Invalid(what, "is declared twice");
    if (!vi.type().has_tensor_type()) {
      return Invalid(what, absl::StrCat("is ", TypeKindName(vi.type()),
                                        ", not a tensor (kiln imports tensor inputs only)"));
    }
    const auto& tt = vi.type().tensor_type();
    absl::StatusOr<ir::DType> dtype = HeldDTypeFromOnnx(tt.elem_type(), what);
    if (!dtype.ok()) return dtype.status();
    if (const NarrowType* narrow = FindNarrowType(tt.elem_type())) narrow_[vi.name()] = narrow;
    auto given = options_.input_shapes.find(vi.name());
    ir::Shape shape;
    if (!tt.has_shape()) {
      if (given == options_.input_shapes.end()) {
        return Invalid(what, "has no shape in the model; give one in ImportOptions::input_shapes");
      }
      shape = given->second;
    } else {
      const auto& dims = tt.shape().dim();
      if (given != options_.input_shapes.end() &&
          static_cast<int>(given->second.size()) != dims.size()) {
        return Invalid(
            what, absl::StrCat("the given shape ", ir::ShapeToString(given->second), " has rank ",
                               given->second.size(), ", the model's ", dims.size()));
      }
      for (int i = 0; i < dims.size(); ++i) {
        const auto& d = dims[i];
        if (given != options_.input_shapes.end()) {
          int64_t g = given->second[static_cast<size_t>(i)];
          if (d.has_dim_value() && d.dim_value() != g) {
            return Invalid(what, absl::StrCat("the given shape ", ir::ShapeToString(given->second),
                                              " differs from the model's fixed dimension ", i, " (",
                                              d.dim_value(), ")"));
          }
          shape.push_back(g);
        } else if (d.has_dim_value() && d.dim_value() >= 0) {
          shape.push_back(d.dim_value());
        } else {
          return Invalid(what, absl::StrCat("dimension ", i, " is dynamic (",
                                            d.has_dim_param() ? "'" + d.dim_param() + "'" : "unset",
                                            "); kiln compiles static shapes: give the shape in "
                                            "ImportOptions::input_shapes (CLI: --input-shape)"));
        }
      }
    }
    int64_t count = 1;
    for (int64_t d : shape) {
      if (d < 0 || d > kMaxElements || (d != 0 && count > kMaxElements / d)) {
        return Invalid(what, absl::StrCat("bad shape ", ir::ShapeToString(shape)));
      }
      count *= d;
    }
    ir::NodeId id = b_.Parameter(vi.name(), {*dtype, shape});
    values_[vi.name()] = id;
    input_params_.push_back(id);
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Graph> Importer::Prune(ir::Graph graph, const std::vector<ir::NodeId>& keep) {
  std::vector<bool> live(static_cast<size_t>(graph.num_nodes()), false);
  for (const auto& o : graph.outputs()) live[static_cast<size_t>(o.node)] = true;
  for (ir::NodeId id = graph.num_nodes() - 1; id >= 0; --id) {
    if (!live[static_cast<size_t>(id)]) continue;
    for (ir::NodeId in : graph.node(id).inputs) live[static_cast<size_t>(in)] = true;
  }
  for (ir::NodeId id : keep) live[static_cast<size_t>(id)] = true;
  ir::Graph out;
  std::vector<ir::NodeId> map(static_cast<size_t>(graph.num_nodes()), ir::kInvalidNode);
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    if (!live[static_cast<size_t>(id)]) continue;
    ir::Node n = graph.node(id);
    for (ir::NodeId& in : n.inputs) in = map[static_cast<size_t>(in)];
    map[static_cast<size_t>(id)] = out.AddNode(std::move(n));
  }
  for (const auto& o : graph.outputs()) out.AddOutput(map[static_cast<size_t>(o.node)], o.name);
  if (absl::Status s = ir::Verify(out); !s.ok()) return s;
  return out;
}

absl::StatusOr<ImportedModel> Importer::Run(const ::onnx::ModelProto& model) {
  const ::onnx::GraphProto& graph = model.graph();

  // Operators the model's opset does not have yet (or no longer has), in one message: such a
  // model is invalid whatever kiln supports.
  std::vector<std::string> misversioned;
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& node = graph.node(i);
    if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
    if (std::string why = OpsetMismatch(node.op_type(), opset_); !why.empty()) {
      misversioned.push_back(absl::StrCat(Describe(node, i), ": ", why));
    }
  }
  if (!misversioned.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(misversioned, "; "));
  }

  // Every unsupported operator next, in one message.
  std::map<std::string, std::vector<std::string>> unsupported;
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& node = graph.node(i);
    const std::string& domain = node.domain();
    bool ok = (domain.empty() || domain == "ai.onnx") && Lowerings().count(node.op_type());
    if (!ok) {
      std::string op =
          domain.empty() || domain == "ai.onnx" ? node.op_type() : domain + "::" + node.op_type();
      unsupported[op].push_back(node.name().empty() ? absl::StrCat("#", i) : node.name());
    }
  }
  if (!unsupported.empty()) {
    // Operators whose output shape depends on the values of their inputs: no static shape.
    static const std::set<std::string> kDataDependent = {"NonZero", "NonMaxSuppression", "Unique"};
    std::vector<std::string> parts;
    for (const auto& [op, nodes] : unsupported) {
      parts.push_back(absl::StrCat(op, " (", nodes.size() == 1 ? "node " : "nodes ",
                                   absl::StrJoin(nodes, ", "), ")"));
      if (kDataDependent.count(op)) {
        absl::StrAppend(&parts.back(),
                        ": its output shape depends on the input data, and kiln compiles static "
                        "shapes");
      }
    }
    return absl::UnimplementedError(
        absl::StrCat("unsupported ONNX operators: ", absl::StrJoin(parts, "; "),
                     " (docs/onnx.md lists the supported ones)"));
  }
  // Then every supported operator whose version in the model's opset is not the definition that
  // its lowering implements (opsets kMinOpset to kMaxOpset), in one message.
  std::vector<std::string> outside;
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& node = graph.node(i);
    if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
    if (std::string why = VersionOutsideKiln(node, opset_); !why.empty()) {
      outside.push_back(absl::StrCat(Describe(node, i), ": ", why));
    }
  }
  if (!outside.empty()) return absl::UnimplementedError(absl::StrJoin(outside, "; "));

  if (graph.sparse_initializer_size() > 0) {
    return absl::UnimplementedError("sparse initializers are not supported");
  }

  if (!external_) external_ = SourceFor(options_);
  // The lowerings read attribute tensors (Constant's value) without the importer at hand: a model
  // with external ones is imported from a copy that holds them inline. (Its initializers, when
  // external too, are metadata only, so the copy is small.)
  if (HasExternalAttributeTensors(graph)) {
    ::onnx::ModelProto inlined = model;
    absl::Status s = InlineExternalAttributeTensors(*inlined.mutable_graph(), external_.get());
    if (!s.ok()) return s;
    return Run(inlined);
  }
  for (const auto& init : graph.initializer()) {
    const std::string what = absl::StrCat("initializer '", init.name(), "'");
    if (init.name().empty()) return Invalid("initializer", "has no name");
    absl::StatusOr<ir::TensorData> t = TensorFromProto(init, what, external_.get());
    if (!t.ok()) return t.status();
    if (!initializers_.emplace(init.name(), *std::move(t)).second) {
      return Invalid(what, "is defined twice");
    }
    if (const NarrowType* narrow = FindNarrowType(init.data_type())) narrow_[init.name()] = narrow;
  }
  if (absl::Status s = DefineInputs(graph); !s.ok()) return s;

  const auto& table = Lowerings();
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& node = graph.node(i);
    absl::Status s = CheckNarrowInputs(node);
    try {
      if (s.ok()) s = table.at(node.op_type())(*this, node);
    } catch (const BuilderFailed&) {
      s = b_.status().ok() ? absl::InternalError("a node was not built") : b_.status();
    }
    if (s.ok() && !b_.status().ok()) s = b_.status();
    if (s.ok()) {
      for (int o = 0; o < node.output_size(); ++o) {
        auto it = node.output(o).empty() ? values_.end() : values_.find(node.output(o));
        if (it != values_.end() && (it->second < 0 || it->second >= b_.graph().num_nodes())) {
          s = absl::InternalError(absl::StrCat("output ", o, " was not built"));
          break;
        }
        if (!node.output(o).empty() && !values_.count(node.output(o))) {
          s = absl::UnimplementedError(
              absl::StrCat("output ", o, " ('", node.output(o), "') is not supported"));
          break;
        }
      }
    }
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(Describe(node, i), ": ", s.message()));
    }
    if (kNarrowMovers.count(node.op_type())) SetOutputNarrowType(node, 0, InputNarrowType(node, 0));
  }

  ImportedModel result;
  std::set<std::string> output_names;
  for (const auto& vi : graph.output()) {
    const std::string what = absl::StrCat("output '", vi.name(), "'");
    if (!output_names.insert(vi.name()).second) return Invalid(what, "is declared twice");
    absl::StatusOr<ir::NodeId> id = ValueNode(vi.name());
    if (!id.ok()) return Invalid(what, "no node computes it");
    // The model's declared type, when it has one, must be what the import computed.
    if (vi.type().has_tensor_type()) {
      const auto& tt = vi.type().tensor_type();
      if (tt.elem_type() != 0) {
        absl::StatusOr<ir::DType> d = HeldDTypeFromOnnx(tt.elem_type(), what);
        const NarrowType* declared = FindNarrowType(tt.elem_type());
        auto computed = narrow_.find(vi.name());
        const NarrowType* held = computed == narrow_.end() ? nullptr : computed->second;
        if (d.ok() && (*d != dtype(*id) || declared != held)) {
          return Invalid(what, absl::StrCat("the model declares ",
                                            declared ? declared->name : ir::DTypeName(*d),
                                            ", the import computed ",
                                            held ? absl::StrCat(held->name, " (held as ") : "",
                                            ir::TypeToString(type(*id)), held ? ")" : ""));
        }
      }
      if (options_.input_shapes.empty() && tt.has_shape()) {
        const auto& dims = tt.shape().dim();
        bool match = dims.size() == rank(*id);
        for (int k = 0; match && k < dims.size(); ++k) {
          if (dims[k].has_dim_value() &&
              dims[k].dim_value() != shape(*id)[static_cast<size_t>(k)]) {
            match = false;
          }
        }
        if (!match) {
          std::vector<std::string> ds;
          for (const auto& d : dims)
            ds.push_back(d.has_dim_value() ? absl::StrCat(d.dim_value()) : "?");
          return Invalid(what,
                         absl::StrCat("the model declares shape [", absl::StrJoin(ds, ","),
                                      "], the import computed ", ir::TypeToString(type(*id))));
        }
      }
    }
    b_.Output(*id, vi.name());
    result.output_names.push_back(vi.name());
  }
  if (!b_.status().ok()) return b_.status();
  absl::StatusOr<ir::Graph> built = std::move(b_).Build();
  if (!built.ok()) return built.status();
  absl::StatusOr<ir::Graph> pruned = Prune(*std::move(built), input_params_);
  if (!pruned.ok()) return pruned.status();
  result.graph = *std::move(pruned);
  for (ir::NodeId id : result.graph.Parameters()) {
    const std::string& name = result.graph.node(id).attrs.name;
    if (weight_params_.count(name)) result.weights.emplace(name, initializers_.at(name));
  }
  for (const auto& vi : graph.input()) {
    if (!initializers_.count(vi.name())) result.input_names.push_back(vi.name());
  }
  result.opset_version = opset_;
  result.producer = absl::StrCat(model.producer_name(), model.producer_version().empty() ? "" : " ",
                                 model.producer_version());
  return result;
}

}  // namespace internal

absl::StatusOr<std::vector<ir::TensorData>> ImportedModel::Arguments(
    std::vector<ir::TensorData> inputs) const {
  if (inputs.size() != input_names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", input_names.size(), " inputs, ", inputs.size(), " given"));
  }
  std::vector<ir::TensorData> args;
  for (ir::NodeId id : graph.Parameters()) {
    const std::string& name = graph.node(id).attrs.name;
    auto pos = std::find(input_names.begin(), input_names.end(), name);
    if (pos != input_names.end()) {
      args.push_back(std::move(inputs[static_cast<size_t>(pos - input_names.begin())]));
    } else if (auto w = weights.find(name); w != weights.end()) {
      args.push_back(w->second);
    } else {
      return absl::InternalError(absl::StrCat("parameter '", name, "' has no value"));
    }
  }
  return args;
}

namespace {

absl::StatusOr<ImportedModel> ImportBytesFrom(
    std::string_view bytes, const ImportOptions& options,
    std::unique_ptr<internal::ExternalDataSource> source) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError("ONNX model larger than 2 GiB (protobuf's limit)");
  }
  ::onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an ONNX model: protobuf parsing failed (", bytes.size(), " bytes)"));
  }
  if (!model.has_graph()) return absl::InvalidArgumentError("the ONNX model has no graph");
  int64_t opset = -1;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (opset < 0) {
    return absl::InvalidArgumentError("the ONNX model imports no default-domain opset");
  }
  if (opset < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ONNX model imports opset ", opset, " (opsets start at 1)"));
  }
  if (opset > internal::NewestKnownOpset()) {
    return absl::UnimplementedError(absl::StrCat(
        "ONNX opset ", opset, " is newer than kiln's operator table (opsets 1 to ",
        internal::NewestKnownOpset(), ", from ", internal::OperatorTableSource(), ")"));
  }
  internal::Importer importer(options, opset, std::move(source));
  return importer.Run(model);
}

}  // namespace

absl::StatusOr<ImportedModel> ImportBytes(std::string_view bytes, const ImportOptions& options) {
  return ImportBytesFrom(bytes, options, nullptr);
}

std::vector<std::string> SupportedOperators() {
  std::vector<std::string> ops;
  // Lowerings() is a std::map: the names come out sorted.
  for (const auto& entry : internal::Lowerings()) ops.push_back(entry.first);
  return ops;
}

absl::StatusOr<ImportedModel> ImportFile(const std::string& path, const ImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  // External data locations are relative to the model file's folder (as written, not with the
  // model's own symlink resolved, like onnx.load). Where the model file is itself a symlink
  // (Bazel's runfiles, the Hugging Face cache's snapshots/ -> blobs/), the folder it really lies
  // in holds its data too, as onnxruntime allows.
  std::unique_ptr<internal::ExternalDataSource> source;
  if (options.external_data_dir.empty() && options.external_data_files.empty()) {
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    source = internal::DirectorySource(folder.empty() ? "." : folder.string(), path);
  }
  absl::StatusOr<ImportedModel> m = ImportBytesFrom(ss.str(), options, std::move(source));
  if (!m.ok())
    return absl::Status(m.status().code(), absl::StrCat(path, ": ", m.status().message()));
  return m;
}

absl::StatusOr<std::vector<std::string>> ModelInputNames(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  ::onnx::ModelProto model;
  if (!model.ParseFromIstream(&in)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not an ONNX model: protobuf parsing failed"));
  }
  // Inputs that are also initializers (IR version < 4 lists weights as inputs) are weights.
  std::set<std::string> initializers;
  for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
  std::vector<std::string> names;
  for (const auto& input : model.graph().input()) {
    if (!initializers.count(input.name())) names.push_back(input.name());
  }
  return names;
}

absl::StatusOr<ir::TensorData> ReadTensorProto(std::string_view bytes) {
  ::onnx::TensorProto proto;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not an ONNX TensorProto: protobuf parsing failed (", bytes.size(), " bytes)"));
  }
  return internal::TensorFromProto(proto, absl::StrCat("tensor '", proto.name(), "'"));
}

absl::StatusOr<ir::TensorData> ReadTensorProtoFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<ir::TensorData> t = ReadTensorProto(ss.str());
  if (!t.ok())
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

}  // namespace kiln::onnx
