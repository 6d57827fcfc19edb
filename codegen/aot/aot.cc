#include "codegen/aot/aot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/aot/target_codegen.h"
#include "codegen/cpu/gemm_kernel.h"
#include "codegen/cpu/graph_compiler.h"
#include "codegen/cpu/jit.h"
#include "ir/dtype.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "nlohmann/json.hpp"
#include "runtime/blob.h"
#include "runtime/cpu/contraction.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/executable.h"
#include "xxhash.h"
#if KILN_AOT_HAVE_VULKAN
#include "codegen/vulkan/graph_compiler.h"
#include "runtime/vulkan/spirv_check.h"
#endif
#if KILN_AOT_HAVE_CUDA
#include "codegen/cuda/graph_compiler.h"
#include "codegen/cuda/nvrtc.h"
#endif

namespace kiln::aot {
namespace {

using json = nlohmann::json;
namespace gi = runtime::cpu::gemm_internal;
namespace fs = std::filesystem;

// The micro-kernels a contraction asks for, found by running the driver on zeros with a provider
// that records each request and hands out a kernel that does nothing. The driver's choices
// (tile shape, the short tile for few rows, the plain and epilogue variants, the GEMV path that
// needs none) are then exactly the ones it makes at run time for the same target vectors.
class RecordingProvider final : public gi::MicroKernelProvider {
 public:
  explicit RecordingProvider(gi::TargetVectors vectors) : vectors_(vectors) {}
  gi::TargetVectors vectors() const override { return vectors_; }
  /// Records as for a CPU without AMX (or with it again): a blob whose host code has AMX kernels
  /// also holds the others, for a process that Linux refuses the tile state.
  void set_amx(bool amx) { vectors_.amx = amx; }
  absl::StatusOr<gi::MicroKernelFn> Get(ir::DType dtype, const gi::KernelShape& shape,
                                        const gi::EpilogueVariant& variant) const override {
    requests_[gi::MicroKernelName(dtype, shape, variant)] = Request{dtype, shape, variant, {}};
    return &Nothing;
  }
  absl::StatusOr<gi::Int8MicroKernelFn> GetInt8(
      const gi::KernelShape& shape, const gi::Int8EpilogueVariant& variant) const override {
    requests_[gi::Int8MicroKernelName(shape, variant)] =
        Request{ir::DType::kI32, shape, {}, variant};
    return &NothingInt8;
  }
  struct Request {
    ir::DType dtype;
    gi::KernelShape shape;
    gi::EpilogueVariant variant;
    std::optional<gi::Int8EpilogueVariant> int8;
  };
  const std::map<std::string, Request>& requests() const { return requests_; }

 private:
  static void Nothing(int64_t, const void*, const void*, void*, int64_t, const gi::TileArgs*) {}
  static void NothingInt8(int64_t, const void*, const void*, void*, int64_t,
                          const gi::Int8TileArgs*) {}
  gi::TargetVectors vectors_;
  mutable std::map<std::string, Request> requests_;
};

std::string Symbolize(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out.push_back(plain ? c : '_');
  }
  return out;
}

json ViewJson(const runtime::cpu::MatrixView& view) {
  return json{{"row_stride", view.row_stride},
              {"col_stride", view.col_stride},
              {"batch_strides", view.batch_strides}};
}

// A convolution descriptor's geometry fields (shared by float and int8 convolutions).
void AddConvGeometry(const runtime::cpu::ConvParams& p, json& d) {
  d["input_shape"] = p.input_shape;
  d["weight_shape"] = p.weight_shape;
  d["strides"] = p.strides;
  d["low"] = p.low;
  d["high"] = p.high;
  d["dilation"] = p.dilation;
  d["input_dilation"] = p.input_dilation;
  d["groups"] = p.groups;
}

// A GEMM descriptor's shape and views (shared by float and int8 GEMMs).
void AddGemmGeometry(const std::vector<int64_t>& batch, int64_t m, int64_t n, int64_t k,
                     const runtime::cpu::MatrixView& a, const runtime::cpu::MatrixView& b,
                     const runtime::cpu::MatrixView& c, json& d) {
  d["batch"] = batch;
  d["m"] = m;
  d["n"] = n;
  d["k"] = k;
  d["a"] = ViewJson(a);
  d["b"] = ViewJson(b);
  d["c"] = ViewJson(c);
}

// Replaces the parameters named in `weights` by constants holding the values.
absl::StatusOr<ir::Graph> BindWeights(const ir::Graph& graph, const CompileOptions& options,
                                      json* weight_list) {
  ir::Graph bound = graph;
  std::set<std::string> seen;
  for (const auto& [name, value] : options.weights) {
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("aot: weight \"", name, "\" given twice"));
    }
    const ir::NodeId id = graph.FindParameter(name);
    if (id == ir::kInvalidNode) {
      return absl::InvalidArgumentError(
          absl::StrCat("aot: weight \"", name, "\" is not a parameter of the graph"));
    }
    if (value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("aot: weight \"", name, "\" has no value"));
    }
    const ir::TensorType& type = graph.node(id).type;
    if (value->dtype() != type.dtype || value->shape() != type.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "aot: weight \"", name, "\" is ", ir::DTypeName(value->dtype()),
          ir::ShapeToString(value->shape()), ", the parameter is ", ir::TypeToString(type)));
    }
    ir::Node& node = bound.mutable_node(id);
    node.op = ir::Op::kConstant;
    node.attrs = ir::Attrs{};
    node.attrs.literal = value;
    weight_list->push_back(
        json{{"name", name}, {"dtype", ir::DTypeName(type.dtype)}, {"shape", type.shape}});
  }
  if (absl::Status s = ir::Verify(bound); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("aot: the graph with weights bound: ", s.message()));
  }
  return bound;
}

// Runs a command; an error quotes it and its output.
absl::Status RunCommand(const std::vector<std::string>& argv, const std::string& log_path) {
  std::string command;
  for (const std::string& a : argv)
    absl::StrAppend(&command, command.empty() ? "" : " ", "'", a, "'");
  const std::string full = absl::StrCat(command, " >'", log_path, "' 2>&1");
  const int rc = std::system(full.c_str());
  if (rc != 0) {
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    return absl::InternalError(
        absl::StrCat("aot: `", command, "` failed (status ", rc, "): ", text.str()));
  }
  return absl::OkStatus();
}

struct Section {
  runtime::blob::SectionKind kind;
  std::string name;
  std::string bytes;
};

std::string Assemble(std::vector<Section> sections) {
  using runtime::blob::kSectionAlignment;
  auto align = [](uint64_t v) {
    return (v + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
  };
  const uint64_t table_offset = runtime::blob::kHeaderBytes;
  uint64_t offset = align(table_offset + sections.size() * runtime::blob::kSectionEntryBytes);
  std::string table(sections.size() * runtime::blob::kSectionEntryBytes, '\0');
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& s = sections[i];
    char* e = table.data() + i * runtime::blob::kSectionEntryBytes;
    const uint32_t kind = static_cast<uint32_t>(s.kind);
    const uint64_t size = s.bytes.size();
    const uint64_t checksum = XXH3_64bits(s.bytes.data(), s.bytes.size());
    std::memcpy(e, &kind, 4);
    std::memcpy(e + 8, &offset, 8);
    std::memcpy(e + 16, &size, 8);
    std::memcpy(e + 24, &checksum, 8);
    std::memcpy(e + 32, s.name.data(),
                std::min<size_t>(s.name.size(), runtime::blob::kSectionNameBytes - 1));
    offsets.push_back(offset);
    offset = align(offset + size);
  }
  std::string blob(offset, '\0');
  std::memcpy(blob.data(), runtime::blob::kMagic, 8);
  const uint32_t version = runtime::blob::kFormatVersion;
  const uint32_t count = static_cast<uint32_t>(sections.size());
  const uint64_t file_size = blob.size();
  const uint64_t table_checksum = XXH3_64bits(table.data(), table.size());
  std::memcpy(blob.data() + 8, &version, 4);
  std::memcpy(blob.data() + 12, &count, 4);
  std::memcpy(blob.data() + 16, &file_size, 8);
  std::memcpy(blob.data() + 24, &table_offset, 8);
  std::memcpy(blob.data() + 32, &table_checksum, 8);
  std::memcpy(blob.data() + table_offset, table.data(), table.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    std::memcpy(blob.data() + offsets[i], sections[i].bytes.data(), sections[i].bytes.size());
  }
  return blob;
}

// Puts `bytes` into the weights section, reusing an equal constant already there (the CPU and
// Vulkan plans bind the same weights); returns its offset.
class WeightsWriter {
 public:
  explicit WeightsWriter(std::string* weights) : weights_(weights) {}
  uint64_t Add(const void* data, size_t size) {
    const uint64_t hash = XXH3_64bits(data, size);
    auto range = known_.equal_range(hash);
    for (auto it = range.first; it != range.second; ++it) {
      const auto [offset, length] = it->second;
      if (length == size && std::memcmp(weights_->data() + offset, data, size) == 0) return offset;
    }
    weights_->resize((weights_->size() + 63) / 64 * 64, '\0');
    const uint64_t offset = weights_->size();
    weights_->append(static_cast<const char*>(data), size);
    known_.emplace(hash, std::make_pair(offset, size));
    return offset;
  }

 private:
  std::string* weights_;
  std::multimap<uint64_t, std::pair<uint64_t, size_t>> known_;
};

// A launch-plan slot as the blob's JSON: kind, size, index/offset and label. A constant slot gets
// only its size and label: where its bytes lie is the caller's (the weights section, a GEMM
// descriptor). `plan` names the plan in the error for scalar slots, which blobs cannot bind.
absl::StatusOr<json> SlotJson(const runtime::Slot& slot, const char* plan) {
  json s{{"size", slot.size_bytes}};
  switch (slot.kind) {
    case runtime::SlotKind::kInput:
      s["kind"] = "input";
      s["index"] = slot.index;
      break;
    case runtime::SlotKind::kOutput:
      s["kind"] = "output";
      s["index"] = slot.index;
      break;
    case runtime::SlotKind::kArena:
      s["kind"] = "arena";
      s["offset"] = slot.offset;
      break;
    case runtime::SlotKind::kErrorFlag:
      s["kind"] = "error_flag";
      break;
    case runtime::SlotKind::kScalar:
      return absl::UnimplementedError(
          absl::StrCat("aot: graphs with scalar slots cannot be compiled to blobs", plan));
    case runtime::SlotKind::kConstant:
      break;
  }
  if (!slot.label.empty()) s["label"] = slot.label;
  return s;
}

#if KILN_AOT_HAVE_VULKAN
// The Vulkan sections: the plan (JSON) and the SPIR-V of its shaders.
absl::Status CompileVulkan(const ir::Graph& bound, const std::string& name, WeightsWriter& weights,
                           std::string* plan_text, std::string* spirv) {
  const runtime::vulkan::DeviceInfo portable = codegen::vulkan::PortableDeviceInfo();
  absl::StatusOr<std::shared_ptr<const codegen::vulkan::CompiledGraph>> compiled =
      codegen::vulkan::CompileSpec(bound, portable);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(),
                        absl::StrCat("aot: vulkan graph compile: ", compiled.status().message()));
  }
  const runtime::vulkan::VulkanExecutableSpec& spec = (*compiled)->spec;
  json plan;
  plan["name"] = name;
  plan["vulkan_version"] = {1, 1};  // SPIR-V 1.3 (codegen/vulkan/spirv.h)
  plan["offset_alignment"] = portable.min_storage_buffer_offset_alignment;
  plan["slots"] = json::array();
  for (const runtime::Slot& slot : spec.slots) {
    absl::StatusOr<json> s = SlotJson(slot, " (vulkan)");
    if (!s.ok()) return s.status();
    if (slot.kind == runtime::SlotKind::kConstant) {
      (*s)["kind"] = "constant";
      (*s)["weights_offset"] = weights.Add(slot.constant.data(), slot.constant.size());
    }
    plan["slots"].push_back(*std::move(s));
  }
  // The features are the capabilities the modules declare (what the runtime checks them against
  // in ParseBlob): shaderInt64 always (indices are i64), f64/f16/8-bit storage only when used.
  std::set<std::string> features;
  plan["shaders"] = json::array();
  for (const runtime::vulkan::ShaderSpec& shader : spec.shaders) {
    const std::vector<uint32_t>& w = shader.spirv;
    absl::StatusOr<runtime::vulkan::SpirvInfo> info = runtime::vulkan::InspectSpirv(w);
    if (!info.ok()) {
      return absl::InternalError(
          absl::StrCat("aot: vulkan shader ", shader.name, ": ", info.status().message()));
    }
    for (uint32_t capability : info->capabilities) {
      if (const char* f = runtime::vulkan::VulkanFeatureForCapability(capability)) {
        features.insert(f);
      }
    }
    plan["shaders"].push_back(json{{"name", shader.name},
                                   {"spirv_offset", spirv->size()},
                                   {"spirv_words", w.size()},
                                   {"buffers", shader.num_buffers},
                                   {"push_constant_bytes", shader.push_constant_bytes}});
    spirv->append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  }
  plan["features"] = std::vector<std::string>(features.begin(), features.end());
  plan["dispatches"] = json::array();
  for (const runtime::vulkan::Dispatch& d : spec.dispatches) {
    std::vector<int> push;
    for (std::byte b : d.push_constants) push.push_back(static_cast<int>(b));
    plan["dispatches"].push_back(json{{"shader", d.shader},
                                      {"buffers", d.buffer_slots},
                                      {"push_constants", push},
                                      {"groups", {d.groups[0], d.groups[1], d.groups[2]}},
                                      {"name", d.name},
                                      {"error_context", d.error_context}});
  }
  *plan_text = plan.dump();
  return absl::OkStatus();
}
#endif

#if KILN_AOT_HAVE_CUDA
// The CUDA sections (runtime/cuda/blob_cuda.h): the plan (JSON) and the PTX of its modules,
// concatenated.
absl::Status CompileCuda(const ir::Graph& bound, const std::string& name, const std::string& arch,
                         bool allow_tf32, WeightsWriter& weights, std::string* plan_text,
                         std::string* ptx) {
  // Only compiling needs NVRTC; say so before the graph compiler fails on its first kernel.
  if (absl::Status s = codegen::cuda::NvrtcAvailable(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "aot: the CUDA section needs NVRTC (the CUDA toolkit's runtime compiler) to compile; "
        "running the blob needs only the NVIDIA driver: ",
        s.message()));
  }
  absl::StatusOr<std::shared_ptr<const codegen::cuda::CompiledGraph>> compiled =
      codegen::cuda::CompileSpec(bound, arch, allow_tf32);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(), absl::StrCat("aot: cuda graph compile (", arch,
                                                               "): ", compiled.status().message()));
  }
  const runtime::cuda::CudaExecutableSpec& spec = (*compiled)->spec;
  json plan;
  plan["name"] = name;
  plan["arch"] = arch;
  plan["slots"] = json::array();
  for (const runtime::Slot& slot : spec.slots) {
    absl::StatusOr<json> s = SlotJson(slot, " (cuda)");
    if (!s.ok()) return s.status();
    if (slot.kind == runtime::SlotKind::kConstant) {
      const void* data = slot.external != nullptr ? slot.external : slot.constant.data();
      (*s)["kind"] = "constant";
      (*s)["weights_offset"] = weights.Add(data, static_cast<size_t>(slot.size_bytes));
    }
    plan["slots"].push_back(*std::move(s));
  }
  plan["modules"] = json::array();
  for (const std::string& module : spec.modules) {
    plan["modules"].push_back(json{{"offset", ptx->size()}, {"bytes", module.size()}});
    ptx->append(module);
  }
  plan["kernels"] = json::array();
  for (const runtime::cuda::KernelSpec& k : spec.kernels) {
    plan["kernels"].push_back(json{{"name", k.name},
                                   {"module", k.module},
                                   {"num_buffers", k.num_buffers},
                                   {"max_dynamic_shared_bytes", k.max_dynamic_shared_bytes}});
  }
  plan["launches"] = json::array();
  for (const runtime::cuda::Launch& l : spec.launches) {
    plan["launches"].push_back(json{{"kernel", l.kernel},
                                    {"buffers", l.buffer_slots},
                                    {"grid", {l.grid[0], l.grid[1], l.grid[2]}},
                                    {"block", {l.block[0], l.block[1], l.block[2]}},
                                    {"shared_bytes", l.shared_bytes},
                                    {"name", l.name},
                                    {"error_context", l.error_context}});
  }
  *plan_text = plan.dump();
  return absl::OkStatus();
}
#endif

// The host triple's code targets for CompileOptions::cpu_levels, best first.
absl::StatusOr<std::vector<TargetInfo>> HostTargets(const std::vector<std::string>& names) {
  using runtime::cpu::CpuLevel;
  absl::StatusOr<TargetInfo> jit = HostTargetInfo();  // the host, or the level KILN_CPU pins
  if (!jit.ok()) return jit.status();
  const bool x86_64 = absl::StartsWith(jit->triple, "x86_64");
  std::vector<CpuLevel> levels;
  if (names.empty()) {
    const absl::StatusOr<CpuLevel>& pinned = runtime::cpu::ProcessCpuLevel();
    if (!pinned.ok()) return pinned.status();
    if (!x86_64 || *pinned != CpuLevel::kHost) return std::vector<TargetInfo>{*jit};
    levels = {CpuLevel::kHost, CpuLevel::kX86_64V4, CpuLevel::kX86_64V3, CpuLevel::kX86_64V2};
  } else {
    for (const std::string& name : names) {
      absl::StatusOr<CpuLevel> level = runtime::cpu::ParseCpuLevel(name);
      if (!level.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("aot: cpu level \"", name, "\": ", level.status().message()));
      }
      if (*level != CpuLevel::kHost && !x86_64) {
        return absl::InvalidArgumentError(absl::StrCat(
            "aot: cpu level ", name, " is an x86-64 level, and this host is ", jit->triple));
      }
      if (std::find(levels.begin(), levels.end(), *level) == levels.end()) levels.push_back(*level);
    }
    // The host's own code first, then the levels from the highest: the loader takes the first
    // the CPU runs. (CpuLevel's enumerators go up from kX86_64.)
    std::sort(levels.begin(), levels.end(), [](CpuLevel a, CpuLevel b) {
      if ((a == CpuLevel::kHost) != (b == CpuLevel::kHost)) return a == CpuLevel::kHost;
      return static_cast<int>(a) > static_cast<int>(b);
    });
  }
  std::vector<TargetInfo> targets;
  for (CpuLevel level : levels) {
    absl::StatusOr<TargetInfo> target = LevelTargetInfo(level);
    if (!target.ok()) return target.status();
    targets.push_back(*std::move(target));
  }
  return targets;
}

}  // namespace

absl::StatusOr<std::string> Compile(const ir::Graph& graph, const CompileOptions& options) {
  if (absl::Status s = ir::Verify(graph); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("aot: ", s.message()));
  }
  json weight_list = json::array();
  absl::StatusOr<ir::Graph> bound = BindWeights(graph, options, &weight_list);
  if (!bound.ok()) return bound.status();

  // The same graph compiler as the JIT: fusion, memory plan, launch plan.
  absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
      codegen::cpu::CompileGraph(*bound);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(),
                        absl::StrCat("aot: graph compile: ", compiled.status().message()));
  }
  const runtime::Executable& exe = (*compiled)->executable;

  // Signature.
  json signature;
  signature["name"] = options.name.empty() ? "model" : options.name;
  signature["inputs"] = json::array();
  signature["outputs"] = json::array();
  signature["weights"] = weight_list;
  const std::vector<ir::NodeId> params = bound->Parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    const ir::Node& node = bound->node(params[k]);
    signature["inputs"].push_back(json{{"name", node.attrs.name},
                                       {"dtype", ir::DTypeName(node.type.dtype)},
                                       {"shape", node.type.shape}});
  }
  for (size_t k = 0; k < bound->outputs().size(); ++k) {
    const ir::Output& out = bound->outputs()[k];
    const ir::TensorType& type = bound->node(out.node).type;
    signature["outputs"].push_back(
        json{{"name", out.name.empty() ? absl::StrCat("output", k) : out.name},
             {"dtype", ir::DTypeName(type.dtype)},
             {"shape", type.shape}});
  }

  // Launch plan: slots, then steps.
  const auto slots = exe.slots();
  const auto steps = exe.steps();
  std::set<int> descriptor_slots;
  for (const runtime::Step& step : steps) {
    if (step.fn == runtime::cpu::ContractionKernel) descriptor_slots.insert(step.slot_args[3]);
  }
  std::string weights;
  WeightsWriter weights_writer(&weights);
  json plan;
  plan["name"] = signature["name"];
  plan["slots"] = json::array();
  for (int i = 0; i < static_cast<int>(slots.size()); ++i) {
    const runtime::Slot& slot = slots[i];
    absl::StatusOr<json> s = SlotJson(slot, "");
    if (!s.ok()) return s.status();
    if (slot.kind == runtime::SlotKind::kConstant) {
      if (descriptor_slots.count(i) != 0) {
        (*s)["kind"] = "descriptor";
      } else {
        (*s)["kind"] = "constant";
        (*s)["weights_offset"] =
            weights_writer.Add(exe.constant_data(i), static_cast<size_t>(slot.size_bytes));
      }
    }
    plan["slots"].push_back(*std::move(s));
  }

  // Targets: the host triple's (HostTargets) and the extra triples (generic CPUs).
  absl::StatusOr<std::vector<TargetInfo>> host_targets = HostTargets(options.cpu_levels);
  if (!host_targets.ok()) return host_targets.status();
  std::vector<TargetInfo> targets = *std::move(host_targets);
  const std::string host_triple = targets[0].triple;
  for (const std::string& triple : options.triples) {
    absl::StatusOr<TargetInfo> target = GenericTargetInfo(triple);
    if (!target.ok()) return target.status();
    bool duplicate = false;
    for (const TargetInfo& t : targets) duplicate |= t.triple == target->triple;
    if (!duplicate) targets.push_back(*target);
  }
  std::vector<RecordingProvider> recorders;
  for (const TargetInfo& t : targets) recorders.emplace_back(t.vectors);

  plan["steps"] = json::array();
  std::map<std::string, std::string> symbol_of_kernel;  // printed kernel IR → symbol
  std::vector<std::pair<std::string, codegen::Kernel>> kernels;
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    const runtime::Step& step = steps[s];
    json j{{"args", step.slot_args},
           {"extent", step.parallel_extent},
           {"grain", step.grain},
           {"name", step.name},
           {"error_context", step.error_context}};
    if (step.fn == runtime::cpu::ContractionKernel) {
      const runtime::cpu::ContractionStep* c;
      std::memcpy(&c, exe.constant_data(step.slot_args[3]), sizeof(c));
      json d;
      d["has_bias"] = c->has_bias;
      // Zero operands sized like the slots, for the recording run.
      std::vector<std::vector<std::byte>> zeros;
      std::vector<void*> args;
      for (int slot : step.slot_args) {
        zeros.emplace_back(static_cast<size_t>(slots[slot].size_bytes) + 64);
        args.push_back(zeros.back().data());
      }
      if (c->is_int8) {
        // An int8 contraction: the float descriptor's geometry plus "int8" (operand dtypes, the
        // epilogue); its vectors are args[4...].
        const runtime::cpu::Int8Epilogue& e =
            c->is_conv ? c->int8_conv.epilogue : c->int8_gemm.epilogue;
        json steps = json::array();
        for (const runtime::cpu::Int8EpilogueStep& step : e.steps) {
          steps.push_back(json{{"op", runtime::cpu::Int8EpilogueOpName(step.op)},
                               {"operand", runtime::cpu::Int8OperandName(step.operand)},
                               {"scalar", step.scalar}});
        }
        d["int8"] = json{
            {"lhs", ir::DTypeName(c->is_conv ? c->int8_conv.input_dtype : c->int8_gemm.a_dtype)},
            {"rhs", ir::DTypeName(c->is_conv ? c->int8_conv.weight_dtype : c->int8_gemm.b_dtype)},
            {"output", ir::DTypeName(e.output)},
            {"steps", std::move(steps)}};
        d["dtype"] = "i32";
        d["activation"] = "none";
        const auto bind_vectors = [&](runtime::cpu::Int8Epilogue& epilogue) {
          size_t arg = 4;
          for (runtime::cpu::Int8EpilogueStep& step : epilogue.steps) {
            if (step.operand == runtime::cpu::Int8Operand::kRow ||
                step.operand == runtime::cpu::Int8Operand::kColumn) {
              step.vector = static_cast<const float*>(args[arg++]);
            }
          }
        };
        // Runs the driver on each recorder with `execute(recorder)`.
        const auto record = [&](const auto& execute) -> absl::Status {
          for (RecordingProvider& r : recorders) {
            if (absl::Status st = execute(r); !st.ok()) return st;
            if (!r.vectors().amx) continue;
            r.set_amx(false);
            absl::Status without_amx = execute(r);
            r.set_amx(true);
            if (!without_amx.ok()) return without_amx;
          }
          return absl::OkStatus();
        };
        absl::Status recorded;
        if (c->is_conv) {
          j["kind"] = "conv";
          AddConvGeometry(c->int8_conv.conv, d);
          recorded = record([&](RecordingProvider& r) {
            runtime::cpu::Int8ConvParams q = c->int8_conv;
            q.conv.input = args[0];
            q.conv.weight = args[1];
            q.conv.output = args[2];
            bind_vectors(q.epilogue);
            return runtime::cpu::ExecuteInt8Conv(q, r, nullptr);
          });
        } else {
          const runtime::cpu::Int8GemmParams& p = c->int8_gemm;
          j["kind"] = "gemm";
          AddGemmGeometry(p.batch, p.m, p.n, p.k, p.a, p.b, p.c, d);
          d["alpha"] = 1.0;
          d["beta"] = 0.0;
          recorded = record([&](RecordingProvider& r) {
            runtime::cpu::Int8GemmParams q = p;
            q.packed_b = nullptr;  // packed for the host's kernels; the loader packs its own
            q.a.data = args[0];
            q.b.data = args[1];
            q.c.data = args[2];
            bind_vectors(q.epilogue);
            return runtime::cpu::ExecuteInt8Gemm(q, r, nullptr);
          });
        }
        if (!recorded.ok()) return recorded;
      } else if (c->is_conv) {
        const runtime::cpu::ConvParams& p = c->conv;
        j["kind"] = "conv";
        d["dtype"] = ir::DTypeName(p.dtype);
        d["activation"] = runtime::cpu::GemmActivationName(p.activation);
        AddConvGeometry(p, d);
        for (RecordingProvider& r : recorders) {
          runtime::cpu::ConvParams q = p;
          q.input = args[0];
          q.weight = args[1];
          q.output = args[2];
          if (c->has_bias) q.bias = args[4];
          if (absl::Status st = runtime::cpu::ExecuteConv(q, r, nullptr); !st.ok()) return st;
        }
      } else {
        const runtime::cpu::GemmParams& p = c->gemm;
        if (p.epilogue.residual.data != nullptr || p.epilogue.row_bias != nullptr) {
          return absl::UnimplementedError("aot: GEMM residual/row-bias epilogues");
        }
        j["kind"] = "gemm";
        d["dtype"] = ir::DTypeName(p.dtype);
        d["activation"] = runtime::cpu::GemmActivationName(p.epilogue.activation);
        AddGemmGeometry(p.batch, p.m, p.n, p.k, p.a, p.b, p.c, d);
        d["alpha"] = p.alpha;
        d["beta"] = p.beta;
        for (RecordingProvider& r : recorders) {
          runtime::cpu::GemmParams q = p;
          q.a.data = args[0];
          q.b.data = args[1];
          q.c.data = args[2];
          if (c->has_bias) q.epilogue.column_bias = args[4];
          if (absl::Status st = runtime::cpu::ExecuteGemm(q, r, nullptr); !st.ok()) return st;
        }
      }
      j["descriptor"] = std::move(d);
    } else if (step.fn == runtime::CopyBytesKernel) {
      j["kind"] = "copy";
    } else {
      auto it = (*compiled)->step_kernels.find(s);
      if (it == (*compiled)->step_kernels.end()) {
        return absl::InternalError(
            absl::StrCat("aot: step ", s, " (", step.name, ") has no kernel IR"));
      }
      const codegen::Kernel& kernel = it->second;
      const std::string text = codegen::PrintKernel(kernel);
      auto [known, fresh] = symbol_of_kernel.emplace(
          text, absl::StrCat("kiln_k", kernels.size(), "_", Symbolize(kernel.name)));
      if (fresh) kernels.emplace_back(known->second, kernel);
      j["kind"] = "kernel";
      j["symbol"] = known->second;
      json arg_bytes = json::array();
      for (const codegen::KernelArg& arg : kernel.args) {
        // The error flag is two int64 (runtime::KernelErrorFlag), whatever its KernelArg says.
        arg_bytes.push_back(arg.role == codegen::ArgRole::kErrorFlag
                                ? static_cast<int64_t>(sizeof(runtime::KernelErrorFlag))
                                : arg.num_elements * ir::DTypeSize(arg.dtype));
      }
      j["arg_bytes"] = std::move(arg_bytes);
    }
    plan["steps"].push_back(std::move(j));
  }

  std::vector<Section> sections;
  plan["targets"] = json::array();
  const fs::path work =
      fs::temp_directory_path() /
      absl::StrCat("kiln-aot-", getpid(), "-", reinterpret_cast<uintptr_t>(&graph));
  std::error_code ec;
  fs::create_directories(work, ec);
  if (ec) return absl::InternalError(absl::StrCat("aot: cannot create ", work.string()));
  struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } cleanup{work};
  for (size_t t = 0; t < targets.size(); ++t) {
    const TargetInfo& target = targets[t];
    // Each target's code holds the micro-kernels the driver asks for with its vectors.
    std::vector<MicroKernelRequest> micro;
    std::vector<std::string> micro_names;
    for (const auto& [name, r] : recorders[t].requests()) {
      micro.push_back(MicroKernelRequest{r.dtype, r.shape, r.variant, r.int8});
      micro_names.push_back(name);
    }
    absl::StatusOr<std::string> object = CompileObject(target, kernels, micro);
    if (!object.ok()) return object.status();
    const fs::path object_path = work / absl::StrCat("code", t, ".o");
    const fs::path library_path = work / absl::StrCat("code", t, ".so");
    {
      std::ofstream out(object_path, std::ios::binary);
      out.write(object->data(), static_cast<std::streamsize>(object->size()));
      if (!out)
        return absl::InternalError(absl::StrCat("aot: cannot write ", object_path.string()));
    }
    std::vector<std::string> link;
    if (target.triple == host_triple) {
      const char* cc = std::getenv("KILN_AOT_CC");
      link = {cc != nullptr && *cc != '\0' ? cc : "cc",
              "-shared",
              "-o",
              library_path.string(),
              object_path.string(),
              "-lm"};
    } else {
      const char* lld = std::getenv("KILN_AOT_LLD");
      link = {lld != nullptr && *lld != '\0' ? lld : "ld.lld",
              "-shared",
              "--no-undefined-version",
              "-o",
              library_path.string(),
              object_path.string()};
    }
    if (absl::Status s = RunCommand(link, (work / "link.log").string()); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("aot: link for ", target.triple, ": ", s.message()));
    }
    std::ifstream in(library_path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    // The payload's name holds its triple (and, after the triple's first section, the index of
    // the section among the triple's): it must fit the entry.
    int same_triple = 0;
    for (size_t u = 0; u < t; ++u) same_triple += targets[u].triple == target.triple;
    const std::string payload = same_triple == 0
                                    ? "cpu:" + target.triple
                                    : absl::StrCat("cpu:", target.triple, "@", same_triple);
    if (payload.size() >= runtime::blob::kSectionNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "aot: triple ", target.triple, " is longer than ", runtime::blob::kSectionNameBytes - 7,
          " characters (the blob's section names)"));
    }
    json tj{{"triple", target.triple},
            {"cpu", target.cpu},
            {"features", target.features},
            {"vector_bits", target.vectors.bits},
            {"vector_registers", target.vectors.registers},
            {"fma", target.vectors.fma},
            {"vnni", target.vectors.vnni},
            {"amx", target.vectors.amx},
            {"micro_kernels", micro_names},
            {"payload", payload}};
    plan["targets"].push_back(std::move(tj));
    sections.push_back(Section{runtime::blob::SectionKind::kPayload, payload, bytes.str()});
  }
  std::string vulkan_plan, spirv;
  if (options.vulkan) {
#if KILN_AOT_HAVE_VULKAN
    if (absl::Status s = CompileVulkan(*bound, signature["name"].get<std::string>(), weights_writer,
                                       &vulkan_plan, &spirv);
        !s.ok()) {
      return s;
    }
#else
    return absl::UnimplementedError("aot: this build of kiln has no Vulkan backend");
#endif
  }
  std::string cuda_plan, ptx;
  if (options.cuda) {
#if KILN_AOT_HAVE_CUDA
    if (absl::Status s =
            CompileCuda(*bound, signature["name"].get<std::string>(), options.cuda_arch,
                        options.cuda_allow_tf32, weights_writer, &cuda_plan, &ptx);
        !s.ok()) {
      return s;
    }
#else
    return absl::UnimplementedError("aot: this build of kiln has no CUDA backend");
#endif
  }
  std::vector<Section> all;
  all.push_back(Section{runtime::blob::SectionKind::kSignature, "", signature.dump()});
  all.push_back(Section{runtime::blob::SectionKind::kPlan, "cpu", plan.dump()});
  all.push_back(Section{runtime::blob::SectionKind::kWeights, "", std::move(weights)});
  for (Section& s : sections) all.push_back(std::move(s));
  if (options.vulkan) {
    all.push_back(Section{runtime::blob::SectionKind::kPlan, "vulkan", std::move(vulkan_plan)});
    all.push_back(Section{runtime::blob::SectionKind::kPayload, "vulkan:spirv", std::move(spirv)});
  }
  if (options.cuda) {
    all.push_back(Section{runtime::blob::SectionKind::kPlan, "cuda", std::move(cuda_plan)});
    all.push_back(Section{runtime::blob::SectionKind::kPayload, "cuda:ptx", std::move(ptx)});
  }
  if (options.include_ir_text) {
    all.push_back(Section{runtime::blob::SectionKind::kIrText, "", ir::PrintGraph(graph)});
  }
  return Assemble(std::move(all));
}

absl::Status CompileToFile(const ir::Graph& graph, const CompileOptions& options,
                           const std::string& path) {
  absl::StatusOr<std::string> blob = Compile(graph, options);
  if (!blob.ok()) return blob.status();
  const std::string temporary = absl::StrCat(path, ".tmp", getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(blob->data(), static_cast<std::streamsize>(blob->size()));
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("aot: cannot write ", temporary));
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("aot: cannot rename ", temporary, " to ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace kiln::aot
