// A small deployment-style runner for tests/cross: loads a .kiln blob through libkiln_runtime's
// C API (runtime/include/kiln_runtime.h), runs it on .npy inputs and writes out_<i>.npy.
// Cross-compiled for aarch64 and run under qemu-user by run_aarch64_test.sh.
//   kiln_cross_runner m.kiln <out_dir> in_0.npy in_1.npy ...
#include <cstdio>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/npy.h"
#include "runtime/include/kiln_runtime.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "kiln_cross_runner: %s\n", message.c_str());
  return 1;
}

kiln::ir::Shape ShapeOf(const kiln_tensor_info& info) {
  return kiln::ir::Shape(info.shape, info.shape + info.rank);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Fail("usage: kiln_cross_runner m.kiln <out_dir> in_0.npy ...");
  kiln_model* model = nullptr;
  if (kiln_model_load_file(argv[1], &model) != KILN_OK) return Fail(kiln_last_error());
  const size_t num_inputs = kiln_model_num_inputs(model);
  if (static_cast<size_t>(argc - 3) != num_inputs) {
    return Fail("the model has " + std::to_string(num_inputs) + " inputs");
  }
  std::vector<kiln::ir::TensorData> inputs, outputs;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (size_t i = 0; i < num_inputs; ++i) {
    kiln_tensor_info info;
    kiln_model_input_info(model, i, &info);
    absl::StatusOr<kiln::ir::TensorData> t = kiln::ir::ReadNpy(argv[3 + i]);
    if (!t.ok()) return Fail(std::string(t.status().message()));
    if (std::string(kiln::ir::DTypeName(t->dtype())) != kiln_dtype_name(info.dtype) ||
        t->shape() != ShapeOf(info)) {
      return Fail(std::string(argv[3 + i]) + ": does not match input " + info.name);
    }
    inputs.push_back(*std::move(t));
  }
  for (const kiln::ir::TensorData& t : inputs) in_ptrs.push_back(t.data());
  for (size_t i = 0; i < kiln_model_num_outputs(model); ++i) {
    kiln_tensor_info info;
    kiln_model_output_info(model, i, &info);
    outputs.emplace_back(*kiln::ir::ParseDType(kiln_dtype_name(info.dtype)), ShapeOf(info));
  }
  for (kiln::ir::TensorData& t : outputs) out_ptrs.push_back(t.data());
  if (kiln_model_run(model, in_ptrs.data(), out_ptrs.data()) != KILN_OK) {
    return Fail(kiln_last_error());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string path = std::string(argv[2]) + "/out_" + std::to_string(i) + ".npy";
    if (absl::Status s = kiln::ir::WriteNpy(path, outputs[i]); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  std::printf("kiln_cross_runner: %s ran on %s, %zu outputs\n", kiln_model_name(model),
#if defined(__aarch64__)
              "aarch64",
#elif defined(__x86_64__)
              "x86_64",
#else
              "another architecture",
#endif
              outputs.size());
  kiln_model_free(model);
  return 0;
}
