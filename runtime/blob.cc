#include "runtime/blob.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/dtype.h"
#include "runtime/blob_json.h"
#include "runtime/blob_target.h"
#include "runtime/buffer.h"
#include "runtime/device.h"
#include "xxhash.h"

namespace kiln::runtime::blob {
namespace {

using internal::Bad;
using internal::CheckedProduct;
using internal::json;
using internal::ParseJson;
using internal::Reader;

#define KILN_ASSIGN KILN_BLOB_ASSIGN

// Every size and count in a blob is far below these; larger values are hostile.
constexpr uint64_t kMaxSections = 64;
constexpr int64_t kMaxRank = 16;
constexpr int64_t kMaxDimension = int64_t{1} << 40;

uint32_t ReadU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t ReadU64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

absl::StatusOr<TensorSpec> ParseTensor(const Reader& r, const json& j, const std::string& path) {
  TensorSpec spec;
  KILN_ASSIGN(name, r.String(j, path, "name"));
  KILN_ASSIGN(dtype, r.String(j, path, "dtype"));
  std::optional<base::DType> parsed = base::ParseDType(dtype);
  if (!parsed.has_value()) return r.Error(path + ".dtype", "unknown dtype \"" + dtype + "\"");
  KILN_ASSIGN(shape, r.Ints(j, path, "shape", kMaxRank, 0, kMaxDimension));
  spec.name = std::move(name);
  spec.dtype = dtype;
  spec.element_size = base::DTypeSize(*parsed);
  spec.shape = std::move(shape);
  absl::StatusOr<int64_t> bytes = CheckedProduct(spec.shape, spec.element_size);
  if (!bytes.ok()) return r.Error(path + ".shape", "the tensor's byte size overflows");
  spec.size_bytes = *bytes;
  return spec;
}

absl::StatusOr<Signature> ParseSignature(const json& j, const std::string& where) {
  const Reader r(where);
  Signature signature;
  KILN_ASSIGN(name, r.String(j, "signature", "name"));
  signature.name = name;
  for (const char* key : {"inputs", "outputs"}) {
    KILN_ASSIGN(list, r.Array(j, "signature", key, 1 << 16));
    for (size_t i = 0; i < list->size(); ++i) {
      KILN_ASSIGN(spec, ParseTensor(r, (*list)[i], absl::StrCat(key, "[", i, "]")));
      (std::string(key) == "inputs" ? signature.inputs : signature.outputs).push_back(spec);
    }
  }
  return signature;
}

// A target name: what a plan section is called and what precedes ':' in its payloads' names.
bool ValidTargetName(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
  });
}

}  // namespace

const char* SectionKindName(SectionKind kind) {
  switch (kind) {
    case SectionKind::kSignature:
      return "signature";
    case SectionKind::kPlan:
      return "plan";
    case SectionKind::kWeights:
      return "weights";
    case SectionKind::kPayload:
      return "payload";
    case SectionKind::kIrText:
      return "ir text";
  }
  return "unknown";
}

const TargetEntry* BlobView::Target(std::string_view name) const {
  for (const TargetEntry& t : targets) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const std::byte> BlobView::SectionBytes(std::span<const std::byte> bytes,
                                                  int index) const {
  const SectionEntry& s = sections[static_cast<size_t>(index)];
  return bytes.subspan(s.offset, s.size);
}

std::span<const std::byte> BlobView::Weights(std::span<const std::byte> bytes) const {
  if (weights_section < 0) return {};
  return SectionBytes(bytes, weights_section);
}

absl::StatusOr<BlobView> ParseBlob(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes) {
    return Bad("truncated: ", bytes.size(), " bytes, the header alone is ", kHeaderBytes);
  }
  const std::byte* base = bytes.data();
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0) {
    return Bad("bad magic at byte offset 0 (not a .kiln blob)");
  }
  BlobView view;
  view.version = ReadU32(base + 8);
  if (view.version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "blob: blob format version ", view.version, ", this runtime reads ", kFormatVersion,
        view.version < kFormatVersion ? " (the blob is older: compile it again with `kiln compile`)"
                                      : " (the blob is newer: use a newer kiln runtime)"));
  }
  const uint32_t count = ReadU32(base + 12);
  view.file_size = ReadU64(base + 16);
  const uint64_t table_offset = ReadU64(base + 24);
  const uint64_t table_checksum = ReadU64(base + 32);
  if (view.file_size != bytes.size()) {
    return Bad("the header says ", view.file_size, " bytes but there are ", bytes.size(),
               view.file_size > bytes.size() ? " (truncated)" : "", " (byte offset 16)");
  }
  if (count == 0 || count > kMaxSections) {
    return Bad(count, " sections (byte offset 12): expected 1 to ", kMaxSections);
  }
  const uint64_t table_bytes = count * kSectionEntryBytes;
  if (table_offset < kHeaderBytes || table_offset > bytes.size() ||
      table_bytes > bytes.size() - table_offset) {
    return Bad("the section table [", table_offset, ", +", table_bytes,
               ") lies outside the file (byte offset 24)");
  }
  if (XXH3_64bits(base + table_offset, table_bytes) != table_checksum) {
    return Bad("section table checksum mismatch (byte offset ", table_offset, ")");
  }
  int signature_section = -1;
  std::map<std::string, int> payload_owner;  // payload section -> its target's name
  for (uint32_t i = 0; i < count; ++i) {
    const std::byte* e = base + table_offset + i * kSectionEntryBytes;
    const uint64_t at = table_offset + i * kSectionEntryBytes;
    SectionEntry entry;
    const uint32_t kind = ReadU32(e);
    entry.offset = ReadU64(e + 8);
    entry.size = ReadU64(e + 16);
    entry.checksum = ReadU64(e + 24);
    const char* name = reinterpret_cast<const char*>(e + 32);
    entry.name.assign(name, strnlen(name, kSectionNameBytes));
    if (kind < 1 || kind > 5)
      return Bad("section ", i, ": unknown kind ", kind, " (byte offset ", at, ")");
    entry.kind = static_cast<SectionKind>(kind);
    const std::string what = absl::StrCat("section ", i, " (", SectionKindName(entry.kind), ")");
    if (entry.offset % kSectionAlignment != 0 || entry.offset > bytes.size() ||
        entry.size > bytes.size() - entry.offset) {
      return Bad(what, ": bytes [", entry.offset, ", +", entry.size,
                 ") are unaligned or outside the file of ", bytes.size(), " bytes (byte offset ",
                 at + 8, ")");
    }
    if (XXH3_64bits(base + entry.offset, entry.size) != entry.checksum) {
      return Bad(what, ": checksum mismatch (section at byte offset ", entry.offset, ")");
    }
    const int index = static_cast<int>(i);
    auto unique = [&](int& slot) -> absl::Status {
      if (slot >= 0) return Bad(what, ": a second ", SectionKindName(entry.kind), " section");
      slot = index;
      return absl::OkStatus();
    };
    absl::Status status;
    switch (entry.kind) {
      case SectionKind::kSignature:
        status = unique(signature_section);
        break;
      case SectionKind::kWeights:
        status = unique(view.weights_section);
        break;
      case SectionKind::kIrText:
        status = unique(view.ir_text_section);
        break;
      case SectionKind::kPlan:
        if (!ValidTargetName(entry.name)) {
          status = Bad(what, ": \"", absl::CHexEscape(entry.name),
                       "\" is not a target name (lower-case letters, digits, _)");
        } else if (view.Target(entry.name) != nullptr) {
          status = Bad(what, ": a second plan for target \"", entry.name, "\"");
        } else {
          view.targets.push_back(TargetEntry{entry.name, index, {}, nullptr});
        }
        break;
      case SectionKind::kPayload:
        break;
    }
    if (!status.ok()) return status;
    view.sections.push_back(std::move(entry));
  }
  // Payloads after the plans: a payload may precede its target's plan in the table.
  for (size_t i = 0; i < view.sections.size(); ++i) {
    const SectionEntry& entry = view.sections[i];
    if (entry.kind != SectionKind::kPayload) continue;
    const size_t colon = entry.name.find(':');
    const std::string target = entry.name.substr(0, colon);
    TargetEntry* owner = nullptr;
    for (TargetEntry& t : view.targets) {
      if (t.name == target) owner = &t;
    }
    if (colon == std::string::npos || owner == nullptr) {
      return Bad("section ", i, " (payload \"", absl::CHexEscape(entry.name),
                 "\"): its name is not <target>:<payload> for a target with a plan section");
    }
    owner->payload_sections.push_back(static_cast<int>(i));
  }
  if (signature_section < 0) return Bad("no signature section");
  if (view.targets.empty()) return Bad("no plan section");
  const std::string sig_where = absl::StrCat("section ", signature_section, " (signature)");
  KILN_ASSIGN(sig_json, ParseJson(view.SectionBytes(bytes, signature_section), sig_where));
  KILN_ASSIGN(signature, ParseSignature(sig_json, sig_where));
  view.signature = std::move(signature);
  // Each target through its driver; one this runtime has no driver for stays unparsed.
  for (TargetEntry& target : view.targets) {
    const std::shared_ptr<const TargetDriver> driver = FindTargetDriver(target.name);
    if (driver == nullptr) continue;
    KILN_ASSIGN(plan, driver->Parse(view, target, bytes));
    target.plan = std::move(plan);
  }
  return view;
}

std::string DescribeBlob(const BlobView& view) {
  std::string text =
      absl::StrCat("kiln blob, format version ", view.version, ", ", view.file_size, " bytes\n");
  absl::StrAppend(&text, "sections:\n");
  for (size_t i = 0; i < view.sections.size(); ++i) {
    const SectionEntry& s = view.sections[i];
    absl::StrAppend(&text, "  ", i, ": ", SectionKindName(s.kind),
                    s.name.empty() ? "" : absl::StrCat(" \"", s.name, "\""), " offset ", s.offset,
                    " size ", s.size, " xxh3 ", absl::Hex(s.checksum, absl::kZeroPad16), "\n");
  }
  auto tensor = [](const TensorSpec& t) {
    return absl::StrCat(t.name, ": ", t.dtype, "[", absl::StrJoin(t.shape, ","), "]");
  };
  absl::StrAppend(&text, "signature \"", view.signature.name, "\":\n");
  for (const TensorSpec& t : view.signature.inputs)
    absl::StrAppend(&text, "  input ", tensor(t), "\n");
  for (const TensorSpec& t : view.signature.outputs)
    absl::StrAppend(&text, "  output ", tensor(t), "\n");
  for (const TargetEntry& t : view.targets) {
    if (t.plan != nullptr) {
      absl::StrAppend(&text, t.plan->Describe());
    } else {
      absl::StrAppend(&text, "target ", t.name, " (plan in section ", t.plan_section, ", ",
                      t.payload_sections.size(),
                      " payloads): no driver for it in this runtime, not parsed\n");
    }
  }
  return text;
}

// ---- Model ------------------------------------------------------------------------------------

namespace {

// "" → the CPU; "<target>" / "<target>:<selector>" → its driver and the selector.
struct DeviceChoice {
  std::string target;
  std::string selector;
  std::shared_ptr<const TargetDriver> driver;
};

absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& device) {
  DeviceChoice choice;
  const std::string spec = device.empty() ? "cpu" : device;
  const size_t colon = spec.find(':');
  choice.target = spec.substr(0, colon);
  if (colon != std::string::npos) choice.selector = spec.substr(colon + 1);
  choice.driver = FindTargetDriver(choice.target);
  if (choice.driver != nullptr) return choice;
  const std::string drivers = absl::StrJoin(TargetDriverNames(), ", ");
  if (ParseDeviceId(choice.target).ok()) {
    // A kiln backend whose driver this runtime lacks.
    return absl::FailedPreconditionError(
        absl::StrCat("blob: this runtime has no ", choice.target, " driver (it has: ", drivers,
                     "); C++ programs register one, e.g. runtime::vulkan::EnableVulkanBlobs()"));
  }
  return absl::InvalidArgumentError(absl::StrCat("blob: unknown device \"", device,
                                                 "\" (expected a target: ", drivers,
                                                 ", optionally with :<selector>)"));
}

}  // namespace

struct Model::Impl {
  LoadOptions options;
  std::string device;
  std::unique_ptr<DeviceRunner> runner;
  BlobView view;
  // Keeps the bytes alive: an mmap of the file or an aligned copy.
  std::shared_ptr<const std::byte> bytes;
  size_t size = 0;

  absl::Status Load() {
    std::span<const std::byte> all(bytes.get(), size);
    KILN_ASSIGN(parsed, ParseBlob(all));
    view = std::move(parsed);
    KILN_ASSIGN(choice, ChooseDevice(options.device));
    const TargetEntry* target = view.Target(choice.target);
    if (target == nullptr) {
      std::vector<std::string> names;
      for (const TargetEntry& t : view.targets) names.push_back(t.name);
      return absl::FailedPreconditionError(absl::StrCat(
          "blob: the blob has no ", choice.target, " plan (it has: ", absl::StrJoin(names, ", "),
          "); ", choice.driver->HowToCompile()));
    }
    KILN_ASSIGN(made, choice.driver->Load(view, *target, all, bytes, choice.selector));
    runner = std::move(made);
    device = runner->Describe();
    return absl::OkStatus();
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

const Signature& Model::signature() const { return impl_->view.signature; }
const BlobView& Model::view() const { return impl_->view; }
const std::string& Model::device() const { return impl_->device; }

absl::Status Model::Run(std::span<const void* const> inputs, std::span<void* const> outputs) const {
  return impl_->runner->Run(inputs, outputs);
}

absl::StatusOr<std::unique_ptr<Model>> Model::LoadMemory(std::span<const std::byte> bytes,
                                                         const LoadOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  absl::StatusOr<Buffer> copy = AllocateAlignedBuffer(static_cast<int64_t>(bytes.size()));
  if (!copy.ok()) return copy.status();
  if (!bytes.empty()) std::memcpy(copy->data(), bytes.data(), bytes.size());
  auto holder = std::make_shared<Buffer>(*std::move(copy));
  impl->bytes = std::shared_ptr<const std::byte>(holder, holder->data());
  impl->size = bytes.size();
  if (absl::Status s = impl->Load(); !s.ok()) return s;
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Model>> Model::LoadFile(const std::string& path,
                                                       const LoadOptions& options) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("blob: cannot open ", path, ": ", strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("blob: ", path, " is not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (size == 0) {
    close(fd);
    return Bad(path, ": empty file");
  }
  void* mapped = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("blob: cannot map ", path, ": ", strerror(errno)));
  }
  impl->bytes = std::shared_ptr<const std::byte>(
      static_cast<const std::byte*>(mapped),
      [size](const std::byte* p) { munmap(const_cast<std::byte*>(p), size); });
  impl->size = size;
  if (absl::Status s = impl->Load(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

}  // namespace kiln::runtime::blob
