#include "codegen/vulkan/glsl.h"

#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/c_render.h"
#include "codegen/math_expand.h"
#include "ir/dtype.h"

namespace kiln::codegen::vulkan {
namespace {

// The element type of an arg's storage buffer.
const char* BufferElement(ir::DType dtype) {
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
      return "uint";
    case ir::DType::kU64:
      return "uint64_t";
  }
  return "uint";
}

class GlslDialect : public CDialect {
 public:
  explicit GlslDialect(const GlslTarget& target) : target_(target) {}

  std::string Name() const override { return "GLSL"; }

  std::string TypeName(ScalarType type) const override {
    switch (type) {
      case ScalarType::kBool:
        return "bool";
      case ScalarType::kU8:
      case ScalarType::kU16:
      case ScalarType::kU32:
        return "uint";
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
    return "uint";
  }

  std::string FloatLiteral(ScalarType type, double value) const override {
    char buffer[64];
    if (type == ScalarType::kF32) {
      std::snprintf(buffer, sizeof(buffer), "%.9g", value);
    } else {
      std::snprintf(buffer, sizeof(buffer), "%.17g", value);
    }
    std::string text = buffer;
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    return text + (type == ScalarType::kF32 ? "f" : "lf");
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
        if (value == std::numeric_limits<int32_t>::min()) return "int(0x80000000u)";
        return value < 0 ? absl::StrCat("(", value, ")") : absl::StrCat(value);
      case ScalarType::kI64:
        if (value == std::numeric_limits<int64_t>::min()) return "int64_t(0x8000000000000000ul)";
        return value < 0 ? absl::StrCat("(", value, "l)") : absl::StrCat(value, "l");
      case ScalarType::kU64:
        return absl::StrCat(static_cast<uint64_t>(value), "ul");
      default:
        return absl::StrCat(value);
    }
  }

  std::string Bitcast(ScalarType from, ScalarType to, const std::string& x) const override {
    if (from == ScalarType::kF32) {
      return absl::StrCat(to == ScalarType::kI32 ? "floatBitsToInt(" : "floatBitsToUint(", x, ")");
    }
    if (from == ScalarType::kF64) {
      return absl::StrCat(to == ScalarType::kI64 ? "doubleBitsToInt64(" : "doubleBitsToUint64(", x,
                          ")");
    }
    if (to == ScalarType::kF32) {
      return absl::StrCat(from == ScalarType::kI32 ? "intBitsToFloat(" : "uintBitsToFloat(", x,
                          ")");
    }
    return absl::StrCat(from == ScalarType::kI64 ? "int64BitsToDouble(" : "uint64BitsToDouble(", x,
                        ")");
  }

  std::string SignExtend32(ScalarType to, const std::string& x) const override {
    const std::string wide = absl::StrCat("int64_t(uint(", x, "))");
    return Convert(to, absl::StrCat("(", wide, " - ((", wide, " & 2147483648l) << 1))"));
  }

  std::string MathCall(ExprOp op, ScalarType type, const std::string& x) const override {
    const bool f64 = type == ScalarType::kF64;
    const char* name = nullptr;
    switch (op) {
      case ExprOp::kSqrt:
        name = "sqrt";
        break;
      case ExprOp::kFloor:
        name = "floor";
        break;
      case ExprOp::kCeil:
        name = "ceil";
        break;
      case ExprOp::kRound:
        // lavapipe's f64 roundEven is wrong on hosts without AVX-512 (see kF64MathHelpers).
        name = f64 ? "kiln_round_even_f64" : "roundEven";
        break;
      case ExprOp::kTrunc:
        name = "trunc";
        break;
      // GLSL has these for float only (ExpandMath replaces f32 exp/log/tanh/erf before this).
      // f64: GLSL has none; kiln_*_f64 are defined by F64MathHelpers below.
      case ExprOp::kExp:
        name = f64 ? "kiln_exp_f64" : "exp";
        break;
      case ExprOp::kLog:
        name = f64 ? "kiln_log_f64" : "log";
        break;
      case ExprOp::kSin:
        name = f64 ? "kiln_sin_f64" : "sin";
        break;
      case ExprOp::kCos:
        name = f64 ? "kiln_cos_f64" : "cos";
        break;
      case ExprOp::kTanh:
        name = f64 ? "kiln_tanh_f64" : "tanh";
        break;
      case ExprOp::kErf:
        name = f64 ? "kiln_erf_f64" : nullptr;
        break;
      default:
        break;
    }
    if (name == nullptr) return "";
    return absl::StrCat(name, "(", x, ")");
  }

  std::string PowCall(ScalarType type, const std::string& a, const std::string& b) const override {
    if (type == ScalarType::kF64) return absl::StrCat("kiln_powpos_f64(", a, ", ", b, ")");
    return absl::StrCat("pow(", a, ", ", b, ")");
  }

  bool HasFloat64() const override { return target_.float64; }

  std::string Load(const Kernel& kernel, ArgId arg, const std::string& index) const override {
    const ir::DType dtype = kernel.args[static_cast<size_t>(arg)].dtype;
    const std::string element = absl::StrCat("a", arg, ".d[uint(", index, ")]");
    switch (dtype) {
      case ir::DType::kU8:
      case ir::DType::kU16:
        return absl::StrCat("uint(", element, ")");
      case ir::DType::kI8:
      case ir::DType::kI16:
        return absl::StrCat("int(", element, ")");
      case ir::DType::kBool:
        return absl::StrCat("(uint(", element, ") != 0u)");
      case ir::DType::kF16:
        return absl::StrCat("kiln_f16_to_f32(uint(", element, "))");
      case ir::DType::kBF16:
        return absl::StrCat("kiln_bf16_to_f32(uint(", element, "))");
      default:
        return element;
    }
  }

  std::string Store(const Kernel& kernel, ArgId arg, const std::string& index,
                    const std::string& value) const override {
    const ir::DType dtype = kernel.args[static_cast<size_t>(arg)].dtype;
    const std::string element = absl::StrCat("a", arg, ".d[uint(", index, ")]");
    switch (dtype) {
      case ir::DType::kU8:
      case ir::DType::kI8:
      case ir::DType::kU16:
      case ir::DType::kI16:
        return absl::StrCat(element, " = ", BufferElement(dtype), "(", value, ");");
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

  std::string Barrier() const override { return "barrier();"; }

  std::string SharedArray(ScalarType type, const std::string& name, int size) const override {
    return absl::StrCat("shared ", TypeName(type), " ", name, "[", size, "];");
  }

  // GL_KHR_shader_subgroup_arithmetic on 32-bit types and f64 sums/products (64-bit integers
  // would need GL_EXT_shader_subgroup_extended_types_int64; bool has no add/mul: both keep the
  // workgroup-memory tree). Only offered when the device reports subgroup arithmetic in compute.
  std::string SubgroupReduce(ReduceKind kind, ScalarType type,
                             const std::string& x) const override {
    if (!target_.subgroup_arithmetic) return "";
    const bool ok = type == ScalarType::kF32 || type == ScalarType::kI32 ||
                    type == ScalarType::kU32 || type == ScalarType::kU8 ||
                    type == ScalarType::kU16 || type == ScalarType::kI8 ||
                    type == ScalarType::kI16 ||
                    (type == ScalarType::kF64 && target_.float64 &&
                     (kind == ReduceKind::kSum || kind == ReduceKind::kProd));
    if (!ok) return "";
    switch (kind) {
      case ReduceKind::kSum:
        return absl::StrCat("subgroupAdd(", x, ")");
      case ReduceKind::kProd:
        return absl::StrCat("subgroupMul(", x, ")");
      case ReduceKind::kMax:
        return absl::StrCat("subgroupMax(", x, ")");
      case ReduceKind::kMin:
        return absl::StrCat("subgroupMin(", x, ")");
      default:
        return "";
    }
  }
  std::string SubgroupId() const override {
    return target_.subgroup_arithmetic ? "gl_SubgroupID" : "";
  }
  std::string NumSubgroups() const override {
    return target_.subgroup_arithmetic ? "gl_NumSubgroups" : "";
  }
  std::string SubgroupElect() const override {
    return target_.subgroup_arithmetic ? "subgroupElect()" : "";
  }

 private:
  GlslTarget target_;
};

// f64 exp, log, sin, cos, tanh, erf and pow: GLSL has no double versions. Argument reduction
// (Cody-Waite, with fdlibm's split constants) and Taylor polynomials to below 2^-60 of the leading
// term on the reduced range: about 1 ulp, not libm's correctly rounded-in-practice results. sin/cos
// reduce with three parts of pi/2, exact for |x| < 2^20 (random_normal's Box-Muller angle is < 2
// pi).
//
// kiln_round_even_f64 replaces GLSL's roundEven for doubles: Mesa 22.3's lavapipe rounds some f64
// ties away from even when the host has no AVX-512 (roundEven(-3.5) = -3 on AVX2 and SSE4.1
// hosts, GALLIUM_OVERRIDE_CPU_CAPS=avx / sse4.1 here). It works on the bits with integer
// arithmetic only, so it is exact for every input: |x| >= 2^52, inf and NaN come back unchanged,
// |x| < 0.5 gives a zero of x's sign, and otherwise the fraction bits below the unit are dropped,
// adding one unit above the tie and at the tie when the integer part is odd (a carry into the
// exponent is the next power of two, as it should be).
const char* kF64MathHelpers = R"glsl(
double kiln_round_even_f64(double x) {
  uint64_t bits = doubleBitsToUint64(x);
  int e = int((bits >> 52) & 0x7fful);
  if (e >= 1075) return x;
  uint64_t sign = bits & 0x8000000000000000ul;
  if (e < 1022) return uint64BitsToDouble(sign);
  if (e == 1022) {
    return uint64BitsToDouble(sign | ((bits & 0xffffffffffffful) != 0ul ? 0x3ff0000000000000ul : 0ul));
  }
  uint64_t unit = 1ul << uint(1075 - e);
  uint64_t frac = bits & (unit - 1ul);
  uint64_t tie = unit >> 1;
  uint64_t base = bits - frac;
  if (frac > tie || (frac == tie && (base & unit) != 0ul)) base = base + unit;
  return uint64BitsToDouble(base);
}
double kiln_exp_f64(double x) {
  if (isnan(x)) return x;
  if (x > 709.782712893384lf) return uint64BitsToDouble(0x7ff0000000000000ul);
  if (x < -745.1332191019412lf) return 0.0lf;
  double n = kiln_round_even_f64(x * 1.4426950408889634lf);
  double r = fma(-n, 6.93147180369123816490e-01lf, x);
  r = fma(-n, 1.90821492927058770002e-10lf, r);
  double p = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(1.1470745597729725e-11lf, r, 1.6059043836821613e-10lf), r, 2.08767569878681e-09lf), r, 2.505210838544172e-08lf), r, 2.755731922398589e-07lf), r, 2.7557319223985893e-06lf), r, 2.48015873015873e-05lf), r, 0.0001984126984126984lf), r, 0.001388888888888889lf), r, 0.008333333333333333lf), r, 0.041666666666666664lf), r, 0.16666666666666666lf), r, 0.5lf), r, 1.0lf), r, 1.0lf);
  int k = int(n);
  if (k > 1000) return ldexp(ldexp(p, k - 1000), 1000);
  if (k < -1000) return ldexp(ldexp(p, k + 1000), -1000);
  return ldexp(p, k);
}
double kiln_log_f64(double x) {
  if (isnan(x)) return x;
  if (x < 0.0lf) return uint64BitsToDouble(0x7ff8000000000000ul);
  if (x == 0.0lf) return uint64BitsToDouble(0xfff0000000000000ul);
  if (isinf(x)) return x;
  int e;
  double m = frexp(x, e);
  if (m < 0.70710678118654752440lf) { m = m * 2.0lf; e = e - 1; }
  double f = m - 1.0lf;
  double s = f / (2.0lf + f);
  double z = s * s;
  double q = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(0.04lf, z, 0.043478260869565216lf), z, 0.047619047619047616lf), z, 0.05263157894736842lf), z, 0.058823529411764705lf), z, 0.06666666666666667lf), z, 0.07692307692307693lf), z, 0.09090909090909091lf), z, 0.1111111111111111lf), z, 0.14285714285714285lf), z, 0.2lf), z, 0.3333333333333333lf);
  double hf = 0.5lf * f * f;
  double r = f - (hf - s * (hf + 2.0lf * z * q));
  double de = double(e);
  return fma(de, 6.93147180369123816490e-01lf, fma(de, 1.90821492927058770002e-10lf, r));
}
double kiln_sin_poly(double r) { double z = r * r; return r * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-3.868170170630684e-23lf, z, 1.9572941063391263e-20lf), z, -8.22063524662433e-18lf), z, 2.8114572543455206e-15lf), z, -7.647163731819816e-13lf), z, 1.6059043836821613e-10lf), z, -2.505210838544172e-08lf), z, 2.7557319223985893e-06lf), z, -0.0001984126984126984lf), z, 0.008333333333333333lf), z, -0.16666666666666666lf), z, 1.0lf); }
double kiln_cos_poly(double r) { double z = r * r; return fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-8.896791392450574e-22lf, z, 4.110317623312165e-19lf), z, -1.5619206968586225e-16lf), z, 4.779477332387385e-14lf), z, -1.1470745597729725e-11lf), z, 2.08767569878681e-09lf), z, -2.755731922398589e-07lf), z, 2.48015873015873e-05lf), z, -0.001388888888888889lf), z, 0.041666666666666664lf), z, -0.5lf), z, 1.0lf); }
double kiln_sincos_f64(double x, bool want_cos) {
  if (isnan(x) || isinf(x)) return (x - x) / (x - x);
  double n = kiln_round_even_f64(x * 6.36619772367581382433e-01lf);
  double r = fma(-n, 1.57079632673412561417e+00lf, x);
  r = fma(-n, 6.07710050630396597660e-11lf, r);
  r = fma(-n, 2.02226624871116645580e-21lf, r);
  int q = int(n - 4.0lf * floor(n * 0.25lf));
  if (want_cos) q = q + 1;
  q = q & 3;
  if (q == 0) return kiln_sin_poly(r);
  if (q == 1) return kiln_cos_poly(r);
  if (q == 2) return -kiln_sin_poly(r);
  return -kiln_cos_poly(r);
}
double kiln_sin_f64(double x) { return kiln_sincos_f64(x, false); }
double kiln_cos_f64(double x) { return kiln_sincos_f64(x, true); }
double kiln_expm1_small(double x) { return x * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(1.9572941063391263e-20lf, x, 4.110317623312165e-19lf), x, 8.22063524662433e-18lf), x, 1.5619206968586225e-16lf), x, 2.8114572543455206e-15lf), x, 4.779477332387385e-14lf), x, 7.647163731819816e-13lf), x, 1.1470745597729725e-11lf), x, 1.6059043836821613e-10lf), x, 2.08767569878681e-09lf), x, 2.505210838544172e-08lf), x, 2.755731922398589e-07lf), x, 2.7557319223985893e-06lf), x, 2.48015873015873e-05lf), x, 0.0001984126984126984lf), x, 0.001388888888888889lf), x, 0.008333333333333333lf), x, 0.041666666666666664lf), x, 0.16666666666666666lf), x, 0.5lf), x, 1.0lf); }  // |x| <= 1
double kiln_tanh_f64(double x) {
  if (isnan(x)) return x;
  double a = abs(x);
  double t;
  if (a < 0.5lf) {
    double e = kiln_expm1_small(2.0lf * a);
    t = e / (e + 2.0lf);
  } else if (a > 22.0lf) {
    t = 1.0lf;
  } else {
    t = 1.0lf - 2.0lf / (kiln_exp_f64(2.0lf * a) + 1.0lf);
  }
  return x < 0.0lf ? -t : (x == 0.0lf ? x : t);
}
// erf: |x| < 3 by the all-positive series 2x/sqrt(pi) e^(-x^2) sum (2x^2)^n / (2n+1)!!, with x^2
// split exactly (fma) so e^(-x^2) keeps its accuracy; 3 <= |x| < 6 as 1 - erfc from erfc's
// continued fraction; beyond, +-1.
double kiln_erf_f64(double x) {
  if (isnan(x)) return x;
  double a = abs(x);
  double r;
  if (a < 3.0lf) {
    double hi = a * a;
    double lo = fma(a, a, -hi);
    double e = kiln_exp_f64(-hi) * (1.0lf - lo);
    double term = 1.0lf, sum = 1.0lf, z = 2.0lf * hi;
    for (int n = 0; n < 120; ++n) {
      term = term * z / double(2 * n + 3);
      sum = sum + term;
      if (term < sum * 1e-18lf) break;
    }
    r = 1.1283791670955126lf * a * e * sum;
  } else if (a < 6.0lf) {
    double k = a;
    for (int n = 80; n >= 1; --n) k = a + (double(n) * 0.5lf) / k;
    double hi = a * a;
    double lo = fma(a, a, -hi);
    r = 1.0lf - kiln_exp_f64(-hi) * (1.0lf - lo) * 0.5641895835477563lf / k;
  } else {
    r = 1.0lf;
  }
  return x < 0.0lf ? -r : (x == 0.0lf ? x : r);
}
// pow for a positive finite base: exp(b log a); about (1 + |b log a|) ulp.
double kiln_powpos_f64(double a, double b) { return kiln_exp_f64(b * kiln_log_f64(a)); }
)glsl";

bool UsesType(const Kernel& kernel, ScalarType type) {
  for (const Expr& e : kernel.exprs) {
    if (e.type == type) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<GlslKernel> KernelToGlsl(const Kernel& original, const GlslTarget& target) {
  const Kernel kernel = ExpandMath(original);
  const auto missing = [&](const std::string& what, const std::string& feature) {
    return absl::FailedPreconditionError(
        absl::StrCat("vulkan: kernel ", kernel.name, ": ", what, " needs the device feature ",
                     feature, ", which this device lacks (use the Cpu backend for this graph)"));
  };
  if (!target.int64) return missing("index arithmetic (i64)", "shaderInt64");
  bool has8 = false, has16 = false;
  for (const KernelArg& arg : kernel.args) {
    const std::string what = absl::StrCat("arg ", arg.name, " (", ir::DTypeName(arg.dtype), ")");
    if (arg.dtype == ir::DType::kF64 && !target.float64) return missing(what, "shaderFloat64");
    if (ir::DTypeSize(arg.dtype) == 1) {
      if (!target.int8_storage) return missing(what, "storageBuffer8BitAccess");
      has8 = true;
    }
    if (ir::DTypeSize(arg.dtype) == 2) {
      if (!target.int16_storage) return missing(what, "storageBuffer16BitAccess");
      has16 = true;
    }
  }
  if (UsesType(kernel, ScalarType::kF64) && !target.float64) {
    for (const Expr& e : kernel.exprs) {
      if (e.type == ScalarType::kF64) {
        return missing(absl::StrCat("an f64 ", ExprOpName(e.op)), "shaderFloat64");
      }
    }
  }

  GlslKernel out;
  out.cooperative = PreferCooperative(kernel);
  out.workgroup_size = 64;
  GlslDialect dialect(target);
  RenderOptions options;
  options.cooperative = out.cooperative;
  options.workgroup_size = out.workgroup_size;
  options.subgroups = target.subgroup_arithmetic;
  absl::StatusOr<RenderedKernel> rendered = RenderKernel(kernel, dialect, options);
  if (!rendered.ok()) return rendered.status();

  const int64_t rows = out.cooperative
                           ? kernel.parallel_extent
                           : (kernel.parallel_extent + out.workgroup_size - 1) / out.workgroup_size;
  const int64_t max_x = std::max<int64_t>(target.max_workgroup_count_x, 1);
  const int64_t x = std::min<int64_t>(std::max<int64_t>(rows, 1), max_x);
  const int64_t y = (rows + x - 1) / x;
  if (y > static_cast<int64_t>(target.max_workgroup_count_y)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("vulkan: kernel ", kernel.name, ": ", kernel.parallel_extent,
                     " parallel iterations exceed the device's workgroup count limits"));
  }
  out.groups = {static_cast<uint32_t>(rows == 0 ? 0 : x), static_cast<uint32_t>(rows == 0 ? 0 : y),
                1};

  std::string& s = out.source;
  absl::StrAppend(&s, "#version 450\n// kiln kernel ", kernel.name, "\n");
  absl::StrAppend(&s, "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
  if (has8) absl::StrAppend(&s, "#extension GL_EXT_shader_8bit_storage : require\n");
  if (has16) absl::StrAppend(&s, "#extension GL_EXT_shader_16bit_storage : require\n");
  if (rendered->uses_subgroups) {
    absl::StrAppend(&s, "#extension GL_KHR_shader_subgroup_basic : require\n",
                    "#extension GL_KHR_shader_subgroup_arithmetic : require\n");
  }
  absl::StrAppend(&s, "layout(local_size_x = ", out.workgroup_size,
                  ", local_size_y = 1, local_size_z = 1) in;\n");
  for (size_t i = 0; i < kernel.args.size(); ++i) {
    const KernelArg& arg = kernel.args[i];
    std::string comment = arg.name;
    for (char& c : comment) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    absl::StrAppend(&s, "// arg ", i, ": ", ArgRoleName(arg.role), " ", ir::DTypeName(arg.dtype),
                    "[", arg.num_elements, "] ", comment, "\n");
    absl::StrAppend(&s, "layout(std430, set = 0, binding = ", i, ") ",
                    arg.role == ArgRole::kInput ? "readonly " : "", "buffer Arg", i, " { ",
                    BufferElement(arg.dtype), " d[]; } a", i, ";\n");
  }
  absl::StrAppend(&s, rendered->shared_decls);
  const bool needs_half = has16 || rendered->helpers.find("kiln_f32_to_f16(") != std::string::npos;
  if (has16 && rendered->helpers.find("kiln_f16_to_f32(") == std::string::npos) {
    absl::StrAppend(&s, HalfHelpers(dialect));
  }
  (void)needs_half;
  if (rendered->helpers.find("_f64(") != std::string::npos ||
      rendered->body.find("_f64(") != std::string::npos) {
    absl::StrAppend(&s, kF64MathHelpers);
  }
  absl::StrAppend(&s, rendered->helpers);
  absl::StrAppend(&s, "void main() {\n");
  if (out.cooperative) {
    absl::StrAppend(&s,
                    "  int64_t gid = int64_t(gl_WorkGroupID.y) * int64_t(gl_NumWorkGroups.x) + "
                    "int64_t(gl_WorkGroupID.x);\n",
                    "  int64_t lid = int64_t(gl_LocalInvocationID.x);\n");
  } else {
    absl::StrAppend(&s,
                    "  int64_t gid = (int64_t(gl_WorkGroupID.y) * int64_t(gl_NumWorkGroups.x) + "
                    "int64_t(gl_WorkGroupID.x)) * ",
                    out.workgroup_size, "l + int64_t(gl_LocalInvocationID.x);\n");
  }
  // A whole workgroup leaves together in cooperative kernels (gid is uniform there).
  absl::StrAppend(&s, "  if (gid < ", kernel.parallel_extent, "l) {\n");
  absl::StrAppend(&s, rendered->body, "  }\n}\n");
  return out;
}

}  // namespace kiln::codegen::vulkan
