// libFuzzer target for the ONNX importer (frontend/onnx/import.h): any bytes must give either a
// verified graph or an error status; no crash, no sanitizer report, no unbounded allocation.
// Built with -DKILN_BUILD_FUZZERS=ON under clang-16 (tests/onnx/CMakeLists.txt; docs/onnx.md has
// the command and the recorded run). Seeds: the golden models (tests/onnx/models, tests/onnx/ops).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "frontend/onnx/import.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kiln::onnx::ImportedModel> m = kiln::onnx::ImportBytes(bytes);
  if (m.ok()) {
    if (!kiln::ir::Verify(m->graph).ok()) std::abort();
    // Every parameter that is not a model input has its weight (values are not checked).
    if (!m->Arguments(std::vector<kiln::ir::TensorData>(m->input_names.size())).ok()) std::abort();
  }
  (void)kiln::onnx::ReadTensorProto(bytes);
  return 0;
}
