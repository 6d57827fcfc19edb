// The safetensors format (https://github.com/huggingface/safetensors), read and written from and
// to name -> ir::TensorData maps, so kiln checkpoints and PyTorch / Hugging Face weights share one
// file format.
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  a JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value", ...}}
//              (may end with spaces so the data starts aligned)
//   [rest]     the data: each tensor's bytes row-major little-endian at [begin, end) relative to
//              the start of this section; the tensors tile it exactly (no gaps, no overlap).
//
//   auto file = kiln::train::ReadSafetensors("model.safetensors");   // absl::StatusOr
//   const ir::TensorData& w = file->tensors.at("fc1.weight");
//
// Dtypes: F32 F64 F16 BF16 I32 I64 U8 BOOL (ir::DType's eight); other safetensors dtypes (I8,
// F8_*, ...) are rejected by name. The parser trusts nothing: every error names the file, the
// tensor and the byte offset in the file.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "ir/tensor_data.h"

namespace kiln::train {

/// The content of one safetensors file. std::map: files are written in name order, so the same
/// tensors always give the same bytes.
struct SafetensorsFile {
  std::map<std::string, ir::TensorData> tensors;
  /// The header's "__metadata__" (a string -> string map in the format).
  std::map<std::string, std::string> metadata;
};

/// The largest header the parser accepts (the reference implementation's limit), so a corrupt
/// length cannot make us allocate or scan gigabytes of JSON.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

/// "F32" <-> DType::kF32 (safetensors' names).
const char* SafetensorsDTypeName(ir::DType dtype);
std::optional<ir::DType> ParseSafetensorsDType(std::string_view name);

/// Parses a whole file held in memory. `source` names it in error messages (a path, or
/// "<memory>"). Checks: the length prefix against the size, JSON validity, the header's
/// structure, known dtypes, non-negative shapes, sizes = elements x dtype size, offsets in range,
/// tensors tiling the data exactly, duplicate names, bool bytes being 0 or 1.
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes,
                                                 std::string_view source = "<memory>");

/// Reads and parses `path` (memory-mapped; a file truncated while it is read can raise SIGBUS,
/// as with any mapping).
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

/// The file's bytes: header padded with spaces to a multiple of 8 bytes, tensors in name order.
/// Fails on an empty name or one starting "__metadata__".
absl::StatusOr<std::string> SerializeSafetensors(const SafetensorsFile& file);

/// Serializes and writes `path` atomically (see WriteFileAtomically).
absl::Status WriteSafetensors(const std::string& path, const SafetensorsFile& file);

/// Replaces `path` with `contents` so that a crash or error at any point leaves either the old
/// file or the new one, never a mix: writes a temporary file in the same directory, fsyncs it,
/// renames it over `path` and fsyncs the directory. On failure the temporary file is removed and
/// the old file is untouched.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

/// For tests: called before each step of WriteFileAtomically ("open", "write", "fsync", "rename",
/// "fsync_dir") with the step's name; a non-OK status makes that step fail as if the system call
/// had. Pass nullptr to remove. Not thread-safe against concurrent writes.
void SetAtomicWriteFailureHookForTesting(std::function<absl::Status(std::string_view step)> hook);

}  // namespace kiln::train
