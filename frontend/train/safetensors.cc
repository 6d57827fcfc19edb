#include "frontend/train/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kiln::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "kiln: safetensors data is little-endian; big-endian hosts need byte swapping");

using Json = nlohmann::json;

constexpr std::pair<ir::DType, const char*> kDTypeNames[] = {
    {ir::DType::kF32, "F32"},   {ir::DType::kF64, "F64"},   {ir::DType::kF16, "F16"},
    {ir::DType::kBF16, "BF16"}, {ir::DType::kI32, "I32"},   {ir::DType::kI64, "I64"},
    {ir::DType::kU8, "U8"},     {ir::DType::kBool, "BOOL"}, {ir::DType::kI8, "I8"},
    {ir::DType::kI16, "I16"},   {ir::DType::kU16, "U16"},   {ir::DType::kU32, "U32"},
    {ir::DType::kU64, "U64"},
};

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr int kMaxHeaderDepth = 3;

// Errors name the source, the tensor (when there is one) and a byte offset in the file.
absl::Status HeaderError(const std::string& source, uint64_t byte, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": safetensors: ", message, " (at byte ", byte, ")"));
}

// Where a tensor's entry starts in the file: the first occurrence of its quoted name in the
// header text (names with JSON escapes fall back to the header's start).
uint64_t EntryOffset(std::string_view header, const std::string& name) {
  const size_t pos = header.find(absl::StrCat("\"", name, "\""));
  return 8 + (pos == std::string_view::npos ? 0 : pos);
}

absl::Status TensorError(const std::string& source, std::string_view header,
                         const std::string& name, const std::string& message,
                         std::optional<uint64_t> byte = {}) {
  return HeaderError(source, byte ? *byte : EntryOffset(header, name),
                     absl::StrCat("tensor '", name, "': ", message));
}

struct Entry {
  std::string name;
  ir::DType dtype;
  ir::Shape shape;
  uint64_t begin;
  uint64_t end;
};

// A non-negative integer that fits int64 (safetensors' shapes and offsets are JSON integers).
std::optional<uint64_t> AsIndex(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return v;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return std::nullopt;
    return static_cast<uint64_t>(v);
  }
  return std::nullopt;
}

absl::StatusOr<Entry> ParseEntry(const std::string& source, std::string_view header,
                                 const std::string& name, const Json& value) {
  if (!value.is_object()) {
    return TensorError(source, header, name, "entry is not a JSON object");
  }
  for (const auto& [key, unused] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return TensorError(source, header, name, absl::StrCat("unknown field '", key, "'"));
    }
  }
  Entry entry;
  entry.name = name;
  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    return TensorError(source, header, name, "missing or non-string \"dtype\"");
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  const std::optional<ir::DType> dtype = ParseSafetensorsDType(dtype_name);
  if (!dtype) {
    return TensorError(source, header, name,
                       absl::StrCat("unsupported dtype '", dtype_name,
                                    "' (kiln reads F32 F64 F16 BF16 I32 I64 U8 BOOL)"));
  }
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) {
    return TensorError(source, header, name, "missing or non-array \"shape\"");
  }
  uint64_t elements = 1;
  bool overflow = false;
  for (const Json& dim : *shape_it) {
    const std::optional<uint64_t> d = AsIndex(dim);
    if (!d) {
      return TensorError(
          source, header, name,
          absl::StrCat("shape entry ", dim.dump(), " is not a non-negative integer"));
    }
    entry.shape.push_back(static_cast<int64_t>(*d));
    // Every running product must fit int64: ir::NumElements multiplies left to right in int64, so
    // [2^62, 2, 0] (zero elements) would still overflow there.
    uint64_t product = 0;
    if (__builtin_mul_overflow(elements, *d, &product) ||
        product > static_cast<uint64_t>(INT64_MAX)) {
      overflow = true;
    }
    elements = product;
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return TensorError(source, header, name, "\"data_offsets\" must be an array [begin, end]");
  }
  const std::optional<uint64_t> begin = AsIndex((*offsets_it)[0]);
  const std::optional<uint64_t> end = AsIndex((*offsets_it)[1]);
  if (!begin || !end) {
    return TensorError(
        source, header, name,
        absl::StrCat("data_offsets ", offsets_it->dump(), " are not non-negative integers"));
  }
  if (*end < *begin) {
    return TensorError(source, header, name,
                       absl::StrCat("data_offsets ", offsets_it->dump(), " end before they begin"));
  }
  entry.begin = *begin;
  entry.end = *end;
  const uint64_t elem_size = static_cast<uint64_t>(ir::DTypeSize(entry.dtype));
  uint64_t expected = 0;
  if (overflow || __builtin_mul_overflow(elements, elem_size, &expected) ||
      expected > static_cast<uint64_t>(INT64_MAX)) {
    return TensorError(source, header, name,
                       absl::StrCat("shape ", shape_it->dump(), " overflows 64 bits of bytes"));
  }
  if (expected != entry.end - entry.begin) {
    return TensorError(source, header, name,
                       absl::StrCat("shape ", ir::ShapeToString(entry.shape), " of ", dtype_name,
                                    " needs ", expected, " bytes but data_offsets [", entry.begin,
                                    ", ", entry.end, "] hold ", entry.end - entry.begin));
  }
  return entry;
}

// The atomic-write failure hook (tests only).
std::function<absl::Status(std::string_view)>& FailureHook() {
  static std::function<absl::Status(std::string_view)> hook;
  return hook;
}

absl::Status Step(std::string_view step) {
  if (FailureHook()) return FailureHook()(step);
  return absl::OkStatus();
}

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

const char* SafetensorsDTypeName(ir::DType dtype) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  return "?";
}

std::optional<ir::DType> ParseSafetensorsDType(std::string_view name) {
  for (const auto& [d, n] : kDTypeNames) {
    if (name == n) return d;
  }
  return std::nullopt;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes,
                                                 std::string_view source_name) {
  const std::string source(source_name);
  if (bytes.size() < 8) {
    return HeaderError(
        source, 0,
        absl::StrCat("file is ", bytes.size(), " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const uint64_t available = bytes.size() - 8;
  if (header_len > available) {
    return HeaderError(source, 0,
                       absl::StrCat("header length ", header_len, " exceeds the ", available,
                                    " bytes after the length prefix"));
  }
  if (header_len > kMaxSafetensorsHeader) {
    return HeaderError(source, 0,
                       absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                    kMaxSafetensorsHeader, " bytes"));
  }
  if (header_len < 2) {
    return HeaderError(source, 0, absl::StrCat("header length ", header_len, " is too short"));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  if (header.front() != '{') {
    return HeaderError(source, 8, "header does not start with '{'");
  }

  // A valid header nests 3 levels deep ({name: {"shape": [...]}}); refusing deeper input before
  // parsing bounds the parser's work and stack whatever the JSON library does with deep nesting.
  {
    int depth = 0;
    bool in_string = false;
    bool escaped = false;
    for (size_t i = 0; i < header.size(); ++i) {
      const char c = header[i];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        if (++depth > kMaxHeaderDepth) {
          return HeaderError(source, 8 + i,
                             absl::StrCat("header nests deeper than ", kMaxHeaderDepth,
                                          " levels (a valid header never does)"));
        }
      } else if (c == '}' || c == ']') {
        --depth;
      }
    }
  }

  // Duplicate names: nlohmann keeps the last value of a repeated key, so the parse callback
  // records the top-level keys as they go by.
  std::set<std::string> seen;
  std::optional<std::string> duplicate;
  Json root;
  try {
    root = Json::parse(
        header.begin(), header.end(),
        [&](int depth, Json::parse_event_t event, Json& parsed) {
          if (depth == 1 && event == Json::parse_event_t::key && !duplicate) {
            const std::string key = parsed.get<std::string>();
            if (!seen.insert(key).second) duplicate = key;
          }
          return true;
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::parse_error& e) {
    // e.byte counts from 1 within the header.
    return HeaderError(source, 8 + (e.byte > 0 ? e.byte - 1 : 0),
                       absl::StrCat("header is not valid JSON: ", e.what()));
  } catch (const Json::exception& e) {
    return HeaderError(source, 8, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return HeaderError(source, 8, "header is not a JSON object");
  }
  if (duplicate) {
    return TensorError(source, header, *duplicate, "name appears twice in the header");
  }

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        return HeaderError(source, EntryOffset(header, name),
                           "\"__metadata__\" is not a JSON object");
      }
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) {
          return HeaderError(source, EntryOffset(header, key),
                             absl::StrCat("\"__metadata__\" entry '", key,
                                          "' is not a string (the format allows strings only)"));
        }
        file.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    if (name.empty()) return HeaderError(source, 8, "a tensor has an empty name");
    absl::StatusOr<Entry> entry = ParseEntry(source, header, name, value);
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }

  // The data section must be tiled exactly: sorted by begin, each tensor starts where the
  // previous one ended, the first at 0 and the last ends at the end of the file.
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = available - header_len;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.end > data_size) {
      return TensorError(source, header, e.name,
                         absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                      "] run past the end of the data (", data_size, " bytes)"),
                         data_start + e.begin);
    }
    if (e.begin < cursor) {
      return TensorError(source, header, e.name,
                         absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                      "] overlap the previous tensor, which ends at ", cursor),
                         data_start + e.begin);
    }
    if (e.begin > cursor) {
      return TensorError(source, header, e.name,
                         absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                      "] leave a gap: the previous tensor ends at ", cursor),
                         data_start + cursor);
    }
    cursor = e.end;
  }
  if (cursor != data_size) {
    return HeaderError(
        source, data_start + cursor,
        absl::StrCat(data_size - cursor, " trailing bytes after the last tensor are not indexed"));
  }

  for (const Entry& e : entries) {
    const std::byte* src = bytes.data() + data_start + e.begin;
    if (e.dtype == ir::DType::kBool) {
      for (uint64_t i = 0; i < e.end - e.begin; ++i) {
        if (src[i] != std::byte{0} && src[i] != std::byte{1}) {
          return TensorError(source, header, e.name,
                             absl::StrCat("BOOL element ", i, " is ", std::to_integer<int>(src[i]),
                                          ", not 0 or 1"),
                             data_start + e.begin + i);
        }
      }
    }
    ir::TensorData data = ir::TensorData::Uninitialized(e.dtype, e.shape);
    if (e.end > e.begin) std::memcpy(data.data(), src, e.end - e.begin);
    file.tensors.emplace(e.name, std::move(data));
  }
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  // Memory-mapped: the parser copies each tensor once, from the page cache into its TensorData,
  // instead of reading the whole file into a buffer first (a model of gigabytes would need
  // twice its size in memory).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const absl::Status status = Errno("cannot stat", path);
    ::close(fd);
    return status;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {  // mmap refuses length 0; the parser reports the empty file
    ::close(fd);
    return ParseSafetensors({}, path);
  }
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (mapped == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("cannot memory-map ", path, ": ", std::strerror(map_errno)));
  }
  absl::StatusOr<SafetensorsFile> file =
      ParseSafetensors(std::span(static_cast<const std::byte*>(mapped), size), path);
  ::munmap(mapped, size);
  return file;
}

absl::StatusOr<std::string> SerializeSafetensors(const SafetensorsFile& file) {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const auto& [name, data] : file.tensors) {
    if (name.empty() || name == kMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: invalid tensor name '", name, "'"));
    }
    const uint64_t size = static_cast<uint64_t>(data.size_bytes());
    header[name] = {{"dtype", SafetensorsDTypeName(data.dtype())},
                    {"shape", data.shape()},
                    {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  if (!file.metadata.empty()) header[std::string(kMetadataKey)] = file.metadata;
  std::string text = header.dump();
  // Pad so the data starts at a multiple of 8 bytes (the reference writer does the same).
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t len = text.size();
  out.append(reinterpret_cast<const char*>(&len), 8);
  out += text;
  for (const auto& [name, data] : file.tensors) {
    out.append(reinterpret_cast<const char*>(data.data()), static_cast<size_t>(data.size_bytes()));
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const SafetensorsFile& file) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(path, *bytes);
}

void SetAtomicWriteFailureHookForTesting(std::function<absl::Status(std::string_view)> hook) {
  FailureHook() = std::move(hook);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(dir, "/.", base, ".tmp.", getpid(), ".", counter++);

  absl::Status status = Step("open");
  if (!status.ok()) return status;
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create temporary file", temp);
  auto fail = [&](absl::Status s) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    return s;
  };

  if (status = Step("write"); !status.ok()) return fail(status);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(Errno("write failed for", temp));
    }
    written += static_cast<size_t>(n);
  }
  if (status = Step("fsync"); !status.ok()) return fail(status);
  if (::fsync(fd) != 0) return fail(Errno("fsync failed for", temp));
  if (::close(fd) != 0) {
    fd = -1;
    return fail(Errno("close failed for", temp));
  }
  fd = -1;
  if (status = Step("rename"); !status.ok()) return fail(status);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return fail(Errno(absl::StrCat("cannot rename ", temp, " to"), path));
  }
  // The rename is durable only once the directory entry is on disk.
  if (status = Step("fsync_dir"); !status.ok()) return status;
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(dir_fd);
  ::close(dir_fd);
  if (rc != 0) return Errno("fsync failed for directory", dir);
  return absl::OkStatus();
}

}  // namespace kiln::train
