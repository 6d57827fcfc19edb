// A C-style renderer of the kernel IR (codegen/kernel_ir.h), shared by the GPU source emitters
// (GLSL for Vulkan now, CUDA C later). The languages agree on expressions, statements, loops and
// ternaries; a CDialect supplies what differs: type names, literals, bit casts, math function
// names, how a buffer element is loaded and stored, the barrier and workgroup (shared) arrays.
//
// What the renderer produces is the body of one invocation plus the helper functions it calls:
//
//   helpers:  int64_t kiln_div_i64(int64_t a, int64_t b) { ... }     (floored division, ...)
//   body:     v3 = gid * 8l; ... store ...                              (uses `gid`, and `lid`)
//
// The dialect wraps them into a shader or a __global__ function (buffer declarations, the
// computation of `gid` from the launch indices, the bounds check).
//
// Two shapes of kernel:
//  - thread per gid (the default): each invocation runs the whole body for its `gid`, exactly
//    as the kernel IR's evaluator does (Reduce statements are serial loops).
//  - workgroup per gid (RenderOptions::cooperative): used for reduction kernels whose rows are
//    long. The `workgroup_size` invocations of a workgroup share one `gid` (they must all run
//    the body: no early return in between) and `lid` in [0, workgroup_size) is their index. Every
//    top-level Reduce statement is split over them (iteration r by invocation r mod size), and the
//    partial results are combined through workgroup memory (a tree of barriers; with
//    RenderOptions::subgroups, within each subgroup by the dialect's subgroup operations first
//    and then across subgroups through workgroup memory after one barrier), so every
//    invocation ends with the row's result; top-level Loops are split the same way (their
//    iterations only store elements of their own); a top-level Store is done by invocation 0. Sums
//    and products are then combined in a different order than the serial loop, which the kernel IR
//    allows.
//
// Semantics follow codegen/kernel_eval.cc exactly where the target language lets them: floored
// integer division and modulo with a zero divisor giving 0, NaN-propagating max/min, saturating
// casts (NaN → 0), shifts out of range giving 0 or the sign fill, u8 arithmetic modulo 256, and
// f16/bf16 rounding done with integer operations (ties to even, no reliance on the target's
// conversion instructions).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// What differs between C-like GPU languages. Every hook returns source text.
class CDialect {
 public:
  virtual ~CDialect() = default;

  /// The language's name for errors ("GLSL").
  virtual std::string Name() const = 0;
  /// The type of a scalar of `type` (GLSL: bool, uint for u8, int, uint, int64_t, uint64_t,
  /// float, double).
  virtual std::string TypeName(ScalarType type) const = 0;
  /// Written before each helper function ("" in GLSL, "__device__ inline " in CUDA).
  virtual std::string FunctionPrefix() const { return ""; }
  /// A finite float constant of `type` that reads back exactly (e.g. "1.5f", "0.1lf").
  virtual std::string FloatLiteral(ScalarType type, double value) const = 0;
  /// An integer constant of `type` (value as kernel_eval normalises it).
  virtual std::string IntLiteral(ScalarType type, int64_t value) const = 0;
  /// Reinterprets the bits of `x` (of `from`) as `to` (same width; f32↔i32/u32, f64↔i64/u64).
  virtual std::string Bitcast(ScalarType from, ScalarType to, const std::string& x) const = 0;
  /// A value converted as the language's constructor/cast does (no saturation needed: the
  /// renderer only calls it where the value is in range, or for wrapping integer conversions).
  virtual std::string Convert(ScalarType to, const std::string& x) const {
    return TypeName(to) + "(" + x + ")";
  }
  /// An i32 value sign-extended to the 64-bit integer type `to` (default: Convert). GLSL spells it
  /// with a zero extension and a fix-up: Mesa's lavapipe (LLVM 15) miscompiles OpSConvert
  /// i32 → i64 of a value loaded from a storage buffer (0..4 compared below 5 as false).
  virtual std::string SignExtend32(ScalarType to, const std::string& x) const {
    return Convert(to, x);
  }
  /// `a op b` for op "+", "-" or "*" on the signed integer `type` (i32, i64), wrapping on
  /// overflow (two's complement) as kernel_eval does. GLSL's signed arithmetic wraps; C++ leaves
  /// overflow undefined, so CUDA computes in the unsigned type of the same width.
  virtual std::string SignedArith(const std::string& op, ScalarType type, const std::string& a,
                                  const std::string& b) const {
    (void)type;
    return "(" + a + " " + op + " " + b + ")";
  }
  /// The call of a one-argument math function ("sqrt", "floor", "roundEven", ...) on `x` of
  /// float `type`; empty when the language has no such function for `type` (the renderer then
  /// fails with an error naming the op and the type).
  virtual std::string MathCall(ExprOp op, ScalarType type, const std::string& x) const = 0;
  /// pow(a, b) for positive finite a (the renderer handles signs and special values), or "".
  virtual std::string PowCall(ScalarType type, const std::string& a,
                              const std::string& b) const = 0;
  /// isnan(x).
  virtual std::string IsNan(const std::string& x) const { return "isnan(" + x + ")"; }
  /// fma(a, b, c).
  virtual std::string FmaCall(const std::string& a, const std::string& b,
                              const std::string& c) const {
    return "fma(" + a + ", " + b + ", " + c + ")";
  }
  /// Whether f64 arithmetic is available (casts from 64-bit integers to f32 go through f64 as the
  /// interpreter does when it is).
  virtual bool HasFloat64() const = 0;

  /// The value of element `index` (an i64 expression) of arg `arg`, as ComputeType(dtype).
  virtual std::string Load(const Kernel& kernel, ArgId arg, const std::string& index) const = 0;
  /// Statements storing `value` (ComputeType(dtype)) at element `index` of arg `arg`, with the
  /// conversion to the arg's dtype (f16/bf16: `value` is already a bit pattern, see below).
  virtual std::string Store(const Kernel& kernel, ArgId arg, const std::string& index,
                            const std::string& value) const = 0;

  /// A workgroup barrier with workgroup-memory visibility ("barrier();", "__syncthreads();").
  virtual std::string Barrier() const = 0;
  /// The declaration of a workgroup array ("shared float name[64];").
  virtual std::string SharedArray(ScalarType type, const std::string& name, int size) const = 0;

  /// Subgroup (warp) operations for the cross-invocation combine of cooperative reductions,
  /// used only with RenderOptions::subgroups. SubgroupReduce returns the call that combines `x`
  /// over the invocations of the subgroup with `kind` (kSum, kProd, kMax or kMin) on `type`, or
  /// "" when the language has none for that type (the renderer then combines through workgroup
  /// memory). The defaults say "none".
  virtual std::string SubgroupReduce(ReduceKind kind, ScalarType type, const std::string& x) const {
    (void)kind, (void)type, (void)x;
    return "";
  }
  /// The subgroup's index in the workgroup and the number of subgroups (both `uint`), and a
  /// condition true in exactly one invocation of each subgroup.
  virtual std::string SubgroupId() const { return ""; }
  virtual std::string NumSubgroups() const { return ""; }
  virtual std::string SubgroupElect() const { return ""; }
};

struct RenderOptions {
  /// Workgroup per gid (see the header comment). Requires workgroup_size to be a power of two.
  bool cooperative = false;
  int workgroup_size = 64;
  /// Cooperative kernels: combine the invocations' partial results within each subgroup with
  /// the dialect's subgroup operations, then the subgroups' results through workgroup memory
  /// (one barrier instead of a log2(workgroup_size) tree). Reductions whose kind and type the
  /// dialect's SubgroupReduce lacks keep the workgroup-memory tree. Results are those of the
  /// tree: NaN-propagating max/min, first-index argmax/argmin with NaN first.
  bool subgroups = false;
};

/// What RenderKernel produces.
struct RenderedKernel {
  /// Helper functions (each once), in dependency order.
  std::string helpers;
  /// Workgroup arrays the body uses (cooperative kernels); placed at file scope.
  std::string shared_decls;
  /// The statements of one invocation, indented by two spaces. Uses `gid` (i64) and, in
  /// cooperative kernels, `lid` (i64).
  std::string body;
  /// Whether the body uses the dialect's subgroup operations (RenderOptions::subgroups).
  bool uses_subgroups = false;
};

/// Renders `kernel` (which must verify). Fails with Unimplemented naming the op and type when the
/// dialect cannot express one (e.g. an f64 exp in GLSL).
absl::StatusOr<RenderedKernel> RenderKernel(const Kernel& kernel, const CDialect& dialect,
                                            const RenderOptions& options = {});

/// True when `kernel` has a top-level Reduce worth running as one workgroup per gid: its trip
/// count is at least `min_extent` and the parallel extent is small enough that the device would
/// otherwise idle (fewer than `max_rows` rows).
bool PreferCooperative(const Kernel& kernel, int64_t min_extent = 64, int64_t max_rows = 1 << 16);

/// The bit-level f16/bf16 helpers every dialect shares (written with `uint`/`float` of the
/// dialect): kiln_f16_to_f32(uint bits), kiln_f32_to_f16(float) -> uint bits (ties to even),
/// kiln_bf16_to_f32, kiln_f32_to_bf16. Dialects call these in their Load/Store.
std::string HalfHelpers(const CDialect& dialect);

}  // namespace kiln::codegen
