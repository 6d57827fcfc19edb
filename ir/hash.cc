#include "ir/hash.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <iterator>
#include <string_view>
#include <vector>

namespace kiln::ir {
namespace {

// Bump when the hashed encoding changes, so caches keyed by old hashes miss.
constexpr uint64_t kHashSeed = 0x6b696c6e00000002u;  // "kiln", version 2.
// Stands in for an operand that is not an earlier node (only in graphs that fail Verify).
constexpr uint64_t kDanglingOperand = 0x9e3779b97f4a7c15u;

// Serializes values unambiguously (every variable-length item is length-prefixed, every
// attribute tagged) and hashes the bytes. Attributes at their default value (empty lists, zero
// numbers) are left out: each present one is tagged, so what is absent is known. One Encoder's
// buffer is reused from node to node (this runs for every node of every realization).
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
    Bytes(values.data(), values.size() * sizeof(int64_t));
  }
  /// List, left out when empty.
  void OptionalList(uint64_t tag, const std::vector<int64_t>& values) {
    if (!values.empty()) List(tag, values);
  }
  // Always inlined: the fixed-size copies of U64 then become single stores (GCC kept this as a
  // call, about 10% of a cache-hit realization's instructions).
  [[gnu::always_inline]] void Bytes(const void* data, size_t size) {
    if (size_ + size > buffer_.size()) [[unlikely]]
      Grow(size);
    if (size > 0) std::memcpy(buffer_.data() + size_, data, size);
    size_ += size;
  }
  uint64_t Hash() const { return XXH3_64bits_withSeed(buffer_.data(), size_, kHashSeed); }
  void Clear() { size_ = 0; }

 private:
  [[gnu::noinline]] void Grow(size_t more) {
    buffer_.resize(std::max(2 * buffer_.size(), size_ + more));
  }

  std::vector<char> buffer_ = std::vector<char>(256);
  size_t size_ = 0;
};

// Names with their lengths known at compile time (the encoding holds names, not enum values, so
// that reordering a table keeps hashes stable; strlen on every node showed in profiles).
std::string_view OpText(Op op) {
  switch (op) {
#define KILN_IR_OP_TEXT(name, text, cls) \
  case Op::k##name:                      \
    return text;
    KILN_IR_OPS(KILN_IR_OP_TEXT)
#undef KILN_IR_OP_TEXT
  }
  return OpName(op);
}

std::string_view DTypeText(DType dtype) {
  static const std::array<std::string_view, std::size(kAllDTypes)> names = [] {
    std::array<std::string_view, std::size(kAllDTypes)> table;
    for (DType d : kAllDTypes) table[static_cast<size_t>(d)] = DTypeName(d);
    return table;
  }();
  const auto index = static_cast<size_t>(dtype);
  return index < names.size() ? names[index] : std::string_view(DTypeName(dtype));
}

void EncodeType(Encoder& e, const TensorType& type) {
  e.Str(DTypeText(type.dtype));
  e.List(0, type.shape);
}

void EncodeAttrs(Encoder& e, const Attrs& a) {
  e.U64(kAttrDType);
  e.Str(DTypeText(a.dtype));
  e.OptionalList(kAttrShape, a.shape);
  e.OptionalList(kAttrAxes, a.axes);
  e.OptionalList(kAttrStarts, a.starts);
  e.OptionalList(kAttrLimits, a.limits);
  e.OptionalList(kAttrStrides, a.strides);
  e.OptionalList(kAttrLow, a.low);
  e.OptionalList(kAttrHigh, a.high);
  e.OptionalList(kAttrDilation, a.dilation);
  e.OptionalList(kAttrInputDilation, a.input_dilation);
  e.OptionalList(kAttrWindow, a.window);
  if (a.groups != 0) {
    e.U64(kAttrGroups);
    e.I64(a.groups);
  }
  // By bits: -0.0 and 0.0 differ (only +0.0 is left out).
  if (const uint64_t value = std::bit_cast<uint64_t>(a.value); value != 0) {
    e.U64(kAttrValue);
    e.U64(value);
  }
  if (a.seed != 0) {
    e.U64(kAttrSeed);
    e.U64(a.seed);
  }
  if (!a.name.empty()) {
    e.U64(kAttrName);
    e.Str(a.name);
  }
  // An absent accumulator (the default: the result type is the operands') is left out, like
  // every other attribute at its default.
  if (a.accumulate.has_value()) {
    e.U64(kAttrAccumulate);
    e.Str(DTypeText(*a.accumulate));
  }
  if (a.literal) {
    e.U64(kAttrLiteral);
    EncodeType(e, TensorType{a.literal->dtype(), a.literal->shape()});
    e.U64(static_cast<uint64_t>(a.literal->size_bytes()));
    e.Bytes(a.literal->data(), static_cast<size_t>(a.literal->size_bytes()));
  }
}

uint64_t HashNode(Encoder& e, const Node& node, const std::vector<uint64_t>& hashes, NodeId id) {
  e.Clear();
  // Op names rather than enum values, so reordering the op table keeps hashes stable.
  e.Str(OpText(node.op));
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
