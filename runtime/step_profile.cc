#include "runtime/step_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "base/env_flag.h"

namespace kiln::runtime {
namespace {

struct StepTotals {
  std::string label;
  int executable_number = 0;
  size_t step = 0;
  int64_t calls = 0;
  double seconds = 0;
};

struct Profile {
  std::mutex mutex;
  absl::flat_hash_map<uint64_t, int> executable_numbers;  // in the order they first ran
  absl::flat_hash_map<std::pair<uint64_t, size_t>, StepTotals> steps;
};

Profile& GetProfile() {
  static Profile* const profile = new Profile();
  return *profile;
}

void PrintAtExit() { std::fputs(StepProfileReport().c_str(), stderr); }

std::atomic<bool>& EnabledFlag() {
  static std::atomic<bool>* const enabled = [] {
    const bool on = base::EnvFlag("KILN_PROFILE");
    if (on) std::atexit(PrintAtExit);
    return new std::atomic<bool>(on);
  }();
  return *enabled;
}

}  // namespace

bool StepProfilingEnabled() { return EnabledFlag().load(std::memory_order_relaxed); }

void SetStepProfiling(bool enabled) { EnabledFlag().store(enabled, std::memory_order_relaxed); }

void ResetStepProfile() {
  Profile& profile = GetProfile();
  std::lock_guard<std::mutex> lock(profile.mutex);
  profile.executable_numbers.clear();
  profile.steps.clear();
}

uint64_t NewExecutableId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void RecordStepTime(uint64_t executable, size_t step, double seconds,
                    absl::FunctionRef<std::string()> describe) {
  Profile& profile = GetProfile();
  std::lock_guard<std::mutex> lock(profile.mutex);
  auto [number, inserted] = profile.executable_numbers.try_emplace(
      executable, static_cast<int>(profile.executable_numbers.size()));
  auto [entry, first] = profile.steps.try_emplace(std::make_pair(executable, step));
  StepTotals& totals = entry->second;
  if (first) {
    totals.label = describe();
    totals.executable_number = number->second;
    totals.step = step;
  }
  ++totals.calls;
  totals.seconds += seconds;
}

std::string StepProfileReport() {
  Profile& profile = GetProfile();
  std::vector<StepTotals> rows;
  {
    std::lock_guard<std::mutex> lock(profile.mutex);
    for (const auto& [key, totals] : profile.steps) rows.push_back(totals);
  }
  std::sort(rows.begin(), rows.end(),
            [](const StepTotals& a, const StepTotals& b) { return a.seconds > b.seconds; });
  double all = 0;
  for (const StepTotals& row : rows) all += row.seconds;
  std::string text = absl::StrFormat(
      "kiln step profile (KILN_PROFILE): %d steps of %d executables, %.3f ms in all\n"
      "%10s %8s %10s %6s  %s\n",
      rows.size(), profile.executable_numbers.size(), all * 1e3, "total ms", "calls", "ms/call",
      "share", "executable#step: kernel(arguments)");
  for (const StepTotals& row : rows) {
    absl::StrAppendFormat(&text, "%10.3f %8d %10.4f %5.1f%%  #%d step %d: %s\n", row.seconds * 1e3,
                          row.calls, row.seconds * 1e3 / static_cast<double>(row.calls),
                          all > 0 ? 100 * row.seconds / all : 0.0, row.executable_number, row.step,
                          row.label);
  }
  return text;
}

}  // namespace kiln::runtime
