// aot_bench: the issue #5 targets for ahead-of-time blobs, on the Fashion-MNIST MLP
// (784-512-256-10, batch 1, as examples/deploy/export_mlp.cc traces it):
//   load + first run   runtime::blob::Model::LoadFile then one Run (median of 20 fresh loads;
//                      the file is in the page cache; target <= 5 ms)
//   run latency        median of 2000 batch-1 runs, the blob against the JIT's compiled graph
//                      (codegen::cpu::RunCompiledGraph) on the same input (target: no slower)
//
//   aot_bench [/tmp/aot_bench_mlp.kiln]
// The runner + runtime size target is measured with strip (docs/deploy.md has the commands).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/aot/aot.h"
#include "codegen/cpu/graph_compiler.h"
#include "kiln/kiln.h"
#include "runtime/blob.h"

namespace {

template <class B>
struct Mlp {
  kiln::nn::Linear<B> fc1, fc2, fc3;
  KILN_MODULE(Mlp, fc1, fc2, fc3);
  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 2>& x) const {
    return fc3.forward(kiln::activation::relu(fc2.forward(kiln::activation::relu(fc1.forward(x)))));
  }
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using B = kiln::Cpu;
  const std::string path = argc > 1 ? argv[1] : "/tmp/aot_bench_mlp.kiln";
  kiln::manual_seed(1);
  B::Device device;
  Mlp<B> model{kiln::nn::LinearConfig(784, 512).init<B>(device),
               kiln::nn::LinearConfig(512, 256).init<B>(device),
               kiln::nn::LinearConfig(256, 10).init<B>(device)};
  auto example = kiln::Tensor<B, 2>::zeros({1, 784}, device);
  kiln::TracedGraph traced = kiln::trace(model, example);
  kiln::aot::CompileOptions options;
  options.name = "mlp";
  options.weights = traced.weights;
  if (absl::Status s = kiln::aot::CompileToFile(traced.graph, options, path); !s.ok()) {
    std::fprintf(stderr, "aot_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<float> x(784), y(10);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) / 13.0f;
  const void* inputs[] = {x.data()};
  void* outputs[] = {y.data()};

  std::vector<double> load_first;
  std::unique_ptr<kiln::runtime::blob::Model> blob;
  for (int i = 0; i < 20; ++i) {
    blob.reset();
    const auto start = std::chrono::steady_clock::now();
    auto loaded = kiln::runtime::blob::Model::LoadFile(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "aot_bench: %s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    blob = *std::move(loaded);
    if (absl::Status s = blob->Run(inputs, outputs); !s.ok()) return 1;
    load_first.push_back(Seconds(start));
  }

  // The JIT's compiled graph of the same traced graph, weights bound as constants like the
  // blob's, so both run the same launch plan.
  kiln::ir::Graph bound = traced.graph;
  for (const auto& [name, value] : traced.weights) {
    kiln::ir::Node& node = bound.mutable_node(bound.FindParameter(name));
    node.op = kiln::ir::Op::kConstant;
    node.attrs = kiln::ir::Attrs{};
    node.attrs.literal = value;
  }
  auto compiled = kiln::codegen::cpu::CompileGraph(bound);
  if (!compiled.ok()) return 1;
  auto arg = std::make_shared<kiln::ir::TensorData>(
      kiln::ir::TensorData::FromVector(kiln::ir::DType::kF32, {1, 784}, x));
  std::vector<std::shared_ptr<const kiln::ir::TensorData>> args = {arg};

  std::vector<double> blob_runs, jit_runs;
  for (int round = 0; round < 4; ++round) {  // interleaved, so drift hits both alike
    for (int i = 0; i < 500; ++i) {
      auto start = std::chrono::steady_clock::now();
      if (!blob->Run(inputs, outputs).ok()) return 1;
      blob_runs.push_back(Seconds(start));
    }
    for (int i = 0; i < 500; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto out = kiln::codegen::cpu::RunCompiledGraph(**compiled, args);
      if (!out.ok()) return 1;
      jit_runs.push_back(Seconds(start));
    }
  }
  std::printf("blob %s\n", path.c_str());
  std::printf("load + first run      median %8.3f ms  (min %.3f, target <= 5 ms)\n",
              Median(load_first) * 1e3,
              *std::min_element(load_first.begin(), load_first.end()) * 1e3);
  std::printf("batch-1 run, blob     median %8.2f us\n", Median(blob_runs) * 1e6);
  std::printf("batch-1 run, JIT      median %8.2f us  (RunCompiledGraph, same launch plan)\n",
              Median(jit_runs) * 1e6);
  return 0;
}
