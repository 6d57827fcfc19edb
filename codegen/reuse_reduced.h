// ReuseReducedValues: a value that a Reduce computes on each iteration and that a later Loop of
// the same block computes again, to store its function into an output, is stored into that output
// by the Reduce and loaded back by the Loop. A softmax row then takes one exp per element, not two:
//
//   acc2 = reduce sum r2 in [0, n) {             acc2 = reduce sum r2 in [0, n) {
//     v15 = exp(load x[row + r2] - acc1)           v15 = exp(load x[row + r2] - acc1)
//   } yield v15                                    store y[row + r2] = v15
//   for i3 in [0, n) {                 becomes    } yield v15
//     v21 = exp(load x[row + i3] - acc1)         for i3 in [0, n) {
//     store y[row + i3] = v21 / acc2               store y[row + i3] = load y[row + i3] / acc2
//   }                                            }
//
// The row the Loop reads back was just written, so it is in cache when it fits (a 4096-float row
// is 16 KiB): the data is read from memory once for the max and once for the sum, and the second
// exp pass is gone. Results are unchanged bit for bit (the loaded value is the one computed).
//
// The rewrite applies, per block, to a Reduce R and a later Loop L of the same extent when:
//  - L's body is Lets and Stores only, and its first unpredicated Store to an output arg `y`
//    (the only Store to `y` there) stores an expression containing W, a subexpression that contains
//    a transcendental function (exp, log, tanh, erf, sin, cos, pow) and is R's per-iteration value
//    V or one of V's subexpressions with L's variable in place of R's (the largest such W is
//    taken);
//  - `y` is stored as the type it is computed in (not f16/bf16, which a Store rounds), nothing in
//    the kernel loads `y` (an in-place kernel or scatter_add reads its output; after one rewrite
//    L does, so one value per output is reused), and nothing between R and L, or inside R,
//    stores to `y`;
//  - the Store's index uses no accumulator (so it can be computed inside R).
// Every iteration of L overwrites the element R stored for that iteration, so what the kernel
// leaves in `y` is unchanged. Only for targets that run a gid's statements in one thread, in
// order (the CPU emitter): a GPU renderer that splits a Reduce over a workgroup would need a
// barrier between R and L.
#pragma once

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Returns `kernel` with the rewrite above applied wherever it can be (the kernel as is when
/// nowhere). The result verifies whenever `kernel` does.
Kernel ReuseReducedValues(Kernel kernel);

}  // namespace kiln::codegen
