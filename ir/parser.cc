#include "ir/parser.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/printer.h"
#include "ir/tensor_data.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

// Bounds that keep every later computation on parsed values (shape products, window sizes,
// padding sums in InferType) far from int64 overflow, and allocations proportional to the text.
constexpr int64_t kMaxElements = int64_t{1} << 31;
constexpr int64_t kMaxAttrMagnitude = int64_t{1} << 31;

struct AttrSpec {
  const char* name;
  AttrField field;
};

constexpr AttrSpec kAttrSpecs[] = {
    {"dtype", kAttrDType},
    {"shape", kAttrShape},
    {"axes", kAttrAxes},
    {"starts", kAttrStarts},
    {"limits", kAttrLimits},
    {"strides", kAttrStrides},
    {"low", kAttrLow},
    {"high", kAttrHigh},
    {"dilation", kAttrDilation},
    {"input_dilation", kAttrInputDilation},
    {"window", kAttrWindow},
    {"groups", kAttrGroups},
    {"value", kAttrValue},
    {"seed", kAttrSeed},
    {"name", kAttrName},
    {"literal", kAttrLiteral},
    {"accumulate", kAttrAccumulate},
};

const char* AttrName(uint32_t field) {
  for (const AttrSpec& spec : kAttrSpecs) {
    if (spec.field == field) return spec.name;
  }
  return "?";
}

bool IsWordStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char c) { return IsWordStart(c) || IsDigit(c); }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::vector<int64_t>* ListField(Attrs& attrs, uint32_t field) {
  switch (field) {
    case kAttrAxes:
      return &attrs.axes;
    case kAttrStarts:
      return &attrs.starts;
    case kAttrLimits:
      return &attrs.limits;
    case kAttrStrides:
      return &attrs.strides;
    case kAttrLow:
      return &attrs.low;
    case kAttrHigh:
      return &attrs.high;
    case kAttrDilation:
      return &attrs.dilation;
    case kAttrInputDilation:
      return &attrs.input_dilation;
    case kAttrWindow:
      return &attrs.window;
    default:
      return nullptr;
  }
}

// Bit patterns of +inf (all exponent bits set) and of the sign bit of a float dtype.
uint64_t InfBits(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 0x7ff0000000000000u;
    case DType::kF32:
      return 0x7f800000u;
    case DType::kBF16:
      return 0x7f80u;
    default:
      return 0x7c00u;
  }
}
uint64_t SignBit(DType dtype) { return uint64_t{1} << (8 * DTypeSize(dtype) - 1); }

// Writes element `index` of a float tensor (f64, f32, f16 or bf16) from its bit pattern.
void StoreFloatBits(TensorData& data, int64_t index, uint64_t bits) {
  std::byte* dest = data.data() + index * DTypeSize(data.dtype());
  if (data.dtype() == DType::kF64) {
    std::memcpy(dest, &bits, sizeof(bits));
  } else if (data.dtype() == DType::kF32) {
    const uint32_t narrow = static_cast<uint32_t>(bits);
    std::memcpy(dest, &narrow, sizeof(narrow));
  } else {
    const uint16_t narrow = static_cast<uint16_t>(bits);
    std::memcpy(dest, &narrow, sizeof(narrow));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Graph> Parse() {
    if (PeekWord() != "graph") return Expected("'graph'");
    TakeWord();
    if (!Consume('{')) return Expected("'{' after 'graph'");
    while (true) {
      SkipSpace();
      if (!AtEnd() && text_[pos_] == '%') {
        if (absl::Status s = ParseNode(); !s.ok()) return s;
        continue;
      }
      if (PeekWord() == "return") break;
      return Expected("a node ('%<id> = op(...) : type') or 'return'");
    }
    TakeWord();
    if (absl::Status s = ParseReturn(); !s.ok()) return s;
    if (!Consume('}')) return Expected("',' or '}' after the graph's outputs");
    SkipSpace();
    if (!AtEnd()) return Expected("end of input after the graph");
    if (absl::Status s = Verify(graph_); !s.ok()) return s;
    return std::move(graph_);
  }

 private:
  // ---- Characters and tokens ------------------------------------------------------------------

  bool AtEnd() const { return pos_ >= text_.size(); }

  // Skips white space and "//" comments.
  void SkipSpace() {
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (AtEnd() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  std::string_view PeekWord() {
    SkipSpace();
    size_t end = pos_;
    if (end < text_.size() && IsWordStart(text_[end])) {
      while (end < text_.size() && IsWordChar(text_[end])) ++end;
    }
    return text_.substr(pos_, end - pos_);
  }

  std::string_view TakeWord() {
    const std::string_view word = PeekWord();
    pos_ += word.size();
    return word;
  }

  // A number-like token: an optional '-', then letters, digits, '.', '_' and a sign right after
  // an exponent 'e'; "nan" may be followed by "(0x<hex>)". The caller decides what it means.
  std::string_view TakeNumberToken() {
    SkipSpace();
    const size_t start = pos_;
    if (!AtEnd() && text_[pos_] == '-') ++pos_;
    const size_t body = pos_;
    const bool decimal = !AtEnd() && (IsDigit(text_[pos_]) || text_[pos_] == '.');
    while (!AtEnd()) {
      const char c = text_[pos_];
      const bool exponent_sign = decimal && (c == '+' || c == '-') && pos_ > body &&
                                 (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E');
      if (IsWordChar(c) || c == '.' || exponent_sign) {
        ++pos_;
      } else {
        break;
      }
    }
    std::string_view token = text_.substr(start, pos_ - start);
    if (token.ends_with("nan") && !AtEnd() && text_[pos_] == '(') {
      size_t end = pos_ + 1;
      while (end < text_.size() && end - pos_ < 40 &&
             (IsHexDigit(text_[end]) || text_[end] == 'x')) {
        ++end;
      }
      if (end < text_.size() && text_[end] == ')') {
        pos_ = end + 1;
        token = text_.substr(start, pos_ - start);
      }
    }
    return token;
  }

  // ---- Errors ---------------------------------------------------------------------------------

  absl::Status ErrorAt(size_t offset, std::string_view message) const {
    int64_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(line, ":", offset - line_start + 1, ": ", std::string(message)));
  }

  // What the parser is looking at, for "expected X, found Y".
  std::string Found() {
    SkipSpace();
    if (AtEnd()) return "end of input";
    const char c = text_[pos_];
    size_t end = pos_;
    if (IsWordChar(c) || c == '-' || c == '.') {
      ++end;
      while (end < text_.size() && end - pos_ < 24 &&
             (IsWordChar(text_[end]) || text_[end] == '.')) {
        ++end;
      }
    } else {
      end = pos_ + 1;
    }
    return QuoteString(text_.substr(pos_, end - pos_));
  }

  absl::Status Expected(std::string_view what) {
    const std::string found = Found();
    return ErrorAt(pos_, absl::StrCat("expected ", std::string(what), ", found ", found));
  }

  // ---- Values ---------------------------------------------------------------------------------

  // "%<id>" with a non-negative decimal id.
  absl::StatusOr<int64_t> ParseValueId(std::string_view context) {
    SkipSpace();
    const size_t start = pos_;
    if (AtEnd() || text_[pos_] != '%' || pos_ + 1 >= text_.size() || !IsDigit(text_[pos_ + 1])) {
      return Expected(absl::StrCat("'%<id>' ", std::string(context)));
    }
    ++pos_;
    const size_t digits = pos_;
    while (!AtEnd() && IsDigit(text_[pos_])) ++pos_;
    int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(text_.data() + digits, text_.data() + pos_, id);
    if (ec != std::errc()) return ErrorAt(start, "node id too large");
    return id;
  }

  absl::StatusOr<int64_t> ParseInteger(int64_t min, int64_t max, std::string_view what) {
    SkipSpace();
    const size_t start = pos_;
    const std::string_view token = TakeNumberToken();
    if (token.empty()) {
      pos_ = start;
      return Expected(what);
    }
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (ptr != token.data() + token.size() ||
        (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      return ErrorAt(start,
                     absl::StrCat("expected ", std::string(what), ", found ", QuoteString(token)));
    }
    if (ec == std::errc::result_out_of_range || value < min || value > max) {
      return ErrorAt(start,
                     absl::StrCat(std::string(token), " is out of range [", min, ", ", max, "]"));
    }
    return value;
  }

  absl::StatusOr<uint64_t> ParseUnsigned(std::string_view what) {
    SkipSpace();
    const size_t start = pos_;
    const std::string_view token = TakeNumberToken();
    uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (token.empty() || ptr != token.data() + token.size()) {
      pos_ = start;
      return Expected(what);
    }
    if (ec != std::errc()) {
      return ErrorAt(start, absl::StrCat(std::string(token), " is out of range [0, 2^64)"));
    }
    return value;
  }

  // A float of `dtype` (f32, f64, f16 or bf16) from a number token, as its bit pattern.
  absl::StatusOr<uint64_t> FloatBits(std::string_view token, DType dtype, size_t offset) const {
    const bool negative = token.starts_with("-");
    const std::string_view body = negative ? token.substr(1) : token;
    const uint64_t sign = negative ? SignBit(dtype) : 0;
    if (body == "inf") return sign | InfBits(dtype);
    if (body == "nan") return sign | DefaultNaNBits(dtype);
    if (body.starts_with("nan(0x") && body.ends_with(")")) {
      const std::string_view hex = body.substr(6, body.size() - 7);
      uint64_t bits = 0;
      const auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
      const size_t width = 2 * static_cast<size_t>(DTypeSize(dtype));
      if (negative || hex.empty() || hex.size() > width || ptr != hex.data() + hex.size() ||
          ec != std::errc() || (bits & ~SignBit(dtype)) <= InfBits(dtype)) {
        return ErrorAt(offset, absl::StrCat(QuoteString(token), " is not a ", DTypeName(dtype),
                                            " NaN: write nan(0x<", width,
                                            " hex digits of a NaN, sign included>)"));
      }
      return bits;
    }
    if (body.empty() || !(IsDigit(body[0]) || body[0] == '.')) {
      return ErrorAt(offset, absl::StrCat("expected a number, found ", QuoteString(token)));
    }
    const char* first = token.data();
    const char* last = token.data() + token.size();
    const auto malformed = [&] {
      return ErrorAt(offset, absl::StrCat("malformed number ", QuoteString(token)));
    };
    const auto out_of_range = [&] {
      return ErrorAt(offset,
                     absl::StrCat(std::string(token), " is out of range for ", DTypeName(dtype)));
    };
    if (dtype == DType::kF64) {
      double value = 0;
      const auto [ptr, ec] = std::from_chars(first, last, value);
      if (ptr != last) return malformed();
      if (ec != std::errc()) return out_of_range();
      return std::bit_cast<uint64_t>(value);
    }
    float value = 0;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ptr != last) return malformed();
    if (ec != std::errc()) return out_of_range();
    if (dtype == DType::kF32) return std::bit_cast<uint32_t>(value);
    const uint16_t bits = dtype == DType::kF16 ? FloatToHalf(value) : FloatToBFloat16(value);
    if ((bits & 0x7fffu) == InfBits(dtype)) return out_of_range();  // A finite number overflowed.
    return bits;
  }

  absl::StatusOr<std::vector<int64_t>> ParseIntList(std::string_view what, int64_t min,
                                                    int64_t max) {
    if (!Consume('[')) return Expected(absl::StrCat("'[' to start ", std::string(what)));
    std::vector<int64_t> values;
    if (Consume(']')) return values;
    while (true) {
      absl::StatusOr<int64_t> value = ParseInteger(min, max, "an integer");
      if (!value.ok()) return value.status();
      values.push_back(*value);
      if (Consume(']')) return values;
      if (!Consume(',')) return Expected(absl::StrCat("',' or ']' in ", std::string(what)));
    }
  }

  // Dimensions of a type or of a shape attribute, with the element count bounded.
  absl::StatusOr<Shape> ParseDims(std::string_view what) {
    SkipSpace();
    const size_t start = pos_;
    absl::StatusOr<std::vector<int64_t>> dims = ParseIntList(what, 0, kMaxElements);
    if (!dims.ok()) return dims.status();
    int64_t product = 1;
    for (int64_t d : *dims) {
      if (d == 0) continue;
      if (product > kMaxElements / d) {
        return ErrorAt(start, absl::StrCat(std::string(what),
                                           " has more than 2^31 elements (ignoring zero dims)"));
      }
      product *= d;
    }
    return *std::move(dims);
  }

  absl::StatusOr<TensorType> ParseType() {
    SkipSpace();
    const size_t start = pos_;
    const std::string_view name = TakeWord();
    if (name.empty()) return Expected("a result type such as f32[2,3]");
    const std::optional<DType> dtype = ParseDType(name);
    if (!dtype) {
      return ErrorAt(start, absl::StrCat("unknown dtype ", QuoteString(name),
                                         " (f32, f64, f16, bf16, i32, i64, u8, bool)"));
    }
    absl::StatusOr<Shape> shape = ParseDims("the shape");
    if (!shape.ok()) return shape.status();
    return TensorType{*dtype, *std::move(shape)};
  }

  absl::StatusOr<std::string> ParseString() {
    SkipSpace();
    if (AtEnd() || text_[pos_] != '"') return Expected("a string in double quotes");
    const size_t start = pos_++;
    std::string out;
    while (true) {
      if (AtEnd()) return ErrorAt(start, "unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\n') return ErrorAt(pos_, "newline in a string (write \\n)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      const size_t escape = pos_++;
      if (AtEnd()) return ErrorAt(start, "unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'x': {
          if (pos_ + 2 > text_.size() || !IsHexDigit(text_[pos_]) || !IsHexDigit(text_[pos_ + 1])) {
            return ErrorAt(escape, "\\x needs two hex digits");
          }
          unsigned value = 0;
          std::from_chars(text_.data() + pos_, text_.data() + pos_ + 2, value, 16);
          out += static_cast<char>(value);
          pos_ += 2;
          break;
        }
        default:
          return ErrorAt(escape, "unknown escape in string (use \\\" \\\\ \\n \\t \\r \\xHH)");
      }
    }
  }

  // The literal's elements are checked for syntax and counted here; they are converted once the
  // result type (and so the dtype and element count) is known.
  absl::Status ScanLiteral(size_t* count) {
    SkipSpace();
    literal_start_ = pos_;
    if (!Consume('[')) return Expected("'[' to start the literal");
    *count = 0;
    if (Consume(']')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (text_.substr(pos_).starts_with("...")) {
        return ErrorAt(pos_,
                       "an elided literal ('...', from max_literal_elements) cannot be parsed");
      }
      if (TakeNumberToken().empty()) return Expected("a literal element");
      ++*count;
      if (Consume(']')) return absl::OkStatus();
      if (!Consume(',')) return Expected("',' or ']' in the literal");
    }
  }

  absl::StatusOr<std::shared_ptr<const TensorData>> ConvertLiteral(size_t offset, size_t count,
                                                                   const TensorType& type) {
    if (static_cast<int64_t>(count) != type.num_elements()) {
      return ErrorAt(offset, absl::StrCat("literal has ", count, " elements, the result type ",
                                          TypeToString(type), " needs ", type.num_elements()));
    }
    auto data = std::make_shared<TensorData>(type.dtype, type.shape);
    const size_t saved = pos_;
    pos_ = offset;
    Consume('[');
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      if (i > 0) Consume(',');
      SkipSpace();
      const size_t at = pos_;
      const std::string_view token = TakeNumberToken();
      if (IsFloat(type.dtype)) {
        absl::StatusOr<uint64_t> bits = FloatBits(token, type.dtype, at);
        if (!bits.ok()) return bits.status();
        StoreFloatBits(*data, i, *bits);
      } else if (IsBool(type.dtype)) {
        if (token != "true" && token != "false") {
          return ErrorAt(at, absl::StrCat("expected true or false, found ", QuoteString(token)));
        }
        data->SetInt64(i, token == "true" ? 1 : 0);
      } else if (type.dtype == DType::kU64) {
        uint64_t value = 0;
        const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
        if (ptr != token.data() + token.size() ||
            (ec != std::errc() && ec != std::errc::result_out_of_range)) {
          return ErrorAt(at, absl::StrCat("expected an integer, found ", QuoteString(token)));
        }
        if (ec != std::errc()) {
          return ErrorAt(at, absl::StrCat(std::string(token), " is out of range for u64"));
        }
        data->SetInt64(i, static_cast<int64_t>(value));  // the bit pattern (TensorData)
      } else {
        int64_t value = 0;
        const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
        if (ptr != token.data() + token.size() ||
            (ec != std::errc() && ec != std::errc::result_out_of_range)) {
          return ErrorAt(at, absl::StrCat("expected an integer, found ", QuoteString(token)));
        }
        // Narrower than i64 (exact in a double): a value SaturatingCastToInt clamps is outside.
        if (ec != std::errc() ||
            (type.dtype != DType::kI64 &&
             SaturatingCastToInt(static_cast<double>(value), type.dtype) != value)) {
          return ErrorAt(
              at, absl::StrCat(std::string(token), " is out of range for ", DTypeName(type.dtype)));
        }
        data->SetInt64(i, value);
      }
    }
    pos_ = saved;
    return std::shared_ptr<const TensorData>(std::move(data));
  }

  // ---- Nodes ----------------------------------------------------------------------------------

  absl::Status ParseNode() {
    SkipSpace();
    const size_t node_start = pos_;
    absl::StatusOr<int64_t> text_id = ParseValueId("to start a node");
    if (!text_id.ok()) return text_id.status();
    const std::string label = absl::StrCat("%", *text_id);
    if (auto it = ids_.find(*text_id); it != ids_.end()) {
      return ErrorAt(node_start, absl::StrCat(label, " is defined twice (first on line ",
                                              LineOf(offsets_[it->second]), ")"));
    }
    if (graph_.num_nodes() == std::numeric_limits<NodeId>::max()) {
      return ErrorAt(node_start, "too many nodes");
    }
    if (!Consume('=')) return Expected(absl::StrCat("'=' after ", label));

    SkipSpace();
    const size_t op_start = pos_;
    const std::string_view op_name = TakeWord();
    if (op_name.empty()) return Expected("an op name");
    const std::optional<Op> op = ParseOpName(op_name);
    if (!op) return ErrorAt(op_start, absl::StrCat("unknown op ", QuoteString(op_name)));
    const std::string op_label = absl::StrCat(label, " = ", OpName(*op));
    if (!Consume('(')) return Expected(absl::StrCat("'(' after '", OpName(*op), "'"));

    Node node;
    node.op = *op;
    std::vector<TensorType> operand_types;
    if (!Consume(')')) {
      while (true) {
        SkipSpace();
        const size_t operand_start = pos_;
        absl::StatusOr<int64_t> operand = ParseValueId("as an operand");
        if (!operand.ok()) return operand.status();
        const auto it = ids_.find(*operand);
        if (it == ids_.end()) {
          return ErrorAt(operand_start, absl::StrCat(op_label, ": operand %", *operand,
                                                     " is not defined before use"));
        }
        node.inputs.push_back(it->second);
        operand_types.push_back(graph_.node(it->second).type);
        if (Consume(')')) break;
        if (!Consume(',')) return Expected("',' or ')' after operand");
      }
    }

    uint32_t given = 0;
    size_t attr_offsets[32] = {};
    size_t literal_count = 0;
    if (Consume('{') && !Consume('}')) {
      while (true) {
        SkipSpace();
        const size_t attr_start = pos_;
        const std::string_view name = TakeWord();
        if (name.empty()) return Expected("an attribute name");
        const AttrSpec* spec = nullptr;
        for (const AttrSpec& s : kAttrSpecs) {
          if (name == s.name) spec = &s;
        }
        if (spec == nullptr) {
          return ErrorAt(attr_start,
                         absl::StrCat(op_label, ": unknown attribute ", QuoteString(name)));
        }
        if (given & spec->field) {
          return ErrorAt(attr_start,
                         absl::StrCat(op_label, ": attribute '", spec->name, "' given twice"));
        }
        given |= spec->field;
        attr_offsets[std::countr_zero(static_cast<uint32_t>(spec->field))] = attr_start;
        if (!Consume('=')) return Expected(absl::StrCat("'=' after '", spec->name, "'"));
        if (absl::Status s = ParseAttrValue(spec->field, node.attrs, &literal_count); !s.ok()) {
          return s;
        }
        if (Consume('}')) break;
        if (!Consume(',')) return Expected("',' or '}' after attribute");
      }
    }

    if (!Consume(':')) return Expected(absl::StrCat("':' and the result type of ", op_label));
    SkipSpace();
    const size_t type_start = pos_;
    absl::StatusOr<TensorType> type = ParseType();
    if (!type.ok()) return type.status();
    node.type = *type;

    if (const uint32_t unused = given & ~UsedAttrs(*op); unused != 0) {
      const int bit = std::countr_zero(unused);
      return ErrorAt(attr_offsets[bit],
                     absl::StrCat(op_label, ": '", OpName(*op), "' does not use attribute '",
                                  AttrName(1u << bit), "'"));
    }
    const uint32_t from_type = AttrsFromResultType(*op) & ~given;
    if (from_type & kAttrDType) node.attrs.dtype = type->dtype;
    if (from_type & kAttrShape) node.attrs.shape = type->shape;
    if (given & kAttrLiteral) {
      absl::StatusOr<std::shared_ptr<const TensorData>> literal =
          ConvertLiteral(literal_start_, literal_count, *type);
      if (!literal.ok()) return literal.status();
      node.attrs.literal = *std::move(literal);
    }

    absl::StatusOr<TensorType> inferred = InferType(*op, operand_types, node.attrs);
    if (!inferred.ok()) {
      return ErrorAt(node_start, absl::StrCat(label, " = ", inferred.status().message()));
    }
    if (*inferred != *type) {
      return ErrorAt(type_start,
                     absl::StrCat(op_label, ": result type ", TypeToString(*type),
                                  " differs from the inferred ", TypeToString(*inferred)));
    }
    const NodeId id = graph_.num_nodes();
    if (*op == Op::kParameter) {
      const auto [it, inserted] = parameters_.emplace(node.attrs.name, id);
      if (!inserted) {
        return ErrorAt(node_start, absl::StrCat(op_label, ": name ", QuoteString(node.attrs.name),
                                                " already used by %", text_ids_[it->second]));
      }
    }
    graph_.AddNode(std::move(node));
    ids_[*text_id] = id;
    text_ids_.push_back(*text_id);
    offsets_.push_back(node_start);
    return absl::OkStatus();
  }

  absl::Status ParseAttrValue(uint32_t field, Attrs& attrs, size_t* literal_count) {
    if (std::vector<int64_t>* list = ListField(attrs, field)) {
      absl::StatusOr<std::vector<int64_t>> values =
          ParseIntList(AttrName(field), -kMaxAttrMagnitude, kMaxAttrMagnitude);
      if (!values.ok()) return values.status();
      *list = *std::move(values);
      return absl::OkStatus();
    }
    switch (field) {
      case kAttrDType:
      case kAttrAccumulate: {
        SkipSpace();
        const size_t start = pos_;
        const std::string_view name = TakeWord();
        const std::optional<DType> dtype = ParseDType(name);
        if (!dtype) {
          pos_ = start;
          return Expected("a dtype (f32, f64, f16, bf16, i32, i64, u8, bool)");
        }
        (field == kAttrDType ? attrs.dtype : attrs.accumulate.emplace()) = *dtype;
        return absl::OkStatus();
      }
      case kAttrShape: {
        absl::StatusOr<Shape> shape = ParseDims("shape");
        if (!shape.ok()) return shape.status();
        attrs.shape = *std::move(shape);
        return absl::OkStatus();
      }
      case kAttrGroups: {
        absl::StatusOr<int64_t> groups =
            ParseInteger(-kMaxAttrMagnitude, kMaxAttrMagnitude, "an integer");
        if (!groups.ok()) return groups.status();
        attrs.groups = *groups;
        return absl::OkStatus();
      }
      case kAttrValue: {
        SkipSpace();
        const size_t start = pos_;
        const std::string_view token = TakeNumberToken();
        if (token.empty()) return Expected("a number");
        absl::StatusOr<uint64_t> bits = FloatBits(token, DType::kF64, start);
        if (!bits.ok()) return bits.status();
        attrs.value = std::bit_cast<double>(*bits);
        return absl::OkStatus();
      }
      case kAttrSeed: {
        absl::StatusOr<uint64_t> seed = ParseUnsigned("an unsigned 64-bit seed");
        if (!seed.ok()) return seed.status();
        attrs.seed = *seed;
        return absl::OkStatus();
      }
      case kAttrName: {
        absl::StatusOr<std::string> name = ParseString();
        if (!name.ok()) return name.status();
        attrs.name = *std::move(name);
        return absl::OkStatus();
      }
      case kAttrLiteral:
        return ScanLiteral(literal_count);
      default:
        return absl::InternalError("unhandled attribute");
    }
  }

  absl::Status ParseReturn() {
    absl::flat_hash_map<std::string, int64_t> names;
    SkipSpace();
    if (AtEnd() || text_[pos_] != '%') return absl::OkStatus();
    while (true) {
      SkipSpace();
      const size_t start = pos_;
      absl::StatusOr<int64_t> text_id = ParseValueId("as an output");
      if (!text_id.ok()) return text_id.status();
      const auto it = ids_.find(*text_id);
      if (it == ids_.end()) {
        return ErrorAt(start, absl::StrCat("return: %", *text_id, " is not defined"));
      }
      std::string name;
      if (PeekWord() == "as") {
        TakeWord();
        SkipSpace();
        const size_t name_start = pos_;
        absl::StatusOr<std::string> parsed = ParseString();
        if (!parsed.ok()) return parsed.status();
        name = *std::move(parsed);
        if (!name.empty() && !names.emplace(name, *text_id).second) {
          return ErrorAt(name_start,
                         absl::StrCat("return: output name ", QuoteString(name), " used twice"));
        }
      }
      graph_.AddOutput(it->second, std::move(name));
      if (!Consume(',')) return absl::OkStatus();
    }
  }

  int64_t LineOf(size_t offset) const {
    int64_t line = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) line += text_[i] == '\n';
    return line;
  }

  std::string_view text_;
  size_t pos_ = 0;
  Graph graph_;
  absl::flat_hash_map<int64_t, NodeId> ids_;             // Id in the text -> dense id.
  std::vector<int64_t> text_ids_;                        // Dense id -> id in the text.
  std::vector<size_t> offsets_;                          // Dense id -> where the node starts.
  absl::flat_hash_map<std::string, NodeId> parameters_;  // Name -> dense id.
  size_t literal_start_ = 0;                             // The '[' of the current node's literal.
};

}  // namespace

absl::StatusOr<Graph> ParseGraph(std::string_view text) { return Parser(text).Parse(); }

}  // namespace kiln::ir
