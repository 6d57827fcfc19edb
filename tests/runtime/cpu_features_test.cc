// runtime/cpu/cpu_features.h: KILN_CPU's values, the levels' feature lists, host detection
// against the kernel's own /proc/cpuinfo flags, and which code sections each level accepts.
// (The process-wide KILN_CPU path is exercised in child processes by
// tests/codegen/cpu/cpu_level_test.cc and tests/aot/aot_test.cc.)
#include "runtime/cpu/cpu_features.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace kiln::runtime::cpu {
namespace {

constexpr CpuLevel kPinned[] = {CpuLevel::kX86_64, CpuLevel::kX86_64V2, CpuLevel::kX86_64V3,
                                CpuLevel::kX86_64V4};

TEST(CpuFeaturesTest, EveryLevelNameParsesBackToItsLevel) {
  for (CpuLevel level : {CpuLevel::kHost, CpuLevel::kX86_64, CpuLevel::kX86_64V2,
                         CpuLevel::kX86_64V3, CpuLevel::kX86_64V4}) {
    absl::StatusOr<CpuLevel> parsed = ParseCpuLevel(CpuLevelName(level));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, level) << CpuLevelName(level);
  }
  absl::StatusOr<CpuLevel> empty = ParseCpuLevel("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, CpuLevel::kHost);
}

TEST(CpuFeaturesTest, UnknownValuesAreErrorsListingTheValidOnes) {
  for (const char* bad : {"x86-64-v9", "avx2", "HOST", " x86-64-v3", "native"}) {
    absl::StatusOr<CpuLevel> parsed = ParseCpuLevel(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_NE(message.find(absl::StrCat("'", bad, "'")), std::string::npos) << message;
    EXPECT_NE(message.find(CpuLevelName(CpuLevel::kHost)), std::string::npos) << message;
    for (CpuLevel level : kPinned) {
      EXPECT_NE(message.find(CpuLevelName(level)), std::string::npos) << message;
    }
  }
}

TEST(CpuFeaturesTest, LevelsAreCumulative) {
  EXPECT_TRUE(LevelFeatures(CpuLevel::kHost).empty());
  for (size_t i = 1; i < std::size(kPinned); ++i) {
    const std::vector<std::string_view>& lower = LevelFeatures(kPinned[i - 1]);
    const std::vector<std::string_view>& upper = LevelFeatures(kPinned[i]);
    EXPECT_GT(upper.size(), lower.size());
    const std::set<std::string_view> upper_set(upper.begin(), upper.end());
    for (std::string_view feature : lower) {
      EXPECT_TRUE(upper_set.count(feature)) << feature << " of " << CpuLevelName(kPinned[i - 1])
                                            << " missing from " << CpuLevelName(kPinned[i]);
    }
  }
}

// The flags the kernel lists for this CPU (it clears AVX/AVX-512 flags the OS does not enable,
// the same condition HostHasFeature reads from XCR0).
std::set<std::string> ProcCpuinfoFlags() {
  std::ifstream file("/proc/cpuinfo");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string word; words >> word;) flags.insert(word);
    return flags;
  }
  return {};
}

TEST(CpuFeaturesTest, HostDetectionAgreesWithProcCpuinfo) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 levels only";
#endif
  const std::set<std::string> flags = ProcCpuinfoFlags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  // LLVM's feature names → the kernel's flag names where they differ.
  const std::vector<std::pair<std::string_view, std::string>> renamed = {
      {"64bit", "lm"},      {"sahf", "lahf_lm"},  {"crc32", "sse4_2"}, {"sse3", "pni"},
      {"sse4.1", "sse4_1"}, {"sse4.2", "sse4_2"}, {"bmi", "bmi1"},     {"lzcnt", "abm"},
  };
  for (std::string_view feature : LevelFeatures(CpuLevel::kX86_64V4)) {
    std::string flag(feature);
    for (const auto& [llvm_name, kernel_name] : renamed) {
      if (feature == llvm_name) flag = kernel_name;
    }
    EXPECT_EQ(HostHasFeature(feature), flags.count(flag) == 1)
        << feature << " (/proc/cpuinfo flag " << flag << ")";
  }
  EXPECT_FALSE(HostHasFeature("avx512vnni")) << "not a level feature: not detected";
  EXPECT_FALSE(HostHasFeature("neon"));
}

TEST(CpuFeaturesTest, ALevelRunsHereExactlyWhenTheHostHasAllItsFeatures) {
  EXPECT_TRUE(CheckLevelRunsHere(CpuLevel::kHost).ok());
  for (CpuLevel level : kPinned) {
    std::string missing;
    for (std::string_view feature : LevelFeatures(level)) {
      if (!HostHasFeature(feature)) {
        missing = std::string(feature);
        break;
      }
    }
    const absl::Status status = CheckLevelRunsHere(level);
    if (missing.empty()) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(status.message().find(absl::StrCat("lacks ", missing, " ")), std::string::npos)
          << status;
      EXPECT_NE(status.message().find(CpuLevelName(level)), std::string::npos) << status;
    }
  }
}

TEST(CpuFeaturesTest, ALevelAboveTheCpuIsRefusedNamingTheFirstMissingFeature) {
  // CPUs of each level (whatever this machine is): every level up to theirs runs, the next one
  // up is refused for the first feature it adds.
  for (size_t cpu = 0; cpu < std::size(kPinned); ++cpu) {
    const std::vector<std::string_view>& own = LevelFeatures(kPinned[cpu]);
    const auto has = [&](std::string_view f) {
      return std::find(own.begin(), own.end(), f) != own.end();
    };
    for (size_t level = 0; level <= cpu; ++level) {
      EXPECT_TRUE(CheckLevelRunsOn(kPinned[level], has).ok());
    }
    if (cpu + 1 == std::size(kPinned)) continue;
    const CpuLevel above = kPinned[cpu + 1];
    const absl::Status status = CheckLevelRunsOn(above, has);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    const std::string_view first_missing = LevelFeatures(above)[own.size()];
    EXPECT_NE(status.message().find(absl::StrCat("lacks ", std::string(first_missing), " ")),
              std::string::npos)
        << status;
    EXPECT_NE(status.message().find(CpuLevelName(above)), std::string::npos) << status;
  }
}

TEST(CpuFeaturesTest, APinnedLevelAllowsOnlyItsOwnFeatures) {
  for (CpuLevel level : kPinned) {
    const std::vector<std::string_view>& own = LevelFeatures(level);
    for (std::string_view feature : LevelFeatures(CpuLevel::kX86_64V4)) {
      const bool in_level = std::find(own.begin(), own.end(), feature) != own.end();
      EXPECT_EQ(LevelAllows(level, feature), in_level && HostHasFeature(feature))
          << CpuLevelName(level) << " " << feature;
    }
    EXPECT_FALSE(LevelAllows(level, "avx512vnni"));
  }
  for (std::string_view feature : LevelFeatures(CpuLevel::kX86_64V4)) {
    EXPECT_EQ(LevelAllows(CpuLevel::kHost, feature), HostHasFeature(feature)) << feature;
  }
}

// A feature string with +name for each of `level`'s features and -name for the rest, as a
// code section compiled for that level records it.
std::string FeatureString(CpuLevel level) {
  std::vector<std::string> tokens;
  const std::vector<std::string_view>& own = LevelFeatures(level);
  for (std::string_view feature : LevelFeatures(CpuLevel::kX86_64V4)) {
    const bool on = std::find(own.begin(), own.end(), feature) != own.end();
    tokens.push_back(absl::StrCat(on ? "+" : "-", std::string(feature)));
  }
  return absl::StrJoin(tokens, ",");
}

TEST(CpuFeaturesTest, CodeOfALevelRunsAtThatLevelAndAboveOnly) {
  for (size_t code = 0; code < std::size(kPinned); ++code) {
    const std::string features = FeatureString(kPinned[code]);
    const bool host_can = CheckLevelRunsHere(kPinned[code]).ok();
    EXPECT_EQ(CodeRunsAtLevel(CpuLevel::kHost, features), host_can) << features;
    for (size_t at = 0; at < std::size(kPinned); ++at) {
      EXPECT_EQ(CodeRunsAtLevel(kPinned[at], features), at >= code && host_can)
          << "code for " << CpuLevelName(kPinned[code]) << " at " << CpuLevelName(kPinned[at]);
    }
  }
}

TEST(CpuFeaturesTest, FeaturesOutsideTheLevelsRefuseCodeOnlyUnderAPinnedLevel) {
  // The host cannot be asked about avx512vnni; a pinned level knows it is not part of it.
  const std::string features = absl::StrCat(FeatureString(CpuLevel::kX86_64), ",+avx512vnni");
  EXPECT_TRUE(CodeRunsAtLevel(CpuLevel::kHost, features));
  for (CpuLevel level : kPinned) EXPECT_FALSE(CodeRunsAtLevel(level, features));
  // Disabled features and empty strings ask for nothing.
  EXPECT_TRUE(CodeRunsAtLevel(CpuLevel::kX86_64, "-avx512vnni,-avx2"));
  EXPECT_TRUE(CodeRunsAtLevel(CpuLevel::kX86_64, ""));
}

TEST(CpuFeaturesTest, ProcessLevelFollowsKilnCpu) {
  // This process's KILN_CPU (unset under plain ctest; the suites also run under pinned levels).
  const char* env = std::getenv("KILN_CPU");
  const absl::StatusOr<CpuLevel> expected = ParseCpuLevel(env != nullptr ? env : "");
  const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel();
  ASSERT_EQ(level.ok(), expected.ok() && CheckLevelRunsHere(*expected).ok()) << level.status();
  if (!level.ok()) {
    EXPECT_EQ(level.status().message().rfind(absl::StrCat("KILN_CPU=", env, ": "), 0), 0u)
        << level.status();
    EXPECT_FALSE(CpuAllows("sse2"));
    EXPECT_FALSE(CodeFeaturesAllowed(""));
    return;
  }
  EXPECT_EQ(*level, *expected);
  for (std::string_view feature : LevelFeatures(CpuLevel::kX86_64V4)) {
    EXPECT_EQ(CpuAllows(feature), LevelAllows(*level, feature)) << feature;
  }
}

}  // namespace
}  // namespace kiln::runtime::cpu
