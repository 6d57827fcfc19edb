// The CUDA target of `.kiln` blobs: its plan (runtime/blob.h's plan section "cuda" and payload
// "cuda:ptx"), parsed and checked, and run on a CudaDevice. EnableCudaBlobs() registers it with
// the blob loader (runtime/blob_target.h), so runtime::blob::Model loads blobs on "cuda" devices
// (docs/deploy.md).
//
// The blob carries PTX, not machine code: the driver JIT-compiles PTX written for compute_XY on
// every GPU of compute capability X.Y or newer, so a blob compiled for sm_80 (the default of
// aot::CompileOptions::cuda_arch) runs on A100, H100 and H200 alike, and running it needs only
// the NVIDIA driver (no CUDA toolkit, no NVRTC).
//
// The plan section (JSON):
//   {"name": "mlp", "arch": "sm_80",
//    "slots":    [{"kind": "input"|"output"|"arena"|"constant"|"error_flag", "size": bytes,
//                  "index": k (input, output), "offset": bytes (arena),
//                  "weights_offset": bytes into the weights section (constant)}, ...],
//    "modules":  [{"offset": bytes into the payload, "bytes": length}, ...],
//    "kernels":  [{"name": entry, "module": m, "num_buffers": n,
//                  "max_dynamic_shared_bytes": bytes}, ...],
//    "launches": [{"kernel": k, "buffers": [slot, ...], "grid": [x, y, z], "block": [x, y, z],
//                  "shared_bytes": bytes, "name": "...", "error_context": "..."}, ...]}
// The payload "cuda:ptx" is the modules' PTX texts, concatenated.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/blob.h"
#include "runtime/cuda/cuda_device.h"

namespace kiln::runtime::cuda {

/// The CUDA plan of a blob (plan section "cuda", payload "cuda:ptx"), validated by ParseBlob once
/// EnableCudaBlobs() registered the driver: every slot, module and kernel index in range, block
/// sizes and shared memory within what any CUDA device allows, each module's PTX inside the
/// payload and looking like PTX for the plan's architecture (a ".version" directive, then
/// ".target <arch>"), each kernel's name declared as an entry of its module, constants inside
/// the weights section. BlobView::PlanOf<CudaPlan>("cuda") returns it; SpecFromBlob turns it
/// into a CudaExecutableSpec.
class CudaPlan final : public blob::TargetPlan {
 public:
  struct Slot {
    std::string kind;  // "input", "output", "arena", "constant", "error_flag"
    int64_t size = 0;
    int64_t index = 0;           // input / output
    int64_t offset = 0;          // arena (a multiple of runtime::kBufferAlignment)
    int64_t weights_offset = 0;  // constant: bytes into the weights section
  };
  /// One PTX module: a range of the "cuda:ptx" payload.
  struct Module {
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };
  struct Kernel {
    std::string name;  // an .entry of the module
    int module = 0;
    int num_buffers = 0;
    int max_dynamic_shared_bytes = 0;
  };
  struct Launch {
    int kernel = 0;
    std::vector<int> buffers;  // slot indices, parameter order
    uint32_t grid[3] = {1, 1, 1};
    uint32_t block[3] = {1, 1, 1};
    uint32_t shared_bytes = 0;
    std::string name;
    std::string error_context;
  };
  /// The architecture the PTX was written for ("sm_80"): devices of compute capability
  /// compute_major.compute_minor or newer run it.
  std::string arch;
  int compute_major = 0, compute_minor = 0;
  std::vector<Slot> slots;
  std::vector<Module> modules;
  std::vector<Kernel> kernels;
  std::vector<Launch> launches;
  int plan_section = -1;
  int ptx_section = -1;  // the payload "cuda:ptx"

  /// "cuda plan (section 4, PTX in section 5): sm_80, 6 slots, 3 modules (12345 bytes of PTX),
  /// 3 kernels, 3 launches" and one line per kernel.
  std::string Describe() const override;
};

/// Parses and validates a CUDA plan: `plan_json` is the plan section's bytes, `ptx` the
/// "cuda:ptx" payload's, `signature` and `weights_size` the blob's. `where` prefixes errors
/// ("section 4 (plan \"cuda\")"), which read "blob: <where>: <field path>: <what>", e.g.
/// "blob: section 4 (plan \"cuda\"): modules[1]: PTX bytes [4096, +812) lie outside the PTX
/// section of 4500 bytes". What the registered driver's Parse runs (also the fuzzer's entry).
absl::StatusOr<std::shared_ptr<CudaPlan>> ParseCudaPlan(std::span<const std::byte> plan_json,
                                                        const blob::Signature& signature,
                                                        std::span<const std::byte> ptx,
                                                        uint64_t weights_size,
                                                        const std::string& where);

/// Registers the CUDA target's driver with the blob loader, so ParseBlob validates CUDA plans and
/// Model::Load with LoadOptions::device "cuda" or "cuda:<ordinal>" works (it opens
/// CudaDevice::Open(ordinal), checks the device with CheckDeviceCanRun, loads the spec and runs
/// on host memory). libkiln_runtime.so calls it when it is loaded; C++ programs linking
/// kiln_runtime_cuda_blob call it once. Idempotent.
void EnableCudaBlobs();

/// OK when `device` can run `plan`: a compute capability of at least the plan's architecture
/// (the driver JIT-compiles older PTX forward, never back), each launch's block within the
/// device's block limits and its grid within the grid limits, each kernel's and launch's dynamic
/// shared memory within what the device allows. Otherwise FailedPrecondition naming the device
/// and what it lacks, e.g. "blob: cuda device 0 \"Tesla T4\" has compute capability 7.5, but the
/// blob's CUDA section is PTX for sm_80 (compute capability 8.0 or newer)".
absl::Status CheckDeviceCanRun(const CudaPlan& plan, const DeviceInfo& device);

/// The plan as a CudaExecutableSpec: PTX copied out of the blob's payload; constant slots point
/// at their bytes in the weights section in place (runtime::Slot::external), so `bytes` must
/// outlive the CudaDevice::Load of the spec (Load uploads them to the device).
absl::StatusOr<CudaExecutableSpec> SpecFromBlob(const blob::BlobView& view, const CudaPlan& plan,
                                                std::span<const std::byte> bytes);

}  // namespace kiln::runtime::cuda
