#include "runtime/cpu/cpu_features.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::runtime::cpu {
namespace {

constexpr CpuLevel kPinnedLevels[] = {CpuLevel::kX86_64, CpuLevel::kX86_64V2, CpuLevel::kX86_64V3,
                                      CpuLevel::kX86_64V4};

// Features each level adds to the one below: the x86-64 psABI's levels, in LLVM's names (LLVM's
// X86_64V*Features lists plus the features their members imply, e.g. sse4.2 → sse3, ssse3).
const std::vector<std::string_view>& AddedFeatures(CpuLevel level) {
  static const auto* const v1 =
      new std::vector<std::string_view>{"64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2"};
  static const auto* const v2 = new std::vector<std::string_view>{
      "cx16", "sahf", "crc32", "popcnt", "sse3", "ssse3", "sse4.1", "sse4.2"};
  static const auto* const v3 = new std::vector<std::string_view>{
      "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"};
  static const auto* const v4 =
      new std::vector<std::string_view>{"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"};
  static const auto* const none = new std::vector<std::string_view>;
  switch (level) {
    case CpuLevel::kX86_64:
      return *v1;
    case CpuLevel::kX86_64V2:
      return *v2;
    case CpuLevel::kX86_64V3:
      return *v3;
    case CpuLevel::kX86_64V4:
      return *v4;
    case CpuLevel::kHost:
      break;
  }
  return *none;
}

bool InList(const std::vector<std::string_view>& list, std::string_view name) {
  for (std::string_view entry : list) {
    if (entry == name) return true;
  }
  return false;
}

// Whether `name` belongs to some level (the features this runtime can detect).
bool IsLevelFeature(std::string_view name) {
  return InList(LevelFeatures(CpuLevel::kX86_64V4), name);
}

#if defined(__x86_64__)
// The CPUID and XCR0 bits the level features are read from, once per process.
struct CpuidBits {
  unsigned leaf1_ecx = 0, leaf1_edx = 0;
  unsigned leaf7_ebx = 0;
  unsigned ext1_ecx = 0, ext1_edx = 0;  // leaf 0x80000001
  unsigned long long xcr0 = 0;          // 0 unless the OS uses XSAVE (OSXSAVE)
};

const CpuidBits& Cpuid() {
  static const CpuidBits bits = [] {
    CpuidBits b;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
      b.leaf1_ecx = ecx;
      b.leaf1_edx = edx;
    }
    if (__get_cpuid_max(0, nullptr) >= 7 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
      b.leaf7_ebx = ebx;
    }
    if (__get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx)) {
      b.ext1_ecx = ecx;
      b.ext1_edx = edx;
    }
    // XGETBV faults unless the OS enabled XSAVE, which CPUID.1:ECX.OSXSAVE[27] reports.
    if ((b.leaf1_ecx >> 27) & 1) {
      unsigned lo = 0, hi = 0;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      b.xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
    }
    return b;
  }();
  return bits;
}

bool Bit(unsigned word, int bit) { return ((word >> bit) & 1) != 0; }

bool DetectFeature(std::string_view name) {
  const CpuidBits& c = Cpuid();
  // AVX state (XMM and YMM) and AVX-512 state (opmask, ZMM_Hi256, Hi16_ZMM) saved by the OS:
  // without it the instructions fault even where CPUID lists them.
  const bool avx_os = (c.xcr0 & 0x6) == 0x6;
  const bool avx512_os = (c.xcr0 & 0xe6) == 0xe6;
  if (name == "64bit") return Bit(c.ext1_edx, 29);
  if (name == "cmov") return Bit(c.leaf1_edx, 15);
  if (name == "cx8") return Bit(c.leaf1_edx, 8);
  if (name == "fxsr") return Bit(c.leaf1_edx, 24);
  if (name == "mmx") return Bit(c.leaf1_edx, 23);
  if (name == "sse") return Bit(c.leaf1_edx, 25);
  if (name == "sse2") return Bit(c.leaf1_edx, 26);
  if (name == "cx16") return Bit(c.leaf1_ecx, 13);
  if (name == "sahf") return Bit(c.ext1_ecx, 0);
  if (name == "crc32" || name == "sse4.2") return Bit(c.leaf1_ecx, 20);
  if (name == "popcnt") return Bit(c.leaf1_ecx, 23);
  if (name == "sse3") return Bit(c.leaf1_ecx, 0);
  if (name == "ssse3") return Bit(c.leaf1_ecx, 9);
  if (name == "sse4.1") return Bit(c.leaf1_ecx, 19);
  if (name == "avx") return Bit(c.leaf1_ecx, 28) && avx_os;
  if (name == "avx2") return Bit(c.leaf7_ebx, 5) && avx_os;
  if (name == "bmi") return Bit(c.leaf7_ebx, 3);
  if (name == "bmi2") return Bit(c.leaf7_ebx, 8);
  if (name == "f16c") return Bit(c.leaf1_ecx, 29) && avx_os;
  if (name == "fma") return Bit(c.leaf1_ecx, 12) && avx_os;
  if (name == "lzcnt") return Bit(c.ext1_ecx, 5);
  if (name == "movbe") return Bit(c.leaf1_ecx, 22);
  if (name == "xsave") return Bit(c.leaf1_ecx, 26);
  if (name == "avx512f") return Bit(c.leaf7_ebx, 16) && avx512_os;
  if (name == "avx512dq") return Bit(c.leaf7_ebx, 17) && avx512_os;
  if (name == "avx512cd") return Bit(c.leaf7_ebx, 28) && avx512_os;
  if (name == "avx512bw") return Bit(c.leaf7_ebx, 30) && avx512_os;
  if (name == "avx512vl") return Bit(c.leaf7_ebx, 31) && avx512_os;
  return false;
}
#endif

std::string ValidValues() {
  std::vector<std::string> names = {CpuLevelName(CpuLevel::kHost)};
  for (CpuLevel level : kPinnedLevels) names.push_back(CpuLevelName(level));
  return absl::StrJoin(names, ", ");
}

}  // namespace

const char* CpuLevelName(CpuLevel level) {
  switch (level) {
    case CpuLevel::kHost:
      return "host";
    case CpuLevel::kX86_64:
      return "x86-64";
    case CpuLevel::kX86_64V2:
      return "x86-64-v2";
    case CpuLevel::kX86_64V3:
      return "x86-64-v3";
    case CpuLevel::kX86_64V4:
      return "x86-64-v4";
  }
  return "?";
}

absl::StatusOr<CpuLevel> ParseCpuLevel(std::string_view text) {
  if (text.empty() || text == CpuLevelName(CpuLevel::kHost)) return CpuLevel::kHost;
  for (CpuLevel level : kPinnedLevels) {
    if (text == CpuLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU level '", std::string(text), "'; valid values: ", ValidValues()));
}

const std::vector<std::string_view>& LevelFeatures(CpuLevel level) {
  static const auto* const tables = [] {
    auto* result = new std::vector<std::vector<std::string_view>>(1);  // kHost: empty
    std::vector<std::string_view> cumulative;
    for (CpuLevel pinned : kPinnedLevels) {
      const std::vector<std::string_view>& added = AddedFeatures(pinned);
      cumulative.insert(cumulative.end(), added.begin(), added.end());
      result->push_back(cumulative);
    }
    return result;
  }();
  return (*tables)[static_cast<size_t>(level)];
}

bool HostHasFeature(std::string_view feature) {
#if defined(__x86_64__)
  return IsLevelFeature(feature) && DetectFeature(feature);
#else
  (void)feature;
  return false;
#endif
}

absl::Status CheckLevelRunsOn(CpuLevel level, absl::FunctionRef<bool(std::string_view)> has) {
  for (std::string_view feature : LevelFeatures(level)) {
    if (!has(feature)) {
      return absl::FailedPreconditionError(
          absl::StrCat("this CPU cannot run code for ", CpuLevelName(level), ": it lacks ",
                       std::string(feature), " (code for that level would stop with SIGILL here)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLevelRunsHere(CpuLevel level) {
  if (level == CpuLevel::kHost) return absl::OkStatus();
#if !defined(__x86_64__)
  return absl::FailedPreconditionError(
      absl::StrCat("CPU level ", CpuLevelName(level), " needs an x86-64 host"));
#else
  return CheckLevelRunsOn(level, HostHasFeature);
#endif
}

const absl::StatusOr<CpuLevel>& ProcessCpuLevel() {
  static const absl::StatusOr<CpuLevel>* const level = [] {
    const char* env = std::getenv("KILN_CPU");
    const std::string value = env != nullptr ? env : "";
    absl::StatusOr<CpuLevel> parsed = ParseCpuLevel(value);
    absl::Status status = parsed.ok() ? CheckLevelRunsHere(*parsed) : parsed.status();
    if (!status.ok()) {
      return new absl::StatusOr<CpuLevel>(
          absl::Status(status.code(), absl::StrCat("KILN_CPU=", value, ": ", status.message())));
    }
    return new absl::StatusOr<CpuLevel>(*parsed);
  }();
  return *level;
}

bool LevelAllows(CpuLevel level, std::string_view feature) {
  if (!HostHasFeature(feature)) return false;
  return level == CpuLevel::kHost || InList(LevelFeatures(level), feature);
}

bool CodeRunsAtLevel(CpuLevel level, std::string_view features) {
  while (!features.empty()) {
    const size_t comma = features.find(',');
    const std::string_view token = features.substr(0, comma);
    features = comma == std::string_view::npos ? "" : features.substr(comma + 1);
    if (token.empty() || token.front() != '+') continue;
    const std::string_view name = token.substr(1);
    if (IsLevelFeature(name)) {
      if (!LevelAllows(level, name)) return false;
    } else if (level != CpuLevel::kHost) {
      return false;
    }
  }
  return true;
}

bool CpuAllows(std::string_view feature) {
  const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel();
  return level.ok() && LevelAllows(*level, feature);
}

bool CodeFeaturesAllowed(std::string_view features) {
  const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel();
  return level.ok() && CodeRunsAtLevel(*level, features);
}

bool RequestAmxTileData() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h
    constexpr long kXfeatureXtiledata = 18;     // the AMX tile data component of XSAVE
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

}  // namespace kiln::runtime::cpu
