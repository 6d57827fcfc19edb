// The argument checks that the GEMM entry points (ExecuteGemm, ExecuteInt8Gemm) make of their
// sizes and views; `what` names the entry point at the front of each message ("gemm",
// "gemm int8").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cpu/gemm.h"

namespace kiln::runtime::cpu::gemm_internal {

/// `view` (called `name` in the message) has one batch stride per batch dimension, or none when
/// `may_be_empty` (an operand broadcast over the batch).
absl::Status CheckBatchStrides(const char* what, const char* name, const MatrixView& view,
                               size_t batch_rank, bool may_be_empty);

/// Sizes and batch dimensions are not negative, A's, B's and C's batch strides match the batch
/// (A's and B's may be empty) and C's columns are contiguous. Returns the batch's product count.
absl::StatusOr<int64_t> CheckGemmGeometry(const char* what, int64_t m, int64_t n, int64_t k,
                                          const std::vector<int64_t>& batch, const MatrixView& a,
                                          const MatrixView& b, const MatrixView& c);

/// For a product that is not empty: C is given, and A and B are when K > 0.
absl::Status CheckGemmOperands(const char* what, int64_t m, int64_t n, int64_t k,
                               const MatrixView& a, const MatrixView& b, const MatrixView& c);

}  // namespace kiln::runtime::cpu::gemm_internal
