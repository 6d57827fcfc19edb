// Harness of docs/onnx.md's import fragment, which returns a status on failure: the body of such
// a function, with `using namespace kiln` (it names ir::), run on the work folder's model.onnx and
// input_0.pb (tests/onnx/models/cnn); one output must come back.
#include <iostream>

#include "absl/status/status.h"
#include "frontend/onnx/import.h"
#include "ir/interpreter.h"

absl::Status Fragment() {
  using namespace kiln;
  //@fragment
  if (!outputs.ok()) return outputs.status();
  if (outputs->size() != 1) return absl::InternalError("expected one output");
  return absl::OkStatus();
}

int doc_run() {
  absl::Status status = Fragment();
  if (!status.ok()) std::cerr << status << "\n";
  return status.ok() ? 0 : 1;
}
