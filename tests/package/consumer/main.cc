// Uses kiln as an installed package, through the headers and targets the README documents:
// <kiln/kiln.h>, "codegen/aot/aot.h" and "frontend/onnx/import.h" with kiln::kiln and kiln::onnx.
//   app <model.onnx> <folder>   writes <folder>/net.kiln and <folder>/net.safetensors, prints
//                               the net's output on x = [1, 2, 3, 4] (c_app prints the blob's)
#include <kiln/kiln.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "codegen/aot/aot.h"
#include "frontend/onnx/import.h"
#include "frontend/train/checkpoint.h"
#include "ir/interpreter.h"

template <class B>
struct Net {
  kiln::nn::Linear<B> fc;
  KILN_MODULE(Net, fc);
  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 2>& x) const { return fc.forward(x); }
};

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: app <model.onnx> <folder>\n";
    return 2;
  }
  const std::string onnx_model = argv[1], folder = argv[2];
  try {
    // Lazy tensors on the reference interpreter.
    kiln::Reference::Device reference;
    auto x = kiln::Tensor<kiln::Reference, 1>::from_data({1.f, 2.f}, reference);
    if ((x + 1.f).to_vector() != std::vector<float>{2.f, 3.f}) {
      std::cerr << "unexpected values\n";
      return 1;
    }

    // The CPU backend (LLVM JIT), a checkpoint round trip, and a blob for c_app.
    kiln::manual_seed(0);
    kiln::Cpu::Device cpu;
    Net<kiln::Cpu> net{kiln::nn::LinearConfig(4, 2).init<kiln::Cpu>(cpu)};
    auto input = kiln::Tensor<kiln::Cpu, 2>::from_data({{1.f, 2.f, 3.f, 4.f}}, cpu);
    std::vector<float> y = net.forward(input).to_vector();
    kiln::train::save_checkpoint(folder + "/net.safetensors", net);
    Net<kiln::Cpu> back{kiln::nn::LinearConfig(4, 2).init<kiln::Cpu>(cpu)};
    kiln::train::load_checkpoint(folder + "/net.safetensors", back);
    if (back.forward(input).to_vector() != y) {
      std::cerr << "the checkpoint did not restore the weights\n";
      return 1;
    }
    kiln::TracedGraph traced = kiln::trace_named({{"x"}, {"y"}}, net, input);
    kiln::aot::CompileOptions options;
    options.weights = traced.weights;
    if (absl::Status s = kiln::aot::CompileToFile(traced.graph, options, folder + "/net.kiln");
        !s.ok()) {
      std::cerr << "aot::CompileToFile: " << s << "\n";
      return 1;
    }
    std::printf("y = %.6g %.6g\n", y[0], y[1]);

    // ONNX import (kiln::onnx), run on the interpreter.
    absl::StatusOr<kiln::onnx::ImportedModel> m = kiln::onnx::ImportFile(onnx_model);
    if (!m.ok()) {
      std::cerr << m.status() << "\n";
      return 1;
    }
    std::vector<kiln::ir::TensorData> inputs;
    for (kiln::ir::NodeId p : m->graph.Parameters()) {
      if (inputs.size() == m->input_names.size()) break;
      const kiln::ir::TensorType& type = m->graph.node(p).type;
      inputs.emplace_back(type.dtype, type.shape);  // zeros
    }
    absl::StatusOr<std::vector<kiln::ir::TensorData>> out =
        kiln::ir::Interpret(m->graph, *m->Arguments(inputs));
    if (!out.ok() || out->size() != m->output_names.size()) {
      std::cerr << "ONNX model: " << (out.ok() ? "wrong output count" : out.status().ToString())
                << "\n";
      return 1;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "kiln consumer ok\n";
  return 0;
}
