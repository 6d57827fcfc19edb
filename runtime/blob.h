// The `.kiln` blob: an ahead-of-time compiled graph in one file (docs/deploy.md).
//
// Layout (all integers little-endian):
//   header        64 bytes: magic "KILNBLOB", u32 format version, u32 section count,
//                 u64 file size, u64 section-table offset, u64 XXH3-64 of the section table,
//                 24 reserved bytes (zero)
//   section table one 64-byte entry per section: u32 kind, u32 flags (0), u64 offset,
//                 u64 size, u64 XXH3-64 of the section's bytes, 32-byte name (NUL padded)
//   sections      each starting at a multiple of 64 bytes
// Sections (format version 2): the signature (JSON: model name, inputs and outputs with names,
// dtypes, shapes), the weights (raw bytes, each constant at a 64-byte aligned offset so a mapped
// file is used in place), optionally the IR text of the graph, and per target ("cpu",
// "vulkan", ...) one plan section named by the target and any number of payload sections named
// "<target>:<payload>" (the CPU's shared objects "cpu:<triple>", Vulkan's "vulkan:spirv").
//
// This file knows no target: a driver registers a TargetDriver for its target name
// (runtime/blob_target.h) that validates the target's plan and payloads and loads them on a
// device. The CPU driver (runtime/cpu/blob_cpu.h) is built in; others register themselves
// (runtime::vulkan::EnableVulkanBlobs()).
//
// ParseBlob validates everything that does not need a device: magic, version, bounds of every
// section, checksums, the signature, and each target's plan through its driver (a target no
// driver in this runtime knows is kept unparsed: it can only be inspected, not run). Model::Load
// then has the driver of the chosen device map the code or build the pipelines. Neither ever
// reads outside the given bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime::blob {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'O', 'B'};
/// The format version this runtime reads and aot::Compile writes. Version 1 (kinds 6 and 7 for
/// Vulkan, the CPU plan as an unnamed kind 2) is refused with a message asking to recompile.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kSectionEntryBytes = 64;
inline constexpr uint64_t kSectionNameBytes = 32;
/// Alignment of every section and of every constant inside the weights section.
inline constexpr uint64_t kSectionAlignment = 64;

enum class SectionKind : uint32_t {
  kSignature = 1,  // JSON
  kPlan = 2,       // a target's launch plan; the entry's name is the target ("cpu", "vulkan")
  kWeights = 3,    // raw constant bytes, shared by every target's plan
  kPayload = 4,    // a target's code or shaders; named "<target>:<payload>"
  kIrText = 5,     // the graph's IR text (ir::Print), for debugging
};
/// "signature", "plan", "weights", "payload", "ir text"; "unknown" otherwise.
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

/// A target's plan as its driver parsed and validated it (runtime/blob_target.h); each driver
/// derives its own (cpu::CpuBlobPlan, vulkan::VulkanPlan).
class TargetPlan {
 public:
  virtual ~TargetPlan() = default;
  /// Lines for DescribeBlob (`kiln inspect`), each ending in a newline.
  virtual std::string Describe() const = 0;
};

/// One target's sections, and its plan as its driver parsed it.
struct TargetEntry {
  std::string name;                   // "cpu", "vulkan": the plan section's name
  int plan_section = -1;              // index into BlobView::sections
  std::vector<int> payload_sections;  // its payloads, in file order
  /// Null when no driver for this target is registered in this runtime (the sections were
  /// bounds- and checksum-checked but not parsed).
  std::shared_ptr<const TargetPlan> plan;
};

/// A blob parsed and validated (see the file comment). Holds copies of the small parts; the
/// weights and code stay in the caller's bytes (offsets into them).
struct BlobView {
  uint32_t version = 0;
  uint64_t file_size = 0;
  std::vector<SectionEntry> sections;
  Signature signature;
  int weights_section = -1;
  int ir_text_section = -1;
  /// One entry per plan section, in file order.
  std::vector<TargetEntry> targets;

  /// The entry of target `name`, or nullptr.
  const TargetEntry* Target(std::string_view name) const;
  /// Target `name`'s parsed plan as the driver's type (e.g. cpu::CpuBlobPlan), or nullptr when
  /// the blob has no such target, no driver parsed it, or the plan is of another type.
  template <class Plan>
  const Plan* PlanOf(std::string_view name) const {
    const TargetEntry* target = Target(name);
    return target == nullptr ? nullptr : dynamic_cast<const Plan*>(target->plan.get());
  }
  /// The weights section's bytes within the blob `bytes` (empty without one).
  std::span<const std::byte> Weights(std::span<const std::byte> bytes) const;
  /// Section `index`'s bytes within the blob `bytes` (ParseBlob checked its bounds).
  std::span<const std::byte> SectionBytes(std::span<const std::byte> bytes, int index) const;
};

/// Parses and validates `bytes` (a whole blob). Errors are InvalidArgument (FailedPrecondition
/// for another format version) and read "blob: <what> (byte offset N)" / "blob: section K
/// (plan \"cpu\"): ...".
absl::StatusOr<BlobView> ParseBlob(std::span<const std::byte> bytes);

/// A readable summary for `kiln inspect`: version, sections (kind, name, offset, size,
/// checksum), signature, and each target's plan as its driver describes it.
std::string DescribeBlob(const BlobView& view);

/// A blob loaded on one device by its target's driver. Thread-safe to Run concurrently.
class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  /// inputs[i] / outputs[i] point to signature.inputs[i].size_bytes bytes (host memory).
  virtual absl::Status Run(std::span<const void* const> inputs,
                           std::span<void* const> outputs) const = 0;
  /// "cpu (x86_64-unknown-linux-gnu)", "vulkan: <device name> ...".
  virtual std::string Describe() const = 0;
};

struct LoadOptions {
  /// "<target>" or "<target>:<selector>": the target's plan, loaded by its registered driver on
  /// the device the selector names ("" or "cpu": this CPU's code section; "vulkan",
  /// "vulkan:<index>", "vulkan:<name substring>": runtime::vulkan::VulkanDevice selectors).
  /// A blob without that target, a runtime without its driver, no such device or a device
  /// lacking what the plan requires: FailedPrecondition saying which; a name that is neither a
  /// driver nor a kiln backend: InvalidArgument.
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
  /// The DeviceRunner's description: "cpu (<triple>)", "vulkan: llvmpipe ...".
  const std::string& device() const;
  /// Runs once: inputs[i] / outputs[i] point to signature().inputs[i].size_bytes bytes.
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::blob
