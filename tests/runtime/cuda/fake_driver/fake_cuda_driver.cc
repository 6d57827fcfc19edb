// A stand-in for libcuda.so.1 that lets the CUDA driver's tests run its host-side logic on a
// machine without a GPU (the run cuda_fake_driver.* of runtime_cuda_test, KILN_CUDA_DRIVER=this
// library). It implements the functions runtime/cuda/cuda_loader.h resolves, strictly where kiln's
// use of them could go wrong:
//   - one device ("Fake H200", sm_90) whose memory is host memory; every copy, memset and kernel
//     access is checked against the allocation it falls in (CUDA_ERROR_ILLEGAL_ADDRESS or
//     CUDA_ERROR_INVALID_VALUE outside), and fresh memory is filled with garbage;
//   - every call that needs a context fails with CUDA_ERROR_INVALID_CONTEXT unless the calling
//     thread made the primary context current, and streams must be created non-blocking;
//   - cuModuleLoadDataEx accepts text with an .entry and a ret (else CUDA_ERROR_INVALID_PTX with a
//     message in the CU_JIT_ERROR_LOG_BUFFER option's buffer); cuLaunchKernel refuses empty
//     grids, blocks over 1024 threads and dynamic shared memory beyond the function's
//     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, and emulates the kernels of
//     tests/runtime/cuda/test_kernels_ptx.h (kiln_add, kiln_gather) by name, reading each
//     parameter through kernelParams' pointers to CUdeviceptr.
// Streams run synchronously: what this cannot check is asynchrony (a missing wait), the PTX
// itself, and the real driver's numbers; a GPU run checks those.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

using CUresult = int;
using CUdeviceptr = unsigned long long;

namespace {

struct Context {
  int refs = 0;
};
struct Module {
  std::set<std::string> entries;
};
struct Function {
  std::string name;
  int max_dynamic_shared = 48 * 1024;
};
struct Event {
  double ms = -1;
};

std::recursive_mutex mutex;
Context context;
thread_local Context* current = nullptr;
std::map<CUdeviceptr, size_t> allocations;
std::set<void*> streams;
std::set<Event*> events;
std::set<Module*> modules;
std::set<Function*> functions;

constexpr CUresult kInvalidValue = 1, kInvalidContext = 201, kInvalidHandle = 400, kNotFound = 500,
                   kIllegalAddress = 700, kInvalidPtx = 218, kInvalidDevice = 101, kOutOfMemory = 2;

#define KILN_FAKE_NEEDS_CONTEXT()                                                \
  std::lock_guard<std::recursive_mutex> lock(mutex);                             \
  if (current != &context || context.refs <= 0) {                                \
    std::fprintf(stderr, "fake cuda: %s without a current context\n", __func__); \
    return kInvalidContext;                                                      \
  }

// The allocation holding [pointer, pointer + bytes).
bool Valid(CUdeviceptr pointer, size_t bytes) {
  auto it = allocations.upper_bound(pointer);
  if (it == allocations.begin()) return false;
  --it;
  return pointer >= it->first && pointer + bytes <= it->first + it->second;
}

// kiln queues everything on its own stream, never on the legacy default stream (nullptr).
bool ValidStream(void* stream) { return streams.count(stream) > 0; }

template <typename T>
T* At(CUdeviceptr base, long long index, bool& ok) {
  const CUdeviceptr p = base + index * sizeof(T);
  if (index < 0 || !Valid(p, sizeof(T))) {
    ok = false;
    static T dummy;
    return &dummy;
  }
  return reinterpret_cast<T*>(p);
}
}  // namespace

extern "C" {

CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : kInvalidValue; }
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
CUresult cuGetErrorName(CUresult e, const char** s) {
  switch (e) {
    case 0:
      *s = "CUDA_SUCCESS";
      return 0;
    case 1:
      *s = "CUDA_ERROR_INVALID_VALUE";
      return 0;
    case 2:
      *s = "CUDA_ERROR_OUT_OF_MEMORY";
      return 0;
    case 201:
      *s = "CUDA_ERROR_INVALID_CONTEXT";
      return 0;
    case 218:
      *s = "CUDA_ERROR_INVALID_PTX";
      return 0;
    case 400:
      *s = "CUDA_ERROR_INVALID_HANDLE";
      return 0;
    case 500:
      *s = "CUDA_ERROR_NOT_FOUND";
      return 0;
    case 700:
      *s = "CUDA_ERROR_ILLEGAL_ADDRESS";
      return 0;
  }
  *s = nullptr;
  return kInvalidValue;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  switch (e) {
    case 2:
      *s = "out of memory";
      return 0;
    case 218:
      *s = "a PTX JIT compilation failed";
      return 0;
    case 500:
      *s = "named symbol not found";
      return 0;
    case 700:
      *s = "an illegal memory access was encountered";
      return 0;
  }
  *s = "fake error";
  return 0;
}
CUresult cuDeviceGet(int* d, int ordinal) {
  if (ordinal != 0) return kInvalidDevice;
  *d = 0;
  return 0;
}
CUresult cuDeviceGetCount(int* c) {
  *c = 1;
  return 0;
}
CUresult cuDeviceGetName(char* name, int length, int device) {
  if (device != 0 || length < 9) return kInvalidValue;
  std::snprintf(name, length, "Fake H200");
  return 0;
}
CUresult cuDeviceGetAttribute(int* value, int attribute, int device) {
  if (device != 0) return kInvalidDevice;
  switch (attribute) {
    case 1:
      *value = 1024;
      return 0;
    case 2:
    case 3:
      *value = 1024;
      return 0;
    case 4:
      *value = 64;
      return 0;
    case 5:
      *value = 2147483647;
      return 0;
    case 6:
    case 7:
      *value = 65535;
      return 0;
    case 8:
      *value = 49152;
      return 0;
    case 10:
      *value = 32;
      return 0;
    case 16:
      *value = 132;
      return 0;
    case 75:
      *value = 9;
      return 0;
    case 76:
      *value = 0;
      return 0;
    case 97:
      *value = 232448;
      return 0;
  }
  return kInvalidValue;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int device) {
  if (device != 0) return kInvalidDevice;
  *bytes = 150'110'011'392ull;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int device) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (device != 0) return kInvalidDevice;
  ++context.refs;
  *ctx = &context;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (device != 0 || context.refs <= 0) return kInvalidValue;
  if (--context.refs == 0 && !allocations.empty()) {
    std::fprintf(stderr, "fake cuda: context released with %zu allocations\n", allocations.size());
  }
  return 0;
}
CUresult cuCtxSetCurrent(void* ctx) {
  if (ctx != &context) return kInvalidContext;
  current = &context;
  return 0;
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  KILN_FAKE_NEEDS_CONTEXT();
  *total = 150'110'011'392ull;
  *free = *total - 1000;
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (bytes == 0) return kInvalidValue;
  if (bytes > (size_t{1} << 34)) return kOutOfMemory;
  void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  std::memset(memory, 0xAB, bytes);  // garbage, as device memory is
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  allocations[*pointer] = bytes;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr pointer) {
  KILN_FAKE_NEEDS_CONTEXT();
  auto it = allocations.find(pointer);
  if (it == allocations.end()) return kInvalidValue;
  std::free(reinterpret_cast<void*>(pointer));
  allocations.erase(it);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!ValidStream(stream) || !Valid(d, n)) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!ValidStream(stream) || !Valid(s, n)) return kInvalidValue;
  std::memcpy(d, reinterpret_cast<void*>(s), n);
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!ValidStream(stream) || !Valid(s, n) || !Valid(d, n)) return kInvalidValue;
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<void*>(s), n);
  return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char value, size_t n, void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!ValidStream(stream) || !Valid(d, n)) return kInvalidValue;
  std::memset(reinterpret_cast<void*>(d), value, n);
  return 0;
}
CUresult cuStreamCreate(void** stream, unsigned flags) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (flags != 1) return kInvalidValue;  // kiln asks for CU_STREAM_NON_BLOCKING
  *stream = new int(0);
  streams.insert(*stream);
  return 0;
}
CUresult cuStreamDestroy_v2(void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!streams.erase(stream)) return kInvalidHandle;
  delete static_cast<int*>(stream);
  return 0;
}
CUresult cuStreamSynchronize(void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  return ValidStream(stream) ? 0 : kInvalidHandle;
}
CUresult cuEventCreate(Event** event, unsigned flags) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (flags != 0) return kInvalidValue;
  *event = new Event;
  events.insert(*event);
  return 0;
}
CUresult cuEventDestroy_v2(Event* event) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!events.erase(event)) return kInvalidHandle;
  delete event;
  return 0;
}
CUresult cuEventRecord(Event* event, void* stream) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!events.count(event) || !ValidStream(stream)) return kInvalidHandle;
  event->ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  return 0;
}
CUresult cuEventSynchronize(Event* event) {
  KILN_FAKE_NEEDS_CONTEXT();
  return events.count(event) ? 0 : kInvalidHandle;
}
CUresult cuEventElapsedTime_v2(float* ms, Event* start, Event* end) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!events.count(start) || !events.count(end) || start->ms < 0 || end->ms < 0) {
    return kInvalidHandle;
  }
  *ms = static_cast<float>(end->ms - start->ms);
  return 0;
}
CUresult cuModuleLoadDataEx(Module** module, const void* image, unsigned n, int* options,
                            void** values) {
  KILN_FAKE_NEEDS_CONTEXT();
  const std::string ptx(static_cast<const char*>(image));
  char* error_log = nullptr;
  size_t error_size = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == 5) error_log = static_cast<char*>(values[i]);
    if (options[i] == 6) error_size = reinterpret_cast<size_t>(values[i]);
  }
  auto m = new Module;
  for (size_t at = ptx.find(".entry "); at != std::string::npos; at = ptx.find(".entry ", at + 1)) {
    const size_t begin = at + 7;
    const size_t end = ptx.find('(', begin);
    if (end == std::string::npos) break;
    m->entries.insert(ptx.substr(begin, end - begin));
  }
  if (ptx.find("ret;") == std::string::npos || m->entries.empty()) {
    delete m;
    if (error_log != nullptr && error_size > 0) {
      std::snprintf(error_log, error_size, "ptxas fatal   : fake parse error in line 5");
    }
    return kInvalidPtx;
  }
  modules.insert(m);
  *module = m;
  return 0;
}
CUresult cuModuleUnload(Module* module) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!modules.erase(module)) return kInvalidHandle;
  delete module;
  return 0;
}
CUresult cuModuleGetFunction(Function** function, Module* module, const char* name) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!modules.count(module)) return kInvalidHandle;
  if (!module->entries.count(name)) return kNotFound;
  auto f = new Function{name};
  functions.insert(f);
  *function = f;
  return 0;
}
CUresult cuFuncSetAttribute(Function* function, int attribute, int value) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!functions.count(function) || attribute != 8 || value > 232448) return kInvalidValue;
  function->max_dynamic_shared = value;
  return 0;
}

CUresult cuLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                        void** extra) {
  KILN_FAKE_NEEDS_CONTEXT();
  if (!functions.count(f) || !ValidStream(stream) || extra != nullptr) return kInvalidHandle;
  if (gx == 0 || gy == 0 || gz == 0 || bx * by * bz > 1024 || bz > 64) return kInvalidValue;
  if (static_cast<int>(shared) > f->max_dynamic_shared) return kInvalidValue;
  const long long threads = static_cast<long long>(gx) * bx;  // 1-D kernels
  auto param = [&](int i) { return *static_cast<CUdeviceptr*>(params[i]); };
  bool ok = true;
  if (f->name == "kiln_add") {
    const long long n = *At<long long>(param(3), 0, ok);
    for (long long i = 0; ok && i < threads; ++i) {
      if (i >= n) continue;
      *At<float>(param(2), i, ok) = *At<float>(param(0), i, ok) + *At<float>(param(1), i, ok);
    }
  } else if (f->name == "kiln_gather") {
    const long long count = *At<long long>(param(3), 0, ok);
    const long long table = *At<long long>(param(3), 1, ok);
    for (long long i = 0; ok && i < threads; ++i) {
      if (i >= count) continue;
      const long long index = *At<long long>(param(1), i, ok);
      if (index < 0 || index >= table) {
        *At<long long>(param(4), 1, ok) = index;
        *At<long long>(param(4), 0, ok) = 1;
        *At<float>(param(2), i, ok) = 0;
        continue;
      }
      *At<float>(param(2), i, ok) = *At<float>(param(0), index, ok);
    }
  } else {
    return kNotFound;
  }
  if (!ok) {
    std::fprintf(stderr, "fake cuda: %s made an illegal memory access\n", f->name.c_str());
    return kIllegalAddress;
  }
  return 0;
}

}  // extern "C"
