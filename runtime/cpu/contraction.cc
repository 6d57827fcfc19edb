#include "runtime/cpu/contraction.h"

#include <stdexcept>
#include <string>

#include "absl/status/status.h"

namespace kiln::runtime::cpu {

void ContractionKernel(void* const* args, int64_t begin, int64_t end) {
  if (begin >= end) return;
  const ContractionStep* step = *static_cast<const ContractionStep* const*>(args[3]);
  if (step->kernels == nullptr) throw std::runtime_error("contraction step without micro-kernels");
  absl::Status status;
  // The int8 epilogue's vectors, args[4], args[5], ... in step order.
  const auto bind_vectors = [&](Int8Epilogue& epilogue) {
    int arg = 4;
    for (Int8EpilogueStep& s : epilogue.steps) {
      if (s.operand == Int8Operand::kRow || s.operand == Int8Operand::kColumn) {
        s.vector = static_cast<const float*>(args[arg++]);
      }
    }
  };
  if (step->is_int8 && step->is_conv) {
    Int8ConvParams params = step->int8_conv;
    params.conv.input = args[0];
    params.conv.weight = args[1];
    params.conv.output = args[2];
    bind_vectors(params.epilogue);
    status = ExecuteInt8Conv(params, *step->kernels, step->pool);
  } else if (step->is_int8) {
    Int8GemmParams params = step->int8_gemm;
    params.a.data = args[0];
    params.b.data = args[1];
    params.c.data = args[2];
    bind_vectors(params.epilogue);
    status = ExecuteInt8Gemm(params, *step->kernels, step->pool);
  } else if (step->is_conv) {
    ConvParams params = step->conv;
    params.input = args[0];
    params.weight = args[1];
    params.output = args[2];
    if (step->has_bias) params.bias = args[4];
    status = ExecuteConv(params, *step->kernels, step->pool);
  } else {
    GemmParams params = step->gemm;
    params.a.data = args[0];
    params.b.data = args[1];
    params.c.data = args[2];
    if (step->has_bias) params.epilogue.column_bias = args[4];
    status = ExecuteGemm(params, *step->kernels, step->pool);
  }
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

}  // namespace kiln::runtime::cpu
