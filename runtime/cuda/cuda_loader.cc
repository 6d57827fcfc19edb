#include "runtime/cuda/cuda_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kiln::runtime::cuda::internal {
namespace {

constexpr char kUseCpu[] = "Use KILN_DEVICE=cpu to run on the CPU";

// Names for the results a driver that cannot name them (the toolkit's stub library answers
// CUDA_ERROR_STUB_LIBRARY to cuGetErrorName too) is likely to return.
const char* FallbackName(CUresult result) {
  switch (result) {
    case kCudaSuccess:
      return "CUDA_SUCCESS";
    case kCudaErrorOutOfMemory:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case kCudaErrorStubLibrary:
      return "CUDA_ERROR_STUB_LIBRARY";
    case kCudaErrorNoDevice:
      return "CUDA_ERROR_NO_DEVICE";
    case kCudaErrorInvalidPtx:
      return "CUDA_ERROR_INVALID_PTX";
    default:
      return nullptr;
  }
}

absl::StatusOr<std::unique_ptr<CudaApi>> Load(const std::string& library) {
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace (a program may link a CUDA
  // runtime of its own).
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    std::string_view why = error != nullptr ? error : "unknown dlopen error";
    // glibc's message starts with the library's name already.
    if (why.starts_with(library + ": ")) why.remove_prefix(library.size() + 2);
    return absl::FailedPreconditionError(
        absl::StrCat("kiln::Cuda: cannot load the CUDA driver (", library, ": ", std::string(why),
                     "); is an NVIDIA driver installed? ", kUseCpu));
  }
  // Never dlclose()d: the driver keeps threads and state for the life of the process, and one
  // handle per library costs nothing to keep.
  auto api = std::make_unique<CudaApi>();
  api->library = library;
#define KILN_CUDA_RESOLVE(name, exported) \
  api->exported = reinterpret_cast<decltype(api->exported)>(dlsym(handle, #exported));
  KILN_CUDA_FUNCTIONS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE
  if (api->cuEventElapsedTime_v2 == nullptr) {  // a driver before CUDA 12.8
    api->cuEventElapsedTime_v2 =
        reinterpret_cast<decltype(api->cuEventElapsedTime_v2)>(dlsym(handle, "cuEventElapsedTime"));
  }
#define KILN_CUDA_CHECK(name, exported)                                                          \
  if (api->exported == nullptr) {                                                                \
    return absl::FailedPreconditionError(absl::StrCat(                                           \
        "kiln::Cuda: the CUDA driver ", library,                                                 \
        " has no " #exported " (a driver older than CUDA 11.0, which kiln needs?). ", kUseCpu)); \
  }
  KILN_CUDA_FUNCTIONS(KILN_CUDA_CHECK)
#undef KILN_CUDA_CHECK
  if (const CUresult result = api->cuInit(0); result != kCudaSuccess) {
    std::string hint;
    if (result == kCudaErrorNoDevice) {
      hint = ": the driver sees no CUDA device";
    } else if (result == kCudaErrorStubLibrary) {
      hint = absl::StrCat(": ", library, " is the CUDA toolkit's stub library, not a driver");
    }
    return absl::FailedPreconditionError(absl::StrCat("kiln::Cuda: cuInit failed in ", library,
                                                      ": ", ResultText(*api, result), hint, ". ",
                                                      kUseCpu));
  }
  return api;
}

}  // namespace

std::string DriverLibrary(const std::string& path) {
  if (!path.empty()) return path;
  const char* env = std::getenv("KILN_CUDA_DRIVER");
  return env != nullptr && *env != '\0' ? env : "libcuda.so.1";
}

absl::StatusOr<const CudaApi*> LoadDriver(const std::string& path) {
  const std::string library = DriverLibrary(path);
  static std::mutex mutex;
  static auto* loaded = new std::map<std::string, std::unique_ptr<CudaApi>>;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded->find(library); it != loaded->end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<CudaApi>> api = Load(library);
  if (!api.ok()) return api.status();
  const CudaApi* kept = api->get();
  (*loaded)[library] = *std::move(api);
  return kept;
}

std::string ResultText(const CudaApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName(result, &name) != kCudaSuccess || name == nullptr) {
    name = FallbackName(result);
  }
  if (api.cuGetErrorString(result, &text) != kCudaSuccess) text = nullptr;
  std::string out = name != nullptr ? name : absl::StrCat("CUresult ", result);
  if (text != nullptr && *text != '\0') absl::StrAppend(&out, " (", text, ")");
  return out;
}

absl::Status CallError(const CudaApi& api, const char* call, CUresult result) {
  std::string message = absl::StrCat(call, ": ", ResultText(api, result));
  if (result == kCudaErrorOutOfMemory) return absl::ResourceExhaustedError(std::move(message));
  if (result == kCudaErrorInvalidPtx) return absl::InvalidArgumentError(std::move(message));
  return absl::InternalError(std::move(message));
}

}  // namespace kiln::runtime::cuda::internal
