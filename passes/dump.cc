#include "passes/dump.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::passes {
namespace {

std::string SanitizeLabel(std::string_view label) {
  std::string out(label);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

// The number an entry of the dump root starts with ("0012-mlp" -> 12), or -1.
int64_t LeadingNumber(const std::string& name) {
  int64_t value = 0;
  size_t i = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 12; ++i) {
    value = value * 10 + (name[i] - '0');
  }
  if (i == 0 || (i < name.size() && name[i] != '-')) return -1;
  return value;
}

// Holds an exclusive flock on <root>/.kiln-dump.lock while alive. flock locks belong to the open
// file description, so two threads that each open the file exclude each other as two processes
// do; the mutex makes the in-process case independent of that detail.
class RootLock {
 public:
  explicit RootLock(const std::string& root) : guard_(Mutex()) {
    fd_ = ::open((root + "/.kiln-dump.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~RootLock() {
    if (fd_ >= 0) ::close(fd_);  // Closing releases the flock.
  }
  RootLock(const RootLock&) = delete;
  RootLock& operator=(const RootLock&) = delete;

 private:
  static std::mutex& Mutex() {
    static std::mutex mutex;
    return mutex;
  }
  std::lock_guard<std::mutex> guard_;
  int fd_ = -1;
};

}  // namespace

absl::StatusOr<DumpSession> DumpSession::Create(const std::string& root, std::string_view label) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(root, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("dump: cannot create folder \"", root, "\": ", error.message()));
  }
  const std::string suffix = label.empty() ? "" : absl::StrCat("-", SanitizeLabel(label));
  RootLock lock(root);
  int64_t next = 0;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    next = std::max(next, LeadingNumber(it->path().filename().string()) + 1);
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("dump: cannot list folder \"", root, "\": ", error.message()));
  }
  // mkdir is atomic: should another writer that ignores the lock take a number, move on.
  for (int attempt = 0; attempt < 1000; ++attempt, ++next) {
    std::string directory = absl::StrFormat("%s/%04d%s", root, next, suffix);
    if (::mkdir(directory.c_str(), 0755) == 0) return DumpSession(std::move(directory));
    if (errno != EEXIST) {
      return absl::UnavailableError(
          absl::StrCat("dump: cannot create folder \"", directory, "\": ", std::strerror(errno)));
    }
  }
  return absl::UnavailableError(absl::StrCat("dump: no free folder number in \"", root, "\""));
}

DumpSession DumpSession::FromEnv(std::string_view label) {
  const char* root = std::getenv("KILN_DUMP");
  if (root == nullptr || *root == '\0') return DumpSession();
  absl::StatusOr<DumpSession> session = Create(root, label);
  if (!session.ok()) {
    std::fprintf(stderr, "kiln: KILN_DUMP ignored: %s\n",
                 std::string(session.status().message()).c_str());
    return DumpSession();
  }
  return *std::move(session);
}

absl::Status DumpSession::Write(std::string_view filename, std::string_view contents) const {
  if (!enabled()) return absl::OkStatus();
  if (filename.empty() || filename == "." || filename == ".." ||
      filename.find('/') != std::string_view::npos ||
      filename.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("dump: \"", std::string(filename), "\" is not a plain file name"));
  }
  const std::string path = absl::StrCat(directory_, "/", std::string(filename));
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("dump: cannot write \"", path, "\""));
  return absl::OkStatus();
}

}  // namespace kiln::passes
