// ONNX external data (onnx/docs/ExternalData.md): a TensorProto with data_location EXTERNAL keeps
// its bytes in a file next to the model, named by its external_data entries `location` (relative
// to the model's folder), `offset` (default 0) and `length` (default: to the end of the file).
// Internal to the importer (includes the ONNX protobuf headers).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "frontend/onnx/import.h"
#include "ir/dtype.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx::internal {

/// The files an import reads external tensors from. A file is opened once per import and shared by
/// every tensor stored in it; its bytes stay valid for the source's lifetime.
class ExternalDataSource {
 public:
  virtual ~ExternalDataSource() = default;
  /// The contents of the file at `location`, which ExternalTensorBytes has already checked to be a
  /// relative path without '..' components. Errors say why the file cannot be read (they do not
  /// name the tensor: the caller adds it).
  virtual absl::StatusOr<std::span<const std::byte>> File(const std::string& location) = 0;
};

/// Files under a folder on disk, memory-mapped read-only on first use (read into memory where
/// mmap is refused). A location whose resolved path (symlinks followed) is outside the folder,
/// or that is not a regular file, is refused. With `model_file` (the model's path), a resolved
/// path inside the folder that the model file itself resolves to is accepted too: a model that is
/// a symlink (Bazel runfiles, the Hugging Face cache) finds its data where the model really lies.
std::unique_ptr<ExternalDataSource> DirectorySource(std::string folder,
                                                    std::string model_file = "");

/// Files held in memory by the caller, by location (ImportOptions::external_data_files).
/// Locations match after dropping empty and "." components ("./w.bin" is "w.bin").
std::unique_ptr<ExternalDataSource> MemorySource(
    const std::map<std::string, std::string_view>& files);

/// The source ImportOptions ask for: external_data_files when given, else external_data_dir when
/// set, else none (nullptr: external tensors are then an error).
std::unique_ptr<ExternalDataSource> SourceFor(const ImportOptions& options);

/// The bytes of an EXTERNAL tensor: its external_data entries parsed (unknown keys such as
/// `checksum` are ignored), its location checked (not empty, not absolute, no '..' component),
/// the declared length checked against `expected_size` bytes (at most 2^34) that `elements`
/// ("16 elements of f32") need, the file
/// read through `source` and offset/length bounds-checked against its size. Errors start with
/// `what` and name the location (and the offset and length when out of bounds); with no source
/// they say how to give one.
absl::StatusOr<std::span<const std::byte>> ExternalTensorBytes(const ::onnx::TensorProto& proto,
                                                               int64_t expected_size,
                                                               const std::string& elements,
                                                               const std::string& what,
                                                               ExternalDataSource* source);

/// Whether any node attribute of `graph` (subgraphs included) holds a tensor stored externally.
bool HasExternalAttributeTensors(const ::onnx::GraphProto& graph);

/// Replaces each such attribute tensor by one holding its bytes in raw_data, so that the
/// lowerings (Constant's `value`, ConstantOfShape's `value`) read it like any inline tensor.
/// Errors name the node and the attribute.
absl::Status InlineExternalAttributeTensors(::onnx::GraphProto& graph, ExternalDataSource* source);

}  // namespace kiln::onnx::internal
