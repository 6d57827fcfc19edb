#include "runtime/cpu/blob_cpu.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/dtype.h"
#include "runtime/blob_json.h"
#include "runtime/buffer.h"
#include "runtime/cpu/contraction.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/executable.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime::cpu {

// The launch plan, validated.
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
  ContractionStep contraction;  // kGemm / kConv (pointers unset)
};
struct CpuBlobPlan::Parsed {
  std::string name;
  std::vector<PlanSlot> slots;
  std::vector<PlanStep> steps;
};

namespace {

using blob::BlobView;
using blob::Signature;
using blob::TargetEntry;
using blob::internal::Bad;
using blob::internal::CheckedProduct;
using blob::internal::json;
using blob::internal::Reader;
namespace gi = gemm_internal;

// Every size and count in a blob is far below these; larger values are hostile.
constexpr int64_t kMaxRank = 16;
constexpr int64_t kMaxSlots = 1 << 20;
constexpr int64_t kMaxDimension = int64_t{1} << 40;
constexpr size_t kMaxTargets = 64;

#define KILN_ASSIGN KILN_BLOB_ASSIGN

bool ValidSymbol(const std::string& s) {
  if (!absl::StartsWith(s, "kiln_") || s.size() > 200) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_' || c == '.'; });
}

const char* ActivationName(GemmActivation a) { return GemmActivationName(a); }

absl::StatusOr<GemmActivation> ParseActivation(const std::string& name) {
  for (GemmActivation a : {GemmActivation::kNone, GemmActivation::kRelu, GemmActivation::kGeluTanh,
                           GemmActivation::kSilu, GemmActivation::kSigmoid}) {
    if (name == ActivationName(a)) return a;
  }
  return absl::InvalidArgumentError("unknown activation \"" + name + "\"");
}

// The "int8" object of an int8 contraction's descriptor: its operand dtypes and epilogue (the
// vectors of row / column steps are arguments 4, 5, ... of the step: `vectors` counts them).
struct ParsedInt8 {
  base::DType lhs = base::DType::kU8, rhs = base::DType::kI8;
  Int8Epilogue epilogue;
  std::vector<Int8Operand> vectors;  // the kind of each vector argument, in order
};

absl::StatusOr<ParsedInt8> ParseInt8(const Reader& r, const json& j, const std::string& path) {
  ParsedInt8 parsed;
  for (auto [key, dtype] : {std::pair{"lhs", &parsed.lhs}, {"rhs", &parsed.rhs}}) {
    KILN_ASSIGN(name, r.String(j, path, key));
    std::optional<base::DType> d = base::ParseDType(name);
    if (!d.has_value() || !gi::IsInt8Operand(*d)) {
      return r.Error(absl::StrCat(path, ".", key), "must be u8, i8 or i16");
    }
    *dtype = *d;
  }
  KILN_ASSIGN(output_name, r.String(j, path, "output"));
  std::optional<base::DType> output = base::ParseDType(output_name);
  if (!output.has_value() || !gi::IsInt8Output(*output)) {
    return r.Error(path + ".output", "must be i32, f32, u8 or i8");
  }
  parsed.epilogue.output = *output;
  KILN_ASSIGN(steps, r.Array(j, path, "steps", kMaxInt8EpilogueSteps));
  for (size_t i = 0; i < steps->size(); ++i) {
    const std::string sp = absl::StrCat(path, ".steps[", i, "]");
    const json& step_json = (*steps)[i];
    KILN_ASSIGN(op_name, r.String(step_json, sp, "op"));
    KILN_ASSIGN(operand_name, r.String(step_json, sp, "operand"));
    KILN_ASSIGN(scalar, r.Number(step_json, sp, "scalar"));
    Int8EpilogueStep step;
    bool op_known = false, operand_known = false;
    for (int o = 0; o <= static_cast<int>(Int8EpilogueOp::kRound); ++o) {
      if (op_name == Int8EpilogueOpName(static_cast<Int8EpilogueOp>(o))) {
        step.op = static_cast<Int8EpilogueOp>(o);
        op_known = true;
      }
    }
    for (int o = 0; o <= static_cast<int>(Int8Operand::kColumn); ++o) {
      if (operand_name == Int8OperandName(static_cast<Int8Operand>(o))) {
        step.operand = static_cast<Int8Operand>(o);
        operand_known = true;
      }
    }
    if (!op_known) return r.Error(sp + ".op", "unknown op \"" + op_name + "\"");
    if (!operand_known) return r.Error(sp + ".operand", "unknown operand \"" + operand_name + "\"");
    step.scalar = static_cast<float>(scalar);
    if (step.operand == Int8Operand::kRow || step.operand == Int8Operand::kColumn) {
      parsed.vectors.push_back(step.operand);
      // A stand-in until the run binds the argument: CheckInt8Epilogue wants a vector.
      static const float kBound = 0;
      step.vector = &kBound;
    }
    parsed.epilogue.steps.push_back(step);
  }
  if (absl::Status st = gi::CheckInt8Epilogue("int8", parsed.epilogue); !st.ok()) {
    return r.Error(path, std::string(st.message()));
  }
  return parsed;
}

// The largest element offset + 1 a strided matrix view touches (0 when it touches nothing).
absl::StatusOr<int64_t> ViewExtent(const Reader& r, const json& j, const std::string& path,
                                   int64_t rows, int64_t cols, const std::vector<int64_t>& batch,
                                   MatrixView* view) {
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

absl::StatusOr<CpuBlobPlan::Parsed> ParsePlan(const json& j, const Signature& signature,
                                              uint64_t weights_size, const std::string& where) {
  const Reader r(where);
  CpuBlobPlan::Parsed plan;
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
      if (offset % static_cast<int64_t>(blob::kSectionAlignment) != 0) {
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
    // Every bound slot must hold at least the bytes its argument addresses.
    auto need_bytes = [&](int arg, __int128 bytes, const std::string& what) -> absl::Status {
      if (bytes > slot_of(arg).size) {
        return r.Error(path,
                       absl::StrCat(what, " needs ", static_cast<int64_t>(bytes), " bytes, slot ",
                                    step.args[arg], " has ", slot_of(arg).size));
      }
      return absl::OkStatus();
    };
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
      // The bytes each argument of the generated kernel addresses.
      KILN_ASSIGN(arg_bytes, r.Ints(s, path, "arg_bytes", 4096, 0, int64_t{1} << 50));
      if (arg_bytes.size() != step.args.size()) {
        return r.Error(path + ".arg_bytes", "does not have one entry per argument");
      }
      for (size_t a = 0; a < arg_bytes.size(); ++a) {
        const int arg = static_cast<int>(a);
        if (absl::Status st = need_bytes(arg, arg_bytes[a], absl::StrCat("argument ", a));
            !st.ok()) {
          return st;
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
      if (step.args.size() < 4 || step.args.size() > 4 + kMaxInt8EpilogueSteps) {
        return r.Error(
            path, absl::StrCat("a contraction has 4 to ", 4 + kMaxInt8EpilogueSteps, " arguments"));
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
      // An int8 contraction (u8 / i8 / i16 operands, i32 sums) says so in "int8".
      std::optional<ParsedInt8> int8;
      if (d->contains("int8")) {
        KILN_ASSIGN(int8_json, r.Field(*d, dp, "int8"));
        KILN_ASSIGN(parsed_int8, ParseInt8(r, *int8_json, dp + ".int8"));
        int8 = std::move(parsed_int8);
        if (dtype != base::DType::kI32) {
          return r.Error(dp + ".dtype", "must be i32 for an int8 contraction");
        }
        if (step.args.size() != 4 + int8->vectors.size()) {
          return r.Error(path, "the int8 epilogue's vectors do not match the argument count");
        }
      } else if (!dtype.has_value() || (*dtype != base::DType::kF32 &&
                                        *dtype != base::DType::kF64 && !gi::IsHalf(*dtype))) {
        return r.Error(dp + ".dtype", "must be f32, f64, bf16 or f16");
      }
      const int64_t esize = base::DTypeSize(*dtype);
      KILN_ASSIGN(activation_name, r.String(*d, dp, "activation"));
      absl::StatusOr<GemmActivation> activation = ParseActivation(activation_name);
      if (!activation.ok())
        return r.Error(dp + ".activation", std::string(activation.status().message()));
      KILN_ASSIGN(has_bias, r.Bool(*d, dp, "has_bias"));
      if (int8.has_value() ? (has_bias || *activation != GemmActivation::kNone)
                           : has_bias != (step.args.size() == 5)) {
        return r.Error(path, int8.has_value()
                                 ? "an int8 contraction has its bias and activation as steps"
                                 : "has_bias does not match the argument count");
      }
      ContractionStep& c = step.contraction;
      c.has_bias = has_bias;
      c.is_int8 = int8.has_value();
      // Bytes per element of each argument: operands, output, then bias or vectors.
      auto arg_size = [&](int arg) -> int64_t {
        if (!int8.has_value()) return esize;
        if (arg == 0) return base::DTypeSize(int8->lhs);
        if (arg == 1) return base::DTypeSize(int8->rhs);
        if (arg == 2) return base::DTypeSize(int8->epilogue.output);
        return 4;
      };
      auto need = [&](int arg, int64_t elements, const char* what) {
        return need_bytes(arg, static_cast<__int128>(elements) * arg_size(arg), what);
      };
      // The int8 epilogue's vectors: row ones hold `rows` floats, column ones `cols`.
      auto need_vectors = [&](int64_t rows, int64_t cols) -> absl::Status {
        if (!int8.has_value()) return absl::OkStatus();
        for (size_t v = 0; v < int8->vectors.size(); ++v) {
          const bool row = int8->vectors[v] == Int8Operand::kRow;
          if (absl::Status st = need(static_cast<int>(4 + v), row ? rows : cols,
                                     row ? "a row vector" : "a column vector");
              !st.ok()) {
            return st;
          }
        }
        return absl::OkStatus();
      };
      if (step.kind == PlanStep::kGemm) {
        GemmParams& p = c.gemm;
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
        if (absl::Status st = need_vectors(m, n); !st.ok()) return st;
        if (int8.has_value()) {
          Int8GemmParams& q = c.int8_gemm;
          q.a_dtype = int8->lhs;
          q.b_dtype = int8->rhs;
          q.batch = p.batch;
          q.m = m;
          q.n = n;
          q.k = k;
          q.a = p.a;
          q.b = p.b;
          q.c = p.c;
          q.epilogue = int8->epilogue;
        }
      } else {
        ConvParams& p = c.conv;
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
        absl::StatusOr<Dims> out = ConvOutputShape(p);
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
        if (int8.has_value()) {
          // Row vectors are per output channel; column vectors per output position.
          const int64_t plane = p.weight_shape[0] == 0 || (*out)[0] == 0
                                    ? 0
                                    : *CheckedProduct(*out, 1) / ((*out)[0] * (*out)[1]);
          if (absl::Status st = need_vectors(p.weight_shape[0], plane); !st.ok()) return st;
          Int8ConvParams& q = c.int8_conv;
          q.input_dtype = int8->lhs;
          q.weight_dtype = int8->rhs;
          q.conv = p;
          q.conv.dtype = base::DType::kF32;
          q.epilogue = int8->epilogue;
        }
      }
    } else {
      return r.Error(path + ".kind", "unknown step kind \"" + kind + "\"");
    }
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

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
  absl::StatusOr<gi::Int8MicroKernelFn> GetInt8(
      const gi::KernelShape& shape, const gi::Int8EpilogueVariant& variant) const override {
    const std::string name = gi::Int8MicroKernelName(shape, variant);
    auto it = kernels_.find(name);
    if (it == kernels_.end()) {
      return absl::NotFoundError(
          absl::StrCat("blob: the code section has no int8 GEMM micro-kernel ", name));
    }
    return reinterpret_cast<gi::Int8MicroKernelFn>(it->second);
  }
  gi::TargetVectors vectors_;
  std::map<std::string, gi::MicroKernelFn> kernels_;
};

// An int8 GEMM whose B is a constant of the weights section (a quantized layer's weight) gets it
// packed once, at load, as onnxruntime prepacks constant initializers at session creation.
absl::Status PackConstantInt8B(const PlanSlot& b_slot, const std::byte* weights,
                               const std::string& step_name, ContractionStep& c) {
  if (!c.is_int8 || c.is_conv || b_slot.kind != SlotKind::kConstant || b_slot.descriptor) {
    return absl::OkStatus();
  }
  Int8GemmParams params = c.int8_gemm;
  if (!SameMatrixForEveryBatchEntry(params.b)) return absl::OkStatus();  // a batch of B matrices
  params.b.data = weights + b_slot.weights_offset;
  absl::StatusOr<std::shared_ptr<const PackedInt8B>> packed = PackInt8B(params, *c.kernels);
  if (!packed.ok()) {
    return absl::Status(packed.status().code(), absl::StrCat("blob: launch plan: step ", step_name,
                                                             ": ", packed.status().message()));
  }
  c.int8_gemm.packed_b = *std::move(packed);
  return absl::OkStatus();
}

bool TripleMatchesHost(const std::string& triple) {
  const std::string arch = HostArchitecture();
  const std::string head = triple.substr(0, triple.find('-'));
  return head == arch || (arch == "aarch64" && head == "arm64");
}

// A loaded CPU plan: the Executable over the mapped code, and what its steps point into.
class CpuRunner final : public blob::DeviceRunner {
 public:
  absl::Status Run(std::span<const void* const> inputs,
                   std::span<void* const> outputs) const override {
    return executable->Run(inputs, outputs, DefaultThreadPool());
  }
  std::string Describe() const override { return description; }

  std::shared_ptr<BlobMicroKernels> micro;
  std::vector<std::unique_ptr<ContractionStep>> contractions;
  std::unique_ptr<Executable> executable;
  std::string description;
};

class CpuTargetDriver final : public blob::TargetDriver {
 public:
  absl::StatusOr<std::shared_ptr<const blob::TargetPlan>> Parse(
      const BlobView& view, const TargetEntry& entry,
      std::span<const std::byte> bytes) const override {
    const std::string where = absl::StrCat("section ", entry.plan_section, " (plan \"cpu\")");
    KILN_ASSIGN(plan_json,
                blob::internal::ParseJson(view.SectionBytes(bytes, entry.plan_section), where));
    const uint64_t weights_size = view.Weights(bytes).size();
    auto plan = std::make_shared<CpuBlobPlan>();
    KILN_ASSIGN(parsed, ParsePlan(plan_json, view.signature, weights_size, where));
    plan->num_slots = static_cast<int>(parsed.slots.size());
    plan->num_steps = static_cast<int>(parsed.steps.size());
    plan->parsed = std::make_shared<const CpuBlobPlan::Parsed>(std::move(parsed));
    const Reader r(where);
    KILN_ASSIGN(targets, r.Array(plan_json, "plan", "targets", kMaxTargets));
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
      if (t.is_object() && t.contains("vnni")) {  // absent before the vpdpbusd kernels
        KILN_ASSIGN(vnni, r.Bool(t, path, "vnni"));
        target.vnni = vnni;
      }
      if (t.is_object() && t.contains("amx")) {  // absent before the AMX kernels
        KILN_ASSIGN(amx, r.Bool(t, path, "amx"));
        target.amx = amx;
      }
      KILN_ASSIGN(kernels, r.Array(t, path, "micro_kernels", 4096));
      for (size_t k = 0; k < kernels->size(); ++k) {
        if (!(*kernels)[k].is_string() || !ValidSymbol((*kernels)[k].get<std::string>())) {
          return r.Error(absl::StrCat(path, ".micro_kernels[", k, "]"), "is not a kernel symbol");
        }
        target.micro_kernels.push_back((*kernels)[k].get<std::string>());
      }
      // The payload's name: "payload" (several targets of one triple), or "cpu:<triple>" (blobs
      // with one target per triple, written before "payload" existed).
      std::string payload = absl::StrCat("cpu:", triple);
      if (t.is_object() && t.contains("payload")) {
        KILN_ASSIGN(name, r.String(t, path, "payload"));
        if (!absl::StartsWith(name, "cpu:")) {
          return r.Error(path + ".payload", "\"" + name + "\" does not start with \"cpu:\"");
        }
        payload = name;
      }
      for (int s : entry.payload_sections) {
        if (view.sections[static_cast<size_t>(s)].name == payload) target.section = s;
      }
      if (target.section < 0) return r.Error(path, "no payload section " + payload);
      for (const CodeTarget& other : plan->code) {
        if (other.section == target.section) {
          return r.Error(path, "payload section " + payload + " is another target's too");
        }
      }
      plan->code.push_back(std::move(target));
    }
    for (int s : entry.payload_sections) {
      const bool used = std::any_of(plan->code.begin(), plan->code.end(),
                                    [&](const CodeTarget& t) { return t.section == s; });
      if (!used) {
        return Bad("section ", s, " (payload \"", view.sections[static_cast<size_t>(s)].name,
                   "\"): no code target of the cpu plan names it");
      }
    }
    return std::shared_ptr<const blob::TargetPlan>(std::move(plan));
  }

  absl::StatusOr<std::unique_ptr<blob::DeviceRunner>> Load(
      const BlobView& view, const TargetEntry& entry, std::span<const std::byte> all,
      std::shared_ptr<const void> keep, const std::string& selector) const override {
    if (!selector.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("blob: unknown device \"cpu:", selector,
                                                     "\" (the CPU target has one device: cpu)"));
    }
    const CpuBlobPlan& plan = static_cast<const CpuBlobPlan&>(*entry.plan);
    auto runner = std::make_unique<CpuRunner>();
    // The code section must suit the CPU as KILN_CPU presents it: under a pinned level a section
    // with features above it is refused exactly as on a machine of that level.
    if (const absl::StatusOr<CpuLevel>& level = ProcessCpuLevel(); !level.ok()) {
      return level.status();
    }
    const CodeTarget* target = nullptr;
    for (const CodeTarget& t : plan.code) {
      if (TripleMatchesHost(t.triple) && CodeFeaturesAllowed(t.features)) {
        target = &t;
        break;
      }
    }
    if (target == nullptr) {
      std::vector<std::string> triples;
      for (const CodeTarget& t : plan.code) triples.push_back(t.triple + " (" + t.cpu + ")");
      const CpuLevel level = *ProcessCpuLevel();
      const std::string pinned =
          level == CpuLevel::kHost
              ? ""
              : absl::StrCat(" as KILN_CPU=", CpuLevelName(level), " presents it");
      return absl::FailedPreconditionError(absl::StrCat(
          "blob: no code for this CPU (", HostArchitecture(), pinned,
          "); the blob has: ", triples.empty() ? "none" : absl::StrJoin(triples, ", ")));
    }
    const CpuBlobPlan::Parsed& parsed = *plan.parsed;
    const std::byte* weights = view.weights_section >= 0 ? view.Weights(all).data() : nullptr;

    // The code: an anonymous memory file, dlopen'ed through /proc/self/fd (works under
    // qemu-user too, unlike loaders of our own).
    const blob::SectionEntry& section = view.sections[static_cast<size_t>(target->section)];
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
    auto code = std::make_shared<LoadedCode>();
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
    auto micro = std::make_shared<BlobMicroKernels>();
    // AMX code runs only once Linux grants the tile state; without it the driver takes the
    // section's other int8 kernels, which aot::Compile records as well.
    micro->vectors_ = gi::TargetVectors{target->vector_bits, target->vector_registers, target->fma,
                                        target->vnni, target->amx && RequestAmxTileData()};
    for (const std::string& name : target->micro_kernels) {
      KILN_ASSIGN(address, resolve(name));
      micro->kernels_[name] = reinterpret_cast<gi::MicroKernelFn>(address);
    }

    ExecutableSpec spec;
    spec.name = view.signature.name;
    spec.num_inputs = static_cast<int>(view.signature.inputs.size());
    spec.num_outputs = static_cast<int>(view.signature.outputs.size());
    for (const PlanSlot& s : parsed.slots) {
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
    for (const PlanStep& p : parsed.steps) {
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
          std::memcpy(&count, weights + parsed.slots[p.args[2]].weights_offset, 8);
          const int64_t limit =
              std::min(parsed.slots[p.args[0]].size, parsed.slots[p.args[1]].size);
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
          auto c = std::make_unique<ContractionStep>(p.contraction);
          c->pool = &DefaultThreadPool();
          c->kernels = micro.get();
          if (absl::Status s = PackConstantInt8B(parsed.slots[p.args[1]], weights, p.name, *c);
              !s.ok()) {
            return s;
          }
          const ContractionStep* address = c.get();
          Slot& descriptor = spec.slots[p.args[3]];
          descriptor.constant.resize(sizeof(address));
          std::memcpy(descriptor.constant.data(), &address, sizeof(address));
          runner->contractions.push_back(std::move(c));
          step.fn = ContractionKernel;
          break;
        }
      }
      spec.steps.push_back(std::move(step));
    }
    for (size_t i = 0; i < parsed.slots.size(); ++i) {
      // A descriptor slot no contraction step uses still needs its 8 bytes.
      if (parsed.slots[i].descriptor && spec.slots[i].constant.empty()) {
        spec.slots[i].constant.resize(8);
      }
    }
    spec.keep_alive =
        std::make_shared<std::pair<std::shared_ptr<LoadedCode>, std::shared_ptr<const void>>>(
            code, std::move(keep));
    absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
    if (!exe.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("blob: launch plan: ", exe.status().message()));
    }
    runner->executable = std::make_unique<Executable>(*std::move(exe));
    runner->micro = std::move(micro);
    runner->description = absl::StrCat("cpu (", target->triple, ", ", target->cpu, ")");
    return std::unique_ptr<blob::DeviceRunner>(std::move(runner));
  }

  std::string HowToCompile() const override {
    return "compile it with `kiln compile` (aot::Compile)";
  }
};

}  // namespace

std::string CpuBlobPlan::Describe() const {
  std::string text =
      absl::StrCat("cpu launch plan: ", num_slots, " slots, ", num_steps, " steps\n");
  for (const CodeTarget& t : code) {
    absl::StrAppend(&text, "target ", t.triple, " cpu ", t.cpu, " (", t.vector_bits,
                    "-bit vectors, ", t.vector_registers, " registers", t.fma ? ", fma" : "",
                    t.vnni ? ", vnni" : "", t.amx ? ", amx" : "", ") in section ", t.section, "\n");
  }
  return text;
}

std::shared_ptr<const blob::TargetDriver> MakeCpuTargetDriver() {
  return std::make_shared<const CpuTargetDriver>();
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

}  // namespace kiln::runtime::cpu
