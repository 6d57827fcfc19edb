// kiln's row of benchmarks/peers/onnx_peers.py: imports an ONNX model (frontend/onnx), compiles
// it once for the Cpu backend and times RunCompiledGraph (threads: KILN_NUM_THREADS).
//
//   onnx_kiln_bench MODEL.onnx INPUT.pb [--input-name NAME] [--output OUT.f32] [--min-time S]
//                   [--repetitions N] [--weights parameters|constants]
// --weights constants bakes the initializers into the graph (ImportOptions::weights_as_parameters
// = false), so the Cpu backend's constant folding sees them.
//
// INPUT.pb is an ONNX TensorProto (numpy_helper.from_array); with --input-name NAME its shape
// fixes that input's dynamic dimensions (ImportOptions::input_shapes). The one input is the model's
// first; weights are the model's initializers. Prints JSON {"seconds": best batch mean per run,
// "compile_seconds", "import_seconds", "runs"}; with
// --output, the first output's elements as raw float32 (for the peers' comparison).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "frontend/onnx/import.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "onnx_kiln_bench: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc < 3)
    return Fail(
        "usage: onnx_kiln_bench MODEL.onnx INPUT.pb [--input-name N] [--output F] [--min-time S] "
        "[--repetitions N]");
  std::string model_path = argv[1], input_path = argv[2], output_path, input_name;
  double min_time = 1.0;
  bool bake = false;
  int repetitions = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--output") {
      output_path = argv[i + 1];
    } else if (flag == "--weights") {
      bake = std::string(argv[i + 1]) == "constants";
    } else if (flag == "--input-name") {
      input_name = argv[i + 1];
    } else if (flag == "--min-time") {
      min_time = std::atof(argv[i + 1]);
    } else if (flag == "--repetitions") {
      repetitions = std::atoi(argv[i + 1]);
    } else {
      return Fail("unknown flag " + flag);
    }
  }
  absl::StatusOr<ir::TensorData> input = onnx::ReadTensorProtoFile(input_path);
  if (!input.ok()) return Fail(std::string(input.status().message()));

  const double t0 = Now();
  onnx::ImportOptions options;
  if (!input_name.empty()) options.input_shapes[input_name] = input->shape();
  options.weights_as_parameters = !bake;
  absl::StatusOr<onnx::ImportedModel> model = onnx::ImportFile(model_path, options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const double t1 = Now();
  absl::StatusOr<std::vector<ir::TensorData>> args = model->Arguments({*input});
  if (!args.ok()) return Fail(std::string(args.status().message()));
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (auto& a : *args) shared.push_back(std::make_shared<const ir::TensorData>(std::move(a)));
  auto compiled = codegen::cpu::CompileGraph(model->graph);
  if (!compiled.ok()) return Fail(std::string(compiled.status().message()));
  const double t2 = Now();

  auto out = codegen::cpu::RunCompiledGraph(**compiled, shared);  // warm-up
  if (!out.ok()) return Fail(std::string(out.status().message()));
  double best = 1e30;
  long runs = 0;
  for (int r = 0; r < repetitions; ++r) {
    long n = 0;
    const double start = Now();
    double now = start;
    while (n == 0 || now - start < min_time) {
      auto o = codegen::cpu::RunCompiledGraph(**compiled, shared);
      if (!o.ok()) return Fail(std::string(o.status().message()));
      ++n;
      now = Now();
    }
    best = std::min(best, (now - start) / static_cast<double>(n));
    runs += n;
  }
  if (!output_path.empty()) {
    std::vector<double> v = (*out)[0].ToDoubles();
    std::vector<float> f(v.begin(), v.end());
    std::ofstream o(output_path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size() * 4));
  }
  std::printf(
      "{\"seconds\": %.9g, \"import_seconds\": %.6g, \"compile_seconds\": %.6g, \"runs\": %ld, "
      "\"kernels\": %d, \"gemm_steps\": %d}\n",
      best, t1 - t0, t2 - t1, runs, (*compiled)->num_kernels, (*compiled)->num_gemm_steps);
  return 0;
}
