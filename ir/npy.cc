#include "ir/npy.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"

namespace kiln::ir {
namespace {

static_assert(std::endian::native == std::endian::little,
              "npy.cc assumes a little-endian host (TensorData stores native bytes)");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr int kMaxRank = 64;  // numpy 2's limit (numpy 1: 32)
constexpr uint64_t kMaxDim = uint64_t{1} << 62;
// numpy's writer: the data starts at a multiple of 64 bytes, and the header leaves room for the
// first axis to grow to 21 digits (numpy.lib.format.GROWTH_AXIS_MAX_DIGITS) without a rewrite.
constexpr size_t kArrayAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;

std::string Err(std::string_view name, size_t offset, std::string_view message) {
  return absl::StrCat(std::string(name), ": npy: byte ", offset, ": ", std::string(message));
}

struct Descr {
  DType dtype;
  bool big_endian;
};

// Maps a descr string ('<f4') to a kiln dtype; `at` is the descr's offset for errors.
absl::StatusOr<Descr> ParseDescr(std::string_view name, size_t at, std::string_view descr) {
  auto fail = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        Err(name, at, absl::StrCat("descr '", std::string(descr), "': ", std::string(why))));
  };
  if (descr.empty()) return fail("empty");
  char order = descr[0];
  std::string_view code = descr.substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    order = '=';  // numpy accepts a missing byte-order character as native
    code = descr;
  }
  if (code.starts_with("O"))
    return fail("object arrays are not supported (they hold Python objects)");
  if (code.starts_with("U") || code.starts_with("S") || code.starts_with("a") ||
      code.starts_with("V")) {
    return fail("string and void (raw/structured) dtypes are not supported");
  }
  struct Known {
    std::string_view code;
    DType dtype;
  };
  static constexpr Known kKnown[] = {
      {"f4", DType::kF32}, {"f8", DType::kF64}, {"f2", DType::kF16}, {"i1", DType::kI8},
      {"i2", DType::kI16}, {"i4", DType::kI32}, {"i8", DType::kI64}, {"u1", DType::kU8},
      {"u2", DType::kU16}, {"u4", DType::kU32}, {"u8", DType::kU64}, {"b1", DType::kBool}};
  for (const Known& k : kKnown) {
    if (code != k.code) continue;
    const bool one_byte = DTypeSize(k.dtype) == 1;
    if (order == '|' && !one_byte) {
      return fail("'|' (not applicable) byte order on a multi-byte type");
    }
    return Descr{k.dtype, order == '>' && !one_byte};
  }
  return fail(
      "no kiln dtype matches (kiln reads f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1, little or big "
      "endian)");
}

// A cursor over the header dict. Offsets in errors are absolute (file) offsets.
class HeaderParser {
 public:
  HeaderParser(std::string_view name, std::string_view text, size_t base)
      : name_(name), text_(text), base_(base) {}

  size_t offset() const { return base_ + pos_; }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  absl::Status Error(std::string_view message) const {
    return absl::InvalidArgumentError(Err(name_, offset(), message));
  }
  absl::Status Expected(std::string_view what) const {
    if (at_end()) return Error(absl::StrCat("header ends; expected ", std::string(what)));
    const unsigned char c = static_cast<unsigned char>(peek());
    const std::string got = (c >= 0x20 && c < 0x7f) ? absl::StrCat("'", std::string(1, peek()), "'")
                                                    : absl::StrCat("byte 0x", absl::Hex(c));
    return Error(absl::StrCat("expected ", std::string(what), ", found ", got));
  }

  void SkipSpaces() {
    while (!at_end() && (peek() == ' ' || peek() == '\t')) ++pos_;
  }
  bool Consume(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(std::string_view word) {
    if (text_.substr(pos_).starts_with(word)) {
      pos_ += word.size();
      return true;
    }
    return false;
  }

  // A Python string literal in single or double quotes, without escapes.
  absl::StatusOr<std::string_view> String() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') return Expected("a quoted string");
    const size_t start = ++pos_;
    while (!at_end() && peek() != quote) {
      if (peek() == '\\') return Error("escape sequences in header strings are not supported");
      if (peek() == '\n') break;
      ++pos_;
    }
    if (at_end() || peek() != quote) {
      pos_ = start - 1;
      return Error("unterminated string");
    }
    ++pos_;
    return text_.substr(start, pos_ - 1 - start);
  }

  // A shape tuple: (), (3,), (2, 3) or (2, 3,); integers may carry Python 2's 'L' suffix.
  absl::StatusOr<Shape> Tuple() {
    if (!Consume('(')) {
      if (peek() == '[') return Error("shape must be a tuple like (2, 3), not a list");
      return Expected("a shape tuple '('");
    }
    Shape shape;
    SkipSpaces();
    bool trailing_comma = false;
    while (!Consume(')')) {
      if (!shape.empty() && !trailing_comma) return Expected("',' or ')' in the shape");
      if (static_cast<int>(shape.size()) == kMaxRank) {
        return Error(absl::StrCat("more than ", kMaxRank, " dimensions"));
      }
      if (peek() == '-') return Error("negative dimension");
      if (peek() < '0' || peek() > '9') return Expected("a dimension (a non-negative integer)");
      const size_t start = offset();
      uint64_t value = 0;
      while (peek() >= '0' && peek() <= '9' && !at_end()) {
        value = value * 10 + static_cast<uint64_t>(peek() - '0');
        ++pos_;
        if (value > kMaxDim) {
          return absl::InvalidArgumentError(
              Err(name_, start, absl::StrCat("dimension larger than 2^62")));
        }
      }
      Consume('L');
      shape.push_back(static_cast<int64_t>(value));
      SkipSpaces();
      trailing_comma = Consume(',');
      SkipSpaces();
    }
    if (shape.size() == 1 && !trailing_comma) {
      return Error("'(n)' is an integer in Python, not a shape: a 1-d shape is written '(n,)'");
    }
    return shape;
  }

 private:
  std::string_view name_;
  std::string_view text_;
  size_t base_;
  size_t pos_ = 0;
};

struct Header {
  Descr descr{};
  Shape shape;
};

absl::StatusOr<Header> ParseHeader(std::string_view name, std::string_view text, size_t base) {
  HeaderParser p(name, text, base);
  std::optional<Descr> descr;
  std::optional<Shape> shape;
  bool have_fortran = false;
  p.SkipSpaces();
  if (!p.Consume('{')) return p.Expected("the header dict '{'");
  p.SkipSpaces();
  bool need_comma = false;
  while (!p.Consume('}')) {
    if (need_comma) return p.Expected("',' or '}' in the header dict");
    const size_t key_at = p.offset();
    absl::StatusOr<std::string_view> key = p.String();
    if (!key.ok()) return key.status();
    p.SkipSpaces();
    if (!p.Consume(':')) return p.Expected("':' after the key");
    p.SkipSpaces();
    const size_t value_at = p.offset();
    auto duplicate = [&]() {
      return absl::InvalidArgumentError(
          Err(name, key_at, absl::StrCat("key '", std::string(*key), "' appears twice")));
    };
    if (*key == "descr") {
      if (descr) return duplicate();
      if (p.peek() == '[') {
        return p.Error("structured dtypes (a descr list) are not supported");
      }
      absl::StatusOr<std::string_view> text_descr = p.String();
      if (!text_descr.ok()) return text_descr.status();
      absl::StatusOr<Descr> parsed = ParseDescr(name, value_at, *text_descr);
      if (!parsed.ok()) return parsed.status();
      descr = *parsed;
    } else if (*key == "fortran_order") {
      if (have_fortran) return duplicate();
      have_fortran = true;
      if (p.ConsumeWord("True")) {
        return absl::InvalidArgumentError(
            Err(name, value_at,
                "fortran_order True is not supported (save a C-order array: "
                "np.save(f, np.ascontiguousarray(a)))"));
      }
      if (!p.ConsumeWord("False")) return p.Expected("True or False");
    } else if (*key == "shape") {
      if (shape) return duplicate();
      absl::StatusOr<Shape> parsed = p.Tuple();
      if (!parsed.ok()) return parsed.status();
      shape = *std::move(parsed);
    } else {
      return absl::InvalidArgumentError(
          Err(name, key_at,
              absl::StrCat("unknown key '", std::string(*key),
                           "' (expected descr, fortran_order, shape)")));
    }
    p.SkipSpaces();
    need_comma = !p.Consume(',');
    p.SkipSpaces();
  }
  // After the dict: spaces and the final newline only.
  while (!p.at_end() && (p.peek() == ' ' || p.peek() == '\n' || p.peek() == '\t')) {
    p.Consume(p.peek());
  }
  if (!p.at_end()) return p.Expected("only padding (spaces, '\\n') after the header dict");
  if (!descr) return p.Error("the header dict has no 'descr'");
  if (!have_fortran) return p.Error("the header dict has no 'fortran_order'");
  if (!shape) return p.Error("the header dict has no 'shape'");
  return Header{*descr, *std::move(shape)};
}

uint32_t ReadLittle(const std::byte* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint32_t>(p[i]);
  return v;
}

}  // namespace

absl::StatusOr<TensorData> ParseNpy(std::span<const std::byte> bytes, std::string_view name) {
  const size_t size = bytes.size();
  if (size < kMagicSize || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    const size_t n = std::min(size, kMagicSize);
    size_t bad = 0;
    while (bad < n && bytes[bad] == static_cast<std::byte>(kMagic[bad])) ++bad;
    if (bad == n) {
      return absl::InvalidArgumentError(
          Err(name, size,
              absl::StrCat("truncated: the file has ", size,
                           " bytes, fewer than the 6-byte magic \\x93NUMPY")));
    }
    return absl::InvalidArgumentError(
        Err(name, bad, "bad magic: a .npy file starts with \\x93NUMPY"));
  }
  if (size < kMagicSize + 2) {
    return absl::InvalidArgumentError(Err(name, size, "truncated before the version bytes"));
  }
  const int major = static_cast<int>(bytes[6]);
  const int minor = static_cast<int>(bytes[7]);
  if (major < 1 || major > 3) {
    return absl::InvalidArgumentError(Err(name, 6,
                                          absl::StrCat("unsupported format version ", major, ".",
                                                       minor, " (kiln reads 1.0, 2.0 and 3.0)")));
  }
  if (minor != 0) {
    return absl::InvalidArgumentError(Err(name, 7,
                                          absl::StrCat("unsupported format version ", major, ".",
                                                       minor, " (kiln reads 1.0, 2.0 and 3.0)")));
  }
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + static_cast<size_t>(len_bytes);
  if (size < header_start) {
    return absl::InvalidArgumentError(Err(
        name, size,
        absl::StrCat("truncated: the ", len_bytes, "-byte header length at byte 8 is cut off")));
  }
  const size_t header_len = ReadLittle(bytes.data() + 8, len_bytes);
  if (header_len > size - header_start) {
    return absl::InvalidArgumentError(
        Err(name, 8,
            absl::StrCat("header length ", header_len, " runs past the end of the file (",
                         size - header_start, " bytes after the length field)")));
  }
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + header_start),
                                     header_len);
  absl::StatusOr<Header> header = ParseHeader(name, header_text, header_start);
  if (!header.ok()) return header.status();

  const DType dtype = header->descr.dtype;
  const uint64_t item = static_cast<uint64_t>(DTypeSize(dtype));
  // Elements x item size without overflow: the product of the non-zero dims is bounded first.
  uint64_t nonzero = 1;
  bool has_zero = false;
  for (int64_t d : header->shape) {
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, static_cast<uint64_t>(d), &nonzero) ||
        nonzero > (uint64_t{1} << 62) / item) {
      return absl::InvalidArgumentError(
          Err(name, header_start,
              absl::StrCat("shape ", ShapeToString(header->shape), " of ", DTypeName(dtype),
                           " overflows 2^62 bytes")));
    }
  }
  const uint64_t data_bytes = has_zero ? 0 : nonzero * item;
  const size_t data_start = header_start + header_len;
  const uint64_t available = size - data_start;
  if (data_bytes > available) {
    return absl::InvalidArgumentError(Err(
        name, size,
        absl::StrCat("truncated data: shape ", ShapeToString(header->shape), " of ",
                     DTypeName(dtype), " needs ", data_bytes, " bytes after the header (from byte ",
                     data_start, "), the file has ", available)));
  }
  if (data_bytes < available) {
    return absl::InvalidArgumentError(
        Err(name, data_start + data_bytes,
            absl::StrCat(available - data_bytes, " trailing bytes after the data of shape ",
                         ShapeToString(header->shape), " of ", DTypeName(dtype))));
  }

  TensorData tensor = TensorData::Uninitialized(dtype, header->shape);
  if (data_bytes > 0) std::memcpy(tensor.data(), bytes.data() + data_start, data_bytes);
  if (header->descr.big_endian && item > 1) {
    std::byte* p = tensor.data();
    for (uint64_t i = 0; i < data_bytes; i += item) std::reverse(p + i, p + i + item);
  }
  if (dtype == DType::kBool) {
    const std::byte* p = tensor.data();
    for (uint64_t i = 0; i < data_bytes; ++i) {
      if (static_cast<uint8_t>(p[i]) > 1) {
        return absl::InvalidArgumentError(
            Err(name, data_start + i,
                absl::StrCat("bool element ", i, " is ", static_cast<int>(p[i]),
                             " (a bool byte must be 0 or 1)")));
      }
    }
  }
  return tensor;
}

absl::StatusOr<TensorData> ReadNpy(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": npy: is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": npy: cannot open the file"));
  std::vector<char> buffer((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": npy: read error"));
  return ParseNpy(std::span(reinterpret_cast<const std::byte*>(buffer.data()), buffer.size()),
                  path);
}

absl::StatusOr<std::vector<std::byte>> EncodeNpy(const TensorData& tensor) {
  const char* code = nullptr;
  switch (tensor.dtype()) {
    case DType::kF32:
      code = "<f4";
      break;
    case DType::kF64:
      code = "<f8";
      break;
    case DType::kF16:
      code = "<f2";
      break;
    case DType::kI32:
      code = "<i4";
      break;
    case DType::kI64:
      code = "<i8";
      break;
    case DType::kU8:
      code = "|u1";
      break;
    case DType::kI8:
      code = "|i1";
      break;
    case DType::kI16:
      code = "<i2";
      break;
    case DType::kU16:
      code = "<u2";
      break;
    case DType::kU32:
      code = "<u4";
      break;
    case DType::kU64:
      code = "<u8";
      break;
    case DType::kBool:
      code = "|b1";
      break;
    case DType::kBF16:
      return absl::InvalidArgumentError(
          "npy: numpy has no bfloat16 dtype; cast the tensor to f32 before writing it");
  }
  if (tensor.rank() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: rank ", tensor.rank(), " exceeds numpy's limit of ", kMaxRank, " dims"));
  }
  // numpy 1.24's exact header: sorted keys, repr of the shape tuple, growth room, padding.
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape().size(); ++i) {
    if (i > 0) shape += ", ";
    absl::StrAppend(&shape, tensor.shape()[i]);
  }
  if (tensor.shape().size() == 1) shape += ",";
  shape += ")";
  std::string dict =
      absl::StrCat("{'descr': '", code, "', 'fortran_order': False, 'shape': ", shape, ", }");
  if (!tensor.shape().empty()) {
    const size_t digits = absl::StrCat(tensor.shape()[0]).size();
    dict.append(kGrowthAxisMaxDigits - std::min(digits, kGrowthAxisMaxDigits), ' ');
  }
  // Version 1.0 holds headers up to 65535 bytes; a shape of at most kMaxRank dims of up to 19
  // digits needs under 2 KB, so numpy's switch to version 2.0 never happens here.
  const size_t unpadded = kMagicSize + 2 + 2 + dict.size() + 1;
  const size_t header_len = dict.size() + 1 + (kArrayAlign - unpadded % kArrayAlign) % kArrayAlign;
  std::vector<std::byte> out;
  out.reserve(kMagicSize + 4 + header_len + static_cast<size_t>(tensor.size_bytes()));
  auto put = [&](const void* p, size_t n) {
    const std::byte* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  put(kMagic, kMagicSize);
  out.push_back(std::byte{1});  // version 1.0
  out.push_back(std::byte{0});
  out.push_back(static_cast<std::byte>(header_len & 0xFF));
  out.push_back(static_cast<std::byte>(header_len >> 8));
  put(dict.data(), dict.size());
  out.insert(out.end(), header_len - dict.size() - 1, std::byte{' '});
  out.push_back(std::byte{'\n'});
  const size_t payload =
      tensor.num_elements() == 0
          ? 0
          : static_cast<size_t>(tensor.num_elements() * DTypeSize(tensor.dtype()));
  put(tensor.data(), payload);
  return out;
}

absl::Status WriteNpy(const std::string& path, const TensorData& tensor) {
  absl::StatusOr<std::vector<std::byte>> bytes = EncodeNpy(tensor);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": npy: cannot create the file"));
  out.write(reinterpret_cast<const char*>(bytes->data()),
            static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": npy: write failed"));
  return absl::OkStatus();
}

}  // namespace kiln::ir
