#include "runtime/blob.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/dtype.h"
#include "nlohmann/json.hpp"
#include "runtime/buffer.h"
#include "runtime/cpu/contraction.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/executable.h"
#include "runtime/thread_pool.h"
#include "xxhash.h"

namespace kiln::runtime::blob {
namespace {

using json = nlohmann::json;
namespace gi = runtime::cpu::gemm_internal;

// Every size and count in a blob is far below these; larger values are hostile.
constexpr uint64_t kMaxSections = 64;
constexpr int64_t kMaxRank = 16;
constexpr int64_t kMaxSlots = 1 << 20;
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

absl::Status Bad(auto&&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("blob: ", parts...));
}

// Reads JSON fields with type checks; errors name the section and the field path.
class Reader {
 public:
  Reader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  absl::Status Error(const std::string& path, const std::string& what) const {
    return Bad(where_, ": ", path, ": ", what);
  }
  absl::StatusOr<const json*> Field(const json& object, const std::string& path,
                                    const char* key) const {
    if (!object.is_object()) return Error(path, "is not an object");
    auto it = object.find(key);
    if (it == object.end()) return Error(path, absl::StrCat("has no \"", key, "\""));
    return &*it;
  }
  absl::StatusOr<int64_t> Int(const json& object, const std::string& path, const char* key,
                              int64_t low, int64_t high) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_number_integer()) return Error(absl::StrCat(path, ".", key), "is not an integer");
    int64_t value;
    if ((*v)->is_number_unsigned()) {
      const uint64_t u = (*v)->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(absl::StrCat(path, ".", key), "is out of range");
      }
      value = static_cast<int64_t>(u);
    } else {
      value = (*v)->get<int64_t>();
    }
    if (value < low || value > high) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat(value, " is outside [", low, ", ", high, "]"));
    }
    return value;
  }
  absl::StatusOr<std::string> String(const json& object, const std::string& path,
                                     const char* key) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_string()) return Error(absl::StrCat(path, ".", key), "is not a string");
    return (*v)->get<std::string>();
  }
  absl::StatusOr<bool> Bool(const json& object, const std::string& path, const char* key) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_boolean()) return Error(absl::StrCat(path, ".", key), "is not a boolean");
    return (*v)->get<bool>();
  }
  absl::StatusOr<double> Number(const json& object, const std::string& path,
                                const char* key) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_number()) return Error(absl::StrCat(path, ".", key), "is not a number");
    return (*v)->get<double>();
  }
  absl::StatusOr<const json*> Array(const json& object, const std::string& path, const char* key,
                                    size_t max_size) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_array()) return Error(absl::StrCat(path, ".", key), "is not an array");
    if ((*v)->size() > max_size) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat("has ", (*v)->size(), " entries (at most ", max_size, ")"));
    }
    return *v;
  }
  absl::StatusOr<std::vector<int64_t>> Ints(const json& object, const std::string& path,
                                            const char* key, size_t max_size, int64_t low,
                                            int64_t high) const {
    absl::StatusOr<const json*> array = Array(object, path, key, max_size);
    if (!array.ok()) return array.status();
    std::vector<int64_t> values;
    for (size_t i = 0; i < (*array)->size(); ++i) {
      const json& e = (**array)[i];
      const std::string at = absl::StrCat(path, ".", key, "[", i, "]");
      if (!e.is_number_integer()) return Error(at, "is not an integer");
      if (e.is_number_unsigned() &&
          e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(at, "is out of range");
      }
      const int64_t v =
          e.is_number_unsigned() ? static_cast<int64_t>(e.get<uint64_t>()) : e.get<int64_t>();
      if (v < low || v > high) {
        return Error(at, absl::StrCat(v, " is outside [", low, ", ", high, "]"));
      }
      values.push_back(v);
    }
    return values;
  }

 private:
  std::string where_;
};

#define KILN_ASSIGN(lhs, expr)                  \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

// Product of dimensions with overflow checks (dimensions already bounded by kMaxDimension).
absl::StatusOr<int64_t> CheckedProduct(const std::vector<int64_t>& dims, int64_t element_size) {
  int64_t n = element_size;
  for (int64_t d : dims) {
    if (d != 0 && n > (int64_t{1} << 62) / d) return absl::InvalidArgumentError("size overflows");
    n *= d;
  }
  return n;
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

absl::StatusOr<json> ParseJson(std::span<const std::byte> bytes, const std::string& where) {
  json j = json::parse(reinterpret_cast<const char*>(bytes.data()),
                       reinterpret_cast<const char*>(bytes.data()) + bytes.size(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(where, ": not valid JSON");
  if (!j.is_object()) return Bad(where, ": not a JSON object");
  return j;
}

bool ValidSymbol(const std::string& s) {
  if (!absl::StartsWith(s, "kiln_") || s.size() > 200) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_' || c == '.'; });
}

const char* ActivationName(runtime::cpu::GemmActivation a) {
  return runtime::cpu::GemmActivationName(a);
}

absl::StatusOr<runtime::cpu::GemmActivation> ParseActivation(const std::string& name) {
  using runtime::cpu::GemmActivation;
  for (GemmActivation a : {GemmActivation::kNone, GemmActivation::kRelu, GemmActivation::kGeluTanh,
                           GemmActivation::kSilu, GemmActivation::kSigmoid}) {
    if (name == ActivationName(a)) return a;
  }
  return absl::InvalidArgumentError("unknown activation \"" + name + "\"");
}

// The largest element offset + 1 a strided matrix view touches (0 when it touches nothing).
absl::StatusOr<int64_t> ViewExtent(const Reader& r, const json& j, const std::string& path,
                                   int64_t rows, int64_t cols, const std::vector<int64_t>& batch,
                                   runtime::cpu::MatrixView* view) {
  KILN_ASSIGN(row_stride, r.Int(j, path, "row_stride", 0, kMaxDimension));
  KILN_ASSIGN(col_stride, r.Int(j, path, "col_stride", 0, kMaxDimension));
  KILN_ASSIGN(batch_strides, r.Ints(j, path, "batch_strides", kMaxRank, 0, kMaxDimension));
  if (!batch_strides.empty() && batch_strides.size() != batch.size()) {
    return r.Error(path + ".batch_strides", "does not match the batch rank");
  }
  view->row_stride = row_stride;
  view->col_stride = col_stride;
  view->batch_strides = batch_strides;
  if (rows == 0 || cols == 0) return 0;
  for (int64_t b : batch) {
    if (b == 0) return 0;
  }
  // Each term is below 2^40 * 2^40; sums of at most 18 such terms stay below 2^63 only if
  // bounded: use long double-free checked arithmetic via __int128.
  __int128 last =
      static_cast<__int128>(rows - 1) * row_stride + static_cast<__int128>(cols - 1) * col_stride;
  for (size_t d = 0; d < batch_strides.size(); ++d) {
    last += static_cast<__int128>(batch[d] - 1) * batch_strides[d];
  }
  if (last >= (static_cast<__int128>(1) << 61)) return r.Error(path, "addresses overflow");
  return static_cast<int64_t>(last) + 1;
}

}  // namespace

const char* SectionKindName(SectionKind kind) {
  switch (kind) {
    case SectionKind::kSignature:
      return "signature";
    case SectionKind::kLaunchPlan:
      return "launch plan";
    case SectionKind::kWeights:
      return "weights";
    case SectionKind::kCode:
      return "code";
    case SectionKind::kIrText:
      return "ir text";
    case SectionKind::kVulkanPlan:
      return "vulkan plan";
    case SectionKind::kSpirv:
      return "spirv";
  }
  return "unknown";
}

const char* HostArchitecture() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

namespace {

// The launch plan, validated, in a form Model::Load turns into an ExecutableSpec.
struct PlanSlot {
  SlotKind kind = SlotKind::kArena;
  bool descriptor = false;  // a constant slot the loader fills with a ContractionStep address
  int64_t size = 0, index = 0, offset = 0, weights_offset = 0;
};
struct PlanStep {
  enum Kind { kKernel, kCopy, kGemm, kConv } kind = kKernel;
  std::string symbol;
  std::vector<int> args;
  int64_t extent = 1, grain = 1;
  std::string name, error_context;
  runtime::cpu::ContractionStep contraction;  // kGemm / kConv (pointers unset)
};
struct Plan {
  std::string name;
  std::vector<PlanSlot> slots;
  std::vector<PlanStep> steps;
};

absl::StatusOr<Plan> ParsePlan(const json& j, const Signature& signature, uint64_t weights_size,
                               const std::string& where) {
  const Reader r(where);
  Plan plan;
  KILN_ASSIGN(name, r.String(j, "plan", "name"));
  plan.name = name;
  KILN_ASSIGN(slots, r.Array(j, "plan", "slots", kMaxSlots));
  for (size_t i = 0; i < slots->size(); ++i) {
    const std::string path = absl::StrCat("slots[", i, "]");
    const json& s = (*slots)[i];
    PlanSlot slot;
    KILN_ASSIGN(kind, r.String(s, path, "kind"));
    KILN_ASSIGN(size, r.Int(s, path, "size", 0, int64_t{1} << 50));
    slot.size = size;
    if (kind == "input" || kind == "output") {
      const bool input = kind == "input";
      const auto& list = input ? signature.inputs : signature.outputs;
      KILN_ASSIGN(index, r.Int(s, path, "index", 0, static_cast<int64_t>(list.size()) - 1));
      if (size > list[index].size_bytes) {
        return r.Error(path, absl::StrCat(size, " bytes exceed ", kind, " ", index, " (",
                                          list[index].size_bytes, " bytes)"));
      }
      slot.kind = input ? SlotKind::kInput : SlotKind::kOutput;
      slot.index = index;
    } else if (kind == "arena") {
      KILN_ASSIGN(offset, r.Int(s, path, "offset", 0, int64_t{1} << 50));
      if (offset % static_cast<int64_t>(kBufferAlignment) != 0) {
        return r.Error(path + ".offset", "is not a multiple of 64");
      }
      slot.kind = SlotKind::kArena;
      slot.offset = offset;
    } else if (kind == "constant") {
      KILN_ASSIGN(offset, r.Int(s, path, "weights_offset", 0, int64_t{1} << 50));
      if (offset % static_cast<int64_t>(kSectionAlignment) != 0) {
        return r.Error(path + ".weights_offset", "is not a multiple of 64");
      }
      if (static_cast<uint64_t>(offset) > weights_size ||
          static_cast<uint64_t>(size) > weights_size - static_cast<uint64_t>(offset)) {
        return r.Error(
            path, absl::StrCat("bytes [", offset, ", ", offset + size,
                               ") lie outside the weights section (", weights_size, " bytes)"));
      }
      slot.kind = SlotKind::kConstant;
      slot.weights_offset = offset;
    } else if (kind == "descriptor") {
      if (size != static_cast<int64_t>(sizeof(void*))) return r.Error(path, "size must be 8");
      slot.kind = SlotKind::kConstant;
      slot.descriptor = true;
    } else if (kind == "error_flag") {
      if (size != static_cast<int64_t>(sizeof(KernelErrorFlag))) {
        return r.Error(path, "the error flag is 16 bytes");
      }
      slot.kind = SlotKind::kErrorFlag;
    } else {
      return r.Error(path + ".kind", "unknown slot kind \"" + kind + "\"");
    }
    plan.slots.push_back(slot);
  }
  std::vector<bool> output_bound(signature.outputs.size(), false);
  for (const PlanSlot& s : plan.slots) {
    if (s.kind == SlotKind::kOutput) output_bound[s.index] = true;
  }
  for (size_t k = 0; k < output_bound.size(); ++k) {
    if (!output_bound[k]) return r.Error("slots", absl::StrCat("output ", k, " has no slot"));
  }
  const int num_slots = static_cast<int>(plan.slots.size());
  std::vector<int> descriptor_users(plan.slots.size(), 0);

  KILN_ASSIGN(steps, r.Array(j, "plan", "steps", kMaxSlots));
  for (size_t i = 0; i < steps->size(); ++i) {
    const std::string path = absl::StrCat("steps[", i, "]");
    const json& s = (*steps)[i];
    PlanStep step;
    KILN_ASSIGN(kind, r.String(s, path, "kind"));
    KILN_ASSIGN(args, r.Ints(s, path, "args", 4096, 0, num_slots - 1));
    KILN_ASSIGN(extent, r.Int(s, path, "extent", 0, int64_t{1} << 50));
    KILN_ASSIGN(grain, r.Int(s, path, "grain", 1, int64_t{1} << 50));
    KILN_ASSIGN(step_name, r.String(s, path, "name"));
    KILN_ASSIGN(context, r.String(s, path, "error_context"));
    for (int64_t a : args) step.args.push_back(static_cast<int>(a));
    step.extent = extent;
    step.grain = grain;
    step.name = step_name;
    step.error_context = context;
    auto slot_of = [&](int arg) -> const PlanSlot& { return plan.slots[step.args[arg]]; };
    if (kind != "kernel" && kind != "copy" && kind != "gemm" && kind != "conv") {
      return r.Error(path + ".kind", "unknown step kind \"" + kind + "\"");
    }
    for (int a : step.args) {
      if (plan.slots[a].descriptor && !(kind == "gemm" || kind == "conv")) {
        return r.Error(path, absl::StrCat("a ", kind, " step reads descriptor slot ", a));
      }
    }
    if (kind == "kernel") {
      step.kind = PlanStep::kKernel;
      KILN_ASSIGN(symbol, r.String(s, path, "symbol"));
      if (!ValidSymbol(symbol)) return r.Error(path + ".symbol", "is not a kernel symbol");
      step.symbol = symbol;
      // The bytes each argument of the generated kernel addresses: every bound slot must have
      // at least that many.
      KILN_ASSIGN(arg_bytes, r.Ints(s, path, "arg_bytes", 4096, 0, int64_t{1} << 50));
      if (arg_bytes.size() != step.args.size()) {
        return r.Error(path + ".arg_bytes", "does not have one entry per argument");
      }
      for (size_t a = 0; a < arg_bytes.size(); ++a) {
        if (slot_of(static_cast<int>(a)).size < arg_bytes[a]) {
          return r.Error(path,
                         absl::StrCat("argument ", a, " needs ", arg_bytes[a], " bytes, slot ",
                                      step.args[a], " has ", slot_of(static_cast<int>(a)).size));
        }
      }
    } else if (kind == "copy") {
      step.kind = PlanStep::kCopy;
      if (step.args.size() != 3) return r.Error(path, "a copy has 3 arguments");
      const PlanSlot& count = slot_of(2);
      if (count.kind != SlotKind::kConstant || count.descriptor || count.size != 8) {
        return r.Error(path, "argument 2 must be an 8-byte constant (the byte count)");
      }
      // The count itself is checked in Model::Load, where the weights are at hand.
    } else if (kind == "gemm" || kind == "conv") {
      step.kind = kind == "gemm" ? PlanStep::kGemm : PlanStep::kConv;
      if (step.args.size() != 4 && step.args.size() != 5) {
        return r.Error(path, "a contraction has 4 or 5 arguments");
      }
      if (!slot_of(3).descriptor) return r.Error(path, "argument 3 must be a descriptor slot");
      if (++descriptor_users[step.args[3]] > 1) {
        return r.Error(path, absl::StrCat("descriptor slot ", step.args[3], " is shared"));
      }
      if (step.extent != 1 || step.grain != 1) {
        return r.Error(path, "a contraction runs with extent 1 and grain 1");
      }
      KILN_ASSIGN(d, r.Field(s, path, "descriptor"));
      const std::string dp = path + ".descriptor";
      KILN_ASSIGN(dtype_name, r.String(*d, dp, "dtype"));
      std::optional<base::DType> dtype = base::ParseDType(dtype_name);
      if (!dtype.has_value() || (*dtype != base::DType::kF32 && *dtype != base::DType::kF64)) {
        return r.Error(dp + ".dtype", "must be f32 or f64");
      }
      const int64_t esize = base::DTypeSize(*dtype);
      KILN_ASSIGN(activation_name, r.String(*d, dp, "activation"));
      absl::StatusOr<runtime::cpu::GemmActivation> activation = ParseActivation(activation_name);
      if (!activation.ok())
        return r.Error(dp + ".activation", std::string(activation.status().message()));
      KILN_ASSIGN(has_bias, r.Bool(*d, dp, "has_bias"));
      if (has_bias != (step.args.size() == 5)) {
        return r.Error(path, "has_bias does not match the argument count");
      }
      runtime::cpu::ContractionStep& c = step.contraction;
      c.has_bias = has_bias;
      auto need = [&](int arg, int64_t elements, const char* what) -> absl::Status {
        const __int128 bytes = static_cast<__int128>(elements) * esize;
        if (bytes > slot_of(arg).size) {
          return r.Error(path,
                         absl::StrCat(what, " needs ", static_cast<int64_t>(bytes), " bytes, slot ",
                                      step.args[arg], " has ", slot_of(arg).size));
        }
        return absl::OkStatus();
      };
      if (step.kind == PlanStep::kGemm) {
        runtime::cpu::GemmParams& p = c.gemm;
        p.dtype = *dtype;
        KILN_ASSIGN(batch, r.Ints(*d, dp, "batch", kMaxRank, 0, kMaxDimension));
        KILN_ASSIGN(m, r.Int(*d, dp, "m", 0, kMaxDimension));
        KILN_ASSIGN(n, r.Int(*d, dp, "n", 0, kMaxDimension));
        KILN_ASSIGN(k, r.Int(*d, dp, "k", 0, kMaxDimension));
        KILN_ASSIGN(alpha, r.Number(*d, dp, "alpha"));
        KILN_ASSIGN(beta, r.Number(*d, dp, "beta"));
        // The driver materialises one offset record per batch entry: bound their number.
        absl::StatusOr<int64_t> entries = CheckedProduct(batch, 1);
        if (!entries.ok() || *entries > (int64_t{1} << 24)) {
          return r.Error(dp + ".batch", "has more than 2^24 entries");
        }
        p.batch = batch;
        p.m = m;
        p.n = n;
        p.k = k;
        p.alpha = alpha;
        p.beta = beta;
        p.epilogue.activation = *activation;
        for (auto [key, rows, cols, view, arg] :
             {std::tuple{"a", m, k, &p.a, 0}, {"b", k, n, &p.b, 1}, {"c", m, n, &p.c, 2}}) {
          KILN_ASSIGN(v, r.Field(*d, dp, key));
          KILN_ASSIGN(extent_elements,
                      ViewExtent(r, *v, absl::StrCat(dp, ".", key), rows, cols, batch, view));
          if (absl::Status st = need(arg, extent_elements, key); !st.ok()) return st;
        }
        if (p.c.col_stride != 1) return r.Error(dp + ".c.col_stride", "must be 1");
        if (has_bias) {
          if (absl::Status st = need(4, n, "bias"); !st.ok()) return st;
        }
      } else {
        runtime::cpu::ConvParams& p = c.conv;
        c.is_conv = true;
        p.dtype = *dtype;
        p.activation = *activation;
        KILN_ASSIGN(input_shape, r.Ints(*d, dp, "input_shape", kMaxRank, 0, kMaxDimension));
        KILN_ASSIGN(weight_shape, r.Ints(*d, dp, "weight_shape", kMaxRank, 0, kMaxDimension));
        KILN_ASSIGN(strides, r.Ints(*d, dp, "strides", kMaxRank, 1, kMaxDimension));
        KILN_ASSIGN(low, r.Ints(*d, dp, "low", kMaxRank, -kMaxDimension, kMaxDimension));
        KILN_ASSIGN(high, r.Ints(*d, dp, "high", kMaxRank, -kMaxDimension, kMaxDimension));
        KILN_ASSIGN(dilation, r.Ints(*d, dp, "dilation", kMaxRank, 1, kMaxDimension));
        KILN_ASSIGN(input_dilation, r.Ints(*d, dp, "input_dilation", kMaxRank, 1, kMaxDimension));
        KILN_ASSIGN(groups, r.Int(*d, dp, "groups", 1, kMaxDimension));
        p.input_shape = input_shape;
        p.weight_shape = weight_shape;
        p.strides = strides;
        p.low = low;
        p.high = high;
        p.dilation = dilation;
        p.input_dilation = input_dilation;
        p.groups = groups;
        absl::StatusOr<runtime::cpu::Dims> out = runtime::cpu::ConvOutputShape(p);
        if (!out.ok()) return r.Error(dp, std::string(out.status().message()));
        for (auto [shape, arg, what] : {std::tuple{&p.input_shape, 0, "input"},
                                        {&p.weight_shape, 1, "weight"},
                                        {&*out, 2, "output"}}) {
          absl::StatusOr<int64_t> elements = CheckedProduct(*shape, 1);
          if (!elements.ok()) return r.Error(dp, absl::StrCat(what, " size overflows"));
          if (absl::Status st = need(arg, *elements, what); !st.ok()) return st;
        }
        if (has_bias) {
          if (absl::Status st = need(4, p.weight_shape[0], "bias"); !st.ok()) return st;
        }
      }
    } else {
      return r.Error(path + ".kind", "unknown step kind \"" + kind + "\"");
    }
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

// ---- The Vulkan plan ---------------------------------------------------------------------------

// SPIR-V capabilities that need a device feature, and the feature's Vulkan name.
struct CapabilityFeature {
  uint32_t capability;
  const char* feature;
};
constexpr CapabilityFeature kCapabilityFeatures[] = {
    {9, "shaderFloat16"},                // Float16
    {10, "shaderFloat64"},               // Float64
    {11, "shaderInt64"},                 // Int64
    {22, "shaderInt16"},                 // Int16
    {39, "shaderInt8"},                  // Int8
    {4433, "storageBuffer16BitAccess"},  // StorageBuffer16BitAccess
    {4448, "storageBuffer8BitAccess"},   // StorageBuffer8BitAccess
};

// What ParseBlob needs from a module: its declared features and workgroup size. Walks every
// instruction inside `words` (never past it) and fails, naming the word, on a bad header, an
// instruction of 0 words or one running past the end, no GLCompute entry point, or no LocalSize.
struct SpirvFacts {
  std::vector<std::string> features;
  uint32_t local_size[3] = {0, 0, 0};
};
absl::StatusOr<SpirvFacts> ScanSpirv(std::span<const uint32_t> words) {
  if (words.size() < 5) return absl::InvalidArgumentError("has fewer than 5 words");
  if (words[0] != 0x07230203u) {
    return absl::InvalidArgumentError(
        absl::StrCat("not SPIR-V: word 0 is 0x", absl::Hex(words[0])));
  }
  SpirvFacts facts;
  bool compute = false, local_size = false;
  for (size_t at = 5; at < words.size();) {
    const uint32_t count = words[at] >> 16, opcode = words[at] & 0xffffu;
    if (count == 0 || count > words.size() - at) {
      return absl::InvalidArgumentError(
          absl::StrCat("the instruction at word ", at, " (opcode ", opcode, ") has ", count,
                       " words but the module ends at word ", words.size()));
    }
    if (opcode == 17 && count == 2) {  // OpCapability
      for (const CapabilityFeature& c : kCapabilityFeatures) {
        if (c.capability == words[at + 1]) facts.features.push_back(c.feature);
      }
    } else if (opcode == 15 && count >= 3 && words[at + 1] == 5) {  // OpEntryPoint GLCompute
      compute = true;
    } else if (opcode == 16 && count == 6 && words[at + 2] == 17) {  // OpExecutionMode LocalSize
      for (int d = 0; d < 3; ++d) facts.local_size[d] = words[at + 3 + d];
      local_size = true;
    }
    at += count;
  }
  if (!compute) return absl::InvalidArgumentError("has no GLCompute entry point");
  if (!local_size) return absl::InvalidArgumentError("has no LocalSize execution mode");
  for (int d = 0; d < 3; ++d) {
    if (facts.local_size[d] == 0 || facts.local_size[d] > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("has a LocalSize of ", facts.local_size[d], " along axis ", d));
    }
  }
  return facts;
}

absl::StatusOr<std::shared_ptr<const VulkanPlan>> ParseVulkanPlan(const json& j,
                                                                  const Signature& signature,
                                                                  std::span<const std::byte> spirv,
                                                                  uint64_t weights_size,
                                                                  const std::string& where) {
  const Reader r(where);
  auto plan = std::make_shared<VulkanPlan>();
  KILN_ASSIGN(features, r.Array(j, "vulkan plan", "features", 16));
  for (size_t i = 0; i < features->size(); ++i) {
    const json& f = (*features)[i];
    if (!f.is_string() || !IsVulkanFeature(f.get<std::string>())) {
      return r.Error(absl::StrCat("features[", i, "]"), "is not a known Vulkan feature");
    }
    plan->features.push_back(f.get<std::string>());
  }
  KILN_ASSIGN(api, r.Ints(j, "vulkan plan", "vulkan_version", 2, 1, 9));
  if (api.size() != 2) return r.Error("vulkan_version", "is not [major, minor]");
  plan->api_major = static_cast<uint32_t>(api[0]);
  plan->api_minor = static_cast<uint32_t>(api[1]);
  KILN_ASSIGN(alignment, r.Int(j, "vulkan plan", "offset_alignment", 1, 4096));
  if ((alignment & (alignment - 1)) != 0) {
    return r.Error("offset_alignment", "is not a power of two");
  }
  plan->offset_alignment = alignment;

  KILN_ASSIGN(slots, r.Array(j, "vulkan plan", "slots", kMaxSlots));
  std::vector<bool> output_bound(signature.outputs.size(), false);
  for (size_t i = 0; i < slots->size(); ++i) {
    const std::string path = absl::StrCat("slots[", i, "]");
    const json& s = (*slots)[i];
    VulkanPlan::Slot slot;
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
      if (offset % alignment != 0) {
        return r.Error(path,
                       absl::StrCat("arena offset ", offset, " is not a multiple of ", alignment));
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

  KILN_ASSIGN(shaders, r.Array(j, "vulkan plan", "shaders", 1 << 16));
  const uint64_t spirv_words = spirv.size() / 4;
  for (size_t i = 0; i < shaders->size(); ++i) {
    const std::string path = absl::StrCat("shaders[", i, "]");
    const json& s = (*shaders)[i];
    VulkanPlan::Shader shader;
    KILN_ASSIGN(name, r.String(s, path, "name"));
    KILN_ASSIGN(offset, r.Int(s, path, "spirv_offset", 0, kMaxDimension));
    KILN_ASSIGN(words, r.Int(s, path, "spirv_words", 5, kMaxDimension));
    KILN_ASSIGN(buffers, r.Int(s, path, "buffers", 0, 64));
    KILN_ASSIGN(push, r.Int(s, path, "push_constant_bytes", 0, 128));
    if (push % 4 != 0) return r.Error(path, "push_constant_bytes is not a multiple of 4");
    if (offset % 4 != 0 || static_cast<uint64_t>(offset) / 4 > spirv_words ||
        static_cast<uint64_t>(words) > spirv_words - static_cast<uint64_t>(offset) / 4) {
      return r.Error(path, absl::StrCat("SPIR-V bytes [", offset, ", +", words * 4,
                                        ") are unaligned or outside the SPIR-V section of ",
                                        spirv.size(), " bytes"));
    }
    std::vector<uint32_t> module(static_cast<size_t>(words));
    std::memcpy(module.data(), spirv.data() + offset, module.size() * 4);
    absl::StatusOr<SpirvFacts> facts = ScanSpirv(module);
    if (!facts.ok()) {
      return r.Error(path, absl::StrCat("SPIR-V at byte ", offset, " of the SPIR-V section ",
                                        facts.status().message()));
    }
    for (const std::string& f : facts->features) {
      if (std::find(plan->features.begin(), plan->features.end(), f) == plan->features.end()) {
        return r.Error(
            path, absl::StrCat("the SPIR-V needs ", f, ", which the plan's features do not list"));
      }
    }
    shader.name = name;
    shader.spirv_offset = static_cast<uint64_t>(offset);
    shader.spirv_words = static_cast<uint64_t>(words);
    shader.num_buffers = static_cast<int>(buffers);
    shader.push_constant_bytes = static_cast<int>(push);
    for (int d = 0; d < 3; ++d) shader.local_size[d] = facts->local_size[d];
    plan->shaders.push_back(std::move(shader));
  }

  KILN_ASSIGN(dispatches, r.Array(j, "vulkan plan", "dispatches", 1 << 20));
  for (size_t i = 0; i < dispatches->size(); ++i) {
    const std::string path = absl::StrCat("dispatches[", i, "]");
    const json& d = (*dispatches)[i];
    VulkanPlan::Dispatch dispatch;
    KILN_ASSIGN(shader,
                r.Int(d, path, "shader", 0, static_cast<int64_t>(plan->shaders.size()) - 1));
    const VulkanPlan::Shader& sh = plan->shaders[static_cast<size_t>(shader)];
    KILN_ASSIGN(buffers,
                r.Ints(d, path, "buffers", 64, 0, static_cast<int64_t>(plan->slots.size()) - 1));
    if (static_cast<int>(buffers.size()) != sh.num_buffers) {
      return r.Error(path, absl::StrCat(buffers.size(), " buffers, shader ", shader, " takes ",
                                        sh.num_buffers));
    }
    KILN_ASSIGN(push, r.Ints(d, path, "push_constants", 128, 0, 255));
    if (static_cast<int>(push.size()) != sh.push_constant_bytes) {
      return r.Error(path, absl::StrCat(push.size(), " push-constant bytes, shader ", shader,
                                        " takes ", sh.push_constant_bytes));
    }
    KILN_ASSIGN(groups, r.Ints(d, path, "groups", 3, 0, std::numeric_limits<uint32_t>::max()));
    if (groups.size() != 3) return r.Error(path, "groups is not [x, y, z]");
    KILN_ASSIGN(name, r.String(d, path, "name"));
    KILN_ASSIGN(context, r.String(d, path, "error_context"));
    dispatch.shader = static_cast<int>(shader);
    for (int64_t b : buffers) dispatch.buffers.push_back(static_cast<int>(b));
    for (int64_t p : push) dispatch.push_constants.push_back(static_cast<uint8_t>(p));
    for (int a = 0; a < 3; ++a) dispatch.groups[a] = static_cast<uint32_t>(groups[a]);
    dispatch.name = name;
    dispatch.error_context = context;
    plan->dispatches.push_back(std::move(dispatch));
  }
  return std::shared_ptr<const VulkanPlan>(std::move(plan));
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

}  // namespace

const char* VulkanFeatureForCapability(uint32_t capability) {
  for (const CapabilityFeature& c : kCapabilityFeatures) {
    if (c.capability == capability) return c.feature;
  }
  return nullptr;
}

bool IsVulkanFeature(const std::string& name) {
  for (const CapabilityFeature& c : kCapabilityFeatures) {
    if (name == c.feature) return true;
  }
  return false;
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
    return absl::FailedPreconditionError(absl::StrCat("blob: blob format version ", view.version,
                                                      ", this runtime reads ", kFormatVersion));
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
  int signature_section = -1, plan_section = -1, vulkan_section = -1, spirv_section = -1;
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
    if (kind < 1 || kind > 7)
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
      case SectionKind::kLaunchPlan:
        status = unique(plan_section);
        break;
      case SectionKind::kWeights:
        status = unique(view.weights_section);
        break;
      case SectionKind::kIrText:
        status = unique(view.ir_text_section);
        break;
      case SectionKind::kVulkanPlan:
        status = unique(vulkan_section);
        break;
      case SectionKind::kSpirv:
        status = unique(spirv_section);
        break;
      case SectionKind::kCode:
        break;
    }
    if (!status.ok()) return status;
    view.sections.push_back(std::move(entry));
  }
  if (signature_section < 0) return Bad("no signature section");
  if (plan_section < 0) return Bad("no launch plan section");
  auto section_bytes = [&](int i) {
    return bytes.subspan(view.sections[i].offset, view.sections[i].size);
  };
  const std::string sig_where = absl::StrCat("section ", signature_section, " (signature)");
  KILN_ASSIGN(sig_json, ParseJson(section_bytes(signature_section), sig_where));
  KILN_ASSIGN(signature, ParseSignature(sig_json, sig_where));
  view.signature = std::move(signature);

  const std::string plan_where = absl::StrCat("section ", plan_section, " (launch plan)");
  KILN_ASSIGN(plan_json, ParseJson(section_bytes(plan_section), plan_where));
  const uint64_t weights_size =
      view.weights_section >= 0 ? view.sections[view.weights_section].size : 0;
  KILN_ASSIGN(plan, ParsePlan(plan_json, view.signature, weights_size, plan_where));
  view.num_slots = static_cast<int>(plan.slots.size());
  view.num_steps = static_cast<int>(plan.steps.size());
  const Reader r(plan_where);
  KILN_ASSIGN(targets, r.Array(plan_json, "plan", "targets", kMaxSections));
  for (size_t i = 0; i < targets->size(); ++i) {
    const std::string path = absl::StrCat("targets[", i, "]");
    const json& t = (*targets)[i];
    CodeTarget target;
    KILN_ASSIGN(triple, r.String(t, path, "triple"));
    KILN_ASSIGN(cpu, r.String(t, path, "cpu"));
    KILN_ASSIGN(features, r.String(t, path, "features"));
    KILN_ASSIGN(bits, r.Int(t, path, "vector_bits", 128, 512));
    KILN_ASSIGN(registers, r.Int(t, path, "vector_registers", 8, 64));
    KILN_ASSIGN(fma, r.Bool(t, path, "fma"));
    if (bits != 128 && bits != 256 && bits != 512)
      return r.Error(path, "vector_bits must be 128, 256 or 512");
    target.triple = triple;
    target.cpu = cpu;
    target.features = features;
    target.vector_bits = static_cast<int>(bits);
    target.vector_registers = static_cast<int>(registers);
    target.fma = fma;
    KILN_ASSIGN(kernels, r.Array(t, path, "micro_kernels", 4096));
    for (size_t k = 0; k < kernels->size(); ++k) {
      if (!(*kernels)[k].is_string() || !ValidSymbol((*kernels)[k].get<std::string>())) {
        return r.Error(absl::StrCat(path, ".micro_kernels[", k, "]"), "is not a kernel symbol");
      }
      target.micro_kernels.push_back((*kernels)[k].get<std::string>());
    }
    for (size_t s = 0; s < view.sections.size(); ++s) {
      if (view.sections[s].kind == SectionKind::kCode && view.sections[s].name == triple) {
        target.section = static_cast<int>(s);
      }
    }
    if (target.section < 0) return r.Error(path, "no code section for triple " + triple);
    view.targets.push_back(std::move(target));
  }
  if ((vulkan_section >= 0) != (spirv_section >= 0)) {
    return Bad("a vulkan plan section needs a spirv section and vice versa");
  }
  if (vulkan_section >= 0) {
    const std::string where = absl::StrCat("section ", vulkan_section, " (vulkan plan)");
    KILN_ASSIGN(vulkan_json, ParseJson(section_bytes(vulkan_section), where));
    KILN_ASSIGN(vulkan, ParseVulkanPlan(vulkan_json, view.signature, section_bytes(spirv_section),
                                        weights_size, where));
    auto with_sections = std::make_shared<VulkanPlan>(*vulkan);
    with_sections->plan_section = vulkan_section;
    with_sections->spirv_section = spirv_section;
    view.vulkan = std::move(with_sections);
  }
  view.launch_plan_json.assign(reinterpret_cast<const char*>(section_bytes(plan_section).data()),
                               view.sections[plan_section].size);
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
  absl::StrAppend(&text, "launch plan: ", view.num_slots, " slots, ", view.num_steps, " steps\n");
  for (const CodeTarget& t : view.targets) {
    absl::StrAppend(&text, "target ", t.triple, " cpu ", t.cpu, " (", t.vector_bits,
                    "-bit vectors, ", t.vector_registers, " registers", t.fma ? ", fma" : "",
                    ") in section ", t.section, "\n");
  }
  if (view.vulkan != nullptr) {
    const VulkanPlan& v = *view.vulkan;
    absl::StrAppend(&text, "vulkan plan (section ", v.plan_section, ", SPIR-V in section ",
                    v.spirv_section, "): Vulkan ", v.api_major, ".", v.api_minor, ", features [",
                    absl::StrJoin(v.features, ", "), "], arena offsets aligned to ",
                    v.offset_alignment, ", ", v.slots.size(), " slots, ", v.shaders.size(),
                    " shaders, ", v.dispatches.size(), " dispatches\n");
    for (size_t i = 0; i < v.shaders.size(); ++i) {
      const VulkanPlan::Shader& s = v.shaders[i];
      absl::StrAppend(&text, "  shader ", i, ": ", s.name, " (", s.spirv_words,
                      " SPIR-V words, local size ", s.local_size[0], "x", s.local_size[1], "x",
                      s.local_size[2], ", ", s.num_buffers, " buffers)\n");
    }
  }
  return text;
}

// ---- Model ------------------------------------------------------------------------------------

namespace {

// A code section loaded with dlopen from an anonymous memory file. The file stays open while the
// code is loaded: dlopen knows a library by its path, /proc/self/fd/<fd>, so a number closed and
// handed to the next model's file would make dlopen return this model's code for that one.
struct LoadedCode {
  void* handle = nullptr;
  int fd = -1;
  ~LoadedCode() {
    if (handle != nullptr) dlclose(handle);
    if (fd >= 0) close(fd);
  }
};

class BlobMicroKernels final : public gi::MicroKernelProvider {
 public:
  gi::TargetVectors vectors() const override { return vectors_; }
  absl::StatusOr<gi::MicroKernelFn> Get(base::DType dtype, const gi::KernelShape& shape,
                                        const gi::EpilogueVariant& variant) const override {
    const std::string name = gi::MicroKernelName(dtype, shape, variant);
    auto it = kernels_.find(name);
    if (it == kernels_.end()) {
      return absl::NotFoundError(
          absl::StrCat("blob: the code section has no GEMM micro-kernel ", name));
    }
    return it->second;
  }
  gi::TargetVectors vectors_;
  std::map<std::string, gi::MicroKernelFn> kernels_;
};

bool TripleMatchesHost(const std::string& triple) {
  const std::string arch = HostArchitecture();
  const std::string head = triple.substr(0, triple.find('-'));
  return head == arch || (arch == "aarch64" && head == "arm64");
}

VulkanRunnerFactory& VulkanFactory() {
  static VulkanRunnerFactory factory = nullptr;
  return factory;
}

}  // namespace

void SetVulkanRunnerFactory(VulkanRunnerFactory factory) { VulkanFactory() = factory; }

namespace {

// "" / "cpu" → false; "vulkan" / "vulkan:<selector>" → true and the selector.
absl::StatusOr<bool> ParseDevice(const std::string& device, std::string* selector) {
  if (device.empty() || device == "cpu") return false;
  if (device == "vulkan") return true;
  if (absl::StartsWith(device, "vulkan:")) {
    *selector = device.substr(7);
    return true;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "blob: unknown device \"", device, "\" (expected cpu, vulkan or vulkan:<index|name>)"));
}

}  // namespace

struct Model::Impl {
  LoadOptions options;
  std::string device;
  std::unique_ptr<DeviceRunner> runner;  // set when running on a device other than the CPU
  BlobView view;
  // Keeps the bytes alive: an mmap of the file or an aligned copy.
  std::shared_ptr<const std::byte> bytes;
  size_t size = 0;
  std::shared_ptr<LoadedCode> code;
  std::shared_ptr<BlobMicroKernels> micro;
  std::vector<std::unique_ptr<runtime::cpu::ContractionStep>> contractions;
  std::unique_ptr<Executable> executable;

  absl::Status Load() {
    std::span<const std::byte> all(bytes.get(), size);
    KILN_ASSIGN(parsed, ParseBlob(all));
    view = std::move(parsed);
    std::string selector;
    KILN_ASSIGN(on_vulkan, ParseDevice(options.device, &selector));
    if (on_vulkan) {
      if (view.vulkan == nullptr) {
        return absl::FailedPreconditionError(
            "blob: the blob has no Vulkan section (compile it with `kiln compile --target "
            "vulkan`, aot::CompileOptions::vulkan)");
      }
      if (VulkanFactory() == nullptr) {
        return absl::FailedPreconditionError(
            "blob: this runtime was built without Vulkan (runtime::vulkan::EnableVulkanBlobs)");
      }
      KILN_ASSIGN(made, VulkanFactory()(view, all, bytes, selector));
      runner = std::move(made);
      device = runner->Describe();
      return absl::OkStatus();
    }
    // The code section must suit the CPU as KILN_CPU presents it: under a pinned level a section
    // with features above it is refused exactly as on a machine of that level.
    if (const absl::StatusOr<runtime::cpu::CpuLevel>& level = runtime::cpu::ProcessCpuLevel();
        !level.ok()) {
      return level.status();
    }
    const CodeTarget* target = nullptr;
    for (const CodeTarget& t : view.targets) {
      if (TripleMatchesHost(t.triple) && runtime::cpu::CodeFeaturesAllowed(t.features)) {
        target = &t;
        break;
      }
    }
    if (target == nullptr) {
      std::vector<std::string> triples;
      for (const CodeTarget& t : view.targets) triples.push_back(t.triple + " (" + t.cpu + ")");
      const runtime::cpu::CpuLevel level = *runtime::cpu::ProcessCpuLevel();
      const std::string pinned =
          level == runtime::cpu::CpuLevel::kHost
              ? ""
              : absl::StrCat(" as KILN_CPU=", runtime::cpu::CpuLevelName(level), " presents it");
      return absl::FailedPreconditionError(absl::StrCat(
          "blob: no code for this CPU (", HostArchitecture(), pinned,
          "); the blob has: ", triples.empty() ? "none" : absl::StrJoin(triples, ", ")));
    }
    // The plan again (ParseBlob validated it; this parse cannot fail differently).
    const json plan_json = json::parse(view.launch_plan_json, nullptr, false);
    const uint64_t weights_size =
        view.weights_section >= 0 ? view.sections[view.weights_section].size : 0;
    KILN_ASSIGN(plan, ParsePlan(plan_json, view.signature, weights_size, "launch plan"));
    const std::byte* weights = view.weights_section >= 0
                                   ? all.data() + view.sections[view.weights_section].offset
                                   : nullptr;

    // The code: an anonymous memory file, dlopen'ed through /proc/self/fd (works under
    // qemu-user too, unlike loaders of our own).
    const SectionEntry& section = view.sections[target->section];
    const int fd = memfd_create("kiln-blob-code", MFD_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat("blob: memfd_create: ", strerror(errno)));
    size_t written = 0;
    while (written < section.size) {
      const ssize_t n = write(fd, all.data() + section.offset + written, section.size - written);
      if (n <= 0) {
        close(fd);
        return absl::InternalError(
            absl::StrCat("blob: writing the code to memory: ", strerror(errno)));
      }
      written += static_cast<size_t>(n);
    }
    code = std::make_shared<LoadedCode>();
    code->fd = fd;
    const std::string path = absl::StrCat("/proc/self/fd/", fd);
    code->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (code->handle == nullptr) {
      const char* error = dlerror();
      return absl::InvalidArgumentError(
          absl::StrCat("blob: the code section for ", target->triple,
                       " does not load: ", error != nullptr ? error : "unknown dlopen error"));
    }
    auto resolve = [&](const std::string& symbol) -> absl::StatusOr<void*> {
      void* address = dlsym(code->handle, symbol.c_str());
      if (address == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("blob: the code section for ", target->triple, " has no symbol ", symbol));
      }
      return address;
    };
    micro = std::make_shared<BlobMicroKernels>();
    micro->vectors_ = gi::TargetVectors{target->vector_bits, target->vector_registers, target->fma};
    for (const std::string& name : target->micro_kernels) {
      KILN_ASSIGN(address, resolve(name));
      micro->kernels_[name] = reinterpret_cast<gi::MicroKernelFn>(address);
    }

    ExecutableSpec spec;
    spec.name = view.signature.name;
    spec.num_inputs = static_cast<int>(view.signature.inputs.size());
    spec.num_outputs = static_cast<int>(view.signature.outputs.size());
    for (const PlanSlot& s : plan.slots) {
      Slot slot;
      slot.kind = s.kind;
      slot.size_bytes = s.size;
      slot.index = s.index;
      slot.offset = s.offset;
      if (s.kind == SlotKind::kConstant && !s.descriptor) {
        slot.external = weights + s.weights_offset;
        if (s.size == 0) slot.external = nullptr;
      }
      spec.slots.push_back(std::move(slot));
    }
    for (PlanStep& p : plan.steps) {
      Step step;
      step.slot_args = p.args;
      step.parallel_extent = p.extent;
      step.grain = p.grain;
      step.name = p.name;
      step.error_context = p.error_context;
      switch (p.kind) {
        case PlanStep::kKernel: {
          KILN_ASSIGN(address, resolve(p.symbol));
          step.fn = reinterpret_cast<KernelFn>(address);
          break;
        }
        case PlanStep::kCopy: {
          int64_t count;
          std::memcpy(&count, weights + plan.slots[p.args[2]].weights_offset, 8);
          const int64_t limit = std::min(plan.slots[p.args[0]].size, plan.slots[p.args[1]].size);
          if (count < 0 || count > limit) {
            return absl::InvalidArgumentError(absl::StrCat("blob: launch plan: step ", p.name,
                                                           " copies ", count,
                                                           " bytes between slots of ", limit));
          }
          const int64_t blocks = count / kCopyBlockBytes + (count % kCopyBlockBytes != 0);
          if (p.extent > blocks) {
            return absl::InvalidArgumentError(absl::StrCat("blob: launch plan: step ", p.name,
                                                           " extent ", p.extent, " exceeds ",
                                                           blocks, " copy blocks"));
          }
          step.fn = CopyBytesKernel;
          break;
        }
        case PlanStep::kGemm:
        case PlanStep::kConv: {
          auto c = std::make_unique<runtime::cpu::ContractionStep>(p.contraction);
          c->pool = &DefaultThreadPool();
          c->kernels = micro.get();
          const runtime::cpu::ContractionStep* address = c.get();
          Slot& descriptor = spec.slots[p.args[3]];
          descriptor.constant.resize(sizeof(address));
          std::memcpy(descriptor.constant.data(), &address, sizeof(address));
          contractions.push_back(std::move(c));
          step.fn = runtime::cpu::ContractionKernel;
          break;
        }
      }
      spec.steps.push_back(std::move(step));
    }
    for (size_t i = 0; i < plan.slots.size(); ++i) {
      // A descriptor slot no contraction step uses still needs its 8 bytes.
      if (plan.slots[i].descriptor && spec.slots[i].constant.empty()) {
        spec.slots[i].constant.resize(8);
      }
    }
    spec.keep_alive =
        std::make_shared<std::pair<std::shared_ptr<LoadedCode>, std::shared_ptr<const std::byte>>>(
            code, bytes);
    absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
    if (!exe.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("blob: launch plan: ", exe.status().message()));
    }
    executable = std::make_unique<Executable>(*std::move(exe));
    device = absl::StrCat("cpu (", target->triple, ")");
    return absl::OkStatus();
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

const Signature& Model::signature() const { return impl_->view.signature; }
const BlobView& Model::view() const { return impl_->view; }
const std::string& Model::device() const { return impl_->device; }

absl::Status Model::Run(std::span<const void* const> inputs, std::span<void* const> outputs) const {
  if (impl_->runner != nullptr) return impl_->runner->Run(inputs, outputs);
  return impl_->executable->Run(inputs, outputs, DefaultThreadPool());
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
