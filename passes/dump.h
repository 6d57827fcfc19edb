// DumpSession: where one compile writes its diagnostic files (KILN_DUMP).
//
// Every compile creates one session and hands it to each stage (pass manager, fusion, codegen),
// which write their files into it:
//
//   passes::DumpSession dump = passes::DumpSession::FromEnv("softmax");
//   dump.Write("fusion.txt", plan.ToString());   // a cheap no-op when KILN_DUMP is unset
//
// With KILN_DUMP=<dir>, the session is a fresh folder <dir>/NNNN-<label>/. NNNN counts up from
// 0000 over everything already in <dir>, under a file lock, so concurrent compiles in one process
// or in several get distinct, increasing numbers.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::passes {

class DumpSession {
 public:
  /// A disabled session: Write does nothing.
  DumpSession() = default;

  /// A session in a fresh subfolder of $KILN_DUMP, or a disabled one when KILN_DUMP is unset or
  /// empty. When the folder cannot be created, prints a warning to stderr and is disabled (a
  /// broken dump folder must not fail the compile).
  static DumpSession FromEnv(std::string_view label);

  /// A session in a fresh subfolder `<root>/NNNN-<label>/`; creates `root` when missing. The
  /// label is reduced to [A-Za-z0-9._-] (other bytes become '_') and may be empty
  /// (`<root>/NNNN/`).
  static absl::StatusOr<DumpSession> Create(const std::string& root, std::string_view label);

  bool enabled() const { return !directory_.empty(); }
  /// The session's folder ("" when disabled).
  const std::string& directory() const { return directory_; }

  /// Writes `contents` to `<directory>/<filename>`, replacing an older file of that name. OK and
  /// does nothing when disabled. `filename` is a plain name: no '/', not "." or "..".
  absl::Status Write(std::string_view filename, std::string_view contents) const;

 private:
  explicit DumpSession(std::string directory) : directory_(std::move(directory)) {}

  std::string directory_;
};

}  // namespace kiln::passes
