// Legalize: the one place where the kernel IR's compound scalar semantics are spelled out in
// simpler kernel-IR ops, so that every emitter (LLVM in codegen/cpu/emitter.cc, the C-like
// renderer in codegen/c_render.cc behind GLSL and later CUDA C) only prints. Before this pass each
// emitter hand-wrote floored division and saturating casts; now the emitters call Legalize first
// and reject the compound forms.
//
// Rewrites (results are bit for bit those of kernel_eval.h, the IR's reference semantics):
//
//   expression                    becomes
//   ----------------------------  ----------------------------------------------------------------
//   div, mod on unsigned ints     udiv, urem (a zero divisor gives 0 in both)
//   div on signed ints            |a| udiv |b| in the unsigned type of the width, negated (plus 1
//                                 when the remainder is non-zero) when the signs differ: floored,
//                                 by 0 gives 0, INT_MIN / -1 wraps to INT_MIN
//   mod on signed ints            select(b == 0, 0, a - div(a, b) * b) (wrapping arithmetic)
//   cast to bool                  ne(x, 0) (NaN is true: ne is unordered)
//   cast from bool                wrap (integers) or select(x, 1, 0) (floats)
//   cast int → int                max/min with the target's limits in the source type, then wrap
//   cast float → int              convert of x where lo <= x < hi (lo, hi: the target's range as
//                                 exact powers of two), else the saturated limit; NaN gives 0
//   cast i64/u64 → f32            cast to f64, then to f32 (the interpreter's double rounding)
//
// What stays for the emitters to print: cast float → float and int → float (one conversion
// instruction), convert (float → int of an in-range value), udiv/urem, wrap and the plain ops.
// Not moved here, and why: float mod (GLSL has no exact fmod: c_render's helper needs a loop,
// which kernel-IR expressions cannot express; LLVM has frem), pow (LLVM calls libm's pow, which
// implements C's special values itself; c_render wraps the dialect's pow, defined only for
// positive bases, in those special values), NaN-propagating max/min and sign (each emitter has
// an isnan idiom that its target keeps; kernel IR's `x != x` would do on LLVM and lavapipe but
// is the kind of compare a GPU compiler may fold), and the reduction combines.
#pragma once

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

struct LegalizeOptions {
  /// The target has f64. Without it a 64-bit integer converts to f32 directly (one rounding
  /// from the integer, which in rare cases differs from the interpreter's two): the cast stays.
  bool float64 = true;
};

/// Returns `kernel` with every expression of the table above rewritten. Statements, args and
/// variables are unchanged; expressions only the rewritten ones used are dropped. A kernel
/// without such expressions is returned as is (same expressions, same ids).
Kernel Legalize(Kernel kernel, const LegalizeOptions& options = {});

/// True when Legalize would change `kernel`.
bool NeedsLegalization(const Kernel& kernel, const LegalizeOptions& options = {});

/// True for an expression an emitter may print directly (everything except the table above).
bool IsLegal(const Kernel& kernel, const Expr& expr, const LegalizeOptions& options = {});

}  // namespace kiln::codegen
