#include "runtime/cuda/blob_cuda.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/blob_json.h"
#include "runtime/blob_target.h"
#include "runtime/buffer.h"

namespace kiln::runtime::cuda {
namespace {

using blob::Signature;
using blob::TensorSpec;
using blob::internal::json;
using blob::internal::Reader;

#define KILN_ASSIGN KILN_BLOB_ASSIGN

// Every size and count in a blob is far below these; larger values are hostile.
constexpr int64_t kMaxSlots = 1 << 20;
constexpr int64_t kMaxDimension = int64_t{1} << 40;
// What every CUDA device since compute capability 2.0 allows: 1024 threads per block (and along
// x and y; 64 along z), and the 48 KiB of dynamic shared memory a launch may use without its
// kernel opting in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
constexpr int64_t kMaxThreadsPerBlock = 1024;
constexpr int64_t kDefaultSharedBytes = 48 << 10;
// The most any device offers with opting in (228 KiB on Hopper); CheckDeviceCanRun checks the
// device's own limit.
constexpr int64_t kMaxSharedBytes = 1 << 20;
// Kernel parameters: num_buffers device pointers of 8 bytes within the 4 KiB of parameter space
// every driver accepts.
constexpr int64_t kMaxBuffers = 4096 / 8;

// What the plan check reads from a PTX module's text.
struct PtxFacts {
  std::string version;            // ".version 8.5" → "8.5"
  std::string target;             // ".target sm_80" → "sm_80" (its first operand)
  std::set<std::string> entries;  // the names of its .entry functions
};

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' ||
         c == '%';
}

// The tokens of PTX text, comments (// and /* */) and string literals skipped: words made of
// letters, digits and "_.$%" (directives, identifiers, numbers like "8.5") and single punctuation
// characters. Enough to find the module's directives and entry names, not a PTX parser: ptxas in
// the driver (at CudaDevice::Load) is the judge of the rest.
class PtxTokens {
 public:
  explicit PtxTokens(std::string_view text) : text_(text) {}
  // The next token, or "" at the end (or in an unterminated comment or string).
  std::string_view Next() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        const size_t end = text_.find('\n', pos_);
        pos_ = end == std::string_view::npos ? text_.size() : end + 1;
      } else if (text_.substr(pos_, 2) == "/*") {
        const size_t end = text_.find("*/", pos_ + 2);
        pos_ = end == std::string_view::npos ? text_.size() : end + 2;
      } else if (c == '"') {
        const size_t end = text_.find('"', pos_ + 1);
        pos_ = end == std::string_view::npos ? text_.size() : end + 1;
      } else if (IsTokenChar(c)) {
        const size_t start = pos_;
        while (pos_ < text_.size() && IsTokenChar(text_[pos_])) ++pos_;
        return text_.substr(start, pos_ - start);
      } else {
        return text_.substr(pos_++, 1);
      }
    }
    return {};
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// Whether `s` is a decimal number of 1 to 4 digits.
bool IsNumber(std::string_view s) {
  return !s.empty() && s.size() <= 4 &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// The facts of `text`, or what makes it not PTX: a NUL byte (the driver reads the module as a C
// string, so the rest would silently vanish), no leading ".version <major>.<minor>", no
// ".target" right after it.
absl::StatusOr<PtxFacts> InspectPtx(std::string_view text) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte ", nul, " of the module is NUL (PTX is text)"));
  }
  PtxTokens tokens(text);
  PtxFacts facts;
  if (tokens.Next() != ".version") {
    return absl::InvalidArgumentError(
        "does not start with a .version directive (comments aside): not PTX");
  }
  facts.version = std::string(tokens.Next());
  const size_t dot = facts.version.find('.');
  if (dot == std::string::npos || !IsNumber(std::string_view(facts.version).substr(0, dot)) ||
      !IsNumber(std::string_view(facts.version).substr(dot + 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat(".version \"", facts.version, "\" is not <major>.<minor>"));
  }
  if (tokens.Next() != ".target") {
    return absl::InvalidArgumentError("has no .target directive after .version");
  }
  facts.target = std::string(tokens.Next());
  for (std::string_view t = tokens.Next(); !t.empty(); t = tokens.Next()) {
    if (t != ".entry") continue;
    const std::string_view name = tokens.Next();
    if (name.empty() || !IsTokenChar(name[0]) || name[0] == '.') {
      return absl::InvalidArgumentError("has an .entry directive without a name");
    }
    facts.entries.insert(std::string(name));
  }
  return facts;
}

// "sm_80" → 8.0, "sm_100" → 10.0; false for anything else ("sm_90a" included: PTX for an
// architecture-specific target runs on that architecture only, which a blob meant to move
// between GPUs should not be).
bool ParseArch(const std::string& arch, int* major, int* minor) {
  if (arch.size() < 5 || arch.size() > 6 || !arch.starts_with("sm_") || arch[3] == '0') {
    return false;
  }
  int number = 0;
  for (size_t i = 3; i < arch.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(arch[i]))) return false;
    number = number * 10 + (arch[i] - '0');
  }
  *major = number / 10;
  *minor = number % 10;
  return true;
}

absl::StatusOr<std::shared_ptr<CudaPlan>> ParsePlan(const json& j, const Signature& signature,
                                                    std::span<const std::byte> ptx,
                                                    uint64_t weights_size,
                                                    const std::string& where) {
  const Reader r(where);
  auto plan = std::make_shared<CudaPlan>();
  KILN_ASSIGN(arch, r.String(j, "cuda plan", "arch"));
  if (!ParseArch(arch, &plan->compute_major, &plan->compute_minor)) {
    return r.Error("arch", absl::StrCat("\"", arch, "\" is not a CUDA architecture like sm_80"));
  }
  plan->arch = arch;

  KILN_ASSIGN(slots, r.Array(j, "cuda plan", "slots", kMaxSlots));
  std::vector<bool> output_bound(signature.outputs.size(), false);
  for (size_t i = 0; i < slots->size(); ++i) {
    const std::string path = absl::StrCat("slots[", i, "]");
    const json& s = (*slots)[i];
    CudaPlan::Slot slot;
    KILN_ASSIGN(kind, r.String(s, path, "kind"));
    KILN_ASSIGN(size, r.Int(s, path, "size", 0, kMaxDimension));
    slot.kind = kind;
    slot.size = size;
    if (kind == "input" || kind == "output") {
      const std::vector<TensorSpec>& tensors =
          kind == "input" ? signature.inputs : signature.outputs;
      KILN_ASSIGN(index, r.Int(s, path, "index", 0, static_cast<int64_t>(tensors.size()) - 1));
      if (size > tensors[index].size_bytes) {
        return r.Error(path, absl::StrCat(size, " bytes, but ", kind, " ", index, " has ",
                                          tensors[index].size_bytes));
      }
      slot.index = index;
      if (kind == "output") output_bound[index] = true;
    } else if (kind == "arena") {
      KILN_ASSIGN(offset, r.Int(s, path, "offset", 0, kMaxDimension));
      if (offset % kBufferAlignment != 0) {
        return r.Error(path, absl::StrCat("arena offset ", offset, " is not a multiple of ",
                                          kBufferAlignment));
      }
      slot.offset = offset;
    } else if (kind == "constant") {
      KILN_ASSIGN(offset, r.Int(s, path, "weights_offset", 0, kMaxDimension));
      if (static_cast<uint64_t>(offset) > weights_size ||
          static_cast<uint64_t>(size) > weights_size - static_cast<uint64_t>(offset)) {
        return r.Error(
            path, absl::StrCat("constant [", offset, ", +", size,
                               ") lies outside the weights section of ", weights_size, " bytes"));
      }
      slot.weights_offset = offset;
    } else if (kind == "error_flag") {
      if (size != 16) return r.Error(path, "an error flag has 16 bytes");
    } else {
      return r.Error(path, absl::StrCat("unknown slot kind \"", kind, "\""));
    }
    plan->slots.push_back(std::move(slot));
  }
  for (size_t k = 0; k < output_bound.size(); ++k) {
    if (!output_bound[k]) return r.Error("slots", absl::StrCat("no slot for output ", k));
  }

  KILN_ASSIGN(modules, r.Array(j, "cuda plan", "modules", 1 << 16));
  std::vector<PtxFacts> facts;
  const std::string_view text(reinterpret_cast<const char*>(ptx.data()), ptx.size());
  for (size_t i = 0; i < modules->size(); ++i) {
    const std::string path = absl::StrCat("modules[", i, "]");
    const json& m = (*modules)[i];
    KILN_ASSIGN(offset, r.Int(m, path, "offset", 0, kMaxDimension));
    KILN_ASSIGN(bytes, r.Int(m, path, "bytes", 1, kMaxDimension));
    if (static_cast<uint64_t>(offset) > ptx.size() ||
        static_cast<uint64_t>(bytes) > ptx.size() - static_cast<uint64_t>(offset)) {
      return r.Error(path, absl::StrCat("PTX bytes [", offset, ", +", bytes,
                                        ") lie outside the PTX section of ", ptx.size(), " bytes"));
    }
    absl::StatusOr<PtxFacts> module =
        InspectPtx(text.substr(static_cast<size_t>(offset), static_cast<size_t>(bytes)));
    if (!module.ok()) {
      return r.Error(path, absl::StrCat("the PTX at byte ", offset, " of the PTX section ",
                                        module.status().message()));
    }
    if (module->target != arch) {
      return r.Error(path, absl::StrCat("the PTX at byte ", offset, " of the PTX section is for ",
                                        module->target, ", the plan's arch is ", arch));
    }
    plan->modules.push_back(
        CudaPlan::Module{static_cast<uint64_t>(offset), static_cast<uint64_t>(bytes)});
    facts.push_back(*std::move(module));
  }

  KILN_ASSIGN(kernels, r.Array(j, "cuda plan", "kernels", 1 << 16));
  for (size_t i = 0; i < kernels->size(); ++i) {
    const std::string path = absl::StrCat("kernels[", i, "]");
    const json& k = (*kernels)[i];
    CudaPlan::Kernel kernel;
    KILN_ASSIGN(name, r.String(k, path, "name"));
    KILN_ASSIGN(module,
                r.Int(k, path, "module", 0, static_cast<int64_t>(plan->modules.size()) - 1));
    KILN_ASSIGN(buffers, r.Int(k, path, "num_buffers", 0, kMaxBuffers));
    KILN_ASSIGN(shared, r.Int(k, path, "max_dynamic_shared_bytes", 0, kMaxSharedBytes));
    if (facts[static_cast<size_t>(module)].entries.count(name) == 0) {
      return r.Error(path, absl::StrCat("module ", module, " (the PTX at byte ",
                                        plan->modules[static_cast<size_t>(module)].offset,
                                        " of the PTX section) declares no .entry ", name));
    }
    kernel.name = name;
    kernel.module = static_cast<int>(module);
    kernel.num_buffers = static_cast<int>(buffers);
    kernel.max_dynamic_shared_bytes = static_cast<int>(shared);
    plan->kernels.push_back(std::move(kernel));
  }

  KILN_ASSIGN(launches, r.Array(j, "cuda plan", "launches", 1 << 20));
  for (size_t i = 0; i < launches->size(); ++i) {
    const std::string path = absl::StrCat("launches[", i, "]");
    const json& l = (*launches)[i];
    CudaPlan::Launch launch;
    KILN_ASSIGN(kernel,
                r.Int(l, path, "kernel", 0, static_cast<int64_t>(plan->kernels.size()) - 1));
    const CudaPlan::Kernel& k = plan->kernels[static_cast<size_t>(kernel)];
    KILN_ASSIGN(buffers, r.Ints(l, path, "buffers", kMaxBuffers, 0,
                                static_cast<int64_t>(plan->slots.size()) - 1));
    if (static_cast<int>(buffers.size()) != k.num_buffers) {
      return r.Error(path, absl::StrCat(buffers.size(), " buffers, kernel ", kernel, " (", k.name,
                                        ") takes ", k.num_buffers));
    }
    KILN_ASSIGN(grid, r.Ints(l, path, "grid", 3, 0, std::numeric_limits<uint32_t>::max()));
    if (grid.size() != 3) return r.Error(path, "grid is not [x, y, z]");
    KILN_ASSIGN(block, r.Ints(l, path, "block", 3, 1, kMaxThreadsPerBlock));
    if (block.size() != 3) return r.Error(path, "block is not [x, y, z]");
    const int64_t threads = block[0] * block[1] * block[2];
    if (threads > kMaxThreadsPerBlock) {
      return r.Error(path, absl::StrCat("a block of ", block[0], "x", block[1], "x", block[2],
                                        " threads (at most ", kMaxThreadsPerBlock, ")"));
    }
    KILN_ASSIGN(shared, r.Int(l, path, "shared_bytes", 0, kMaxSharedBytes));
    if (shared > std::max<int64_t>(kDefaultSharedBytes, k.max_dynamic_shared_bytes)) {
      return r.Error(
          path, absl::StrCat(shared, " bytes of dynamic shared memory, kernel ", kernel, " (",
                             k.name, ") allows ",
                             std::max<int64_t>(kDefaultSharedBytes, k.max_dynamic_shared_bytes)));
    }
    KILN_ASSIGN(name, r.String(l, path, "name"));
    KILN_ASSIGN(context, r.String(l, path, "error_context"));
    launch.kernel = static_cast<int>(kernel);
    for (int64_t b : buffers) launch.buffers.push_back(static_cast<int>(b));
    for (int a = 0; a < 3; ++a) {
      launch.grid[a] = static_cast<uint32_t>(grid[a]);
      launch.block[a] = static_cast<uint32_t>(block[a]);
    }
    launch.shared_bytes = static_cast<uint32_t>(shared);
    launch.name = name;
    launch.error_context = context;
    plan->launches.push_back(std::move(launch));
  }
  return plan;
}

class CudaRunner final : public blob::DeviceRunner {
 public:
  CudaRunner(std::shared_ptr<CudaDevice> device, std::shared_ptr<const CudaExecutable> executable)
      : device_(std::move(device)), executable_(std::move(executable)) {}
  absl::Status Run(std::span<const void* const> inputs,
                   std::span<void* const> outputs) const override {
    return device_->Run(*executable_, inputs, outputs);
  }
  std::string Describe() const override { return "cuda: " + device_->info().ToString(); }

 private:
  std::shared_ptr<CudaDevice> device_;
  std::shared_ptr<const CudaExecutable> executable_;
};

class CudaTargetDriver final : public blob::TargetDriver {
 public:
  absl::StatusOr<std::shared_ptr<const blob::TargetPlan>> Parse(
      const blob::BlobView& view, const blob::TargetEntry& entry,
      std::span<const std::byte> bytes) const override {
    const std::string where = absl::StrCat("section ", entry.plan_section, " (plan \"cuda\")");
    int ptx_section = -1;
    for (int s : entry.payload_sections) {
      const std::string& name = view.sections[static_cast<size_t>(s)].name;
      if (name != "cuda:ptx") {
        return blob::internal::Bad("section ", s, " (payload \"", name,
                                   "\"): the cuda target has only the payload cuda:ptx");
      }
      if (ptx_section >= 0) {
        return blob::internal::Bad("section ", s, " (payload \"cuda:ptx\"): a second one");
      }
      ptx_section = s;
    }
    if (ptx_section < 0) {
      return blob::internal::Bad(where, ": the cuda plan has no payload cuda:ptx");
    }
    KILN_ASSIGN(plan, ParseCudaPlan(view.SectionBytes(bytes, entry.plan_section), view.signature,
                                    view.SectionBytes(bytes, ptx_section),
                                    view.Weights(bytes).size(), where));
    plan->plan_section = entry.plan_section;
    plan->ptx_section = ptx_section;
    return std::shared_ptr<const blob::TargetPlan>(std::move(plan));
  }

  absl::StatusOr<std::unique_ptr<blob::DeviceRunner>> Load(
      const blob::BlobView& view, const blob::TargetEntry& entry, std::span<const std::byte> bytes,
      std::shared_ptr<const void>, const std::string& selector) const override {
    const CudaPlan& plan = static_cast<const CudaPlan&>(*entry.plan);
    // The spec first: a damaged plan is a bad blob whether or not a device is at hand.
    absl::StatusOr<CudaExecutableSpec> spec = SpecFromBlob(view, plan, bytes);
    if (!spec.ok()) return spec.status();
    if (absl::Status s = CheckSpec(*spec); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("blob: section ", plan.plan_section, " (plan \"cuda\"): ", s.message()));
    }
    int index = 0;
    if (!selector.empty() && (!IsNumber(selector) || !absl::SimpleAtoi(selector, &index))) {
      return absl::InvalidArgumentError(
          absl::StrCat("blob: cuda device \"", selector,
                       "\" is not a CUDA ordinal (cuda, cuda:0, cuda:1, ...)"));
    }
    absl::StatusOr<std::shared_ptr<CudaDevice>> device = CudaDevice::Open(index);
    if (!device.ok()) {
      // NotFound (no device of that ordinal) would read as a missing file in the C API.
      return absl::FailedPreconditionError(absl::StrCat("blob: cuda: ", device.status().message()));
    }
    if (absl::Status s = CheckDeviceCanRun(plan, (*device)->info()); !s.ok()) return s;
    absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = (*device)->Load(*std::move(spec));
    if (!exe.ok()) {
      return absl::Status(exe.status().code(),
                          absl::StrCat("blob: cuda plan: ", exe.status().message()));
    }
    return std::unique_ptr<blob::DeviceRunner>(new CudaRunner(*device, *std::move(exe)));
  }

  std::string HowToCompile() const override {
    return "compile it with `kiln compile --target cuda` (aot::CompileOptions::cuda)";
  }
};

}  // namespace

std::string CudaPlan::Describe() const {
  uint64_t ptx_bytes = 0;
  for (const Module& m : modules) ptx_bytes += m.bytes;
  std::string text = absl::StrCat("cuda plan (section ", plan_section, ", PTX in section ",
                                  ptx_section, "): ", arch, ", ", slots.size(), " slots, ",
                                  modules.size(), " modules (", ptx_bytes, " bytes of PTX), ",
                                  kernels.size(), " kernels, ", launches.size(), " launches\n");
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    absl::StrAppend(&text, "  kernel ", i, ": ", k.name, " (module ", k.module, ", ", k.num_buffers,
                    " buffers");
    if (k.max_dynamic_shared_bytes > 0) {
      absl::StrAppend(&text, ", up to ", k.max_dynamic_shared_bytes, " bytes of shared memory");
    }
    absl::StrAppend(&text, ")\n");
  }
  return text;
}

absl::StatusOr<std::shared_ptr<CudaPlan>> ParseCudaPlan(std::span<const std::byte> plan_json,
                                                        const blob::Signature& signature,
                                                        std::span<const std::byte> ptx,
                                                        uint64_t weights_size,
                                                        const std::string& where) {
  KILN_ASSIGN(j, blob::internal::ParseJson(plan_json, where));
  return ParsePlan(j, signature, ptx, weights_size, where);
}

void EnableCudaBlobs() {
  blob::RegisterTargetDriver("cuda", std::make_shared<const CudaTargetDriver>());
}

absl::Status CheckDeviceCanRun(const CudaPlan& plan, const DeviceInfo& d) {
  const std::string device = absl::StrCat("blob: cuda device ", d.index, " \"", d.name, "\"");
  if (d.compute_major < plan.compute_major ||
      (d.compute_major == plan.compute_major && d.compute_minor < plan.compute_minor)) {
    return absl::FailedPreconditionError(absl::StrCat(
        device, " has compute capability ", d.compute_major, ".", d.compute_minor,
        ", but the blob's CUDA section is PTX for ", plan.arch, " (compute capability ",
        plan.compute_major, ".", plan.compute_minor,
        " or newer); compile the blob with an older --cuda-arch, or run it on the cpu"));
  }
  auto lacks = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat(device, " lacks ", what, ", which the blob's CUDA section requires"));
  };
  for (const CudaPlan::Kernel& k : plan.kernels) {
    if (k.max_dynamic_shared_bytes > d.max_shared_per_block_optin) {
      return lacks(absl::StrCat(k.max_dynamic_shared_bytes, " bytes of shared memory per block (",
                                "kernel ", k.name, "; it allows ", d.max_shared_per_block_optin,
                                ")"));
    }
  }
  for (const CudaPlan::Launch& l : plan.launches) {
    const int64_t threads = int64_t{l.block[0]} * l.block[1] * l.block[2];
    if (threads > d.max_threads_per_block) {
      return lacks(absl::StrCat("blocks of ", threads, " threads (launch ", l.name, "; it allows ",
                                d.max_threads_per_block, ")"));
    }
    for (int a = 0; a < 3; ++a) {
      if (int64_t{l.block[a]} > d.max_block[a]) {
        return lacks(absl::StrCat("a block size of ", l.block[a], " along axis ", a, " (launch ",
                                  l.name, "; it allows ", d.max_block[a], ")"));
      }
      if (int64_t{l.grid[a]} > d.max_grid[a]) {
        return lacks(absl::StrCat(l.grid[a], " blocks along axis ", a, " (launch ", l.name,
                                  "; it allows ", d.max_grid[a], ")"));
      }
    }
    if (static_cast<int64_t>(l.shared_bytes) > d.max_shared_per_block_optin) {
      return lacks(absl::StrCat(l.shared_bytes, " bytes of dynamic shared memory (launch ", l.name,
                                "; it allows ", d.max_shared_per_block_optin, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaExecutableSpec> SpecFromBlob(const blob::BlobView& view, const CudaPlan& plan,
                                                std::span<const std::byte> bytes) {
  // ParseBlob checked every range below against the sections, and the sections against `bytes`.
  const std::span<const std::byte> ptx = view.SectionBytes(bytes, plan.ptx_section);
  const std::byte* weights = view.weights_section >= 0 ? view.Weights(bytes).data() : nullptr;
  CudaExecutableSpec spec;
  spec.name = view.signature.name;
  spec.num_inputs = static_cast<int>(view.signature.inputs.size());
  spec.num_outputs = static_cast<int>(view.signature.outputs.size());
  for (const CudaPlan::Slot& s : plan.slots) {
    runtime::Slot slot;
    if (s.kind == "input") {
      slot = runtime::Slot::Input(s.index, s.size);
    } else if (s.kind == "output") {
      slot = runtime::Slot::Output(s.index, s.size);
    } else if (s.kind == "arena") {
      slot = runtime::Slot::Arena(s.offset, s.size);
    } else if (s.kind == "error_flag") {
      slot = runtime::Slot::ErrorFlag();
    } else {  // constant: Load uploads the bytes from the weights section, no host copy
      slot = runtime::Slot::Constant({});
      if (s.size > 0) {  // then the blob has a weights section that holds it (ParseBlob)
        slot.size_bytes = s.size;
        slot.external = weights + s.weights_offset;
      }
    }
    spec.slots.push_back(std::move(slot));
  }
  for (const CudaPlan::Module& m : plan.modules) {
    spec.modules.emplace_back(reinterpret_cast<const char*>(ptx.data()) + m.offset,
                              static_cast<size_t>(m.bytes));
  }
  for (const CudaPlan::Kernel& k : plan.kernels) {
    spec.kernels.push_back(KernelSpec{k.name, k.module, k.num_buffers, k.max_dynamic_shared_bytes});
  }
  for (const CudaPlan::Launch& l : plan.launches) {
    Launch launch;
    launch.kernel = l.kernel;
    launch.buffer_slots = l.buffers;
    for (int a = 0; a < 3; ++a) {
      launch.grid[a] = l.grid[a];
      launch.block[a] = l.block[a];
    }
    launch.shared_bytes = l.shared_bytes;
    launch.name = l.name;
    launch.error_context = l.error_context;
    spec.launches.push_back(std::move(launch));
  }
  return spec;
}

}  // namespace kiln::runtime::cuda
