// Running this test binary again as a child process, for settings a process reads once (KILN_CPU
// fixes the JIT's target and the runtime's level for the life of the process).
//
//   ChildRun run = RunTestInChild("CpuLevelChild.Report", {{"KILN_CPU", "x86-64-v3"}});
//   EXPECT_EQ(run.exit_code, 0) << run.output;
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace kiln::child_process {

struct ChildRun {
  int exit_code = -1;  // -1: did not exit normally
  std::string output;  // stdout and stderr together
  /// Whether gtest ran exactly one test and it passed (so a filter that matched nothing, or a
  /// skip, does not count as success).
  bool passed_one() const {
    return exit_code == 0 && output.find("[  PASSED  ] 1 test.") != std::string::npos &&
           output.find("[  SKIPPED ]") == std::string::npos;
  }
};

/// Runs /proc/self/exe --gtest_filter=`filter` with `env` added to this process's environment.
inline ChildRun RunTestInChild(const std::string& filter,
                               const std::vector<std::pair<std::string, std::string>>& env) {
  char self[PATH_MAX];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ChildRun run;
  if (length <= 0) {
    run.output = "cannot read /proc/self/exe";
    return run;
  }
  self[length] = '\0';
  // Single quotes keep every byte literal in sh; a quote itself is closed, escaped and reopened.
  const auto quote = [](const std::string& text) {
    return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
  };
  std::string command = "env";
  for (const auto& [name, value] : env) absl::StrAppend(&command, " ", quote(name + "=" + value));
  absl::StrAppend(&command, " ", quote(self), " ", quote("--gtest_filter=" + filter),
                  " --gtest_color=no 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    run.output = "popen failed: " + command;
    return run;
  }
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;)
    run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

}  // namespace kiln::child_process
