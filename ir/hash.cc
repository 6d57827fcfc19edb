#include "ir/hash.h"

#include <xxhash.h>

#include <bit>
#include <cstring>
#include <string_view>

namespace kiln::ir {
namespace {

// Bump when the hashed encoding changes, so caches keyed by old hashes miss.
constexpr uint64_t kHashSeed = 0x6b696c6e00000001u;  // "kiln", version 1.
// Stands in for an operand that is not an earlier node (only in graphs that fail Verify).
constexpr uint64_t kDanglingOperand = 0x9e3779b97f4a7c15u;

// Serializes values unambiguously (every variable-length item is length-prefixed, every
// attribute tagged) and hashes the bytes.
class Encoder {
 public:
  void U64(uint64_t v) { Bytes(&v, sizeof(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Str(std::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  void List(uint64_t tag, const std::vector<int64_t>& values) {
    U64(tag);
    U64(values.size());
    for (int64_t v : values) I64(v);
  }
  void Bytes(const void* data, size_t size) {
    const size_t old = buffer_.size();
    buffer_.resize(old + size);
    if (size > 0) std::memcpy(buffer_.data() + old, data, size);
  }
  uint64_t Hash() const { return XXH3_64bits_withSeed(buffer_.data(), buffer_.size(), kHashSeed); }
  void Clear() { buffer_.clear(); }

 private:
  std::string buffer_;
};

void EncodeType(Encoder& e, const TensorType& type) {
  e.Str(DTypeName(type.dtype));
  e.List(0, type.shape);
}

void EncodeAttrs(Encoder& e, const Attrs& a) {
  e.U64(kAttrDType);
  e.Str(DTypeName(a.dtype));
  e.List(kAttrShape, a.shape);
  e.List(kAttrAxes, a.axes);
  e.List(kAttrStarts, a.starts);
  e.List(kAttrLimits, a.limits);
  e.List(kAttrStrides, a.strides);
  e.List(kAttrLow, a.low);
  e.List(kAttrHigh, a.high);
  e.List(kAttrDilation, a.dilation);
  e.List(kAttrInputDilation, a.input_dilation);
  e.List(kAttrWindow, a.window);
  e.U64(kAttrGroups);
  e.I64(a.groups);
  e.U64(kAttrValue);
  e.U64(std::bit_cast<uint64_t>(a.value));
  e.U64(kAttrSeed);
  e.U64(a.seed);
  e.U64(kAttrName);
  e.Str(a.name);
  // Only when set, so that the hashes of graphs without it stay what they were.
  if (a.accumulate.has_value()) {
    e.U64(kAttrAccumulate);
    e.Str(DTypeName(*a.accumulate));
  }
  e.U64(kAttrLiteral);
  if (a.literal) {
    e.U64(1);
    EncodeType(e, TensorType{a.literal->dtype(), a.literal->shape()});
    e.U64(static_cast<uint64_t>(a.literal->size_bytes()));
    e.Bytes(a.literal->data(), static_cast<size_t>(a.literal->size_bytes()));
  } else {
    e.U64(0);
  }
}

uint64_t HashNode(Encoder& e, const Node& node, const std::vector<uint64_t>& hashes, NodeId id) {
  e.Clear();
  // Op names rather than enum values, so reordering the op table keeps hashes stable.
  e.Str(OpName(node.op));
  EncodeType(e, node.type);
  EncodeAttrs(e, node.attrs);
  e.U64(node.inputs.size());
  for (NodeId input : node.inputs) {
    e.U64(input >= 0 && input < id ? hashes[static_cast<size_t>(input)] : kDanglingOperand);
  }
  return e.Hash();
}

}  // namespace

std::vector<uint64_t> NodeHashes(const Graph& graph) {
  std::vector<uint64_t> hashes(static_cast<size_t>(graph.num_nodes()));
  Encoder e;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    hashes[static_cast<size_t>(id)] = HashNode(e, graph.node(id), hashes, id);
  }
  return hashes;
}

uint64_t StructuralHash(const Graph& graph) {
  // Only what the outputs reach is hashed; the graph is topologically ordered, so one backward
  // sweep marks it.
  const int32_t n = graph.num_nodes();
  std::vector<char> reachable(static_cast<size_t>(n), 0);
  for (const Output& out : graph.outputs()) {
    if (out.node >= 0 && out.node < n) reachable[static_cast<size_t>(out.node)] = 1;
  }
  for (NodeId id = n - 1; id >= 0; --id) {
    if (!reachable[static_cast<size_t>(id)]) continue;
    for (NodeId input : graph.node(id).inputs) {
      if (input >= 0 && input < id) reachable[static_cast<size_t>(input)] = 1;
    }
  }
  std::vector<uint64_t> hashes(static_cast<size_t>(n), 0);
  Encoder e;
  for (NodeId id = 0; id < n; ++id) {
    if (reachable[static_cast<size_t>(id)]) {
      hashes[static_cast<size_t>(id)] = HashNode(e, graph.node(id), hashes, id);
    }
  }
  e.Clear();
  e.Str("graph");
  e.U64(graph.outputs().size());
  for (const Output& out : graph.outputs()) {
    e.U64(out.node >= 0 && out.node < n ? hashes[static_cast<size_t>(out.node)] : kDanglingOperand);
    e.Str(out.name);
  }
  return e.Hash();
}

uint64_t SignatureHash(const Graph& graph) {
  Encoder e;
  e.Str("signature");
  e.U64(StructuralHash(graph));
  const std::vector<NodeId> parameters = graph.Parameters();
  e.U64(parameters.size());
  for (NodeId id : parameters) {
    e.Str(graph.node(id).attrs.name);
    EncodeType(e, graph.node(id).type);
  }
  return e.Hash();
}

}  // namespace kiln::ir
