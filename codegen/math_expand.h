// ExpandMath: rewrites the f32 transcendental functions of a kernel into polynomial and rational
// expansions built from plain kernel-IR ops (fma, mul, add, compares, selects, bit casts and
// integer shifts), so that an emitter's loop vectoriser can vectorise them. LLVM does not
// vectorise calls to libm, so without this every exp in a softmax is a scalar call.
//
// Rewritten (f32 only). "Max error" is over all 2^32 f32 inputs, in ulps of the exact result
// (libm in double), for the JIT-compiled code on x86-64 with FMA (KILN_MATH_EXHAUSTIVE=1
// tests/codegen/cpu/math_expand_test); the test asserts the "bound" column on a dense sweep, for
// the JIT and for kernel_eval (strict f32, no contraction).
//
//   op       method                                                      max error  bound
//   -------  ----------------------------------------------------------  ---------  -----
//   exp      Cody-Waite reduction x = n ln2 + r (ln2 split as              1.03 ulp    1.5
//            0.693359375 - 2.12194440e-4), degree-6 polynomial of Cephes
//            expf (S. L. Moshier, Cephes Math Library 2.2, expf.c) by
//            Estrin's scheme (a shorter dependency chain than Horner's),
//            scaling by 2^n through two exponent bit fields so that
//            subnormal results round once; n's integer is read from the
//            bits of n + 1.5 2^23 rather than converted (x86's saturating
//            conversion is eight instructions)
//   log      frexp by bit manipulation (subnormals rescaled by 2^23),      0.83 ulp    1.5
//            mantissa in [sqrt(1/2), sqrt(2)), degree-8 polynomial of
//            Cephes logf (logf.c)
//   tanh     |x| < 0.625: odd polynomial of Cephes tanhf (tanhf.c);       1.33 ulp    2
//            otherwise 1 - 2 / (exp(2|x|) + 1) with the exp above; sign
//            restored by bits (tanh(-0) = -0)
//   erf      |x| < 0.875: x + x P(x^2); otherwise                          1.10 ulp    2
//            1 - exp(-(|x| + |x| Q(|x|))); minimax coefficients of Arm
//            Optimized Routines erff (math/erff.c, erff_data.c, MIT);
//            |x| >= 4 gives ±1
//   sigmoid  the frontend's 1 / (1 + exp(-x)) (reciprocal(add(exp(neg     2.40 ulp    3
//            x), 1)), either add order) becomes e = exp(-|x|);
//            (x >= 0 ? 1 : e) / (1 + e): one exp, and accurate for very
//            negative x where exp(-x) overflows (sigmoid(-100) = 3.7e-44)
//   1+tanh   gelu_tanh's add(tanh(x), 1), either order, becomes               2.40 ulp    3
//            2 sigmoid(2x) as above: (2x >= 0 ? 2 : 2e) / (1 + e) with
//            e = exp(-|2x|): one exp instead of tanh's two branches, and
//            no cancellation near tanh(x) = -1 (gelu of large negative x)
//   gelu     gelu_tanh's mul(mul(y, 0.5), 1 + tanh(u)) becomes y sigmoid(2u),    as 1+tanh
//            and 2u becomes w (2c) when u = w c for a constant c: halving
//            and doubling are exact, so the bits are those of the 1+tanh
//            row's product for normal values, with three fewer operations
//
// Special values follow libm: exp(±inf) = inf/0, exp overflows to inf above 88.7228 and
// underflows through the subnormals to 0 below -103.98; log(±0) = -inf, log(x < 0) = NaN,
// log(inf) = inf, subnormal inputs are accurate; tanh/erf(±inf) = ±1 and keep signed zeros;
// NaN in gives NaN out everywhere.
//
// Not rewritten, and why:
//  - f64: the expansions above are tuned for f32; f64 keeps libm calls (libm's accuracy).
//  - sin, cos, pow: argument reduction for large |x| (sin/cos) and the accuracy of
//    exp(y log x) for pow need extended precision that a short f32 expansion cannot give; they
//    stay libm calls (the CPU emitter computes them in double and rounds), not vectorised.
//  - sqrt, rsqrt, floor, ceil, round, trunc, fma: already single vector instructions.
//
// The emitter may contract a multiply and a dependent add of the expansions into an fma (the
// kernel IR allows it), and on a target without fused multiply-add (x86-64-v2) it computes the
// expansions' fmas as a multiply and an add; both only change results within the bounds above
// (the test asserts them at every x86-64 level, tests/codegen/CMakeLists.txt).
#pragma once

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Returns `kernel` with every f32 exp, log, tanh and erf expression (and the sigmoid and 1 + tanh
/// patterns above) replaced by its expansion. Statements, args and variables are unchanged;
/// expressions no statement uses any more are dropped. A kernel without such expressions is
/// returned as is (same expressions, same ids).
Kernel ExpandMath(Kernel kernel);

/// True when ExpandMath would change `kernel`.
bool NeedsMathExpansion(const Kernel& kernel);

}  // namespace kiln::codegen
