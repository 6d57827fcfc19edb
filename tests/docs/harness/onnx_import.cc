// Harness of README.md's ONNX fragment: `x`, an input for the work folder's model.onnx (the CNN
// of tests/onnx/models/cnn, f32 [2, 3, 16, 16] with the batch given); the import and the
// interpreter run must succeed.
#include <iostream>

#include "frontend/onnx/import.h"
#include "ir/interpreter.h"

int doc_run() {
  kiln::ir::TensorData x(kiln::ir::DType::kF32, {2, 3, 16, 16});
  //@fragment
  if (!m.ok() || !outputs.ok()) {
    std::cerr << (m.ok() ? outputs.status() : m.status()) << "\n";
    return 1;
  }
  return outputs->size() == 1 ? 0 : 1;
}
