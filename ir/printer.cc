#include "ir/printer.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kiln::ir {
namespace {

template <class T>
std::string ShortestDecimal(T value) {
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// Bit layout of a float dtype, for spelling its infinities and NaNs.
struct FloatBits {
  int bytes;
  uint64_t sign;
  uint64_t exponent;  // All exponent bits: the pattern of +inf.
};

FloatBits LayoutOf(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return {8, uint64_t{1} << 63, 0x7ff0000000000000u};
    case DType::kF32:
      return {4, 0x80000000u, 0x7f800000u};
    case DType::kBF16:
      return {2, 0x8000u, 0x7f80u};
    default:
      return {2, 0x8000u, 0x7c00u};  // f16
  }
}

// A non-finite float element given by its bit pattern: inf, -inf, nan, -nan (the dtype's default
// quiet NaN) or nan(0x<all bits>) for any other NaN.
std::string FormatNonFinite(uint64_t bits, DType dtype) {
  const FloatBits layout = LayoutOf(dtype);
  const uint64_t magnitude = bits & ~layout.sign;
  const bool negative = (bits & layout.sign) != 0;
  if (magnitude == layout.exponent) return negative ? "-inf" : "inf";
  if (magnitude == DefaultNaNBits(dtype)) return negative ? "-nan" : "nan";
  return absl::StrFormat("nan(0x%0*x)", 2 * layout.bytes, bits);
}

std::string FormatLiteralElement(const TensorData& literal, int64_t index) {
  const std::byte* base = literal.data();
  const DType dtype = literal.dtype();
  switch (dtype) {
    case DType::kF64:
      return FormatDouble(literal.GetDouble(index));
    case DType::kF32: {
      uint32_t bits;
      std::memcpy(&bits, base + index * 4, 4);
      // Through float, so the shortest digits are those of a float, not of a double.
      const float value = std::bit_cast<float>(bits);
      return std::isfinite(value) ? ShortestDecimal(value) : FormatNonFinite(bits, dtype);
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, base + index * 2, 2);
      // Every f16 and bf16 value is a float, so its shortest float digits read back exactly.
      const float value = dtype == DType::kF16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      return std::isfinite(value) ? ShortestDecimal(value) : FormatNonFinite(bits, dtype);
    }
    case DType::kBool:
      return literal.GetInt64(index) != 0 ? "true" : "false";
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kU16:
    case DType::kU32:
      return absl::StrCat(literal.GetInt64(index));
    case DType::kU64:
      return absl::StrCat(static_cast<uint64_t>(literal.GetInt64(index)));
  }
  return "?";
}

std::string IntList(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

std::string OperandList(const Node& node) {
  return absl::StrJoin(node.inputs, ", ",
                       [](std::string* out, NodeId id) { absl::StrAppend(out, "%", id); });
}

}  // namespace

uint32_t AttrsFromResultType(Op op) {
  switch (op) {
    case Op::kParameter:
    case Op::kFill:
    case Op::kIota:
    case Op::kRandomUniform:
    case Op::kRandomNormal:
      return kAttrDType | kAttrShape;
    case Op::kCast:
      return kAttrDType;
    case Op::kReshape:
    case Op::kBroadcast:
      return kAttrShape;
    default:
      return 0;
  }
}

uint64_t DefaultNaNBits(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 0x7ff8000000000000u;
    case DType::kF32:
      return 0x7fc00000u;
    case DType::kF16:
      return 0x7e00u;
    case DType::kBF16:
      return 0x7fc0u;
    default:
      return 0;
  }
}

std::string FormatDouble(double value) {
  if (std::isfinite(value)) return ShortestDecimal(value);
  return FormatNonFinite(std::bit_cast<uint64_t>(value), DType::kF64);
}

std::string QuoteString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += c;
        } else {
          absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
        }
    }
  }
  out += '"';
  return out;
}

std::string PrintAttrs(const Node& node, const PrintOptions& options) {
  const Attrs& a = node.attrs;
  const Attrs defaults;
  const uint32_t from_type = AttrsFromResultType(node.op);
  std::vector<std::string> parts;
  const auto add_list = [&](const char* name, const std::vector<int64_t>& values) {
    if (!values.empty()) parts.push_back(absl::StrCat(name, "=", IntList(values)));
  };
  // Attributes the result type restores are printed only where they disagree with it, which
  // happens only in a graph that fails Verify.
  if ((from_type & kAttrDType) ? a.dtype != node.type.dtype : a.dtype != defaults.dtype) {
    parts.push_back(absl::StrCat("dtype=", DTypeName(a.dtype)));
  }
  if ((from_type & kAttrShape) ? a.shape != node.type.shape : !a.shape.empty()) {
    parts.push_back(absl::StrCat("shape=", IntList(a.shape)));
  }
  add_list("axes", a.axes);
  add_list("window", a.window);
  add_list("starts", a.starts);
  add_list("limits", a.limits);
  add_list("strides", a.strides);
  add_list("low", a.low);
  add_list("high", a.high);
  add_list("dilation", a.dilation);
  add_list("input_dilation", a.input_dilation);
  if (a.groups != defaults.groups) parts.push_back(absl::StrCat("groups=", a.groups));
  if (a.accumulate.has_value()) {
    parts.push_back(absl::StrCat("accumulate=", DTypeName(*a.accumulate)));
  }
  // By bits: -0.0 is not the default 0.0.
  if (std::bit_cast<uint64_t>(a.value) != std::bit_cast<uint64_t>(defaults.value)) {
    parts.push_back(absl::StrCat("value=", FormatDouble(a.value)));
  }
  if (a.seed != defaults.seed) parts.push_back(absl::StrCat("seed=", a.seed));
  if (!a.name.empty()) parts.push_back(absl::StrCat("name=", QuoteString(a.name)));
  if (a.literal) {
    const TensorData& literal = *a.literal;
    std::string text = "literal=[";
    int64_t count = literal.num_elements();
    const bool elided = options.max_literal_elements >= 0 && count > options.max_literal_elements;
    if (elided) count = options.max_literal_elements;
    for (int64_t i = 0; i < count; ++i) {
      if (i > 0) text += ", ";
      text += FormatLiteralElement(literal, i);
    }
    if (elided) text += count > 0 ? ", ..." : "...";
    text += "]";
    parts.push_back(std::move(text));
  }
  return absl::StrJoin(parts, ", ");
}

std::string PrintNode(const Graph& graph, NodeId id, const PrintOptions& options) {
  const Node& node = graph.node(id);
  std::string line = absl::StrCat("%", id, " = ", OpName(node.op), "(", OperandList(node), ")");
  if (std::string attrs = PrintAttrs(node, options); !attrs.empty()) {
    absl::StrAppend(&line, " {", attrs, "}");
  }
  absl::StrAppend(&line, " : ", TypeToString(node.type));
  if (options.locations) {
    if (std::string where = LocationToString(node.loc); !where.empty()) {
      absl::StrAppend(&line, "  // ", where);
    }
  }
  return line;
}

std::string PrintGraph(const Graph& graph, const PrintOptions& options) {
  std::string text = "graph {\n";
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    absl::StrAppend(&text, "  ", PrintNode(graph, id, options), "\n");
  }
  text += "  return";
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Output& out = graph.outputs()[i];
    absl::StrAppend(&text, i == 0 ? " " : ", ", "%", out.node);
    if (!out.name.empty()) absl::StrAppend(&text, " as ", QuoteString(out.name));
  }
  text += "\n}\n";
  return text;
}

}  // namespace kiln::ir
