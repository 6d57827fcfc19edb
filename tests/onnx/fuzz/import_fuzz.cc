// libFuzzer target for the ONNX importer (frontend/onnx/import.h): any bytes must give either a
// verified graph or an error status; no crash, no sanitizer report, no unbounded allocation.
// Built with -DKILN_BUILD_FUZZERS=ON under clang-16 (tests/onnx/CMakeLists.txt; docs/onnx.md has
// the command and the recorded run). Seeds: the golden models (tests/onnx/models, tests/onnx/ops)
// and tests/onnx/fuzz/seeds (external data, written by tests/onnx/make_extdata_fixtures.py).
//
// External data without a disk: an input that starts with "KXD1" is a model and a data file,
// "KXD1" + the model's length (uint32, little-endian) + the model + the data file, and the data
// file is served in memory (ImportOptions::external_data_files) under the locations
// "model.onnx.data" (the seed's) and "d"; the offset/length checks are the same as for files on
// disk.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "frontend/onnx/import.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kiln::onnx::ImportOptions options;
  if (bytes.size() >= 8 && bytes.substr(0, 4) == "KXD1") {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(data[4 + i]) << (8 * i);
    std::string_view rest = bytes.substr(8);
    const std::string_view model = rest.substr(0, n), file = rest.substr(model.size());
    options.external_data_files["model.onnx.data"] = file;
    options.external_data_files["d"] = file;
    bytes = model;
  }
  absl::StatusOr<kiln::onnx::ImportedModel> m = kiln::onnx::ImportBytes(bytes, options);
  if (m.ok()) {
    if (!kiln::ir::Verify(m->graph).ok()) std::abort();
    // Every parameter that is not a model input has its weight (values are not checked).
    if (!m->Arguments(std::vector<kiln::ir::TensorData>(m->input_names.size())).ok()) std::abort();
  }
  (void)kiln::onnx::ReadTensorProto(bytes);
  return 0;
}
