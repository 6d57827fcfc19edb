// Devices and backend tags.
//
// A backend tag is a thin type that names where a Tensor<B, R, K> runs; it carries no code, so
// switching a program from one backend to another costs no build time. Each tag has a nested
// `Device` type that default-constructs to that backend's first device:
//
//   kiln::Reference::Device device;     // reference:0, ir's interpreter (the test oracle)
//   kiln::Any::Device device;           // read from KILN_DEVICE (default reference:0)
//
// Adding a backend (Cpu, Vulkan, Cuda arrive with their issues) is one tag defined with
// KILN_DEFINE_BACKEND below plus an executor registered with detail::RegisterExecutor.
#pragma once

#include <source_location>
#include <string>
#include <string_view>

#include "runtime/caching_allocator.h"
#include "runtime/device.h"

namespace kiln {

/// One device: a backend kind and an index ("cpu:0"). Every tensor lives on one device, and ops
/// between tensors on different devices are errors.
class Device {
 public:
  explicit Device(runtime::DeviceId id) : id_(id) {}

  /// Parses "reference", "cpu:1", ...; throws kiln::Error for an unknown name.
  static Device Parse(std::string_view name,
                      std::source_location loc = std::source_location::current());

  const runtime::DeviceId& id() const { return id_; }
  runtime::DeviceKind kind() const { return id_.kind; }
  int index() const { return id_.index; }
  /// "reference:0".
  std::string ToString() const { return id_.ToString(); }

  bool operator==(const Device&) const = default;

  /// Whether tensors can live on this device now (torch.cuda.is_available): its backend is linked
  /// into the program and, for a device-memory backend, the device opens (a driver and a GPU are
  /// present). When not, `reason` (if given) gets the error realizing a tensor would throw.
  bool is_available(std::string* reason = nullptr) const;

  /// Bytes copied between host memory and this device's memory since the process started: for a
  /// device-memory backend (Vulkan), the uploads of host values and the read-backs (into_data,
  /// item, printing, checkpoints). Zero for reference and cpu, whose tensors are host memory.
  runtime::TransferStats transfer_stats(
      std::source_location loc = std::source_location::current()) const;
  /// This device's caching allocator (torch.cuda.memory_stats): bytes held by live tensors, their
  /// peak, bytes cached for reuse, and how many allocations reached the driver. Zero for
  /// reference and cpu.
  runtime::AllocatorStats memory_stats(
      std::source_location loc = std::source_location::current()) const;
  /// Gives this device's cached, unused memory back to the driver (torch.cuda.empty_cache).
  void empty_cache(std::source_location loc = std::source_location::current()) const;

 private:
  runtime::DeviceId id_;
};

/// What a backend tag tells the non-template engine: its name for messages, and which device
/// kinds its tensors may live on.
struct BackendTraits {
  const char* name;
  /// True for Any: every device kind this build can run is accepted.
  bool any_kind;
  runtime::DeviceKind kind;
};

namespace detail {
/// Throws kiln::Error when `device` cannot hold tensors of backend `traits` (a Cuda device given
/// to a Tensor<Reference>, or a device whose backend this build lacks).
void CheckDevice(const BackendTraits& traits, const Device& device, const char* op,
                 const std::source_location& loc);
}  // namespace detail

// Defines a backend tag `Tag` for device kind `Kind`.
#define KILN_DEFINE_BACKEND(Tag, Kind)                                                       \
  struct Tag {                                                                               \
    static constexpr ::kiln::BackendTraits kTraits{#Tag, false, Kind};                       \
    struct Device : ::kiln::Device {                                                         \
      Device() : Device(0) {}                                                                \
      explicit Device(int index) : ::kiln::Device(::kiln::runtime::DeviceId{Kind, index}) {} \
    };                                                                                       \
  }

/// The reference backend: ir's interpreter (plain loops, f64 accumulation). Slow and obviously
/// correct: the oracle every other backend is tested against.
KILN_DEFINE_BACKEND(Reference, runtime::DeviceKind::kReference);

/// The CPU backend: graphs are simplified, fused and compiled to native code with LLVM (cached
/// per graph structure in memory and per kernel on disk under KILN_CACHE_DIR), then run on the
/// runtime's thread pool (KILN_NUM_THREADS, default: every core).
KILN_DEFINE_BACKEND(Cpu, runtime::DeviceKind::kCpu);

/// The Vulkan backend: graphs are fused and compiled to GLSL compute shaders, then SPIR-V
/// (codegen/vulkan), and run on a Vulkan device (runtime/vulkan). `Vulkan::Device(0)` is the
/// default device ($KILN_VULKAN_DEVICE, else the first discrete GPU, integrated GPU, any
/// device; Mesa's lavapipe is a CPU device); index N > 0 is the N-th device the loader lists.
/// Without a Vulkan device, realizing a tensor throws a kiln::Error that says so and suggests
/// the Cpu backend. Present when kiln is built with KILN_ENABLE_VULKAN.
KILN_DEFINE_BACKEND(Vulkan, runtime::DeviceKind::kVulkan);

/// The CUDA backend: graphs are fused and compiled to CUDA C, then PTX with NVRTC (codegen/cuda),
/// and run through the CUDA driver (runtime/cuda) on NVIDIA GPUs; tensors stay in device memory.
/// `Cuda::Device(i)` is CUDA device ordinal i. Nothing of CUDA is linked: NVRTC (libnvrtc.so.13
/// or .12) and the driver (libcuda.so.1) are loaded when first used, so without a driver or GPU
/// realizing a tensor throws a kiln::Error that says so and suggests the Cpu backend.
/// Present when the program links kiln_backend_cuda (kiln::kiln does); docs/cuda.md.
KILN_DEFINE_BACKEND(Cuda, runtime::DeviceKind::kCuda);

/// A backend chosen at run time. `Any::Device{}` reads the KILN_DEVICE environment variable
/// ("reference", "cpu:0", "vulkan:0", "cuda:1", ...; unset means reference:0) and throws
/// kiln::Error when it names an unknown device or a backend this build lacks.
struct Any {
  static constexpr BackendTraits kTraits{"Any", true, runtime::DeviceKind::kReference};
  struct Device : ::kiln::Device {
    Device(std::source_location loc = std::source_location::current());  // NOLINT
    /// Any device, e.g. one a configuration file names.
    Device(const ::kiln::Device& device) : ::kiln::Device(device) {}  // NOLINT: implicit
  };
};

}  // namespace kiln
