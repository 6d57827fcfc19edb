// The `.kiln` blob: an ahead-of-time compiled graph in one file (docs/deploy.md).
//
// Layout (all integers little-endian):
//   header        64 bytes: magic "KILNBLOB", u32 format version, u32 section count,
//                 u64 file size, u64 section-table offset, u64 XXH3-64 of the section table,
//                 24 reserved bytes (zero)
//   section table one 64-byte entry per section: u32 kind, u32 flags (0), u64 offset,
//                 u64 size, u64 XXH3-64 of the section's bytes, 32-byte name (NUL padded; a
//                 code section's LLVM triple)
//   sections      each starting at a multiple of 64 bytes
// Sections: the signature (JSON: model name, inputs and outputs with names, dtypes, shapes), the
// launch plan (JSON: the runtime::ExecutableSpec — slots, steps with kernel symbol names,
// extents, grains, error contexts, GEMM/convolution descriptors — and the code targets), the
// weights (raw bytes, each constant at a 64-byte aligned offset so a mapped file is used in
// place), one code section per target triple (a shared object holding the kernels and GEMM
// micro-kernels), optionally the IR text of the graph, and optionally a Vulkan launch plan with
// its SPIR-V (VulkanPlan; run by runtime/vulkan/blob_vulkan.h when loaded with device "vulkan").
//
// ParseBlob validates everything that does not need the code: magic, version, bounds of every
// section and of every constant inside the weights, checksums, JSON structure, signature and
// launch-plan consistency (slot kinds, indices, sizes, step arguments). Model::Load then maps the
// code for this CPU and resolves every symbol. Neither ever reads outside the given bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime::blob {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'O', 'B'};
/// The format version this runtime reads and aot::Compile writes.
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kSectionEntryBytes = 64;
inline constexpr uint64_t kSectionNameBytes = 32;
/// Alignment of every section and of every constant inside the weights section.
inline constexpr uint64_t kSectionAlignment = 64;

enum class SectionKind : uint32_t {
  kSignature = 1,   // JSON
  kLaunchPlan = 2,  // JSON
  kWeights = 3,     // raw constant bytes
  kCode = 4,        // a shared object for the triple named by the entry
  kIrText = 5,      // the graph's IR text (ir::Print), for debugging
  kVulkanPlan = 6,  // JSON: the Vulkan launch plan (slots, shaders, dispatches, features)
  kSpirv = 7,       // the Vulkan plan's shaders: SPIR-V words, each shader at a 4-byte offset
};
/// "signature", "launch plan", "weights", "code", "ir text", "vulkan plan", "spirv"; "unknown"
/// otherwise.
const char* SectionKindName(SectionKind kind);

struct SectionEntry {
  SectionKind kind = SectionKind::kSignature;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes
  std::string name;
};

/// One input or output of the model.
struct TensorSpec {
  std::string name;
  std::string dtype;  // base::DTypeName spelling: "f32", "i64", ...
  int64_t element_size = 0;
  std::vector<int64_t> shape;
  int64_t size_bytes = 0;
};

struct Signature {
  std::string name;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

/// The machine code of one target: which section holds it and what it needs from the CPU.
struct CodeTarget {
  std::string triple;         // "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"
  std::string cpu;            // "znver3", "generic"
  std::string features;       // LLVM feature string the code was compiled with
  int vector_bits = 128;      // the GEMM micro-kernels' vector width ...
  int vector_registers = 16;  // ... and register count (they pick the tile shape)
  bool fma = false;
  /// The GEMM micro-kernel symbols the code exports (MicroKernelName).
  std::vector<std::string> micro_kernels;
  int section = -1;  // index into BlobView::sections
};

/// The Vulkan launch plan (sections kVulkanPlan + kSpirv), validated by ParseBlob: every slot,
/// shader and dispatch index in range, SPIR-V inside the SPIR-V section and walkable (header,
/// instruction bounds, a GLCompute entry point, LocalSize), constants inside the weights section,
/// and every capability the SPIR-V declares covered by `features`. runtime/vulkan/blob_vulkan.h
/// turns it into a VulkanExecutableSpec.
struct VulkanPlan {
  struct Slot {
    std::string kind;  // "input", "output", "arena", "constant", "error_flag"
    int64_t size = 0;
    int64_t index = 0;           // input / output
    int64_t offset = 0;          // arena
    int64_t weights_offset = 0;  // constant: bytes into the weights section
  };
  struct Shader {
    std::string name;
    uint64_t spirv_offset = 0;  // bytes into the SPIR-V section (a multiple of 4)
    uint64_t spirv_words = 0;
    int num_buffers = 0;
    int push_constant_bytes = 0;
    uint32_t local_size[3] = {1, 1, 1};  // from the module's OpExecutionMode LocalSize
  };
  struct Dispatch {
    int shader = 0;
    std::vector<int> buffers;  // slot indices, binding order
    std::vector<uint8_t> push_constants;
    uint32_t groups[3] = {1, 1, 1};
    std::string name;
    std::string error_context;
  };
  /// Vulkan device features the shaders need ("shaderInt64", "shaderFloat64", "shaderFloat16",
  /// "shaderInt16", "shaderInt8", "storageBuffer8BitAccess", "storageBuffer16BitAccess").
  std::vector<std::string> features;
  uint32_t api_major = 1, api_minor = 1;  // the Vulkan version the SPIR-V needs
  /// Arena offsets are multiples of this; a device whose minStorageBufferOffsetAlignment does not
  /// divide it cannot run the plan.
  int64_t offset_alignment = 256;
  std::vector<Slot> slots;
  std::vector<Shader> shaders;
  std::vector<Dispatch> dispatches;
  int plan_section = -1;
  int spirv_section = -1;
};

/// Known Vulkan feature names of VulkanPlan::features.
bool IsVulkanFeature(const std::string& name);
/// The device feature a SPIR-V capability needs (Float64 → "shaderFloat64", Int64, Float16,
/// Int16, Int8, StorageBuffer8/16BitAccess); nullptr for the others (Shader, ...).
const char* VulkanFeatureForCapability(uint32_t capability);

/// A blob parsed and validated (see the file comment). Holds copies of the small parts; the
/// weights and code stay in the caller's bytes (offsets into them).
struct BlobView {
  uint32_t version = 0;
  uint64_t file_size = 0;
  std::vector<SectionEntry> sections;
  Signature signature;
  std::vector<CodeTarget> targets;
  std::string launch_plan_json;  // the launch plan section's text
  int weights_section = -1;
  int ir_text_section = -1;
  /// Number of slots and steps of the launch plan.
  int num_slots = 0;
  int num_steps = 0;
  /// The Vulkan launch plan, when the blob has one (aot::CompileOptions::vulkan).
  std::shared_ptr<const VulkanPlan> vulkan;
};

/// Parses and validates `bytes` (a whole blob). Errors are InvalidArgument (FailedPrecondition
/// for another format version) and read "blob: <what> (byte offset N)" / "blob: section K
/// (launch plan): ...".
absl::StatusOr<BlobView> ParseBlob(std::span<const std::byte> bytes);

/// A readable summary for `kiln inspect`: version, sections (kind, name, offset, size,
/// checksum), signature, targets, slot and step counts.
std::string DescribeBlob(const BlobView& view);

/// The LLVM architecture name this runtime was built for ("x86_64", "aarch64"): Model::Load
/// runs the code section whose triple starts with it.
const char* HostArchitecture();

/// Runs a blob on a device other than the CPU (its own section). Thread-safe to Run concurrently.
class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  virtual absl::Status Run(std::span<const void* const> inputs,
                           std::span<void* const> outputs) const = 0;
  /// "vulkan: <device name>".
  virtual std::string Describe() const = 0;
};

/// Makes a Vulkan runner for a parsed blob. `bytes` is the whole blob (kept alive by `keep`);
/// `selector` is what follows "vulkan:" (empty: the default device). Installed by
/// runtime::vulkan::EnableVulkanBlobs() (runtime/vulkan/blob_vulkan.h), which libkiln_runtime.so
/// calls when it is loaded; kiln_runtime itself does not link the Vulkan driver.
using VulkanRunnerFactory = absl::StatusOr<std::unique_ptr<DeviceRunner>> (*)(
    const BlobView& view, std::span<const std::byte> bytes, std::shared_ptr<const void> keep,
    const std::string& selector);
void SetVulkanRunnerFactory(VulkanRunnerFactory factory);

struct LoadOptions {
  /// "" or "cpu": the code section for this CPU. "vulkan", "vulkan:<index>" or
  /// "vulkan:<name substring>": the Vulkan section on that device (runtime::vulkan::VulkanDevice
  /// selectors; "vulkan" alone is $KILN_VULKAN_DEVICE or the first GPU). A blob without a Vulkan
  /// section, a runtime without Vulkan, no such device or a device lacking a feature the
  /// section requires: FailedPrecondition saying which.
  std::string device;
};

/// A loaded, ready-to-run blob. Thread-safe to Run concurrently.
class Model {
 public:
  /// Maps `path` read-only and loads it (weights used in place from the mapping).
  static absl::StatusOr<std::unique_ptr<Model>> LoadFile(const std::string& path,
                                                         const LoadOptions& options = {});
  /// Copies `bytes` into aligned memory and loads them.
  static absl::StatusOr<std::unique_ptr<Model>> LoadMemory(std::span<const std::byte> bytes,
                                                           const LoadOptions& options = {});

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Signature& signature() const;
  const BlobView& view() const;
  /// "cpu (<triple>)" or the DeviceRunner's description ("vulkan: llvmpipe ...").
  const std::string& device() const;
  /// Runs once: inputs[i] / outputs[i] point to signature().inputs[i].size_bytes bytes.
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::blob
