#include "codegen/cuda/nvrtc.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "xxhash.h"

namespace kiln::codegen::cuda {
namespace {

// NVRTC's C API (nvrtc.h), declared here so that building kiln needs no CUDA toolkit. The
// functions are the stable ones of NVRTC 11-13.
using NvrtcResult = int;  // nvrtcResult: 0 is NVRTC_SUCCESS
struct NvrtcProgramImpl;
using NvrtcProgram = NvrtcProgramImpl*;

struct Nvrtc {
  NvrtcResult (*version)(int*, int*) = nullptr;
  NvrtcResult (*create_program)(NvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*) = nullptr;
  NvrtcResult (*compile_program)(NvrtcProgram, int, const char* const*) = nullptr;
  NvrtcResult (*get_ptx_size)(NvrtcProgram, size_t*) = nullptr;
  NvrtcResult (*get_ptx)(NvrtcProgram, char*) = nullptr;
  NvrtcResult (*get_program_log_size)(NvrtcProgram, size_t*) = nullptr;
  NvrtcResult (*get_program_log)(NvrtcProgram, char*) = nullptr;
  NvrtcResult (*destroy_program)(NvrtcProgram*) = nullptr;
  const char* (*get_error_string)(NvrtcResult) = nullptr;
  absl::Status status;  // why it did not load
};

template <typename Fn>
bool Resolve(void* library, const char* symbol, Fn& fn, std::vector<std::string>& missing) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (fn == nullptr) missing.push_back(symbol);
  return fn != nullptr;
}

const Nvrtc& Library() {
  static const Nvrtc* const nvrtc = [] {
    auto* api = new Nvrtc;
    std::vector<std::string> candidates;
    if (const char* file = std::getenv("KILN_NVRTC"); file != nullptr && *file != '\0') {
      candidates.push_back(file);
    } else {
      candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.13",
                    "/usr/local/cuda/lib64/libnvrtc.so.12"};
    }
    void* library = nullptr;
    std::vector<std::string> errors;
    for (const std::string& candidate : candidates) {
      // Never unloaded: compiled programs may be cached for the process's life.
      library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library != nullptr) break;
      const char* error = dlerror();
      errors.push_back(error != nullptr ? error : candidate);
    }
    if (library == nullptr) {
      api->status = absl::FailedPreconditionError(absl::StrCat(
          "cuda: cannot load NVRTC, the CUDA runtime compiler (", absl::StrJoin(errors, "; "),
          "); install the CUDA toolkit (/usr/local/cuda) or set KILN_NVRTC to libnvrtc.so"));
      return api;
    }
    std::vector<std::string> missing;
    Resolve(library, "nvrtcVersion", api->version, missing);
    Resolve(library, "nvrtcCreateProgram", api->create_program, missing);
    Resolve(library, "nvrtcCompileProgram", api->compile_program, missing);
    Resolve(library, "nvrtcGetPTXSize", api->get_ptx_size, missing);
    Resolve(library, "nvrtcGetPTX", api->get_ptx, missing);
    Resolve(library, "nvrtcGetProgramLogSize", api->get_program_log_size, missing);
    Resolve(library, "nvrtcGetProgramLog", api->get_program_log, missing);
    Resolve(library, "nvrtcDestroyProgram", api->destroy_program, missing);
    Resolve(library, "nvrtcGetErrorString", api->get_error_string, missing);
    if (!missing.empty()) {
      api->status = absl::FailedPreconditionError(
          absl::StrCat("cuda: the NVRTC library lacks ", absl::StrJoin(missing, ", ")));
    }
    return api;
  }();
  return *nvrtc;
}

std::string ErrorName(const Nvrtc& api, NvrtcResult result) {
  const char* text = api.get_error_string(result);
  return text != nullptr ? text : absl::StrCat("nvrtc error ", result);
}

std::string NumberedSource(const std::string& source) {
  std::string out;
  int line = 1;
  for (absl::string_view text : absl::StrSplit(source, '\n')) {
    absl::StrAppend(&out, line++, ": ", text, "\n");
  }
  return out;
}

// The arch's number: "sm_90" → "90", "sm_90a" → "90a".
absl::StatusOr<std::string> ArchNumber(const std::string& arch) {
  const absl::string_view digits = absl::string_view(arch).substr(arch.rfind('_') + 1);
  if (arch.rfind("sm_", 0) != 0 || digits.size() < 2 || digits[0] < '1' || digits[0] > '9') {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda: unknown GPU architecture \"", arch, "\" (expected e.g. sm_80, sm_90)"));
  }
  return std::string(digits);
}

struct Cache {
  std::mutex mutex;
  std::map<std::pair<uint64_t, std::string>, std::shared_ptr<const std::string>> ptx;
  int64_t compiles = 0;
};

Cache& PtxCache() {
  static auto* cache = new Cache;
  return *cache;
}

}  // namespace

absl::Status NvrtcAvailable() { return Library().status; }

absl::StatusOr<std::string> NvrtcVersion() {
  const Nvrtc& api = Library();
  if (!api.status.ok()) return api.status;
  int major = 0, minor = 0;
  if (const NvrtcResult r = api.version(&major, &minor); r != 0) {
    return absl::InternalError(absl::StrCat("nvrtcVersion: ", ErrorName(api, r)));
  }
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<std::string> CompileToPtx(const std::string& source, const std::string& name,
                                         const std::string& arch) {
  const Nvrtc& api = Library();
  if (!api.status.ok()) return api.status;
  absl::StatusOr<std::string> number = ArchNumber(arch);
  if (!number.ok()) return number.status();
  Cache& cache = PtxCache();
  const auto key = std::make_pair(XXH3_64bits(source.data(), source.size()), arch);
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (auto it = cache.ptx.find(key); it != cache.ptx.end()) return *it->second;
  }
  NvrtcProgram program = nullptr;
  if (const NvrtcResult r =
          api.create_program(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
      r != 0) {
    return absl::InternalError(
        absl::StrCat("nvrtcCreateProgram (", name, "): ", ErrorName(api, r)));
  }
  const std::unique_ptr<NvrtcProgram, void (*)(NvrtcProgram*)> release(
      &program, [](NvrtcProgram* p) { Library().destroy_program(p); });
  const std::string gpu = absl::StrCat("--gpu-architecture=compute_", *number);
  const char* const options[] = {gpu.c_str(), "--fmad=false", "--prec-div=true", "--prec-sqrt=true",
                                 "--std=c++20"};
  const NvrtcResult compiled =
      api.compile_program(program, static_cast<int>(std::size(options)), options);
  size_t log_size = 0;
  std::string log;
  if (api.get_program_log_size(program, &log_size) == 0 && log_size > 1) {
    log.resize(log_size);
    api.get_program_log(program, log.data());
    log.resize(log_size - 1);
  }
  if (compiled != 0) {
    return absl::InternalError(absl::StrCat("cuda: NVRTC rejected the generated kernel ", name,
                                            " (", ErrorName(api, compiled), "):\n", log,
                                            "\nsource:\n", NumberedSource(source)));
  }
  size_t ptx_size = 0;
  if (const NvrtcResult r = api.get_ptx_size(program, &ptx_size); r != 0) {
    return absl::InternalError(absl::StrCat("nvrtcGetPTXSize (", name, "): ", ErrorName(api, r)));
  }
  std::string ptx(ptx_size, '\0');
  if (const NvrtcResult r = api.get_ptx(program, ptx.data()); r != 0) {
    return absl::InternalError(absl::StrCat("nvrtcGetPTX (", name, "): ", ErrorName(api, r)));
  }
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  std::lock_guard<std::mutex> lock(cache.mutex);
  ++cache.compiles;
  auto [it, inserted] = cache.ptx.emplace(key, std::make_shared<const std::string>(std::move(ptx)));
  (void)inserted;
  return *it->second;
}

int64_t NvrtcCompiles() {
  Cache& cache = PtxCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.compiles;
}

}  // namespace kiln::codegen::cuda
