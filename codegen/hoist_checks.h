// HoistInvariantChecks: a gather's index check (the predicated Stores into the kernel's error flag,
// lower.h) that does not change from one iteration of a Loop or Reduce to the next is made once,
// before it. A row gather (index_select, an embedding lookup) checks the row's index at every
// element of the row:
//
//   for i1 in [0, 384) {                              store err[0] = 1 if !(0 <= v8 < 4096)
//     v8 = load.i64 idx[gid]                          store err[1] = v8 if !(0 <= v8 < 4096)
//     store err[0] = 1 if !(0 <= v8 < 4096)  becomes  for i1 in [0, 384) {
//     store err[1] = v8 if !(0 <= v8 < 4096)            store y[gid * 384 + i1] =
//     store y[gid * 384 + i1] =                             load x[clamp(v8) * 384 + i1]
//         load x[clamp(v8) * 384 + i1]                 }
//   }
//
// The CPU emitter writes error-flag stores as relaxed atomics behind a branch, which LLVM's loop
// vectoriser refuses: with them in the row loop, a gather copied one float at a time. Moved out,
// the loop is a plain strided copy.
//
// A Store moves when its arg is the error flag, its index, value and predicate use neither the
// statement's variable nor any variable or accumulator defined inside it, and every Load they
// contain reads an input arg (which nothing in the kernel writes). Only statements with at least
// one iteration give up their checks: with none, the check would not have run. The flag's
// contents are unchanged: the same stores with the same values, once instead of per iteration
// (the error flag says "some index was out of range, for example this one", lower.h).
#pragma once

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Returns `kernel` with every check that can move (above) moved before its Loop or Reduce,
/// repeatedly, so a check invariant in several nested statements leaves all of them. The result
/// verifies whenever `kernel` does.
Kernel HoistInvariantChecks(Kernel kernel);

}  // namespace kiln::codegen
