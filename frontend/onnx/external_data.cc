// ONNX external data: locations, the files behind them (mapped once per import) and the bounds of
// each tensor's bytes.
//
// The bytes are copied out of the mapping into ir::TensorData: TensorData owns 64-byte-aligned
// storage with value semantics (constants, weights and realized values all share it), so it
// cannot borrow a mapping, and an offset in an ONNX data file is not even guaranteed to be
// aligned. Mapping still pays: a tensor costs one copy straight from the page cache, with no
// intermediate buffer, and bytes no tensor names are never read. The mappings live as long as the
// import (the source is the importer's), so the copy is the only thing that outlives it.
#include "frontend/onnx/external_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "frontend/onnx/import_internal.h"

namespace kiln::onnx::internal {
namespace {

// "w.bin", "./a//b.bin" → "a/b.bin": the components that name something.
std::string Normalize(const std::string& location) {
  std::string out;
  for (absl::string_view part : absl::StrSplit(location, '/')) {
    if (part.empty() || part == ".") continue;
    if (!out.empty()) out += '/';
    out.append(part.data(), part.size());
  }
  return out;
}

std::string Errno(int err) { return std::strerror(err); }

class Directory final : public ExternalDataSource {
 public:
  Directory(std::string folder, std::string model_file)
      : folder_(std::move(folder)), model_file_(std::move(model_file)) {}
  ~Directory() override {
    for (auto& [path, file] : files_) {
      if (file.mapped != nullptr) munmap(file.mapped, file.size);
    }
  }
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  absl::StatusOr<std::span<const std::byte>> File(const std::string& location) override {
    if (real_folder_.empty()) {
      char* real = realpath(folder_.c_str(), nullptr);
      if (real == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("cannot resolve the model's folder '", folder_, "': ", Errno(errno)));
      }
      real_folder_ = real;
      std::free(real);
      if (!model_file_.empty()) {
        if (char* model = realpath(model_file_.c_str(), nullptr); model != nullptr) {
          model_real_folder_ = model;
          std::free(model);
          model_real_folder_.resize(model_real_folder_.rfind('/'));
          if (model_real_folder_.empty()) model_real_folder_ = "/";
        }
      }
    }
    const std::string joined = absl::StrCat(real_folder_, "/", location);
    char* resolved = realpath(joined.c_str(), nullptr);
    if (resolved == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot open '", joined, "': ", Errno(errno)));
    }
    const std::string real = resolved;
    std::free(resolved);
    // The lexical checks already refused '..' and absolute paths; this catches symlinks.
    if (!Inside(real, real_folder_) &&
        (model_real_folder_.empty() || !Inside(real, model_real_folder_))) {
      std::string where = absl::StrCat("the model's folder '", real_folder_, "'");
      if (!model_real_folder_.empty() && model_real_folder_ != real_folder_) {
        absl::StrAppend(&where, " and the folder the model file lies in '", model_real_folder_,
                        "'");
      }
      return absl::PermissionDeniedError(absl::StrCat("resolves to '", real, "', outside ", where));
    }
    // Keyed by the resolved path: "w.bin" and "./w.bin" share one mapping.
    if (auto it = files_.find(real); it != files_.end()) return it->second.bytes();
    // O_NONBLOCK: opening a FIFO planted under the location must not hang the import.
    const int fd = open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return absl::NotFoundError(absl::StrCat("cannot open '", real, "': ", Errno(errno)));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat("'", real, "' is not a regular file"));
    }
    Mapped file;
    file.size = static_cast<size_t>(st.st_size);
    if (file.size > 0) {
      void* p = mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        file.mapped = p;
      } else {  // e.g. a file system without mmap: read it instead
        file.copy.resize(file.size);
        size_t done = 0;
        while (done < file.size) {
          ssize_t n =
              pread(fd, file.copy.data() + done, file.size - done, static_cast<off_t>(done));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            close(fd);
            return absl::DataLossError(absl::StrCat("read error in '", real, "' at byte ", done));
          }
          done += static_cast<size_t>(n);
        }
      }
    }
    close(fd);
    auto [it, inserted] = files_.emplace(real, std::move(file));
    return it->second.bytes();
  }

 private:
  struct Mapped {
    void* mapped = nullptr;
    size_t size = 0;
    std::vector<std::byte> copy;
    std::span<const std::byte> bytes() const {
      if (mapped != nullptr) return {static_cast<const std::byte*>(mapped), size};
      return {copy.data(), copy.size()};
    }
  };
  static bool Inside(const std::string& path, const std::string& folder) {
    const std::string prefix = folder == "/" ? "/" : folder + "/";
    return path.compare(0, prefix.size(), prefix) == 0;
  }

  std::string folder_;
  std::string model_file_;
  std::string real_folder_;
  // The folder the model file resolves to (empty without a model file).
  std::string model_real_folder_;
  std::map<std::string, Mapped> files_;
};

class Memory final : public ExternalDataSource {
 public:
  explicit Memory(const std::map<std::string, std::string_view>& files) {
    for (const auto& [location, bytes] : files) files_[Normalize(location)] = bytes;
  }
  absl::StatusOr<std::span<const std::byte>> File(const std::string& location) override {
    auto it = files_.find(Normalize(location));
    if (it == files_.end()) {
      return absl::NotFoundError("not among ImportOptions::external_data_files");
    }
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(it->second.data()),
                                      it->second.size());
  }

 private:
  std::map<std::string, std::string_view> files_;
};

// A non-negative decimal integer (what onnx.external_data_helper writes), or nullopt.
std::optional<uint64_t> ParseSize(const std::string& s) {
  uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

absl::Status Invalid(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

absl::Status InlineAttributes(::onnx::GraphProto& graph, ExternalDataSource* source);

bool IsExternal(const ::onnx::TensorProto& t) {
  return t.data_location() == ::onnx::TensorProto::EXTERNAL;
}

// Inlines one attribute tensor in place: decoded with every check of an initializer, then
// stored back as raw_data (the decoded bytes are the raw little-endian layout).
absl::Status Inline(::onnx::TensorProto& t, const std::string& what, ExternalDataSource* source) {
  absl::StatusOr<ir::TensorData> data = TensorFromProto(t, what, source);
  if (!data.ok()) return data.status();
  t.clear_external_data();
  t.clear_data_location();
  t.set_raw_data(reinterpret_cast<const char*>(data->data()),
                 static_cast<size_t>(data->size_bytes()));
  return absl::OkStatus();
}

bool AttributeHasExternal(const ::onnx::AttributeProto& a) {
  if (a.has_t() && IsExternal(a.t())) return true;
  for (const auto& t : a.tensors()) {
    if (IsExternal(t)) return true;
  }
  if (a.has_g() && HasExternalAttributeTensors(a.g())) return true;
  for (const auto& g : a.graphs()) {
    if (HasExternalAttributeTensors(g)) return true;
  }
  return false;
}

absl::Status InlineAttributes(::onnx::GraphProto& graph, ExternalDataSource* source) {
  for (int i = 0; i < graph.node_size(); ++i) {
    ::onnx::NodeProto& node = *graph.mutable_node(i);
    for (auto& a : *node.mutable_attribute()) {
      if (!AttributeHasExternal(a)) continue;
      const std::string what = absl::StrCat(Describe(node, i), ": attribute '", a.name(), "'");
      if (a.has_t() && IsExternal(a.t())) {
        if (absl::Status s = Inline(*a.mutable_t(), what, source); !s.ok()) return s;
      }
      for (int k = 0; k < a.tensors_size(); ++k) {
        if (!IsExternal(a.tensors(k))) continue;
        if (absl::Status s =
                Inline(*a.mutable_tensors(k), absl::StrCat(what, " tensor ", k), source);
            !s.ok()) {
          return s;
        }
      }
      if (a.has_g()) {
        if (absl::Status s = InlineAttributes(*a.mutable_g(), source); !s.ok()) return s;
      }
      for (auto& g : *a.mutable_graphs()) {
        if (absl::Status s = InlineAttributes(g, source); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<ExternalDataSource> DirectorySource(std::string folder, std::string model_file) {
  return std::make_unique<Directory>(std::move(folder), std::move(model_file));
}

std::unique_ptr<ExternalDataSource> MemorySource(
    const std::map<std::string, std::string_view>& files) {
  return std::make_unique<Memory>(files);
}

std::unique_ptr<ExternalDataSource> SourceFor(const ImportOptions& options) {
  if (!options.external_data_files.empty()) return MemorySource(options.external_data_files);
  if (!options.external_data_dir.empty()) return DirectorySource(options.external_data_dir);
  return nullptr;
}

absl::StatusOr<std::span<const std::byte>> ExternalTensorBytes(const ::onnx::TensorProto& proto,
                                                               int64_t expected_size,
                                                               const std::string& elements,
                                                               const std::string& what,
                                                               ExternalDataSource* source) {
  std::optional<std::string> location, offset_text, length_text;
  for (const auto& entry : proto.external_data()) {
    std::optional<std::string>* slot = entry.key() == "location" ? &location
                                       : entry.key() == "offset" ? &offset_text
                                       : entry.key() == "length" ? &length_text
                                                                 : nullptr;
    if (slot == nullptr) continue;  // checksum, basepath, ...: not needed to read the bytes
    if (slot->has_value()) {
      return Invalid(what, absl::StrCat("external data key '", entry.key(), "' is given twice"));
    }
    *slot = entry.value();
  }
  if (!location.has_value() || location->empty()) {
    return Invalid(what, "data_location is EXTERNAL, but external_data has no 'location'");
  }
  const std::string at = absl::StrCat("external data location '", *location, "'");
  if (location->find('\0') != std::string::npos) return Invalid(what, at + " holds a NUL byte");
  if ((*location)[0] == '/' || (*location)[0] == '\\' ||
      (location->size() > 1 && std::isalpha(static_cast<unsigned char>((*location)[0])) &&
       (*location)[1] == ':')) {
    return Invalid(what, absl::StrCat(at,
                                      " is an absolute path; locations are relative to the "
                                      "model's folder"));
  }
  // Backslashes count as separators too: a model written on Windows means "..\\w.bin" as '..'.
  for (absl::string_view part : absl::StrSplit(*location, absl::ByAnyChar("/\\"))) {
    if (part == "..") {
      return Invalid(what, absl::StrCat(at,
                                        " has a '..' component; locations must stay inside the "
                                        "model's folder"));
    }
  }
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  if (offset_text.has_value()) {
    std::optional<uint64_t> v = ParseSize(*offset_text);
    if (!v) {
      return Invalid(
          what, absl::StrCat(at, ": offset '", *offset_text, "' is not a non-negative integer"));
    }
    offset = *v;
  }
  if (length_text.has_value()) {
    length = ParseSize(*length_text);
    if (!length) {
      return Invalid(
          what, absl::StrCat(at, ": length '", *length_text, "' is not a non-negative integer"));
    }
    if (*length != static_cast<uint64_t>(expected_size)) {
      return Invalid(what, absl::StrCat(at, ": length ", *length, " at offset ", offset, ", but ",
                                        elements, " need ", expected_size, " bytes"));
    }
  }
  if (source == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": stored as external data (location '", *location,
        "'), but the model came as bytes, with no folder to read it from: use ImportFile, or set "
        "ImportOptions::external_data_dir (or external_data_files)"));
  }
  absl::StatusOr<std::span<const std::byte>> file = source->File(*location);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat(what, ": ", at, ": ", file.status().message()));
  }
  const uint64_t size = file->size();
  if (offset > size) {
    return Invalid(what, absl::StrCat(at, ": offset ", offset, " is past the end of the file (",
                                      size, " bytes)"));
  }
  if (length.has_value()) {
    if (*length > size - offset) {  // (no overflow: offset <= size)
      return Invalid(what, absl::StrCat(at, ": offset ", offset, " + length ", *length,
                                        " is past the end of the file (", size, " bytes)"));
    }
  } else if (size - offset != static_cast<uint64_t>(expected_size)) {
    return Invalid(
        what, absl::StrCat(at, ": no length given, and the ", size - offset, " bytes from offset ",
                           offset, " to the end of the file are not the ", expected_size, " that ",
                           elements, " need"));
  }
  return file->subspan(static_cast<size_t>(offset), static_cast<size_t>(expected_size));
}

bool HasExternalAttributeTensors(const ::onnx::GraphProto& graph) {
  for (const auto& node : graph.node()) {
    for (const auto& a : node.attribute()) {
      if (AttributeHasExternal(a)) return true;
    }
  }
  return false;
}

absl::Status InlineExternalAttributeTensors(::onnx::GraphProto& graph, ExternalDataSource* source) {
  return InlineAttributes(graph, source);
}

}  // namespace kiln::onnx::internal
