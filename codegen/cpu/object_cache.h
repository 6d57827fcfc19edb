// The on-disk cache of compiled kernels (object files), shared between processes.
//
// Layout: one file per key, `<dir>/<key>.kobj`, holding a 24-byte header (magic "KILNOBJ1", the
// payload size and its XXH64 checksum, both little-endian u64) and then the object file. Writes
// go to a temporary file in the same folder and are renamed into place, so readers in other
// processes never see a half-written entry; a file whose header does not match (truncated,
// corrupted, another format) is treated as a miss and overwritten by the next Store.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kiln::codegen::cpu {

class ObjectDiskCache {
 public:
  /// `dir` is created (with parents) on the first Store.
  explicit ObjectDiskCache(std::string dir);

  const std::string& dir() const { return dir_; }

  /// The object stored under `key`, or nullopt when there is none (or it fails its checksum).
  /// `key` must be a file-name-safe token (CompileCacheKey gives hex digits).
  std::optional<std::string> Load(std::string_view key) const;

  /// Stores `object` under `key`, replacing any entry atomically.
  absl::Status Store(std::string_view key, std::string_view object) const;

  /// The file an entry lives in (for tests and error messages).
  std::string PathFor(std::string_view key) const;

 private:
  std::string dir_;
};

}  // namespace kiln::codegen::cpu
