#include "tests/cuda/ptxas.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::test {
namespace {

const std::string& PtxasPath() {
  static const std::string* const path = [] {
    if (const char* env = std::getenv("KILN_PTXAS"); env != nullptr && *env != '\0') {
      return new std::string(env);
    }
    if (std::filesystem::exists("/usr/local/cuda/bin/ptxas")) {
      return new std::string("/usr/local/cuda/bin/ptxas");
    }
    return new std::string("ptxas");
  }();
  return *path;
}

// Runs `command` through the shell; its exit status and its output (stdout and stderr).
int RunCapturing(const std::string& command, std::string& output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

absl::Status PtxasAvailable() {
  static const absl::Status* const status = [] {
    std::string output;
    const int rc = RunCapturing(absl::StrCat("'", PtxasPath(), "' --version"), output);
    if (rc == 0) return new absl::Status();
    return new absl::Status(absl::FailedPreconditionError(
        absl::StrCat("ptxas (the CUDA toolkit's PTX assembler) does not run: tried ", PtxasPath(),
                     " (exit ", rc, "): ", output,
                     "; install the CUDA toolkit in /usr/local/cuda or set "
                     "KILN_PTXAS")));
  }();
  return *status;
}

absl::Status AssemblePtx(const std::string& ptx, const std::string& arch, const std::string& name) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      absl::StrCat("kiln_ptxas_", getpid(), "_", std::hash<std::string>{}(ptx), ".ptx");
  {
    std::ofstream out(file, std::ios::binary);
    out << ptx;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", file.string()));
  }
  std::string output;
  const int rc = RunCapturing(
      absl::StrCat("'", PtxasPath(), "' -arch=", arch, " '", file.string(), "' -o /dev/null"),
      output);
  std::filesystem::remove(file);
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("ptxas -arch=", arch, " refused ", name, " (exit ", rc,
                                          "):\n", output, "\nPTX:\n", ptx.substr(0, 4000)));
}

}  // namespace kiln::test
