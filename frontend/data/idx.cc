#include "frontend/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "frontend/error.h"

namespace kiln::data {
namespace {

absl::Status IdxError(std::string_view name, const std::string& message) {
  return absl::InvalidArgumentError(std::string(name) + ": idx: " + message);
}

uint32_t ReadBigEndian32(const std::byte* p) {
  return (uint32_t{std::to_integer<uint8_t>(p[0])} << 24) |
         (uint32_t{std::to_integer<uint8_t>(p[1])} << 16) |
         (uint32_t{std::to_integer<uint8_t>(p[2])} << 8) | uint32_t{std::to_integer<uint8_t>(p[3])};
}

struct IdxType {
  uint8_t code;
  const char* name;
  int64_t file_size;  // bytes per element in the file
  ir::DType dtype;    // what kiln stores
};

constexpr IdxType kIdxTypes[] = {
    {0x08, "u8", 1, ir::DType::kU8},   {0x09, "i8", 1, ir::DType::kI32},
    {0x0B, "i16", 2, ir::DType::kI32}, {0x0C, "i32", 4, ir::DType::kI32},
    {0x0D, "f32", 4, ir::DType::kF32}, {0x0E, "f64", 8, ir::DType::kF64},
};

// Copies `count` big-endian elements of `type` into `out` (kiln's dtype, little-endian host).
void DecodeElements(const IdxType& type, const std::byte* in, int64_t count, std::byte* out) {
  const auto* src = reinterpret_cast<const uint8_t*>(in);
  switch (type.code) {
    case 0x08:
      std::memcpy(out, in, static_cast<size_t>(count));
      return;
    case 0x09: {
      auto* dst = reinterpret_cast<int32_t*>(out);
      for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<int8_t>(src[i]);
      return;
    }
    case 0x0B: {
      auto* dst = reinterpret_cast<int32_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        dst[i] = static_cast<int16_t>(static_cast<uint16_t>((src[2 * i] << 8) | src[2 * i + 1]));
      }
      return;
    }
    case 0x0C:
    case 0x0D: {
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t v = ReadBigEndian32(in + 4 * i);
        std::memcpy(out + 4 * i, &v, 4);
      }
      return;
    }
    case 0x0E: {
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t v =
            (uint64_t{ReadBigEndian32(in + 8 * i)} << 32) | ReadBigEndian32(in + 8 * i + 4);
        std::memcpy(out + 8 * i, &v, 8);
      }
      return;
    }
  }
}

}  // namespace

bool IsGzip(std::span<const std::byte> bytes) {
  return bytes.size() >= 2 && bytes[0] == std::byte{0x1f} && bytes[1] == std::byte{0x8b};
}

absl::StatusOr<std::vector<std::byte>> Gunzip(std::span<const std::byte> bytes,
                                              std::string_view name_view, const IdxLimits& limits) {
  // Debian's abseil has its own string_view, which StrCat takes; std::string works with both.
  const std::string name(name_view);
  z_stream stream{};
  // 16 + MAX_WBITS: a gzip header and trailer (checked CRC-32 and length).
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError(absl::StrCat(name, ": gzip: zlib failed to initialise"));
  }
  std::vector<std::byte> out;
  out.resize(std::min<size_t>(std::max<size_t>(bytes.size() * 4, 4096),
                              static_cast<size_t>(limits.max_decompressed_bytes)));
  // zlib's avail_in is 32 bits: feed large inputs in pieces.
  size_t consumed = 0;
  int rc = Z_OK;
  while (true) {
    if (stream.avail_in == 0 && consumed < bytes.size()) {
      const size_t piece = std::min<size_t>(bytes.size() - consumed, 1u << 30);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(bytes.data() + consumed));
      stream.avail_in = static_cast<uInt>(piece);
      consumed += piece;
    }
    if (stream.total_out == out.size()) {
      if (out.size() >= static_cast<size_t>(limits.max_decompressed_bytes)) {
        inflateEnd(&stream);
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": gzip: inflates to more than ", limits.max_decompressed_bytes,
                         " bytes (the limit) at compressed byte ", stream.total_in));
      }
      out.resize(
          std::min<size_t>(out.size() * 2, static_cast<size_t>(limits.max_decompressed_bytes)));
    }
    const size_t room = std::min<size_t>(out.size() - stream.total_out, 1u << 30);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + stream.total_out);
    stream.avail_out = static_cast<uInt>(room);
    rc = inflate(&stream, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && stream.avail_in == 0 && consumed == bytes.size()) {
      const auto at = stream.total_in;
      inflateEnd(&stream);
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": gzip: truncated stream: input ends at compressed byte ", at, " of ",
                       bytes.size(), " before the end of the compressed data"));
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const auto at = stream.total_in;
      const std::string message = stream.msg != nullptr ? stream.msg : "error";
      inflateEnd(&stream);
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": gzip: corrupt data (", message, ") at compressed byte ", at));
    }
  }
  // Bytes after the gzip trailer: a second member (concatenated gzip, which dataset files do
  // not use) or garbage; either way not silently ignored.
  const size_t used = consumed - stream.avail_in;
  inflateEnd(&stream);
  if (used != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": gzip: ", bytes.size() - used, " bytes after the end of the gzip stream, from ",
        "compressed byte ", used, " (concatenated gzip members are not supported)"));
  }
  out.resize(stream.total_out);
  return out;
}

absl::StatusOr<ir::TensorData> ParseIdx(std::span<const std::byte> bytes, std::string_view name,
                                        const IdxLimits& limits) {
  const auto size = static_cast<int64_t>(bytes.size());
  if (size < 4) {
    return IdxError(name, absl::StrCat("truncated header: the file has ", size,
                                       " bytes, the 4-byte magic needs 4 (at byte 0)"));
  }
  const auto u8 = [&](int64_t i) { return std::to_integer<uint8_t>(bytes[i]); };
  if (u8(0) != 0 || u8(1) != 0) {
    return IdxError(
        name,
        absl::StrCat("bad magic at byte 0: the first two bytes must be 00 00; "
                     "got ",
                     absl::Hex(u8(0), absl::kZeroPad2), " ", absl::Hex(u8(1), absl::kZeroPad2),
                     IsGzip(bytes) ? " (a gzip file: use ParseIdxMaybeGzip)" : ""));
  }
  const IdxType* type = nullptr;
  for (const IdxType& t : kIdxTypes) {
    if (t.code == u8(2)) type = &t;
  }
  if (type == nullptr) {
    return IdxError(name,
                    absl::StrCat("unknown element type code 0x", absl::Hex(u8(2), absl::kZeroPad2),
                                 " at byte 2 (expected 08, 09, 0B, 0C, 0D or 0E)"));
  }
  const int rank = u8(3);
  if (rank < 1 || rank > limits.max_rank) {
    return IdxError(name, absl::StrCat("bad number of dims ", rank, " at byte 3 (expected 1..",
                                       limits.max_rank, ")"));
  }
  const int64_t header = 4 + 4 * int64_t{rank};
  if (size < header) {
    return IdxError(name, absl::StrCat("truncated header: ", rank, " dims need ", header,
                                       " header bytes, the file ends at byte ", size));
  }
  ir::Shape shape(static_cast<size_t>(rank));
  // Dims are < 2^32. The running element count is checked against the data bytes the file
  // really has after each dim, so a file too small for its dims is reported (naming the dim)
  // before the product can overflow; __builtin_mul_overflow guards the zero-dim case too.
  int64_t count = 1;
  // With a zero dim the count stays 0 whatever follows, but the other dims still make strides:
  // their product (nonzero) must fit in 62 bits, or stride arithmetic elsewhere overflows.
  int64_t nonzero = 1;
  bool zero = false;
  for (int d = 0; d < rank; ++d) {
    const int64_t offset = 4 + 4 * int64_t{d};
    const int64_t dim = ReadBigEndian32(bytes.data() + offset);
    shape[static_cast<size_t>(d)] = dim;
    if (dim == 0) zero = true;
    if (dim != 0 &&
        (__builtin_mul_overflow(nonzero, dim, &nonzero) || nonzero > (int64_t{1} << 62))) {
      return IdxError(name, absl::StrCat("the product of the dims overflows 62 bits at dim ", d,
                                         " = ", dim, " (byte ", offset, ")"));
    }
    int64_t next = 0;
    if (__builtin_mul_overflow(count, dim, &next) ||
        (!zero && next > (size - header) / type->file_size)) {
      return IdxError(
          name, absl::StrCat("truncated data or bad dims: dims ",
                             ir::ShapeToString(ir::Shape(shape.begin(), shape.begin() + d + 1)),
                             " of ", type->name, " (dim ", d, " = ", dim, " at byte ", offset,
                             ") need more than the ", size - header, " data bytes after the ",
                             header, "-byte header (the file ends at byte ", size, ")"));
    }
    count = next;
  }
  const int64_t data_bytes = count * type->file_size;
  // The dims check above makes data_bytes <= size - header: only trailing bytes are left.
  if (size - header != data_bytes) {
    return IdxError(
        name, absl::StrCat(size - header - data_bytes, " trailing bytes after the data, from byte ",
                           header + data_bytes, " (shape ", ir::ShapeToString(shape), " of ",
                           type->name, ")"));
  }
  ir::TensorData data = ir::TensorData::Uninitialized(type->dtype, shape);
  DecodeElements(*type, bytes.data() + header, count, data.data());
  return data;
}

absl::StatusOr<ir::TensorData> ParseIdxMaybeGzip(std::span<const std::byte> bytes,
                                                 std::string_view name, const IdxLimits& limits) {
  if (!IsGzip(bytes)) return ParseIdx(bytes, name, limits);
  absl::StatusOr<std::vector<std::byte>> raw = Gunzip(bytes, name, limits);
  if (!raw.ok()) return raw.status();
  // Offsets in ParseIdx's errors are then into the decompressed bytes.
  return ParseIdx(*raw, std::string(name) + " (decompressed)", limits);
}

absl::StatusOr<std::vector<std::byte>> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::InternalError(absl::StrCat("cannot read the size of '", path, "'"));
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    return absl::InternalError(absl::StrCat("failed to read '", path, "'"));
  }
  return bytes;
}

ir::TensorData read_idx(const std::string& path, std::source_location loc) {
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) kiln::detail::ThrowStatus(bytes.status(), loc);
  absl::StatusOr<ir::TensorData> data = ParseIdxMaybeGzip(*bytes, path);
  if (!data.ok()) kiln::detail::ThrowStatus(data.status(), loc);
  return *std::move(data);
}

absl::StatusOr<std::vector<std::byte>> EncodeIdx(const ir::TensorData& data) {
  uint8_t code = 0;
  int64_t element = 0;
  switch (data.dtype()) {
    case ir::DType::kU8:
      code = 0x08, element = 1;
      break;
    case ir::DType::kI32:
      code = 0x0C, element = 4;
      break;
    case ir::DType::kF32:
      code = 0x0D, element = 4;
      break;
    case ir::DType::kF64:
      code = 0x0E, element = 8;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "EncodeIdx: IDX has no ", ir::DTypeName(data.dtype()), " (u8, i32, f32, f64 only)"));
  }
  if (data.rank() < 1 || data.rank() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeIdx: rank ", data.rank(), " (IDX needs 1..255)"));
  }
  std::vector<std::byte> out;
  out.reserve(static_cast<size_t>(4 + 4 * data.rank() + data.size_bytes()));
  const auto put = [&](uint8_t b) { out.push_back(std::byte{b}); };
  put(0), put(0), put(code), put(static_cast<uint8_t>(data.rank()));
  for (int64_t d : data.shape()) {
    if (d > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("EncodeIdx: dim ", d, " exceeds 2^32 - 1"));
    }
    for (int s = 24; s >= 0; s -= 8) put(static_cast<uint8_t>(d >> s));
  }
  const auto* src = reinterpret_cast<const uint8_t*>(data.data());
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    for (int64_t b = element - 1; b >= 0; --b) put(src[i * element + b]);  // to big-endian
  }
  return out;
}

}  // namespace kiln::data
