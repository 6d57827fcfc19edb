#include "codegen/cuda/cuda_c.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/c_render.h"
#include "codegen/math_expand.h"
#include "ir/dtype.h"

namespace kiln::codegen::cuda {
namespace {

// The element type of an arg's pointer.
const char* ElementType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return "float";
    case ir::DType::kF64:
      return "double";
    case ir::DType::kI32:
      return "int";
    case ir::DType::kI64:
      return "int64_t";
    case ir::DType::kU8:
    case ir::DType::kBool:
      return "uint8_t";
    case ir::DType::kI8:
      return "int8_t";
    case ir::DType::kI16:
      return "int16_t";
    case ir::DType::kF16:
    case ir::DType::kBF16:
    case ir::DType::kU16:
      return "uint16_t";
    case ir::DType::kU32:
      return "uint32_t";
    case ir::DType::kU64:
      return "uint64_t";
  }
  return "uint32_t";
}

class CudaDialect : public CDialect {
 public:
  explicit CudaDialect(const CudaTarget& target) : target_(target) {}

  std::string Name() const override { return "CUDA C"; }

  // One-token names (the prelude's typedefs), so the renderer's functional casts `T(x)` parse.
  std::string TypeName(ScalarType type) const override {
    switch (type) {
      case ScalarType::kBool:
        return "bool";
      case ScalarType::kU8:
      case ScalarType::kU16:
      case ScalarType::kU32:
        return "uint32_t";
      case ScalarType::kI8:
      case ScalarType::kI16:
      case ScalarType::kI32:
        return "int";
      case ScalarType::kI64:
        return "int64_t";
      case ScalarType::kU64:
        return "uint64_t";
      case ScalarType::kF32:
        return "float";
      case ScalarType::kF64:
        return "double";
    }
    return "uint32_t";
  }

  std::string FunctionPrefix() const override { return "__device__ inline "; }

  std::string FloatLiteral(ScalarType type, double value) const override {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), type == ScalarType::kF32 ? "%.9g" : "%.17g", value);
    std::string text = buffer;
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    return type == ScalarType::kF32 ? text + "f" : text;
  }

  std::string IntLiteral(ScalarType type, int64_t value) const override {
    switch (type) {
      case ScalarType::kU8:
      case ScalarType::kU16:
      case ScalarType::kU32:
        return absl::StrCat(static_cast<uint32_t>(value), "u");
      case ScalarType::kI8:
      case ScalarType::kI16:
      case ScalarType::kI32:
        if (value == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
        return value < 0 ? absl::StrCat("(", value, ")") : absl::StrCat(value);
      case ScalarType::kI64:
        if (value == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807ll - 1ll)";
        return value < 0 ? absl::StrCat("(", value, "ll)") : absl::StrCat(value, "ll");
      case ScalarType::kU64:
        return absl::StrCat(static_cast<uint64_t>(value), "ull");
      default:
        return absl::StrCat(value);
    }
  }

  std::string Bitcast(ScalarType from, ScalarType to, const std::string& x) const override {
    if (from == ScalarType::kF32) {
      return absl::StrCat(to == ScalarType::kI32 ? "__float_as_int(" : "__float_as_uint(", x, ")");
    }
    if (from == ScalarType::kF64) {
      return absl::StrCat(to == ScalarType::kI64 ? "int64_t(" : "uint64_t(",
                          "__double_as_longlong(", x, "))");
    }
    if (to == ScalarType::kF32) {
      return absl::StrCat(from == ScalarType::kI32 ? "__int_as_float(" : "__uint_as_float(", x,
                          ")");
    }
    return absl::StrCat("__longlong_as_double((long long)(", x, "))");
  }

  std::string SignedArith(const std::string& op, ScalarType type, const std::string& a,
                          const std::string& b) const override {
    const std::string u = type == ScalarType::kI64 ? "uint64_t" : "uint32_t";
    return absl::StrCat(TypeName(type), "(", u, "(", a, ") ", op, " ", u, "(", b, "))");
  }

  std::string MathCall(ExprOp op, ScalarType type, const std::string& x) const override {
    const bool f64 = type == ScalarType::kF64;
    const char* name = nullptr;
    switch (op) {
      case ExprOp::kSqrt:
        name = f64 ? "sqrt" : "sqrtf";
        break;
      case ExprOp::kFloor:
        name = f64 ? "floor" : "floorf";
        break;
      case ExprOp::kCeil:
        name = f64 ? "ceil" : "ceilf";
        break;
      case ExprOp::kRound:  // rint rounds ties to even in the default rounding mode
        name = f64 ? "rint" : "rintf";
        break;
      case ExprOp::kTrunc:
        name = f64 ? "trunc" : "truncf";
        break;
      case ExprOp::kExp:
        name = f64 ? "exp" : "expf";
        break;
      case ExprOp::kLog:
        name = f64 ? "log" : "logf";
        break;
      case ExprOp::kSin:
        name = f64 ? "sin" : "sinf";
        break;
      case ExprOp::kCos:
        name = f64 ? "cos" : "cosf";
        break;
      case ExprOp::kTanh:
        name = f64 ? "tanh" : "tanhf";
        break;
      case ExprOp::kErf:
        name = f64 ? "erf" : "erff";
        break;
      default:
        break;
    }
    if (name == nullptr) return "";
    return absl::StrCat(name, "(", x, ")");
  }

  std::string PowCall(ScalarType type, const std::string& a, const std::string& b) const override {
    return absl::StrCat(type == ScalarType::kF64 ? "pow(" : "powf(", a, ", ", b, ")");
  }

  bool HasFloat64() const override { return true; }

  std::string Load(const Kernel& kernel, ArgId arg, const std::string& index) const override {
    const ir::DType dtype = kernel.args[static_cast<size_t>(arg)].dtype;
    const std::string element = absl::StrCat("a", arg, "[", index, "]");
    switch (dtype) {
      case ir::DType::kU8:
      case ir::DType::kU16:
        return absl::StrCat("uint32_t(", element, ")");
      case ir::DType::kI8:
      case ir::DType::kI16:
        return absl::StrCat("int(", element, ")");
      case ir::DType::kBool:
        return absl::StrCat("(", element, " != 0)");
      case ir::DType::kF16:
        return absl::StrCat("kiln_f16_to_f32(uint32_t(", element, "))");
      case ir::DType::kBF16:
        return absl::StrCat("kiln_bf16_to_f32(uint32_t(", element, "))");
      default:
        return element;
    }
  }

  std::string Store(const Kernel& kernel, ArgId arg, const std::string& index,
                    const std::string& value) const override {
    const ir::DType dtype = kernel.args[static_cast<size_t>(arg)].dtype;
    const std::string element = absl::StrCat("a", arg, "[", index, "]");
    switch (dtype) {
      case ir::DType::kU8:
      case ir::DType::kI8:
      case ir::DType::kU16:
      case ir::DType::kI16:
        return absl::StrCat(element, " = ", ElementType(dtype), "(", value, ");");
      case ir::DType::kBool:
        return absl::StrCat(element, " = uint8_t(", value, " ? 1u : 0u);");
      case ir::DType::kF16:
        return absl::StrCat(element, " = uint16_t(kiln_f32_to_f16(", value, "));");
      case ir::DType::kBF16:
        return absl::StrCat(element, " = uint16_t(kiln_f32_to_bf16(", value, "));");
      default:
        return absl::StrCat(element, " = ", value, ";");
    }
  }

  std::string Barrier() const override { return "__syncthreads();"; }

  std::string SharedArray(ScalarType type, const std::string& name, int size) const override {
    return absl::StrCat("__shared__ ", TypeName(type), " ", name, "[", size, "];");
  }

  // The prelude's kiln_warp_* over __shfl_xor_sync, which moves 32- and 64-bit integers and
  // floats (not bool: the renderer keeps the shared-memory tree for it).
  std::string SubgroupReduce(ReduceKind kind, ScalarType type,
                             const std::string& x) const override {
    if (!target_.warp_shuffles || type == ScalarType::kBool) return "";
    switch (kind) {
      case ReduceKind::kSum:
        return absl::StrCat("kiln_warp_sum(", x, ")");
      case ReduceKind::kProd:
        return absl::StrCat("kiln_warp_prod(", x, ")");
      case ReduceKind::kMax:
        return absl::StrCat("kiln_warp_max(", x, ")");
      case ReduceKind::kMin:
        return absl::StrCat("kiln_warp_min(", x, ")");
      default:
        return "";
    }
  }
  std::string SubgroupId() const override {
    return target_.warp_shuffles ? "uint32_t(threadIdx.x >> 5)" : "";
  }
  std::string NumSubgroups() const override {
    return target_.warp_shuffles ? "uint32_t(blockDim.x >> 5)" : "";
  }
  std::string SubgroupElect() const override {
    return target_.warp_shuffles ? "((threadIdx.x & 31u) == 0u)" : "";
  }

 private:
  CudaTarget target_;
};

// NVRTC ships no standard headers: the fixed-width names the dialect uses, and GLSL's frexp with
// an out-parameter that the shared renderer writes.
constexpr char kPrelude[] = R"cuda(typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef signed char int8_t;
__device__ inline float frexp(float x, int& e) { return frexpf(x, &e); }
__device__ inline double frexp(double x, int& e) { return ::frexp(x, &e); }
)cuda";

// The warp combines of cooperative reductions. Max and min are plain comparisons: the renderer
// passes NaNs separately (as bit patterns) where they must propagate.
constexpr char kWarpHelpers[] =
    R"cuda(template <typename T> __device__ inline T kiln_warp_sum(T x) {
  for (int o = 16; o > 0; o >>= 1) x = x + __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <typename T> __device__ inline T kiln_warp_prod(T x) {
  for (int o = 16; o > 0; o >>= 1) x = x * __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <typename T> __device__ inline T kiln_warp_max(T x) {
  for (int o = 16; o > 0; o >>= 1) { T y = __shfl_xor_sync(0xffffffffu, x, o); x = y > x ? y : x; }
  return x;
}
template <typename T> __device__ inline T kiln_warp_min(T x) {
  for (int o = 16; o > 0; o >>= 1) { T y = __shfl_xor_sync(0xffffffffu, x, o); x = y < x ? y : x; }
  return x;
}
)cuda";

}  // namespace

const std::string& CudaPrelude() {
  static const std::string* const prelude = new std::string(kPrelude);
  return *prelude;
}

absl::StatusOr<CudaKernel> KernelToCuda(const Kernel& original, const CudaTarget& target) {
  const Kernel kernel = ExpandMath(original);
  if (target.block_size < 32 || (target.block_size & (target.block_size - 1)) != 0 ||
      target.block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("cuda: kernel ", kernel.name, ": block size ",
                                                   target.block_size,
                                                   " is not a power of two in [32, 1024]"));
  }
  CudaKernel out;
  out.cooperative = PreferCooperative(kernel);
  out.block_size = target.block_size;
  CudaDialect dialect(target);
  RenderOptions options;
  options.cooperative = out.cooperative;
  options.workgroup_size = out.block_size;
  options.subgroups = target.warp_shuffles;
  absl::StatusOr<RenderedKernel> rendered = RenderKernel(kernel, dialect, options);
  if (!rendered.ok()) return rendered.status();

  const int64_t blocks = out.cooperative
                             ? kernel.parallel_extent
                             : (kernel.parallel_extent + out.block_size - 1) / out.block_size;
  const int64_t x = std::min<int64_t>(std::max<int64_t>(blocks, 1), target.max_grid_x);
  const int64_t y = (blocks + x - 1) / x;
  if (y > target.max_grid_y) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda: kernel ", kernel.name, ": ", kernel.parallel_extent,
                     " parallel iterations exceed the device's grid limits"));
  }
  out.grid = {static_cast<uint32_t>(blocks == 0 ? 0 : x),
              static_cast<uint32_t>(blocks == 0 ? 0 : y), 1};

  std::string& s = out.source;
  std::string name = kernel.name;
  for (char& c : name) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  absl::StrAppend(&s, "// kiln kernel ", name, "\n", CudaPrelude());
  if (rendered->uses_subgroups) absl::StrAppend(&s, kWarpHelpers);
  absl::StrAppend(&s, rendered->shared_decls);
  bool has16 = false;
  for (const KernelArg& arg : kernel.args) {
    has16 = has16 || arg.dtype == ir::DType::kF16 || arg.dtype == ir::DType::kBF16;
  }
  if (has16 && rendered->helpers.find("kiln_f16_to_f32(") == std::string::npos) {
    absl::StrAppend(&s, HalfHelpers(dialect));
  }
  absl::StrAppend(&s, rendered->helpers);
  absl::StrAppend(&s, "extern \"C\" __global__ void __launch_bounds__(", out.block_size, ") ",
                  out.entry, "(");
  for (size_t i = 0; i < kernel.args.size(); ++i) {
    const KernelArg& arg = kernel.args[i];
    absl::StrAppend(&s, i == 0 ? "" : ", ", arg.role == ArgRole::kInput ? "const " : "",
                    ElementType(arg.dtype), "* a", i);
  }
  absl::StrAppend(&s, ") {\n");
  for (size_t i = 0; i < kernel.args.size(); ++i) {
    const KernelArg& arg = kernel.args[i];
    std::string comment = arg.name;
    for (char& c : comment) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    absl::StrAppend(&s, "  // a", i, ": ", ArgRoleName(arg.role), " ", ir::DTypeName(arg.dtype),
                    "[", arg.num_elements, "] ", comment, "\n");
  }
  const std::string block = "(int64_t(blockIdx.y) * int64_t(gridDim.x) + int64_t(blockIdx.x))";
  if (out.cooperative) {
    absl::StrAppend(&s, "  int64_t gid = ", block, ";\n",
                    "  int64_t lid = int64_t(threadIdx.x);\n");
  } else {
    absl::StrAppend(&s, "  int64_t gid = ", block, " * ", out.block_size,
                    "ll + int64_t(threadIdx.x);\n");
  }
  // A whole block leaves together in cooperative kernels (gid is uniform there).
  absl::StrAppend(&s, "  if (gid < ", kernel.parallel_extent, "ll) {\n", rendered->body,
                  "  }\n}\n");
  return out;
}

}  // namespace kiln::codegen::cuda
