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
// micro-kernels), and optionally the IR text of the graph.
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
};
/// "signature", "launch plan", "weights", "code", "ir text"; "unknown" otherwise.
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
  std::string dtype;  // ir::DTypeName spelling: "f32", "i64", ...
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

/// A loaded, ready-to-run blob. Thread-safe to Run concurrently.
class Model {
 public:
  /// Maps `path` read-only and loads it (weights used in place from the mapping).
  static absl::StatusOr<std::unique_ptr<Model>> LoadFile(const std::string& path);
  /// Copies `bytes` into aligned memory and loads them.
  static absl::StatusOr<std::unique_ptr<Model>> LoadMemory(std::span<const std::byte> bytes);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Signature& signature() const;
  const BlobView& view() const;
  /// Runs once: inputs[i] / outputs[i] point to signature().inputs[i].size_bytes bytes.
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::blob
