// The CUDA toolkit's PTX assembler as a checker for the tests: PTX that `ptxas -arch=sm_XX`
// accepts is PTX the driver's JIT will accept for that GPU. ptxas is found at $KILN_PTXAS, else
// /usr/local/cuda/bin/ptxas, else on PATH; without it the tests that need it skip and say so.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kiln::test {

/// OK when ptxas runs; otherwise FailedPrecondition naming what was tried.
absl::Status PtxasAvailable();

/// Assembles `ptx` for `arch` ("sm_90") into nothing; Internal with ptxas's output (and the
/// PTX's first lines) when it refuses. `name` names the module in the error.
absl::Status AssemblePtx(const std::string& ptx, const std::string& arch, const std::string& name);

}  // namespace kiln::test
